/* Direct bfloat16 convolutions on AMX tiles (conv_amx.c): the "amx_direct_bf16"
 * variants of conv2d and of its input and filter gradients.  No im2col: the input is copied once into a zero-padded
 * bfloat16 image and AMX tile loads read each tap's rows straight from it
 * (the tile's row stride steps along the output row), the "implicit GEMM"
 * of oneDNN's and LIBXSMM's AMX convolutions.  Operands are float32
 * (rounded to bfloat16 while copied) or bfloat16; results float32 (or
 * bfloat16 for the forward and input-gradient passes, rounded once), within
 * the same float32 summation bound as the other bfloat16 kernels
 * (conv_bf16.h).  Callers check PR_BF16_AMX_CPU first. */
#ifndef PR_K_CONV_AMX_H
#define PR_K_CONV_AMX_H

#include "conv_bf16.h"

/* Whether amx_direct_bf16 runs this pass and geometry: any window, stride and
 * padding with a non-empty output (the input gradient, a forward
 * convolution of the padded output gradient with the flipped filter,
 * needs padding below the window size: always so for "same"). */
int pr_conv_amx_supports(const pr_window *g, pr_conv_pass pass);
/* Scratch bytes: the padded bfloat16 image, packed weights, and for the
 * filter gradient the per-stripe buffers and partial sums (independent of
 * the thread count, so are the results). */
size_t pr_conv_amx_scratch_bytes(const pr_window *g, pr_conv_pass pass);
/* forward: a = x, b = w -> y; backprop_input: a = dy, b = w -> dx;
 * backprop_filter: a = x, b = dy -> dw (conv_bf16.h's convention).  out is
 * float32, or bfloat16 for forward and backprop_input. */
int pr_conv_amx(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b,
                pr_operand out, void *scratch);

#endif
