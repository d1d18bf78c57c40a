/* bfloat16 products on AMX tiles and AVX512_BF16 (gemm_bf16.h).
 *
 * AMX: eight tile registers of 16 rows x 64 bytes: C tiles 0-3 (2 x 2
 * blocks of 16 x 16 float32), A tiles 4-5 (16 rows x 32 bfloat16), B
 * tiles 6-7 (16 pairs of rows x 16 columns); one 32-row block of A meets
 * the columns of B 32 at a time.  AVX512_BF16: 8 rows x 32 columns of
 * float32 accumulators (16 zmm); each step broadcasts a pair of A entries
 * and multiplies it into a pair row of B.
 */
#include "gemm_bf16.h"

#include <string.h>

#include "bf16.h"

#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#define TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define TARGET_AMX \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

#define MB 32               /* rows of A per block: two AMX tiles of 16 rows */
#define PR_BF16_MAX_SLOTS 16 /* at most this many threads share one product */

int64_t pr_bf16_kp(int64_t k) { return (k + 31) / 32 * 32; }
int64_t pr_bf16_np(int64_t n) { return (n + 15) / 16 * 16; }

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t pr_bf16_packed_bytes(int64_t k, int64_t n) {
    return align64(sizeof(uint16_t) * (size_t)(pr_bf16_kp(k) * pr_bf16_np(n)));
}

int pr_bf16_threads(int64_t units) {
    int64_t t = pr_get_num_threads();
    return (int)(units < 1 ? 1 : units < t ? units : t);
}

int64_t pr_bf16_slots(int64_t units) {
    return units < PR_BF16_MAX_SLOTS ? units : PR_BF16_MAX_SLOTS;
}

void pr_bf16_pack_b(const void *src, pr_dtype dt, int64_t k, int64_t k2n, int64_t s1, int64_t s2,
                    int64_t n, int64_t sn, uint16_t *bp) {
    const int64_t np = pr_bf16_np(n);
    memset(bp, 0, sizeof(uint16_t) * (size_t)(pr_bf16_kp(k) * np));
    for (int64_t kk = 0; kk < k; kk++) {
        int64_t base = kk / k2n * s1 + kk % k2n * s2;
        uint16_t *dst = bp + kk / 2 * np * 2 + kk % 2;
        if (dt == PR_BF16) {
            const uint16_t *s = (const uint16_t *)src + base;
            for (int64_t j = 0; j < n; j++) dst[2 * j] = s[j * sn];
        } else {
            const float *s = (const float *)src + base;
            for (int64_t j = 0; j < n; j++) dst[2 * j] = pr_bf16_from_f32(s[j * sn]);
        }
    }
}

#if HAVE_X86

TARGET_BF16 static void convert_f32(const float *s, int64_t n, uint16_t *d) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s + i));
        _mm256_mask_storeu_epi16(d + i, m, (__m256i)h);
    }
}

void pr_bf16_convert_run(const void *src, pr_dtype dt, int64_t n, uint16_t *dst) {
    if (dt == PR_BF16) memcpy(dst, src, sizeof(uint16_t) * (size_t)n);
    else convert_f32(src, n, dst);
}

TARGET_BF16 void pr_bf16_interleave(const uint16_t *row0, const uint16_t *row1, int64_t n,
                                    uint16_t *dst) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row0 + j)));
        __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row1 + j)));
        _mm512_storeu_si512(dst + 2 * j, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
    for (; j < n; j++) dst[2 * j] = row0[j], dst[2 * j + 1] = row1[j];
}

/* ---- AMX ---------------------------------------------------------------- */

/* Palette 1, tiles 0-7 of 16 rows x 64 bytes (a constant in memory, see
 * pr_amx_tiles). */
static const pr_amx_tiles config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

TARGET_AMX void pr_amx_load(const pr_amx_tiles *t) { _tile_loadconfig(t); }

static void amx_begin(void) { pr_amx_load(&config); }

TARGET_AMX static void amx_end(void) { _tile_release(); }

TARGET_AMX static void amx_block(const uint16_t *a, int64_t lda, int64_t kp, const uint16_t *bp,
                                 int64_t np, float *ct) {
    const long sa = (long)(lda * 2), sb = (long)(np * 4), sc = (long)(np * 4);
    const uint16_t *a1 = a + 16 * lda;
    int64_t j = 0;
    for (; j + 32 <= np; j += 32) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t k = 0; k < kp; k += 32) {
            const uint16_t *b = bp + k / 2 * np * 2 + j * 2;
            _tile_loadd(4, a + k, sa);
            _tile_loadd(6, b, sb);
            _tile_loadd(5, a1 + k, sa);
            _tile_loadd(7, b + 32, sb);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 5, 6);
            _tile_dpbf16ps(2, 4, 7);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, ct + j, sc);
        _tile_stored(1, ct + 16 * np + j, sc);
        _tile_stored(2, ct + j + 16, sc);
        _tile_stored(3, ct + 16 * np + j + 16, sc);
    }
    if (j < np) { /* the last 16 columns */
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t k = 0; k < kp; k += 32) {
            _tile_loadd(4, a + k, sa);
            _tile_loadd(6, bp + k / 2 * np * 2 + j * 2, sb);
            _tile_loadd(5, a1 + k, sa);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 5, 6);
        }
        _tile_stored(0, ct + j, sc);
        _tile_stored(1, ct + 16 * np + j, sc);
    }
}

/* ---- AVX512_BF16 -------------------------------------------------------- */

/* Rows r0 .. r0 + 7 of the block, columns j .. j + 16 * nv. */
TARGET_BF16 static inline __attribute__((always_inline)) void
dp_tile(const uint16_t *a, int64_t lda, int64_t kp, const uint16_t *bp, int64_t np, float *ct,
        int64_t j, const int nv) {
    __m512 acc[8][2];
    for (int r = 0; r < 8; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < kp / 2; kk++) {
        const uint16_t *b = bp + kk * np * 2 + j * 2;
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(b);
        __m512bh b1 = nv == 2 ? (__m512bh)_mm512_loadu_si512(b + 32) : b0;
        for (int r = 0; r < 8; r++) {
            int32_t pair;
            memcpy(&pair, a + r * lda + 2 * kk, sizeof pair);
            __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], av, b0);
            if (nv == 2) acc[r][1] = _mm512_dpbf16_ps(acc[r][1], av, b1);
        }
    }
    for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(ct + r * np + j, acc[r][0]);
        if (nv == 2) _mm512_storeu_ps(ct + r * np + j + 16, acc[r][1]);
    }
}

TARGET_BF16 static void avx512_block(const uint16_t *a, int64_t lda, int64_t kp,
                                     const uint16_t *bp, int64_t np, float *ct) {
    for (int64_t r0 = 0; r0 < MB; r0 += 8) {
        int64_t j = 0;
        for (; j + 32 <= np; j += 32) dp_tile(a + r0 * lda, lda, kp, bp, np, ct + r0 * np, j, 2);
        if (j < np) dp_tile(a + r0 * lda, lda, kp, bp, np, ct + r0 * np, j, 1);
    }
}

void pr_bf16_block(pr_bf16_isa isa, const uint16_t *a, int64_t lda, int64_t kp,
                   const uint16_t *bp, int64_t np, float *ct) {
    if (isa == PR_BF16_AMX) amx_block(a, lda, kp, bp, np, ct);
    else avx512_block(a, lda, kp, bp, np, ct);
}

void pr_bf16_thread_begin(pr_bf16_isa isa) {
    if (isa == PR_BF16_AMX) amx_begin();
}

void pr_bf16_thread_end(pr_bf16_isa isa) {
    if (isa == PR_BF16_AMX) amx_end();
}

#else /* not x86-64: never called (the CPU probe finds no feature) */

void pr_bf16_convert_run(const void *src, pr_dtype dt, int64_t n, uint16_t *dst) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt == PR_BF16 ? ((const uint16_t *)src)[i]
                               : pr_bf16_from_f32(((const float *)src)[i]);
}
void pr_bf16_interleave(const uint16_t *row0, const uint16_t *row1, int64_t n,
                        uint16_t *dst) {
    for (int64_t j = 0; j < n; j++) dst[2 * j] = row0[j], dst[2 * j + 1] = row1[j];
}
void pr_bf16_block(pr_bf16_isa isa, const uint16_t *a, int64_t lda, int64_t kp,
                   const uint16_t *bp, int64_t np, float *ct) {}
void pr_bf16_thread_begin(pr_bf16_isa isa) {}
void pr_bf16_thread_end(pr_bf16_isa isa) {}
void pr_amx_load(const pr_amx_tiles *t) {}

#endif

/* ---- rows driver --------------------------------------------------------- */

static size_t slot_bytes(int64_t k, int64_t n) {
    return align64(sizeof(uint16_t) * (size_t)(MB * pr_bf16_kp(k))) +
           align64(sizeof(float) * (size_t)(MB * pr_bf16_np(n)));
}

size_t pr_bf16_rows_scratch(int64_t m, int64_t k, int64_t n) {
    return (size_t)pr_bf16_slots((m + MB - 1) / MB) * slot_bytes(k, n);
}

int pr_bf16_gemm_rows(pr_bf16_isa isa, int64_t m, int64_t k, int64_t n, pr_bf16_gather_fn gather,
                      const void *ctx, const uint16_t *bp, float *c, int64_t ldc, void *scratch) {
    const int64_t kp = pr_bf16_kp(k), np = pr_bf16_np(n), nb = (m + MB - 1) / MB;
    const size_t slot = slot_bytes(k, n);
    if (nb == 0) return PR_OK;
#pragma omp parallel num_threads(pr_bf16_threads(pr_bf16_slots(nb)))
    {
        char *mine = (char *)scratch + (size_t)THREAD_ID() * slot;
        uint16_t *a = (uint16_t *)mine;
        float *ct = (float *)(mine + align64(sizeof(uint16_t) * (size_t)(MB * kp)));
        memset(a, 0, sizeof(uint16_t) * (size_t)(MB * kp)); /* the K padding stays zero */
        pr_bf16_thread_begin(isa);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            int64_t r0 = b * MB, rows = m - r0 < MB ? m - r0 : MB;
            gather(ctx, r0, rows, a, kp);
            /* rows past `rows` keep an earlier block's values: their sums are not read */
            pr_bf16_block(isa, a, kp, kp, bp, np, ct);
            for (int64_t r = 0; r < rows; r++)
                memcpy(c + (r0 + r) * ldc, ct + r * np, sizeof(float) * (size_t)n);
        }
        pr_bf16_thread_end(isa);
    }
    return PR_OK;
}
