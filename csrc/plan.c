/* Planning traced graphs (plan.h).
 *
 * A plan is made once per binding of the graph's symbolic dimensions (one
 * plan for a static graph): shapes from the registry's shape rules, then a
 * liveness-based placement of every intermediate value and every node's
 * scratch in one arena (the greedy best-fit reuse of ggml-alloc.c: a buffer
 * is freed after its last reader and its bytes reused by later values).
 * A node may write its first output over an input that dies there (in
 * place: elementwise ops, batch norm's backward; pr_op.inplace_inputs),
 * which spares a fresh buffer's cache misses.  Under jit_compile the ops
 * with several kernels are timed once (by the executor's first run of the
 * plan) and the fastest kept in a cache shared by all plans.  A call plan
 * (pr_call_plan) gathers, before a call runs, the plans of its graph and of
 * every loop body under it, and the batches its loops over a dataset read
 * (their feeders are called here).  Running is executor.c's.
 */
#include "plan.h" /* Python.h first */

#include <string.h>

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

void pr_plan_free(pr_plan *p) {
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
    for (int i = 0; i < g->n_plans; i++) pr_plan_free(g->plans[i]);
    PyMem_Free(g->plans);
    g->plans = NULL;
    g->n_plans = 0;
}

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
int pr_plan_tune_lookup(pr_plan *p) {
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
int pr_plan_tune_store(pr_plan *p, const char *timed) {
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
        for (int k = 0; k < pr_plan_choices(n->op) / 2; k++)
            if (pr_variant_usable(n->op, pr_plan_kernel_of(n->op, 2 * k), iv, n->n_in, ov, attrs))
                p->usable[j] |= 1u << k;
        if (g->jit && (n->op->n_variants > 1 || pr_get_num_threads() > 1) && !n->op->mutates &&
            !(n->op->flags & PR_OP_COLLECTIVE)) {
            for (int k = 0; k < n->op->n_variants; k++) { /* room for every candidate */
                /* only those this CPU runs: a variant's scratch function may be
                 * compiled for its instruction set (an AVX-512 one ran
                 * VPMINSQ on an AVX2 CPU) */
                if (!(p->usable[j] >> k & 1)) continue;
                size_t b = pr_variant_scratch(n->op, k, iv, n->n_in, ov, attrs, infer_scratch);
                if (b > p->scratch[j]) p->scratch[j] = b;
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
            if (!dup) p->output_bytes += pr_view_bytes(&p->views[g->outputs[i]]);
        }
    /* Placement in node order: outputs first (an input still alive), then
     * scratch, then release what dies here. */
    for (int v = 0; v < nv; v++) owner[v] = v;
    for (int j = 0; j < nn; j++) {
        pr_gnode *n = &g->nodes[j];
        for (int i = 0; i < n->n_out; i++) {
            int v = n->out[i];
            if (is_output(g, v)) continue;
            size_t bytes = pr_view_bytes(&p->views[v]);
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
            if (arena_give(&a, p->offset[u], (int64_t)pr_view_bytes(&p->views[u])) < 0) goto fail;
        }
        for (int i = 0; i < n->n_out; i++) {
            int v = n->out[i];
            if (p->offset[v] >= 0 && last[v] < 0 &&
                arena_give(&a, p->offset[v], (int64_t)pr_view_bytes(&p->views[v])) < 0)
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
    pr_plan_free(p);
    return NULL;
}

/* Convert and check the call's inputs and bind the symbols to their sizes.
 * Fills t[] with new references (the caller releases them), in[] with their
 * views and binding[] with one size per symbol. */
int pr_plan_bind(pr_Graph *g, PyObject *seq, pr_Tensor **t, pr_view *in, int64_t *binding) {
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

pr_plan *pr_plan_for(pr_Graph *g, const int64_t *binding, const pr_view *in) {
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
            pr_plan_free(g->plans[victim]);
            g->plans[victim] = g->plans[--g->n_plans];
        }
        pr_plan **ps = PyMem_Realloc(g->plans, sizeof(pr_plan *) * (size_t)(g->n_plans + 1));
        if (!ps) {
            pr_plan_free(p);
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

/* An arena for a run of plan p (GIL held): a pooled one, else a new one. */
void *pr_plan_arena_get(pr_plan *p) {
    if (p->n_pool) return p->pool[--p->n_pool];
    void *a = pr_alloc_huge(p->arena_bytes);
    if (!a) PyErr_NoMemory();
    return a;
}

/* Keep one arena per concurrent caller for reuse (GIL held). */
void pr_plan_arena_put(pr_plan *p, void *arena) {
    if (!arena) return;
    if (p->n_pool == p->cap_pool) {
        int cap = p->cap_pool ? 2 * p->cap_pool : 2;
        void **pool = PyMem_Realloc(p->pool, sizeof(void *) * (size_t)cap);
        if (pool) p->pool = pool, p->cap_pool = cap;
    }
    if (p->n_pool < p->cap_pool) p->pool[p->n_pool++] = arena;
    else pr_free(arena);
}

/* ---- call plans: a graph's plan with its loops' ------------------------------- */

static pr_batch_source batch_source;

void pr_plan_set_batch_source(pr_batch_source source) { batch_source = source; }

int pr_plan_fill_batch(PyObject *iterator, int64_t b, void *const *dst, char *error) {
    return batch_source.fill(iterator, b, dst, error);
}

/* Call loop L's feeder: this call's pass and batches, checked against the
 * body's traced inputs. */
static int source_take(pr_Graph *b, const pr_loop *L, pr_source *src) {
    long long first, count;
    int n_comp = 0;
    if (!(src->fed = PyObject_CallNoArgs(L->feeder))) return -1;
    if (!PyArg_ParseTuple(src->fed, "OLL;the feeder returns (iterator, first, count)",
                          &src->iterator, &first, &count))
        return -1;
    if (!batch_source.info ||
        !batch_source.info(src->iterator, &n_comp, &src->n_batches, &src->full, &src->last)) {
        PyErr_SetString(PyExc_TypeError,
                        "loop over a dataset: the feeder must return a BatchIterator");
        return -1;
    }
    if (n_comp != L->n_feed || first < 0 || count < 0 || first + count > src->n_batches) {
        PyErr_Format(PyExc_ValueError,
                     "loop over a dataset: the pass has %d components and %lld batches, the "
                     "loop was traced for %d components (batches %lld to %lld asked)",
                     n_comp, (long long)src->n_batches, L->n_feed, first, first + count);
        return -1;
    }
    src->first = first, src->count = count;
    for (int k = 0; k < L->n_feed; k++) {
        const pr_gvalue *x = &b->vals[pr_graph_input_value(b, L->feed_in[k])];
        const pr_view *v = &src->full[k];
        int match = x->dtype == v->dtype && x->ndim == v->ndim && v->ndim >= 1 &&
                    (pr_dim_symbol_index(b->syms, L->feed_batch) >= 0 ||
                     x->shape[0] == v->shape[0]);
        for (int d = 1; match && d < v->ndim; d++) match = x->shape[d] == v->shape[d];
        if (!match) {
            char want[192], have[160];
            pr_view traced = {.ndim = x->ndim};
            memcpy(traced.shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
            PyErr_Format(PyExc_ValueError,
                         "loop over a dataset: component %d of its batches is %s of shape %s, "
                         "but the loop was traced for %s of shape %s (a dataset's batches keep "
                         "their shapes)", k, pr_dtype_name(v->dtype),
                         pr_shape_str(v, have, sizeof have), pr_dtype_name(x->dtype),
                         pr_shape_str_in(b->syms, &traced, want, sizeof want));
            return -1;
        }
    }
    return 0;
}

void pr_call_plan_release(pr_call_plan *cp) {
    for (int l = 0; cp->loops && l < cp->g->n_loops; l++) {
        pr_loop_plan *lp = &cp->loops[l];
        for (int r = 0; lp->body && r < 2; r++) pr_call_plan_release(&lp->body[r]);
        PyMem_Free(lp->body);
        Py_XDECREF(lp->src.fed);
    }
    PyMem_Free(cp->loops);
    PyMem_Free(cp->binding);
    if (cp->plan) cp->plan->in_use--;
    memset(cp, 0, sizeof *cp);
}

/* Plan loop node j of cp's graph: the body's input views (the loop
 * variables' and outer values' from the graph's plan, the iteration index,
 * the batches) and its plans for the full and the last batch. */
static int loop_plan_make(pr_call_plan *cp, int j) {
    pr_Graph *g = cp->g;
    pr_gnode *n = &g->nodes[j];
    const pr_loop *L = &g->loops[n->loop];
    pr_loop_plan *lp = &cp->loops[n->loop];
    pr_Graph *b = L->body;
    const pr_plan *p = cp->plan;
    int ns = pr_symtab_n_symbols(b->syms), rc = -1;
    pr_view *in = PyMem_Calloc((size_t)b->n_inputs + 1, sizeof(pr_view));
    int64_t *binding = PyMem_Calloc((size_t)ns + 1, sizeof(int64_t));
    if (!(lp->body = PyMem_Calloc(2, sizeof(pr_call_plan))) || !in || !binding) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(binding, cp->binding, sizeof(int64_t) * (size_t)pr_symtab_n_symbols(g->syms));
    for (int k = 0; k < L->n_carry; k++) in[L->carry_in[k]] = p->views[n->in[k]];
    for (int k = 0; k < L->n_const; k++) in[L->const_in[k]] = p->views[n->in[L->n_carry + k]];
    if (L->iter_in >= 0) {
        int64_t scalar_shape[1] = {0};
        pr_set_out(&in[L->iter_in], PR_I32, 0, scalar_shape);
    }
    if (L->feeder && source_take(b, L, &lp->src) < 0) goto done;
    int sym = pr_dim_symbol_index(b->syms, L->feed_batch);
    for (int r = 0; r < 2; r++) {
        const pr_view *views = r == 0 ? lp->src.full : lp->src.last;
        if (r == 1 && !(L->feeder && lp->src.count > 0 &&
                        lp->src.first + lp->src.count == lp->src.n_batches &&
                        views[0].shape[0] != lp->src.full[0].shape[0]))
            break;
        for (int k = 0; L->feeder && k < L->n_feed; k++) {
            in[L->feed_in[k]] = views[k];
            in[L->feed_in[k]].data = NULL;
            if (sym >= 0) binding[sym] = views[k].shape[0];
        }
        if (pr_call_plan_make(b, binding, in, &lp->body[r]) < 0) goto done;
    }
    rc = 0;
done:
    PyMem_Free(in);
    PyMem_Free(binding);
    return rc;
}

int pr_call_plan_make(pr_Graph *g, const int64_t *binding, const pr_view *in, pr_call_plan *cp) {
    size_t bytes = sizeof(int64_t) * ((size_t)pr_symtab_n_symbols(g->syms) + 1);
    memset(cp, 0, sizeof *cp);
    cp->g = g;
    if (!(cp->binding = PyMem_Malloc(bytes)) ||
        (g->n_loops && !(cp->loops = PyMem_Calloc((size_t)g->n_loops, sizeof(pr_loop_plan))))) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(cp->binding, binding, bytes - sizeof(int64_t));
    if (!(cp->plan = pr_plan_for(g, binding, in))) goto fail;
    cp->plan->in_use++;
    for (int j = 0; j < g->n_nodes; j++)
        if (g->nodes[j].loop >= 0 && loop_plan_make(cp, j) < 0) goto fail;
    return 0;
fail:
    pr_call_plan_release(cp);
    return -1;
}

/* The plan of g for a call with `inputs` (a sequence of its inputs): bound
 * and looked up (made on first use) as a run does; NULL with an exception.
 * `who` names the caller in the messages. */
static pr_plan *plan_of_inputs(pr_Graph *g, PyObject *inputs, const char *who) {
    if (!g->finalized) {
        PyErr_Format(PyExc_RuntimeError, "%s: the graph is not finalized", who);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(inputs, "Graph.plan: inputs must be a sequence");
    if (!seq) return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != g->n_inputs) {
        PyErr_Format(PyExc_TypeError, "%s: expected %d tensor inputs, got %zd", who,
                     g->n_inputs, PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return NULL;
    }
    int ni = g->n_inputs;
    pr_Tensor **t = PyMem_Calloc((size_t)ni + 1, sizeof(pr_Tensor *));
    pr_view *in = PyMem_Calloc((size_t)ni + 1, sizeof(pr_view));
    int64_t *binding = PyMem_Calloc((size_t)pr_symtab_n_symbols(g->syms) + 1, sizeof(int64_t));
    pr_plan *p = NULL;
    if (!t || !in || !binding) PyErr_NoMemory();
    else if (pr_plan_bind(g, seq, t, in, binding) == 0) p = pr_plan_for(g, binding, in);
    for (int k = 0; t && k < ni; k++) Py_XDECREF(t[k]);
    PyMem_Free(t);
    PyMem_Free(in);
    PyMem_Free(binding);
    Py_DECREF(seq);
    return p;
}

/* A pin keeps a plan among its graph's (never evicted) while it lives; it
 * holds a reference to the graph, which frees its plans. */
typedef struct {
    pr_Graph *g;
    pr_plan *p;
} plan_pin;

#define PIN_NAME "pyresnet._C.plan_pin"

static void pin_release(PyObject *capsule) {
    plan_pin *pin = PyCapsule_GetPointer(capsule, PIN_NAME);
    if (!pin) {
        PyErr_Clear();
        return;
    }
    pin->p->in_use--;
    Py_DECREF(pin->g);
    PyMem_Free(pin);
}

PyObject *pr_plan_pin(pr_Graph *g, PyObject *inputs) {
    pr_plan *p = plan_of_inputs(g, inputs, "Graph._pin");
    if (!p) return NULL;
    plan_pin *pin = PyMem_Malloc(sizeof *pin);
    if (!pin) return PyErr_NoMemory();
    pin->g = g;
    pin->p = p;
    PyObject *capsule = PyCapsule_New(pin, PIN_NAME, pin_release);
    if (!capsule) {
        PyMem_Free(pin);
        return NULL;
    }
    Py_INCREF(g);
    p->in_use++;
    return capsule;
}

/* plan(inputs) -> dict describing the plan for these inputs' shapes: per
 * node output shapes, flops, arena/naive/output bytes, kernel variants. */
PyObject *pr_plan_describe(pr_Graph *g, PyObject *inputs) {
    PyObject *result = NULL, *shapes = NULL, *flops = NULL, *variants = NULL, *bound = NULL;
    PyObject *kernels = NULL;
    int ns = pr_symtab_n_symbols(g->syms);
    pr_plan *p = plan_of_inputs(g, inputs, "Graph.plan");
    if (!p) return NULL;
    const int64_t *binding = p->binding;
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
        const char *kname = n->host < 0 && n->loop < 0 ? pr_variant_name(n->op, pr_plan_kernel_of(n->op, c)) : NULL;
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
                           pr_plan_threads(p));
done:
    Py_XDECREF(kernels);
    Py_XDECREF(bound);
    Py_XDECREF(shapes);
    Py_XDECREF(flops);
    Py_XDECREF(variants);
    return result;
}

int pr_plan_init(void) {
    if (!(tuned = PyDict_New())) return -1;
    pr_graph_plans_free = plans_free;
    return 0;
}
