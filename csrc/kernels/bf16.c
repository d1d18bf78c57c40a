/* bfloat16 conversions (bf16.h): loops over large arrays split across our
 * OpenMP threads; each element is converted on its own, so the results do
 * not depend on the split.  float32 -> bfloat16 runs 16 lanes at a time
 * with AVX-512 F where the CPU has it, the same integer rounding as
 * pr_bf16_from_f32 (so the same bits, subnormals and NaNs included). */
#include "bf16.h"

#include "cpu.h"

#define PAR_MIN 65536 /* elements below which one thread converts */

#if defined(__x86_64__)

__attribute__((target("avx512f"))) static void round_avx512(const float *src, uint16_t *dst,
                                                            int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), pr_bf16_round16(_mm512_loadu_ps(src + i)));
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

static int wide_rounding(void) {
    return pr_cpu_fast(PR_CPU_AVX512F);
}

void pr_f32_to_bf16_run(const float *src, uint16_t *dst, int64_t n) {
    round_run(src, dst, n, wide_rounding());
}

void pr_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    const int wide = wide_rounding();
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
