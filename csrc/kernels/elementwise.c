/* Elementwise float32 kernels with NumPy broadcasting.
 * Layout: contiguous row-major.  Broadcast operands are described by
 * per-dimension element strides in the output's rank (0 where broadcast). */
#include "elementwise.h"

#include "bf16.h"

#include <math.h>
#include <string.h>

#define PARALLEL_MIN 32768 /* below this many elements one thread is faster */

static inline float apply(pr_binary_kind k, float a, float b) {
    switch (k) {
    case PR_BIN_ADD: return a + b;
    case PR_BIN_SUB: return a - b;
    case PR_BIN_MUL: return a * b;
    case PR_BIN_DIV: return a / b;
    case PR_BIN_MAX: return a >= b || a != a ? a : b;
    case PR_BIN_MIN: return a <= b || a != a ? a : b;
    case PR_BIN_GE: return a >= b ? 1.0f : 0.0f;
    case PR_BIN_POW: return powf(a, b);
    }
    return 0.0f;
}

/* One innermost row of the output. */
static inline void row(pr_binary_kind k, const float *a, int64_t sa, const float *b, int64_t sb,
                       float *o, int64_t n) {
    if (sa == 1 && sb == 1) {
        switch (k) {
        case PR_BIN_ADD: for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i]; break;
        case PR_BIN_SUB: for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i]; break;
        case PR_BIN_MUL: for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; break;
        case PR_BIN_DIV: for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; break;
        default: for (int64_t i = 0; i < n; i++) o[i] = apply(k, a[i], b[i]); break;
        }
    } else if (sa == 1 && sb == 0) {
        float y = b[0];
        for (int64_t i = 0; i < n; i++) o[i] = apply(k, a[i], y);
    } else if (sa == 0 && sb == 1) {
        float x = a[0];
        for (int64_t i = 0; i < n; i++) o[i] = apply(k, x, b[i]);
    } else {
        for (int64_t i = 0; i < n; i++) o[i] = apply(k, a[i * sa], b[i * sb]);
    }
}

void pr_broadcast_strides(const pr_view *in, int ndim, const int64_t *out_shape, int64_t *st) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        int di = d - (ndim - in->ndim);
        if (di < 0) {
            st[d] = 0;
        } else {
            st[d] = in->shape[di] == 1 && out_shape[d] != 1 ? 0 : s;
            s *= in->shape[di];
        }
    }
}

/* Merge adjacent dimensions that both operands walk alike (both contiguous
 * across them, or both broadcast over them), so that e.g. (N, H, W, 16) +
 * (N, H, W, 16) runs as one long row instead of N*H*W rows of 16.  Returns
 * the new rank; shape/strides are rewritten in place. */
static int collapse(int ndim, int64_t *shape, int64_t *sa, int64_t *sb) {
    int k = 0;
    for (int d = 1; d < ndim; d++) {
        int ok = 1;
        const int64_t *st[2] = {sa, sb};
        for (int o = 0; o < 2 && ok; o++)
            ok = (st[o][k] == 0 && st[o][d] == 0) || (st[o][d] != 0 && st[o][k] == st[o][d] * shape[d]);
        if (ok) {
            shape[k] *= shape[d];
            sa[k] = sa[d], sb[k] = sb[d];
        } else {
            k++;
            shape[k] = shape[d], sa[k] = sa[d], sb[k] = sb[d];
        }
    }
    return ndim ? k + 1 : 0;
}

/* The layout of a binary op's operands: shape and strides copied from the
 * _in arrays and collapsed; returns the collapsed ndim (0: a single
 * element) and sets the last dimension (inner) and the product of the
 * others (rows). */
static int binary_layout(int ndim, const int64_t *shape_in, const int64_t *sa_in,
                         const int64_t *sb_in, int64_t *shape, int64_t *sa, int64_t *sb,
                         int64_t *inner, int64_t *rows) {
    for (int d = 0; d < ndim; d++) shape[d] = shape_in[d], sa[d] = sa_in[d], sb[d] = sb_in[d];
    ndim = collapse(ndim, shape, sa, sb);
    *inner = ndim ? shape[ndim - 1] : 1;
    *rows = 1;
    for (int d = 0; d < ndim - 1; d++) *rows *= shape[d];
    return ndim;
}

int pr_k_binary(pr_binary_kind k, const float *a, const int64_t *sa_in, const float *b,
                const int64_t *sb_in, float *out, int ndim, const int64_t *shape_in) {
    int64_t shape[PR_MAX_DIMS] = {0}, sa[PR_MAX_DIMS] = {0}, sb[PR_MAX_DIMS] = {0}, inner, rows;
    ndim = binary_layout(ndim, shape_in, sa_in, sb_in, shape, sa, sb, &inner, &rows);
    if (ndim == 0) {
        out[0] = apply(k, a[0], b[0]);
        return PR_OK;
    }
    int64_t total = rows * inner;
    if (total == 0) return PR_OK;
    if (rows == 1 || (inner >= PARALLEL_MIN && rows < 4)) {
        /* Few long rows: split each row across threads. */
        for (int64_t r = 0; r < rows; r++) {
            const float *ar = a + pr_outer_offset(r, ndim, shape, sa);
            const float *br = b + pr_outer_offset(r, ndim, shape, sb);
            float *orow = out + r * inner;
            int64_t chunk = 16384, nchunks = (inner + chunk - 1) / chunk;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (inner >= PARALLEL_MIN)
            for (int64_t c = 0; c < nchunks; c++) {
                int64_t lo = c * chunk, n = inner - lo < chunk ? inner - lo : chunk;
                row(k, ar + lo * sa[ndim - 1], sa[ndim - 1], br + lo * sb[ndim - 1],
                    sb[ndim - 1], orow + lo, n);
            }
        }
        return PR_OK;
    }
#pragma omp parallel for num_threads(pr_get_num_threads()) if (total >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++)
        row(k, a + pr_outer_offset(r, ndim, shape, sa), sa[ndim - 1],
            b + pr_outer_offset(r, ndim, shape, sb), sb[ndim - 1], out + r * inner, inner);
    return PR_OK;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "cpu.h"

/* o = bf16(a + b) for n contiguous elements (AVX-512 F): the residual adds
 * of a mixed_bfloat16 network and their gradients' sums, bit for bit the
 * general loop's (one float32 add, bf16.h's rounding). */
__attribute__((target("avx512f"))) static void add_bf16_avx512(const uint16_t *a,
                                                               const uint16_t *b, uint16_t *o,
                                                               int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 sum = _mm512_add_ps(pr_bf16_load16_ps(a + i), pr_bf16_load16_ps(b + i));
        _mm256_storeu_si256((__m256i *)(o + i), pr_bf16_round16(sum));
    }
    for (; i < n; i++) o[i] = pr_bf16_from_f32(pr_bf16_to_f32(a[i]) + pr_bf16_to_f32(b[i]));
}

#endif

/* Integer elements (int32, int64, uint8) read and written as int64: the
 * arithmetic is done modulo 2**64 (unsigned, so overflow is defined) and the
 * store truncates to the dtype, which wraps around as NumPy's integer
 * arithmetic does. */
static inline int64_t load_int(pr_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case PR_I32: return ((const int32_t *)p)[i];
    case PR_U8: return ((const uint8_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}
static inline void store_int(pr_dtype dt, void *p, int64_t i, uint64_t v) {
    switch (dt) {
    case PR_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
    case PR_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}
static inline uint64_t apply_int(pr_binary_kind k, int64_t a, int64_t b) {
    switch (k) {
    case PR_BIN_ADD: return (uint64_t)a + (uint64_t)b;
    case PR_BIN_SUB: return (uint64_t)a - (uint64_t)b;
    case PR_BIN_MUL: return (uint64_t)a * (uint64_t)b;
    case PR_BIN_MAX: return (uint64_t)(a >= b ? a : b);
    case PR_BIN_MIN: return (uint64_t)(a <= b ? a : b);
    default: return 0;
    }
}

int pr_k_binary_int(pr_binary_kind k, pr_dtype dt, const void *a, const int64_t *sa_in,
                    const void *b, const int64_t *sb_in, void *out, int ndim,
                    const int64_t *shape_in) {
    if (k != PR_BIN_ADD && k != PR_BIN_SUB && k != PR_BIN_MUL && k != PR_BIN_MAX &&
        k != PR_BIN_MIN)
        return PR_ERR_VALUE;
    int64_t shape[PR_MAX_DIMS] = {0}, sa[PR_MAX_DIMS] = {0}, sb[PR_MAX_DIMS] = {0}, inner, rows;
    ndim = binary_layout(ndim, shape_in, sa_in, sb_in, shape, sa, sb, &inner, &rows);
    if (ndim == 0) {
        store_int(dt, out, 0, apply_int(k, load_int(dt, a, 0), load_int(dt, b, 0)));
        return PR_OK;
    }
    const int64_t ia = sa[ndim - 1], ib = sb[ndim - 1];
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * inner >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const int64_t oa = pr_outer_offset(r, ndim, shape, sa), ob = pr_outer_offset(r, ndim, shape, sb);
        for (int64_t i = 0; i < inner; i++)
            store_int(dt, out, r * inner + i,
                      apply_int(k, load_int(dt, a, oa + i * ia), load_int(dt, b, ob + i * ib)));
    }
    return PR_OK;
}

int pr_k_binary_bf16(pr_binary_kind k, const uint16_t *a, const int64_t *sa_in, const uint16_t *b,
                     const int64_t *sb_in, uint16_t *out, int ndim, const int64_t *shape_in) {
    int64_t shape[PR_MAX_DIMS] = {0}, sa[PR_MAX_DIMS] = {0}, sb[PR_MAX_DIMS] = {0}, inner, rows;
    ndim = binary_layout(ndim, shape_in, sa_in, sb_in, shape, sa, sb, &inner, &rows);
    if (ndim == 0) {
        out[0] = pr_bf16_from_f32(apply(k, pr_bf16_to_f32(a[0]), pr_bf16_to_f32(b[0])));
        return PR_OK;
    }
    const int64_t ia = sa[ndim - 1], ib = sb[ndim - 1];
#if defined(__x86_64__) && defined(__GNUC__)
    if (k == PR_BIN_ADD && rows == 1 && ia == 1 && ib == 1 && pr_cpu_fast(PR_CPU_AVX512F)) {
        const int64_t chunk = 16384, nchunks = (inner + chunk - 1) / chunk;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (inner >= PARALLEL_MIN)
        for (int64_t c = 0; c < nchunks; c++) {
            const int64_t lo = c * chunk;
            add_bf16_avx512(a + lo, b + lo, out + lo, inner - lo < chunk ? inner - lo : chunk);
        }
        return PR_OK;
    }
#endif
    /* Pieces of BF16_PIECE elements of one row: widened into float32 on the
     * stack, the float32 row loop, rounded out. */
    enum { BF16_PIECE = 1024 };
    const int64_t pieces = (inner + BF16_PIECE - 1) / BF16_PIECE, tasks = rows * pieces;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * inner >= PARALLEL_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        float fa[BF16_PIECE], fb[BF16_PIECE], fo[BF16_PIECE];
        const int64_t r = t / pieces, lo = t % pieces * BF16_PIECE;
        const int64_t n = inner - lo < BF16_PIECE ? inner - lo : BF16_PIECE;
        const uint16_t *ar = a + pr_outer_offset(r, ndim, shape, sa) + lo * ia;
        const uint16_t *br = b + pr_outer_offset(r, ndim, shape, sb) + lo * ib;
        for (int64_t i = 0; i < n; i++) fa[i] = pr_bf16_to_f32(ar[i * ia]);
        for (int64_t i = 0; i < n; i++) fb[i] = pr_bf16_to_f32(br[i * ib]);
        row(k, fa, 1, fb, 1, fo, n);
        pr_f32_to_bf16_run(fo, out + r * inner + lo, n);
    }
    return PR_OK;
}

/* For sum_to and broadcast between a row-major shape and strides st: a 0-d
 * shape copies x[0] to out[0] and returns 1; else 0, with the last
 * dimension (inner), the product of the others (rows) and the last stride
 * (si). */
static int scalar_or_rows(const float *x, int ndim, const int64_t *shape, const int64_t *st,
                          float *out, int64_t *inner, int64_t *rows, int64_t *si) {
    if (ndim == 0) {
        out[0] = x[0];
        return 1;
    }
    *inner = shape[ndim - 1];
    *rows = 1;
    for (int d = 0; d < ndim - 1; d++) *rows *= shape[d];
    *si = st[ndim - 1];
    return 0;
}

/* out = the sum over the rows of g (or of the products a * b, element by
 * element, when b is given) down to out's strides st: each output adds its
 * rows in row order (one thread's order: deterministic).  Where st keeps
 * dimension 0 (per-image sums, as squeeze-and-excitation's gate gradient)
 * the blocks of rows of each index along it write outputs of their own, so
 * they run in parallel, each in that order: the same sums. */
static int sum_rows_to(const float *g, const float *b, int ndim, const int64_t *shape,
                       const int64_t *st, float *out, int64_t out_size) {
    memset(out, 0, sizeof(float) * (size_t)out_size);
    int64_t inner, rows, si;
    if (ndim == 0) {
        out[0] = b ? g[0] * b[0] : g[0];
        return PR_OK;
    }
    scalar_or_rows(g, ndim, shape, st, out, &inner, &rows, &si);
    if (rows == 0 || inner == 0) return PR_OK;
    const int64_t blocks = ndim > 1 && st[0] != 0 ? shape[0] : 1, per = rows / blocks;
    const int par = blocks > 1 && rows * inner >= PARALLEL_MIN;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (par)
    for (int64_t k = 0; k < blocks; k++)
        for (int64_t r = k * per; r < (k + 1) * per; r++) {
            const float *gr = g + r * inner, *br = b ? b + r * inner : NULL;
            float *o = out + pr_outer_offset(r, ndim, shape, st);
            if (si == 1) {
                if (br)
                    for (int64_t i = 0; i < inner; i++) o[i] += gr[i] * br[i];
                else
                    for (int64_t i = 0; i < inner; i++) o[i] += gr[i];
            } else {
                float s = 0.0f;
                if (br)
                    for (int64_t i = 0; i < inner; i++) s += gr[i] * br[i];
                else
                    for (int64_t i = 0; i < inner; i++) s += gr[i];
                o[0] += s;
            }
        }
    return PR_OK;
}

int pr_k_sum_to(const float *g, int ndim, const int64_t *shape, const int64_t *st, float *out,
                int64_t out_size) {
    return sum_rows_to(g, NULL, ndim, shape, st, out, out_size);
}

int pr_k_sum_product_to(const float *a, const float *b, int ndim, const int64_t *shape,
                        const int64_t *st, float *out, int64_t out_size) {
    return sum_rows_to(a, b, ndim, shape, st, out, out_size);
}

int pr_k_broadcast(const float *x, int ndim, const int64_t *shape, const int64_t *st, float *out) {
    int64_t inner, rows, si;
    if (scalar_or_rows(x, ndim, shape, st, out, &inner, &rows, &si)) return PR_OK;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (rows * inner >= PARALLEL_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + pr_outer_offset(r, ndim, shape, st);
        float *o = out + r * inner;
        for (int64_t i = 0; i < inner; i++) o[i] = xr[i * si];
    }
    return PR_OK;
}

int pr_k_fill(float *out, int64_t n, float value) {
    for (int64_t i = 0; i < n; i++) out[i] = value;
    return PR_OK;
}

/* relu and its gradient let NaN through, as NumPy's maximum(x, 0) does (and
 * PyTorch's threshold_backward): a NaN activation is never hidden as 0. */
int pr_k_relu(const float *x, float *y, int64_t n) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i];
    return PR_OK;
}

int pr_k_relu_backward(const float *dy, const float *y, float *dx, int64_t n) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float g = dy[i]; /* an unconditional load lets the loop vectorize */
        dx[i] = y[i] <= 0.0f ? 0.0f : g;
    }
    return PR_OK;
}

int pr_k_relu_bf16(const uint16_t *x, uint16_t *y, int64_t n) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = pr_bf16_to_f32(x[i]) <= 0.0f ? 0 : x[i];
    return PR_OK;
}

int pr_k_relu_backward_bf16(const uint16_t *dy, const uint16_t *y, uint16_t *dx, int64_t n) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        uint16_t g = dy[i];
        dx[i] = pr_bf16_to_f32(y[i]) <= 0.0f ? 0 : g;
    }
    return PR_OK;
}

int pr_k_scale(const float *x, float *y, int64_t n, float s) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s;
    return PR_OK;
}

/* The kind is a constant inside each loop, so each loop compiles to its own
 * function call or instruction sequence. */
#define UNARY_LOOP(kind)                                                               \
    _Pragma("omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)") \
    for (int64_t i = 0; i < n; i++) y[i] = pr_unary_apply(kind, x[i]);                \
    break

int pr_k_unary(pr_unary_kind k, const float *x, float *y, int64_t n) {
    switch (k) {
#define UNARY_CASE(name, KIND, f, doc) case PR_UN_##KIND: UNARY_LOOP(PR_UN_##KIND);
    PR_UNARY_OPS(UNARY_CASE)
#undef UNARY_CASE
    }
    return PR_OK;
}

int pr_k_clip(const float *x, float *y, int64_t n, float lo, float hi) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float t = x[i] < lo ? lo : x[i]; /* np.minimum(np.maximum(x, lo), hi) */
        y[i] = t > hi ? hi : t;
    }
    return PR_OK;
}

int pr_k_clip_backward(const float *dy, const float *x, float *dx, int64_t n, float lo, float hi) {
#pragma omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.0f;
    return PR_OK;
}

/* ---- GELU (exact, erf form) -------------------------------------------------
 * Vectorizable float32 approximations (no libm call in the loops):
 * erf by the rational minimax fit x * P(x^2) / Q(x^2) on [-4, 4] (clamped;
 * erf(4) = 1 - 1.5e-8 rounds to 1 in float32) that TensorFlow's CPU kernels
 * use (Eigen's generic_fast_erf_float), about 1e-7 absolute error;
 * exp by range reduction x = k ln2 + r, |r| <= ln2/2, and a degree-6
 * Taylor polynomial of e^r (relative error < 2e-7), scaled by 2^k built in
 * the exponent bits. */
/* (setup.py's -fno-trapping-math lets GCC if-convert the clamps and vectorize
 * the loops: the float comparisons could raise FE_INVALID on a NaN.) */

static inline float fast_erf(float x) {
    float lo = x < -4.0f ? -4.0f : x;
    x = lo > 4.0f ? 4.0f : lo;
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return x * p / q;
}

/* e^x for x <= 0 (GELU's Gaussian: x = -t^2/2); 0 below -87. */
static inline float fast_exp_neg(float x) {
    /* x = x < -87 ? -87 : x (NaN kept), as a bit select: GCC 12 turns the
     * plain ?: before the float -> int conversion below into a branch for
     * AVX2/AVX-512 targets, which stops the loops vectorizing */
    const float lo = -87.0f;
    uint32_t u, c, below = -(uint32_t)(x < lo);
    memcpy(&u, &x, sizeof u);
    memcpy(&c, &lo, sizeof c);
    u = (u & ~below) | (c & below);
    memcpy(&x, &u, sizeof x);
    /* nearest integer to x / ln2 (x <= 0: truncating kf - 0.5 rounds it), without
     * floorf, which SSE2 cannot vectorize */
    float k = (float)(int32_t)(x * 1.44269504088896341f - 0.5f);
    float r = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;
    float e = 1.0f / 720.0f;
    e = e * r + 1.0f / 120.0f;
    e = e * r + 1.0f / 24.0f;
    e = e * r + 1.0f / 6.0f;
    e = e * r + 0.5f;
    e = e * r + 1.0f;
    e = e * r + 1.0f;
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return e * scale;
}

#define GELU_INV_SQRT2 0.70710678118654752f
#define GELU_INV_SQRT_2PI 0.39894228040143268f

static inline float gelu1(float x) { return 0.5f * x * (1.0f + fast_erf(x * GELU_INV_SQRT2)); }

/* d gelu / dx = Phi(x) + x phi(x). */
static inline float gelu_grad1(float x) {
    float cdf = 0.5f * (1.0f + fast_erf(x * GELU_INV_SQRT2));
    return cdf + x * GELU_INV_SQRT_2PI * fast_exp_neg(-0.5f * x * x);
}

/* The loops, compiled for AVX-512, AVX2 and baseline x86-64 from the same C
 * (PR_CLONES: the same operations, so the same bits).  Each thread runs a
 * whole chunk of GELU_CHUNK elements through one call, in blocks of
 * GELU_BLOCK widened into float32 on the stack (the block arrays cannot
 * alias x or y, which may be one buffer: the op works in place), so the
 * compute loop vectorizes with no alias checks.  GELU_CHUNK is fixed, not
 * derived from the thread count, and each element is computed alone: the
 * results do not depend on the split. */
#define GELU_BLOCK 64
#define GELU_CHUNK 16384

static inline float load_f32(const float *p, int64_t i) { return p[i]; }
static inline float load_bf16(const uint16_t *p, int64_t i) { return pr_bf16_to_f32(p[i]); }
static inline void store_f32(float *p, int64_t i, float v) { p[i] = v; }
static inline void store_bf16(uint16_t *p, int64_t i, float v) { p[i] = pr_bf16_from_f32(v); }

/* y = gelu(x) (dy == NULL) or y = dy * gelu'(x), n elements. */
#define GELU_RUN(T)                                                                          \
    PR_CLONES static void gelu_run_##T(const elem_##T *dy, const elem_##T *x, elem_##T *y,   \
                                       int64_t n) {                                          \
        for (int64_t i0 = 0; i0 < n; i0 += GELU_BLOCK) {                                     \
            const int64_t m = n - i0 < GELU_BLOCK ? n - i0 : GELU_BLOCK;                     \
            float t[GELU_BLOCK], g[GELU_BLOCK];                                              \
            for (int64_t i = 0; i < m; i++) t[i] = load_##T(x, i0 + i);                      \
            if (dy) {                                                                        \
                for (int64_t i = 0; i < m; i++) g[i] = load_##T(dy, i0 + i);                 \
                for (int64_t i = 0; i < m; i++) t[i] = g[i] * gelu_grad1(t[i]);              \
            } else {                                                                         \
                for (int64_t i = 0; i < m; i++) t[i] = gelu1(t[i]);                          \
            }                                                                                \
            for (int64_t i = 0; i < m; i++) store_##T(y, i0 + i, t[i]);                      \
        }                                                                                    \
    }                                                                                        \
    static void gelu_##T(const elem_##T *dy, const elem_##T *x, elem_##T *y, int64_t n) {    \
        const int64_t chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;                            \
        _Pragma("omp parallel for num_threads(pr_get_num_threads()) if (n >= PARALLEL_MIN)") \
        for (int64_t k = 0; k < chunks; k++) {                                               \
            const int64_t i0 = k * GELU_CHUNK;                                               \
            gelu_run_##T(dy ? dy + i0 : NULL, x + i0, y + i0,                                \
                         n - i0 < GELU_CHUNK ? n - i0 : GELU_CHUNK);                         \
        }                                                                                    \
    }
GELU_RUN(f32)
GELU_RUN(bf16)

int pr_k_gelu(const float *x, float *y, int64_t n) {
    gelu_f32(NULL, x, y, n);
    return PR_OK;
}

int pr_k_gelu_backward(const float *dy, const float *x, float *dx, int64_t n) {
    gelu_f32(dy, x, dx, n);
    return PR_OK;
}

/* bfloat16 in and out, float32 inside (rounded to nearest even once). */
int pr_k_gelu_bf16(const uint16_t *x, uint16_t *y, int64_t n) {
    gelu_bf16(NULL, x, y, n);
    return PR_OK;
}

int pr_k_gelu_backward_bf16(const uint16_t *dy, const uint16_t *x, uint16_t *dx, int64_t n) {
    gelu_bf16(dy, x, dx, n);
    return PR_OK;
}

