/* bfloat16 conversions (bf16.h): loops over large arrays split across our
 * OpenMP threads; each element is converted on its own, so the results do
 * not depend on the split.  float32 -> bfloat16 runs 16 lanes at a time
 * with AVX-512 F where the CPU has it, the same integer rounding as
 * pr_bf16_from_f32 (so the same bits, subnormals and NaNs included). */
#include "bf16.h"

#include "cpu.h"

#define PAR_MIN 65536 /* elements below which one thread converts */

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f"))) static void round_avx512(const float *src, uint16_t *dst,
                                                            int64_t n) {
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(src + i);
        __m512i u = _mm512_castps_si512(x), high = _mm512_srli_epi32(u, 16);
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(high, one)));
        r = _mm512_srli_epi32(r, 16);
        r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), high, quiet);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    for (; i < n; i++) dst[i] = pr_bf16_from_f32(src[i]);
}
#endif

static void round_run(const float *src, uint16_t *dst, int64_t n, int wide) {
#if defined(__x86_64__)
    if (wide) {
        round_avx512(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = pr_bf16_from_f32(src[i]);
}

void pr_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    const int wide = (pr_cpu_features() & PR_CPU_AVX512F) && !pr_cpu_reference_only();
    const int64_t block = 16384, blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN) num_threads(pr_get_num_threads())
    for (int64_t b = 0; b < blocks; b++) {
        int64_t i = b * block;
        round_run(src + i, dst + i, n - i < block ? n - i : block, wide);
    }
}

void pr_bf16_to_f32_array(const uint16_t *src, float *dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN) num_threads(pr_get_num_threads())
    for (int64_t i = 0; i < n; i++) dst[i] = pr_bf16_to_f32(src[i]);
}

void pr_bf16_rounded_f32(const void *src, pr_dtype dtype, float *dst, int64_t n) {
    if (dtype == PR_BF16) {
        pr_bf16_to_f32_array(src, dst, n);
        return;
    }
    const float *s = src;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN) num_threads(pr_get_num_threads())
    for (int64_t i = 0; i < n; i++) dst[i] = pr_bf16_round(s[i]);
}
