/* Registry entries of the array family: comparisons (bool results), where,
 * cast, stop_gradient, transpose, strided_slice and its adjoint, pad,
 * concatenate, take and its adjoint, one_hot, and the max/min/argmax/argmin
 * reductions.  Moves and selections are exact; their gradient rules are
 * other ops of this family, so gradients of any order exist. */
#include "ops.h" /* Python.h first */
#include "op_list.h"

#include <string.h>

#include "kernels/array.h"
#include "kernels/bf16.h"
#include "kernels/elementwise.h"
#include "op_attrs.h"

#define T(o) (&((pr_Tensor *)(o))->v)

static int normalize_axis(const pr_op *op, int64_t axis, int ndim, int *out) {
    if (axis < -ndim || axis >= ndim)
        return pr_fail(op, PyExc_ValueError, "axis %lld is out of bounds for rank %d",
                       (long long)axis, ndim);
    *out = (int)(axis < 0 ? axis + ndim : axis);
    return 0;
}

/* Row-major element strides of a view. */
static void strides_of(const pr_view *v, int64_t *st) {
    int64_t s = 1;
    for (int d = v->ndim - 1; d >= 0; d--) st[d] = s, s *= v->shape[d];
}

static void fill_ints(pr_ints *a, int n, const int64_t *v) {
    a->n = n;
    for (int d = 0; d < n; d++) a->v[d] = v[d];
}

/* ---- comparisons ------------------------------------------------------------ */

static int infer_compare(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    int nd;
    int64_t shape[PR_MAX_DIMS];
    if (pr_broadcast_shape(op, &in[0], &in[1], &nd, shape) < 0) return -1;
    pr_set_out(out, PR_BOOL, nd, shape);
    return 0;
}

static int compare(pr_compare_kind k, const pr_view *in, pr_view *out) {
    int64_t sa[PR_MAX_DIMS], sb[PR_MAX_DIMS];
    pr_broadcast_strides(&in[0], out->ndim, out->shape, sa);
    pr_broadcast_strides(&in[1], out->ndim, out->shape, sb);
    return pr_k_compare(k, in[0].data, in[0].dtype, sa, in[1].data, in[1].dtype, sb, out->data,
                        out->ndim, out->shape);
}

#define COMPARE(var, fn, nm, kind, sym)                                                    \
    static int fn(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {      \
        return compare(kind, in, out);                                                     \
    }                                                                                      \
    const pr_op var = {.name = nm, .n_in = 2, .n_out = 1, .infer = infer_compare,  \
                              .forward = fn,                                               \
                              .doc = "x " sym " y elementwise with NumPy broadcasting: a " \
                                     "bool tensor.  Inputs of any dtypes, compared by "    \
                                     "value (NaN compares false, != true).  Not "          \
                                     "differentiable."}

COMPARE(pr_op_greater, fw_greater, "greater", PR_CMP_GT, ">");
COMPARE(pr_op_greater_equal, fw_greater_equal, "greater_equal", PR_CMP_GE, ">=");
COMPARE(pr_op_less, fw_less, "less", PR_CMP_LT, "<");
COMPARE(pr_op_less_equal, fw_less_equal, "less_equal", PR_CMP_LE, "<=");
COMPARE(pr_op_equal, fw_equal, "equal", PR_CMP_EQ, "==");
COMPARE(pr_op_not_equal, fw_not_equal, "not_equal", PR_CMP_NE, "!=");

/* ---- where -------------------------------------------------------------------- */

static int infer_where(const pr_op *op, const pr_view *in, int n, const void *attrs,
                       pr_view *out, size_t *ws) {
    if (pr_expect_dtype(op, in, 1, PR_F32) < 0 || pr_expect_dtype(op, in, 2, PR_F32) < 0) return -1;
    pr_view xy;
    int nd;
    int64_t shape[PR_MAX_DIMS];
    if (pr_broadcast_shape(op, &in[1], &in[2], &nd, shape) < 0) return -1;
    pr_set_out(&xy, PR_F32, nd, shape);
    if (pr_broadcast_shape(op, &in[0], &xy, &nd, shape) < 0) return -1;
    pr_set_out(out, PR_F32, nd, shape);
    return 0;
}

static int fw_where(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    int64_t sc[PR_MAX_DIMS], sx[PR_MAX_DIMS], sy[PR_MAX_DIMS];
    pr_broadcast_strides(&in[0], out->ndim, out->shape, sc);
    pr_broadcast_strides(&in[1], out->ndim, out->shape, sx);
    pr_broadcast_strides(&in[2], out->ndim, out->shape, sy);
    return pr_k_where(in[0].data, in[0].dtype, sc, in[1].data, sx, in[2].data, sy, out->data,
                      out->ndim, out->shape);
}

/* where(c, g, 0) and where(c, 0, g), each summed down to its input's shape. */
static int gr_where(PyObject *const *in, PyObject *const *out, const void *attrs,
                    PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *zero = (PyObject *)pr_tensor_scalar(0.0f);
    if (!zero) return -1;
    for (int i = 1; i <= 2; i++) {
        if (!needs[i]) continue;
        PyObject *args[3] = {in[0], i == 1 ? gout[0] : zero, i == 1 ? zero : gout[0]};
        PyObject *g = pr_call1(&pr_op_where, args, 3, NULL);
        gin[i] = g ? pr_sum_to_shape(g, T(in[i])) : NULL;
        Py_XDECREF(g);
        if (!gin[i]) return Py_DECREF(zero), -1;
    }
    Py_DECREF(zero);
    return 0;
}

const pr_op pr_op_where = {
    .name = "where", .n_in = 3, .n_out = 1, .flags = PR_OP_ELEMENTWISE, .infer = infer_where,
    .forward = fw_where, .gradient = gr_where,
    .doc = "where(condition, x, y): x where condition is nonzero (true), else y, NumPy "
           "broadcasting of all three; condition of any dtype, x and y float32.  Gradients "
           "flow to x and y through the selected elements (none to condition)."};

/* ---- cast, stop_gradient ------------------------------------------------------- */

typedef struct {
    int64_t dtype;
} cast_attrs;

static int infer_cast(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                      size_t *ws) {
    int64_t dt = ((const cast_attrs *)attrs)->dtype;
    if (dt < 0 || dt >= PR_N_DTYPES)
        return pr_fail(op, PyExc_ValueError, "dtype code %lld names no dtype", (long long)dt);
    if ((dt == PR_BF16 || in[0].dtype == PR_BF16) &&
        !(pr_dtype_is_float((pr_dtype)dt) && pr_dtype_is_float(in[0].dtype)))
        return pr_fail(op, PyExc_TypeError, "bfloat16 converts to and from float32 only, got %s "
                       "to %s", pr_dtype_name(in[0].dtype), pr_dtype_name((pr_dtype)dt));
    pr_set_out(out, (pr_dtype)dt, in[0].ndim, in[0].shape);
    return 0;
}

/* float32 -> bfloat16 rounds to nearest even (NaN stays NaN, as ml_dtypes);
 * bfloat16 -> float32 is exact (kernels/bf16.h). */
static int fw_cast(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    if (out->dtype == PR_BF16 && in[0].dtype == PR_F32) {
        pr_f32_to_bf16(in[0].data, out->data, out->size);
        return PR_OK;
    }
    if (out->dtype == PR_F32 && in[0].dtype == PR_BF16) {
        pr_bf16_to_f32_array(in[0].data, out->data, out->size);
        return PR_OK;
    }
    return pr_k_cast(in[0].data, in[0].dtype, out->data, out->dtype, out->size);
}

/* Float to float (float32, bfloat16) passes the gradient on unchanged
 * (gradients are float32); a cast to or from an integer type has none
 * (tf.cast's rule). */
static int gr_cast(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    if (!pr_dtype_is_float(T(in[0])->dtype) || !pr_dtype_is_float(T(out[0])->dtype)) return 0;
    if (T(gout[0])->dtype == T(in[0])->dtype) {
        Py_INCREF(gout[0]);
        gin[0] = gout[0];
        return 0;
    }
    /* back to the source's dtype, as TensorFlow's Cast gradient: a bfloat16
     * activation gets a bfloat16 gradient */
    cast_attrs a = {T(in[0])->dtype};
    return (gin[0] = pr_call1(&pr_op_cast, &gout[0], 1, &a)) ? 0 : -1;
}

static const pr_attr_spec cast_specs[] = {
    {"dtype", PR_ATTR_INT, offsetof(cast_attrs, dtype), 1, 0}, {NULL}};

const pr_op pr_op_cast = {
    .name = "cast", .n_in = 1, .n_out = 1, .flags = PR_OP_BF16, .attrs = cast_specs,
    .attr_size = sizeof(cast_attrs),
    .infer = infer_cast, .forward = fw_cast, .gradient = gr_cast,
    .doc = "x converted to dtype code `dtype` (0 float32, 1 int32, 2 int64, 3 uint8, 4 bool, "
           "5 bfloat16 (from and to float32 only, round to nearest even); "
           "pyresnet.ops.cast takes names).  Float to integer truncates toward 0 (NaN -> 0, "
           "out-of-range values clamp to the type's ends); integer to integer wraps; to bool "
           "is `!= 0`.  The gradient passes between float types only, cast back to x's dtype."};

static int infer_copy(const pr_op *op, const pr_view *in, int n, const void *attrs,
                      pr_view *out, size_t *ws) {
    pr_set_out(out, in[0].dtype, in[0].ndim, in[0].shape);
    return 0;
}

static int fw_copy(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    memcpy(out->data, in[0].data, (size_t)in[0].size * pr_dtype_size(in[0].dtype));
    return PR_OK;
}

const pr_op pr_op_stop_gradient = {
    .name = "stop_gradient", .n_in = 1, .n_out = 1, .infer = infer_copy, .forward = fw_copy,
    .doc = "x unchanged, any dtype; no gradient flows through it (tf.stop_gradient)."};

/* ---- transpose ------------------------------------------------------------------ */

typedef struct {
    pr_ints perm;
} perm_attrs;

static int infer_transpose(const pr_op *op, const pr_view *in, int n, const void *attrs,
                           pr_view *out, size_t *ws) {
    const pr_ints *p = &((const perm_attrs *)attrs)->perm;
    int seen[PR_MAX_DIMS] = {0}, ok = p->n == in[0].ndim;
    for (int d = 0; ok && d < p->n; d++) ok = p->v[d] >= 0 && p->v[d] < p->n && !seen[p->v[d]]++;
    if (!ok) {
        char s[128];
        return pr_fail(op, PyExc_ValueError,
                       "perm must be a permutation of 0..%d for a tensor of shape %s",
                       in[0].ndim - 1, pr_shape_str(&in[0], s, sizeof s));
    }
    int64_t shape[PR_MAX_DIMS];
    for (int d = 0; d < p->n; d++) shape[d] = in[0].shape[p->v[d]];
    pr_set_out(out, in[0].dtype, p->n, shape);
    return 0;
}

static int fw_transpose(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    const pr_ints *p = &((const perm_attrs *)a)->perm;
    int64_t xs[PR_MAX_DIMS], src[PR_MAX_DIMS], dst[PR_MAX_DIMS];
    strides_of(&in[0], xs);
    strides_of(out, dst);
    for (int d = 0; d < p->n; d++) src[d] = xs[p->v[d]];
    return pr_k_copy_strided(in[0].data, src, out->data, dst, out->ndim, out->shape,
                             pr_dtype_size(out->dtype));
}

static int gr_transpose(PyObject *const *in, PyObject *const *out, const void *attrs,
                        PyObject *const *gout, const int *needs, PyObject **gin) {
    const pr_ints *p = &((const perm_attrs *)attrs)->perm;
    perm_attrs inv = {{0}};
    inv.perm.n = p->n;
    for (int d = 0; d < p->n; d++) inv.perm.v[p->v[d]] = d;
    return (gin[0] = pr_call1(&pr_op_transpose, &gout[0], 1, &inv)) ? 0 : -1;
}

static const pr_attr_spec perm_specs[] = {
    {"perm", PR_ATTR_INTS, offsetof(perm_attrs, perm), 1, 0}, {NULL}};

const pr_op pr_op_transpose = {
    .name = "transpose", .n_in = 1, .n_out = 1, .attrs = perm_specs,
    .attr_size = sizeof(perm_attrs), .infer = infer_transpose, .forward = fw_transpose,
    .gradient = gr_transpose,
    .doc = "Axes permuted: out.shape[d] = x.shape[perm[d]] (np.transpose), any dtype."};

/* ---- strided_slice and its adjoint ---------------------------------------------- */

/* Per dimension d: elements begin[d] + i * strides[d] for i < size[d];
 * size -1 takes the whole dimension (begin 0, stride 1; the way to slice a
 * dimension unknown while tracing).  strided_slice_backward's `shape` is the
 * sliced tensor's shape (in the `size` slot). */
typedef struct {
    pr_ints begin, strides, size;
} slice_attrs;

/* The slice's extent along each dimension of a tensor of shape `dims`. */
static int slice_extent(const pr_op *op, const slice_attrs *a, int ndim, const int64_t *dims,
                        const int64_t *size_given, int64_t *extent) {
    if (a->begin.n != ndim || a->strides.n != ndim)
        return pr_fail(op, PyExc_ValueError, "begin and strides need %d entries, got %d and %d",
                       ndim, a->begin.n, a->strides.n);
    for (int d = 0; d < ndim; d++) {
        int64_t b = a->begin.v[d], s = a->strides.v[d], k = size_given[d], dim = dims[d];
        if ((pr_dim_is_sym(b) && !pr_dim_valid(b)) || (pr_dim_is_sym(k) && !pr_dim_valid(k)))
            return pr_fail(op, PyExc_ValueError, "begin or size of dimension %d is no size", d);
        if (k == -1) {
            if (b != 0 || s != 1)
                return pr_fail(op, PyExc_ValueError,
                               "size -1 (the whole dimension %d) needs begin 0 and stride 1", d);
            extent[d] = dim;
            continue;
        }
        if (s == 0) return pr_fail(op, PyExc_ValueError, "stride of dimension %d is 0", d);
        if (k < 0 && !pr_dim_is_sym(k))
            return pr_fail(op, PyExc_ValueError, "negative size %lld in dimension %d",
                           (long long)k, d);
        extent[d] = k;
        /* Bounds are checked once every size is known (at run time when tracing). */
        if (pr_dim_is_sym(k) || pr_dim_is_sym(b) || pr_dim_is_sym(dim) || k == 0) {
            if ((pr_dim_is_sym(k) || pr_dim_is_sym(b)) && s != 1)
                return pr_fail(op, PyExc_ValueError,
                               "a slice of an unknown size needs stride 1 (dimension %d)", d);
            continue;
        }
        int64_t last;
        int over = __builtin_mul_overflow(k - 1, s, &last) || __builtin_add_overflow(b, last, &last);
        if (over || b < 0 || b >= dim || last < 0 || last >= dim)
            return pr_fail(op, PyExc_ValueError,
                           "slice of dimension %d (begin %lld, stride %lld, size %lld) leaves "
                           "[0, %lld)",
                           d, (long long)b, (long long)s, (long long)k, (long long)dim);
    }
    return 0;
}

static int infer_slice(const pr_op *op, const pr_view *in, int n, const void *attrs,
                       pr_view *out, size_t *ws) {
    const slice_attrs *a = attrs;
    int64_t extent[PR_MAX_DIMS];
    if (a->size.n != in[0].ndim)
        return pr_fail(op, PyExc_ValueError, "size needs %d entries (the rank), got %d",
                       in[0].ndim, a->size.n);
    if (slice_extent(op, a, in[0].ndim, in[0].shape, a->size.v, extent) < 0) return -1;
    pr_set_out(out, in[0].dtype, in[0].ndim, extent);
    return 0;
}

/* Strides and start of the slice inside a tensor of shape `full`. */
static const char *slice_origin(const slice_attrs *a, const pr_view *full, const char *base,
                                int64_t *st) {
    int64_t fs[PR_MAX_DIMS], off = 0;
    strides_of(full, fs);
    for (int d = 0; d < full->ndim; d++) {
        off += a->begin.v[d] * fs[d];
        st[d] = a->strides.v[d] * fs[d];
    }
    return base + off * (int64_t)pr_dtype_size(full->dtype);
}

static int fw_slice(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    int64_t src[PR_MAX_DIMS], dst[PR_MAX_DIMS];
    const char *s = slice_origin(attrs, &in[0], in[0].data, src);
    strides_of(out, dst);
    return pr_k_copy_strided(s, src, out->data, dst, out->ndim, out->shape,
                             pr_dtype_size(out->dtype));
}

static int gr_slice(PyObject *const *in, PyObject *const *out, const void *attrs,
                    PyObject *const *gout, const int *needs, PyObject **gin) {
    slice_attrs a = *(const slice_attrs *)attrs;
    fill_ints(&a.size, T(in[0])->ndim, T(in[0])->shape);
    return (gin[0] = pr_call1(&pr_op_strided_slice_backward, &gout[0], 1, &a)) ? 0 : -1;
}

static int infer_slice_bw(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    const slice_attrs *a = attrs; /* a->size: the full shape */
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    if (a->size.n != in[0].ndim)
        return pr_fail(op, PyExc_ValueError, "shape needs %d entries (g's rank), got %d",
                       in[0].ndim, a->size.n);
    /* g's shape is the slice's extent in a tensor of the full shape. */
    int64_t extent[PR_MAX_DIMS];
    for (int d = 0; d < a->size.n; d++)
        if (a->size.v[d] < 0 && !(pr_dim_is_sym(a->size.v[d]) && pr_dim_valid(a->size.v[d])))
            return pr_fail(op, PyExc_ValueError, "negative size in shape");
    if (slice_extent(op, a, in[0].ndim, a->size.v, in[0].shape, extent) < 0) return -1;
    pr_set_out(out, PR_F32, a->size.n, a->size.v);
    return 0;
}

static int fw_slice_bw(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    int64_t src[PR_MAX_DIMS], dst[PR_MAX_DIMS];
    memset(out->data, 0, (size_t)out->size * sizeof(float));
    char *d = (char *)slice_origin(attrs, out, out->data, dst);
    strides_of(&in[0], src);
    return pr_k_copy_strided(in[0].data, src, d, dst, in[0].ndim, in[0].shape, sizeof(float));
}

static int gr_slice_bw(PyObject *const *in, PyObject *const *out, const void *attrs,
                       PyObject *const *gout, const int *needs, PyObject **gin) {
    slice_attrs a = *(const slice_attrs *)attrs;
    fill_ints(&a.size, T(in[0])->ndim, T(in[0])->shape);
    for (int d = 0; d < a.size.n; d++) /* whole dimensions stay whole (unknown sizes too) */
        if (a.begin.v[d] == 0 && a.strides.v[d] == 1 &&
            a.size.v[d] == ((const slice_attrs *)attrs)->size.v[d])
            a.size.v[d] = -1;
    return (gin[0] = pr_call1(&pr_op_strided_slice, &gout[0], 1, &a)) ? 0 : -1;
}

static const pr_attr_spec slice_specs[] = {
    {"begin", PR_ATTR_INTS, offsetof(slice_attrs, begin), 1, 0},
    {"strides", PR_ATTR_INTS, offsetof(slice_attrs, strides), 1, 0},
    {"size", PR_ATTR_INTS, offsetof(slice_attrs, size), 1, 0}, {NULL}};
static const pr_attr_spec slice_bw_specs[] = {
    {"begin", PR_ATTR_INTS, offsetof(slice_attrs, begin), 1, 0},
    {"strides", PR_ATTR_INTS, offsetof(slice_attrs, strides), 1, 0},
    {"shape", PR_ATTR_INTS, offsetof(slice_attrs, size), 1, 0}, {NULL}};

const pr_op pr_op_strided_slice = {
    .name = "strided_slice", .n_in = 1, .n_out = 1, .attrs = slice_specs,
    .attr_size = sizeof(slice_attrs), .infer = infer_slice, .forward = fw_slice,
    .gradient = gr_slice,
    .doc = "Basic slicing, any dtype: along each dimension d the elements begin[d] + i * "
           "strides[d] for i < size[d] (strides may be negative; size -1 takes the whole "
           "dimension).  Python's x[a:b:c] is this with begin, stride and size from "
           "slice.indices."};
const pr_op pr_op_strided_slice_backward = {
    .name = "strided_slice_backward", .n_in = 1, .n_out = 1, .attrs = slice_bw_specs,
    .attr_size = sizeof(slice_attrs), .infer = infer_slice_bw, .forward = fw_slice_bw,
    .gradient = gr_slice_bw,
    .doc = "The adjoint of strided_slice (float32): zeros of `shape` with g written at the "
           "sliced positions."};

/* ---- pad ------------------------------------------------------------------------ */

typedef struct {
    pr_ints before, after;
    double value;
} pad_attrs;

#define MAX_PAD ((int64_t)1 << 40) /* keeps size arithmetic far from overflow */

static int infer_pad(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                     size_t *ws) {
    const pad_attrs *a = attrs;
    if (a->before.n != in[0].ndim || a->after.n != in[0].ndim)
        return pr_fail(op, PyExc_ValueError,
                       "before and after need %d entries (the rank), got %d and %d", in[0].ndim,
                       a->before.n, a->after.n);
    int64_t shape[PR_MAX_DIMS];
    for (int d = 0; d < in[0].ndim; d++) {
        if (a->before.v[d] < 0 || a->after.v[d] < 0)
            return pr_fail(op, PyExc_ValueError, "negative padding in dimension %d", d);
        if (a->before.v[d] > MAX_PAD || a->after.v[d] > MAX_PAD)
            return pr_fail(op, PyExc_ValueError, "padding of dimension %d exceeds 2^40", d);
        if ((shape[d] = pr_dim_add(in[0].shape[d], a->before.v[d])) == PR_DIM_ERROR ||
            (shape[d] = pr_dim_add(shape[d], a->after.v[d])) == PR_DIM_ERROR)
            return -1;
    }
    pr_set_out(out, in[0].dtype, in[0].ndim, shape);
    return 0;
}

static int fw_pad(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const pad_attrs *a = attrs;
    slice_attrs s;
    fill_ints(&s.begin, a->before.n, a->before.v);
    s.strides.n = out->ndim;
    for (int d = 0; d < out->ndim; d++) s.strides.v[d] = 1;
    int64_t src[PR_MAX_DIMS], dst[PR_MAX_DIMS];
    pr_k_fill_value(out->data, out->dtype, out->size, a->value);
    char *d = (char *)slice_origin(&s, out, out->data, dst);
    strides_of(&in[0], src);
    return pr_k_copy_strided(in[0].data, src, d, dst, in[0].ndim, in[0].shape,
                             pr_dtype_size(out->dtype));
}

/* Slice a window out of g: begin `begin`, the extent of `like` (whole where
 * the extent is g's own, so unknown sizes stay whole). */
static PyObject *window(PyObject *g, const int64_t *begin, const pr_view *like) {
    slice_attrs s;
    fill_ints(&s.begin, like->ndim, begin);
    fill_ints(&s.size, like->ndim, like->shape);
    s.strides.n = like->ndim;
    for (int d = 0; d < like->ndim; d++) {
        s.strides.v[d] = 1;
        if (begin[d] == 0 && like->shape[d] == T(g)->shape[d]) s.size.v[d] = -1;
    }
    return pr_call1(&pr_op_strided_slice, &g, 1, &s);
}

static int gr_pad(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = window(gout[0], ((const pad_attrs *)attrs)->before.v, T(in[0]))) ? 0 : -1;
}

static const pr_attr_spec pad_specs[] = {
    {"before", PR_ATTR_INTS, offsetof(pad_attrs, before), 1, 0},
    {"after", PR_ATTR_INTS, offsetof(pad_attrs, after), 1, 0},
    {"value", PR_ATTR_FLOAT, offsetof(pad_attrs, value), 0, 0}, {NULL}};

const pr_op pr_op_pad = {
    .name = "pad", .n_in = 1, .n_out = 1, .attrs = pad_specs, .attr_size = sizeof(pad_attrs),
    .infer = infer_pad, .forward = fw_pad, .gradient = gr_pad,
    .doc = "Constant padding, any dtype (np.pad mode 'constant'): before[d] and after[d] "
           "elements of `value` around dimension d."};

/* ---- concatenate ------------------------------------------------------------------ */

typedef struct {
    int64_t axis;
} axis_attrs;

static int infer_concat(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    int ax = 0;
    char sa[128], sb[128];
    if (in[0].ndim == 0 || in[0].ndim != in[1].ndim || in[0].dtype != in[1].dtype)
        return pr_fail(op, PyExc_ValueError,
                       "inputs need the same rank (>= 1) and dtype, got %s %s and %s %s",
                       pr_dtype_name(in[0].dtype), pr_shape_str(&in[0], sa, sizeof sa),
                       pr_dtype_name(in[1].dtype), pr_shape_str(&in[1], sb, sizeof sb));
    if (normalize_axis(op, ((const axis_attrs *)attrs)->axis, in[0].ndim, &ax) < 0) return -1;
    int64_t shape[PR_MAX_DIMS];
    for (int d = 0; d < in[0].ndim; d++) {
        if (d != ax && !pr_dim_maybe_equal(in[0].shape[d], in[1].shape[d]))
            return pr_fail(op, PyExc_ValueError,
                           "shapes %s and %s differ outside the concatenation axis %d",
                           pr_shape_str(&in[0], sa, sizeof sa), pr_shape_str(&in[1], sb, sizeof sb),
                           ax);
        shape[d] = pr_dim_is_sym(in[0].shape[d]) ? in[1].shape[d] : in[0].shape[d];
    }
    if ((shape[ax] = pr_dim_add(in[0].shape[ax], in[1].shape[ax])) == PR_DIM_ERROR) return -1;
    pr_set_out(out, in[0].dtype, in[0].ndim, shape);
    return 0;
}

static int fw_concat(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    int ax = (int)(((const axis_attrs *)attrs)->axis < 0 ? ((const axis_attrs *)attrs)->axis + out->ndim
                                                         : ((const axis_attrs *)attrs)->axis);
    int64_t dst[PR_MAX_DIMS], src[PR_MAX_DIMS];
    size_t item = pr_dtype_size(out->dtype);
    strides_of(out, dst);
    char *d = out->data;
    for (int i = 0; i < 2; i++) {
        strides_of(&in[i], src);
        int rc = pr_k_copy_strided(in[i].data, src, d, dst, in[i].ndim, in[i].shape, item);
        if (rc != PR_OK) return rc;
        d += in[i].shape[ax] * dst[ax] * (int64_t)item;
    }
    return PR_OK;
}

static int gr_concat(PyObject *const *in, PyObject *const *out, const void *attrs,
                     PyObject *const *gout, const int *needs, PyObject **gin) {
    const pr_view *a = T(in[0]);
    int64_t ax = ((const axis_attrs *)attrs)->axis;
    if (ax < 0) ax += a->ndim;
    int64_t begin[PR_MAX_DIMS] = {0};
    for (int i = 0; i < 2; i++) {
        if (i == 1) begin[ax] = a->shape[ax];
        if (needs[i] && !(gin[i] = window(gout[0], begin, T(in[i])))) return -1;
    }
    return 0;
}

static const pr_attr_spec axis_specs[] = {
    {"axis", PR_ATTR_INT, offsetof(axis_attrs, axis), 0, 0}, {NULL}};

const pr_op pr_op_concatenate = {
    .name = "concatenate", .n_in = 2, .n_out = 1, .attrs = axis_specs,
    .attr_size = sizeof(axis_attrs), .infer = infer_concat, .forward = fw_concat,
    .gradient = gr_concat,
    .doc = "x and y joined along `axis` (np.concatenate of two tensors of one dtype; "
           "pyresnet.ops.concatenate folds a list through it)."};

/* ---- take and its adjoint ------------------------------------------------------------ */

typedef struct {
    int64_t axis, dim;
} take_attrs;

static int expect_indices(const pr_op *op, const pr_view *in, int i) {
    if (in[i].dtype != PR_I32 && in[i].dtype != PR_I64)
        return pr_fail(op, PyExc_TypeError, "indices (input %d) must be int32 or int64, got %s",
                       i, pr_dtype_name(in[i].dtype));
    return 0;
}

/* out = x.shape[:axis] + idx.shape + x.shape[axis + 1:] (np.take). */
static int take_shape(const pr_op *op, const pr_view *x, const pr_view *idx, int ax, pr_view *out,
                      pr_dtype dt) {
    if (x->ndim - 1 + idx->ndim > PR_MAX_DIMS)
        return pr_fail(op, PyExc_ValueError, "the result would have rank %d > %d",
                       x->ndim - 1 + idx->ndim, PR_MAX_DIMS);
    int64_t shape[PR_MAX_DIMS];
    int k = 0;
    for (int d = 0; d < ax; d++) shape[k++] = x->shape[d];
    for (int d = 0; d < idx->ndim; d++) shape[k++] = idx->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) shape[k++] = x->shape[d];
    pr_set_out(out, dt, k, shape);
    return 0;
}

static int infer_take(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                      size_t *ws) {
    int ax = 0;
    if (expect_indices(op, in, 1) < 0) return -1;
    if (in[0].ndim == 0) return pr_fail(op, PyExc_ValueError, "x must have rank >= 1");
    if (normalize_axis(op, ((const take_attrs *)attrs)->axis, in[0].ndim, &ax) < 0) return -1;
    return take_shape(op, &in[0], &in[1], ax, out, in[0].dtype);
}

/* x as (outer, dim, inner) around axis `ax`. */
static void split_at(const pr_view *x, int ax, int64_t *outer, int64_t *inner) {
    *outer = 1, *inner = 1;
    for (int d = 0; d < ax; d++) *outer *= x->shape[d];
    for (int d = ax + 1; d < x->ndim; d++) *inner *= x->shape[d];
}

static int fw_take(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    int64_t a = ((const take_attrs *)attrs)->axis, outer, inner;
    int ax = (int)(a < 0 ? a + in[0].ndim : a);
    split_at(&in[0], ax, &outer, &inner);
    return pr_k_take(in[0].data, pr_dtype_size(in[0].dtype), outer, in[0].shape[ax], inner,
                     in[1].data, in[1].dtype, in[1].size, out->data);
}

static int gr_take(PyObject *const *in, PyObject *const *out, const void *attrs,
                   PyObject *const *gout, const int *needs, PyObject **gin) {
    const pr_view *x = T(in[0]);
    take_attrs a = *(const take_attrs *)attrs;
    if (a.axis < 0) a.axis += x->ndim;
    a.dim = x->shape[a.axis];
    PyObject *args[2] = {gout[0], in[1]};
    return (gin[0] = pr_call1(&pr_op_take_backward, args, 2, &a)) ? 0 : -1;
}

/* take_backward(g, indices; axis, dim): g has take's output shape; the
 * result has the input's, with `dim` along `axis`. */
static int infer_take_bw(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    const take_attrs *a = attrs;
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || expect_indices(op, in, 1) < 0) return -1;
    int nd = in[0].ndim - in[1].ndim + 1;
    if (nd < 1 || nd > PR_MAX_DIMS || a->axis < 0 || a->axis >= nd || (a->dim < 0 && !pr_dim_valid(a->dim)))
        return pr_fail(op, PyExc_ValueError,
                       "axis %lld and dim %lld do not fit g of rank %d and indices of rank %d",
                       (long long)a->axis, (long long)a->dim, in[0].ndim, in[1].ndim);
    int ax = (int)a->axis;
    int64_t shape[PR_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        shape[d] = d < ax ? in[0].shape[d] : d == ax ? a->dim : in[0].shape[d + in[1].ndim - 1];
    pr_view x, want;
    pr_set_out(&x, PR_F32, nd, shape);
    take_shape(op, &x, &in[1], ax, &want, PR_F32);
    for (int d = 0; d < want.ndim; d++)
        if (!pr_dim_maybe_equal(want.shape[d], in[0].shape[d])) {
            char s[128], w[128];
            return pr_fail(op, PyExc_ValueError, "g has shape %s, expected %s",
                           pr_shape_str(&in[0], s, sizeof s), pr_shape_str(&want, w, sizeof w));
        }
    *out = x;
    return 0;
}

static int fw_take_bw(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    int ax = (int)((const take_attrs *)attrs)->axis;
    int64_t outer, inner;
    split_at(out, ax, &outer, &inner);
    return pr_k_take_add(in[0].data, outer, out->shape[ax], inner, in[1].data, in[1].dtype,
                         in[1].size, out->data);
}

static int gr_take_bw(PyObject *const *in, PyObject *const *out, const void *attrs,
                      PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *args[2] = {gout[0], in[1]};
    return (gin[0] = pr_call1(&pr_op_take, args, 2, attrs)) ? 0 : -1;
}

static const pr_attr_spec take_specs[] = {
    {"axis", PR_ATTR_INT, offsetof(take_attrs, axis), 0, 0}, {NULL}};
static const pr_attr_spec take_bw_specs[] = {
    {"axis", PR_ATTR_INT, offsetof(take_attrs, axis), 1, 0},
    {"dim", PR_ATTR_INT, offsetof(take_attrs, dim), 1, 0}, {NULL}};

const pr_op pr_op_take = {
    .name = "take", .n_in = 2, .n_out = 1, .attrs = take_specs, .attr_size = sizeof(take_attrs),
    .infer = infer_take, .forward = fw_take, .gradient = gr_take,
    .doc = "np.take(x, indices, axis): gathers along `axis` by int32/int64 indices (negative "
           "count from the end; out of range raises ValueError naming the index).  The "
           "gradient scatter-adds into x's shape (take_backward)."};
const pr_op pr_op_take_backward = {
    .name = "take_backward", .n_in = 2, .n_out = 1, .attrs = take_bw_specs,
    .attr_size = sizeof(take_attrs), .infer = infer_take_bw, .forward = fw_take_bw,
    .gradient = gr_take_bw,
    .doc = "The adjoint of take (float32): zeros with `dim` along `axis`, g's slices added at "
           "their indices (repeated indices accumulate, in order)."};

/* ---- one_hot ------------------------------------------------------------------------ */

typedef struct {
    int64_t num_classes;
} one_hot_attrs;

static int infer_one_hot(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    int64_t c = ((const one_hot_attrs *)attrs)->num_classes;
    if (in[0].dtype != PR_I32 && in[0].dtype != PR_I64 && in[0].dtype != PR_U8)
        return pr_fail(op, PyExc_TypeError, "indices must be int32, int64 or uint8, got %s",
                       pr_dtype_name(in[0].dtype));
    if (c < 1) return pr_fail(op, PyExc_ValueError, "num_classes must be >= 1, got %lld", (long long)c);
    if (in[0].ndim >= PR_MAX_DIMS)
        return pr_fail(op, PyExc_ValueError, "indices of rank %d: the result would exceed rank %d",
                       in[0].ndim, PR_MAX_DIMS);
    int64_t shape[PR_MAX_DIMS];
    memcpy(shape, in[0].shape, sizeof(int64_t) * (size_t)in[0].ndim);
    shape[in[0].ndim] = c;
    pr_set_out(out, PR_F32, in[0].ndim + 1, shape);
    return 0;
}

static int fw_one_hot(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    return pr_k_one_hot(in[0].data, in[0].dtype, in[0].size,
                        ((const one_hot_attrs *)attrs)->num_classes, out->data);
}

static const pr_attr_spec one_hot_specs[] = {
    {"num_classes", PR_ATTR_INT, offsetof(one_hot_attrs, num_classes), 1, 0}, {NULL}};

const pr_op pr_op_one_hot = {
    .name = "one_hot", .n_in = 1, .n_out = 1, .attrs = one_hot_specs,
    .attr_size = sizeof(one_hot_attrs), .infer = infer_one_hot, .forward = fw_one_hot,
    .doc = "float32 one-hot rows along a new last axis of `num_classes` (keras.ops.one_hot); "
           "an index outside [0, num_classes) gives a row of zeros.  Not differentiable."};

/* ---- max, min, argmax, argmin ------------------------------------------------------ */

static int extreme_mask(const pr_op *op, const pr_reduce_attrs *a, const pr_view *x, int *mask) {
    int seen[PR_MAX_DIMS] = {0};
    for (int d = 0; d < x->ndim; d++) mask[d] = a->axes.n == 0;
    for (int i = 0; i < a->axes.n; i++) {
        int ax = 0;
        if (normalize_axis(op, a->axes.v[i], x->ndim, &ax) < 0) return -1;
        if (seen[ax]++) return pr_fail(op, PyExc_ValueError, "axis %d is repeated", ax);
        mask[ax] = 1;
    }
    return 0;
}

static int infer_extreme(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    const pr_reduce_attrs *a = attrs;
    int mask[PR_MAX_DIMS], arg = strncmp(op->name, "arg", 3) == 0;
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || extreme_mask(op, a, &in[0], mask) < 0) return -1;
    if (arg && a->axes.n > 1)
        return pr_fail(op, PyExc_ValueError, "takes one axis or none (all), got %d", a->axes.n);
    int64_t shape[PR_MAX_DIMS], reduced = 1;
    int k = 0;
    for (int d = 0; d < in[0].ndim; d++) {
        if (!mask[d]) shape[k++] = in[0].shape[d];
        else {
            if (a->keepdims) shape[k++] = 1;
            if (!pr_dim_is_sym(in[0].shape[d]) && !pr_dim_is_sym(reduced))
                reduced *= in[0].shape[d];
            else reduced = in[0].shape[d];
            if (in[0].shape[d] == 0)
                return pr_fail(op, PyExc_ValueError,
                               "reduction over an empty dimension %d (no identity)", d);
        }
    }
    if (arg && !pr_dim_is_sym(reduced) && reduced > INT32_MAX)
        return pr_fail(op, PyExc_ValueError, "%lld reduced elements do not fit int32 indices",
                       (long long)reduced);
    pr_set_out(out, arg ? PR_I32 : PR_F32, k, shape);
    return 0;
}

static int extreme(pr_extreme_kind k, const pr_view *in, pr_view *out, const void *attrs) {
    int mask[PR_MAX_DIMS];
    const pr_reduce_attrs *a = attrs;
    for (int d = 0; d < in[0].ndim; d++) mask[d] = a->axes.n == 0;
    for (int i = 0; i < a->axes.n; i++)
        mask[a->axes.v[i] < 0 ? a->axes.v[i] + in[0].ndim : a->axes.v[i]] = 1;
    return pr_k_reduce_extreme(k, in[0].data, in[0].ndim, in[0].shape, mask, out->data);
}
static int fw_max(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return extreme(PR_EXT_MAX, in, out, a);
}
static int fw_min(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return extreme(PR_EXT_MIN, in, out, a);
}
static int fw_argmax(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return extreme(PR_EXT_ARGMAX, in, out, a);
}
static int fw_argmin(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return extreme(PR_EXT_ARGMIN, in, out, a);
}

/* TensorFlow's rule (math_grad.py _MinOrMaxGrad): g shared equally among
 * the elements equal to the result:
 *   dx = where(x == y, g / count, 0), count = sum(x == y) over the axes. */
static int gr_extreme(PyObject *const *in, PyObject *const *out, const void *attrs,
                      PyObject *const *gout, const int *needs, PyObject **gin) {
    const pr_view *x = T(in[0]);
    const pr_reduce_attrs *a = attrs;
    int mask[PR_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) mask[d] = a->axes.n == 0;
    for (int i = 0; i < a->axes.n; i++)
        mask[a->axes.v[i] < 0 ? a->axes.v[i] + x->ndim : a->axes.v[i]] = 1;
    pr_shape_attrs kept = {{0}}, full = {{0}};
    kept.shape.n = full.shape.n = x->ndim;
    for (int d = 0; d < x->ndim; d++) {
        kept.shape.v[d] = mask[d] ? 1 : x->shape[d];
        full.shape.v[d] = x->shape[d];
    }
    PyObject *y = pr_call1(&pr_op_reshape, &out[0], 1, &kept);
    PyObject *g = y ? pr_call1(&pr_op_reshape, &gout[0], 1, &kept) : NULL;
    PyObject *eq = NULL, *ones = NULL, *zero = NULL, *hits = NULL, *cnt = NULL, *share = NULL;
    if (g) {
        PyObject *args[2] = {in[0], y};
        eq = pr_call1(&pr_op_equal, args, 2, NULL);
    }
    if (eq) {
        ones = (PyObject *)pr_tensor_scalar(1.0f);
        zero = (PyObject *)pr_tensor_scalar(0.0f);
    }
    if (ones && zero) {
        PyObject *args[3] = {eq, ones, zero};
        hits = pr_call1(&pr_op_where, args, 3, NULL);
    }
    if (hits) {
        pr_reduce_attrs r = *a;
        r.keepdims = 1;
        cnt = pr_call1(&pr_op_sum, &hits, 1, &r);
    }
    if (cnt) {
        PyObject *args[2] = {g, cnt};
        share = pr_call1(&pr_op_divide, args, 2, NULL);
    }
    if (share) {
        PyObject *args[3] = {eq, share, zero};
        gin[0] = pr_call1(&pr_op_where, args, 3, NULL);
    }
    Py_XDECREF(y), Py_XDECREF(g), Py_XDECREF(eq), Py_XDECREF(ones), Py_XDECREF(zero);
    Py_XDECREF(hits), Py_XDECREF(cnt), Py_XDECREF(share);
    return gin[0] ? 0 : -1;
}

static const pr_attr_spec reduce_specs[] = {
    {"axes", PR_ATTR_INTS, offsetof(pr_reduce_attrs, axes), 0, 0},
    {"keepdims", PR_ATTR_BOOL, offsetof(pr_reduce_attrs, keepdims), 0, 0}, {NULL}};

#define EXTREME(var, nm, fw, gr, d)                                                         \
    const pr_op var = {.name = nm, .n_in = 1, .n_out = 1, .attrs = reduce_specs,     \
                              .attr_size = sizeof(pr_reduce_attrs), .infer = infer_extreme, \
                              .forward = fw, .gradient = gr, .doc = d}

EXTREME(pr_op_max, "max", fw_max, gr_extreme,
        "Largest element of float32 x over `axes` (none: all), keepdims as np.max; NaN if "
        "any is NaN.  The gradient is shared equally among the maxima (TensorFlow's rule).");
EXTREME(pr_op_min, "min", fw_min, gr_extreme,
        "Smallest element over `axes`, as max.");
EXTREME(pr_op_argmax, "argmax", fw_argmax, NULL,
        "int32 index of the first largest element along one axis (none: of the flattened "
        "tensor), keepdims as np.argmax; the first NaN wins.  Not differentiable.");
EXTREME(pr_op_argmin, "argmin", fw_argmin, NULL,
        "int32 index of the first smallest element, as argmax.");

