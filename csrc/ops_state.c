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

/* ---- registry ------------------------------------------------------------- */

static const pr_attr_spec momentum_attrs[] = {
    {"momentum", PR_ATTR_FLOAT, offsetof(pr_scalar_attrs, value), 1, 0}, {NULL}};
static const pr_attr_spec sgd_attrs[] = {
    {"weight_decay", PR_ATTR_FLOAT, offsetof(pr_sgd_attrs, weight_decay), 0, 0}, {NULL}};
static const pr_attr_spec sgd_momentum_attrs[] = {
    {"momentum", PR_ATTR_FLOAT, offsetof(pr_sgd_attrs, momentum), 1, 0},
    {"nesterov", PR_ATTR_BOOL, offsetof(pr_sgd_attrs, nesterov), 0, 0},
    {"weight_decay", PR_ATTR_FLOAT, offsetof(pr_sgd_attrs, weight_decay), 0, 0}, {NULL}};

#define ASSIGN(var, nm, fw, d) \
    static const pr_op var = {.name = nm, .n_in = 2, .n_out = 0, .mutates = 1, \
                              .flags = PR_OP_STATEFUL, .infer = infer_assign, .forward = fw, \
                              .doc = d}

ASSIGN(op_assign, "assign", fw_assign,
       "assign(var, value): var = value in place; value broadcasts to var's shape.");
ASSIGN(op_assign_add, "assign_add", fw_assign_add,
       "assign_add(var, value): var += value in place; value broadcasts to var's shape.");
ASSIGN(op_assign_sub, "assign_sub", fw_assign_sub,
       "assign_sub(var, value): var -= value in place; value broadcasts to var's shape.");

static const pr_op op_moving_average = {
    .name = "moving_average_update", .n_in = 2, .n_out = 0, .mutates = 1,
    .flags = PR_OP_STATEFUL, .attrs = momentum_attrs, .attr_size = sizeof(pr_scalar_attrs),
    .infer = infer_moving_average, .forward = fw_moving_average,
    .doc = "moving_average_update(var, value; momentum): var = var * momentum + value * "
           "(1 - momentum) in place (Keras BatchNormalization)."};
static const pr_op op_sgd = {
    .name = "sgd_update", .n_in = 3, .n_out = 0, .mutates = 1, .flags = PR_OP_STATEFUL,
    .attrs = sgd_attrs, .attr_size = sizeof(pr_sgd_attrs), .infer = infer_sgd,
    .forward = fw_sgd,
    .doc = "sgd_update(var, grad, lr; weight_decay): Keras 3 SGD without momentum, in place."};
static const pr_op op_sgd_momentum = {
    .name = "sgd_momentum_update", .n_in = 4, .n_out = 0, .mutates = 1 | 4,
    .flags = PR_OP_STATEFUL, .attrs = sgd_momentum_attrs, .attr_size = sizeof(pr_sgd_attrs),
    .infer = infer_sgd_momentum, .forward = fw_sgd_momentum,
    .doc = "sgd_momentum_update(var, grad, velocity, lr; momentum, nesterov, weight_decay): "
           "Keras 3 SGD with momentum, updating var and velocity in place."};

const pr_op *const pr_ops_state[] = {&op_assign, &op_assign_add, &op_assign_sub,
                                     &op_moving_average, &op_sgd, &op_sgd_momentum, NULL};
