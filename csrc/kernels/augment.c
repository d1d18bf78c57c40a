/* Data-augmentation kernels; see augment.h for each formula and its source.
 * Layout: NHWC, contiguous; uint8 or float32 images.  Sampling runs on one
 * thread in image order (it is tiny next to the pixel work); the pixel loops
 * are split across images (or pixels) with OpenMP. */
#include "augment.h"

#include <math.h>
#include <string.h>

#include "rng.h"

#define PARALLEL_MIN 32768 /* values; below this one thread is faster */

/* Pixel loops live in always-inlined helpers called with a literal dtype
 * (and channel count 3 where it is common), so the compiler specialises
 * them and no branch on the dtype is left in the inner loops. */
#define INLINE static inline __attribute__((always_inline))

/* The value of pixel-channel `k` of a uint8 or float32 buffer as float. */
INLINE float load(const void *x, pr_dtype dt, int64_t k) {
    return dt == PR_U8 ? (float)((const uint8_t *)x)[k] : ((const float *)x)[k];
}

static inline void copy_pixel(char *dst, const char *src, int64_t pb) {
    switch (pb) {
    case 3: dst[0] = src[0], dst[1] = src[1], dst[2] = src[2]; break;
    case 12: memcpy(dst, src, 12); break;
    default: memcpy(dst, src, (size_t)pb);
    }
}

/* ---- flips ---------------------------------------------------------------- */

void pr_k_sample_flip(int64_t n, int horizontal, int vertical, uint64_t seed, uint64_t counter,
                      int32_t *flags) {
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        int32_t fh = (int32_t)pr_rng_below(&r, 2), fv = (int32_t)pr_rng_below(&r, 2);
        flags[2 * i] = horizontal ? fh : 0;
        flags[2 * i + 1] = vertical ? fv : 0;
    }
}

void pr_k_sample_alternating_flip(int64_t n, int horizontal, int vertical, uint64_t seed,
                                  uint64_t counter, const int64_t *index, int32_t *flags) {
    int32_t parity = (int32_t)((counter >> 32) & 1);
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, 0, (uint32_t)index[i]);
        int32_t fh = (int32_t)pr_rng_below(&r, 2), fv = (int32_t)pr_rng_below(&r, 2);
        flags[2 * i] = horizontal ? fh ^ parity : 0;
        flags[2 * i + 1] = vertical ? fv ^ parity : 0;
    }
}

int pr_k_flip(const void *x, void *y, pr_dtype dt, pr_nhwc g, const int32_t *flags) {
    int64_t pb = g.c * (int64_t)pr_dtype_size(dt), rowb = g.w * pb, imgb = g.h * rowb;
#pragma omp parallel for num_threads(pr_get_num_threads()) \
    if (g.n * g.h * g.w * g.c >= PARALLEL_MIN)
    for (int64_t i = 0; i < g.n; i++) {
        const char *xi = (const char *)x + i * imgb;
        char *yi = (char *)y + i * imgb;
        int fh = flags[2 * i], fv = flags[2 * i + 1];
        for (int64_t r = 0; r < g.h; r++) {
            const char *src = xi + (fv ? g.h - 1 - r : r) * rowb;
            char *dst = yi + r * rowb;
            if (!fh) {
                memcpy(dst, src, (size_t)rowb);
                continue;
            }
            for (int64_t s = 0; s < g.w; s++)
                copy_pixel(dst + s * pb, src + (g.w - 1 - s) * pb, pb);
        }
    }
    return PR_OK;
}

/* ---- pad and crop --------------------------------------------------------- */

void pr_k_sample_offsets(int64_t n, int64_t range_y, int64_t range_x, uint64_t seed,
                         uint64_t counter, int32_t *off) {
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        off[2 * i] = (int32_t)pr_rng_below(&r, (uint32_t)range_y);
        off[2 * i + 1] = (int32_t)pr_rng_below(&r, (uint32_t)range_x);
    }
}

/* Floor modulo: m in [0, p). */
static inline int64_t floor_mod(int64_t k, int64_t p) {
    int64_t m = k % p;
    return m < 0 ? m + p : m;
}

int64_t pr_fill_index(int64_t k, int64_t n, int mode) {
    if (k >= 0 && k < n) return k;
    switch (mode) {
    case PR_FILL_REFLECT: {
        if (n == 1) return 0;
        int64_t m = floor_mod(k, 2 * n - 2);
        return m < n ? m : 2 * n - 2 - m;
    }
    case PR_FILL_SYMMETRIC: {
        int64_t m = floor_mod(k, 2 * n);
        return m < n ? m : 2 * n - 1 - m;
    }
    case PR_FILL_EDGE: return k < 0 ? 0 : n - 1;
    case PR_FILL_WRAP: return floor_mod(k, n);
    default: return -1;
    }
}

int pr_k_pad_crop(const void *x, void *y, pr_dtype dt, pr_nhwc g, int64_t pad_y, int64_t pad_x,
                  int mode, int64_t out_h, int64_t out_w, const int32_t *off) {
    int64_t pb = g.c * (int64_t)pr_dtype_size(dt), rowb = g.w * pb, out_rowb = out_w * pb;
    int zero = mode == PR_FILL_ZERO;
#pragma omp parallel for num_threads(pr_get_num_threads()) \
    if (g.n * out_h * out_w * g.c >= PARALLEL_MIN)
    for (int64_t i = 0; i < g.n; i++) {
        const char *xi = (const char *)x + i * g.h * rowb;
        char *yi = (char *)y + i * out_h * out_rowb;
        int64_t y0 = off[2 * i] - pad_y, x0 = off[2 * i + 1] - pad_x;
        /* Output columns [lo, hi) read source columns inside the image. */
        int64_t lo = x0 < 0 ? -x0 : 0, hi = g.w - x0 < out_w ? g.w - x0 : out_w;
        if (lo > out_w) lo = out_w; /* the crop lies wholly in the left padding */
        if (hi < lo) hi = lo;
        for (int64_t r = 0; r < out_h; r++) {
            char *dst = yi + r * out_rowb;
            int64_t sy = pr_fill_index(y0 + r, g.h, mode);
            if (sy < 0) {
                memset(dst, 0, (size_t)out_rowb);
                continue;
            }
            const char *src = xi + sy * rowb;
            memcpy(dst + lo * pb, src + (x0 + lo) * pb, (size_t)((hi - lo) * pb));
            if (zero) {
                memset(dst, 0, (size_t)(lo * pb));
                memset(dst + hi * pb, 0, (size_t)((out_w - hi) * pb));
                continue;
            }
            for (int64_t s = 0; s < lo; s++)
                copy_pixel(dst + s * pb, src + pr_fill_index(x0 + s, g.w, mode) * pb, pb);
            for (int64_t s = hi; s < out_w; s++)
                copy_pixel(dst + s * pb, src + pr_fill_index(x0 + s, g.w, mode) * pb, pb);
        }
    }
    return PR_OK;
}

/* ---- affine / projective transform ---------------------------------------- */

/* Pixel (r, s) of image base `img`, channel k, or the fill value outside. */
INLINE float tap(const void *x, pr_dtype dt, pr_nhwc g, int64_t img, int64_t r, int64_t s,
                 int64_t k, int mode, float fill) {
    r = pr_fill_index(r, g.h, mode), s = pr_fill_index(s, g.w, mode);
    if (r < 0 || s < 0) return fill;
    return load(x, dt, img + (r * g.w + s) * g.c + k);
}

INLINE void affine_image(const void *x, pr_dtype dt, pr_nhwc g, int64_t i, const float *t,
                         int bilinear, int mode, float fill, float *y) {
    int64_t img = i * g.h * g.w * g.c;
    for (int64_t r = 0; r < g.h; r++)
        for (int64_t s = 0; s < g.w; s++) {
            double xo = (double)s, yo = (double)r;
            double kd = (double)t[6] * xo + (double)t[7] * yo + 1.0;
            double xs = ((double)t[0] * xo + (double)t[1] * yo + (double)t[2]) / kd;
            double ys = ((double)t[3] * xo + (double)t[4] * yo + (double)t[5]) / kd;
            float *dst = y + img + (r * g.w + s) * g.c;
            if (!(fabs(xs) < 1e15 && fabs(ys) < 1e15)) { /* inf/nan: nothing to sample */
                for (int64_t k = 0; k < g.c; k++) dst[k] = fill;
                continue;
            }
            if (!bilinear) {
                int64_t rr = (int64_t)floor(ys + 0.5), ss = (int64_t)floor(xs + 0.5);
                for (int64_t k = 0; k < g.c; k++) dst[k] = tap(x, dt, g, img, rr, ss, k, mode, fill);
                continue;
            }
            double fy = floor(ys), fx = floor(xs);
            int64_t r0 = (int64_t)fy, s0 = (int64_t)fx;
            float wy = (float)(ys - fy), wx = (float)(xs - fx);
            for (int64_t k = 0; k < g.c; k++) {
                float v00 = tap(x, dt, g, img, r0, s0, k, mode, fill);
                float v01 = tap(x, dt, g, img, r0, s0 + 1, k, mode, fill);
                float v10 = tap(x, dt, g, img, r0 + 1, s0, k, mode, fill);
                float v11 = tap(x, dt, g, img, r0 + 1, s0 + 1, k, mode, fill);
                dst[k] = (1.0f - wy) * ((1.0f - wx) * v00 + wx * v01) +
                         wy * ((1.0f - wx) * v10 + wx * v11);
            }
        }
}

int pr_k_affine(const void *x, pr_dtype dt, pr_nhwc g, const float *t, int bilinear, int mode,
                float fill_value, float *y) {
#pragma omp parallel for num_threads(pr_get_num_threads()) \
    if (g.n * g.h * g.w * g.c >= PARALLEL_MIN)
    for (int64_t i = 0; i < g.n; i++) {
        if (dt == PR_U8)
            affine_image(x, PR_U8, g, i, t + 8 * i, bilinear, mode, fill_value, y);
        else
            affine_image(x, PR_F32, g, i, t + 8 * i, bilinear, mode, fill_value, y);
    }
    return PR_OK;
}

void pr_k_sample_affine(int64_t n, int64_t h, int64_t w, const pr_affine_ranges *a,
                        uint64_t seed, uint64_t counter, float *t) {
    double cx = 0.5 * (double)(w - 1), cy = 0.5 * (double)(h - 1);
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        double u[5];
        for (int j = 0; j < 5; j++) u[j] = pr_rng_uniform(&r);
        double ty = (double)h * (a->ty_lo + (a->ty_hi - a->ty_lo) * u[0]);
        double tx = (double)w * (a->tx_lo + (a->tx_hi - a->tx_lo) * u[1]);
        double angle = a->rot_lo + (a->rot_hi - a->rot_lo) * u[2];
        double zy = a->zy_lo + (a->zy_hi - a->zy_lo) * u[3];
        double zx = a->same_zoom ? zy : a->zx_lo + (a->zx_hi - a->zx_lo) * u[4];
        double c = cos(angle), s = sin(angle);
        /* p' = C + R diag(zx, zy) (p - C) - (tx, ty) */
        double a0 = c * zx, a1 = -s * zy, b0 = s * zx, b1 = c * zy;
        float *ti = t + 8 * i;
        ti[0] = (float)a0, ti[1] = (float)a1, ti[2] = (float)(cx - a0 * cx - a1 * cy - tx);
        ti[3] = (float)b0, ti[4] = (float)b1, ti[5] = (float)(cy - b0 * cx - b1 * cy - ty);
        ti[6] = 0.0f, ti[7] = 0.0f;
    }
}

/* ---- contrast ------------------------------------------------------------- */

void pr_k_sample_uniform(int64_t n, double lo, double hi, uint64_t seed, uint64_t counter,
                         float *out) {
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        out[i] = (float)(lo + (hi - lo) * pr_rng_uniform(&r));
    }
}

INLINE void contrast_image(const void *x, pr_dtype dt, pr_nhwc g, int64_t i, float f, float vmin,
                           float vmax, float *y, double *sum) {
    int64_t pixels = g.h * g.w, base = i * pixels * g.c;
    for (int64_t k = 0; k < g.c; k++) sum[k] = 0.0;
    for (int64_t p = 0; p < pixels; p++)
        for (int64_t k = 0; k < g.c; k++) sum[k] += (double)load(x, dt, base + p * g.c + k);
    for (int64_t k = 0; k < g.c; k++) sum[k] = (double)(float)(sum[k] / (double)pixels);
    for (int64_t p = 0; p < pixels; p++)
        for (int64_t k = 0; k < g.c; k++) {
            float m = (float)sum[k], v = (load(x, dt, base + p * g.c + k) - m) * f + m;
            y[base + p * g.c + k] = v < vmin ? vmin : v > vmax ? vmax : v;
        }
}

int pr_k_contrast(const void *x, pr_dtype dt, pr_nhwc g, const float *f, float vmin, float vmax,
                  float *y) {
    int rc = PR_OK;
#pragma omp parallel num_threads(pr_get_num_threads()) if (g.n * g.h * g.w * g.c >= PARALLEL_MIN)
    {
        double *sum = pr_alloc((size_t)g.c * sizeof(double));
        if (!sum) {
#pragma omp atomic write
            rc = PR_ERR_MEMORY;
        }
#pragma omp for
        for (int64_t i = 0; i < g.n; i++) {
            if (!sum) continue;
            if (dt == PR_U8)
                contrast_image(x, PR_U8, g, i, f[i], vmin, vmax, y, sum);
            else
                contrast_image(x, PR_F32, g, i, f[i], vmin, vmax, y, sum);
        }
        pr_free(sum);
    }
    return rc;
}

/* ---- random resized crop -------------------------------------------------- */

static int64_t round_half_even(double v) { return (int64_t)nearbyint(v); }

void pr_k_sample_resized_crop(int64_t n, int64_t h, int64_t w, double area_min, double area_max,
                              double ratio_min, double ratio_max, uint64_t seed, uint64_t counter,
                              int32_t *box) {
    double lr0 = log(ratio_min), lr1 = log(ratio_max), area = (double)h * (double)w;
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        int32_t *b = box + 4 * i;
        int found = 0;
        for (int attempt = 0; attempt < 10 && !found; attempt++) {
            double target = area * (area_min + (area_max - area_min) * pr_rng_uniform(&r));
            double ratio = exp(lr0 + (lr1 - lr0) * pr_rng_uniform(&r));
            int64_t cw = round_half_even(sqrt(target * ratio));
            int64_t ch = round_half_even(sqrt(target / ratio));
            if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
                b[0] = (int32_t)pr_rng_below(&r, (uint32_t)(h - ch + 1));
                b[1] = (int32_t)pr_rng_below(&r, (uint32_t)(w - cw + 1));
                b[2] = (int32_t)ch, b[3] = (int32_t)cw;
                found = 1;
            }
        }
        if (found) continue;
        int64_t ch = h, cw = w;
        double in_ratio = (double)w / (double)h;
        if (in_ratio < ratio_min)
            ch = round_half_even((double)w / ratio_min);
        else if (in_ratio > ratio_max)
            cw = round_half_even((double)h * ratio_max);
        ch = ch < 1 ? 1 : ch > h ? h : ch;
        cw = cw < 1 ? 1 : cw > w ? w : cw;
        b[0] = (int32_t)((h - ch) / 2), b[1] = (int32_t)((w - cw) / 2);
        b[2] = (int32_t)ch, b[3] = (int32_t)cw;
    }
}

typedef struct {
    int32_t x0, x1;
    float w1;
} column_tap;

size_t pr_crop_resize_scratch(int64_t n, int64_t out_w) {
    return (size_t)(n * out_w) * sizeof(column_tap);
}

/* Source coordinate of output index `d` along an axis of `in` -> `out`
 * samples (PyTorch area_pixel_compute_source_index, align_corners=False). */
static inline double source_coord(int64_t d, int64_t in, int64_t out) {
    double s = ((double)d + 0.5) * (double)in / (double)out - 0.5;
    return s < 0.0 ? 0.0 : s;
}

/* One output image: rows of bilinear taps between the two source rows. */
INLINE void resize_image(const void *x, pr_dtype dt, int64_t c, int64_t img_w, int64_t img,
                         int64_t top, int64_t bh, const column_tap *cols, int64_t out_h,
                         int64_t out_w, float *yi) {
    for (int64_t oy = 0; oy < out_h; oy++) {
        double sy = source_coord(oy, bh, out_h);
        int64_t y0 = (int64_t)sy, y1 = y0 + (y0 < bh - 1);
        float h1 = (float)(sy - (double)y0), h0 = 1.0f - h1;
        int64_t r0 = img + (top + y0) * img_w * c, r1 = img + (top + y1) * img_w * c;
        float *dst = yi + oy * out_w * c;
        for (int64_t ox = 0; ox < out_w; ox++) {
            const column_tap t = cols[ox];
            float w1 = t.w1, w0 = 1.0f - w1;
            for (int64_t k = 0; k < c; k++)
                dst[ox * c + k] = h0 * (w0 * load(x, dt, r0 + t.x0 + k) +
                                        w1 * load(x, dt, r0 + t.x1 + k)) +
                                  h1 * (w0 * load(x, dt, r1 + t.x0 + k) +
                                        w1 * load(x, dt, r1 + t.x1 + k));
        }
    }
}

int pr_k_crop_resize(const void *x, pr_dtype dt, pr_nhwc g, const int32_t *box, int64_t out_h,
                     int64_t out_w, float *y, void *scratch) {
    int64_t c = g.c;
#pragma omp parallel for num_threads(pr_get_num_threads()) \
    if (g.n * out_h * out_w * c >= PARALLEL_MIN)
    for (int64_t i = 0; i < g.n; i++) {
        int64_t top = 0, left = 0, bh = g.h, bw = g.w;
        if (box) top = box[4 * i], left = box[4 * i + 1], bh = box[4 * i + 2], bw = box[4 * i + 3];
        column_tap *cols = (column_tap *)scratch + i * out_w;
        for (int64_t ox = 0; ox < out_w; ox++) {
            double sx = source_coord(ox, bw, out_w);
            int64_t x0 = (int64_t)sx;
            cols[ox].x0 = (int32_t)((left + x0) * c);
            cols[ox].x1 = (int32_t)((left + x0 + (x0 < bw - 1)) * c);
            cols[ox].w1 = (float)(sx - (double)x0);
        }
        int64_t img = i * g.h * g.w * c;
        float *yi = y + i * out_h * out_w * c;
        if (dt == PR_U8 && c == 3)
            resize_image(x, PR_U8, 3, g.w, img, top, bh, cols, out_h, out_w, yi);
        else if (dt == PR_U8)
            resize_image(x, PR_U8, c, g.w, img, top, bh, cols, out_h, out_w, yi);
        else if (c == 3)
            resize_image(x, PR_F32, 3, g.w, img, top, bh, cols, out_h, out_w, yi);
        else
            resize_image(x, PR_F32, c, g.w, img, top, bh, cols, out_h, out_w, yi);
    }
    return PR_OK;
}

/* ---- PCA lighting --------------------------------------------------------- */

void pr_k_sample_normal(int64_t n, int64_t k, double stddev, uint64_t seed, uint64_t counter,
                        float *out) {
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        for (int64_t j = 0; j < k; j++) out[i * k + j] = (float)(stddev * pr_rng_normal(&r));
    }
}

INLINE void add_shift(const void *x, pr_dtype dt, int64_t base, int64_t pixels,
                      const float shift[3], float *y) {
    for (int64_t p = 0; p < pixels; p++)
        for (int ch = 0; ch < 3; ch++) {
            int64_t k = base + 3 * p + ch;
            y[k] = load(x, dt, k) + shift[ch];
        }
}

int pr_k_lighting(const void *x, pr_dtype dt, pr_nhwc g, const float *eigval,
                  const float *eigvec, const float *alpha, float *y) {
    int64_t pixels = g.h * g.w;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (g.n * pixels * 3 >= PARALLEL_MIN)
    for (int64_t i = 0; i < g.n; i++) {
        float shift[3];
        for (int ch = 0; ch < 3; ch++) {
            double s = 0.0;
            for (int j = 0; j < 3; j++)
                s += (double)eigvec[3 * ch + j] * (double)alpha[3 * i + j] * (double)eigval[j];
            shift[ch] = (float)s;
        }
        if (dt == PR_U8)
            add_shift(x, PR_U8, i * pixels * 3, pixels, shift, y);
        else
            add_shift(x, PR_F32, i * pixels * 3, pixels, shift, y);
    }
    return PR_OK;
}

/* ---- cutout --------------------------------------------------------------- */

void pr_k_sample_centres(int64_t n, int64_t h, int64_t w, uint64_t seed, uint64_t counter,
                         int32_t *centre) {
    for (int64_t i = 0; i < n; i++) {
        pr_rng r;
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        centre[2 * i] = (int32_t)pr_rng_below(&r, (uint32_t)h);
        centre[2 * i + 1] = (int32_t)pr_rng_below(&r, (uint32_t)w);
    }
}

int pr_k_cutout(const void *x, void *y, pr_dtype dt, pr_nhwc g, int64_t size_h, int64_t size_w,
                const int32_t *centre, float fill) {
    int64_t es = (int64_t)pr_dtype_size(dt), rowv = g.w * g.c, imgv = g.h * rowv;
    memcpy(y, x, (size_t)(g.n * imgv * es));
#pragma omp parallel for num_threads(pr_get_num_threads()) if (g.n * imgv >= PARALLEL_MIN)
    for (int64_t i = 0; i < g.n; i++) {
        int64_t y0 = centre[2 * i] - size_h / 2, x0 = centre[2 * i + 1] - size_w / 2;
        int64_t y1 = y0 + size_h, x1 = x0 + size_w;
        y0 = y0 < 0 ? 0 : y0, x0 = x0 < 0 ? 0 : x0;
        y1 = y1 > g.h ? g.h : y1, x1 = x1 > g.w ? g.w : x1;
        for (int64_t r = y0; r < y1; r++) {
            int64_t k0 = i * imgv + r * rowv + x0 * g.c, k1 = i * imgv + r * rowv + x1 * g.c;
            if (dt == PR_U8)
                memset((uint8_t *)y + k0, (int)fill, (size_t)(k1 - k0));
            else
                for (int64_t k = k0; k < k1; k++) ((float *)y)[k] = fill;
        }
    }
    return PR_OK;
}

/* ---- mixup ---------------------------------------------------------------- */

void pr_k_sample_mixup(int64_t n, double alpha, int per_sample, uint64_t seed, uint64_t counter,
                       float *lam, int32_t *perm) {
    pr_rng r;
    pr_rng_init(&r, seed, counter, PR_RNG_BATCH_STREAM);
    for (int64_t i = 0; i < n; i++) perm[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = pr_rng_below(&r, (uint32_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    if (!per_sample) {
        float l = (float)pr_rng_beta(&r, alpha, alpha);
        for (int64_t i = 0; i < n; i++) lam[i] = l;
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        pr_rng_init(&r, seed, counter, (uint32_t)i);
        lam[i] = (float)pr_rng_beta(&r, alpha, alpha);
    }
}

int pr_k_mixup(const void *x, pr_dtype dt, int64_t n, int64_t row, const float *lam,
               const int32_t *perm, float *y) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n * row >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float a = lam[i], b = 1.0f - a;
        int64_t p = perm[i];
        float *yi = y + i * row;
        if (dt == PR_U8) {
            const uint8_t *xi = (const uint8_t *)x + i * row, *xp = (const uint8_t *)x + p * row;
            for (int64_t k = 0; k < row; k++) yi[k] = a * (float)xi[k] + b * (float)xp[k];
        } else {
            const float *xi = (const float *)x + i * row, *xp = (const float *)x + p * row;
            for (int64_t k = 0; k < row; k++) yi[k] = a * xi[k] + b * xp[k];
        }
    }
    return PR_OK;
}

int pr_k_mix_labels(const void *labels, pr_dtype dt, int64_t n, int64_t k, const float *lam,
                    const int32_t *perm, float *out) {
    if (dt == PR_F32) {
        const float *soft = labels;
        for (int64_t i = 0; i < n; i++) {
            float a = lam[i], b = 1.0f - a;
            const float *li = soft + i * k, *lp = soft + (int64_t)perm[i] * k;
            for (int64_t j = 0; j < k; j++) out[i * k + j] = a * li[j] + b * lp[j];
        }
        return PR_OK;
    }
    if (pr_check_labels(labels, dt, n, k, "position") != PR_OK) return PR_ERR_VALUE;
    memset(out, 0, sizeof(float) * (size_t)(n * k));
    for (int64_t i = 0; i < n; i++) {
        float a = lam[i], b = 1.0f - a;
        out[i * k + pr_label_at(labels, dt, i)] += a;
        out[i * k + pr_label_at(labels, dt, perm[i])] += b;
    }
    return PR_OK;
}

/* ---- per-channel normalisation -------------------------------------------- */

INLINE void normalize_pixels(const void *x, pr_dtype dt, int64_t p0, int64_t p1, int64_t c,
                             const float *mean, const float *den, float *y) {
    for (int64_t p = p0; p < p1; p++)
        for (int64_t k = 0; k < c; k++) y[p * c + k] = (load(x, dt, p * c + k) - mean[k]) / den[k];
}

/* Three channels, four pixels at a time against 12-long channel patterns,
 * so the divisions vectorise (same operations, same results). */
INLINE void normalize_rgb(const void *x, pr_dtype dt, int64_t p0, int64_t p1, const float *mean,
                          const float *den, float *y) {
    float m[12], d[12];
    for (int j = 0; j < 12; j++) m[j] = mean[j % 3], d[j] = den[j % 3];
    int64_t p = p0;
    for (; p + 4 <= p1; p += 4)
        for (int j = 0; j < 12; j++) y[3 * p + j] = (load(x, dt, 3 * p + j) - m[j]) / d[j];
    normalize_pixels(x, dt, p, p1, 3, mean, den, y);
}

int pr_k_normalize(const void *x, pr_dtype dt, int64_t pixels, int64_t c, const float *mean,
                   const float *variance, float epsilon, float *y, float *scratch) {
    float *den = scratch;
    for (int64_t k = 0; k < c; k++) {
        float s = sqrtf(variance[k]);
        den[k] = s > epsilon ? s : epsilon;
    }
    int64_t block = 4096, blocks = (pixels + block - 1) / block;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (pixels * c >= PARALLEL_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t p0 = b * block, p1 = p0 + block < pixels ? p0 + block : pixels;
        if (dt == PR_U8 && c == 3)
            normalize_rgb(x, PR_U8, p0, p1, mean, den, y);
        else if (dt == PR_U8)
            normalize_pixels(x, PR_U8, p0, p1, c, mean, den, y);
        else if (c == 3)
            normalize_rgb(x, PR_F32, p0, p1, mean, den, y);
        else
            normalize_pixels(x, PR_F32, p0, p1, c, mean, den, y);
    }
    return PR_OK;
}
