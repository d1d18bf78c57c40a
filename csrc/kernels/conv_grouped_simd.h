/* Grouped and depthwise convolutions with vector instructions
 * (conv_grouped_simd.c): the fast variants of conv_grouped.c's direct loops
 * (same layouts: x NHWC, w (KH, KW, C / groups, O), y NHWC; g->c is the
 * input's C), in two instruction sets the caller picks by the CPU probe:
 *   - PR_GROUPED_AVX2 (AVX2 + FMA): any window, stride, padding and group
 *     width, depthwise too;
 *   - PR_GROUPED_AVX512 (AVX-512F + FMA): group widths of an even number of
 *     input and output channels (every RegNet's), no depthwise;
 *   - PR_GROUPED_AVX512_BF16 (AVX-512F/BW/VL + AVX512_BF16 + FMA): the same
 *     tiles in bfloat16, a VDPBF16PS for each FMA: operands (x, dy, w)
 *     bfloat16, sums and outputs float32; group widths of a multiple of 4
 *     input and output channels; forward and input gradient only (the
 *     filter gradient returns PR_ERR_INTERNAL).
 * Tested against the reference kernels and NumPy (tests/op_table.py's
 * grouped shapes).  The work split is fixed by the shapes (stripes of
 * images), so results do not depend on the thread count. */
#ifndef PR_K_CONV_GROUPED_SIMD_H
#define PR_K_CONV_GROUPED_SIMD_H

#include "conv.h"

typedef enum { PR_GROUPED_AVX2, PR_GROUPED_AVX512, PR_GROUPED_AVX512_BF16 } pr_grouped_isa;

/* Whether the kernels of isa take this geometry: more than one group, up
 * to 512 input and output channels a group, windows of up to 64 taps a
 * sub-pixel phase of the stride (8x8 at stride 1); with AVX-512, an even
 * number of input and output channels a group; with AVX512_BF16, a multiple
 * of 4 of each. */
int pr_conv_grouped_simd_supports(pr_grouped_isa isa, const pr_window *g, int64_t groups);

/* Scratch bytes of a pass (packed weights, per-thread panels, the filter
 * gradient's per-stripe partial sums), independent of the thread count. */
size_t pr_conv_grouped_simd_scratch_bytes(const pr_window *g, int64_t groups, pr_conv_pass pass);

/* The passes; PR_ERR_INTERNAL for a geometry isa does not take.  The
 * operands x, dy, w are float32, or bfloat16 (uint16_t) for
 * PR_GROUPED_AVX512_BF16; dw is float32, y and dx float32 or (the
 * bfloat16 tiles only: y_dtype, dx_dtype PR_BF16) bfloat16, each output
 * rounded once from its float32 sum. */
int pr_conv_grouped_simd_forward(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                 const void *x, const void *w, void *y, pr_dtype y_dtype,
                                 void *scratch);
int pr_conv_grouped_simd_backprop_input(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                        const void *dy, const void *w, void *dx,
                                        pr_dtype dx_dtype, void *scratch);
int pr_conv_grouped_simd_backprop_filter(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                         const void *x, const void *dy, float *dw,
                                         void *scratch);

#endif
