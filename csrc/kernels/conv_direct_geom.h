/* Geometry of the direct convolutions, portable C shared by the AVX-512
 * (conv_direct.c) and AVX2 (conv_direct_avx2.c) kernels: the padded image
 * buffers, the repacked weights, the slots (images in flight, or the filter
 * gradient's stripes) and the taps' output ranges.  Both ISAs use the same
 * scratch layout (pr_conv_direct_scratch_bytes): the repacked weights first,
 * sized for 16-channel blocks (8-channel blocks take no more), then the
 * slots.  Internal: included by those two files only. */
#ifndef PR_K_CONV_DIRECT_GEOM_H
#define PR_K_CONV_DIRECT_GEOM_H

#include "conv.h"

#ifdef _OPENMP
#include <omp.h>
#define THREAD_ID() omp_get_thread_num()
#else
#define THREAD_ID() 0
#endif

#define MAX_WINDOW 7
#define MAX_STRIDE 4
#define MAX_SLOTS 16                     /* images in flight at once, at most */
#define SLOT_BUDGET ((size_t)64 << 20)   /* bytes for all slots together, roughly */

static inline int64_t blocks16(int64_t n) { return (n + 15) / 16; }
static inline int64_t round16(int64_t n) { return (n + 15) & ~(int64_t)15; } /* floats: 64 bytes */

/* Forward / filter gradient: x of one image, padded to HP x WP.  Tiles read
 * only the pixels they store, so nothing past the buffer. */
static inline int64_t xpad_rows(const pr_window *g) { return (g->ho - 1) * g->sh + g->kh; }
static inline int64_t xpad_cols(const pr_window *g) { return (g->wo - 1) * g->sw + g->kw; }
/* Backprop input: dy of one image with a margin of KH rows and KW columns. */
static inline int64_t dypad_rows(const pr_window *g) { return g->ho + 2 * g->kh; }
static inline int64_t dypad_cols(const pr_window *g) { return g->wo + 2 * g->kw; }
static inline int64_t dypad_floats(const pr_window *g) {
    return round16(dypad_rows(g) * dypad_cols(g) * g->o);
}

/* Repacked weights (the filter gradient needs none). */
static inline int64_t packed_floats(const pr_window *g, pr_conv_pass pass) {
    int64_t taps = g->kh * g->kw;
    return pass == PR_CONV_BACKPROP_INPUT ? blocks16(g->c) * taps * g->o * 16
           : pass == PR_CONV_FORWARD      ? blocks16(g->o) * taps * g->c * 16
                                          : 0;
}

static inline int64_t count_slots(int64_t units, int64_t slot_floats) {
    int64_t budget = (int64_t)(SLOT_BUDGET / (sizeof(float) * (size_t)(slot_floats ? slot_floats : 1)));
    int64_t s = units < MAX_SLOTS ? units : MAX_SLOTS;
    if (s > budget) s = budget > 1 ? budget : 1;
    return units > 0 ? s : 0;
}

/* Images a weight-gradient tile call sums: a tile loads and stores its
 * accumulators once per call, so small images go several to a call until it
 * sums at least TILE_PIXELS output pixels (3x3 images have 9: the bfloat16
 * 256-channel weight gradient of 3x3 images ran at 39% of the VDPBF16PS
 * peak, its tiles' loads and stores beside a few products), at most
 * MAX_GROUP.  From the shapes only (the order of the sums does not depend on
 * the threads). */
#define TILE_PIXELS 96
#define MAX_GROUP 16
static inline int64_t filter_group_images(const pr_window *g) {
    const int64_t pixels = g->ho * g->wo, b = pixels ? (TILE_PIXELS + pixels - 1) / pixels : 1;
    return b < MAX_GROUP ? b : MAX_GROUP;
}

/* Images the AVX-512 forward or input-gradient pass pads and runs as one
 * group (conv_direct_tiles.h: windows three taps wide; the input gradient
 * at stride 1): the tiles take each chunk of weights through the rows of
 * all the group's images, rows of at most 3 pixels four images at a time
 * (image tiles).  Image by image, a 3x3 image read every chunk for its 3
 * rows only, and 256 -> 256 channels' weights (1.2 MB in bfloat16, more
 * than a core's L2) came from L3 for every image.  Maps of
 * TILE_GROUP_PIXELS output pixels or more reuse a chunk over enough rows
 * alone (G = 1: a bfloat16 output is then rounded row by row, with no
 * float32 copy of the image); a smaller map's group holds at least
 * TILE_GROUP_PIXELS pixels, as many images as whose padded inputs fit
 * TILE_GROUP_BYTES (L2 keeps them while the weights pass), at most
 * MAX_TILE_GROUP and the batch.  On an AMD EPYC Zen 5, airbench's 256 ->
 * 256 at 3x3, batch 1024 (builds interleaved, best of 3-4): bfloat16
 * forward 26.7 ms image by image, 23.2 in groups, 14.3 with image tiles;
 * input gradient 27.0, 23.2, 13.6 ms; float32 57.7, 47.3, 26.3 ms and
 * 57.8, 47.6, 27.8 ms (at 256 KiB float32's input gradient, 83 KB an
 * image, went 3 to a group, too few for an image tile: 48.0 ms; 144
 * pixels a group ran slower than 64).  The AVX2 kernels have their own
 * rule (conv_direct_avx2.c, image_group). */
#define TILE_GROUP_PIXELS 64
#define TILE_GROUP_BYTES ((int64_t)384 << 10)
#define MAX_TILE_GROUP 16
static inline int64_t tile_image_group(const pr_window *g, pr_conv_pass pass) {
    const int64_t pixels = g->ho * g->wo;
    if (g->kw != 3 || pixels >= TILE_GROUP_PIXELS || pass == PR_CONV_BACKPROP_FILTER ||
        (pass == PR_CONV_BACKPROP_INPUT && g->sh * g->sw != 1))
        return 1;
    const int64_t pad = 4 * (pass == PR_CONV_FORWARD ? xpad_rows(g) * xpad_cols(g) * g->c
                                                     : dypad_floats(g));
    int64_t G = (TILE_GROUP_PIXELS + pixels - 1) / (pixels ? pixels : 1);
    if (G * pad > TILE_GROUP_BYTES) G = TILE_GROUP_BYTES / pad;
    if (G > MAX_TILE_GROUP) G = MAX_TILE_GROUP;
    if (G > g->n) G = g->n;
    return G < 1 ? 1 : G;
}

static inline int threads_for(int64_t slots) {
    int64_t t = pr_get_num_threads();
    return (int)(slots < 1 ? 1 : slots < t ? slots : t);
}

static inline int64_t slot_floats(const pr_window *g, pr_conv_pass pass) {
    int64_t taps = g->kh * g->kw;
    switch (pass) {
    case PR_CONV_FORWARD: return round16(xpad_rows(g) * xpad_cols(g) * g->c);
    case PR_CONV_BACKPROP_INPUT: return dypad_floats(g);
    case PR_CONV_BACKPROP_FILTER: return round16(taps * g->c * g->o); /* a stripe's partial dw */
    }
    return 0;
}

static inline int64_t ceil_div(int64_t a, int64_t b) {
    return a >= 0 ? (a + b - 1) / b : -(-a / b);
}

/* Output positions [*lo, *hi) along one axis (out of them, stride s, padding
 * before `pad`) whose tap k reads inside the input (0 <= o*s - pad + k < in);
 * empty as *hi == *lo. */
static inline void tap_range(int64_t in, int64_t out, int64_t s, int64_t pad, int64_t k,
                             int64_t *lo, int64_t *hi) {
    int64_t top = in - 1 + pad - k;
    *lo = ceil_div(pad - k, s);
    if (*lo < 0) *lo = 0;
    *hi = top < 0 ? 0 : top / s + 1;
    if (*hi > out) *hi = out;
    if (*hi < *lo) *hi = *lo;
}

/* Bytes a filter-gradient tile asks for (prefetch_part), spread over its
 * rows: a burst of hundreds of prefetches stalls on the fill buffers. */
typedef struct {
    const char *p;
    int64_t bytes;
} pf_span;

static inline pf_span span_part(const void *p, int64_t bytes, int64_t i, int64_t parts) {
    if (!p) return (pf_span){NULL, 0};
    int64_t lo = bytes * i / parts & ~(int64_t)63, hi = bytes * (i + 1) / parts;
    return (pf_span){(const char *)p + lo, hi - lo};
}

#endif
