/* Registry entries for elementwise ops: add, subtract, multiply, divide,
 * maximum, minimum, power (NumPy broadcasting), negative, scale, relu, exp,
 * log, sqrt, square, abs, sign, sigmoid, tanh, erf, clip, ones_like,
 * zeros_like, broadcast_to, sum_to_shape.  Comparisons (bool results) and
 * where are in ops_array.c. */
#include "ops.h" /* Python.h first */
#include "op_list.h"

#include "kernels/elementwise.h"
#include "kernels/fused.h"
#include "op_attrs.h"

/* ---- shape rules ---------------------------------------------------------- */

static int broadcast_shape(const pr_op *op, const pr_view *a, const pr_view *b, pr_view *out) {
    int nd;
    int64_t shape[PR_MAX_DIMS];
    if (pr_broadcast_shape(op, a, b, &nd, shape) < 0) return -1;
    pr_set_out(out, PR_F32, nd, shape);
    return 0;
}

/* float32 inputs, or for an op with a bfloat16 mask (add, relu,
 * relu_backward: Keras's mixed_bfloat16 activations) bfloat16 ones; the
 * output has the inputs' dtype. */
static int expect_dtypes(const pr_op *op, const pr_view *in, int n, pr_dtype *dt) {
    if (op->bf16_inputs) return pr_activation_dtype(op, in, dt);
    *dt = PR_F32;
    for (int i = 0; i < n; i++)
        if (pr_expect_dtype(op, in, i, PR_F32) < 0) return -1;
    return 0;
}

/* PR_OP_INT ops: two integer inputs of one dtype (pr_call promoted them)
 * give that dtype; otherwise the float rule. */
static int binary_dtype(const pr_op *op, const pr_view *in, pr_dtype *dt) {
    pr_dtype d = in[0].dtype;
    if ((op->flags & PR_OP_INT) && (d == PR_I32 || d == PR_I64 || d == PR_U8)) {
        if (in[1].dtype != d)
            return pr_fail(op, PyExc_TypeError, "inputs must have one integer dtype, got %s "
                           "and %s", pr_dtype_name(d), pr_dtype_name(in[1].dtype));
        *dt = d;
        return 0;
    }
    return expect_dtypes(op, in, 2, dt);
}

static int infer_binary(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                        size_t *ws) {
    pr_dtype dt;
    if (binary_dtype(op, in, &dt) < 0 || broadcast_shape(op, &in[0], &in[1], out) < 0)
        return -1;
    out->dtype = dt;
    return 0;
}

static int infer_same(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                      size_t *ws) {
    pr_dtype dt;
    if (expect_dtypes(op, in, 1, &dt) < 0) return -1;
    pr_set_out(out, dt, in[0].ndim, in[0].shape);
    return 0;
}

static int infer_scale(const pr_op *op, const pr_view *in, int n, const void *attrs,
                       pr_view *out, size_t *ws) {
    if (((const pr_scale_attrs *)attrs)->divisor < 0 &&
        !pr_dim_is_sym(((const pr_scale_attrs *)attrs)->divisor))
        return pr_fail(op, PyExc_ValueError, "divisor must be a size >= 0, got %lld",
                       (long long)((const pr_scale_attrs *)attrs)->divisor);
    return infer_same(op, in, n, attrs, out, ws);
}

static int infer_like(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                      size_t *ws) {
    pr_set_out(out, PR_F32, in[0].ndim, in[0].shape);
    return 0;
}

static int infer_two_same(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    pr_dtype dt;
    if (expect_dtypes(op, in, 2, &dt) < 0) return -1;
    int same = in[0].ndim == in[1].ndim;
    for (int d = 0; same && d < in[0].ndim; d++)
        same = pr_dim_maybe_equal(in[0].shape[d], in[1].shape[d]);
    if (!same) {
        char sa[128], sb[128];
        return pr_fail(op, PyExc_ValueError, "inputs must have the same shape, got %s and %s",
                       pr_shape_str(&in[0], sa, sizeof sa), pr_shape_str(&in[1], sb, sizeof sb));
    }
    pr_set_out(out, dt, in[0].ndim, in[0].shape);
    return 0;
}

/* broadcast_to: input broadcasts to attrs.shape. */
static int infer_broadcast_to(const pr_op *op, const pr_view *in, int n, const void *attrs,
                              pr_view *out, size_t *ws) {
    const pr_shape_attrs *a = attrs;
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    pr_view target;
    pr_set_out(&target, PR_F32, a->shape.n, a->shape.v);
    if (broadcast_shape(op, &in[0], &target, out) < 0) return -1;
    if (out->ndim != target.ndim || !pr_dim_maybe_equal(out->size, target.size)) {
        char s[128], t[128];
        return pr_fail(op, PyExc_ValueError, "cannot broadcast %s to %s",
                       pr_shape_str(&in[0], s, sizeof s), pr_shape_str(&target, t, sizeof t));
    }
    return 0;
}

/* sum_to_shape: attrs.shape broadcasts to the input's shape. */
static int infer_sum_to(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                        size_t *ws) {
    const pr_shape_attrs *a = attrs;
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    pr_view target, joined;
    pr_set_out(&target, PR_F32, a->shape.n, a->shape.v);
    int ok = target.ndim <= in[0].ndim;
    if (ok && broadcast_shape(op, &in[0], &target, &joined) < 0) return -1;
    ok = ok && pr_dim_maybe_equal(joined.size, in[0].size);
    if (!ok) {
        char s[128], t[128];
        return pr_fail(op, PyExc_ValueError, "cannot sum %s down to %s",
                       pr_shape_str(&in[0], s, sizeof s), pr_shape_str(&target, t, sizeof t));
    }
    *out = target;
    return 0;
}

/* ---- kernels -------------------------------------------------------------- */

static int binary(pr_binary_kind k, const pr_view *in, pr_view *out) {
    int64_t sa[PR_MAX_DIMS], sb[PR_MAX_DIMS];
    pr_broadcast_strides(&in[0], out->ndim, out->shape, sa);
    pr_broadcast_strides(&in[1], out->ndim, out->shape, sb);
    if (out->dtype == PR_BF16)
        return pr_k_binary_bf16(k, in[0].data, sa, in[1].data, sb, out->data, out->ndim,
                                out->shape);
    if (out->dtype != PR_F32)
        return pr_k_binary_int(k, out->dtype, in[0].data, sa, in[1].data, sb, out->data,
                               out->ndim, out->shape);
    return pr_k_binary(k, in[0].data, sa, in[1].data, sb, out->data, out->ndim, out->shape);
}
static int fw_add(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return binary(PR_BIN_ADD, in, out);
}
static int fw_sub(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return binary(PR_BIN_SUB, in, out);
}
static int fw_mul(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return binary(PR_BIN_MUL, in, out);
}
static int fw_div(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return binary(PR_BIN_DIV, in, out);
}
static int fw_max(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return binary(PR_BIN_MAX, in, out);
}
static int fw_min(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return binary(PR_BIN_MIN, in, out);
}
static int fw_pow(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return binary(PR_BIN_POW, in, out);
}
static int fw_clip(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const pr_clip_attrs *c = a;
    return pr_k_clip(in[0].data, out->data, out->size, (float)c->min, (float)c->max);
}
static int fw_clip_backward(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const pr_clip_attrs *c = a;
    return pr_k_clip_backward(in[0].data, in[1].data, out->data, out->size, (float)c->min,
                              (float)c->max);
}
static int fw_neg(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_scale(in[0].data, out->data, out->size, -1.0f);
}
static int fw_scale(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const pr_scale_attrs *s = a;
    return pr_k_scale(in[0].data, out->data, out->size, (float)(s->value / (double)s->divisor));
}
static int fw_relu(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    if (out->dtype == PR_BF16) return pr_k_relu_bf16(in[0].data, out->data, out->size);
    return pr_k_relu(in[0].data, out->data, out->size);
}
static int fw_relu_backward(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    if (out->dtype == PR_BF16)
        return pr_k_relu_backward_bf16(in[0].data, in[1].data, out->data, out->size);
    return pr_k_relu_backward(in[0].data, in[1].data, out->data, out->size);
}
static int fw_gelu(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    if (out->dtype == PR_BF16) return pr_k_gelu_bf16(in[0].data, out->data, out->size);
    return pr_k_gelu(in[0].data, out->data, out->size);
}
static int fw_gelu_backward(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    if (out->dtype == PR_BF16)
        return pr_k_gelu_backward_bf16(in[0].data, in[1].data, out->data, out->size);
    return pr_k_gelu_backward(in[0].data, in[1].data, out->data, out->size);
}
static int fw_ones(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_fill(out->data, out->size, 1.0f);
}
static int fw_zeros(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_fill(out->data, out->size, 0.0f);
}
static int fw_broadcast_to(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    int64_t st[PR_MAX_DIMS];
    pr_broadcast_strides(&in[0], out->ndim, out->shape, st);
    return pr_k_broadcast(in[0].data, out->ndim, out->shape, st, out->data);
}
static int fw_sum_to(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    int64_t st[PR_MAX_DIMS];
    pr_broadcast_strides(out, in[0].ndim, in[0].shape, st);
    return pr_k_sum_to(in[0].data, in[0].ndim, in[0].shape, st, out->data, out->size);
}

/* ---- gradient rules ------------------------------------------------------- */

#define T(o) (&((pr_Tensor *)(o))->v)

static PyObject *call1(const pr_op *op, PyObject *a, PyObject *b) {
    PyObject *in[2] = {a, b};
    return pr_call1(op, in, b ? 2 : 1, NULL);
}

/* Reduce a gradient to the input's shape; steals `g`. */
static PyObject *reduce_to(PyObject *g, PyObject *input) {
    if (!g) return NULL;
    PyObject *r = pr_sum_to_shape(g, T(input));
    Py_DECREF(g);
    return r;
}

static int gr_add(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    for (int i = 0; i < 2; i++)
        if (needs[i] && !(gin[i] = pr_sum_to_shape(gout[0], T(in[i])))) return -1;
    return 0;
}

static int gr_sub(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    if (needs[0] && !(gin[0] = pr_sum_to_shape(gout[0], T(in[0])))) return -1;
    if (needs[1] && !(gin[1] = reduce_to(call1(&pr_op_negative, gout[0], NULL), in[1]))) return -1;
    return 0;
}

static int gr_mul(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    if (needs[0] && !(gin[0] = reduce_to(call1(&pr_op_multiply, gout[0], in[1]), in[0]))) return -1;
    if (needs[1] && !(gin[1] = reduce_to(call1(&pr_op_multiply, gout[0], in[0]), in[1]))) return -1;
    return 0;
}

static int gr_div(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    if (needs[0] && !(gin[0] = reduce_to(call1(&pr_op_divide, gout[0], in[1]), in[0]))) return -1;
    if (needs[1]) { /* d(a/b)/db = -(a/b)/b */
        PyObject *t = call1(&pr_op_multiply, gout[0], out[0]);
        PyObject *u = t ? call1(&pr_op_divide, t, in[1]) : NULL;
        Py_XDECREF(t);
        PyObject *v = u ? call1(&pr_op_negative, u, NULL) : NULL;
        Py_XDECREF(u);
        if (!(gin[1] = reduce_to(v, in[1]))) return -1;
    }
    return 0;
}

static int gr_neg(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call1(&pr_op_negative, gout[0], NULL)) ? 0 : -1;
}

static int gr_scale(PyObject *const *in, PyObject *const *out, const void *attrs,
                    PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = pr_call1(&pr_op_scale, &gout[0], 1, attrs)) ? 0 : -1;
}

static int gr_relu(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call1(&pr_op_relu_backward, gout[0], out[0])) ? 0 : -1;
}

/* A float32 scalar tensor (a constant of a gradient rule); NULL on error. */
static PyObject *scalar(float v) { return (PyObject *)pr_tensor_scalar(v); }

/* where(cond, a, b) for a float constant b. */
static PyObject *where_else(PyObject *cond, PyObject *a, float b) {
    PyObject *k = scalar(b);
    if (!k) return NULL;
    PyObject *args[3] = {cond, a, k};
    PyObject *r = pr_call1(&pr_op_where, args, 3, NULL);
    Py_DECREF(k);
    return r;
}

/* maximum/minimum: the gradient goes to x where mask (x >= y for maximum,
 * y >= x for minimum; ties go to x, as in TensorFlow), to y elsewhere. */
static int grad_select(PyObject *const *in, PyObject *mask, PyObject *g, const int *needs,
                       PyObject **gin) {
    PyObject *gx = mask ? where_else(mask, g, 0.0f) : NULL;
    if (!gx) return -1;
    if (needs[1]) {
        PyObject *gy = call1(&pr_op_subtract, g, gx);
        if (!(gin[1] = reduce_to(gy, in[1]))) return Py_DECREF(gx), -1;
    }
    if (needs[0] && !(gin[0] = reduce_to(gx, in[0]))) return -1;
    if (!needs[0]) Py_DECREF(gx);
    return 0;
}

static int gr_max(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *mask = call1(&pr_op_greater_equal, in[0], in[1]); /* bool */
    int rc = grad_select(in, mask, gout[0], needs, gin);
    Py_XDECREF(mask);
    return rc;
}

static int gr_min(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *mask = call1(&pr_op_greater_equal, in[1], in[0]);
    int rc = grad_select(in, mask, gout[0], needs, gin);
    Py_XDECREF(mask);
    return rc;
}

static int gr_exp(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call1(&pr_op_multiply, gout[0], out[0])) ? 0 : -1;
}

static int gr_log(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call1(&pr_op_divide, gout[0], in[0])) ? 0 : -1;
}

static int gr_sqrt(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *t = call1(&pr_op_divide, gout[0], out[0]); /* d sqrt(x) = 0.5 / sqrt(x) */
    if (!t) return -1;
    pr_scale_attrs half = {0.5, 1};
    gin[0] = pr_call1(&pr_op_scale, &t, 1, &half);
    Py_DECREF(t);
    return gin[0] ? 0 : -1;
}

static int gr_square(PyObject *const *in, PyObject *const *out, const void *attrs,
                     PyObject *const *gout, const int *needs, PyObject **gin) {
    pr_scale_attrs two = {2.0, 1};
    PyObject *t = pr_call1(&pr_op_scale, &in[0], 1, &two);
    if (!t) return -1;
    gin[0] = call1(&pr_op_multiply, gout[0], t);
    Py_DECREF(t);
    return gin[0] ? 0 : -1;
}

/* g * f, steals f. */
static PyObject *times(PyObject *g, PyObject *f) {
    if (!f) return NULL;
    PyObject *r = call1(&pr_op_multiply, g, f);
    Py_DECREF(f);
    return r;
}

/* c - x for a float constant c. */
static PyObject *rsub(float c, PyObject *x) {
    PyObject *k = scalar(c);
    PyObject *r = k ? call1(&pr_op_subtract, k, x) : NULL;
    Py_XDECREF(k);
    return r;
}

static int gr_abs(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = times(gout[0], call1(&pr_op_sign, in[0], NULL))) ? 0 : -1;
}

/* sign is piecewise constant: its derivative is 0 wherever it exists
 * (tf.sign's registered gradient). */
static int gr_sign(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call1(&pr_op_zeros_like, in[0], NULL)) ? 0 : -1;
}

static int gr_sigmoid(PyObject *const *in, PyObject *const *out, const void *attrs,
                      PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *gy = call1(&pr_op_multiply, gout[0], out[0]); /* g * y * (1 - y) */
    if (!gy) return -1;
    gin[0] = times(gy, rsub(1.0f, out[0]));
    Py_DECREF(gy);
    return gin[0] ? 0 : -1;
}

static int gr_tanh(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *y2 = call1(&pr_op_square, out[0], NULL); /* g * (1 - y**2) */
    PyObject *d = y2 ? rsub(1.0f, y2) : NULL;
    Py_XDECREF(y2);
    return (gin[0] = times(gout[0], d)) ? 0 : -1;
}

static int gr_erf(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *x2 = call1(&pr_op_square, in[0], NULL); /* g * 2/sqrt(pi) * exp(-x**2) */
    pr_scale_attrs s = {-1.0, 1};
    PyObject *nx2 = x2 ? pr_call1(&pr_op_scale, &x2, 1, &s) : NULL;
    Py_XDECREF(x2);
    PyObject *e = nx2 ? call1(&pr_op_exp, nx2, NULL) : NULL;
    Py_XDECREF(nx2);
    s.value = 1.1283791670955126; /* 2 / sqrt(pi) */
    PyObject *d = e ? pr_call1(&pr_op_scale, &e, 1, &s) : NULL;
    Py_XDECREF(e);
    return (gin[0] = times(gout[0], d)) ? 0 : -1;
}

/* d(a**b)/da = b * a**(b - 1); d(a**b)/db = a**b * log(a) where a > 0, else 0
 * (tf.pow's gradient: no NaN from the log of a non-positive base). */
static int gr_pow(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    if (needs[0]) {
        PyObject *one = scalar(1.0f);
        PyObject *bm1 = one ? call1(&pr_op_subtract, in[1], one) : NULL;
        Py_XDECREF(one);
        PyObject *p = bm1 ? call1(&pr_op_power, in[0], bm1) : NULL;
        Py_XDECREF(bm1);
        PyObject *d = times(in[1], p);
        if (!(gin[0] = reduce_to(times(gout[0], d), in[0]))) return -1;
    }
    if (needs[1]) {
        PyObject *zero = scalar(0.0f);
        PyObject *pos = zero ? call1(&pr_op_greater, in[0], zero) : NULL;
        Py_XDECREF(zero);
        PyObject *safe = NULL;
        if (pos) {
            PyObject *k = scalar(1.0f);
            PyObject *args[3] = {pos, in[0], k};
            safe = k ? pr_call1(&pr_op_where, args, 3, NULL) : NULL;
            Py_XDECREF(k);
        }
        PyObject *lg = safe ? call1(&pr_op_log, safe, NULL) : NULL;
        Py_XDECREF(safe);
        PyObject *d = lg ? where_else(pos, lg, 0.0f) : NULL;
        Py_XDECREF(pos);
        Py_XDECREF(lg);
        PyObject *t = times(out[0], d);
        if (!(gin[1] = reduce_to(times(gout[0], t), in[1]))) return -1;
    }
    return 0;
}

static int gr_gelu(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call1(&pr_op_gelu_backward, gout[0], in[0])) ? 0 : -1;
}

/* gelu_backward(dy, x) = dy * gelu'(x): linear in dy; in x, g * dy * gelu''(x)
 * with gelu''(x) = phi(x) (2 - x**2), phi the standard normal density. */
static int gr_gelu_backward(PyObject *const *in, PyObject *const *out, const void *attrs,
                            PyObject *const *gout, const int *needs, PyObject **gin) {
    if (needs[0] && !(gin[0] = call1(&pr_op_gelu_backward, gout[0], in[1]))) return -1;
    if (!needs[1]) return 0;
    PyObject *x2 = call1(&pr_op_square, in[1], NULL);
    pr_scale_attrs s = {-0.5, 1};
    PyObject *h = x2 ? pr_call1(&pr_op_scale, &x2, 1, &s) : NULL;
    PyObject *e = h ? call1(&pr_op_exp, h, NULL) : NULL;
    Py_XDECREF(h);
    s.value = 0.3989422804014327; /* 1 / sqrt(2 pi) */
    PyObject *phi = e ? pr_call1(&pr_op_scale, &e, 1, &s) : NULL;
    Py_XDECREF(e);
    PyObject *two_minus = x2 ? rsub(2.0f, x2) : NULL;
    Py_XDECREF(x2);
    PyObject *d2 = phi && two_minus ? call1(&pr_op_multiply, phi, two_minus) : NULL;
    Py_XDECREF(phi);
    Py_XDECREF(two_minus);
    PyObject *gd = d2 ? call1(&pr_op_multiply, gout[0], in[0]) : NULL;
    gin[1] = gd ? times(gd, d2) : NULL;
    if (!gd) Py_XDECREF(d2);
    Py_XDECREF(gd);
    return gin[1] ? 0 : -1;
}

/* relu_backward(dy, y) = dy * [y > 0]: linear in dy; the mask is piecewise
 * constant in y, so its derivative there is 0 (TensorFlow's ReluGrad rule). */
static int gr_relu_backward(PyObject *const *in, PyObject *const *out, const void *attrs,
                            PyObject *const *gout, const int *needs, PyObject **gin) {
    if (needs[0] && !(gin[0] = call1(&pr_op_relu_backward, gout[0], in[1]))) return -1;
    if (needs[1] && !(gin[1] = call1(&pr_op_zeros_like, in[1], NULL))) return -1;
    return 0;
}

/* clip_backward(dy, x) = dy * [min <= x <= max]: as relu_backward. */
static int gr_clip_backward(PyObject *const *in, PyObject *const *out, const void *attrs,
                            PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *args[2] = {gout[0], in[1]};
    if (needs[0] && !(gin[0] = pr_call1(&pr_op_clip_backward, args, 2, attrs))) return -1;
    if (needs[1] && !(gin[1] = call1(&pr_op_zeros_like, in[1], NULL))) return -1;
    return 0;
}

static int gr_clip(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *args[2] = {gout[0], in[0]};
    return (gin[0] = pr_call1(&pr_op_clip_backward, args, 2, attrs)) ? 0 : -1;
}

static int gr_broadcast_to(PyObject *const *in, PyObject *const *out, const void *attrs,
                           PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = pr_sum_to_shape(gout[0], T(in[0]))) ? 0 : -1;
}

static int gr_sum_to(PyObject *const *in, PyObject *const *out, const void *attrs,
                     PyObject *const *gout, const int *needs, PyObject **gin) {
    pr_shape_attrs a = {{0}};
    a.shape.n = T(in[0])->ndim;
    for (int d = 0; d < a.shape.n; d++) a.shape.v[d] = T(in[0])->shape[d];
    return (gin[0] = pr_call1(&pr_op_broadcast_to, &gout[0], 1, &a)) ? 0 : -1;
}

PyObject *pr_sum_to_shape(PyObject *g, const pr_view *shape) {
    pr_Tensor *gt = (pr_Tensor *)g;
    int same = gt->v.ndim == shape->ndim;
    for (int i = 0; same && i < shape->ndim; i++) same = gt->v.shape[i] == shape->shape[i];
    if (same) {
        Py_INCREF(g);
        return g;
    }
    pr_shape_attrs a = {{0}};
    a.shape.n = shape->ndim;
    for (int i = 0; i < shape->ndim; i++) a.shape.v[i] = shape->shape[i];
    return pr_call1(&pr_op_sum_to_shape, &g, 1, &a);
}

/* ---- registry ------------------------------------------------------------- */

static const pr_attr_spec shape_attrs[] = {
    {"shape", PR_ATTR_INTS, offsetof(pr_shape_attrs, shape), 1, 0}, {NULL}};
static const pr_attr_spec scale_attrs[] = {
    {"value", PR_ATTR_FLOAT, offsetof(pr_scale_attrs, value), 1, 0},
    {"divisor", PR_ATTR_INT, offsetof(pr_scale_attrs, divisor), 0, 1}, {NULL}};
static const pr_attr_spec clip_attrs[] = {
    {"min", PR_ATTR_FLOAT, offsetof(pr_clip_attrs, min), 1, 0},
    {"max", PR_ATTR_FLOAT, offsetof(pr_clip_attrs, max), 1, 0}, {NULL}};

/* `fuse`: the op's instruction in jit_compile's fused kernel (fused.h);
 * INT_BINARY ops also take integer operands (PR_OP_INT). */
#define BINARY_OP(nm, fw, gr, more_flags, fuse_code, d)                                       \
    const pr_op pr_op_##nm = {.name = #nm, .n_in = 2, .n_out = 1,                             \
                              .flags = PR_OP_ELEMENTWISE | (more_flags), .infer = infer_binary, \
                              .forward = fw, .gradient = gr, .fuse = fuse_code, .doc = d}
#define BINARY(nm, fw, gr, fuse_code, d) BINARY_OP(nm, fw, gr, 0, fuse_code, d)
#define INT_BINARY(nm, fw, gr, fuse_code, d) BINARY_OP(nm, fw, gr, PR_OP_INT, fuse_code, d)

const pr_op pr_op_add = {
    .name = "add", .n_in = 2, .n_out = 1, .flags = PR_OP_ELEMENTWISE | PR_OP_INT,
    .infer = infer_binary, .forward = fw_add, .gradient = gr_add, .bf16_inputs = 3,
    .fuse = PR_FI_ADD,
    .doc = "x + y with NumPy broadcasting (float32; bfloat16 when both are: the float32 sum "
           "rounded once, as Keras's mixed_bfloat16 Add; int32/int64/uint8 with NumPy's "
           "result dtype, wrapping on overflow, float32 when mixed with a float)."};
INT_BINARY(subtract, fw_sub, gr_sub, PR_FI_SUB,
           "x - y with NumPy broadcasting (float32; integers as add).");
INT_BINARY(multiply, fw_mul, gr_mul, PR_FI_MUL,
           "x * y with NumPy broadcasting (float32; integers as add).");
BINARY(divide, fw_div, gr_div, PR_FI_DIV, "x / y with NumPy broadcasting (float32).");
INT_BINARY(maximum, fw_max, gr_max, PR_FI_NONE,
           "Elementwise max(x, y) with NumPy broadcasting; NaN propagates (float32; "
           "integers as add).");
INT_BINARY(minimum, fw_min, gr_min, PR_FI_NONE,
           "Elementwise min(x, y) with NumPy broadcasting; NaN propagates (float32; "
           "integers as add).");
BINARY(power, fw_pow, gr_pow, PR_FI_NONE,
       "x ** y with NumPy broadcasting (float32, C99 powf: NaN for a negative base and a "
       "non-integer exponent).");

/* The unary ops of kernels/elementwise.h's list: kernel, op, fused instruction. */
#define UNARY(nm, KIND, formula, d)                                                           \
    static int fw_##nm(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {     \
        return pr_k_unary(PR_UN_##KIND, in[0].data, out->data, out->size);                    \
    }                                                                                         \
    const pr_op pr_op_##nm = {.name = #nm, .n_in = 1, .n_out = 1, .flags = PR_OP_ELEMENTWISE,  \
                              .infer = infer_same, .forward = fw_##nm, .gradient = gr_##nm,   \
                              .fuse = PR_FI_UNARY, .fuse_arg = PR_UN_##KIND, .doc = d};
PR_UNARY_OPS(UNARY)
#undef UNARY

const pr_op pr_op_clip = {
    .name = "clip", .n_in = 1, .n_out = 1, .attrs = clip_attrs,
    .attr_size = sizeof(pr_clip_attrs), .infer = infer_same, .forward = fw_clip,
    .gradient = gr_clip,
    .doc = "min(max(x, min), max) (NumPy clip); the gradient is 0 outside [min, max]."};
const pr_op pr_op_clip_backward = {
    .name = "clip_backward", .n_in = 2, .n_out = 1, .attrs = clip_attrs,
    .attr_size = sizeof(pr_clip_attrs), .infer = infer_two_same, .forward = fw_clip_backward,
    .gradient = gr_clip_backward,
    .doc = "clip_backward(dy, x): dy where min <= x <= max, else 0."};

const pr_op pr_op_negative = {
    .name = "negative", .n_in = 1, .n_out = 1, .flags = PR_OP_ELEMENTWISE, .infer = infer_same,
    .forward = fw_neg, .gradient = gr_neg, .fuse = PR_FI_NEG, .doc = "-x."};
const pr_op pr_op_scale = {
    .name = "scale", .n_in = 1, .n_out = 1, .flags = PR_OP_ELEMENTWISE, .attrs = scale_attrs,
    .attr_size = sizeof(pr_scale_attrs), .infer = infer_scale, .forward = fw_scale,
    .gradient = gr_scale, .fuse = PR_FI_SCALE,
    .doc = "x * (value / divisor) for a constant float `value` and a size `divisor` >= 0 "
           "(default 1; a mean's count)."};
const pr_op pr_op_relu = {
    .name = "relu", .n_in = 1, .n_out = 1, .flags = PR_OP_ELEMENTWISE, .infer = infer_same,
    .forward = fw_relu, .gradient = gr_relu, .bf16_inputs = 1, .fuse = PR_FI_RELU,
    .doc = "max(x, 0) (float32 or bfloat16, exact)."};
const pr_op pr_op_relu_backward = {
    .name = "relu_backward", .n_in = 2, .n_out = 1, .flags = PR_OP_ELEMENTWISE,
    .infer = infer_two_same, .forward = fw_relu_backward, .gradient = gr_relu_backward,
    .bf16_inputs = 3, .fuse = PR_FI_RELU_BWD,
    .doc = "relu_backward(dy, y): dy where y > 0, else 0 (float32, or bfloat16 when both are)."};
const pr_op pr_op_gelu = {
    .name = "gelu", .n_in = 1, .n_out = 1, .flags = PR_OP_ELEMENTWISE, .infer = infer_same,
    .forward = fw_gelu, .gradient = gr_gelu, .bf16_inputs = 1,
    .doc = "0.5 x (1 + erf(x / sqrt(2))), the exact GELU (Hendrycks & Gimpel 2016), one pass; "
           "float32 or bfloat16 (computed in float32), absolute error ~1e-7."};
const pr_op pr_op_gelu_backward = {
    .name = "gelu_backward", .n_in = 2, .n_out = 1, .flags = PR_OP_ELEMENTWISE,
    .infer = infer_two_same, .forward = fw_gelu_backward, .gradient = gr_gelu_backward,
    .bf16_inputs = 3,
    .doc = "gelu_backward(dy, x): dy * (Phi(x) + x phi(x)), GELU's gradient (float32, or "
           "bfloat16 when both are)."};
const pr_op pr_op_ones_like = {.name = "ones_like", .n_in = 1, .n_out = 1, .infer = infer_like,
                              .forward = fw_ones, .doc = "float32 ones of x's shape."};
const pr_op pr_op_zeros_like = {.name = "zeros_like", .n_in = 1, .n_out = 1, .infer = infer_like,
                               .forward = fw_zeros, .doc = "float32 zeros of x's shape."};
const pr_op pr_op_broadcast_to = {
    .name = "broadcast_to", .n_in = 1, .n_out = 1, .attrs = shape_attrs,
    .attr_size = sizeof(pr_shape_attrs), .infer = infer_broadcast_to, .forward = fw_broadcast_to,
    .gradient = gr_broadcast_to, .doc = "Broadcast x to `shape` (NumPy rules)."};
const pr_op pr_op_sum_to_shape = {
    .name = "sum_to_shape", .n_in = 1, .n_out = 1, .attrs = shape_attrs,
    .attr_size = sizeof(pr_shape_attrs), .infer = infer_sum_to, .forward = fw_sum_to,
    .gradient = gr_sum_to,
    .doc = "Sum x over broadcast dimensions down to `shape` (the adjoint of broadcast_to)."};

