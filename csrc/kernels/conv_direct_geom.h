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
