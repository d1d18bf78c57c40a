/* 1x1 convolutions at stride 1 without padding (a RegNet's pointwise
 * layers) with AVX2 + FMA: over the M = N*H*W pixels p, three GEMMs
 *
 *   forward          y[p, o]  = sum_c x[p, c] w[c, o]
 *   backprop_input   dx[p, c] = sum_o dy[p, o] w[c, o]
 *   backprop_filter  dw[c, o] = sum_p x[p, c] dy[p, o]
 *
 * with x, y, dx, dy read and written in place (pixel rows of channels).
 * One tile serves all three: C(m, j) (+)= sum_k A(m, k) B(k, j) for MR
 * rows m and NB blocks of 8 columns j, A broadcast, B loaded as vectors
 * (Georganas et al., SC18, section 3: the output tile in accumulators).
 * MR x NB <= 12 accumulators + NB vectors of B + the broadcast <= 16 ymm
 * registers; a step of k loads NB + MR values for MR * NB FMAs (4 x 3: 7
 * loads feed 12 FMAs).
 *   - forward / backprop_input: A = the rows of x / dy, B = w / w^T packed
 *     in panels of 24 columns (zero-padded), each row's sums over k in
 *     order; threads take blocks of rows;
 *   - backprop_filter: A(c, p) = x[p, c], B(p, o) = dy[p, o] in place,
 *     dw's tiles summed over fixed blocks of pixels (by the shape only) and
 *     added into dw in block order; threads take tiles, so the result does
 *     not depend on the thread count.
 * OpenBLAS's sgemm (the reference, im2col_blas) packs both operands for
 * every call, as costly as the products when one of the three sizes is a
 * few dozen: on an AMD EPYC Zen 3 (bench/conv.py --shapes "regnet 1x1",
 * batch 64, quiet) it ran a RegNet-200MF's 1x1 passes at 44-80% of the
 * AVX2 FMA peak, these at 45-83%, except the forward pass over 152 or more
 * input channels, which runs sgemm (FORWARD_MAX_C).
 *
 * Compiled per function for "avx2,fma" (run only when the CPU probe reports
 * both, ops_conv.c's avx2_pointwise variant); off x86-64 the entry points
 * are stubs. */
#include "conv_direct.h"

#define PANEL 24                /* columns of a packed panel of B: 3 blocks of 8 */
#define ROW_BLOCK 48            /* rows of A a thread takes at a time (forward, input gradient) */
#define PIXEL_BYTES (192 << 10) /* x and dy of a pixel block (filter gradient) */
/* Input channels below which the forward pass runs here: on RegNet-200MF's
 * 1x1 layers of 152 and 368 input channels sgemm's forward was level with
 * it in quiet runs and up to 30% faster in a contended one; below, this was
 * 1.0-1.4x sgemm (bench/results/conv_regnet1x1_avx2_amd_epyc_zen3.md). */
#define FORWARD_MAX_C 128

static int64_t panels(int64_t n) { return (n + PANEL - 1) / PANEL; }

int pr_conv_pointwise_avx2_supports(const pr_window *g, pr_conv_pass pass) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0 &&
           g->ho == g->h && g->wo == g->w && g->c >= 1 && g->o >= 1 &&
           (pass != PR_CONV_FORWARD || g->c < FORWARD_MAX_C);
}

/* Floats of B packed: panels of the output columns x the reduced size x 24. */
size_t pr_conv_pointwise_avx2_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    if (pass == PR_CONV_FORWARD) return sizeof(float) * (size_t)(panels(g->o) * g->c * PANEL);
    if (pass == PR_CONV_BACKPROP_INPUT) return sizeof(float) * (size_t)(panels(g->c) * g->o * PANEL);
    return 0;
}

#if defined(__x86_64__)

#include "avx2.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Pixels of a filter-gradient block: as many whose x and dy rows fit
 * PIXEL_BYTES, at least 16 (from the shape only). */
static int64_t pixel_block(const pr_window *g) {
    int64_t p = PIXEL_BYTES / (4 * (g->c + g->o));
    return p < 16 ? 16 : p;
}

/* C(m, j) (+)= sum_(k < K) A(m, k) B(k, j): A(m, k) = a[m*am + k*ak], B(k, j) =
 * the 8 floats at b + k*bk + 8*j (`blanes` of them in block NB - 1: the
 * rest read as zeros), C(m, j) = the 8 floats at c + m*ldc + 8*j (`lanes` in
 * block NB - 1), added to when `add`. */
typedef struct {
    const float *a;
    int64_t am, ak;
    const float *b;
    int64_t bk, K;
    float *c;
    int64_t ldc;
    int lanes, blanes, add;
} pw_args;

ALWAYS_INLINE void pw_body(const pw_args *A, const int MR, const int NB) {
    __m256 acc[3][8];
    UNROLL
    for (int j = 0; j < NB; j++)
        UNROLL
        for (int m = 0; m < MR; m++) acc[j][m] = _mm256_setzero_ps();
    const float *a = A->a, *b = A->b;
    const int64_t am = A->am, ak = A->ak, bk = A->bk, K = A->K;
    const int blanes = A->blanes;
    for (int64_t k = 0; k < K; k++, a += ak, b += bk) {
        __m256 bv[3];
        UNROLL
        for (int j = 0; j < NB; j++)
            bv[j] = j == NB - 1 ? load_block(b + 8 * j, blanes) : _mm256_loadu_ps(b + 8 * j);
        UNROLL
        for (int m = 0; m < MR; m++) {
            __m256 av = _mm256_broadcast_ss(a + m * am);
            UNROLL
            for (int j = 0; j < NB; j++) acc[j][m] = _mm256_fmadd_ps(av, bv[j], acc[j][m]);
        }
    }
    UNROLL
    for (int m = 0; m < MR; m++)
        UNROLL
        for (int j = 0; j < NB; j++) {
            float *d = A->c + m * A->ldc + 8 * j;
            int l = j == NB - 1 ? A->lanes : 8;
            store_block(d, A->add ? _mm256_add_ps(acc[j][m], load_block(d, l)) : acc[j][m], l);
        }
}

typedef void (*pw_fn)(const pw_args *);
#define PW(MR, NB) \
    AVX2_FN void pw_##MR##_##NB(const pw_args *A) { pw_body(A, MR, NB); }
PW(1, 1) PW(2, 1) PW(3, 1) PW(4, 1) PW(5, 1) PW(6, 1) PW(7, 1) PW(8, 1)
PW(1, 2) PW(2, 2) PW(3, 2) PW(4, 2) PW(5, 2) PW(6, 2)
PW(1, 3) PW(2, 3) PW(3, 3) PW(4, 3)
/* pw_fns[NB - 1][MR - 1] */
static const pw_fn pw_fns[3][8] = {
    {pw_1_1, pw_2_1, pw_3_1, pw_4_1, pw_5_1, pw_6_1, pw_7_1, pw_8_1},
    {pw_1_2, pw_2_2, pw_3_2, pw_4_2, pw_5_2, pw_6_2},
    {pw_1_3, pw_2_3, pw_3_3, pw_4_3}};
static const int max_rows[3] = {8, 6, 4}; /* MR of NB blocks: MR * NB <= 12 (8 for one) */

/* The tiles over rows [0, rows) of `all` and the columns [0, n) of one
 * panel (all.c, all.b at the panel): NB = the panel's blocks. */
static void panel_tiles(const pw_args *all, int64_t rows, int64_t n) {
    int nb = n > 16 ? 3 : n > 8 ? 2 : 1, mr = max_rows[nb - 1];
    int lanes = (int)(n - 8 * (nb - 1));
    for (int64_t m0 = 0; m0 < rows; m0 += mr) {
        int r = rows - m0 < mr ? (int)(rows - m0) : mr;
        pw_args t = *all;
        t.a += m0 * t.am;
        t.c += m0 * t.ldc;
        t.lanes = lanes;
        pw_fns[nb - 1][r - 1](&t);
    }
}

/* C[M, N] = A[M, K] Bp, A's rows lda apart, Bp packed by pack_panels. */
static void gemm_rows(int64_t M, int64_t K, int64_t N, const float *a, int64_t lda,
                      const float *bp, float *c) {
    const int64_t blocks = (M + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for schedule(dynamic) num_threads(pr_get_num_threads())
    for (int64_t i = 0; i < blocks; i++) {
        int64_t r0 = i * ROW_BLOCK, rows = M - r0 < ROW_BLOCK ? M - r0 : ROW_BLOCK;
        for (int64_t p = 0; p < panels(N); p++) {
            int64_t n = N - p * PANEL < PANEL ? N - p * PANEL : PANEL;
            pw_args t = {a + r0 * lda, lda, 1, bp + p * K * PANEL, PANEL, K,
                         c + r0 * N + p * PANEL, N, 8, 8, 0};
            panel_tiles(&t, rows, n);
        }
    }
}

/* Bp[p][k][24] = B(k, 24p + j), B(k, j) = src[k*sk + j*sj], zeros past n;
 * panels in parallel (368 x 368 floats took a tenth of a millisecond on one
 * thread, a fifth of the product's time). */
static void pack_panels(const float *src, int64_t K, int64_t n, int64_t sk, int64_t sj,
                        float *bp) {
#pragma omp parallel for schedule(static) num_threads(pr_get_num_threads()) if (K * n > 16384)
    for (int64_t p = 0; p < panels(n); p++) {
        float *d = bp + p * K * PANEL;
        int64_t cols = n - p * PANEL < PANEL ? n - p * PANEL : PANEL;
        for (int64_t k = 0; k < K; k++, d += PANEL) {
            const float *s = src + k * sk + p * PANEL * sj;
            int64_t j = 0;
            if (sj == 1) memcpy(d, s, sizeof(float) * (size_t)cols), j = cols;
            for (; j < cols; j++) d[j] = s[j * sj];
            for (; j < PANEL; j++) d[j] = 0.0f;
        }
    }
}

int pr_conv_pointwise_avx2_forward(const pr_window *g, const float *x, const float *w, float *y,
                                   void *scratch) {
    if (!pr_conv_pointwise_avx2_supports(g, PR_CONV_FORWARD)) return PR_ERR_INTERNAL;
    pack_panels(w, g->c, g->o, g->o, 1, scratch);
    gemm_rows(g->n * g->h * g->w, g->c, g->o, x, g->c, scratch, y);
    return PR_OK;
}

int pr_conv_pointwise_avx2_backprop_input(const pr_window *g, const float *dy, const float *w,
                                          float *dx, void *scratch) {
    if (!pr_conv_pointwise_avx2_supports(g, PR_CONV_BACKPROP_INPUT)) return PR_ERR_INTERNAL;
    pack_panels(w, g->o, g->c, 1, g->o, scratch); /* w^T: B(o, c) = w[c, o] */
    gemm_rows(g->n * g->h * g->w, g->o, g->c, dy, g->o, scratch, dx);
    return PR_OK;
}

/* The filter gradient's tiles: panel after panel of 24 output channels
 * (the last may be narrower), each cut into tiles of max_rows input
 * channels (4 in a full panel). */
typedef struct {
    int64_t C, O, last, rt, tiles; /* last: the last panel; rt: tiles of a full panel */
    int nb_last;
} filter_tiling;

static void filter_tiling_init(filter_tiling *f, const pr_window *g) {
    f->C = g->c, f->O = g->o, f->last = panels(g->o) - 1;
    int64_t n_last = g->o - f->last * PANEL;
    f->nb_last = n_last > 16 ? 3 : n_last > 8 ? 2 : 1;
    f->rt = (g->c + 3) / 4;
    f->tiles = f->last * f->rt + (g->c + max_rows[f->nb_last - 1] - 1) / max_rows[f->nb_last - 1];
}

/* dw's tile i += its sums over the np pixels from p0. */
static void filter_tile(const filter_tiling *f, int64_t i, const float *x, const float *dy,
                        int64_t p0, int64_t np, float *dw) {
    const int64_t C = f->C, O = f->O, full = f->last * f->rt;
    int64_t panel = i < full ? i / f->rt : f->last, ti = i < full ? i % f->rt : i - full;
    int nb = panel < f->last ? 3 : f->nb_last, mr = max_rows[nb - 1];
    int64_t c0 = ti * mr, o0 = panel * PANEL, n = O - o0 < PANEL ? O - o0 : PANEL;
    int rows = C - c0 < mr ? (int)(C - c0) : mr, lanes = (int)(n - 8 * (nb - 1));
    pw_args t = {x + p0 * C + c0, 1, C, dy + p0 * O + o0, O, np, dw + c0 * O + o0, O,
                 lanes, lanes, 1};
    pw_fns[nb - 1][rows - 1](&t);
}

int pr_conv_pointwise_avx2_backprop_filter(const pr_window *g, const float *x, const float *dy,
                                           float *dw, void *scratch) {
    (void)scratch;
    if (!pr_conv_pointwise_avx2_supports(g, PR_CONV_BACKPROP_FILTER)) return PR_ERR_INTERNAL;
    const int64_t M = g->n * g->h * g->w, P = pixel_block(g);
    filter_tiling f;
    filter_tiling_init(&f, g);
    memset(dw, 0, sizeof(float) * (size_t)(g->c * g->o));
    /* each thread a range of tiles, block of pixels after block (no barrier) */
#pragma omp parallel num_threads(pr_get_num_threads())
    {
#ifdef _OPENMP
        int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        int64_t tid = 0, nt = 1;
#endif
        for (int64_t p0 = 0; p0 < M; p0 += P)
            for (int64_t i = f.tiles * tid / nt; i < f.tiles * (tid + 1) / nt; i++)
                filter_tile(&f, i, x, dy, p0, M - p0 < P ? M - p0 : P, dw);
    }
    return PR_OK;
}

#else /* not x86-64: the caller's CPU check never lets these run */

int pr_conv_pointwise_avx2_forward(const pr_window *g, const float *x, const float *w, float *y,
                                   void *scratch) {
    (void)g, (void)x, (void)w, (void)y, (void)scratch;
    return PR_ERR_INTERNAL;
}
int pr_conv_pointwise_avx2_backprop_input(const pr_window *g, const float *dy, const float *w,
                                          float *dx, void *scratch) {
    (void)g, (void)dy, (void)w, (void)dx, (void)scratch;
    return PR_ERR_INTERNAL;
}
int pr_conv_pointwise_avx2_backprop_filter(const pr_window *g, const float *x, const float *dy,
                                           float *dw, void *scratch) {
    (void)g, (void)x, (void)dy, (void)dw, (void)scratch;
    return PR_ERR_INTERNAL;
}

#endif
