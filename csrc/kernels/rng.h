/* Counter-based random numbers: Philox-4x32-10 (Salmon, Moraes, Dror and
 * Shaw 2011, "Parallel random numbers: as easy as 1, 2, 3", SC'11), checked
 * against the known-answer vectors of the Random123 distribution.
 *
 * A random op's state is an int64 Variable [seed, counter].  One call of the
 * op uses the current counter and then increments it, so every call draws new
 * numbers and a fixed seed reproduces a run.  Within a call, stream `s` (the
 * image index, or PR_RNG_BATCH_STREAM for batch-level draws) is the word
 * sequence of the Philox blocks
 *     key = (seed low 32 bits, seed high 32 bits)
 *     ctr = (counter low, counter high, s, j)      for j = 0, 1, 2, ...
 * taken word 0..3 of block 0, then of block 1, and so on.  A draw for image i
 * therefore depends on (seed, counter, i) only, never on the thread that
 * computes it.
 *
 * Derived draws (what NumPy references reproduce):
 *   uniform()  = (u + 0.5) / 2^32            one word, in (0, 1)
 *   below(n)   = floor(u * n / 2^32)         one word, in [0, n)
 *   normal()   = sqrt(-2 ln u1) cos(2 pi u2) two uniforms (Box and Muller 1958)
 *   gamma(a)   Marsaglia and Tsang 2000 ("A simple method for generating gamma
 *              variables", ACM TOMS 26(3)), with gamma(a) = gamma(a + 1) U^(1/a)
 *              for a < 1 (their section 6)
 *   beta(a, b) = X / (X + Y), X ~ gamma(a), Y ~ gamma(b)
 */
#ifndef PR_K_RNG_H
#define PR_K_RNG_H

#include "kernels.h"

#define PR_RNG_BATCH_STREAM 0xFFFFFFFFu

/* One Philox-4x32-10 block: out = philox(ctr, key). */
void pr_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

typedef struct {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4];
    int pos; /* next unused word of buf; 4 = block exhausted */
} pr_rng;

void pr_rng_init(pr_rng *r, uint64_t seed, uint64_t counter, uint32_t stream);
uint32_t pr_rng_u32(pr_rng *r);
double pr_rng_uniform(pr_rng *r);
uint32_t pr_rng_below(pr_rng *r, uint32_t n);
double pr_rng_normal(pr_rng *r);
double pr_rng_gamma(pr_rng *r, double a);
double pr_rng_beta(pr_rng *r, double a, double b);

/* The element order of tf.data's shuffle(buffer_size): a buffer is filled
 * with the first `buffer_size` indices; each step emits the buffer slot
 * below(len) and refills it with the next index (or, once the input is
 * exhausted, with the buffer's last entry).  buffer_size >= n gives a uniform
 * permutation.  Draws from stream 0 of (seed, counter).  `scratch` holds
 * min(n, buffer_size) int64. */
void pr_rng_buffer_shuffle(int64_t n, int64_t buffer_size, uint64_t seed, uint64_t counter,
                           int64_t *order, int64_t *scratch);

/* Fill out[0..n) from stream 0 of (seed, counter), element i after element
 * i - 1: random_normal writes mean + stddev * normal() (two words each),
 * random_uniform minval + (maxval - minval) * uniform() (one word each), both
 * computed in double and rounded to float32.  Return 0. */
int pr_k_random_normal(float *out, int64_t n, uint64_t seed, uint64_t counter, double mean,
                       double stddev);
int pr_k_random_uniform(float *out, int64_t n, uint64_t seed, uint64_t counter, double minval,
                        double maxval);

#endif
