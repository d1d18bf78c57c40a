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

/* (a select, not a branch, so that loops over it vectorize) */
/* Element types of kernels instantiated for float32 and bfloat16 data
 * (macros of T pasting elem_##T). */
typedef float elem_f32;
typedef uint16_t elem_bf16;

static inline uint16_t pr_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40 : r); /* NaN: quiet */
}

static inline float pr_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* 16 float32 lanes rounded to bfloat16 exactly as pr_bf16_from_f32 (the
 * same integer rounding, NaN quieted), each as the float32 it is; for
 * AVX-512 F code. */
__attribute__((target("avx512f"))) static inline __m512 pr_bf16_round16_ps(__m512 x) {
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    __m512i u = _mm512_castps_si512(x);
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(half,
                                                     _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
    r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), u,
                             _mm512_set1_epi32(0x400000));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}
/* The same as 16 bfloat16 values (for a store). */
__attribute__((target("avx512f"))) static inline __m256i pr_bf16_round16(__m512 x) {
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(pr_bf16_round16_ps(x)), 16));
}
/* 16 bfloat16 values at p widened to float32 (exact). */
__attribute__((target("avx512f"))) static inline __m512 pr_bf16_load16_ps(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
#endif

/* f32 value rounded to the nearest bfloat16, as a float32. */
static inline float pr_bf16_round(float f) { return pr_bf16_to_f32(pr_bf16_from_f32(f)); }

/* dst[i] = bf16(src[i]) for i < n, split across our threads. */
void pr_f32_to_bf16(const float *src, uint16_t *dst, int64_t n);
/* The same on the calling thread (for kernels converting their own pieces). */
void pr_f32_to_bf16_run(const float *src, uint16_t *dst, int64_t n);
/* dst[i] = float(src[i]) (exact). */
void pr_bf16_to_f32_array(const uint16_t *src, float *dst, int64_t n);
/* dst[i] = float(bf16(src[i])): src as float32 after rounding to bfloat16
 * (src may be float32 or bfloat16 data, as `dtype` says; dst float32). */
void pr_bf16_rounded_f32(const void *src, pr_dtype dtype, float *dst, int64_t n);

#endif
