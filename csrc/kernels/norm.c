/* Batch normalization kernels (Ioffe & Szegedy 2015, "Batch Normalization:
 * Accelerating Deep Network Training by Reducing Internal Covariate Shift",
 * Algorithm 1 and section 3), channels-last: m rows of c channels.
 *
 * Memory traffic is what these cost, so each kernel makes as few passes as
 * the maths allows: training forward reads x twice (statistics, then y);
 * training backward reads dy and x twice; inference backward once.
 * Per-channel sums accumulate in double within each of a fixed number of row
 * chunks; chunk partials are combined in chunk order (deterministic for any
 * thread count). */
#include "norm.h"

#include <math.h>
#include <string.h>

#define MAX_CHUNKS 64
#define PARALLEL_MIN 32768

static int64_t n_chunks(int64_t m) { return m < MAX_CHUNKS ? (m > 0 ? m : 1) : MAX_CHUNKS; }

/* Scratch layout: chunk partials (n_chunks * 2c doubles), then 4c floats of
 * per-channel coefficients. */
size_t pr_bn_scratch_bytes(int64_t m, int64_t c) {
    return (size_t)(n_chunks(m) * 2 * c) * sizeof(double) + (size_t)(4 * c) * sizeof(float);
}

static float *coefs(void *scratch, int64_t m, int64_t c) {
    return (float *)((double *)scratch + n_chunks(m) * 2 * c);
}

/* Fold the chunk partials into the first chunk's 2c slots, in chunk order. */
static void combine(double *part, int64_t nc, int64_t c) {
    for (int64_t k = 1; k < nc; k++)
        for (int64_t j = 0; j < 2 * c; j++) part[j] += part[k * 2 * c + j];
}

/* y = x * a + b per channel, over all rows. */
static void affine(const float *x, const float *a, const float *b, int64_t m, int64_t c,
                   float *y) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * c;
        float *yr = y + r * c;
        for (int64_t j = 0; j < c; j++) yr[j] = xr[j] * a[j] + b[j];
    }
}

int pr_k_bn_train(const float *x, const float *gamma, const float *beta, int64_t m, int64_t c,
                  double eps, float *y, float *mean, float *var, void *scratch) {
    int64_t nc = n_chunks(m);
    double *part = scratch;
    const float *shift = x; /* sums of x - x[row 0]: avoids cancellation in E[d^2] - E[d]^2 */
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++) {
        double *s1 = part + k * 2 * c, *s2 = s1 + c;
        memset(s1, 0, sizeof(double) * (size_t)(2 * c));
        for (int64_t r = m * k / nc; r < m * (k + 1) / nc; r++) {
            const float *xr = x + r * c;
            for (int64_t j = 0; j < c; j++) {
                double d = (double)xr[j] - shift[j];
                s1[j] += d;
                s2[j] += d * d;
            }
        }
    }
    combine(part, nc, c);
    float *a = coefs(scratch, m, c), *b = a + c;
    for (int64_t j = 0; j < c; j++) {
        double mu = part[j] / m, v = part[c + j] / m - mu * mu;
        v = v > 0.0 ? v : 0.0;
        double mean_j = shift[j] + mu, inv = 1.0 / sqrt(v + eps);
        mean[j] = (float)mean_j;
        var[j] = (float)v;
        a[j] = (float)(gamma[j] * inv);
        b[j] = (float)(beta[j] - mean_j * gamma[j] * inv);
    }
    affine(x, a, b, m, c, y);
    return PR_OK;
}

int pr_k_bn_train_backward(const float *dy, const float *x, const float *gamma,
                           const float *mean, const float *var, int64_t m, int64_t c, double eps,
                           float *dx, float *dgamma, float *dbeta, void *scratch) {
    int64_t nc = n_chunks(m);
    double *part = scratch;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++) {
        double *s1 = part + k * 2 * c, *s2 = s1 + c;
        memset(s1, 0, sizeof(double) * (size_t)(2 * c));
        for (int64_t r = m * k / nc; r < m * (k + 1) / nc; r++) {
            const float *xr = x + r * c, *gr = dy + r * c;
            for (int64_t j = 0; j < c; j++) {
                s1[j] += gr[j];
                s2[j] += (double)gr[j] * (xr[j] - mean[j]);
            }
        }
    }
    combine(part, nc, c);
    /* dx = A * dy + B * (x - mean) + C per channel. */
    float *A = coefs(scratch, m, c), *B = A + c, *C = B + c;
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
    for (int64_t r = 0; r < m; r++) {
        const float *xr = x + r * c, *gr = dy + r * c;
        float *o = dx + r * c;
        for (int64_t j = 0; j < c; j++) o[j] = A[j] * gr[j] + B[j] * (xr[j] - mean[j]) + C[j];
    }
    return PR_OK;
}

int pr_k_bn_infer(const float *x, const float *gamma, const float *beta, const float *mean,
                  const float *var, int64_t m, int64_t c, double eps, float *y, void *scratch) {
    float *a = coefs(scratch, m, c), *b = a + c;
    for (int64_t j = 0; j < c; j++) {
        double gi = gamma[j] / sqrt((double)var[j] + eps);
        a[j] = (float)gi;
        b[j] = (float)(beta[j] - mean[j] * gi);
    }
    affine(x, a, b, m, c, y);
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
    for (int64_t k = 0; k < nc; k++) {
        double *s1 = part + k * 2 * c, *s2 = s1 + c;
        memset(s1, 0, sizeof(double) * (size_t)(2 * c));
        for (int64_t r = m * k / nc; r < m * (k + 1) / nc; r++) {
            const float *xr = x + r * c, *gr = dy + r * c;
            float *o = dx + r * c;
            for (int64_t j = 0; j < c; j++) {
                s1[j] += gr[j];
                s2[j] += (double)gr[j] * (xr[j] - mean[j]);
                o[j] = gr[j] * a[j];
            }
        }
    }
    combine(part, nc, c);
    for (int64_t j = 0; j < c; j++) {
        dbeta[j] = (float)part[j];
        dgamma[j] = (float)(part[c + j] / sqrt((double)var[j] + eps));
    }
    return PR_OK;
}
