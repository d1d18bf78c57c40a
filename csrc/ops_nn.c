/* Registry entries of the nn family: sum/mean, reshape/flatten, softmax and
 * log_softmax (last axis), cross-entropy losses (per sample), accuracies, and
 * batch normalization (over all axes but the last). */
#include "ops.h" /* Python.h first */
#include "op_list.h"

#include <float.h>
#include <string.h>

#include "kernels/loss.h"
#include "kernels/norm.h"
#include "kernels/reduce.h"
#include "op_attrs.h"

#define T(o) (&((pr_Tensor *)(o))->v)

/* ---- shared shape helpers ------------------------------------------------- */

/* Rows (all dimensions but the last) of a rank >= 1 view: a symbolic
 * dimension while tracing. */
static int64_t rows_of(const pr_view *v) { return pr_dims_size(v->ndim - 1, v->shape, 1); }

/* A kernel's scratch for `rows` rows, or 0 while they are unknown (the plan
 * asks again with known sizes). */
static size_t bn_scratch(int64_t rows, int64_t c) {
    return pr_dim_is_sym(rows) ? 0 : pr_bn_scratch_bytes(rows, c);
}

static int64_t last_of(const pr_view *v) { return v->shape[v->ndim - 1]; }

/* Input i: float32, rank >= 1, at least one class along the last axis. */
static int expect_classes(const pr_op *op, const pr_view *in, int i) {
    if (pr_expect_dtype(op, in, i, PR_F32) < 0) return -1;
    if (in[i].ndim < 1 || (!pr_dim_is_sym(last_of(&in[i])) && last_of(&in[i]) < 1)) {
        char s[128];
        return pr_fail(op, PyExc_ValueError,
                       "input %d must have rank >= 1 and at least one class along the last "
                       "axis, got shape %s",
                       i, pr_shape_str(&in[i], s, sizeof s));
    }
    return 0;
}

/* Input i: int32/int64 labels shaped like input j without its last axis. */
static int expect_labels(const pr_op *op, const pr_view *in, int i, int j) {
    if (in[i].dtype != PR_I32 && in[i].dtype != PR_I64)
        return pr_fail(op, PyExc_TypeError, "labels (input %d) must be int32 or int64, got %s", i,
                       pr_dtype_name(in[i].dtype));
    int ok = in[i].ndim == in[j].ndim - 1;
    for (int d = 0; ok && d < in[i].ndim; d++) ok = pr_dim_maybe_equal(in[i].shape[d], in[j].shape[d]);
    if (!ok) {
        char a[128], b[128];
        return pr_fail(op, PyExc_ValueError,
                       "labels (input %d) have shape %s, expected %s without its last axis "
                       "(one label per row)",
                       i, pr_shape_str(&in[i], a, sizeof a), pr_shape_str(&in[j], b, sizeof b));
    }
    return 0;
}

/* Output: v's shape without the last axis (one value per row). */
static void set_rows_out(pr_view *out, const pr_view *v) {
    pr_set_out(out, PR_F32, v->ndim - 1, v->shape);
}

/* ---- sum, mean ------------------------------------------------------------ */

/* Check the axes (raise on a bad one) and flag the reduced dimensions. */
static int check_axes(const pr_op *op, const pr_reduce_attrs *a, int ndim) {
    int seen[PR_MAX_DIMS] = {0};
    for (int i = 0; i < a->axes.n; i++) {
        int64_t ax = a->axes.v[i];
        if (ax < -ndim || ax >= ndim)
            return pr_fail(op, PyExc_ValueError, "axis %lld is out of bounds for rank %d",
                           (long long)ax, ndim);
        if (seen[ax < 0 ? ax + ndim : ax]++)
            return pr_fail(op, PyExc_ValueError, "axis %lld is repeated", (long long)ax);
    }
    return 0;
}

/* Flag the reduced dimensions of checked axes; return how many elements
 * each output sums. */
static double reduce_mask(const pr_reduce_attrs *a, const pr_view *x, int *mask) {
    double count = 1.0;
    for (int d = 0; d < x->ndim; d++) mask[d] = a->axes.n == 0;
    for (int i = 0; i < a->axes.n; i++)
        mask[a->axes.v[i] < 0 ? a->axes.v[i] + x->ndim : a->axes.v[i]] = 1;
    for (int d = 0; d < x->ndim; d++)
        if (mask[d]) count *= (double)x->shape[d];
    return count;
}

/* Output shape with reduced dimensions dropped (or kept as 1). */
static void reduced_shape(const pr_view *x, const int *mask, int keepdims, pr_view *out) {
    int64_t shape[PR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!mask[d]) shape[k++] = x->shape[d];
        else if (keepdims) shape[k++] = 1;
    }
    pr_set_out(out, PR_F32, k, shape);
}

static int infer_reduce(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    const pr_reduce_attrs *a = attrs;
    int mask[PR_MAX_DIMS];
    pr_dtype d = in[0].dtype;
    int integer = (op->flags & PR_OP_INT) && (d == PR_I32 || d == PR_I64 || d == PR_U8);
    if ((!integer && pr_expect_dtype(op, in, 0, PR_F32) < 0) || check_axes(op, a, in[0].ndim) < 0)
        return -1;
    reduce_mask(a, &in[0], mask);
    reduced_shape(&in[0], mask, a->keepdims, out);
    if (integer) { /* NumPy's integer sum: int64 */
        pr_set_out(out, PR_I64, out->ndim, out->shape);
        *ws = 0;
        return 0;
    }
    *ws = pr_dim_is_sym(out->size) ? 0 : sizeof(double) * (size_t)out->size;
    return 0;
}

static int reduce(const pr_view *in, pr_view *out, const pr_reduce_attrs *a, void *ws, int mean) {
    int mask[PR_MAX_DIMS];
    double count = reduce_mask(a, &in[0], mask);
    /* The mean of no elements is NaN (0 * inf), as NumPy's. */
    return pr_k_reduce_sum(in[0].data, in[0].ndim, in[0].shape, mask, mean ? 1.0 / count : 1.0,
                           out->data, out->size, ws);
}
static int fw_sum(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    if (out->dtype == PR_I64 && in[0].dtype != PR_F32) {
        int mask[PR_MAX_DIMS];
        reduce_mask(a, &in[0], mask);
        return pr_k_reduce_sum_int(in[0].data, in[0].dtype, in[0].ndim, in[0].shape, mask,
                                   out->data, out->size);
    }
    return reduce(in, out, a, ws, 0);
}
static int fw_mean(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return reduce(in, out, a, ws, 1);
}

static PyObject *call_shape(const pr_op *op, PyObject *x, int ndim, const int64_t *shape) {
    pr_shape_attrs a = {{0}};
    a.shape.n = ndim;
    for (int d = 0; d < ndim; d++) a.shape.v[d] = shape[d];
    return pr_call1(op, &x, 1, &a);
}

/* d sum / dx = g broadcast over the reduced axes; mean also scales by 1/count. */
static int grad_reduce(PyObject *const *in, const void *attrs, PyObject *const *gout, int mean,
                       PyObject **gin) {
    const pr_view *x = T(in[0]);
    int mask[PR_MAX_DIMS];
    reduce_mask(attrs, x, mask);
    pr_scale_attrs s = {1.0, 1}; /* 1 / count, count a symbolic dimension while tracing */
    for (int d = 0; d < x->ndim; d++)
        if (mask[d] && (s.divisor = pr_dim_mul(s.divisor, x->shape[d])) == PR_DIM_ERROR) return -1;
    pr_view kept;
    reduced_shape(x, mask, 1, &kept);
    PyObject *g = call_shape(&pr_op_reshape, gout[0], kept.ndim, kept.shape);
    if (g && mean) {
        PyObject *t = pr_call1(&pr_op_scale, &g, 1, &s);
        Py_DECREF(g);
        g = t;
    }
    if (!g) return -1;
    gin[0] = call_shape(&pr_op_broadcast_to, g, x->ndim, x->shape);
    Py_DECREF(g);
    return gin[0] ? 0 : -1;
}
static int gr_sum(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    return grad_reduce(in, attrs, gout, 0, gin);
}
static int gr_mean(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    return grad_reduce(in, attrs, gout, 1, gin);
}

/* ---- reshape, flatten ----------------------------------------------------- */

static int infer_reshape(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    const pr_shape_attrs *a = attrs;
    pr_view want; /* the requested shape as given, for messages */
    want.ndim = a->shape.n;
    memcpy(want.shape, a->shape.v, sizeof(int64_t) * (size_t)a->shape.n);
    char s[128], w[128];
    int unknown = -1;
    for (int d = 0; d < want.ndim; d++) {
        if (want.shape[d] == -1 && unknown >= 0)
            return pr_fail(op, PyExc_ValueError, "can only specify one unknown dimension, got %s",
                           pr_shape_str(&want, w, sizeof w));
        if (want.shape[d] < -1 && !pr_dim_valid(want.shape[d]))
            return pr_fail(op, PyExc_ValueError, "negative dimension in shape %s",
                           pr_shape_str(&want, w, sizeof w));
        if (want.shape[d] == -1) unknown = d;
    }
    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, want.shape, sizeof(int64_t) * (size_t)want.ndim);
    /* The element counts: the input's dimensions against the requested ones
     * (the -1 aside), equal dimensions cancelled first, so that unknown sizes
     * divide out ((batch, h, w, 4) into (batch, h, -1)). */
    int64_t num[PR_MAX_DIMS] = {0}, den[PR_MAX_DIMS] = {0};
    int nn = 0, nd = 0;
    for (int d = 0; d < in[0].ndim; d++) num[nn++] = in[0].shape[d];
    for (int d = 0; d < want.ndim; d++) {
        if (d == unknown) continue;
        int j = pr_dim_is_sym(want.shape[d]) ? 0 : nn; /* only unknown sizes cancel */
        while (j < nn && num[j] != want.shape[d]) j++;
        if (j < nn) num[j] = num[--nn];
        else den[nd++] = want.shape[d];
    }
    int64_t size = pr_dims_size(nn, num, 1), known = pr_dims_size(nd, den, 1), q = 0;
    /* NumPy: -1 takes size / known, which must divide exactly (and known > 0).
     * With unknown sizes: a division exact for every size gives the quotient;
     * by a known size, the floor (the plan checks each call's sizes). */
    int ok = size != -1 && known != -1;
    for (int d = 0; d < want.ndim; d++) ok = ok && (unknown < 0 || want.shape[d] != 0);
    if (ok && unknown < 0) ok = pr_dim_maybe_equal(size, known);
    else if (ok) {
        int exact = known == 0 ? 0 : pr_dim_div_exact(size, known, &q);
        if (exact < 0) return -1;
        if (!exact && known > 0 && pr_dim_is_sym(size)) {
            if ((q = pr_dim_floordiv(size, known)) == PR_DIM_ERROR) return -1;
            exact = 1;
        }
        if (!exact && pr_dim_is_sym(known))
            return pr_fail(op, PyExc_ValueError,
                           "cannot infer the -1 of shape %s for a tensor of shape %s from its "
                           "unknown sizes; give that size (pyresnet.ops.shape) instead of -1",
                           pr_shape_str(&want, w, sizeof w), pr_shape_str(&in[0], s, sizeof s));
        ok = exact;
    }
    if (!ok)
        return pr_fail(op, PyExc_ValueError, "cannot reshape a tensor of shape %s into shape %s",
                       pr_shape_str(&in[0], s, sizeof s), pr_shape_str(&want, w, sizeof w));
    if (unknown >= 0) shape[unknown] = q;
    pr_set_out(out, in[0].dtype, want.ndim, shape);
    return 0;
}

static int infer_flatten(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    if (in[0].ndim < 1)
        return pr_fail(op, PyExc_ValueError, "needs rank >= 1 (a batch axis), got a scalar");
    int64_t shape[2] = {in[0].shape[0], 1};
    for (int d = 1; d < in[0].ndim; d++)
        if ((shape[1] = pr_dim_mul(shape[1], in[0].shape[d])) == PR_DIM_ERROR) return -1;
    pr_set_out(out, in[0].dtype, 2, shape);
    return 0;
}

/* dim_size(x; axis) -> int32 scalar: x.shape[axis] at run time.  While
 * tracing its value is known as a (symbolic) dimension: pyresnet.ops.shape. */
typedef struct {
    int64_t axis;
} dim_attrs;

static int dim_axis(const pr_view *x, const void *attrs) {
    int64_t ax = ((const dim_attrs *)attrs)->axis;
    return (int)(ax < 0 ? ax + x->ndim : ax);
}

static int infer_dim_size(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    int64_t ax = ((const dim_attrs *)attrs)->axis;
    if (ax < -in[0].ndim || ax >= in[0].ndim)
        return pr_fail(op, PyExc_ValueError, "axis %lld is out of bounds for rank %d",
                       (long long)ax, in[0].ndim);
    int64_t d = in[0].shape[dim_axis(&in[0], attrs)];
    if (!pr_dim_is_sym(d) && d > INT32_MAX)
        return pr_fail(op, PyExc_ValueError, "size %lld does not fit int32", (long long)d);
    pr_set_out(out, PR_I32, 0, NULL);
    return 0;
}

static int fw_dim_size(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    *(int32_t *)out->data = (int32_t)in[0].shape[dim_axis(&in[0], attrs)];
    return PR_OK;
}

static int64_t known_dim_size(const pr_view *in, int n, const void *attrs) {
    return in[0].shape[dim_axis(&in[0], attrs)];
}

/* size(; value) -> int32 scalar: a size computed from others while tracing
 * (pyresnet.ops.shape(x)[1] * 2); `value` is its expression, evaluated for
 * each call's sizes like every symbolic attribute. */
typedef struct {
    int64_t value;
} size_attrs;

static int infer_size(const pr_op *op, const pr_view *in, int n, const void *attrs,
                      pr_view *out, size_t *ws) {
    int64_t v = ((const size_attrs *)attrs)->value;
    if (!pr_dim_is_sym(v) && (v < 0 || v > INT32_MAX))
        return pr_fail(op, PyExc_ValueError, "size %lld is outside [0, 2^31 - 1]", (long long)v);
    if (pr_dim_is_sym(v) && !pr_dim_valid(v))
        return pr_fail(op, PyExc_ValueError, "value is no size of the function being traced");
    pr_set_out(out, PR_I32, 0, NULL);
    return 0;
}

static int fw_size(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    *(int32_t *)out->data = (int32_t)((const size_attrs *)attrs)->value;
    return PR_OK;
}

static int64_t known_size(const pr_view *in, int n, const void *attrs) {
    return ((const size_attrs *)attrs)->value;
}

static int fw_copy(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    memcpy(out->data, in[0].data, (size_t)in[0].size * pr_dtype_size(in[0].dtype));
    return PR_OK;
}

static int gr_reshape(PyObject *const *in, PyObject *const *out, const void *attrs,
                      PyObject *const *gout, const int *needs, PyObject **gin) {
    const pr_view *x = T(in[0]);
    return (gin[0] = call_shape(&pr_op_reshape, gout[0], x->ndim, x->shape)) ? 0 : -1;
}

/* ---- softmax, log_softmax ------------------------------------------------- */

static int infer_softmax(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    if (in[0].ndim < 1)
        return pr_fail(op, PyExc_ValueError, "needs rank >= 1 (classes on the last axis), got a "
                       "scalar");
    pr_set_out(out, PR_F32, in[0].ndim, in[0].shape);
    return 0;
}

/* (dy, y) of the same shape. */
static int infer_softmax_backward(const pr_op *op, const pr_view *in, int n, const void *attrs,
                                  pr_view *out, size_t *ws) {
    if (infer_softmax(op, in, n, attrs, out, ws) < 0) return -1;
    return pr_expect_like(op, in, 1, 0);
}

static int fw_softmax(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_softmax(in[0].data, out->data, rows_of(&in[0]), last_of(&in[0]), 0);
}
static int fw_log_softmax(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_softmax(in[0].data, out->data, rows_of(&in[0]), last_of(&in[0]), 1);
}
static int fw_softmax_backward(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_softmax_backward(in[0].data, in[1].data, out->data, rows_of(&in[0]),
                                 last_of(&in[0]), 0);
}
static int fw_log_softmax_backward(const pr_view *in, int n, pr_view *out, const void *a,
                                   void *ws) {
    return pr_k_softmax_backward(in[0].data, in[1].data, out->data, rows_of(&in[0]),
                                 last_of(&in[0]), 1);
}

static PyObject *call2(const pr_op *op, PyObject *a, PyObject *b) {
    PyObject *in[2] = {a, b};
    return pr_call1(op, in, 2, NULL);
}

static PyObject *call3(const pr_op *op, PyObject *a, PyObject *b, PyObject *c) {
    PyObject *in[3] = {a, b, c};
    return pr_call1(op, in, 3, NULL);
}

static int gr_softmax(PyObject *const *in, PyObject *const *out, const void *attrs,
                      PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call2(&pr_op_softmax_backward, gout[0], out[0])) ? 0 : -1;
}
static int gr_log_softmax(PyObject *const *in, PyObject *const *out, const void *attrs,
                          PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = call2(&pr_op_log_softmax_backward, gout[0], out[0])) ? 0 : -1;
}

/* Second-order rules.  Last-axis sums with keepdims, as the forward formulas. */
static PyObject *sum_last(PyObject *x) { /* steals x (NULL after an error) */
    if (!x) return NULL;
    pr_reduce_attrs a = {{0}};
    a.axes.n = 1, a.axes.v[0] = -1, a.keepdims = 1;
    PyObject *r = pr_call1(&pr_op_sum, &x, 1, &a);
    Py_DECREF(x);
    return r;
}

/* Steals a and b (either may be NULL after an error). */
static PyObject *steal2(const pr_op *op, PyObject *a, PyObject *b) {
    PyObject *r = a && b ? call2(op, a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* dx = y * (dy - s), s = sum(dy * y):  d/d dy = softmax_backward(g, y);
 * d/dy = g * (dy - s) - dy * sum(g * y). */
static int gr_softmax_backward(PyObject *const *in, PyObject *const *out, const void *attrs,
                               PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *dy = in[0], *y = in[1], *g = gout[0];
    if (needs[0] && !(gin[0] = call2(&pr_op_softmax_backward, g, y))) return -1;
    if (needs[1]) {
        PyObject *s = sum_last(steal2(&pr_op_multiply, Py_NewRef(dy), Py_NewRef(y)));
        PyObject *t = sum_last(steal2(&pr_op_multiply, Py_NewRef(g), Py_NewRef(y)));
        PyObject *a = steal2(&pr_op_multiply, Py_NewRef(g), steal2(&pr_op_subtract, Py_NewRef(dy), s));
        PyObject *b = steal2(&pr_op_multiply, Py_NewRef(dy), t);
        if (!(gin[1] = steal2(&pr_op_subtract, a, b))) return -1;
    }
    return 0;
}

/* dx = dy - p * S, p = exp(y), S = sum(dy):  d/d dy = g - sum(g * p);
 * d/dy = -(g * p) * S. */
static int gr_log_softmax_backward(PyObject *const *in, PyObject *const *out, const void *attrs,
                                   PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *dy = in[0], *g = gout[0];
    PyObject *p = pr_call1(&pr_op_exp, &in[1], 1, NULL);
    if (!p) return -1;
    PyObject *gp = call2(&pr_op_multiply, g, p);
    Py_DECREF(p);
    if (!gp) return -1;
    if (needs[0] && !(gin[0] = steal2(&pr_op_subtract, Py_NewRef(g), sum_last(Py_NewRef(gp))))) {
        Py_DECREF(gp);
        return -1;
    }
    if (needs[1]) {
        PyObject *neg = pr_call1(&pr_op_negative, &gp, 1, NULL);
        gin[1] = steal2(&pr_op_multiply, neg, sum_last(Py_NewRef(dy)));
    }
    Py_DECREF(gp);
    return needs[1] && !gin[1] ? -1 : 0;
}

/* ---- losses and accuracies ------------------------------------------------ */

/* (prediction, int labels) -> per-row float32. */
static int infer_sparse(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    if (expect_classes(op, in, 0) < 0 || expect_labels(op, in, 1, 0) < 0) return -1;
    set_rows_out(out, &in[0]);
    return 0;
}

/* (prediction, dense target of the same shape) -> per-row float32. */
static int infer_dense(const pr_op *op, const pr_view *in, int n, const void *attrs,
                       pr_view *out, size_t *ws) {
    if (expect_classes(op, in, 0) < 0 || pr_expect_like(op, in, 1, 0) < 0) return -1;
    set_rows_out(out, &in[0]);
    return 0;
}

/* Backward ops: (g per row, prediction, labels or target) -> prediction's shape. */
static int expect_row_grad(const pr_op *op, const pr_view *in) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    int ok = in[0].ndim == in[1].ndim - 1;
    for (int d = 0; ok && d < in[0].ndim; d++) ok = pr_dim_maybe_equal(in[0].shape[d], in[1].shape[d]);
    if (!ok) {
        char a[128], b[128];
        return pr_fail(op, PyExc_ValueError,
                       "the gradient has shape %s, expected %s without its last axis",
                       pr_shape_str(&in[0], a, sizeof a), pr_shape_str(&in[1], b, sizeof b));
    }
    return 0;
}
static int infer_sparse_backward(const pr_op *op, const pr_view *in, int n, const void *attrs,
                                 pr_view *out, size_t *ws) {
    if (expect_classes(op, in, 1) < 0 || expect_labels(op, in, 2, 1) < 0 ||
        expect_row_grad(op, in) < 0)
        return -1;
    pr_set_out(out, PR_F32, in[1].ndim, in[1].shape);
    return 0;
}
static int infer_dense_backward(const pr_op *op, const pr_view *in, int n, const void *attrs,
                                pr_view *out, size_t *ws) {
    if (expect_classes(op, in, 1) < 0 || pr_expect_like(op, in, 2, 1) < 0 ||
        expect_row_grad(op, in) < 0)
        return -1;
    pr_set_out(out, PR_F32, in[1].ndim, in[1].shape);
    return 0;
}

#define I64(v) ((v).dtype == PR_I64)

static int fw_sparse_softmax_ce(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_softmax_ce(in[0].data, NULL, in[1].data, I64(in[1]), rows_of(&in[0]),
                           last_of(&in[0]), out->data);
}
static int fw_softmax_ce(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_softmax_ce(in[0].data, in[1].data, NULL, 0, rows_of(&in[0]), last_of(&in[0]),
                           out->data);
}
static int fw_sparse_softmax_ce_bw(const pr_view *in, int n, pr_view *out, const void *a,
                                   void *ws) {
    return pr_k_softmax_ce_backward(in[0].data, in[1].data, NULL, in[2].data, I64(in[2]),
                                    rows_of(&in[1]), last_of(&in[1]), out->data);
}
static int fw_softmax_ce_bw(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_softmax_ce_backward(in[0].data, in[1].data, in[2].data, NULL, 0, rows_of(&in[1]),
                                    last_of(&in[1]), out->data);
}
static int fw_sparse_probs_ce(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_probs_ce(in[0].data, NULL, in[1].data, I64(in[1]), rows_of(&in[0]),
                         last_of(&in[0]), out->data);
}
static int fw_probs_ce(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_probs_ce(in[0].data, in[1].data, NULL, 0, rows_of(&in[0]), last_of(&in[0]),
                         out->data);
}
static int fw_sparse_probs_ce_bw(const pr_view *in, int n, pr_view *out, const void *a,
                                 void *ws) {
    return pr_k_probs_ce_backward(in[0].data, in[1].data, NULL, in[2].data, I64(in[2]),
                                  rows_of(&in[1]), last_of(&in[1]), out->data);
}
static int fw_probs_ce_bw(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_probs_ce_backward(in[0].data, in[1].data, in[2].data, NULL, 0, rows_of(&in[1]),
                                  last_of(&in[1]), out->data);
}
static int fw_sparse_accuracy(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_accuracy(in[0].data, NULL, in[1].data, I64(in[1]), rows_of(&in[0]),
                         last_of(&in[0]), out->data);
}
static int fw_accuracy(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_accuracy(in[0].data, in[1].data, NULL, 0, rows_of(&in[0]), last_of(&in[0]),
                         out->data);
}

/* Gradient wrt the prediction through the loss's dedicated backward op. */
static int grad_loss(const pr_op *backward, PyObject *const *in, PyObject *const *gout,
                     const int *needs, PyObject **gin) {
    if (needs[0] && !(gin[0] = call3(backward, gout[0], in[0], in[1]))) return -1;
    return 0;
}
static int gr_sparse_softmax_ce(PyObject *const *in, PyObject *const *out, const void *attrs,
                                PyObject *const *gout, const int *needs, PyObject **gin) {
    return grad_loss(&pr_op_sparse_softmax_cross_entropy_backward, in, gout, needs, gin);
}
static int gr_sparse_probs_ce(PyObject *const *in, PyObject *const *out, const void *attrs,
                              PyObject *const *gout, const int *needs, PyObject **gin) {
    return grad_loss(&pr_op_sparse_categorical_crossentropy_backward, in, gout, needs, gin);
}
static int gr_probs_ce(PyObject *const *in, PyObject *const *out, const void *attrs,
                       PyObject *const *gout, const int *needs, PyObject **gin) {
    return grad_loss(&pr_op_categorical_crossentropy_backward, in, gout, needs, gin);
}
/* Soft labels also get d loss / d t = -g * log_softmax(logits). */
static int gr_softmax_ce(PyObject *const *in, PyObject *const *out, const void *attrs,
                         PyObject *const *gout, const int *needs, PyObject **gin) {
    if (grad_loss(&pr_op_softmax_cross_entropy_backward, in, gout, needs, gin) < 0) return -1;
    if (!needs[1]) return 0;
    const pr_view *g = T(gout[0]);
    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, g->shape, sizeof(int64_t) * (size_t)g->ndim);
    shape[g->ndim] = 1;
    PyObject *col = call_shape(&pr_op_reshape, gout[0], g->ndim + 1, shape);
    PyObject *ls = col ? pr_call1(&pr_op_log_softmax, &in[0], 1, NULL) : NULL;
    PyObject *prod = ls ? call2(&pr_op_multiply, ls, col) : NULL;
    Py_XDECREF(col);
    Py_XDECREF(ls);
    if (!prod) return -1;
    gin[1] = pr_call1(&pr_op_negative, &prod, 1, NULL);
    Py_DECREF(prod);
    return gin[1] ? 0 : -1;
}

/* ---- batch normalization -------------------------------------------------- */

/* Input i: float32 of shape (c,). */
static int expect_channels(const pr_op *op, const pr_view *in, int i, int64_t c,
                           const char *what) {
    if (pr_expect_dtype(op, in, i, PR_F32) < 0) return -1;
    if (in[i].ndim != 1 || !pr_dim_maybe_equal(in[i].shape[0], c)) {
        char s[128];
        return pr_fail(op, PyExc_ValueError, "%s (input %d) must have shape (%lld,), got %s",
                       what, i, (long long)c, pr_shape_str(&in[i], s, sizeof s));
    }
    return 0;
}

/* x (input xi): float32 or bfloat16, rank >= 2, C >= 1 channels last, and
 * at least one row when batch statistics are computed; epsilon finite and
 * >= 0 (the kernels take sqrt(var + epsilon)). */
static int expect_bn_input(const pr_op *op, const pr_view *in, int xi, int need_rows,
                           const void *attrs) {
    double eps = ((const pr_bn_attrs *)attrs)->epsilon;
    if (!(eps >= 0.0 && eps <= DBL_MAX))
        return pr_fail(op, PyExc_ValueError, "epsilon must be a finite float >= 0, got %g", eps);
    char s[128];
    if (in[xi].ndim < 2 || (!pr_dim_is_sym(last_of(&in[xi])) && last_of(&in[xi]) < 1))
        return pr_fail(op, PyExc_ValueError,
                       "input must have rank >= 2 (N, ..., C) with channels last and C >= 1, "
                       "got %s",
                       pr_shape_str(&in[xi], s, sizeof s));
    if (need_rows && rows_of(&in[xi]) == 0)
        return pr_fail(op, PyExc_ValueError,
                       "batch statistics need at least one row, got an input of shape %s",
                       pr_shape_str(&in[xi], s, sizeof s));
    return 0;
}

/* (x, gamma, beta) -> y (x's dtype), batch_mean, batch_var; also the rule
 * of the fused BN + ReLU and, with a fourth input (the residual: x's dtype
 * and shape), BN + add + ReLU (ops_fused.c). */
static int infer_bn_train(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    pr_dtype xt; /* of x, and of the residual (bf16_inputs) */
    if (pr_activation_dtype(op, in, &xt) < 0 || expect_bn_input(op, in, 0, 1, attrs) < 0)
        return -1;
    if (n > 3 && pr_expect_shape_like(op, in, 3, 0) < 0) return -1;
    int64_t c = last_of(&in[0]);
    if (expect_channels(op, in, 1, c, "gamma") < 0 || expect_channels(op, in, 2, c, "beta") < 0)
        return -1;
    pr_set_out(&out[0], xt, in[0].ndim, in[0].shape);
    pr_set_out(&out[1], PR_F32, 1, &c);
    pr_set_out(&out[2], PR_F32, 1, &c);
    *ws = bn_scratch(rows_of(&in[0]), c);
    return 0;
}

/* (dy, x, gamma, mean, var) -> dx, dgamma, dbeta (both backward ops; dy and
 * x both float32 or both bfloat16). */
static int infer_bn_backward(const pr_op *op, const pr_view *in, int n, const void *attrs,
                             pr_view *out, size_t *ws) {
    pr_dtype xt; /* of dy and x (bf16_inputs) */
    if (pr_activation_dtype(op, in, &xt) < 0 || expect_bn_input(op, in, 1, 0, attrs) < 0)
        return -1;
    if (pr_expect_shape_like(op, in, 0, 1) < 0) return -1;
    int64_t c = last_of(&in[1]);
    if (expect_channels(op, in, 2, c, "gamma") < 0 || expect_channels(op, in, 3, c, "mean") < 0 ||
        expect_channels(op, in, 4, c, "variance") < 0)
        return -1;
    int64_t dx_dtype = ((const pr_bn_attrs *)attrs)->dx_dtype; /* 0 without the attribute */
    if (dx_dtype != PR_F32 && dx_dtype != PR_BF16)
        return pr_fail(op, PyExc_ValueError,
                       "dx_dtype must be %d (float32) or %d (bfloat16), got %lld", PR_F32,
                       PR_BF16, (long long)dx_dtype);
    /* dx: bfloat16 with bfloat16 dy and x, or when dx_dtype says (a cast
     * jit_compile folded in); float32 otherwise */
    pr_set_out(&out[0], xt == PR_BF16 ? PR_BF16 : (pr_dtype)dx_dtype, in[1].ndim, in[1].shape);
    pr_set_out(&out[1], PR_F32, 1, &c);
    pr_set_out(&out[2], PR_F32, 1, &c);
    *ws = bn_scratch(rows_of(&in[1]), c);
    return 0;
}

/* (x, gamma, beta, moving_mean, moving_var) -> y (x's dtype) */
static int infer_bn_infer(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    pr_dtype xt;
    if (pr_activation_dtype(op, in, &xt) < 0 || expect_bn_input(op, in, 0, 0, attrs) < 0)
        return -1;
    int64_t c = last_of(&in[0]);
    if (expect_channels(op, in, 1, c, "gamma") < 0 || expect_channels(op, in, 2, c, "beta") < 0 ||
        expect_channels(op, in, 3, c, "moving_mean") < 0 ||
        expect_channels(op, in, 4, c, "moving_variance") < 0)
        return -1;
    pr_set_out(out, xt, in[0].ndim, in[0].shape);
    *ws = bn_scratch(rows_of(&in[0]), c);
    return 0;
}

#define EPS(a) (((const pr_bn_attrs *)(a))->epsilon)

static int fw_bn_train(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_train(in[0].data, in[1].data, in[2].data, NULL, in[0].dtype, rows_of(&in[0]),
                         last_of(&in[0]), EPS(a), out[0].data, out[1].data, out[2].data, ws, 0);
}
static int fw_bn_train_backward(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_train_backward(in[0].data, in[1].data, in[1].dtype, in[2].data, NULL,
                                  in[3].data, in[4].data, rows_of(&in[1]), last_of(&in[1]),
                                  EPS(a), out[0].data, out[0].dtype, out[1].data, out[2].data,
                                  ws, 0);
}
static int fw_bn_infer(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_infer(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, in[0].dtype,
                         rows_of(&in[0]), last_of(&in[0]), EPS(a), out->data, ws, 0);
}
static int fw_bn_infer_backward(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_infer_backward(in[0].data, in[1].data, in[1].dtype, in[2].data, in[3].data,
                                  in[4].data, rows_of(&in[1]), last_of(&in[1]), EPS(a),
                                  out[0].data, out[1].data, out[2].data, ws);
}

/* Run a BN backward op on (dy, x, gamma, mean, var); hand out the gradients
 * of x, gamma, beta (inputs 0..2 of the forward op) that are needed. */
static int grad_bn(const char *backward, PyObject *dy, PyObject *const *in, PyObject *mean,
                   PyObject *var, const void *attrs, const int *needs, PyObject **gin) {
    if (!dy || !(needs[0] || needs[1] || needs[2])) return 0;
    PyObject *args[5] = {dy, in[0], in[1], mean, var}, *g[PR_MAX_OUTPUTS];
    if (pr_call(pr_op_lookup(backward), args, 5, attrs, g) < 0) return -1;
    for (int i = 0; i < 3; i++) {
        if (needs[i]) gin[i] = g[i];
        else Py_DECREF(g[i]);
    }
    return 0;
}
/* The mean and variance outputs pass no gradient (gout[1], gout[2] ignored). */
static int gr_bn_train(PyObject *const *in, PyObject *const *out, const void *attrs,
                       PyObject *const *gout, const int *needs, PyObject **gin) {
    return grad_bn("batch_norm_train_backward", gout[0], in, out[1], out[2], attrs, needs, gin);
}
static int gr_bn_infer(PyObject *const *in, PyObject *const *out, const void *attrs,
                       PyObject *const *gout, const int *needs, PyObject **gin) {
    return grad_bn("batch_norm_infer_backward", gout[0], in, in[3], in[4], attrs, needs, gin);
}

/* ---- registry ------------------------------------------------------------- */

static const pr_attr_spec reduce_attrs[] = {
    {"axes", PR_ATTR_INTS, offsetof(pr_reduce_attrs, axes), 0, 0},
    {"keepdims", PR_ATTR_BOOL, offsetof(pr_reduce_attrs, keepdims), 0, 0}, {NULL}};
static const pr_attr_spec shape_attrs[] = {
    {"shape", PR_ATTR_INTS, offsetof(pr_shape_attrs, shape), 1, 0}, {NULL}};
static const pr_attr_spec bn_attrs[] = {
    {"epsilon", PR_ATTR_FLOAT, offsetof(pr_bn_attrs, epsilon), 0, 1e-3}, {NULL}};
const pr_attr_spec pr_bn_backward_attrs[] = {
    {"epsilon", PR_ATTR_FLOAT, offsetof(pr_bn_attrs, epsilon), 0, 1e-3},
    {"dx_dtype", PR_ATTR_INT, offsetof(pr_bn_attrs, dx_dtype), 0, PR_F32},
    {NULL}};

const pr_op pr_op_sum = {
    .name = "sum", .n_in = 1, .n_out = 1, .flags = PR_OP_INT, .attrs = reduce_attrs,
    .attr_size = sizeof(pr_reduce_attrs), .infer = infer_reduce, .forward = fw_sum,
    .gradient = gr_sum,
    .doc = "sum(x; axes, keepdims): np.sum over `axes` (empty: all), double accumulation; "
           "int32/int64/uint8 give int64 (NumPy: uint8 gives uint64), wrapping on overflow."};
const pr_op pr_op_mean = {
    .name = "mean", .n_in = 1, .n_out = 1, .attrs = reduce_attrs,
    .attr_size = sizeof(pr_reduce_attrs), .infer = infer_reduce, .forward = fw_mean,
    .gradient = gr_mean,
    .doc = "mean(x; axes, keepdims): np.mean over `axes` (empty: all), double accumulation."};
const pr_op pr_op_reshape = {
    .name = "reshape", .n_in = 1, .n_out = 1, .attrs = shape_attrs,
    .attr_size = sizeof(pr_shape_attrs), .infer = infer_reshape, .forward = fw_copy,
    .gradient = gr_reshape,
    .doc = "reshape(x; shape): NumPy reshape (one -1 inferred), any dtype."};
static const pr_attr_spec dim_attr_spec[] = {
    {"axis", PR_ATTR_INT, offsetof(dim_attrs, axis), 1, 0}, {NULL}};
const pr_op pr_op_dim_size = {
    .name = "dim_size", .n_in = 1, .n_out = 1, .attrs = dim_attr_spec,
    .attr_size = sizeof(dim_attrs), .infer = infer_dim_size, .forward = fw_dim_size,
    .known = known_dim_size,
    .doc = "dim_size(x; axis) -> int32 scalar x.shape[axis], any dtype; while tracing, a "
           "size that shape attributes (reshape, broadcast_to) accept."};
static const pr_attr_spec size_attr_spec[] = {
    {"value", PR_ATTR_INT, offsetof(size_attrs, value), 1, 0}, {NULL}};
const pr_op pr_op_size = {
    .name = "size", .n_in = 0, .n_out = 1, .attrs = size_attr_spec,
    .attr_size = sizeof(size_attrs), .infer = infer_size, .forward = fw_size, .known = known_size,
    .doc = "size(; value) -> int32 scalar `value`: arithmetic on the sizes pyresnet.ops.shape "
           "returns while tracing (its value an expression of the unknown sizes)."};
const pr_op pr_op_flatten = {
    .name = "flatten", .n_in = 1, .n_out = 1, .infer = infer_flatten, .forward = fw_copy,
    .gradient = gr_reshape, .doc = "flatten(x): (N, d1, ..., dk) -> (N, d1 * ... * dk)."};

const pr_op pr_op_softmax = {
    .name = "softmax", .n_in = 1, .n_out = 1, .infer = infer_softmax, .forward = fw_softmax,
    .gradient = gr_softmax, .doc = "softmax(x) over the last axis (max-shifted)."};
const pr_op pr_op_log_softmax = {
    .name = "log_softmax", .n_in = 1, .n_out = 1, .infer = infer_softmax,
    .forward = fw_log_softmax, .gradient = gr_log_softmax,
    .doc = "log_softmax(x) over the last axis (max-shifted)."};
const pr_op pr_op_softmax_backward = {
    .name = "softmax_backward", .n_in = 2, .n_out = 1, .infer = infer_softmax_backward,
    .forward = fw_softmax_backward, .gradient = gr_softmax_backward,
    .doc = "softmax_backward(dy, y): y * (dy - sum(dy * y, -1)) for y = softmax(x)."};
const pr_op pr_op_log_softmax_backward = {
    .name = "log_softmax_backward", .n_in = 2, .n_out = 1, .infer = infer_softmax_backward,
    .forward = fw_log_softmax_backward, .gradient = gr_log_softmax_backward,
    .doc = "log_softmax_backward(dy, y): dy - exp(y) * sum(dy, -1) for y = log_softmax(x)."};

#define LOSS(var, nm, inf, fw, gr, d) \
    const pr_op var = {.name = nm, .n_in = 2, .n_out = 1, .infer = inf, .forward = fw, \
                              .gradient = gr, .doc = d}
#define LOSS_BW(var, nm, inf, fw, d) \
    const pr_op var = {.name = nm, .n_in = 3, .n_out = 1, .infer = inf, .forward = fw, \
                              .flags = PR_OP_NO_GRADIENT_RULE, .doc = d}

LOSS(pr_op_sparse_softmax_cross_entropy, "sparse_softmax_cross_entropy", infer_sparse, fw_sparse_softmax_ce,
     gr_sparse_softmax_ce,
     "sparse_softmax_cross_entropy(logits (..., C), labels (...) int): per-row "
     "-log_softmax(logits)[label]; a label outside [0, C) raises ValueError.");
LOSS(pr_op_softmax_cross_entropy, "softmax_cross_entropy", infer_dense, fw_softmax_ce, gr_softmax_ce,
     "softmax_cross_entropy(logits, target) (same shape): per-row "
     "-sum(target * log_softmax(logits), -1); gradients for both.");
LOSS(pr_op_sparse_categorical_crossentropy, "sparse_categorical_crossentropy", infer_sparse, fw_sparse_probs_ce,
     gr_sparse_probs_ce,
     "sparse_categorical_crossentropy(probs (..., C), labels (...) int): per-row Keras "
     "from_logits=False loss -log(clip(p / sum(p), 1e-7, 1 - 1e-7))[label].");
LOSS(pr_op_categorical_crossentropy, "categorical_crossentropy", infer_dense, fw_probs_ce, gr_probs_ce,
     "categorical_crossentropy(probs, target) (same shape): per-row Keras from_logits=False "
     "loss -sum(target * log(clip(p / sum(p), 1e-7, 1 - 1e-7)), -1); gradient wrt probs.");
LOSS(pr_op_sparse_categorical_accuracy, "sparse_categorical_accuracy", infer_sparse, fw_sparse_accuracy, NULL,
     "sparse_categorical_accuracy(pred (..., C), labels (...) int): 1.0 where argmax(pred) "
     "(first maximum) equals the label, else 0.0.");
LOSS(pr_op_categorical_accuracy, "categorical_accuracy", infer_dense, fw_accuracy, NULL,
     "categorical_accuracy(pred, target) (same shape): 1.0 where argmax(pred) equals "
     "argmax(target) (first maxima), else 0.0.");

LOSS_BW(pr_op_sparse_softmax_cross_entropy_backward, "sparse_softmax_cross_entropy_backward", infer_sparse_backward,
        fw_sparse_softmax_ce_bw,
        "(g (...), logits (..., C), labels (...)) -> g * (softmax(logits) - onehot(labels)).");
LOSS_BW(pr_op_softmax_cross_entropy_backward, "softmax_cross_entropy_backward", infer_dense_backward,
        fw_softmax_ce_bw,
        "(g (...), logits (..., C), target (..., C)) -> g * (softmax(logits) * sum(target) - "
        "target).");
LOSS_BW(pr_op_sparse_categorical_crossentropy_backward, "sparse_categorical_crossentropy_backward", infer_sparse_backward,
        fw_sparse_probs_ce_bw,
        "(g (...), probs (..., C), labels (...)) -> d sparse_categorical_crossentropy / d probs.");
LOSS_BW(pr_op_categorical_crossentropy_backward, "categorical_crossentropy_backward", infer_dense_backward,
        fw_probs_ce_bw,
        "(g (...), probs (..., C), target (..., C)) -> d categorical_crossentropy / d probs.");

const pr_op pr_op_batch_norm_train = {
    .name = "batch_norm_train", .n_in = 3, .n_out = 3, .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_train, .forward = fw_bn_train,
    .gradient = gr_bn_train, .bf16_inputs = 1,
    .doc = "batch_norm_train(x (..., C), gamma (C), beta (C); epsilon) -> (y, batch_mean, "
           "batch_var): normalise with the batch statistics over all axes but the last "
           "(biased variance).  x float32 or bfloat16 (computed in float32, y in x's dtype); "
           "the rest float32."};
const pr_op pr_op_batch_norm_train_backward = {
    .name = "batch_norm_train_backward", .n_in = 5, .n_out = 3, .flags = PR_OP_NO_GRADIENT_RULE,
    .attrs = pr_bn_backward_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_backward, .forward = fw_bn_train_backward,
    .bf16_inputs = 3, .inplace_inputs = 3,
    .doc = "batch_norm_train_backward(dy, x, gamma, batch_mean, batch_var; epsilon, dx_dtype) -> "
           "(dx, dgamma, dbeta) (Ioffe & Szegedy 2015, section 3); dy and x both float32 or "
           "both bfloat16.  dx is bfloat16 when dy and x are (dx_dtype's default, float32, "
           "then means x's dtype) or with dx_dtype=5 (float32 dy and x: made by jit_compile "
           "from the cast that follows), else float32."};
const pr_op pr_op_batch_norm_infer = {
    .name = "batch_norm_infer", .n_in = 5, .n_out = 1, .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_infer, .forward = fw_bn_infer,
    .gradient = gr_bn_infer, .bf16_inputs = 1,
    .doc = "batch_norm_infer(x (..., C), gamma, beta, moving_mean, moving_var (C); epsilon) -> "
           "gamma * (x - mean) / sqrt(var + epsilon) + beta; x float32 or bfloat16 (y in x's "
           "dtype)."};
const pr_op pr_op_batch_norm_infer_backward = {
    .name = "batch_norm_infer_backward", .n_in = 5, .n_out = 3, .flags = PR_OP_NO_GRADIENT_RULE,
    .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_backward, .forward = fw_bn_infer_backward,
    .bf16_inputs = 3,
    .doc = "batch_norm_infer_backward(dy, x, gamma, moving_mean, moving_var; epsilon) -> "
           "(dx, dgamma, dbeta) with fixed statistics; dy and x both float32 or both bfloat16 "
           "(dx in their dtype)."};

