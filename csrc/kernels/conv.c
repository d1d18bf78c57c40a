/* 2D convolution by im2col + OpenBLAS sgemm, fused per small block.
 *
 * Layouts: x NHWC (N, H, W, C), filter HWIO (KH, KW, C, O), y NHWC
 * (N, HO, WO, O).  The im2col matrix has one row per output pixel
 * (n, oh, ow) and K = KH*KW*C columns ordered (kh, kw, c), which is exactly
 * the row order of the HWIO filter seen as a (K, O) matrix, so
 *   y = col @ w,   dcol = dy @ w^T (then col2im),   dw = col^T @ dy
 * (Chellapilla et al., "High Performance Convolutional Neural Networks for
 * Document Processing", 2006, section 3).  In NHWC, the KW taps of one
 * filter row read KW*C consecutive floats of x, so im2col is one memcpy per
 * (output pixel, kh) plus zero fill at the borders.  A 1x1 stride-1
 * unpadded conv needs no im2col: x itself is the (N*H*W, C) matrix.
 *
 * Each pass is one OpenMP parallel loop over independent work units; a
 * thread builds a block's im2col rows in its own scratch slot and
 * multiplies them while they are still in cache (pr_sgemm runs on the
 * calling thread inside a parallel region, and OpenBLAS keeps no threads of
 * its own, so nothing oversubscribes the cores):
 *   forward          blocks of output rows (any batch size);
 *   backprop_input   one image per unit: dcol block by block, then col2im,
 *                    which gathers per input row in a fixed order;
 *   backprop_filter  blocks of output rows dealt round-robin to a fixed
 *                    number of stripes; each stripe sums its blocks into
 *                    its own partial dw and the partials are added in
 *                    stripe order.
 * The work split depends only on the shapes, never on the thread count,
 * so results are identical for any number of threads.
 */
#include "conv.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

/* Block size: OpenBLAS multiplies without packing when M*N*K <= 100^3 (its
 * small-matrix kernels, kernel/x86_64/sgemm_small_kernel_permit_skylakex.c),
 * which is up to 25% faster on these thin products, so blocks stay below
 * that and below BLOCK_BYTES of im2col rows. */
#define SMALL_MNK 1000000
#define BLOCK_BYTES ((size_t)128 << 10)
#define SLOT_BUDGET ((size_t)32 << 20)   /* scratch for all slots together, roughly */
#define MAX_SLOTS 16                     /* at most this many threads share one conv */
#define PW_ROWS 128                      /* rows per block of a pointwise conv, at least */

int64_t pr_window_out_size(int64_t in, int64_t k, int64_t s, int same, int64_t *pad_before) {
    if (same) {
        int64_t out = (in + s - 1) / s;
        int64_t total = (out - 1) * s + k - in;
        *pad_before = total > 0 ? total / 2 : 0;
        return out;
    }
    *pad_before = 0;
    return in >= k ? (in - k) / s + 1 : 0;
}

static int is_pointwise(const pr_window *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

static int64_t col_width(const pr_window *g) { return g->kh * g->kw * g->c; }

/* Output rows per block (see SMALL_MNK), a multiple of 16 when possible.
 * A pointwise conv's blocks are rows of x itself (no im2col buffer): at
 * least PW_ROWS of them, since a product of wide channels (RegNet's 368 ->
 * 368) would otherwise get blocks of a few rows, on which sgemm repacks the
 * whole filter for every few pixels (2-3x slower, bench/conv.py --shapes
 * "regnet 1x1"). */
static int64_t block_rows(const pr_window *g) {
    int64_t k = col_width(g), r = SMALL_MNK / (k * g->o);
    int64_t by_bytes = (int64_t)(BLOCK_BYTES / (sizeof(float) * (size_t)k));
    if (r > by_bytes) r = by_bytes;
    if (is_pointwise(g) && r < PW_ROWS) r = PW_ROWS;
    return r >= 32 ? r / 16 * 16 : (r > 0 ? r : 1);
}

static int64_t count_blocks(const pr_window *g) {
    int64_t m = g->n * g->ho * g->wo, r = block_rows(g);
    return (m + r - 1) / r;
}

/* Scratch slots for `units` parallel work units of slot_floats each: at most
 * MAX_SLOTS, and no more than SLOT_BUDGET allows (but at least one). */
static int64_t count_slots(int64_t units, int64_t slot_floats) {
    int64_t budget = (int64_t)(SLOT_BUDGET / (sizeof(float) * (size_t)(slot_floats ? slot_floats : 1)));
    int64_t s = units < MAX_SLOTS ? units : MAX_SLOTS;
    if (s > budget) s = budget > 1 ? budget : 1;
    return units ? s : 0;
}

static int threads_for(int64_t slots) {
    int64_t t = pr_get_num_threads();
    return (int)(slots < 1 ? 1 : slots < t ? slots : t);
}

/* Per pass: the slot count and the floats of one slot's im2col buffer
 * (0 for pointwise convs, which read x in place). */
static int64_t forward_col_floats(const pr_window *g) {
    return is_pointwise(g) ? 0 : block_rows(g) * col_width(g);
}
static int64_t bpi_col_floats(const pr_window *g) {
    return is_pointwise(g) ? 0 : g->ho * g->wo * col_width(g);
}

size_t pr_conv2d_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    int64_t floats = 0, K = col_width(g);
    switch (pass) {
    case PR_CONV_FORWARD:
        floats = count_slots(count_blocks(g), forward_col_floats(g)) * forward_col_floats(g);
        break;
    case PR_CONV_BACKPROP_INPUT: /* w^T, then the slots */
        floats = K * g->o + count_slots(g->n, bpi_col_floats(g)) * bpi_col_floats(g);
        break;
    case PR_CONV_BACKPROP_FILTER: {
        int64_t slot = forward_col_floats(g) + K * g->o;
        floats = count_slots(count_blocks(g), slot) * slot;
        break;
    }
    }
    return sizeof(float) * (size_t)floats;
}

static void copy_f32(const void *x, int64_t src, int64_t count, void *dst) {
    memcpy(dst, (const float *)x + src, sizeof(float) * (size_t)count);
}

/* col (m rows of K) <- the im2col rows of output pixels r0 .. r0 + m - 1
 * (numbered n-major over the whole batch). */
static void im2col_rows(const pr_window *g, const float *x, int64_t r0, int64_t m, float *col) {
    pr_im2col_rows(g, r0, m, col, col_width(g), sizeof(float), copy_f32, x);
}

/* dx of one image <- for every input position, the sum of the dcol entries
 * that im2col copied from it, gathered row by row in (kh, ow) order. */
static void col2im_image(const pr_window *g, const float *dcol, float *dx) {
    const int64_t C = g->c, K = col_width(g), KWC = g->kw * C, rowlen = g->w * C;
    memset(dx, 0, sizeof(float) * (size_t)(g->h * rowlen));
    for (int64_t ih = 0; ih < g->h; ih++) {
        float *dxr = dx + ih * rowlen;
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t t = ih + g->ph - kh; /* = oh * sh */
            if (t < 0 || t % g->sh) continue;
            int64_t oh = t / g->sh;
            if (oh >= g->ho) continue;
            const float *src = dcol + oh * g->wo * K + kh * KWC;
            for (int64_t ow = 0; ow < g->wo; ow++, src += K) {
                int64_t lo, hi, iw0 = ow * g->sw - g->pw;
                pr_window_taps(iw0, g->kw, g->w, &lo, &hi);
                float *d = dxr + (iw0 + lo) * C;
                const float *s = src + lo * C;
                for (int64_t i = 0; i < (hi - lo) * C; i++) d[i] += s[i];
            }
        }
    }
}

/* The im2col rows of block [r0, r0 + m): x itself for pointwise convs. */
static const float *block_cols(const pr_window *g, const float *x, int64_t r0, int64_t m,
                               float *slot) {
    if (is_pointwise(g)) return x + r0 * g->c;
    im2col_rows(g, x, r0, m, slot);
    return slot;
}

int pr_conv2d_forward(const pr_window *g, const float *x, const float *w, float *y,
                      void *scratch) {
    const int64_t K = col_width(g), O = g->o, M = g->n * g->ho * g->wo, R = block_rows(g);
    const int64_t nb = count_blocks(g), slot = forward_col_floats(g);
    float *slots = scratch;
#pragma omp parallel num_threads(threads_for(count_slots(nb, slot)))
    {
        float *col = slots ? slots + THREAD_ID() * slot : NULL;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            int64_t r0 = b * R, m = M - r0 < R ? M - r0 : R;
            const float *a = block_cols(g, x, r0, m, col);
            pr_sgemm(0, 0, m, O, K, 1.0f, a, K, w, O, 0.0f, y + r0 * O, O);
        }
    }
    return PR_OK;
}

int pr_conv2d_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                             void *scratch) {
    const int64_t K = col_width(g), O = g->o, P = g->ho * g->wo, R = block_rows(g);
    const int64_t image = g->h * g->w * g->c, slot = bpi_col_floats(g);
    /* dcol = dy @ w^T, with w^T (O, K) stored so that sgemm sees plain
     * row-major operands (its small-matrix path takes no transposed A). */
    float *wt = scratch, *slots = wt + K * O;
    for (int64_t i = 0; i < K; i++)
        for (int64_t o = 0; o < O; o++) wt[o * K + i] = w[i * O + o];
    if (is_pointwise(g)) { /* dx = dy @ w^T in blocks of rows across the images */
        const int64_t M = g->n * P, nb = count_blocks(g);
#pragma omp parallel for schedule(static) num_threads(threads_for(count_slots(nb, 0)))
        for (int64_t b = 0; b < nb; b++) {
            int64_t r0 = b * R, m = M - r0 < R ? M - r0 : R;
            pr_sgemm(0, 0, m, K, O, 1.0f, dy + r0 * O, O, wt, K, 0.0f, dx + r0 * K, K);
        }
        return PR_OK;
    }
#pragma omp parallel num_threads(threads_for(count_slots(g->n, slot)))
    {
        float *dcol = slot ? slots + THREAD_ID() * slot : NULL;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g->n; n++) {
            float *dst = slot ? dcol : dx + n * image;
            for (int64_t r0 = 0; r0 < P; r0 += R) {
                int64_t m = P - r0 < R ? P - r0 : R;
                pr_sgemm(0, 0, m, K, O, 1.0f, dy + (n * P + r0) * O, O, wt, K, 0.0f,
                         dst + r0 * K, K);
            }
            if (slot) col2im_image(g, dcol, dx + n * image);
        }
    }
    return PR_OK;
}

int pr_conv2d_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                              void *scratch) {
    const int64_t K = col_width(g), O = g->o, M = g->n * g->ho * g->wo, R = block_rows(g);
    const int64_t nb = count_blocks(g), col_floats = forward_col_floats(g);
    const int64_t stripes = count_slots(nb, col_floats + K * O);
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)(K * O));
        return PR_OK;
    }
    float *partial = scratch, *cols = partial + stripes * K * O;
#pragma omp parallel num_threads(threads_for(stripes))
    {
        float *col = col_floats ? cols + THREAD_ID() * col_floats : NULL;
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++)
            for (int64_t b = s; b < nb; b += stripes) {
                int64_t r0 = b * R, m = M - r0 < R ? M - r0 : R;
                const float *a = block_cols(g, x, r0, m, col);
                pr_sgemm(1, 0, K, O, m, 1.0f, a, K, dy + r0 * O, O, b == s ? 0.0f : 1.0f,
                         partial + s * K * O, O);
            }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K * O; i++) {
            float sum = partial[i];
            for (int64_t s = 1; s < stripes; s++) sum += partial[s * K * O + i];
            dw[i] = sum;
        }
    }
    return PR_OK;
}
