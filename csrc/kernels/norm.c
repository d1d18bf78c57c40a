/* Batch normalization kernels (Ioffe & Szegedy 2015, "Batch Normalization:
 * Accelerating Deep Network Training by Reducing Internal Covariate Shift",
 * Algorithm 1 and section 3), channels-last: m rows of c channels.
 *
 * Memory traffic is what these cost, so each kernel makes as few passes as
 * the maths allows: training forward reads x twice (statistics, then y);
 * training backward reads dy and x twice; inference backward once.
 * The rows are cut into a fixed number of chunks (never more than
 * MAX_CHUNKS, independent of the thread count); per-channel sums accumulate
 * in double within a chunk and the chunk partials are added in chunk order,
 * so results are the same for any thread count.  The row loops are
 * compiled for AVX-512, AVX2 and baseline x86-64 from the same C and chosen
 * at load time (target_clones); results agree bit for bit (no FMA
 * contraction in ISO C mode).  Activations may be bfloat16 (norm.h): each
 * row loop is one macro instantiated for float32 and bfloat16 elements, so
 * the 16-bit data is read and written in place, never widened into a
 * float32 copy. */
#include "norm.h"

#include "bf16.h"

#include <math.h>
#include <string.h>

#define MAX_CHUNKS 64
#define PARALLEL_MIN 32768

static int64_t n_chunks(int64_t m) { return m < MAX_CHUNKS ? (m > 0 ? m : 1) : MAX_CHUNKS; }

/* Rows [lo, hi) of chunk k. */
#define CHUNK_LO(k) (m * (k) / nc)
#define CHUNK_HI(k) (m * ((k) + 1) / nc)

/* Scratch layout: chunk partials (n_chunks * 2c doubles), then 6c floats of
 * per-channel coefficients. */
size_t pr_bn_scratch_bytes(int64_t m, int64_t c) {
    return (size_t)(n_chunks(m) * 2 * c) * sizeof(double) + (size_t)(6 * c) * sizeof(float);
}

static float *coefs(void *scratch, int64_t m, int64_t c) {
    return (float *)((double *)scratch + n_chunks(m) * 2 * c);
}

/* ---- element types -------------------------------------------------------- */

/* The activations (x, dy, the residual, y, dx) are float32, or bfloat16 (the
 * upper half of a float32, uint16_t storage: Keras's mixed_bfloat16).  Each
 * row loop below is written once, for an element type T of one of these,
 * with T's loads and stores:
 *   ld_T(p, i)    element i as float32 (bfloat16: exactly, by a shift);
 *   ld8_T(p)      8 elements as a v8f;
 *   rnd_T(v)      a float32 v as T would hold it (bfloat16: rounded to
 *                 nearest even, NaN quieted, as pr_bf16_from_f32), as float32;
 *   rnd8_T(v)     the same for a v8f;
 *   st_T(p, i, v) store a float32 v as T (bfloat16: rounded as rnd_T);
 *   put_T(p, i, v) store a v that rnd_T already rounded (no second rounding).
 * The bfloat16 data is read and written as 16-bit words inside the loops, so
 * a bfloat16 activation costs half the memory traffic of a float32 one; the
 * arithmetic is the float32 kernel's, on the exact float32 values, with one
 * rounding of each value the unfused ops would store in bfloat16. */
typedef float v8f __attribute__((vector_size(32)));
typedef int v8i __attribute__((vector_size(32)));
typedef unsigned v8u __attribute__((vector_size(32)));
/* Unaligned views for loads and stores. */
typedef float v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef uint16_t v8h_u __attribute__((vector_size(16), aligned(2), may_alias));


static inline float ld_f32(const float *p, int64_t i) { return p[i]; }
#define ld8_f32(p) (*(const v8f_u *)(p))
static inline float rnd_f32(float v) { return v; }
#define rnd8_f32(v) (v)
static inline void st_f32(float *p, int64_t i, float v) { p[i] = v; }
static inline void put_f32(float *p, int64_t i, float v) { p[i] = v; }

static inline float ld_bf16(const uint16_t *p, int64_t i) { return pr_bf16_to_f32(p[i]); }
/* (vector helpers are macros: GCC warns of the ABI of functions passing
 * 32-byte vectors in the baseline clone) */
#define ld8_bf16(p) ((v8f)(__builtin_convertvector(*(const v8h_u *)(p), v8u) << 16))
static inline float rnd_bf16(float v) { return pr_bf16_round(v); }
#define rnd8_bf16(v)                                                                  \
    __extension__({                                                               \
        v8u u_ = (v8u)(v);                                                        \
        v8u r_ = (u_ + 0x7fffu + ((u_ >> 16) & 1u)) & 0xffff0000u;                \
        v8u q_ = (u_ | 0x400000u) & 0xffff0000u;                                  \
        v8u nan_ = (v8u)((u_ & 0x7fffffffu) > 0x7f800000u);                       \
        (v8f)((q_ & nan_) | (r_ & ~nan_));                                        \
    })
static inline void st_bf16(uint16_t *p, int64_t i, float v) { p[i] = pr_bf16_from_f32(v); }
static inline void put_bf16(uint16_t *p, int64_t i, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    p[i] = (uint16_t)(u >> 16);
}

/* ---- row loops ------------------------------------------------------------ */

/* The statistics loops keep the double accumulators of 16 channels in
 * registers (GCC vector types, lowered to whatever the clone's ISA has) and
 * walk the rows; leftover channels use accumulators in memory.  Either way
 * each channel adds its rows in order.  Each loop is a macro of the element
 * type T (float32 or bfloat16 activations), instantiated below for both. */
#define CB 16
typedef double v8d __attribute__((vector_size(64)));
typedef double v8d_u __attribute__((vector_size(64), aligned(8), may_alias));
#define widen(v) __builtin_convertvector((v), v8d)
#define store8d(p, v) (*(v8d_u *)(p) = (v))
/* s1, s2 [j0, j0 + CB) <- a channel block's sums a0|a1 and q0|q1. */
#define store_sums(s1, s2, j0, a0, a1, q0, q1)                                                 \
    (store8d((s1) + (j0), a0), store8d((s1) + (j0) + 8, a1), store8d((s2) + (j0), q0),         \
     store8d((s2) + (j0) + 8, q1))

/* s1, s2 [j0, c) <- 0: the leftover channels' sums, which the rows add to. */
static inline void zero_sums(double *s1, double *s2, int64_t j0, int64_t c) {
    for (int64_t j = j0; j < c; j++) s1[j] = s2[j] = 0.0;
}

/* s1 = sum (x - shift), s2 = sum (x - shift)^2 over rows [lo, hi). */
#define STATS_ROWS(T)                                                                        \
    PR_CLONES static void stats_rows_##T(const elem_##T *restrict x, const float *restrict shift, \
                                      int64_t lo, int64_t hi, int64_t c, double *restrict s1,  \
                                      double *restrict s2) {                                   \
        zero_sums(s1, s2, c / CB * CB, c); /* the leftover channels' */                       \
        int64_t j0 = 0;                                                                        \
        for (; j0 + CB <= c; j0 += CB) {                                                       \
            v8d sh0 = widen(ld8_f32(shift + j0)), sh1 = widen(ld8_f32(shift + j0 + 8));        \
            v8d a0 = {0}, a1 = {0}, q0 = {0}, q1 = {0};                                        \
            for (int64_t r = lo; r < hi; r++) {                                                \
                const elem_##T *xr = x + r * c + j0;                                           \
                v8d d0 = widen(ld8_##T(xr)) - sh0, d1 = widen(ld8_##T(xr + 8)) - sh1;          \
                a0 += d0;                                                                      \
                a1 += d1;                                                                      \
                q0 += d0 * d0;                                                                 \
                q1 += d1 * d1;                                                                 \
            }                                                                                  \
            store_sums(s1, s2, j0, a0, a1, q0, q1);                                            \
        }                                                                                      \
        for (int64_t r = lo; r < hi && j0 < c; r++)                                            \
            for (int64_t j = j0; j < c; j++) {                                                 \
                double d = (double)ld_##T(x, r * c + j) - shift[j];                            \
                s1[j] += d;                                                                    \
                s2[j] += d * d;                                                                \
            }                                                                                  \
    }

/* s1 = sum g, s2 = sum g * (x - mean) over rows [lo, hi), where g is dy,
 * or, when ra is not NULL (a BN whose output went through a ReLU), dy where
 * the BN output x * ra + rb (recomputed exactly as affine_rows computes and
 * stores it, rounded to T) is not <= 0, else 0 (NaN passes, as
 * pr_k_relu_backward); if dx is not NULL also dx = g * a (the inference
 * backward's single pass). */
#define GRAD_STATS_ROWS(T)                                                                     \
    PR_CLONES static void grad_stats_rows_##T(                                                    \
        const elem_##T *restrict dy, const elem_##T *restrict x, const float *restrict mean,   \
        const float *restrict a, const float *restrict ra, const float *restrict rb,           \
        int64_t lo, int64_t hi, int64_t c, double *restrict s1, double *restrict s2,           \
        elem_##T *restrict dx) {                                                               \
        zero_sums(s1, s2, c / CB * CB, c); /* the leftover channels' */                       \
        int64_t j0 = 0;                                                                        \
        const v8f zero = {0};                                                                  \
        for (; j0 + CB <= c; j0 += CB) {                                                       \
            v8f mu0 = ld8_f32(mean + j0), mu1 = ld8_f32(mean + j0 + 8);                        \
            v8f ra0 = zero, ra1 = zero, rb0 = zero, rb1 = zero;                                \
            if (ra) {                                                                          \
                ra0 = ld8_f32(ra + j0), ra1 = ld8_f32(ra + j0 + 8);                            \
                rb0 = ld8_f32(rb + j0), rb1 = ld8_f32(rb + j0 + 8);                            \
            }                                                                                  \
            v8d a0 = {0}, a1 = {0}, q0 = {0}, q1 = {0};                                        \
            for (int64_t r = lo; r < hi; r++) {                                                \
                const elem_##T *xr = x + r * c + j0, *gr = dy + r * c + j0;                    \
                v8f x0 = ld8_##T(xr), x1 = ld8_##T(xr + 8);                                    \
                v8f g0 = ld8_##T(gr), g1 = ld8_##T(gr + 8);                                    \
                if (ra) {                                                                      \
                    g0 = (v8f)((v8i)g0 & ~(rnd8_##T(x0 * ra0 + rb0) <= zero));                 \
                    g1 = (v8f)((v8i)g1 & ~(rnd8_##T(x1 * ra1 + rb1) <= zero));                 \
                }                                                                              \
                v8d w0 = widen(g0), w1 = widen(g1);                                            \
                a0 += w0;                                                                      \
                a1 += w1;                                                                      \
                q0 += w0 * widen(x0 - mu0);                                                    \
                q1 += w1 * widen(x1 - mu1);                                                    \
            }                                                                                  \
            store_sums(s1, s2, j0, a0, a1, q0, q1);                                            \
        }                                                                                      \
        for (int64_t r = lo; r < hi && j0 < c; r++)                                            \
            for (int64_t j = j0; j < c; j++) {                                                 \
                float g = ld_##T(dy, r * c + j), xv = ld_##T(x, r * c + j);                    \
                if (ra && rnd_##T(xv * ra[j] + rb[j]) <= 0.0f) g = 0.0f;                       \
                s1[j] += g;                                                                    \
                s2[j] += (double)g * (xv - mean[j]);                                           \
            }                                                                                  \
        for (int64_t r = lo; r < hi && dx; r++)                                                \
            for (int64_t j = 0; j < c; j++)                                                    \
                st_##T(dx, r * c + j, ld_##T(dy, r * c + j) * a[j]);                           \
    }

/* The elementwise passes are bound by memory traffic, not arithmetic. */

/* y = x * a + b over rows [lo, hi); then + res (when not NULL: the
 * residual add after a BN), then max(y, 0) when relu (jit_compile's fused
 * BN + ReLU and BN + add + ReLU).  The same float operations in the same
 * order as the unfused ops, and with bfloat16 activations the same
 * roundings (each op's output: the BN's, the add's; a ReLU's is exact), so
 * the results are bit for bit theirs. */
#define AFFINE_ROWS(T)                                                                         \
    PR_CLONES static void affine_rows_##T(const elem_##T *restrict x, const float *restrict a,    \
                                       const float *restrict b, const elem_##T *restrict res,  \
                                       int64_t lo, int64_t hi, int64_t c,                      \
                                       elem_##T *restrict y, int relu) {                       \
        if (res && relu) {                                                                     \
            for (int64_t r = lo; r < hi; r++)                                                  \
                for (int64_t j = 0; j < c; j++) {                                              \
                    int64_t i = r * c + j;                                                     \
                    float v = rnd_##T(ld_##T(x, i) * a[j] + b[j]);                             \
                    v = rnd_##T(v + ld_##T(res, i));                                           \
                    put_##T(y, i, v <= 0.0f ? 0.0f : v); /* NaN passes, as pr_k_relu */        \
                }                                                                              \
            return;                                                                            \
        }                                                                                      \
        if (relu) {                                                                            \
            for (int64_t r = lo; r < hi; r++)                                                  \
                for (int64_t j = 0; j < c; j++) {                                              \
                    float v = rnd_##T(ld_##T(x, r * c + j) * a[j] + b[j]);                     \
                    put_##T(y, r * c + j, v <= 0.0f ? 0.0f : v);                               \
                }                                                                              \
            return;                                                                            \
        }                                                                                      \
        if (res) {                                                                             \
            for (int64_t r = lo; r < hi; r++)                                                  \
                for (int64_t j = 0; j < c; j++) {                                              \
                    int64_t i = r * c + j;                                                     \
                    st_##T(y, i, rnd_##T(ld_##T(x, i) * a[j] + b[j]) + ld_##T(res, i));        \
                }                                                                              \
            return;                                                                            \
        }                                                                                      \
        for (int64_t r = lo; r < hi; r++)                                                      \
            for (int64_t j = 0; j < c; j++)                                                    \
                st_##T(y, r * c + j, ld_##T(x, r * c + j) * a[j] + b[j]);                      \
    }

/* dx = A * g + B * (x - mean) + C over rows [lo, hi), g = dy masked as in
 * grad_stats_rows when ra is not NULL; dy and x of type TI, dx stored as TO
 * (bfloat16: rounded to nearest even, as the cast op rounds). */
#define DX_ROWS(TI, TO)                                                                        \
    PR_CLONES static void dx_rows_##TI##_##TO(                                                    \
        const elem_##TI *dy, const elem_##TI *x, const float *restrict mean,                   \
        const float *restrict A, const float *restrict B, const float *restrict C,             \
        const float *restrict ra, const float *restrict rb, int64_t lo, int64_t hi, int64_t c, \
        elem_##TO *dx) { /* dx may be dy or x (a compiled graph's in-place output) */          \
        if (ra) {                                                                              \
            for (int64_t r = lo; r < hi; r++)                                                  \
                for (int64_t j = 0; j < c; j++) {                                              \
                    int64_t i = r * c + j;                                                     \
                    /* an unconditional load lets the loop vectorize */                        \
                    float g = ld_##TI(dy, i), xv = ld_##TI(x, i);                              \
                    g = rnd_##TI(xv * ra[j] + rb[j]) <= 0.0f ? 0.0f : g;                       \
                    st_##TO(dx, i, A[j] * g + B[j] * (xv - mean[j]) + C[j]);                   \
                }                                                                              \
            return;                                                                            \
        }                                                                                      \
        for (int64_t r = lo; r < hi; r++)                                                      \
            for (int64_t j = 0; j < c; j++) {                                                  \
                int64_t i = r * c + j;                                                         \
                st_##TO(dx, i, A[j] * ld_##TI(dy, i) + B[j] * (ld_##TI(x, i) - mean[j]) + C[j]); \
            }                                                                                  \
    }

STATS_ROWS(f32)
STATS_ROWS(bf16)
GRAD_STATS_ROWS(f32)
GRAD_STATS_ROWS(bf16)
AFFINE_ROWS(f32)
AFFINE_ROWS(bf16)
DX_ROWS(f32, f32)
DX_ROWS(f32, bf16)
DX_ROWS(bf16, bf16)
DX_ROWS(bf16, f32)

/* ---- AVX-512 row loops for c a multiple of 16 ------------------------------
 * The GCC vector code above, compiled for AVX-512, splits its mixed 256/512-bit
 * vectors and spills them; with intrinsics the same operations, in the same
 * order and with the same roundings (so bit for bit the same results), run
 * with 16 channels in one register.  Used when the CPU has AVX-512 F and
 * PYRESNET_KERNELS=reference is not set (the suite runs both). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "cpu.h"
#define HAVE_ROWS16 1
#define AVX512 __attribute__((target("avx512f")))

static inline AVX512 __m512 ld16_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline AVX512 __m512 ld16_bf16(const uint16_t *p) { return pr_bf16_load16_ps(p); }
static inline AVX512 __m512 rnd16_f32(__m512 v) { return v; }
/* v rounded to bfloat16 as rnd_bf16, as float32. */
static inline AVX512 __m512 rnd16_bf16(__m512 v) { return pr_bf16_round16_ps(v); }
static inline AVX512 void st16_f32(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
static inline AVX512 void st16_bf16(uint16_t *p, __m512 v) {
    _mm256_storeu_si256((__m256i *)p, pr_bf16_round16(v));
}
#define LO8(v) _mm512_cvtps_pd(_mm512_castps512_ps256(v))
#define HI8(v) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))

/* stats_rows for c % 16 == 0. */
#define STATS16(T)                                                                             \
    AVX512 static void stats16_##T(const elem_##T *x, const float *shift, int64_t lo,          \
                                   int64_t hi, int64_t c, double *s1, double *s2) {            \
        for (int64_t j0 = 0; j0 < c; j0 += 16) {                                               \
            __m512 shf = _mm512_loadu_ps(shift + j0);                                          \
            __m512d sh0 = LO8(shf), sh1 = HI8(shf), z = _mm512_setzero_pd();                   \
            __m512d a0 = z, a1 = z, q0 = z, q1 = z;                                            \
            for (int64_t r = lo; r < hi; r++) {                                                \
                __m512 v = ld16_##T(x + r * c + j0);                                           \
                __m512d d0 = _mm512_sub_pd(LO8(v), sh0), d1 = _mm512_sub_pd(HI8(v), sh1);      \
                a0 = _mm512_add_pd(a0, d0), a1 = _mm512_add_pd(a1, d1);                        \
                q0 = _mm512_add_pd(q0, _mm512_mul_pd(d0, d0));                                 \
                q1 = _mm512_add_pd(q1, _mm512_mul_pd(d1, d1));                                 \
            }                                                                                  \
            _mm512_storeu_pd(s1 + j0, a0), _mm512_storeu_pd(s1 + j0 + 8, a1);                  \
            _mm512_storeu_pd(s2 + j0, q0), _mm512_storeu_pd(s2 + j0 + 8, q1);                  \
        }                                                                                      \
    }

/* The ReLU mask of the fused backward: g where the BN output (x * ra + rb,
 * rounded to T) is not <= 0 (NaN passes). */
#define MASKED(T, g, v, ra, rb)                                                                \
    _mm512_maskz_mov_ps((__mmask16) ~_mm512_cmp_ps_mask(                                       \
                            rnd16_##T(_mm512_add_ps(_mm512_mul_ps(v, ra), rb)),                \
                            _mm512_setzero_ps(), _CMP_LE_OQ), g)

/* grad_stats_rows for c % 16 == 0, without dx. */
#define GRAD_STATS16(T)                                                                        \
    AVX512 static void grad_stats16_##T(const elem_##T *dy, const elem_##T *x,                \
                                        const float *mean, const float *ra, const float *rb,   \
                                        int64_t lo, int64_t hi, int64_t c, double *s1,         \
                                        double *s2) {                                          \
        for (int64_t j0 = 0; j0 < c; j0 += 16) {                                               \
            __m512 mu = _mm512_loadu_ps(mean + j0), ra16 = _mm512_setzero_ps(), rb16 = ra16;   \
            if (ra) ra16 = _mm512_loadu_ps(ra + j0), rb16 = _mm512_loadu_ps(rb + j0);          \
            __m512d z = _mm512_setzero_pd(), a0 = z, a1 = z, q0 = z, q1 = z;                   \
            for (int64_t r = lo; r < hi; r++) {                                                \
                __m512 v = ld16_##T(x + r * c + j0), g = ld16_##T(dy + r * c + j0);            \
                if (ra) g = MASKED(T, g, v, ra16, rb16);                                       \
                __m512d w0 = LO8(g), w1 = HI8(g);                                              \
                __m512 d = _mm512_sub_ps(v, mu);                                               \
                a0 = _mm512_add_pd(a0, w0), a1 = _mm512_add_pd(a1, w1);                        \
                q0 = _mm512_add_pd(q0, _mm512_mul_pd(w0, LO8(d)));                             \
                q1 = _mm512_add_pd(q1, _mm512_mul_pd(w1, HI8(d)));                             \
            }                                                                                  \
            _mm512_storeu_pd(s1 + j0, a0), _mm512_storeu_pd(s1 + j0 + 8, a1);                  \
            _mm512_storeu_pd(s2 + j0, q0), _mm512_storeu_pd(s2 + j0 + 8, q1);                  \
        }                                                                                      \
    }

/* affine_rows for c % 16 == 0: rounded to T after each op as there. */
#define AFFINE16(T)                                                                            \
    AVX512 static void affine16_##T(const elem_##T *x, const float *a, const float *b,        \
                                    const elem_##T *res, int64_t lo, int64_t hi, int64_t c,    \
                                    elem_##T *y, int relu) {                                   \
        for (int64_t r = lo; r < hi; r++)                                                      \
            for (int64_t j = 0; j < c; j += 16) {                                              \
                const int64_t i = r * c + j;                                                   \
                __m512 v = _mm512_add_ps(_mm512_mul_ps(ld16_##T(x + i), _mm512_loadu_ps(a + j)), \
                                         _mm512_loadu_ps(b + j));                              \
                if (res) v = _mm512_add_ps(rnd16_##T(v), ld16_##T(res + i));                  \
                if (relu) {                                                                    \
                    v = rnd16_##T(v);                                                          \
                    v = _mm512_maskz_mov_ps(                                                   \
                        (__mmask16) ~_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ), v); \
                }                                                                              \
                st16_##T(y + i, v);                                                            \
            }                                                                                  \
    }

/* dx_rows for c % 16 == 0. */
#define DX16(TI, TO)                                                                           \
    AVX512 static void dx16_##TI##_##TO(const elem_##TI *dy, const elem_##TI *x,              \
                                        const float *mean, const float *A, const float *B,     \
                                        const float *C, const float *ra, const float *rb,      \
                                        int64_t lo, int64_t hi, int64_t c, elem_##TO *dx) {    \
        for (int64_t r = lo; r < hi; r++)                                                      \
            for (int64_t j = 0; j < c; j += 16) {                                              \
                const int64_t i = r * c + j;                                                   \
                __m512 v = ld16_##TI(x + i), g = ld16_##TI(dy + i);                            \
                if (ra) g = MASKED(TI, g, v, _mm512_loadu_ps(ra + j), _mm512_loadu_ps(rb + j)); \
                __m512 t = _mm512_add_ps(                                                      \
                    _mm512_mul_ps(_mm512_loadu_ps(A + j), g),                                  \
                    _mm512_mul_ps(_mm512_loadu_ps(B + j), _mm512_sub_ps(v, _mm512_loadu_ps(mean + j)))); \
                st16_##TO(dx + i, _mm512_add_ps(t, _mm512_loadu_ps(C + j)));                   \
            }                                                                                  \
    }

STATS16(f32)
STATS16(bf16)
GRAD_STATS16(f32)
GRAD_STATS16(bf16)
AFFINE16(f32)
AFFINE16(bf16)
DX16(f32, f32)
DX16(bf16, bf16)
DX16(f32, bf16)

static int rows16(int64_t c) {
    return c % 16 == 0 && pr_cpu_fast(PR_CPU_AVX512F);
}

/* ---- AVX2 statistics loops for float32 and c a multiple of 16 -------------
 * The generic statistics loops, compiled for AVX2, widen to double in
 * 64-byte vectors that GCC lowers piecewise: batch_norm_train ran at 4-7x
 * a ReLU pass on AMD Zen 3 (ideal: 2x).  These are the same operations in
 * the same order and with the same roundings (bit for bit the same sums),
 * 16 channels at a time in four ymm double accumulators per sum.  Used
 * where the AVX-512 loops are not (PYRESNET_KERNELS=avx2 chooses them on an
 * AVX-512 CPU). */
#define AVX2_NORM __attribute__((target("avx2")))

/* The double of floats 0-3 and 4-7 of v. */
#define LO4(v) _mm256_cvtps_pd(_mm256_castps256_ps128(v))
#define HI4(v) _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))

/* stats_rows_f32. */
AVX2_NORM static void stats16_avx2(const float *x, const float *shift, int64_t lo, int64_t hi,
                                   int64_t c, double *s1, double *s2) {
    for (int64_t j0 = 0; j0 < c; j0 += 16) {
        __m256d sh[4], a[4], q[4];
        for (int i = 0; i < 4; i++) {
            sh[i] = _mm256_cvtps_pd(_mm_loadu_ps(shift + j0 + 4 * i));
            a[i] = q[i] = _mm256_setzero_pd();
        }
        for (int64_t r = lo; r < hi; r++)
            for (int i = 0; i < 4; i++) {
                __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + r * c + j0 + 4 * i)),
                                          sh[i]);
                a[i] = _mm256_add_pd(a[i], d);
                q[i] = _mm256_add_pd(q[i], _mm256_mul_pd(d, d));
            }
        for (int i = 0; i < 4; i++) {
            _mm256_storeu_pd(s1 + j0 + 4 * i, a[i]);
            _mm256_storeu_pd(s2 + j0 + 4 * i, q[i]);
        }
    }
}

/* grad_stats_rows_f32 without dx. */
AVX2_NORM static void grad_stats16_avx2(const float *dy, const float *x, const float *mean,
                                        const float *ra, const float *rb, int64_t lo,
                                        int64_t hi, int64_t c, double *s1, double *s2) {
    const __m256 zero = _mm256_setzero_ps();
    for (int64_t j0 = 0; j0 < c; j0 += 16) {
        __m256 mu[2], ra8[2] = {zero, zero}, rb8[2] = {zero, zero};
        __m256d a[4], q[4];
        for (int h = 0; h < 2; h++) {
            mu[h] = _mm256_loadu_ps(mean + j0 + 8 * h);
            if (ra) ra8[h] = _mm256_loadu_ps(ra + j0 + 8 * h), rb8[h] = _mm256_loadu_ps(rb + j0 + 8 * h);
        }
        for (int i = 0; i < 4; i++) a[i] = q[i] = _mm256_setzero_pd();
        for (int64_t r = lo; r < hi; r++)
            for (int h = 0; h < 2; h++) {
                __m256 v = _mm256_loadu_ps(x + r * c + j0 + 8 * h);
                __m256 g = _mm256_loadu_ps(dy + r * c + j0 + 8 * h);
                if (ra) /* dy where the BN output is not <= 0 (NaN passes) */
                    g = _mm256_andnot_ps(
                        _mm256_cmp_ps(_mm256_add_ps(_mm256_mul_ps(v, ra8[h]), rb8[h]), zero,
                                      _CMP_LE_OQ),
                        g);
                __m256 d = _mm256_sub_ps(v, mu[h]);
                __m256d w0 = LO4(g), w1 = HI4(g);
                a[2 * h] = _mm256_add_pd(a[2 * h], w0);
                a[2 * h + 1] = _mm256_add_pd(a[2 * h + 1], w1);
                q[2 * h] = _mm256_add_pd(q[2 * h], _mm256_mul_pd(w0, LO4(d)));
                q[2 * h + 1] = _mm256_add_pd(q[2 * h + 1], _mm256_mul_pd(w1, HI4(d)));
            }
        for (int i = 0; i < 4; i++) {
            _mm256_storeu_pd(s1 + j0 + 4 * i, a[i]);
            _mm256_storeu_pd(s2 + j0 + 4 * i, q[i]);
        }
    }
}

static int rows16_avx2(int64_t c, pr_dtype xt) {
    return xt == PR_F32 && c % 16 == 0 && !pr_cpu_fast(PR_CPU_AVX512F) &&
           pr_cpu_fast(PR_CPU_AVX2);
}
#else
#define HAVE_ROWS16 0
static int rows16(int64_t c) { return 0; }
#endif

/* Add the chunk partials into the first chunk's 2c slots, in chunk order. */
static void combine(double *part, int64_t nc, int64_t c) {
    for (int64_t k = 1; k < nc; k++)
        for (int64_t j = 0; j < 2 * c; j++) part[j] += part[k * 2 * c + j];
}

/* y = x * a + b with a = gamma / sqrt(var + eps), b = beta - mean * a from
 * the float mean and variance: the training forward, the inference pass and
 * the fused BN + ReLU backward (which recomputes the ReLU's input) all get
 * the same a and b from the same statistics. */
static void affine_coefs(const float *gamma, const float *beta, const float *mean,
                         const float *var, int64_t c, double eps, float *a, float *b) {
    for (int64_t j = 0; j < c; j++) {
        double gi = gamma[j] / sqrt((double)var[j] + eps);
        a[j] = (float)gi;
        b[j] = (float)(beta[j] - mean[j] * gi);
    }
}

/* ---- kernels -------------------------------------------------------------- */

#define BF(t) ((t) == PR_BF16)

/* Row loops of the activations' type. */
static void stats_rows(const void *x, pr_dtype xt, const float *shift, int64_t lo, int64_t hi,
                       int64_t c, double *s1, double *s2) {
#if HAVE_ROWS16
    if (rows16(c)) {
        if (BF(xt)) stats16_bf16(x, shift, lo, hi, c, s1, s2);
        else stats16_f32(x, shift, lo, hi, c, s1, s2);
        return;
    }
    if (rows16_avx2(c, xt)) {
        stats16_avx2(x, shift, lo, hi, c, s1, s2);
        return;
    }
#endif
    if (BF(xt)) stats_rows_bf16(x, shift, lo, hi, c, s1, s2);
    else stats_rows_f32(x, shift, lo, hi, c, s1, s2);
}

static void grad_stats_rows(const void *dy, const void *x, pr_dtype xt, const float *mean,
                            const float *a, const float *ra, const float *rb, int64_t lo,
                            int64_t hi, int64_t c, double *s1, double *s2, void *dx) {
#if HAVE_ROWS16
    if (!dx && rows16(c)) {
        if (BF(xt)) grad_stats16_bf16(dy, x, mean, ra, rb, lo, hi, c, s1, s2);
        else grad_stats16_f32(dy, x, mean, ra, rb, lo, hi, c, s1, s2);
        return;
    }
    if (!dx && rows16_avx2(c, xt)) {
        grad_stats16_avx2(dy, x, mean, ra, rb, lo, hi, c, s1, s2);
        return;
    }
#endif
    if (BF(xt)) grad_stats_rows_bf16(dy, x, mean, a, ra, rb, lo, hi, c, s1, s2, dx);
    else grad_stats_rows_f32(dy, x, mean, a, ra, rb, lo, hi, c, s1, s2, dx);
}

static void affine_rows(const void *x, pr_dtype xt, const float *a, const float *b,
                        const void *res, int64_t lo, int64_t hi, int64_t c, void *y, int relu) {
#if HAVE_ROWS16
    if (rows16(c)) {
        if (BF(xt)) affine16_bf16(x, a, b, res, lo, hi, c, y, relu);
        else affine16_f32(x, a, b, res, lo, hi, c, y, relu);
        return;
    }
#endif
    if (BF(xt)) affine_rows_bf16(x, a, b, res, lo, hi, c, y, relu);
    else affine_rows_f32(x, a, b, res, lo, hi, c, y, relu);
}

static void dx_rows(const void *dy, const void *x, pr_dtype xt, const float *mean,
                    const float *A, const float *B, const float *C, const float *ra,
                    const float *rb, int64_t lo, int64_t hi, int64_t c, void *dx,
                    pr_dtype dxt) {
#if HAVE_ROWS16
    if (rows16(c) && (BF(xt) == BF(dxt) || !BF(xt))) {
        if (BF(xt)) dx16_bf16_bf16(dy, x, mean, A, B, C, ra, rb, lo, hi, c, dx);
        else if (BF(dxt)) dx16_f32_bf16(dy, x, mean, A, B, C, ra, rb, lo, hi, c, dx);
        else dx16_f32_f32(dy, x, mean, A, B, C, ra, rb, lo, hi, c, dx);
        return;
    }
#endif
    if (BF(xt) && BF(dxt)) dx_rows_bf16_bf16(dy, x, mean, A, B, C, ra, rb, lo, hi, c, dx);
    else if (BF(xt)) dx_rows_bf16_f32(dy, x, mean, A, B, C, ra, rb, lo, hi, c, dx);
    else if (BF(dxt)) dx_rows_f32_bf16(dy, x, mean, A, B, C, ra, rb, lo, hi, c, dx);
    else dx_rows_f32_f32(dy, x, mean, A, B, C, ra, rb, lo, hi, c, dx);
}

/* y <- affine_rows of every row of x with the coefficients (into a, b) of
 * gamma, beta, mean, var, chunk by chunk in parallel. */
static void normalize(const void *x, pr_dtype xt, const float *gamma, const float *beta,
                      const float *mean, const float *var, const void *res, int64_t m, int64_t c,
                      double eps, void *y, float *a, float *b, int relu) {
    int64_t nc = n_chunks(m);
    affine_coefs(gamma, beta, mean, var, c, eps, a, b);
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        affine_rows(x, xt, a, b, res, CHUNK_LO(k), CHUNK_HI(k), c, y, relu);
}

/* part[0, 2c) <- grad_stats_rows over every row, chunk by chunk in parallel
 * and combined in chunk order. */
static void grad_stats(const void *dy, const void *x, pr_dtype xt, const float *mean,
                       const float *a, const float *ra, const float *rb, int64_t m, int64_t c,
                       double *part, void *dx) {
    int64_t nc = n_chunks(m);
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        grad_stats_rows(dy, x, xt, mean, a, ra, rb, CHUNK_LO(k), CHUNK_HI(k), c,
                        part + k * 2 * c, part + k * 2 * c + c, dx);
    combine(part, nc, c);
}

int pr_k_bn_train(const void *x, const float *gamma, const float *beta, const void *res,
                  pr_dtype xt, int64_t m, int64_t c, double eps, void *y, float *mean,
                  float *var, void *scratch, int relu) {
    int64_t nc = n_chunks(m);
    double *part = scratch;
    float *a = coefs(scratch, m, c), *b = a + c, *shift = b + c;
    /* sums of x - x[row 0]: no cancellation in E[d^2] - E[d]^2.  A
     * non-finite first row shifts by 0 instead, so that NaN and Inf reach
     * the statistics as in NumPy (an Inf gives mean Inf, variance NaN). */
    for (int64_t j = 0; j < c; j++) {
        float x0 = BF(xt) ? ld_bf16(x, j) : ld_f32(x, j);
        shift[j] = isfinite(x0) ? x0 : 0.0f;
    }
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        stats_rows(x, xt, shift, CHUNK_LO(k), CHUNK_HI(k), c, part + k * 2 * c,
                   part + k * 2 * c + c);
    combine(part, nc, c);
    for (int64_t j = 0; j < c; j++) {
        double mu = part[j] / m, v = part[c + j] / m - mu * mu;
        v = v < 0.0 ? 0.0 : v; /* rounding may go below 0; NaN stays NaN */
        mean[j] = (float)(shift[j] + mu);
        var[j] = (float)v;
    }
    normalize(x, xt, gamma, beta, mean, var, res, m, c, eps, y, a, b, relu);
    return PR_OK;
}

int pr_k_bn_train_backward(const void *dy, const void *x, pr_dtype xt, const float *gamma,
                           const float *beta, const float *mean, const float *var, int64_t m,
                           int64_t c, double eps, void *dx, pr_dtype dxt, float *dgamma,
                           float *dbeta, void *scratch, int relu) {
    int64_t nc = n_chunks(m);
    double *part = scratch;
    float *A = coefs(scratch, m, c), *B = A + c, *C = B + c, *ra = NULL, *rb = NULL;
    if (relu) {
        ra = C + c, rb = ra + c;
        affine_coefs(gamma, beta, mean, var, c, eps, ra, rb);
    }
    grad_stats(dy, x, xt, mean, NULL, ra, rb, m, c, part, NULL);
    /* dx = A * g + B * (x - mean) + C per channel. */
    for (int64_t j = 0; j < c; j++) {
        double inv = 1.0 / sqrt((double)var[j] + eps), gi = gamma[j] * inv;
        double db = part[j], dg = part[c + j] * inv;
        dbeta[j] = (float)db;
        dgamma[j] = (float)dg;
        A[j] = (float)gi;
        B[j] = (float)(-gi * inv * dg / m);
        C[j] = (float)(-gi * db / m);
    }
#pragma omp parallel for num_threads(pr_get_num_threads()) if (m * c >= PARALLEL_MIN)
    for (int64_t k = 0; k < nc; k++)
        dx_rows(dy, x, xt, mean, A, B, C, ra, rb, CHUNK_LO(k), CHUNK_HI(k), c, dx, dxt);
    return PR_OK;
}

int pr_k_bn_infer(const void *x, const float *gamma, const float *beta, const float *mean,
                  const float *var, pr_dtype xt, int64_t m, int64_t c, double eps, void *y,
                  void *scratch, int relu) {
    float *a = coefs(scratch, m, c);
    normalize(x, xt, gamma, beta, mean, var, NULL, m, c, eps, y, a, a + c, relu);
    return PR_OK;
}

int pr_k_bn_infer_backward(const void *dy, const void *x, pr_dtype xt, const float *gamma,
                           const float *mean, const float *var, int64_t m, int64_t c,
                           double eps, void *dx, float *dgamma, float *dbeta, void *scratch) {
    double *part = scratch;
    float *a = coefs(scratch, m, c);
    for (int64_t j = 0; j < c; j++) a[j] = (float)(gamma[j] / sqrt((double)var[j] + eps));
    grad_stats(dy, x, xt, mean, a, NULL, NULL, m, c, part, dx);
    for (int64_t j = 0; j < c; j++) {
        dbeta[j] = (float)part[j];
        dgamma[j] = (float)(part[c + j] / sqrt((double)var[j] + eps));
    }
    return PR_OK;
}
