/* Array kernels (see array.h).  Tested against NumPy's transpose, basic
 * slicing, pad, concatenate, take, add.at, where, comparisons, astype,
 * max/min/argmax/argmin (tests/op_table.py). */
#include "array.h"
#include "bf16.h"

#include <math.h>
#include <string.h>

#define PARALLEL_MIN 32768

static int64_t count(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

#define COPY_ROW(type)                                                         \
    do {                                                                       \
        const type *s = (const type *)src + so;                                \
        type *t = (type *)dst + dof;                                           \
        for (int64_t i = 0; i < inner; i++) t[i * dsi] = s[i * ssi];           \
    } while (0)

int pr_k_copy_strided(const void *src, const int64_t *src_st, void *dst, const int64_t *dst_st,
                      int ndim, const int64_t *shape, size_t itemsize) {
    if (itemsize != 1 && itemsize != 4 && itemsize != 8) return PR_ERR_INTERNAL;
    int64_t total = count(ndim, shape);
    if (total == 0) return PR_OK;
    if (ndim == 0) {
        memcpy(dst, src, itemsize);
        return PR_OK;
    }
    int64_t inner = shape[ndim - 1], rows = total / inner;
    int64_t ssi = src_st[ndim - 1], dsi = dst_st[ndim - 1];
#pragma omp parallel for num_threads(pr_get_num_threads()) if (total >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t so = pr_outer_offset(r, ndim, shape, src_st), dof = pr_outer_offset(r, ndim, shape, dst_st);
        if (itemsize == 1) COPY_ROW(uint8_t);
        else if (itemsize == 4) COPY_ROW(uint32_t);
        else COPY_ROW(uint64_t);
    }
    return PR_OK;
}

static inline double value_at(const void *p, pr_dtype t, int64_t i) {
    switch (t) {
    case PR_F32: return ((const float *)p)[i];
    case PR_I32: return ((const int32_t *)p)[i];
    case PR_I64: return (double)((const int64_t *)p)[i];
    case PR_U8:
    case PR_BOOL: return ((const uint8_t *)p)[i];
    case PR_BF16: return pr_bf16_to_f32(((const uint16_t *)p)[i]);
    }
    return 0.0;
}

static inline int64_t int_at(const void *p, pr_dtype t, int64_t i) {
    switch (t) {
    case PR_I32: return ((const int32_t *)p)[i];
    case PR_I64: return ((const int64_t *)p)[i];
    case PR_U8:
    case PR_BOOL: return ((const uint8_t *)p)[i];
    case PR_F32:
    case PR_BF16: return 0;
    }
    return 0;
}

/* A double as an integer of [lo, hi]: truncated, NaN -> 0, clamped. */
static inline int64_t to_int(double v, double lo, double hi) {
    if (v != v) return 0;
    if (v <= lo) return (int64_t)lo;
    if (v >= hi) return (int64_t)hi;
    return (int64_t)v;
}

static inline void store(void *dst, pr_dtype t, int64_t i, int from_float, double f, int64_t k) {
    switch (t) {
    case PR_F32: ((float *)dst)[i] = from_float ? (float)f : (float)k; break;
    case PR_I32:
        ((int32_t *)dst)[i] = (int32_t)(from_float ? to_int(f, -2147483648.0, 2147483647.0)
                                                   : (int64_t)(uint32_t)k);
        break;
    case PR_I64:
        ((int64_t *)dst)[i] = from_float ? to_int(f, -9223372036854775808.0, 9223372036854774784.0)
                                         : k;
        break;
    case PR_U8:
        ((uint8_t *)dst)[i] = (uint8_t)(from_float ? to_int(f, 0.0, 255.0) : k);
        break;
    case PR_BOOL: ((uint8_t *)dst)[i] = from_float ? f != 0.0 : k != 0; break;
    case PR_BF16: ((uint16_t *)dst)[i] = pr_bf16_from_f32(from_float ? (float)f : (float)k); break;
    }
}

int pr_k_fill_value(void *dst, pr_dtype t, int64_t n, double value) {
    for (int64_t i = 0; i < n; i++) store(dst, t, i, 1, value, 0);
    return PR_OK;
}

int pr_k_cast(const void *src, pr_dtype st, void *dst, pr_dtype dt, int64_t n) {
    if (st == dt) {
        memcpy(dst, src, (size_t)n * pr_dtype_size(st));
        return PR_OK;
    }
    int from_float = st == PR_F32;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        if (from_float) store(dst, dt, i, 1, ((const float *)src)[i], 0);
        else store(dst, dt, i, 0, 0.0, int_at(src, st, i));
    }
    return PR_OK;
}

static inline int compare(pr_compare_kind k, double a, double b) {
    switch (k) {
    case PR_CMP_GT: return a > b;
    case PR_CMP_GE: return a >= b;
    case PR_CMP_LT: return a < b;
    case PR_CMP_LE: return a <= b;
    case PR_CMP_EQ: return a == b;
    case PR_CMP_NE: return a != b;
    }
    return 0;
}

int pr_k_compare(pr_compare_kind k, const void *a, pr_dtype at, const int64_t *sa, const void *b,
                 pr_dtype bt, const int64_t *sb, uint8_t *out, int ndim, const int64_t *shape) {
    int64_t total = count(ndim, shape);
    if (total == 0) return PR_OK;
    if (ndim == 0) {
        out[0] = (uint8_t)compare(k, value_at(a, at, 0), value_at(b, bt, 0));
        return PR_OK;
    }
    int64_t inner = shape[ndim - 1], rows = total / inner;
    int64_t ia = sa[ndim - 1], ib = sb[ndim - 1];
    /* int64 against int64 exactly (a double holds only 53 bits) */
    int ints = at != PR_F32 && bt != PR_F32;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (total >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t oa = pr_outer_offset(r, ndim, shape, sa), ob = pr_outer_offset(r, ndim, shape, sb);
        uint8_t *o = out + r * inner;
        for (int64_t i = 0; i < inner; i++) {
            int64_t ja = oa + i * ia, jb = ob + i * ib;
            if (ints) {
                int64_t x = int_at(a, at, ja), y = int_at(b, bt, jb);
                o[i] = (uint8_t)(k == PR_CMP_GT   ? x > y
                                 : k == PR_CMP_GE ? x >= y
                                 : k == PR_CMP_LT ? x < y
                                 : k == PR_CMP_LE ? x <= y
                                 : k == PR_CMP_EQ ? x == y
                                                  : x != y);
            } else {
                o[i] = (uint8_t)compare(k, value_at(a, at, ja), value_at(b, bt, jb));
            }
        }
    }
    return PR_OK;
}

int pr_k_where(const void *cond, pr_dtype ct, const int64_t *sc, const float *x,
               const int64_t *sx, const float *y, const int64_t *sy, float *out, int ndim,
               const int64_t *shape) {
    int64_t total = count(ndim, shape);
    if (total == 0) return PR_OK;
    if (ndim == 0) {
        out[0] = value_at(cond, ct, 0) != 0.0 ? x[0] : y[0];
        return PR_OK;
    }
    int64_t inner = shape[ndim - 1], rows = total / inner;
    int64_t ic = sc[ndim - 1], ix = sx[ndim - 1], iy = sy[ndim - 1];
#pragma omp parallel for num_threads(pr_get_num_threads()) if (total >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t oc = pr_outer_offset(r, ndim, shape, sc);
        const float *xr = x + pr_outer_offset(r, ndim, shape, sx);
        const float *yr = y + pr_outer_offset(r, ndim, shape, sy);
        float *o = out + r * inner;
        if (ct == PR_BOOL || ct == PR_U8) {
            const uint8_t *c = (const uint8_t *)cond + oc;
            for (int64_t i = 0; i < inner; i++) o[i] = c[i * ic] ? xr[i * ix] : yr[i * iy];
        } else {
            for (int64_t i = 0; i < inner; i++)
                o[i] = value_at(cond, ct, oc + i * ic) != 0.0 ? xr[i * ix] : yr[i * iy];
        }
    }
    return PR_OK;
}

/* Indices checked and made non-negative: 0, or PR_ERR_VALUE naming the first bad one. */
static int check_indices(const void *idx, pr_dtype it, int64_t n, int64_t dim) {
    for (int64_t j = 0; j < n; j++) {
        int64_t k = int_at(idx, it, j);
        if (k < -dim || k >= dim) {
            pr_kernel_error("index %lld (at position %lld) is out of bounds for a dimension of "
                            "size %lld",
                            (long long)k, (long long)j, (long long)dim);
            return PR_ERR_VALUE;
        }
    }
    return PR_OK;
}

static inline int64_t index_at(const void *idx, pr_dtype it, int64_t j, int64_t dim) {
    int64_t k = int_at(idx, it, j);
    return k < 0 ? k + dim : k;
}

int pr_k_take(const void *x, size_t itemsize, int64_t outer, int64_t dim, int64_t inner,
              const void *idx, pr_dtype it, int64_t n_idx, void *out) {
    int rc = check_indices(idx, it, n_idx, dim);
    if (rc != PR_OK) return rc;
    size_t row = (size_t)inner * itemsize;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (outer * n_idx * inner >= PARALLEL_MIN)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n_idx; j++)
            memcpy((char *)out + (size_t)(o * n_idx + j) * row,
                   (const char *)x + (size_t)(o * dim + index_at(idx, it, j, dim)) * row, row);
    return PR_OK;
}

int pr_k_take_add(const float *g, int64_t outer, int64_t dim, int64_t inner, const void *idx,
                  pr_dtype it, int64_t n_idx, float *out) {
    int rc = check_indices(idx, it, n_idx, dim);
    if (rc != PR_OK) return rc;
    memset(out, 0, sizeof(float) * (size_t)(outer * dim * inner));
#pragma omp parallel for num_threads(pr_get_num_threads()) if (outer * n_idx * inner >= PARALLEL_MIN)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n_idx; j++) {
            float *d = out + (o * dim + index_at(idx, it, j, dim)) * inner;
            const float *s = g + (o * n_idx + j) * inner;
            for (int64_t i = 0; i < inner; i++) d[i] += s[i];
        }
    return PR_OK;
}

int pr_k_one_hot(const void *idx, pr_dtype it, int64_t n, int64_t depth, float *out) {
    memset(out, 0, sizeof(float) * (size_t)(n * depth));
    for (int64_t i = 0; i < n; i++) {
        int64_t k = int_at(idx, it, i);
        if (k >= 0 && k < depth) out[i * depth + k] = 1.0f;
    }
    return PR_OK;
}

int pr_k_reduce_extreme(pr_extreme_kind k, const float *x, int ndim, const int64_t *shape,
                        const int *reduced, void *out) {
    int64_t kst[PR_MAX_DIMS], kshape[PR_MAX_DIMS], rst[PR_MAX_DIMS], rshape[PR_MAX_DIMS];
    int nk = 0, nr = 0;
    int64_t st = 1, n_out = 1, n_red = 1;
    for (int d = ndim - 1; d >= 0; d--) { /* innermost first */
        if (reduced[d]) rst[nr] = st, rshape[nr++] = shape[d], n_red *= shape[d];
        else kst[nk] = st, kshape[nk++] = shape[d], n_out *= shape[d];
        st *= shape[d];
    }
    if (n_red == 0) return PR_ERR_INTERNAL; /* the shape rule refuses empty reductions */
    int want_max = k == PR_EXT_MAX || k == PR_EXT_ARGMAX, arg = k >= PR_EXT_ARGMAX;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n_out * n_red >= PARALLEL_MIN)
    for (int64_t o = 0; o < n_out; o++) {
        int64_t base = 0, rem = o;
        for (int d = 0; d < nk; d++) base += (rem % kshape[d]) * kst[d], rem /= kshape[d];
        int64_t pos[PR_MAX_DIMS] = {0}, off = 0, best_at = 0;
        float best = x[base];
        for (int64_t r = 0; r < n_red; r++) {
            float v = x[base + off];
            if (v != v) { /* NaN wins, the first one */
                best = v, best_at = r;
                break;
            }
            if (want_max ? v > best : v < best) best = v, best_at = r;
            for (int d = 0; d < nr; d++) { /* odometer over the reduced dims, innermost first */
                off += rst[d];
                if (++pos[d] < rshape[d]) break;
                off -= rst[d] * rshape[d];
                pos[d] = 0;
            }
        }
        if (arg) ((int32_t *)out)[o] = (int32_t)best_at;
        else ((float *)out)[o] = best;
    }
    return PR_OK;
}
