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

/* One row of a cross-entropy pass: x its logits or probabilities, t its
 * dense target (NULL: the one-hot of label l), g the upstream gradient of
 * its loss (backward passes); out its loss (forward passes) or its n
 * gradients. */
typedef void ce_row(const float *x, const float *t, int64_t l, int64_t n, float g, float *out);

/* Every row through `row` in parallel (rows of n in `in` and `target`,
 * out_n values of `out` each) once the labels, if used, are checked. */
static int ce_rows(ce_row *row, const float *g, const float *in, const float *target,
                   const void *labels, int i64, int64_t rows, int64_t n, float *out,
                   int64_t out_n) {
    if (!target && pr_check_labels(labels, i64 ? PR_I64 : PR_I32, rows, n, "index") != PR_OK)
        return PR_ERR_VALUE;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * n >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *t = target ? target + r * n : NULL;
        row(in + r * n, t, t ? -1 : label_at(labels, i64, r), n, g ? g[r] : 0.0f,
            out + r * out_n);
    }
    return PR_OK;
}

static void softmax_ce_row(const float *x, const float *t, int64_t l, int64_t n, float g,
                           float *loss) {
    float m = row_max(x, n);
    double ls = row_log_sum_exp_shifted(x, n, m), s = 0.0;
    if (t) {
        for (int64_t j = 0; j < n; j++) s += t[j] * (ls - (double)(x[j] - m));
    } else {
        s = ls - (double)(x[l] - m);
    }
    *loss = (float)s;
}

int pr_k_softmax_ce(const float *logits, const float *target, const void *labels, int i64,
                    int64_t rows, int64_t n, float *loss) {
    return ce_rows(softmax_ce_row, NULL, logits, target, labels, i64, rows, n, loss, 1);
}

static void softmax_ce_backward_row(const float *x, const float *t, int64_t l, int64_t n, float g,
                                    float *d) {
    float m = row_max(x, n);
    double s = 0.0, tsum = 0.0;
    for (int64_t j = 0; j < n; j++) s += (d[j] = expf(x[j] - m));
    for (int64_t j = 0; j < n; j++) tsum += target_at(t, l, j);
    double scale = g * tsum / s;
    for (int64_t j = 0; j < n; j++) d[j] = (float)(d[j] * scale - g * target_at(t, l, j));
}

int pr_k_softmax_ce_backward(const float *g, const float *logits, const float *target,
                             const void *labels, int i64, int64_t rows, int64_t n,
                             float *dlogits) {
    return ce_rows(softmax_ce_backward_row, g, logits, target, labels, i64, rows, n, dlogits, n);
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

static void probs_ce_row(const float *p, const float *t, int64_t l, int64_t n, float g,
                         float *loss) {
    double inv = 1.0 / row_sum(p, n), s = 0.0;
    if (t) {
        for (int64_t j = 0; j < n; j++) s -= t[j] * log(clipped(p[j] * inv));
    } else {
        s = -log(clipped(p[l] * inv));
    }
    *loss = (float)s;
}

int pr_k_probs_ce(const float *probs, const float *target, const void *labels, int i64,
                  int64_t rows, int64_t n, float *loss) {
    return ce_rows(probs_ce_row, NULL, probs, target, labels, i64, rows, n, loss, 1);
}

static void probs_ce_backward_row(const float *p, const float *t, int64_t l, int64_t n, float g,
                                  float *d) {
    double inv = 1.0 / row_sum(p, n), dot = 0.0;
    /* d[j] holds u_j = d loss / d q_j first. */
    for (int64_t j = 0; j < n; j++) {
        double q = p[j] * inv, tj = target_at(t, l, j);
        double u = (q >= KERAS_EPSILON && q <= 1.0 - KERAS_EPSILON && tj != 0.0) ? -tj / q : 0.0;
        d[j] = (float)u;
        dot += u * q;
    }
    for (int64_t j = 0; j < n; j++) d[j] = (float)(g * ((double)d[j] - dot) * inv);
}

int pr_k_probs_ce_backward(const float *g, const float *probs, const float *target,
                           const void *labels, int i64, int64_t rows, int64_t n, float *dprobs) {
    return ce_rows(probs_ce_backward_row, g, probs, target, labels, i64, rows, n, dprobs, n);
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
