/* Memory plan and executor for traced graphs.
 *
 * A plan is made once per binding of the graph's symbolic dimensions (one
 * plan for a static graph): shapes from the registry's shape rules, then a
 * liveness-based placement of every intermediate value and every node's
 * scratch in one arena (the greedy best-fit reuse of ggml-alloc.c: a buffer
 * is freed after its last reader and its bytes reused by later values).
 * A node may write its first output over an input that dies there (in
 * place: elementwise ops, batch norm's backward; pr_op.inplace_inputs),
 * which spares a fresh buffer's cache misses.  Under jit_compile ops with
 * several kernels are timed once on the plan's first run; the fastest is
 * kept.
 *
 * A run converts the inputs and makes the output Tensors (GIL held; work
 * proportional to the number of inputs and outputs), takes an arena from the
 * plan's pool (a fresh one when another thread holds the pooled ones, so
 * concurrent calls never share buffers), then runs every node in one C loop
 * with the GIL released.  Host callbacks (pyresnet.print) take the GIL for
 * their node only.  A kernel error stops the loop and raises the exception
 * an eager call would raise; nodes before it have run (their in-place
 * variable updates stay), nodes after it have not.
 */
#include "graph.h" /* Python.h first */

#include <math.h>
#include <string.h>
#include <time.h>

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

/* ---- symbolic attributes -------------------------------------------------- */

/* Copy a node's attributes with every symbolic dimension in its INT and INTS
 * fields evaluated for `binding`.  0, or -1 with ValueError. */
static int subst_attrs(const pr_Graph *g, const pr_gnode *n, const int64_t *binding, void *dst) {
    memcpy(dst, n->attrs, PR_ATTR_BYTES);
    if (!n->dyn_attrs) return 0;
    for (const pr_attr_spec *s = n->op->attrs; s && s->name; s++) {
        char *field = (char *)dst + s->offset;
        if (s->kind == PR_ATTR_INT) {
            if (pr_dim_eval(g->syms, *(int64_t *)field, binding, (int64_t *)field) < 0) return -1;
        } else if (s->kind == PR_ATTR_INTS) {
            pr_ints *v = (pr_ints *)field;
            for (int i = 0; i < v->n && i < PR_MAX_DIMS; i++)
                if (pr_dim_eval(g->syms, v->v[i], binding, &v->v[i]) < 0) return -1;
        }
    }
    return 0;
}

/* ---- the arena allocator (greedy best fit over a free list) --------------- */

typedef struct {
    int64_t off, size;
} block;

typedef struct {
    block *free;
    int n, cap;
    int64_t top; /* high-water mark */
} arena_alloc;

#define ALIGN(x) (((x) + 63) & ~(int64_t)63)

static int64_t arena_take(arena_alloc *a, int64_t size) {
    size = ALIGN(size ? size : 1);
    int best = -1;
    for (int i = 0; i < a->n; i++)
        if (a->free[i].size >= size && (best < 0 || a->free[i].size < a->free[best].size)) best = i;
    if (best >= 0) {
        int64_t off = a->free[best].off;
        a->free[best].off += size;
        a->free[best].size -= size;
        if (a->free[best].size == 0) {
            memmove(&a->free[best], &a->free[best + 1], sizeof(block) * (size_t)(a->n - best - 1));
            a->n--;
        }
        return off;
    }
    /* Grow: extend a free block that ends at the top, else take from the top. */
    if (a->n && a->free[a->n - 1].off + a->free[a->n - 1].size == a->top) {
        int64_t off = a->free[a->n - 1].off;
        a->top = off + size;
        a->n--;
        return off;
    }
    int64_t off = a->top;
    a->top += size;
    return off;
}

static int arena_give(arena_alloc *a, int64_t off, int64_t size) {
    size = ALIGN(size ? size : 1);
    int i = 0;
    while (i < a->n && a->free[i].off < off) i++;
    /* merge with the previous and/or next block */
    int merged = 0;
    if (i > 0 && a->free[i - 1].off + a->free[i - 1].size == off) {
        a->free[i - 1].size += size;
        merged = 1;
        if (i < a->n && a->free[i - 1].off + a->free[i - 1].size == a->free[i].off) {
            a->free[i - 1].size += a->free[i].size;
            memmove(&a->free[i], &a->free[i + 1], sizeof(block) * (size_t)(a->n - i - 1));
            a->n--;
        }
    } else if (i < a->n && off + size == a->free[i].off) {
        a->free[i].off = off;
        a->free[i].size += size;
        merged = 1;
    }
    if (merged) return 0;
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 32;
        block *p = PyMem_Realloc(a->free, sizeof(block) * (size_t)cap);
        if (!p) return PyErr_NoMemory(), -1;
        a->free = p;
        a->cap = cap;
    }
    memmove(&a->free[i + 1], &a->free[i], sizeof(block) * (size_t)(a->n - i));
    a->free[i].off = off;
    a->free[i].size = size;
    a->n++;
    return 0;
}

/* ---- planning --------------------------------------------------------------- */

static void plan_free(pr_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->n_pool; i++) pr_free(p->pool[i]);
    PyMem_Free(p->pool);
    PyMem_Free(p->binding);
    PyMem_Free(p->views);
    PyMem_Free(p->offset);
    PyMem_Free(p->scratch_off);
    PyMem_Free(p->scratch);
    PyMem_Free(p->attrs);
    PyMem_Free(p->variant);
    PyMem_Free(p->dflt);
    PyMem_Free(p->usable);
    for (int j = 0; p->tune_key && j < p->n_nodes; j++) Py_XDECREF(p->tune_key[j]);
    PyMem_Free(p->tune_key);
    PyMem_Free(p);
}

static void plans_free(pr_Graph *g) {
    for (int i = 0; i < g->n_plans; i++) plan_free(g->plans[i]);
    PyMem_Free(g->plans);
    g->plans = NULL;
    g->n_plans = 0;
}

static size_t view_bytes(const pr_view *v) { return (size_t)v->size * pr_dtype_size(v->dtype); }

static int is_output(const pr_Graph *g, int v) {
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v) return 1;
    return 0;
}

static int same_layout(const pr_view *a, const pr_view *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

/* ---- kernel choice (jit_compile) ----------------------------------------------
 * A node's candidates are its op's kernel variants, each on all threads or
 * on one (parallel loops and GEMM splits cost more than they give on small
 * shapes).  They are timed on the first call of a plan, each distinct (op,
 * input shapes, attributes, thread count) once per process: the choices are
 * kept in `tuned`, so graphs and plans with the same shapes share them.
 * Choice c = kernel * 2 + (one thread), where kernel k is variant k of an
 * op with variants (only the usable ones are timed), else its `forward`.
 * Kernels do not depend on the thread count; variants of one op agree to
 * float32 rounding (they may sum in another order). */

static PyObject *tuned; /* dict: tune key -> choice */

/* The input pipeline's batches, for loops over a dataset (graph.h). */
static pr_batch_source batch_source;

void pr_executor_set_batch_source(pr_batch_source source) { batch_source = source; }

static int choices(const pr_op *op) {
    return (op->n_variants > 1 ? op->n_variants : 1) * 2;
}

static int kernel_of(const pr_op *op, int c) { return op->n_variants ? c / 2 : -1; }

static PyObject *tune_key(const pr_op *op, const pr_view *in, int n_in, const void *attrs) {
    struct {
        int threads;
        const pr_op *op;
        int64_t shapes[PR_MAX_INPUTS][PR_MAX_DIMS + 2];
        PR_ATTR_ALIGN char attrs[PR_ATTR_BYTES];
    } k;
    memset(&k, 0, sizeof k);
    k.threads = pr_get_num_threads();
    k.op = op;
    for (int i = 0; i < n_in; i++) {
        k.shapes[i][0] = in[i].dtype;
        k.shapes[i][1] = in[i].ndim;
        for (int d = 0; d < in[i].ndim; d++) k.shapes[i][2 + d] = in[i].shape[d];
    }
    memcpy(k.attrs, attrs, PR_ATTR_BYTES);
    return PyBytes_FromStringAndSize((const char *)&k, sizeof k);
}

/* Before a run (GIL held): take known choices; whether some remain to time. */
static int tune_lookup(pr_plan *p) {
    int missing = 0;
    for (int j = 0; j < p->n_nodes; j++) {
        if (p->variant[j] >= 0) continue;
        PyObject *v = PyDict_GetItem(tuned, p->tune_key[j]);
        if (v) p->variant[j] = (int)PyLong_AsLong(v);
        else missing = 1;
    }
    return missing;
}

/* After a run (GIL held): remember the choices it made. */
static int tune_store(pr_plan *p, const char *timed) {
    for (int j = 0; j < p->n_nodes; j++) {
        if (!timed[j] || p->variant[j] < 0) continue;
        PyObject *v = PyLong_FromLong(p->variant[j]);
        if (!v || PyDict_SetItem(tuned, p->tune_key[j], v) < 0) {
            Py_XDECREF(v);
            return -1;
        }
        Py_DECREF(v);
    }
    return 0;
}

/* Shapes for `binding`, then the arena placement.  `in` are the call's input views. */
static pr_plan *plan_make(pr_Graph *g, const int64_t *binding, const pr_view *in) {
    int nv = g->n_vals, nn = g->n_nodes;
    pr_plan *p = PyMem_Calloc(1, sizeof(pr_plan));
    int *last = NULL, *owner = NULL;
    arena_alloc a = {0};
    if (!p) return (pr_plan *)PyErr_NoMemory();
    int ns = pr_symtab_n_symbols(g->syms);
    p->binding = PyMem_Calloc((size_t)ns + 1, sizeof(int64_t));
    if (p->binding) memcpy(p->binding, binding, sizeof(int64_t) * (size_t)ns);
    p->views = PyMem_Calloc((size_t)nv + 1, sizeof(pr_view));
    p->offset = PyMem_Calloc((size_t)nv + 1, sizeof(int64_t));
    p->scratch_off = PyMem_Calloc((size_t)nn + 1, sizeof(int64_t));
    p->scratch = PyMem_Calloc((size_t)nn + 1, sizeof(size_t));
    p->attrs = PyMem_Calloc((size_t)nn + 1, PR_ATTR_BYTES);
    p->variant = PyMem_Calloc((size_t)nn + 1, sizeof(int));
    p->dflt = PyMem_Calloc((size_t)nn + 1, sizeof(int));
    p->usable = PyMem_Calloc((size_t)nn + 1, sizeof(unsigned));
    p->tune_key = PyMem_Calloc((size_t)nn + 1, sizeof(PyObject *));
    p->n_nodes = nn;
    last = PyMem_Calloc((size_t)nv + 1, sizeof(int));
    owner = PyMem_Calloc((size_t)nv + 1, sizeof(int));
    if (!p->binding || !p->views || !p->offset || !p->scratch_off || !p->scratch || !p->attrs ||
        !p->variant || !p->dflt || !p->usable || !p->tune_key ||
        !last || !owner) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int v = 0; v < nv; v++) {
        pr_gvalue *x = &g->vals[v];
        p->offset[v] = -1;
        last[v] = -1;
        if (x->kind == PR_VAL_INPUT) p->views[v] = in[x->index];
        else if (x->kind == PR_VAL_CAPTURE)
            p->views[v] = ((pr_Tensor *)PyList_GET_ITEM(g->captures, x->index))->v;
        p->views[v].data = NULL;
    }
    /* Shapes: the registry's shape rules over the nodes in order. */
    for (int j = 0; j < nn; j++) {
        pr_gnode *n = &g->nodes[j];
        char *attrs = p->attrs + (size_t)j * PR_ATTR_BYTES;
        if (subst_attrs(g, n, binding, attrs) < 0) goto fail;
        for (int i = 0; i < n->n_in; i++) last[n->in[i]] = j;
        if (n->host >= 0) continue;
        if (n->loop >= 0) { /* the loop variables keep their shapes */
            for (int k = 0; k < n->n_out; k++) p->views[n->out[k]] = p->views[n->in[k]];
            continue;
        }
        pr_view iv[PR_MAX_INPUTS], ov[PR_MAX_OUTPUTS];
        for (int i = 0; i < n->n_in; i++) iv[i] = p->views[n->in[i]];
        size_t infer_scratch;
        if (pr_infer(n->op, iv, n->n_in, attrs, ov, &infer_scratch) < 0) goto fail;
        /* The kernel eager calls would run, and which others may run here. */
        int v = pr_variant_default(n->op, iv, n->n_in, ov, attrs);
        p->variant[j] = p->dflt[j] = 2 * (v < 0 ? 0 : v);
        p->scratch[j] = pr_variant_scratch(n->op, v, iv, n->n_in, ov, attrs, infer_scratch);
        for (int k = 0; k < choices(n->op) / 2; k++)
            if (pr_variant_usable(n->op, kernel_of(n->op, 2 * k), iv, n->n_in, ov, attrs))
                p->usable[j] |= 1u << k;
        if (g->jit && (n->op->n_variants > 1 || pr_get_num_threads() > 1) && !n->op->mutates &&
            !(n->op->flags & PR_OP_COLLECTIVE)) {
            for (int k = 0; k < n->op->n_variants; k++) { /* room for every candidate */
                size_t b = pr_variant_scratch(n->op, k, iv, n->n_in, ov, attrs, infer_scratch);
                if (p->usable[j] >> k & 1 && b > p->scratch[j]) p->scratch[j] = b;
            }
            if (!(p->tune_key[j] = tune_key(n->op, iv, n->n_in, attrs))) goto fail;
            p->variant[j] = -1;
        }
        for (int i = 0; i < n->n_out; i++) p->views[n->out[i]] = ov[i];
        p->flops += n->op->flops ? n->op->flops(iv, n->n_in, ov, attrs)
                                 : (n->n_out ? (double)ov[0].size : 0.0);
    }
    for (int i = 0; i < g->n_outputs; i++)
        if (g->vals[g->outputs[i]].kind == PR_VAL_NODE) {
            int dup = 0;
            for (int k = 0; k < i; k++) dup |= g->outputs[k] == g->outputs[i];
            if (!dup) p->output_bytes += view_bytes(&p->views[g->outputs[i]]);
        }
    /* Placement in node order: outputs first (an input still alive), then
     * scratch, then release what dies here. */
    for (int v = 0; v < nv; v++) owner[v] = v;
    for (int j = 0; j < nn; j++) {
        pr_gnode *n = &g->nodes[j];
        for (int i = 0; i < n->n_out; i++) {
            int v = n->out[i];
            if (is_output(g, v)) continue;
            size_t bytes = view_bytes(&p->views[v]);
            p->naive_bytes += ALIGN((int64_t)bytes);
            unsigned over = n->op->flags & PR_OP_ELEMENTWISE ? ~0u : n->op->inplace_inputs;
            if (over && i == 0) {
                int taken = 0;
                for (int k = 0; k < n->n_in && !taken; k++) {
                    int u = n->in[k];
                    if (k >= 32 || !(over >> k & 1) || p->offset[u] < 0 || last[u] != j ||
                        owner[u] != u || !same_layout(&p->views[u], &p->views[v]))
                        continue;
                    int used_twice = 0; /* x op x: the buffer still has one reader */
                    for (int m = 0; m < n->n_in; m++) used_twice |= m != k && n->in[m] == u;
                    if (used_twice) continue;
                    p->offset[v] = p->offset[u];
                    owner[u] = v; /* u's bytes now belong to v */
                    taken = 1;
                    p->n_inplace++;
                    p->variant[j] = p->dflt[j]; /* a second timing run would read its own output */
                    Py_CLEAR(p->tune_key[j]);
                }
                if (taken) continue;
            }
            p->offset[v] = arena_take(&a, (int64_t)bytes);
        }
        if (p->scratch[j]) {
            p->naive_bytes += ALIGN((int64_t)p->scratch[j]);
            p->scratch_off[j] = arena_take(&a, (int64_t)p->scratch[j]);
            if (arena_give(&a, p->scratch_off[j], (int64_t)p->scratch[j]) < 0) goto fail;
        }
        for (int i = 0; i < n->n_in; i++) {
            int u = n->in[i], dup = 0;
            for (int m = 0; m < i; m++) dup |= n->in[m] == u;
            if (dup || p->offset[u] < 0 || last[u] != j || owner[u] != u) continue;
            if (arena_give(&a, p->offset[u], (int64_t)view_bytes(&p->views[u])) < 0) goto fail;
        }
        for (int i = 0; i < n->n_out; i++) {
            int v = n->out[i];
            if (p->offset[v] >= 0 && last[v] < 0 &&
                arena_give(&a, p->offset[v], (int64_t)view_bytes(&p->views[v])) < 0)
                goto fail;
        }
    }
    p->arena_bytes = (size_t)a.top;
    PyMem_Free(a.free);
    PyMem_Free(last);
    PyMem_Free(owner);
    return p;
fail:
    PyMem_Free(a.free);
    PyMem_Free(last);
    PyMem_Free(owner);
    plan_free(p);
    return NULL;
}

/* ---- running ---------------------------------------------------------------- */

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Convert and check the call's inputs and bind the symbols to their sizes.
 * Fills t[] with new references (the caller releases them), in[] with their
 * views and binding[] with one size per symbol. */
static int check_inputs(pr_Graph *g, PyObject *seq, pr_Tensor **t, pr_view *in,
                        int64_t *binding) {
    int ns = pr_symtab_n_symbols(g->syms);
    int *from = PyMem_Malloc(sizeof(int) * 2 * ((size_t)ns + 1)); /* (input, dim) that bound it */
    if (!from) return PyErr_NoMemory(), -1;
    for (int k = 0; k < ns; k++) from[2 * k] = -1;
    int rc = -1;
    for (int k = 0; k < g->n_inputs; k++) {
        t[k] = pr_tensor_from_object(PySequence_Fast_GET_ITEM(seq, k));
        if (!t[k]) goto done;
        if (pr_is_symbolic(t[k])) {
            PyErr_Format(PyExc_TypeError, "compiled function: input %d is a symbolic tensor", k);
            goto done;
        }
        in[k] = t[k]->v;
    }
    for (int v = 0; v < g->n_vals; v++) {
        pr_gvalue *x = &g->vals[v];
        if (x->kind != PR_VAL_INPUT) continue;
        const pr_view *got = &in[x->index];
        int ok = got->dtype == x->dtype && got->ndim == x->ndim;
        for (int d = 0; ok && d < x->ndim; d++) {
            int k = pr_dim_symbol_index(g->syms, x->shape[d]);
            if (k < 0) {
                ok = got->shape[d] == x->shape[d];
                continue;
            }
            if (from[2 * k] < 0) {
                binding[k] = got->shape[d];
                from[2 * k] = x->index, from[2 * k + 1] = d;
            } else if (binding[k] != got->shape[d]) {
                PyErr_Format(PyExc_ValueError,
                             "compiled function: input %d has size %lld in dimension %d but input "
                             "%d has size %lld in dimension %d; both are the unknown size '%s' "
                             "of the trace and must agree",
                             x->index, (long long)got->shape[d], d, from[2 * k],
                             (long long)binding[k], from[2 * k + 1],
                             pr_symtab_symbol_name(g->syms, k));
                goto done;
            }
        }
        if (!ok) {
            char want[192], have[160];
            pr_view traced = {.ndim = x->ndim}; /* symbols by name: "(batch, 32, 32, 3)" */
            memcpy(traced.shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
            PyErr_Format(PyExc_ValueError,
                         "compiled function: input %d must be %s of shape %s (names: unknown "
                         "sizes), got %s of shape %s",
                         x->index, pr_dtype_name(x->dtype),
                         pr_shape_str_in(g->syms, &traced, want, sizeof want),
                         pr_dtype_name(got->dtype),
                         pr_shape_str(got, have, sizeof have));
            goto done;
        }
    }
    rc = 0;
done:
    PyMem_Free(from);
    return rc;
}

/* Plans kept per graph: a function called with ever new sizes (images of
 * every height) keeps the PR_MAX_PLANS most recently used. */
#define PR_MAX_PLANS 32

static void drop_idle_arenas(pr_plan *p) {
    for (int k = 0; k < p->n_pool; k++) pr_free(p->pool[k]);
    p->n_pool = 0;
}

static pr_plan *plan_for(pr_Graph *g, const int64_t *binding, const pr_view *in) {
    size_t bytes = sizeof(int64_t) * (size_t)pr_symtab_n_symbols(g->syms);
    pr_plan *p = NULL;
    for (int i = 0; i < g->n_plans && !p; i++)
        if (memcmp(g->plans[i]->binding, binding, bytes) == 0) p = g->plans[i];
    if (!p) {
        if (!(p = plan_make(g, binding, in))) return NULL;
        int victim = -1;
        for (int i = 0; g->n_plans >= PR_MAX_PLANS && i < g->n_plans; i++)
            if (!g->plans[i]->in_use && (victim < 0 || g->plans[i]->last_used <
                                                           g->plans[victim]->last_used))
                victim = i;
        if (victim >= 0) {
            plan_free(g->plans[victim]);
            g->plans[victim] = g->plans[--g->n_plans];
        }
        pr_plan **ps = PyMem_Realloc(g->plans, sizeof(pr_plan *) * (size_t)(g->n_plans + 1));
        if (!ps) {
            plan_free(p);
            return (pr_plan *)PyErr_NoMemory();
        }
        g->plans = ps;
        g->plans[g->n_plans++] = p;
    }
    /* Another binding than the last call's: give back the idle arenas of the
     * others, so memory stays near one arena per binding in use. */
    if (p->last_used != g->plan_clock)
        for (int i = 0; i < g->n_plans; i++)
            if (g->plans[i] != p) drop_idle_arenas(g->plans[i]);
    p->last_used = ++g->plan_clock;
    return p;
}

typedef struct {
    const pr_op *op; /* the op of the node that failed; NULL: none */
    int rc;          /* its kernel code, or -1: a Python exception is set */
    char msg[512];   /* a loop's input pipeline failed: the message (rc its code) */
} run_status;

/* One run of a graph's nodes over a plan: the buffers of every value (ptr),
 * the arena, and the thread state released for the run (host callbacks and
 * loops take the GIL through it). */
typedef struct {
    pr_Graph *g;
    pr_plan *p;
    void **ptr;
    void *arena;
    const int64_t *binding;
    int tune;        /* time the kernels still unchosen (jit) */
    char *timed;     /* per node: this run chose its kernel */
    double *times;   /* per node (start, end) in microseconds, or NULL */
    PyThreadState **ts;
} run_ctx;

static int run_nodes(run_ctx *c, run_status *st);

/* Call a host callback (GIL held) with copies of its inputs. */
static int run_host(pr_Graph *g, pr_plan *p, pr_gnode *n, void **ptr) {
    PyObject *args = PyTuple_New(n->n_in);
    if (!args) return -1;
    for (int i = 0; i < n->n_in; i++) {
        const pr_view *v = &p->views[n->in[i]];
        pr_Tensor *t = pr_tensor_new(v->dtype, v->ndim, v->shape);
        if (!t) {
            Py_DECREF(args);
            return -1;
        }
        memcpy(t->v.data, ptr[n->in[i]], view_bytes(v));
        PyTuple_SET_ITEM(args, i, (PyObject *)t);
    }
    PyObject *r = PyObject_Call(PyList_GET_ITEM(g->callbacks, n->host), args, NULL);
    Py_DECREF(args);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Run node j's kernel with choice c (see choices()). */
static int run_kernel(pr_gnode *n, pr_plan *p, int j, pr_view *iv, pr_view *ov, void *scratch,
                      int c) {
    const void *attrs = p->attrs + (size_t)j * PR_ATTR_BYTES;
    int rc, empty = n->op->n_out > 0 && !n->op->mutates;
    /* Every output empty and no input written: nothing to compute, as in
     * pr_call (row loops could walk a huge empty shape for a long time). */
    for (int i = 0; empty && i < n->op->n_out; i++) empty = ov[i].size == 0;
    if (empty) return PR_OK;
    int limit = pr_get_thread_limit();
    if (c % 2) pr_set_thread_limit(1);
    rc = pr_variant_run(n->op, kernel_of(n->op, c), iv, n->n_in, ov, attrs, scratch);
    pr_set_thread_limit(limit);
    return rc;
}

/* An arena for a run of plan p (GIL held): a pooled one, else a new one. */
static void *arena_get(pr_plan *p) {
    if (p->n_pool) return p->pool[--p->n_pool];
    void *a = pr_alloc_huge(p->arena_bytes);
    if (!a) PyErr_NoMemory();
    return a;
}

/* Keep one arena per concurrent caller for reuse (GIL held). */
static void arena_put(pr_plan *p, void *arena) {
    if (!arena) return;
    if (p->n_pool == p->cap_pool) {
        int cap = p->cap_pool ? 2 * p->cap_pool : 2;
        void **pool = PyMem_Realloc(p->pool, sizeof(void *) * (size_t)cap);
        if (pool) p->pool = pool, p->cap_pool = cap;
    }
    if (p->n_pool < p->cap_pool) p->pool[p->n_pool++] = arena;
    else pr_free(arena);
}

static int input_value_of(const pr_Graph *g, int index) {
    for (int v = 0; v < g->n_vals; v++)
        if (g->vals[v].kind == PR_VAL_INPUT && g->vals[v].index == index) return v;
    return -1;
}

/* ---- loops ------------------------------------------------------------------
 * A loop node runs its body graph once per iteration.  At the loop's start
 * (GIL held, once per call of the enclosing graph) it asks the feeder for
 * this pass's batches, finds the body's plans (made once per binding: the
 * full batch and a smaller last one), takes their arenas and allocates the
 * loop variables twice (this iteration's and the next's).  Then, without the
 * GIL, each iteration makes its batch (the input pipeline's kernels, in
 * place in the body's input buffers), runs the body's nodes with the
 * carried values as inputs and writes the new ones into the other buffers,
 * which become the inputs of the next iteration. */

typedef struct {
    pr_plan *plan;
    void *arena;
    void **ptr;
    int tune;
    char *timed;
    int64_t *binding;
} body_run;

static int64_t scalar_value(const pr_view *v, const void *data) {
    switch (v->dtype) {
    case PR_F32: return (int64_t)*(const float *)data;
    case PR_I32: return *(const int32_t *)data;
    case PR_I64: return *(const int64_t *)data;
    default: return *(const uint8_t *)data;
    }
}

static int scalar_true(const pr_view *v, const void *data) {
    if (v->dtype == PR_F32) return *(const float *)data != 0.0f;
    return scalar_value(v, data) != 0;
}

/* GIL held: a plan for the body and everything its runs need. */
static int body_prepare(pr_Graph *b, const int64_t *binding, const pr_view *in, body_run *r) {
    memset(r, 0, sizeof *r);
    int ns = pr_symtab_n_symbols(b->syms);
    if (!(r->binding = PyMem_Calloc((size_t)ns + 1, sizeof(int64_t)))) return PyErr_NoMemory(), -1;
    memcpy(r->binding, binding, sizeof(int64_t) * (size_t)ns);
    if (!(r->plan = plan_for(b, r->binding, in))) return -1;
    r->plan->in_use++;
    if (!(r->arena = arena_get(r->plan))) return -1;
    if (!(r->ptr = PyMem_Calloc((size_t)b->n_vals + 1, sizeof(void *)))) return PyErr_NoMemory(), -1;
    for (int v = 0; v < b->n_vals; v++) {
        pr_gvalue *x = &b->vals[v];
        if (x->kind == PR_VAL_CAPTURE)
            r->ptr[v] = ((pr_Tensor *)PyList_GET_ITEM(b->captures, x->index))->v.data;
        else if (x->kind == PR_VAL_NODE && r->plan->offset[v] >= 0)
            r->ptr[v] = (char *)r->arena + r->plan->offset[v];
    }
    r->tune = b->jit && !r->plan->tuning && tune_lookup(r->plan);
    if (r->tune) {
        if (!(r->timed = PyMem_Calloc((size_t)b->n_nodes + 1, 1))) return PyErr_NoMemory(), -1;
        r->plan->tuning = 1;
    }
    return 0;
}

/* GIL held: give back what body_prepare took. */
static void body_release(body_run *r) {
    if (r->plan) {
        if (r->tune) {
            r->plan->tuning = 0;
            if (tune_store(r->plan, r->timed) < 0) PyErr_Clear();
        }
        r->plan->in_use--;
        arena_put(r->plan, r->arena);
    } else {
        pr_free(r->arena);
    }
    PyMem_Free(r->timed);
    PyMem_Free(r->ptr);
    PyMem_Free(r->binding);
    memset(r, 0, sizeof *r);
}

static int feeder_error(const char *what) {
    PyErr_Format(PyExc_TypeError, "loop over a dataset: %s", what);
    return -1;
}

static int run_loop(run_ctx *c, int j, run_status *st) {
    pr_Graph *g = c->g, *b;
    pr_gnode *n = &g->nodes[j];
    pr_loop *L = &g->loops[n->loop];
    pr_plan *p = c->p;
    int nc = L->n_carry, ok = 0, n_comp = 0;
    int64_t lower = L->lower, upper = L->upper, trip = -1, first = 0, n_batches = 0;
    size_t *bytes = NULL;
    void **cur = NULL, **nxt = NULL, *feed[PR_MAX_INPUTS] = {0};
    char *direct = NULL, *same = NULL;
    PyObject *fed = NULL, *source = NULL;
    const pr_view *full = NULL, *last = NULL;
    body_run runs[2];
    memset(runs, 0, sizeof runs);
    int32_t iter_value = 0;
    double flag_buf[8];
    if (L->cond0_in >= 0) {
        int v = n->in[L->cond0_in];
        if (!scalar_true(&p->views[v], c->ptr[v])) trip = 0;
    }
    if (L->lower_in >= 0) lower = scalar_value(&p->views[n->in[L->lower_in]], c->ptr[n->in[L->lower_in]]);
    if (L->upper_in >= 0) upper = scalar_value(&p->views[n->in[L->upper_in]], c->ptr[n->in[L->upper_in]]);
    if (trip != 0 && (L->upper_in >= 0 || upper >= 0)) trip = upper > lower ? upper - lower : 0;
    if (trip != 0 && L->max_iter >= 0 && (trip < 0 || L->max_iter < trip)) trip = L->max_iter;
    if (trip == 0) { /* no iteration: the loop variables keep their initial values */
        for (int k = 0; k < nc; k++)
            memcpy(c->ptr[n->out[k]], c->ptr[n->in[k]], view_bytes(&p->views[n->out[k]]));
        return 0;
    }

    PyEval_RestoreThread(*c->ts); /* ---- GIL held: set up ---- */
    b = L->body;
    Py_INCREF(b);
    int nb = b->n_inputs;
    pr_view *in = PyMem_Calloc((size_t)nb + 1, sizeof(pr_view));
    bytes = PyMem_Calloc((size_t)nc + 1, sizeof(size_t));
    cur = PyMem_Calloc((size_t)nc + 1, sizeof(void *));
    nxt = PyMem_Calloc((size_t)nc + 1, sizeof(void *));
    direct = PyMem_Calloc((size_t)nc + 1, 1);
    same = PyMem_Calloc((size_t)nc + 1, 1);
    if (!in || !bytes || !cur || !nxt || !direct || !same) {
        PyErr_NoMemory();
        goto setup_failed;
    }
    if (L->feeder && trip != 0) {
        fed = PyObject_CallNoArgs(L->feeder);
        if (!fed) goto setup_failed;
        long long f0, cnt;
        if (!PyArg_ParseTuple(fed, "OLL;the feeder returns (iterator, first, count)", &source, &f0,
                              &cnt))
            goto setup_failed;
        if (!batch_source.info || !batch_source.info(source, &n_comp, &n_batches, &full, &last)) {
            feeder_error("the feeder must return a BatchIterator");
            goto setup_failed;
        }
        if (n_comp != L->n_feed || f0 < 0 || cnt < 0 || f0 + cnt > n_batches) {
            PyErr_Format(PyExc_ValueError,
                         "loop over a dataset: the pass has %d components and %lld batches, the "
                         "loop was traced for %d components (batches %lld to %lld asked)",
                         n_comp, (long long)n_batches, L->n_feed, f0, f0 + cnt);
            goto setup_failed;
        }
        first = f0;
        if (trip < 0 || cnt < trip) trip = cnt;
    }
    if (trip < 0 && L->cond_out < 0) {
        PyErr_SetString(PyExc_ValueError, "loop: no bound and no condition");
        goto setup_failed;
    }
    for (int k = 0; k < nc; k++) in[L->carry_in[k]] = p->views[n->in[k]];
    for (int k = 0; k < L->n_const; k++) in[L->const_in[k]] = p->views[n->in[nc + k]];
    if (L->iter_in >= 0) {
        int64_t scalar_shape[1] = {0};
        pr_set_out(&in[L->iter_in], PR_I32, 0, scalar_shape);
    }
    /* Plans: the full batch, and a smaller last one when this pass reaches it. */
    int n_runs = 1;
    int64_t *binding = PyMem_Calloc((size_t)pr_symtab_n_symbols(b->syms) + 1, sizeof(int64_t));
    if (!binding) {
        PyErr_NoMemory();
        goto setup_failed;
    }
    memcpy(binding, c->binding, sizeof(int64_t) * (size_t)pr_symtab_n_symbols(g->syms));
    int sym = pr_dim_symbol_index(b->syms, L->feed_batch);
    for (int r = 0; r < 2; r++) {
        const pr_view *views = r == 0 ? full : last;
        if (r == 1 && !(L->n_feed && trip > 0 && first + trip == n_batches &&
                        last[0].shape[0] != full[0].shape[0]))
            break;
        for (int k = 0; k < L->n_feed; k++) {
            const pr_gvalue *x = &b->vals[input_value_of(b, L->feed_in[k])];
            const pr_view *v = &views[k];
            int match = x->dtype == v->dtype && x->ndim == v->ndim && v->ndim >= 1 &&
                        (sym >= 0 || x->shape[0] == v->shape[0]);
            for (int d = 1; match && d < v->ndim; d++) match = x->shape[d] == v->shape[d];
            if (!match) {
                char want[192], have[160];
                pr_view traced = {.ndim = x->ndim};
                memcpy(traced.shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
                PyErr_Format(PyExc_ValueError,
                             "loop over a dataset: component %d of its batches is %s of shape "
                             "%s, but the loop was traced for %s of shape %s (a dataset's "
                             "batches keep their shapes)", k, pr_dtype_name(v->dtype),
                             pr_shape_str(v, have, sizeof have), pr_dtype_name(x->dtype),
                             pr_shape_str_in(b->syms, &traced, want, sizeof want));
                PyMem_Free(binding);
                goto setup_failed;
            }
            in[L->feed_in[k]] = *v;
            in[L->feed_in[k]].data = NULL;
            if (sym >= 0) binding[sym] = v->shape[0];
        }
        if (body_prepare(b, binding, in, &runs[r]) < 0) {
            PyMem_Free(binding);
            goto setup_failed;
        }
        n_runs = r + 1;
    }
    PyMem_Free(binding);
    for (int k = 0; k < L->n_feed; k++) {
        if (!(feed[k] = pr_alloc(view_bytes(&full[k])))) {
            PyErr_NoMemory();
            goto setup_failed;
        }
    }
    for (int k = 0; k < nc; k++) {
        int v = b->outputs[L->carry_out[k]];
        bytes[k] = view_bytes(&p->views[n->out[k]]);
        direct[k] = b->vals[v].kind == PR_VAL_NODE;
        /* The body returns the variable unchanged: it stays in its buffer. */
        same[k] = b->vals[v].kind == PR_VAL_INPUT && b->vals[v].index == L->carry_in[k];
        for (int m = 0; m < k && direct[k]; m++) direct[k] = b->outputs[L->carry_out[m]] != v;
        if (!(cur[k] = pr_alloc(bytes[k])) || !(nxt[k] = pr_alloc(bytes[k]))) {
            PyErr_NoMemory();
            goto setup_failed;
        }
    }
    for (int r = 0; r < n_runs; r++) {
        void **ptr = runs[r].ptr;
        for (int k = 0; k < L->n_const; k++) {
            int v = input_value_of(b, L->const_in[k]);
            ptr[v] = c->ptr[n->in[nc + k]];
        }
        for (int k = 0; k < L->n_feed; k++) ptr[input_value_of(b, L->feed_in[k])] = feed[k];
        if (L->iter_in >= 0) ptr[input_value_of(b, L->iter_in)] = &iter_value;
        if (L->cond_out >= 0) {
            int v = b->outputs[L->cond_out];
            if (b->vals[v].kind == PR_VAL_NODE) ptr[v] = flag_buf; /* unless a carry's (below) */
        }
    }
    int *carry_val = PyMem_Calloc((size_t)nc + 1, sizeof(int));
    if (!carry_val) {
        PyErr_NoMemory();
        goto setup_failed;
    }
    for (int k = 0; k < nc; k++) carry_val[k] = input_value_of(b, L->carry_in[k]);
    *c->ts = PyEval_SaveThread(); /* ---- no GIL: iterate ---- */

    for (int k = 0; k < nc; k++) memcpy(cur[k], c->ptr[n->in[k]], bytes[k]);
    for (int64_t it = 0; trip < 0 || it < trip; it++) {
        int r = n_runs == 2 && first + it == n_batches - 1;
        body_run *br = &runs[r];
        void **ptr = br->ptr;
        if (L->n_feed) {
            int rc = batch_source.fill(source, first + it, feed, st->msg);
            if (rc != PR_OK) {
                st->rc = rc;
                goto run_failed;
            }
        }
        iter_value = (int32_t)(lower + it);
        for (int k = 0; k < nc; k++) {
            ptr[carry_val[k]] = cur[k];
            if (direct[k]) ptr[b->outputs[L->carry_out[k]]] = nxt[k];
        }
        run_ctx sub = {b, br->plan, ptr, br->arena, br->binding, br->tune, br->timed, NULL, c->ts};
        if (run_nodes(&sub, st) < 0) goto run_failed;
        for (int k = 0; k < nc; k++)
            if (!direct[k] && !same[k]) memcpy(nxt[k], ptr[b->outputs[L->carry_out[k]]], bytes[k]);
        int go = 1;
        if (L->cond_out >= 0) {
            int v = b->outputs[L->cond_out];
            go = scalar_true(&br->plan->views[v], ptr[v]);
        }
        for (int k = 0; k < nc; k++) {
            if (same[k]) continue;
            void *swap = cur[k];
            cur[k] = nxt[k], nxt[k] = swap;
        }
        if (!go) break;
    }
    for (int k = 0; k < nc; k++) memcpy(c->ptr[n->out[k]], cur[k], bytes[k]);
    ok = 1;
run_failed:
    PyEval_RestoreThread(*c->ts); /* ---- GIL held: clean up ---- */
    PyMem_Free(carry_val);
    goto cleanup;
setup_failed:
    st->rc = -1;
cleanup:
    for (int r = 0; r < 2; r++) body_release(&runs[r]);
    for (int k = 0; k < PR_MAX_INPUTS; k++) pr_free(feed[k]);
    for (int k = 0; cur && k < nc; k++) pr_free(cur[k]);
    for (int k = 0; nxt && k < nc; k++) pr_free(nxt[k]);
    PyMem_Free(in);
    PyMem_Free(bytes);
    PyMem_Free(cur);
    PyMem_Free(nxt);
    PyMem_Free(direct);
    PyMem_Free(same);
    Py_XDECREF(fed);
    Py_DECREF(b);
    *c->ts = PyEval_SaveThread();
    if (!ok && !st->op) st->op = &pr_loop_op;
    return ok ? 0 : -1;
}

/* Run every node of c->g in order (no GIL).  0, or -1 with *st filled. */
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

static int plan_threads(const pr_plan *p) {
    return p->flops < PLAN_PARALLEL_MIN_FLOPS ? 1 : pr_get_num_threads();
}

static int run_nodes_on(run_ctx *c, run_status *st);

static int run_nodes(run_ctx *c, run_status *st) {
    int limit = pr_get_thread_limit();
    pr_set_thread_limit(plan_threads(c->p) == 1 ? 1 : 0);
    int rc = run_nodes_on(c, st);
    pr_set_thread_limit(limit);
    return rc;
}

static int run_nodes_on(run_ctx *c, run_status *st) {
    pr_Graph *g = c->g;
    pr_plan *p = c->p;
    void **ptr = c->ptr;
    int nn = g->n_nodes, tune = c->tune;
    char *timed = c->timed;
    for (int j = 0; j < nn; j++) {
        pr_gnode *n = &g->nodes[j];
        if (c->times) c->times[2 * j] = now_us();
        if (n->host >= 0) {
            PyEval_RestoreThread(*c->ts);
            int rc = run_host(g, p, n, ptr);
            *c->ts = PyEval_SaveThread();
            if (rc < 0) {
                st->op = n->op, st->rc = -1;
                return -1;
            }
        } else if (n->loop >= 0) {
            if (run_loop(c, j, st) < 0) return -1;
        } else {
            pr_view iv[PR_MAX_INPUTS], ov[PR_MAX_OUTPUTS];
            for (int i = 0; i < n->n_in; i++) {
                iv[i] = p->views[n->in[i]];
                iv[i].data = ptr[n->in[i]];
            }
            for (int i = 0; i < n->n_out; i++) {
                ov[i] = p->views[n->out[i]];
                ov[i].data = ptr[n->out[i]];
            }
            void *scratch = p->scratch[j] ? (char *)c->arena + p->scratch_off[j] : NULL;
            int rc;
            int same = -1; /* an earlier node of this call with the same key */
            for (int k = 0; tune && p->variant[j] < 0 && k < j && same < 0; k++)
                if (timed[k] && PyBytes_GET_SIZE(p->tune_key[k]) == PyBytes_GET_SIZE(p->tune_key[j]) &&
                    memcmp(PyBytes_AS_STRING(p->tune_key[k]), PyBytes_AS_STRING(p->tune_key[j]),
                           (size_t)PyBytes_GET_SIZE(p->tune_key[j])) == 0)
                    same = k;
            if (same >= 0) p->variant[j] = p->variant[same];
            if (tune && p->variant[j] < 0) {
                /* Time every kernel on this call's data (best of two runs; a
                 * kernel twice as slow as the best gets one).  All write the
                 * same output, so the last run leaves it correct.  Another
                 * kernel than the default (the one eager calls run) must win
                 * by 10%: on a shared machine noise alone would otherwise
                 * pick a slower kernel now and then. */
                double best = 1e300, dflt_time = 1e300;
                int best_k = p->dflt[j], last = -1;
                rc = PR_OK;
                for (int k = 0; k < choices(n->op) && rc == PR_OK; k++) {
                    double mine = 1e300;
                    for (int rep = 0; rep < 2 && rc == PR_OK && (p->usable[j] >> (k / 2) & 1);
                         rep++) {
                        double t0 = now_us();
                        rc = run_kernel(n, p, j, iv, ov, scratch, last = k);
                        double dt = now_us() - t0;
                        if (dt < mine) mine = dt;
                        if (dt < best) best = dt, best_k = k;
                        if (dt > 2 * best) break;
                    }
                    if (k == p->dflt[j]) dflt_time = mine;
                }
                if (best_k != p->dflt[j] && best > 0.9 * dflt_time) best_k = p->dflt[j];
                if (rc == PR_OK && best_k != last) rc = run_kernel(n, p, j, iv, ov, scratch, best_k);
                p->variant[j] = best_k;
                timed[j] = 1;
            } else {
                rc = run_kernel(n, p, j, iv, ov, scratch,
                                p->variant[j] < 0 ? p->dflt[j] : p->variant[j]);
            }
            if (rc != PR_OK) {
                st->op = n->op, st->rc = rc;
                return -1;
            }
        }
        if (c->times) c->times[2 * j + 1] = now_us();
    }
    return 0;
}

/* Raise what a failed run reports (GIL held). */
static void raise_status(const run_status *st) {
    if (st->rc == -1) return; /* the exception is set */
    if (st->msg[0]) {
        PyErr_SetString(st->rc == PR_ERR_VALUE    ? PyExc_ValueError
                        : st->rc == PR_ERR_MEMORY ? PyExc_MemoryError
                                                  : PyExc_RuntimeError,
                        st->msg);
        return;
    }
    pr_kernel_status(st->op, st->rc);
}

/* run(inputs, profile=False) -> list of output Tensors, or (outputs, [(start_us,
 * duration_us)] per node) when profiling. */
static PyObject *Graph_run(pr_Graph *g, PyObject *args) {
    PyObject *inputs;
    int profile = 0;
    if (!PyArg_ParseTuple(args, "O|p:run", &inputs, &profile)) return NULL;
    if (!g->finalized) {
        PyErr_SetString(PyExc_RuntimeError, "Graph.run: the graph is not finalized");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(inputs, "Graph.run: inputs must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != g->n_inputs) {
        PyErr_Format(PyExc_TypeError, "compiled function: expected %d tensor inputs, got %zd",
                     g->n_inputs, PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    int nv = g->n_vals, nn = g->n_nodes, ni = g->n_inputs;
    pr_Tensor **t = PyMem_Calloc((size_t)ni + 1, sizeof(pr_Tensor *));
    pr_view *in = PyMem_Calloc((size_t)ni + 1, sizeof(pr_view));
    void **ptr = PyMem_Calloc((size_t)nv + 1, sizeof(void *));
    double *times = profile ? PyMem_Calloc(2 * (size_t)nn + 1, sizeof(double)) : NULL;
    PyObject *outs = NULL, *result = NULL;
    void *arena = NULL;
    pr_plan *p = NULL;
    int64_t *binding = PyMem_Calloc((size_t)pr_symtab_n_symbols(g->syms) + 1, sizeof(int64_t));
    if (!t || !in || !ptr || !binding || (profile && !times)) {
        PyErr_NoMemory();
        goto done;
    }
    if (check_inputs(g, seq, t, in, binding) < 0) goto done;
    if (!(p = plan_for(g, binding, in))) goto done;
    /* Outputs: inputs and captures are returned as they are; node values get
     * new tensors (a value returned twice is one tensor). */
    outs = PyList_New(g->n_outputs);
    if (!outs) goto done;
    for (int i = 0; i < g->n_outputs; i++) {
        int v = g->outputs[i];
        pr_gvalue *x = &g->vals[v];
        PyObject *o = NULL;
        for (int k = 0; k < i && !o; k++)
            if (g->outputs[k] == v) o = PyList_GET_ITEM(outs, k);
        if (o) Py_INCREF(o);
        else if (x->kind == PR_VAL_INPUT) Py_INCREF(o = (PyObject *)t[x->index]);
        else if (x->kind == PR_VAL_CAPTURE) Py_INCREF(o = PyList_GET_ITEM(g->captures, x->index));
        else {
            o = (PyObject *)pr_tensor_new(p->views[v].dtype, p->views[v].ndim, p->views[v].shape);
            if (!o) goto done;
            ptr[v] = ((pr_Tensor *)o)->v.data;
        }
        PyList_SET_ITEM(outs, i, o);
    }
    if (!(arena = arena_get(p))) goto done;
    for (int v = 0; v < nv; v++) {
        pr_gvalue *x = &g->vals[v];
        if (x->kind == PR_VAL_INPUT) ptr[v] = t[x->index]->v.data;
        else if (x->kind == PR_VAL_CAPTURE)
            ptr[v] = ((pr_Tensor *)PyList_GET_ITEM(g->captures, x->index))->v.data;
        else if (p->offset[v] >= 0) ptr[v] = (char *)arena + p->offset[v];
    }
    /* One call at a time times the kernels still unchosen (others use
     * kernel 0 meanwhile); `timed` marks what this call chose. */
    int tune = g->jit && !p->tuning && tune_lookup(p);
    char *timed = tune ? PyMem_Calloc((size_t)nn + 1, 1) : NULL;
    if (tune && !timed) {
        PyErr_NoMemory();
        goto done;
    }
    p->tuning |= tune;
    p->in_use++;
    run_status st;
    memset(&st, 0, sizeof st);
    PyThreadState *ts = PyEval_SaveThread();
    run_ctx c = {g, p, ptr, arena, binding, tune, timed, times, &ts};
    int failed = run_nodes(&c, &st) < 0;
    PyEval_RestoreThread(ts);
    p->in_use--;
    if (tune) {
        p->tuning = 0;
        if (tune_store(p, timed) < 0) PyErr_Clear(); /* only a cache: retimed next time */
        PyMem_Free(timed);
    }
    arena_put(p, arena);
    arena = NULL;
    if (failed) {
        raise_status(&st);
        goto done;
    }
    if (profile) {
        PyObject *tl = PyList_New(nn);
        for (int j = 0; tl && j < nn; j++) {
            PyObject *e = Py_BuildValue("(dd)", times[2 * j], times[2 * j + 1] - times[2 * j]);
            if (!e) Py_CLEAR(tl);
            else PyList_SET_ITEM(tl, j, e);
        }
        if (tl) result = Py_BuildValue("(ON)", outs, tl);
    } else {
        result = outs;
        Py_INCREF(result);
    }
done:
    pr_free(arena);
    PyMem_Free(binding);
    Py_XDECREF(outs);
    for (int k = 0; t && k < ni; k++) Py_XDECREF(t[k]);
    PyMem_Free(t);
    PyMem_Free(in);
    PyMem_Free(ptr);
    PyMem_Free(times);
    Py_DECREF(seq);
    return result;
}

/* plan(inputs) -> dict describing the plan for these inputs' shapes: per
 * node output shapes, flops, arena/naive/output bytes, kernel variants. */
static PyObject *Graph_plan(pr_Graph *g, PyObject *inputs) {
    if (!g->finalized) {
        PyErr_SetString(PyExc_RuntimeError, "Graph.plan: the graph is not finalized");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(inputs, "Graph.plan: inputs must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != g->n_inputs) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_TypeError, "expected %d tensor inputs", g->n_inputs);
        return NULL;
    }
    int ni = g->n_inputs;
    pr_Tensor **t = PyMem_Calloc((size_t)ni + 1, sizeof(pr_Tensor *));
    pr_view *in = PyMem_Calloc((size_t)ni + 1, sizeof(pr_view));
    PyObject *result = NULL, *shapes = NULL, *flops = NULL, *variants = NULL, *bound = NULL;
    PyObject *kernels = NULL;
    int ns = pr_symtab_n_symbols(g->syms);
    int64_t *binding = PyMem_Calloc((size_t)ns + 1, sizeof(int64_t));
    pr_plan *p;
    if (!t || !in || !binding) {
        PyErr_NoMemory();
        goto done;
    }
    if (check_inputs(g, seq, t, in, binding) < 0 || !(p = plan_for(g, binding, in))) goto done;
    if (!(bound = PyDict_New())) goto done;
    for (int k = 0; k < ns; k++) {
        PyObject *x = PyLong_FromLongLong(binding[k]);
        if (!x || PyDict_SetItemString(bound, pr_symtab_symbol_name(g->syms, k), x) < 0) {
            Py_XDECREF(x);
            goto done;
        }
        Py_DECREF(x);
    }
    shapes = PyList_New(g->n_vals);
    flops = PyList_New(g->n_nodes);
    variants = PyList_New(g->n_nodes);
    kernels = PyList_New(0);
    if (!shapes || !flops || !variants || !kernels) goto done;
    for (int v = 0; v < g->n_vals; v++) {
        PyObject *s = PyTuple_New(p->views[v].ndim);
        for (int d = 0; s && d < p->views[v].ndim; d++)
            PyTuple_SET_ITEM(s, d, PyLong_FromLongLong(p->views[v].shape[d]));
        if (!s) goto done;
        PyList_SET_ITEM(shapes, v, s);
    }
    for (int j = 0; j < g->n_nodes; j++) {
        pr_gnode *n = &g->nodes[j];
        double f = 0;
        if (n->host < 0 && n->loop < 0) {
            pr_view iv[PR_MAX_INPUTS], ov[PR_MAX_OUTPUTS];
            for (int i = 0; i < n->n_in; i++) iv[i] = p->views[n->in[i]];
            for (int i = 0; i < n->n_out; i++) ov[i] = p->views[n->out[i]];
            const void *attrs = p->attrs + (size_t)j * PR_ATTR_BYTES;
            f = n->op->flops ? n->op->flops(iv, n->n_in, ov, attrs)
                             : (n->n_out ? (double)ov[0].size : 0.0);
        }
        PyList_SET_ITEM(flops, j, PyFloat_FromDouble(f));
        PyList_SET_ITEM(variants, j, PyLong_FromLong(p->variant[j]));
        /* The kernel this node runs: its variant's name (" @1 thread" when
         * the jit chose one thread); None for an op without variants. */
        int c = p->variant[j] < 0 ? p->dflt[j] : p->variant[j];
        const char *kname = n->host < 0 && n->loop < 0 ? pr_variant_name(n->op, kernel_of(n->op, c)) : NULL;
        PyObject *kn = kname ? PyUnicode_FromFormat("%s%s", kname, c % 2 ? " @1 thread" : "")
                             : (Py_INCREF(Py_None), Py_None);
        if (!kn || PyList_Append(kernels, kn) < 0) {
            Py_XDECREF(kn);
            goto done;
        }
        Py_DECREF(kn);
    }
    result = Py_BuildValue("{s:O,s:O,s:O,s:O,s:n,s:n,s:n,s:d,s:O,s:i,s:i}", "shapes", shapes,
                           "node_flops", flops, "variants", variants, "kernels", kernels,
                           "arena_bytes",
                           (Py_ssize_t)p->arena_bytes, "naive_bytes", (Py_ssize_t)p->naive_bytes,
                           "output_bytes", (Py_ssize_t)p->output_bytes, "flops", p->flops,
                           "binding", bound, "inplace", p->n_inplace, "threads",
                           plan_threads(p));
done:
    Py_XDECREF(kernels);
    Py_XDECREF(bound);
    PyMem_Free(binding);
    Py_XDECREF(shapes);
    Py_XDECREF(flops);
    Py_XDECREF(variants);
    for (int k = 0; t && k < ni; k++) Py_XDECREF(t[k]);
    PyMem_Free(t);
    PyMem_Free(in);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef exec_methods[] = {
    {"run", (PyCFunction)Graph_run, METH_VARARGS,
     "run(inputs, profile=False) -> outputs (or (outputs, [(start_us, dur_us)] per node))."},
    {"plan", (PyCFunction)Graph_plan, METH_O,
     "plan(inputs) -> dict: shapes, node_flops, variants, arena/naive/output bytes, flops."},
    {NULL}};

int pr_executor_init(PyObject *module, PyTypeObject *graph_type) {
    if (!(tuned = PyDict_New())) return -1;
    pr_graph_plans_free = plans_free;
    for (PyMethodDef *m = exec_methods; m->ml_name; m++) {
        PyObject *descr = PyDescr_NewMethod(graph_type, m);
        if (!descr || PyDict_SetItemString(graph_type->tp_dict, m->ml_name, descr) < 0) {
            Py_XDECREF(descr);
            return -1;
        }
        Py_DECREF(descr);
    }
    PyType_Modified(graph_type);
    return 0;
}
