/* Fused ops made by the jit_compile passes, and the pass that makes them.
 *
 * fused_elementwise: a chain of elementwise nodes (add, subtract, multiply,
 * divide, negative, scale, relu, relu_backward, and the unary exp, log, sqrt,
 * square, abs, sign, sigmoid, tanh, erf; bias-add + ReLU and a
 * residual add + ReLU are such chains) becomes one node running a short
 * program (kernels/fused.c).  The pass runs after tracing, when the backward
 * nodes exist already, so fused ops need no gradient rule.
 */
#include "graph.h" /* Python.h first */

#include <string.h>

#include "kernels/elementwise.h"
#include "kernels/fused.h"
#include "kernels/norm.h"
#include "op_attrs.h"

/* ---- the op ---------------------------------------------------------------- */

static int infer_fused(const pr_op *op, const pr_view *in, int n, const void *attrs,
                       pr_view *out, size_t *ws) {
    const pr_fused_attrs *p = attrs;
    const pr_view *full = NULL;
    if (p->n_in != n || p->n_instr < 1 || p->n_instr > PR_FUSED_MAX_INSTR)
        return pr_fail(op, PyExc_ValueError, "malformed program");
    for (int k = 0; k < n; k++) {
        if (pr_expect_dtype(op, in, k, PR_F32) < 0) return -1;
        if (p->mode[k] == PR_FM_FULL && !full) full = &in[k];
    }
    if (!full) return pr_fail(op, PyExc_ValueError, "no input of the output's shape");
    int64_t channels = full->ndim ? full->shape[full->ndim - 1] : 1;
    for (int k = 0; k < n; k++) {
        int ok = p->mode[k] == PR_FM_SCALAR    ? in[k].size == 1
                 : p->mode[k] == PR_FM_CHANNEL ? in[k].size == channels && in[k].ndim >= 1 &&
                                                     in[k].shape[in[k].ndim - 1] == channels
                                               : in[k].ndim == full->ndim;
        for (int d = 0; ok && p->mode[k] == PR_FM_FULL && d < full->ndim; d++)
            ok = in[k].shape[d] == full->shape[d];
        if (!ok) {
            char s[128], f[128];
            return pr_fail(op, PyExc_ValueError, "input %d of shape %s does not fit output %s", k,
                           pr_shape_str(&in[k], s, sizeof s), pr_shape_str(full, f, sizeof f));
        }
    }
    pr_set_out(out, PR_F32, full->ndim, full->shape);
    return 0;
}

static int fw_fused(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const float *ptrs[PR_FUSED_MAX_IN];
    for (int k = 0; k < n; k++) ptrs[k] = in[k].data;
    int64_t channels = out->ndim ? out->shape[out->ndim - 1] : 1;
    return pr_k_fused(attrs, ptrs, out->data, out->size, channels ? channels : 1);
}

static const pr_op op_fused = {
    .name = "fused_elementwise", .n_in = -1, .n_out = 1, .flags = PR_OP_ELEMENTWISE,
    .attr_size = sizeof(pr_fused_attrs), .infer = infer_fused, .forward = fw_fused,
    .doc = "A chain of elementwise ops run as one kernel (made by jit_compile; not callable "
           "by name)."};

/* batch_norm_relu_train / batch_norm_relu_infer: batch normalization whose
 * output goes straight through a ReLU, in the same pass over the data.
 * Shape rules are the plain BN ops' (looked up in the registry). */
static int infer_bn_relu(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    const pr_op *base = pr_op_lookup(op->n_in == 3 ? "batch_norm_train" : "batch_norm_infer");
    if (!base) return pr_fail(op, PyExc_RuntimeError, "batch normalization is not registered");
    return base->infer(op, in, n, attrs, out, ws); /* errors name the fused op */
}

static int64_t bn_rows(const pr_view *x) { return x->ndim ? x->size / x->shape[x->ndim - 1] : 1; }
static int64_t bn_channels(const pr_view *x) { return x->ndim ? x->shape[x->ndim - 1] : 1; }

static int fw_bn_relu_train(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_train_act(in[0].data, in[1].data, in[2].data, bn_rows(&in[0]),
                             bn_channels(&in[0]), ((const pr_bn_attrs *)a)->epsilon, out[0].data,
                             out[1].data, out[2].data, ws, 1);
}

static int fw_bn_relu_infer(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_infer_act(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                             bn_rows(&in[0]), bn_channels(&in[0]), ((const pr_bn_attrs *)a)->epsilon,
                             out->data, ws, 1);
}

static const pr_attr_spec bn_attrs[] = {
    {"epsilon", PR_ATTR_FLOAT, offsetof(pr_bn_attrs, epsilon), 0, 1e-3}, {NULL}};

static const pr_op op_bn_relu_train = {
    .name = "batch_norm_relu_train", .n_in = 3, .n_out = 3, .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_relu, .forward = fw_bn_relu_train,
    .doc = "relu(batch_norm_train(x, gamma, beta)) and the batch statistics, in one pass "
           "(made by jit_compile; the graph's own backward nodes serve as its gradient)."};
static const pr_op op_bn_relu_infer = {
    .name = "batch_norm_relu_infer", .n_in = 5, .n_out = 1, .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_relu, .forward = fw_bn_relu_infer,
    .doc = "relu(batch_norm_infer(x, gamma, beta, moving_mean, moving_var)) in one pass (made by "
           "jit_compile)."};

const pr_op *const pr_ops_fused[] = {&op_bn_relu_train, &op_bn_relu_infer, NULL};

/* ---- the pass ---------------------------------------------------------------- */

/* The program of a single elementwise node, or -1 if it is not one. */
static int single_program(const pr_gnode *n, pr_fused_attrs *p) {
    memset(p, 0, sizeof *p);
    if (n->op == &op_fused) {
        memcpy(p, n->attrs, sizeof *p);
        return 0;
    }
    static const struct {
        const char *name;
        int code;
    } table[] = {{"add", PR_FI_ADD},   {"subtract", PR_FI_SUB}, {"multiply", PR_FI_MUL},
                 {"divide", PR_FI_DIV}, {"negative", PR_FI_NEG}, {"scale", PR_FI_SCALE},
                 {"relu", PR_FI_RELU},  {"relu_backward", PR_FI_RELU_BWD}};
    static const struct {
        const char *name;
        pr_unary_kind kind;
    } unary[] = {{"exp", PR_UN_EXP},   {"log", PR_UN_LOG},         {"sqrt", PR_UN_SQRT},
                 {"square", PR_UN_SQUARE}, {"abs", PR_UN_ABS},     {"sign", PR_UN_SIGN},
                 {"sigmoid", PR_UN_SIGMOID}, {"tanh", PR_UN_TANH}, {"erf", PR_UN_ERF}};
    for (size_t i = 0; i < sizeof unary / sizeof *unary; i++) {
        if (strcmp(n->op->name, unary[i].name) != 0) continue;
        p->n_in = 1;
        p->n_instr = 1;
        p->ins[0].code = PR_FI_UNARY;
        p->ins[0].pad = (uint8_t)unary[i].kind;
        return 0;
    }
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        if (strcmp(n->op->name, table[i].name) != 0) continue;
        p->n_in = n->n_in;
        p->n_instr = 1;
        p->ins[0].code = (uint8_t)table[i].code;
        p->ins[0].a = 0;
        p->ins[0].b = (uint8_t)(n->n_in > 1 ? 1 : 0);
        if (table[i].code == PR_FI_SCALE) {
            const pr_scale_attrs *a = (const pr_scale_attrs *)n->attrs;
            p->ins[0].imm = (float)(a->value / (double)a->divisor);
        }
        return 0;
    }
    return -1;
}

/* How input view `v` is read for an output of shape `out`, or -1. */
static int read_mode(const pr_gvalue *v, const pr_gvalue *out) {
    /* a symbolic shape can only be read in full (weights have known shapes) */
    int64_t size = pr_dims_symbolic(v->ndim, v->shape) ? -1 : 1;
    for (int d = 0; size > 0 && d < v->ndim; d++) size *= v->shape[d];
    if (v->dtype != PR_F32) return -1;
    int same = v->ndim == out->ndim;
    for (int d = 0; same && d < v->ndim; d++) same = v->shape[d] == out->shape[d];
    if (same) return PR_FM_FULL;
    if (size == 1) return PR_FM_SCALAR;
    if (out->ndim >= 1 && v->ndim >= 1 && v->shape[v->ndim - 1] == out->shape[out->ndim - 1] &&
        size == v->shape[v->ndim - 1])
        return PR_FM_CHANNEL;
    return -1;
}

/* Renumber a program's registers into a fused program under construction:
 * inputs through `map_in`, temporaries shifted by `base`. */
static void append_program(pr_fused_attrs *dst, const pr_fused_attrs *src, const int *map_in) {
    int base = dst->n_instr;
    for (int i = 0; i < src->n_instr; i++) {
        pr_finstr x = src->ins[i];
        x.a = (uint8_t)(x.a < PR_FUSED_MAX_IN ? map_in[x.a] : x.a + base);
        x.b = (uint8_t)(x.b < PR_FUSED_MAX_IN ? map_in[x.b] : x.b + base);
        dst->ins[dst->n_instr++] = x;
    }
}

/* Merge producer P into consumer C (P's only reader); returns 1 if done. */
static int try_merge(pr_Graph *g, int pj, int cj) {
    pr_gnode *P = &g->nodes[pj], *C = &g->nodes[cj];
    pr_fused_attrs pp, cp, f;
    if (single_program(P, &pp) < 0 || single_program(C, &cp) < 0) return 0;
    if (P->dyn_attrs || C->dyn_attrs) return 0;
    if (pp.n_instr + cp.n_instr > PR_FUSED_MAX_INSTR) return 0;
    const pr_gvalue *outv = &g->vals[C->out[0]];
    int v = P->out[0];
    if (read_mode(&g->vals[v], outv) != PR_FM_FULL) return 0;
    /* Inputs of the fused node: P's, then C's other than v (deduplicated). */
    int ins[2 * PR_MAX_INPUTS], n_ins = 0, map_p[PR_FUSED_MAX_IN], map_c[PR_FUSED_MAX_IN];
    for (int pass = 0; pass < 2; pass++) {
        pr_gnode *N = pass ? C : P;
        int *map = pass ? map_c : map_p;
        for (int k = 0; k < N->n_in; k++) {
            int u = N->in[k];
            if (pass && u == v) {
                map[k] = -1; /* P's result */
                continue;
            }
            int found = -1;
            for (int m = 0; m < n_ins; m++)
                if (ins[m] == u) found = m;
            if (found < 0) {
                if (n_ins == PR_FUSED_MAX_IN) return 0;
                if (read_mode(&g->vals[u], outv) < 0) return 0;
                found = n_ins;
                ins[n_ins++] = u;
            }
            map[k] = found;
        }
    }
    memset(&f, 0, sizeof f);
    f.n_in = n_ins;
    for (int m = 0; m < n_ins; m++) f.mode[m] = read_mode(&g->vals[ins[m]], outv);
    append_program(&f, &pp, map_p);
    for (int k = 0; k < C->n_in; k++)
        if (map_c[k] < 0) map_c[k] = PR_FUSED_MAX_IN + pp.n_instr - 1; /* P's result */
    append_program(&f, &cp, map_c);
    C->op = &op_fused;
    C->n_in = n_ins;
    for (int m = 0; m < n_ins; m++) C->in[m] = ins[m];
    memset(C->attrs, 0, PR_ATTR_BYTES);
    memcpy(C->attrs, &f, sizeof f);
    P->op = NULL; /* removed below */
    return 1;
}

int pr_fuse_elementwise(pr_Graph *g) {
    int nv = g->n_vals;
    int *readers = PyMem_Calloc((size_t)nv + 1, sizeof(int));
    int *reader = PyMem_Calloc((size_t)nv + 1, sizeof(int));
    if (!readers || !reader) {
        PyMem_Free(readers), PyMem_Free(reader);
        return PyErr_NoMemory(), -1;
    }
    for (int i = 0; i < g->n_outputs; i++) readers[g->outputs[i]] += 2; /* never fused away */
    for (int j = 0; j < g->n_nodes; j++)
        for (int i = 0; i < g->nodes[j].n_in; i++) {
            readers[g->nodes[j].in[i]]++;
            reader[g->nodes[j].in[i]] = j;
        }
    /* In program order, so a chain a -> b -> c folds into c step by step. */
    for (int pj = 0; pj < g->n_nodes; pj++) {
        pr_gnode *P = &g->nodes[pj];
        if (!P->op || P->host >= 0 || P->n_out < 1) continue;
        int v = P->out[0];
        if (readers[v] != 1) continue;
        int cj = reader[v];
        pr_gnode *C = &g->nodes[cj];
        const pr_op *bn_relu = strcmp(P->op->name, "batch_norm_train") == 0   ? &op_bn_relu_train
                               : strcmp(P->op->name, "batch_norm_infer") == 0 ? &op_bn_relu_infer
                                                                             : NULL;
        if (bn_relu && C->op && C->host < 0 && strcmp(C->op->name, "relu") == 0 && cj > pj) {
            /* BN's output feeds only a ReLU: BN writes the ReLU's output. */
            P->op = bn_relu;
            P->out[0] = C->out[0];
            C->op = NULL;
            g->n_fused++;
            continue;
        }
        if (P->n_out != 1) continue;
        /* P would run at C's place: nothing in between may write state. */
        int clean = 1;
        for (int k = pj + 1; k < cj && clean; k++)
            clean = g->nodes[k].op && !g->nodes[k].op->mutates && g->nodes[k].host < 0 &&
                    !(g->nodes[k].op->flags & PR_OP_STATEFUL);
        if (clean && try_merge(g, pj, cj)) g->n_fused++;
    }
    int k = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        if (!g->nodes[j].op) continue;
        if (k != j) g->nodes[k] = g->nodes[j];
        for (int i = 0; i < g->nodes[k].n_out; i++) g->vals[g->nodes[k].out[i]].index = k;
        k++;
    }
    g->n_nodes = k;
    PyMem_Free(readers);
    PyMem_Free(reader);
    return 0;
}
