/* Batch normalization kernels (Ioffe & Szegedy 2015, "Batch Normalization:
 * Accelerating Deep Network Training by Reducing Internal Covariate Shift",
 * Algorithm 1 and section 3), channels-last: m rows of c channels.
 *
 * Memory traffic is what these cost, so each kernel makes as few passes as
 * the maths allows: training forward reads x twice (statistics, then y);
 * training backward reads dy and x twice; inference backward once.
 * The rows are cut into a fixed number of chunks (never more than
 * MAX_CHUNKS, independent of the thread count); per-channel sums accumulate
 * in double within a chunk and the chunk partials are added in chunk order,
 * so results are the same for any thread count.  The statistics loops (the
 * only arithmetic-bound ones: float -> double conversion) are compiled for
 * AVX-512, AVX2 and baseline x86-64 from the same C and chosen at load time
 * (target_clones); results agree bit for bit (no FMA contraction in ISO C
 * mode). */
#include "norm.h"

#include "bf16.h"

#include <math.h>
#include <string.h>

#define MAX_CHUNKS 64
#define PARALLEL_MIN 32768

#if defined(__x86_64__) && defined(__GNUC__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

static int64_t n_chunks(int64_t m) { return m < MAX_CHUNKS ? (m > 0 ? m : 1) : MAX_CHUNKS; }

/* Rows [lo, hi) of chunk k. */
#define CHUNK_LO(k) (m * (k) / nc)
#define CHUNK_HI(k) (m * ((k) + 1) / nc)

/* Scratch layout: chunk partials (n_chunks * 2c doubles), then 6c floats of
 * per-channel coefficients. */
size_t pr_bn_scratch_bytes(int64_t m, int64_t c) {
    return (size_t)(n_chunks(m) * 2 * c) * sizeof(double) + (size_t)(6 * c) * sizeof(float);
}

static float *coefs(void *scratch, int64_t m, int64_t c) {
    return (float *)((double *)scratch + n_chunks(m) * 2 * c);
}

/* ---- row loops ------------------------------------------------------------ */

/* These loops keep the double accumulators of 16 channels in
 * registers (GCC vector types, lowered to whatever the clone's ISA has) and
 * walk the rows; leftover channels use accumulators in memory.  Either way
 * each channel adds its rows in order. */
#define CB 16
typedef float v8f __attribute__((vector_size(32)));
typedef double v8d __attribute__((vector_size(64)));
/* Unaligned views for loads and stores. */
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef double v8d_u __attribute__((vector_size(64), aligned(8), may_alias));
#define load8(p) (*(const v8f_u *)(p))
#define widen(v) __builtin_convertvector((v), v8d)
#define store8d(p, v) (*(v8d_u *)(p) = (v))

/* s1 = sum (x - shift), s2 = sum (x - shift)^2 over rows [lo, hi). */
CLONES static void stats_rows(const float *restrict x, const float *restrict shift, int64_t lo,
                              int64_t hi, int64_t c, double *restrict s1, double *restrict s2) {
    int64_t j0 = 0;
    for (; j0 + CB <= c; j0 += CB) {
        v8d sh0 = widen(load8(shift + j0)), sh1 = widen(load8(shift + j0 + 8));
        v8d a0 = {0}, a1 = {0}, q0 = {0}, q1 = {0};
        for (int64_t r = lo; r < hi; r++) {
            const float *xr = x + r * c + j0;
            v8d d0 = widen(load8(xr)) - sh0, d1 = widen(load8(xr + 8)) - sh1;
            a0 += d0;
            a1 += d1;
            q0 += d0 * d0;
            q1 += d1 * d1;
        }
        store8d(s1 + j0, a0), store8d(s1 + j0 + 8, a1);
        store8d(s2 + j0, q0), store8d(s2 + j0 + 8, q1);
    }
    for (int64_t j = j0; j < c; j++) s1[j] = s2[j] = 0.0;
    for (int64_t r = lo; r < hi && j0 < c; r++) {
        const float *xr = x + r * c;
        for (int64_t j = j0; j < c; j++) {
            double d = (double)xr[j] - shift[j];
            s1[j] += d;
            s2[j] += d * d;
        }
    }
}

/* s1 = sum g, s2 = sum g * (x - mean) over rows [lo, hi), where g is dy,
 * or, when ra is not NULL (a BN whose output went through a ReLU), dy where
 * the BN output x * ra + rb (recomputed exactly as affine_rows computes it)
 * is not <= 0, else 0 (NaN passes, as pr_k_relu_backward); if dx is not
 * NULL also dx = g * a (the inference backward's single pass). */
typedef int v8i __attribute__((vector_size(32)));
CLONES static void grad_stats_rows(const float *restrict dy, const float *restrict x,
                                   const float *restrict mean, const float *restrict a,
                                   const float *restrict ra, const float *restrict rb, int64_t lo,
                                   int64_t hi, int64_t c, double *restrict s1,
                                   double *restrict s2, float *restrict dx) {
    int64_t j0 = 0;
    const v8f zero = {0};
    for (; j0 + CB <= c; j0 += CB) {
        v8f mu0 = load8(mean + j0), mu1 = load8(mean + j0 + 8);
        v8f ra0 = zero, ra1 = zero, rb0 = zero, rb1 = zero;
        if (ra) {
            ra0 = load8(ra + j0), ra1 = load8(ra + j0 + 8);
            rb0 = load8(rb + j0), rb1 = load8(rb + j0 + 8);
        }
        v8d a0 = {0}, a1 = {0}, q0 = {0}, q1 = {0};
        for (int64_t r = lo; r < hi; r++) {
            const float *xr = x + r * c + j0, *gr = dy + r * c + j0;
            v8f x0 = load8(xr), x1 = load8(xr + 8), g0 = load8(gr), g1 = load8(gr + 8);
            if (ra) {
                g0 = (v8f)((v8i)g0 & ~(x0 * ra0 + rb0 <= zero));
                g1 = (v8f)((v8i)g1 & ~(x1 * ra1 + rb1 <= zero));
            }
            v8d w0 = widen(g0), w1 = widen(g1);
            a0 += w0;
            a1 += w1;
            q0 += w0 * widen(x0 - mu0);
            q1 += w1 * widen(x1 - mu1);
        }
        store8d(s1 + j0, a0), store8d(s1 + j0 + 8, a1);
        store8d(s2 + j0, q0), store8d(s2 + j0 + 8, q1);
    }
    for (int64_t j = j0; j < c; j++) s1[j] = s2[j] = 0.0;
    for (int64_t r = lo; r < hi && j0 < c; r++) {
        const float *xr = x + r * c, *gr = dy + r * c;
        for (int64_t j = j0; j < c; j++) {
            float g = gr[j];
            if (ra && xr[j] * ra[j] + rb[j] <= 0.0f) g = 0.0f;
            s1[j] += g;
            s2[j] += (double)g * (xr[j] - mean[j]);
        }
    }
    for (int64_t r = lo; r < hi && dx; r++)
        for (int64_t j = 0; j < c; j++) dx[r * c + j] = dy[r * c + j] * a[j];
}

/* The elementwise passes are bound by memory traffic, not arithmetic. */

/* y = x * a + b over rows [lo, hi); then + res (when not NULL: the
 * residual add after a BN), then max(y, 0) when relu (jit_compile's fused
 * BN + ReLU and BN + add + ReLU).  The same float operations in the same
 * order as the unfused ops, so the results are bit for bit theirs. */
static void affine_rows(const float *restrict x, const float *restrict a,
                        const float *restrict b, const float *restrict res, int64_t lo,
                        int64_t hi, int64_t c, float *restrict y, int relu) {
    if (res && relu) {
        for (int64_t r = lo; r < hi; r++)
            for (int64_t j = 0; j < c; j++) {
                int64_t i = r * c + j;
                float v = x[i] * a[j] + b[j];
                v = v + res[i];
                y[i] = v <= 0.0f ? 0.0f : v; /* NaN passes, as pr_k_relu */
            }
        return;
    }
    if (relu) {
        for (int64_t r = lo; r < hi; r++)
            for (int64_t j = 0; j < c; j++) {
                float v = x[r * c + j] * a[j] + b[j];
                y[r * c + j] = v <= 0.0f ? 0.0f : v;
            }
        return;
    }
    for (int64_t r = lo; r < hi; r++)
        for (int64_t j = 0; j < c; j++) y[r * c + j] = x[r * c + j] * a[j] + b[j];
    if (res)
        for (int64_t r = lo; r < hi; r++)
            for (int64_t j = 0; j < c; j++) y[r * c + j] = y[r * c + j] + res[r * c + j];
}

/* dx = A * g + B * (x - mean) + C over rows [lo, hi), g = dy masked as in
 * grad_stats_rows when ra is not NULL; stored as bfloat16 (rounded to
 * nearest even, as the cast op rounds) in dxh when that is not NULL. */
CLONES static void dx_rows(const float *restrict dy, const float *restrict x,
                    const float *restrict mean, const float *restrict A,
                    const float *restrict B, const float *restrict C,
                    const float *restrict ra, const float *restrict rb, int64_t lo, int64_t hi,
                    int64_t c, float *restrict dx, uint16_t *restrict dxh) {
    if (dxh) {
        for (int64_t r = lo; r < hi; r++)
            for (int64_t j = 0; j < c; j++) {
                int64_t i = r * c + j;
                float g = dy[i];
                if (ra) g = x[i] * ra[j] + rb[j] <= 0.0f ? 0.0f : g;
                dxh[i] = pr_bf16_from_f32(A[j] * g + B[j] * (x[i] - mean[j]) + C[j]);
            }
        return;
    }
    if (ra) {
        for (int64_t r = lo; r < hi; r++)
            for (int64_t j = 0; j < c; j++) {
                int64_t i = r * c + j;
                float g = dy[i]; /* an unconditional load lets the loop vectorize */
                g = x[i] * ra[j] + rb[j] <= 0.0f ? 0.0f : g;
                dx[i] = A[j] * g + B[j] * (x[i] - mean[j]) + C[j];
            }
        return;
    }
    for (int64_t r = lo; r < hi; r++)
        for (int64_t j = 0; j < c; j++) {
            int64_t i = r * c + j;
            dx[i] = A[j] * dy[i] + B[j] * (x[i] - mean[j]) + C[j];
        }
}

/* Add the chunk partials into the first chunk's 2c slots, in chunk order. */
static void combine(double *part, int64_t nc, int64_t c) {
    for (int64_t k = 1; k < nc; k++)
        for (int64_t j = 0; j < 2 * c; j++) part[j] += part[k * 2 * c + j];
}

/* y = x * a + b with a = gamma / sqrt(var + eps), b = beta - mean * a from
 * the float mean and variance: the training forward, the inference pass and
 * the fused BN + ReLU backward (which recomputes the ReLU's input) all get
 * the same a and b from the same statistics. */
static void affine_coefs(const float *gamma, const float *beta, const float *mean,
                         const float *var, int64_t c, double eps, float *a, float *b) {
    for (int64_t j = 0; j < c; j++) {
        double gi = gamma[j] / sqrt((double)var[j] + eps);
        a[j] = (float)gi;
        b[j] = (float)(beta[j] - mean[j] * gi);
    }
}

/* ---- kernels -------------------------------------------------------------- */

int pr_k_bn_train(const float *x, const float *gamma, const float *beta, int64_t m, int64_t c,
                  double eps, float *y, float *mean, float *var, void *scratch) {
    return pr_k_bn_train_act(x, gamma, beta, NULL, m, c, eps, y, mean, var, scratch, 0);
}

int pr_k_bn_train_act(const float *x, const float *gamma, const float *beta, const float *res,
                      int64_t m, int64_t c, double eps, float *y, float *mean, float *var,
                      void *scratch, int relu) {
    int64_t nc = n_chunks(m);
    double *part = scratch;
    float *a = coefs(scratch, m, c), *b = a + c, *shift = b + c;
    /* sums of x - x[row 0]: no cancellation in E[d^2] - E[d]^2.  A
     * non-finite first row shifts by 0 instead, so that NaN and Inf reach
     * the statistics as in NumPy (an Inf gives mean Inf, variance NaN). */
    for (int64_t j = 0; j < c; j++) shift[j] = isfinite(x[j]) ? x[j] : 0.0f;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        stats_rows(x, shift, CHUNK_LO(k), CHUNK_HI(k), c, part + k * 2 * c, part + k * 2 * c + c);
    combine(part, nc, c);
    for (int64_t j = 0; j < c; j++) {
        double mu = part[j] / m, v = part[c + j] / m - mu * mu;
        v = v < 0.0 ? 0.0 : v; /* rounding may go below 0; NaN stays NaN */
        mean[j] = (float)(shift[j] + mu);
        var[j] = (float)v;
    }
    affine_coefs(gamma, beta, mean, var, c, eps, a, b);
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        affine_rows(x, a, b, res, CHUNK_LO(k), CHUNK_HI(k), c, y, relu);
    return PR_OK;
}

int pr_k_bn_train_backward(const float *dy, const float *x, const float *gamma,
                           const float *mean, const float *var, int64_t m, int64_t c, double eps,
                           float *dx, float *dgamma, float *dbeta, void *scratch) {
    return pr_k_bn_train_backward_act(dy, x, gamma, NULL, mean, var, m, c, eps, dx, 0, dgamma,
                                      dbeta, scratch, 0);
}

int pr_k_bn_train_backward_act(const float *dy, const float *x, const float *gamma,
                               const float *beta, const float *mean, const float *var, int64_t m,
                               int64_t c, double eps, void *dx, int dx_bf16, float *dgamma,
                               float *dbeta,
                               void *scratch, int relu) {
    int64_t nc = n_chunks(m);
    double *part = scratch;
    float *A = coefs(scratch, m, c), *B = A + c, *C = B + c, *ra = NULL, *rb = NULL;
    if (relu) {
        ra = C + c, rb = ra + c;
        affine_coefs(gamma, beta, mean, var, c, eps, ra, rb);
    }
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        grad_stats_rows(dy, x, mean, NULL, ra, rb, CHUNK_LO(k), CHUNK_HI(k), c, part + k * 2 * c,
                        part + k * 2 * c + c, NULL);
    combine(part, nc, c);
    /* dx = A * g + B * (x - mean) + C per channel. */
    for (int64_t j = 0; j < c; j++) {
        double inv = 1.0 / sqrt((double)var[j] + eps), gi = gamma[j] * inv;
        double db = part[j], dg = part[c + j] * inv;
        dbeta[j] = (float)db;
        dgamma[j] = (float)dg;
        A[j] = (float)gi;
        B[j] = (float)(-gi * inv * dg / m);
        C[j] = (float)(-gi * db / m);
    }
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        dx_rows(dy, x, mean, A, B, C, ra, rb, CHUNK_LO(k), CHUNK_HI(k), c,
                dx_bf16 ? NULL : (float *)dx, dx_bf16 ? (uint16_t *)dx : NULL);
    return PR_OK;
}

int pr_k_bn_infer(const float *x, const float *gamma, const float *beta, const float *mean,
                  const float *var, int64_t m, int64_t c, double eps, float *y, void *scratch) {
    return pr_k_bn_infer_act(x, gamma, beta, mean, var, m, c, eps, y, scratch, 0);
}

int pr_k_bn_infer_act(const float *x, const float *gamma, const float *beta, const float *mean,
                      const float *var, int64_t m, int64_t c, double eps, float *y, void *scratch,
                      int relu) {
    int64_t nc = n_chunks(m);
    float *a = coefs(scratch, m, c), *b = a + c;
    affine_coefs(gamma, beta, mean, var, c, eps, a, b);
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        affine_rows(x, a, b, NULL, CHUNK_LO(k), CHUNK_HI(k), c, y, relu);
    return PR_OK;
}

int pr_k_bn_infer_backward(const float *dy, const float *x, const float *gamma,
                           const float *mean, const float *var, int64_t m, int64_t c, double eps,
                           float *dx, float *dgamma, float *dbeta, void *scratch) {
    int64_t nc = n_chunks(m);
    double *part = scratch;
    float *a = coefs(scratch, m, c);
    for (int64_t j = 0; j < c; j++) a[j] = (float)(gamma[j] / sqrt((double)var[j] + eps));
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        grad_stats_rows(dy, x, mean, a, NULL, NULL, CHUNK_LO(k), CHUNK_HI(k), c,
                        part + k * 2 * c, part + k * 2 * c + c, dx);
    combine(part, nc, c);
    for (int64_t j = 0; j < c; j++) {
        dbeta[j] = (float)part[j];
        dgamma[j] = (float)(part[c + j] / sqrt((double)var[j] + eps));
    }
    return PR_OK;
}
