/* Registry entries of the conv family. */
#include "ops.h"

const pr_op *const pr_ops_conv[] = {NULL};
