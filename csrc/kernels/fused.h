/* The fused elementwise kernel: a short program of float32 elementwise
 * instructions run block by block over the output, so a chain of
 * elementwise ops reads its inputs and writes its result once. */
#ifndef PR_K_FUSED_H
#define PR_K_FUSED_H

#include "kernels.h"

/* The instructions (PR_FI_NONE: not one; a registry op's `fuse` field says
 * which it is).  PR_FI_UNARY: pr_unary_apply(pad, a) (elementwise.h; `pad`
 * holds the kind, the op's `fuse_arg`). */
enum { PR_FI_NONE, PR_FI_ADD, PR_FI_SUB, PR_FI_MUL, PR_FI_DIV, PR_FI_NEG, PR_FI_SCALE, PR_FI_RELU,
       PR_FI_RELU_BWD, PR_FI_UNARY };
/* How an input is read: every element, one value, or along the last dim. */
enum { PR_FM_FULL, PR_FM_SCALAR, PR_FM_CHANNEL };

#define PR_FUSED_MAX_INSTR 24
#define PR_FUSED_MAX_IN 8

/* Registers 0..n_in-1 hold the inputs; instruction i writes register
 * PR_FUSED_MAX_IN + i; the last instruction's register is the output. */
typedef struct {
    uint8_t code, a, b, pad;
    float imm; /* PR_FI_SCALE's factor */
} pr_finstr;

typedef struct {
    int32_t n_instr, n_in;
    int32_t mode[PR_FUSED_MAX_IN];
    pr_finstr ins[PR_FUSED_MAX_INSTR];
} pr_fused_attrs;

/* out (n elements, last dim `channels`) = program(inputs). */
int pr_k_fused(const pr_fused_attrs *p, const float *const *in, float *out, int64_t n,
               int64_t channels);

#endif
