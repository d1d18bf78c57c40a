/* Running traced graphs: Graph.run over the call plan (plan.c) for the
 * call's sizes: the graph's plan and its loop bodies', made before the run.
 *
 * A run converts the inputs, gets its call plan (which also calls the
 * feeders of its loops over a dataset: no Python runs once the nodes do)
 * and makes the output Tensors (GIL held; work proportional to the number
 * of inputs and outputs), takes an arena from the
 * plan's pool (a fresh one when another thread holds the pooled ones, so
 * concurrent calls never share buffers), then runs every node in one C loop
 * with the GIL released.  Host callbacks (pyresnet.print) take the GIL for
 * their node only.  Under jit_compile the first run of a plan times the
 * kernel choices its nodes still lack (plan.c keeps them).  A kernel error
 * stops the loop and raises the exception an eager call would raise; nodes
 * before it have run (their in-place variable updates stay), nodes after it
 * have not.
 */
#include "plan.h" /* Python.h first */

#include <math.h>
#include <string.h>
#include <time.h>

/* ---- running ---------------------------------------------------------------- */

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
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
    const pr_call_plan *cp; /* p and the plans of g's loops */
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
        memcpy(t->v.data, ptr[n->in[i]], pr_view_bytes(v));
        PyTuple_SET_ITEM(args, i, (PyObject *)t);
    }
    PyObject *r = PyObject_Call(PyList_GET_ITEM(g->callbacks, n->host), args, NULL);
    Py_DECREF(args);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* Run node j's kernel with choice c (see pr_plan_choices()). */
static int run_kernel(pr_gnode *n, pr_plan *p, int j, pr_view *iv, pr_view *ov, void *scratch,
                      int c) {
    const void *attrs = p->attrs + (size_t)j * PR_ATTR_BYTES;
    int rc, limit = pr_get_thread_limit();
    if (c % 2) pr_set_thread_limit(1);
    rc = pr_op_run(n->op, pr_plan_kernel_of(n->op, c), iv, n->n_in, ov, attrs, scratch);
    pr_set_thread_limit(limit);
    return rc;
}

/* ---- loops ------------------------------------------------------------------
 * A loop node runs its body graph once per iteration.  At the loop's start
 * (GIL held, once per run of the enclosing graph) it takes the arenas of the
 * body's plans (the call plan has them, and the batches of a loop over a
 * dataset: the full batch and a smaller last one) and allocates the loop
 * variables twice (this iteration's and the next's).  Then, without the
 * GIL, each iteration makes its batch (the input pipeline's kernels, in
 * place in the body's input buffers), runs the body's nodes with the
 * carried values as inputs and writes the new ones into the other buffers,
 * which become the inputs of the next iteration. */

typedef struct {
    const pr_call_plan *cp;
    pr_plan *plan;
    void *arena;
    void **ptr;
    int tune;
    char *timed;
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

/* GIL held: everything the runs of a body's plan need. */
static int body_prepare(pr_Graph *b, const pr_call_plan *cp, body_run *r) {
    memset(r, 0, sizeof *r);
    r->cp = cp;
    r->plan = cp->plan;
    if (!(r->arena = pr_plan_arena_get(r->plan))) return -1;
    if (!(r->ptr = PyMem_Calloc((size_t)b->n_vals + 1, sizeof(void *)))) return PyErr_NoMemory(), -1;
    for (int v = 0; v < b->n_vals; v++) {
        pr_gvalue *x = &b->vals[v];
        if (x->kind == PR_VAL_CAPTURE)
            r->ptr[v] = ((pr_Tensor *)PyList_GET_ITEM(b->captures, x->index))->v.data;
        else if (x->kind == PR_VAL_NODE && r->plan->offset[v] >= 0)
            r->ptr[v] = (char *)r->arena + r->plan->offset[v];
    }
    r->tune = b->jit && !r->plan->tuning && pr_plan_tune_lookup(r->plan);
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
            if (pr_plan_tune_store(r->plan, r->timed) < 0) PyErr_Clear();
        }
        pr_plan_arena_put(r->plan, r->arena);
    } else {
        pr_free(r->arena);
    }
    PyMem_Free(r->timed);
    PyMem_Free(r->ptr);
    memset(r, 0, sizeof *r);
}

static int run_loop(run_ctx *c, int j, run_status *st) {
    pr_Graph *g = c->g, *b;
    pr_gnode *n = &g->nodes[j];
    pr_loop *L = &g->loops[n->loop];
    const pr_loop_plan *lp = &c->cp->loops[n->loop];
    const pr_source *src = &lp->src;
    pr_plan *p = c->p;
    int nc = L->n_carry, ok = 0;
    int64_t lower = L->lower, upper = L->upper, trip = -1;
    size_t *bytes = NULL;
    void **cur = NULL, **nxt = NULL, *feed[PR_MAX_INPUTS] = {0};
    char *direct = NULL, *same = NULL;
    int *carry_val = NULL;
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
    if (trip != 0 && src->fed && (trip < 0 || src->count < trip)) trip = src->count;
    if (trip == 0) { /* no iteration: the loop variables keep their initial values */
        for (int k = 0; k < nc; k++)
            memcpy(c->ptr[n->out[k]], c->ptr[n->in[k]], pr_view_bytes(&p->views[n->out[k]]));
        return 0;
    }

    PyEval_RestoreThread(*c->ts); /* ---- GIL held: set up ---- */
    b = L->body;
    Py_INCREF(b);
    bytes = PyMem_Calloc((size_t)nc + 1, sizeof(size_t));
    cur = PyMem_Calloc((size_t)nc + 1, sizeof(void *));
    nxt = PyMem_Calloc((size_t)nc + 1, sizeof(void *));
    direct = PyMem_Calloc((size_t)nc + 1, 1);
    same = PyMem_Calloc((size_t)nc + 1, 1);
    carry_val = PyMem_Calloc((size_t)nc + 1, sizeof(int));
    if (!bytes || !cur || !nxt || !direct || !same || !carry_val) {
        PyErr_NoMemory();
        goto setup_failed;
    }
    if (trip < 0 && L->cond_out < 0) {
        PyErr_SetString(PyExc_ValueError, "loop: no bound and no condition");
        goto setup_failed;
    }
    int n_runs = lp->body[1].plan ? 2 : 1;
    for (int r = 0; r < n_runs; r++)
        if (body_prepare(b, &lp->body[r], &runs[r]) < 0) goto setup_failed;
    for (int k = 0; src->fed && k < L->n_feed; k++) {
        if (!(feed[k] = pr_alloc(pr_view_bytes(&src->full[k])))) {
            PyErr_NoMemory();
            goto setup_failed;
        }
    }
    for (int k = 0; k < nc; k++) {
        int v = b->outputs[L->carry_out[k]];
        bytes[k] = pr_view_bytes(&p->views[n->out[k]]);
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
            int v = pr_graph_input_value(b, L->const_in[k]);
            ptr[v] = c->ptr[n->in[nc + k]];
        }
        for (int k = 0; src->fed && k < L->n_feed; k++)
            ptr[pr_graph_input_value(b, L->feed_in[k])] = feed[k];
        if (L->iter_in >= 0) ptr[pr_graph_input_value(b, L->iter_in)] = &iter_value;
        if (L->cond_out >= 0) {
            int v = b->outputs[L->cond_out];
            if (b->vals[v].kind == PR_VAL_NODE) ptr[v] = flag_buf; /* unless a carry's (below) */
        }
    }
    for (int k = 0; k < nc; k++) carry_val[k] = pr_graph_input_value(b, L->carry_in[k]);
    *c->ts = PyEval_SaveThread(); /* ---- no GIL: iterate ---- */

    for (int k = 0; k < nc; k++) memcpy(cur[k], c->ptr[n->in[k]], bytes[k]);
    for (int64_t it = 0; trip < 0 || it < trip; it++) {
        int r = n_runs == 2 && src->first + it == src->n_batches - 1;
        body_run *br = &runs[r];
        void **ptr = br->ptr;
        if (src->fed) {
            int rc = pr_plan_fill_batch(src->iterator, src->first + it, feed, st->msg);
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
        run_ctx sub = {b,         br->plan,  br->cp,   ptr,  br->arena, br->cp->binding,
                       br->tune,  br->timed, NULL,     c->ts};
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
    goto cleanup;
setup_failed:
    st->rc = -1;
cleanup:
    for (int r = 0; r < 2; r++) body_release(&runs[r]);
    for (int k = 0; k < PR_MAX_INPUTS; k++) pr_free(feed[k]);
    for (int k = 0; cur && k < nc; k++) pr_free(cur[k]);
    for (int k = 0; nxt && k < nc; k++) pr_free(nxt[k]);
    PyMem_Free(carry_val);
    PyMem_Free(bytes);
    PyMem_Free(cur);
    PyMem_Free(nxt);
    PyMem_Free(direct);
    PyMem_Free(same);
    Py_DECREF(b);
    *c->ts = PyEval_SaveThread();
    if (!ok && !st->op) st->op = &pr_loop_op;
    return ok ? 0 : -1;
}

/* Under jit_compile, the first run of a plan chooses node j's kernel (GIL
 * not held): the choice of an earlier node of this run with the same op,
 * shapes and attributes, else every usable kernel timed on this call's
 * data (best of two runs; a kernel twice as slow as the best gets one).
 * All write the same output, so the last run leaves it correct.  Another
 * kernel than the default (the one eager calls run) must win by 10%: on a
 * shared machine noise alone would otherwise pick a slower kernel now and
 * then.  plan.c keeps the choices (pr_plan_tune_store). */
static int tune_kernel(run_ctx *c, int j, pr_view *iv, pr_view *ov, void *scratch) {
    pr_plan *p = c->p;
    pr_gnode *n = &c->g->nodes[j];
    PyObject *key = p->tune_key[j];
    for (int k = 0; k < j; k++)
        if (c->timed[k] && PyBytes_GET_SIZE(p->tune_key[k]) == PyBytes_GET_SIZE(key) &&
            memcmp(PyBytes_AS_STRING(p->tune_key[k]), PyBytes_AS_STRING(key),
                   (size_t)PyBytes_GET_SIZE(key)) == 0) {
            p->variant[j] = p->variant[k];
            return run_kernel(n, p, j, iv, ov, scratch, p->variant[j]);
        }
    double best = 1e300, dflt_time = 1e300;
    int best_k = p->dflt[j], last = -1, rc = PR_OK;
    for (int k = 0; k < pr_plan_choices(n->op) && rc == PR_OK; k++) {
        double mine = 1e300;
        for (int rep = 0; rep < 2 && rc == PR_OK && (p->usable[j] >> (k / 2) & 1); rep++) {
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
    c->timed[j] = 1;
    return rc;
}

/* Run every node of c->g in order (no GIL).  0, or -1 with *st filled. */
static int run_nodes_on(run_ctx *c, run_status *st);

static int run_nodes(run_ctx *c, run_status *st) {
    int limit = pr_get_thread_limit();
    pr_set_thread_limit(pr_plan_threads(c->p) == 1 ? 1 : 0);
    int rc = run_nodes_on(c, st);
    pr_set_thread_limit(limit);
    return rc;
}

static int run_nodes_on(run_ctx *c, run_status *st) {
    pr_Graph *g = c->g;
    pr_plan *p = c->p;
    void **ptr = c->ptr;
    int nn = g->n_nodes;
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
            int rc = c->tune && p->variant[j] < 0
                         ? tune_kernel(c, j, iv, ov, scratch)
                         : run_kernel(n, p, j, iv, ov, scratch,
                                      p->variant[j] < 0 ? p->dflt[j] : p->variant[j]);
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
    pr_call_plan cp = {0};
    int64_t *binding = PyMem_Calloc((size_t)pr_symtab_n_symbols(g->syms) + 1, sizeof(int64_t));
    if (!t || !in || !ptr || !binding || (profile && !times)) {
        PyErr_NoMemory();
        goto done;
    }
    if (pr_plan_bind(g, seq, t, in, binding) < 0) goto done;
    if (pr_call_plan_make(g, binding, in, &cp) < 0) goto done;
    p = cp.plan;
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
    if (!(arena = pr_plan_arena_get(p))) goto done;
    for (int v = 0; v < nv; v++) {
        pr_gvalue *x = &g->vals[v];
        if (x->kind == PR_VAL_INPUT) ptr[v] = t[x->index]->v.data;
        else if (x->kind == PR_VAL_CAPTURE)
            ptr[v] = ((pr_Tensor *)PyList_GET_ITEM(g->captures, x->index))->v.data;
        else if (p->offset[v] >= 0) ptr[v] = (char *)arena + p->offset[v];
    }
    /* One call at a time times the kernels still unchosen (others use
     * kernel 0 meanwhile); `timed` marks what this call chose. */
    int tune = g->jit && !p->tuning && pr_plan_tune_lookup(p);
    char *timed = tune ? PyMem_Calloc((size_t)nn + 1, 1) : NULL;
    if (tune && !timed) {
        PyErr_NoMemory();
        goto done;
    }
    p->tuning |= tune;
    run_status st;
    memset(&st, 0, sizeof st);
    PyThreadState *ts = PyEval_SaveThread();
    run_ctx c = {g, p, &cp, ptr, arena, binding, tune, timed, times, &ts};
    int failed = run_nodes(&c, &st) < 0;
    PyEval_RestoreThread(ts);
    if (tune) {
        p->tuning = 0;
        if (pr_plan_tune_store(p, timed) < 0) PyErr_Clear(); /* only a cache: retimed next time */
        PyMem_Free(timed);
    }
    pr_plan_arena_put(p, arena);
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
    pr_call_plan_release(&cp);
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

/* The class Graph.plan returns (pyresnet.compile.Plan, a dict subclass, set
 * by _C._set_plan_class), called as cls(graph, inputs, description); the
 * description dict itself before it is set. */
static PyObject *plan_class;

static PyObject *Graph_plan(pr_Graph *g, PyObject *inputs) {
    PyObject *d = pr_plan_describe(g, inputs);
    if (!d || !plan_class) return d;
    PyObject *r = PyObject_CallFunctionObjArgs(plan_class, (PyObject *)g, inputs, d, NULL);
    Py_DECREF(d);
    return r;
}

static PyObject *set_plan_class(PyObject *self, PyObject *cls) {
    (void)self;
    if (!PyCallable_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "_set_plan_class expects a class");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(plan_class, cls);
    Py_RETURN_NONE;
}

static PyMethodDef exec_module_methods[] = {
    {"_set_plan_class", (PyCFunction)set_plan_class, METH_O,
     "_set_plan_class(cls): what Graph.plan returns, cls(graph, inputs, description)."},
    {NULL}};

static PyMethodDef exec_methods[] = {
    {"run", (PyCFunction)Graph_run, METH_VARARGS,
     "run(inputs, profile=False) -> outputs (or (outputs, [(start_us, dur_us)] per node))."},
    {"plan", (PyCFunction)Graph_plan, METH_O,
     "plan(inputs) -> Plan (a dict: shapes, node_flops, variants, kernels, arena/naive/output "
     "bytes, flops, binding, inplace, threads; with run() and tune())."},
    {"_describe", (PyCFunction)pr_plan_describe, METH_O,
     "_describe(inputs) -> the plan's description dict (what Graph.plan returns, as a dict)."},
    {"_pin", (PyCFunction)pr_plan_pin, METH_O,
     "_pin(inputs) -> capsule keeping the plan for these sizes until it is freed."},
    {NULL}};

int pr_executor_init(PyObject *module, PyTypeObject *graph_type) {
    if (pr_plan_init() < 0 || PyModule_AddFunctions(module, exec_module_methods) < 0) return -1;
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
