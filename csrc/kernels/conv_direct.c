/* Direct NHWC convolutions with AVX-512 F: no im2col, the output tile in
 * registers.
 *
 * Every pass is a sum over taps (kh, kw) and input channels c of a
 * broadcast input value times a vector of 16 output channels:
 *   forward          y[oh, ow, o]  += xpad[oh*sh + kh, ow*sw + kw, c] * w[kh, kw, c, o]
 *   backprop_input   dx[ih, iw, c] += dypad[(ih + ph - kh)/sh, (iw + pw - kw)/sw, o]
 *                                     * w[kh, kw, c, o]
 *                    over the taps whose division is exact: the output is split
 *                    into sh x sw phases (ih % sh, iw % sw), each a stride-1 sum
 *                    over its own taps (the sub-pixel split of a transposed
 *                    convolution, Dumoulin & Visin 2016, "A guide to convolution
 *                    arithmetic", section 4);
 *   backprop_filter  dw[kh, kw, c, o] += xpad[oh*sh + kh, ow*sw + kw, c] * dy[oh, ow, o].
 * Forward and backprop_input first copy each image (x, or dy) into a
 * zero-padded buffer of channel-major rows (one pass over the activations
 * instead of im2col's KH*KW; a tile's pixels along one channel are then
 * consecutive, so its broadcasts have constant offsets), and the inner loops
 * have no bounds checks; backprop_filter reads x in place, each tap over the
 * output pixels whose input is inside the image.
 * The output tile is held in zmm accumulators: forward and
 * backprop_input a run of WT output pixels x NB blocks of 16 output channels
 * (weights repacked once per call into 16-channel blocks, zero-padded, so a
 * block is one aligned load), backprop_filter a run of CT input channels x
 * NB blocks of 16 output channels summed over all pixels; WT * NB and
 * CT * NB stay at or below 24 of the 32 zmm registers (the technique of
 * LIBXSMM's and oneDNN's direct convolutions: Georganas et al., "Anatomy of
 * High-Performance Deep Learning Convolutions on SIMD Architectures", SC18,
 * section 3).  Windows three taps wide share each broadcast among the taps
 * that read the same column (tile3 for forward and backprop_input, two or
 * three taps; filter_image3 for the weight gradient with one block of
 * output channels).  Channel counts that are not multiples of 16 use
 * masked loads and stores.  While an image computes, the next one is
 * prefetched into L2, a few lines per output row.
 *
 * Threads: forward and backprop_input take whole images; backprop_filter
 * deals images round-robin to a fixed number of stripes (from the shapes
 * only), sums each stripe into its own partial gradient and adds the
 * partials in stripe order, so results do not depend on the thread count.
 */
#include "conv_direct.h"
#include "conv_direct_geom.h"

#include <string.h>

#define MAX_TILE 24                      /* accumulators per tile */
#define MAX_NB 4                         /* 16-channel blocks per tile */

/* ---- geometry (portable; the rest in conv_direct_geom.h) ------------------ */

/* Widest tile for nb blocks, then the balanced width for a run of `len`. */
static int tile_width(int nb, int64_t len) {
    int64_t cap = MAX_TILE / nb, tiles = (len + cap - 1) / cap;
    return (int)(tiles ? (len + tiles - 1) / tiles : 1);
}

int pr_conv_direct_supports(const pr_window *g, pr_conv_pass pass) {
    /* forward tiles step through x by the stride: compiled for 1 and 2 */
    int64_t max_sw = pass == PR_CONV_FORWARD ? 2 : MAX_STRIDE;
    /* A 1x1 window's forward and backprop_input are one GEMM over the pixels
     * (or a quarter of them): the reference's sgemm on x in place is faster
     * there (bench/conv.py); its filter gradient is faster here. */
    if (g->kh * g->kw == 1 && pass != PR_CONV_BACKPROP_FILTER) return 0;
    return g->kh >= 1 && g->kw >= 1 && g->kh <= MAX_WINDOW && g->kw <= MAX_WINDOW &&
           g->sh >= 1 && g->sw >= 1 && g->sh <= MAX_STRIDE && g->sw <= max_sw && g->c >= 1 &&
           g->o >= 1 && g->ho >= 1 && g->wo >= 1;
}

size_t pr_conv_direct_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    int64_t slot = slot_floats(g, pass);
    return sizeof(float) * (size_t)(round16(packed_floats(g, pass)) + count_slots(g->n, slot) * slot);
}

/* ---- AVX-512 ---------------------------------------------------------------- */

#if defined(__x86_64__)
#include <immintrin.h>
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,fma")
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Ask for a tile's output lines (for writing): they arrive while the tile
 * computes, so its stores do not wait on memory. */
ALWAYS_INLINE void prefetch_tile(float *out, int64_t os, const int WT, const int NB) {
#pragma GCC unroll 24
    for (int p = 0; p < WT; p++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) __builtin_prefetch(out + p * os + 16 * b, 1, 3);
}

/* Ask for part i of `parts` of the next image's `bytes` at p (NULL: none)
 * into L2 while this one computes, so the copy that starts it does not wait
 * on memory. */
ALWAYS_INLINE void prefetch_part(const void *p, int64_t bytes, int64_t i, int64_t parts) {
    if (!p) return;
    for (int64_t b = bytes * i / parts & ~(int64_t)63; b < bytes * (i + 1) / parts; b += 64)
        _mm_prefetch((const char *)p + b, _MM_HINT_T1);
}

/* Store a tile: pixel p, block b at out + p*os + 16*b; block NB-1 masked. */
ALWAYS_INLINE void store_tile(__m512 acc[MAX_NB][MAX_TILE], float *out, int64_t os,
                              __mmask16 mask, const int WT, const int NB) {
#pragma GCC unroll 24
    for (int p = 0; p < WT; p++) {
        float *o = out + p * os;
#pragma GCC unroll 4
        for (int b = 0; b < NB - 1; b++) _mm512_storeu_ps(o + 16 * b, acc[b][p]);
        _mm512_mask_storeu_ps(o + 16 * (NB - 1), mask, acc[NB - 1][p]);
    }
}

/* One output tile of WT pixels x NB channel blocks: a sum over taps and
 * input channels.  The input is in channel-major rows: pixel p of the tile,
 * channel c, tap t is in[toff[t] + c*cs + p*SW] (cs: the floats of one
 * channel's run; SW: the stride, a compile-time constant, so every
 * broadcast is one FMA with a constant displacement).  w[t] points at tap
 * t's (cin x 16) weights of the first channel block; block b is `wob`
 * floats further.  Pixel p is written at out + p*os (`mask` selects the
 * channels of block NB-1). */
typedef struct {
    const float *in;
    int64_t cs, cin, wob, os;
    const int64_t *toff;
    const float *const *w;
    int taps;
    float *out;
    __mmask16 mask;
} tile_args;

ALWAYS_INLINE void tile_body(const tile_args *A, const int WT, const int NB, const int SW) {
    __m512 acc[MAX_NB][MAX_TILE];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 24
        for (int p = 0; p < WT; p++) acc[b][p] = _mm512_setzero_ps();
    const int64_t cs = A->cs, cin = A->cin, wob = A->wob;
    prefetch_tile(A->out, A->os, WT, NB);
    for (int t = 0; t < A->taps; t++) {
        const float *a = A->in + A->toff[t], *wt = A->w[t];
        for (int64_t c = 0; c < cin; c++, a += cs, wt += 16) {
            __m512 wv[MAX_NB];
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) wv[b] = _mm512_load_ps(wt + b * wob);
#pragma GCC unroll 24
            for (int p = 0; p < WT; p++) {
                __m512 xv = _mm512_set1_ps(a[p * SW]);
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++) acc[b][p] = _mm512_fmadd_ps(xv, wv[b], acc[b][p]);
            }
        }
    }
    store_tile(acc, A->out, A->os, A->mask, WT, NB);
}

/* r[i] (pixel i, 16 channels) -> r[c] (channel c, 16 pixels): unpack pairs,
 * then pairs of pairs, then 128-bit lanes twice. */
ALWAYS_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++) {
            t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
            t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    }
}

/* Copy a (rows_in, cols_in, ch) image into a (prows, pcols) zero-padded
 * window at offset (top, left), in channel-major rows: row r of the buffer is
 * ch runs of pcols floats, so a tile's pixels along one channel are consecutive (forward and
 * backprop_input broadcast from them at constant offsets).  16 x 16 blocks
 * of (pixels, channels) are transposed in registers, the rest one by one.
 * Only the image's own pixels are written: the padding around them is the
 * same for every image, so the buffer is zeroed once per call (`fresh`: the
 * buffer's first image of this call). */
static void pad_rows_cm(const float *src, int64_t rows_in, int64_t cols_in, int64_t ch, float *dst,
                        int64_t prows, int64_t pcols, int64_t top, int64_t left, int fresh) {
    int64_t lo = left < 0 ? 0 : left, hi = left + cols_in < pcols ? left + cols_in : pcols;
    int64_t n = hi - lo;
    if (fresh) memset(dst, 0, sizeof(float) * (size_t)(prows * ch * pcols));
    for (int64_t r = 0; r < prows; r++) {
        float *d = dst + r * ch * pcols;
        int64_t ir = r - top;
        if (ir < 0 || ir >= rows_in || n <= 0) continue;
        const float *row = src + (ir * cols_in + lo - left) * ch;
        int64_t c0 = 0;
        for (; c0 + 16 <= ch; c0 += 16) {
            int64_t q0 = 0;
            for (; q0 + 16 <= n; q0 += 16) {
                __m512 v[16];
                for (int i = 0; i < 16; i++) v[i] = _mm512_loadu_ps(row + (q0 + i) * ch + c0);
                transpose16(v);
                for (int c = 0; c < 16; c++) _mm512_storeu_ps(d + (c0 + c) * pcols + lo + q0, v[c]);
            }
            for (int64_t c = c0; c < c0 + 16; c++)
                for (int64_t q = q0; q < n; q++) d[c * pcols + lo + q] = row[q * ch + c];
        }
        for (int64_t c = c0; c < ch; c++)
            for (int64_t q = 0; q < n; q++) d[c * pcols + lo + q] = row[q * ch + c];
    }
}

typedef void (*tile_fn)(const tile_args *);

#define TILE(WT, NB, SW) \
    static void tile_##WT##_##NB##_##SW(const tile_args *A) { tile_body(A, WT, NB, SW); }
#define TILES_6(NB, SW) TILE(1, NB, SW) TILE(2, NB, SW) TILE(3, NB, SW) TILE(4, NB, SW) \
    TILE(5, NB, SW) TILE(6, NB, SW)
#define TILES_7_8(NB, SW) TILE(7, NB, SW) TILE(8, NB, SW)
#define TILES_9_12(NB, SW) TILE(9, NB, SW) TILE(10, NB, SW) TILE(11, NB, SW) TILE(12, NB, SW)
#define TILES_13_24(NB, SW) TILE(13, NB, SW) TILE(14, NB, SW) TILE(15, NB, SW) \
    TILE(16, NB, SW) TILE(17, NB, SW) TILE(18, NB, SW) TILE(19, NB, SW) TILE(20, NB, SW) \
    TILE(21, NB, SW) TILE(22, NB, SW) TILE(23, NB, SW) TILE(24, NB, SW)
#define ALL_TILES(SW) \
    TILES_6(1, SW) TILES_7_8(1, SW) TILES_9_12(1, SW) TILES_13_24(1, SW) \
    TILES_6(2, SW) TILES_7_8(2, SW) TILES_9_12(2, SW) \
    TILES_6(3, SW) TILES_7_8(3, SW) \
    TILES_6(4, SW)
ALL_TILES(1)
ALL_TILES(2)

#define REF6(NB, SW) tile_1_##NB##_##SW, tile_2_##NB##_##SW, tile_3_##NB##_##SW, \
    tile_4_##NB##_##SW, tile_5_##NB##_##SW, tile_6_##NB##_##SW
#define REF7_8(NB, SW) tile_7_##NB##_##SW, tile_8_##NB##_##SW
#define REF9_12(NB, SW) tile_9_##NB##_##SW, tile_10_##NB##_##SW, tile_11_##NB##_##SW, \
    tile_12_##NB##_##SW
#define REF13_24(NB, SW) tile_13_##NB##_##SW, tile_14_##NB##_##SW, tile_15_##NB##_##SW, \
    tile_16_##NB##_##SW, tile_17_##NB##_##SW, tile_18_##NB##_##SW, tile_19_##NB##_##SW, \
    tile_20_##NB##_##SW, tile_21_##NB##_##SW, tile_22_##NB##_##SW, tile_23_##NB##_##SW, \
    tile_24_##NB##_##SW
/* tiles[SW - 1][NB][WT - 1] */
static const tile_fn tiles[2][MAX_NB + 1][MAX_TILE] = {
    {{NULL}, {REF6(1, 1), REF7_8(1, 1), REF9_12(1, 1), REF13_24(1, 1)},
     {REF6(2, 1), REF7_8(2, 1), REF9_12(2, 1)}, {REF6(3, 1), REF7_8(3, 1)}, {REF6(4, 1)}},
    {{NULL}, {REF6(1, 2), REF7_8(1, 2), REF9_12(1, 2), REF13_24(1, 2)},
     {REF6(2, 2), REF7_8(2, 2), REF9_12(2, 2)}, {REF6(3, 2), REF7_8(3, 2)}, {REF6(4, 2)}},
};

static __mmask16 tail_mask(int64_t channels) {
    int64_t r = channels % 16;
    return r ? (__mmask16)((1u << r) - 1) : (__mmask16)0xFFFF;
}

/* One output row segment of `len` pixels, all output channel blocks:
 * A.in / A.out at pixel 0, A.w at block 0; `cout` output channels; pixel
 * stride `sw` (1 or 2) in the input rows. */
static void row_tiles(tile_args A, int64_t len, int64_t cout, int64_t sw) {
    int64_t nob = blocks16(cout);
    for (int64_t ob = 0; ob < nob; ob += MAX_NB) {
        int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
        int wt = tile_width(nb, len);
        const float *wb[MAX_WINDOW * MAX_WINDOW];
        for (int t = 0; t < A.taps; t++) wb[t] = A.w[t] + ob * A.wob;
        tile_args T = A;
        T.w = wb;
        T.mask = ob + nb == nob ? tail_mask(cout) : (__mmask16)0xFFFF;
        for (int64_t p = 0; p < len; p += wt) { /* the last tile may be narrower */
            int width = (int)(len - p < wt ? len - p : wt);
            T.in = A.in + p * sw;
            T.out = A.out + p * A.os + ob * 16;
            tiles[sw - 1][nb][width - 1](&T);
        }
    }
}

/* Windows K = 3 (or 2) taps wide: a tile of WT pixels x NB blocks that walks
 * each window row's input columns once.  Input column q feeds tap k of pixel
 * p when q = p*SW + k, so one broadcast serves up to K FMAs (stride 1)
 * instead of one: fewer loads per FMA, and the tile runs at 85% of the FMA
 * peak where the one-tap tile reaches 70% (bench on the 16-channel layers).
 * in + roff[r] + c*cs + q is column q of window row r, channel c; w[K*r + k]
 * the weights of row r, tap k (block 0; block b `wob` floats further).
 * K = 2 serves the input gradient of stride-2 3x3 windows, whose phases
 * read two adjacent dy columns per window row. */
typedef struct {
    const float *in;
    int64_t cs, cin, wob, os;
    const int64_t *roff;
    const float *const *w;
    int rows, accumulate; /* accumulate: add to what out holds (a later channel chunk) */
    float *out;
    __mmask16 mask;
} tile3_args;

ALWAYS_INLINE void tile3_body(const tile3_args *A, const int WT, const int NB, const int SW,
                              const int K) {
    __m512 acc[MAX_NB][MAX_TILE];
    if (A->accumulate) {
#pragma GCC unroll 24
        for (int p = 0; p < WT; p++) {
#pragma GCC unroll 4
            for (int b = 0; b < NB - 1; b++) acc[b][p] = _mm512_loadu_ps(A->out + p * A->os + 16 * b);
            acc[NB - 1][p] = _mm512_maskz_loadu_ps(A->mask, A->out + p * A->os + 16 * (NB - 1));
        }
    } else {
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
#pragma GCC unroll 24
            for (int p = 0; p < WT; p++) acc[b][p] = _mm512_setzero_ps();
#pragma GCC unroll 24
        for (int p = 0; p < WT; p++)
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) __builtin_prefetch(A->out + p * A->os + 16 * b, 1, 3);
    }
    const int64_t cs = A->cs, cin = A->cin, wob = A->wob;
    for (int r = 0; r < A->rows; r++) {
        const float *a = A->in + A->roff[r];
        const float *const *wr = A->w + K * r; /* this row's taps */
        for (int64_t c = 0; c < cin; c++, a += cs) {
            __m512 wv[3][MAX_NB];
#pragma GCC unroll 3
            for (int k = 0; k < K; k++)
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++) wv[k][b] = _mm512_load_ps(wr[k] + c * 16 + b * wob);
#pragma GCC unroll 56
            for (int q = 0; q < (WT - 1) * SW + K; q++) {
                __m512 xv = _mm512_set1_ps(a[q]);
#pragma GCC unroll 3
                for (int k = 0; k < K; k++) {
                    int p = (q - k) / SW;
                    if (q < k || (q - k) % SW || p >= WT) continue;
#pragma GCC unroll 4
                    for (int b = 0; b < NB; b++) acc[b][p] = _mm512_fmadd_ps(xv, wv[k][b], acc[b][p]);
                }
            }
        }
    }
    store_tile(acc, A->out, A->os, A->mask, WT, NB);
}

typedef void (*tile3_fn)(const tile3_args *);
#define MAX_TILE3_NB1 24
/* At most two channel blocks: with 4 (64 output channels at once) the
 * tiles are 4 pixels wide and 64->64 convolutions ran 10% slower. */
#define MAX_NB3 2
static const int tile3_cap[MAX_NB3 + 1] = {0, MAX_TILE3_NB1, 8};

/* Kinds V: 1 and 2 are K = 3 at strides 1 and 2, 3 is K = 2 at stride 1. */
#define TILE3(WT, NB, V)                                                   \
    static void tile3_##WT##_##NB##_##V(const tile3_args *A) {              \
        tile3_body(A, WT, NB, (V) == 2 ? 2 : 1, (V) == 3 ? 2 : 3);         \
    }
#define T3_4(NB, SW) TILE3(1, NB, SW) TILE3(2, NB, SW) TILE3(3, NB, SW) TILE3(4, NB, SW)
#define T3_6(NB, SW) T3_4(NB, SW) TILE3(5, NB, SW) TILE3(6, NB, SW)
#define T3_8(NB, SW) T3_6(NB, SW) TILE3(7, NB, SW) TILE3(8, NB, SW)
#define T3_24(NB, SW) T3_8(NB, SW) TILE3(9, NB, SW) TILE3(10, NB, SW) TILE3(11, NB, SW) \
    TILE3(12, NB, SW) TILE3(13, NB, SW) TILE3(14, NB, SW) TILE3(15, NB, SW) TILE3(16, NB, SW) \
    TILE3(17, NB, SW) TILE3(18, NB, SW) TILE3(19, NB, SW) TILE3(20, NB, SW) TILE3(21, NB, SW) \
    TILE3(22, NB, SW) TILE3(23, NB, SW) TILE3(24, NB, SW)
#define ALL_TILES3(SW) T3_24(1, SW) T3_8(2, SW)
ALL_TILES3(1)
ALL_TILES3(2)
ALL_TILES3(3)

#define R3_4(NB, SW) tile3_1_##NB##_##SW, tile3_2_##NB##_##SW, tile3_3_##NB##_##SW, \
    tile3_4_##NB##_##SW
#define R3_6(NB, SW) R3_4(NB, SW), tile3_5_##NB##_##SW, tile3_6_##NB##_##SW
#define R3_8(NB, SW) R3_6(NB, SW), tile3_7_##NB##_##SW, tile3_8_##NB##_##SW
#define R3_24(NB, SW) R3_8(NB, SW), tile3_9_##NB##_##SW, tile3_10_##NB##_##SW, \
    tile3_11_##NB##_##SW, tile3_12_##NB##_##SW, tile3_13_##NB##_##SW, tile3_14_##NB##_##SW, \
    tile3_15_##NB##_##SW, tile3_16_##NB##_##SW, tile3_17_##NB##_##SW, tile3_18_##NB##_##SW, \
    tile3_19_##NB##_##SW, tile3_20_##NB##_##SW, tile3_21_##NB##_##SW, tile3_22_##NB##_##SW, \
    tile3_23_##NB##_##SW, tile3_24_##NB##_##SW
/* tiles3[V - 1][NB][WT - 1] */
static const tile3_fn tiles3[3][MAX_NB3 + 1][MAX_TILE3_NB1] = {
    {{NULL}, {R3_24(1, 1)}, {R3_8(2, 1)}},
    {{NULL}, {R3_24(1, 2)}, {R3_8(2, 2)}},
    {{NULL}, {R3_24(1, 3)}, {R3_8(2, 3)}},
};

/* Weights a tile may stream per pass over its input channels: more than L1
 * holds beside the input rows and the tiles fetch them from L2 once per
 * tile (64 channels: 147 KB per tile of 4 pixels), so the channels are cut
 * into chunks whose weights fit, the tiles of a row summing chunk by chunk
 * into the output. */
#define TILE_WEIGHT_BYTES (24 << 10)

/* row_tiles for windows k = 3 taps wide at stride sw = 1 or 2, or k = 2 at
 * stride 1 (tile3). */
static void row_tiles3(tile3_args A, int64_t len, int64_t cout, int64_t sw, int k) {
    const int kind = k == 2 ? 2 : (int)sw - 1;
    int64_t nob = blocks16(cout), cin = A.cin;
    for (int64_t ob = 0; ob < nob; ob += MAX_NB3) {
        int nb = (int)(nob - ob < MAX_NB3 ? nob - ob : MAX_NB3);
        int64_t cap = tile3_cap[nb], tiles = (len + cap - 1) / cap;
        int wt = (int)((len + tiles - 1) / tiles);
        int64_t chunk = TILE_WEIGHT_BYTES / (k * A.rows * nb * 64);
        chunk = chunk < 16 ? 16 : chunk / 16 * 16;
        if (chunk > cin) chunk = cin;
        tile3_args T = A;
        T.mask = ob + nb == nob ? tail_mask(cout) : (__mmask16)0xFFFF;
        for (int64_t c0 = 0; c0 < cin; c0 += chunk) {
            const float *wb[3 * MAX_WINDOW];
            for (int t = 0; t < k * A.rows; t++) wb[t] = A.w[t] + ob * A.wob + c0 * 16;
            T.w = wb;
            T.cin = cin - c0 < chunk ? cin - c0 : chunk;
            T.accumulate = c0 > 0;
            for (int64_t p = 0; p < len; p += wt) {
                int width = (int)(len - p < wt ? len - p : wt);
                T.in = A.in + p * sw + c0 * A.cs;
                T.out = A.out + p * A.os + ob * 16;
                tiles3[kind][nb][width - 1](&T);
            }
        }
    }
}

/* w (KH, KW, C, O) -> [blocks of 16][KH*KW][the other channels][16],
 * zero-padded: blocks of output channels for the forward pass (by_c = 0),
 * of input channels for backprop_input (by_c = 1: the transposed filter). */
static void pack_weights(const pr_window *g, const float *w, int by_c, float *wp) {
    const int64_t taps = g->kh * g->kw, C = g->c, O = g->o;
    const int64_t nb = by_c ? C : O, ni = by_c ? O : C;
    for (int64_t blk = 0; blk < blocks16(nb); blk++)
        for (int64_t t = 0; t < taps; t++)
            for (int64_t i = 0; i < ni; i++) {
                float *dst = wp + ((blk * taps + t) * ni + i) * 16;
                for (int64_t j = 0; j < 16; j++) {
                    int64_t b = blk * 16 + j, c = by_c ? b : i, o = by_c ? i : b;
                    dst[j] = b < nb ? w[(t * C + c) * O + o] : 0.0f;
                }
            }
}

int pr_conv_direct_forward(const pr_window *g, const float *x, const float *w, float *y,
                           void *scratch) {
    const int64_t taps = g->kh * g->kw, C = g->c, O = g->o, HP = xpad_rows(g), WP = xpad_cols(g);
    const int64_t slot = slot_floats(g, PR_CONV_FORWARD), slots = count_slots(g->n, slot);
    float *wp = scratch, *pads = wp + round16(packed_floats(g, PR_CONV_FORWARD));
    pack_weights(g, w, 0, wp);
    int64_t toff[MAX_WINDOW * MAX_WINDOW], roff[MAX_WINDOW];
    const float *wt[MAX_WINDOW * MAX_WINDOW];
    for (int64_t kh = 0; kh < g->kh; kh++) {
        roff[kh] = kh * C * WP;
        for (int64_t kw = 0; kw < g->kw; kw++) {
            int64_t t = kh * g->kw + kw;
            toff[t] = kh * C * WP + kw;
            wt[t] = wp + t * C * 16;
        }
    }
#pragma omp parallel num_threads(threads_for(slots))
    {
        float *xp = pads + THREAD_ID() * slot;
        int fresh = 1;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g->n; n++) {
            pad_rows_cm(x + n * g->h * g->w * C, g->h, g->w, C, xp, HP, WP, g->ph, g->pw, fresh);
            fresh = 0;
            tile_args A = {.cs = WP, .cin = C, .wob = taps * C * 16, .os = O, .toff = toff,
                           .w = wt, .taps = (int)taps};
            tile3_args A3 = {.cs = WP, .cin = C, .wob = taps * C * 16, .os = O, .roff = roff,
                             .w = wt, .rows = (int)g->kh};
            const float *next = n + 1 < g->n ? x + (n + 1) * g->h * g->w * C : NULL;
            for (int64_t oh = 0; oh < g->ho; oh++) {
                prefetch_part(next, 4 * g->h * g->w * C, oh, g->ho);
                A.in = A3.in = xp + oh * g->sh * C * WP;
                A.out = A3.out = y + (n * g->ho + oh) * g->wo * O;
                if (g->kw == 3) row_tiles3(A3, g->wo, O, g->sw, 3);
                else row_tiles(A, g->wo, O, g->sw);
            }
        }
    }
    return PR_OK;
}

int pr_conv_direct_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                                  void *scratch) {
    const int64_t taps = g->kh * g->kw, C = g->c, O = g->o;
    const int64_t DR = dypad_rows(g), DC = dypad_cols(g);
    const int64_t slot = slot_floats(g, PR_CONV_BACKPROP_INPUT), slots = count_slots(g->n, slot);
    float *wp = scratch, *pads = wp + round16(packed_floats(g, PR_CONV_BACKPROP_INPUT));
    pack_weights(g, w, 1, wp);
#pragma omp parallel num_threads(threads_for(slots))
    {
        float *dp = pads + THREAD_ID() * slot;
        int fresh = 1;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g->n; n++) {
            float *dxn = dx + n * g->h * g->w * C;
            const float *next = n + 1 < g->n ? dy + (n + 1) * g->ho * g->wo * O : NULL;
            pad_rows_cm(dy + n * g->ho * g->wo * O, g->ho, g->wo, O, dp, DR, DC, g->kh, g->kw,
                        fresh);
            fresh = 0;
            for (int64_t rh = 0; rh < g->sh && rh < g->h; rh++)
                for (int64_t rw = 0; rw < g->sw && rw < g->w; rw++) {
                    /* This phase's taps: dx[i*sh + rh, j*sw + rw] reads dy[i + di, j + dj]. */
                    int64_t toff[MAX_WINDOW * MAX_WINDOW];
                    const float *wt[MAX_WINDOW * MAX_WINDOW];
                    int nt = 0;
                    for (int64_t kh = 0; kh < g->kh; kh++) {
                        int64_t u = rh + g->ph - kh;
                        if (((u % g->sh) + g->sh) % g->sh) continue;
                        for (int64_t kw = 0; kw < g->kw; kw++) {
                            int64_t v = rw + g->pw - kw;
                            if (((v % g->sw) + g->sw) % g->sw) continue;
                            toff[nt] = (u / g->sh) * O * DC + v / g->sw;
                            wt[nt++] = wp + (kh * g->kw + kw) * O * 16;
                        }
                    }
                    /* Windows three taps wide: this phase's window rows each read
                     * kc = 3 (stride 1 across) or 2 adjacent dy columns, tap k at
                     * column offset v0 + k, its weights those of column kwmax - k*sw:
                     * tile3 over each tap row. */
                    int kc = 0, nr = 0;
                    int64_t kwmax = 0;
                    for (int64_t kw = 0; g->kw == 3 && kw < 3; kw++)
                        if (((rw + g->pw - kw) % g->sw + g->sw) % g->sw == 0) kc++, kwmax = kw;
                    int use3 = kc >= 2;
                    int64_t roff3[MAX_WINDOW];
                    const float *w3[3 * MAX_WINDOW];
                    for (int64_t kh = 0; use3 && kh < g->kh; kh++) {
                        int64_t u = rh + g->ph - kh;
                        if (((u % g->sh) + g->sh) % g->sh) continue;
                        roff3[nr] = (u / g->sh) * O * DC + (rw + g->pw - kwmax) / g->sw;
                        for (int k = 0; k < kc; k++)
                            w3[kc * nr + k] = wp + (kh * 3 + kwmax - k * g->sw) * O * 16;
                        nr++;
                    }
                    int64_t rows = (g->h - rh + g->sh - 1) / g->sh;
                    int64_t cols = (g->w - rw + g->sw - 1) / g->sw;
                    for (int64_t i = 0; i < rows; i++) {
                        if (rh == 0 && rw == 0) prefetch_part(next, 4 * g->ho * g->wo * O, i, rows);
                        float *out = dxn + ((i * g->sh + rh) * g->w + rw) * C;
                        if (nt == 0) { /* no tap reaches these pixels */
                            for (int64_t j = 0; j < cols; j++)
                                memset(out + j * g->sw * C, 0, sizeof(float) * (size_t)C);
                            continue;
                        }
                        const float *row = dp + (i + g->kh) * O * DC + g->kw;
                        if (use3) {
                            tile3_args A3 = {.in = row, .cs = DC, .cin = O, .wob = taps * O * 16,
                                             .os = g->sw * C, .roff = roff3, .w = w3,
                                             .rows = nr, .out = out};
                            row_tiles3(A3, cols, C, 1, kc);
                            continue;
                        }
                        tile_args A = {.in = row, .cs = DC, .cin = O, .wob = taps * O * 16,
                                       .os = g->sw * C, .toff = toff, .w = wt, .taps = nt,
                                       .out = out};
                        row_tiles(A, cols, C, 1);
                    }
                }
        }
    }
    return PR_OK;
}

/* ---- filter gradient ---------------------------------------------------------- */

/* dw[c0 .. c0+CT) x [NB blocks] += sum over a rectangle of output pixels:
 * x at pixel (r, q) is x + r*rs + q*ps (channel c0 of tap t), dy at dy +
 * r*drs + q*dps (block 0 of the group). */
typedef struct {
    const float *x, *dy;
    int64_t ps, rs, rows, cols, dps, drs, dwc;
    float *dw;
    __mmask16 mask;
    pf_span pf[2]; /* of the next image's x and dy, spread over the rows */
} ftile_args;

ALWAYS_INLINE void ftile_body(const ftile_args *A, const int CT, const int NB) {
    __m512 acc[MAX_NB][MAX_TILE];
#pragma GCC unroll 24
    for (int c = 0; c < CT; c++) {
#pragma GCC unroll 4
        for (int b = 0; b < NB - 1; b++) acc[b][c] = _mm512_loadu_ps(A->dw + c * A->dwc + 16 * b);
        acc[NB - 1][c] = _mm512_maskz_loadu_ps(A->mask, A->dw + c * A->dwc + 16 * (NB - 1));
    }
    for (int64_t r = 0; r < A->rows; r++) {
        prefetch_part(A->pf[0].p, A->pf[0].bytes, r, A->rows);
        prefetch_part(A->pf[1].p, A->pf[1].bytes, r, A->rows);
        const float *xp = A->x + r * A->rs, *dyp = A->dy + r * A->drs;
        for (int64_t q = 0; q < A->cols; q++, xp += A->ps, dyp += A->dps) {
            __m512 dv[MAX_NB];
#pragma GCC unroll 4
            for (int b = 0; b < NB - 1; b++) dv[b] = _mm512_loadu_ps(dyp + 16 * b);
            dv[NB - 1] = _mm512_maskz_loadu_ps(A->mask, dyp + 16 * (NB - 1));
#pragma GCC unroll 24
            for (int c = 0; c < CT; c++) {
                __m512 xv = _mm512_set1_ps(xp[c]);
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++) acc[b][c] = _mm512_fmadd_ps(xv, dv[b], acc[b][c]);
            }
        }
    }
#pragma GCC unroll 24
    for (int c = 0; c < CT; c++) {
#pragma GCC unroll 4
        for (int b = 0; b < NB - 1; b++) _mm512_storeu_ps(A->dw + c * A->dwc + 16 * b, acc[b][c]);
        _mm512_mask_storeu_ps(A->dw + c * A->dwc + 16 * (NB - 1), A->mask, acc[NB - 1][c]);
    }
}

#define FTILE(CT, NB) \
    static void ftile_##CT##_##NB(const ftile_args *A) { ftile_body(A, CT, NB); }
typedef void (*ftile_fn)(const ftile_args *);
FTILE(1, 1) FTILE(2, 1) FTILE(3, 1) FTILE(4, 1) FTILE(5, 1) FTILE(6, 1) FTILE(7, 1) FTILE(8, 1)
FTILE(9, 1) FTILE(10, 1) FTILE(11, 1) FTILE(12, 1) FTILE(13, 1) FTILE(14, 1) FTILE(15, 1)
FTILE(16, 1) FTILE(17, 1) FTILE(18, 1) FTILE(19, 1) FTILE(20, 1) FTILE(21, 1) FTILE(22, 1)
FTILE(23, 1) FTILE(24, 1)
FTILE(1, 2) FTILE(2, 2) FTILE(3, 2) FTILE(4, 2) FTILE(5, 2) FTILE(6, 2) FTILE(7, 2) FTILE(8, 2)
FTILE(9, 2) FTILE(10, 2) FTILE(11, 2) FTILE(12, 2)
FTILE(1, 3) FTILE(2, 3) FTILE(3, 3) FTILE(4, 3) FTILE(5, 3) FTILE(6, 3) FTILE(7, 3) FTILE(8, 3)
FTILE(1, 4) FTILE(2, 4) FTILE(3, 4) FTILE(4, 4) FTILE(5, 4) FTILE(6, 4)

static const ftile_fn ftiles1[24] = {
    ftile_1_1, ftile_2_1, ftile_3_1, ftile_4_1, ftile_5_1, ftile_6_1, ftile_7_1, ftile_8_1,
    ftile_9_1, ftile_10_1, ftile_11_1, ftile_12_1, ftile_13_1, ftile_14_1, ftile_15_1, ftile_16_1,
    ftile_17_1, ftile_18_1, ftile_19_1, ftile_20_1, ftile_21_1, ftile_22_1, ftile_23_1, ftile_24_1};
static const ftile_fn ftiles2[12] = {ftile_1_2, ftile_2_2, ftile_3_2, ftile_4_2,
                                     ftile_5_2, ftile_6_2, ftile_7_2, ftile_8_2,
                                     ftile_9_2, ftile_10_2, ftile_11_2, ftile_12_2};
static const ftile_fn ftiles3[8] = {ftile_1_3, ftile_2_3, ftile_3_3, ftile_4_3,
                                    ftile_5_3, ftile_6_3, ftile_7_3, ftile_8_3};
static const ftile_fn ftiles4[6] = {ftile_1_4, ftile_2_4, ftile_3_4, ftile_4_4, ftile_5_4, ftile_6_4};
static const ftile_fn *const ftiles[MAX_NB + 1] = {NULL, ftiles1, ftiles2, ftiles3, ftiles4};

/* Add one image's contribution to the partial gradient dw (T, C, O).  Tap
 * (kh, kw) sums over the output pixels whose input pixel is inside the
 * image (the others read padding, zeros), so x is read in place. */
static void filter_image(const pr_window *g, const float *xn, const float *dyn, float *dw,
                         const float *next_x, const float *next_dy) {
    const int64_t C = g->c, O = g->o, nob = blocks16(O);
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            /* this tap's share of the next image, asked for by its first tile */
            pf_span px = span_part(next_x, g->h * g->w * C, kh * g->kw + kw, g->kh * g->kw);
            pf_span pdy = span_part(next_dy, g->ho * g->wo * O, kh * g->kw + kw, g->kh * g->kw);
            int64_t r0, r1, q0, q1; /* output rows and columns whose tap is inside x */
            tap_range(g->h, g->ho, g->sh, g->ph, kh, &r0, &r1);
            tap_range(g->w, g->wo, g->sw, g->pw, kw, &q0, &q1);
            float *dwt = dw + (kh * g->kw + kw) * C * O;
            const float *x0 = xn + ((r0 * g->sh - g->ph + kh) * g->w + q0 * g->sw - g->pw + kw) * C;
            for (int64_t ob = 0; ob < nob && r1 > r0 && q1 > q0; ob += MAX_NB) {
                int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
                int ct = tile_width(nb, C);
                for (int64_t c0 = 0; c0 < C; c0 += ct) {
                    int n = (int)(C - c0 < ct ? C - c0 : ct);
                    ftile_args A = {.x = x0 + c0, .dy = dyn + (r0 * g->wo + q0) * O + ob * 16,
                                    .ps = g->sw * C, .rs = g->sh * g->w * C, .rows = r1 - r0,
                                    .cols = q1 - q0, .dps = O, .drs = g->wo * O, .dwc = O,
                                    .dw = dwt + c0 * O + ob * 16,
                                    .mask = ob + nb == nob ? tail_mask(O) : (__mmask16)0xFFFF,
                                    .pf = {px, pdy}};
                    ftiles[nb][n - 1](&A);
                    px = pdy = (pf_span){NULL, 0};
                }
            }
        }
}

/* Windows three taps wide (horizontal stride 1 or 2): the input-side twin of
 * tile3.  Input column q of a row feeds tap kw of output pixel ow when
 * q = ow*SW + kw - pw, so one broadcast of x[q][c] serves every tap that
 * reads column q (three at stride 1), each with the dy vector of its own
 * pixel: acc[kw][c] (16 output channels) += x[q][c] * dy[(q + pw - kw) / SW].
 * Group g is the SW columns g*SW - pw .. g*SW - pw + SW-1; they read dy of
 * pixels g - 2/SW .. g.  A tile is 3 taps x FT3_CT input channels x one
 * block of 16 output channels, summed over the output rows whose input row
 * is inside the image.  x and dy are read in place: padding contributes
 * nothing, so columns outside the image are skipped, and the groups near
 * the edges (a column outside the image, or a pixel outside 0 .. wo-1)
 * take a checked copy of the loop body. */
#define FT3_CT 8
typedef struct {
    const float *x, *dy; /* x at the input row of the first output row, column 0, channel c0;
                            dy at that output row, pixel 0, block ob */
    int64_t xrs, drs;    /* floats from one output row's input row to the next; dy rows */
    int64_t c, o, pw, w, wo, rows, groups, g_lo, g_hi; /* groups [g_lo, g_hi): no checks */
    int64_t dwt, dwc; /* dw: floats between taps kw, between input channels */
    float *dw;        /* tap (kh, 0), channel c0, output block */
    __mmask16 mask;
    pf_span pf[2]; /* of the next image's x and dy, spread over the rows */
} ftile3_args;

ALWAYS_INLINE void ftile3_group(__m512 acc[3][FT3_CT], const ftile3_args *A, const float *xr,
                                const float *dr, int64_t g, const int CT, const int SW,
                                const int checked) {
    __m512 d[3];
    int in[3] = {1, 1, 1}; /* pixel g - j exists (always, in unchecked groups) */
#pragma GCC unroll 3
    for (int j = 0; j <= 2 / SW; j++) {
        int64_t p = g - j; /* d[j]: dy of pixel g - j */
        if (checked) in[j] = p >= 0 && p < A->wo;
        /* masked only where the block is partial: a masked load costs an FMA slot */
        d[j] = !in[j]                           ? _mm512_setzero_ps()
               : A->mask == 0xFFFF              ? _mm512_loadu_ps(dr + p * A->o)
                                                : _mm512_maskz_loadu_ps(A->mask, dr + p * A->o);
    }
#pragma GCC unroll 2
    for (int s = 0; s < SW; s++) {
        int64_t q = g * SW + s - A->pw;
        if (checked && (q < 0 || q >= A->w)) continue;
        const float *xq = xr + q * A->c;
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++) {
            __m512 b = _mm512_set1_ps(xq[c]);
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++) {
                if ((s - k + 2 * SW) % SW) continue; /* column g*SW + s is no input of tap k */
                /* no such pixel: no product (x * 0 would turn an Inf or NaN of x
                 * into a NaN of a tap that never reads this column) */
                if (checked && !in[(k - s) / SW]) continue;
                acc[k][c] = _mm512_fmadd_ps(b, d[(k - s) / SW], acc[k][c]);
            }
        }
    }
}

ALWAYS_INLINE void ftile3_body(const ftile3_args *A, const int CT, const int SW) {
    __m512 acc[3][FT3_CT];
#pragma GCC unroll 3
    for (int k = 0; k < 3; k++)
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++)
            acc[k][c] = _mm512_maskz_loadu_ps(A->mask, A->dw + k * A->dwt + c * A->dwc);
    for (int64_t r = 0; r < A->rows; r++) {
        prefetch_part(A->pf[0].p, A->pf[0].bytes, r, A->rows);
        prefetch_part(A->pf[1].p, A->pf[1].bytes, r, A->rows);
        const float *xr = A->x + r * A->xrs, *dr = A->dy + r * A->drs;
        for (int64_t g = 0; g < A->g_lo; g++) ftile3_group(acc, A, xr, dr, g, CT, SW, 1);
        for (int64_t g = A->g_lo; g < A->g_hi; g++) ftile3_group(acc, A, xr, dr, g, CT, SW, 0);
        for (int64_t g = A->g_hi; g < A->groups; g++) ftile3_group(acc, A, xr, dr, g, CT, SW, 1);
    }
#pragma GCC unroll 3
    for (int k = 0; k < 3; k++)
#pragma GCC unroll 8
        for (int c = 0; c < CT; c++)
            _mm512_mask_storeu_ps(A->dw + k * A->dwt + c * A->dwc, A->mask, acc[k][c]);
}

typedef void (*ftile3_fn)(const ftile3_args *);
#define FTILE3(CT, SW) \
    static void ftile3_##CT##_##SW(const ftile3_args *A) { ftile3_body(A, CT, SW); }
#define FTILES3(SW) FTILE3(1, SW) FTILE3(2, SW) FTILE3(3, SW) FTILE3(4, SW) FTILE3(5, SW) \
    FTILE3(6, SW) FTILE3(7, SW) FTILE3(8, SW)
FTILES3(1)
FTILES3(2)
#define FREF3(SW) {ftile3_1_##SW, ftile3_2_##SW, ftile3_3_##SW, ftile3_4_##SW, ftile3_5_##SW, \
    ftile3_6_##SW, ftile3_7_##SW, ftile3_8_##SW}
static const ftile3_fn ftiles3_by_sw[2][FT3_CT] = {FREF3(1), FREF3(2)};

/* filter_image for windows three taps wide and horizontal strides 1 and 2. */
static void filter_image3(const pr_window *g, const float *xn, const float *dyn, float *dw,
                          const float *next_x, const float *next_dy) {
    const int64_t C = g->c, O = g->o, SW = g->sw, jmax = 2 / SW;
    const int64_t groups = g->wo + 3 - SW; /* every (pixel, tap) pair: pixels up to g */
    /* groups whose columns are all inside the image and whose pixels are all < wo */
    int64_t g_lo = ceil_div(g->pw, SW), top = g->w + g->pw - SW;
    int64_t g_hi = top < 0 ? 0 : top / SW + 1;
    if (g_lo < jmax) g_lo = jmax;
    if (g_hi > g->wo) g_hi = g->wo;
    if (g_hi < g_lo) g_hi = g_lo;
    for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t r0, r1; /* output rows whose tap row kh is inside x */
        tap_range(g->h, g->ho, g->sh, g->ph, kh, &r0, &r1);
        if (r1 == r0) continue;
        for (int64_t ob = 0; ob < blocks16(O); ob++)
            for (int64_t c0 = 0; c0 < C; c0 += FT3_CT) {
                int64_t part = (kh * blocks16(O) + ob) * ceil_div(C, FT3_CT) + c0 / FT3_CT;
                int64_t parts = g->kh * blocks16(O) * ceil_div(C, FT3_CT);
                int ct = (int)(C - c0 < FT3_CT ? C - c0 : FT3_CT);
                ftile3_args A = {
                    .x = xn + (r0 * g->sh - g->ph + kh) * g->w * C + c0,
                    .dy = dyn + r0 * g->wo * O + ob * 16, .xrs = g->sh * g->w * C,
                    .drs = g->wo * O, .c = C, .o = O, .pw = g->pw, .w = g->w, .wo = g->wo,
                    .rows = r1 - r0, .groups = groups, .g_lo = g_lo, .g_hi = g_hi,
                    .dwt = C * O, .dwc = O, .dw = dw + (kh * 3 * C + c0) * O + ob * 16,
                    .mask = ob + 1 == blocks16(O) ? tail_mask(O) : (__mmask16)0xFFFF,
                    .pf = {span_part(next_x, g->h * g->w * C, part, parts),
                           span_part(next_dy, g->ho * g->wo * O, part, parts)}};
                ftiles3_by_sw[g->sw - 1][ct - 1](&A);
            }
    }
}

int pr_conv_direct_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                                   void *scratch) {
    const int64_t C = g->c, O = g->o, K = g->kh * g->kw * C * O;
    const int64_t slot = slot_floats(g, PR_CONV_BACKPROP_FILTER);
    const int64_t stripes = count_slots(g->n, slot);
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)K);
        return PR_OK;
    }
    float *parts = (float *)scratch + round16(packed_floats(g, PR_CONV_BACKPROP_FILTER));
    /* filter_image3 where its three-FMA broadcasts pay: one block of output
     * channels (with two or more, filter_image's tiles already share each
     * broadcast among the blocks and skip filter_image3's edge checks;
     * 32 and 64 channels ran 1-14% slower in filter_image3) */
    const int three = g->kw == 3 && g->sw <= 2 && g->o <= 16;
#pragma omp parallel num_threads(threads_for(stripes))
    {
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            float *part = parts + s * slot;
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t n = s; n < g->n; n += stripes) {
                const float *xn = x + n * g->h * g->w * C, *dyn = dy + n * g->ho * g->wo * O;
                const int64_t m = n + stripes; /* this stripe's next image */
                const float *nx = m < g->n ? xn + stripes * g->h * g->w * C : NULL;
                const float *ndy = m < g->n ? dyn + stripes * g->ho * g->wo * O : NULL;
                if (three) filter_image3(g, xn, dyn, part, nx, ndy);
                else filter_image(g, xn, dyn, part, nx, ndy);
            }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K; i++) {
            float sum = parts[i];
            for (int64_t s = 1; s < stripes; s++) sum += parts[s * slot + i];
            dw[i] = sum;
        }
    }
    return PR_OK;
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else /* not x86-64: never called (the CPU probe finds no AVX-512) */

int pr_conv_direct_forward(const pr_window *g, const float *x, const float *w, float *y,
                           void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_direct_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                                  void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_direct_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                                   void *scratch) {
    return PR_ERR_INTERNAL;
}

#endif
