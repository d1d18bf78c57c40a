/* What the AVX2 + FMA kernels (conv_direct_avx2.c, conv_grouped_avx2.c)
 * share: function attributes that compile one function for AVX2 + FMA
 * (chosen at run time by the CPU probe, the file itself built for the
 * baseline), and full unrolling of loops with compile-time trip counts, so
 * a tile's accumulators live in registers: GCC's pragma takes a maximum
 * count, clang unrolls fully only when told so in its own spelling.
 * x86-64 only: include it inside the files' `#if defined(__x86_64__)`. */
#ifndef PR_KERNELS_AVX2_H
#define PR_KERNELS_AVX2_H

#include <immintrin.h>

#define AVX2_FN static __attribute__((target("avx2,fma")))
#define ALWAYS_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 64")
#endif

#endif
