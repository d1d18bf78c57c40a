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

/* `count` (<= 32) bfloat16 values of a bfloat16 or float32 run at s (the
 * float32 ones rounded as pr_bf16_from_f32), zeros past them. */
static __m512i load_bf16_run(const char *s, pr_dtype dt, int64_t count) {
    const __mmask32 m = count >= 32 ? ~0u : (1u << count) - 1;
    if (dt == PR_BF16) return _mm512_maskz_loadu_epi16(m, s);
    const __m512 lo = _mm512_maskz_loadu_ps((__mmask16)m, s),
                 hi = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), s + 64);
    return _mm512_inserti64x4(_mm512_castsi256_si512(pr_bf16_round16(lo)), pr_bf16_round16(hi),
                              1);
}

/* An odd channel count's pixels as units: each pixel's ch values, then a
 * zero (ch + 1 halves).  Where ch + 1 divides 32 (1, 3, 7, 15 or 31
 * channels: images' 3) one permutation places 32 / (ch + 1) pixels at a
 * time; the others go value by value (a call per pixel had made the 3-channel
 * stem's forward spend most of its time here). */
static void odd_units(const char *s, pr_dtype dt, int64_t pixels, int64_t ch, uint16_t *d) {
    const int64_t h = ch + 1, es = (int64_t)pr_dtype_size(dt);
    int64_t p = 0;
    if (32 % h == 0) {
        const int64_t per = 32 / h;
        uint16_t idx[32];
        __mmask32 keep = 0;
        for (int j = 0; j < 32; j++) {
            idx[j] = (uint16_t)((j / h) * ch + j % h);
            if (j % h != ch) keep |= 1u << j;
        }
        const __m512i ix = _mm512_loadu_si512(idx);
        for (; p + per <= pixels; p += per)
            _mm512_storeu_si512(d + p * h, _mm512_maskz_permutexvar_epi16(
                                               keep, ix, load_bf16_run(s + p * ch * es, dt,
                                                                       per * ch)));
    }
    for (; p < pixels; p++) {
        pr_bf16_convert_run(s + p * ch * es, dt, ch, d + p * h);
        d[p * h + ch] = 0;
    }
}

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
    odd_units(s, src.dtype, pixels, ch, (uint16_t *)buf);
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
                        if (b < nb && i < ni)
                            pair |= (uint32_t)bf16_at(w, (t * C + c) * O + o) << (16 * e);
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
 *   xu   [H][SW phases][2 alignments][NP pairs][C] units: the x values of
 *        two columns of one phase (image columns j*SW + r - pw and the next
 *        of its phase, j = 2P + alignment), channel by channel, zeros outside
 *        the image.  At tap kw the pair of pixels (2m, 2m + 1) reads phase
 *        kw % SW, places 2m + kw / SW and the next: alignment (kw / SW) % 2,
 *        pair m + kw / SW / 2, so a tile's broadcasts sit at constant
 *        offsets (c units) from one pointer.
 * A tile is CT input channels x NB blocks of 16 output channels (CT * NB
 * accumulators, at most MAX_TILE; conv_direct_tiles.h) of one
 * tap, summed over the output rows whose input row is inside the image.
 * An odd WO's last pair has no second pixel: its x unit keeps only the low
 * half, so no x value meets the pair's zero (an Inf of x would make a NaN). */
typedef struct {
    int64_t M, OP, NP, sw;
} fgeom;

static fgeom filter_geom(const pr_window *g) {
    fgeom f = {(g->wo + 1) / 2, blocks16(g->o) * 16, 0, g->sw};
    f.NP = f.M + (g->kw - 1) / g->sw / 2 + 1; /* pairs m + kw / SW / 2 for m < M */
    return f;
}

static int64_t xu_units(const pr_window *g, fgeom f) { return g->h * f.sw * 2 * f.NP * g->c; }
static int64_t dyp_units(const pr_window *g, fgeom f) { return g->ho * f.M * f.OP; }

/* A stripe's floats: its partial dw (taps, C, O), then a group's xu and dyp. */
static int64_t stripe_floats(const pr_window *g) {
    fgeom f = filter_geom(g);
    return round16(g->kh * g->kw * g->c * g->o) +
           filter_group_images(g) * (round16(xu_units(g, f)) + round16(dyp_units(g, f)));
}

/* Up to 16 values of a row (`mask` of them, the others zero) as float32
 * lanes holding bfloat16 values (float32 data rounded). */
static __m512 load_rounded(pr_operand v, const char *p, __mmask16 mask) {
    if (v.dtype == PR_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
    return pr_bf16_round16_ps(_mm512_maskz_loadu_ps(mask, (const float *)p));
}

static __mmask16 first_lanes(int64_t k) {
    return k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << k) - 1);
}

/* Stripes (partial sums) of the filter gradient: as many as fit
 * STRIPE_BYTES of partial gradients, at least 4 and at most the slots of
 * conv_direct_geom.h (16).  Each stripe's partial is zeroed and the partials
 * summed in order at the end, memory-bound work that grows with stripes x
 * the gradient's size: 16 stripes of a 64->64 3x3 gradient (2.4 MB, past
 * L2) took longer than the 3x-smaller products of 8x8 images.  From the
 * shapes only, so results do not depend on the thread count. */
#define STRIPE_BYTES (1 << 20)
static int64_t count_stripes(const pr_window *g) {
    const int64_t groups = (g->n + filter_group_images(g) - 1) / filter_group_images(g);
    int64_t slots = count_slots(groups, stripe_floats(g));
    int64_t fit = STRIPE_BYTES / (4 * g->kh * g->kw * g->c * g->o + 1);
    int64_t s = fit < 4 ? 4 : fit;
    return slots < s ? slots : s;
}

/* Two NHWC pixel rows of ch values as units (p0's low, p1's high; NULL: zeros),
 * 16 channels at a time. */
static void pair_units(pr_operand v, const char *p0, const char *p1, int64_t ch, uint32_t *d) {
    const size_t es = pr_dtype_size(v.dtype);
    for (int64_t c0 = 0; c0 < ch; c0 += 16) {
        const __mmask16 k = first_lanes(ch - c0);
        __m512i lo =
            p0 ? _mm512_srli_epi32(_mm512_castps_si512(load_rounded(v, p0 + c0 * es, k)), 16)
               : _mm512_setzero_si512();
        __m512i hi = p1 ? _mm512_and_si512(_mm512_castps_si512(load_rounded(v, p1 + c0 * es, k)),
                                           _mm512_set1_epi32((int)0xFFFF0000u))
                        : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(d + c0, k, _mm512_or_si512(lo, hi));
    }
}

/* Two bfloat16 pixel rows of ch values (both inside the image) as units,
 * 16 channels at a time: the two halves side by side in one register, one
 * word permutation interleaves them (pair_units's values, a quarter of its
 * instructions: the copies took half the 16-channel filter gradient). */
ALWAYS_INLINE void pair_units_bf16(const uint16_t *p0, const uint16_t *p1, int64_t ch,
                                   uint32_t *d) {
    static const uint16_t order[32] = { /* word 2i: p0's channel i; 2i + 1: p1's */
        0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i idx = _mm512_loadu_si512(order);
    int64_t c0 = 0;
    for (; c0 + 16 <= ch; c0 += 16) {
        __m512i both = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p0 + c0))),
            _mm256_loadu_si256((const __m256i *)(p1 + c0)), 1);
        _mm512_storeu_si512(d + c0, _mm512_permutexvar_epi16(idx, both));
    }
    if (c0 < ch) {
        const __mmask16 k = first_lanes(ch - c0);
        __m512i both = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(k, p0 + c0)),
            _mm256_maskz_loadu_epi16(k, p1 + c0), 1);
        _mm512_mask_storeu_epi32(d + c0, k, _mm512_permutexvar_epi16(idx, both));
    }
}

/* Image n of x into xu (zeros outside the image written by `fresh` once). */
static void filter_copy_x(const pr_window *g, fgeom f, pr_operand x, int64_t n, uint32_t *xu,
                          int fresh) {
    const int64_t C = g->c, W = g->w, SW = f.sw, NP = f.NP;
    const size_t es = pr_dtype_size(x.dtype);
    if (fresh) memset(xu, 0, sizeof(uint32_t) * (size_t)xu_units(g, f));
    int read[MAX_STRIDE][2] = {{0}}; /* the (phase, alignment) rows some tap reads */
    for (int64_t kw = 0; kw < g->kw; kw++) read[kw % SW][kw / SW % 2] = 1;
    for (int64_t ih = 0; ih < g->h; ih++) {
        const char *row = (const char *)x.data + (size_t)((n * g->h + ih) * W * C) * es;
        for (int64_t r = 0; r < SW; r++)
            for (int64_t a = 0; a < 2; a++) {
                if (!read[r][a]) continue;
                uint32_t *d = xu + ((ih * SW + r) * 2 + a) * NP * C;
                const int64_t q = a * SW + r - g->pw; /* pair p's columns: q + 2p SW, + SW */
                int64_t lo = 0, hi = 0;               /* pairs [lo, hi): both inside */
                if (x.dtype == PR_BF16) {
                    lo = q >= 0 ? 0 : (-q + 2 * SW - 1) / (2 * SW);
                    hi = W - SW - q > 0 ? (W - SW - q - 1) / (2 * SW) + 1 : 0;
                    hi = hi < NP ? hi : NP;
                    const uint16_t *s0 = (const uint16_t *)row + (q + 2 * lo * SW) * C;
                    for (int64_t p = lo; p < hi; p++, s0 += 2 * SW * C)
                        pair_units_bf16(s0, s0 + SW * C, C, d + p * C);
                }
                for (int64_t p = 0; p < NP; p++) {
                    if (p == lo && hi > lo) p = hi;
                    if (p >= NP) break;
                    const int64_t q0 = q + 2 * p * SW, q1 = q0 + SW;
                    const int in0 = q0 >= 0 && q0 < W, in1 = q1 >= 0 && q1 < W;
                    if (!in0 && !in1) continue; /* zeros since `fresh` */
                    pair_units(x, in0 ? row + (size_t)(q0 * C) * es : NULL,
                               in1 ? row + (size_t)(q1 * C) * es : NULL, C, d + p * C);
                }
            }
    }
}

/* Image n of dy into dyp (pairs past WO and channels past O stay zero:
 * written by `fresh` once): each pair's two pixels interleaved. */
static void filter_copy_dy(const pr_window *g, fgeom f, pr_operand dy, int64_t n, uint32_t *dyp,
                           int fresh) {
    const int64_t O = g->o, WO = g->wo;
    const size_t es = pr_dtype_size(dy.dtype);
    if (fresh) memset(dyp, 0, sizeof(uint32_t) * (size_t)dyp_units(g, f));
    for (int64_t oh = 0; oh < g->ho; oh++) {
        const char *row = (const char *)dy.data + (size_t)((n * g->ho + oh) * WO * O) * es;
        uint32_t *d = dyp + oh * f.M * f.OP;
        int64_t m = 0;
        if (dy.dtype == PR_BF16)
            for (const uint16_t *s0 = (const uint16_t *)row; m < WO / 2; m++, s0 += 2 * O)
                pair_units_bf16(s0, s0 + O, O, d + m * f.OP);
        for (; m < f.M; m++) {
            const char *p0 = row + (size_t)(2 * m * O) * es;
            pair_units(dy, p0, 2 * m + 1 < WO ? p0 + (size_t)O * es : NULL, O, d + m * f.OP);
        }
    }
}

typedef struct {
    const uint32_t *x;  /* tap's xu at the first row, pair 0, first channel (first image) */
    const uint32_t *dy; /* dyp at the first row, block 0 */
    int64_t xrs, xps, drs, dps, rows, pairs; /* pairs: whole pairs (an odd WO's last apart) */
    int64_t images, xis, dis;                /* images summed, units between their xu, dyp */
    int odd;
    int64_t dwc; /* dw: floats between input channels */
    float *dw;
    __mmask16 mask;
    pf_span pf[2]; /* of the stripe's next image's x and dy, spread over the rows */
} fbtile_args;

ALWAYS_INLINE void fbtile_pair(__m512 acc[MAX_NB][MAX_TILE], const uint32_t *xp,
                               const uint32_t *dp, const int CT, const int NB, const int half) {
    __m512 dv[MAX_NB];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++) dv[b] = _mm512_load_ps((const float *)(dp + 16 * b));
#pragma GCC unroll 24
    for (int c = 0; c < CT; c++) {
        __m512i u = _mm512_set1_epi32((int)xp[c]);
        if (half) u = _mm512_and_si512(u, _mm512_set1_epi32(0xFFFF));
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) acc[b][c] = MAC(acc[b][c], _mm512_castsi512_ps(u), dv[b]);
    }
}

/* A tile of few accumulators (the 3-channel stem's 3) would wait on each
 * VDPBF16PS's latency: SETS accumulator sets take consecutive pairs in turn
 * and are added at the end (a fixed order: results stay thread-independent). */
#define FEW_ACC 4  /* tiles of at most FEW_ACC accumulators take 4 sets */
#define SOME_ACC 8 /* at most SOME_ACC: 2 sets (each VDPBF16PS waits several cycles for its sum) */
#define ACC_SETS(CT, NB) ((CT) * (NB) <= FEW_ACC ? 4 : (CT) * (NB) <= SOME_ACC ? 2 : 1)

ALWAYS_INLINE void fbtile_body(const fbtile_args *A, const int CT, const int NB) {
    const int SETS = ACC_SETS(CT, NB);
    __m512 acc[4][MAX_NB][MAX_TILE];
    load_tile(acc[0], A->dw, A->dwc, A->mask, CT, NB); /* rows: input channels */
    for (int s = 1; s < SETS; s++)
        for (int b = 0; b < NB; b++)
            for (int c = 0; c < CT; c++) acc[s][b][c] = _mm512_setzero_ps();
    const int64_t rows = A->images * A->rows;
    for (int64_t ir = 0; ir < rows; ir++) {
        prefetch_part(A->pf[0].p, A->pf[0].bytes, ir, rows);
        prefetch_part(A->pf[1].p, A->pf[1].bytes, ir, rows);
        const int64_t i = ir / A->rows, r = ir % A->rows;
        const uint32_t *xr = A->x + i * A->xis + r * A->xrs, *dr = A->dy + i * A->dis + r * A->drs;
        int64_t m = 0;
        for (; m + SETS <= A->pairs; m += SETS, xr += SETS * A->xps, dr += SETS * A->dps)
            for (int s = 0; s < SETS; s++)
                fbtile_pair(acc[s], xr + s * A->xps, dr + s * A->dps, CT, NB, 0);
        for (; m < A->pairs; m++, xr += A->xps, dr += A->dps)
            fbtile_pair(acc[0], xr, dr, CT, NB, 0);
        if (A->odd) fbtile_pair(acc[0], xr, dr, CT, NB, 1);
    }
    for (int s = 1; s < SETS; s++)
        for (int b = 0; b < NB; b++)
            for (int c = 0; c < CT; c++) acc[0][b][c] = _mm512_add_ps(acc[0][b][c], acc[s][b][c]);
    store_tile(acc[0], A->dw, A->dwc, A->mask, CT, NB);
}

#define FBTILE(CT, NB) \
    static void fbtile_##CT##_##NB(const fbtile_args *A) { fbtile_body(A, CT, NB); }
typedef void (*fbtile_fn)(const fbtile_args *);
FBTILE(1, 1) FBTILE(2, 1) FBTILE(3, 1) FBTILE(4, 1) FBTILE(5, 1) FBTILE(6, 1) FBTILE(7, 1)
FBTILE(8, 1) FBTILE(9, 1) FBTILE(10, 1) FBTILE(11, 1) FBTILE(12, 1) FBTILE(13, 1) FBTILE(14, 1)
FBTILE(15, 1) FBTILE(16, 1) FBTILE(17, 1) FBTILE(18, 1) FBTILE(19, 1) FBTILE(20, 1)
FBTILE(21, 1) FBTILE(22, 1) FBTILE(23, 1) FBTILE(24, 1)
FBTILE(1, 2) FBTILE(2, 2) FBTILE(3, 2) FBTILE(4, 2) FBTILE(5, 2) FBTILE(6, 2) FBTILE(7, 2)
FBTILE(8, 2) FBTILE(9, 2) FBTILE(10, 2) FBTILE(11, 2) FBTILE(12, 2)
FBTILE(1, 3) FBTILE(2, 3) FBTILE(3, 3) FBTILE(4, 3) FBTILE(5, 3) FBTILE(6, 3) FBTILE(7, 3)
FBTILE(8, 3)
FBTILE(1, 4) FBTILE(2, 4) FBTILE(3, 4) FBTILE(4, 4) FBTILE(5, 4) FBTILE(6, 4)
/* fbtiles[NB - 1][CT - 1] */
static const fbtile_fn fbtiles[MAX_NB][MAX_TILE] = {
    {fbtile_1_1, fbtile_2_1, fbtile_3_1, fbtile_4_1, fbtile_5_1, fbtile_6_1, fbtile_7_1,
     fbtile_8_1, fbtile_9_1, fbtile_10_1, fbtile_11_1, fbtile_12_1, fbtile_13_1, fbtile_14_1,
     fbtile_15_1, fbtile_16_1, fbtile_17_1, fbtile_18_1, fbtile_19_1, fbtile_20_1, fbtile_21_1,
     fbtile_22_1, fbtile_23_1, fbtile_24_1},
    {fbtile_1_2, fbtile_2_2, fbtile_3_2, fbtile_4_2, fbtile_5_2, fbtile_6_2, fbtile_7_2,
     fbtile_8_2, fbtile_9_2, fbtile_10_2, fbtile_11_2, fbtile_12_2},
    {fbtile_1_3, fbtile_2_3, fbtile_3_3, fbtile_4_3, fbtile_5_3, fbtile_6_3, fbtile_7_3,
     fbtile_8_3},
    {fbtile_1_4, fbtile_2_4, fbtile_3_4, fbtile_4_4, fbtile_5_4, fbtile_6_4},
};

/* A group of `images` images' contribution to the partial gradient dw
 * (taps, C, O), their copies in xu and dyp (filter_group_images); the next group's
 * x and dy (next[0], next[1], NULL: none) are asked into L2 meanwhile, a
 * share per tap, so its copies do not wait on memory (in a training step
 * they come from DRAM: the pass took 1.2-2.5x as long there). */
static void filter_group(const pr_window *g, fgeom f, const uint32_t *xu, const uint32_t *dyp,
                         int64_t images, float *dw, const pf_span next[2]) {
    const int64_t C = g->c, O = g->o, nob = blocks16(O);
    for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t r0, r1; /* output rows whose tap row kh is inside x */
        tap_range(g->h, g->ho, g->sh, g->ph, kh, &r0, &r1);
        if (r1 == r0) continue;
        for (int64_t kw = 0; kw < g->kw; kw++) {
            const int64_t tap = kh * g->kw + kw, taps = g->kh * g->kw;
            pf_span px = span_part(next[0].p, next[0].bytes, tap, taps);
            pf_span pdy = span_part(next[1].p, next[1].bytes, tap, taps);
            const int64_t j = kw / f.sw; /* place of pair 0's first pixel in its phase */
            const uint32_t *x0 =
                xu + (((r0 * g->sh - g->ph + kh) * f.sw + kw % f.sw) * 2 + j % 2) * f.NP * C +
                j / 2 * C;
            float *dwt = dw + (kh * g->kw + kw) * C * O;
            for (int64_t ob = 0; ob < nob; ob += MAX_NB) {
                int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
                int ct = tile_width(nb, C);
                for (int64_t c0 = 0; c0 < C; c0 += ct) {
                    int n = (int)(C - c0 < ct ? C - c0 : ct);
                    fbtile_args A = {.x = x0 + c0, .dy = dyp + r0 * f.M * f.OP + ob * 16,
                                     .xrs = g->sh * f.sw * 2 * f.NP * C, .xps = C,
                                     .drs = f.M * f.OP, .dps = f.OP, .rows = r1 - r0,
                                     .pairs = g->wo / 2, .odd = (int)(g->wo % 2), .dwc = O,
                                     .images = images, .xis = round16(xu_units(g, f)),
                                     .dis = round16(dyp_units(g, f)),
                                     .dw = dwt + c0 * O + ob * 16,
                                     .mask = ob + nb == nob ? tail_mask(O) : (__mmask16)0xFFFF,
                                     .pf = {px, pdy}};
                    fbtiles[nb - 1][n - 1](&A);
                    px = pdy = (pf_span){NULL, 0};
                }
            }
        }
    }
}

/* dw[i] for i < K: the stripes' partials (`slot` floats apart) added in
 * stripe order.  Called by the threads of a parallel region, which share
 * the elements. */
static void sum_stripes(const float *parts, int64_t slot, int64_t stripes, int64_t K,
                        float *dw) {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < K; i++) {
        float sum = parts[i];
        for (int64_t s = 1; s < stripes; s++) sum += parts[s * slot + i];
        dw[i] = sum;
    }
}

/* Groups of images (filter_group_images) dealt round-robin to stripes (from the
 * shapes only), each summed into its own partial, the partials added in
 * stripe order: results do not depend on the thread count. */
static void direct_backprop_filter(const pr_window *g, pr_operand x, pr_operand dy, float *dw,
                                   float *parts) {
    const int64_t K = g->kh * g->kw * g->c * g->o, slot = stripe_floats(g);
    const int64_t stripes = count_stripes(g);
    const fgeom f = filter_geom(g);
    const int64_t xb = g->h * g->w * g->c * (int64_t)pr_dtype_size(x.dtype); /* an image's bytes */
    const int64_t db = g->ho * g->wo * g->o * (int64_t)pr_dtype_size(dy.dtype);
    const int64_t B = filter_group_images(g), xis = round16(xu_units(g, f)),
                  dis = round16(dyp_units(g, f));
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)K);
        return;
    }
#pragma omp parallel num_threads(threads_for(stripes))
    {
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            float *part = parts + s * slot;
            uint32_t *xu = (uint32_t *)(part + round16(K));
            uint32_t *dyp = xu + B * xis;
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t q = s; q * B < g->n; q += stripes) { /* group q: images qB, ... */
                const int64_t n0 = q * B, images = g->n - n0 < B ? g->n - n0 : B;
                const int64_t n1 = (q + stripes) * B; /* the stripe's next group */
                const int64_t later = n1 < g->n ? (g->n - n1 < B ? g->n - n1 : B) : 0;
                const pf_span next[2] = {
                    {later ? (const char *)x.data + n1 * xb : NULL, later * xb},
                    {later ? (const char *)dy.data + n1 * db : NULL, later * db}};
                for (int64_t i = 0; i < images; i++) {
                    filter_copy_x(g, f, x, n0 + i, xu + i * xis, q == s);
                    filter_copy_dy(g, f, dy, n0 + i, dyp + i * dis, q == s);
                }
                filter_group(g, f, xu, dyp, images, part, next);
            }
        }
        sum_stripes(parts, slot, stripes, K, dw);
    }
}

/* ---- few input channels: patches ---------------------------------------------
 *
 * The units above pad an odd channel count's pixels with a zero: the
 * 3-channel stem's filter gradient multiplies a zero in one VDPBF16PS
 * product of four, and each of its pixels takes a word permutation
 * (odd_units).  Where C is odd and a window's K = KH*KW*C values fit one
 * zmm (PATCH_VALUES), the filter gradient reduces over (tap, channel)
 * instead: an output pixel's patch is its window's K values in the weights'
 * (KH, KW, C) order, zeros after them, ceil(K / 2) units (the stem: 27
 * values in 14 units, 96% of the products useful; an im2col row).  A patch
 * is KH masked loads of KW*C consecutive values from a zero-padded bfloat16
 * copy of the image, OR-ed together: no shuffle.
 *   dw[k, o] = sum over p of patch[p, k] dy[p, o], an image's output pixels
 *   (row after row) in pairs, PATCH_PAIRS pairs at a time: unit k of pair m
 *   holds patch[2m, k] (low half) and patch[2m + 1, k] (high), one word
 *   permutation per 16 units; dy's units are the direct path's pairs (zero
 *   for a missing last pixel) and the tiles are fbtiles (the values k as its
 *   channels, one row).
 * Values past K are zero in patches and dy's pairs, and every other product
 * pairs a window value with its own dy value, so an Inf or a NaN reaches
 * exactly the taps whose windows hold it.  Sums in float32, in an order
 * fixed by the shapes.  On an AMD EPYC Zen 5 (ResNet's stem at batch 128,
 * bfloat16 x and dy, old and new builds interleaved in 4 rounds) the
 * patches' filter gradient took 0.48 ms against the units' 0.59 ms; a
 * forward pass on patches (a tile of up to 16 pixels x 16 output channels,
 * a broadcast per product) took 0.39 ms against the units' three-tap
 * tiles' 0.31 ms, so the forward pass stays on units. */
#define PATCH_VALUES 32 /* bfloat16 values of a window: one zmm */
#define PATCH_PAIRS 64  /* pixel pairs of a filter-gradient chunk */

static int use_patches(const pr_window *g, pr_conv_pass pass) {
    const int64_t taps = g->kh * g->kw;
    return pass == PR_CONV_BACKPROP_FILTER && g->c % 2 == 1 && taps > 1 &&
           taps * g->c <= PATCH_VALUES;
}

/* The padded image: xpad_rows x xpad_cols pixels of C bfloat16 values, in
 * units, rounded to 64 bytes. */
static int64_t pad_units(const pr_window *g) {
    return round16((xpad_rows(g) * xpad_cols(g) * g->c + 1) / 2);
}

/* Image n of x rounded to bfloat16 into the padded image at (ph, pw); the
 * zeros around it written by `fresh` once. */
static void patch_pad(const pr_window *g, pr_operand x, int64_t n, uint16_t *pad, int fresh) {
    const int64_t C = g->c, HP = xpad_rows(g), WP = xpad_cols(g);
    const int64_t cols = g->w < WP - g->pw ? g->w : WP - g->pw;
    const size_t es = pr_dtype_size(x.dtype);
    if (fresh) memset(pad, 0, sizeof(uint32_t) * (size_t)pad_units(g));
    for (int64_t ih = 0; ih < g->h && ih + g->ph < HP && cols > 0; ih++)
        pr_bf16_convert_run((const char *)x.data + (size_t)((n * g->h + ih) * g->w * C) * es,
                            x.dtype, cols * C, pad + ((ih + g->ph) * WP + g->pw) * C);
}

/* A patch's KH runs: run r (KW*C values of the window's padded row r) is
 * read from off[r] values past the window's first value into lanes m[r]. */
typedef struct {
    int kh;
    int64_t off[MAX_WINDOW];
    __mmask32 m[MAX_WINDOW];
} patch_runs;

static patch_runs patch_setup(const pr_window *g) {
    patch_runs q = {.kh = (int)g->kh};
    const int64_t run = g->kw * g->c, row = xpad_cols(g) * g->c;
    for (int64_t r = 0; r < g->kh; r++) {
        q.off[r] = r * (row - run); /* lane r*run + i: value i of row r */
        q.m[r] = (__mmask32)((((uint64_t)1 << run) - 1) << (r * run));
    }
    return q;
}

/* The patch of the output pixel whose window starts at s. */
ALWAYS_INLINE __m512i patch_at(const uint16_t *s, const patch_runs *q) {
    __m512i v = _mm512_maskz_loadu_epi16(q->m[0], s);
    for (int r = 1; r < q->kh; r++)
        v = _mm512_or_si512(v, _mm512_maskz_loadu_epi16(q->m[r], s + q->off[r]));
    return v;
}

/* Units between two pairs' patch units: 16 (K <= 16) or 32. */
static int64_t pair_stride(const pr_window *g) { return g->kh * g->kw * g->c > 16 ? 32 : 16; }

/* A stripe of the filter gradient: its partial dw (K, O), the padded image,
 * a chunk's pairs of patches (PATCH_PAIRS x pair_stride units) and of dy
 * (PATCH_PAIRS x 16 blocks16(O) units). */
static int64_t patch_stripe_floats(const pr_window *g) {
    return round16(g->kh * g->kw * g->c * g->o) + pad_units(g) +
           PATCH_PAIRS * (pair_stride(g) + blocks16(g->o) * 16);
}

/* Stripes: one per image up to the slots of conv_direct_geom.h (16), from
 * the shapes only. */
static int64_t patch_stripes(const pr_window *g) {
    return count_slots(g->n, patch_stripe_floats(g));
}

/* Pairs [m0, m0 + count) of image n's output pixels (row after row) as
 * units: the patches' into xp (xs units a pair), dy's into dp (ds units a
 * pair; its lanes past O stay zero). */
static void patch_pairs(const pr_window *g, const patch_runs *q, const uint16_t *pad,
                        pr_operand dy, int64_t n, int64_t m0, int64_t count, uint32_t *xp,
                        int64_t xs, uint32_t *dp, int64_t ds) {
    const int64_t P = g->ho * g->wo, C = g->c, O = g->o, WP = xpad_cols(g);
    uint16_t lo[32], hi[32]; /* word 2k: the first pixel's value k; 2k + 1: the second's */
    for (int k = 0; k < 16; k++) lo[2 * k] = (uint16_t)k, lo[2 * k + 1] = (uint16_t)(32 + k);
    for (int k = 0; k < 32; k++) hi[k] = (uint16_t)(lo[k] + 16);
    const __m512i ilo = _mm512_loadu_si512(lo), ihi = _mm512_loadu_si512(hi);
    const size_t es = pr_dtype_size(dy.dtype);
    int64_t p = 2 * m0, oh = p / g->wo, ow = p % g->wo;
    const char *d0 = (const char *)dy.data + (size_t)((n * P + p) * O) * es;
    for (int64_t j = 0; j < count; j++, d0 += (size_t)(2 * O) * es) {
        __m512i v[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        const int two = p + 1 < P;
        for (int i = 0; i < 1 + two; i++, p++) {
            v[i] = patch_at(pad + (oh * g->sh * WP + ow * g->sw) * C, q);
            if (++ow == g->wo) ow = 0, oh++;
        }
        _mm512_store_si512(xp + j * xs, _mm512_permutex2var_epi16(v[0], ilo, v[1]));
        if (xs > 16)
            _mm512_store_si512(xp + j * xs + 16, _mm512_permutex2var_epi16(v[0], ihi, v[1]));
        if (two && dy.dtype == PR_BF16)
            pair_units_bf16((const uint16_t *)d0, (const uint16_t *)d0 + O, O, dp + j * ds);
        else
            pair_units(dy, d0, two ? d0 + (size_t)O * es : NULL, O, dp + j * ds);
    }
}

/* The filter gradient: images dealt round-robin to stripes (from the shapes
 * only), each summed into its own partial, the partials added in stripe
 * order: results do not depend on the thread count. */
static void patch_backprop_filter(const pr_window *g, pr_operand x, pr_operand dy, float *dw,
                                  float *parts) {
    const int64_t K = g->kh * g->kw * g->c, O = g->o, KO = K * O, nob = blocks16(O);
    const int64_t slot = patch_stripe_floats(g), stripes = patch_stripes(g);
    const int64_t M = (g->ho * g->wo + 1) / 2, xs = pair_stride(g), ds = nob * 16;
    const patch_runs q = patch_setup(g);
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)KO);
        return;
    }
#pragma omp parallel num_threads(threads_for(stripes))
    {
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            float *part = parts + s * slot;
            uint32_t *pad = (uint32_t *)(part + round16(KO)), *xp = pad + pad_units(g);
            uint32_t *dp = xp + PATCH_PAIRS * xs;
            memset(part, 0, sizeof(float) * (size_t)KO);
            memset(dp, 0, sizeof(uint32_t) * (size_t)(PATCH_PAIRS * ds));
            for (int64_t n = s; n < g->n; n += stripes) {
                patch_pad(g, x, n, (uint16_t *)pad, n == s);
                for (int64_t m0 = 0; m0 < M; m0 += PATCH_PAIRS) {
                    const int64_t count = M - m0 < PATCH_PAIRS ? M - m0 : PATCH_PAIRS;
                    patch_pairs(g, &q, (const uint16_t *)pad, dy, n, m0, count, xp, xs, dp, ds);
                    for (int64_t ob = 0; ob < nob; ob += MAX_NB) {
                        const int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
                        const int ct = tile_width(nb, K);
                        for (int64_t k0 = 0; k0 < K; k0 += ct) {
                            const int kn = (int)(K - k0 < ct ? K - k0 : ct);
                            fbtile_args A = {.x = xp + k0, .dy = dp + ob * 16, .xps = xs,
                                             .dps = ds, .rows = 1, .pairs = count,
                                             .images = 1, .dwc = O,
                                             .dw = part + k0 * O + ob * 16,
                                             .mask = ob + nb == nob ? tail_mask(O)
                                                                    : (__mmask16)0xFFFF};
                            fbtiles[nb - 1][kn - 1](&A);
                        }
                    }
                }
            }
        }
        sum_stripes(parts, slot, stripes, KO, dw);
    }
}

int pr_conv_direct_bf16(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b,
                        void *out, pr_dtype out_dtype, void *scratch) {
    if (use_patches(g, pass) && out_dtype == PR_F32) {
        patch_backprop_filter(g, a, b, out, (float *)scratch);
        return PR_OK;
    }
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
    if (use_patches(g, pass))
        return sizeof(float) * (size_t)(patch_stripes(g) * patch_stripe_floats(g));
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
           (g->kh == 1 && g->kw == 1 && pr_conv_direct_fits(g, pass));
}
