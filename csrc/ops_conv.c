/* Registry entries of the conv family: matmul; conv2d and its two backprop
 * ops; max/average pooling and global average pooling with their backward
 * ops.  All float32, images NHWC, filters HWIO.
 *
 * bfloat16: matmul and the three conv ops also take bfloat16 operands (the
 * mixed_bfloat16 policy, pyresnet/mixed_precision.py).  When either operand
 * is bfloat16 the op computes in bfloat16: both operands are rounded to
 * bfloat16 (a float32 one while it is packed), products are summed in
 * float32, and the result is float32.  The reference kernels do exactly
 * that in float32 on the rounded operands (kernels/bf16.h); the AMX and
 * AVX512_BF16 variants (kernels/gemm_bf16.h) agree with them to float32
 * summation order.
 *
 * The shape rules check everything the kernels (kernels/conv.c, pool.c)
 * rely on: ranks, dtypes, positive window sizes and strides, matching
 * channels, a non-empty spatial output, and sizes that fit the 32-bit
 * indices of scipy-openblas32.  An empty batch (N = 0) is allowed and gives
 * an empty output (and a zero filter gradient).
 */
#include "ops.h" /* Python.h first */
#include "op_list.h"

#include <limits.h>

#include "kernels/bf16.h"
#include "kernels/conv.h"
#include "kernels/conv_amx.h"
#include "kernels/conv_bf16.h"
#include "kernels/conv_direct.h"
#include "kernels/conv_grouped_simd.h"
#include "kernels/pool.h"
#include "op_attrs.h"

#define T(o) (&((pr_Tensor *)(o))->v)

/* ---- bfloat16 operands ------------------------------------------------------ */

/* Input i must be float32 or bfloat16. */
static int expect_float(const pr_op *op, const pr_view *in, int i) {
    if (in[i].dtype != PR_F32 && in[i].dtype != PR_BF16)
        return pr_fail(op, PyExc_TypeError, "input %d must be float32 or bfloat16, got %s", i,
                       pr_dtype_name(in[i].dtype));
    return 0;
}

/* Whether a call of two operands computes in bfloat16 (either one is). */
static int bf16_call(const pr_view *in) {
    return in[0].dtype == PR_BF16 || in[1].dtype == PR_BF16;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Scratch the reference kernels add for a bfloat16 call: both operands as
 * float32 after rounding (0 while a size is unknown: the plan asks again). */
static size_t widened_bytes(const pr_view *in) {
    if (!bf16_call(in) || pr_dim_is_sym(in[0].size) || pr_dim_is_sym(in[1].size)) return 0;
    return align64(sizeof(float) * (size_t)in[0].size) +
           align64(sizeof(float) * (size_t)in[1].size);
}

/* For a bfloat16 call, w[0..1] are the operands rounded to bfloat16 as
 * float32, in scratch after the first `used` bytes; else the inputs. */
static void widen_operands(const pr_view *in, void *ws, size_t used, pr_view *w) {
    w[0] = in[0], w[1] = in[1];
    if (!bf16_call(in)) return;
    char *p = (char *)ws + used;
    for (int i = 0; i < 2; i++) {
        w[i].data = p;
        w[i].dtype = PR_F32;
        pr_bf16_rounded_f32(in[i].data, in[i].dtype, (float *)p, in[i].size);
        p += align64(sizeof(float) * (size_t)in[i].size);
    }
}

/* The output of conv2d and conv2d_backprop_input: bfloat16 when both
 * operands are (Keras's mixed_bfloat16 layers compute and return
 * bfloat16), else float32.  The filter gradient stays float32 (the
 * weights' dtype: one rounding fewer than Keras's bfloat16 gradient of the
 * cast kernel). */
static pr_dtype activation_dtype(const pr_view *in) {
    return in[0].dtype == PR_BF16 && in[1].dtype == PR_BF16 ? PR_BF16 : PR_F32;
}

/* A kernel that writes float32 runs a bfloat16-output call into float32
 * staging at the start of its scratch, rounded once into the output
 * afterwards (the amx_direct_bf16 variants round as they store instead). */
static size_t staging_bytes(const pr_view *out) {
    if (out->dtype != PR_BF16 || pr_dim_is_sym(out->size)) return 0;
    return align64(sizeof(float) * (size_t)out->size);
}
static float *staged(const pr_view *out, void *ws) {
    return out->dtype == PR_BF16 ? ws : out->data;
}
static void *after_staging(const pr_view *out, void *ws) {
    return (char *)ws + staging_bytes(out);
}
static int unstage(int rc, const pr_view *out, void *ws) {
    if (rc == PR_OK && out->dtype == PR_BF16) pr_f32_to_bf16(ws, out->data, out->size);
    return rc;
}

/* The bfloat16 variants (AMX, AVX512_BF16) take the calls with a bfloat16
 * operand (kernels/conv_bf16.c). */
static pr_operand operand(const pr_view *v) { return (pr_operand){v->data, v->dtype}; }

static int bf16_supports(const pr_view *in, int n, const pr_view *out, const void *a) {
    return bf16_call(in);
}

/* The output gradient as the backward products of a call take it: for a
 * bfloat16 call rounded to bfloat16 once (one cast), so both products run
 * in bfloat16 as the forward one did (Keras's gradients of a bfloat16
 * layer are bfloat16 too); otherwise g itself.  A new reference. */
static PyObject *bf16_gradient(PyObject *const *in, PyObject *g) {
    if ((((pr_Tensor *)in[0])->v.dtype != PR_BF16 && ((pr_Tensor *)in[1])->v.dtype != PR_BF16) ||
        ((pr_Tensor *)g)->v.dtype == PR_BF16) {
        Py_INCREF(g);
        return g;
    }
    pr_cast_attrs a = {PR_BF16};
    return pr_call1(&pr_op_cast, &g, 1, &a);
}

/* Whether every input is float32 (the float32 fast kernels' condition). */
static int all_f32(const pr_view *in) { return in[0].dtype == PR_F32 && in[1].dtype == PR_F32; }

static const char *padding_name(int same) { return same ? "same" : "valid"; }

/* A shape attribute as a view (for checks and messages). */
static pr_view shape_view(const pr_ints *s) {
    pr_view v;
    pr_set_out(&v, PR_F32, s->n, s->v);
    return v;
}

static void set_ints(pr_ints *dst, const pr_view *v) {
    dst->n = v->ndim;
    for (int d = 0; d < v->ndim; d++) dst->v[d] = v->shape[d];
}

static int same_shape(const pr_view *a, int ndim, const int64_t *shape) {
    if (a->ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++)
        if (!pr_dim_maybe_equal(a->shape[d], shape[d])) return 0;
    return 1;
}

/* Every dimension of v (called `name`) in [0, INT_MAX], and fewer than
 * 2^31 elements: OpenBLAS here indexes with 32-bit ints. */
static int check_extent(const pr_op *op, const char *name, const pr_view *v) {
    char s[160];
    double elems = 1.0;
    for (int d = 0; d < v->ndim; d++) {
        if (pr_dim_is_sym(v->shape[d])) continue; /* checked when the size is known */
        if (v->shape[d] < 0)
            return pr_fail(op, PyExc_ValueError, "%s has a negative dimension: %s", name,
                           pr_shape_str(v, s, sizeof s));
        elems *= (double)v->shape[d];
    }
    for (int d = 0; d < v->ndim; d++)
        if ((!pr_dim_is_sym(v->shape[d]) && v->shape[d] > INT_MAX) || elems > INT_MAX)
            return pr_fail(op, PyExc_ValueError,
                           "%s %s is too large (at most 2^31 - 1 elements with 32-bit BLAS)", name,
                           pr_shape_str(v, s, sizeof s));
    return 0;
}

static int check_rank4(const pr_op *op, const char *name, const char *layout, const pr_view *v) {
    char s[160];
    if (v->ndim != 4)
        return pr_fail(op, PyExc_ValueError, "%s must have rank 4 (%s), got shape %s", name,
                       layout, pr_shape_str(v, s, sizeof s));
    return check_extent(op, name, v);
}

/* (*a, *b) from a 1- or 2-int attribute; n == 0 gives (d0, d1). */
static void int_pair(const pr_ints *v, int64_t d0, int64_t d1, int64_t *a, int64_t *b) {
    if (v->n == 0) {
        *a = d0, *b = d1;
    } else {
        *a = v->v[0];
        *b = v->v[v->n - 1];
    }
}

static int check_pair(const pr_op *op, const char *name, const pr_ints *v, int allow_empty) {
    if (v->n > 2 || (v->n == 0 && !allow_empty))
        return pr_fail(op, PyExc_ValueError, "'%s' must be 1 or 2 ints, got %d", name, v->n);
    for (int i = 0; i < v->n; i++) {
        if (v->v[i] < 1)
            return pr_fail(op, PyExc_ValueError, "'%s' must be positive ints, got %lld", name,
                           (long long)v->v[i]);
        if (v->v[i] > INT_MAX)
            return pr_fail(op, PyExc_ValueError, "'%s' must be at most 2^31 - 1, got %lld", name,
                           (long long)v->v[i]);
    }
    return 0;
}

/* The output size must be positive: a window larger than the input with
 * padding="valid" (or an empty image) has no output pixel. */
static int check_window_output(const pr_op *op, const pr_window *g, int same, const char *xname,
                               const pr_view *x, const char *wname, const char *wdesc) {
    char s[160];
    if (g->ho == PR_DIM_ERROR || g->wo == PR_DIM_ERROR) return -1;
    if ((!pr_dim_is_sym(g->ho) && g->ho < 1) || (!pr_dim_is_sym(g->wo) && g->wo < 1))
        return pr_fail(op, PyExc_ValueError,
                       "%s %s gives an empty output (%lld x %lld) for %s %s with strides "
                       "(%lld, %lld) and padding='%s'",
                       wname, wdesc, (long long)g->ho, (long long)g->wo, xname,
                       pr_shape_str(x, s, sizeof s), (long long)g->sh, (long long)g->sw,
                       padding_name(same));
    return 0;
}

/* Expect `dy` (input i) to have the forward output's shape. */
static int check_dy(const pr_op *op, const pr_view *in, int i, int ndim, const int64_t *want) {
    char s[160], w[160];
    if (expect_float(op, in, i) < 0) return -1;
    if (same_shape(&in[i], ndim, want)) return 0;
    pr_view wv;
    pr_set_out(&wv, PR_F32, ndim, want);
    return pr_fail(op, PyExc_ValueError, "dy (input %d) has shape %s, expected %s", i,
                   pr_shape_str(&in[i], s, sizeof s), pr_shape_str(&wv, w, sizeof w));
}

/* ---- matmul --------------------------------------------------------------- */

static int infer_matmul(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    const pr_matmul_attrs *a = attrs;
    char sa[160], sb[160];
    for (int i = 0; i < 2; i++)
        if (expect_float(op, in, i) < 0 || pr_expect_ndim(op, in, i, 2) < 0 ||
            check_extent(op, i ? "b" : "a", &in[i]) < 0)
            return -1;
    int64_t m = in[0].shape[a->transpose_a ? 1 : 0], ka = in[0].shape[a->transpose_a ? 0 : 1];
    int64_t kb = in[1].shape[a->transpose_b ? 1 : 0], nn = in[1].shape[a->transpose_b ? 0 : 1];
    if (!pr_dim_maybe_equal(ka, kb))
        return pr_fail(op, PyExc_ValueError, "inner dimensions differ: a %s%s and b %s%s",
                       pr_shape_str(&in[0], sa, sizeof sa), a->transpose_a ? " (transposed)" : "",
                       pr_shape_str(&in[1], sb, sizeof sb), a->transpose_b ? " (transposed)" : "");
    int64_t shape[2] = {m, nn};
    pr_set_out(out, PR_F32, 2, shape);
    *ws = widened_bytes(in);
    return check_extent(op, "the output", out);
}

static int fw_matmul(const pr_view *in_given, int n, pr_view *out, const void *attrs, void *ws) {
    const pr_matmul_attrs *a = attrs;
    pr_view in[2];
    widen_operands(in_given, ws, 0, in);
    int64_t k = in[0].shape[a->transpose_a ? 0 : 1];
    if (k == 0) {
        for (int64_t i = 0; i < out->size; i++) ((float *)out->data)[i] = 0.0f;
        return PR_OK;
    }
    pr_sgemm(a->transpose_a, a->transpose_b, out->shape[0], out->shape[1], k, 1.0f, in[0].data,
             in[0].shape[1], in[1].data, in[1].shape[1], 0.0f, out->data, out->shape[1]);
    return PR_OK;
}

static size_t matmul_bf16_scratch(const pr_view *in, int n, const pr_view *out,
                                  const void *attrs) {
    const pr_matmul_attrs *a = attrs;
    return pr_matmul_bf16_scratch_bytes(out->shape[0], in[0].shape[a->transpose_a ? 0 : 1],
                                        out->shape[1]);
}

static int matmul_bf16(pr_bf16_isa isa, const pr_view *in, pr_view *out, const void *attrs,
                       void *ws) {
    const pr_matmul_attrs *a = attrs;
    return pr_matmul_bf16(isa, a->transpose_a, a->transpose_b, out->shape[0],
                          in[0].shape[a->transpose_a ? 0 : 1], out->shape[1], operand(&in[0]),
                          operand(&in[1]), out->data, ws);
}

static int amx_matmul(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    return matmul_bf16(PR_BF16_AMX, in, out, attrs, ws);
}

static int avx512_bf16_matmul(const pr_view *in, int n, pr_view *out, const void *attrs,
                              void *ws) {
    return matmul_bf16(PR_BF16_AVX512, in, out, attrs, ws);
}

static const pr_variant variants_matmul[] = {
    {"amx_bf16", PR_BF16_AMX_CPU, bf16_supports, matmul_bf16_scratch, amx_matmul},
    {"avx512_bf16", PR_BF16_CPU, bf16_supports, matmul_bf16_scratch, avx512_bf16_matmul},
    {"sgemm", 0, NULL, NULL, fw_matmul},
};

static PyObject *matmul(PyObject *a, PyObject *b, int ta, int tb) {
    PyObject *in[2] = {a, b};
    pr_matmul_attrs at = {ta, tb};
    return pr_call1(&pr_op_matmul, in, 2, &at);
}

/* C = op(A) op(B): dA = dC op(B)^T, dB = op(A)^T dC, written so that no
 * transpose is materialised. */
static int gr_matmul(PyObject *const *in, PyObject *const *out, const void *attrs,
                     PyObject *const *gout, const int *needs, PyObject **gin) {
    const pr_matmul_attrs *a = attrs;
    int ta = a->transpose_a, tb = a->transpose_b;
    PyObject *A = in[0], *B = in[1], *G = bf16_gradient(in, gout[0]);
    if (!G) return -1;
    int rc = -1;
    if (needs[0] && !(gin[0] = ta ? matmul(B, G, tb, 1) : matmul(G, B, 0, !tb))) goto done;
    if (needs[1] && !(gin[1] = tb ? matmul(G, A, 1, ta) : matmul(A, G, !ta, 0))) goto done;
    rc = 0;
done:
    Py_DECREF(G);
    return rc;
}

/* ---- conv2d and its backprop ops ----------------------------------------- */

/* pr_window_out_size, also for an unknown input size while tracing:
 * ceil(in / s) with padding="same", floor((in - k) / s) + 1 with "valid"
 * (the padding is found when the size is known).  PR_DIM_ERROR on failure. */
static int64_t out_size(int64_t in, int64_t k, int64_t s, int same, int64_t *pad) {
    if (!pr_dim_is_sym(in) && !pr_dim_is_sym(k)) return pr_window_out_size(in, k, s, same, pad);
    *pad = 0; /* found when the sizes are known */
    int64_t neg_k = same ? 0 : pr_dim_mul(k, -1);
    int64_t num = neg_k == PR_DIM_ERROR ? neg_k : pr_dim_add(in, same ? s - 1 : s);
    num = num == PR_DIM_ERROR ? num : pr_dim_add(num, neg_k);
    return num == PR_DIM_ERROR ? num : pr_dim_floordiv(num, s);
}

static void conv_window(const pr_conv_attrs *a, const int64_t *xs, const int64_t *ks,
                        pr_window *g) {
    g->n = xs[0], g->h = xs[1], g->w = xs[2], g->c = xs[3];
    g->kh = ks[0], g->kw = ks[1], g->o = ks[3];
    int_pair(&a->strides, 1, 1, &g->sh, &g->sw);
    g->ho = out_size(g->h, g->kh, g->sh, a->same, &g->ph);
    g->wo = out_size(g->w, g->kw, g->sw, a->same, &g->pw);
}

/* Check x (NHWC) against kernel (HWIO) and the attributes; fill g. */
static int check_conv(const pr_op *op, const pr_conv_attrs *a, const pr_view *x,
                      const pr_view *k, const char *xname, const char *kname, pr_window *g) {
    char sx[160], sk[160];
    if (check_rank4(op, xname, "NHWC", x) < 0 ||
        check_rank4(op, kname, "kernel_h, kernel_w, in_channels, out_channels", k) < 0)
        return -1;
    for (int d = 0; d < 4; d++)
        if (!pr_dim_is_sym(k->shape[d]) && k->shape[d] < 1)
            return pr_fail(op, PyExc_ValueError, "%s must have positive dimensions, got %s",
                           kname, pr_shape_str(k, sk, sizeof sk));
    if (a->groups < 1 || (!pr_dim_is_sym(k->shape[3]) && k->shape[3] % a->groups))
        return pr_fail(op, PyExc_ValueError,
                       "groups must be >= 1 and divide the output channels, got groups=%lld "
                       "for %s %s",
                       (long long)a->groups, kname, pr_shape_str(k, sk, sizeof sk));
    int64_t in_ch = pr_dim_mul(k->shape[2], a->groups);
    if (in_ch == PR_DIM_ERROR) return -1;
    if (!pr_dim_maybe_equal(x->shape[3], in_ch)) {
        char cx[64], ck[64];
        return pr_fail(op, PyExc_ValueError, "%s has %s channels but %s expects %s: %s %s, %s %s",
                       xname, pr_dim_str(pr_symtab_current(), x->shape[3], cx, sizeof cx), kname,
                       pr_dim_str(pr_symtab_current(), in_ch, ck, sizeof ck), xname,
                       pr_shape_str(x, sx, sizeof sx), kname, pr_shape_str(k, sk, sizeof sk));
    }
    if (check_pair(op, "strides", &a->strides, 1) < 0) return -1;
    conv_window(a, x->shape, k->shape, g);
    if (check_window_output(op, g, a->same, xname, x, kname, pr_shape_str(k, sk, sizeof sk)) < 0)
        return -1;
    if (pr_dims_symbolic(4, (int64_t[]){g->n, g->ho, g->wo, g->c}) ||
        pr_dims_symbolic(3, (int64_t[]){g->kh, g->kw, g->o}))
        return 0; /* checked when known */
    double col = (double)g->ho * (double)g->wo * (double)(g->kh * g->kw * g->c);
    double y = (double)g->n * (double)g->ho * (double)g->wo * (double)g->o;
    if (col > INT_MAX || y > INT_MAX)
        return pr_fail(op, PyExc_ValueError,
                       "%s %s with %s %s is too large for 32-bit BLAS indices", xname,
                       pr_shape_str(x, sx, sizeof sx), kname, pr_shape_str(k, sk, sizeof sk));
    return 0;
}

/* The kernel's scratch, or 0 while sizes are unknown (the plan asks again). */
static size_t conv_scratch(const pr_window *g, const pr_conv_attrs *a, pr_conv_pass kind) {
    if (a->groups > 1) return 0; /* the grouped kernels need none */
    if (pr_dims_symbolic(4, (int64_t[]){g->n, g->h, g->w, g->ho}) ||
        pr_dims_symbolic(3, (int64_t[]){g->wo, g->c, g->o}) ||
        pr_dims_symbolic(2, (int64_t[]){g->kh, g->kw}))
        return 0;
    return pr_conv2d_scratch_bytes(g, kind);
}

static int infer_conv2d(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    pr_window g;
    if (expect_float(op, in, 0) < 0 || expect_float(op, in, 1) < 0 ||
        check_conv(op, attrs, &in[0], &in[1], "x", "kernel", &g) < 0)
        return -1;
    int64_t shape[4] = {g.n, g.ho, g.wo, g.o};
    pr_set_out(out, activation_dtype(in), 4, shape);
    *ws = staging_bytes(out) + align64(conv_scratch(&g, attrs, PR_CONV_FORWARD)) +
          widened_bytes(in);
    return 0;
}

/* conv2d_backprop_input(dy, kernel), attrs.shape = x's shape. */
static int infer_conv2d_bpi(const pr_op *op, const pr_view *in, int n, const void *attrs,
                            pr_view *out, size_t *ws) {
    const pr_conv_attrs *a = attrs;
    pr_view x = shape_view(&a->shape);
    pr_window g;
    if (expect_float(op, in, 1) < 0 ||
        check_conv(op, a, &x, &in[1], "shape (of x)", "kernel", &g) < 0)
        return -1;
    int64_t dy[4] = {g.n, g.ho, g.wo, g.o};
    if (check_dy(op, in, 0, 4, dy) < 0) return -1;
    *out = x;
    out->dtype = activation_dtype(in);
    *ws = staging_bytes(out) + align64(conv_scratch(&g, a, PR_CONV_BACKPROP_INPUT)) +
          widened_bytes(in);
    return 0;
}

/* conv2d_backprop_filter(x, dy), attrs.shape = the kernel's shape. */
static int infer_conv2d_bpf(const pr_op *op, const pr_view *in, int n, const void *attrs,
                            pr_view *out, size_t *ws) {
    const pr_conv_attrs *a = attrs;
    pr_view k = shape_view(&a->shape);
    pr_window g;
    if (expect_float(op, in, 0) < 0 ||
        check_conv(op, a, &in[0], &k, "x", "shape (of kernel)", &g) < 0)
        return -1;
    int64_t dy[4] = {g.n, g.ho, g.wo, g.o};
    if (check_dy(op, in, 1, 4, dy) < 0) return -1;
    *out = k;
    *ws = conv_scratch(&g, a, PR_CONV_BACKPROP_FILTER);
    *ws = align64(*ws) + widened_bytes(in);
    return 0;
}

/* The reference kernels: im2col + OpenBLAS, or direct loops for groups > 1.
 * A bfloat16 call runs them on the rounded operands, kept after the
 * kernel's own scratch. */
static int fw_conv2d(const pr_view *in_given, int n, pr_view *out, const void *attrs,
                     void *ws0) {
    pr_window g;
    pr_view in[2];
    int64_t groups = ((const pr_conv_attrs *)attrs)->groups;
    float *y = staged(out, ws0);
    void *ws = after_staging(out, ws0);
    conv_window(attrs, in_given[0].shape, in_given[1].shape, &g);
    widen_operands(in_given, ws, align64(conv_scratch(&g, attrs, PR_CONV_FORWARD)), in);
    int rc = groups > 1 ? pr_conv2d_grouped_forward(&g, groups, in[0].data, in[1].data, y)
                        : pr_conv2d_forward(&g, in[0].data, in[1].data, y, ws);
    return unstage(rc, out, ws0);
}

static int fw_conv2d_bpi(const pr_view *in_given, int n, pr_view *out, const void *attrs,
                         void *ws0) {
    pr_window g;
    pr_view in[2];
    int64_t groups = ((const pr_conv_attrs *)attrs)->groups;
    float *dx = staged(out, ws0);
    void *ws = after_staging(out, ws0);
    conv_window(attrs, out->shape, in_given[1].shape, &g);
    widen_operands(in_given, ws, align64(conv_scratch(&g, attrs, PR_CONV_BACKPROP_INPUT)), in);
    int rc = groups > 1
                 ? pr_conv2d_grouped_backprop_input(&g, groups, in[0].data, in[1].data, dx)
                 : pr_conv2d_backprop_input(&g, in[0].data, in[1].data, dx, ws);
    return unstage(rc, out, ws0);
}

static int fw_conv2d_bpf(const pr_view *in_given, int n, pr_view *out, const void *attrs,
                         void *ws) {
    pr_window g;
    pr_view in[2];
    int64_t groups = ((const pr_conv_attrs *)attrs)->groups;
    conv_window(attrs, in_given[0].shape, out->shape, &g);
    widen_operands(in_given, ws, align64(conv_scratch(&g, attrs, PR_CONV_BACKPROP_FILTER)), in);
    if (groups > 1)
        return pr_conv2d_grouped_backprop_filter(&g, groups, in[0].data, in[1].data, out->data);
    return pr_conv2d_backprop_filter(&g, in[0].data, in[1].data, out->data, ws);
}

/* ---- kernel variants: direct AVX-512 and AVX2 first, im2col + OpenBLAS last ----
 * Each pass's window comes from the same shapes its reference kernel uses. */

static void window_fw(const pr_view *in, const pr_view *out, const void *a, pr_window *g) {
    conv_window(a, in[0].shape, in[1].shape, g);
}
static void window_bpi(const pr_view *in, const pr_view *out, const void *a, pr_window *g) {
    conv_window(a, out->shape, in[1].shape, g);
}
static void window_bpf(const pr_view *in, const pr_view *out, const void *a, pr_window *g) {
    conv_window(a, in[0].shape, out->shape, g);
}

/* A variant whose supports, scratch and run functions read the pass's
 * window g: `name`_supports_`pass` etc., from the three expressions. */
#define WINDOW_VARIANT(name, pass, SUPPORTS, SCRATCH, RUN)                                      \
    static int name##_supports_##pass(const pr_view *in, int n, const pr_view *out,             \
                                      const void *a) {                                          \
        pr_window g;                                                                            \
        window_##pass(in, out, a, &g);                                                          \
        return SUPPORTS;                                                                        \
    }                                                                                           \
    static size_t name##_scratch_##pass(const pr_view *in, int n, const pr_view *out,           \
                                        const void *a) {                                        \
        pr_window g;                                                                            \
        window_##pass(in, out, a, &g);                                                          \
        return SCRATCH;                                                                         \
    }                                                                                           \
    static int name##_run_##pass(const pr_view *in, int n, pr_view *out, const void *a,         \
                                 void *ws) {                                                    \
        pr_window g;                                                                            \
        window_##pass(in, out, a, &g);                                                          \
        return RUN;                                                                             \
    }

/* Direct AVX-512 and AVX2 (kernels/conv_direct.c, conv_direct_avx2.c):
 * float32 calls of one group. */
#define DIRECT_VARIANT(name, pass, PASS, kernel, scratch)                                       \
    WINDOW_VARIANT(name, pass,                                                                  \
                   ((const pr_conv_attrs *)a)->groups == 1 && all_f32(in) &&                    \
                       pr_conv_direct_supports(&g, PASS),                                       \
                   scratch(&g, PASS),                                                           \
                   kernel(&g, in[0].data, in[1].data, out->data, ws))

DIRECT_VARIANT(direct, fw, PR_CONV_FORWARD, pr_conv_direct_forward,
               pr_conv_direct_scratch_bytes)
DIRECT_VARIANT(direct, bpi, PR_CONV_BACKPROP_INPUT, pr_conv_direct_backprop_input,
               pr_conv_direct_scratch_bytes)
DIRECT_VARIANT(direct, bpf, PR_CONV_BACKPROP_FILTER, pr_conv_direct_backprop_filter,
               pr_conv_direct_scratch_bytes)
DIRECT_VARIANT(avx2_direct, fw, PR_CONV_FORWARD, pr_conv_direct_avx2_forward,
               pr_conv_direct_avx2_scratch_bytes)
DIRECT_VARIANT(avx2_direct, bpi, PR_CONV_BACKPROP_INPUT, pr_conv_direct_avx2_backprop_input,
               pr_conv_direct_avx2_scratch_bytes)
DIRECT_VARIANT(avx2_direct, bpf, PR_CONV_BACKPROP_FILTER, pr_conv_direct_avx2_backprop_filter,
               pr_conv_direct_avx2_scratch_bytes)

/* 1x1 convolutions at stride 1 as AVX2 GEMMs (kernels/conv_pointwise_avx2.c):
 * float32 calls of one group, on CPUs without AVX-512, whose OpenBLAS sgemm
 * (im2col_blas) has twice the vector width and was not measured against
 * them. */
#define POINTWISE_VARIANT(pass, PASS, kernel)                                                   \
    WINDOW_VARIANT(avx2_pointwise, pass,                                                        \
                   ((const pr_conv_attrs *)a)->groups == 1 && all_f32(in) &&                    \
                       !pr_cpu_fast(PR_CPU_AVX512F) &&                                          \
                       pr_conv_pointwise_avx2_supports(&g, PASS),                               \
                   pr_conv_pointwise_avx2_scratch_bytes(&g, PASS),                              \
                   kernel(&g, in[0].data, in[1].data, out->data, ws))

POINTWISE_VARIANT(fw, PR_CONV_FORWARD, pr_conv_pointwise_avx2_forward)
POINTWISE_VARIANT(bpi, PR_CONV_BACKPROP_INPUT, pr_conv_pointwise_avx2_backprop_input)
POINTWISE_VARIANT(bpf, PR_CONV_BACKPROP_FILTER, pr_conv_pointwise_avx2_backprop_filter)

/* Grouped convolutions in vector registers (kernels/conv_grouped_simd.c):
 * calls of more than one group that the instruction set's kernels take
 * (pr_conv_grouped_simd_supports: AVX-512 even group widths, AVX2 any,
 * depthwise too).  avx512_grouped / avx2_grouped take the float32 calls;
 * the _bf16 variants the bfloat16 ones (no bfloat16 kernel takes groups),
 * on their operands rounded and widened to float32 after the kernel's
 * scratch, a bfloat16 output staged in float32 and rounded once: the
 * reference's arithmetic at the vector kernels' speed. */
typedef int grouped_kernel(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                           const void *a, const void *b, void *out, pr_dtype out_dtype,
                           void *scratch);

/* The filter gradient as a grouped_kernel (its output is float32). */
static int grouped_filter(pr_grouped_isa isa, const pr_window *g, int64_t groups, const void *a,
                          const void *b, void *out, pr_dtype out_dtype, void *scratch) {
    return pr_conv_grouped_simd_backprop_filter(isa, g, groups, a, b, out, scratch);
}

static int grouped_fits(pr_grouped_isa isa, const pr_window *g, const void *a) {
    return pr_conv_grouped_simd_supports(isa, g, ((const pr_conv_attrs *)a)->groups);
}
static size_t grouped_kernel_bytes(const pr_window *g, const void *a, pr_conv_pass pass) {
    return align64(pr_conv_grouped_simd_scratch_bytes(g, ((const pr_conv_attrs *)a)->groups, pass));
}
static int grouped_run(pr_grouped_isa isa, grouped_kernel *kernel, pr_conv_pass pass,
                       const pr_window *g, const pr_view *in_given, pr_view *out, const void *a,
                       void *ws0) {
    pr_view in[2];
    float *y = staged(out, ws0);
    void *ws = after_staging(out, ws0);
    widen_operands(in_given, ws, grouped_kernel_bytes(g, a, pass), in);
    int64_t groups = ((const pr_conv_attrs *)a)->groups;
    return unstage(kernel(isa, g, groups, in[0].data, in[1].data, y, PR_F32, ws), out, ws0);
}
#define GROUPED_VARIANT(name, isa, pass, PASS, kernel)                                          \
    WINDOW_VARIANT(name, pass, grouped_fits(isa, &g, a) && all_f32(in),                         \
                   grouped_kernel_bytes(&g, a, PASS),                                           \
                   grouped_run(isa, kernel, PASS, &g, in, out, a, ws))                          \
    WINDOW_VARIANT(name##_bf16, pass, grouped_fits(isa, &g, a) && bf16_call(in),                \
                   staging_bytes(out) + grouped_kernel_bytes(&g, a, PASS) + widened_bytes(in),  \
                   grouped_run(isa, kernel, PASS, &g, in, out, a, ws))
#define GROUPED_VARIANTS(name, isa)                                                             \
    GROUPED_VARIANT(name, isa, fw, PR_CONV_FORWARD, pr_conv_grouped_simd_forward)               \
    GROUPED_VARIANT(name, isa, bpi, PR_CONV_BACKPROP_INPUT, pr_conv_grouped_simd_backprop_input) \
    GROUPED_VARIANT(name, isa, bpf, PR_CONV_BACKPROP_FILTER, grouped_filter)

GROUPED_VARIANTS(avx512_grouped, PR_GROUPED_AVX512)
GROUPED_VARIANTS(avx2_grouped, PR_GROUPED_AVX2)

/* Grouped convolutions in bfloat16 arithmetic (AVX512_BF16, VDPBF16PS):
 * the bfloat16 calls of group widths of a multiple of 4 channels, forward
 * and input gradient (the filter gradient stays on avx512_grouped_bf16's
 * widened kernels).  The operands are read as bfloat16 in place; a float32
 * operand is rounded once into scratch after the kernel's; the sums are
 * float32 and a bfloat16 output is rounded once as the tiles store it
 * (the rounding of pr_f32_to_bf16, so no staging). */
static size_t narrowed_bytes(const pr_view *in) {
    size_t b = 0;
    for (int i = 0; i < 2; i++)
        if (in[i].dtype == PR_F32 && !pr_dim_is_sym(in[i].size))
            b += align64(sizeof(uint16_t) * (size_t)in[i].size);
    return b;
}
static int grouped_dp_run(grouped_kernel *kernel, pr_conv_pass pass, const pr_window *g,
                          const pr_view *in, pr_view *out, const void *a, void *ws) {
    char *p = (char *)ws + grouped_kernel_bytes(g, a, pass);
    const void *op[2];
    for (int i = 0; i < 2; i++) {
        op[i] = in[i].data;
        if (in[i].dtype != PR_F32) continue;
        pr_f32_to_bf16(in[i].data, (uint16_t *)p, in[i].size);
        op[i] = p;
        p += align64(sizeof(uint16_t) * (size_t)in[i].size);
    }
    int64_t groups = ((const pr_conv_attrs *)a)->groups;
    return kernel(PR_GROUPED_AVX512_BF16, g, groups, op[0], op[1], out->data, out->dtype, ws);
}
#define GROUPED_DP_VARIANT(pass, PASS, kernel)                                                  \
    WINDOW_VARIANT(avx512_grouped_dp_bf16, pass,                                                 \
                   bf16_call(in) && grouped_fits(PR_GROUPED_AVX512_BF16, &g, a),                \
                   grouped_kernel_bytes(&g, a, PASS) + narrowed_bytes(in),                      \
                   grouped_dp_run(kernel, PASS, &g, in, out, a, ws))
GROUPED_DP_VARIANT(fw, PR_CONV_FORWARD, pr_conv_grouped_simd_forward)
GROUPED_DP_VARIANT(bpi, PR_CONV_BACKPROP_INPUT, pr_conv_grouped_simd_backprop_input)

/* The bfloat16 variants (AMX, AVX512_BF16) take the calls with a bfloat16
 * operand, any window and stride (kernels/conv_bf16.c). */

/* The bfloat16 convolutions take one group. */
static int bf16_conv_supports(const pr_view *in, int n, const pr_view *out, const void *a) {
    return bf16_call(in) && ((const pr_conv_attrs *)a)->groups == 1;
}

#define BF16_VARIANT(pass, PASS)                                                                \
    static size_t bf16_scratch_##pass(const pr_view *in, int n, const pr_view *out,             \
                                      const void *a) {                                          \
        pr_window g;                                                                            \
        window_##pass(in, out, a, &g);                                                          \
        return staging_bytes(out) + pr_conv_bf16_scratch_bytes(&g, PASS);                       \
    }                                                                                           \
    static int amx_run_##pass(const pr_view *in, int n, pr_view *out, const void *a,            \
                              void *ws) {                                                       \
        pr_window g;                                                                            \
        window_##pass(in, out, a, &g);                                                          \
        return unstage(pr_conv_bf16(PR_BF16_AMX, PASS, &g, operand(&in[0]), operand(&in[1]),   \
                                    staged(out, ws), after_staging(out, ws)),                   \
                       out, ws);                                                                \
    }                                                                                           \
    static int avx512_bf16_run_##pass(const pr_view *in, int n, pr_view *out, const void *a,    \
                                      void *ws) {                                               \
        pr_window g;                                                                            \
        window_##pass(in, out, a, &g);                                                          \
        return unstage(pr_conv_bf16(PR_BF16_AVX512, PASS, &g, operand(&in[0]),                  \
                                    operand(&in[1]), staged(out, ws), after_staging(out, ws)),  \
                       out, ws);                                                                \
    }

BF16_VARIANT(fw, PR_CONV_FORWARD)
BF16_VARIANT(bpi, PR_CONV_BACKPROP_INPUT)
BF16_VARIANT(bpf, PR_CONV_BACKPROP_FILTER)

/* Direct AMX convolutions (kernels/conv_amx.c): bfloat16 calls whose
 * geometry they take (pr_conv_amx_supports). */
#define AMX_DIRECT_VARIANT(pass, PASS)                                                          \
    WINDOW_VARIANT(amx_direct, pass,                                                            \
                   bf16_conv_supports(in, n, out, a) && pr_conv_amx_supports(&g, PASS),         \
                   pr_conv_amx_scratch_bytes(&g, PASS),                                         \
                   pr_conv_amx(PASS, &g, operand(&in[0]), operand(&in[1]), operand(out), ws))

AMX_DIRECT_VARIANT(fw, PR_CONV_FORWARD)
AMX_DIRECT_VARIANT(bpi, PR_CONV_BACKPROP_INPUT)
AMX_DIRECT_VARIANT(bpf, PR_CONV_BACKPROP_FILTER)

/* Direct AVX512_BF16 convolutions (kernels/conv_direct_bf16.c): bfloat16
 * calls whose geometry they take; bfloat16 results rounded as they are
 * stored, row by row. */
#define DIRECT_BF16_VARIANT(pass, PASS)                                                         \
    WINDOW_VARIANT(avx512_direct_bf16, pass,                                                    \
                   bf16_conv_supports(in, n, out, a) && pr_conv_direct_bf16_supports(&g, PASS), \
                   pr_conv_direct_bf16_scratch_bytes(&g, PASS),                                 \
                   pr_conv_direct_bf16(PASS, &g, operand(&in[0]), operand(&in[1]), out->data,   \
                                       out->dtype, ws))

DIRECT_BF16_VARIANT(fw, PR_CONV_FORWARD)
DIRECT_BF16_VARIANT(bpi, PR_CONV_BACKPROP_INPUT)
DIRECT_BF16_VARIANT(bpf, PR_CONV_BACKPROP_FILTER)

/* The row of avx512_grouped_dp_bf16 (forward and input gradient only). */
#define DP_BF16_ROW(pass)                                                                       \
    {"avx512_grouped_dp_bf16", PR_BF16_CPU | PR_CPU_FMA, avx512_grouped_dp_bf16_supports_##pass, \
     avx512_grouped_dp_bf16_scratch_##pass, avx512_grouped_dp_bf16_run_##pass},

#define CONV_VARIANTS(pass, reference, dp_bf16_row)                                             \
    static const pr_variant variants_##pass[] = {                                               \
        {"avx512_direct", PR_CPU_AVX512F | PR_CPU_FMA, direct_supports_##pass,                  \
         direct_scratch_##pass, direct_run_##pass},                                             \
        {"avx2_direct", PR_CPU_AVX2 | PR_CPU_FMA, avx2_direct_supports_##pass,                  \
         avx2_direct_scratch_##pass, avx2_direct_run_##pass},                                   \
        {"avx2_pointwise", PR_CPU_AVX2 | PR_CPU_FMA, avx2_pointwise_supports_##pass,            \
         avx2_pointwise_scratch_##pass, avx2_pointwise_run_##pass},                             \
        {"avx512_grouped", PR_CPU_AVX512F | PR_CPU_FMA, avx512_grouped_supports_##pass,         \
         avx512_grouped_scratch_##pass, avx512_grouped_run_##pass},                             \
        dp_bf16_row                                                                             \
        {"avx512_grouped_bf16", PR_CPU_AVX512F | PR_CPU_FMA,                                    \
         avx512_grouped_bf16_supports_##pass, avx512_grouped_bf16_scratch_##pass,              \
         avx512_grouped_bf16_run_##pass},                                                       \
        {"avx2_grouped", PR_CPU_AVX2 | PR_CPU_FMA, avx2_grouped_supports_##pass,                \
         avx2_grouped_scratch_##pass, avx2_grouped_run_##pass},                                 \
        {"avx2_grouped_bf16", PR_CPU_AVX2 | PR_CPU_FMA, avx2_grouped_bf16_supports_##pass,      \
         avx2_grouped_bf16_scratch_##pass, avx2_grouped_bf16_run_##pass},                       \
        {"amx_direct_bf16", PR_BF16_AMX_CPU, amx_direct_supports_##pass,                        \
         amx_direct_scratch_##pass, amx_direct_run_##pass},                                     \
        {"amx_bf16", PR_BF16_AMX_CPU, bf16_conv_supports, bf16_scratch_##pass, amx_run_##pass}, \
        {"avx512_direct_bf16", PR_BF16_CPU, avx512_direct_bf16_supports_##pass,                 \
         avx512_direct_bf16_scratch_##pass, avx512_direct_bf16_run_##pass},                     \
        {"avx512_bf16", PR_BF16_CPU, bf16_conv_supports, bf16_scratch_##pass,                   \
         avx512_bf16_run_##pass},                                                               \
        {"im2col_blas", 0, NULL, NULL, reference},                                              \
    }

CONV_VARIANTS(fw, fw_conv2d, DP_BF16_ROW(fw));
CONV_VARIANTS(bpi, fw_conv2d_bpi, DP_BF16_ROW(bpi));
CONV_VARIANTS(bpf, fw_conv2d_bpf, ); /* no bfloat16 filter-gradient tiles */
#define N_VARIANTS(pass) (int)(sizeof variants_##pass / sizeof variants_##pass[0])

/* The three ops are bilinear and adjoint to each other:
 * <dy, conv2d(x, w)> = <bpi(dy, w), x> = <bpf(x, dy), w>. */
static PyObject *conv_call(const pr_op *op, PyObject *a, PyObject *b, const void *attrs,
                           PyObject *shape_of) {
    pr_conv_attrs at = *(const pr_conv_attrs *)attrs;
    if (shape_of) set_ints(&at.shape, T(shape_of));
    PyObject *in[2] = {a, b};
    return pr_call1(op, in, 2, &at);
}

/* A gradient for x of x's float dtype: the input gradient of a bfloat16
 * call is bfloat16 only when x is (a float32 x beside a bfloat16 kernel, a
 * Variable say, gets float32, as its optimizer takes).  Steals g. */
static PyObject *like_input(PyObject *g, PyObject *x) {
    if (!g || T(g)->dtype != PR_BF16 || T(x)->dtype != PR_F32) return g;
    pr_cast_attrs a = {PR_F32};
    PyObject *wide = pr_call1(&pr_op_cast, &g, 1, &a);
    Py_DECREF(g);
    return wide;
}

static int gr_conv2d(PyObject *const *in, PyObject *const *out, const void *attrs,
                     PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *x = in[0], *w = in[1], *dy = bf16_gradient(in, gout[0]);
    if (!dy) return -1;
    int rc = -1;
    /* a float32 x takes the float32 sums of the product with the rounded
     * output gradient (conv2d_backprop_input rounds a float32 operand
     * beside a bfloat16 one itself), not their bfloat16 rounding */
    PyObject *dyx = T(x)->dtype == PR_F32 ? gout[0] : dy;
    if (needs[0] &&
        !(gin[0] = like_input(conv_call(&pr_op_conv2d_backprop_input, dyx, w, attrs, x), x)))
        goto done;
    if (needs[1] && !(gin[1] = conv_call(&pr_op_conv2d_backprop_filter, x, dy, attrs, w))) goto done;
    rc = 0;
done:
    Py_DECREF(dy);
    return rc;
}

static int gr_conv2d_bpi(PyObject *const *in, PyObject *const *out, const void *attrs,
                         PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *dy = in[0], *w = in[1], *g = gout[0];
    if (needs[0] && !(gin[0] = like_input(conv_call(&pr_op_conv2d, g, w, attrs, NULL), dy))) return -1;
    if (needs[1] && !(gin[1] = conv_call(&pr_op_conv2d_backprop_filter, g, dy, attrs, w))) return -1;
    return 0;
}

static int gr_conv2d_bpf(PyObject *const *in, PyObject *const *out, const void *attrs,
                         PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *x = in[0], *dy = in[1], *g = gout[0];
    if (needs[0] && !(gin[0] = like_input(conv_call(&pr_op_conv2d_backprop_input, dy, g, attrs, x), x)))
        return -1;
    if (needs[1] && !(gin[1] = conv_call(&pr_op_conv2d, x, g, attrs, NULL))) return -1;
    return 0;
}

/* ---- pooling -------------------------------------------------------------- */

static void pool_window(const pr_pool_attrs *a, const int64_t *xs, pr_window *g) {
    g->n = xs[0], g->h = xs[1], g->w = xs[2], g->c = g->o = xs[3];
    int_pair(&a->pool_size, 1, 1, &g->kh, &g->kw);
    int_pair(&a->strides, g->kh, g->kw, &g->sh, &g->sw);
    g->ho = out_size(g->h, g->kh, g->sh, a->same, &g->ph);
    g->wo = out_size(g->w, g->kw, g->sw, a->same, &g->pw);
}

static int check_pool(const pr_op *op, const pr_pool_attrs *a, const pr_view *x,
                      const char *xname, pr_window *g) {
    char desc[64];
    if (check_rank4(op, xname, "NHWC", x) < 0 ||
        check_pair(op, "pool_size", &a->pool_size, 0) < 0 ||
        check_pair(op, "strides", &a->strides, 1) < 0)
        return -1;
    pool_window(a, x->shape, g);
    snprintf(desc, sizeof desc, "(%lld, %lld)", (long long)g->kh, (long long)g->kw);
    return check_window_output(op, g, a->same, xname, x, "pool_size", desc);
}

/* Pooling's input dtype: float32, or bfloat16 for the ops that take it (max
 * pooling's bf16_inputs mask). */
static int pool_dtype(const pr_op *op, const pr_view *in, pr_dtype *dt) {
    *dt = PR_F32;
    return op->bf16_inputs ? pr_activation_dtype(op, in, dt) : pr_expect_dtype(op, in, 0, PR_F32);
}

static int infer_pool(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                      size_t *ws) {
    pr_window g;
    pr_dtype dt;
    if (pool_dtype(op, in, &dt) < 0 || check_pool(op, attrs, &in[0], "x", &g) < 0) return -1;
    int64_t shape[4] = {g.n, g.ho, g.wo, g.c};
    pr_set_out(out, dt, 4, shape);
    return 0;
}

/* max_pool2d_backward(x, dy) -> dx. */
static int infer_max_pool_bw(const pr_op *op, const pr_view *in, int n, const void *attrs,
                             pr_view *out, size_t *ws) {
    pr_window g;
    pr_dtype dt;
    if (pool_dtype(op, in, &dt) < 0 || check_pool(op, attrs, &in[0], "x", &g) < 0) return -1;
    int64_t dy[4] = {g.n, g.ho, g.wo, g.c};
    if (check_dy(op, in, 1, 4, dy) < 0) return -1;
    pr_set_out(out, dt, 4, in[0].shape);
    return 0;
}

/* avg_pool2d_backward(dy) -> dx of attrs.shape. */
static int infer_avg_pool_bw(const pr_op *op, const pr_view *in, int n, const void *attrs,
                             pr_view *out, size_t *ws) {
    const pr_pool_attrs *a = attrs;
    pr_view x = shape_view(&a->shape);
    pr_window g;
    if (check_pool(op, a, &x, "shape (of x)", &g) < 0) return -1;
    int64_t dy[4] = {g.n, g.ho, g.wo, g.c};
    if (check_dy(op, in, 0, 4, dy) < 0) return -1;
    *out = x;
    return 0;
}

static int fw_max_pool(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    pr_window g;
    pool_window(attrs, in[0].shape, &g);
    return pr_max_pool2d_forward(&g, in[0].dtype, in[0].data, out->data);
}

static int fw_max_pool_bw(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    pr_window g;
    pool_window(attrs, in[0].shape, &g);
    return pr_max_pool2d_backward(&g, in[0].dtype, in[0].data, in[1].data, out->data);
}

static int fw_avg_pool(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    pr_window g;
    pool_window(attrs, in[0].shape, &g);
    return pr_avg_pool2d_forward(&g, in[0].data, out->data);
}

static int fw_avg_pool_bw(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    pr_window g;
    pool_window(attrs, out->shape, &g);
    return pr_avg_pool2d_backward(&g, in[0].data, out->data);
}

static int gr_max_pool(PyObject *const *in, PyObject *const *out, const void *attrs,
                       PyObject *const *gout, const int *needs, PyObject **gin) {
    PyObject *args[2] = {in[0], gout[0]};
    return (gin[0] = pr_call1(&pr_op_max_pool2d_backward, args, 2, attrs)) ? 0 : -1;
}

static int gr_avg_pool(PyObject *const *in, PyObject *const *out, const void *attrs,
                       PyObject *const *gout, const int *needs, PyObject **gin) {
    pr_pool_attrs a = *(const pr_pool_attrs *)attrs;
    set_ints(&a.shape, T(in[0]));
    return (gin[0] = pr_call1(&pr_op_avg_pool2d_backward, &gout[0], 1, &a)) ? 0 : -1;
}

/* avg_pool2d_backward is linear in dy; its adjoint is avg_pool2d. */
static int gr_avg_pool_bw(PyObject *const *in, PyObject *const *out, const void *attrs,
                          PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = pr_call1(&pr_op_avg_pool2d, &gout[0], 1, attrs)) ? 0 : -1;
}

/* ---- global average pooling ---------------------------------------------- */

static int check_gap_input(const pr_op *op, const char *name, const pr_view *x) {
    char s[160];
    if (check_rank4(op, name, "NHWC", x) < 0) return -1;
    if ((!pr_dim_is_sym(x->shape[1]) && x->shape[1] < 1) ||
        (!pr_dim_is_sym(x->shape[2]) && x->shape[2] < 1))
        return pr_fail(op, PyExc_ValueError, "%s has no pixels to average: shape %s", name,
                       pr_shape_str(x, s, sizeof s));
    return 0;
}

static int infer_gap(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                     size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || check_gap_input(op, "x", &in[0]) < 0) return -1;
    int64_t shape[2] = {in[0].shape[0], in[0].shape[3]};
    pr_set_out(out, PR_F32, 2, shape);
    return 0;
}

/* global_average_pool_backward(dy (N, C)) -> dx of attrs.shape (N, H, W, C). */
static int infer_gap_bw(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    pr_view x = shape_view(&((const pr_shape_attrs *)attrs)->shape);
    if (check_gap_input(op, "shape (of x)", &x) < 0) return -1;
    int64_t dy[2] = {x.shape[0], x.shape[3]};
    if (check_dy(op, in, 0, 2, dy) < 0) return -1;
    *out = x;
    return 0;
}

static int fw_gap(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const int64_t *s = in[0].shape;
    return pr_global_avg_pool_forward(in[0].data, s[0], s[1] * s[2], s[3], out->data);
}

static int fw_gap_bw(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const int64_t *s = out->shape;
    return pr_global_avg_pool_backward(in[0].data, s[0], s[1] * s[2], s[3], out->data);
}

static int gr_gap(PyObject *const *in, PyObject *const *out, const void *attrs,
                  PyObject *const *gout, const int *needs, PyObject **gin) {
    pr_shape_attrs a;
    set_ints(&a.shape, T(in[0]));
    return (gin[0] = pr_call1(&pr_op_global_average_pool_backward, &gout[0], 1, &a)) ? 0 : -1;
}

static int gr_gap_bw(PyObject *const *in, PyObject *const *out, const void *attrs,
                     PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = pr_call1(&pr_op_global_average_pool, &gout[0], 1, NULL)) ? 0 : -1;
}

/* ---- registry ------------------------------------------------------------- */

static const pr_attr_spec matmul_attrs[] = {
    {"transpose_a", PR_ATTR_BOOL, offsetof(pr_matmul_attrs, transpose_a), 0, 0},
    {"transpose_b", PR_ATTR_BOOL, offsetof(pr_matmul_attrs, transpose_b), 0, 0},
    {NULL}};

#define CONV_ATTRS                                                      \
    {"strides", PR_ATTR_INTS, offsetof(pr_conv_attrs, strides), 0, 0}, \
    {"same", PR_ATTR_BOOL, offsetof(pr_conv_attrs, same), 0, 0}, \
    {"groups", PR_ATTR_INT, offsetof(pr_conv_attrs, groups), 0, 1}
static const pr_attr_spec conv_attrs[] = {CONV_ATTRS, {NULL}};
static const pr_attr_spec conv_bp_attrs[] = {
    CONV_ATTRS, {"shape", PR_ATTR_INTS, offsetof(pr_conv_attrs, shape), 1, 0}, {NULL}};

#define POOL_ATTRS                                                           \
    {"pool_size", PR_ATTR_INTS, offsetof(pr_pool_attrs, pool_size), 1, 0}, \
    {"strides", PR_ATTR_INTS, offsetof(pr_pool_attrs, strides), 0, 0},     \
    {"same", PR_ATTR_BOOL, offsetof(pr_pool_attrs, same), 0, 0}
static const pr_attr_spec pool_attrs[] = {POOL_ATTRS, {NULL}};
static const pr_attr_spec pool_bp_attrs[] = {
    POOL_ATTRS, {"shape", PR_ATTR_INTS, offsetof(pr_pool_attrs, shape), 1, 0}, {NULL}};

static const pr_attr_spec shape_attrs[] = {
    {"shape", PR_ATTR_INTS, offsetof(pr_shape_attrs, shape), 1, 0}, {NULL}};

/* ---- FLOP counts (a multiply-add counts 2), for compiled-graph reports ---- */

static double flops_matmul(const pr_view *in, int n, const pr_view *out, const void *attrs) {
    const pr_matmul_attrs *a = attrs;
    return 2.0 * (double)out->size * (double)in[0].shape[a->transpose_a ? 0 : 1];
}
/* conv2d(x, w) -> y: every y element meets KH*KW*C filter taps. */
static double flops_conv(const pr_view *in, int n, const pr_view *out, const void *attrs) {
    return 2.0 * (double)out->size * (double)(in[1].shape[0] * in[1].shape[1] * in[1].shape[2]);
}
/* conv2d_backprop_input(dy, w): every dy element meets KH*KW*C taps. */
static double flops_conv_bpi(const pr_view *in, int n, const pr_view *out, const void *attrs) {
    return 2.0 * (double)in[0].size * (double)(in[1].shape[0] * in[1].shape[1] * in[1].shape[2]);
}
/* conv2d_backprop_filter(x, dy) -> (KH, KW, C, O). */
static double flops_conv_bpf(const pr_view *in, int n, const pr_view *out, const void *attrs) {
    return 2.0 * (double)in[1].size * (double)(out->shape[0] * out->shape[1] * out->shape[2]);
}

const pr_op pr_op_matmul = {
    .name = "matmul", .n_in = 2, .n_out = 1, .flags = PR_OP_BF16, .attrs = matmul_attrs,
    .attr_size = sizeof(pr_matmul_attrs), .infer = infer_matmul, .forward = fw_matmul,
    .gradient = gr_matmul, .flops = flops_matmul, .variants = variants_matmul, .n_variants = 3,
    .doc = "matmul(a (M, K), b (K, N)) -> (M, N) float32 with OpenBLAS sgemm; transpose_a / "
           "transpose_b take a as (K, M) / b as (N, K).  float32 or bfloat16 operands: with a "
           "bfloat16 one, both are rounded to bfloat16 and products summed in float32."};

const pr_op pr_op_conv2d = {
    .name = "conv2d", .n_in = 2, .n_out = 1, .flags = PR_OP_BF16, .attrs = conv_attrs,
    .attr_size = sizeof(pr_conv_attrs), .infer = infer_conv2d, .forward = fw_conv2d,
    .gradient = gr_conv2d, .flops = flops_conv, .variants = variants_fw,
    .n_variants = N_VARIANTS(fw),
    .doc = "conv2d(x (N, H, W, C), kernel (KH, KW, C, O)) -> (N, HO, WO, O); strides: 1 or 2 "
           "ints; same: TensorFlow 'same' padding, else 'valid'.  Direct AVX-512 kernel where the "
           "CPU has it, else im2col + sgemm.  float32 or bfloat16 operands: with a bfloat16 one, "
           "both are rounded to bfloat16 and products summed in float32 (output float32)."};

const pr_op pr_op_conv2d_backprop_input = {
    .name = "conv2d_backprop_input", .n_in = 2, .n_out = 1, .flags = PR_OP_BF16,
    .attrs = conv_bp_attrs,
    .attr_size = sizeof(pr_conv_attrs), .infer = infer_conv2d_bpi, .forward = fw_conv2d_bpi,
    .gradient = gr_conv2d_bpi, .flops = flops_conv_bpi, .variants = variants_bpi,
    .n_variants = N_VARIANTS(bpi),
    .doc = "conv2d_backprop_input(dy, kernel; strides, same, shape=x's shape) -> dx, the "
           "gradient of conv2d wrt x."};

const pr_op pr_op_conv2d_backprop_filter = {
    .name = "conv2d_backprop_filter", .n_in = 2, .n_out = 1, .flags = PR_OP_BF16,
    .attrs = conv_bp_attrs,
    .attr_size = sizeof(pr_conv_attrs), .infer = infer_conv2d_bpf, .forward = fw_conv2d_bpf,
    .gradient = gr_conv2d_bpf, .flops = flops_conv_bpf, .variants = variants_bpf,
    .n_variants = N_VARIANTS(bpf),
    .doc = "conv2d_backprop_filter(x, dy; strides, same, shape=kernel's shape) -> dkernel, "
           "the gradient of conv2d wrt the kernel."};

const pr_op pr_op_max_pool2d = {
    .name = "max_pool2d", .n_in = 1, .n_out = 1, .attrs = pool_attrs,
    .attr_size = sizeof(pr_pool_attrs), .infer = infer_pool, .forward = fw_max_pool,
    .gradient = gr_max_pool, .bf16_inputs = 1,
    .doc = "max_pool2d(x NHWC; pool_size, strides (default pool_size), same) -> y NHWC; "
           "padding never wins (float32 or bfloat16)."};

const pr_op pr_op_max_pool2d_backward = {
    .name = "max_pool2d_backward", .n_in = 2, .n_out = 1, .flags = PR_OP_NO_GRADIENT_RULE,
    .attrs = pool_attrs,
    .attr_size = sizeof(pr_pool_attrs), .infer = infer_max_pool_bw, .forward = fw_max_pool_bw,
    .bf16_inputs = 3,
    .doc = "max_pool2d_backward(x, dy) -> dx: dy routed to the first NaN of each window, else "
           "to its first maximum (float32 or bfloat16; overlapping windows add in float32)."};

const pr_op pr_op_avg_pool2d = {
    .name = "avg_pool2d", .n_in = 1, .n_out = 1, .attrs = pool_attrs,
    .attr_size = sizeof(pr_pool_attrs), .infer = infer_pool, .forward = fw_avg_pool,
    .gradient = gr_avg_pool,
    .doc = "avg_pool2d(x NHWC; pool_size, strides (default pool_size), same) -> y NHWC; "
           "averages over the non-padded taps only (TensorFlow/Keras)."};

const pr_op pr_op_avg_pool2d_backward = {
    .name = "avg_pool2d_backward", .n_in = 1, .n_out = 1, .attrs = pool_bp_attrs,
    .attr_size = sizeof(pr_pool_attrs), .infer = infer_avg_pool_bw, .forward = fw_avg_pool_bw,
    .gradient = gr_avg_pool_bw,
    .doc = "avg_pool2d_backward(dy; pool_size, strides, same, shape=x's shape) -> dx."};

const pr_op pr_op_global_average_pool = {
    .name = "global_average_pool", .n_in = 1, .n_out = 1, .infer = infer_gap,
    .forward = fw_gap, .gradient = gr_gap,
    .doc = "global_average_pool(x (N, H, W, C)) -> (N, C), the mean over H and W."};

const pr_op pr_op_global_average_pool_backward = {
    .name = "global_average_pool_backward", .n_in = 1, .n_out = 1, .attrs = shape_attrs,
    .attr_size = sizeof(pr_shape_attrs), .infer = infer_gap_bw, .forward = fw_gap_bw,
    .gradient = gr_gap_bw,
    .doc = "global_average_pool_backward(dy (N, C); shape=x's shape) -> dx = dy / (H*W) "
           "broadcast over the pixels."};

