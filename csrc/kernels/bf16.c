/* bfloat16 conversions (bf16.h): plain loops over large arrays, split
 * across our OpenMP threads; each element is converted on its own, so the
 * results do not depend on the split. */
#include "bf16.h"

#define PAR_MIN 65536 /* elements below which one thread converts */

void pr_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN) num_threads(pr_get_num_threads())
    for (int64_t i = 0; i < n; i++) dst[i] = pr_bf16_from_f32(src[i]);
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
