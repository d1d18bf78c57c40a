/* Registry entries of the augment family. */
#include "ops.h"

const pr_op *const pr_ops_augment[] = {NULL};
