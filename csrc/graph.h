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

typedef struct {
    const pr_op *op;
    int n_in, n_out;
    int in[PR_MAX_INPUTS];
    int out[PR_MAX_OUTPUTS];
    int host;            /* >= 0: index of a Python callback run with the GIL (pyresnet.print) */
    int dyn_attrs;       /* attributes hold symbolic dimensions (evaluated per plan) */
    char attrs[PR_ATTR_BYTES];
} pr_gnode;

typedef struct pr_plan pr_plan;

typedef struct {
    PyObject_HEAD
    pr_gvalue *vals;
    int n_vals, cap_vals;
    pr_gnode *nodes;
    int n_nodes, cap_nodes;
    int n_inputs;
    pr_symtab *syms;      /* the symbolic dimensions of this graph */
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
} pr_Graph;

/* executor.c */
int pr_executor_init(PyObject *module, PyTypeObject *graph_type);
void pr_plans_free(pr_Graph *g);
/* Whether a node's attributes hold symbolic dimensions. */
int pr_attrs_dynamic(const pr_gnode *n);

#endif
