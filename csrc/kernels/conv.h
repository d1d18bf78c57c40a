/* 2D convolution kernels (NHWC input, HWIO filter) by im2col + OpenBLAS
 * sgemm, and the sliding-window geometry shared with pooling (pool.h).
 * The kernels run their own OpenMP loops and call pr_sgemm from inside them
 * (where it is single-threaded). */
#ifndef PR_K_CONV_H
#define PR_K_CONV_H

#include "kernels.h"

#include <string.h>

/* A 2D sliding window over an NHWC tensor (N, H, W, C).  For convolution
 * the filter is HWIO (KH, KW, C, O); pooling ignores O.  Output pixel
 * (oh, ow) reads input rows oh*SH - PH + [0, KH) and columns
 * ow*SW - PW + [0, KW); positions outside [0, H) x [0, W) are padding. */
typedef struct {
    int64_t n, h, w, c; /* input */
    int64_t kh, kw, o;  /* window (filter) size, output channels (conv only) */
    int64_t sh, sw;     /* strides */
    int64_t ph, pw;     /* padding before (top, left) */
    int64_t ho, wo;     /* output size */
} pr_window;

/* Output size along one axis, TensorFlow's rule (tf.nn.conv2d docs,
 * "padding"): "same": out = ceil(in / s), pad_total = max((out - 1) * s + k -
 * in, 0), pad_before = pad_total / 2 (the extra one goes at the end);
 * "valid": out = floor((in - k) / s) + 1 (0 when k > in), no padding.
 * Requires s >= 1, k >= 1, in >= 0. */
int64_t pr_window_out_size(int64_t in, int64_t k, int64_t s, int same, int64_t *pad_before);

/* Taps [lo, hi) of a k-wide window starting at input index `start` that
 * fall inside [0, in). */
static inline void pr_window_taps(int64_t start, int64_t k, int64_t in, int64_t *lo,
                                  int64_t *hi) {
    *lo = start < 0 ? -start : 0;
    *hi = in - start < k ? in - start : k;
    if (*hi < *lo) *hi = *lo;
}

/* Copies `count` elements from element `src` of an NHWC input (whatever ctx
 * names) to dst, for pr_im2col_rows. */
typedef void pr_im2col_copy(const void *ctx, int64_t src, int64_t count, void *dst);

/* The im2col rows [r0, r0 + m) (output pixels, numbered n-major over the
 * batch) of an NHWC input: KH*KW*C elements of esize bytes each, row r at
 * element r * ld of dst; taps inside the input through `copy`, padding
 * zeroed.  conv.c's float32 im2col and conv_bf16.c's bfloat16 gather. */
static inline void pr_im2col_rows(const pr_window *g, int64_t r0, int64_t m, void *dst,
                                  int64_t ld, size_t esize, pr_im2col_copy *copy,
                                  const void *ctx) {
    const int64_t C = g->c, KWC = g->kw * C;
    int64_t ow = r0 % g->wo, oh = r0 / g->wo % g->ho, n = r0 / (g->wo * g->ho);
    for (int64_t r = 0; r < m; r++) {
        char *d = (char *)dst + (size_t)(r * ld) * esize;
        int64_t lo, hi, iw0 = ow * g->sw - g->pw;
        pr_window_taps(iw0, g->kw, g->w, &lo, &hi);
        for (int64_t kh = 0; kh < g->kh; kh++, d += (size_t)KWC * esize) {
            int64_t ih = oh * g->sh - g->ph + kh;
            if (ih < 0 || ih >= g->h) {
                memset(d, 0, esize * (size_t)KWC);
                continue;
            }
            if (lo > 0) memset(d, 0, esize * (size_t)(lo * C));
            copy(ctx, ((n * g->h + ih) * g->w + iw0 + lo) * C, (hi - lo) * C,
                 d + (size_t)(lo * C) * esize);
            if (hi < g->kw)
                memset(d + (size_t)(hi * C) * esize, 0, esize * (size_t)((g->kw - hi) * C));
        }
        if (++ow == g->wo) {
            ow = 0;
            if (++oh == g->ho) oh = 0, n++;
        }
    }
}

typedef enum { PR_CONV_FORWARD, PR_CONV_BACKPROP_INPUT, PR_CONV_BACKPROP_FILTER } pr_conv_pass;

/* Scratch (bytes) that a conv pass needs for geometry g: per-thread im2col
 * blocks (and partial filter gradients), bounded independently of the
 * thread count. */
size_t pr_conv2d_scratch_bytes(const pr_window *g, pr_conv_pass pass);

/* y (N, HO, WO, O) = conv2d(x (N, H, W, C), w (KH, KW, C, O)). */
int pr_conv2d_forward(const pr_window *g, const float *x, const float *w, float *y, void *scratch);
/* dx (N, H, W, C) = gradient of conv2d wrt x given dy (N, HO, WO, O). */
int pr_conv2d_backprop_input(const pr_window *g, const float *dy, const float *w, float *dx,
                             void *scratch);
/* dw (KH, KW, C, O) = gradient of conv2d wrt w given x and dy. */
int pr_conv2d_backprop_filter(const pr_window *g, const float *x, const float *dy, float *dw,
                              void *scratch);

/* Grouped convolution (Krizhevsky et al. 2012, section 3.5; Xie et al. 2017,
 * "Aggregated Residual Transformations", ResNeXt): the C input channels and
 * O output channels are split into `groups` equal parts; output channel o
 * reads only input group o / (O / groups), through the filter
 * w (KH, KW, C / groups, O).  g->c is the input's C.  Direct loops, no
 * scratch (depthwise convolutions are groups == C); the work split depends
 * on the shapes only (deterministic for any thread count): forward and
 * backprop_input per image, backprop_filter per output channel, summing in
 * double in (n, oh, ow) order.  Tested against a NumPy per-group conv2d. */
int pr_conv2d_grouped_forward(const pr_window *g, int64_t groups, const float *x, const float *w,
                              float *y);
int pr_conv2d_grouped_backprop_input(const pr_window *g, int64_t groups, const float *dy,
                                     const float *w, float *dx);
int pr_conv2d_grouped_backprop_filter(const pr_window *g, int64_t groups, const float *x,
                                      const float *dy, float *dw);

#endif
