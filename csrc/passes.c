/* The graph passes, run once when tracing ends (Graph.finalize): dead-code
 * removal, sinking state updates after the loss, marking the nodes whose
 * attributes hold symbolic sizes, and under jit_compile the fusions of
 * ops_fused.c.  Node order stays program order.  They read and rewrite the
 * graph's arrays (graph.h) and call nothing above the ops. */
#include "graph.h"

#include <string.h>

static int is_side_effect(const pr_gnode *n) {
    return n->host >= 0 || n->op->mutates || (n->op->flags & (PR_OP_STATEFUL | PR_OP_RANDOM));
}

/* Dead-code removal: keep nodes that feed an output or a side effect. */
static int remove_dead(pr_Graph *g) {
    char *live_val = PyMem_Calloc((size_t)g->n_vals + 1, 1);
    char *live = PyMem_Calloc((size_t)g->n_nodes + 1, 1);
    if (!live_val || !live) {
        PyMem_Free(live_val), PyMem_Free(live);
        return PyErr_NoMemory(), -1;
    }
    for (int i = 0; i < g->n_outputs; i++) live_val[g->outputs[i]] = 1;
    for (int j = g->n_nodes - 1; j >= 0; j--) {
        pr_gnode *n = &g->nodes[j];
        int keep = is_side_effect(n);
        for (int i = 0; i < n->n_out && !keep; i++) keep = live_val[n->out[i]];
        if (!keep) continue;
        live[j] = 1;
        for (int i = 0; i < n->n_in; i++) live_val[n->in[i]] = 1;
    }
    int k = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        if (!live[j]) continue;
        if (k != j) g->nodes[k] = g->nodes[j];
        for (int i = 0; i < g->nodes[k].n_out; i++) g->vals[g->nodes[k].out[i]].index = k;
        k++;
    }
    g->n_removed += g->n_nodes - k;
    g->n_nodes = k;
    PyMem_Free(live_val);
    PyMem_Free(live);
    return 0;
}

/* Sink state updates: move every node that writes a variable as late as the
 * nodes after it allow (until one reads what it writes or reads its outputs,
 * or a host callback runs), keeping updates in their own order.  A training
 * step's BN moving-statistics updates then run after the loss, with the
 * optimizer's updates, so a kernel error in the forward pass or the loss
 * (a label out of range) leaves every variable as it was. */
static int sink_updates(pr_Graph *g) {
    int nn = g->n_nodes, n_pending = 0, k = 0;
    pr_gnode *order = PyMem_Malloc(sizeof(pr_gnode) * ((size_t)nn + 1));
    int *pending = PyMem_Malloc(sizeof(int) * ((size_t)nn + 1));
    char *written = PyMem_Calloc((size_t)g->n_vals + 1, 1); /* by a pending node */
    if (!order || !pending || !written) {
        PyMem_Free(order), PyMem_Free(pending), PyMem_Free(written);
        return PyErr_NoMemory(), -1;
    }
    for (int j = 0; j <= nn; j++) {
        pr_gnode *n = j < nn ? &g->nodes[j] : NULL;
        int flush = !n || n->host >= 0 || n->loop >= 0; /* a body may read anything */
        for (int i = 0; n && !flush && i < n->n_in; i++) flush = written[n->in[i]];
        if (flush) {
            for (int p = 0; p < n_pending; p++) order[k++] = g->nodes[pending[p]];
            n_pending = 0;
            memset(written, 0, (size_t)g->n_vals + 1);
        }
        if (!n) break;
        if (n->host < 0 && n->loop < 0 && n->op->mutates) {
            for (int i = 0; i < n->n_in; i++)
                if (n->op->mutates >> i & 1) written[n->in[i]] = 1;
            for (int i = 0; i < n->n_out; i++) written[n->out[i]] = 1;
            pending[n_pending++] = j;
        } else {
            order[k++] = *n;
        }
    }
    if (nn) memcpy(g->nodes, order, sizeof(pr_gnode) * (size_t)nn); /* nodes is NULL when none */
    for (int j = 0; j < nn; j++)
        for (int i = 0; i < g->nodes[j].n_out; i++) g->vals[g->nodes[j].out[i]].index = j;
    PyMem_Free(order);
    PyMem_Free(pending);
    PyMem_Free(written);
    return 0;
}


/* Whether a node's attributes hold symbolic dimensions (evaluated per plan). */
static int attrs_dynamic(const pr_gnode *n) {
    for (const pr_attr_spec *s = n->op->attrs; s && s->name; s++) {
        const char *field = n->attrs + s->offset;
        if (s->kind == PR_ATTR_INT && pr_dim_is_sym(*(const int64_t *)field)) return 1;
        if (s->kind == PR_ATTR_INTS) {
            const pr_ints *v = (const pr_ints *)field;
            for (int i = 0; i < v->n && i < PR_MAX_DIMS; i++)
                if (pr_dim_is_sym(v->v[i])) return 1;
        }
    }
    return 0;
}

int pr_graph_passes(pr_Graph *g, int jit) {
    if (remove_dead(g) < 0 || sink_updates(g) < 0) return -1;
    for (int j = 0; j < g->n_nodes; j++)
        g->nodes[j].dyn_attrs = g->nodes[j].host < 0 && attrs_dynamic(&g->nodes[j]);
    return jit ? pr_fuse(g) : 0;
}
