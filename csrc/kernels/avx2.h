/* What the AVX2 + FMA kernels (conv_direct_avx2.c, conv_grouped_simd.c)
 * share: function attributes that compile one function for AVX2 + FMA
 * (chosen at run time by the CPU probe, the file itself built for the
 * baseline), loads and stores of partial blocks of 8 channels, and full unrolling of loops with compile-time trip counts, so
 * a tile's accumulators live in registers: GCC's pragma takes a maximum
 * count, clang unrolls fully only when told so in its own spelling.
 * x86-64 only: include it inside the files' `#if defined(__x86_64__)`. */
#ifndef PR_KERNELS_AVX2_H
#define PR_KERNELS_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#define AVX2_FN static __attribute__((target("avx2,fma")))
#define ALWAYS_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 64")
#endif

/* The first `lanes` of 8 channels (1 <= lanes <= 8): a block of them at p,
 * zeros in the other lanes; nothing outside them is read or written.  The
 * mask is loaded where it is used, from memory, so that it never holds one
 * of the 16 registers through a tile's loop. */
static const int32_t lane_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

ALWAYS_INLINE __m256i lane_mask(int lanes) {
    return _mm256_loadu_si256((const __m256i *)(lane_table + 8 - lanes));
}
ALWAYS_INLINE __m256 load_block(const float *p, int lanes) {
    return lanes == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(lanes));
}
ALWAYS_INLINE void store_block(float *p, __m256 v, int lanes) {
    if (lanes == 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, lane_mask(lanes), v);
}

#endif
