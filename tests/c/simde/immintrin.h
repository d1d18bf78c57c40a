/* test shim: AVX-512 intrinsics emulated by SIMDe (no native code), plus
 * the few SIMDe 0.7.4 lacks, element by element (masked lanes untouched) */
#ifndef SHIM_IMMINTRIN
#define SHIM_IMMINTRIN
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <stdint.h>
#include <string.h>
#undef _mm_prefetch
#define _mm_prefetch(p, h) ((void)(p))
#ifndef _MM_HINT_T1
#define _MM_HINT_T1 2
#endif
typedef uint16_t __mmask16;
typedef uint32_t __mmask32;
static inline void _mm256_mask_storeu_epi16(void *p, __mmask16 m, __m256i v) {
    uint16_t a[16]; memcpy(a, &v, 32);
    for (int i = 0; i < 16; i++) if (m >> i & 1) memcpy((char *)p + 2 * i, &a[i], 2);
}
static inline __m256i _mm256_maskz_loadu_epi16(__mmask16 m, const void *p) {
    uint16_t a[16] = {0}; __m256i v;
    for (int i = 0; i < 16; i++) if (m >> i & 1) memcpy(&a[i], (const char *)p + 2 * i, 2);
    memcpy(&v, a, 32); return v;
}
static inline __m512i _mm512_maskz_loadu_epi16(__mmask32 m, const void *p) {
    uint16_t a[32] = {0}; __m512i v;
    for (int i = 0; i < 32; i++) if (m >> i & 1) memcpy(&a[i], (const char *)p + 2 * i, 2);
    memcpy(&v, a, 64); return v;
}
static inline __m512 _mm512_maskz_loadu_ps(__mmask16 m, const void *p) {
    float a[16] = {0}; __m512 v;
    for (int i = 0; i < 16; i++) if (m >> i & 1) memcpy(&a[i], (const char *)p + 4 * i, 4);
    memcpy(&v, a, 64); return v;
}
static inline void _mm512_mask_storeu_epi32(void *p, __mmask16 m, __m512i v) {
    uint32_t a[16]; memcpy(a, &v, 64);
    for (int i = 0; i < 16; i++) if (m >> i & 1) memcpy((char *)p + 4 * i, &a[i], 4);
}
static inline void _mm512_mask_storeu_ps(void *p, __mmask16 m, __m512 v) {
    float a[16]; memcpy(a, &v, 64);
    for (int i = 0; i < 16; i++) if (m >> i & 1) memcpy((char *)p + 4 * i, &a[i], 4);
}
static inline __m256i _mm512_cvtepi32_epi16(__m512i v) {
    uint32_t a[16]; uint16_t b[16]; __m256i r; memcpy(a, &v, 64);
    for (int i = 0; i < 16; i++) b[i] = (uint16_t)a[i];
    memcpy(&r, b, 32); return r;
}
static inline __m512i _mm512_cvtepu16_epi32(__m256i v) {
    uint16_t a[16]; uint32_t b[16]; __m512i r; memcpy(a, &v, 32);
    for (int i = 0; i < 16; i++) b[i] = a[i];
    memcpy(&r, b, 64); return r;
}
static inline __m512 _mm512_shuffle_f32x4(__m512 a, __m512 b, int imm) {
    float x[16], y[16], r[16]; __m512 v; memcpy(x, &a, 64); memcpy(y, &b, 64);
    for (int l = 0; l < 4; l++) memcpy(r + 4 * l, (l < 2 ? x : y) + 4 * (imm >> (2 * l) & 3), 16);
    memcpy(&v, r, 64); return v;
}
#endif
