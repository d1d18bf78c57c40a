/* Grouped and depthwise convolutions with AVX2 + FMA (conv_grouped_avx2.h):
 * the sums of conv_grouped.c, per group a small matrix product on 8-wide
 * ymm registers.  With cg = C / groups input and og = O / groups output
 * channels a group, T = KH*KW taps and a chunk of P output pixels
 * (flattened over images, so that the 2x2 and 4x4 maps of a RegNet's last
 * stages still fill a tile):
 *
 *   forward          y[p, o]        = sum_(t, c) col[p, (t, c)] * w[t, c, o]
 *   backprop_input   dcol[p, (t,c)] = sum_o dy[p, o] * w[t, c, o],
 *                    added into dx at the pixel tap t of p reads (col2im)
 *   backprop_filter  dw[(t, c), o] += sum_p col[p, (t, c)] * dy[p, o]
 *
 * where col[p, (t, c)] is x at the input pixel tap t of output pixel p
 * reads, channel c of the group (zero where that pixel is padding): im2col
 * of one group and chunk (Chellapilla et al. 2006), copied 8 channels at
 * a time.  One tile function (gt_body) computes every product: WT rows x
 * NB blocks of 8 columns in NB*WT <= 12 accumulators + NB weight vectors +
 * one broadcast <= 16 registers (Georganas et al., SC18, section 3: the
 * output tile in registers), the rows' operand at a compile-time stride
 * (8 floats: panels packed [k / 8][row][8]; 1: the filter gradient's
 * row-major col), so that the broadcasts need one base register.  Column
 * blocks are 8 output channels of a group (forward, filter gradient: og
 * rounded up to 8, 16, 24... so group widths 8, 16, 24 fill one, two or
 * three registers) or (tap, 8 input channels) (input gradient).  The
 * results go through a table of row pointers, so that one tile function
 * stores y, adds into dx (a tap reading padding adds into a per-thread
 * scratch block instead: no test in the loop) or into dw.
 *
 * Depthwise convolutions (cg = og = 1) are vectors over 8 channels instead
 * (no product to share): each pixel sums its taps inside the image.
 *
 * Order of the sums: each output is summed in one tile over k in order,
 * the input gradient's contributions in pixel order and the filter
 * gradient over fixed stripes of images summed in stripe order, so that
 * the result does not depend on the thread count.  The padding's zeros are
 * multiplied in (as the im2col reference does); conv_grouped.c skips them,
 * which differs only for an Inf or NaN weight (forward) or dy (filter
 * gradient) next to the padding.
 *
 * Compiled per function for "avx2,fma" and run only when the CPU probe
 * reports both (ops_conv.c's avx2_grouped variant); off x86-64 the entry
 * points are stubs. */
#include "conv_grouped_avx2.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

#define MAX_THREADS 16        /* per-thread scratch areas; more threads are not used */
#define MAX_STRIPES 16        /* stripes of images (the filter gradient's partial sums) */
#define PANEL_FLOATS 8192     /* a chunk's col panel: 32 KB, L1 */
#define MAX_CHUNK 384         /* pixels a chunk, at most */
#define PARTIAL_BYTES ((int64_t)64 << 20) /* per-stripe partial dw, all stripes, at most */

typedef struct {
    const pr_window *g;
    int64_t G, cg, og, T, nbc, nbo, kc; /* kc = T * nbc * 8: col's row */
    int64_t P, hw, S;                   /* chunk pixels, pixels an image, stripes */
    int depthwise;                      /* cg == og == 1 */
} geo;

static void geo_init(geo *q, const pr_window *g, int64_t groups) {
    q->g = g;
    q->G = groups;
    q->cg = g->c / groups;
    q->og = g->o / groups;
    q->T = g->kh * g->kw;
    q->nbc = (q->cg + 7) / 8;
    q->nbo = (q->og + 7) / 8;
    q->kc = q->T * q->nbc * 8;
    int64_t p = PANEL_FLOATS / q->kc / 12 * 12;
    q->P = p < 12 ? 12 : p > MAX_CHUNK ? MAX_CHUNK : p;
    q->hw = g->ho * g->wo;
    q->S = g->n < MAX_STRIPES ? g->n : MAX_STRIPES;
    q->depthwise = q->cg == 1 && q->og == 1;
}

static int64_t r16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Floats of one thread's area: col panel, packed dy, the offset and
 * pointer tables (8 bytes an entry), the scratch block. */
static int64_t thread_floats(const geo *q) {
    int64_t nb = q->nbc > q->nbo ? q->nbc : q->nbo;
    return r16(q->P * q->kc) + r16(q->P * q->nbo * 8) + 2 * r16(2 * q->P * q->T) + r16(nb * 8 + 8);
}

static int64_t packed_floats(const geo *q, pr_conv_pass pass) {
    if (q->depthwise) return 0;
    if (pass == PR_CONV_FORWARD) return r16(q->G * q->kc * q->nbo * 8);
    if (pass == PR_CONV_BACKPROP_INPUT) return r16(q->G * q->nbo * 8 * q->kc);
    return 0;
}

/* Whether the filter gradient sums per stripe of images into partial dw
 * (then adds them in stripe order) rather than per group straight into dw. */
static int filter_partials(const geo *q) {
    int64_t dw = q->T * q->cg * q->g->o;
    return q->depthwise || (q->G < 8 && 4 * q->S * dw <= PARTIAL_BYTES);
}

size_t pr_conv_grouped_avx2_scratch_bytes(const pr_window *g, int64_t groups, pr_conv_pass pass) {
    geo q;
    geo_init(&q, g, groups);
    int64_t f = packed_floats(&q, pass) + MAX_THREADS * thread_floats(&q);
    if (pass == PR_CONV_BACKPROP_FILTER && filter_partials(&q))
        f += q.S * r16(q.T * q.cg * g->o);
    return sizeof(float) * (size_t)f;
}

#if defined(__x86_64__)

#include <immintrin.h>

#define AVX2_FN static __attribute__((target("avx2,fma")))
#define ALWAYS_INLINE static inline __attribute__((always_inline, target("avx2,fma")))
#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 64")
#endif

static const int32_t lane_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

ALWAYS_INLINE __m256i lane_mask(int lanes) {
    return _mm256_loadu_si256((const __m256i *)(lane_table + 8 - lanes));
}
ALWAYS_INLINE __m256 load_block(const float *p, int lanes) {
    return lanes == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(lanes));
}
ALWAYS_INLINE void store_block(float *p, __m256 v, int lanes) {
    if (lanes == 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, lane_mask(lanes), v);
}
/* Channels of block b of n channels in blocks of 8 (8 but in the last). */
static int lanes_of(int64_t b, int64_t n) { return n - 8 * b >= 8 ? 8 : (int)(n - 8 * b); }

/* ---- the tile ------------------------------------------------------------------ */

/* C(m, j) (+)= sum_k A(m, k) B(k, j) for m < WT rows and j < NB blocks of 8
 * columns: A(m, k) = a[(k / KI) * astep + k % KI + m * LDA], k < nkb * KI;
 * B(k, j) = the 8 floats at b + k * bk + j * bb; C(m, j) = the jl[j]
 * floats at cp[m * cps + jt[j]] + jo[j], stored or (add) added. */
typedef struct {
    const float *a;
    int64_t astep, nkb;
    const float *b;
    int64_t bk, bb;
    float *const *cp;
    int64_t cps;
    const int64_t *jt, *jo;
    const int *jl;
    int add;
} gt_args;

ALWAYS_INLINE void gt_body(const gt_args *A, const int WT, const int NB, const int LDA,
                           const int KI) {
    __m256 acc[3][12];
    UNROLL
    for (int j = 0; j < NB; j++)
        UNROLL
        for (int m = 0; m < WT; m++) acc[j][m] = _mm256_setzero_ps();
    const float *a = A->a, *b = A->b;
    const int64_t bk = A->bk, bb = A->bb, astep = A->astep;
    for (int64_t kb = 0; kb < A->nkb; kb++, a += astep) {
        UNROLL
        for (int kk = 0; kk < KI; kk++) {
            __m256 wv[3];
            UNROLL
            for (int j = 0; j < NB; j++) wv[j] = _mm256_loadu_ps(b + j * bb);
            b += bk;
            UNROLL
            for (int m = 0; m < WT; m++) {
                __m256 xv = _mm256_broadcast_ss(a + kk + m * LDA);
                UNROLL
                for (int j = 0; j < NB; j++) acc[j][m] = _mm256_fmadd_ps(xv, wv[j], acc[j][m]);
            }
        }
    }
    UNROLL
    for (int m = 0; m < WT; m++)
        UNROLL
        for (int j = 0; j < NB; j++) {
            float *d = A->cp[m * A->cps + A->jt[j]] + A->jo[j];
            int l = A->jl[j];
            __m256 v = acc[j][m];
            if (A->add) v = _mm256_add_ps(v, load_block(d, l));
            store_block(d, v, l);
        }
}

typedef void (*gt_fn)(const gt_args *);

/* Instances: L = 8 (panels [k / 8][row][8], KI = 8) or 1 (row-major col, KI = 1). */
#define GT(WT, NB, L) \
    AVX2_FN void gt_##WT##_##NB##_##L(const gt_args *A) { gt_body(A, WT, NB, L, L); }
#define GTS(L)                                                                                 \
    GT(1, 1, L) GT(2, 1, L) GT(3, 1, L) GT(4, 1, L) GT(5, 1, L) GT(6, 1, L) GT(7, 1, L)        \
    GT(8, 1, L) GT(9, 1, L) GT(10, 1, L) GT(11, 1, L) GT(12, 1, L) GT(1, 2, L) GT(2, 2, L)     \
    GT(3, 2, L) GT(4, 2, L) GT(5, 2, L) GT(6, 2, L) GT(1, 3, L) GT(2, 3, L) GT(3, 3, L)        \
    GT(4, 3, L)
GTS(8)
GTS(1)
#define GT_REFS(L)                                                                             \
    {{gt_1_1_##L, gt_2_1_##L, gt_3_1_##L, gt_4_1_##L, gt_5_1_##L, gt_6_1_##L, gt_7_1_##L,     \
      gt_8_1_##L, gt_9_1_##L, gt_10_1_##L, gt_11_1_##L, gt_12_1_##L},                         \
     {gt_1_2_##L, gt_2_2_##L, gt_3_2_##L, gt_4_2_##L, gt_5_2_##L, gt_6_2_##L},                 \
     {gt_1_3_##L, gt_2_3_##L, gt_3_3_##L, gt_4_3_##L}}
/* gt_fns[L == 1][NB - 1][WT - 1] */
static const gt_fn gt_fns[2][3][12] = {GT_REFS(8), GT_REFS(1)};

/* C = A B over M rows and NJ column blocks: tiles of NB = min(3, blocks
 * left) blocks x 12 / NB rows.  t holds a, b, cp, jt, jo, jl for row 0,
 * block 0; lda: A's row stride (8 or 1). */
static void run_tiles(const gt_args *t, int64_t M, int64_t NJ, int lda) {
    for (int64_t j0 = 0; j0 < NJ; j0 += 3) {
        int nb = NJ - j0 < 3 ? (int)(NJ - j0) : 3;
        int wt = 12 / nb;
        for (int64_t m0 = 0; m0 < M; m0 += wt) {
            int rows = M - m0 < wt ? (int)(M - m0) : wt;
            gt_args A = *t;
            A.a += m0 * lda;
            A.b += j0 * A.bb;
            A.cp += m0 * A.cps;
            A.jt += j0;
            A.jo += j0;
            A.jl += j0;
            gt_fns[lda == 1][nb - 1][rows - 1](&A);
        }
    }
}

/* ---- operands ------------------------------------------------------------------- */

/* Per-thread area (thread_floats). */
typedef struct {
    float *col, *dyb, *trash;
    int64_t *off;
    float **cp;
} area;

static area thread_area(const geo *q, float *base, int tid) {
    float *f = base + tid * thread_floats(q);
    area r;
    r.col = f;
    f += r16(q->P * q->kc);
    r.dyb = f;
    f += r16(q->P * q->nbo * 8);
    r.off = (int64_t *)f;
    f += r16(2 * q->P * q->T);
    r.cp = (float **)f;
    f += r16(2 * q->P * q->T);
    r.trash = f;
    return r;
}

/* off[p * T + t]: the NHWC offset (times C) of the input pixel tap t of
 * output pixel q0 + p reads, -1 for padding. */
static void tap_offsets(const geo *q, int64_t q0, int64_t np, int64_t *off) {
    const pr_window *g = q->g;
    for (int64_t p = 0; p < np; p++) {
        int64_t pix = q0 + p, n = pix / q->hw, r = pix % q->hw, oh = r / g->wo, ow = r % g->wo;
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t ih = oh * g->sh - g->ph + kh;
            for (int64_t kw = 0; kw < g->kw; kw++) {
                int64_t iw = ow * g->sw - g->pw + kw;
                off[p * q->T + kh * g->kw + kw] =
                    ih < 0 || ih >= g->h || iw < 0 || iw >= g->w ? -1
                                                                 : ((n * g->h + ih) * g->w + iw) * g->c;
            }
        }
    }
}

/* Group gi's channels of the pixel at off (-1: zeros) as nbc blocks of 8
 * at dst, dst + step, ... (zero-padded). */
ALWAYS_INLINE void copy_channels(const geo *q, const float *x, int64_t off, int64_t gi, float *dst,
                           int64_t step) {
    if (off < 0) {
        for (int64_t b = 0; b < q->nbc; b++) _mm256_storeu_ps(dst + b * step, _mm256_setzero_ps());
        return;
    }
    const float *s = x + off + gi * q->cg;
    for (int64_t b = 0; b < q->nbc; b++)
        _mm256_storeu_ps(dst + b * step, load_block(s + 8 * b, lanes_of(b, q->cg)));
}

/* The forward's panel of group gi: col[(t, cb)][p][8] (P rows a block). */
AVX2_FN void build_panel(const geo *q, const float *x, const int64_t *off, int64_t np, int64_t gi,
                         float *col) {
    for (int64_t p = 0; p < np; p++)
        for (int64_t t = 0; t < q->T; t++)
            copy_channels(q, x, off[p * q->T + t], gi, col + (t * q->nbc * q->P + p) * 8,
                          q->P * 8);
}

/* The filter gradient's col of group gi, row-major: col[p][(t, c)] (kc a row). */
AVX2_FN void build_rows(const geo *q, const float *x, const int64_t *off, int64_t np, int64_t gi,
                        float *col) {
    for (int64_t p = 0; p < np; p++)
        for (int64_t t = 0; t < q->T; t++)
            copy_channels(q, x, off[p * q->T + t], gi, col + p * q->kc + t * q->nbc * 8, 8);
}

/* dy of group gi, pixels q0 .. q0 + np, as blocks [ob][p][8] (P rows a block). */
AVX2_FN void pack_dy(const geo *q, const float *dy, int64_t q0, int64_t np, int64_t gi,
                     float *dyb) {
    const int64_t O = q->g->o;
    for (int64_t p = 0; p < np; p++) {
        const float *s = dy + (q0 + p) * O + gi * q->og;
        for (int64_t b = 0; b < q->nbo; b++)
            _mm256_storeu_ps(dyb + (b * q->P + p) * 8, load_block(s + 8 * b, lanes_of(b, q->og)));
    }
}

/* jt of the tiles whose column blocks all go to one pointer a row. */
static const int64_t zeros64[64] = {0};

/* ---- forward ---------------------------------------------------------------------- */

/* wp[gi][k = (t, c)][ob][8] = w[t, c, gi * og + 8 * ob + lane], zeros past cg and og. */
static void pack_forward(const geo *q, const float *w, float *wp) {
    const int64_t O = q->g->o, nbo8 = q->nbo * 8;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (q->G * q->kc * nbo8 >= 65536)
    for (int64_t gi = 0; gi < q->G; gi++)
        for (int64_t t = 0; t < q->T; t++)
            for (int64_t c = 0; c < q->nbc * 8; c++) {
                float *d = wp + (gi * q->kc + t * q->nbc * 8 + c) * nbo8;
                for (int64_t o = 0; o < nbo8; o++)
                    d[o] = c < q->cg && o < q->og ? w[(t * q->cg + c) * O + gi * q->og + o] : 0.0f;
            }
}

AVX2_FN void dw_forward(const geo *q, const float *x, const float *w, float *y, void *scratch);
AVX2_FN void dw_backprop_input(const geo *q, const float *dy, const float *w, float *dx,
                               void *scratch);
AVX2_FN void dw_backprop_filter(const geo *q, const float *x, const float *dy, float *dw,
                                void *scratch);

static int threads_for(int64_t units) {
    int64_t t = pr_get_num_threads();
    if (t > MAX_THREADS) t = MAX_THREADS;
    return (int)(units < 1 ? 1 : units < t ? units : t);
}

/* Pixels [*q0, *q1) of stripe s (whole images). */
static void stripe_pixels(const geo *q, int64_t s, int64_t *q0, int64_t *q1) {
    *q0 = q->g->n * s / q->S * q->hw;
    *q1 = q->g->n * (s + 1) / q->S * q->hw;
}

int pr_conv_grouped_avx2_forward(const pr_window *g, int64_t groups, const float *x,
                                 const float *w, float *y, void *scratch) {
    geo q;
    geo_init(&q, g, groups);
    if (q.depthwise) {
        dw_forward(&q, x, w, y, scratch);
        return PR_OK;
    }
    float *wp = scratch, *areas = wp + packed_floats(&q, PR_CONV_FORWARD);
    pack_forward(&q, w, wp);
    int64_t jo[64];
    int jl[64];
    if (q.nbo > 64) return PR_ERR_INTERNAL; /* > 512 channels a group: not taken (supports) */
    for (int64_t b = 0; b < q.nbo; b++) jo[b] = 8 * b, jl[b] = lanes_of(b, q.og);
#pragma omp parallel for num_threads(threads_for(q.S)) schedule(dynamic)
    for (int64_t s = 0; s < q.S; s++) {
        area ar = thread_area(&q, areas, THREAD_ID());
        int64_t s0, s1;
        stripe_pixels(&q, s, &s0, &s1);
        for (int64_t q0 = s0; q0 < s1; q0 += q.P) {
            int64_t np = s1 - q0 < q.P ? s1 - q0 : q.P;
            tap_offsets(&q, q0, np, ar.off);
            for (int64_t gi = 0; gi < q.G; gi++) {
                build_panel(&q, x, ar.off, np, gi, ar.col);
                for (int64_t p = 0; p < np; p++) ar.cp[p] = y + (q0 + p) * g->o + gi * q.og;
                gt_args t = {ar.col, q.P * 8, q.T * q.nbc, wp + gi * q.kc * q.nbo * 8,
                             q.nbo * 8, 8, ar.cp, 1, zeros64, jo, jl, 0};
                run_tiles(&t, np, q.nbo, 8);
            }
        }
    }
    return PR_OK;
}

/* ---- backprop_input ----------------------------------------------------------------- */

/* wp[gi][o][j = (t, cb)][8] = w[t, 8 * cb + lane, gi * og + o], zeros past cg and og. */
static void pack_backprop_input(const geo *q, const float *w, float *wp) {
    const int64_t O = q->g->o, nbo8 = q->nbo * 8, nbc8 = q->nbc * 8;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (q->G * q->kc * nbo8 >= 65536)
    for (int64_t gi = 0; gi < q->G; gi++)
        for (int64_t o = 0; o < nbo8; o++)
            for (int64_t t = 0; t < q->T; t++)
                for (int64_t c = 0; c < nbc8; c++)
                    wp[(gi * nbo8 + o) * q->kc + t * nbc8 + c] =
                        c < q->cg && o < q->og ? w[(t * q->cg + c) * O + gi * q->og + o] : 0.0f;
}

int pr_conv_grouped_avx2_backprop_input(const pr_window *g, int64_t groups, const float *dy,
                                        const float *w, float *dx, void *scratch) {
    geo q;
    geo_init(&q, g, groups);
    if (q.depthwise) {
        dw_backprop_input(&q, dy, w, dx, scratch);
        return PR_OK;
    }
    float *wp = scratch, *areas = wp + packed_floats(&q, PR_CONV_BACKPROP_INPUT);
    pack_backprop_input(&q, w, wp);
    const int64_t NJ = q.T * q.nbc;
    int64_t *jtv = malloc(sizeof(int64_t) * 2 * (size_t)NJ);
    int *jlv = malloc(sizeof(int) * (size_t)NJ);
    if (!jtv || !jlv) {
        free(jtv);
        free(jlv);
        return PR_ERR_MEMORY;
    }
    int64_t *jov = jtv + NJ;
    for (int64_t j = 0; j < NJ; j++) {
        jtv[j] = j / q.nbc;
        jov[j] = 8 * (j % q.nbc);
        jlv[j] = lanes_of(j % q.nbc, q.cg);
    }
    const int64_t image = g->h * g->w * g->c;
#pragma omp parallel for num_threads(threads_for(q.S)) schedule(dynamic)
    for (int64_t s = 0; s < q.S; s++) {
        area ar = thread_area(&q, areas, THREAD_ID());
        int64_t s0, s1;
        stripe_pixels(&q, s, &s0, &s1);
        int64_t n0 = g->n * s / q.S, n1 = g->n * (s + 1) / q.S;
        memset(dx + n0 * image, 0, sizeof(float) * (size_t)((n1 - n0) * image));
        for (int64_t q0 = s0; q0 < s1; q0 += q.P) {
            int64_t np = s1 - q0 < q.P ? s1 - q0 : q.P;
            tap_offsets(&q, q0, np, ar.off);
            for (int64_t gi = 0; gi < q.G; gi++) {
                pack_dy(&q, dy, q0, np, gi, ar.dyb);
                for (int64_t i = 0; i < np * q.T; i++)
                    ar.cp[i] = ar.off[i] < 0 ? ar.trash : dx + ar.off[i] + gi * q.cg;
                gt_args t = {ar.dyb, q.P * 8, q.nbo, wp + gi * q.nbo * 8 * q.kc, q.kc, 8,
                             ar.cp, q.T, jtv, jov, jlv, 1};
                run_tiles(&t, np, NJ, 8);
            }
        }
    }
    free(jtv);
    free(jlv);
    return PR_OK;
}

/* ---- backprop_filter ----------------------------------------------------------------- */

/* dst (T, cg, O) += the group's sums over pixels [p0, p1) (ar's tables). */
AVX2_FN void filter_group(const geo *q, const float *x, const float *dy, int64_t gi,
                          int64_t p0, int64_t p1, float *dst, const area *ar, const int64_t *jo,
                          const int *jl) {
    const int64_t O = q->g->o, nbc8 = q->nbc * 8;
    for (int64_t r = 0; r < q->kc; r++) {
        int64_t t = r / nbc8, c = r % nbc8;
        ar->cp[r] = c < q->cg ? dst + (t * q->cg + c) * O + gi * q->og : ar->trash;
    }
    for (int64_t q0 = p0; q0 < p1; q0 += q->P) {
        int64_t np = p1 - q0 < q->P ? p1 - q0 : q->P;
        tap_offsets(q, q0, np, ar->off);
        build_rows(q, x, ar->off, np, gi, ar->col);
        pack_dy(q, dy, q0, np, gi, ar->dyb);
        gt_args a = {ar->col, q->kc, np, ar->dyb, 8, q->P * 8, ar->cp, 1, zeros64, jo, jl, 1};
        run_tiles(&a, q->kc, q->nbo, 1);
    }
}

int pr_conv_grouped_avx2_backprop_filter(const pr_window *g, int64_t groups, const float *x,
                                         const float *dy, float *dw, void *scratch) {
    geo q;
    geo_init(&q, g, groups);
    if (q.depthwise) {
        dw_backprop_filter(&q, x, dy, dw, scratch);
        return PR_OK;
    }
    if (q.nbo > 64) return PR_ERR_INTERNAL;
    int64_t jo[64];
    int jl[64];
    for (int64_t b = 0; b < q.nbo; b++) jo[b] = 8 * b, jl[b] = lanes_of(b, q.og);
    float *areas = scratch;
    const int64_t K = q.T * q.cg * g->o;
    if (!filter_partials(&q)) {
        /* per group, over every image, straight into dw */
#pragma omp parallel for num_threads(threads_for(q.G)) schedule(dynamic)
        for (int64_t gi = 0; gi < q.G; gi++) {
            area ar = thread_area(&q, areas, THREAD_ID());
            for (int64_t r = 0; r < q.T * q.cg; r++)
                memset(dw + r * g->o + gi * q.og, 0, sizeof(float) * (size_t)q.og);
            filter_group(&q, x, dy, gi, 0, g->n * q.hw, dw, &ar, jo, jl);
        }
        return PR_OK;
    }
    float *parts = areas + MAX_THREADS * thread_floats(&q);
    const int64_t slot = r16(K);
#pragma omp parallel num_threads(threads_for(q.S))
    {
#pragma omp for schedule(dynamic)
        for (int64_t s = 0; s < q.S; s++) {
            area ar = thread_area(&q, areas, THREAD_ID());
            float *part = parts + s * slot;
            int64_t s0, s1;
            stripe_pixels(&q, s, &s0, &s1);
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t gi = 0; gi < q.G; gi++) filter_group(&q, x, dy, gi, s0, s1, part, &ar, jo, jl);
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K; i++) {
            float sum = parts[i];
            for (int64_t s = 1; s < q.S; s++) sum += parts[s * slot + i];
            dw[i] = sum;
        }
    }
    return PR_OK;
}

/* ---- depthwise (cg = og = 1): vectors over 8 channels ---------------------------------- */

AVX2_FN void dw_forward(const geo *q, const float *x, const float *w, float *y, void *scratch) {
    const pr_window *g = q->g;
    const int64_t C = g->c, nb = (C + 7) / 8;
    float *areas = scratch;
#pragma omp parallel for num_threads(threads_for(q->S)) schedule(dynamic)
    for (int64_t s = 0; s < q->S; s++) {
        area ar = thread_area(q, areas, THREAD_ID());
        int64_t s0, s1;
        stripe_pixels(q, s, &s0, &s1);
        for (int64_t pix = s0; pix < s1; pix++) {
            tap_offsets(q, pix, 1, ar.off);
            for (int64_t b = 0; b < nb; b++) {
                int l = lanes_of(b, C);
                __m256 acc = _mm256_setzero_ps();
                for (int64_t t = 0; t < q->T; t++) {
                    if (ar.off[t] < 0) continue;
                    acc = _mm256_fmadd_ps(load_block(x + ar.off[t] + 8 * b, l),
                                          load_block(w + t * C + 8 * b, l), acc);
                }
                store_block(y + pix * C + 8 * b, acc, l);
            }
        }
    }
}

AVX2_FN void dw_backprop_input(const geo *q, const float *dy, const float *w, float *dx,
                               void *scratch) {
    const pr_window *g = q->g;
    const int64_t C = g->c, nb = (C + 7) / 8, image = g->h * g->w * C;
    float *areas = scratch;
#pragma omp parallel for num_threads(threads_for(q->S)) schedule(dynamic)
    for (int64_t s = 0; s < q->S; s++) {
        area ar = thread_area(q, areas, THREAD_ID());
        int64_t s0, s1, n0 = g->n * s / q->S, n1 = g->n * (s + 1) / q->S;
        stripe_pixels(q, s, &s0, &s1);
        memset(dx + n0 * image, 0, sizeof(float) * (size_t)((n1 - n0) * image));
        for (int64_t pix = s0; pix < s1; pix++) {
            tap_offsets(q, pix, 1, ar.off);
            for (int64_t b = 0; b < nb; b++) {
                int l = lanes_of(b, C);
                __m256 d = load_block(dy + pix * C + 8 * b, l);
                for (int64_t t = 0; t < q->T; t++) {
                    if (ar.off[t] < 0) continue;
                    float *p = dx + ar.off[t] + 8 * b;
                    store_block(p, _mm256_fmadd_ps(d, load_block(w + t * C + 8 * b, l),
                                                   load_block(p, l)), l);
                }
            }
        }
    }
}

AVX2_FN void dw_backprop_filter(const geo *q, const float *x, const float *dy, float *dw,
                                void *scratch) {
    const pr_window *g = q->g;
    const int64_t C = g->c, nb = (C + 7) / 8, K = q->T * C, slot = r16(K);
    float *areas = scratch, *parts = areas + MAX_THREADS * thread_floats(q);
#pragma omp parallel num_threads(threads_for(q->S))
    {
#pragma omp for schedule(dynamic)
        for (int64_t s = 0; s < q->S; s++) {
            area ar = thread_area(q, areas, THREAD_ID());
            float *part = parts + s * slot;
            int64_t s0, s1;
            stripe_pixels(q, s, &s0, &s1);
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t pix = s0; pix < s1; pix++) {
                tap_offsets(q, pix, 1, ar.off);
                for (int64_t b = 0; b < nb; b++) {
                    int l = lanes_of(b, C);
                    __m256 d = load_block(dy + pix * C + 8 * b, l);
                    for (int64_t t = 0; t < q->T; t++) {
                        if (ar.off[t] < 0) continue;
                        float *p = part + t * C + 8 * b;
                        store_block(p, _mm256_fmadd_ps(load_block(x + ar.off[t] + 8 * b, l), d,
                                                       load_block(p, l)), l);
                    }
                }
            }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K; i++) {
            float sum = parts[i];
            for (int64_t s = 1; s < q->S; s++) sum += parts[s * slot + i];
            dw[i] = sum;
        }
    }
}

#else /* not x86-64: no AVX2; the variant's CPU check never lets these run */

int pr_conv_grouped_avx2_forward(const pr_window *g, int64_t groups, const float *x,
                                 const float *w, float *y, void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_grouped_avx2_backprop_input(const pr_window *g, int64_t groups, const float *dy,
                                        const float *w, float *dx, void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_grouped_avx2_backprop_filter(const pr_window *g, int64_t groups, const float *x,
                                         const float *dy, float *dw, void *scratch) {
    return PR_ERR_INTERNAL;
}

#endif
