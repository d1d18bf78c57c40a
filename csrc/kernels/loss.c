/* Softmax, cross-entropy and accuracy kernels over the last axis.
 * Layout: `rows` contiguous rows of `n` float32 elements.
 * Sources: the numerically stable softmax / log-sum-exp (subtract the row
 * maximum); the from-probabilities losses follow Keras 3
 * (keras/src/backend/numpy/nn.py: categorical_crossentropy with
 * from_logits=False renormalises, clips to [epsilon, 1 - epsilon] with
 * epsilon = 1e-7, then takes the log).  Row sums accumulate in double; rows
 * run in parallel, each row sequentially, so results do not depend on the
 * thread count. */
#include "loss.h"

#include <math.h>

#define PARALLEL_MIN 32768
#define KERAS_EPSILON 1e-7

static inline int64_t label_at(const void *labels, int i64, int64_t r) {
    return i64 ? ((const int64_t *)labels)[r] : ((const int32_t *)labels)[r];
}

/* Dense target, or the one-hot of `label`. */
static inline double target_at(const float *t, int64_t label, int64_t j) {
    return t ? (double)t[j] : (double)(j == label);
}

static int check_labels(const void *labels, int i64, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t l = label_at(labels, i64, r);
        if (l < 0 || l >= n) {
            pr_kernel_error("label %lld at index %lld is outside [0, %lld)", (long long)l,
                            (long long)r, (long long)n);
            return PR_ERR_VALUE;
        }
    }
    return PR_OK;
}

static inline float row_max(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* log(sum(exp(x - m))) for the row maximum m. */
static inline double row_log_sum_exp_shifted(const float *x, int64_t n, float m) {
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += expf(x[j] - m);
    return log(s);
}

int pr_k_softmax(const float *x, float *y, int64_t rows, int64_t n, int log) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n, m = row_max(xr, n);
        if (log) {
            float ls = (float)row_log_sum_exp_shifted(xr, n, m);
            for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - m) - ls;
        } else {
            double s = 0.0;
            for (int64_t j = 0; j < n; j++) s += (yr[j] = expf(xr[j] - m));
            float inv = (float)(1.0 / s);
            for (int64_t j = 0; j < n; j++) yr[j] *= inv;
        }
    }
    return PR_OK;
}

int pr_k_softmax_backward(const float *dy, const float *y, float *dx, int64_t rows, int64_t n,
                          int log) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *g = dy + r * n, *yr = y + r * n;
        float *d = dx + r * n;
        double s = 0.0;
        if (log) {
            for (int64_t j = 0; j < n; j++) s += g[j];
            for (int64_t j = 0; j < n; j++) d[j] = g[j] - expf(yr[j]) * (float)s;
        } else {
            for (int64_t j = 0; j < n; j++) s += (double)g[j] * yr[j];
            for (int64_t j = 0; j < n; j++) d[j] = yr[j] * (g[j] - (float)s);
        }
    }
    return PR_OK;
}

int pr_k_softmax_ce(const float *logits, const float *target, const void *labels, int i64,
                    int64_t rows, int64_t n, float *loss) {
    if (!target && check_labels(labels, i64, rows, n) != PR_OK) return PR_ERR_VALUE;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *x = logits + r * n, *t = target ? target + r * n : NULL;
        int64_t l = t ? -1 : label_at(labels, i64, r);
        float m = row_max(x, n);
        double ls = row_log_sum_exp_shifted(x, n, m), s = 0.0;
        if (t) {
            for (int64_t j = 0; j < n; j++) s += t[j] * (ls - (double)(x[j] - m));
        } else {
            s = ls - (double)(x[l] - m);
        }
        loss[r] = (float)s;
    }
    return PR_OK;
}

int pr_k_softmax_ce_backward(const float *g, const float *logits, const float *target,
                             const void *labels, int i64, int64_t rows, int64_t n,
                             float *dlogits) {
    if (!target && check_labels(labels, i64, rows, n) != PR_OK) return PR_ERR_VALUE;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *x = logits + r * n, *t = target ? target + r * n : NULL;
        int64_t l = t ? -1 : label_at(labels, i64, r);
        float *d = dlogits + r * n, m = row_max(x, n);
        double s = 0.0, tsum = 0.0;
        for (int64_t j = 0; j < n; j++) s += (d[j] = expf(x[j] - m));
        for (int64_t j = 0; j < n; j++) tsum += target_at(t, l, j);
        double scale = g[r] * tsum / s;
        for (int64_t j = 0; j < n; j++) d[j] = (float)(d[j] * scale - g[r] * target_at(t, l, j));
    }
    return PR_OK;
}

/* The clipped renormalised probability q_j / c_j of one row. */
static inline double clipped(double q) {
    return q < KERAS_EPSILON ? KERAS_EPSILON : q > 1.0 - KERAS_EPSILON ? 1.0 - KERAS_EPSILON : q;
}

static inline double row_sum(const float *p, int64_t n) {
    double s = 0.0;
    for (int64_t j = 0; j < n; j++) s += p[j];
    return s;
}

int pr_k_probs_ce(const float *probs, const float *target, const void *labels, int i64,
                  int64_t rows, int64_t n, float *loss) {
    if (!target && check_labels(labels, i64, rows, n) != PR_OK) return PR_ERR_VALUE;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *p = probs + r * n, *t = target ? target + r * n : NULL;
        double inv = 1.0 / row_sum(p, n), s = 0.0;
        if (t) {
            for (int64_t j = 0; j < n; j++) s -= t[j] * log(clipped(p[j] * inv));
        } else {
            s = -log(clipped(p[label_at(labels, i64, r)] * inv));
        }
        loss[r] = (float)s;
    }
    return PR_OK;
}

int pr_k_probs_ce_backward(const float *g, const float *probs, const float *target,
                           const void *labels, int i64, int64_t rows, int64_t n, float *dprobs) {
    if (!target && check_labels(labels, i64, rows, n) != PR_OK) return PR_ERR_VALUE;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *p = probs + r * n, *t = target ? target + r * n : NULL;
        int64_t l = t ? -1 : label_at(labels, i64, r);
        float *d = dprobs + r * n;
        double inv = 1.0 / row_sum(p, n), dot = 0.0;
        /* d[j] holds u_j = d loss / d q_j first. */
        for (int64_t j = 0; j < n; j++) {
            double q = p[j] * inv, tj = target_at(t, l, j);
            double u = (q >= KERAS_EPSILON && q <= 1.0 - KERAS_EPSILON && tj != 0.0) ? -tj / q : 0.0;
            d[j] = (float)u;
            dot += u * q;
        }
        for (int64_t j = 0; j < n; j++) d[j] = (float)(g[r] * ((double)d[j] - dot) * inv);
    }
    return PR_OK;
}

static inline int64_t row_argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t j = 1; j < n; j++)
        if (x[j] > x[best]) best = j;
    return best;
}

int pr_k_accuracy(const float *pred, const float *target, const void *labels, int i64,
                  int64_t rows, int64_t n, float *out) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t want = target ? row_argmax(target + r * n, n) : label_at(labels, i64, r);
        out[r] = row_argmax(pred + r * n, n) == want ? 1.0f : 0.0f;
    }
    return PR_OK;
}
