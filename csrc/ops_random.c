/* Registry entries of the random family: random_normal, random_uniform
 * (keras.random.normal / uniform).
 *
 * Each takes the RNG state, an int64 Variable [seed, counter], as its only
 * input, fills a float32 tensor of `shape` from the Philox stream 0 of
 * (seed, counter) (kernels/rng.h) and advances the counter, so a compiled
 * step draws new numbers on every call and a seed reproduces them.  The
 * shape may hold the batch size pyresnet.ops.shape gives while tracing.  The
 * draws are the output itself; no gradient. */
#include "ops.h" /* Python.h first */

#include "kernels/rng.h"

typedef struct {
    pr_ints shape;
    double a, b; /* (mean, stddev) or (minval, maxval) */
} random_attrs;

static int infer_random(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    const random_attrs *a = attrs;
    if (pr_expect_rng_state(op, in, 0) < 0) return -1;
    for (int d = 0; d < a->shape.n; d++)
        if (a->shape.v[d] < 0 && !pr_dim_is_sym(a->shape.v[d]))
            return pr_fail(op, PyExc_ValueError, "shape must hold sizes >= 0, got %lld at axis %d",
                           (long long)a->shape.v[d], d);
    if (!isfinite(a->a) || !isfinite(a->b))
        return pr_fail(op, PyExc_ValueError, "the distribution's parameters must be finite");
    pr_set_out(&out[0], PR_F32, a->shape.n, a->shape.v);
    *ws = 0;
    return 0;
}

static void state_advance(const pr_view *state) {
    int64_t *s = state->data;
    s[1] = (int64_t)((uint64_t)s[1] + 1);
}

static int fw_random_normal(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const random_attrs *a = attrs;
    const int64_t *s = in[0].data;
    int rc = pr_k_random_normal(out[0].data, out[0].size, (uint64_t)s[0], (uint64_t)s[1], a->a,
                                a->b);
    if (rc == 0) state_advance(&in[0]);
    return rc;
}

static int fw_random_uniform(const pr_view *in, int n, pr_view *out, const void *attrs,
                             void *ws) {
    const random_attrs *a = attrs;
    const int64_t *s = in[0].data;
    int rc = pr_k_random_uniform(out[0].data, out[0].size, (uint64_t)s[0], (uint64_t)s[1], a->a,
                                 a->b);
    if (rc == 0) state_advance(&in[0]);
    return rc;
}

static const pr_attr_spec normal_spec[] = {
    {"shape", PR_ATTR_INTS, offsetof(random_attrs, shape), 1, 0},
    {"mean", PR_ATTR_FLOAT, offsetof(random_attrs, a), 0, 0.0},
    {"stddev", PR_ATTR_FLOAT, offsetof(random_attrs, b), 0, 1.0},
    {NULL}};
static const pr_attr_spec uniform_spec[] = {
    {"shape", PR_ATTR_INTS, offsetof(random_attrs, shape), 1, 0},
    {"minval", PR_ATTR_FLOAT, offsetof(random_attrs, a), 0, 0.0},
    {"maxval", PR_ATTR_FLOAT, offsetof(random_attrs, b), 0, 1.0},
    {NULL}};

#define RANDOM (PR_OP_RANDOM | PR_OP_STATEFUL)

const pr_op pr_op_random_normal = {
    .name = "random_normal", .n_in = 1, .n_out = 1, .mutates = 1u << 0, .flags = RANDOM,
    .attrs = normal_spec, .attr_size = sizeof(random_attrs), .infer = infer_random,
    .forward = fw_random_normal,
    .doc = "random_normal(state; shape, mean=0, stddev=1) -> float32 of `shape`: normal draws "
           "(Box-Muller over Philox stream 0 of [seed, counter]); the counter advances."};

const pr_op pr_op_random_uniform = {
    .name = "random_uniform", .n_in = 1, .n_out = 1, .mutates = 1u << 0, .flags = RANDOM,
    .attrs = uniform_spec, .attr_size = sizeof(random_attrs), .infer = infer_random,
    .forward = fw_random_uniform,
    .doc = "random_uniform(state; shape, minval=0, maxval=1) -> float32 of `shape`: uniform "
           "draws in (minval, maxval) from Philox stream 0 of [seed, counter]; the counter "
           "advances."};

