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
 * each product of two rounded values exact: the results are those of the
 * float32 kernels on the rounded operands up to the order of the float32
 * sums; a bfloat16 output is rounded once, row by row, from a float32 row
 * buffer (conv_direct_tiles.h).
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
/* a row of a bfloat16 output, in float32 */
#define ROW_FLOATS(gu, pass) \
    round16((pass) == PR_CONV_FORWARD ? (gu)->wo * (gu)->o : (gu)->w * (gu)->c)

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

/* ---- filter gradient -------------------------------------------------------
 *
 * dw[kh, kw, c, o] = sum over output pixels of x[oh*sh + kh - ph, ow*sw + kw - pw, c]
 * * dy[oh, ow, o], the pixels of a row taken in pairs (ow = 2m, 2m + 1): one
 * VDPBF16PS multiplies the pair's two x values (one broadcast unit) by their
 * dy values for 16 output channels (one unit vector).  Each image is first
 * copied into the stripe's buffers:
 *   dyp  [HO][M pairs][OP = 16 * blocks16(O)] units: dy of pixels 2m (low
 *        half) and 2m + 1 (high half), zeros past WO and O;
 *   xp   [H][C][SW phases][PL] bfloat16, channel-major and split by column
 *        phase: padded column j*SW + r (image column j*SW + r - pw) at
 *        phase r, place j, zeros outside the image, so the x values of a
 *        pair at tap kw are neighbours (phase kw % SW, places 2m + kw / SW
 *        and the next).
 * A tile is CT input channels x NB blocks of 16 output channels (CT * NB
 * accumulators, at most MAX_TILE; conv_direct_tiles.h) of one
 * tap, summed over the output rows whose input row is inside the image.
 * An odd WO's last pair has no second pixel: its x unit keeps only the low
 * half, so no x value meets the pair's zero (an Inf of x would make a NaN). */
typedef struct {
    int64_t M, OP, PL, sw;
} fgeom;

static fgeom filter_geom(const pr_window *g) {
    fgeom f = {(g->wo + 1) / 2, blocks16(g->o) * 16, 0, g->sw};
    /* places up to 2M + (KW - 1) / SW, plus the broadcast's second half */
    f.PL = 2 * f.M + (g->kw - 1) / g->sw + 2;
    return f;
}

static int64_t xp_elems(const pr_window *g, fgeom f) { return g->h * g->c * f.sw * f.PL; }

/* A stripe's floats: its partial dw (taps, C, O), then xp and dyp. */
static int64_t stripe_floats(const pr_window *g) {
    fgeom f = filter_geom(g);
    return round16(g->kh * g->kw * g->c * g->o) + round16((xp_elems(g, f) + 1) / 2) +
           round16(g->ho * f.M * f.OP);
}

/* Up to 16 values of a row (`mask` of them, the others zero) as float32
 * lanes holding bfloat16 values (float32 data rounded). */
static __m512 load_rounded(pr_operand v, const char *p, __mmask16 mask) {
    if (v.dtype == PR_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
    return pr_bf16_round16_ps(_mm512_maskz_loadu_ps(mask, (const float *)p));
}

static __mmask16 first_lanes(int64_t k) { return k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << k) - 1); }

/* Stripes (partial sums) of the filter gradient: as many as fit
 * STRIPE_BYTES of partial gradients, at least 4 and at most the slots of
 * conv_direct_geom.h (16).  Each stripe's partial is zeroed and the partials
 * summed in order at the end, memory-bound work that grows with stripes x
 * the gradient's size: 16 stripes of a 64->64 3x3 gradient (2.4 MB, past
 * L2) took longer than the 3x-smaller products of 8x8 images.  From the
 * shapes only, so results do not depend on the thread count. */
#define STRIPE_BYTES (1 << 20)
static int64_t count_stripes(const pr_window *g) {
    int64_t slots = count_slots(g->n, stripe_floats(g));
    int64_t fit = STRIPE_BYTES / (4 * g->kh * g->kw * g->c * g->o + 1);
    int64_t s = fit < 4 ? 4 : fit;
    return slots < s ? slots : s;
}

/* Image n of x into xp (zeros around it written by `fresh` once): blocks of
 * 16 pixels x 16 channels transposed in registers (masked at the edges),
 * each channel's 16 columns stored to its phase rows; strides above 2 one
 * value at a time. */
static void filter_copy_x(const pr_window *g, fgeom f, pr_operand x, int64_t n, uint16_t *xp,
                          int fresh) {
    const int64_t C = g->c, W = g->w, SW = f.sw, PL = f.PL;
    const size_t es = pr_dtype_size(x.dtype);
    if (fresh) memset(xp, 0, sizeof(uint16_t) * (size_t)xp_elems(g, f));
    for (int64_t ih = 0; ih < g->h; ih++) {
        const char *row = (const char *)x.data + (size_t)((n * g->h + ih) * W * C) * es;
        uint16_t *d = xp + ih * C * SW * PL;
        if (SW > 2) {
            for (int64_t q = 0; q < W; q++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t pc = q + g->pw;
                    uint16_t t;
                    pr_bf16_convert_run(row + (size_t)(q * C + c) * es, x.dtype, 1, &t);
                    d[(c * SW + pc % SW) * PL + pc / SW] = t;
                }
            continue;
        }
        for (int64_t c0 = 0; c0 < C; c0 += 16) {
            const int64_t cn = C - c0 < 16 ? C - c0 : 16;
            for (int64_t q0 = 0; q0 < W; q0 += 16) {
                const int64_t qn = W - q0 < 16 ? W - q0 : 16;
                __m512 v[16];
                for (int i = 0; i < 16; i++)
                    v[i] = i < qn ? load_rounded(x, row + (size_t)((q0 + i) * C + c0) * es,
                                                 first_lanes(cn))
                                  : _mm512_setzero_ps();
                transpose16(v);
                const int64_t pc = q0 + g->pw; /* padded column of q0 */
                for (int64_t c = 0; c < cn; c++) {
                    /* columns q0 .. q0+qn-1 of channel c0 + c, as bfloat16 */
                    __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v[c]), 16));
                    uint16_t *dc = d + (c0 + c) * SW * PL;
                    if (SW == 1) {
                        _mm256_mask_storeu_epi16(dc + pc, first_lanes(qn), h);
                        continue;
                    }
                    /* stride 2: even padded columns to phase pc % 2, odd to the other */
                    __m512i w32 = _mm512_cvtepu16_epi32(h);
                    __m256i ev = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(0x5555, w32));
                    __m256i od = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(0xAAAA, w32));
                    int r = (int)(pc & 1);
                    _mm_mask_storeu_epi16(dc + r * PL + pc / 2, (__mmask8)first_lanes((qn + 1) / 2),
                                          _mm256_castsi256_si128(ev));
                    _mm_mask_storeu_epi16(dc + (1 - r) * PL + (pc + 1) / 2,
                                          (__mmask8)first_lanes(qn / 2), _mm256_castsi256_si128(od));
                }
            }
        }
    }
}

/* Image n of dy into dyp (pairs past WO and channels past O stay zero:
 * written by `fresh` once): each pair's two pixels interleaved, 16
 * channels at a time. */
static void filter_copy_dy(const pr_window *g, fgeom f, pr_operand dy, int64_t n, uint32_t *dyp,
                           int fresh) {
    const int64_t O = g->o, WO = g->wo;
    const size_t es = pr_dtype_size(dy.dtype);
    if (fresh) memset(dyp, 0, sizeof(uint32_t) * (size_t)(g->ho * f.M * f.OP));
    for (int64_t oh = 0; oh < g->ho; oh++)
        for (int64_t m = 0; m < f.M; m++) {
            const char *p0 = (const char *)dy.data + (size_t)(((n * g->ho + oh) * WO + 2 * m) * O) * es;
            uint32_t *d = dyp + (oh * f.M + m) * f.OP;
            for (int64_t o0 = 0; o0 < O; o0 += 16) {
                const __mmask16 k = first_lanes(O - o0);
                __m512i lo = _mm512_srli_epi32(_mm512_castps_si512(load_rounded(dy, p0 + o0 * es, k)), 16);
                __m512i hi = 2 * m + 1 < WO ? _mm512_castps_si512(load_rounded(dy, p0 + (O + o0) * es, k))
                                            : _mm512_setzero_si512();
                _mm512_storeu_si512(d + o0, _mm512_or_si512(lo, _mm512_and_si512(hi, _mm512_set1_epi32((int)0xFFFF0000u))));
            }
        }
}

typedef struct {
    const uint16_t *x;  /* tap's x at the first row, first channel, place of pair 0 */
    const uint32_t *dy; /* dyp at the first row, block 0 */
    int64_t xrs, xcs, drs, dps, rows, pairs; /* pairs: whole pairs (an odd WO's last apart) */
    int odd;
    int64_t dwc; /* dw: floats between input channels */
    float *dw;
    __mmask16 mask;
} fbtile_args;

ALWAYS_INLINE void fbtile_pair(__m512 acc[MAX_NB][MAX_TILE], const uint16_t *xp, int64_t xcs,
                               const uint32_t *dp, const int CT, const int NB, const int half) {
    __m512 dv[MAX_NB];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) dv[b] = _mm512_load_ps((const float *)(dp + 16 * b));
#pragma GCC unroll 24
    for (int c = 0; c < CT; c++) {
        uint32_t u;
        memcpy(&u, xp + c * xcs, 4);
        if (half) u &= 0xFFFFu;
        __m512 xv = _mm512_castsi512_ps(_mm512_set1_epi32((int)u));
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) acc[b][c] = MAC(acc[b][c], xv, dv[b]);
    }
}

ALWAYS_INLINE void fbtile_body(const fbtile_args *A, const int CT, const int NB) {
    __m512 acc[MAX_NB][MAX_TILE];
    load_tile(acc, A->dw, A->dwc, A->mask, CT, NB); /* rows: input channels */
    for (int64_t r = 0; r < A->rows; r++) {
        const uint16_t *xr = A->x + r * A->xrs;
        const uint32_t *dr = A->dy + r * A->drs;
        int64_t m = 0;
        for (; m < A->pairs; m++, dr += A->dps) fbtile_pair(acc, xr + 2 * m, A->xcs, dr, CT, NB, 0);
        if (A->odd) fbtile_pair(acc, xr + 2 * m, A->xcs, dr, CT, NB, 1);
    }
    store_tile(acc, A->dw, A->dwc, A->mask, CT, NB);
}

#define FBTILE(CT, NB) \
    static void fbtile_##CT##_##NB(const fbtile_args *A) { fbtile_body(A, CT, NB); }
typedef void (*fbtile_fn)(const fbtile_args *);
FBTILE(1, 1) FBTILE(2, 1) FBTILE(3, 1) FBTILE(4, 1) FBTILE(5, 1) FBTILE(6, 1) FBTILE(7, 1) FBTILE(8, 1) FBTILE(9, 1) FBTILE(10, 1) FBTILE(11, 1) FBTILE(12, 1) FBTILE(13, 1) FBTILE(14, 1) FBTILE(15, 1) FBTILE(16, 1) FBTILE(17, 1) FBTILE(18, 1) FBTILE(19, 1) FBTILE(20, 1) FBTILE(21, 1) FBTILE(22, 1) FBTILE(23, 1) FBTILE(24, 1)
FBTILE(1, 2) FBTILE(2, 2) FBTILE(3, 2) FBTILE(4, 2) FBTILE(5, 2) FBTILE(6, 2) FBTILE(7, 2) FBTILE(8, 2) FBTILE(9, 2) FBTILE(10, 2) FBTILE(11, 2) FBTILE(12, 2)
FBTILE(1, 3) FBTILE(2, 3) FBTILE(3, 3) FBTILE(4, 3) FBTILE(5, 3) FBTILE(6, 3) FBTILE(7, 3) FBTILE(8, 3)
FBTILE(1, 4) FBTILE(2, 4) FBTILE(3, 4) FBTILE(4, 4) FBTILE(5, 4) FBTILE(6, 4)
/* fbtiles[NB - 1][CT - 1] */
static const fbtile_fn fbtiles[MAX_NB][MAX_TILE] = {
    {fbtile_1_1, fbtile_2_1, fbtile_3_1, fbtile_4_1, fbtile_5_1, fbtile_6_1, fbtile_7_1, fbtile_8_1, fbtile_9_1, fbtile_10_1, fbtile_11_1, fbtile_12_1, fbtile_13_1, fbtile_14_1, fbtile_15_1, fbtile_16_1, fbtile_17_1, fbtile_18_1, fbtile_19_1, fbtile_20_1, fbtile_21_1, fbtile_22_1, fbtile_23_1, fbtile_24_1},
    {fbtile_1_2, fbtile_2_2, fbtile_3_2, fbtile_4_2, fbtile_5_2, fbtile_6_2, fbtile_7_2, fbtile_8_2, fbtile_9_2, fbtile_10_2, fbtile_11_2, fbtile_12_2},
    {fbtile_1_3, fbtile_2_3, fbtile_3_3, fbtile_4_3, fbtile_5_3, fbtile_6_3, fbtile_7_3, fbtile_8_3},
    {fbtile_1_4, fbtile_2_4, fbtile_3_4, fbtile_4_4, fbtile_5_4, fbtile_6_4},
};

/* One image's contribution to the partial gradient dw (taps, C, O). */
static void filter_image(const pr_window *g, fgeom f, const uint16_t *xp, const uint32_t *dyp,
                         float *dw) {
    const int64_t C = g->c, O = g->o, nob = blocks16(O);
    for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t r0, r1; /* output rows whose tap row kh is inside x */
        tap_range(g->h, g->ho, g->sh, g->ph, kh, &r0, &r1);
        if (r1 == r0) continue;
        for (int64_t kw = 0; kw < g->kw; kw++) {
            const uint16_t *x0 = xp + (r0 * g->sh - g->ph + kh) * C * f.sw * f.PL +
                                 (kw % f.sw) * f.PL + kw / f.sw;
            float *dwt = dw + (kh * g->kw + kw) * C * O;
            for (int64_t ob = 0; ob < nob; ob += MAX_NB) {
                int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
                int ct = tile_width(nb, C);
                for (int64_t c0 = 0; c0 < C; c0 += ct) {
                    int n = (int)(C - c0 < ct ? C - c0 : ct);
                    fbtile_args A = {.x = x0 + c0 * f.sw * f.PL, .dy = dyp + r0 * f.M * f.OP + ob * 16,
                                     .xrs = g->sh * C * f.sw * f.PL, .xcs = f.sw * f.PL,
                                     .drs = f.M * f.OP, .dps = f.OP, .rows = r1 - r0,
                                     .pairs = g->wo / 2, .odd = (int)(g->wo % 2), .dwc = O,
                                     .dw = dwt + c0 * O + ob * 16,
                                     .mask = ob + nb == nob ? tail_mask(O) : (__mmask16)0xFFFF};
                    fbtiles[nb - 1][n - 1](&A);
                }
            }
        }
    }
}

/* Images dealt round-robin to stripes (from the shapes only), each summed
 * into its own partial, the partials added in stripe order: results do not
 * depend on the thread count. */
static void direct_backprop_filter(const pr_window *g, pr_operand x, pr_operand dy, float *dw,
                                   float *parts) {
    const int64_t K = g->kh * g->kw * g->c * g->o, slot = stripe_floats(g);
    const int64_t stripes = count_stripes(g);
    const fgeom f = filter_geom(g);
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)K);
        return;
    }
#pragma omp parallel num_threads(threads_for(stripes))
    {
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            float *part = parts + s * slot;
            uint16_t *xp = (uint16_t *)(part + round16(K));
            uint32_t *dyp = (uint32_t *)(part + round16(K) + round16((xp_elems(g, f) + 1) / 2));
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t n = s; n < g->n; n += stripes) {
                filter_copy_x(g, f, x, n, xp, n == s);
                filter_copy_dy(g, f, dy, n, dyp, n == s);
                filter_image(g, f, xp, dyp, part);
            }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K; i++) {
            float sum = parts[i];
            for (int64_t s = 1; s < stripes; s++) sum += parts[s * slot + i];
            dw[i] = sum;
        }
    }
}

int pr_conv_direct_bf16(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b,
                        void *out, pr_dtype out_dtype, void *scratch) {
    const pr_window gu = unit_window(g, pass);
    uint32_t *wp = scratch, *pads = wp + round16(packed_floats(&gu, pass));
    switch (pass) {
    case PR_CONV_FORWARD:
        pack_weights(g, b, 0, wp);
        direct_forward(&gu, a, g->c, wp, (out_rows){out, out_dtype}, pads);
        return PR_OK;
    case PR_CONV_BACKPROP_INPUT:
        pack_weights(g, b, 1, wp);
        direct_backprop_input(&gu, a, g->o, wp, (out_rows){out, out_dtype}, pads);
        return PR_OK;
    case PR_CONV_BACKPROP_FILTER:
        if (out_dtype != PR_F32) break;
        direct_backprop_filter(g, a, b, out, (float *)scratch);
        return PR_OK;
    }
    return PR_ERR_INTERNAL;
}

size_t pr_conv_direct_bf16_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    if (pass == PR_CONV_BACKPROP_FILTER) {
        int64_t slot = stripe_floats(g);
        return sizeof(float) * (size_t)(count_stripes(g) * slot);
    }
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
                        void *out, pr_dtype out_dtype, void *scratch) {
    return PR_ERR_INTERNAL;
}
size_t pr_conv_direct_bf16_scratch_bytes(const pr_window *g, pr_conv_pass pass) { return 0; }

#endif

/* conv_direct.c's rule, and 1x1 windows in every pass: the gathered rows of
 * avx512_bf16 took 2-5x as long on ResNet's 1x1 stride-2 projections. */
int pr_conv_direct_bf16_supports(const pr_window *g, pr_conv_pass pass) {
    return pr_conv_direct_supports(g, pass) ||
           (g->kh == 1 && g->kw == 1 && pr_conv_direct_supports(g, PR_CONV_BACKPROP_FILTER) &&
            (pass != PR_CONV_FORWARD || g->sw <= 2));
}
