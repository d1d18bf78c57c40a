/* avx512_direct_bf16's patches (conv_direct_bf16.c: odd channel counts of
 * at most 32 values a window, the 3-channel stem) on any x86-64 CPU: the
 * kernel file compiled with its AVX-512 intrinsics emulated by SIMDe
 * (tests/c/simde/immintrin.h; test_kernels_c.py strips the target pragmas
 * and attributes), so a CPU without AVX512_BF16 (CI's AMD EPYC Zen 3)
 * checks the patches' lanes, masks and offsets too (the filter gradient;
 * the forward pass of these shapes runs on units, odd_units' permutations
 * checked here as well).  The forward pass and
 * the filter gradient against a float64 reference on the rounded operands
 * (float32 and bfloat16 operands, float32 and bfloat16 outputs; bounds:
 * 1e-5 of the sum of |products|, a bfloat16 output's rounding 2^-7), the
 * same bits with 1 and 2 threads, and an Inf and a NaN in x reaching
 * exactly the outputs (the filter-gradient taps) whose windows hold them.
 * Prints one line per case and "N failures". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "conv_direct_bf16.c"

/* what the kernel file takes from the rest of csrc/kernels */
static int threads = 2;
int pr_get_num_threads(void) { return threads; }
size_t pr_dtype_size(pr_dtype t) { return t == PR_BF16 ? 2 : 4; }
void pr_bf16_convert_run(const void *src, pr_dtype dt, int64_t n, uint16_t *dst) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = dt == PR_BF16 ? ((const uint16_t *)src)[i]
                               : pr_bf16_from_f32(((const float *)src)[i]);
}
void pr_f32_to_bf16_run(const float *s, uint16_t *d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = pr_bf16_from_f32(s[i]);
}
int pr_conv_direct_fits(const pr_window *g, pr_conv_pass pass) { return 1; }
int pr_conv_direct_supports(const pr_window *g, pr_conv_pass pass) { return 1; }

static double rnd(float f) { return pr_bf16_to_f32(pr_bf16_from_f32(f)); }
static float frand(void) { return (float)(rand() / (double)RAND_MAX * 2 - 1); }

/* TensorFlow's "same" / "valid" geometry (conv.h) */
static pr_window window(const int s[10]) {
    pr_window g = {s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], 0, 0, 0, 0};
    if (s[9]) {
        g.ho = (g.h + g.sh - 1) / g.sh, g.wo = (g.w + g.sw - 1) / g.sw;
        int64_t th = (g.ho - 1) * g.sh + g.kh - g.h, tw = (g.wo - 1) * g.sw + g.kw - g.w;
        g.ph = th > 0 ? th / 2 : 0, g.pw = tw > 0 ? tw / 2 : 0;
    } else {
        g.ho = (g.h - g.kh) / g.sh + 1, g.wo = (g.w - g.kw) / g.sw + 1;
    }
    return g;
}

static void *as_dtype(const float *v, int64_t n, pr_dtype dt) {
    if (dt == PR_F32) return memcpy(malloc(4 * (size_t)n), v, 4 * (size_t)n);
    uint16_t *d = malloc(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) d[i] = pr_bf16_from_f32(v[i]);
    return d;
}

static double value(const void *p, int64_t i, pr_dtype dt) {
    return dt == PR_F32 ? ((const float *)p)[i] : pr_bf16_to_f32(((const uint16_t *)p)[i]);
}

/* x at (n, ih, iw, c) rounded, zero outside the image */
static double x_at(const pr_window *g, const float *x, int64_t n, int64_t ih, int64_t iw,
                   int64_t c) {
    if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) return 0;
    return rnd(x[((n * g->h + ih) * g->w + iw) * g->c + c]);
}

/* Run a pass with 1 and 2 threads (scratch filled with garbage); 0 when
 * the two differ. */
static int run(pr_conv_pass pass, const pr_window *g, pr_operand a, pr_operand b, void *out,
               size_t bytes, pr_dtype od) {
    void *got[2];
    for (int t = 0; t < 2; t++) {
        threads = t + 1;
        size_t sb = (pr_conv_direct_bf16_scratch_bytes(g, pass) + 63) / 64 * 64;
        void *scratch = aligned_alloc(64, sb + 64);
        memset(scratch, 0xA5, sb);
        got[t] = malloc(bytes);
        memset(got[t], 0x5A, bytes);
        if (pr_conv_direct_bf16(pass, g, a, b, got[t], od, scratch) != PR_OK) return 0;
        free(scratch);
    }
    int same = !memcmp(got[0], got[1], bytes);
    memcpy(out, got[0], bytes);
    free(got[0]), free(got[1]);
    return same;
}

static int failures = 0;

static void check(const char *what, const pr_window *g, pr_dtype xd, pr_dtype od,
                  int special) {
    const int64_t K = g->kh * g->kw * g->c, X = g->n * g->h * g->w * g->c, W = K * g->o,
                  Y = g->n * g->ho * g->wo * g->o;
    float *x = malloc(4 * X), *w = malloc(4 * W), *dy = malloc(4 * Y), *dw = malloc(4 * W);
    void *y = malloc(4 * Y);
    for (int64_t i = 0; i < X; i++) x[i] = frand();
    for (int64_t i = 0; i < W; i++) w[i] = frand();
    for (int64_t i = 0; i < Y; i++) dy[i] = frand();
    if (special && X > 5) x[X / 2] = INFINITY, x[X / 3] = NAN;
    void *xa = as_dtype(x, X, xd), *wa = as_dtype(w, W, PR_BF16), *dya = as_dtype(dy, Y, xd);
    int bad = 0, fbad = 0;
    double worst = 0, fworst = 0;
    if (use_patches(g, PR_CONV_FORWARD) || !use_patches(g, PR_CONV_BACKPROP_FILTER)) {
        printf("FAIL %s: the filter gradient alone should be on patches\n", what);
        failures++;
        return;
    }
    if (!run(PR_CONV_FORWARD, g, (pr_operand){xa, xd}, (pr_operand){wa, PR_BF16}, y,
             (od == PR_BF16 ? 2 : 4) * (size_t)Y, od))
        printf("FAIL %s forward: 1 and 2 threads differ\n", what), failures++;
    for (int64_t i = 0; i < Y; i++) {
        const int64_t o = i % g->o, ow = i / g->o % g->wo, oh = i / g->o / g->wo % g->ho,
                      n = i / g->o / g->wo / g->ho;
        double s = 0, a = 0, got = value(y, i, od);
        for (int64_t t = 0; t < K; t++) {
            const int64_t kh = t / g->c / g->kw, kw = t / g->c % g->kw, c = t % g->c;
            double xv = x_at(g, x, n, oh * g->sh + kh - g->ph, ow * g->sw + kw - g->pw, c);
            s += xv * rnd(w[t * g->o + o]), a += fabs(xv * rnd(w[t * g->o + o]));
        }
        if (!isfinite(s) || !isfinite(got)) {
            bad += !isfinite(s) != !isfinite(got);
            continue;
        }
        double e = fabs(got - s) / (a * (od == PR_BF16 ? 1.0 / 128 : 1e-5) + 1e-6);
        worst = e > worst ? e : worst, bad += e > 1;
    }
    if (!run(PR_CONV_BACKPROP_FILTER, g, (pr_operand){xa, xd}, (pr_operand){dya, xd}, dw,
             4 * (size_t)W, PR_F32))
        printf("FAIL %s filter gradient: 1 and 2 threads differ\n", what), failures++;
    for (int64_t i = 0; i < W; i++) {
        const int64_t o = i % g->o, t = i / g->o, kh = t / g->c / g->kw, kw = t / g->c % g->kw,
                      c = t % g->c;
        double s = 0, a = 0;
        for (int64_t p = 0; p < g->n * g->ho * g->wo; p++) {
            const int64_t ow = p % g->wo, oh = p / g->wo % g->ho, n = p / g->wo / g->ho;
            double xv = x_at(g, x, n, oh * g->sh + kh - g->ph, ow * g->sw + kw - g->pw, c);
            s += xv * rnd(dy[p * g->o + o]), a += fabs(xv * rnd(dy[p * g->o + o]));
        }
        if (!isfinite(s) || !isfinite(dw[i])) {
            fbad += !isfinite(s) != !isfinite(dw[i]);
            continue;
        }
        double e = fabs(dw[i] - s) / (a * 1e-5 + 1e-6);
        fworst = e > fworst ? e : fworst, fbad += e > 1;
    }
    if (bad) printf("FAIL %s forward: %d wrong (worst %.3g of the bound)\n", what, bad, worst);
    if (fbad) printf("FAIL %s filter gradient: %d wrong (worst %.3g)\n", what, fbad, fworst);
    if (!bad && !fbad) printf("ok   %s (worst %.2g, %.2g of the bounds)\n", what, worst, fworst);
    failures += (bad > 0) + (fbad > 0);
    free(x), free(w), free(dy), free(dw), free(y), free(xa), free(wa), free(dya);
}

int main(void) {
    static const int shapes[][10] = {
        /* n, h, w, c, kh, kw, o, sh, sw, same */
        {2, 32, 32, 3, 3, 3, 16, 1, 1, 1}, /* the stem */
        {3, 9, 11, 3, 3, 3, 16, 1, 1, 1},  /* an odd pixel count: a last pair of one */
        {2, 7, 9, 3, 3, 3, 17, 2, 2, 1},   /* stride 2, 17 outputs */
        {1, 10, 9, 5, 3, 2, 15, 3, 2, 1},  /* 30 values: two filter-gradient tiles */
        {2, 11, 13, 1, 5, 5, 33, 1, 2, 0}, /* 25 values, 3 output blocks, valid */
        {2, 8, 40, 1, 4, 7, 16, 1, 1, 1},  /* 28 values */
        {2, 6, 8, 7, 2, 2, 64, 1, 1, 1},   /* 28 values, 4 output blocks */
        {1, 5, 6, 15, 1, 2, 20, 1, 1, 1},  /* 30 values of two pixels */
        {1, 1, 1, 3, 3, 3, 16, 1, 1, 1},   /* a 1x1 image */
        {2, 3, 33, 3, 3, 3, 16, 1, 1, 1},  /* tiles of 11 pixels */
        {2, 3, 17, 3, 3, 3, 16, 1, 1, 1},  /* tiles of 9 and 8 */
        {1, 16, 17, 1, 3, 3, 16, 1, 1, 1}, /* 272 pixels: chunks of 64 pairs */
        {2, 3, 3, 3, 3, 3, 16, 2, 2, 0},   /* one output pixel */
        {2, 12, 12, 1, 2, 3, 8, 1, 2, 1},  /* 6 values, 8 outputs */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int v = 0; v < 8; v++) {
            const int *s = shapes[i], xb = v & 1, ob = v >> 1 & 1, special = v >> 2;
            const pr_window g = window(s);
            char what[160];
            snprintf(what, sizeof what, "n%d %dx%d c%d %dx%d o%d s(%d,%d) %s x %s y %s%s",
                     s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8],
                     s[9] ? "same" : "valid", xb ? "bf16" : "f32", ob ? "bf16" : "f32",
                     special ? " inf/nan" : "");
            check(what, &g, xb ? PR_BF16 : PR_F32, ob ? PR_BF16 : PR_F32, special);
        }
    printf("%d failures\n", failures);
    return failures != 0;
}
