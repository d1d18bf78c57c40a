/* Fused ops made by the jit_compile passes, and the passes that make them.
 *
 * Batch norm (forward): BN + ReLU -> batch_norm_relu_train (_infer); BN +
 * residual add + ReLU -> batch_norm_add_relu_train.  Backward: the
 * relu_backward feeding a batch_norm_train_backward of a fused BN + ReLU
 * folds into batch_norm_relu_train_backward, which recomputes the mask from
 * the BN's input; a cast to bfloat16 of a BN backward's dx folds into the
 * backward (dx_dtype).  A float32 product whose only reader is a
 * sum_to_shape becomes multiply_sum_to_shape, the product never stored
 * (squeeze-and-excitation's gate gradient, dy * x summed over pixels).
 * Each saves whole passes over the activations; each does the unfused ops'
 * float operations in their order (bit-identical results).
 *
 * fused_elementwise: a chain of elementwise nodes (add, subtract, multiply,
 * divide, negative, scale, relu, relu_backward, and the unary exp, log, sqrt,
 * square, abs, sign, sigmoid, tanh, erf; bias-add + ReLU and a
 * residual add + ReLU are such chains) becomes one node running a short
 * program (kernels/fused.c).  The pass runs after tracing, when the backward
 * nodes exist already, so fused ops need no gradient rule.
 */
#include "graph.h" /* Python.h first */
#include "op_list.h"

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

const pr_op pr_op_fused_elementwise = {
    .name = "fused_elementwise", .n_in = -1, .n_out = 1, .flags = PR_OP_ELEMENTWISE,
    .attr_size = sizeof(pr_fused_attrs), .infer = infer_fused, .forward = fw_fused,
    .doc = "A chain of elementwise ops run as one kernel (made by jit_compile; not callable "
           "by name)."};

/* batch_norm_relu_train / batch_norm_relu_infer: batch normalization whose
 * output goes straight through a ReLU, in the same pass over the data.
 * Shape rules are the plain BN ops' (looked up in the registry). */
static int infer_bn_relu(const pr_op *op, const pr_view *in, int n, const void *attrs,
                         pr_view *out, size_t *ws) {
    const pr_op *base = (op->n_in == 3 ? &pr_op_batch_norm_train : &pr_op_batch_norm_infer);
    if (!base) return pr_fail(op, PyExc_RuntimeError, "batch normalization is not registered");
    return base->infer(op, in, n, attrs, out, ws); /* errors name the fused op */
}

static int64_t bn_rows(const pr_view *x) { return x->ndim ? x->size / x->shape[x->ndim - 1] : 1; }
static int64_t bn_channels(const pr_view *x) { return x->ndim ? x->shape[x->ndim - 1] : 1; }

static int fw_bn_relu_train(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_train(in[0].data, in[1].data, in[2].data, n > 3 ? in[3].data : NULL,
                         in[0].dtype, bn_rows(&in[0]), bn_channels(&in[0]),
                         ((const pr_bn_attrs *)a)->epsilon, out[0].data, out[1].data,
                         out[2].data, ws, 1);
}

/* batch_norm_add_relu_train(x, gamma, beta, residual): relu(BN(x) + residual),
 * the residual of x's shape and dtype (batch_norm_train's rule checks it). */
static int infer_bn_add_relu(const pr_op *op, const pr_view *in, int n, const void *attrs,
                             pr_view *out, size_t *ws) {
    const pr_op *base = &pr_op_batch_norm_train;
    if (!base) return pr_fail(op, PyExc_RuntimeError, "batch normalization is not registered");
    return base->infer(op, in, 4, attrs, out, ws);
}

/* batch_norm_relu_train_backward(dy, x, gamma, beta, mean, var): the plain
 * backward's rule on (dy, x, gamma, mean, var), beta of gamma's shape. */
static int infer_bn_relu_backward(const pr_op *op, const pr_view *in, int n, const void *attrs,
                                  pr_view *out, size_t *ws) {
    const pr_op *base = &pr_op_batch_norm_train_backward;
    if (!base) return pr_fail(op, PyExc_RuntimeError, "batch normalization is not registered");
    pr_view v[5] = {in[0], in[1], in[2], in[4], in[5]};
    if (base->infer(op, v, 5, attrs, out, ws) < 0) return -1;
    return pr_expect_like(op, in, 3, 2);
}

static int fw_bn_relu_backward(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_train_backward(in[0].data, in[1].data, in[1].dtype, in[2].data, in[3].data,
                                  in[4].data, in[5].data, bn_rows(&in[1]), bn_channels(&in[1]),
                                  ((const pr_bn_attrs *)a)->epsilon, out[0].data, out[0].dtype,
                                  out[1].data, out[2].data, ws, 1);
}

static int fw_bn_relu_infer(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_bn_infer(in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, in[0].dtype,
                         bn_rows(&in[0]), bn_channels(&in[0]), ((const pr_bn_attrs *)a)->epsilon,
                         out->data, ws, 1);
}

static const pr_attr_spec bn_attrs[] = {
    {"epsilon", PR_ATTR_FLOAT, offsetof(pr_bn_attrs, epsilon), 0, 1e-3}, {NULL}};

const pr_op pr_op_batch_norm_relu_train = {
    .name = "batch_norm_relu_train", .n_in = 3, .n_out = 3, .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_relu, .forward = fw_bn_relu_train,
    .bf16_inputs = 1,
    .doc = "relu(batch_norm_train(x, gamma, beta)) and the batch statistics, in one pass "
           "(made by jit_compile; the graph's own backward nodes serve as its gradient)."};
const pr_op pr_op_batch_norm_relu_infer = {
    .name = "batch_norm_relu_infer", .n_in = 5, .n_out = 1, .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_relu, .forward = fw_bn_relu_infer,
    .bf16_inputs = 1,
    .doc = "relu(batch_norm_infer(x, gamma, beta, moving_mean, moving_var)) in one pass (made by "
           "jit_compile)."};

const pr_op pr_op_batch_norm_add_relu_train = {
    .name = "batch_norm_add_relu_train", .n_in = 4, .n_out = 3, .attrs = bn_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_add_relu, .forward = fw_bn_relu_train,
    .flags = PR_OP_NO_GRADIENT_RULE, .bf16_inputs = 9, /* x, the residual */
    .doc = "relu(batch_norm_train(x, gamma, beta) + residual) and the batch statistics, in one "
           "pass (made by jit_compile from a residual block's BN, add and ReLU; bit for bit "
           "the unfused ops' results)."};
const pr_op pr_op_batch_norm_relu_train_backward = {
    .name = "batch_norm_relu_train_backward", .n_in = 6, .n_out = 3,
    .attrs = pr_bn_backward_attrs,
    .attr_size = sizeof(pr_bn_attrs), .infer = infer_bn_relu_backward,
    .forward = fw_bn_relu_backward, .flags = PR_OP_NO_GRADIENT_RULE, .bf16_inputs = 3,
    .inplace_inputs = 3,
    .doc = "batch_norm_relu_train_backward(dy, x, gamma, beta, batch_mean, batch_var; epsilon, "
           "dx_dtype) -> dx, dgamma, dbeta: batch_norm_train_backward of relu_backward(dy, "
           "relu(batch_norm_train(x))), the ReLU's mask recomputed from x (made by "
           "jit_compile; bit for bit the unfused ops' results)."};


/* ---- the pass ---------------------------------------------------------------- */

/* The program of a single elementwise node, or -1 if it is not one. */
static int single_program(const pr_gnode *n, pr_fused_attrs *p) {
    memset(p, 0, sizeof *p);
    if (n->op == &pr_op_fused_elementwise) {
        memcpy(p, n->attrs, sizeof *p);
        return 0;
    }
    if (!n->op->fuse || n->host >= 0 || n->loop >= 0) return -1;
    p->n_in = n->n_in;
    p->n_instr = 1;
    p->ins[0].code = n->op->fuse;
    p->ins[0].a = 0;
    p->ins[0].b = (uint8_t)(n->n_in > 1 ? 1 : 0);
    if (n->op->fuse == PR_FI_UNARY) p->ins[0].pad = n->op->fuse_arg;
    if (n->op->fuse == PR_FI_SCALE) {
        const pr_scale_attrs *a = (const pr_scale_attrs *)n->attrs;
        p->ins[0].imm = (float)(a->value / (double)a->divisor);
    }
    return 0;
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
    C->op = &pr_op_fused_elementwise;
    C->n_in = n_ins;
    for (int m = 0; m < n_ins; m++) C->in[m] = ins[m];
    memset(C->attrs, 0, PR_ATTR_BYTES);
    memcpy(C->attrs, &f, sizeof f);
    P->op = NULL; /* removed below */
    return 1;
}

/* multiply_sum_to_shape(a, b; shape) = sum_to_shape(a * b, shape) for a and b
 * of one shape (no broadcast), float32. */
static int infer_mul_sum_to(const pr_op *op, const pr_view *in, int n, const void *attrs,
                            pr_view *out, size_t *ws) {
    for (int k = 0; k < 2; k++)
        if (pr_expect_dtype(op, in, k, PR_F32) < 0) return -1;
    int same = in[0].ndim == in[1].ndim;
    for (int d = 0; same && d < in[0].ndim; d++) same = in[0].shape[d] == in[1].shape[d];
    if (!same) {
        char a[128], b[128];
        return pr_fail(op, PyExc_ValueError, "inputs of one shape expected, got %s and %s",
                       pr_shape_str(&in[0], a, sizeof a), pr_shape_str(&in[1], b, sizeof b));
    }
    return pr_op_sum_to_shape.infer(op, in, 1, attrs, out, ws);
}

static int fw_mul_sum_to(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    int64_t st[PR_MAX_DIMS];
    pr_broadcast_strides(out, in[0].ndim, in[0].shape, st);
    return pr_k_sum_product_to(in[0].data, in[1].data, in[0].ndim, in[0].shape, st, out->data,
                               out->size);
}

static const pr_attr_spec shape_attrs[] = {
    {"shape", PR_ATTR_INTS, offsetof(pr_shape_attrs, shape), 1, 0}, {NULL}};

const pr_op pr_op_multiply_sum_to_shape = {
    .name = "multiply_sum_to_shape", .n_in = 2, .n_out = 1, .attrs = shape_attrs,
    .attr_size = sizeof(pr_shape_attrs), .infer = infer_mul_sum_to, .forward = fw_mul_sum_to,
    .flags = PR_OP_NO_GRADIENT_RULE,
    .doc = "sum_to_shape(a * b, shape) for a, b of one shape (float32), the product never "
           "stored (made by jit_compile; bit for bit the unfused ops' results)."};

/* ---- the batch-norm fusions -------------------------------------------------- */

/* Per value: how many nodes read it (graph outputs count twice, so they are
 * never fused away) and the last of them. */
typedef struct {
    int *count, *last;
} readers_t;

static int readers_init(pr_Graph *g, readers_t *r) {
    r->count = PyMem_Calloc((size_t)g->n_vals + 1, sizeof(int));
    r->last = PyMem_Calloc((size_t)g->n_vals + 1, sizeof(int));
    if (!r->count || !r->last) {
        PyMem_Free(r->count), PyMem_Free(r->last);
        return PyErr_NoMemory(), -1;
    }
    for (int i = 0; i < g->n_outputs; i++) r->count[g->outputs[i]] += 2;
    for (int j = 0; j < g->n_nodes; j++)
        for (int i = 0; i < g->nodes[j].n_in; i++) {
            r->count[g->nodes[j].in[i]]++;
            r->last[g->nodes[j].in[i]] = j;
        }
    return 0;
}

static void readers_free(readers_t *r) { PyMem_Free(r->count), PyMem_Free(r->last); }

/* Drop the nodes whose op was cleared; renumber the producers. */
static void compact(pr_Graph *g) {
    int k = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        if (!g->nodes[j].op) continue;
        if (k != j) g->nodes[k] = g->nodes[j];
        for (int i = 0; i < g->nodes[k].n_out; i++) g->vals[g->nodes[k].out[i]].index = k;
        k++;
    }
    g->n_nodes = k;
}

/* Node n runs registry op `op` (not a loop, not a host callback). */
static int runs(const pr_gnode *n, const pr_op *op) {
    return n->op == op && n->host < 0 && n->loop < 0;
}

/* The node producing value v, or -1 (an input or a captured Variable). */
static int producer(const pr_Graph *g, int v) {
    return g->vals[v].kind == PR_VAL_NODE ? g->vals[v].index : -1;
}

/* Whether a node strictly between lo and hi may write v (updates it in
 * place, or is a loop or host callback, which may write anything). */
static int written_between(const pr_Graph *g, int v, int lo, int hi) {
    for (int j = lo + 1; j < hi; j++) {
        const pr_gnode *n = &g->nodes[j];
        if (!n->op) continue;
        if (n->host >= 0 || n->loop >= 0) return 1;
        for (int i = 0; n->op->mutates && i < n->n_in; i++)
            if (n->op->mutates >> i & 1 && n->in[i] == v) return 1;
    }
    return 0;
}

static int same_shape(const pr_gvalue *a, const pr_gvalue *b) {
    int same = a->dtype == b->dtype && a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    return same;
}

/* Forward: a BN whose output only a ReLU reads writes the ReLU's output
 * (batch_norm_relu_train / _infer); a training BN whose output only an add
 * reads, whose output only a ReLU reads (a residual block's end), writes
 * relu(BN(x) + r) (batch_norm_add_relu_train), at the BN's place: r must
 * exist by then (when both addends are BN outputs, the later BN is the one
 * fused) and stay unwritten until the add.  Every value of the chain (BN
 * output, r, the add's and the ReLU's outputs) has x's dtype: float32, or
 * bfloat16 where each op rounds its output to bfloat16 and the fused kernel
 * does the same; a bfloat16 BN with a float32 residual (the add then reads
 * a cast of the BN output) or an op whose output dtype differs stays
 * unfused. */
static int fuse_bn_forward(pr_Graph *g, const readers_t *r, int pj) {
    pr_gnode *P = &g->nodes[pj];
    int train = runs(P, &pr_op_batch_norm_train);
    if (!train && !runs(P, &pr_op_batch_norm_infer)) return 0;
    int u = P->out[0];
    if (r->count[u] != 1) return 0;
    int cj = r->last[u];
    pr_gnode *C = &g->nodes[cj];
    pr_dtype dt = g->vals[u].dtype;
    if (runs(C, &pr_op_relu)) {
        if (C->n_in != 1 || g->vals[C->out[0]].dtype != dt) return 0;
        P->op = train ? &pr_op_batch_norm_relu_train : &pr_op_batch_norm_relu_infer;
        P->out[0] = C->out[0];
        C->op = NULL;
        return 1;
    }
    if (!train || !runs(C, &pr_op_add) || C->n_in != 2 || C->in[0] == C->in[1] ||
        r->count[C->out[0]] != 1 || !runs(&g->nodes[r->last[C->out[0]]], &pr_op_relu) ||
        g->vals[C->out[0]].dtype != dt || g->vals[g->nodes[r->last[C->out[0]]].out[0]].dtype != dt)
        return 0;
    int w = C->in[0] == u ? C->in[1] : C->in[0];
    if (producer(g, w) >= pj || !same_shape(&g->vals[w], &g->vals[u]) || /* and dtype */
        written_between(g, w, pj, cj))
        return 0;
    pr_gnode *R = &g->nodes[r->last[C->out[0]]];
    P->op = &pr_op_batch_norm_add_relu_train;
    P->in[P->n_in++] = w;
    P->out[0] = R->out[0];
    C->op = R->op = NULL;
    return 1;
}

/* Backward: batch_norm_train_backward whose gradient comes only from the
 * relu_backward of a batch_norm_relu_train's output becomes
 * batch_norm_relu_train_backward on the ReLU's output gradient (the mask
 * recomputed from x, as the forward rounded it), and the relu_backward node
 * goes.  The ReLU's output gradient, the masked gradient and x share one
 * dtype (masking is then exact: the fused kernel reads the unmasked
 * gradient where the unfused backward read the masked one). */
static int fuse_bn_relu_backward(pr_Graph *g, const readers_t *r, int kj) {
    pr_gnode *K = &g->nodes[kj];
    if (!runs(K, &pr_op_batch_norm_train_backward)) return 0;
    int gv = K->in[0], rj = producer(g, gv);
    if (rj < 0 || r->count[gv] != 1 || !runs(&g->nodes[rj], &pr_op_relu_backward)) return 0;
    pr_gnode *Rb = &g->nodes[rj];
    int bj = producer(g, Rb->in[1]);
    if (bj < 0) return 0;
    pr_gnode *B = &g->nodes[bj];
    if (B->op != &pr_op_batch_norm_relu_train || B->out[0] != Rb->in[1] || K->in[1] != B->in[0] ||
        K->in[2] != B->in[1] || K->in[3] != B->out[1] || K->in[4] != B->out[2] ||
        ((const pr_bn_attrs *)K->attrs)->epsilon != ((const pr_bn_attrs *)B->attrs)->epsilon ||
        g->vals[Rb->in[0]].dtype != g->vals[gv].dtype ||
        g->vals[gv].dtype != g->vals[B->in[0]].dtype)
        return 0;
    int x = B->in[0], gamma = B->in[1], beta = B->in[2];
    if (written_between(g, x, bj, kj) || written_between(g, gamma, bj, kj) ||
        written_between(g, beta, bj, kj))
        return 0;
    int in[6] = {Rb->in[0], x, gamma, beta, K->in[3], K->in[4]};
    K->op = &pr_op_batch_norm_relu_train_backward;
    K->n_in = 6;
    memcpy(K->in, in, sizeof in);
    Rb->op = NULL;
    return 1;
}

/* Backward: the cast to bfloat16 of a batch-norm training backward's
 * float32 dx (what a bfloat16 convolution's gradient makes of its output
 * gradient), when nothing else reads dx, goes: the backward writes dx
 * rounded to bfloat16 itself (dx_dtype), the same rounding, one pass and a
 * float32 buffer fewer.  (A backward of bfloat16 dy and x writes bfloat16
 * dx already.) */
static int fuse_bn_backward_cast(pr_Graph *g, const readers_t *r, int cj) {
    pr_gnode *C = &g->nodes[cj];
    if (!runs(C, &pr_op_cast) || ((const pr_cast_attrs *)C->attrs)->dtype != PR_BF16) return 0;
    int v = C->in[0], kj = producer(g, v);
    if (kj < 0 || r->count[v] != 1) return 0;
    pr_gnode *K = &g->nodes[kj];
    if ((!runs(K, &pr_op_batch_norm_train_backward) &&
         K->op != &pr_op_batch_norm_relu_train_backward) ||
        K->out[0] != v || ((const pr_bn_attrs *)K->attrs)->dx_dtype != PR_F32 ||
        g->vals[v].dtype != PR_F32)
        return 0;
    ((pr_bn_attrs *)K->attrs)->dx_dtype = PR_BF16;
    K->out[0] = C->out[0];
    C->op = NULL;
    return 1;
}

/* Backward: a sum_to_shape of a float32 product a * b of two values of the
 * product's shape, which nothing else reads, becomes
 * multiply_sum_to_shape(a, b) at the sum's place (a and b unwritten until
 * then): one pass over a and b, no product buffer; squeeze-and-excitation's
 * gate gradient, sum over pixels of dy * x, had written the product first. */
static int fuse_multiply_sum(pr_Graph *g, const readers_t *r, int cj) {
    pr_gnode *C = &g->nodes[cj];
    if (!runs(C, &pr_op_sum_to_shape)) return 0;
    int v = C->in[0], pj = producer(g, v);
    if (pj < 0 || r->count[v] != 1) return 0;
    pr_gnode *P = &g->nodes[pj];
    if (!runs(P, &pr_op_multiply) || P->n_in != 2 || P->out[0] != v ||
        g->vals[v].dtype != PR_F32)
        return 0;
    int a = P->in[0], b = P->in[1];
    if (!same_shape(&g->vals[a], &g->vals[v]) || !same_shape(&g->vals[b], &g->vals[v]) ||
        written_between(g, a, pj, cj) || written_between(g, b, pj, cj))
        return 0;
    C->op = &pr_op_multiply_sum_to_shape;
    C->n_in = 2;
    C->in[0] = a;
    C->in[1] = b;
    P->op = NULL;
    return 1;
}

/* ---- the passes ---------------------------------------------------------------- */

/* Elementwise chains: node P, whose output only node C reads, folds into C
 * (try_merge), in program order, so a chain a -> b -> c folds into c step
 * by step. */
static int fuse_elementwise(pr_Graph *g, const readers_t *r, int pj) {
    pr_gnode *P = &g->nodes[pj];
    if (!P->op || P->host >= 0 || P->n_out != 1 || r->count[P->out[0]] != 1) return 0;
    int cj = r->last[P->out[0]];
    /* P would run at C's place: nothing in between may write state. */
    int clean = 1;
    for (int k = pj + 1; k < cj && clean; k++)
        clean = g->nodes[k].op && !g->nodes[k].op->mutates && g->nodes[k].host < 0 &&
                !(g->nodes[k].op->flags & PR_OP_STATEFUL);
    return clean && try_merge(g, pj, cj);
}

/* A fusion rule: rewrite the graph at node j (clearing the op of each node
 * it removes) and return 1, or return 0 and change nothing.  The readers
 * are those counted before the pass. */
typedef int (*fusion_rule)(pr_Graph *g, const readers_t *r, int j);

/* One pass: the rule at every node in program order, then the cleared
 * nodes dropped. */
static int fuse_pass(pr_Graph *g, fusion_rule rule) {
    readers_t r;
    if (readers_init(g, &r) < 0) return -1;
    for (int j = 0; j < g->n_nodes; j++)
        if (rule(g, &r, j)) g->n_fused++;
    readers_free(&r);
    compact(g);
    return 0;
}

int pr_fuse(pr_Graph *g) {
    static const fusion_rule passes[] = {fuse_bn_forward, fuse_bn_relu_backward,
                                         fuse_bn_backward_cast, fuse_multiply_sum,
                                         fuse_elementwise};
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++)
        if (fuse_pass(g, passes[i]) < 0) return -1;
    return 0;
}
