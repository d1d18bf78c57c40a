/* Direct NHWC convolutions with AVX-512 F: no im2col, the output tile in
 * registers.
 *
 * Every pass is a sum over taps (kh, kw) and input channels c of a
 * broadcast input value times a vector of 16 output channels:
 *   forward          y[oh, ow, o]  += xpad[oh*sh + kh, ow*sw + kw, c] * w[kh, kw, c, o]
 *   backprop_input   dx[ih, iw, c] += dypad[(ih + ph - kh)/sh, (iw + pw - kw)/sw, o]
 *                                     * w[kh, kw, c, o]
 *                    over the taps whose division is exact: the output is split
 *                    into sh x sw phases (ih % sh, iw % sw), each a stride-1 sum
 *                    over its own taps (the sub-pixel split of a transposed
 *                    convolution, Dumoulin & Visin 2016, "A guide to convolution
 *                    arithmetic", section 4);
 *   backprop_filter  dw[kh, kw, c, o] += xpad[oh*sh + kh, ow*sw + kw, c] * dy[oh, ow, o].
 * Forward and backprop_input first copy each image (x, or dy) into a
 * zero-padded buffer of channel-major rows (one pass over the activations
 * instead of im2col's KH*KW; a tile's pixels along one channel are then
 * consecutive, so its broadcasts have constant offsets), and the inner loops
 * have no bounds checks; backprop_filter reads x in place, each tap over the
 * output pixels whose input is inside the image.
 * The output tile is held in zmm accumulators: forward and
 * backprop_input a run of WT output pixels x NB blocks of 16 output channels
 * (weights repacked once per call into 16-channel blocks, zero-padded, so a
 * block is one aligned load), backprop_filter a run of CT input channels x
 * NB blocks of 16 output channels summed over all pixels; WT * NB and
 * CT * NB stay at or below 24 of the 32 zmm registers (the technique of
 * LIBXSMM's and oneDNN's direct convolutions: Georganas et al., "Anatomy of
 * High-Performance Deep Learning Convolutions on SIMD Architectures", SC18,
 * section 3).  Windows three taps wide share each broadcast among the taps
 * that read the same column (tile3 for forward and backprop_input, two or
 * three taps; filter_image3 for the weight gradient with one block of
 * output channels).  Channel counts that are not multiples of 16 use
 * masked loads and stores.  While an image computes, the next one is
 * prefetched into L2, a few lines per output row.
 *
 * Threads: forward and backprop_input take whole images; backprop_filter
 * deals images round-robin to a fixed number of stripes (from the shapes
 * only), sums each stripe into its own partial gradient and adds the
 * partials in stripe order, so results do not depend on the thread count.
 */
#include "conv_direct.h"
#include "conv_direct_geom.h"

#include <string.h>

#include "bf16.h"

/* ---- geometry (portable; the rest in conv_direct_geom.h) ------------------ */

int pr_conv_direct_fits(const pr_window *g, pr_conv_pass pass) {
    /* forward tiles step through x by the stride: compiled for 1 and 2 */
    int64_t max_sw = pass == PR_CONV_FORWARD ? 2 : MAX_STRIDE;
    return g->kh >= 1 && g->kw >= 1 && g->kh <= MAX_WINDOW && g->kw <= MAX_WINDOW &&
           g->sh >= 1 && g->sw >= 1 && g->sh <= MAX_STRIDE && g->sw <= max_sw && g->c >= 1 &&
           g->o >= 1 && g->ho >= 1 && g->wo >= 1;
}

int pr_conv_direct_supports(const pr_window *g, pr_conv_pass pass) {
    /* A 1x1 window's forward and backprop_input are one GEMM over the pixels
     * (or a quarter of them): the reference's sgemm on x in place is faster
     * there (bench/conv.py); so is a stride-1 1x1's filter gradient, whose
     * tiles here would be image rows of a few pixels (RegNet's 368 channels
     * at 2x2: 9% of the AVX2 peak here, 58% by sgemm, on an AMD EPYC Zen 3;
     * bench/conv.py --shapes "regnet 1x1").  A strided 1x1's filter gradient
     * (ResNet's projection shortcuts) is faster here. */
    if (g->kh * g->kw == 1 && (pass != PR_CONV_BACKPROP_FILTER || g->sh * g->sw == 1)) return 0;
    return pr_conv_direct_fits(g, pass);
}

/* The repacked weights, then a slot per thread: a group of padded images
 * (tile_image_group; the filter gradient: a stripe's partial dw). */
size_t pr_conv_direct_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    const int64_t G = tile_image_group(g, pass), slot = G * slot_floats(g, pass);
    return sizeof(float) *
           (size_t)(round16(packed_floats(g, pass)) + count_slots(ceil_div(g->n, G), slot) * slot);
}

/* ---- AVX-512 ---------------------------------------------------------------- */

#if defined(__x86_64__)
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
#endif

/* The forward and input-gradient tiles (conv_direct_tiles.h), float32. */
#define DT float
#define BCAST(p) _mm512_set1_ps(*(p))
#define MAC(acc, x, w) _mm512_fmadd_ps(x, w, acc)
#define IMAGE_UNITS(gu, pass) 0
#define ROW_FLOATS(gu, pass) 0
static const float *image_units(pr_operand src, int64_t n, int64_t pixels, int64_t ch, float *buf) {
    return (const float *)src.data + n * pixels * ch;
}
#include "conv_direct_tiles.h"

/* w (KH, KW, C, O) -> [blocks of 16][KH*KW][the other channels][16],
 * zero-padded: blocks of output channels for the forward pass (by_c = 0),
 * of input channels for backprop_input (by_c = 1: the transposed filter). */
static void pack_weights(const pr_window *g, const float *w, int by_c, float *wp) {
    const int64_t taps = g->kh * g->kw, C = g->c, O = g->o;
    const int64_t nb = by_c ? C : O, ni = by_c ? O : C;
    for (int64_t blk = 0; blk < blocks16(nb); blk++)
        for (int64_t t = 0; t < taps; t++)
            for (int64_t i = 0; i < ni; i++) {
                float *dst = wp + ((blk * taps + t) * ni + i) * 16;
                for (int64_t j = 0; j < 16; j++) {
                    int64_t b = blk * 16 + j, c = by_c ? b : i, o = by_c ? i : b;
                    dst[j] = b < nb ? w[(t * C + c) * O + o] : 0.0f;
                }
            }
}

int pr_conv_direct_forward(const pr_window *g, const float *x, const float *w, float *y,
                           void *scratch) {
    float *wp = scratch;
    pack_weights(g, w, 0, wp);
    direct_forward(g, (pr_operand){x, PR_F32}, g->c, wp, (out_rows){y, PR_F32},
                   wp + round16(packed_floats(g, PR_CONV_FORWARD)));
    return PR_OK;
}

int pr_conv_direct_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                                  void *scratch) {
    float *wp = scratch;
    pack_weights(g, w, 1, wp);
    direct_backprop_input(g, (pr_operand){dy, PR_F32}, g->o, wp, (out_rows){dx, PR_F32},
                          wp + round16(packed_floats(g, PR_CONV_BACKPROP_INPUT)));
    return PR_OK;
}

/* ---- filter gradient ---------------------------------------------------------- */

/* dw[c0 .. c0+CT) x [NB blocks] += sum over a rectangle of output pixels:
 * x at pixel (r, q) is x + r*rs + q*ps (channel c0 of tap t), dy at dy +
 * r*drs + q*dps (block 0 of the group). */
typedef struct {
    const float *x, *dy;
    int64_t ps, rs, rows, cols, dps, drs, dwc;
    int64_t images, xis, dis; /* images summed (filter_group_images), floats between them */
    float *dw;
    __mmask16 mask;
    pf_span pf[2]; /* of the next image's x and dy, spread over the rows */
} ftile_args;

ALWAYS_INLINE void ftile_body(const ftile_args *A, const int CT, const int NB) {
    __m512 acc[MAX_NB][MAX_TILE];
    load_tile(acc, A->dw, A->dwc, A->mask, CT, NB); /* rows: input channels */
    const int64_t rows = A->images * A->rows;
    for (int64_t ir = 0; ir < rows; ir++) {
        prefetch_part(A->pf[0].p, A->pf[0].bytes, ir, rows);
        prefetch_part(A->pf[1].p, A->pf[1].bytes, ir, rows);
        const int64_t i = ir / A->rows, r = ir % A->rows;
        const float *xp = A->x + i * A->xis + r * A->rs, *dyp = A->dy + i * A->dis + r * A->drs;
        for (int64_t q = 0; q < A->cols; q++, xp += A->ps, dyp += A->dps) {
            __m512 dv[MAX_NB];
#pragma GCC unroll 4
            for (int b = 0; b < NB - 1; b++) dv[b] = _mm512_loadu_ps(dyp + 16 * b);
            dv[NB - 1] = _mm512_maskz_loadu_ps(A->mask, dyp + 16 * (NB - 1));
#pragma GCC unroll 24
            for (int c = 0; c < CT; c++) {
                __m512 xv = _mm512_set1_ps(xp[c]);
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++) acc[b][c] = _mm512_fmadd_ps(xv, dv[b], acc[b][c]);
            }
        }
    }
    store_tile(acc, A->dw, A->dwc, A->mask, CT, NB);
}

#define FTILE(CT, NB) \
    static void ftile_##CT##_##NB(const ftile_args *A) { ftile_body(A, CT, NB); }
typedef void (*ftile_fn)(const ftile_args *);
FTILE(1, 1) FTILE(2, 1) FTILE(3, 1) FTILE(4, 1) FTILE(5, 1) FTILE(6, 1) FTILE(7, 1) FTILE(8, 1)
FTILE(9, 1) FTILE(10, 1) FTILE(11, 1) FTILE(12, 1) FTILE(13, 1) FTILE(14, 1) FTILE(15, 1)
FTILE(16, 1) FTILE(17, 1) FTILE(18, 1) FTILE(19, 1) FTILE(20, 1) FTILE(21, 1) FTILE(22, 1)
FTILE(23, 1) FTILE(24, 1)
FTILE(1, 2) FTILE(2, 2) FTILE(3, 2) FTILE(4, 2) FTILE(5, 2) FTILE(6, 2) FTILE(7, 2) FTILE(8, 2)
FTILE(9, 2) FTILE(10, 2) FTILE(11, 2) FTILE(12, 2)
FTILE(1, 3) FTILE(2, 3) FTILE(3, 3) FTILE(4, 3) FTILE(5, 3) FTILE(6, 3) FTILE(7, 3) FTILE(8, 3)
FTILE(1, 4) FTILE(2, 4) FTILE(3, 4) FTILE(4, 4) FTILE(5, 4) FTILE(6, 4)

static const ftile_fn ftiles1[24] = {
    ftile_1_1, ftile_2_1, ftile_3_1, ftile_4_1, ftile_5_1, ftile_6_1, ftile_7_1, ftile_8_1,
    ftile_9_1, ftile_10_1, ftile_11_1, ftile_12_1, ftile_13_1, ftile_14_1, ftile_15_1, ftile_16_1,
    ftile_17_1, ftile_18_1, ftile_19_1, ftile_20_1, ftile_21_1, ftile_22_1, ftile_23_1, ftile_24_1};
static const ftile_fn ftiles2[12] = {ftile_1_2, ftile_2_2, ftile_3_2, ftile_4_2,
                                     ftile_5_2, ftile_6_2, ftile_7_2, ftile_8_2,
                                     ftile_9_2, ftile_10_2, ftile_11_2, ftile_12_2};
static const ftile_fn ftiles3[8] = {ftile_1_3, ftile_2_3, ftile_3_3, ftile_4_3,
                                    ftile_5_3, ftile_6_3, ftile_7_3, ftile_8_3};
static const ftile_fn ftiles4[6] = {ftile_1_4, ftile_2_4, ftile_3_4, ftile_4_4, ftile_5_4, ftile_6_4};
static const ftile_fn *const ftiles[MAX_NB + 1] = {NULL, ftiles1, ftiles2, ftiles3, ftiles4};

/* Add the contribution of `images` consecutive images (filter_group_images)
 * to the partial gradient dw (T, C, O).  Tap (kh, kw) sums over the output
 * pixels whose input pixel is inside the image (the others read padding,
 * zeros), so x is read in place.  next_x, next_dy: the stripe's next group
 * (`next` images; NULL: none). */
static void filter_group(const pr_window *g, const float *xn, const float *dyn, int64_t images,
                         float *dw, const float *next_x, const float *next_dy, int64_t next) {
    const int64_t C = g->c, O = g->o, nob = blocks16(O);
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            /* this tap's share of the next group, asked for by its first tile */
            pf_span px = span_part(next_x, 4 * next * g->h * g->w * C, kh * g->kw + kw,
                                   g->kh * g->kw);
            pf_span pdy = span_part(next_dy, 4 * next * g->ho * g->wo * O, kh * g->kw + kw,
                                    g->kh * g->kw);
            int64_t r0, r1, q0, q1; /* output rows and columns whose tap is inside x */
            tap_range(g->h, g->ho, g->sh, g->ph, kh, &r0, &r1);
            tap_range(g->w, g->wo, g->sw, g->pw, kw, &q0, &q1);
            float *dwt = dw + (kh * g->kw + kw) * C * O;
            const float *x0 = xn + ((r0 * g->sh - g->ph + kh) * g->w + q0 * g->sw - g->pw + kw) * C;
            for (int64_t ob = 0; ob < nob && r1 > r0 && q1 > q0; ob += MAX_NB) {
                int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
                int ct = tile_width(nb, C);
                for (int64_t c0 = 0; c0 < C; c0 += ct) {
                    int n = (int)(C - c0 < ct ? C - c0 : ct);
                    ftile_args A = {.x = x0 + c0, .dy = dyn + (r0 * g->wo + q0) * O + ob * 16,
                                    .ps = g->sw * C, .rs = g->sh * g->w * C, .rows = r1 - r0,
                                    .cols = q1 - q0, .dps = O, .drs = g->wo * O, .dwc = O,
                                    .images = images, .xis = g->h * g->w * C,
                                    .dis = g->ho * g->wo * O,
                                    .dw = dwt + c0 * O + ob * 16,
                                    .mask = ob + nb == nob ? tail_mask(O) : (__mmask16)0xFFFF,
                                    .pf = {px, pdy}};
                    ftiles[nb][n - 1](&A);
                    px = pdy = (pf_span){NULL, 0};
                }
            }
        }
}

/* Windows three taps wide (horizontal stride 1 or 2): the input-side twin of
 * tile3.  Input column q of a row feeds tap kw of output pixel ow when
 * q = ow*SW + kw - pw, so one broadcast of x[q][c] serves every tap that
 * reads column q (three at stride 1), each with the dy vector of its own
 * pixel: acc[kw][c] (16 output channels) += x[q][c] * dy[(q + pw - kw) / SW].
 * Group g is the SW columns g*SW - pw .. g*SW - pw + SW-1; they read dy of
 * pixels g - 2/SW .. g.  A tile is 3 taps x FT3_CT input channels x one
 * block of 16 output channels, summed over the output rows whose input row
 * is inside the image.  x and dy are read in place: padding contributes
 * nothing, so columns outside the image are skipped, and the groups near
 * the edges (a column outside the image, or a pixel outside 0 .. wo-1)
 * take a checked copy of the loop body. */
#define FT3_CT 8
typedef struct {
    const float *x, *dy; /* x at the input row of the first output row, column 0, channel c0;
                            dy at that output row, pixel 0, block ob */
    int64_t xrs, drs;    /* floats from one output row's input row to the next; dy rows */
    int64_t c, o, pw, w, wo, rows, groups, g_lo, g_hi; /* groups [g_lo, g_hi): no checks */
    int64_t dwt, dwc; /* dw: floats between taps kw, between input channels */
    float *dw;        /* tap (kh, 0), channel c0, output block */
    __mmask16 mask;
    pf_span pf[2]; /* of the next image's x and dy, spread over the rows */
} ftile3_args;

ALWAYS_INLINE void ftile3_group(__m512 acc[3][FT3_CT], const ftile3_args *A, const float *xr,
                                const float *dr, int64_t g, const int CT, const int SW,
                                const int checked) {
    __m512 d[3];
    int in[3] = {1, 1, 1}; /* pixel g - j exists (always, in unchecked groups) */
#pragma GCC unroll 3
    for (int j = 0; j <= 2 / SW; j++) {
        int64_t p = g - j; /* d[j]: dy of pixel g - j */
        if (checked) in[j] = p >= 0 && p < A->wo;
        /* masked only where the block is partial: a masked load costs an FMA slot */
        d[j] = !in[j]                           ? _mm512_setzero_ps()
               : A->mask == 0xFFFF              ? _mm512_loadu_ps(dr + p * A->o)
                                                : _mm512_maskz_loadu_ps(A->mask, dr + p * A->o);
    }
#pragma GCC unroll 2
    for (int s = 0; s < SW; s++) {
        int64_t q = g * SW + s - A->pw;
        if (checked && (q < 0 || q >= A->w)) continue;
        const float *xq = xr + q * A->c;
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++) {
            __m512 b = _mm512_set1_ps(xq[c]);
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++) {
                if ((s - k + 2 * SW) % SW) continue; /* column g*SW + s is no input of tap k */
                /* no such pixel: no product (x * 0 would turn an Inf or NaN of x
                 * into a NaN of a tap that never reads this column) */
                if (checked && !in[(k - s) / SW]) continue;
                acc[k][c] = _mm512_fmadd_ps(b, d[(k - s) / SW], acc[k][c]);
            }
        }
    }
}

ALWAYS_INLINE void ftile3_body(const ftile3_args *A, const int CT, const int SW) {
    __m512 acc[3][FT3_CT];
#pragma GCC unroll 3
    for (int k = 0; k < 3; k++)
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++)
            acc[k][c] = _mm512_maskz_loadu_ps(A->mask, A->dw + k * A->dwt + c * A->dwc);
    for (int64_t r = 0; r < A->rows; r++) {
        prefetch_part(A->pf[0].p, A->pf[0].bytes, r, A->rows);
        prefetch_part(A->pf[1].p, A->pf[1].bytes, r, A->rows);
        const float *xr = A->x + r * A->xrs, *dr = A->dy + r * A->drs;
        for (int64_t g = 0; g < A->g_lo; g++) ftile3_group(acc, A, xr, dr, g, CT, SW, 1);
        for (int64_t g = A->g_lo; g < A->g_hi; g++) ftile3_group(acc, A, xr, dr, g, CT, SW, 0);
        for (int64_t g = A->g_hi; g < A->groups; g++) ftile3_group(acc, A, xr, dr, g, CT, SW, 1);
    }
#pragma GCC unroll 3
    for (int k = 0; k < 3; k++)
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++)
            _mm512_mask_storeu_ps(A->dw + k * A->dwt + c * A->dwc, A->mask, acc[k][c]);
}

typedef void (*ftile3_fn)(const ftile3_args *);
#define FTILE3(CT, SW) \
    static void ftile3_##CT##_##SW(const ftile3_args *A) { ftile3_body(A, CT, SW); }
#define FTILES3(SW) FTILE3(1, SW) FTILE3(2, SW) FTILE3(3, SW) FTILE3(4, SW) FTILE3(5, SW) \
    FTILE3(6, SW) FTILE3(7, SW) FTILE3(8, SW)
FTILES3(1)
FTILES3(2)
#define FREF3(SW) {ftile3_1_##SW, ftile3_2_##SW, ftile3_3_##SW, ftile3_4_##SW, ftile3_5_##SW, \
    ftile3_6_##SW, ftile3_7_##SW, ftile3_8_##SW}
static const ftile3_fn ftiles3_by_sw[2][FT3_CT] = {FREF3(1), FREF3(2)};

/* filter_group for windows three taps wide (one image) and horizontal strides 1 and 2. */
static void filter_image3(const pr_window *g, const float *xn, const float *dyn, float *dw,
                          const float *next_x, const float *next_dy) {
    const int64_t C = g->c, O = g->o, SW = g->sw, jmax = 2 / SW;
    const int64_t groups = g->wo + 3 - SW; /* every (pixel, tap) pair: pixels up to g */
    /* groups whose columns are all inside the image and whose pixels are all < wo */
    int64_t g_lo = ceil_div(g->pw, SW), top = g->w + g->pw - SW;
    int64_t g_hi = top < 0 ? 0 : top / SW + 1;
    if (g_lo < jmax) g_lo = jmax;
    if (g_hi > g->wo) g_hi = g->wo;
    if (g_hi < g_lo) g_hi = g_lo;
    for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t r0, r1; /* output rows whose tap row kh is inside x */
        tap_range(g->h, g->ho, g->sh, g->ph, kh, &r0, &r1);
        if (r1 == r0) continue;
        for (int64_t ob = 0; ob < blocks16(O); ob++)
            for (int64_t c0 = 0; c0 < C; c0 += FT3_CT) {
                int64_t part = (kh * blocks16(O) + ob) * ceil_div(C, FT3_CT) + c0 / FT3_CT;
                int64_t parts = g->kh * blocks16(O) * ceil_div(C, FT3_CT);
                int ct = (int)(C - c0 < FT3_CT ? C - c0 : FT3_CT);
                ftile3_args A = {
                    .x = xn + (r0 * g->sh - g->ph + kh) * g->w * C + c0,
                    .dy = dyn + r0 * g->wo * O + ob * 16, .xrs = g->sh * g->w * C,
                    .drs = g->wo * O, .c = C, .o = O, .pw = g->pw, .w = g->w, .wo = g->wo,
                    .rows = r1 - r0, .groups = groups, .g_lo = g_lo, .g_hi = g_hi,
                    .dwt = C * O, .dwc = O, .dw = dw + (kh * 3 * C + c0) * O + ob * 16,
                    .mask = ob + 1 == blocks16(O) ? tail_mask(O) : (__mmask16)0xFFFF,
                    .pf = {span_part(next_x, 4 * g->h * g->w * C, part, parts),
                           span_part(next_dy, 4 * g->ho * g->wo * O, part, parts)}};
                ftiles3_by_sw[g->sw - 1][ct - 1](&A);
            }
    }
}

int pr_conv_direct_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                                   void *scratch) {
    const int64_t C = g->c, O = g->o, K = g->kh * g->kw * C * O;
    const int64_t slot = slot_floats(g, PR_CONV_BACKPROP_FILTER);
    /* filter_image3 where its three-FMA broadcasts pay: one block of output
     * channels (with two or more, filter_group's tiles already share each
     * broadcast among the blocks and skip filter_image3's edge checks;
     * 32 and 64 channels ran 1-14% slower in filter_image3); it takes the
     * images one by one, filter_group in groups of B */
    const int three = g->kw == 3 && g->sw <= 2 && g->o <= 16;
    const int64_t B = three ? 1 : filter_group_images(g), groups = (g->n + B - 1) / B;
    const int64_t stripes = count_slots(groups, slot);
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)K);
        return PR_OK;
    }
    float *parts = (float *)scratch + round16(packed_floats(g, PR_CONV_BACKPROP_FILTER));
#pragma omp parallel num_threads(threads_for(stripes))
    {
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            float *part = parts + s * slot;
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t q = s; q < groups; q += stripes) { /* group q: images qB, ... */
                const int64_t n = q * B, images = g->n - n < B ? g->n - n : B;
                const float *xn = x + n * g->h * g->w * C, *dyn = dy + n * g->ho * g->wo * O;
                const int64_t m = n + stripes * B; /* this stripe's next group */
                const int64_t next = m < g->n ? (g->n - m < B ? g->n - m : B) : 0;
                const float *nx = next ? x + m * g->h * g->w * C : NULL;
                const float *ndy = next ? dy + m * g->ho * g->wo * O : NULL;
                if (three) filter_image3(g, xn, dyn, part, nx, ndy);
                else filter_group(g, xn, dyn, images, part, nx, ndy, next);
            }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K; i++) {
            float sum = parts[i];
            for (int64_t s = 1; s < stripes; s++) sum += parts[s * slot + i];
            dw[i] = sum;
        }
    }
    return PR_OK;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else /* not x86-64: never called (the CPU probe finds no AVX-512) */

int pr_conv_direct_forward(const pr_window *g, const float *x, const float *w, float *y,
                           void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_direct_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                                  void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_direct_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                                   void *scratch) {
    return PR_ERR_INTERNAL;
}

#endif
