/* 2D convolution by im2col + one OpenBLAS sgemm per chunk of images.
 *
 * Layouts: x NHWC (N, H, W, C), filter HWIO (KH, KW, C, O), y NHWC
 * (N, HO, WO, O).  The im2col matrix has one row per output pixel
 * (n, oh, ow) and K = KH*KW*C columns ordered (kh, kw, c), which is exactly
 * the row order of the HWIO filter seen as a (K, O) matrix, so
 *   y = col @ w,   dcol = dy @ w^T (then col2im),   dw = col^T @ dy
 * (Chellapilla et al., "High Performance Convolutional Neural Networks for
 * Document Processing", 2006, section 3).  In NHWC, the KW taps of one
 * filter row read KW*C consecutive floats of x, so im2col is one memcpy per
 * (output pixel, kh) plus zero fill at the borders.
 *
 * A 1x1 stride-1 unpadded conv is a plain GEMM over x seen as (N*H*W, C).
 * The batch is processed in chunks so that the im2col buffer stays below
 * CHUNK_BYTES.  OpenMP loops (im2col, col2im) and OpenBLAS calls alternate;
 * sgemm is never called from inside a parallel region.  Results do not
 * depend on the thread count: col2im gathers per input row in a fixed
 * order and dw accumulates chunks in order.
 */
#include "conv.h"

#include <string.h>

#define CHUNK_BYTES ((size_t)32 << 20)

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

/* Images per chunk: as many as fit in CHUNK_BYTES of im2col rows, at least 1. */
static int64_t chunk_images(const pr_window *g) {
    size_t per_image = sizeof(float) * (size_t)(g->ho * g->wo * col_width(g));
    int64_t nb = per_image ? (int64_t)(CHUNK_BYTES / per_image) : g->n;
    if (nb < 1) nb = 1;
    return nb < g->n ? nb : g->n;
}

size_t pr_conv2d_scratch_bytes(const pr_window *g) {
    if (is_pointwise(g)) return 0;
    return sizeof(float) * (size_t)(chunk_images(g) * g->ho * g->wo * col_width(g));
}

/* col rows of images [n0, n0 + nb) <- x. */
static void im2col(const pr_window *g, const float *x, int64_t n0, int64_t nb, float *col) {
    const int64_t C = g->c, K = col_width(g), KWC = g->kw * C;
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
    for (int64_t r = 0; r < nb * g->ho; r++) {
        int64_t n = n0 + r / g->ho, oh = r % g->ho;
        const float *xn = x + n * g->h * g->w * C;
        for (int64_t ow = 0; ow < g->wo; ow++) {
            float *dst = col + (r * g->wo + ow) * K;
            int64_t lo, hi, iw0 = ow * g->sw - g->pw;
            pr_window_taps(iw0, g->kw, g->w, &lo, &hi);
            for (int64_t kh = 0; kh < g->kh; kh++, dst += KWC) {
                int64_t ih = oh * g->sh - g->ph + kh;
                if (ih < 0 || ih >= g->h) {
                    memset(dst, 0, sizeof(float) * (size_t)KWC);
                    continue;
                }
                if (lo > 0) memset(dst, 0, sizeof(float) * (size_t)(lo * C));
                memcpy(dst + lo * C, xn + (ih * g->w + iw0 + lo) * C,
                       sizeof(float) * (size_t)((hi - lo) * C));
                if (hi < g->kw) memset(dst + hi * C, 0, sizeof(float) * (size_t)((g->kw - hi) * C));
            }
        }
    }
}

/* dx of images [n0, n0 + nb) <- sum of the dcol entries that im2col copied
 * from each position.  Parallel over input rows (n, ih): each thread owns
 * the rows it writes and adds contributions in a fixed (kh, ow) order. */
static void col2im(const pr_window *g, const float *dcol, int64_t n0, int64_t nb, float *dx) {
    const int64_t C = g->c, K = col_width(g), KWC = g->kw * C, rowlen = g->w * C;
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
    for (int64_t r = 0; r < nb * g->h; r++) {
        int64_t n = r / g->h, ih = r % g->h;
        float *dxr = dx + ((n0 + n) * g->h + ih) * rowlen;
        memset(dxr, 0, sizeof(float) * (size_t)rowlen);
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t t = ih + g->ph - kh; /* = oh * sh */
            if (t < 0 || t % g->sh) continue;
            int64_t oh = t / g->sh;
            if (oh >= g->ho) continue;
            const float *src = dcol + ((n * g->ho + oh) * g->wo) * K + kh * KWC;
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

int pr_conv2d_forward(const pr_window *g, const float *x, const float *w, float *y,
                      void *scratch) {
    const int64_t K = col_width(g), O = g->o, P = g->ho * g->wo;
    if (is_pointwise(g)) {
        pr_sgemm(0, 0, g->n * P, O, K, 1.0f, x, K, w, O, 0.0f, y, O);
        return PR_OK;
    }
    const int64_t nb = chunk_images(g);
    float *col = scratch;
    for (int64_t n0 = 0; n0 < g->n; n0 += nb) {
        int64_t m = g->n - n0 < nb ? g->n - n0 : nb;
        im2col(g, x, n0, m, col);
        pr_sgemm(0, 0, m * P, O, K, 1.0f, col, K, w, O, 0.0f, y + n0 * P * O, O);
    }
    return PR_OK;
}

int pr_conv2d_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                             void *scratch) {
    const int64_t K = col_width(g), O = g->o, P = g->ho * g->wo;
    if (is_pointwise(g)) {
        pr_sgemm(0, 1, g->n * P, K, O, 1.0f, dy, O, w, O, 0.0f, dx, K);
        return PR_OK;
    }
    const int64_t nb = chunk_images(g);
    float *dcol = scratch;
    for (int64_t n0 = 0; n0 < g->n; n0 += nb) {
        int64_t m = g->n - n0 < nb ? g->n - n0 : nb;
        pr_sgemm(0, 1, m * P, K, O, 1.0f, dy + n0 * P * O, O, w, O, 0.0f, dcol, K);
        col2im(g, dcol, n0, m, dx);
    }
    return PR_OK;
}

int pr_conv2d_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                              void *scratch) {
    const int64_t K = col_width(g), O = g->o, P = g->ho * g->wo;
    if (g->n == 0) {
        memset(dw, 0, sizeof(float) * (size_t)(K * O));
        return PR_OK;
    }
    if (is_pointwise(g)) {
        pr_sgemm(1, 0, K, O, g->n * P, 1.0f, x, K, dy, O, 0.0f, dw, O);
        return PR_OK;
    }
    const int64_t nb = chunk_images(g);
    float *col = scratch;
    for (int64_t n0 = 0; n0 < g->n; n0 += nb) {
        int64_t m = g->n - n0 < nb ? g->n - n0 : nb;
        im2col(g, x, n0, m, col);
        pr_sgemm(1, 0, K, O, m * P, 1.0f, col, K, dy + n0 * P * O, O, n0 ? 1.0f : 0.0f, dw, O);
    }
    return PR_OK;
}
