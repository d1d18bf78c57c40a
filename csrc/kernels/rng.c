/* Philox-4x32-10 and the draws built on it; see rng.h for the stream layout
 * and the formulas.  Round constants and structure from Random123's
 * philox.h (Salmon et al. 2011, section 3.2). */
#include "rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */
#define TWO_PI 6.283185307179586476925286766559

static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0], p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
}

void pr_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]}, k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; round++) {
        if (round) k[0] += PHILOX_W0, k[1] += PHILOX_W1;
        philox_round(c, k);
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

void pr_rng_init(pr_rng *r, uint64_t seed, uint64_t counter, uint32_t stream) {
    r->key[0] = (uint32_t)seed, r->key[1] = (uint32_t)(seed >> 32);
    r->ctr[0] = (uint32_t)counter, r->ctr[1] = (uint32_t)(counter >> 32);
    r->ctr[2] = stream, r->ctr[3] = 0;
    r->pos = 4;
}

uint32_t pr_rng_u32(pr_rng *r) {
    if (r->pos == 4) {
        pr_philox4x32(r->ctr, r->key, r->buf);
        r->ctr[3]++;
        r->pos = 0;
    }
    return r->buf[r->pos++];
}

double pr_rng_uniform(pr_rng *r) { return ((double)pr_rng_u32(r) + 0.5) * 0x1p-32; }

uint32_t pr_rng_below(pr_rng *r, uint32_t n) {
    return (uint32_t)(((uint64_t)pr_rng_u32(r) * n) >> 32);
}

double pr_rng_normal(pr_rng *r) {
    double u1 = pr_rng_uniform(r), u2 = pr_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}

double pr_rng_gamma(pr_rng *r, double a) {
    if (a < 1.0) {
        double g = pr_rng_gamma(r, a + 1.0);
        return g * pow(pr_rng_uniform(r), 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = pr_rng_normal(r), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = pr_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
    }
}

double pr_rng_beta(pr_rng *r, double a, double b) {
    double x = pr_rng_gamma(r, a), y = pr_rng_gamma(r, b);
    return x / (x + y);
}

void pr_rng_buffer_shuffle(int64_t n, int64_t buffer_size, uint64_t seed, uint64_t counter,
                           int64_t *order, int64_t *scratch) {
    pr_rng r;
    pr_rng_init(&r, seed, counter, 0);
    int64_t len = 0, next = 0;
    while (len < buffer_size && next < n) scratch[len++] = next++;
    for (int64_t out = 0; out < n; out++) {
        int64_t k = (int64_t)pr_rng_below(&r, (uint32_t)len);
        order[out] = scratch[k];
        if (next < n)
            scratch[k] = next++;
        else
            scratch[k] = scratch[--len];
    }
}

int pr_k_random_normal(float *out, int64_t n, uint64_t seed, uint64_t counter, double mean,
                       double stddev) {
    pr_rng r;
    pr_rng_init(&r, seed, counter, 0);
    for (int64_t i = 0; i < n; i++) out[i] = (float)(mean + stddev * pr_rng_normal(&r));
    return 0;
}

int pr_k_random_uniform(float *out, int64_t n, uint64_t seed, uint64_t counter, double minval,
                        double maxval) {
    pr_rng r;
    pr_rng_init(&r, seed, counter, 0);
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)(minval + (maxval - minval) * pr_rng_uniform(&r));
    return 0;
}
