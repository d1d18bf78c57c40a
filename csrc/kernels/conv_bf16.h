/* bfloat16 convolutions and matmul with float32 sums (conv_bf16.c): the AMX
 * and AVX512_BF16 variants of conv2d, its two backprop ops and matmul,
 * built on the products of gemm_bf16.h.  Operands are float32 (rounded to
 * bfloat16 while packed) or bfloat16; results are float32.  Same layouts
 * and geometry as conv.h, and the same values to float32 summation order as
 * the reference kernels on the rounded operands. */
#ifndef PR_K_CONV_BF16_H
#define PR_K_CONV_BF16_H

#include "conv.h"
#include "gemm_bf16.h"

size_t pr_conv_bf16_scratch_bytes(const pr_window *g, pr_conv_pass pass);
/* forward: a = x, b = w -> y; backprop_input: a = dy, b = w -> dx;
 * backprop_filter: a = x, b = dy -> dw. */
int pr_conv_bf16(pr_bf16_isa isa, pr_conv_pass pass, const pr_window *g, pr_operand a,
                 pr_operand b, float *out, void *scratch);

/* c (m, n) = op(a) op(b), a (m, k) or (k, m) when ta, b (k, n) or (n, k) when tb. */
size_t pr_matmul_bf16_scratch_bytes(int64_t m, int64_t k, int64_t n);
int pr_matmul_bf16(pr_bf16_isa isa, int ta, int tb, int64_t m, int64_t k, int64_t n,
                   pr_operand a, pr_operand b, float *c, void *scratch);

#endif
