/* 2D pooling over NHWC float32 tensors (max pooling also over bfloat16: the
 * same loops read it widened to float32, so a max and its argmax are the
 * float32 ones, and write the elements they pick; overlapping windows of the
 * backward pass add their dy in float32, rounded once).
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

#include "bf16.h"

#include <stdlib.h>
#include <string.h>

typedef float elem_f32;
typedef uint16_t elem_bf16;
static inline float ld_f32(const float *p) { return *p; }
static inline float ld_bf16(const uint16_t *p) { return pr_bf16_to_f32(*p); }
static inline float to_f32(float v) { return v; }
static inline uint16_t to_bf16(float v) { return pr_bf16_from_f32(v); }

#define CBLOCK 64 /* channels per block in the max-pool backward argmax */

/* Whether v replaces best as the running max: v is larger, or v is the
 * first NaN (a NaN best stays).  Branch-free, so the channel loop
 * vectorises. */
static inline int wins(float v, float best) { return (best == best) & !(v <= best); }

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

/* y <- the max of each window, in parallel over output rows; the running
 * max of CBLOCK channels in float32 (exact for both element types). */
#define MAX_FORWARD(T)                                                                       \
    static void max_forward_##T(const pr_window *g, const elem_##T *x, elem_##T *y) {        \
        const int64_t C = g->c;                                                              \
        _Pragma("omp parallel for num_threads(pr_get_num_threads()) schedule(static)")      \
        for (int64_t r = 0; r < g->n * g->ho; r++) {                                         \
            int64_t n = r / g->ho, oh = r % g->ho;                                           \
            const elem_##T *xn = x + n * g->h * g->w * C;                                    \
            for (int64_t ow = 0; ow < g->wo; ow++) {                                         \
                elem_##T *yo = y + (r * g->wo + ow) * C;                                     \
                int64_t r0, r1, c0, c1;                                                      \
                window(g, oh, ow, &r0, &r1, &c0, &c1);                                       \
                for (int64_t cb = 0; cb < C; cb += CBLOCK) {                                 \
                    const int64_t nc = C - cb < CBLOCK ? C - cb : CBLOCK;                    \
                    float best[CBLOCK];                                                      \
                    const elem_##T *x0 = xn + (r0 * g->w + c0) * C + cb;                     \
                    for (int64_t c = 0; c < nc; c++) best[c] = ld_##T(x0 + c);               \
                    for (int64_t ih = r0; ih < r1; ih++)                                     \
                        for (int64_t iw = c0; iw < c1; iw++) {                               \
                            const elem_##T *xp = xn + (ih * g->w + iw) * C + cb;             \
                            for (int64_t c = 0; c < nc; c++) {                               \
                                float v = ld_##T(xp + c);                                    \
                                best[c] = wins(v, best[c]) ? v : best[c];                    \
                            }                                                                \
                        }                                                                    \
                    for (int64_t c = 0; c < nc; c++) yo[cb + c] = to_##T(best[c]);           \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }
MAX_FORWARD(f32)
MAX_FORWARD(bf16)

int pr_max_pool2d_forward(const pr_window *g, pr_dtype dt, const void *x, void *y) {
    if (dt == PR_BF16) max_forward_bf16(g, x, y);
    else max_forward_f32(g, x, y);
    return PR_OK;
}

/* y <- the average of each window, in parallel over output rows. */
static void avg_forward(const pr_window *g, const float *x, float *y) {
    const int64_t C = g->c;
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
    for (int64_t r = 0; r < g->n * g->ho; r++) {
        int64_t n = r / g->ho, oh = r % g->ho;
        const float *xn = x + n * g->h * g->w * C;
        for (int64_t ow = 0; ow < g->wo; ow++) {
            float *yo = y + (r * g->wo + ow) * C;
            int64_t r0, r1, c0, c1;
            window(g, oh, ow, &r0, &r1, &c0, &c1);
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

/* Windows that do not overlap (stride >= window on both axes, as
 * MaxPooling2D's default strides = pool_size): each dx element is written
 * once, dy where it is its window's argmax and 0 elsewhere, rather than
 * zeroed and then scattered into (dx is as large as x: airbench94's first
 * pool reads 250 MB of x and writes 250 MB of dx at batch 1024 in float32).
 * The argmax is a window position per channel (int32, with the float max:
 * the channel loops vectorise); pixels no window covers are zeroed. */
#define MAX_BACKWARD_DISJOINT(T)                                                             \
    PR_CLONES static void max_backward_disjoint_##T(const pr_window *g, const elem_##T *xn,  \
                                          const elem_##T *dyn, elem_##T *dxn) {              \
        const int64_t C = g->c;                                                              \
        for (int64_t ih = 0; ih < g->h; ih++) { /* rows and columns no window covers */      \
            int64_t u = ih + g->ph, oh = u / g->sh;                                          \
            int row_covered = u % g->sh < g->kh && oh < g->ho;                               \
            for (int64_t iw = 0; iw < g->w; iw++) {                                          \
                int64_t v = iw + g->pw, ow = v / g->sw;                                      \
                if (!row_covered || v % g->sw >= g->kw || ow >= g->wo)                       \
                    memset(dxn + (ih * g->w + iw) * C, 0, sizeof(elem_##T) * (size_t)C);     \
            }                                                                                \
        }                                                                                    \
        for (int64_t oh = 0; oh < g->ho; oh++)                                               \
            for (int64_t ow = 0; ow < g->wo; ow++) {                                         \
                const elem_##T *dyo = dyn + (oh * g->wo + ow) * C;                           \
                int64_t r0, r1, c0, c1;                                                      \
                window(g, oh, ow, &r0, &r1, &c0, &c1);                                       \
                const int64_t cols = c1 - c0, taps = (r1 - r0) * cols;                       \
                for (int64_t cb = 0; cb < C; cb += CBLOCK) {                                 \
                    const int64_t nc = C - cb < CBLOCK ? C - cb : CBLOCK;                    \
                    float best[CBLOCK];                                                      \
                    int32_t arg[CBLOCK];                                                     \
                    const elem_##T *x0 = xn + (r0 * g->w + c0) * C + cb;                     \
                    for (int64_t c = 0; c < nc; c++) best[c] = ld_##T(x0 + c), arg[c] = 0;   \
                    for (int64_t t = 1; t < taps; t++) {                                     \
                        const elem_##T *xp = x0 + ((t / cols) * g->w + t % cols) * C;        \
                        for (int64_t c = 0; c < nc; c++) {                                   \
                            float v = ld_##T(xp + c);                                        \
                            int w = wins(v, best[c]);                                        \
                            best[c] = w ? v : best[c];                                       \
                            arg[c] = w ? (int32_t)t : arg[c];                                \
                        }                                                                    \
                    }                                                                        \
                    elem_##T *d0 = dxn + (r0 * g->w + c0) * C + cb;                          \
                    for (int64_t t = 0; t < taps; t++) {                                     \
                        elem_##T *dp = d0 + ((t / cols) * g->w + t % cols) * C;              \
                        for (int64_t c = 0; c < nc; c++)                                     \
                            dp[c] = arg[c] == t ? dyo[cb + c] : (elem_##T)0;                 \
                    }                                                                        \
                }                                                                            \
            }                                                                                \
    }
MAX_BACKWARD_DISJOINT(f32)
MAX_BACKWARD_DISJOINT(bf16)

/* float32 dx of one image += dyo (C channels) at the first maximum (or NaN)
 * of window rows [r0, r1), columns [c0, c1) of xn, channel by channel. */
#define MAX_SCATTER(T)                                                                       \
    static inline void max_scatter_##T(const pr_window *g, const elem_##T *xn,               \
                                       const elem_##T *dyo, int64_t r0, int64_t r1,          \
                                       int64_t c0, int64_t c1, float *dxn) {                 \
        const int64_t C = g->c;                                                              \
        for (int64_t cb = 0; cb < C; cb += CBLOCK) {                                         \
            int64_t nc = C - cb < CBLOCK ? C - cb : CBLOCK;                                  \
            float best[CBLOCK];                                                              \
            int64_t arg[CBLOCK];                                                             \
            int64_t p0 = (r0 * g->w + c0) * C + cb;                                          \
            for (int64_t c = 0; c < nc; c++) best[c] = ld_##T(xn + p0 + c), arg[c] = p0;     \
            for (int64_t ih = r0; ih < r1; ih++)                                             \
                for (int64_t iw = c0; iw < c1; iw++) {                                       \
                    int64_t p = (ih * g->w + iw) * C + cb;                                   \
                    for (int64_t c = 0; c < nc; c++) {                                       \
                        float v = ld_##T(xn + p + c);                                        \
                        if (wins(v, best[c])) best[c] = v, arg[c] = p;                       \
                    }                                                                        \
                }                                                                            \
            for (int64_t c = 0; c < nc; c++) dxn[arg[c] + c] += ld_##T(dyo + cb + c);        \
        }                                                                                    \
    }
MAX_SCATTER(f32)
MAX_SCATTER(bf16)

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

/* dx <- the gradient of the max (x given) or average (x NULL) pooling:
 * zeroed, then every window's dy scattered into it, in parallel over
 * images.  bfloat16 (max only): each thread scatters an image into a
 * float32 buffer, rounded into dx once. */
static int pool_backward(const pr_window *g, pr_dtype dt, const void *x, const void *dy, void *dx) {
    const int64_t C = g->c, image = g->h * g->w * C, dy_image = g->ho * g->wo * C;
    int failed = 0;
#pragma omp parallel num_threads(pr_get_num_threads())
    {
        float *buf = dt == PR_BF16 ? malloc(sizeof(float) * (size_t)image) : NULL;
        if (dt == PR_BF16 && !buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g->n; n++) {
            if (dt == PR_BF16 && !buf) continue;
            float *dxn = buf ? buf : (float *)dx + n * image;
            memset(dxn, 0, sizeof(float) * (size_t)image);
            for (int64_t oh = 0; oh < g->ho; oh++)
                for (int64_t ow = 0; ow < g->wo; ow++) {
                    const int64_t o = n * dy_image + (oh * g->wo + ow) * C;
                    int64_t r0, r1, c0, c1;
                    window(g, oh, ow, &r0, &r1, &c0, &c1);
                    if (!x) avg_scatter(g, (const float *)dy + o, r0, r1, c0, c1, dxn);
                    else if (dt == PR_BF16)
                        max_scatter_bf16(g, (const uint16_t *)x + n * image,
                                         (const uint16_t *)dy + o, r0, r1, c0, c1, dxn);
                    else
                        max_scatter_f32(g, (const float *)x + n * image, (const float *)dy + o,
                                        r0, r1, c0, c1, dxn);
                }
            if (buf) pr_f32_to_bf16_run(buf, (uint16_t *)dx + n * image, image);
        }
        free(buf);
    }
    return failed ? PR_ERR_MEMORY : PR_OK;
}

int pr_max_pool2d_backward(const pr_window *g, pr_dtype dt, const void *x, const void *dy,
                           void *dx) {
    const int64_t C = g->c, image = g->h * g->w * C, dy_image = g->ho * g->wo * C;
    if (g->sh >= g->kh && g->sw >= g->kw) {
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
        for (int64_t n = 0; n < g->n; n++) {
            if (dt == PR_BF16)
                max_backward_disjoint_bf16(g, (const uint16_t *)x + n * image,
                                           (const uint16_t *)dy + n * dy_image,
                                           (uint16_t *)dx + n * image);
            else
                max_backward_disjoint_f32(g, (const float *)x + n * image,
                                          (const float *)dy + n * dy_image, (float *)dx + n * image);
        }
        return PR_OK;
    }
    return pool_backward(g, dt, x, dy, dx);
}

int pr_avg_pool2d_forward(const pr_window *g, const float *x, float *y) {
    avg_forward(g, x, y);
    return PR_OK;
}

int pr_avg_pool2d_backward(const pr_window *g, const float *dy, float *dx) {
    return pool_backward(g, PR_F32, NULL, dy, dx);
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
