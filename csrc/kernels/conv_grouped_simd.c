/* Grouped and depthwise convolutions with AVX2 + FMA or AVX-512
 * (conv_grouped_simd.h): the sums of conv_grouped.c in vector registers.
 * With cg = C / groups input and og = O / groups output channels a group,
 * T = KH*KW taps and a chunk of P output pixels (flattened over images, so
 * that the 2x2 and 4x4 maps of a RegNet's last stages still fill a tile):
 *
 *   forward          y[p, o]  = sum_(t, c) x[at(p, t), c] * w[t, c, o]
 *   backprop_input   dx[at(p, t), c] += sum_o dy[p, o] * w[t, c, o]
 *   backprop_filter  dw[t, c, o]     += sum_p x[at(p, t), c] * dy[p, o]
 *
 * where at(p, t) is the input pixel tap t of output pixel p reads.  No
 * im2col: an indirection table (Dukhan 2019, "The Indirect Convolution
 * Algorithm") holds, per chunk, a pointer for every (pixel, tap) -- to x's
 * pixel, or to a block of zeros where the tap reads padding.  Output
 * channels go in blocks of 8: a group of width 8 has one.
 *
 * AVX2 tiles keep up to 12 accumulators in ymm registers (+ the vectors
 * they share + one broadcast <= 16; Georganas et al., SC18, section 3):
 *   - forward: WT pixels x NB blocks of 8 output channels of the group
 *     (group widths 8, 16, 24 fill one, two or three registers), summed
 *     over taps and input channels; each broadcast of x feeds NB FMAs;
 *   - backprop_input: WT pixels x NB (tap, 8 input channels) blocks,
 *     summed over the group's og output channels of dy, then added into
 *     dx through the table (in pixel order, one thread per stripe of
 *     images);
 *   - backprop_filter: 8 input channels (one vector, loaded from x through
 *     the table) x 3 taps x 4 output channels (broadcasts of dy, read in
 *     place), summed over the chunk's pixels, added into dw: 7 loads (and
 *     3 table entries) feed 12 FMAs.
 *
 * AVX-512 pair tiles fill 16 lanes with a block of 8 output channels: lane
 * (o, j) of a zmm accumulator sums the products of input channels of parity
 * j, so one 8-byte broadcast of two neighbouring channels of x feeds a
 * 16-lane FMA with the weights of both (w packed pair-interleaved), and a
 * group of width 8 runs at the full vector width; the two halves are added
 * as the tile is stored.  The weight gradient uses the same lanes: (o, j)
 * of dw's rows of input channels 2m + j, from x's pair broadcast times dy
 * with each channel duplicated.  Forward and input gradient: WT pixels
 * (up to 24) x NB blocks; weight gradient: TT taps x WT channel pairs x NB
 * blocks (up to 24 accumulators).  Group widths must be even.
 *
 * AVX512_BF16 pair tiles (PR_GROUPED_AVX512_BF16, forward and input
 * gradient only): the same lanes in bfloat16 arithmetic, a VDPBF16PS for
 * each FMA; lane (o, j) sums the pair of input channels (c + 2j, c + 2j +
 * 1) of each step of 4, one 8-byte broadcast of 4 bfloat16 channels feeding
 * 32 products.  x and dy are read as bfloat16 in place through the same
 * indirection tables (their pointer arithmetic in bytes, geo.es); the sums
 * are float32; a bfloat16 output is rounded once as it is stored (geo.os).
 * Group widths must be multiples of 4.
 *
 * Weights are repacked per call, zero-padded.  Depthwise convolutions (cg
 * = og = 1, AVX2 only) are vectors over 8 channels instead (no product to
 * share): each pixel sums its taps inside the image.
 *
 * Order of the sums: each output is summed in one tile in a fixed order,
 * the input gradient's contributions in pixel order and the filter
 * gradient over fixed stripes of images (added in stripe order) or per
 * group, so that the result does not depend on the thread count.  The
 * padding's zeros are multiplied in (as the im2col reference does);
 * conv_grouped.c skips them, which differs only for an Inf or NaN weight
 * (forward) or dy (filter gradient) next to the padding.
 *
 * Compiled per function for "avx2,fma", "avx512f,fma" or (the bfloat16
 * tiles) "avx512f,avx512bw,avx512vl,avx512bf16,fma" and run only when the
 * CPU probe reports them (ops_conv.c's avx2_grouped, avx512_grouped and
 * avx512_grouped_dp_bf16 variants); off x86-64 the entry points are stubs. */
#include "conv_grouped_simd.h"

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

#define MAX_THREADS 16 /* per-thread scratch areas; more threads are not used */
#define MAX_STRIPES 16 /* stripes of images (the filter gradient's partial sums) */
#ifndef FT_W1
#define FT_W1 8
#endif
#define MAX_PHASE_TAPS 64 /* taps of a sub-pixel phase of the input gradient */
#define CHUNK 120      /* output pixels of an indirection table */
#define PARTIAL_BYTES ((int64_t)64 << 20) /* per-stripe partial dw, all stripes, at most */

typedef struct {
    const pr_window *g;
    int64_t G, cg, og, T, nbc, nbo; /* nbc, nbo: blocks of 8 of cg, og */
    int64_t hw, S;                  /* pixels an image, stripes */
    int depthwise;                  /* cg == og == 1 */
    int64_t es;                     /* bytes of an operand's element (x, dy) */
    int64_t os;                     /* bytes of an output's element (y, dx) */
} geo;

static void geo_init(geo *q, const pr_window *g, int64_t groups) {
    q->g = g;
    q->G = groups;
    q->cg = g->c / groups;
    q->og = g->o / groups;
    q->T = g->kh * g->kw;
    q->nbc = (q->cg + 7) / 8;
    q->nbo = (q->og + 7) / 8;
    q->hw = g->ho * g->wo;
    q->S = g->n < MAX_STRIPES ? g->n : MAX_STRIPES;
    q->depthwise = q->cg == 1 && q->og == 1;
    q->es = q->os = sizeof(float); /* begin_pass: the isa's, the output's */
}

static int64_t r16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* The zeros block that padding taps read: a pixel of x or of dy. */
static int64_t zeros_floats(const geo *q) {
    return (q->g->c > q->g->o ? q->g->c : q->g->o) + 8;
}

/* Floats of one thread's area: the indirection table and tap offsets
 * (CHUNK x T, 8 bytes an entry), the row table (CHUNK), the zeros block
 * (C + 8 floats). */
static int64_t thread_floats(const geo *q) {
    return 2 * r16(2 * CHUNK * q->T) + r16(2 * CHUNK) + r16(zeros_floats(q));
}

static int64_t packed_floats(const geo *q, pr_conv_pass pass) {
    if (q->depthwise) return 0;
    if (pass == PR_CONV_FORWARD) return r16(q->G * q->T * q->cg * q->nbo * 8);
    if (pass == PR_CONV_BACKPROP_INPUT) return r16(q->G * q->T * q->og * q->nbc * 8);
    return 0;
}

/* Whether the filter gradient sums per stripe of images into partial dw
 * (then adds them in stripe order) rather than per group straight into dw. */
static int filter_partials(const geo *q) {
    int64_t dw = q->T * q->cg * q->g->o;
    return q->depthwise || (q->G < 8 && 4 * q->S * dw <= PARTIAL_BYTES);
}

int pr_conv_grouped_simd_supports(pr_grouped_isa isa, const pr_window *g, int64_t groups) {
    if (groups < 2) return 0;
    int64_t taps = ((g->kh + g->sh - 1) / g->sh) * ((g->kw + g->sw - 1) / g->sw);
    int64_t cg = g->c / groups, og = g->o / groups;
    int fits = cg <= 512 && og <= 512 && taps <= MAX_PHASE_TAPS;
    if (isa == PR_GROUPED_AVX512_BF16) return fits && cg % 4 == 0 && og % 4 == 0;
    return isa == PR_GROUPED_AVX512 ? fits && cg % 2 == 0 && og % 2 == 0 : fits;
}

size_t pr_conv_grouped_simd_scratch_bytes(const pr_window *g, int64_t groups, pr_conv_pass pass) {
    geo q;
    geo_init(&q, g, groups);
    int64_t f = packed_floats(&q, pass) + MAX_THREADS * thread_floats(&q);
    if (pass == PR_CONV_BACKPROP_FILTER && filter_partials(&q))
        f += q.S * r16(q.T * q.cg * g->o);
    return sizeof(float) * (size_t)f;
}

#if defined(__x86_64__)

#include "avx2.h"
#include "bf16.h"

/* Channels of block b of n channels in blocks of 8 (8 but in the last). */
static int lanes_of(int64_t b, int64_t n) { return n - 8 * b >= 8 ? 8 : (int)(n - 8 * b); }

/* ---- the tiles ------------------------------------------------------------------ */

/* The accumulators acc[j][m], j < NB blocks, m < WT rows, of ft_body and bt_body <- 0. */
ALWAYS_INLINE void zero_acc(__m256 acc[3][12], const int WT, const int NB) {
    UNROLL
    for (int j = 0; j < NB; j++)
        UNROLL
        for (int m = 0; m < WT; m++) acc[j][m] = _mm256_setzero_ps();
}

/* Forward and input gradient: C(m, j) = sum_(t, c) A(m, t, c) B(t*ck + c, j)
 * for m < WT rows, j < NB blocks of 8 columns; A(m, t, c) = ap[t*np + m][aoff + c]
 * (t < nt, c < ck, a multiple of KI); B(k, j) = the 8 floats at b + k*bk + 8*j;
 * C(m, j) = the 8 floats at cp[m] + coff + 8*j (`last` of them in block NB - 1);
 * and the same for ng groups, group i's aoff, b and coff moved by i*ga, i*gb, i*gc. */
typedef struct {
    const float *const *ap; /* the table: tap t of row m at ap[t*np + m] */
    int64_t np, aoff, nt, ck;
    const float *b;
    int64_t bk;
    float *const *cp;
    int64_t coff;
    int last;
    int64_t ng, ga, gb, gc;
    int bf16out; /* (bfloat16 tiles) C is bfloat16, rounded as it is stored */
} ft_args;

/* The kinds of forward / input-gradient tile: (KP, ONE, NT) of fp_body (pairs
 * of channels a step, ck == 2 * KP, taps) and of ft_body (2 * KP channels a
 * step: KP == 1 is ft_body's KI = 1).  ck == 8 (one step, no channel loop:
 * the RegNets' group width) with the 9 taps of a 3x3 window or the 4, 2, 1
 * of its stride-2 input gradient's phases, or any; ck a multiple of 8;
 * other ck (the pair tiles: other even ck).  Fixed trip counts made the
 * AVX-512 pair tiles 15-25% faster. */
#define KIND0 4, 1, 9
#define KIND1 4, 1, 4
#define KIND2 4, 1, 2
#define KIND3 4, 1, 1
#define KIND4 4, 1, 0
#define KIND5 4, 0, 0
#define KIND6 1, 0, 0

/* The kind of tile for t's ck and nt. */
static int tile_kind(const ft_args *t) {
    if (t->ck != 8) return t->ck % 8 == 0 ? 5 : 6;
    return t->nt == 9 ? 0 : t->nt == 4 ? 1 : t->nt == 2 ? 2 : t->nt == 1 ? 3 : 4;
}

/* Group gi of the tile: KI channels a step (ONE: ck == KI, one step), NT
 * taps (0: A->nt). */
ALWAYS_INLINE void ft_group(const ft_args *A, int64_t gi, const int WT, const int NB,
                            const int KI, const int ONE, const int NT) {
    __m256 acc[3][12];
    zero_acc(acc, WT, NB);
    const float *b = A->b + gi * A->gb;
    const int64_t bk = A->bk, ck = ONE ? KI : A->ck, aoff = A->aoff + gi * A->ga;
    const int64_t nt = NT ? NT : A->nt;
    for (int64_t t = 0; t < nt; t++) {
        const float *r[12];
        UNROLL
        for (int m = 0; m < WT; m++) r[m] = A->ap[t * A->np + m] + aoff;
        for (int64_t c = 0; c < ck; c += KI) {
            UNROLL
            for (int kk = 0; kk < KI; kk++) {
                __m256 wv[3];
                UNROLL
                for (int j = 0; j < NB; j++) wv[j] = _mm256_loadu_ps(b + 8 * j);
                b += bk;
                UNROLL
                for (int m = 0; m < WT; m++) {
                    __m256 xv = _mm256_broadcast_ss(r[m] + kk);
                    UNROLL
                    for (int j = 0; j < NB; j++)
                        acc[j][m] = _mm256_fmadd_ps(xv, wv[j], acc[j][m]);
                }
            }
            UNROLL
            for (int m = 0; m < WT; m++) r[m] += KI;
        }
    }
    const int last = A->last;
    const int64_t coff = A->coff + gi * A->gc;
    UNROLL
    for (int m = 0; m < WT; m++) {
        float *d = A->cp[m] + coff;
        UNROLL
        for (int j = 0; j < NB - 1; j++) _mm256_storeu_ps(d + 8 * j, acc[j][m]);
        store_block(d + 8 * (NB - 1), acc[NB - 1][m], last);
    }
}

/* ft_group for the groups gi < ng, one after another (one call for them
 * all: the AVX-512 pair tiles' 368-channel input gradient ran 1.5x as
 * fast so). */
ALWAYS_INLINE void ft_body(const ft_args *A, const int WT, const int NB, const int KP,
                           const int ONE, const int NT) {
    for (int64_t gi = 0; gi < A->ng; gi++)
        ft_group(A, gi, WT, NB, KP == 1 ? 1 : 2 * KP, ONE, NT);
}

/* Filter gradient: C(t, m, j) += sum_k A(t, m, k) B(k, j) for taps t < nt,
 * input channels m, blocks j of 8 output channels; A(t, m, k) =
 * ap[t*np + k][aoff + m] (k < np), B(k, j) = the 8 floats at b + k*bk +
 * 8*j, C(t, m, j) = the jl[j] floats at c + t*ldt + m*ldc + 8*j.  (The
 * AVX2 tiles, ct_body, read B one float at a time: B(k, j) lane o is
 * b[k*bk + 8*j + o].) */
typedef struct {
    const float *const *ap;
    int64_t nt, aoff, np;
    const float *b;
    int64_t bk;
    float *c;
    int64_t ldt, ldc;
    const int *jl;
    int lanes; /* (ct_body) input channels in the tile's vector: 8, or fewer in the last */
} bt_args;

/* The AVX2 filter-gradient tile: TT taps x OO output channels, each
 * accumulator a vector over 8 input channels.  Per pixel k it loads x's 8
 * channels at each tap (one vector a tap, through the table) and
 * broadcasts dy's OO channels: TT + OO loads (and TT table entries) feed
 * TT * OO FMAs, where tiles over input channels (a broadcast of x a
 * product) take one load an FMA.  The sums are the same, in the same order
 * (pixel after pixel into a zeroed accumulator, then added into C), so the
 * result does not change with the tile's shape.  As stored, each
 * accumulator is a column of C (8 input channels of one output channel):
 * the tile writes its TT x 8 x OO block through a transposing buffer. */
#define CT_TT 3 /* taps of a filter-gradient tile, at most */
#define CT_OO 4 /* output channels of a filter-gradient tile, at most */
ALWAYS_INLINE void ct_body(const bt_args *A, const int TT, const int OO) {
    __m256 acc[CT_TT][CT_OO];
    UNROLL
    for (int t = 0; t < TT; t++)
        UNROLL
        for (int o = 0; o < OO; o++) acc[t][o] = _mm256_setzero_ps();
    const int lanes = A->lanes;
    const float *b = A->b;
    const float *const *ap = A->ap;
    const int64_t bk = A->bk, aoff = A->aoff, np = A->np;
    for (int64_t k = 0; k < np; k++, b += bk, ap++) {
        __m256 xv[CT_TT];
        UNROLL
        for (int t = 0; t < TT; t++) xv[t] = load_block(ap[t * np] + aoff, lanes);
        UNROLL
        for (int o = 0; o < OO; o++) {
            __m256 d = _mm256_broadcast_ss(b + o);
            UNROLL
            for (int t = 0; t < TT; t++) acc[t][o] = _mm256_fmadd_ps(xv[t], d, acc[t][o]);
        }
    }
    float col[CT_OO][8];
    UNROLL
    for (int t = 0; t < TT; t++) {
        UNROLL
        for (int o = 0; o < OO; o++) _mm256_storeu_ps(col[o], acc[t][o]);
        float *d = A->c + t * A->ldt;
        for (int m = 0; m < lanes; m++)
            UNROLL
            for (int o = 0; o < OO; o++) d[m * A->ldc + o] += col[o][m];
    }
}

typedef void (*ft_fn)(const ft_args *);
typedef void (*bt_fn)(const bt_args *);

#define FT(WT, NB, K) \
    AVX2_FN void ft_##WT##_##NB##_##K(const ft_args *A) { ft_body(A, WT, NB, KIND##K); }
#define CT(TT, OO) \
    AVX2_FN void ct_##TT##_##OO(const bt_args *A) { ct_body(A, TT, OO); }
#define TILES(F, KI)                                                                           \
    F(1, 1, KI) F(2, 1, KI) F(3, 1, KI) F(4, 1, KI) F(5, 1, KI) F(6, 1, KI) F(7, 1, KI)        \
    F(8, 1, KI) F(9, 1, KI) F(10, 1, KI) F(11, 1, KI) F(12, 1, KI) F(1, 2, KI) F(2, 2, KI)     \
    F(3, 2, KI) F(4, 2, KI) F(5, 2, KI) F(6, 2, KI) F(1, 3, KI) F(2, 3, KI) F(3, 3, KI)        \
    F(4, 3, KI)
TILES(FT, 0)
TILES(FT, 1)
TILES(FT, 2)
TILES(FT, 3)
TILES(FT, 4)
TILES(FT, 5)
TILES(FT, 6)
CT(1, 1) CT(1, 2) CT(1, 3) CT(1, 4) CT(2, 1) CT(2, 2) CT(2, 3) CT(2, 4)
CT(3, 1) CT(3, 2) CT(3, 3) CT(3, 4)
#define REFS(P, KI)                                                                            \
    {{P##_1_1_##KI, P##_2_1_##KI, P##_3_1_##KI, P##_4_1_##KI, P##_5_1_##KI, P##_6_1_##KI,     \
      P##_7_1_##KI, P##_8_1_##KI, P##_9_1_##KI, P##_10_1_##KI, P##_11_1_##KI, P##_12_1_##KI}, \
     {P##_1_2_##KI, P##_2_2_##KI, P##_3_2_##KI, P##_4_2_##KI, P##_5_2_##KI, P##_6_2_##KI},     \
     {P##_1_3_##KI, P##_2_3_##KI, P##_3_3_##KI, P##_4_3_##KI}}
/* ft_fns[kind][NB - 1][WT - 1], ct_fns[TT - 1][OO - 1] */
static const ft_fn ft_fns[7][3][12] = {REFS(ft, 0), REFS(ft, 1), REFS(ft, 2), REFS(ft, 3),
                                       REFS(ft, 4), REFS(ft, 5), REFS(ft, 6)};
static const bt_fn ct_fns[CT_TT][CT_OO] = {{ct_1_1, ct_1_2, ct_1_3, ct_1_4},
                                           {ct_2_1, ct_2_2, ct_2_3, ct_2_4},
                                           {ct_3_1, ct_3_2, ct_3_3, ct_3_4}};

/* The widest tile of NB blocks: NB*WT accumulators <= 12, and WT row
 * pointers that stay in general registers (12 of them spill). */
static const int ft_width[4] = {0, FT_W1, 6, 4};

/* The forward / input-gradient tiles over M rows and NJ column blocks of
 * `channels`: NB = min(3, blocks left) blocks x ft_width[NB] rows, each
 * tile over all t->ng groups.  all: row 0, block 0, group 0. */
static void run_ft(const ft_args *all, int64_t M, int64_t NJ, int64_t channels) {
    const int kind = tile_kind(all);
    for (int64_t j0 = 0; j0 < NJ; j0 += 3) {
        int nb = NJ - j0 < 3 ? (int)(NJ - j0) : 3, wt = ft_width[nb];
        for (int64_t m0 = 0; m0 < M; m0 += wt) {
            int rows = M - m0 < wt ? (int)(M - m0) : wt;
            ft_args A = *all;
            A.ap += m0;
            A.b += 8 * j0;
            A.cp += m0;
            A.coff += 8 * j0;
            A.last = lanes_of(j0 + nb - 1, channels);
            ft_fns[kind][nb - 1][rows - 1](&A);
        }
    }
}

/* The AVX2 filter-gradient tiles (ct_body): CT_TT taps x 8 input channels
 * x CT_OO output channels at a time, smaller at the ends. */
static void run_ct(const bt_args *all, int64_t cg, int64_t og) {
    for (int64_t t0 = 0; t0 < all->nt; t0 += CT_TT) {
        int tt = all->nt - t0 < CT_TT ? (int)(all->nt - t0) : CT_TT;
        for (int64_t m0 = 0; m0 < cg; m0 += 8)
            for (int64_t o0 = 0; o0 < og; o0 += CT_OO) {
                int oo = og - o0 < CT_OO ? (int)(og - o0) : CT_OO;
                bt_args A = *all;
                A.ap += t0 * A.np;
                A.aoff += m0;
                A.b += o0;
                A.c += t0 * A.ldt + m0 * A.ldc + o0;
                A.lanes = cg - m0 < 8 ? (int)(cg - m0) : 8;
                ct_fns[tt - 1][oo - 1](&A);
            }
    }
}

/* ---- AVX-512 pair tiles ---------------------------------------------------------- */

#define AVX512_FN static __attribute__((target("avx512f,fma")))
#define INLINE512 static inline __attribute__((always_inline, target("avx512f,fma")))
#define PAIR_ACC 24 /* accumulators of a pair tile, at most (of 32 zmm registers) */

/* Lane indices: the even lanes then the odd ones; each of 8 lanes twice. */
static const int32_t evens_odds[16] = {0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15};
static const int32_t twice[16] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7};
/* The even lanes of a then of b (16 + i); the odd ones. */
static const int32_t two_rows[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
                                     22, 24, 26, 28, 30, 1,  3,  5,  7,  9,  11,
                                     13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
/* Lanes 0-7 of a and of b (16 + i) interleaved. */
static const int32_t interleave[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};

/* The two floats at p in every pair of lanes. */
INLINE512 __m512 pair_broadcast(const float *p) {
    double d;
    memcpy(&d, p, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* Lanes 2i + 2i+1 summed, in lanes i < 8 (the rest: don't care). */
INLINE512 __m512 pair_sums(__m512 v) {
    __m512 s = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1)); /* swap neighbours */
    return _mm512_permutexvar_ps(_mm512_loadu_si512(evens_odds), s);
}

/* Forward and input gradient, pair tiles: C(m, j) = sum_(t, c) A(m, t, c)
 * B(t, c, j) for m < WT rows, j < NB blocks of 8 columns; A(m, t, c) =
 * ap[t*np + m][aoff + c] (t < nt, c < ck even, in steps of 2*KP); B of
 * channels (c, c + 1) = the 16 floats at b + (c / 2)*bk + 16*j, lane 2o + i
 * for channel c + i; C(m, j) = the 8 floats at cp[m] + coff + 8*j (`last`
 * of them in block NB - 1); of group gi (ft_args). */
INLINE512 void fp_group(const ft_args *A, int64_t gi, const int WT, const int NB, const int KP,
                        const int ONE, const int NT) {
    const int64_t bk = A->bk, ck = A->ck;
    __m512 acc[2][PAIR_ACC];
    UNROLL
    for (int j = 0; j < NB; j++)
        UNROLL
        for (int m = 0; m < WT; m++) acc[j][m] = _mm512_setzero_ps();
    const float *b = A->b + gi * A->gb;
    const int64_t aoff = A->aoff + gi * A->ga, coff = A->coff + gi * A->gc;
    const int64_t nt = NT ? NT : A->nt; /* NT: nt known (9: a 3x3 window) */
    for (int64_t t = 0; t < nt; t++)
        for (int64_t c = 0; c < (ONE ? 2 * KP : ck); c += 2 * KP) { /* ONE: ck == 2*KP */
            __m512 wv[4][2];
            UNROLL
            for (int kk = 0; kk < KP; kk++)
                UNROLL
                for (int j = 0; j < NB; j++) wv[kk][j] = _mm512_loadu_ps(b + kk * bk + 16 * j);
            b += KP * bk;
            UNROLL
            for (int m = 0; m < WT; m++) {
                const float *r = A->ap[t * A->np + m] + aoff + c;
                UNROLL
                for (int kk = 0; kk < KP; kk++) {
                    __m512 xv = pair_broadcast(r + 2 * kk);
                    UNROLL
                    for (int j = 0; j < NB; j++)
                        acc[j][m] = _mm512_fmadd_ps(xv, wv[kk][j], acc[j][m]);
                }
            }
        }
    /* rows in twos: the pairs' sums of rows m and m + 1 in lanes 0-7 and 8-15 */
    const __mmask16 last = (__mmask16)((1u << A->last) - 1);
    const __m512i evens = _mm512_loadu_si512(two_rows), odds = _mm512_loadu_si512(two_rows + 16);
    UNROLL
    for (int m = 0; m < WT; m += 2) {
        float *d = A->cp[m] + coff, *e = m + 1 < WT ? A->cp[m + 1] + coff : NULL;
        UNROLL
        for (int j = 0; j < NB; j++) {
            __mmask16 k = j < NB - 1 ? 0xFF : last;
            if (m + 1 == WT) {
                _mm512_mask_storeu_ps(d + 8 * j, k, pair_sums(acc[j][m]));
                continue;
            }
            __m512 v = _mm512_add_ps(_mm512_permutex2var_ps(acc[j][m], evens, acc[j][m + 1]),
                                     _mm512_permutex2var_ps(acc[j][m], odds, acc[j][m + 1]));
            _mm512_mask_storeu_ps(d + 8 * j, k, v);
            _mm512_mask_storeu_ps(e + 8 * j, k, _mm512_shuffle_f32x4(v, v, 0xEE));
        }
    }
}

/* fp_group for the groups gi < ng, one after another. */
INLINE512 void fp_body(const ft_args *A, const int WT, const int NB, const int KP,
                       const int ONE, const int NT) {
    for (int64_t gi = 0; gi < A->ng; gi++) fp_group(A, gi, WT, NB, KP, ONE, NT);
}

/* Filter gradient, pair tiles: acc(t, m, j) lane 2o + i = the sum over the
 * pixels of x's channel aoff + 2m + i at tap t times dy's channel 8j + o
 * (bt_args; B is dy itself, each channel loaded twice), for t < TT taps,
 * m < WT channel pairs, j < NB blocks; added into dw's rows 2m and 2m + 1. */
INLINE512 void bp_body(const bt_args *A, const int TT, const int WT, const int NB) {
    __m512 acc[6][8][2];
    UNROLL
    for (int t = 0; t < TT; t++)
        UNROLL
        for (int m = 0; m < WT; m++)
            UNROLL
            for (int j = 0; j < NB; j++) acc[t][m][j] = _mm512_setzero_ps();
    const float *b = A->b;
    const float *const *ap = A->ap;
    const int64_t bk = A->bk, np = A->np, aoff = A->aoff;
    const __m512i dup = _mm512_loadu_si512(twice);
    __mmask16 lanes[2];
    UNROLL
    for (int j = 0; j < NB; j++) lanes[j] = (__mmask16)((1u << A->jl[j]) - 1);
    for (int64_t k = 0; k < np; k++, b += bk, ap++) {
        __m512 dv[2]; /* dy's 8 channels of block j, each twice */
        UNROLL
        for (int j = 0; j < NB; j++)
            dv[j] = _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(lanes[j], b + 8 * j));
        UNROLL
        for (int t = 0; t < TT; t++) {
            const float *a = ap[t * np] + aoff;
            UNROLL
            for (int m = 0; m < WT; m++) {
                __m512 xv = pair_broadcast(a + 2 * m);
                UNROLL
                for (int j = 0; j < NB; j++)
                    acc[t][m][j] = _mm512_fmadd_ps(xv, dv[j], acc[t][m][j]);
            }
        }
    }
    const __m512i split = _mm512_loadu_si512(evens_odds);
    UNROLL
    for (int t = 0; t < TT; t++)
        UNROLL
        for (int m = 0; m < WT; m++)
            UNROLL
            for (int j = 0; j < NB; j++) {
                __m512 v = _mm512_permutexvar_ps(split, acc[t][m][j]);
                float *d = A->c + t * A->ldt + 2 * m * A->ldc + 8 * j;
                int l = A->jl[j];
                __m256 lo = _mm512_castps512_ps256(v);
                __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
                store_block(d, _mm256_add_ps(lo, load_block(d, l)), l);
                store_block(d + A->ldc, _mm256_add_ps(hi, load_block(d + A->ldc, l)), l);
            }
}

#define FP(WT, NB, K) \
    AVX512_FN void fp_##WT##_##NB##_##K(const ft_args *A) { fp_body(A, WT, NB, KIND##K); }
/* The pair tiles' widths (WT pixels x NB blocks, NB*WT accumulators + the weights <= 30):
 * T(WT, NB, K) for each, and the table of the functions P_WT_NB_K, [NB - 1][WT - 1]. */
#define PAIR_TILES(T, K)                                                                        \
    T(1, 1, K) T(2, 1, K) T(3, 1, K) T(4, 1, K) T(5, 1, K) T(6, 1, K) T(7, 1, K) T(8, 1, K)     \
    T(9, 1, K) T(10, 1, K) T(11, 1, K) T(12, 1, K) T(13, 1, K) T(14, 1, K) T(15, 1, K)          \
    T(16, 1, K) T(17, 1, K) T(18, 1, K) T(19, 1, K) T(20, 1, K) T(21, 1, K) T(22, 1, K)         \
    T(23, 1, K) T(24, 1, K) T(1, 2, K) T(2, 2, K) T(3, 2, K) T(4, 2, K) T(5, 2, K) T(6, 2, K)   \
    T(7, 2, K) T(8, 2, K) T(9, 2, K) T(10, 2, K) T(11, 2, K)
#define PAIR_REFS(P, K)                                                                         \
    {{P##_1_1_##K, P##_2_1_##K, P##_3_1_##K, P##_4_1_##K, P##_5_1_##K, P##_6_1_##K,             \
      P##_7_1_##K, P##_8_1_##K, P##_9_1_##K, P##_10_1_##K, P##_11_1_##K, P##_12_1_##K,          \
      P##_13_1_##K, P##_14_1_##K, P##_15_1_##K, P##_16_1_##K, P##_17_1_##K, P##_18_1_##K,       \
      P##_19_1_##K, P##_20_1_##K, P##_21_1_##K, P##_22_1_##K, P##_23_1_##K, P##_24_1_##K},      \
     {P##_1_2_##K, P##_2_2_##K, P##_3_2_##K, P##_4_2_##K, P##_5_2_##K, P##_6_2_##K,             \
      P##_7_2_##K, P##_8_2_##K, P##_9_2_##K, P##_10_2_##K, P##_11_2_##K}}
#define FP_TILES(K) PAIR_TILES(FP, K)
FP_TILES(0)
FP_TILES(1)
FP_TILES(2)
FP_TILES(3)
FP_TILES(4)
FP_TILES(5)
FP_TILES(6)
#define FP_REFS(K) PAIR_REFS(fp, K)
/* fp_fns[kind][NB - 1][WT - 1] */
static const ft_fn fp_fns[7][2][PAIR_ACC] = {FP_REFS(0), FP_REFS(1), FP_REFS(2), FP_REFS(3),
                                               FP_REFS(4), FP_REFS(5), FP_REFS(6)};

/* The widest forward tile of NB blocks: NB*WT accumulators + 4*NB weights <= 30. */
static const int fp_width[3] = {0, PAIR_ACC, 11};

#define BP(TT, WT, NB) \
    AVX512_FN void bp_##TT##_##WT##_##NB(const bt_args *A) { bp_body(A, TT, WT, NB); }
#define BP_TAPS(TT)                                                                             \
    BP(TT, 1, 1) BP(TT, 2, 1) BP(TT, 3, 1) BP(TT, 4, 1) BP(TT, 5, 1) BP(TT, 6, 1) BP(TT, 7, 1)  \
    BP(TT, 8, 1) BP(TT, 1, 2) BP(TT, 2, 2) BP(TT, 3, 2) BP(TT, 4, 2)
BP_TAPS(1)
BP_TAPS(2)
BP_TAPS(3)
BP_TAPS(4)
BP_TAPS(5)
BP_TAPS(6)
#define BP_REFS(TT)                                                                             \
    {{bp_##TT##_1_1, bp_##TT##_2_1, bp_##TT##_3_1, bp_##TT##_4_1, bp_##TT##_5_1, bp_##TT##_6_1, \
      bp_##TT##_7_1, bp_##TT##_8_1},                                                            \
     {bp_##TT##_1_2, bp_##TT##_2_2, bp_##TT##_3_2, bp_##TT##_4_2}}
/* bp_fns[TT - 1][NB - 1][WT - 1] */
static const bt_fn bp_fns[6][2][8] = {BP_REFS(1), BP_REFS(2), BP_REFS(3),
                                      BP_REFS(4), BP_REFS(5), BP_REFS(6)};

/* The forward / input-gradient pair tiles over M rows and NJ column blocks of
 * `channels`: NB = min(2, blocks left) blocks x fp_width[NB] rows, each tile
 * over all t->ng groups; fns: fp_fns (float32) or dp_fns (bfloat16). */
static void run_pair_tiles(const ft_fn fns[7][2][PAIR_ACC], const ft_args *t, int64_t M,
                           int64_t NJ, int64_t channels) {
    int kind = tile_kind(t);
    for (int64_t j0 = 0; j0 < NJ; j0 += 2) {
        int nb = NJ - j0 < 2 ? (int)(NJ - j0) : 2, wt = fp_width[nb];
        for (int64_t m0 = 0; m0 < M; m0 += wt) {
            int rows = M - m0 < wt ? (int)(M - m0) : wt;
            ft_args A = *t;
            A.ap += m0;
            A.b += 16 * j0;
            A.cp += m0;
            A.coff += 8 * j0;
            A.last = lanes_of(j0 + nb - 1, channels);
            fns[kind][nb - 1][rows - 1](&A);
        }
    }
}
static void run_fp(const ft_args *t, int64_t M, int64_t NJ, int64_t channels) {
    run_pair_tiles(fp_fns, t, M, NJ, channels);
}

/* The filter-gradient pair tiles: NB = min(2, blocks left) blocks x WT =
 * min(8 / NB, pairs left) channel pairs x TT = min(PAIR_ACC / (NB * WT), 6, taps left) taps. */
static void run_bp(const bt_args *all, int64_t cg, int64_t og) {
    const int64_t pairs = cg / 2, NJ = (og + 7) / 8;
    for (int64_t j0 = 0; j0 < NJ; j0 += 2) {
        int nb = NJ - j0 < 2 ? (int)(NJ - j0) : 2;
        for (int64_t m0 = 0; m0 < pairs; m0 += 8 / nb) {
            int wt = pairs - m0 < 8 / nb ? (int)(pairs - m0) : 8 / nb;
            int most = PAIR_ACC / (wt * nb) < 6 ? PAIR_ACC / (wt * nb) : 6;
            for (int64_t t0 = 0; t0 < all->nt; t0 += most) {
                int tt = all->nt - t0 < most ? (int)(all->nt - t0) : most;
                bt_args A = *all;
                A.ap += t0 * A.np;
                A.aoff += 2 * m0;
                A.b += 8 * j0;
                A.c += t0 * A.ldt + 2 * m0 * A.ldc + 8 * j0;
                A.jl += j0;
                bp_fns[tt - 1][nb - 1][wt - 1](&A);
            }
        }
    }
}

/* ---- AVX512_BF16 pair tiles ------------------------------------------------------
 * The pair tiles in bfloat16: VDPBF16PS adds to each float32 lane the two
 * products of a pair of bfloat16 values (low and high halves of the
 * 32-bit lane), so lane (o, j) = 2o + j of an accumulator sums, for each
 * step of 4 reduced channels c..c+3, x[c + 2j] w[c + 2j][o] + x[c + 2j + 1]
 * w[c + 2j + 1][o]: one 8-byte broadcast of x's 4 channels (a 32-bit pair
 * in the even lanes, the next pair in the odd ones) feeds 32 products, the
 * weights packed as pairs of channels, pair-interleaved (pack_forward_dp,
 * pack_backprop_input_dp).  The lanes and the store are fp_group's: the
 * two halves of (o, 0) and (o, 1) added as the tile is stored, in float32.
 * Each product of two bfloat16 values is exact in float32; VDPBF16PS reads
 * a bfloat16 subnormal as zero and flushes a subnormal sum to zero (Intel
 * SDM, VDPBF16PS), which the tests' tolerances cover. */

#define DP_TARGET "avx512f,avx512bw,avx512vl,avx512bf16,fma"
#define DP_FN static __attribute__((target(DP_TARGET)))
#define INLINE_DP static inline __attribute__((always_inline, target(DP_TARGET)))

/* The four bfloat16 values at p (8 bytes) in every pair of 32-bit lanes. */
INLINE_DP __m512 quad_broadcast(const uint16_t *p) {
    double d;
    memcpy(&d, p, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* v rounded to 16 bfloat16 values exactly as pr_bf16_round16 rounds it (to nearest even,
 * NaN quieted): VCVTNEPS2BF16 does the same but flushes a subnormal float32 to zero, so
 * lanes with one (a sum of two halves can be) take pr_bf16_round16.  magnitude: 16 x
 * 0x7fffffff; smallest_normal: 16 x 2^-126. */
/* (not inlined: its constants would be hoisted into the tiles' registers) */
DP_FN __attribute__((noinline)) __m256i round_bf16_exactly(__m512 v) {
    return pr_bf16_round16(v);
}
INLINE_DP __m256i round_bf16(__m512 v, __m512i magnitude, __m512 smallest_normal) {
    const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), magnitude));
    __mmask16 tiny = _mm512_cmp_ps_mask(a, smallest_normal, _CMP_LT_OQ);
    if (_mm512_mask_cmp_ps_mask(tiny, a, _mm512_setzero_ps(), _CMP_NEQ_OQ))
        return round_bf16_exactly(v);
    return (__m256i)_mm512_cvtneps_pbh(v);
}

/* Forward and input gradient in bfloat16: fp_group's C(m, j) with A(m, t,
 * c) = the bfloat16 ap[t*np + m][aoff + c] (t < nt, c < ck a multiple of
 * 4, in steps of 4*KQ); B of channels c..c+3 = the 16 32-bit lanes at b +
 * (c / 4)*bk + 16*j, lane 2o + i the bfloat16 pair of channels (c + 2i,
 * c + 2i + 1) for output o.  KQ: steps of 4 channels a weight load; ONE:
 * ck == 4*KQ; NT: nt known (0: any). */
INLINE_DP void dp_group(const ft_args *A, int64_t gi, const int WT, const int NB, const int KQ,
                        const int ONE, const int NT) {
    const int64_t bk = A->bk, ck = A->ck;
    __m512 acc[2][PAIR_ACC];
    UNROLL
    for (int j = 0; j < NB; j++)
        UNROLL
        for (int m = 0; m < WT; m++) acc[j][m] = _mm512_setzero_ps();
    const float *b = A->b + gi * A->gb;
    const int64_t aoff = A->aoff + gi * A->ga, coff = A->coff + gi * A->gc;
    const int64_t nt = NT ? NT : A->nt;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t c = 0; c < (ONE ? 4 * KQ : ck); c += 4 * KQ) {
            __m512 wv[2][2];
            UNROLL
            for (int kk = 0; kk < KQ; kk++)
                UNROLL
                for (int j = 0; j < NB; j++) wv[kk][j] = _mm512_loadu_ps(b + kk * bk + 16 * j);
            b += KQ * bk;
            UNROLL
            for (int m = 0; m < WT; m++) {
                const uint16_t *r = (const uint16_t *)A->ap[t * A->np + m] + aoff + c;
                UNROLL
                for (int kk = 0; kk < KQ; kk++) {
                    __m512 xv = quad_broadcast(r + 4 * kk);
                    UNROLL
                    for (int j = 0; j < NB; j++)
                        acc[j][m] = _mm512_dpbf16_ps(acc[j][m], (__m512bh)xv, (__m512bh)wv[kk][j]);
                }
            }
        }
    /* rows in twos, as fp_group stores them; a bfloat16 C: both rows rounded at once
     * (round_bf16: to nearest even, NaN quieted, as pr_f32_to_bf16).  The store's
     * constants are read through pointers an empty asm launders after the sums, so that
     * they are made here rather than kept in registers the accumulators need (GCC hoisted
     * them above the loop and spilled an accumulator in the 24-row tiles). */
    static const int32_t bits[2] = {0x7fffffff, 0x00800000}; /* |x| mask, 2^-126 */
    const int32_t *perm = two_rows, *cb = bits;
    __asm__("" : "+r"(perm), "+r"(cb) : "v"(acc[0][0])); /* after the sums are done */
    const __mmask16 last = (__mmask16)((1u << A->last) - 1);
    const __m512i evens = _mm512_loadu_si512(perm), odds = _mm512_loadu_si512(perm + 16);
    const __m512i magnitude = _mm512_set1_epi32(cb[0]);
    const __m512 smallest_normal = _mm512_castsi512_ps(_mm512_set1_epi32(cb[1]));
    const int bf16out = A->bf16out;
    UNROLL
    for (int m = 0; m < WT; m += 2) {
        float *d = A->cp[m], *e = m + 1 < WT ? A->cp[m + 1] : NULL;
        UNROLL
        for (int j = 0; j < NB; j++) {
            __mmask16 k = j < NB - 1 ? 0xFF : last;
            __m512 v = m + 1 == WT ? pair_sums(acc[j][m])
                                   : _mm512_add_ps(
                                         _mm512_permutex2var_ps(acc[j][m], evens, acc[j][m + 1]),
                                         _mm512_permutex2var_ps(acc[j][m], odds, acc[j][m + 1]));
            if (bf16out) {
                __m256i h = round_bf16(v, magnitude, smallest_normal);
                _mm_mask_storeu_epi16((uint16_t *)d + coff + 8 * j, (__mmask8)k,
                                      _mm256_castsi256_si128(h));
                if (m + 1 < WT)
                    _mm_mask_storeu_epi16((uint16_t *)e + coff + 8 * j, (__mmask8)k,
                                          _mm256_extracti128_si256(h, 1));
                continue;
            }
            _mm512_mask_storeu_ps(d + coff + 8 * j, k, v);
            if (m + 1 < WT)
                _mm512_mask_storeu_ps(e + coff + 8 * j, k, _mm512_shuffle_f32x4(v, v, 0xEE));
        }
    }
}

/* dp_group for the groups gi < ng, one after another. */
INLINE_DP void dp_body(const ft_args *A, const int WT, const int NB, const int KQ,
                       const int ONE, const int NT) {
    for (int64_t gi = 0; gi < A->ng; gi++) dp_group(A, gi, WT, NB, KQ, ONE, NT);
}

/* The kinds of bfloat16 tile, tile_kind's numbering: (KQ, ONE, NT) of dp_body.  ck == 8 (two
 * steps of 4 channels, no channel loop) with 9, 4, 2, 1 or any taps; ck a multiple of 8;
 * other multiples of 4. */
#define DKIND0 2, 1, 9
#define DKIND1 2, 1, 4
#define DKIND2 2, 1, 2
#define DKIND3 2, 1, 1
#define DKIND4 2, 1, 0
#define DKIND5 2, 0, 0
#define DKIND6 1, 0, 0
#define DP(WT, NB, K) \
    DP_FN void dp_##WT##_##NB##_##K(const ft_args *A) { dp_body(A, WT, NB, DKIND##K); }
#define DP_TILES(K) PAIR_TILES(DP, K)
DP_TILES(0)
DP_TILES(1)
DP_TILES(2)
DP_TILES(3)
DP_TILES(4)
DP_TILES(5)
DP_TILES(6)
#define DP_REFS(K) PAIR_REFS(dp, K)
/* dp_fns[kind][NB - 1][WT - 1] */
static const ft_fn dp_fns[7][2][PAIR_ACC] = {DP_REFS(0), DP_REFS(1), DP_REFS(2), DP_REFS(3),
                                               DP_REFS(4), DP_REFS(5), DP_REFS(6)};

/* run_fp with the bfloat16 tiles (the same widths: NB*WT accumulators + 2*NB weights). */
static void run_dp(const ft_args *t, int64_t M, int64_t NJ, int64_t channels) {
    run_pair_tiles(dp_fns, t, M, NJ, channels);
}

/* ---- operands ------------------------------------------------------------------- */

/* Per-thread area (thread_floats). */
typedef struct {
    const float **ptab; /* [t * np + p], np pixels */
    int64_t *off;       /* [p * T + t] */
    const float **rows; /* [p] */
    float *zeros;
} area;

static area thread_area(const geo *q, float *base, int tid) {
    float *f = base + tid * thread_floats(q);
    area r;
    r.ptab = (const float **)f;
    f += r16(2 * CHUNK * q->T);
    r.off = (int64_t *)f;
    f += r16(2 * CHUNK * q->T);
    r.rows = (const float **)f;
    f += r16(2 * CHUNK);
    r.zeros = f;
    memset(r.zeros, 0, sizeof(float) * (size_t)zeros_floats(q));
    return r;
}

/* The indirection table of output pixels q0 .. q0 + np: ptab[t * np + p] =
 * x's pixel that tap t of pixel q0 + p reads, or `zeros` for padding.  Along
 * a row of output pixels whose windows lie inside the image, each tap's
 * entries are an arithmetic progression (stored in one vectorisable loop);
 * the pixels near the image's edges are tested tap by tap. */
static void indirection(const geo *q, int64_t q0, int64_t np, const void *x, const float *zeros,
                        const float **ptab) {
    const pr_window *g = q->g;
    const int64_t es = q->es, step = g->sw * g->c * es; /* bytes */
    /* output columns whose window lies inside the image's columns */
    const int64_t ow_lo = (g->pw + g->sw - 1) / g->sw, ow_hi = (g->w - g->kw + g->pw) / g->sw;
    int64_t n = q0 / q->hw, r = q0 % q->hw, oh = r / g->wo, ow = r % g->wo;
    for (int64_t p = 0; p < np;) {
        /* a run of pixels along output row oh of image n: the corner moves by step */
        int64_t ih0 = oh * g->sh - g->ph, run = g->wo - ow < np - p ? g->wo - ow : np - p;
        const char *base =
            (const char *)x + ((n * g->h + ih0) * g->w + ow * g->sw - g->pw) * g->c * es;
        int64_t k0 = 0, k1 = 0; /* the run's pixels [k0, k1) have every tap inside */
        if (ih0 >= 0 && ih0 + g->kh <= g->h) {
            k0 = ow_lo - ow > 0 ? ow_lo - ow : 0;
            k1 = ow_hi + 1 - ow < run ? ow_hi + 1 - ow : run;
            if (k1 <= k0) k0 = k1 = 0;
        }
        for (int64_t t = 0; t < q->T; t++) {
            const char *v = base + (t / g->kw * g->w + t % g->kw) * g->c * es;
            const float **e = ptab + t * np + p;
            for (int64_t k = k0; k < k1; k++) e[k] = (const float *)(v + k * step);
        }
        for (int64_t k = 0; k < run; k++) {
            if (k == k0 && k1 > k0) k = k1;
            if (k == run) break;
            int64_t iw0 = (ow + k) * g->sw - g->pw;
            for (int64_t kh = 0; kh < g->kh; kh++) {
                int rin = ih0 + kh >= 0 && ih0 + kh < g->h;
                const char *row = base + k * step + kh * g->w * g->c * es;
                for (int64_t kw = 0; kw < g->kw; kw++)
                    ptab[(kh * g->kw + kw) * np + p + k] =
                        rin && iw0 + kw >= 0 && iw0 + kw < g->w
                            ? (const float *)(row + kw * g->c * es)
                            : zeros;
            }
        }
        p += run;
        ow += run;
        if (ow == g->wo) {
            ow = 0;
            if (++oh == g->ho) oh = 0, n++;
        }
    }
}

/* off[t] of one output pixel (the depthwise kernels): x's offset, -1 for padding. */
static void tap_offsets(const geo *q, int64_t pix, int64_t *off) {
    const pr_window *g = q->g;
    int64_t n = pix / q->hw, r = pix % q->hw, oh = r / g->wo, ow = r % g->wo;
    for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t ih = oh * g->sh - g->ph + kh;
        for (int64_t kw = 0; kw < g->kw; kw++) {
            int64_t iw = ow * g->sw - g->pw + kw;
            off[kh * g->kw + kw] = ih < 0 || ih >= g->h || iw < 0 || iw >= g->w
                                       ? -1
                                       : ((n * g->h + ih) * g->w + iw) * g->c;
        }
    }
}

typedef void pack_pass(const geo *q, const void *w, float *wp);
static pack_pass pack_forward_avx2, pack_backprop_input_avx2;
AVX512_FN void pack_forward_pair(const geo *q, const void *w, float *wp);
AVX512_FN void pack_backprop_input_pair(const geo *q, const void *w, float *wp);
static pack_pass pack_forward_dp, pack_backprop_input_dp;

/* What differs between the instruction sets: the tiles, and how weights
 * are packed for them (the filter gradient's tiles read dy in place).
 * pair: weights in blocks of 16 32-bit lanes (lane 2 * lane + parity) a
 * pair of float32 channels or (bfloat16, wdiv 2) two pairs of channels;
 * else blocks of 8 floats a channel.  es: bytes of an operand's element;
 * wdiv: reduced channels a 32-bit weight lane holds. */
typedef struct {
    int pair;
    void (*run_ft)(const ft_args *t, int64_t M, int64_t NJ, int64_t channels);
    void (*run_bt)(const bt_args *all, int64_t cg, int64_t og);
    pack_pass *pack_forward, *pack_backprop_input;
    int64_t es, wdiv;
} tiles;

static const tiles avx2_tiles = {0, run_ft, run_ct, pack_forward_avx2,
                                 pack_backprop_input_avx2, 4, 1};
static const tiles pair_tiles = {1, run_fp, run_bp, pack_forward_pair,
                                 pack_backprop_input_pair, 4, 1};
/* bfloat16: no filter-gradient tiles (that pass is refused) */
static const tiles dp_tiles = {1, run_dp, NULL, pack_forward_dp, pack_backprop_input_dp,
                               2, 2};

static const tiles *tiles_of(pr_grouped_isa isa) {
    if (isa == PR_GROUPED_AVX512_BF16) return &dp_tiles;
    return isa == PR_GROUPED_AVX512 ? &pair_tiles : &avx2_tiles;
}

static int threads_for(int64_t units) {
    int64_t t = pr_get_num_threads();
    if (t > MAX_THREADS) t = MAX_THREADS;
    return (int)(units < 1 ? 1 : units < t ? units : t);
}

/* Pixels [*q0, *q1) of stripe s (whole images). */
static void stripe_pixels(const geo *q, int64_t s, int64_t *q0, int64_t *q1) {
    *q0 = q->g->n * s / q->S * q->hw;
    *q1 = q->g->n * (s + 1) / q->S * q->hw;
}

AVX2_FN void dw_forward(const geo *q, const float *x, const float *w, float *y, void *scratch);
AVX2_FN void dw_backprop_input(const geo *q, const float *dy, const float *w, float *dx,
                               void *scratch);
AVX2_FN void dw_backprop_filter(const geo *q, const float *x, const float *dy, float *dw,
                                void *scratch);

typedef void dw_pass(const geo *q, const float *in, const float *w, float *out, void *scratch);

/* The start of the forward and input-gradient passes: q for (g, groups); a
 * depthwise convolution runs whole in dw (PR_OK, *areas NULL); else w packed
 * for isa's tiles at the start of scratch and *areas the per-thread areas
 * after it (PR_OK), or PR_ERR_INTERNAL for a geometry isa does not take (or
 * a bfloat16 output but for the bfloat16 tiles). */
static int begin_pass(pr_grouped_isa isa, geo *q, const pr_window *g, int64_t groups,
                      pr_conv_pass pass, dw_pass *dw, const void *in, const void *w,
                      void *out, pr_dtype out_dtype, void *scratch, float **areas) {
    geo_init(q, g, groups);
    q->es = tiles_of(isa)->es;
    q->os = pr_dtype_size(out_dtype);
    *areas = NULL;
    if (!pr_conv_grouped_simd_supports(isa, g, groups) ||
        (out_dtype != PR_F32 && (isa != PR_GROUPED_AVX512_BF16 || out_dtype != PR_BF16)))
        return PR_ERR_INTERNAL;
    if (q->depthwise) { /* float32 only: the bfloat16 tiles refuse it */
        dw(q, in, w, out, scratch);
        return PR_OK;
    }
    float *wp = scratch;
    *areas = wp + packed_floats(q, pass);
    const tiles *ts = tiles_of(isa);
    (pass == PR_CONV_FORWARD ? ts->pack_forward : ts->pack_backprop_input)(q, w, wp);
    return PR_OK;
}

/* ---- forward ---------------------------------------------------------------------- */

/* AVX2: wp[gi][t][c][ob][8] = w[t, c, gi * og + 8 * ob + lane], zeros past og. */
static void pack_forward_avx2(const geo *q, const void *wv, float *wp) {
    const float *w = wv;
    const int64_t O = q->g->o, nbo8 = q->nbo * 8;
    for (int64_t gi = 0; gi < q->G; gi++)
        for (int64_t tc = 0; tc < q->T * q->cg; tc++) {
            float *d = wp + (gi * q->T * q->cg + tc) * nbo8;
            const float *s = w + tc * O + gi * q->og;
            for (int64_t o = 0; o < nbo8; o++) d[o] = o < q->og ? s[o] : 0.0f;
        }
}

/* Pair tiles: wp[gi][t][c / 2][ob][16], lane 2 * lane + i = w[t, c + i, gi * og
 * + 8 * ob + lane] (c even), zeros past og. */
AVX512_FN void pack_forward_pair(const geo *q, const void *wv, float *wp) {
    const float *w = wv;
    const int64_t O = q->g->o;
    const __m512i mix = _mm512_loadu_si512(interleave);
    for (int64_t gi = 0; gi < q->G; gi++)
        for (int64_t tc = 0; tc < q->T * q->cg; tc += 2) {
            const float *s = w + tc * O + gi * q->og;
            for (int64_t ob = 0; ob < q->nbo; ob++, wp += 16) {
                int l = lanes_of(ob, q->og);
                __m512 a = _mm512_castps256_ps512(load_block(s + 8 * ob, l));
                __m512 b = _mm512_castps256_ps512(load_block(s + O + 8 * ob, l));
                _mm512_storeu_ps(wp, _mm512_permutex2var_ps(a, mix, b));
            }
        }
}

int pr_conv_grouped_simd_forward(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                 const void *x, const void *w, void *y, pr_dtype y_dtype,
                                 void *scratch) {
    geo q;
    float *wp = scratch, *areas;
    int rc = begin_pass(isa, &q, g, groups, PR_CONV_FORWARD, dw_forward, x, w, y, y_dtype,
                        scratch, &areas);
    if (rc != PR_OK || !areas) return rc;
    const tiles *ts = tiles_of(isa);
#pragma omp parallel for num_threads(threads_for(q.S)) schedule(dynamic)
    for (int64_t s = 0; s < q.S; s++) {
        area ar = thread_area(&q, areas, THREAD_ID());
        int64_t s0, s1;
        stripe_pixels(&q, s, &s0, &s1);
        for (int64_t q0 = s0; q0 < s1; q0 += CHUNK) {
            int64_t np = s1 - q0 < CHUNK ? s1 - q0 : CHUNK;
            indirection(&q, q0, np, x, ar.zeros, ar.ptab);
            for (int64_t p = 0; p < np; p++)
                ar.rows[p] = (const float *)((char *)y + (q0 + p) * g->o * q.os);
            ft_args t = {ar.ptab, np, 0, q.T, q.cg, wp, (ts->pair ? 16 : 8) * q.nbo,
                         (float *const *)ar.rows, 0, 8, q.G, q.cg,
                         q.T * q.cg * q.nbo * 8 / ts->wdiv, q.og, y_dtype == PR_BF16};
            ts->run_ft(&t, np, q.nbo, q.og);
        }
    }
    return PR_OK;
}

/* ---- backprop_input ----------------------------------------------------------------- */

/* The input gradient gathers (a forward convolution of dy, Dumoulin & Visin
 * 2016, section 4): dx pixel (ih, iw) of sub-pixel phase ((ih + ph) % sh,
 * (iw + pw) % sw) takes exactly the taps (kh, kw) of that phase, from dy
 * pixel ((ih + ph - kh) / sh, (iw + pw - kw) / sw) where that lies inside
 * dy.  Its pixels run phase by phase, so that a tile's pixels share their
 * taps and no product is formed with a tap that skips them. */
typedef struct {
    int64_t rh, rw, nt;       /* phase, its taps */
    int64_t ih0, iw0, nh, nw; /* its first row and column, and their counts */
    int64_t kh[MAX_PHASE_TAPS], kw[MAX_PHASE_TAPS]; /* its taps */
} phase;

static int64_t mod(int64_t a, int64_t m) { return (a % m + m) % m; }

/* Phase ph_i of sh * sw; NULL-free: windows and strides the variant takes. */
static void phase_of(const pr_window *g, int64_t i, phase *f) {
    f->rh = i / g->sw;
    f->rw = i % g->sw;
    f->nt = 0;
    for (int64_t kh = f->rh; kh < g->kh; kh += g->sh)
        for (int64_t kw = f->rw; kw < g->kw; kw += g->sw) {
            f->kh[f->nt] = kh;
            f->kw[f->nt] = kw;
            f->nt++;
        }
    f->ih0 = mod(f->rh - g->ph, g->sh);
    f->iw0 = mod(f->rw - g->pw, g->sw);
    f->nh = f->ih0 < g->h ? (g->h - f->ih0 + g->sh - 1) / g->sh : 0;
    f->nw = f->iw0 < g->w ? (g->w - f->iw0 + g->sw - 1) / g->sw : 0;
}


/* AVX2, phase by phase: wp[gi][i][o][cb][8] = w[tap i of the phase, 8 * cb +
 * lane, gi * og + o], zeros past cg. */
static void pack_backprop_input_avx2(const geo *q, const void *wv, float *wp) {
    const float *w = wv;
    const pr_window *g = q->g;
    const int64_t O = g->o, nbc8 = q->nbc * 8;
    for (int64_t pi = 0; pi < g->sh * g->sw; pi++) {
        phase f;
        phase_of(g, pi, &f);
        for (int64_t gi = 0; gi < q->G; gi++)
            for (int64_t i = 0; i < f.nt; i++)
                for (int64_t o = 0; o < q->og; o++, wp += nbc8) {
                    int64_t t = f.kh[i] * g->kw + f.kw[i];
                    for (int64_t c = 0; c < nbc8; c++)
                        wp[c] = c < q->cg ? w[(t * q->cg + c) * O + gi * q->og + o] : 0.0f;
                }
    }
}

/* Pair tiles, phase by phase: wp[gi][i][o / 2][cb][16], lane 2 * lane + j =
 * w[tap i of the phase, 8 * cb + lane, gi * og + o + j] (o even), zeros past
 * cg: each block a gather of 8 pairs of floats, one a row of w. */
AVX512_FN void pack_backprop_input_pair(const geo *q, const void *wv, float *wp) {
    const float *w = wv;
    const pr_window *g = q->g;
    const int64_t O = g->o;
    int64_t rows[8];
    for (int c = 0; c < 8; c++) rows[c] = c * O * (int64_t)sizeof(float);
    const __m512i at = _mm512_loadu_si512(rows);
    for (int64_t pi = 0; pi < g->sh * g->sw; pi++) {
        phase f;
        phase_of(g, pi, &f);
        for (int64_t gi = 0; gi < q->G; gi++)
            for (int64_t i = 0; i < f.nt; i++) {
                const float *wt = w + (f.kh[i] * g->kw + f.kw[i]) * q->cg * O + gi * q->og;
                for (int64_t o = 0; o < q->og; o += 2)
                    for (int64_t cb = 0; cb < q->nbc; cb++, wp += 16) {
                        __mmask8 m = (__mmask8)((1u << lanes_of(cb, q->cg)) - 1);
                        __m512d v = _mm512_mask_i64gather_pd(_mm512_setzero_pd(), m, at,
                                                             wt + 8 * cb * O + o, 1);
                        _mm512_storeu_ps(wp, _mm512_castpd_ps(v));
                    }
            }
    }
}

/* The 32-bit lane of two bfloat16 values: lo in the low half, hi in the high. */
static uint32_t bf16_pair(uint16_t lo, uint16_t hi) { return lo | (uint32_t)hi << 16; }

/* bfloat16 tiles: wp[gi][t][c / 4][ob][16] 32-bit lanes, lane 2 * lane + j =
 * the pair w[t, c + 2j, o], w[t, c + 2j + 1, o] of o = gi * og + 8 * ob +
 * lane (c a multiple of 4), zeros past og. */
static void pack_forward_dp(const geo *q, const void *wv, float *wpf) {
    const uint16_t *w = wv;
    uint32_t *wp = (uint32_t *)wpf;
    const int64_t O = q->g->o;
    for (int64_t gi = 0; gi < q->G; gi++)
        for (int64_t tc = 0; tc < q->T * q->cg; tc += 4) {
            const uint16_t *s = w + tc * O + gi * q->og;
            for (int64_t ob = 0; ob < q->nbo; ob++, wp += 16)
                for (int64_t l = 0; l < 8; l++)
                    for (int64_t j = 0; j < 2; j++) {
                        int64_t o = 8 * ob + l, at = 2 * j * O + o;
                        wp[2 * l + j] = o < q->og ? bf16_pair(s[at], s[at + O]) : 0;
                    }
        }
}

/* bfloat16 tiles, phase by phase: wp[gi][i][o / 4][cb][16] 32-bit lanes,
 * lane 2 * lane + j = the pair w[tap i of the phase, c, gi * og + o + 2j]
 * and (..., o + 2j + 1) of c = 8 * cb + lane (o a multiple of 4), zeros
 * past cg. */
static void pack_backprop_input_dp(const geo *q, const void *wv, float *wpf) {
    const uint16_t *w = wv;
    uint32_t *wp = (uint32_t *)wpf;
    const pr_window *g = q->g;
    const int64_t O = g->o;
    for (int64_t pi = 0; pi < g->sh * g->sw; pi++) {
        phase f;
        phase_of(g, pi, &f);
        for (int64_t gi = 0; gi < q->G; gi++)
            for (int64_t i = 0; i < f.nt; i++) {
                const uint16_t *wt = w + (f.kh[i] * g->kw + f.kw[i]) * q->cg * O + gi * q->og;
                for (int64_t o = 0; o < q->og; o += 4)
                    for (int64_t cb = 0; cb < q->nbc; cb++, wp += 16)
                        for (int64_t l = 0; l < 8; l++)
                            for (int64_t j = 0; j < 2; j++) {
                                int64_t c = 8 * cb + l, at = c * O + o + 2 * j;
                                wp[2 * l + j] = c < q->cg ? bf16_pair(wt[at], wt[at + 1]) : 0;
                            }
            }
    }
}

/* Chunk [u0, u0 + np) of phase f's pixels of images n0...: the rows of dx
 * (rows) and the dy pixel of each tap (ptab[i * np + p], zeros outside dy).
 * Pixel (a, b) of the phase, (ih0 + a*sh, iw0 + b*sw), takes dy pixel
 * (a + dh_i, b + dw_i) through tap i (exact: ih0 + ph = kh_i mod sh).  As
 * in `indirection`, runs of pixels with every tap inside dy are stored tap
 * by tap as arithmetic progressions. */
static void phase_tables(const geo *q, const phase *f, int64_t n0, int64_t u0, int64_t np,
                         const void *dy, void *dx, const float *zeros, const float **ptab,
                         const float **rows) {
    const pr_window *g = q->g;
    /* o, at[]: dy's pixel and taps' offsets in bytes */
    const int64_t per = f->nh * f->nw, nt = f->nt, step = g->sw * g->c, o = g->o * q->es;
    int64_t dh[MAX_PHASE_TAPS], dw[MAX_PHASE_TAPS], at[MAX_PHASE_TAPS];
    int64_t h0 = 0, h1 = 0, w0 = 0, w1 = 0; /* the taps' least and greatest dh, dw */
    for (int64_t i = 0; i < nt; i++) {
        dh[i] = (f->ih0 + g->ph - f->kh[i]) / g->sh;
        dw[i] = (f->iw0 + g->pw - f->kw[i]) / g->sw;
        at[i] = (dh[i] * g->wo + dw[i]) * o;
        h0 = i == 0 || dh[i] < h0 ? dh[i] : h0;
        h1 = i == 0 || dh[i] > h1 ? dh[i] : h1;
        w0 = i == 0 || dw[i] < w0 ? dw[i] : w0;
        w1 = i == 0 || dw[i] > w1 ? dw[i] : w1;
    }
    int64_t n = n0 + u0 / per, a = u0 % per / f->nw, b = u0 % per % f->nw;
    for (int64_t p = 0; p < np;) {
        /* a run along the phase's row a of image n: dx moves by sw pixels, dy by one */
        int64_t run = f->nw - b < np - p ? f->nw - b : np - p;
        char *d = (char *)dx +
                  ((n * g->h + f->ih0 + a * g->sh) * g->w + f->iw0 + b * g->sw) * g->c * q->os;
        const char *img = (const char *)dy + n * g->ho * g->wo * o,
                   *here = img + (a * g->wo + b) * o;
        for (int64_t k = 0; k < run; k++) rows[p + k] = (const float *)(d + k * step * q->os);
        int64_t k0 = 0, k1 = 0; /* the run's pixels [k0, k1) have every tap inside dy */
        if (nt > 0 && a + h0 >= 0 && a + h1 < g->ho) {
            k0 = -w0 - b > 0 ? -w0 - b : 0;
            k1 = g->wo - w1 - b < run ? g->wo - w1 - b : run;
            if (k1 <= k0) k0 = k1 = 0;
        }
        for (int64_t i = 0; i < nt; i++) {
            const char *v = here + at[i];
            const float **e = ptab + i * np + p;
            for (int64_t k = k0; k < k1; k++) e[k] = (const float *)(v + k * o);
        }
        for (int64_t k = 0; k < run && nt > 0; k++) {
            if (k == k0 && k1 > k0) k = k1;
            if (k == run) break;
            for (int64_t i = 0; i < nt; i++) {
                int64_t oh = a + dh[i], ow = b + k + dw[i];
                ptab[i * np + p + k] = oh >= 0 && oh < g->ho && ow >= 0 && ow < g->wo
                                           ? (const float *)(img + (oh * g->wo + ow) * o)
                                           : zeros;
            }
        }
        p += run;
        b += run;
        if (b == f->nw) {
            b = 0;
            if (++a == f->nh) a = 0, n++;
        }
    }
}

int pr_conv_grouped_simd_backprop_input(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                        const void *dy, const void *w, void *dx,
                                        pr_dtype dx_dtype, void *scratch) {
    geo q;
    float *wp = scratch, *areas;
    int rc = begin_pass(isa, &q, g, groups, PR_CONV_BACKPROP_INPUT, dw_backprop_input, dy, w, dx,
                        dx_dtype, scratch, &areas);
    if (rc != PR_OK || !areas) return rc;
    const tiles *ts = tiles_of(isa);
    const int64_t phases = g->sh * g->sw, block = q.og * q.nbc * 8 / ts->wdiv;
#pragma omp parallel for num_threads(threads_for(q.S)) schedule(dynamic)
    for (int64_t s = 0; s < q.S; s++) {
        area ar = thread_area(&q, areas, THREAD_ID());
        int64_t n0 = g->n * s / q.S, n1 = g->n * (s + 1) / q.S;
        const float *wph = wp;
        for (int64_t pi = 0; pi < phases; pi++) {
            phase f;
            phase_of(g, pi, &f);
            int64_t count = (n1 - n0) * f.nh * f.nw;
            for (int64_t u0 = 0; u0 < count; u0 += CHUNK) {
                int64_t np = count - u0 < CHUNK ? count - u0 : CHUNK;
                phase_tables(&q, &f, n0, u0, np, dy, dx, ar.zeros, ar.ptab, ar.rows);
                ft_args t = {ar.ptab, np, 0, f.nt, q.og, wph, (ts->pair ? 16 : 8) * q.nbc,
                             (float *const *)ar.rows, 0, 8, q.G, q.og, f.nt * block, q.cg,
                             dx_dtype == PR_BF16};
                ts->run_ft(&t, np, q.nbc, q.cg);
            }
            wph += q.G * f.nt * block;
        }
    }
    return PR_OK;
}

/* ---- backprop_filter ----------------------------------------------------------------- */

/* dst (T, cg, O) += the sums over pixels [p0, p1) of groups [g0, g1). */
static void filter_groups(const tiles *ts, const geo *q, const float *x, const float *dy,
                          int64_t g0, int64_t g1, int64_t p0, int64_t p1, float *dst,
                          const area *ar, const int *jl) {
    const int64_t O = q->g->o;
    for (int64_t q0 = p0; q0 < p1; q0 += CHUNK) {
        int64_t np = p1 - q0 < CHUNK ? p1 - q0 : CHUNK;
        indirection(q, q0, np, x, ar->zeros, ar->ptab);
        for (int64_t gi = g0; gi < g1; gi++) {
            bt_args a = {ar->ptab, q->T, gi * q->cg, np, dy + q0 * O + gi * q->og, O,
                         dst + gi * q->og, q->cg * O, O, jl, 8};
            ts->run_bt(&a, q->cg, q->og);
        }
    }
}

int pr_conv_grouped_simd_backprop_filter(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                         const void *x, const void *dy, float *dw,
                                         void *scratch) {
    geo q;
    geo_init(&q, g, groups);
    if (isa == PR_GROUPED_AVX512_BF16 || !pr_conv_grouped_simd_supports(isa, g, groups))
        return PR_ERR_INTERNAL; /* no bfloat16 filter-gradient tiles */
    const tiles *ts = tiles_of(isa);
    if (g->n * q.hw == 0) { /* no pixel: a zero gradient */
        memset(dw, 0, sizeof(float) * (size_t)(q.T * q.cg * g->o));
        return PR_OK;
    }
    if (q.depthwise) {
        dw_backprop_filter(&q, x, dy, dw, scratch);
        return PR_OK;
    }
    int jl[64];
    for (int64_t b = 0; b < q.nbo; b++) jl[b] = lanes_of(b, q.og);
    float *areas = scratch;
    const int64_t K = q.T * q.cg * g->o;
    if (!filter_partials(&q)) {
        /* thread i of nt: groups [G i / nt, G (i + 1) / nt) over every image, straight into
         * dw (neighbouring groups share cache lines of x and dw: kept on one thread) */
        memset(dw, 0, sizeof(float) * (size_t)K);
#pragma omp parallel num_threads(threads_for(q.G))
        {
            int tid = THREAD_ID();
            area ar = thread_area(&q, areas, tid);
#ifdef _OPENMP
            int nt = omp_get_num_threads();
#else
            int nt = 1;
#endif
            filter_groups(ts, &q, x, dy, q.G * tid / nt, q.G * (tid + 1) / nt, 0, g->n * q.hw,
                          dw, &ar, jl);
        }
        return PR_OK;
    }
    float *parts = areas + MAX_THREADS * thread_floats(&q);
    const int64_t slot = r16(K);
#pragma omp parallel num_threads(threads_for(q.S))
    {
#pragma omp for schedule(dynamic)
        for (int64_t s = 0; s < q.S; s++) {
            area ar = thread_area(&q, areas, THREAD_ID());
            float *part = parts + s * slot;
            int64_t s0, s1;
            stripe_pixels(&q, s, &s0, &s1);
            memset(part, 0, sizeof(float) * (size_t)K);
            filter_groups(ts, &q, x, dy, 0, q.G, s0, s1, part, &ar, jl);
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K; i++) {
            float sum = parts[i];
            for (int64_t s = 1; s < q.S; s++) sum += parts[s * slot + i];
            dw[i] = sum;
        }
    }
    return PR_OK;
}

/* ---- depthwise (cg = og = 1): vectors over 8 channels ----------------------------------
 * The vector work of one output pixel is a function of its own: code in an
 * OpenMP region is outlined into a function without the AVX2 target, where
 * clang refuses __m256 values. */

/* y at pixel pix: its taps' x (offsets off) times w, every channel. */
AVX2_FN void dw_forward_pixel(int64_t C, int64_t T, const int64_t *off, const float *x,
                              const float *w, float *y) {
    for (int64_t b = 0; b < (C + 7) / 8; b++) {
        int l = lanes_of(b, C);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t t = 0; t < T; t++) {
            if (off[t] < 0) continue;
            acc = _mm256_fmadd_ps(load_block(x + off[t] + 8 * b, l),
                                  load_block(w + t * C + 8 * b, l), acc);
        }
        store_block(y + 8 * b, acc, l);
    }
}

/* One pixel's dy (d) times src, added to acc, for each tap t inside the
 * input (off[t] >= 0): the input gradient (src w, acc dx at the tap's offset)
 * or the filter gradient (src x at the tap's offset, acc the partial dw),
 * as src_at_offsets says. */
AVX2_FN void dw_add_pixel(int64_t C, int64_t T, const int64_t *off, const float *d,
                          const float *src, float *acc, int src_at_offsets) {
    for (int64_t b = 0; b < (C + 7) / 8; b++) {
        int l = lanes_of(b, C);
        __m256 dv = load_block(d + 8 * b, l);
        for (int64_t t = 0; t < T; t++) {
            if (off[t] < 0) continue;
            const float *a = src + (src_at_offsets ? off[t] : t * C) + 8 * b;
            float *p = acc + (src_at_offsets ? t * C : off[t]) + 8 * b;
            store_block(p, _mm256_fmadd_ps(load_block(a, l), dv, load_block(p, l)), l);
        }
    }
}

AVX2_FN void dw_forward(const geo *q, const float *x, const float *w, float *y, void *scratch) {
    const pr_window *g = q->g;
    const int64_t C = g->c;
    float *areas = scratch;
#pragma omp parallel for num_threads(threads_for(q->S)) schedule(dynamic)
    for (int64_t s = 0; s < q->S; s++) {
        area ar = thread_area(q, areas, THREAD_ID());
        int64_t s0, s1;
        stripe_pixels(q, s, &s0, &s1);
        for (int64_t pix = s0; pix < s1; pix++) {
            tap_offsets(q, pix, ar.off);
            dw_forward_pixel(C, q->T, ar.off, x, w, y + pix * C);
        }
    }
}

AVX2_FN void dw_backprop_input(const geo *q, const float *dy, const float *w, float *dx,
                               void *scratch) {
    const pr_window *g = q->g;
    const int64_t C = g->c, image = g->h * g->w * C;
    float *areas = scratch;
#pragma omp parallel for num_threads(threads_for(q->S)) schedule(dynamic)
    for (int64_t s = 0; s < q->S; s++) {
        area ar = thread_area(q, areas, THREAD_ID());
        int64_t s0, s1, n0 = g->n * s / q->S, n1 = g->n * (s + 1) / q->S;
        stripe_pixels(q, s, &s0, &s1);
        memset(dx + n0 * image, 0, sizeof(float) * (size_t)((n1 - n0) * image));
        for (int64_t pix = s0; pix < s1; pix++) {
            tap_offsets(q, pix, ar.off);
            dw_add_pixel(C, q->T, ar.off, dy + pix * C, w, dx, 0);
        }
    }
}

AVX2_FN void dw_backprop_filter(const geo *q, const float *x, const float *dy, float *dw,
                                void *scratch) {
    const pr_window *g = q->g;
    const int64_t C = g->c, K = q->T * C, slot = r16(K);
    float *areas = scratch, *parts = areas + MAX_THREADS * thread_floats(q);
#pragma omp parallel num_threads(threads_for(q->S))
    {
#pragma omp for schedule(dynamic)
        for (int64_t s = 0; s < q->S; s++) {
            area ar = thread_area(q, areas, THREAD_ID());
            float *part = parts + s * slot;
            int64_t s0, s1;
            stripe_pixels(q, s, &s0, &s1);
            memset(part, 0, sizeof(float) * (size_t)K);
            for (int64_t pix = s0; pix < s1; pix++) {
                tap_offsets(q, pix, ar.off);
                dw_add_pixel(C, q->T, ar.off, dy + pix * C, x, part, 1);
            }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < K; i++) {
            float sum = parts[i];
            for (int64_t s = 1; s < q->S; s++) sum += parts[s * slot + i];
            dw[i] = sum;
        }
    }
}

#else /* not x86-64: no AVX2 or AVX-512; the variants' CPU check never lets these run */

int pr_conv_grouped_simd_forward(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                 const void *x, const void *w, void *y, pr_dtype y_dtype,
                                 void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_grouped_simd_backprop_input(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                        const void *dy, const void *w, void *dx,
                                        pr_dtype dx_dtype, void *scratch) {
    return PR_ERR_INTERNAL;
}
int pr_conv_grouped_simd_backprop_filter(pr_grouped_isa isa, const pr_window *g, int64_t groups,
                                         const void *x, const void *dy, float *dw,
                                         void *scratch) {
    return PR_ERR_INTERNAL;
}

#endif
