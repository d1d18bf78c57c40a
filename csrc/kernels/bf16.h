/* bfloat16: the upper 16 bits of an IEEE float32 (1 sign, 8 exponent and 7
 * stored significand bits, so 8 significant bits and unit roundoff 2^-8),
 * the format of Keras's "mixed_bfloat16" policy, ml_dtypes.bfloat16, the
 * AVX512_BF16 instructions and AMX-BF16 tiles (Intel "BFLOAT16 - Hardware
 * Numerics Definition", 2018).  Conversions round to nearest, ties to even,
 * as ml_dtypes and VCVTNEPS2BF16 do; NaN stays NaN (quieted). */
#ifndef PR_K_BF16_H
#define PR_K_BF16_H

#include <stdint.h>
#include <string.h>

#include "kernels.h"

static inline uint16_t pr_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float pr_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f32 value rounded to the nearest bfloat16, as a float32. */
static inline float pr_bf16_round(float f) { return pr_bf16_to_f32(pr_bf16_from_f32(f)); }

/* dst[i] = bf16(src[i]) for i < n. */
void pr_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
/* dst[i] = float(src[i]) (exact). */
void pr_bf16_to_f32_array(const uint16_t *src, float *dst, int64_t n);
/* dst[i] = float(bf16(src[i])): src as float32 after rounding to bfloat16
 * (src may be float32 or bfloat16 data, as `dtype` says; dst float32). */
void pr_bf16_rounded_f32(const void *src, pr_dtype dtype, float *dst, int64_t n);

#endif
