/* Grouped and depthwise convolutions with AVX2 + FMA (conv_grouped_avx2.c):
 * the fast variants of conv_grouped.c's direct loops (same layouts: x NHWC,
 * w (KH, KW, C / groups, O), y NHWC; g->c is the input's C), for CPUs
 * with AVX2 and FMA (the caller checks both).  Any window, stride, padding
 * and group width; tested against the reference kernels and NumPy
 * (tests/op_table.py's grouped shapes).  The work split is fixed by the
 * shapes (stripes of images), so results do not depend on the thread
 * count. */
#ifndef PR_K_CONV_GROUPED_AVX2_H
#define PR_K_CONV_GROUPED_AVX2_H

#include "conv.h"

/* Whether the kernels take this geometry: more than one group, up to 512
 * input and output channels a group, windows of up to 64 taps a sub-pixel
 * phase of the stride (8x8 at stride 1). */
int pr_conv_grouped_avx2_supports(const pr_window *g, int64_t groups);

/* Scratch bytes of a pass (packed weights, per-thread panels, the filter
 * gradient's per-stripe partial sums), independent of the thread count. */
size_t pr_conv_grouped_avx2_scratch_bytes(const pr_window *g, int64_t groups, pr_conv_pass pass);

int pr_conv_grouped_avx2_forward(const pr_window *g, int64_t groups, const float *x,
                                 const float *w, float *y, void *scratch);
int pr_conv_grouped_avx2_backprop_input(const pr_window *g, int64_t groups, const float *dy,
                                        const float *w, float *dx, void *scratch);
int pr_conv_grouped_avx2_backprop_filter(const pr_window *g, int64_t groups, const float *x,
                                         const float *dy, float *dw, void *scratch);

#endif
