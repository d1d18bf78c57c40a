/* Registry entries of the nn family. */
#include "ops.h"

const pr_op *const pr_ops_nn[] = {NULL};
