/* Plans of traced graphs, shared by the planner (plan.c) and the executor
 * (executor.c).  A plan is made once per binding of a graph's symbolic
 * dimensions: every value's shape, its place in one arena, each node's
 * scratch, attributes and kernel choice. */
#ifndef PR_PLAN_H
#define PR_PLAN_H

#include "graph.h"

struct pr_plan {
    int64_t *binding;     /* the symbols' sizes this plan is for (one per symbol) */
    pr_view *views;       /* per value: dtype and shape (data unused) */
    int64_t *offset;      /* per value: arena offset, or -1 */
    int64_t *scratch_off; /* per node */
    size_t *scratch;      /* per node: bytes */
    char *attrs;          /* per node: the attributes for this size */
    int *variant;         /* per node: the choice (see choices()); -1: to be timed (jit) */
    int *dflt;            /* per node: the choice without timing (first usable variant) */
    unsigned *usable;     /* per node: bit k set when kernel k may run these shapes */
    PyObject **tune_key;  /* per node with choices (jit): bytes naming op, shapes, attrs */
    int tuning;           /* a call is timing the choices now */
    size_t arena_bytes;   /* planned arena: intermediates + scratch */
    size_t naive_bytes;   /* the same without reuse */
    size_t output_bytes;  /* outputs returned to Python */
    double flops;
    int n_nodes;
    int n_inplace;        /* values written over a dying input (jit) */
    uint64_t last_used;   /* the graph's plan_clock at its last use */
    int in_use;           /* calls running it now (never evicted then) */
    void **pool;          /* free arenas (touched with the GIL held) */
    int n_pool, cap_pool;
};

/* Bytes of a value. */
static inline size_t pr_view_bytes(const pr_view *v) {
    return (size_t)v->size * pr_dtype_size(v->dtype);
}

/* A node's kernel choices (see plan.c, "kernel choice"): c = kernel * 2 +
 * (one thread). */
static inline int pr_plan_choices(const pr_op *op) {
    return (op->n_variants > 1 ? op->n_variants : 1) * 2;
}
static inline int pr_plan_kernel_of(const pr_op *op, int c) {
    return op->n_variants ? c / 2 : -1;
}

/* A plan of fewer floating-point operations per run (plan->flops: a
 * multiply-add counts 2, an elementwise op one per output element) runs on
 * one thread: its kernels are so short that waking the other threads for
 * each parallel loop costs more than they give (measured when they slept
 * at once, OMP_WAIT_POLICY=PASSIVE; they now spin about 0.2 ms first,
 * GOMP_SPINCOUNT in pyresnet/_loader.py).  An MLP 784-128-10 step at batch
 * 32 (~1.3e7) runs at twice the speed on one thread of a 2-core Xeon; a
 * ResNet-20 step at batch 128 (3.1e10) keeps every thread.  A loop's body
 * decides for itself, per run of its own plan. */
#define PLAN_PARALLEL_MIN_FLOPS 3e7

static inline int pr_plan_threads(const pr_plan *p) {
    return p->flops < PLAN_PARALLEL_MIN_FLOPS ? 1 : pr_get_num_threads();
}

/* A loop over a dataset: the batches one call runs, from the loop's feeder
 * (called when the call is planned, never during the run). */
typedef struct {
    PyObject *fed;           /* the feeder's (BatchIterator, first, count) (strong), or NULL */
    PyObject *iterator;      /* borrowed from fed */
    int64_t n_batches, first, count;
    const pr_view *full, *last; /* the pass's batch components: a full and the last batch */
} pr_source;

/* Everything one call runs, planned before it starts: the graph's plan for
 * the inputs' sizes and, per loop node, the body's plans (a full batch and a
 * smaller last one) with the loop's batches.  Every plan in it is pinned
 * (in_use) until pr_call_plan_release. */
typedef struct pr_call_plan pr_call_plan;
typedef struct {
    pr_call_plan *body; /* [2]: the full batch, a smaller last one (body[1].plan NULL: none) */
    pr_source src;      /* a loop over a dataset (src.fed NULL: another loop) */
} pr_loop_plan;
struct pr_call_plan {
    pr_Graph *g;         /* borrowed */
    pr_plan *plan;
    int64_t *binding;    /* the graph's symbol sizes (owned) */
    pr_loop_plan *loops; /* per loop of g (g->n_loops), or NULL */
};

/* Convert and check a call's inputs (a sequence of g->n_inputs objects) and
 * bind the symbols to their sizes: t[] gets new references (the caller
 * releases them), in[] their views, binding[] one size per symbol.  0 or -1. */
int pr_plan_bind(pr_Graph *g, PyObject *seq, pr_Tensor **t, pr_view *in, int64_t *binding);
/* The plan of g for `binding` (made on first use, kept among the graph's
 * most recently used); NULL with an exception. */
pr_plan *pr_plan_for(pr_Graph *g, const int64_t *binding, const pr_view *in);
void pr_plan_free(pr_plan *p);
/* The call plan of g for inputs `in` bound as `binding` (copied): the plans
 * of g and of every loop body under it, the loops' batches from their
 * feeders.  0, or -1 with an exception (cp released). */
int pr_call_plan_make(pr_Graph *g, const int64_t *binding, const pr_view *in, pr_call_plan *cp);
void pr_call_plan_release(pr_call_plan *cp);
/* The input pipeline's batches (pipeline.c installs them when the module
 * starts; see graph.h): compute batch b of a BatchIterator into dst. */
int pr_plan_fill_batch(PyObject *iterator, int64_t b, void *const *dst, char *error);
/* Before a run (GIL held): take the kernel choices timed before; whether some
 * remain to time.  After a run that timed (`timed[j]` set), remember them. */
int pr_plan_tune_lookup(pr_plan *p);
int pr_plan_tune_store(pr_plan *p, const char *timed);
/* An arena for one run of p (a pooled one, else new; GIL held), and back. */
void *pr_plan_arena_get(pr_plan *p);
void pr_plan_arena_put(pr_plan *p, void *arena);
/* Graph.plan(inputs): a dict describing the plan for these inputs' shapes
 * (per node output shapes, flops, kernel variants; arena/naive/output bytes). */
PyObject *pr_plan_describe(pr_Graph *g, PyObject *inputs);
/* Graph._pin(inputs): a capsule that keeps the plan for these inputs' sizes
 * among the graph's (never evicted) until it is freed (pyresnet.compile.Plan). */
PyObject *pr_plan_pin(pr_Graph *g, PyObject *inputs);
/* The tuning cache, and the graph's hook to free its plans. */
int pr_plan_init(void);

#endif
