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
 * max of CBLOCK channels in float32 (exact for both element types); a
 * window of 2x2 valid taps 16 channels at a time with AVX-512 where the CPU
 * has it (MAX_FORWARD_2X2: the channels it did). */
#define MAX_FORWARD(T)                                                                       \
    static void max_forward_##T(const pr_window *g, const elem_##T *x, elem_##T *y,          \
                                int wide) {                                                  \
        const int64_t C = g->c;                                                              \
        _Pragma("omp parallel for num_threads(pr_get_num_threads()) schedule(static)")      \
        for (int64_t r = 0; r < g->n * g->ho; r++) {                                         \
            int64_t n = r / g->ho, oh = r % g->ho;                                           \
            const elem_##T *xn = x + n * g->h * g->w * C;                                    \
            for (int64_t ow = 0; ow < g->wo; ow++) {                                         \
                elem_##T *yo = y + (r * g->wo + ow) * C;                                     \
                int64_t r0, r1, c0, c1;                                                      \
                window(g, oh, ow, &r0, &r1, &c0, &c1);                                       \
                int64_t done = 0;                                                            \
                if (r1 - r0 == 2 && c1 - c0 == 2) {                                          \
                    const elem_##T *x0 = xn + (r0 * g->w + c0) * C;                          \
                    done = MAX_FORWARD_2X2(T, wide, x0, x0 + g->w * C, yo, C);               \
                }                                                                            \
                for (int64_t cb = done; cb < C; cb += CBLOCK) {                              \
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

/* ---- 2x2 windows with AVX-512 F --------------------------------------------
 * The disjoint backward pass of MaxPooling2D(2), 16 channels at a time: the
 * running max and the winning tap as lane masks (the same wins() rule: a
 * NaN best stays, a NaN or larger v replaces it), dy stored where a tap won
 * and 0 elsewhere.  bfloat16 lanes are widened exactly and narrowed back by
 * truncation (dy is a widened bfloat16: no rounding).  Returns the channels
 * done (a multiple of 16); the loop below does the rest. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "cpu.h"
#define HAVE_2X2_AVX512 1
#define AVX512 __attribute__((target("avx512f")))
static inline AVX512 __m512 ld16_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline AVX512 __m512 ld16_bf16(const uint16_t *p) { return pr_bf16_load16_ps(p); }
static inline AVX512 void st16_f32(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
static inline AVX512 void st16_bf16(uint16_t *p, __m512 v) {
    __m512i bits = _mm512_srli_epi32(_mm512_castps_si512(v), 16);
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(bits));
}
static inline AVX512 __mmask16 wins16(__m512 v, __m512 best) {
    return _mm512_cmp_ps_mask(best, best, _CMP_ORD_Q) & _mm512_cmp_ps_mask(v, best, _CMP_NLE_UQ);
}
#define MAX_BACKWARD_2X2_AVX512(T)                                                           \
    static AVX512 int64_t max_backward_2x2_avx512_##T(                                       \
        const elem_##T *x0, const elem_##T *x1, const elem_##T *dyo, elem_##T *d0,           \
        elem_##T *d1, int64_t C) {                                                           \
        int64_t c = 0;                                                                       \
        for (; c + 16 <= C; c += 16) {                                                       \
            __m512 b = ld16_##T(x0 + c), v1 = ld16_##T(x0 + C + c);                         \
            __m512 v2 = ld16_##T(x1 + c), v3 = ld16_##T(x1 + C + c);                         \
            __mmask16 w1 = wins16(v1, b);                                                    \
            b = _mm512_mask_mov_ps(b, w1, v1);                                               \
            __mmask16 w2 = wins16(v2, b);                                                    \
            b = _mm512_mask_mov_ps(b, w2, v2);                                               \
            __mmask16 w3 = wins16(v3, b);                                                    \
            __mmask16 a2 = w2 & ~w3, a1 = w1 & ~w2 & ~w3, a0 = ~(w1 | w2 | w3);              \
            __m512 d = ld16_##T(dyo + c);                                                    \
            st16_##T(d0 + c, _mm512_maskz_mov_ps(a0, d));                                    \
            st16_##T(d0 + C + c, _mm512_maskz_mov_ps(a1, d));                                \
            st16_##T(d1 + c, _mm512_maskz_mov_ps(a2, d));                                    \
            st16_##T(d1 + C + c, _mm512_maskz_mov_ps(w3, d));                                \
        }                                                                                    \
        return c;                                                                            \
    }
MAX_BACKWARD_2X2_AVX512(f32)
MAX_BACKWARD_2X2_AVX512(bf16)
#define MAX_BACKWARD_2X2(T, wide, x0, x1, dyo, d0, d1, C)                                    \
    ((wide) ? max_backward_2x2_avx512_##T(x0, x1, dyo, d0, d1, C) : 0)

/* The forward pass's 2x2 window (rows x0 and x1, two pixels each), the
 * taps in the portable loop's order; a bfloat16 max is stored as
 * pr_bf16_from_f32 would (exact, a NaN quieted).  airbench94's three pools
 * in a compiled mixed_bfloat16 step at batch 1024 (AMD EPYC Zen 5, 2
 * threads, bench/airbench_steps.py --profile, two runs each): 33.4 ms a
 * step in the portable loop, 15.2-16.1 ms here (the first pool, 1024 x 31
 * x 31 x 64 in, 14.0-14.9 -> 7.8-9.4 ms). */
static inline AVX512 void st16r_f32(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
static inline AVX512 void st16r_bf16(uint16_t *p, __m512 v) {
    _mm256_storeu_si256((__m256i *)p, pr_bf16_round16(v));
}
#define MAX_FORWARD_2X2_AVX512(T)                                                            \
    static AVX512 int64_t max_forward_2x2_avx512_##T(const elem_##T *x0, const elem_##T *x1, \
                                                     elem_##T *yo, int64_t C) {             \
        int64_t c = 0;                                                                       \
        for (; c + 16 <= C; c += 16) {                                                       \
            __m512 b = ld16_##T(x0 + c), v1 = ld16_##T(x0 + C + c);                         \
            __m512 v2 = ld16_##T(x1 + c), v3 = ld16_##T(x1 + C + c);                         \
            b = _mm512_mask_mov_ps(b, wins16(v1, b), v1);                                    \
            b = _mm512_mask_mov_ps(b, wins16(v2, b), v2);                                    \
            b = _mm512_mask_mov_ps(b, wins16(v3, b), v3);                                    \
            st16r_##T(yo + c, b);                                                            \
        }                                                                                    \
        return c;                                                                            \
    }
MAX_FORWARD_2X2_AVX512(f32)
MAX_FORWARD_2X2_AVX512(bf16)
#define MAX_FORWARD_2X2(T, wide, x0, x1, yo, C)                                              \
    ((wide) ? max_forward_2x2_avx512_##T(x0, x1, yo, C) : 0)
#else
#define MAX_BACKWARD_2X2(T, wide, x0, x1, dyo, d0, d1, C)                                    \
    ((void)(wide), (void)(x0), (void)(d0), (int64_t)0)
#define MAX_FORWARD_2X2(T, wide, x0, x1, yo, C) ((void)(wide), (void)(x0), (int64_t)0)
#endif

MAX_FORWARD(f32)
MAX_FORWARD(bf16)

int pr_max_pool2d_forward(const pr_window *g, pr_dtype dt, const void *x, void *y) {
#ifdef HAVE_2X2_AVX512
    const int wide = pr_cpu_fast(PR_CPU_AVX512F);
#else
    const int wide = 0;
#endif
    if (dt == PR_BF16) max_forward_bf16(g, x, y, wide);
    else max_forward_f32(g, x, y, wide);
    return PR_OK;
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
                                                    const elem_##T *dyn, elem_##T *dxn,      \
                                                    int wide) {                              \
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
                int64_t done = 0; /* channels the 2x2 AVX-512 loop did */                    \
                if (taps == 4 && cols == 2) {                                                \
                    const elem_##T *x0 = xn + (r0 * g->w + c0) * C;                          \
                    elem_##T *d0 = dxn + (r0 * g->w + c0) * C;                               \
                    done = MAX_BACKWARD_2X2(T, wide, x0, x0 + g->w * C, dyo, d0,             \
                                            d0 + g->w * C, C);                               \
                }                                                                            \
                for (int64_t cb = done; cb < C; cb += CBLOCK) {                              \
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
#ifdef HAVE_2X2_AVX512
        const int wide = pr_cpu_fast(PR_CPU_AVX512F);
#else
        const int wide = 0;
#endif
#pragma omp parallel for num_threads(pr_get_num_threads()) schedule(static)
        for (int64_t n = 0; n < g->n; n++) {
            if (dt == PR_BF16)
                max_backward_disjoint_bf16(g, (const uint16_t *)x + n * image,
                                           (const uint16_t *)dy + n * dy_image,
                                           (uint16_t *)dx + n * image, wide);
            else
                max_backward_disjoint_f32(g, (const float *)x + n * image,
                                          (const float *)dy + n * dy_image, (float *)dx + n * image,
                                          wide);
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
