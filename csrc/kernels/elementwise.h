/* Elementwise float32 kernels (NumPy broadcasting). */
#ifndef PR_K_ELEMENTWISE_H
#define PR_K_ELEMENTWISE_H

#include <math.h>

#include "kernels.h"

/* MAX/MIN propagate NaN as NumPy's maximum/minimum; GE gives 1.0f where a >= b,
 * else 0.0f. */
typedef enum {
    PR_BIN_ADD, PR_BIN_SUB, PR_BIN_MUL, PR_BIN_DIV, PR_BIN_MAX, PR_BIN_MIN, PR_BIN_GE,
    PR_BIN_POW /* C99 powf (NumPy's float32 power on every value tested) */
} pr_binary_kind;

/* The unary elementwise ops, one line each: X(op name, KIND, formula of the
 * float x, the op's doc).  The line makes the kind (PR_UN_<KIND>), its case
 * in pr_unary_apply and pr_k_unary, the registry op `<name>` (ops_elementwise.c,
 * whose gradient rule is gr_<name>) and its instruction in jit_compile's
 * fused kernel (fused.c): a new one is this line plus its gradient rule, its
 * Python wrapper and its row in tests/op_table.py.
 * sign: -1, 0 or 1 (0, -0 and NaN stay as they are, as np.sign); sigmoid:
 * 1 / (1 + e**-x) (0 for x below about -88 where e**-x overflows, the limit). */
#define PR_UNARY_OPS(X)                                                                        \
    X(exp, EXP, expf(x), "e**x (float32).")                                                    \
    X(log, LOG, logf(x), "Natural logarithm (float32; -inf at 0, NaN below).")                 \
    X(sqrt, SQRT, sqrtf(x), "Square root (float32; NaN below 0).")                             \
    X(square, SQUARE, x * x, "x * x (float32).")                                              \
    X(abs, ABS, fabsf(x), "|x| (float32); gradient sign(x) * g (0 at 0, as TensorFlow).")      \
    X(sign, SIGN, (x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x),                                    \
      "-1, 0 or 1 by the sign of x (float32; 0 and NaN stay as they are, as np.sign); "        \
      "gradient 0.")                                                                           \
    X(sigmoid, SIGMOID, 1.0f / (1.0f + expf(-x)),                                              \
      "1 / (1 + exp(-x)) (float32); gradient g * y * (1 - y).")                                \
    X(tanh, TANH, tanhf(x), "Hyperbolic tangent (float32); gradient g * (1 - y**2).")          \
    X(erf, ERF, erff(x), "Error function (float32, C99 erff); gradient g * 2/sqrt(pi) * "      \
                         "exp(-x**2).")

typedef enum {
#define PR_UN_ENUM(name, KIND, f, doc) PR_UN_##KIND,
    PR_UNARY_OPS(PR_UN_ENUM)
#undef PR_UN_ENUM
} pr_unary_kind;

/* One element of a unary op: the elementwise kernel and the fused kernel
 * (fused.c) both call this, so fused chains give the unfused bits. */
static inline float pr_unary_apply(pr_unary_kind k, float x) {
    switch (k) {
#define PR_UN_CASE(name, KIND, f, doc) case PR_UN_##KIND: return f;
    PR_UNARY_OPS(PR_UN_CASE)
#undef PR_UN_CASE
    }
    return 0.0f;
}

/* Element strides of `in` broadcast to `out_shape` (rank ndim): 0 on
 * broadcast dimensions. */
void pr_broadcast_strides(const pr_view *in, int ndim, const int64_t *out_shape, int64_t *st);

/* out[i] = a[i] (op) b[i] over `shape`; a, b read through broadcast strides. */
int pr_k_binary(pr_binary_kind k, const float *a, const int64_t *sa, const float *b,
                const int64_t *sb, float *out, int ndim, const int64_t *shape);
/* The same on bfloat16 a, b and out: each element computed in float32 on
 * the exactly widened values and rounded once (bf16.h), so the result is
 * the float32 op's rounded to bfloat16. */
int pr_k_binary_bf16(pr_binary_kind k, const uint16_t *a, const int64_t *sa, const uint16_t *b,
                     const int64_t *sb, uint16_t *out, int ndim, const int64_t *shape);
/* The same on integers of one dtype `dt` (int32, int64 or uint8: a, b and
 * out), for add, subtract, multiply, maximum and minimum (PR_ERR_VALUE for
 * another kind); overflow wraps around, as NumPy's. */
int pr_k_binary_int(pr_binary_kind k, pr_dtype dt, const void *a, const int64_t *sa,
                    const void *b, const int64_t *sb, void *out, int ndim, const int64_t *shape);
/* out (out_size elements) = g (shape) summed over the dimensions where the
 * output strides `st` are 0. */
int pr_k_sum_to(const float *g, int ndim, const int64_t *shape, const int64_t *st, float *out,
                int64_t out_size);
/* pr_k_sum_to of the products a * b (both of `shape`), rounded to float as
 * a multiply stores them, without storing them. */
int pr_k_sum_product_to(const float *a, const float *b, int ndim, const int64_t *shape,
                        const int64_t *st, float *out, int64_t out_size);
/* out (shape) = x read through broadcast strides st. */
int pr_k_broadcast(const float *x, int ndim, const int64_t *shape, const int64_t *st, float *out);
int pr_k_fill(float *out, int64_t n, float value);
int pr_k_relu(const float *x, float *y, int64_t n);
/* dx = dy where y > 0 else 0 (y is relu's output). */
int pr_k_relu_backward(const float *dy, const float *y, float *dx, int64_t n);
/* relu and relu_backward on bfloat16 data (exact: each output is an input). */
int pr_k_relu_bf16(const uint16_t *x, uint16_t *y, int64_t n);
int pr_k_relu_backward_bf16(const uint16_t *dy, const uint16_t *y, uint16_t *dx, int64_t n);
int pr_k_scale(const float *x, float *y, int64_t n, float s);
/* GELU, exact (erf) form: y = 0.5 x (1 + erf(x / sqrt 2)) (Hendrycks &
 * Gimpel 2016), and dx = dy * (Phi(x) + x phi(x)); vectorizable float32
 * approximations of erf and exp (elementwise.c), absolute error ~1e-7.
 * The _bf16 versions read and write bfloat16, computing in float32. */
int pr_k_gelu(const float *x, float *y, int64_t n);
int pr_k_gelu_backward(const float *dy, const float *x, float *dx, int64_t n);
int pr_k_gelu_bf16(const uint16_t *x, uint16_t *y, int64_t n);
int pr_k_gelu_backward_bf16(const uint16_t *dy, const uint16_t *x, uint16_t *dx, int64_t n);

/* y = pr_unary_apply(k, x) elementwise (C99 expf/logf/sqrtf/tanhf/erff semantics). */
int pr_k_unary(pr_unary_kind k, const float *x, float *y, int64_t n);
/* y = min(max(x, lo), hi) (NumPy clip: hi wins when lo > hi; NaN stays NaN). */
int pr_k_clip(const float *x, float *y, int64_t n, float lo, float hi);
/* dx = dy where lo <= x <= hi, else 0 (tf.clip_by_value's gradient). */
int pr_k_clip_backward(const float *dy, const float *x, float *dx, int64_t n, float lo, float hi);

#endif
