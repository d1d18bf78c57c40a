/* 2D pooling over NHWC float32 tensors.
 *
 * Semantics follow tf.nn.max_pool2d / tf.nn.avg_pool2d (which Keras'
 * MaxPooling2D / AveragePooling2D call): padded positions never win a max
 * and are not counted in an average.  A NaN in a window wins its max
 * (NumPy's np.max, torch.nn.functional.max_pool2d); the max gradient goes to
 * the first NaN of the window, else to its first maximum, in row-major
 * window order (NumPy argmax, PyTorch's max_pool2d indices).
 * Layout: x (N, H, W, C), y (N, HO, WO, C); channels are the inner,
 * vectorised loop.  Forward loops are parallel over output rows; backward
 * loops scatter into overlapping windows and are parallel over images, so
 * every dx element is written by one thread in a fixed order (windows that
 * do not overlap write each dx element once: max_pool_backward_disjoint).
 */
#include "pool.h"

#include <string.h>

#define CBLOCK 64 /* channels per block in the max-pool backward argmax */

/* Whether v replaces best as the running max: v is larger, or v is the
 * first NaN (a NaN best stays).  Branch-free, so the channel loop
 * vectorises. */
static inline int wins(float v, float best) { return best == best && !(v <= best); }

/* Valid window rows [*r0, *r1) and columns [*c0, *c1) (input indices) of
 * output pixel (oh, ow). */
static inline void window(const pr_window *g, int64_t oh, int64_t ow, int64_t *r0, int64_t *r1,
                          int64_t *c0, int64_t *c1) {
    int64_t ih = oh * g->sh - g->ph, iw = ow * g->sw - g->pw, lo, hi;
    pr_window_taps(ih, g->kh, g->h, &lo, &hi);
    *r0 = ih + lo, *r1 = ih + hi;
    pr_window_taps(iw, g->kw, g->w, &lo, &hi);
    *c0 = iw + lo, *c1 = iw + hi;
}

/* y <- the max (avg = 0) or the average (avg = 1) of each window, in
 * parallel over output rows. */
static void pool_forward(const pr_window *g, const float *x, float *y, int avg) {
    const int64_t C = g->c;
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
    for (int64_t r = 0; r < g->n * g->ho; r++) {
        int64_t n = r / g->ho, oh = r % g->ho;
        const float *xn = x + n * g->h * g->w * C;
        for (int64_t ow = 0; ow < g->wo; ow++) {
            float *yo = y + (r * g->wo + ow) * C;
            int64_t r0, r1, c0, c1;
            window(g, oh, ow, &r0, &r1, &c0, &c1);
            if (!avg) {
                memcpy(yo, xn + (r0 * g->w + c0) * C, sizeof(float) * (size_t)C);
                for (int64_t ih = r0; ih < r1; ih++)
                    for (int64_t iw = c0; iw < c1; iw++) {
                        const float *xp = xn + (ih * g->w + iw) * C;
                        for (int64_t c = 0; c < C; c++)
                            yo[c] = wins(xp[c], yo[c]) ? xp[c] : yo[c];
                    }
                continue;
            }
            memset(yo, 0, sizeof(float) * (size_t)C);
            for (int64_t ih = r0; ih < r1; ih++)
                for (int64_t iw = c0; iw < c1; iw++) {
                    const float *xp = xn + (ih * g->w + iw) * C;
                    for (int64_t c = 0; c < C; c++) yo[c] += xp[c];
                }
            float inv = 1.0f / (float)((r1 - r0) * (c1 - c0));
            for (int64_t c = 0; c < C; c++) yo[c] *= inv;
        }
    }
}

int pr_max_pool2d_forward(const pr_window *g, const float *x, float *y) {
    pool_forward(g, x, y, 0);
    return PR_OK;
}

/* Windows that do not overlap (stride >= window on both axes, as
 * MaxPooling2D's default strides = pool_size): each dx element is written
 * once, dy where it is its window's argmax and 0 elsewhere, rather than
 * zeroed and then scattered into (dx is as large as x: airbench94's first
 * pool reads 250 MB of x and writes 250 MB of dx at batch 1024).  The
 * argmax is a window position per channel (int32, with the float max: the
 * channel loops vectorise); pixels no window covers are zeroed. */
static void max_pool_backward_disjoint(const pr_window *g, const float *xn, const float *dyn,
                                       float *dxn) {
    const int64_t C = g->c;
    /* rows and columns no window covers: zeros */
    for (int64_t ih = 0; ih < g->h; ih++) {
        int64_t u = ih + g->ph, oh = u / g->sh;
        int row_covered = u % g->sh < g->kh && oh < g->ho;
        for (int64_t iw = 0; iw < g->w; iw++) {
            int64_t v = iw + g->pw, ow = v / g->sw;
            if (!row_covered || v % g->sw >= g->kw || ow >= g->wo)
                memset(dxn + (ih * g->w + iw) * C, 0, sizeof(float) * (size_t)C);
        }
    }
    for (int64_t oh = 0; oh < g->ho; oh++)
        for (int64_t ow = 0; ow < g->wo; ow++) {
            const float *dyo = dyn + (oh * g->wo + ow) * C;
            int64_t r0, r1, c0, c1;
            window(g, oh, ow, &r0, &r1, &c0, &c1);
            const int64_t cols = c1 - c0, taps = (r1 - r0) * cols;
            for (int64_t cb = 0; cb < C; cb += CBLOCK) {
                const int64_t nc = C - cb < CBLOCK ? C - cb : CBLOCK;
                float best[CBLOCK];
                int32_t arg[CBLOCK];
                const float *x0 = xn + (r0 * g->w + c0) * C + cb;
                for (int64_t c = 0; c < nc; c++) best[c] = x0[c], arg[c] = 0;
                for (int64_t t = 1; t < taps; t++) {
                    const float *xp = x0 + ((t / cols) * g->w + t % cols) * C;
                    for (int64_t c = 0; c < nc; c++) {
                        int w = wins(xp[c], best[c]);
                        best[c] = w ? xp[c] : best[c];
                        arg[c] = w ? (int32_t)t : arg[c];
                    }
                }
                float *d0 = dxn + (r0 * g->w + c0) * C + cb;
                for (int64_t t = 0; t < taps; t++) {
                    float *dp = d0 + ((t / cols) * g->w + t % cols) * C;
                    for (int64_t c = 0; c < nc; c++) dp[c] = arg[c] == t ? dyo[cb + c] : 0.0f;
                }
            }
        }
}

/* dx of one image += dyo (C channels) at the first maximum (or NaN) of
 * window rows [r0, r1), columns [c0, c1) of xn, channel by channel. */
static inline void max_scatter(const pr_window *g, const float *xn, const float *dyo, int64_t r0,
                               int64_t r1, int64_t c0, int64_t c1, float *dxn) {
    const int64_t C = g->c;
    for (int64_t cb = 0; cb < C; cb += CBLOCK) {
        int64_t nc = C - cb < CBLOCK ? C - cb : CBLOCK;
        float best[CBLOCK];
        int64_t arg[CBLOCK];
        int64_t p0 = (r0 * g->w + c0) * C + cb;
        for (int64_t c = 0; c < nc; c++) best[c] = xn[p0 + c], arg[c] = p0;
        for (int64_t ih = r0; ih < r1; ih++)
            for (int64_t iw = c0; iw < c1; iw++) {
                int64_t p = (ih * g->w + iw) * C + cb;
                for (int64_t c = 0; c < nc; c++)
                    if (wins(xn[p + c], best[c])) best[c] = xn[p + c], arg[c] = p;
            }
        for (int64_t c = 0; c < nc; c++) dxn[arg[c] + c] += dyo[cb + c];
    }
}

/* dx of one image += dyo / (window size) over window rows [r0, r1),
 * columns [c0, c1). */
static inline void avg_scatter(const pr_window *g, const float *dyo, int64_t r0, int64_t r1,
                               int64_t c0, int64_t c1, float *dxn) {
    const int64_t C = g->c;
    float inv = 1.0f / (float)((r1 - r0) * (c1 - c0));
    for (int64_t ih = r0; ih < r1; ih++)
        for (int64_t iw = c0; iw < c1; iw++) {
            float *d = dxn + (ih * g->w + iw) * C;
            for (int64_t c = 0; c < C; c++) d[c] += dyo[c] * inv;
        }
}

/* dx <- the gradient of the max (avg = 0, x needed) or average (avg = 1, x
 * unused) pooling: zeroed, then every window's dy scattered into it, in
 * parallel over images. */
static void pool_backward(const pr_window *g, const float *x, const float *dy, float *dx,
                          int avg) {
    const int64_t C = g->c, image = g->h * g->w * C;
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
    for (int64_t n = 0; n < g->n; n++) {
        float *dxn = dx + n * image;
        memset(dxn, 0, sizeof(float) * (size_t)image);
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                const float *dyo = dy + ((n * g->ho + oh) * g->wo + ow) * C;
                int64_t r0, r1, c0, c1;
                window(g, oh, ow, &r0, &r1, &c0, &c1);
                if (avg) avg_scatter(g, dyo, r0, r1, c0, c1, dxn);
                else max_scatter(g, x + n * image, dyo, r0, r1, c0, c1, dxn);
            }
    }
}

int pr_max_pool2d_backward(const pr_window *g, const float *x, const float *dy, float *dx) {
    const int64_t C = g->c, image = g->h * g->w * C;
    if (g->sh >= g->kh && g->sw >= g->kw) {
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
        for (int64_t n = 0; n < g->n; n++)
            max_pool_backward_disjoint(g, x + n * image, dy + n * g->ho * g->wo * C,
                                       dx + n * image);
        return PR_OK;
    }
    pool_backward(g, x, dy, dx, 0);
    return PR_OK;
}

int pr_avg_pool2d_forward(const pr_window *g, const float *x, float *y) {
    pool_forward(g, x, y, 1);
    return PR_OK;
}

int pr_avg_pool2d_backward(const pr_window *g, const float *dy, float *dx) {
    pool_backward(g, NULL, dy, dx, 1);
    return PR_OK;
}

int pr_global_avg_pool_forward(const float *x, int64_t n, int64_t hw, int64_t c, float *y) {
    const float inv = 1.0f / (float)hw;
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float *yi = y + i * c;
        const float *xi = x + i * hw * c;
        memset(yi, 0, sizeof(float) * (size_t)c);
        for (int64_t p = 0; p < hw; p++)
            for (int64_t k = 0; k < c; k++) yi[k] += xi[p * c + k];
        for (int64_t k = 0; k < c; k++) yi[k] *= inv;
    }
    return PR_OK;
}

int pr_global_avg_pool_backward(const float *dy, int64_t n, int64_t hw, int64_t c, float *dx) {
    const float inv = 1.0f / (float)hw;
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *dyi = dy + i * c;
        float *dxi = dx + i * hw * c;
        for (int64_t p = 0; p < hw; p++)
            for (int64_t k = 0; k < c; k++) dxi[p * c + k] = dyi[k] * inv;
    }
    return PR_OK;
}
