/* Direct NHWC convolutions in bfloat16 with AVX512_BF16 (conv_direct.h):
 * the register tiles of conv_direct.c (conv_direct_tiles.h), each FMA a
 * VDPBF16PS.  VDPBF16PS adds to each float32 lane the two products of a pair
 * of bfloat16 values, so the reduced channels go in pairs: a unit is one
 * 32-bit lane holding channels 2i (low half) and 2i+1 (high half), zero for
 * a missing last channel of an odd count.  An input pixel's units are then
 * its NHWC channels as they lie in memory (a bfloat16 image with an even
 * channel count is read in place; float32 or odd counts are converted once
 * per image into the slot), and the weights are repacked once per call into
 * 16-channel blocks of units, the pair-interleaved layout VDPBF16PS reads
 * (Intel, "BFLOAT16 - Hardware Numerics Definition", 2018, section 2.2; the
 * layout oneDNN's AVX512_CORE_BF16 convolutions use).  The sums are float32,
 * the output float32, each product of two rounded values exact: the
 * results are those of the float32 kernels on the rounded operands up to
 * the order of the float32 sums.
 *
 * Forward:        units along the input channels (C);
 * backprop_input: units along the output channels (O), the phases of
 *                 conv_direct.c, so no product meets a zero tap.
 * The filter gradient sums over pixels: its units are pairs of
 * neighbouring output pixels along a row (see "filter gradient" below). */
#include "conv_direct.h"
#include "conv_direct_geom.h"

#include <string.h>

#include "bf16.h"
#include "gemm_bf16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,fma")
#endif

#define DT uint32_t
#define BCAST(p) _mm512_castsi512_ps(_mm512_set1_epi32((int)*(p)))
#define MAC(acc, x, w) _mm512_dpbf16_ps(acc, (__m512bh)(x), (__m512bh)(w))
/* an image converted into units: every pixel's channels, paired */
#define IMAGE_UNITS(gu, pass) \
    round16((pass) == PR_CONV_FORWARD ? (gu)->h * (gu)->w * (gu)->c : (gu)->ho * (gu)->wo * (gu)->o)

/* Image n (pixels x ch) of src as units: a bfloat16 image of an even
 * channel count in place, else rounded to bfloat16 into buf (a zero high
 * half after an odd count's last channel). */
static const uint32_t *image_units(pr_operand src, int64_t n, int64_t pixels, int64_t ch,
                                   uint32_t *buf) {
    const size_t es = pr_dtype_size(src.dtype);
    const char *s = (const char *)src.data + (size_t)(n * pixels * ch) * es;
    if (ch % 2 == 0) {
        if (src.dtype == PR_BF16) return (const uint32_t *)s;
        pr_bf16_convert_run(s, src.dtype, pixels * ch, (uint16_t *)buf);
        return buf;
    }
    const int64_t cu = (ch + 1) / 2;
    for (int64_t p = 0; p < pixels; p++) {
        uint16_t *d = (uint16_t *)(buf + p * cu);
        pr_bf16_convert_run(s + (size_t)(p * ch) * es, src.dtype, ch, d);
        d[ch] = 0;
    }
    return buf;
}

#include "conv_direct_tiles.h"

/* The window in units: the reduced channels of `pass` counted in pairs. */
static pr_window unit_window(const pr_window *g, pr_conv_pass pass) {
    pr_window gu = *g;
    if (pass == PR_CONV_FORWARD) gu.c = (g->c + 1) / 2;
    if (pass == PR_CONV_BACKPROP_INPUT) gu.o = (g->o + 1) / 2;
    return gu;
}

static uint16_t bf16_at(pr_operand v, int64_t i) {
    return v.dtype == PR_BF16 ? ((const uint16_t *)v.data)[i]
                              : pr_bf16_from_f32(((const float *)v.data)[i]);
}

/* w (KH, KW, C, O) -> [blocks of 16][KH*KW][units of the other channels][16],
 * zero-padded: conv_direct.c's layout with the reduced channels paired
 * (by_c = 0: blocks of output channels, units of input channels; by_c = 1,
 * backprop_input: blocks of input channels, units of output channels). */
static void pack_weights(const pr_window *g, pr_operand w, int by_c, uint32_t *wp) {
    const int64_t taps = g->kh * g->kw, C = g->c, O = g->o;
    const int64_t nb = by_c ? C : O, ni = by_c ? O : C, nu = (ni + 1) / 2;
    for (int64_t blk = 0; blk < blocks16(nb); blk++)
        for (int64_t t = 0; t < taps; t++)
            for (int64_t u = 0; u < nu; u++) {
                uint32_t *dst = wp + ((blk * taps + t) * nu + u) * 16;
                for (int64_t j = 0; j < 16; j++) {
                    int64_t b = blk * 16 + j;
                    uint32_t pair = 0;
                    for (int64_t e = 0; e < 2; e++) {
                        int64_t i = 2 * u + e, c = by_c ? b : i, o = by_c ? i : b;
                        if (b < nb && i < ni) pair |= (uint32_t)bf16_at(w, (t * C + c) * O + o) << (16 * e);
                    }
                    dst[j] = pair;
                }
            }
}

int pr_conv_direct_bf16(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b,
                        float *out, void *scratch) {
    const pr_window gu = unit_window(g, pass);
    uint32_t *wp = scratch, *pads = wp + round16(packed_floats(&gu, pass));
    switch (pass) {
    case PR_CONV_FORWARD:
        pack_weights(g, b, 0, wp);
        direct_forward(&gu, a, g->c, wp, out, pads);
        return PR_OK;
    case PR_CONV_BACKPROP_INPUT:
        pack_weights(g, b, 1, wp);
        direct_backprop_input(&gu, a, g->o, wp, out, pads);
        return PR_OK;
    case PR_CONV_BACKPROP_FILTER: break;
    }
    return PR_ERR_INTERNAL;
}

size_t pr_conv_direct_bf16_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    const pr_window gu = unit_window(g, pass);
    return direct_scratch_bytes(&gu, pass);
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else /* not x86-64: never called (the CPU probe finds no AVX512_BF16) */

int pr_conv_direct_bf16(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b,
                        float *out, void *scratch) {
    return PR_ERR_INTERNAL;
}
size_t pr_conv_direct_bf16_scratch_bytes(const pr_window *g, pr_conv_pass pass) { return 0; }

#endif

int pr_conv_direct_bf16_supports(const pr_window *g, pr_conv_pass pass) {
    return pass != PR_CONV_BACKPROP_FILTER && pr_conv_direct_supports(g, pass);
}
