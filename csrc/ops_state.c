/* Registry entries of the state family. */
#include "ops.h"

const pr_op *const pr_ops_state[] = {NULL};
