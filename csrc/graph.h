/* The traced graph IR, shared by the tracer and passes (graph.c) and the
 * memory planner and executor (executor.c).
 *
 * A graph is a list of values and a list of nodes in program order.  A value
 * is a graph input (placeholder), a captured real tensor (a Variable, a
 * constant, an optimizer slot: held by reference, never copied), or an
 * output of a node.  A node is one call of a registered op: the op, its
 * attribute bytes, the ids of its input and output values.  Ops that mutate
 * an input or are PR_OP_STATEFUL are side effects: kept in program order.
 *
 * A loop node (pyresnet.while_loop, fori_loop, `for batch in dataset`) runs
 * a body graph (a subgraph traced with this graph as its parent) over and
 * over: its inputs are the loop variables' initial values and the outer
 * values the body reads, its outputs the loop variables' final values.
 * The body reads outer values as its own inputs (lifted), shares the
 * parent's symbol table, and is planned once per binding like any graph.
 *
 * Unknown dimensions (None in an input_signature, the batch dimension under
 * reduce_retracing) are symbols of the graph's table (symdim.h): shapes and
 * attributes hold their codes, and each call binds the symbols to its
 * inputs' sizes and runs the plan made for that binding.
 */
#ifndef PR_GRAPH_H
#define PR_GRAPH_H

#include "ops.h"

enum { PR_VAL_INPUT, PR_VAL_CAPTURE, PR_VAL_NODE };

typedef struct {
    pr_dtype dtype;
    int ndim;
    int64_t shape[PR_MAX_DIMS]; /* as traced (unknown dims are symbolic codes) */
    int kind;                   /* PR_VAL_* */
    int index;                  /* input position, capture position, or producing node */
    int has_known;              /* a scalar whose value is the dimension `known` */
    int64_t known;
} pr_gvalue;

/* Inputs and outputs of one node: an op's are at most PR_MAX_INPUTS and
 * PR_MAX_OUTPUTS; a loop node's are its loop variables and lifted values. */
#define PR_NODE_MAX_IN 48
#define PR_NODE_MAX_OUT 32

typedef struct {
    const pr_op *op;
    int n_in, n_out;
    int in[PR_NODE_MAX_IN];
    int out[PR_NODE_MAX_OUT];
    int loop;            /* >= 0: index of the loop (pr_loop) this node runs */
    int host;            /* >= 0: index of a Python callback run with the GIL (pyresnet.print) */
    int dyn_attrs;       /* attributes hold symbolic dimensions (evaluated per plan) */
    int scope;           /* the graph's `scope` when the node was traced (pyresnet.name_scope) */
    PR_ATTR_ALIGN char attrs[PR_ATTR_BYTES];
} pr_gnode;

typedef struct pr_plan pr_plan;
typedef struct pr_Graph pr_Graph;

/* A loop node's body and how the node's values map onto the body's inputs
 * and outputs.  The node's inputs are: the n_carry initial values, then the
 * n_const outer values the body reads unchanged, then (when present) the
 * initial continue flag and the fori_loop bounds. */
typedef struct {
    pr_Graph *body;      /* strong reference */
    int n_carry, n_const, n_feed;
    int carry_in[PR_NODE_MAX_OUT];  /* body input of loop variable k */
    int carry_out[PR_NODE_MAX_OUT]; /* body output of loop variable k */
    int const_in[PR_NODE_MAX_IN];   /* body input of outer value k */
    int feed_in[PR_MAX_INPUTS];     /* body input of batch component k */
    int64_t feed_batch;  /* the batch dimension as traced (a size or a symbol's code) */
    int iter_in;         /* body input fed the iteration's index (int32), or -1 */
    int cond_out;        /* body output: continue after this iteration (nonzero), or -1 */
    int cond0_in;        /* node input: run the first iteration at all, or -1 */
    int lower_in, upper_in; /* node inputs holding the bounds (fori_loop), or -1 */
    int64_t lower, upper;   /* static bounds when those are -1 (upper < 0: none) */
    int64_t max_iter;    /* at most this many iterations, or -1 */
    PyObject *feeder;    /* callable -> (BatchIterator, first batch, count), or NULL:
                          * called when a call is planned (plan.c), never while it runs */
} pr_loop;

struct pr_Graph {
    PyObject_HEAD
    pr_gvalue *vals;
    int n_vals, cap_vals;
    pr_gnode *nodes;
    int n_nodes, cap_nodes;
    int n_inputs;
    pr_symtab *syms;      /* the symbolic dimensions of this graph (a body: its parent's) */
    pr_Graph *parent;     /* a loop body: the graph it was traced in (strong), else NULL */
    int *lifted;          /* a loop body: per input, the parent's value it reads, or -1 */
    int shared_syms;      /* syms belongs to the parent */
    pr_loop *loops;       /* the loop nodes' bodies */
    int n_loops;
    PyObject *captures;   /* list of captured real tensors */
    PyObject *capture_ids;/* dict: id(tensor) -> value id */
    PyObject *callbacks;  /* list of host callables */
    int *outputs;         /* value ids of the function's outputs */
    int n_outputs;
    int finalized;
    int jit;
    int tracing;
    PyObject *prev;       /* the graph traced before this one in this thread */
    pr_plan **plans;      /* one per binding of the symbols (at most PR_MAX_PLANS) */
    int n_plans;
    uint64_t plan_clock;  /* counts plan uses (least recently used goes first) */
    int n_fused, n_removed; /* what the passes did, for inspection */
    int scope;            /* copied into each new node: an index into the tracer's scope names */
};

/* The op of loop nodes (graph.c). */
extern const pr_op pr_loop_op;
extern PyTypeObject pr_GraphType;
/* The value id of g's input `index`, or -1. */
static inline int pr_graph_input_value(const pr_Graph *g, int index) {
    for (int v = 0; v < g->n_vals; v++)
        if (g->vals[v].kind == PR_VAL_INPUT && g->vals[v].index == index) return v;
    return -1;
}

int pr_graph_init(PyObject *module);

/* passes.c: the passes Graph.finalize runs (jit: the fusions too); 0 or -1. */
int pr_graph_passes(pr_Graph *g, int jit);
/* ops_fused.c: the jit_compile fusions (batch norm with the ReLU, residual
 * add and ReLU backward around it; elementwise chains). */
int pr_fuse(pr_Graph *g);

/* executor.c: Graph.run (and, through plan.c, Graph.plan).  A dying graph
 * frees its plans through pr_graph_plans_free, which plan.c sets. */
int pr_executor_init(PyObject *module, PyTypeObject *graph_type);
extern void (*pr_graph_plans_free)(pr_Graph *g);

/* Where a loop over a dataset gets its batches: the input pipeline
 * (pipeline.c) installs itself with pr_plan_set_batch_source when the
 * module starts.  info: whether `o` is a BatchIterator, its batches and
 * their component views (full and last batch).  fill: compute batch b into
 * dst[k] (no GIL needed; no Python object touched); a PR_* code, `error`
 * (512 bytes) says why on failure. */
typedef struct {
    int (*info)(PyObject *o, int *n_comp, int64_t *n_batches, const pr_view **full,
                const pr_view **last);
    int (*fill)(PyObject *o, int64_t b, void *const *dst, char *error);
} pr_batch_source;
void pr_plan_set_batch_source(pr_batch_source source);

#endif
