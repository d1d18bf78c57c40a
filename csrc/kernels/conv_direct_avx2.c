/* Direct NHWC convolutions with AVX2 + FMA: the kernels of conv_direct.c
 * (same sums, layouts and thread split; read its header comment first) for
 * 8-wide ymm registers, of which there are 16.
 *
 *   forward          y[oh, ow, o]  += xpad[oh*sh + kh, ow*sw + kw, c] * w[kh, kw, c, o]
 *   backprop_input   dx[ih, iw, c] += dypad[(ih + ph - kh)/sh, (iw + pw - kw)/sw, o]
 *                                     * w[kh, kw, c, o]   (per sub-pixel phase, Dumoulin &
 *                                     Visin 2016, section 4)
 *   backprop_filter  dw[kh, kw, c, o] += xpad[oh*sh + kh, ow*sw + kw, c] * dy[oh, ow, o]
 *
 * What differs from the AVX-512 kernels is the register budget (Georganas
 * et al., SC18, section 3: the output tile in accumulators, the rest for
 * weights and the broadcast) and, with it, the tiles:
 *   - forward / backprop_input: one tile is WT output pixels x NB <= 3
 *     blocks of 8 output channels, NB*WT accumulators + NB*K weight vectors
 *     (K <= 3 taps sharing a broadcast, conv_direct.c's tile3; K = 1: every
 *     tap its own "window row", any window) + the broadcast <= 16
 *     registers: one tile function for every window.  A broadcast feeds
 *     K*NB FMAs, so NB > 1 is what keeps a stride-2 window (whose columns
 *     feed one or two taps) from being bound by the loads.  plan_row picks
 *     (K, NB) per output row from a cost estimate (FMAs, loads, the FMA
 *     latency, the tile's stores); the stride-2 input gradient runs per
 *     sub-pixel phase, so no product is formed with a tap that skips it.
 *     Weights are repacked into 8-channel blocks (aligned 32-byte loads,
 *     zero-padded);
 *   - backprop_filter: CT input channels x NB <= 2 blocks of 8 output
 *     channels with CT * NB <= 12 accumulators (ftile), which stay in
 *     registers over a group of images (as many as fit FILTER_GROUP_BYTES);
 *     x and dy are repacked per group where their pixel strides are 128
 *     or 256 bytes (filter_packs: in place, every pixel of a stream maps
 *     into a few of L1's sets), at stride 2 with x by phase (filter_phases:
 *     a tap's x dense), and a tap whose pixels follow one another in the
 *     repacked x and dy runs them as one loop.  Inputs of few channels
 *     (the RGB stem) take (tap, channel) pairs as a tile's rows, read from
 *     a zero-padded copy of x (filter_image_few); windows three taps wide
 *     with one block of output channels (O <= 8) take ftile3, 3 taps x 4
 *     channels.
 * A partial last block of channels is read and written with
 * _mm256_maskload_ps / _mm256_maskstore_ps; full blocks with plain loads.
 * No product is formed for a tap that reads no input (ftile3's checked
 * groups, ftile's tap ranges), so an Inf or NaN of x reaches exactly the
 * reference's taps; filter_image_few multiplies dy by the padding's zeros,
 * as the reference's im2col does.
 *
 * Compiled per function for "avx2,fma" (the target attribute, which GCC
 * and clang both honour) and run only when the CPU probe reports both
 * (ops_conv.c's avx2_direct variant); off x86-64 the entry points are stubs.
 */
#include "conv_direct.h"
#include "conv_direct_geom.h"

/* Bytes of x and dy that a group of images sharing the filter gradient's
 * tiles may take: the tiles sweep them once per tap and tile of channels,
 * so they are to stay in L2 (512 KB a core on Zen 3). */
#define FILTER_GROUP_BYTES ((int64_t)192 << 10)

/* Filter gradients over so few input channels (the ResNet stem's 3) that
 * the tiles take (tap, channel) pairs of a zero-padded copy of x
 * (filter_image_few) rather than channels. */
static int filter_few_channels(const pr_window *g) { return g->c <= 4; }

/* Floats of one image's x and dy (its channels rounded up to blocks of 8,
 * as filter_images repacks it). */
static int64_t image_floats(const pr_window *g) {
    return g->h * g->w * g->c + g->ho * g->wo * (g->o + 7) / 8 * 8;
}

/* Whether the filter gradient repacks groups of images (filter_images):
 * when one image fits FILTER_GROUP_BYTES and x steps 128 bytes or more a
 * pixel or dy 256 (read in place, they crowd into a few of L1's sets; on
 * Zen 3, 16 -> 32 channels at stride 2 ran faster in place, 32 -> 32
 * faster repacked; stride-2 windows are repacked by phase). */
static int filter_phases(const pr_window *g);
static int filter_packs(const pr_window *g) {
    return !filter_few_channels(g) && 4 * image_floats(g) <= FILTER_GROUP_BYTES &&
           (g->c >= 32 || g->o >= 64 || filter_phases(g));
}

/* Whether the repacked x goes by phase (filter_images): windows at stride 2
 * both ways over images of even height and width with more than one block
 * of output channels.  A stride-2 tap reads every other column of every
 * other row, one of the image's four (row parity, column parity) phases:
 * each phase repacked as an image of its own, a tap's x is dense (a tile's
 * channels, pixel after pixel) rather than every other pixel of every
 * other row, and the taps of one phase run one after the other.  The sums
 * are those of the layout in place, in the same order.  On AMD EPYC Zen 4
 * (one thread, CPU time, the old and new kernels interleaved), 32 -> 64
 * channels at 16 x 16 ran 8-19% faster, 16 -> 32 at 32 x 32 0-5%. */
static int filter_phases(const pr_window *g) {
    return g->sh == 2 && g->sw == 2 && g->h % 2 == 0 && g->w % 2 == 0 && g->o > 8;
}

/* Bytes of padded images a forward or input-gradient group takes (their
 * sum): the tiles go chunk of weights by chunk over every row of the
 * group (plane_tiles), so small images are taken several at a time to
 * read each chunk of weights for more pixels (airbench's 256 -> 256 at 3
 * x 3 pixels: 9 a row set rather than 3 a row), while the group's inputs
 * stay in L2. */
#define IMAGE_GROUP_BYTES ((int64_t)160 << 10)
#define MAX_IMAGE_GROUP 16

/* Floats of one padded image of the forward (x) or input-gradient (dy)
 * pass: conv_direct_geom.h's slot. */
static int64_t pad_floats(const pr_window *g, pr_conv_pass pass) { return slot_floats(g, pass); }

/* Images a forward or input-gradient group takes (1 for the filter
 * gradient, whose groups are filter_group's): as many whose inputs (x, or
 * dy of the pixels a window reads) fit IMAGE_GROUP_BYTES, at least 1, at
 * most MAX_IMAGE_GROUP and the batch. */
static int64_t image_group(const pr_window *g, pr_conv_pass pass) {
    if (pass == PR_CONV_BACKPROP_FILTER) return 1;
    int64_t bytes = 4 * (pass == PR_CONV_FORWARD ? xpad_rows(g) * xpad_cols(g) * g->c
                                                 : (g->ho + g->kh - 1) * (g->wo + g->kw - 1) * g->o);
    int64_t G = IMAGE_GROUP_BYTES / (bytes ? bytes : 1);
    if (G > MAX_IMAGE_GROUP) G = MAX_IMAGE_GROUP;
    if (G > g->n) G = g->n;
    return G < 1 ? 1 : G;
}

/* A slot: a group of conv_direct_geom.h's (image_group) for the forward
 * and input-gradient passes; for the filter gradient, after the
 * partial dw the repacked group of images (filter_images, 8 floats of
 * slack for the 8-float stores) or the padded image (filter_image_few). */
static int64_t avx2_slot_floats(const pr_window *g, pr_conv_pass pass) {
    int64_t slot = slot_floats(g, pass);
    if (pass != PR_CONV_BACKPROP_FILTER) return image_group(g, pass) * slot;
    if (filter_few_channels(g)) return slot + round16(xpad_rows(g) * xpad_cols(g) * g->c);
    if (filter_packs(g)) return slot + round16(FILTER_GROUP_BYTES / 4 + 8);
    return slot;
}

size_t pr_conv_direct_avx2_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    int64_t slot = avx2_slot_floats(g, pass), units = ceil_div(g->n, image_group(g, pass));
    return sizeof(float) * (size_t)(round16(packed_floats(g, pass)) + count_slots(units, slot) * slot);
}

#if defined(__x86_64__)

#include <string.h>

#include "avx2.h"

#define MAX_TILE 12 /* accumulators per tile, of the 16 ymm registers */
#define MAX_NB 2    /* 8-channel blocks per filter-gradient tile */
#define MAX_NB_FW 3 /* 8-channel blocks per forward / input-gradient tile */
#define FT3_CT 4    /* input channels per ftile3: 3 taps x 4 = 12 accumulators */
/* Weights a tile may stream per pass over its input channels (L1 is 32 KB):
 * longer channel runs are cut into chunks summed into the output. */
#define TILE_WEIGHT_BYTES (24 << 10)

static int64_t blocks8(int64_t n) { return (n + 7) / 8; }

/* Channels in block ob of the nob blocks of `channels` (8 but in the last). */
static int block_lanes(int64_t ob, int64_t nob, int64_t channels) {
    return ob + 1 < nob || channels % 8 == 0 ? 8 : (int)(channels % 8);
}

/* Part i of `parts` of the next image's `bytes` at p (NULL: none) into L2
 * while this one computes (conv_direct.c's prefetch_part; SSE, so also
 * callable outside the AVX2 functions). */
static inline void prefetch_part(const void *p, int64_t bytes, int64_t i, int64_t parts) {
    if (!p) return;
    for (int64_t b = bytes * i / parts & ~(int64_t)63; b < bytes * (i + 1) / parts; b += 64)
        _mm_prefetch((const char *)p + b, _MM_HINT_T1);
}

/* ---- forward and backprop_input ----------------------------------------------- */

/* One output tile of WT pixels x NB blocks of 8 channels: a sum over
 * window rows, input channels and K taps per row.  Input column q of window
 * row r feeds tap k of pixel p when q = p*SW + k, so one broadcast serves up
 * to K*NB FMAs.  in + roff[r] + c*cs + q is column q of row r, channel c
 * (channel-major padded rows, pad_rows_cm); w[K*r + k] points at the
 * (cin x 8) weights of row r, tap k, block 0 (block b is b*wob floats
 * further).  Pixel p is written at out + p*os (block b 8*b further).  K = 1
 * with one "row" per tap is the general window; K = 3 (stride 1 or 2) a
 * window three taps wide; K = 2 the stride-2 3x3 input gradient's phases,
 * which read two adjacent dy columns per window row.  The registers: NB*WT
 * accumulators + NB*K weight vectors + the broadcast <= 16 (row_tiles
 * picks the shapes that fit). */
typedef struct {
    const float *in;
    int64_t cs, cin, os, wob;
    const int64_t *roff;
    const float *const *w;
    int rows, accumulate; /* accumulate: add to what out holds (a later channel chunk) */
    int lanes;            /* output channels in the last block: 8, or fewer in the last */
    float *out;
} tile_args;

ALWAYS_INLINE void tile_body(const tile_args *A, const int WT, const int SW, const int K,
                             const int NB) {
    __m256 acc[MAX_NB_FW][MAX_TILE];
    const int64_t os = A->os, wob = A->wob;
    const int lanes = A->lanes;
    UNROLL
    for (int b = 0; b < NB; b++)
        UNROLL
        for (int p = 0; p < WT; p++) {
            int l = b == NB - 1 ? lanes : 8;
            if (A->accumulate) {
                acc[b][p] = load_block(A->out + p * os + 8 * b, l);
            } else {
                acc[b][p] = _mm256_setzero_ps();
                if (b == 0) __builtin_prefetch(A->out + p * os, 1, 3);
            }
        }
    const int64_t cs = A->cs, cin = A->cin;
    for (int r = 0; r < A->rows; r++) {
        const float *a = A->in + A->roff[r];
        const float *const *wr = A->w + K * r;
        for (int64_t c = 0; c < cin; c++, a += cs) {
            __m256 wv[MAX_NB_FW][3];
            UNROLL
            for (int b = 0; b < NB; b++)
                UNROLL
                for (int k = 0; k < K; k++) wv[b][k] = _mm256_load_ps(wr[k] + b * wob + c * 8);
            UNROLL
            for (int q = 0; q < (WT - 1) * SW + K; q++) {
                if (SW > 1 && K == 1 && q % SW) continue; /* a column no pixel reads */
                __m256 xv = _mm256_broadcast_ss(a + q);
                UNROLL
                for (int k = 0; k < K; k++) {
                    int p = (q - k) / SW;
                    if (q < k || (q - k) % SW || p >= WT) continue;
                    UNROLL
                    for (int b = 0; b < NB; b++)
                        acc[b][p] = _mm256_fmadd_ps(xv, wv[b][k], acc[b][p]);
                }
            }
        }
    }
    UNROLL
    for (int b = 0; b < NB; b++)
        UNROLL
        for (int p = 0; p < WT; p++)
            store_block(A->out + p * os + 8 * b, acc[b][p], b == NB - 1 ? lanes : 8);
}

typedef void (*tile_fn)(const tile_args *);

/* Kinds V: (K, SW) = (3, 1), (3, 2), (2, 1), (1, 1), (1, 2). */
#define N_KINDS 5
#define V_K(V) ((V) <= 2 ? 3 : (V) == 3 ? 2 : 1)
#define V_SW(V) ((V) == 2 || (V) == 5 ? 2 : 1)
#define TILE(WT, V, NB)                                             \
    AVX2_FN void tile_##WT##_##V##_##NB(const tile_args *A) {       \
        tile_body(A, WT, V_SW(V), V_K(V), NB);                      \
    }
#define TILES1(V) TILE(1, V, 1) TILE(2, V, 1) TILE(3, V, 1) TILE(4, V, 1) TILE(5, V, 1) \
    TILE(6, V, 1) TILE(7, V, 1) TILE(8, V, 1) TILE(9, V, 1) TILE(10, V, 1) TILE(11, V, 1) \
    TILE(12, V, 1)
#define TILES2(V) TILE(1, V, 2) TILE(2, V, 2) TILE(3, V, 2) TILE(4, V, 2) TILE(5, V, 2) \
    TILE(6, V, 2)
#define TILES3(V) TILE(1, V, 3) TILE(2, V, 3) TILE(3, V, 3) TILE(4, V, 3)
#define TILES(V) TILES1(V) TILES2(V) TILES3(V)
TILES(1)
TILES(2)
TILES(3)
TILES(4)
TILES(5)
#define REFS(V)                                                                              \
    {{tile_1_##V##_1, tile_2_##V##_1, tile_3_##V##_1, tile_4_##V##_1, tile_5_##V##_1,         \
      tile_6_##V##_1, tile_7_##V##_1, tile_8_##V##_1, tile_9_##V##_1, tile_10_##V##_1,        \
      tile_11_##V##_1, tile_12_##V##_1},                                                     \
     {tile_1_##V##_2, tile_2_##V##_2, tile_3_##V##_2, tile_4_##V##_2, tile_5_##V##_2,         \
      tile_6_##V##_2},                                                                       \
     {tile_1_##V##_3, tile_2_##V##_3, tile_3_##V##_3, tile_4_##V##_3}}
/* tiles[V - 1][NB - 1][WT - 1] */
static const tile_fn tiles[N_KINDS][MAX_NB_FW][MAX_TILE] = {REFS(1), REFS(2), REFS(3), REFS(4),
                                                            REFS(5)};

/* The widest tile of NB blocks with K taps per row that fits the registers
 * (NB*WT accumulators + NB*K weights + the broadcast <= 16; GCC spills an
 * accumulator in the inner loop of 12 + 3 + 1, hence 11 there); 0: none. */
static int max_width(int nb, int k) {
    static const int w[MAX_NB_FW][3] = {{12, 12, 11}, {6, 5, 4}, {4, 3, 2}};
    return w[nb - 1][k - 1];
}

/* Estimated cycles per input channel and window row of the tiles covering
 * `len` pixels and one group of nb blocks: FMAs at 2 a cycle, loads
 * (broadcasts and weights) at LOAD_RATE a cycle, and the FMA latency (4
 * cycles, K chained FMAs per accumulator and channel, with a margin: the
 * chains barely covering the latency lose to scheduling), whichever
 * binds, plus the tile's accumulator loads and stores spread over its
 * channels. */
#define LOAD_RATE 1.5
static double tiles_cost(int64_t len, int nb, int k, int sw, int64_t cin) {
    int wmax = max_width(nb, k);
    int64_t n = (len + wmax - 1) / wmax;
    double cycles = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t w = len / n + (i < len % n);
        double fma = (double)(nb * w * k) / 2;
        double loads = (double)((k == 1 ? w : (w - 1) * sw + k) + nb * k) / LOAD_RATE;
        double lat = 4.6 * k;
        double c = fma > loads ? fma : loads;
        cycles += (c > lat ? c : lat) + 2.0 * (double)(nb * w) / (double)cin;
    }
    return cycles;
}

/* How row_tiles covers a row: k taps per window row, blocks in groups of
 * nb (the last group may be smaller). */
typedef struct {
    int k, nb;
} row_plan;

/* The cheapest nb for `rows` window rows of k taps (tiles_cost), written
 * to *plan when cheaper than *best (or *best < 0). */
static void plan_row(int64_t len, int64_t cout, int64_t cin, int64_t sw, int k, int64_t rows,
                     row_plan *plan, double *best) {
    const int64_t nob = blocks8(cout);
    for (int nb = 1; nb <= MAX_NB_FW && nb <= nob; nb++) {
        int64_t full = nob / nb, rest = nob % nb;
        double c = (double)rows * ((double)full * tiles_cost(len, nb, k, (int)sw, cin) +
                                   (rest ? tiles_cost(len, (int)rest, k, (int)sw, cin) : 0));
        if (*best < 0 || c < *best) *best = c, plan->k = k, plan->nb = nb;
    }
}

/* The output rows a plane_tiles call covers: nrows rows of each of nimg
 * images, row i of image j reading its padded input at in + j*iis + i*irs
 * and writing out + j*ois + i*ors. */
typedef struct {
    int64_t nimg, nrows, iis, irs, ois, ors;
} row_set;

/* Output rows of `len` pixels (R: of one image or of a group of images),
 * all `cout` output channels, with windows of A.rows rows of P.k taps at
 * pixel stride sw (k = 3: stride 1 or 2; k = 2: stride 1; k = 1: stride 1
 * or 2), the blocks in groups of P.nb, the pixels in tiles of balanced
 * widths.  A.in / A.out at row 0 of image 0, pixel 0; A.w at block 0
 * (block b `wob` floats further).  The loops go groups of blocks, chunks of
 * input channels, images, rows, tiles: a chunk's weights (TILE_WEIGHT_BYTES,
 * in L1) serve every pixel of the set before the next chunk's are read, so
 * the weights stream from L2 or L3 once per set of rows rather than once
 * per row (per row, a 256 -> 256 window at 7 or 3 pixels a row reads 2.4
 * MB of weights for 7 or 3 pixels: bound by the L3).  pf: the next set's
 * input, asked into L2 in parts as the tiles run. */
static void plane_tiles(tile_args A, int64_t wob, row_set R, int64_t len, int64_t cout,
                        int64_t sw, row_plan P, pf_span pf) {
    const int k = P.k, best = P.nb;
    const int kind = k == 3 ? (int)sw : k == 2 ? 3 : 3 + (int)sw;
    const int64_t nob = blocks8(cout), cin = A.cin;
    int64_t chunk = TILE_WEIGHT_BYTES / (k * A.rows * 32 * best);
    chunk = chunk < 8 ? 8 : chunk / 8 * 8;
    if (chunk > cin) chunk = cin;
    const int64_t parts = ceil_div(nob, best) * ceil_div(cin, chunk) * R.nimg;
    int64_t part = 0;
    tile_args T = A;
    T.wob = wob;
    for (int64_t ob = 0; ob < nob; ob += best) {
        const int nb = (int)(nob - ob < best ? nob - ob : best);
        const int wmax = max_width(nb, k);
        const int64_t ntiles = (len + wmax - 1) / wmax;
        const tile_fn *fns = tiles[kind - 1][nb - 1];
        T.lanes = block_lanes(ob + nb - 1, nob, cout);
        for (int64_t c0 = 0; c0 < cin; c0 += chunk) {
            const float *wb[MAX_WINDOW * MAX_WINDOW];
            for (int t = 0; t < k * A.rows; t++) wb[t] = A.w[t] + ob * wob + c0 * 8;
            T.w = wb;
            T.cin = cin - c0 < chunk ? cin - c0 : chunk;
            T.accumulate = c0 > 0;
            for (int64_t j = 0; j < R.nimg; j++, part++) {
                prefetch_part(pf.p, pf.bytes, part, parts);
                for (int64_t i = 0; i < R.nrows; i++) {
                    const float *in = A.in + j * R.iis + i * R.irs + c0 * A.cs;
                    float *out = A.out + j * R.ois + i * R.ors + ob * 8;
                    int64_t p = 0;
                    for (int64_t t = 0; t < ntiles; t++) { /* balanced widths */
                        int width = (int)(len / ntiles + (t < len % ntiles));
                        T.in = in + p * sw;
                        T.out = out + p * A.os;
                        fns[width - 1](&T);
                        p += width;
                    }
                }
            }
        }
    }
}

/* r[i] (pixel i, 8 channels) -> r[c] (channel c, 8 pixels): unpack pairs,
 * then pairs of pairs, then 128-bit lanes. */
ALWAYS_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int j = 0; j < 4; j++) {
        r[j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x20);
        r[4 + j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x31);
    }
}

/* 8 pixels of 3 channels at src (24 floats) -> channel c's 8 at dst +
 * c*stride.  Float 3p + c of the 24 is lane (3p + c) % 8 of load (3p + c)
 * / 8, and for each channel the 8 lanes differ: two blends gather them
 * into one register, a permutation puts them in pixel order. */
ALWAYS_INLINE void deinterleave3(const float *src, float *dst, int64_t stride) {
    const __m256 a = _mm256_loadu_ps(src), b = _mm256_loadu_ps(src + 8),
                 c = _mm256_loadu_ps(src + 16);
    /* channel 0: lanes 0 3 6 of a, 1 4 7 of b, 2 5 of c, pixel order 0 3 6 1 4 7 2 5 */
    __m256 c0 = _mm256_blend_ps(_mm256_blend_ps(a, b, 0x92), c, 0x24);
    __m256 c1 = _mm256_blend_ps(_mm256_blend_ps(a, b, 0x24), c, 0x49);
    __m256 c2 = _mm256_blend_ps(_mm256_blend_ps(a, b, 0x49), c, 0x92);
    _mm256_storeu_ps(dst, _mm256_permutevar8x32_ps(c0, _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5)));
    _mm256_storeu_ps(dst + stride,
                     _mm256_permutevar8x32_ps(c1, _mm256_setr_epi32(1, 4, 7, 2, 5, 0, 3, 6)));
    _mm256_storeu_ps(dst + 2 * stride,
                     _mm256_permutevar8x32_ps(c2, _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7)));
}

/* conv_direct.c's pad_rows_cm with 8 x 8 blocks: copy a (rows_in, cols_in,
 * ch) image into a (prows, pcols) zero-padded window at (top, left), in
 * channel-major rows (row r: ch runs of pcols floats).  Only the image's
 * own pixels are written; the buffer is zeroed on its first image of a
 * call (`fresh`). */
AVX2_FN void pad_rows_cm(const float *src, int64_t rows_in, int64_t cols_in, int64_t ch,
                         float *dst, int64_t prows, int64_t pcols, int64_t top, int64_t left,
                         int fresh) {
    int64_t lo = left < 0 ? 0 : left, hi = left + cols_in < pcols ? left + cols_in : pcols;
    int64_t n = hi - lo;
    if (fresh) memset(dst, 0, sizeof(float) * (size_t)(prows * ch * pcols));
    for (int64_t r = 0; r < prows; r++) {
        float *d = dst + r * ch * pcols;
        int64_t ir = r - top;
        if (ir < 0 || ir >= rows_in || n <= 0) continue;
        const float *row = src + (ir * cols_in + lo - left) * ch;
        int64_t c0 = 0;
        if (ch == 3) { /* RGB: 8 pixels at a time */
            int64_t q0 = 0;
            for (; q0 + 8 <= n; q0 += 8)
                deinterleave3(row + q0 * 3, d + lo + q0, pcols);
            for (int64_t c = 0; c < 3; c++)
                for (int64_t q = q0; q < n; q++) d[c * pcols + lo + q] = row[q * 3 + c];
            continue;
        }
        for (; c0 + 8 <= ch; c0 += 8) {
            int64_t q0 = 0;
            for (; q0 + 8 <= n; q0 += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_ps(row + (q0 + i) * ch + c0);
                transpose8(v);
                for (int c = 0; c < 8; c++) _mm256_storeu_ps(d + (c0 + c) * pcols + lo + q0, v[c]);
            }
            for (int64_t c = c0; c < c0 + 8; c++)
                for (int64_t q = q0; q < n; q++) d[c * pcols + lo + q] = row[q * ch + c];
        }
        for (int64_t c = c0; c < ch; c++)
            for (int64_t q = 0; q < n; q++) d[c * pcols + lo + q] = row[q * ch + c];
    }
}

/* w (KH, KW, C, O) -> [blocks of 8][KH*KW][the other channels][8],
 * zero-padded: blocks of output channels for the forward pass (by_c = 0),
 * of input channels for backprop_input (by_c = 1: the transposed filter).
 * Returns the floats between blocks. */
static int64_t pack_weights8(const pr_window *g, const float *w, int by_c, float *wp) {
    const int64_t taps = g->kh * g->kw, C = g->c, O = g->o;
    const int64_t nb = by_c ? C : O, ni = by_c ? O : C;
    for (int64_t blk = 0; blk < blocks8(nb); blk++)
        for (int64_t t = 0; t < taps; t++)
            for (int64_t i = 0; i < ni; i++) {
                float *dst = wp + ((blk * taps + t) * ni + i) * 8;
                for (int64_t j = 0; j < 8; j++) {
                    int64_t b = blk * 8 + j, c = by_c ? b : i, o = by_c ? i : b;
                    dst[j] = b < nb ? w[(t * C + c) * O + o] : 0.0f;
                }
            }
    return taps * ni * 8;
}

int pr_conv_direct_avx2_forward(const pr_window *g, const float *x, const float *w, float *y,
                                void *scratch) {
    const int64_t taps = g->kh * g->kw, C = g->c, O = g->o, HP = xpad_rows(g), WP = xpad_cols(g);
    const int64_t G = image_group(g, PR_CONV_FORWARD), PF = pad_floats(g, PR_CONV_FORWARD);
    const int64_t groups = ceil_div(g->n, G), X = g->h * g->w * C;
    const int64_t slot = avx2_slot_floats(g, PR_CONV_FORWARD), slots = count_slots(groups, slot);
    float *wp = scratch, *pads = wp + round16(packed_floats(g, PR_CONV_FORWARD));
    const int64_t wob = pack_weights8(g, w, 0, wp);
    /* windows three taps wide: a row of 3 taps per window row (k = 3), or
     * (any window) one row per tap (k = 1), whichever plan_row finds
     * cheaper.  Either way w[t] is tap t = kh*KW + kw. */
    row_plan P = {1, 1};
    double best = -1;
    if (g->kw == 3) plan_row(g->wo, O, C, g->sw, 3, g->kh, &P, &best);
    plan_row(g->wo, O, C, g->sw, 1, taps, &P, &best);
    const int k = P.k, rows = (int)(k == 3 ? g->kh : taps);
    int64_t roff[MAX_WINDOW * MAX_WINDOW];
    const float *wt[MAX_WINDOW * MAX_WINDOW];
    for (int64_t t = 0; t < taps; t++) wt[t] = wp + t * C * 8;
    for (int r = 0; r < rows; r++)
        roff[r] = k == 3 ? r * C * WP : (r / g->kw) * C * WP + r % g->kw;
#pragma omp parallel num_threads(threads_for(slots))
    {
        float *xp = pads + THREAD_ID() * slot;
        int64_t zeroed = 0; /* padded images of this thread's slot with zeroed margins */
#pragma omp for schedule(static)
        for (int64_t gi = 0; gi < groups; gi++) {
            const int64_t n0 = gi * G, m = g->n - n0 < G ? g->n - n0 : G;
            for (int64_t j = 0; j < m; j++)
                pad_rows_cm(x + (n0 + j) * X, g->h, g->w, C, xp + j * PF, HP, WP, g->ph, g->pw,
                            j >= zeroed);
            if (m > zeroed) zeroed = m;
            const int64_t next = g->n - n0 - m < G ? g->n - n0 - m : G;
            tile_args A = {.in = xp, .cs = WP, .cin = C, .os = O, .roff = roff, .w = wt,
                           .rows = rows, .out = y + n0 * g->ho * g->wo * O};
            row_set R = {.nimg = m, .nrows = g->ho, .iis = PF, .irs = g->sh * C * WP,
                         .ois = g->ho * g->wo * O, .ors = g->wo * O};
            pf_span pf = span_part(next ? x + (n0 + m) * X : NULL, 4 * next * X, 0, 1);
            plane_tiles(A, wob, R, g->wo, O, g->sw, P, pf);
        }
    }
    return PR_OK;
}

int pr_conv_direct_avx2_backprop_input(const pr_window *g, const float *dy, const float *w,
                                       float *dx, void *scratch) {
    const int64_t C = g->c, O = g->o;
    const int64_t DR = dypad_rows(g), DC = dypad_cols(g);
    const int64_t G = image_group(g, PR_CONV_BACKPROP_INPUT);
    const int64_t PF = pad_floats(g, PR_CONV_BACKPROP_INPUT);
    const int64_t groups = ceil_div(g->n, G), DY = g->ho * g->wo * O, X = g->h * g->w * C;
    const int64_t slot = avx2_slot_floats(g, PR_CONV_BACKPROP_INPUT);
    const int64_t slots = count_slots(groups, slot);
    float *wp = scratch, *pads = wp + round16(packed_floats(g, PR_CONV_BACKPROP_INPUT));
    const int64_t wob = pack_weights8(g, w, 1, wp);
#pragma omp parallel num_threads(threads_for(slots))
    {
        float *dp = pads + THREAD_ID() * slot;
        int64_t zeroed = 0; /* padded images of this thread's slot with zeroed margins */
#pragma omp for schedule(static)
        for (int64_t gi = 0; gi < groups; gi++) {
            const int64_t n0 = gi * G, m = g->n - n0 < G ? g->n - n0 : G;
            const int64_t next = g->n - n0 - m < G ? g->n - n0 - m : G;
            float *dxn = dx + n0 * X;
            for (int64_t j = 0; j < m; j++)
                pad_rows_cm(dy + (n0 + j) * DY, g->ho, g->wo, O, dp + j * PF, DR, DC, g->kh,
                            g->kw, j >= zeroed);
            if (m > zeroed) zeroed = m;
            const float *nx = next ? dy + (n0 + m) * DY : NULL;
            int64_t phases = 0, phase = 0; /* the phases that run tiles share the prefetch */
            for (int64_t rh = 0; rh < g->sh && rh < g->h; rh++)
                for (int64_t rw = 0; rw < g->sw && rw < g->w; rw++) phases++;
            for (int64_t rh = 0; rh < g->sh && rh < g->h; rh++)
                for (int64_t rw = 0; rw < g->sw && rw < g->w; rw++, phase++) {
                    /* Windows three taps wide: this phase's window rows each read
                     * kc = 3 (stride 1 across) or 2 adjacent dy columns, tap k at
                     * column offset v0 + k, its weights those of column kwmax - k*sw.
                     * Other windows: one "row" per tap of this phase,
                     * dx[i*sh + rh, j*sw + rw] reading dy[i + di, j + dj]. */
                    int kc = 0;
                    int64_t kwmax = 0;
                    for (int64_t kw = 0; g->kw == 3 && kw < 3; kw++)
                        if (((rw + g->pw - kw) % g->sw + g->sw) % g->sw == 0) kc++, kwmax = kw;
                    int64_t nkh = 0, rows = (g->h - rh + g->sh - 1) / g->sh;
                    int64_t cols = (g->w - rw + g->sw - 1) / g->sw;
                    for (int64_t kh = 0; kh < g->kh; kh++)
                        nkh += ((rh + g->ph - kh) % g->sh + g->sh) % g->sh == 0;
                    /* rows of kc taps, or one row per tap: whichever plan_row
                     * finds cheaper */
                    row_plan P = {1, 1};
                    double best = -1;
                    if (kc >= 2) plan_row(cols, C, O, 1, kc, nkh, &P, &best);
                    plan_row(cols, C, O, 1, 1, nkh * (kc >= 2 ? kc : g->kw), &P, &best);
                    const int k = P.k;
                    int64_t roff[MAX_WINDOW * MAX_WINDOW];
                    const float *wt[MAX_WINDOW * MAX_WINDOW];
                    int nr = 0;
                    for (int64_t kh = 0; kh < g->kh; kh++) {
                        int64_t u = rh + g->ph - kh;
                        if (((u % g->sh) + g->sh) % g->sh) continue;
                        if (k > 1) {
                            roff[nr] = (u / g->sh) * O * DC + (rw + g->pw - kwmax) / g->sw;
                            for (int j = 0; j < k; j++)
                                wt[k * nr + j] = wp + (kh * 3 + kwmax - j * g->sw) * O * 8;
                            nr++;
                            continue;
                        }
                        for (int64_t kw = 0; kw < g->kw; kw++) {
                            int64_t v = rw + g->pw - kw;
                            if (((v % g->sw) + g->sw) % g->sw) continue;
                            roff[nr] = (u / g->sh) * O * DC + v / g->sw;
                            wt[nr++] = wp + (kh * g->kw + kw) * O * 8;
                        }
                    }
                    float *out = dxn + (rh * g->w + rw) * C;
                    if (nr == 0) { /* no tap reaches these pixels */
                        for (int64_t j = 0; j < m; j++)
                            for (int64_t i = 0; i < rows; i++)
                                for (int64_t q = 0; q < cols; q++)
                                    memset(out + j * X + (i * g->sh * g->w + q * g->sw) * C, 0,
                                           sizeof(float) * (size_t)C);
                        continue;
                    }
                    tile_args A = {.in = dp + g->kh * O * DC + g->kw, .cs = DC, .cin = O,
                                   .os = g->sw * C, .roff = roff, .w = wt, .rows = nr,
                                   .out = out};
                    row_set R = {.nimg = m, .nrows = rows, .iis = PF, .irs = O * DC, .ois = X,
                                 .ors = g->sh * g->w * C};
                    plane_tiles(A, wob, R, cols, C, 1, P,
                                span_part(nx, 4 * next * DY, phase, phases));
                }
        }
    }
    return PR_OK;
}

/* ---- filter gradient ---------------------------------------------------------- */

/* dw[CT rows] x [NB blocks of 8] += sum over nimg images' rectangles of
 * output pixels: x at image i, pixel (r, q) is x + i*xis + r*rs + q*ps,
 * and its row j of the tile (an input channel of one tap) at offset j
 * (OFFS = 0) or off[j] (OFFS = 1: the few-channel windows, whose rows are
 * (tap, channel) pairs of a padded x); dy at dy + i*dyis + r*drs + q*dps
 * (block 0 of the group); dw row j at dw + j*dwc.  The accumulators stay
 * in registers over all the images. */
typedef struct {
    const float *x, *dy;
    int64_t ps, rs, rows, cols, dps, drs, dwc, nimg, xis, dyis;
    const int64_t *off;
    float *dw;
    int lanes;     /* output channels in block NB-1: 8, or fewer in the last */
    pf_span pf[2]; /* of the next images' x and dy, spread over the rows */
} ftile_args;

ALWAYS_INLINE void ftile_body(const ftile_args *A, const int CT, const int NB, const int OFFS) {
    __m256 acc[MAX_NB][MAX_TILE];
    int64_t off[MAX_TILE];
    const int lanes = A->lanes;
    UNROLL
    for (int c = 0; c < CT; c++) {
        off[c] = OFFS ? A->off[c] : c;
        UNROLL
        for (int b = 0; b < NB - 1; b++) acc[b][c] = _mm256_loadu_ps(A->dw + c * A->dwc + 8 * b);
        acc[NB - 1][c] = load_block(A->dw + c * A->dwc + 8 * (NB - 1), lanes);
    }
    /* the prefetches: an even share of each span a row (no division in the
     * loop: small images' rows hold 2 to 7 pixels) */
    const int64_t steps = A->nimg * A->rows;
    const char *pf[2];
    int64_t pos[2], step[2];
    UNROLL
    for (int j = 0; j < 2; j++) {
        pf[j] = A->pf[j].p;
        pos[j] = 0;
        step[j] = pf[j] ? (A->pf[j].bytes + steps - 1) / steps : 0;
    }
    for (int64_t i = 0; i < A->nimg; i++)
        for (int64_t r = 0; r < A->rows; r++) {
            UNROLL
            for (int j = 0; j < 2; j++) {
                int64_t end = pos[j] + step[j];
                for (; pos[j] < end && pos[j] < A->pf[j].bytes; pos[j] += 64)
                    _mm_prefetch(pf[j] + pos[j], _MM_HINT_T1);
            }
            const float *xp = A->x + i * A->xis + r * A->rs;
            const float *dyp = A->dy + i * A->dyis + r * A->drs;
            for (int64_t q = 0; q < A->cols; q++, xp += A->ps, dyp += A->dps) {
                __m256 dv[MAX_NB];
                UNROLL
                for (int b = 0; b < NB - 1; b++) dv[b] = _mm256_loadu_ps(dyp + 8 * b);
                dv[NB - 1] = load_block(dyp + 8 * (NB - 1), lanes);
                UNROLL
                for (int c = 0; c < CT; c++) {
                    __m256 xv = _mm256_broadcast_ss(xp + off[c]);
                    UNROLL
                    for (int b = 0; b < NB; b++) acc[b][c] = _mm256_fmadd_ps(xv, dv[b], acc[b][c]);
                }
            }
        }
    UNROLL
    for (int c = 0; c < CT; c++) {
        UNROLL
        for (int b = 0; b < NB - 1; b++) _mm256_storeu_ps(A->dw + c * A->dwc + 8 * b, acc[b][c]);
        store_block(A->dw + c * A->dwc + 8 * (NB - 1), acc[NB - 1][c], lanes);
    }
}

typedef void (*ftile_fn)(const ftile_args *);
#define FTILE(CT, NB)                                                                   \
    AVX2_FN void ftile_##CT##_##NB(const ftile_args *A) { ftile_body(A, CT, NB, 0); }   \
    AVX2_FN void ftile_off_##CT##_##NB(const ftile_args *A) { ftile_body(A, CT, NB, 1); }
FTILE(1, 1) FTILE(2, 1) FTILE(3, 1) FTILE(4, 1) FTILE(5, 1) FTILE(6, 1) FTILE(7, 1) FTILE(8, 1)
FTILE(9, 1) FTILE(10, 1) FTILE(11, 1) FTILE(12, 1)
FTILE(1, 2) FTILE(2, 2) FTILE(3, 2) FTILE(4, 2) FTILE(5, 2) FTILE(6, 2)
/* ftiles[OFFS][NB][CT - 1] */
static const ftile_fn ftiles[2][MAX_NB + 1][MAX_TILE] = {
    {{NULL},
     {ftile_1_1, ftile_2_1, ftile_3_1, ftile_4_1, ftile_5_1, ftile_6_1, ftile_7_1, ftile_8_1,
      ftile_9_1, ftile_10_1, ftile_11_1, ftile_12_1},
     {ftile_1_2, ftile_2_2, ftile_3_2, ftile_4_2, ftile_5_2, ftile_6_2}},
    {{NULL},
     {ftile_off_1_1, ftile_off_2_1, ftile_off_3_1, ftile_off_4_1, ftile_off_5_1, ftile_off_6_1,
      ftile_off_7_1, ftile_off_8_1, ftile_off_9_1, ftile_off_10_1, ftile_off_11_1,
      ftile_off_12_1},
     {ftile_off_1_2, ftile_off_2_2, ftile_off_3_2, ftile_off_4_2, ftile_off_5_2,
      ftile_off_6_2}}};

/* Images summed by one pass of the tiles: as many as fit
 * FILTER_GROUP_BYTES, at least one, at most `n`. */
static int64_t filter_group(const pr_window *g, int64_t n) {
    int64_t bytes = 4 * image_floats(g);
    int64_t G = filter_packs(g) ? FILTER_GROUP_BYTES / (bytes ? bytes : 1) : 1;
    return G < 1 ? 1 : G > n ? n : G;
}

/* Copy `pixels` runs of `lanes` (<= MAX_TILE) floats, src_stride apart, to
 * dst, dst_stride apart, in order (8-float stores: up to 7 floats of slack
 * past the last run). */
AVX2_FN void copy_runs(const float *src, int64_t src_stride, float *dst, int64_t dst_stride,
                       int64_t pixels, int lanes) {
    if (lanes == 8)
        for (int64_t p = 0; p < pixels; p++)
            _mm256_storeu_ps(dst + p * dst_stride, _mm256_loadu_ps(src + p * src_stride));
    else
        for (int64_t p = 0; p < pixels; p++)
            for (int l = 0; l < lanes; l += 8)
                _mm256_storeu_ps(dst + p * dst_stride + l,
                                 load_block(src + p * src_stride + l, lanes - l < 8 ? lanes - l : 8));
}

/* The ct channels at c0 of nimg images (x, NHWC, X floats an image, W
 * columns, C channels) by phase (filter_phases): [row parity][column
 * parity][image][row][column][ct], PH x PW pixels a phase; 8-float stores in
 * order, each one's slack overwritten by the next (up to 7 floats past the
 * last). */
AVX2_FN void copy_phases(const float *x, int64_t C, int64_t X, int64_t W, int64_t PH,
                         int64_t PW, int64_t nimg, int ct, float *dst) {
    const __m256i mask = lane_mask(ct);
    for (int64_t a = 0; a < 2; a++)
        for (int64_t b = 0; b < 2; b++)
            for (int64_t j = 0; j < nimg; j++)
                for (int64_t i = 0; i < PH; i++) {
                    const float *src = x + j * X + ((2 * i + a) * W + b) * C;
                    for (int64_t q = 0; q < PW; q++, dst += ct, src += 2 * C)
                        _mm256_storeu_ps(dst, _mm256_maskload_ps(src, mask));
                }
}

/* Add the contributions of nimg consecutive images to the partial gradient
 * dw (T, C, O).  Tap (kh, kw) sums over the output pixels whose input pixel
 * is inside the image (the others read padding, zeros).  The loops go
 * blocks of output channels, tiles of input channels, taps: the dy block
 * and x channels of one tile stay in cache over the taps.  The blocks of
 * output channels go in pairs (three blocks, 12 accumulators beside 3 dy
 * vectors and the broadcast, spill one in GCC's inner loop); the input
 * channels in tiles of balanced widths.  With pk (filter_packs), x and dy
 * are first repacked there, x by tile of input channels (pixels ct floats
 * apart) and dy by pair of blocks (16 floats apart): read in place, both
 * step 4 * C and 4 * O bytes a pixel, which at 128 or 256 bytes maps every
 * pixel of a stream to a quarter of L1's sets and evicts them before the
 * next tap reads them again. */
static void filter_images(const pr_window *g, const float *xn, const float *dyn, int64_t nimg,
                          float *dw, float *pk, const float *next_x, const float *next_dy,
                          int64_t next_n) {
    const int64_t C = g->c, O = g->o, nob = blocks8(O), X = g->h * g->w * C;
    const int64_t DY = g->ho * g->wo * O, HW = g->h * g->w, P = g->ho * g->wo;
    /* tiles of input channels: the same for every group of blocks */
    const int64_t nct = ceil_div(C, MAX_TILE / (nob > 1 ? MAX_NB : 1));
    const int64_t tiles = ceil_div(nob, MAX_NB) * nct * g->kh * g->kw;
    float *dypk = pk ? pk + nimg * X : NULL; /* after the repacked x */
    const int phases = pk && filter_phases(g);
    const int64_t PH = g->h / 2, PW = g->w / 2; /* a phase's rows and columns */
    if (pk) /* x: [tile of input channels][image][pixel][ct], first (its last
             * 8-float store runs into dy's place); by phase:
             * [tile][image][row parity][column parity][row][column][ct], the
             * runs in that order (each store's slack is overwritten by the next) */
        for (int64_t ci = 0, c0 = 0; ci < nct; ci++) {
            const int ct = (int)(C / nct + (ci < C % nct));
            float *dst = pk + c0 * nimg * HW;
            if (phases) copy_phases(xn + c0, C, X, g->w, PH, PW, nimg, ct, dst);
            else
                copy_runs(xn + c0, C, dst, ct, nimg * HW, ct);
            c0 += ct;
        }
    if (pk) /* dy: [pair of blocks][image][pixel][16] */
        for (int64_t ob = 0; ob < nob; ob += MAX_NB) {
            int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
            for (int64_t b = 0; b < nb; b++)
                copy_runs(dyn + (ob + b) * 8, O, dypk + ob * 8 * nimg * P + b * 8, 8 * nb,
                          nimg * P, block_lanes(ob + b, nob, O));
        }
    /* Repacked: pairs of blocks, tiles of channels, taps (a tile's x and dy
     * stay in L1 over the taps); in place (x and dy at benign strides): taps,
     * pairs, tiles, as conv_direct.c. */
    const int64_t taps = g->kh * g->kw, npairs = ceil_div(nob, MAX_NB);
    int64_t order[MAX_WINDOW * MAX_WINDOW], n_ord = 0; /* the taps, by phase if x is */
    for (int64_t ph = 0; ph < (phases ? 4 : 1); ph++)
        for (int64_t u = 0; u < taps; u++)
            if (!phases || ((u / g->kw - g->ph) & 1) * 2 + ((u % g->kw - g->pw) & 1) == ph)
                order[n_ord++] = u;
    for (int64_t tile = 0; tile < tiles; tile++) {
        int64_t t = pk ? order[tile % taps] : tile / (npairs * nct);
        int64_t ci = pk ? tile / taps % nct : tile % nct;
        int64_t ob = MAX_NB * (pk ? tile / (taps * nct) : tile / nct % npairs);
        const int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
        const int64_t kh = t / g->kw, kw = t % g->kw;
        const int ct = (int)(C / nct + (ci < C % nct));
        const int64_t c0 = ci * (C / nct) + (ci < C % nct ? ci : C % nct);
        /* x of this tile's channels: in place (pixels C apart), or repacked */
        const float *xb = pk ? pk + c0 * nimg * HW : xn + c0;
        const int64_t xc = pk ? ct : C;
        const int64_t dc = pk ? 8 * nb : O; /* dy: floats between pixels */
        const float *d0 = pk ? dypk + ob * 8 * nimg * P : dyn + ob * 8;
        int64_t r0, r1, q0, q1; /* output rows and columns whose tap is inside x */
        tap_range(g->h, g->ho, g->sh, g->ph, kh, &r0, &r1);
        tap_range(g->w, g->wo, g->sw, g->pw, kw, &q0, &q1);
        if (r1 == r0 || q1 == q0) continue;
        const int64_t y0 = r0 * g->sh - g->ph + kh, x0 = q0 * g->sw - g->pw + kw; /* first x */
        const int64_t phase = ((y0 & 1) * 2 + (x0 & 1)) * nimg * PH * PW; /* its first pixel */
        ftile_args A = {
            .x = xb + (phases ? phase + (y0 >> 1) * PW + (x0 >> 1) : y0 * g->w + x0) * xc,
            .dy = d0 + (r0 * g->wo + q0) * dc, .ps = phases ? xc : g->sw * xc,
            .rs = phases ? PW * xc : g->sh * g->w * xc,
            .rows = r1 - r0, .cols = q1 - q0, .dps = dc, .drs = g->wo * dc, .dwc = O,
            .nimg = nimg, .xis = (phases ? PH * PW : HW) * xc, .dyis = P * dc,
            .dw = dw + (t * C + c0) * O + ob * 8, .lanes = block_lanes(ob + nb - 1, nob, O),
            .pf = {span_part(next_x, 4 * next_n * X, tile, tiles),
                   span_part(next_dy, 4 * next_n * DY, tile, tiles)}};
        /* runs of pixels one after the other in x and dy go as one (the same
         * sums in the same order, fewer loops) */
        if (A.cols * A.ps == A.rs && A.cols * A.dps == A.drs)
            A.cols *= A.rows, A.rows = 1, A.rs = A.cols * A.ps, A.drs = A.cols * A.dps;
        if (A.rows * A.rs == A.xis && A.rows * A.drs == A.dyis)
            A.rows *= A.nimg, A.nimg = 1;
        ftiles[0][nb][ct - 1](&A);
    }
}

/* Windows over few input channels (C <= FEW_C, the ResNet stem's 3): the
 * tile rows are (tap, channel) pairs rather than channels of one tap,
 * MAX_TILE / nb of them, read from a zero-padded copy of x (xp, rows of WP
 * pixels) so that every pair reads at a fixed offset from its pixel.  The
 * padding's zeros enter products (as the reference's im2col zeros do). */
static void filter_image_few(const pr_window *g, const float *xn, const float *dyn, float *dw,
                             float *xp, const float *next_x, const float *next_dy) {
    const int64_t C = g->c, O = g->o, nob = blocks8(O), WP = xpad_cols(g), HP = xpad_rows(g);
    const int64_t E = g->kh * g->kw * C; /* pairs, in dw's row order */
    memset(xp, 0, sizeof(float) * (size_t)(HP * WP * C));
    for (int64_t r = 0; r < g->h; r++) {
        int64_t pr = r + g->ph;
        if (pr >= HP) break;
        int64_t n = g->w < WP - g->pw ? g->w : WP - g->pw;
        memcpy(xp + (pr * WP + g->pw) * C, xn + r * g->w * C, sizeof(float) * (size_t)(n * C));
    }
    int64_t tile = 0, tiles = 0;
    for (int64_t ob = 0; ob < nob; ob += MAX_NB)
        tiles += ceil_div(E, MAX_TILE / (nob - ob < MAX_NB ? nob - ob : MAX_NB));
    for (int64_t ob = 0; ob < nob; ob += MAX_NB) {
        const int nb = (int)(nob - ob < MAX_NB ? nob - ob : MAX_NB);
        const int64_t nt = ceil_div(E, MAX_TILE / nb);
        for (int64_t ti = 0, e0 = 0; ti < nt; ti++, tile++) {
            const int ct = (int)(E / nt + (ti < E % nt));
            int64_t off[MAX_TILE];
            for (int j = 0; j < ct; j++) {
                int64_t e = e0 + j, t = e / C;
                off[j] = ((t / g->kw) * WP + t % g->kw) * C + e % C;
            }
            ftile_args A = {.x = xp, .dy = dyn + ob * 8, .ps = g->sw * C, .rs = g->sh * WP * C,
                            .rows = g->ho, .cols = g->wo, .dps = O, .drs = g->wo * O, .dwc = O,
                            .nimg = 1, .off = off, .dw = dw + e0 * O + ob * 8,
                            .lanes = block_lanes(ob + nb - 1, nob, O),
                            .pf = {span_part(next_x, 4 * g->h * g->w * C, tile, tiles),
                                   span_part(next_dy, 4 * g->ho * g->wo * O, tile, tiles)}};
            ftiles[1][nb][ct - 1](&A);
            e0 += ct;
        }
    }
}

/* conv_direct.c's filter_image3 (read its comment): windows three taps wide
 * at horizontal stride 1 or 2, one broadcast of x[q][c] serving every tap
 * that reads column q: acc[kw][c] (8 output channels) += x[q][c] *
 * dy[(q + pw - kw) / SW].  A tile is 3 taps x FT3_CT input channels x one
 * block of 8 output channels; the groups near the edges take a checked
 * copy of the loop body that forms no product for a pixel outside 0 .. wo-1
 * (x * 0 would turn an Inf or NaN of x into a NaN of a tap that never
 * reads this column). */
typedef struct {
    const float *x, *dy; /* x at the input row of the first output row, column 0, channel c0;
                            dy at that output row, pixel 0, block ob */
    int64_t xrs, drs;    /* floats from one output row's input row to the next; dy rows */
    int64_t c, o, pw, w, wo, rows, groups, g_lo, g_hi; /* groups [g_lo, g_hi): no checks */
    int64_t dwt, dwc; /* dw: floats between taps kw, between input channels */
    float *dw;        /* tap (kh, 0), channel c0, output block */
    int lanes;        /* output channels in the block: 8, or fewer in the last */
    pf_span pf[2]; /* of the next image's x and dy, spread over the rows */
} ftile3_args;

ALWAYS_INLINE void ftile3_group(__m256 acc[3][FT3_CT], const ftile3_args *A, const float *xr,
                                const float *dr, int64_t g, const int CT, const int SW,
                                const int checked) {
    __m256 d[3];
    int in[3] = {1, 1, 1}; /* pixel g - j exists (always, in unchecked groups) */
    UNROLL
    for (int j = 0; j <= 2 / SW; j++) {
        int64_t p = g - j; /* d[j]: dy of pixel g - j */
        if (checked) in[j] = p >= 0 && p < A->wo;
        d[j] = in[j] ? load_block(dr + p * A->o, A->lanes) : _mm256_setzero_ps();
    }
    UNROLL
    for (int s = 0; s < SW; s++) {
        int64_t q = g * SW + s - A->pw;
        if (checked && (q < 0 || q >= A->w)) continue;
        const float *xq = xr + q * A->c;
        UNROLL
        for (int c = 0; c < CT; c++) {
            __m256 b = _mm256_broadcast_ss(xq + c);
            UNROLL
            for (int k = 0; k < 3; k++) {
                if ((s - k + 2 * SW) % SW) continue; /* column g*SW + s is no input of tap k */
                if (checked && !in[(k - s) / SW]) continue; /* no such pixel: no product */
                acc[k][c] = _mm256_fmadd_ps(b, d[(k - s) / SW], acc[k][c]);
            }
        }
    }
}

ALWAYS_INLINE void ftile3_body(const ftile3_args *A, const int CT, const int SW) {
    __m256 acc[3][FT3_CT];
    const int lanes = A->lanes;
    UNROLL
    for (int k = 0; k < 3; k++)
        UNROLL
        for (int c = 0; c < CT; c++)
            acc[k][c] = load_block(A->dw + k * A->dwt + c * A->dwc, lanes);
    for (int64_t r = 0; r < A->rows; r++) {
        prefetch_part(A->pf[0].p, A->pf[0].bytes, r, A->rows);
        prefetch_part(A->pf[1].p, A->pf[1].bytes, r, A->rows);
        const float *xr = A->x + r * A->xrs, *dr = A->dy + r * A->drs;
        for (int64_t g = 0; g < A->g_lo; g++) ftile3_group(acc, A, xr, dr, g, CT, SW, 1);
        for (int64_t g = A->g_lo; g < A->g_hi; g++)
            ftile3_group(acc, A, xr, dr, g, CT, SW, 0);
        for (int64_t g = A->g_hi; g < A->groups; g++)
            ftile3_group(acc, A, xr, dr, g, CT, SW, 1);
    }
    UNROLL
    for (int k = 0; k < 3; k++)
        UNROLL
        for (int c = 0; c < CT; c++)
            store_block(A->dw + k * A->dwt + c * A->dwc, acc[k][c], lanes);
}

typedef void (*ftile3_fn)(const ftile3_args *);
#define FTILE3(CT, SW) \
    AVX2_FN void ftile3_##CT##_##SW(const ftile3_args *A) { ftile3_body(A, CT, SW); }
FTILE3(1, 1) FTILE3(2, 1) FTILE3(3, 1) FTILE3(4, 1)
FTILE3(1, 2) FTILE3(2, 2) FTILE3(3, 2) FTILE3(4, 2)
/* ftiles3_by_sw[SW - 1][CT - 1] */
static const ftile3_fn ftiles3_by_sw[2][FT3_CT] = {
    {ftile3_1_1, ftile3_2_1, ftile3_3_1, ftile3_4_1},
    {ftile3_1_2, ftile3_2_2, ftile3_3_2, ftile3_4_2}};

static void filter_image3(const pr_window *g, const float *xn, const float *dyn, float *dw,
                          const float *next_x, const float *next_dy) {
    const int64_t C = g->c, O = g->o, SW = g->sw, jmax = 2 / SW, nob = blocks8(O);
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
        for (int64_t ob = 0; ob < nob; ob++)
            for (int64_t c0 = 0; c0 < C; c0 += FT3_CT) {
                int64_t part = (kh * nob + ob) * ceil_div(C, FT3_CT) + c0 / FT3_CT;
                int64_t parts = g->kh * nob * ceil_div(C, FT3_CT);
                int ct = (int)(C - c0 < FT3_CT ? C - c0 : FT3_CT);
                ftile3_args A = {
                    .x = xn + (r0 * g->sh - g->ph + kh) * g->w * C + c0,
                    .dy = dyn + r0 * g->wo * O + ob * 8, .xrs = g->sh * g->w * C,
                    .drs = g->wo * O, .c = C, .o = O, .pw = g->pw, .w = g->w, .wo = g->wo,
                    .rows = r1 - r0, .groups = groups, .g_lo = g_lo, .g_hi = g_hi,
                    .dwt = C * O, .dwc = O, .dw = dw + (kh * 3 * C + c0) * O + ob * 8,
                    .lanes = block_lanes(ob, nob, O),
                    .pf = {span_part(next_x, 4 * g->h * g->w * C, part, parts),
                           span_part(next_dy, 4 * g->ho * g->wo * O, part, parts)}};
                ftiles3_by_sw[g->sw - 1][ct - 1](&A);
            }
    }
}

int pr_conv_direct_avx2_backprop_filter(const pr_window *g, const float *x, const float *dy,
                                        float *dw, void *scratch) {
    const int64_t C = g->c, O = g->o, K = g->kh * g->kw * C * O;
    const int64_t slot = avx2_slot_floats(g, PR_CONV_BACKPROP_FILTER);
    const int64_t stripes = count_slots(g->n, slot);
    if (stripes == 0) { /* empty batch */
        memset(dw, 0, sizeof(float) * (size_t)K);
        return PR_OK;
    }
    float *parts = (float *)scratch + round16(packed_floats(g, PR_CONV_BACKPROP_FILTER));
    /* filter_image3 with one block of output channels (with more, ftile
     * shares each broadcast among the blocks), as conv_direct.c decides;
     * few input channels: filter_image_few */
    const int three = g->kw == 3 && g->sw <= 2 && O <= 8, few = filter_few_channels(g);
    const int64_t X = g->h * g->w * C, DY = g->ho * g->wo * O;
#pragma omp parallel num_threads(threads_for(stripes))
    {
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            /* stripe s: images [n0, n1), in groups of G summed by one pass */
            float *part = parts + s * slot, *xp = part + round16(K);
            const int64_t n0 = g->n * s / stripes, n1 = g->n * (s + 1) / stripes;
            const int64_t G = three || few ? 1 : filter_group(g, n1 - n0);
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t n = n0; n < n1; n += G) {
                const int64_t m = n + G < n1 ? n + G : n1; /* this group: [n, m) */
                const int64_t next = n1 - m < G ? n1 - m : G;
                const float *xn = x + n * X, *dyn = dy + n * DY;
                const float *nx = next ? xn + (m - n) * X : NULL;
                const float *ndy = next ? dyn + (m - n) * DY : NULL;
                if (three) filter_image3(g, xn, dyn, part, nx, ndy);
                else if (few) filter_image_few(g, xn, dyn, part, xp, nx, ndy);
                else filter_images(g, xn, dyn, m - n, part, filter_packs(g) ? xp : NULL, nx,
                                   ndy, next);
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

#else /* not x86-64: no AVX2; the variant's CPU check never lets these run */

int pr_conv_direct_avx2_forward(const pr_window *g, const float *x, const float *w, float *y,
                                void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_direct_avx2_backprop_input(const pr_window *g, const float *dy, const float *w,
                                       float *dx, void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_direct_avx2_backprop_filter(const pr_window *g, const float *x, const float *dy,
                                        float *dw, void *scratch) {
    return PR_ERR_INTERNAL;
}

#endif
