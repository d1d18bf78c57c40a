/* A plain-C driver over csrc/kernels/: runs the portable kernels (the ones
 * every CPU gets: im2col + OpenBLAS convolutions, pooling, batch norm, the
 * softmax cross-entropy, SGD and Adam, the Philox streams, bfloat16
 * rounding) on small awkward shapes (odd sizes, stride 2, padding at the
 * borders, batch 1) and prints every input and output, so that
 * tests/test_kernels_c.py can check them against NumPy on any machine: built
 * natively, and cross-built for aarch64 and run under qemu-aarch64.
 *
 * Output: one array per line, "name shape values...", the shape as
 * comma-separated sizes ("-" for a scalar), the values with 9 significant
 * digits (so a float32 reads back exactly).  Inputs are made from integers
 * (exact in float32 on every machine).  Exit status 0, or 1 when a kernel
 * returned an error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "conv.h"
#include "loss.h"
#include "norm.h"
#include "optim.h"
#include "pool.h"
#include "rng.h"

static int failed;

static void check(int code, const char *what) {
    if (code != PR_OK) {
        fprintf(stderr, "%s: error %d\n", what, code);
        failed = 1;
    }
}

/* n values in [-1, 1] from integers (a quadratic residue, so neighbours
 * differ irregularly): the same floats on every machine. */
static float *inputs(int64_t n, int seed) {
    float *x = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!x) exit(2);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * i * 7919 + i * 31 + seed * 104729) % 2001 - 1000) / 1000.0f;
    return x;
}

static void *scratch(size_t bytes) {
    void *p = pr_alloc(bytes ? bytes : 64);
    if (!p) exit(2);
    return p;
}

/* Print "name d0,d1,... v0 v1 ...". */
static void put(const char *name, int ndim, const int64_t *shape, const float *v) {
    int64_t n = 1;
    printf("%s ", name);
    if (ndim == 0) printf("-");
    for (int d = 0; d < ndim; d++) {
        printf(d ? ",%lld" : "%lld", (long long)shape[d]);
        n *= shape[d];
    }
    for (int64_t i = 0; i < n; i++) printf(" %.9g", v[i]);
    printf("\n");
}

#define PUT(name, v, ...)                                                                 \
    do {                                                                                  \
        const int64_t shape_[] = {__VA_ARGS__};                                           \
        put(name, (int)(sizeof shape_ / sizeof shape_[0]), shape_, v);                    \
    } while (0)

static void put_scalar(const char *name, double v) {
    float f = (float)v;
    put(name, 0, NULL, &f);
}

/* conv2d and its two backprops on x (n, h, w, c), w (k, k, c, o), stride s. */
static void conv_case(const char *tag, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                      int64_t kw, int64_t o, int64_t s, int same) {
    pr_window g = {.n = n, .h = h, .w = w, .c = c, .kh = kh, .kw = kw, .o = o, .sh = s, .sw = s};
    g.ho = pr_window_out_size(h, kh, s, same, &g.ph);
    g.wo = pr_window_out_size(w, kw, s, same, &g.pw);
    float *x = inputs(n * h * w * c, 1), *k = inputs(kh * kw * c * o, 2);
    float *dy = inputs(n * g.ho * g.wo * o, 3);
    float *y = malloc(sizeof(float) * (size_t)(n * g.ho * g.wo * o));
    float *dx = malloc(sizeof(float) * (size_t)(n * h * w * c));
    float *dk = malloc(sizeof(float) * (size_t)(kh * kw * c * o));
    if (!y || !dx || !dk) exit(2);
    char name[64];
#define NAME(s) (snprintf(name, sizeof name, "%s.%s", tag, s), name)
    put_scalar(NAME("stride"), (double)s);
    put_scalar(NAME("same"), same);
    PUT(NAME("x"), x, n, h, w, c);
    PUT(NAME("k"), k, kh, kw, c, o);
    PUT(NAME("dy"), dy, n, g.ho, g.wo, o);
    void *sc = scratch(pr_conv2d_scratch_bytes(&g, PR_CONV_FORWARD));
    check(pr_conv2d_forward(&g, x, k, y, sc), "conv2d");
    pr_free(sc);
    sc = scratch(pr_conv2d_scratch_bytes(&g, PR_CONV_BACKPROP_INPUT));
    check(pr_conv2d_backprop_input(&g, dy, k, dx, sc), "conv2d_backprop_input");
    pr_free(sc);
    sc = scratch(pr_conv2d_scratch_bytes(&g, PR_CONV_BACKPROP_FILTER));
    check(pr_conv2d_backprop_filter(&g, x, dy, dk, sc), "conv2d_backprop_filter");
    pr_free(sc);
    PUT(NAME("y"), y, n, g.ho, g.wo, o);
    PUT(NAME("dx"), dx, n, h, w, c);
    PUT(NAME("dk"), dk, kh, kw, c, o);
#undef NAME
    free(x), free(k), free(dy), free(y), free(dx), free(dk);
}

/* 3x3 max and average pooling, stride 2, "same", on (2, 5, 7, 3). */
static void pool_case(void) {
    pr_window g = {.n = 2, .h = 5, .w = 7, .c = 3, .kh = 3, .kw = 3, .sh = 2, .sw = 2};
    g.ho = pr_window_out_size(g.h, g.kh, g.sh, 1, &g.ph);
    g.wo = pr_window_out_size(g.w, g.kw, g.sw, 1, &g.pw);
    const int64_t nx = g.n * g.h * g.w * g.c, ny = g.n * g.ho * g.wo * g.c;
    float *x = inputs(nx, 4), *dy = inputs(ny, 5), *y = malloc(sizeof(float) * (size_t)ny);
    float *avg = malloc(sizeof(float) * (size_t)ny), *dx = malloc(sizeof(float) * (size_t)nx);
    if (!y || !avg || !dx) exit(2);
    check(pr_max_pool2d_forward(&g, PR_F32, x, y), "max_pool2d");
    check(pr_max_pool2d_backward(&g, PR_F32, x, dy, dx), "max_pool2d_backward");
    check(pr_avg_pool2d_forward(&g, x, avg), "avg_pool2d");
    PUT("pool.x", x, g.n, g.h, g.w, g.c);
    PUT("pool.dy", dy, g.n, g.ho, g.wo, g.c);
    PUT("pool.max", y, g.n, g.ho, g.wo, g.c);
    PUT("pool.max_dx", dx, g.n, g.h, g.w, g.c);
    PUT("pool.avg", avg, g.n, g.ho, g.wo, g.c);
    free(x), free(dy), free(y), free(avg), free(dx);
}

/* Batch norm in training, forward and backward, over 37 rows of 5 channels. */
static void bn_case(void) {
    const int64_t m = 37, c = 5;
    const double eps = 1e-3;
    float *x = inputs(m * c, 6), *dy = inputs(m * c, 7);
    float *gamma = inputs(c, 8), *beta = inputs(c, 9);
    float *y = malloc(sizeof(float) * (size_t)(m * c));
    float *dx = malloc(sizeof(float) * (size_t)(m * c));
    float mean[5], var[5], dgamma[5], dbeta[5];
    if (!y || !dx) exit(2);
    void *sc = scratch(pr_bn_scratch_bytes(m, c));
    check(pr_k_bn_train(x, gamma, beta, NULL, PR_F32, m, c, eps, y, mean, var, sc, 0), "bn");
    check(pr_k_bn_train_backward(dy, x, PR_F32, gamma, beta, mean, var, m, c, eps, dx, PR_F32,
                                 dgamma, dbeta, sc, 0),
          "bn_backward");
    pr_free(sc);
    put_scalar("bn.eps", eps);
    PUT("bn.x", x, m, c);
    PUT("bn.dy", dy, m, c);
    PUT("bn.gamma", gamma, c);
    PUT("bn.beta", beta, c);
    PUT("bn.y", y, m, c);
    PUT("bn.mean", mean, c);
    PUT("bn.var", var, c);
    PUT("bn.dx", dx, m, c);
    PUT("bn.dgamma", dgamma, c);
    PUT("bn.dbeta", dbeta, c);
    free(x), free(dy), free(gamma), free(beta), free(y), free(dx);
}

/* Softmax cross-entropy from logits (4, 10) with int32 labels. */
static void loss_case(void) {
    enum { R = 4, N = 10 };
    float *logits = inputs(R * N, 10), loss[R], dlogits[R * N], g[R], labels_f[R];
    int32_t labels[R] = {3, 0, 9, 3};
    for (int r = 0; r < R; r++) g[r] = 1.0f + (float)r / 4.0f, labels_f[r] = (float)labels[r];
    for (int i = 0; i < R * N; i++) logits[i] *= 4.0f;
    check(pr_k_softmax_ce(logits, NULL, labels, 0, R, N, loss), "softmax_ce");
    check(pr_k_softmax_ce_backward(g, logits, NULL, labels, 0, R, N, dlogits), "softmax_ce_bw");
    PUT("ce.logits", logits, R, N);
    PUT("ce.labels", labels_f, R);
    PUT("ce.g", g, R);
    PUT("ce.loss", loss, R);
    PUT("ce.dlogits", dlogits, R, N);
    free(logits);
}

/* One SGD step with Nesterov momentum and weight decay, one Adam step. */
static void optim_case(void) {
    enum { N = 37 };
    float *var = inputs(N, 11), *grad = inputs(N, 12), *vel = inputs(N, 13);
    PUT("sgd.var", var, N);
    PUT("sgd.grad", grad, N);
    PUT("sgd.velocity", vel, N);
    check(pr_k_sgd_momentum(var, grad, vel, N, 0.1f, 0.9f, 1, 0.01f), "sgd_momentum");
    PUT("sgd.var_out", var, N);
    PUT("sgd.velocity_out", vel, N);
    float *m = inputs(N, 14), *v = inputs(N, 15);
    for (int i = 0; i < N; i++) v[i] = v[i] * v[i];
    PUT("adam.var", var, N);
    PUT("adam.m", m, N);
    PUT("adam.v", v, N);
    check(pr_k_adam(var, grad, m, v, NULL, N, 0.01f, 3.0f, 0.9f, 0.999f, (float)(1.0 - 0.9),
                    (float)(1.0 - 0.999), 1e-7f, 0.0f),
          "adam");
    PUT("adam.var_out", var, N);
    PUT("adam.m_out", m, N);
    PUT("adam.v_out", v, N);
    free(var), free(grad), free(vel), free(m), free(v);
}

/* Philox streams and bfloat16 rounding: bit for bit on every machine. */
static void bits_case(void) {
    enum { N = 9 };
    float u[N], z[N], r[N];
    uint16_t h[N];
    check(pr_k_random_uniform(u, N, 7, 3, -2.0, 3.0), "random_uniform");
    check(pr_k_random_normal(z, N, 7, 3, 0.5, 2.0), "random_normal");
    PUT("rng.uniform", u, N);
    PUT("rng.normal", z, N);
    float *x = inputs(N, 16);
    for (int i = 0; i < N; i++) x[i] = x[i] * 3.14159274f + 1e-3f * (float)i;
    pr_f32_to_bf16(x, h, N);
    pr_bf16_to_f32_array(h, r, N);
    PUT("bf16.x", x, N);
    PUT("bf16.rounded", r, N);
    free(x);
}

/* C (5, 7) = A (5, 9) B^T with B (7, 9), OpenBLAS through pr_sgemm. */
static void sgemm_case(void) {
    float *a = inputs(5 * 9, 17), *b = inputs(7 * 9, 18), c[5 * 7];
    pr_sgemm(0, 1, 5, 7, 9, 1.0f, a, 9, b, 9, 0.0f, c, 7);
    PUT("sgemm.a", a, 5, 9);
    PUT("sgemm.b", b, 7, 9);
    PUT("sgemm.c", c, 5, 7);
    free(a), free(b);
}

int main(void) {
    pr_set_num_threads(2); /* the parallel loops too */
    conv_case("conv_s2_same", 2, 7, 6, 3, 3, 3, 5, 2, 1);
    conv_case("conv_s1_valid", 1, 5, 6, 4, 2, 3, 6, 1, 0);
    pool_case();
    bn_case();
    loss_case();
    optim_case();
    bits_case();
    sgemm_case();
    return failed;
}
