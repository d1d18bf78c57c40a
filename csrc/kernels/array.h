/* Array kernels: moves, selections and comparisons of any dtype (no float
 * arithmetic, so results are exact), and the max/min/argmax/argmin
 * reductions.  Layout: contiguous row-major; an operand walked in another
 * order is described by per-dimension element strides (0 where broadcast,
 * negative for a reversed slice). */
#ifndef PR_K_ARRAY_H
#define PR_K_ARRAY_H

#include "kernels.h"

/* dst[i] = src[i] for every index i of `shape` (rank ndim), each operand
 * read/written through its element strides; `src` and `dst` point at index
 * 0.  itemsize 1, 4 or 8.  Transposes, slices, pads and concatenations are
 * such copies. */
int pr_k_copy_strided(const void *src, const int64_t *src_st, void *dst, const int64_t *dst_st,
                      int ndim, const int64_t *shape, size_t itemsize);

/* n elements of dtype t set to `value` (converted as pr_k_cast does). */
int pr_k_fill_value(void *dst, pr_dtype t, int64_t n, double value);

/* dst (dtype dt) = src (dtype st) converted elementwise, n elements.
 * To bool: nonzero (NaN is true).  Float to integer: truncation toward 0,
 * NaN to 0 and values past the range to its ends (C leaves those undefined;
 * NumPy's results there are platform-specific).  Integer to integer: two's
 * complement wrap-around, as NumPy's astype. */
int pr_k_cast(const void *src, pr_dtype st, void *dst, pr_dtype dt, int64_t n);

typedef enum { PR_CMP_GT, PR_CMP_GE, PR_CMP_LT, PR_CMP_LE, PR_CMP_EQ, PR_CMP_NE } pr_compare_kind;

/* out[i] (bool bytes) = a[i] (op) b[i] over `shape`, operands of any dtype
 * read through broadcast strides and compared as exact values (an int64
 * against a float32 as NumPy: in double). */
int pr_k_compare(pr_compare_kind k, const void *a, pr_dtype at, const int64_t *sa, const void *b,
                 pr_dtype bt, const int64_t *sb, uint8_t *out, int ndim, const int64_t *shape);

/* out[i] = cond[i] != 0 ? x[i] : y[i] (float32) over `shape`, each operand
 * through broadcast strides; cond of any dtype (NaN counts as true). */
int pr_k_where(const void *cond, pr_dtype ct, const int64_t *sc, const float *x,
               const int64_t *sx, const float *y, const int64_t *sy, float *out, int ndim,
               const int64_t *shape);

/* x viewed as (outer, dim, inner) elements of `itemsize` bytes; out =
 * (outer, n_idx, inner) with out[o, j] = x[o, idx[j]].  Indices (int32 or
 * int64) may be negative (counted from the end, as NumPy's take); one outside
 * [-dim, dim) is a PR_ERR_VALUE naming it. */
int pr_k_take(const void *x, size_t itemsize, int64_t outer, int64_t dim, int64_t inner,
              const void *idx, pr_dtype it, int64_t n_idx, void *out);

/* The adjoint of take for float32: out (outer, dim, inner) = 0, then
 * out[o, idx[j]] += g[o, j] in order of j (deterministic). */
int pr_k_take_add(const float *g, int64_t outer, int64_t dim, int64_t inner, const void *idx,
                  pr_dtype it, int64_t n_idx, float *out);

/* out (n, depth) float32: 1 at column idx[i], 0 elsewhere; an index outside
 * [0, depth) gives a row of zeros (tf.one_hot, keras.ops.one_hot). */
int pr_k_one_hot(const void *idx, pr_dtype it, int64_t n, int64_t depth, float *out);

typedef enum { PR_EXT_MAX, PR_EXT_MIN, PR_EXT_ARGMAX, PR_EXT_ARGMIN } pr_extreme_kind;

/* Over the dimensions d with reduced[d] != 0 of float32 x: the max/min
 * (float32 out; NaN if any element is NaN, as np.max) or the flat index
 * within the reduced dimensions of the first max/min (int32 out; the first
 * NaN wins, as np.argmax).  Every reduced dimension must be non-empty. */
int pr_k_reduce_extreme(pr_extreme_kind k, const float *x, int ndim, const int64_t *shape,
                        const int *reduced, void *out);

#endif
