/* Direct NHWC convolutions with AVX-512 (conv_direct.c): the fast variants
 * of conv2d and its two backprop ops, chosen at run time when the CPU has
 * AVX-512 F (cpu.h) and the window fits (pr_conv_direct_supports).  Same
 * layouts, geometry and results (to float32 rounding) as the im2col +
 * OpenBLAS reference kernels of conv.h, which they are tested against. */
#ifndef PR_K_CONV_DIRECT_H
#define PR_K_CONV_DIRECT_H

#include "conv.h"

/* Whether the direct kernels can run this pass and geometry: windows up to
 * 7x7, strides up to 4 (forward: horizontal stride 1 or 2). */
int pr_conv_direct_fits(const pr_window *g, pr_conv_pass pass);
/* Whether the float32 direct kernels take it: pr_conv_direct_fits, except
 * 1x1 windows (a plain GEMM: the reference) but for the filter gradient of
 * a strided one.  CPU features are the caller's check. */
int pr_conv_direct_supports(const pr_window *g, pr_conv_pass pass);
/* Scratch bytes of a pass: repacked weights, per-slot padded images (and
 * per-stripe partial filter gradients), independent of the thread count. */
size_t pr_conv_direct_scratch_bytes(const pr_window *g, pr_conv_pass pass);

int pr_conv_direct_forward(const pr_window *g, const float *x, const float *w, float *y,
                           void *scratch);
int pr_conv_direct_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                                  void *scratch);
int pr_conv_direct_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                                   void *scratch);

/* The same kernels for AVX2 + FMA (conv_direct_avx2.c): 8-channel blocks in
 * ymm registers, for CPUs without AVX-512 (the caller checks AVX2 and FMA).
 * Same supports rule (pr_conv_direct_supports); their scratch adds, for the
 * filter gradient, room to repack a group of images (or pad one).
 * Independent of the thread count. */
size_t pr_conv_direct_avx2_scratch_bytes(const pr_window *g, pr_conv_pass pass);
int pr_conv_direct_avx2_forward(const pr_window *g, const float *x, const float *w, float *y,
                                void *scratch);
int pr_conv_direct_avx2_backprop_input(const pr_window *g, const float *dy, const float *w,
                                       float *dx, void *scratch);
int pr_conv_direct_avx2_backprop_filter(const pr_window *g, const float *x, const float *dy,
                                        float *dw, void *scratch);

/* 1x1 convolutions at stride 1 without padding as GEMMs over the pixels,
 * AVX2 + FMA (conv_pointwise_avx2.c; the caller checks the CPU); the
 * forward pass only below 128 input channels.  Scratch:
 * the packed filter (forward, input gradient).  Independent of the thread
 * count. */
int pr_conv_pointwise_avx2_supports(const pr_window *g, pr_conv_pass pass);
size_t pr_conv_pointwise_avx2_scratch_bytes(const pr_window *g, pr_conv_pass pass);
int pr_conv_pointwise_avx2_forward(const pr_window *g, const float *x, const float *w, float *y,
                                   void *scratch);
int pr_conv_pointwise_avx2_backprop_input(const pr_window *g, const float *dy, const float *w,
                                          float *dx, void *scratch);
int pr_conv_pointwise_avx2_backprop_filter(const pr_window *g, const float *x, const float *dy,
                                           float *dw, void *scratch);

/* bfloat16 with AVX512_BF16 (conv_direct_bf16.c): the same tiles, each FMA
 * a VDPBF16PS over a pair of channels; operands float32 (rounded to
 * bfloat16 as they are copied) or bfloat16 (conv_bf16.h's convention:
 * forward a = x, b = w; backprop_input a = dy, b = w; backprop_filter
 * a = x, b = dy), sums float32, results of `out_dtype`: float32, or for the
 * forward and input-gradient passes bfloat16 (each rounded once).  The
 * caller checks PR_BF16_CPU.  Independent of the thread count. */
int pr_conv_direct_bf16_supports(const pr_window *g, pr_conv_pass pass);
size_t pr_conv_direct_bf16_scratch_bytes(const pr_window *g, pr_conv_pass pass);
int pr_conv_direct_bf16(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b,
                        void *out, pr_dtype out_dtype, void *scratch);

#endif
