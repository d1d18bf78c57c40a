/* Grouped 2D convolution by direct loops (see conv.h).  Layouts as conv.c:
 * x NHWC (N, H, W, C), w (KH, KW, C / G, O), y NHWC (N, HO, WO, O). */
#include "conv.h"

#include <string.h>

#define PARALLEL_MIN 4096 /* output elements below which one thread runs */

/* The taps of output pixel (oh, ow) inside the input: kh in [kh0, kh1), kw in
 * [kw0, kw1), tap (kh, kw) at input pixel (ih0 + kh, iw0 + kw). */
static inline void inside_taps(const pr_window *g, int64_t oh, int64_t ow, int64_t *ih0,
                               int64_t *iw0, int64_t *kh0, int64_t *kh1, int64_t *kw0,
                               int64_t *kw1) {
    *ih0 = oh * g->sh - g->ph;
    *iw0 = ow * g->sw - g->pw;
    pr_window_taps(*ih0, g->kh, g->h, kh0, kh1);
    pr_window_taps(*iw0, g->kw, g->w, kw0, kw1);
}

int pr_conv2d_grouped_forward(const pr_window *g, int64_t groups, const float *x, const float *w,
                              float *y) {
    const int64_t C = g->c, O = g->o, cg = C / groups, og = O / groups;
    const int64_t total = g->n * g->ho * g->wo * O;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (total >= PARALLEL_MIN)
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                float *yp = y + ((n * g->ho + oh) * g->wo + ow) * O;
                for (int64_t o = 0; o < O; o++) yp[o] = 0.0f;
                int64_t ih0, iw0, kh0, kh1, kw0, kw1;
                inside_taps(g, oh, ow, &ih0, &iw0, &kh0, &kh1, &kw0, &kw1);
                for (int64_t kh = kh0; kh < kh1; kh++) {
                    for (int64_t kw = kw0; kw < kw1; kw++) {
                        const float *xp = x + ((n * g->h + ih0 + kh) * g->w + iw0 + kw) * C;
                        const float *wp = w + (kh * g->kw + kw) * cg * O;
                        for (int64_t o = 0; o < O; o++) {
                            const float *xg = xp + o / og * cg;
                            float s = 0.0f;
                            for (int64_t ci = 0; ci < cg; ci++) s += xg[ci] * wp[ci * O + o];
                            yp[o] += s;
                        }
                    }
                }
            }
    return PR_OK;
}

int pr_conv2d_grouped_backprop_input(const pr_window *g, int64_t groups, const float *dy,
                                     const float *w, float *dx) {
    const int64_t C = g->c, O = g->o, cg = C / groups, og = O / groups;
    const int64_t image = g->h * g->w * C;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (g->n * image >= PARALLEL_MIN)
    for (int64_t n = 0; n < g->n; n++) {
        float *dxn = dx + n * image;
        memset(dxn, 0, sizeof(float) * (size_t)image);
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                const float *dyp = dy + ((n * g->ho + oh) * g->wo + ow) * O;
                int64_t ih0, iw0, kh0, kh1, kw0, kw1;
                inside_taps(g, oh, ow, &ih0, &iw0, &kh0, &kh1, &kw0, &kw1);
                for (int64_t kh = kh0; kh < kh1; kh++) {
                    for (int64_t kw = kw0; kw < kw1; kw++) {
                        float *dxp = dxn + ((ih0 + kh) * g->w + iw0 + kw) * C;
                        const float *wp = w + (kh * g->kw + kw) * cg * O;
                        for (int64_t o = 0; o < O; o++) {
                            float d = dyp[o];
                            float *dg = dxp + o / og * cg;
                            for (int64_t ci = 0; ci < cg; ci++) dg[ci] += d * wp[ci * O + o];
                        }
                    }
                }
            }
    }
    return PR_OK;
}

int pr_conv2d_grouped_backprop_filter(const pr_window *g, int64_t groups, const float *x,
                                      const float *dy, float *dw) {
    const int64_t C = g->c, O = g->o, cg = C / groups, og = O / groups;
    const int64_t taps = g->kh * g->kw * cg;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (taps * O >= 64)
    for (int64_t o = 0; o < O; o++) {
        const int64_t c0 = o / og * cg;
        for (int64_t kh = 0; kh < g->kh; kh++)
            for (int64_t kw = 0; kw < g->kw; kw++)
                for (int64_t ci = 0; ci < cg; ci++) {
                    double s = 0.0;
                    for (int64_t n = 0; n < g->n; n++)
                        for (int64_t oh = 0; oh < g->ho; oh++) {
                            int64_t ih = oh * g->sh - g->ph + kh;
                            if (ih < 0 || ih >= g->h) continue;
                            for (int64_t ow = 0; ow < g->wo; ow++) {
                                int64_t iw = ow * g->sw - g->pw + kw;
                                if (iw < 0 || iw >= g->w) continue;
                                s += (double)x[((n * g->h + ih) * g->w + iw) * C + c0 + ci] *
                                     (double)dy[((n * g->ho + oh) * g->wo + ow) * O + o];
                            }
                        }
                    dw[((kh * g->kw + kw) * cg + ci) * O + o] = (float)s;
                }
    }
    return PR_OK;
}
