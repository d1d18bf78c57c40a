/* Registry entries of the state family: ops that update Variables in place
 * (n_out = 0, `.mutates` marks the written inputs, never removed from a
 * graph, no gradient).  Shape rules check everything, so a bad call raises
 * before any element is written. */
#include "ops.h" /* Python.h first */

#include "kernels/elementwise.h"
#include "kernels/optim.h"
#include "op_attrs.h"

/* ---- shape rules ---------------------------------------------------------- */

static int same_shape(const pr_view *a, const pr_view *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (!pr_dim_maybe_equal(a->shape[d], b->shape[d])) return 0;
    return 1;
}

/* Input i (float32) must have the variable's shape exactly. */
static int expect_like_var(const pr_op *op, const pr_view *in, int i, const char *what) {
    if (pr_expect_dtype(op, in, i, PR_F32) < 0) return -1;
    if (!same_shape(&in[0], &in[i])) {
        char s[128], v[128];
        return pr_fail(op, PyExc_ValueError, "%s has shape %s, expected the variable's shape %s",
                       what, pr_shape_str(&in[i], s, sizeof s), pr_shape_str(&in[0], v, sizeof v));
    }
    return 0;
}

/* assign, assign_add, assign_sub: (var, value), value broadcasts to var. */
static int infer_assign(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    const pr_view *var = &in[0], *val = &in[1];
    if (var->dtype != PR_F32 && var->dtype != PR_I32 && var->dtype != PR_I64)
        return pr_fail(op, PyExc_TypeError, "the variable must be float32, int32 or int64, got %s",
                       pr_dtype_name(var->dtype));
    if (var->dtype == PR_F32 && val->dtype != PR_F32)
        return pr_fail(op, PyExc_TypeError,
                       "the variable is float32, so the value must be float32, got %s",
                       pr_dtype_name(val->dtype));
    int ok = val->ndim <= var->ndim;
    for (int d = 0; ok && d < val->ndim; d++) {
        int64_t e = val->shape[d], t = var->shape[d + var->ndim - val->ndim];
        ok = pr_dim_maybe_equal(e, t) || e == 1;
    }
    if (!ok) {
        char s[128], v[128];
        return pr_fail(op, PyExc_ValueError,
                       "a value of shape %s cannot be broadcast to the variable's shape %s",
                       pr_shape_str(val, s, sizeof s), pr_shape_str(var, v, sizeof v));
    }
    return 0;
}

static int infer_moving_average(const pr_op *op, const pr_view *in, int n, const void *attrs,
                                pr_view *out, size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    return expect_like_var(op, in, 1, "the value");
}

/* The learning rate input: a float32 tensor holding one number. */
static int expect_lr(const pr_op *op, const pr_view *in, int i) {
    if (pr_expect_dtype(op, in, i, PR_F32) < 0) return -1;
    if (in[i].size != 1) {
        char s[128];
        return pr_fail(op, PyExc_ValueError, "the learning rate must hold one number, got shape %s",
                       pr_shape_str(&in[i], s, sizeof s));
    }
    return 0;
}

static int infer_sgd(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                     size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || expect_like_var(op, in, 1, "the gradient") < 0)
        return -1;
    return expect_lr(op, in, 2);
}

static int infer_sgd_momentum(const pr_op *op, const pr_view *in, int n, const void *attrs,
                              pr_view *out, size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || expect_like_var(op, in, 1, "the gradient") < 0 ||
        expect_like_var(op, in, 2, "the velocity") < 0)
        return -1;
    return expect_lr(op, in, 3);
}

/* An optional slot: a Variable of the variable's shape, or an empty one
 * (size 0) when the optimizer's configuration does not use it. */
static int expect_slot(const pr_op *op, const pr_view *in, int i, const char *what) {
    if (pr_expect_dtype(op, in, i, PR_F32) < 0) return -1;
    if (in[i].ndim == 1 && in[i].shape[0] == 0) return 0;
    return expect_like_var(op, in, i, what);
}

static int used(const pr_view *v) { return !(v->ndim == 1 && v->shape[0] == 0); }

/* The step count: one integer (int32/int64) or float32 number. */
static int expect_step(const pr_op *op, const pr_view *in, int i) {
    if (in[i].dtype == PR_U8 || in[i].dtype == PR_BOOL)
        return pr_fail(op, PyExc_TypeError, "the step must be int32, int64 or float32, got %s",
                       pr_dtype_name(in[i].dtype));
    if (in[i].size != 1) {
        char s[128];
        return pr_fail(op, PyExc_ValueError, "the step must hold one number, got shape %s",
                       pr_shape_str(&in[i], s, sizeof s));
    }
    return 0;
}

static double step_value(const pr_view *v) {
    switch (v->dtype) {
    case PR_I32: return *(const int32_t *)v->data;
    case PR_I64: return (double)*(const int64_t *)v->data;
    case PR_F32: return *(const float *)v->data;
    case PR_U8:
    case PR_BOOL: return *(const uint8_t *)v->data;
    case PR_BF16: return 0; /* pr_call gives this op bfloat16 inputs as float32 */
    }
    return 0;
}

/* ema_update(var, average, momentum, iterations) */
static int infer_ema(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                     size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || expect_like_var(op, in, 1, "the average") < 0)
        return -1;
    if (pr_expect_dtype(op, in, 2, PR_F32) < 0) return -1;
    if (in[2].size != 1) {
        char s[128];
        return pr_fail(op, PyExc_ValueError, "the momentum must hold one number, got shape %s",
                       pr_shape_str(&in[2], s, sizeof s));
    }
    if (expect_step(op, in, 3) < 0) return -1;
    const pr_ema_attrs *e = attrs;
    if (e->period < 1 || e->overwrite_frequency < 0)
        return pr_fail(op, PyExc_ValueError,
                       "needs period >= 1 and overwrite_frequency >= 0, got period=%lld, "
                       "overwrite_frequency=%lld",
                       (long long)e->period, (long long)e->overwrite_frequency);
    return 0;
}

/* adam_update(var, grad, m, v, vhat, lr, iterations) */
static int infer_adam(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                      size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || expect_like_var(op, in, 1, "the gradient") < 0 ||
        expect_like_var(op, in, 2, "the momentum") < 0 ||
        expect_like_var(op, in, 3, "the velocity") < 0 ||
        expect_slot(op, in, 4, "the velocity_hat") < 0 || expect_lr(op, in, 5) < 0)
        return -1;
    return expect_step(op, in, 6);
}

/* rmsprop_update(var, grad, velocity, momentum, average_gradient, lr) */
static int infer_rmsprop(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || expect_like_var(op, in, 1, "the gradient") < 0 ||
        expect_like_var(op, in, 2, "the velocity") < 0 ||
        expect_slot(op, in, 3, "the momentum") < 0 ||
        expect_slot(op, in, 4, "the average gradient") < 0)
        return -1;
    return expect_lr(op, in, 5);
}

/* Schedules: (step[, boundaries, values]) -> a float32 scalar. */
static int infer_schedule(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    if (expect_step(op, in, 0) < 0) return -1;
    pr_set_out(&out[0], PR_F32, 0, NULL);
    return 0;
}

static int infer_piecewise(const pr_op *op, const pr_view *in, int n, const void *attrs,
                           pr_view *out, size_t *ws) {
    if (expect_step(op, in, 0) < 0 || pr_expect_ndim(op, in, 1, 1) < 0 ||
        pr_expect_ndim(op, in, 2, 1) < 0 || pr_expect_dtype(op, in, 2, PR_F32) < 0)
        return -1;
    if (in[1].dtype == PR_U8)
        return pr_fail(op, PyExc_TypeError,
                       "the boundaries must be int32, int64 or float32, got uint8");
    if (!pr_dim_maybe_equal(in[2].shape[0], in[1].shape[0] + 1))
        return pr_fail(op, PyExc_ValueError,
                       "needs one value more than boundaries, got %lld boundaries and %lld values",
                       (long long)in[1].shape[0], (long long)in[2].shape[0]);
    pr_set_out(&out[0], PR_F32, 0, NULL);
    *ws = (size_t)in[1].shape[0] * sizeof(double);
    return 0;
}

/* ---- kernels -------------------------------------------------------------- */

static int assign(pr_assign_kind k, const pr_view *in) {
    int64_t st[PR_MAX_DIMS];
    pr_broadcast_strides(&in[1], in[0].ndim, in[0].shape, st);
    return pr_k_assign(k, in[0].data, in[0].dtype, in[0].ndim, in[0].shape, in[1].data,
                       in[1].dtype, in[1].size, st);
}
static int fw_assign(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return assign(PR_ASSIGN_SET, in);
}
static int fw_assign_add(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return assign(PR_ASSIGN_ADD, in);
}
static int fw_assign_sub(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return assign(PR_ASSIGN_SUB, in);
}
static int fw_moving_average(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    double m = ((const pr_scalar_attrs *)a)->value;
    /* As Keras: momentum and (1.0 - momentum) are computed in double, then cast. */
    return pr_k_moving_average(in[0].data, in[1].data, in[0].size, (float)m, (float)(1.0 - m));
}
static int fw_sgd(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const pr_sgd_attrs *s = a;
    return pr_k_sgd(in[0].data, in[1].data, in[0].size, *(const float *)in[2].data,
                    (float)s->weight_decay);
}
static int fw_sgd_momentum(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const pr_sgd_attrs *s = a;
    return pr_k_sgd_momentum(in[0].data, in[1].data, in[2].data, in[0].size,
                             *(const float *)in[3].data, (float)s->momentum, s->nesterov,
                             (float)s->weight_decay);
}

static int fw_ema(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const pr_ema_attrs *e = a;
    int64_t t = (int64_t)step_value(&in[3]) + 1; /* the step just taken, from 1 */
    if (t % e->period != 0) return PR_OK;
    float m = *(const float *)in[2].data;
    if (e->first_step_copy && t == 1) m = 0.0f; /* Keras: momentum 0 at iterations == 0 */
    int overwrite = e->overwrite_frequency > 0 && t % e->overwrite_frequency == 0;
    return pr_k_ema(in[0].data, in[1].data, in[0].size, m, 1.0f - m, overwrite);
}

typedef struct {
    double beta_1, beta_2, epsilon, weight_decay;
} adam_attrs;

static int fw_adam(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const adam_attrs *s = a;
    /* As Keras: 1 - beta in double (Python floats), then float32. */
    return pr_k_adam(in[0].data, in[1].data, in[2].data, in[3].data,
                     used(&in[4]) ? in[4].data : NULL, in[0].size, *(const float *)in[5].data,
                     (float)(step_value(&in[6]) + 1.0), (float)s->beta_1, (float)s->beta_2,
                     (float)(1.0 - s->beta_1), (float)(1.0 - s->beta_2), (float)s->epsilon,
                     (float)s->weight_decay);
}

typedef struct {
    double rho, momentum, epsilon, weight_decay;
} rmsprop_attrs;

static int fw_rmsprop(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const rmsprop_attrs *s = a;
    return pr_k_rmsprop(in[0].data, in[1].data, in[2].data, used(&in[3]) ? in[3].data : NULL,
                        used(&in[4]) ? in[4].data : NULL, in[0].size, *(const float *)in[5].data,
                        (float)s->rho, (float)(1.0 - s->rho), (float)s->momentum,
                        (float)s->epsilon, (float)s->weight_decay);
}

typedef struct {
    double initial_learning_rate, decay_steps, alpha, warmup_target, warmup_steps;
    int warmup, linear;
} cosine_attrs;

static int fw_cosine(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const cosine_attrs *s = a;
    *(float *)out[0].data = pr_k_cosine_decay(
        step_value(&in[0]), (float)s->initial_learning_rate, (float)s->decay_steps,
        (float)s->alpha, (float)(1.0 - s->alpha), s->warmup, (float)s->warmup_target,
        (float)s->warmup_steps, s->linear);
    return PR_OK;
}

typedef struct {
    double initial_learning_rate, decay_steps, decay_rate;
    int staircase;
} exponential_attrs;

static int fw_exponential(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const exponential_attrs *s = a;
    *(float *)out[0].data =
        pr_k_exponential_decay(step_value(&in[0]), (float)s->initial_learning_rate,
                               (float)s->decay_steps, (float)s->decay_rate, s->staircase);
    return PR_OK;
}

static int fw_piecewise(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    double *bounds = ws;
    for (int64_t i = 0; i < in[1].size; i++) {
        pr_view b = in[1];
        b.data = (char *)in[1].data + i * (int64_t)pr_dtype_size(in[1].dtype);
        bounds[i] = step_value(&b);
    }
    *(float *)out[0].data = pr_k_piecewise_constant(step_value(&in[0]), bounds, in[1].size,
                                                    in[2].data);
    return PR_OK;
}

/* ---- registry ------------------------------------------------------------- */

static const pr_attr_spec momentum_attrs[] = {
    {"momentum", PR_ATTR_FLOAT, offsetof(pr_scalar_attrs, value), 1, 0}, {NULL}};
static const pr_attr_spec sgd_attrs[] = {
    {"weight_decay", PR_ATTR_FLOAT, offsetof(pr_sgd_attrs, weight_decay), 0, 0}, {NULL}};
static const pr_attr_spec sgd_momentum_attrs[] = {
    {"momentum", PR_ATTR_FLOAT, offsetof(pr_sgd_attrs, momentum), 1, 0},
    {"nesterov", PR_ATTR_BOOL, offsetof(pr_sgd_attrs, nesterov), 0, 0},
    {"weight_decay", PR_ATTR_FLOAT, offsetof(pr_sgd_attrs, weight_decay), 0, 0}, {NULL}};

static const pr_attr_spec ema_attr_specs[] = {
    {"period", PR_ATTR_INT, offsetof(pr_ema_attrs, period), 0, 1},
    {"overwrite_frequency", PR_ATTR_INT, offsetof(pr_ema_attrs, overwrite_frequency), 0, 0},
    {"first_step_copy", PR_ATTR_BOOL, offsetof(pr_ema_attrs, first_step_copy), 0, 0}, {NULL}};
static const pr_attr_spec adam_attr_specs[] = {
    {"beta_1", PR_ATTR_FLOAT, offsetof(adam_attrs, beta_1), 0, 0.9},
    {"beta_2", PR_ATTR_FLOAT, offsetof(adam_attrs, beta_2), 0, 0.999},
    {"epsilon", PR_ATTR_FLOAT, offsetof(adam_attrs, epsilon), 0, 1e-7},
    {"weight_decay", PR_ATTR_FLOAT, offsetof(adam_attrs, weight_decay), 0, 0}, {NULL}};
static const pr_attr_spec rmsprop_attr_specs[] = {
    {"rho", PR_ATTR_FLOAT, offsetof(rmsprop_attrs, rho), 0, 0.9},
    {"momentum", PR_ATTR_FLOAT, offsetof(rmsprop_attrs, momentum), 0, 0},
    {"epsilon", PR_ATTR_FLOAT, offsetof(rmsprop_attrs, epsilon), 0, 1e-7},
    {"weight_decay", PR_ATTR_FLOAT, offsetof(rmsprop_attrs, weight_decay), 0, 0}, {NULL}};
static const pr_attr_spec cosine_attr_specs[] = {
    {"initial_learning_rate", PR_ATTR_FLOAT, offsetof(cosine_attrs, initial_learning_rate), 1, 0},
    {"decay_steps", PR_ATTR_FLOAT, offsetof(cosine_attrs, decay_steps), 1, 0},
    {"alpha", PR_ATTR_FLOAT, offsetof(cosine_attrs, alpha), 0, 0},
    {"warmup", PR_ATTR_BOOL, offsetof(cosine_attrs, warmup), 0, 0},
    {"warmup_target", PR_ATTR_FLOAT, offsetof(cosine_attrs, warmup_target), 0, 0},
    {"warmup_steps", PR_ATTR_FLOAT, offsetof(cosine_attrs, warmup_steps), 0, 0},
    {"linear", PR_ATTR_BOOL, offsetof(cosine_attrs, linear), 0, 0}, {NULL}};
static const pr_attr_spec exponential_attr_specs[] = {
    {"initial_learning_rate", PR_ATTR_FLOAT, offsetof(exponential_attrs, initial_learning_rate),
     1, 0},
    {"decay_steps", PR_ATTR_FLOAT, offsetof(exponential_attrs, decay_steps), 1, 0},
    {"decay_rate", PR_ATTR_FLOAT, offsetof(exponential_attrs, decay_rate), 1, 0},
    {"staircase", PR_ATTR_BOOL, offsetof(exponential_attrs, staircase), 0, 0}, {NULL}};

#define ASSIGN(var, nm, fw, d) \
    const pr_op var = {.name = nm, .n_in = 2, .n_out = 0, .mutates = 1, \
                              .flags = PR_OP_STATEFUL, .infer = infer_assign, .forward = fw, \
                              .doc = d}

ASSIGN(pr_op_assign, "assign", fw_assign,
       "assign(var, value): var = value in place; value broadcasts to var's shape.");
ASSIGN(pr_op_assign_add, "assign_add", fw_assign_add,
       "assign_add(var, value): var += value in place; value broadcasts to var's shape.");
ASSIGN(pr_op_assign_sub, "assign_sub", fw_assign_sub,
       "assign_sub(var, value): var -= value in place; value broadcasts to var's shape.");

const pr_op pr_op_moving_average_update = {
    .name = "moving_average_update", .n_in = 2, .n_out = 0, .mutates = 1,
    .flags = PR_OP_STATEFUL, .attrs = momentum_attrs, .attr_size = sizeof(pr_scalar_attrs),
    .infer = infer_moving_average, .forward = fw_moving_average,
    .doc = "moving_average_update(var, value; momentum): var = var * momentum + value * "
           "(1 - momentum) in place (Keras BatchNormalization)."};
const pr_op pr_op_sgd_update = {
    .name = "sgd_update", .n_in = 3, .n_out = 0, .mutates = 1, .flags = PR_OP_STATEFUL,
    .attrs = sgd_attrs, .attr_size = sizeof(pr_sgd_attrs), .infer = infer_sgd,
    .forward = fw_sgd,
    .doc = "sgd_update(var, grad, lr; weight_decay): Keras 3 SGD without momentum, in place."};
const pr_op pr_op_sgd_momentum_update = {
    .name = "sgd_momentum_update", .n_in = 4, .n_out = 0, .mutates = 1 | 4,
    .flags = PR_OP_STATEFUL, .attrs = sgd_momentum_attrs, .attr_size = sizeof(pr_sgd_attrs),
    .infer = infer_sgd_momentum, .forward = fw_sgd_momentum,
    .doc = "sgd_momentum_update(var, grad, velocity, lr; momentum, nesterov, weight_decay): "
           "Keras 3 SGD with momentum, updating var and velocity in place."};
const pr_op pr_op_ema_update = {
    .name = "ema_update", .n_in = 4, .n_out = 0, .mutates = 1 | 2, .flags = PR_OP_STATEFUL,
    .attrs = ema_attr_specs, .attr_size = sizeof(pr_ema_attrs), .infer = infer_ema,
    .forward = fw_ema,
    .doc = "ema_update(var, average, momentum, iterations; period, overwrite_frequency, "
           "first_step_copy): at step t = iterations + 1, if t % period == 0: average = "
           "momentum * average + (1 - momentum) * var (momentum 0 at t == 1 with "
           "first_step_copy), then var = average if overwrite_frequency divides t; in place "
           "(Keras 3 optimizer EMA; Lookahead)."};

const pr_op pr_op_adam_update = {
    .name = "adam_update", .n_in = 7, .n_out = 0, .mutates = 1 | 4 | 8 | 16,
    .flags = PR_OP_STATEFUL, .attrs = adam_attr_specs, .attr_size = sizeof(adam_attrs),
    .infer = infer_adam, .forward = fw_adam,
    .doc = "adam_update(var, grad, momentum, velocity, velocity_hat, lr, iterations; beta_1, "
           "beta_2, epsilon, weight_decay): Keras 3 Adam/AdamW step in place; velocity_hat of "
           "shape (0,) without amsgrad."};
const pr_op pr_op_rmsprop_update = {
    .name = "rmsprop_update", .n_in = 6, .n_out = 0, .mutates = 1 | 4 | 8 | 16,
    .flags = PR_OP_STATEFUL, .attrs = rmsprop_attr_specs, .attr_size = sizeof(rmsprop_attrs),
    .infer = infer_rmsprop, .forward = fw_rmsprop,
    .doc = "rmsprop_update(var, grad, velocity, momentum, average_gradient, lr; rho, momentum, "
           "epsilon, weight_decay): Keras 3 RMSprop step in place; momentum/average_gradient "
           "of shape (0,) when unused (momentum 0, not centered)."};
const pr_op pr_op_cosine_decay_schedule = {
    .name = "cosine_decay_schedule", .n_in = 1, .n_out = 1, .attrs = cosine_attr_specs,
    .attr_size = sizeof(cosine_attrs), .infer = infer_schedule, .forward = fw_cosine,
    .doc = "cosine_decay_schedule(step; initial_learning_rate, decay_steps, alpha, warmup, "
           "warmup_target, warmup_steps, linear): Keras CosineDecay's rate at `step` (float32 "
           "scalar); linear=True anneals linearly (one-cycle)."};
const pr_op pr_op_exponential_decay_schedule = {
    .name = "exponential_decay_schedule", .n_in = 1, .n_out = 1,
    .attrs = exponential_attr_specs, .attr_size = sizeof(exponential_attrs),
    .infer = infer_schedule, .forward = fw_exponential,
    .doc = "exponential_decay_schedule(step; initial_learning_rate, decay_steps, decay_rate, "
           "staircase): Keras ExponentialDecay's rate at `step` (float32 scalar)."};
const pr_op pr_op_piecewise_constant_schedule = {
    .name = "piecewise_constant_schedule", .n_in = 3, .n_out = 1, .infer = infer_piecewise,
    .forward = fw_piecewise,
    .doc = "piecewise_constant_schedule(step, boundaries, values): Keras "
           "PiecewiseConstantDecay's rate at `step` (float32 scalar)."};

