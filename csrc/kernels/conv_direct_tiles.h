/* The register tiles of the direct AVX-512 convolutions' forward and
 * input-gradient passes, written once for two kinds of element
 * (conv_direct.c: float32 with FMA; conv_direct_bf16.c: pairs of bfloat16
 * channels with VDPBF16PS).  Internal: included inside an AVX-512 target
 * region, after defining
 *   DT              a unit of the reduced channels, 4 bytes: float, or
 *                   uint32_t holding two bfloat16 channels (2i low, 2i+1 high)
 *   BCAST(p)        a __m512 holding the unit *p in every 32-bit lane
 *   MAC(acc, x, w)  acc plus the products of x and w: per float32 lane one
 *                   FMA, or the sum of the lane's two bfloat16 products
 *   IMAGE_UNITS     (gu, pass) -> the units a slot adds to convert one
 *                   image into units (0 when images are read in place)
 *   ROW_FLOATS      (gu, pass) -> the floats a slot adds for one row of a
 *                   bfloat16 output (0 when outputs are float32 only)
 * and the function
 *   static const DT *image_units(pr_operand src, int64_t n, int64_t pixels,
 *                                int64_t ch, DT *buf)
 * returning image n (pixels x ch channels of src, NHWC) as pixels x units
 * rows, in place or converted into buf.  The drivers take the window in
 * units, `gu`: the reduced channels (C forward, O for the input gradient)
 * counted in units, the others as they are; the weights come packed in
 * units by the includer (conv_direct.c's layout, pack_weights).  Outputs are
 * float32, or bfloat16: the tiles of an output row then write the thread's
 * float32 row buffer, rounded once into the output when the row is done
 * (no float32 copy of the whole output).  See conv_direct.c for the method. */
#ifndef DT
#error "conv_direct_tiles.h: define DT, BCAST, MAC, IMAGE_UNITS and ROW_FLOATS first"
#endif
_Static_assert(sizeof(DT) == 4, "a unit is one 32-bit lane");

#define MAX_TILE 24                      /* accumulators per tile */
#define MAX_NB 4                         /* 16-channel blocks per tile */
#define MAX_IMAGE_TILE 4                 /* images per image tile (tile3) */
#define IMAGE_TILE_WIDTH 3               /* their rows' pixels, at most */

/* Widest tile for nb blocks, then the balanced width for a run of `len`. */
static int tile_width(int nb, int64_t len) {
    int64_t cap = MAX_TILE / nb, tiles = (len + cap - 1) / cap;
    return (int)(tiles ? (len + tiles - 1) / tiles : 1);
}

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

/* Load what store_tile stored (block NB-1 masked: zeros past the mask), to
 * add to it. */
ALWAYS_INLINE void load_tile(__m512 acc[MAX_NB][MAX_TILE], const float *out, int64_t os,
                             __mmask16 mask, const int WT, const int NB) {
#pragma GCC unroll 24
    for (int p = 0; p < WT; p++) {
        const float *o = out + p * os;
#pragma GCC unroll 4
        for (int b = 0; b < NB - 1; b++) acc[b][p] = _mm512_loadu_ps(o + 16 * b);
        acc[NB - 1][p] = _mm512_maskz_loadu_ps(mask, o + 16 * (NB - 1));
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
    const DT *in;
    int64_t cs, cin, wob, os;
    const int64_t *toff;
    const DT *const *w;
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
        const DT *a = A->in + A->toff[t], *wt = A->w[t];
        for (int64_t c = 0; c < cin; c++, a += cs, wt += 16) {
            __m512 wv[MAX_NB];
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) wv[b] = _mm512_load_ps((const float *)(wt + b * wob));
#pragma GCC unroll 24
            for (int p = 0; p < WT; p++) {
                __m512 xv = BCAST(a + p * SW);
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++) acc[b][p] = MAC(acc[b][p], xv, wv[b]);
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
 * of (pixels, channels) are transposed in registers (masked where fewer are
 * left: bfloat16 pairs of 16 channels are 8 units).
 * Only the image's own pixels are written: the padding around them is the
 * same for every image, so the buffer is zeroed once per call (`fresh`: the
 * buffer's first image of this call). */
static void pad_rows_cm(const DT *src, int64_t rows_in, int64_t cols_in, int64_t ch, DT *dst,
                        int64_t prows, int64_t pcols, int64_t top, int64_t left, int fresh) {
    int64_t lo = left < 0 ? 0 : left, hi = left + cols_in < pcols ? left + cols_in : pcols;
    int64_t n = hi - lo;
    if (fresh) memset(dst, 0, sizeof(DT) * (size_t)(prows * ch * pcols));
    for (int64_t r = 0; r < prows; r++) {
        DT *d = dst + r * ch * pcols;
        int64_t ir = r - top;
        if (ir < 0 || ir >= rows_in || n <= 0) continue;
        const DT *row = src + (ir * cols_in + lo - left) * ch;
        for (int64_t c0 = 0; c0 < ch; c0 += 16) {
            const int64_t cn = ch - c0 < 16 ? ch - c0 : 16;
            const __mmask16 cm = (__mmask16)((1u << cn) - 1);
            for (int64_t q0 = 0; q0 < n; q0 += 16) {
                const int64_t qn = n - q0 < 16 ? n - q0 : 16;
                __m512 v[16];
                for (int i = 0; i < 16; i++)
                    v[i] = i < qn ? _mm512_maskz_loadu_ps(
                                        cm, (const float *)(row + (q0 + i) * ch + c0))
                                  : _mm512_setzero_ps();
                transpose16(v);
                for (int c = 0; c < cn; c++)
                    _mm512_mask_storeu_ps((float *)(d + (c0 + c) * pcols + lo + q0),
                                          (__mmask16)((1u << qn) - 1), v[c]);
            }
        }
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
        const DT *wb[MAX_WINDOW * MAX_WINDOW];
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
    const DT *in;
    int64_t cs, cin, wob, os;
    const int64_t *roff;
    const DT *const *w;
    int rows, accumulate; /* accumulate: add to what out holds (a later channel chunk) */
    float *out;
    __mmask16 mask;
    int64_t is, ois; /* image tiles (IM > 1): units between the images' inputs, floats
                        between their outputs */
} tile3_args;

/* IM images' same row at once (IM > 1: rows of at most 3 pixels, the same
 * weight vectors for every image: a 3x3 image's row alone gives a tile too
 * few accumulators to hide the MAC latency). */
ALWAYS_INLINE void tile3_body(const tile3_args *A, const int WT, const int NB, const int SW,
                              const int K, const int IM) {
    __m512 acc[MAX_IMAGE_TILE][MAX_NB][MAX_TILE];
#pragma GCC unroll 4
    for (int m = 0; m < IM; m++) {
        float *out = A->out + m * A->ois;
        if (A->accumulate) {
            load_tile(acc[m], out, A->os, A->mask, WT, NB);
            continue;
        }
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
#pragma GCC unroll 24
            for (int p = 0; p < WT; p++) acc[m][b][p] = _mm512_setzero_ps();
#pragma GCC unroll 24
        for (int p = 0; p < WT; p++)
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) __builtin_prefetch(out + p * A->os + 16 * b, 1, 3);
    }
    const int64_t cs = A->cs, cin = A->cin, wob = A->wob, is = A->is;
    for (int r = 0; r < A->rows; r++) {
        const DT *a = A->in + A->roff[r];
        const DT *const *wr = A->w + K * r; /* this row's taps */
        for (int64_t c = 0; c < cin; c++, a += cs) {
            __m512 wv[3][MAX_NB];
#pragma GCC unroll 3
            for (int k = 0; k < K; k++)
#pragma GCC unroll 4
                for (int b = 0; b < NB; b++)
                    wv[k][b] = _mm512_load_ps((const float *)(wr[k] + c * 16 + b * wob));
#pragma GCC unroll 4
            for (int m = 0; m < IM; m++)
#pragma GCC unroll 56
                for (int q = 0; q < (WT - 1) * SW + K; q++) {
                    __m512 xv = BCAST(a + m * is + q);
#pragma GCC unroll 3
                    for (int k = 0; k < K; k++) {
                        int p = (q - k) / SW;
                        if (q < k || (q - k) % SW || p >= WT) continue;
#pragma GCC unroll 4
                        for (int b = 0; b < NB; b++)
                            acc[m][b][p] = MAC(acc[m][b][p], xv, wv[k][b]);
                    }
                }
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < IM; m++) store_tile(acc[m], A->out + m * A->ois, A->os, A->mask, WT, NB);
}

typedef void (*tile3_fn)(const tile3_args *);
#define MAX_TILE3_NB1 24
/* Up to four channel blocks, as wide as 32 registers allow (the K x NB
 * weights, the accumulators, a broadcast).  Rows longer than a tile of 3 or
 * 4 blocks holds take two blocks: with 4 (64 output channels at once) the
 * tiles of 15-pixel rows are 4 pixels wide and 64->64 convolutions ran 10%
 * slower.  A short row takes more blocks (4 or 5-6 pixels), or the same row
 * of four images (at most 3 pixels: image tiles, below): each accumulator
 * of a tile adds K products per reduced channel one after another, so a
 * tile of 3 pixels x 2 blocks (6 accumulators: 3x3 images) waits on the MAC
 * latency. */
#define MAX_NB3 4
static const int tile3_cap[MAX_NB3 + 1] = {0, MAX_TILE3_NB1, 8, 6, 4};
static int tile3_blocks(int64_t len) {
    return len <= tile3_cap[4] ? 4 : len <= tile3_cap[3] ? 3 : 2;
}

/* Kinds V: 1 and 2 are K = 3 at strides 1 and 2, 3 is K = 2 at stride 1. */
#define TILE3(WT, NB, V)                                                   \
    static void tile3_##WT##_##NB##_##V(const tile3_args *A) {              \
        tile3_body(A, WT, NB, (V) == 2 ? 2 : 1, (V) == 3 ? 2 : 3, 1);      \
    }
#define T3_4(NB, SW) TILE3(1, NB, SW) TILE3(2, NB, SW) TILE3(3, NB, SW) TILE3(4, NB, SW)
#define T3_6(NB, SW) T3_4(NB, SW) TILE3(5, NB, SW) TILE3(6, NB, SW)
#define T3_8(NB, SW) T3_6(NB, SW) TILE3(7, NB, SW) TILE3(8, NB, SW)
#define T3_24(NB, SW) T3_8(NB, SW) TILE3(9, NB, SW) TILE3(10, NB, SW) TILE3(11, NB, SW) \
    TILE3(12, NB, SW) TILE3(13, NB, SW) TILE3(14, NB, SW) TILE3(15, NB, SW) TILE3(16, NB, SW) \
    TILE3(17, NB, SW) TILE3(18, NB, SW) TILE3(19, NB, SW) TILE3(20, NB, SW) TILE3(21, NB, SW) \
    TILE3(22, NB, SW) TILE3(23, NB, SW) TILE3(24, NB, SW)
#define ALL_TILES3(SW) T3_24(1, SW) T3_8(2, SW) T3_6(3, SW) T3_4(4, SW)
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
    {{NULL}, {R3_24(1, 1)}, {R3_8(2, 1)}, {R3_6(3, 1)}, {R3_4(4, 1)}},
    {{NULL}, {R3_24(1, 2)}, {R3_8(2, 2)}, {R3_6(3, 2)}, {R3_4(4, 2)}},
    {{NULL}, {R3_24(1, 3)}, {R3_8(2, 3)}, {R3_6(3, 3)}, {R3_4(4, 3)}},
};

/* Image tiles: MAX_IMAGE_TILE images' rows of up to IMAGE_TILE_WIDTH
 * pixels by up to 2 blocks (24 accumulators at most), for groups of small
 * images (row_tiles3); tiles3i[V - 1][NB - 1][WT - 1]. */
#define TILE3I(WT, NB, V)                                                              \
    static void tile3i_##WT##_##NB##_##V(const tile3_args *A) {                         \
        tile3_body(A, WT, NB, (V) == 2 ? 2 : 1, (V) == 3 ? 2 : 3, MAX_IMAGE_TILE);     \
    }
#define T3I(V) TILE3I(1, 1, V) TILE3I(2, 1, V) TILE3I(3, 1, V) \
    TILE3I(1, 2, V) TILE3I(2, 2, V) TILE3I(3, 2, V)
T3I(1)
T3I(2)
T3I(3)
#define R3I(V) {{tile3i_1_1_##V, tile3i_2_1_##V, tile3i_3_1_##V}, \
    {tile3i_1_2_##V, tile3i_2_2_##V, tile3i_3_2_##V}}
static const tile3_fn tiles3i[3][2][IMAGE_TILE_WIDTH] = {R3I(1), R3I(2), R3I(3)};

/* Weights a tile may stream per pass over its input channels: more than L1
 * holds beside the input rows and the tiles fetch them from L2 once per
 * tile (64 channels: 147 KB per tile of 4 pixels), so the channels are cut
 * into chunks whose weights fit, the tiles of a row summing chunk by chunk
 * into the output. */
#define TILE_WEIGHT_BYTES (24 << 10)

/* The output rows a row_tiles3 call covers: nrows rows of each of nimg
 * images, row i of image j reading in + j*iis + i*irs and writing out +
 * j*ois + i*ors (one row: {1, 1}). */
typedef struct {
    int64_t nimg, nrows, iis, irs, ois, ors;
} row_set;
static const row_set ONE_ROW = {1, 1, 0, 0, 0, 0};

/* row_tiles for windows k = 3 taps wide at stride sw = 1 or 2, or k = 2 at
 * stride 1 (tile3), over the rows of R: each chunk of weights goes through
 * all of them before the next. */
static void row_tiles3(tile3_args A, row_set R, int64_t len, int64_t cout, int64_t sw, int k) {
    const int kind = k == 2 ? 2 : (int)sw - 1;
    int64_t nob = blocks16(cout), cin = A.cin;
    /* rows of at most IMAGE_TILE_WIDTH pixels: image tiles of 2 blocks,
     * MAX_IMAGE_TILE images at a time, the group's last ones one by one in
     * tiles of the same blocks (the same chunks: an image's sums in the same
     * order alone or in a group) */
    const int narrow = len >= 1 && len <= IMAGE_TILE_WIDTH;
    const int64_t imgs = narrow ? R.nimg / MAX_IMAGE_TILE * MAX_IMAGE_TILE : 0;
    const int nbmax = narrow ? 2 : tile3_blocks(len);
    A.is = R.iis, A.ois = R.ois;
    for (int64_t ob = 0; ob < nob; ob += nbmax) {
        int nb = (int)(nob - ob < nbmax ? nob - ob : nbmax);
        int64_t cap = tile3_cap[nb], tiles = (len + cap - 1) / cap;
        int wt = (int)((len + tiles - 1) / tiles);
        int64_t chunk = TILE_WEIGHT_BYTES / (k * A.rows * nb * 64);
        chunk = chunk < 16 ? 16 : chunk / 16 * 16;
        if (chunk > cin) chunk = cin;
        tile3_args T = A;
        T.mask = ob + nb == nob ? tail_mask(cout) : (__mmask16)0xFFFF;
        for (int64_t c0 = 0; c0 < cin; c0 += chunk) {
            const DT *wb[3 * MAX_WINDOW];
            for (int t = 0; t < k * A.rows; t++) wb[t] = A.w[t] + ob * A.wob + c0 * 16;
            T.w = wb;
            T.cin = cin - c0 < chunk ? cin - c0 : chunk;
            T.accumulate = c0 > 0;
            for (int64_t j = 0; j < imgs; j += MAX_IMAGE_TILE)
                for (int64_t i = 0; i < R.nrows; i++) {
                    T.in = A.in + j * R.iis + i * R.irs + c0 * A.cs;
                    T.out = A.out + j * R.ois + i * R.ors + ob * 16;
                    tiles3i[kind][nb - 1][len - 1](&T);
                }
            for (int64_t j = imgs; j < R.nimg; j++)
                for (int64_t i = 0; i < R.nrows; i++) {
                    const DT *in = A.in + j * R.iis + i * R.irs + c0 * A.cs;
                    float *out = A.out + j * R.ois + i * R.ors + ob * 16;
                    for (int64_t p = 0; p < len; p += wt) {
                        int width = (int)(len - p < wt ? len - p : wt);
                        T.in = in + p * sw;
                        T.out = out + p * A.os;
                        tiles3[kind][nb][width - 1](&T);
                    }
                }
        }
    }
}

/* Units a slot holds: the group's padded images (tile_image_group), room to
 * convert one image, a row buffer (a group of several images: the float32
 * outputs of all their rows). */
static int64_t slot_units(const pr_window *gu, pr_conv_pass pass) {
    const int64_t G = tile_image_group(gu, pass);
    const int64_t rows = G > 1 ? G * (pass == PR_CONV_FORWARD ? gu->ho : gu->h) : 1;
    return G * slot_floats(gu, pass) + IMAGE_UNITS(gu, pass) + rows * ROW_FLOATS(gu, pass);
}

/* A driver's output: float32 or bfloat16 data. */
typedef struct {
    void *data;
    pr_dtype dtype;
} out_rows;

/* Where the tiles of an output row starting at element `at` write: the
 * output itself (float32, pixels `step` floats apart), or the row buffer
 * (bfloat16 output; pixels `ch` floats apart); *os gets the pixel stride. */
static float *row_target(out_rows out, int64_t at, int64_t ch, int64_t step, float *rowbuf,
                         int64_t *os) {
    *os = out.dtype == PR_BF16 ? ch : step;
    return out.dtype == PR_BF16 ? rowbuf : (float *)out.data + at;
}

/* A bfloat16 output's row of `pixels` pixels, each rounded once from the
 * row buffer into the output (pixels `step` elements apart). */
static void row_finish(out_rows out, int64_t at, int64_t pixels, int64_t ch, int64_t step,
                       const float *rowbuf) {
    if (out.dtype != PR_BF16) return;
    uint16_t *d = (uint16_t *)out.data + at;
    if (step == ch) {
        pr_f32_to_bf16_run(rowbuf, d, pixels * ch);
        return;
    }
    for (int64_t j = 0; j < pixels; j++) { /* pixels apart: inline, a call each was slow */
        const float *s = rowbuf + j * ch;
        uint16_t *dj = d + j * step;
        int64_t c = 0;
        for (; c + 16 <= ch; c += 16)
            _mm256_storeu_si256((__m256i *)(dj + c), pr_bf16_round16(_mm512_loadu_ps(s + c)));
        for (; c < ch; c++) dj[c] = pr_bf16_from_f32(s[c]);
    }
}

static inline size_t direct_scratch_bytes(const pr_window *gu, pr_conv_pass pass) {
    int64_t slot = slot_units(gu, pass);
    const int64_t groups = ceil_div(gu->n, tile_image_group(gu, pass));
    return sizeof(DT) *
           (size_t)(round16(packed_floats(gu, pass)) + count_slots(groups, slot) * slot);
}

/* This thread's slot: the padded images, room to convert one, a row buffer. */
typedef struct {
    DT *pad, *conv;
    float *row;
} slot_bufs;

static slot_bufs thread_slot(DT *pads, const pr_window *gu, pr_conv_pass pass) {
    slot_bufs b;
    b.pad = pads + THREAD_ID() * slot_units(gu, pass);
    b.conv = b.pad + tile_image_group(gu, pass) * slot_floats(gu, pass);
    b.row = (float *)(b.conv + IMAGE_UNITS(gu, pass));
    return b;
}

/* The forward pass: y (N, HO, WO, O) from x (its C = `xc` channels as
 * gu->c units) and the packed weights wp; scratch after the weights.  Images
 * go a group at a time (tile_image_group): one image, row by row, or a
 * group of small ones whose rows all take each chunk of weights in turn
 * (a bfloat16 output gathered in float32 in the slot, rounded once). */
static void direct_forward(const pr_window *gu, pr_operand x, int64_t xc, const DT *wp, out_rows y,
                           DT *pads) {
    const int64_t taps = gu->kh * gu->kw, C = gu->c, O = gu->o, HP = xpad_rows(gu),
                  WP = xpad_cols(gu), xbytes = (int64_t)pr_dtype_size(x.dtype) * gu->h * gu->w * xc;
    const int64_t G = tile_image_group(gu, PR_CONV_FORWARD), groups = ceil_div(gu->n, G);
    const int64_t PF = slot_floats(gu, PR_CONV_FORWARD), Y = gu->ho * gu->wo * O;
    const int64_t slots = count_slots(groups, slot_units(gu, PR_CONV_FORWARD));
    int64_t toff[MAX_WINDOW * MAX_WINDOW], roff[MAX_WINDOW];
    const DT *wt[MAX_WINDOW * MAX_WINDOW];
    for (int64_t kh = 0; kh < gu->kh; kh++) {
        roff[kh] = kh * C * WP;
        for (int64_t kw = 0; kw < gu->kw; kw++) {
            int64_t t = kh * gu->kw + kw;
            toff[t] = kh * C * WP + kw;
            wt[t] = wp + t * C * 16;
        }
    }
#pragma omp parallel num_threads(threads_for(slots))
    {
        const slot_bufs sb = thread_slot(pads, gu, PR_CONV_FORWARD);
        int64_t zeroed = 0; /* padded images of this thread's slot with zeroed margins */
#pragma omp for schedule(static)
        for (int64_t gi = 0; gi < groups; gi++) {
            const int64_t n = gi * G, m = gu->n - n < G ? gu->n - n : G;
            for (int64_t j = 0; j < m; j++)
                pad_rows_cm(image_units(x, n + j, gu->h * gu->w, xc, sb.conv), gu->h, gu->w, C,
                            sb.pad + j * PF, HP, WP, gu->ph, gu->pw, j >= zeroed);
            if (m > zeroed) zeroed = m;
            tile_args A = {.cs = WP, .cin = C, .wob = taps * C * 16, .os = O, .toff = toff,
                           .w = wt, .taps = (int)taps};
            tile3_args A3 = {.cs = WP, .cin = C, .wob = taps * C * 16, .os = O, .roff = roff,
                             .w = wt, .rows = (int)gu->kh};
            if (G > 1) { /* all rows of the group's images (kw == 3) */
                A3.in = sb.pad;
                A3.out = y.dtype == PR_BF16 ? sb.row : (float *)y.data + n * Y;
                const row_set R = {m, gu->ho, PF, gu->sh * C * WP, Y, gu->wo * O};
                row_tiles3(A3, R, gu->wo, O, gu->sw, 3);
                row_finish(y, n * Y, m * gu->ho * gu->wo, O, O, sb.row);
                continue;
            }
            const char *next = n + 1 < gu->n ? (const char *)x.data + (n + 1) * xbytes : NULL;
            for (int64_t oh = 0; oh < gu->ho; oh++) {
                prefetch_part(next, xbytes, oh, gu->ho);
                const int64_t at = (n * gu->ho + oh) * gu->wo * O;
                A.in = A3.in = sb.pad + oh * gu->sh * C * WP;
                A.out = A3.out = row_target(y, at, O, O, sb.row, &A.os);
                A3.os = A.os;
                if (gu->kw == 3) row_tiles3(A3, ONE_ROW, gu->wo, O, gu->sw, 3);
                else row_tiles(A, gu->wo, O, gu->sw);
                row_finish(y, at, gu->wo, O, O, sb.row);
            }
        }
    }
}

/* One phase (rh, rw) of the input gradient: dx[i*sh + rh, j*sw + rw] reads
 * dy[i + di, j + dj] at its taps (toff, wt; none: zeros), or, for windows
 * three taps wide, tile3 over its tap rows (roff3, w3): each reads kc = 3
 * (stride 1 across) or 2 adjacent dy columns, tap k at column offset v0 + k,
 * its weights those of column kwmax - k*sw. */
typedef struct {
    int nt, use3, kc, nr;
    int64_t cols, toff[MAX_WINDOW * MAX_WINDOW], roff3[MAX_WINDOW];
    const DT *wt[MAX_WINDOW * MAX_WINDOW], *w3[3 * MAX_WINDOW];
} bpi_phase;

static void bpi_phase_setup(const pr_window *gu, const DT *wp, int64_t rh, int64_t rw,
                            bpi_phase *P) {
    const int64_t O = gu->o, DC = dypad_cols(gu);
    P->nt = P->kc = P->nr = 0;
    P->cols = (gu->w - rw + gu->sw - 1) / gu->sw;
    for (int64_t kh = 0; kh < gu->kh; kh++) {
        int64_t u = rh + gu->ph - kh;
        if (((u % gu->sh) + gu->sh) % gu->sh) continue;
        for (int64_t kw = 0; kw < gu->kw; kw++) {
            int64_t v = rw + gu->pw - kw;
            if (((v % gu->sw) + gu->sw) % gu->sw) continue;
            P->toff[P->nt] = (u / gu->sh) * O * DC + v / gu->sw;
            P->wt[P->nt++] = wp + (kh * gu->kw + kw) * O * 16;
        }
    }
    int64_t kwmax = 0;
    for (int64_t kw = 0; gu->kw == 3 && kw < 3; kw++)
        if (((rw + gu->pw - kw) % gu->sw + gu->sw) % gu->sw == 0) P->kc++, kwmax = kw;
    P->use3 = P->kc >= 2;
    for (int64_t kh = 0; P->use3 && kh < gu->kh; kh++) {
        int64_t u = rh + gu->ph - kh;
        if (((u % gu->sh) + gu->sh) % gu->sh) continue;
        P->roff3[P->nr] = (u / gu->sh) * O * DC + (rw + gu->pw - kwmax) / gu->sw;
        for (int k = 0; k < P->kc; k++)
            P->w3[P->kc * P->nr + k] = wp + (kh * 3 + kwmax - k * gu->sw) * O * 16;
        P->nr++;
    }
}

/* The input gradient: dx from dy (its O = `dyc` channels as gu->o units)
 * and the packed weights, phase by phase (conv_direct.c).  A bfloat16 dx
 * row gathers its sw phases in the row buffer and is rounded once, whole
 * (its phases' pixels apart, each had written half of every cache line).
 * Small images at stride 1 go a group at a time (tile_image_group), as in
 * the forward pass. */
static void direct_backprop_input(const pr_window *gu, pr_operand dy, int64_t dyc, const DT *wp,
                                  out_rows dx, DT *pads) {
    const int64_t taps = gu->kh * gu->kw, C = gu->c, O = gu->o;
    const int64_t DR = dypad_rows(gu), DC = dypad_cols(gu);
    const int64_t dybytes = (int64_t)pr_dtype_size(dy.dtype) * gu->ho * gu->wo * dyc;
    const int64_t G = tile_image_group(gu, PR_CONV_BACKPROP_INPUT), groups = ceil_div(gu->n, G);
    const int64_t PF = slot_floats(gu, PR_CONV_BACKPROP_INPUT), X = gu->h * gu->w * C;
    const int64_t slots = count_slots(groups, slot_units(gu, PR_CONV_BACKPROP_INPUT));
    const int64_t SW = gu->sw < gu->w ? gu->sw : gu->w; /* phases across with pixels */
    const int bf = dx.dtype == PR_BF16;
    bpi_phase phases[MAX_STRIDE][MAX_STRIDE]; /* [rh][rw]: the same for every image */
    for (int64_t rh = 0; rh < gu->sh && rh < gu->h; rh++)
        for (int64_t rw = 0; rw < SW; rw++) bpi_phase_setup(gu, wp, rh, rw, &phases[rh][rw]);
#pragma omp parallel num_threads(threads_for(slots))
    {
        const slot_bufs sb = thread_slot(pads, gu, PR_CONV_BACKPROP_INPUT);
        int64_t zeroed = 0; /* padded images of this thread's slot with zeroed margins */
#pragma omp for schedule(static)
        for (int64_t gi = 0; gi < groups; gi++) {
            const int64_t n = gi * G, m = gu->n - n < G ? gu->n - n : G;
            for (int64_t j = 0; j < m; j++)
                pad_rows_cm(image_units(dy, n + j, gu->ho * gu->wo, dyc, sb.conv), gu->ho, gu->wo,
                            O, sb.pad + j * PF, DR, DC, gu->kh, gu->kw, j >= zeroed);
            if (m > zeroed) zeroed = m;
            if (G > 1) { /* stride 1, one phase of tile3 rows: all rows of the group */
                const bpi_phase *P = &phases[0][0];
                tile3_args A3 = {.in = sb.pad + gu->kh * O * DC + gu->kw, .cs = DC, .cin = O,
                                 .wob = taps * O * 16, .os = C, .roff = P->roff3, .w = P->w3,
                                 .rows = P->nr, .out = bf ? sb.row : (float *)dx.data + n * X};
                const row_set R = {m, gu->h, PF, O * DC, X, gu->w * C};
                row_tiles3(A3, R, P->cols, C, 1, P->kc);
                row_finish(dx, n * X, m * gu->h * gu->w, C, C, sb.row);
                continue;
            }
            const char *next = n + 1 < gu->n ? (const char *)dy.data + (n + 1) * dybytes : NULL;
            for (int64_t rh = 0; rh < gu->sh && rh < gu->h; rh++) {
                const int64_t rows = (gu->h - rh + gu->sh - 1) / gu->sh;
                for (int64_t i = 0; i < rows; i++) {
                    if (rh == 0) prefetch_part(next, dybytes, i, rows);
                    const int64_t at0 = (n * gu->h + i * gu->sh + rh) * gu->w * C;
                    const DT *row = sb.pad + (i + gu->kh) * O * DC + gu->kw;
                    for (int64_t rw = 0; rw < SW; rw++) {
                        const bpi_phase *P = &phases[rh][rw];
                        const int64_t step = gu->sw * C;
                        float *out = bf ? sb.row + rw * C : (float *)dx.data + at0 + rw * C;
                        if (P->nt == 0) { /* no tap reaches these pixels */
                            for (int64_t j = 0; j < P->cols; j++)
                                memset(out + j * step, 0, sizeof(float) * (size_t)C);
                            continue;
                        }
                        if (P->use3) {
                            tile3_args A3 = {.in = row, .cs = DC, .cin = O, .wob = taps * O * 16,
                                             .os = step, .roff = P->roff3, .w = P->w3,
                                             .rows = P->nr, .out = out};
                            row_tiles3(A3, ONE_ROW, P->cols, C, 1, P->kc);
                        } else {
                            tile_args A = {.in = row, .cs = DC, .cin = O, .wob = taps * O * 16,
                                           .os = step, .toff = P->toff, .w = P->wt,
                                           .taps = P->nt, .out = out};
                            row_tiles(A, P->cols, C, 1);
                        }
                    }
                    if (bf) row_finish(dx, at0, gu->w, C, C, sb.row);
                }
            }
        }
    }
}
