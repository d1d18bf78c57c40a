/* In-place variable updates.  Layout: contiguous, elementwise; formulas are
 * in optim.h with their sources.  Float arithmetic is float32 in the order
 * Keras 3 applies its ops, so results match a NumPy float32 replay exactly
 * (no FMA contraction: ISO C mode compiles with -ffp-contract=off), but for
 * optimizer slots below float32's normal range, which are zero here (see
 * `below`). */
#include "optim.h"

#include <float.h>
#include <math.h>

#define PARALLEL_MIN 32768
#define PI_F32 3.14159265358979323846f /* ops.array(math.pi, float32) */

/* Offset of flat element i of `shape` under strides st. */
static inline int64_t offset_of(int64_t i, int ndim, const int64_t *shape, const int64_t *st) {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        off += (i % shape[d]) * st[d];
        i /= shape[d];
    }
    return off;
}

static inline int64_t int_at(const void *p, pr_dtype t, int64_t i) {
    switch (t) {
    case PR_I32: return ((const int32_t *)p)[i];
    case PR_I64: return ((const int64_t *)p)[i];
    case PR_U8: return ((const uint8_t *)p)[i];
    case PR_BOOL: return ((const uint8_t *)p)[i];
    case PR_F32: return (int64_t)((const float *)p)[i];
    case PR_BF16: return 0; /* not an integer type: shape rules never pass it here */
    }
    return 0;
}

/* Values going into an int var must be representable in it: float32 ones
 * whole and in range, int64 ones in range of an int32 var. */
static int check_fits(const void *value, pr_dtype valt, int64_t n, pr_dtype vt) {
    double lo = vt == PR_I32 ? -2147483648.0 : -9223372036854775808.0;
    for (int64_t i = 0; valt == PR_F32 && i < n; i++) {
        double x = ((const float *)value)[i];
        if (!(x == floor(x) && x >= lo && x < -lo)) {
            pr_kernel_error("value %g at index %lld cannot be stored in an %s variable", x,
                            (long long)i, pr_dtype_name(vt));
            return PR_ERR_VALUE;
        }
    }
    for (int64_t i = 0; valt == PR_I64 && vt == PR_I32 && i < n; i++) {
        int64_t x = ((const int64_t *)value)[i];
        if (x < INT32_MIN || x > INT32_MAX) {
            pr_kernel_error("value %lld at index %lld cannot be stored in an int32 variable",
                            (long long)x, (long long)i);
            return PR_ERR_VALUE;
        }
    }
    return PR_OK;
}

static inline int64_t combine_int(pr_assign_kind k, int64_t a, int64_t b) {
    switch (k) {
    case PR_ASSIGN_SET: return b;
    case PR_ASSIGN_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case PR_ASSIGN_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    }
    return a;
}

int pr_k_assign(pr_assign_kind k, void *var, pr_dtype vt, int ndim, const int64_t *shape,
                const void *value, pr_dtype valt, int64_t val_size, const int64_t *st) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    int same = val_size == n; /* then the strides are the contiguous ones */
    if (vt == PR_F32) {
        float *v = var;
        const float *x = value;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
        for (int64_t i = 0; i < n; i++) {
            float b = x[same ? i : offset_of(i, ndim, shape, st)];
            v[i] = k == PR_ASSIGN_SET ? b : k == PR_ASSIGN_ADD ? v[i] + b : v[i] - b;
        }
        return PR_OK;
    }
    if (check_fits(value, valt, val_size, vt) != PR_OK) return PR_ERR_VALUE;
    for (int64_t i = 0; i < n; i++) {
        int64_t b = int_at(value, valt, same ? i : offset_of(i, ndim, shape, st));
        if (vt == PR_I32) {
            int32_t *v = var;
            v[i] = (int32_t)(uint32_t)combine_int(k, v[i], b);
        } else {
            int64_t *v = var;
            v[i] = combine_int(k, v[i], b);
        }
    }
    return PR_OK;
}

int pr_k_moving_average(float *var, const float *value, int64_t n, float momentum,
                        float one_minus_momentum) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) var[i] = var[i] * momentum + value[i] * one_minus_momentum;
    return PR_OK;
}

int pr_k_ema(float *var, float *average, int64_t n, float momentum, float one_minus_momentum,
             int overwrite) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float a = momentum * average[i] + one_minus_momentum * var[i];
        average[i] = a;
        if (overwrite) var[i] = a;
    }
    return PR_OK;
}

int pr_k_sgd(float *var, const float *grad, int64_t n, float lr, float wd) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float v = var[i];
        if (wd != 0.0f) v = v - v * wd * lr;
        var[i] = v - grad[i] * lr;
    }
    return PR_OK;
}

/* Slots (momentum, moving averages) decay geometrically where the gradient
 * is zero (a dead ReLU's weights) and reach float32's subnormal range after
 * some hundred steps, where every product costs a microcode assist (about
 * 100x; an MLP epoch spent 60% of its time in the SGD update).  A slot
 * whose next product `slot * factor` would be subnormal counts as zero,
 * and a subnormal result is stored as zero: what TensorFlow's CPU kernels
 * compute, since they run with flush-to-zero (Keras on TensorFlow sees the
 * same values).  Values at or above FLT_MIN / factor are untouched. */
static inline float below(float slot, float factor) {
    return factor > 0.0f && fabsf(slot) < FLT_MIN / factor ? 0.0f : slot; /* NaN stays */
}
static inline float normal_or_zero(float x) { return fabsf(x) < FLT_MIN ? 0.0f : x; }

/* SGD with momentum over [lo, hi): compiled for AVX-512, AVX2 and
 * baseline x86-64 from the same C (target_clones; the same operations in
 * each, no FMA contraction, so the same bits), with the weight-decay and
 * Nesterov cases as constants of their own loops. */
#define SGD_MOMENTUM_LOOP(WD, NESTEROV)                                                        \
    for (int64_t i = lo; i < hi; i++) {                                                        \
        float v = var[i], g = grad[i];                                                         \
        if (WD) v = v - v * wd * lr;                                                           \
        float m = normal_or_zero(below(velocity[i], momentum) * momentum - g * lr);            \
        velocity[i] = m;                                                                       \
        var[i] = v + ((NESTEROV) ? m * momentum - g * lr : m);                                 \
    }

PR_CLONES static void sgd_momentum_rows(float *restrict var, const float *restrict grad,
                                     float *restrict velocity, int64_t lo, int64_t hi, float lr,
                                     float momentum, int nesterov, float wd) {
    if (wd != 0.0f) {
        if (nesterov) { SGD_MOMENTUM_LOOP(1, 1) } else { SGD_MOMENTUM_LOOP(1, 0) }
    } else {
        if (nesterov) { SGD_MOMENTUM_LOOP(0, 1) } else { SGD_MOMENTUM_LOOP(0, 0) }
    }
}

int pr_k_sgd_momentum(float *var, const float *grad, float *velocity, int64_t n, float lr,
                      float momentum, int nesterov, float wd) {
    const int64_t chunk = 16384, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t c = 0; c < chunks; c++)
        sgd_momentum_rows(var, grad, velocity, c * chunk, n - c * chunk < chunk ? n : (c + 1) * chunk,
                          lr, momentum, nesterov, wd);
    return PR_OK;
}

int pr_k_adam(float *var, const float *grad, float *m, float *v, float *vhat, int64_t n,
              float lr, float step, float beta_1, float beta_2, float one_minus_b1,
              float one_minus_b2, float epsilon, float wd) {
    float b1p = powf(beta_1, step), b2p = powf(beta_2, step);
    float alpha = lr * sqrtf(1.0f - b2p) / (1.0f - b1p);
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float w = var[i], g = grad[i];
        if (wd != 0.0f) w = w - w * wd * lr;
        float m0 = below(m[i], one_minus_b1), v0 = below(v[i], one_minus_b2);
        float mi = normal_or_zero(m0 + (g - m0) * one_minus_b1);
        float vi = normal_or_zero(v0 + (g * g - v0) * one_minus_b2);
        m[i] = mi;
        v[i] = vi;
        if (vhat) {
            float h = vhat[i]; /* ops.maximum: NaN wins, as in NumPy */
            vi = vi != vi || h != h ? vi + h : vi > h ? vi : h;
            vhat[i] = vi;
        }
        var[i] = w - (mi * alpha) / (sqrtf(vi) + epsilon);
    }
    return PR_OK;
}

int pr_k_rmsprop(float *var, const float *grad, float *vel, float *mom, float *avg, int64_t n,
                 float lr, float rho, float one_minus_rho, float momentum, float epsilon,
                 float wd) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float w = var[i], g = grad[i];
        if (wd != 0.0f) w = w - w * wd * lr;
        float ve = normal_or_zero(rho * below(vel[i], rho) + one_minus_rho * (g * g));
        vel[i] = ve;
        float denom;
        if (avg) {
            float a = normal_or_zero(rho * below(avg[i], rho) + one_minus_rho * g);
            avg[i] = a;
            denom = ve - a * a + epsilon;
        } else {
            denom = ve + epsilon;
        }
        float inc = lr * g / sqrtf(denom);
        if (mom) {
            float mo = normal_or_zero(momentum * below(mom[i], momentum) + inc);
            mom[i] = mo;
            var[i] = w - mo;
        } else {
            var[i] = w - inc;
        }
    }
    return PR_OK;
}

static float annealed(float s, float decay_steps, float from, float alpha, float one_minus_alpha,
                      int linear) {
    float fraction = s / decay_steps;
    float c = linear ? 1.0f - fraction : 0.5f * (1.0f + cosf(PI_F32 * fraction));
    return from * (one_minus_alpha * c + alpha);
}

float pr_k_cosine_decay(double step, float initial, float decay_steps, float alpha,
                        float one_minus_alpha, int warmup, float warmup_target,
                        float warmup_steps, int linear) {
    float s = (float)step;
    if (!warmup)
        return annealed(fminf(s, decay_steps), decay_steps, initial, alpha, one_minus_alpha,
                        linear);
    s = fminf(s, decay_steps + warmup_steps);
    if (s < warmup_steps) return (warmup_target - initial) * (s / warmup_steps) + initial;
    return annealed(s - warmup_steps, decay_steps, warmup_target, alpha, one_minus_alpha, linear);
}

float pr_k_exponential_decay(double step, float initial, float decay_steps, float decay_rate,
                             int staircase) {
    float p = (float)step / decay_steps;
    if (staircase) p = floorf(p);
    return initial * powf(decay_rate, p);
}

float pr_k_piecewise_constant(double step, const double *boundaries, int64_t n,
                              const float *values) {
    int64_t i = 0;
    while (i < n && step > boundaries[i]) i++;
    return values[i];
}
