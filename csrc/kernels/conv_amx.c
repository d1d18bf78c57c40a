/* Direct bfloat16 convolutions on AMX tiles (conv_amx.h).
 *
 * The padded image.  Each image of x (H, W, C) is copied, rounded to
 * bfloat16, into a buffer of the thread, xp (HP, WP, CP): zeros around it
 * (ph rows above, pw columns to the left, enough after it for every window
 * of the output), channels padded with zeros to CP (16 when C <= 16, else
 * a multiple of 32), and a few zero pixels after it for the reads of
 * unused tile rows; the tiles read it while it is in cache.
 *
 * Forward.  One AMX product tile is 16 output pixels x 16 output channels
 * (float32).  The 16 pixels are consecutive along an output row, so for
 * the tap (kh, kw) their input pixels sit in xp at a fixed pixel stride sw:
 * one tile load (row stride sw * CP * 2 bytes) fetches the A operand,
 * 16 pixels x 32 channels, with no gather.  At stride 1 the 16 pixels run
 * along the padded width instead (virtual output columns WO..WP-1, which
 * are computed and dropped), so a tile may wrap into the next output row
 * and none is left part empty.  With CP = 16 one 64-byte tile row spans
 * two neighbouring input pixels: the taps kw and kw + 1 at once (a lone
 * last tap uses a half-width tile).  Weights are packed once per call into
 * B tiles (16 pairs of K rows x 16 output channels, the pair-interleaved
 * layout of gemm_bf16.h); a call makes up to four product tiles: two
 * pixel blocks x two output-channel blocks, each A and B load serving two
 * products (forward_tiles2x2); or, when a lone 16-channel tap takes the
 * half-width tiles, two pixel blocks sharing each B tile (one output-
 * channel block at a time), or one or two pixel blocks each meeting all of
 * two or three output-channel blocks (forward_tiles); each finished tile
 * is stored to a small buffer and its valid rows copied out.  Each output
 * is one tile row's sum, so the order of its sums never depends on the
 * thread count.
 *
 * Input gradient: the stride-1 forward convolution of dy, padded by
 * (KH-1-ph, KW-1-pw) and at stride s > 1 spread out (s - 1 zeros between
 * its pixels), with the filter flipped and transposed,
 * w''[kh][kw][o][c] = w[KH-1-kh][KW-1-kw][c][o].  At stride 2 three in
 * four products meet zeros: AMX time is cheap next to a gather.
 *
 * Filter gradient.  dw[tap] (CP x O) = x_tap^T (CP x M) . dy (M x O)
 * summed over the output pixels a few images at a time: the images
 * transposed (channels x positions, the A tiles, so a tap is a shift of the
 * tile's start) and dy in pairs of positions (the B tiles, shared by two
 * taps), both built in the thread's buffers; at stride s each image is
 * first split into s x s phases, in each of which every tap is a stride-1
 * shift (see "filter gradient" below).  Groups of images are dealt
 * round-robin to STRIPES stripes with their own partial sums, added in
 * stripe order, so results do not depend on the thread count.
 *
 * Tiles of the forward pass: 0-3 products (16 x 16 float32); 4 and 5 A (16
 * x 32 bfloat16), 6 and 7 B (16 pairs x 16); with a lone 16-channel tap
 * (forward_config), 4 A, 5 A of that tap (16 x 16), 6 B, 7 B of that tap
 * (8 pairs x 16).  Of the filter gradient: 0-3 products (two taps x two
 * blocks of 16 output channels), 4 and 5 A (the two taps), 6 and 7 B.
 */
#include "conv_amx.h"

#include <string.h>

#include "bf16.h"

#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

#define STRIPES 8  /* partial filter gradients */
#define TILE_BYTES 1024 /* one packed B tile: 16 pairs of rows x 16 columns of bfloat16 */
#define SEGMENT 16 /* K steps of the filter gradient per pass over the output blocks */
#define GROUP_POSITIONS 1024 /* positions of the filter gradient's groups of images */

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- the padded image ------------------------------------------------------ */

typedef struct {
    int64_t n, h, w, c;  /* the source */
    int64_t ph, pw;      /* zero rows above, columns to the left */
    int64_t dh, dw;      /* source pixel (i, j) goes to (ph + i dh, pw + j dw) */
    int64_t hp, wp, cp;  /* the padded image */
    int64_t slack;       /* zero pixels after the last image */
} padded;

static padded padded_of(const pr_window *g) {
    padded p = {g->n, g->h, g->w, g->c, g->ph, g->pw, 1, 1, (g->ho - 1) * g->sh + g->kh,
                (g->wo - 1) * g->sw + g->kw, g->c <= 16 ? 16 : (g->c + 31) / 32 * 32, 0};
    p.slack = 16 * g->sw + g->kw + 32;
    return p;
}

/* n pixels of ch values, src_step and dst_step values apart, to bfloat16
 * (float32 rounded, bfloat16 copied); a few channels (the stem's 3) inline
 * rather than a call per pixel. */
static void convert_pixels(const char *src, pr_dtype dt, int64_t ch, int64_t src_step, int64_t n,
                           uint16_t *dst, int64_t dst_step) {
    if (ch >= 16) {
        for (int64_t j = 0; j < n; j++)
            pr_bf16_convert_run(src + (size_t)(j * src_step) * pr_dtype_size(dt), dt, ch,
                                dst + j * dst_step);
    } else if (dt == PR_BF16) {
        const uint16_t *h = (const uint16_t *)src;
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < ch; c++) dst[j * dst_step + c] = h[j * src_step + c];
    } else {
        const float *f = (const float *)src;
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < ch; c++)
                dst[j * dst_step + c] = pr_bf16_from_f32(f[j * src_step + c]);
    }
}

/* Bytes of one padded image and the zero slack after it. */
static size_t image_bytes(const padded *p) {
    return align64(sizeof(uint16_t) * (size_t)((p->hp * p->wp + p->slack) * p->cp));
}

/* Padded image n of x into d (HP * WP pixels), and the zero slack after
 * it when `slack`. */
static void pad_one(const padded *p, pr_operand x, int64_t n, uint16_t *d, int slack) {
    const size_t es = pr_dtype_size(x.dtype);
    const int64_t cols = p->w < p->wp - p->pw ? p->w : p->wp - p->pw; /* source columns kept */
    for (int64_t r = 0; r < p->hp; r++, d += p->wp * p->cp) {
        int64_t t = r - p->ph, ih = t / p->dh;
        if (t < 0 || t % p->dh || ih >= p->h || cols <= 0) {
            memset(d, 0, sizeof(uint16_t) * (size_t)(p->wp * p->cp));
            continue;
        }
        const char *s = (const char *)x.data + (size_t)((n * p->h + ih) * p->w * p->c) * es;
        if (p->dw > 1) { /* spread out: pixel j at column pw + j dw */
            memset(d, 0, sizeof(uint16_t) * (size_t)(p->wp * p->cp));
            const int64_t fit = (p->wp - p->pw + p->dw - 1) / p->dw; /* pixels inside */
            convert_pixels(s, x.dtype, p->c, p->c, p->w < fit ? p->w : fit, d + p->pw * p->cp,
                           p->dw * p->cp);
            continue;
        }
        memset(d, 0, sizeof(uint16_t) * (size_t)(p->pw * p->cp));
        uint16_t *body = d + p->pw * p->cp;
        if (p->cp == p->c) {
            pr_bf16_convert_run(s, x.dtype, cols * p->c, body);
        } else { /* channels padded with zeros */
            memset(body, 0, sizeof(uint16_t) * (size_t)(cols * p->cp));
            convert_pixels(s, x.dtype, p->c, p->c, cols, body, p->cp);
        }
        memset(body + cols * p->cp, 0,
               sizeof(uint16_t) * (size_t)((p->wp - p->pw - cols) * p->cp));
    }
    if (slack) memset(d, 0, sizeof(uint16_t) * (size_t)(p->slack * p->cp));
}

/* ---- forward: the K steps and packed weights -------------------------------- */

/* One K step of a product tile: 32 (or, `half`, 16) input values per
 * output pixel, `offset` elements into xp from the tile's first pixel. */
typedef struct {
    int64_t offset;
    int64_t kh, kw, c0; /* first tap and channel (the weights' rows) */
    int half, pair;     /* a 16-channel tap alone; two 16-channel taps */
} kstep;

static int64_t count_ksteps(const pr_window *g, const padded *p) {
    return g->kh * (p->cp == 16 ? (g->kw + 1) / 2 : g->kw * (p->cp / 32));
}

static void make_ksteps(const pr_window *g, const padded *p, kstep *ks) {
    int64_t s = 0;
    for (int64_t kh = 0; kh < g->kh; kh++) {
        if (p->cp == 16) {
            for (int64_t kw = 0; kw < g->kw; kw += 2)
                ks[s++] = (kstep){(kh * p->wp + kw) * 16, kh, kw, 0, kw + 1 == g->kw,
                                  kw + 1 < g->kw};
        } else {
            for (int64_t kw = 0; kw < g->kw; kw++)
                for (int64_t c0 = 0; c0 < p->cp; c0 += 32)
                    ks[s++] = (kstep){(kh * p->wp + kw) * p->cp + c0, kh, kw, c0, 0, 0};
        }
    }
}

/* Element (kh, kw, c, o) of a filter is at base + kh skh + kw skw + c sc + o so. */
typedef struct {
    pr_operand w;
    int64_t base, skh, skw, sc, so;
    int64_t c, o; /* sizes */
} filter_map;

static uint16_t filter_at(const filter_map *f, int64_t kh, int64_t kw, int64_t c, int64_t o) {
    if (c >= f->c || o >= f->o) return 0;
    int64_t i = f->base + kh * f->skh + kw * f->skw + c * f->sc + o * f->so;
    if (f->w.dtype == PR_BF16) return ((const uint16_t *)f->w.data)[i];
    return pr_bf16_from_f32(((const float *)f->w.data)[i]);
}

/* B tile (s, nb) at wp + (s * NB + nb) * 512: element (k, j) of the step's K
 * rows and output channel nb * 16 + j at [(k / 2) * 32 + j * 2 + k % 2]. */
static void pack_filter(const filter_map *f, const kstep *ks, int64_t nks, int64_t nbs,
                        uint16_t *wp) {
    for (int64_t s = 0; s < nks; s++)
        for (int64_t nb = 0; nb < nbs; nb++) {
            uint16_t *t = wp + (s * nbs + nb) * 512;
            memset(t, 0, TILE_BYTES);
            int64_t krows = ks[s].half ? 16 : 32;
            for (int64_t k = 0; k < krows; k++) {
                int64_t kw = ks[s].kw + (ks[s].pair ? k / 16 : 0);
                int64_t c = ks[s].pair || ks[s].half ? k % 16 : ks[s].c0 + k;
                for (int64_t j = 0; j < 16; j++)
                    t[(k / 2) * 32 + j * 2 + k % 2] = filter_at(f, ks[s].kh, kw, c, nb * 16 + j);
            }
        }
}

/* ---- AMX ------------------------------------------------------------------- */

/* The forward pass's tiles when a lone 16-channel tap takes half-width
 * ones (see the top); otherwise the forward pass and the filter gradient
 * use pr_bf16_thread_begin's eight of 16 rows x 64 bytes. */
static const pr_amx_tiles forward_config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 32, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 8},
};

#if defined(__x86_64__)
#include <immintrin.h>
#define TARGET_AMX \
    __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

/* Product tiles 0-3 to zero. */
TARGET_AMX static inline void zero_products(void) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

/* Product tiles t < nblk * nbs (<= 4) of nblk blocks of 16 output pixels
 * (block j's first input pixel at a[j], row stride sa bytes) and nbs
 * blocks of 16 output channels from nb0: tile t is pixel block t / nbs,
 * channel block t % nbs, stored to ct + t * 16 * 64 (16 rows of 64
 * float32).  Several pixel blocks give independent accumulators when the
 * layer has few output channels. */
TARGET_AMX static void forward_tiles(const uint16_t *const *a, int nblk, long sa,
                                     const kstep *ks, int64_t nks, const uint16_t *wp,
                                     int64_t nbs_all, int64_t nb0, int nbs, float *ct) {
    const int nt = nblk * nbs;
#define DP(t, A, B)                                                              \
    if (nt > (t)) {                                                              \
        if ((t) == 0 || (t) % nbs == 0) _tile_loadd(A, a[(t) / nbs] + off, sa);  \
        if ((t) == 0 || nbs > 1) _tile_loadd(B, b + (t) % nbs * 512, 64);        \
        _tile_dpbf16ps(t, A, B);                                                 \
    }
    zero_products();
    for (int64_t s = 0; s < nks; s++) {
        const uint16_t *b = wp + (s * nbs_all + nb0) * 512;
        const int64_t off = ks[s].offset;
        if (ks[s].half) {
            DP(0, 5, 7) DP(1, 5, 7) DP(2, 5, 7) DP(3, 5, 7)
        } else {
            DP(0, 4, 6) DP(1, 4, 6) DP(2, 4, 6) DP(3, 4, 6)
        }
    }
#undef DP
    _tile_stored(0, ct, 256);
    if (nt > 1) _tile_stored(1, ct + 1024, 256);
    if (nt > 2) _tile_stored(2, ct + 2048, 256);
    if (nt > 3) _tile_stored(3, ct + 3072, 256);
}

/* The same for K steps of 32 values only (no half step), with two A and two
 * B tiles: nblk (<= 2) pixel blocks x nbc (<= 2) channel blocks from nb0,
 * tile (i, j) stored to ct + (i * nbc + j) * 1024.  Each A and B load
 * serves two products, and every tile register is reloaded a product or
 * two after its last reader. */
TARGET_AMX static void forward_tiles2x2(const uint16_t *const *a, int nblk, long sa,
                                        const kstep *ks, int64_t nks, const uint16_t *wp,
                                        int64_t nbs_all, int64_t nb0, int nbc, float *ct) {
    zero_products();
    for (int64_t s = 0; s < nks; s++) {
        const uint16_t *b = wp + (s * nbs_all + nb0) * 512;
        const int64_t off = ks[s].offset;
        _tile_loadd(4, a[0] + off, sa);
        _tile_loadd(6, b, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (nbc > 1) {
            _tile_loadd(7, b + 512, 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (nblk > 1) {
            _tile_loadd(5, a[1] + off, sa);
            _tile_dpbf16ps(2, 5, 6);
            if (nbc > 1) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, ct, 256);
    if (nbc > 1) _tile_stored(1, ct + 1024, 256);
    if (nblk > 1) _tile_stored(2, ct + nbc * 1024, 256);
    if (nblk > 1 && nbc > 1) _tile_stored(3, ct + 3 * 1024, 256);
}

/* Accumulate ksteps products into nt (<= 2) taps x nob (<= 2) output
 * blocks of partial sums, tile (tap j, block i) at pt + j * pt_step + i * 16
 * (row stride sp bytes): A tiles at a + off[j] + k * 32 (row stride sa
 * bytes; tiles 4 and 5), B tiles at b + k * b_step + i * 32 (row stride sb
 * bytes; tiles 6 and 7).  Each A and B load serves two products. */
TARGET_AMX static void filter_taps(const uint16_t *a, long sa, const int64_t *off,
                                   const uint16_t *b, long sb, int64_t b_step, int64_t ksteps,
                                   int nt, int nob, float *pt, int64_t pt_step, long sp) {
    _tile_loadd(0, pt, sp);
    if (nob > 1) _tile_loadd(1, pt + 16, sp);
    if (nt > 1) _tile_loadd(2, pt + pt_step, sp);
    if (nt > 1 && nob > 1) _tile_loadd(3, pt + pt_step + 16, sp);
    for (int64_t k = 0; k < ksteps; k++) {
        const uint16_t *ak = a + k * 32, *bk = b + k * b_step;
        _tile_loadd(4, ak + off[0], sa);
        _tile_loadd(6, bk, sb);
        _tile_dpbf16ps(0, 4, 6);
        if (nob > 1) {
            _tile_loadd(7, bk + 32, sb);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (nt > 1) {
            _tile_loadd(5, ak + off[1], sa);
            _tile_dpbf16ps(2, 5, 6);
            if (nob > 1) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, pt, sp);
    if (nob > 1) _tile_stored(1, pt + 16, sp);
    if (nt > 1) _tile_stored(2, pt + pt_step, sp);
    if (nt > 1 && nob > 1) _tile_stored(3, pt + pt_step + 16, sp);
}

#define TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

/* dst[i] = the i-th value of the product row at src (16 channels per tile,
 * tiles 1024 floats apart) for i < width: an output pixel's channels. */
TARGET_AVX512 static void copy_row(float *dst, const float *src, int64_t width) {
    int64_t i = 0;
    for (; i + 16 <= width; i += 16) _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i * 64));
    if (i < width) {
        __mmask16 m = (__mmask16)((1u << (width - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_loadu_ps(m, src + i * 64));
    }
}

/* The same, rounded to bfloat16 (bf16.h's rounding). */
TARGET_AVX512 static void copy_row_bf16(uint16_t *dst, const float *src, int64_t width) {
    int64_t i = 0;
    for (; i + 16 <= width; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), pr_bf16_round16(_mm512_loadu_ps(src + i * 64)));
    if (i < width) {
        __mmask16 m = (__mmask16)((1u << (width - i)) - 1);
        _mm256_mask_storeu_epi16(dst + i, m, pr_bf16_round16(_mm512_maskz_loadu_ps(m, src + i * 64)));
    }
}

/* dst rows i < 16 (stride ds) = columns i of the 16 x 16 32-bit block at
 * src (row stride ss): unpack 32- and 64-bit pairs, then 128-bit lanes. */
TARGET_AVX512 static void transpose16(const uint32_t *src, int64_t ss, uint32_t *dst,
                                      int64_t ds) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(src + i * ss);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_si512(dst + i * ds, r[i]);
}

#define HAVE_AMX 1
#else
#define HAVE_AMX 0
static void forward_tiles(const uint16_t *const *a, int nblk, long sa, const kstep *ks,
                          int64_t nks, const uint16_t *wp, int64_t nbs_all, int64_t nb0, int nbs,
                          float *ct) {}
static void forward_tiles2x2(const uint16_t *const *a, int nblk, long sa, const kstep *ks,
                             int64_t nks, const uint16_t *wp, int64_t nbs_all, int64_t nb0,
                             int nbc, float *ct) {}
static void filter_taps(const uint16_t *a, long sa, const int64_t *off, const uint16_t *b,
                        long sb, int64_t b_step, int64_t ksteps, int nt, int nob, float *pt,
                        int64_t pt_step, long sp) {}
static void copy_row(float *dst, const float *src, int64_t width) {
    for (int64_t i = 0; i < width; i++) dst[i] = src[i / 16 * 1024 + i % 16];
}
static void copy_row_bf16(uint16_t *dst, const float *src, int64_t width) {
    for (int64_t i = 0; i < width; i++) dst[i] = pr_bf16_from_f32(src[i / 16 * 1024 + i % 16]);
}
static void transpose16(const uint32_t *src, int64_t ss, uint32_t *dst, int64_t ds) {
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) dst[i * ds + j] = src[j * ss + i];
}
#endif

/* ---- forward ---------------------------------------------------------------- */

static int64_t out_blocks(int64_t o) { return (o + 15) / 16; }

/* Blocks of 16 output pixels per image: along the padded width at stride 1
 * (flat), else along each output row. */
static int flat_of(const pr_window *g) { return g->sh == 1 && g->sw == 1; }

static int64_t blocks_per_image(const pr_window *g, const padded *p) {
    return flat_of(g) ? (g->ho * p->wp + 15) / 16 : g->ho * ((g->wo + 15) / 16);
}

static size_t forward_weights_bytes(const pr_window *g, const padded *p) {
    return (size_t)(count_ksteps(g, p) * out_blocks(g->o)) * TILE_BYTES;
}

/* Per thread: a padded image and four product tiles. */
static size_t forward_slot_bytes(const padded *p) {
    return image_bytes(p) + 4 * 16 * 64 * sizeof(float);
}

static size_t forward_scratch(const pr_window *g) {
    padded p = padded_of(g);
    return forward_weights_bytes(g, &p) + align64(sizeof(kstep) * (size_t)count_ksteps(g, &p)) +
           (size_t)pr_bf16_slots(g->n) * forward_slot_bytes(&p);
}

/* y = the convolution of g (at stride 1 when x is spread out by dh, dw:
 * padded.dh, .dw) with the filter f.  Image by image: each thread pads its
 * image into a buffer that stays in cache while the tiles read it. */
static int forward(const pr_window *g, pr_operand x, int64_t dh, int64_t dw, const filter_map *f,
                   pr_operand y, void *scratch) {
    padded p = padded_of(g);
    p.dh = dh, p.dw = dw;
    const int64_t nks = count_ksteps(g, &p), nbs = out_blocks(g->o), O = g->o;
    const int64_t per_image = blocks_per_image(g, &p);
    uint16_t *wp = scratch;
    kstep *ks = (kstep *)((char *)wp + forward_weights_bytes(g, &p));
    char *slots = (char *)ks + align64(sizeof(kstep) * (size_t)nks);
    make_ksteps(g, &p, ks);
    pack_filter(f, ks, nks, nbs, wp);
    const int flat = flat_of(g);
    const long sa = (long)(g->sw * p.cp * 2);
    const int64_t row_blocks = (g->wo + 15) / 16;
    /* per call, without half steps: 2 pixel blocks x 2 channel blocks
     * (forward_tiles2x2); with them (16 channels, an odd KW), whose tiles
     * leave one A and one B register: 2 pixel blocks x 1 channel block (a B
     * tile serves both; four, whose A loads into one tile wait on each
     * other, measured slower), or 1-2 pixel blocks x all of 2 or 3 channel
     * blocks */
    int halves = 0;
    for (int64_t s = 0; s < nks; s++) halves |= ks[s].half;
    const int per_call = !halves ? 2 : nbs == 2 || nbs == 3 ? (int)nbs : 1;
    const int group = !halves || per_call == 1 ? 2 : 4 / per_call;
#pragma omp parallel num_threads(pr_bf16_threads(pr_bf16_slots(g->n)))
    {
        uint16_t *xp = (uint16_t *)(slots + (size_t)THREAD_ID() * forward_slot_bytes(&p));
        float *ct = (float *)((char *)xp + image_bytes(&p));
        if (halves)
            pr_amx_load(&forward_config);
        else
            pr_bf16_thread_begin(PR_BF16_AMX); /* eight tiles of 16 rows x 64 bytes */
#pragma omp for schedule(static)
        for (int64_t n = 0; n < g->n; n++) {
            pad_one(&p, x, n, xp, 1);
            const int64_t yn = n * g->ho * g->wo * O; /* this image's first output */
            for (int64_t b0 = 0; b0 < per_image; b0 += group) {
                const int nblk = (int)(per_image - b0 < group ? per_image - b0 : group);
                const uint16_t *a[4];
                int64_t oh0[4], ow0[4];
                for (int j = 0; j < nblk; j++) {
                    const int64_t b = b0 + j;
                    if (flat) {
                        a[j] = xp + b * 16 * p.cp;
                        oh0[j] = b * 16 / p.wp, ow0[j] = b * 16 % p.wp;
                    } else {
                        oh0[j] = b / row_blocks, ow0[j] = b % row_blocks * 16;
                        a[j] = xp + (oh0[j] * g->sh * p.wp + ow0[j] * g->sw) * p.cp;
                    }
                }
                for (int64_t nb0 = 0; nb0 < nbs; nb0 += per_call) {
                    const int nbc = (int)(nbs - nb0 < per_call ? nbs - nb0 : per_call);
                    if (halves)
                        forward_tiles(a, nblk, sa, ks, nks, wp, nbs, nb0, nbc, ct);
                    else
                        forward_tiles2x2(a, nblk, sa, ks, nks, wp, nbs, nb0, nbc, ct);
                    const int64_t width = O - nb0 * 16 < nbc * 16 ? O - nb0 * 16 : nbc * 16;
                    for (int j = 0; j < nblk; j++) {
                        int64_t oh = oh0[j], ow = ow0[j];
                        for (int64_t r = 0; r < 16; r++, ow++) {
                            if (flat && ow == p.wp) ow = 0, oh++;
                            if (oh >= g->ho || ow >= g->wo) continue;
                            const int64_t at = yn + (oh * g->wo + ow) * O + nb0 * 16;
                            const float *src = ct + j * nbc * 1024 + r * 64;
                            if (y.dtype == PR_BF16)
                                copy_row_bf16((uint16_t *)y.data + at, src, width);
                            else
                                copy_row((float *)y.data + at, src, width);
                        }
                    }
                }
            }
        }
        pr_bf16_thread_end(PR_BF16_AMX);
    }
    return PR_OK;
}

/* The input gradient as a forward convolution at stride 1 (see the top);
 * at stride s > 1 of the output gradient spread out by s (zeros between). */
static pr_window flipped_window(const pr_window *g) {
    pr_window f = {g->n, g->ho, g->wo, g->o, g->kh, g->kw, g->c, 1, 1,
                   g->kh - 1 - g->ph, g->kw - 1 - g->pw, g->h, g->w};
    return f;
}

/* ---- filter gradient, a few images at a time ---------------------------------- */

/* The padded image split into SH x SW phases, phase (a, b) holding the
 * padded pixels (r SH + a, q SW + b) at (r, q), each HQ x WQ: output pixel
 * (oh, ow) meets tap (kh, kw) at phase (kh % SH, kw % SW), pixel
 * (oh + kh / SH, ow + kw / SW), so every tap is a stride-1 shift of its
 * phase (at stride 1 the one phase is the padded image).  Positions G of
 * one image's phase grid: G = r * WQ + q.  The grid is as short as the taps
 * allow (`wrapped_period`): where a tap of a real output would read a
 * padding column past WQ, the position it reads instead, at the start of the
 * next row, must be a padding column too (and likewise a padding row past
 * HQ at the top of the next image), so that 'same' 3x3 windows share one
 * zero column between rows and one zero row between images: (H + 1) x
 * (W + 1) positions an image instead of (H + 2) x (W + 2), 64 instead of
 * 81 for a 7x7 image.  xT holds the phases transposed,
 * xT[phase][c][G] (zeros past them, as far as the taps reach); P holds
 * dy(G) in pairs of positions, P[G / 2][o][G % 2], where dy(G) is dy at
 * output pixel (r, q) when r < HO and q < WO and zero otherwise (virtual
 * outputs).  Then dw[tap][c][o] += sum_G xT[phase][c][G + off(tap)] dy(G):
 * A tiles straight from xT at the tap's offset, B tiles straight from P.
 * A group of images (about GROUP_POSITIONS positions, so that small images
 * still give long sums per tile load and store) is built at a time in the
 * thread's buffers (in cache), its images' positions one after another: a
 * tap of a real output reads nothing of the next image but its zero rows.
 * Groups are dealt round-robin to STRIPES stripes, each with its partial
 * sums, added in stripe order at the end.  (A virtual output reads real pixels with a
 * zero dy: an infinite x there makes a NaN that the exact sum would not
 * have, in the taps of its row's edge columns or, under 'valid', of columns
 * no window uses; finite inputs are unaffected.  The forward pass and the
 * input gradient drop their virtual outputs and have no such case.) */
typedef struct {
    int64_t hq, wq, phases;          /* a phase's rows and columns; SH * SW */
    int64_t positions, group, groups; /* HQ * WQ per image; images per group; groups */
    int64_t ksteps, len;             /* K steps of 32 of a group; an xT row */
    int64_t op, wide;                /* O, max(CP, O), rounded up to 16 */
    size_t xt, pairs, tmp, slot, partial; /* bytes */
} flat_filter;

static int outside(int64_t i, int64_t n) { return i < 0 || i >= n; }

/* The shortest period P >= `out` (rows or columns of a phase grid, at most
 * `full`, the phase's whole extent) for which every tap of every real output
 * reads the value it would read on the full grid: a read of phase index
 * i = o + t / s >= P lands on index i - P of the next row (or image), and
 * both must be padding (source index i s + t % s - pad outside [0, src)). */
static int64_t wrapped_period(int64_t src, int64_t pad, int64_t s, int64_t out, int64_t k,
                              int64_t full) {
    for (int64_t P = out; P < full; P++) {
        int ok = 1;
        for (int64_t t = 0; t < k && ok; t++)
            for (int64_t o = 0; o < out && ok; o++) {
                const int64_t i = o + t / s, j = i - P;
                ok = i < P || (j < P && outside(i * s + t % s - pad, src) &&
                               outside(j * s + t % s - pad, src));
            }
        if (ok) return P;
    }
    return full;
}

static flat_filter flat_filter_of(const pr_window *g, const padded *p) {
    flat_filter f;
    f.hq = wrapped_period(g->h, g->ph, g->sh, g->ho, g->kh, (p->hp + g->sh - 1) / g->sh);
    f.wq = wrapped_period(g->w, g->pw, g->sw, g->wo, g->kw, (p->wp + g->sw - 1) / g->sw);
    f.phases = g->sh * g->sw;
    f.positions = f.hq * f.wq;
    f.group = GROUP_POSITIONS / f.positions < 1 ? 1 : GROUP_POSITIONS / f.positions;
    if (f.group > g->n) f.group = g->n;
    f.groups = (g->n + f.group - 1) / f.group;
    f.ksteps = (f.group * f.positions + 31) / 32;
    f.len = (f.ksteps * 32 + (g->kh - 1) / g->sh * f.wq + (g->kw - 1) / g->sw + 32) / 32 * 32;
    f.op = out_blocks(g->o) * 16;
    f.wide = max64(p->cp, f.op);
    f.xt = align64(sizeof(uint16_t) * (size_t)(f.phases * p->cp * f.len));
    f.pairs = align64(sizeof(uint16_t) * (size_t)(f.ksteps * 32 * f.op));
    f.tmp = align64(sizeof(uint16_t) * (size_t)(32 * f.wide)) +
            align64(sizeof(uint32_t) * (size_t)(16 * f.wide));
    f.slot = f.xt + f.pairs + f.tmp;
    f.partial = align64(sizeof(float) * (size_t)(g->kh * g->kw * p->cp * f.op));
    return f;
}

static size_t filter_scratch(const pr_window *g) {
    const padded p = padded_of(g);
    const flat_filter f = flat_filter_of(g, &p);
    return (size_t)(f.groups < STRIPES ? f.groups : STRIPES) * (f.slot + f.partial);
}

/* A grid of positions over a source image: position (r, q) is source
 * pixel (r * mh + h0, q * mw + w0) of image n when that is inside. */
typedef struct {
    pr_operand src;
    int64_t hs, ws, ch;  /* source rows, columns, channels */
    int64_t mh, mw, h0, w0;
} grid;

/* Rows i < 32 of `rows` (width values each): positions G0 + i of the
 * group of nimg images from n0 (positions per image, WQ to a row), zeros
 * where they fall outside; a run of pixels at a time. */
static void grid_rows(const grid *s, const flat_filter *f, int64_t n0, int64_t nimg, int64_t G0,
                      int64_t width, uint16_t *rows) {
    const size_t es = pr_dtype_size(s->src.dtype);
    memset(rows, 0, sizeof(uint16_t) * (size_t)(32 * width));
    for (int64_t i = 0; i < 32;) {
        const int64_t img = (G0 + i) / f->positions, G = (G0 + i) % f->positions;
        const int64_t r = G / f->wq, q = G % f->wq, n = n0 + img;
        const int64_t run = 32 - i < f->wq - q ? 32 - i : f->wq - q; /* within the row */
        const int64_t h = r * s->mh + s->h0;
        i += run;
        if (img >= nimg || h < 0 || h >= s->hs) continue;
        const char *row =
            (const char *)s->src.data + (size_t)((n * s->hs + h) * s->ws * s->ch) * es;
        uint16_t *d = rows + (i - run) * width;
        if (s->mw == 1 && s->ch == width) { /* contiguous: one conversion */
            const int64_t lo = max64(q + s->w0, 0);
            const int64_t hi = q + run + s->w0 < s->ws ? q + run + s->w0 : s->ws;
            if (lo < hi)
                pr_bf16_convert_run(row + (size_t)(lo * s->ch) * es, s->src.dtype,
                                    (hi - lo) * s->ch, d + (lo - q - s->w0) * width);
            continue;
        }
        int64_t j0 = 0, j1 = run; /* the j with 0 <= (q + j) mw + w0 < ws */
        while (j0 < run && (q + j0) * s->mw + s->w0 < 0) j0++;
        while (j1 > j0 && (q + j1 - 1) * s->mw + s->w0 >= s->ws) j1--;
        if (j0 < j1)
            convert_pixels(row + (size_t)(((q + j0) * s->mw + s->w0) * s->ch) * es, s->src.dtype,
                           s->ch, s->mw * s->ch, j1 - j0, d + j0 * width, width);
    }
}

/* xT (the phases that some tap reads) and P of the group of nimg images
 * from n0 into the slot; K steps up to `ksteps`. */
static void flat_group(const pr_window *g, const padded *p, const flat_filter *f, pr_operand x,
                       pr_operand dy, int64_t n0, int64_t nimg, int64_t ksteps, char *slot) {
    const int64_t cp = p->cp, op = f->op;
    uint16_t *xt = (uint16_t *)slot, *pairs = (uint16_t *)(slot + f->xt);
    uint16_t *rows = (uint16_t *)(slot + f->xt + f->pairs);
    uint32_t *pr = (uint32_t *)((char *)rows + align64(sizeof(uint16_t) * (size_t)(32 * f->wide)));
    for (int64_t a = 0; a < g->sh && a < g->kh; a++)
        for (int64_t b = 0; b < g->sw && b < g->kw; b++) {
            const grid gx = {x, g->h, g->w, g->c, g->sh, g->sw, a - p->ph, b - p->pw};
            uint32_t *phase = (uint32_t *)xt + (a * g->sw + b) * cp * f->len / 2;
            for (int64_t G0 = 0; G0 < f->len; G0 += 32) {
                grid_rows(&gx, f, n0, nimg, G0, cp, rows);
                for (int64_t j = 0; j < 16; j++)
                    pr_bf16_interleave(rows + 2 * j * cp, rows + (2 * j + 1) * cp, cp,
                                       (uint16_t *)(pr + j * cp));
                for (int64_t cb = 0; cb < cp / 16; cb++)
                    transpose16(pr + cb * 16, cp, phase + (cb * 16 * f->len + G0) / 2,
                                f->len / 2);
            }
        }
    const grid gd = {dy, g->ho, g->wo, g->o, 1, 1, 0, 0};
    for (int64_t G0 = 0; G0 < ksteps * 32; G0 += 32) {
        grid_rows(&gd, f, n0, nimg, G0, op, rows); /* virtual outputs stay zero */
        for (int64_t j = 0; j < 16; j++)
            pr_bf16_interleave(rows + 2 * j * op, rows + (2 * j + 1) * op, op,
                               pairs + (G0 / 2 + j) * op * 2);
    }
}

static int backprop_filter(const pr_window *g, pr_operand x, pr_operand dy, float *dw,
                           void *scratch) {
    const padded p = padded_of(g);
    const flat_filter f = flat_filter_of(g, &p);
    const int64_t O = g->o, C = g->c, cp = p.cp, op = f.op, taps = g->kh * g->kw;
    const int64_t stripes = f.groups < STRIPES ? f.groups : STRIPES;
    char *slots = scratch, *partials = (char *)scratch + (size_t)stripes * f.slot;
#pragma omp parallel num_threads(pr_bf16_threads(stripes))
    {
        char *slot = slots + (size_t)THREAD_ID() * f.slot;
        const uint16_t *xt = (const uint16_t *)slot, *pairs = (const uint16_t *)(slot + f.xt);
        pr_bf16_thread_begin(PR_BF16_AMX);
#pragma omp for schedule(static)
        for (int64_t s = 0; s < stripes; s++) {
            float *partial = (float *)(partials + (size_t)s * f.partial);
            memset(partial, 0, f.partial);
            for (int64_t gi = s; gi < f.groups; gi += stripes) {
                const int64_t n0 = gi * f.group, nimg = g->n - n0 < f.group ? g->n - n0 : f.group;
                const int64_t ksteps = (nimg * f.positions + 31) / 32;
                flat_group(g, &p, &f, x, dy, n0, nimg, ksteps, slot);
                for (int64_t t0 = 0; t0 < taps; t0 += 2) { /* two taps share each B tile */
                    const int nt = (int)(taps - t0 < 2 ? taps - t0 : 2);
                    int64_t off[2] = {0, 0};
                    for (int j = 0; j < nt; j++) {
                        const int64_t kh = (t0 + j) / g->kw, kw = (t0 + j) % g->kw;
                        off[j] = (kh % g->sh * g->sw + kw % g->sw) * cp * f.len +
                                 kh / g->sh * f.wq + kw / g->sw;
                    }
                    /* 16 input channels of two taps: their partial sums (2 x 16 x O)
                     * stay in cache over the group's K steps, taken SEGMENT at a time
                     * so that every pair of output blocks reads them from L1 */
                    for (int64_t cb = 0; cb < cp / 16; cb++)
                        for (int64_t k0 = 0; k0 < ksteps; k0 += SEGMENT) {
                            const int64_t nk = ksteps - k0 < SEGMENT ? ksteps - k0 : SEGMENT;
                            for (int64_t ob = 0; ob < op / 16; ob += 2)
                                filter_taps(xt + cb * 16 * f.len + k0 * 32, (long)(f.len * 2),
                                               off, pairs + k0 * 16 * op * 2 + ob * 32,
                                               (long)(op * 4), 16 * op * 2, nk, nt,
                                               op / 16 - ob < 2 ? 1 : 2,
                                               partial + (t0 * cp + cb * 16) * op + ob * 16,
                                               cp * op, (long)(op * 4));
                        }
                }
            }
        }
        pr_bf16_thread_end(PR_BF16_AMX);
#pragma omp for schedule(static)
        for (int64_t tc = 0; tc < taps * C; tc++) {
            const int64_t tap = tc / C, c = tc % C;
            for (int64_t o = 0; o < O; o++) {
                float sum = 0.0f;
                for (int64_t s = 0; s < stripes; s++)
                    sum += ((const float *)(partials + (size_t)s * f.partial))
                        [(tap * cp + c) * op + o];
                dw[tc * O + o] = sum;
            }
        }
    }
    return PR_OK;
}

/* ---- entry points ------------------------------------------------------------ */

int pr_conv_amx_supports(const pr_window *g, pr_conv_pass pass) {
    if (!HAVE_AMX || g->n < 1 || g->ho < 1 || g->wo < 1 || g->c < 1 || g->o < 1) return 0;
    if (pass == PR_CONV_BACKPROP_INPUT)
        return g->ph <= g->kh - 1 && g->pw <= g->kw - 1 && g->h >= 1 && g->w >= 1;
    return 1;
}

size_t pr_conv_amx_scratch_bytes(const pr_window *g, pr_conv_pass pass) {
    if (pass == PR_CONV_BACKPROP_FILTER) return filter_scratch(g);
    if (pass == PR_CONV_BACKPROP_INPUT) {
        pr_window f = flipped_window(g);
        return forward_scratch(&f);
    }
    return forward_scratch(g);
}

int pr_conv_amx(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b,
                pr_operand out, void *scratch) {
    if (pass == PR_CONV_BACKPROP_FILTER) return backprop_filter(g, a, b, (float *)out.data, scratch);
    const int64_t C = g->c, O = g->o, KW = g->kw;
    if (pass == PR_CONV_FORWARD) { /* w[kh][kw][c][o] */
        filter_map f = {b, 0, KW * C * O, C * O, O, 1, C, O};
        return forward(g, a, 1, 1, &f, out, scratch);
    }
    pr_window fl = flipped_window(g); /* w''[kh][kw][o][c] = w[KH-1-kh][KW-1-kw][c][o] */
    filter_map f = {b, ((g->kh - 1) * KW + KW - 1) * C * O, -KW * C * O, -C * O, 1, O, O, C};
    return forward(&fl, a, g->sh, g->sw, &f, out, scratch);
}
