/* The traced graph IR: tracing (trace_call appends nodes, installed as
 * pr_call's tracing hook), and the Python-facing Graph type that
 * pyresnet/compile.py drives.  The passes that run when tracing ends live in
 * passes.c; planning and running in executor.c.
 *
 * A symbolic tensor's `sym` slot holds (graph, value id).  While a graph is
 * traced in a thread, every op call in that thread is appended to it (also
 * calls whose inputs are all real: a Variable read must be re-read on every
 * call, never folded into a constant); real tensors are captured by
 * reference.
 */
#include "graph.h"
#include "op_list.h"

#include <math.h>
#include <string.h>

static _Thread_local pr_Graph *current;

void (*pr_graph_plans_free)(pr_Graph *g); /* set by executor.c */

/* The graph this thread traces; its symbols are the ones shape rules compute
 * with (symdim.c's current table). */
static void set_current(pr_Graph *g) {
    current = g;
    pr_symtab_set_current(g ? g->syms : NULL);
}

static int tracing_active(void) { return current != NULL; }

static pr_symtab *symtab_of(PyObject *sym) {
    if (!sym || !PyTuple_Check(sym) || PyTuple_GET_SIZE(sym) < 1) return NULL;
    PyObject *g = PyTuple_GET_ITEM(sym, 0);
    return PyObject_TypeCheck(g, &pr_GraphType) ? ((pr_Graph *)g)->syms : NULL;
}

static int trace_known_value(PyObject *t, int64_t *out) {
    pr_Tensor *tt = (pr_Tensor *)t;
    if (!tt->sym) return 0;
    pr_Graph *g = (pr_Graph *)PyTuple_GET_ITEM(tt->sym, 0);
    long id = PyLong_AsLong(PyTuple_GET_ITEM(tt->sym, 1));
    if (g != current || id < 0 || id >= g->n_vals || !g->vals[id].has_known) return 0;
    *out = g->vals[id].known;
    return 1;
}

/* A size operand: a traced size (a known dimension) or a Python int. */
static int size_operand(PyObject *o, int64_t *v, int *traced) {
    if (pr_Tensor_Check(o)) {
        *traced = 1;
        return trace_known_value(o, v);
    }
    if (!PyLong_Check(o) || PyBool_Check(o)) return 0;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()) || pr_dim_is_sym(x)) {
        PyErr_Clear();
        return 0;
    }
    *v = x;
    return 1;
}

static PyObject *trace_size_arith(int kind, PyObject *a, PyObject *b) {
    int64_t x, y, r;
    int traced = 0;
    if (!current || !size_operand(a, &x, &traced) || !size_operand(b, &y, &traced) || !traced)
        return NULL;
    switch (kind) {
    case '+': r = pr_dim_add(x, y); break;
    case '-': r = pr_dim_mul(y, -1), r = r == PR_DIM_ERROR ? r : pr_dim_add(x, r); break;
    case '*': r = pr_dim_mul(x, y); break;
    default:
        if (pr_dim_is_sym(y) || y <= 0) {
            PyErr_SetString(PyExc_TypeError,
                            "size // size: the divisor must be a Python int > 0 (an unknown "
                            "size divides nothing while tracing)");
            return NULL;
        }
        r = pr_dim_floordiv(x, y);
    }
    if (r == PR_DIM_ERROR) return NULL;
    return pr_call1(&pr_op_size, NULL, 0, &r);
}

/* ---- building ------------------------------------------------------------ */

static int add_value(pr_Graph *g, const pr_view *v, int kind, int index) {
    if (g->n_vals == g->cap_vals) {
        int cap = g->cap_vals ? 2 * g->cap_vals : 64;
        pr_gvalue *p = PyMem_Realloc(g->vals, sizeof(pr_gvalue) * (size_t)cap);
        if (!p) return PyErr_NoMemory(), -1;
        g->vals = p;
        g->cap_vals = cap;
    }
    pr_gvalue *x = &g->vals[g->n_vals];
    memset(x, 0, sizeof *x);
    x->dtype = v->dtype;
    x->ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) x->shape[d] = v->shape[d];
    x->kind = kind;
    x->index = index;
    return g->n_vals++;
}

static pr_gnode *add_node(pr_Graph *g) {
    if (g->n_nodes == g->cap_nodes) {
        int cap = g->cap_nodes ? 2 * g->cap_nodes : 64;
        pr_gnode *p = PyMem_Realloc(g->nodes, sizeof(pr_gnode) * (size_t)cap);
        if (!p) return PyErr_NoMemory(), NULL;
        g->nodes = p;
        g->cap_nodes = cap;
    }
    pr_gnode *n = &g->nodes[g->n_nodes++];
    memset(n, 0, sizeof *n);
    n->host = -1;
    n->loop = -1;
    n->scope = g->scope;
    return n;
}

static void value_view(const pr_gvalue *x, pr_view *v) {
    pr_set_out(v, x->dtype, x->ndim, x->shape);
}

static PyObject *new_symbolic(pr_Graph *g, int id) {
    pr_gvalue *x = &g->vals[id];
    PyObject *sym = Py_BuildValue("(Oi)", (PyObject *)g, id);
    if (!sym) return NULL;
    return (PyObject *)pr_tensor_new_symbolic(x->dtype, x->ndim, x->shape, sym);
}

static int value_of(pr_Graph *g, const pr_op *op, int i, PyObject *t);

/* A loop body reads a value of an enclosing graph: it becomes an input of
 * the body (one per value), whose node feeds it the outer value. */
static int lift(pr_Graph *g, const pr_op *op, int i, PyObject *t) {
    PyObject *key = ((pr_Tensor *)t)->sym; /* (graph, id): equal for every tensor of the value */
    PyObject *found = PyDict_GetItem(g->capture_ids, key);
    if (found) return (int)PyLong_AsLong(found);
    int outer = value_of(g->parent, op, i, t);
    if (outer < 0) return -1;
    int *lifted = PyMem_Realloc(g->lifted, sizeof(int) * ((size_t)g->n_inputs + 1));
    if (!lifted) return PyErr_NoMemory(), -1;
    g->lifted = lifted;
    pr_view v;
    value_view(&g->parent->vals[outer], &v);
    int id = add_value(g, &v, PR_VAL_INPUT, g->n_inputs);
    if (id < 0) return -1;
    g->lifted[g->n_inputs++] = outer;
    PyObject *idobj = PyLong_FromLong(id);
    int rc = idobj ? PyDict_SetItem(g->capture_ids, key, idobj) : -1;
    Py_XDECREF(idobj);
    return rc < 0 ? -1 : id;
}

/* The value id of a tensor in graph g: its own if symbolic, else captured. */
static int value_of(pr_Graph *g, const pr_op *op, int i, PyObject *t) {
    pr_Tensor *tt = (pr_Tensor *)t;
    if (tt->sym) {
        PyObject *owner = PyTuple_GET_ITEM(tt->sym, 0);
        int outer = 0; /* a value of a graph this loop body is nested in */
        for (pr_Graph *a = g->parent; a && !outer; a = a->parent) outer = (PyObject *)a == owner;
        if (outer) return lift(g, op, i, t);
        if (owner != (PyObject *)g && PyObject_TypeCheck(owner, &pr_GraphType) &&
            ((pr_Graph *)owner)->parent)
            return pr_fail(op, PyExc_ValueError,
                           "input %d is a value computed inside a loop body (pyresnet.while_loop, "
                           "fori_loop or a loop over a dataset) used outside that loop; return it "
                           "as a loop variable (in a loop over a dataset: give the variable a "
                           "value of the same shape before the loop)",
                           i);
        if (owner != (PyObject *)g)
            return pr_fail(op, PyExc_ValueError,
                           "input %d is a symbolic tensor of another traced function (it escaped "
                           "from that trace, e.g. stored on an object or a global); pass it as an "
                           "argument or return it instead",
                           i);
        return (int)PyLong_AsLong(PyTuple_GET_ITEM(tt->sym, 1));
    }
    PyObject *key = PyLong_FromVoidPtr(t);
    if (!key) return -1;
    PyObject *found = PyDict_GetItem(g->capture_ids, key);
    if (found) {
        Py_DECREF(key);
        return (int)PyLong_AsLong(found);
    }
    int id = add_value(g, &tt->v, PR_VAL_CAPTURE, (int)PyList_GET_SIZE(g->captures));
    PyObject *idobj = id >= 0 ? PyLong_FromLong(id) : NULL;
    int rc = idobj ? PyDict_SetItem(g->capture_ids, key, idobj) : -1;
    Py_XDECREF(idobj);
    Py_DECREF(key);
    if (rc < 0 || PyList_Append(g->captures, t) < 0) return -1;
    return id;
}

static int trace_call(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
                  PyObject **outputs) {
    pr_Graph *g = current;
    if (!g)
        return pr_fail(op, PyExc_ValueError,
                       "called on a symbolic tensor outside the function being traced: the tensor "
                       "escaped from a pyresnet.compile trace (e.g. stored on an object); return "
                       "it from the compiled function instead");
    pr_view in[PR_MAX_INPUTS], out[PR_MAX_OUTPUTS];
    int ids[PR_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        if ((op->mutates >> i & 1) && pr_is_symbolic(inputs[i]))
            return pr_fail(op, PyExc_TypeError,
                           "input %d is updated in place and must be a Variable, got a computed "
                           "(symbolic) tensor",
                           i);
        ids[i] = value_of(g, op, i, inputs[i]);
        if (ids[i] < 0) return -1;
        value_view(&g->vals[ids[i]], &in[i]);
    }
    size_t scratch;
    if (pr_infer(op, in, n_in, attrs, out, &scratch) < 0) return -1;
    pr_gnode *n = add_node(g);
    if (!n) return -1;
    int node = (int)(n - g->nodes);
    n->op = op;
    n->n_in = n_in;
    n->n_out = op->n_out;
    memcpy(n->attrs, attrs, op->attr_size); /* the rest stays zero (add_node) */
    for (int i = 0; i < n_in; i++) n->in[i] = ids[i];
    for (int i = 0; i < op->n_out; i++) {
        int id = add_value(g, &out[i], PR_VAL_NODE, node);
        if (id < 0) goto fail;
        g->nodes[node].out[i] = id;
    }
    if (op->known && op->n_out == 1) { /* e.g. a size from pyresnet.ops.shape */
        pr_gvalue *x = &g->vals[g->nodes[node].out[0]];
        x->known = op->known(in, n_in, attrs);
        x->has_known = x->known != PR_DIM_ERROR;
        PyErr_Clear();
    }
    for (int i = 0; i < op->n_out; i++) {
        outputs[i] = new_symbolic(g, g->nodes[node].out[i]);
        if (!outputs[i]) {
            for (int k = 0; k < i; k++) Py_CLEAR(outputs[k]);
            goto fail;
        }
    }
    return 0;
fail:
    g->n_nodes = node; /* drop the half-made node */
    return -1;
}

static int own_value(pr_Graph *g, PyObject *t);

static int trace_gradient_scope(PyObject *forward_output) {
    pr_Graph *g = current;
    int v = g ? own_value(g, forward_output) : -1;
    if (v < 0 || g->vals[v].kind != PR_VAL_NODE) return -1;
    int prev = g->scope; /* (nodes are in program order while tracing: index is valid) */
    g->scope = PR_SCOPE_GRADIENT | (g->nodes[g->vals[v].index].scope & ~PR_SCOPE_GRADIENT);
    return prev;
}

static void trace_restore_scope(int scope) {
    if (current && scope >= 0) current->scope = scope;
}

/* ---- the Graph type --------------------------------------------------------- */

static PyObject *Graph_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"parent", NULL};
    PyObject *parent = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:Graph", kwlist, &parent)) return NULL;
    if (parent != Py_None && (!PyObject_TypeCheck(parent, &pr_GraphType) ||
                              ((pr_Graph *)parent)->finalized)) {
        PyErr_SetString(PyExc_TypeError, "Graph(parent): parent must be a Graph being traced");
        return NULL;
    }
    pr_Graph *g = (pr_Graph *)type->tp_alloc(type, 0);
    if (!g) return NULL;
    g->captures = PyList_New(0);
    g->capture_ids = PyDict_New();
    g->callbacks = PyList_New(0);
    if (parent != Py_None) { /* a loop body: the parent's sizes are its sizes */
        Py_INCREF(parent);
        g->parent = (pr_Graph *)parent;
        g->syms = g->parent->syms;
        g->shared_syms = 1;
    } else {
        g->syms = pr_symtab_new();
    }
    if (!g->captures || !g->capture_ids || !g->callbacks || !g->syms) {
        Py_DECREF(g);
        return NULL;
    }
    return (PyObject *)g;
}

static int Graph_traverse(pr_Graph *g, visitproc visit, void *arg) {
    Py_VISIT(g->captures);
    Py_VISIT(g->capture_ids);
    Py_VISIT(g->callbacks);
    Py_VISIT(g->prev);
    Py_VISIT(g->parent);
    for (int k = 0; k < g->n_loops; k++) {
        Py_VISIT(g->loops[k].body);
        Py_VISIT(g->loops[k].feeder);
    }
    return 0;
}

static int Graph_clear(pr_Graph *g) {
    Py_CLEAR(g->captures);
    Py_CLEAR(g->capture_ids);
    Py_CLEAR(g->callbacks);
    Py_CLEAR(g->prev);
    /* The parent stays: a body uses its symbol table until it is freed. */
    for (int k = 0; k < g->n_loops; k++) {
        Py_CLEAR(g->loops[k].body);
        Py_CLEAR(g->loops[k].feeder);
    }
    return 0;
}

static void Graph_dealloc(pr_Graph *g) {
    PyObject_GC_UnTrack(g);
    Graph_clear(g);
    if (pr_graph_plans_free) pr_graph_plans_free(g);
    PyMem_Free(g->vals);
    PyMem_Free(g->nodes);
    PyMem_Free(g->loops);
    PyMem_Free(g->lifted);
    if (!g->shared_syms) pr_symtab_free(g->syms);
    Py_CLEAR(g->parent);
    PyMem_Free(g->outputs);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static int check_open(pr_Graph *g) {
    if (g->finalized) {
        PyErr_SetString(PyExc_RuntimeError, "Graph: already finalized");
        return -1;
    }
    return 0;
}

static int parse_dtype(PyObject *s, pr_dtype *d) {
    const char *name = PyUnicode_AsUTF8(s);
    if (!name) return -1;
    for (int k = 0; k < PR_N_DTYPES; k++)
        if (strcmp(name, pr_dtype_name((pr_dtype)k)) == 0) return *d = (pr_dtype)k, 0;
    PyErr_Format(PyExc_TypeError, "unknown dtype '%s'", name);
    return -1;
}

/* A new input value (an explicit one: not lifted from the parent). */
static PyObject *new_input(pr_Graph *g, const pr_view *v) {
    if (g->parent) {
        int *lifted = PyMem_Realloc(g->lifted, sizeof(int) * ((size_t)g->n_inputs + 1));
        if (!lifted) return PyErr_NoMemory();
        g->lifted = lifted;
        g->lifted[g->n_inputs] = -1;
    }
    int id = add_value(g, v, PR_VAL_INPUT, g->n_inputs);
    if (id < 0) return NULL;
    g->n_inputs++;
    return new_symbolic(g, id);
}

/* placeholder(dtype, shape) -> symbolic Tensor.  Each entry of `shape` is a
 * size (int >= 0) or the name (str) of a symbol of this graph: entries with
 * the same name are the same unknown size (e.g. "batch" in every input). */
static PyObject *Graph_placeholder(pr_Graph *g, PyObject *args) {
    PyObject *dtype_obj, *shape_obj;
    if (!PyArg_ParseTuple(args, "OO:placeholder", &dtype_obj, &shape_obj)) return NULL;
    if (check_open(g) < 0) return NULL;
    if (current != g) {
        PyErr_SetString(PyExc_RuntimeError, "Graph.placeholder: call begin() first");
        return NULL;
    }
    pr_view v;
    memset(&v, 0, sizeof v);
    if (parse_dtype(dtype_obj, &v.dtype) < 0) return NULL;
    PyObject *seq = PySequence_Fast(shape_obj, "placeholder: shape must be a sequence");
    if (!seq) return NULL;
    v.ndim = (int)PySequence_Fast_GET_SIZE(seq);
    if (v.ndim > PR_MAX_DIMS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "placeholder: rank %d > %d", v.ndim, PR_MAX_DIMS);
        return NULL;
    }
    for (int d = 0; d < v.ndim; d++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, d);
        if (PyUnicode_Check(item)) {
            const char *name = PyUnicode_AsUTF8(item);
            v.shape[d] = name ? pr_symtab_symbol(g->syms, name) : PR_DIM_ERROR;
        } else {
            v.shape[d] = PyLong_AsLongLong(item);
            if (v.shape[d] < 0 && !PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "placeholder: a size must be >= 0 or a name");
        }
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    return new_input(g, &v);
}

/* placeholder_like(tensor) -> symbolic Tensor: an input of this graph with
 * the tensor's dtype and traced shape (its unknown sizes are the same
 * symbols: a loop body's loop variable). */
static PyObject *Graph_placeholder_like(pr_Graph *g, PyObject *t) {
    if (check_open(g) < 0) return NULL;
    if (!pr_Tensor_Check(t)) {
        PyErr_Format(PyExc_TypeError, "placeholder_like: expected a Tensor, got %.80s",
                     Py_TYPE(t)->tp_name);
        return NULL;
    }
    pr_view v = ((pr_Tensor *)t)->v;
    v.data = NULL;
    return new_input(g, &v);
}

/* begin(): trace into this graph in this thread (nests). */
static PyObject *Graph_begin(pr_Graph *g, PyObject *noargs) {
    if (check_open(g) < 0) return NULL;
    if (g->tracing) {
        PyErr_SetString(PyExc_RuntimeError, "Graph: already being traced");
        return NULL;
    }
    Py_XINCREF(current);
    Py_XSETREF(g->prev, (PyObject *)current);
    set_current(g);
    g->tracing = 1;
    Py_RETURN_NONE;
}

static PyObject *Graph_end(pr_Graph *g, PyObject *noargs) {
    if (g->tracing && current == g) {
        set_current((pr_Graph *)g->prev); /* borrowed: its owner keeps it alive */
        Py_CLEAR(g->prev);
        g->tracing = 0;
    }
    Py_RETURN_NONE;
}

/* host_call(fn, tensors): append a node that calls fn(*numpy arrays) with the
 * GIL on every run (pyresnet.print). */
static const pr_op host_op = {.name = "host_callback", .flags = PR_OP_STATEFUL,
                              .doc = "A Python callback run on every call (pyresnet.print)."};

static PyObject *Graph_host_call(pr_Graph *g, PyObject *args) {
    PyObject *fn, *tensors;
    if (!PyArg_ParseTuple(args, "OO:host_call", &fn, &tensors)) return NULL;
    if (check_open(g) < 0) return NULL;
    PyObject *seq = PySequence_Fast(tensors, "host_call: tensors must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > PR_MAX_INPUTS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "pyresnet.print: at most %d tensors per call",
                     PR_MAX_INPUTS);
        return NULL;
    }
    int ids[PR_MAX_INPUTS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        if (!pr_Tensor_Check(t) || (ids[i] = value_of(g, &host_op, (int)i, t)) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "host_call: expected Tensors");
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    if (PyList_Append(g->callbacks, fn) < 0) return NULL;
    pr_gnode *node = add_node(g);
    if (!node) return NULL;
    node->op = &host_op;
    node->n_in = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) node->in[i] = ids[i];
    node->host = (int)PyList_GET_SIZE(g->callbacks) - 1;
    Py_RETURN_NONE;
}

/* ---- loops ------------------------------------------------------------------ */

static int loop_gradient(PyObject *const *in, PyObject *const *out, const void *attrs,
                         PyObject *const *gout, const int *needs, PyObject **gin) {
    PyErr_SetString(PyExc_NotImplementedError,
                    "gradients through a loop (pyresnet.while_loop, fori_loop or a loop over a "
                    "dataset in a compiled function) are not supported: take the gradient "
                    "inside the loop body (a GradientTape there, as a training loop does), or "
                    "write the loop in Python to unroll it");
    return -1;
}

const pr_op pr_loop_op = {
    .name = "loop", .n_in = -1, .flags = PR_OP_STATEFUL, .gradient = loop_gradient,
    .doc = "A loop node: runs its body graph once per iteration (pyresnet.while_loop, "
           "fori_loop, iterating a dataset in a compiled function)."};

static int same_value_layout(const pr_gvalue *a, const pr_gvalue *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return 0;
    return 1;
}

static void layout_str(pr_Graph *g, const pr_gvalue *x, char *buf, size_t n) {
    pr_view v = {.ndim = x->ndim};
    memcpy(v.shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    char s[160];
    snprintf(buf, n, "%s %s", pr_dtype_name(x->dtype), pr_shape_str_in(g->syms, &v, s, sizeof s));
}

/* An int list argument of add_loop; -1 and an exception when bad. */
static int int_items(PyObject *seq, int *out, int cap, const char *what) {
    PyObject *f = PySequence_Fast(seq, "add_loop: expected a sequence of ints");
    if (!f) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(f);
    if (n > cap) {
        Py_DECREF(f);
        PyErr_Format(PyExc_ValueError, "a loop may have at most %d %s, got %zd", cap, what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(f, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(f);
            return -1;
        }
    }
    Py_DECREF(f);
    return (int)n;
}

/* A bound of add_loop: an int (static) or a scalar Tensor (a node input). */
static int loop_bound(pr_Graph *g, PyObject *o, int64_t *value, int *in_pos, int *in_ids,
                      int *n_in) {
    *in_pos = -1;
    if (o == Py_None) return 0;
    if (pr_Tensor_Check(o)) {
        const pr_view *v = &((pr_Tensor *)o)->v;
        if (v->ndim != 0) {
            PyErr_SetString(PyExc_ValueError, "fori_loop: a bound must be a scalar");
            return -1;
        }
        int id = value_of(g, &pr_loop_op, *n_in, o);
        if (id < 0) return -1;
        *in_pos = *n_in;
        in_ids[(*n_in)++] = id;
        return 0;
    }
    *value = PyLong_AsLongLong(o);
    return *value == -1 && PyErr_Occurred() ? -1 : 0;
}

/* add_loop(body, inits, carry_in, carry_out, cond_out=-1, cond0=None,
 *          lower=None, upper=None, iter_in=-1, max_iter=-1, feeder=None,
 *          feed_in=(), feed_batch=0) -> [symbolic final values]
 * Append a loop node running `body` (a finalized Graph whose parent is this
 * graph).  Loop variable k starts as inits[k], is body input carry_in[k] and
 * becomes body output carry_out[k] after each iteration.  Body inputs lifted
 * from this graph are read unchanged.  The loop stops when body output
 * cond_out is zero, or (cond0) before the first iteration, after max_iter
 * iterations, after upper - lower (fori_loop: body input iter_in gets
 * lower + iteration), and with a feeder (called when a call is planned,
 * before it runs: -> (BatchIterator, first batch, count)) after count batches, which fill the
 * body inputs feed_in (batch dimension feed_batch: a size or a symbol name). */
static PyObject *Graph_add_loop(pr_Graph *g, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"body", "inits", "carry_in", "carry_out", "cond_out", "cond0",
                             "lower", "upper", "iter_in", "max_iter", "feeder", "feed_in",
                             "feed_batch", NULL};
    PyObject *body_obj, *inits, *carry_in, *carry_out, *cond0 = Py_None, *lower = Py_None;
    PyObject *upper = Py_None, *feeder = Py_None, *feed_in = NULL, *feed_batch = NULL;
    int cond_out = -1, iter_in = -1;
    long long max_iter = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|iOOOiLOOO:add_loop", kwlist, &body_obj,
                                     &inits, &carry_in, &carry_out, &cond_out, &cond0, &lower,
                                     &upper, &iter_in, &max_iter, &feeder, &feed_in, &feed_batch))
        return NULL;
    if (check_open(g) < 0) return NULL;
    if (!PyObject_TypeCheck(body_obj, &pr_GraphType) ||
        ((pr_Graph *)body_obj)->parent != g || !((pr_Graph *)body_obj)->finalized) {
        PyErr_SetString(PyExc_TypeError, "add_loop: body must be a finalized Graph(parent=this)");
        return NULL;
    }
    pr_Graph *body = (pr_Graph *)body_obj;
    for (int k = 0; k < body->n_loops; k++)
        if (body->loops[k].feeder) { /* its batches are fixed when a call is planned */
            PyErr_SetString(PyExc_ValueError,
                            "a loop over a dataset cannot run inside another loop; iterate the "
                            "dataset at the top level of the compiled function (each call "
                            "runs one pass)");
            return NULL;
        }
    pr_loop L;
    memset(&L, 0, sizeof L);
    L.iter_in = iter_in, L.cond_out = cond_out, L.cond0_in = -1, L.max_iter = max_iter;
    L.upper = -1;
    int in_ids[PR_NODE_MAX_IN], n_in = 0;
    PyObject *init_seq = PySequence_Fast(inits, "add_loop: inits must be a sequence");
    if (!init_seq) return NULL;
    int n = (int)PySequence_Fast_GET_SIZE(init_seq);
    int nci = int_items(carry_in, L.carry_in, PR_NODE_MAX_OUT, "loop variables");
    int nco = nci < 0 ? -1 : int_items(carry_out, L.carry_out, PR_NODE_MAX_OUT, "loop variables");
    L.n_feed = nco < 0 || !feed_in ? 0 : int_items(feed_in, L.feed_in, PR_MAX_INPUTS, "components");
    if (nci < 0 || nco < 0 || L.n_feed < 0) goto fail;
    if (n != nci || n != nco || n > PR_NODE_MAX_OUT) {
        PyErr_Format(PyExc_ValueError, "add_loop: %d initial values, %d carried inputs and %d "
                     "carried outputs (at most %d)", n, nci, nco, PR_NODE_MAX_OUT);
        goto fail;
    }
    L.n_carry = n;
    char *role = PyMem_Calloc((size_t)body->n_inputs + 1, 1);
    if (!role) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int k = 0; k < n; k++) {
        PyObject *t = PySequence_Fast_GET_ITEM(init_seq, k);
        int ci = L.carry_in[k], co = L.carry_out[k];
        if (!pr_Tensor_Check(t) || ci < 0 || ci >= body->n_inputs || role[ci] || co < 0 ||
            co >= body->n_outputs) {
            PyErr_Format(PyExc_ValueError, "add_loop: bad loop variable %d", k);
            goto fail_role;
        }
        role[ci] = 1;
        int id = value_of(g, &pr_loop_op, k, t);
        if (id < 0) goto fail_role;
        in_ids[n_in++] = id;
        pr_gvalue *a = &g->vals[id], *b = &body->vals[body->outputs[co]];
        if (!same_value_layout(a, &body->vals[pr_graph_input_value(body, ci)]) ||
            !same_value_layout(a, b)) {
            char sa[200], sb[200];
            layout_str(g, a, sa, sizeof sa);
            layout_str(g, b, sb, sizeof sb);
            PyErr_Format(PyExc_ValueError,
                         "loop variable %d enters the loop as %s but the body returns %s; a loop "
                         "variable keeps its dtype and shape (pass a value of the final shape "
                         "and dtype as the initial value)", k, sa, sb);
            goto fail_role;
        }
    }
    for (int k = 0; k < L.n_feed; k++) {
        if (L.feed_in[k] < 0 || L.feed_in[k] >= body->n_inputs || role[L.feed_in[k]]) {
            PyErr_Format(PyExc_ValueError, "add_loop: bad fed input %d", L.feed_in[k]);
            goto fail_role;
        }
        role[L.feed_in[k]] = 1;
    }
    if (iter_in >= 0) {
        if (iter_in >= body->n_inputs || role[iter_in]) {
            PyErr_SetString(PyExc_ValueError, "add_loop: bad iteration input");
            goto fail_role;
        }
        role[iter_in] = 1;
    }
    for (int i = 0; i < body->n_inputs; i++) {
        if (role[i]) continue;
        if (!body->lifted || body->lifted[i] < 0) {
            PyErr_Format(PyExc_ValueError, "add_loop: body input %d has no value", i);
            goto fail_role;
        }
        if (n_in >= PR_NODE_MAX_IN - 3) {
            PyErr_Format(PyExc_ValueError,
                         "a loop body may read at most %d tensors of the enclosing function "
                         "besides its loop variables", PR_NODE_MAX_IN - 3 - n);
            goto fail_role;
        }
        L.const_in[L.n_const++] = i;
        in_ids[n_in++] = body->lifted[i];
    }
    PyMem_Free(role);
    role = NULL;
    if (cond_out >= body->n_outputs) {
        PyErr_SetString(PyExc_ValueError, "add_loop: bad cond_out");
        goto fail;
    }
    if (cond0 != Py_None) {
        int id = pr_Tensor_Check(cond0) ? value_of(g, &pr_loop_op, n_in, cond0) : -1;
        if (id < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "add_loop: cond0 must be a Tensor");
            goto fail;
        }
        L.cond0_in = n_in;
        in_ids[n_in++] = id;
    }
    if (loop_bound(g, lower, &L.lower, &L.lower_in, in_ids, &n_in) < 0 ||
        loop_bound(g, upper, &L.upper, &L.upper_in, in_ids, &n_in) < 0)
        goto fail;
    if (feeder != Py_None) {
        if (!PyCallable_Check(feeder) || L.n_feed < 1) {
            PyErr_SetString(PyExc_TypeError, "add_loop: feeder must be callable, with feed_in");
            goto fail;
        }
        L.feed_batch = 0;
        if (feed_batch && PyUnicode_Check(feed_batch)) {
            const char *name = PyUnicode_AsUTF8(feed_batch);
            if (!name) goto fail;
            L.feed_batch = pr_symtab_symbol(g->syms, name);
        } else if (feed_batch) {
            L.feed_batch = PyLong_AsLongLong(feed_batch);
            if (PyErr_Occurred()) goto fail;
        }
        Py_INCREF(feeder);
        L.feeder = feeder;
    }
    pr_loop *loops = PyMem_Realloc(g->loops, sizeof(pr_loop) * ((size_t)g->n_loops + 1));
    if (!loops) {
        Py_XDECREF(L.feeder);
        PyErr_NoMemory();
        goto fail;
    }
    g->loops = loops;
    Py_INCREF(body);
    L.body = body;
    g->loops[g->n_loops++] = L;
    pr_gnode *node = add_node(g);
    if (!node) goto fail; /* the loop entry stays, unused */
    int j = (int)(node - g->nodes);
    node->op = &pr_loop_op;
    node->loop = g->n_loops - 1;
    node->n_in = n_in;
    memcpy(node->in, in_ids, sizeof(int) * (size_t)n_in);
    node->n_out = n;
    PyObject *outs = PyList_New(n);
    if (!outs) goto fail;
    for (int k = 0; k < n; k++) {
        pr_view v;
        value_view(&g->vals[in_ids[k]], &v);
        int id = add_value(g, &v, PR_VAL_NODE, j);
        PyObject *o = id < 0 ? NULL : new_symbolic(g, id);
        if (!o) {
            Py_DECREF(outs);
            goto fail;
        }
        g->nodes[j].out[k] = id;
        PyList_SET_ITEM(outs, k, o);
    }
    /* On the tapes, so a gradient asked through the loop raises (loop_gradient). */
    PyObject *rec_in[PR_MAX_INPUTS], *rec_out[PR_MAX_OUTPUTS];
    int n_rec_in = n < PR_MAX_INPUTS ? n : PR_MAX_INPUTS;
    int n_rec_out = n < PR_MAX_OUTPUTS ? n : PR_MAX_OUTPUTS;
    for (int k = 0; k < n_rec_in; k++) rec_in[k] = PySequence_Fast_GET_ITEM(init_seq, k);
    /* and the trainable Variables the body reads, so that a gradient with
     * respect to one of them through the loop raises too */
    for (Py_ssize_t c = 0; c < PyList_GET_SIZE(body->captures) && n_rec_in < PR_MAX_INPUTS; c++) {
        PyObject *t = PyList_GET_ITEM(body->captures, c);
        if (((pr_Tensor *)t)->trainable) rec_in[n_rec_in++] = t;
    }
    for (int k = 0; k < n_rec_out; k++) rec_out[k] = PyList_GET_ITEM(outs, k);
    PR_ATTR_ALIGN char no_attrs[PR_ATTR_BYTES] = {0};
    if (n_rec_in && pr_tape_record(&pr_loop_op, rec_in, n_rec_in, no_attrs, rec_out, n_rec_out) < 0) {
        Py_DECREF(outs);
        goto fail;
    }
    Py_DECREF(init_seq);
    return outs;
fail_role:
    PyMem_Free(role);
fail:
    Py_DECREF(init_seq);
    return NULL;
}

/* finalize(outputs, jit) -> None.  `outputs` are Tensors: symbolic ones of this
 * graph or real ones (captured).  Runs the passes. */
static PyObject *Graph_finalize(pr_Graph *g, PyObject *args) {
    PyObject *outs;
    int jit;
    if (!PyArg_ParseTuple(args, "Op:finalize", &outs, &jit)) return NULL;
    if (check_open(g) < 0) return NULL;
    PyObject *seq = PySequence_Fast(outs, "finalize: outputs must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    g->outputs = PyMem_Calloc((size_t)n + 1, sizeof(int));
    if (!g->outputs) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        int id = pr_Tensor_Check(t) ? value_of(g, &host_op, (int)i, t) : -1;
        if (id < 0) {
            Py_DECREF(seq);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "finalize: expected Tensors");
            return NULL;
        }
        g->outputs[i] = id;
    }
    g->n_outputs = (int)n;
    Py_DECREF(seq);
    g->jit = jit;
    if (pr_graph_passes(g, jit) < 0) return NULL;
    g->finalized = 1;
    Py_RETURN_NONE;
}

/* A traced shape as a tuple: ints, and symbolic dimensions as their text. */
static PyObject *shape_tuple(pr_Graph *g, int ndim, const int64_t *shape) {
    PyObject *s = PyTuple_New(ndim);
    for (int d = 0; s && d < ndim; d++) {
        char buf[128];
        PyObject *x = pr_dim_is_sym(shape[d])
                          ? PyUnicode_FromString(pr_dim_str(g->syms, shape[d], buf, sizeof buf))
                          : PyLong_FromLongLong(shape[d]);
        if (!x) Py_CLEAR(s);
        else PyTuple_SET_ITEM(s, d, x);
    }
    return s;
}

static PyObject *int_list(const int *v, int n) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (!x) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, x);
    }
    return l;
}

/* values() -> list of (kind, dtype, traced shape, index). */
static PyObject *Graph_values(pr_Graph *g, PyObject *noargs) {
    static const char *kinds[] = {"input", "capture", "node"};
    PyObject *l = PyList_New(g->n_vals);
    for (int i = 0; l && i < g->n_vals; i++) {
        pr_gvalue *x = &g->vals[i];
        PyObject *item = Py_BuildValue("(ssNi)", kinds[x->kind], pr_dtype_name(x->dtype),
                                       shape_tuple(g, x->ndim, x->shape), x->index);
        if (!item) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, item);
    }
    return l;
}

/* nodes() -> list of (op name, input ids, output ids). */
static PyObject *Graph_nodes(pr_Graph *g, PyObject *noargs) {
    PyObject *l = PyList_New(g->n_nodes);
    for (int j = 0; l && j < g->n_nodes; j++) {
        pr_gnode *n = &g->nodes[j];
        PyObject *item = Py_BuildValue("(sNN)", n->op->name, int_list(n->in, n->n_in),
                                       int_list(n->out, n->n_out));
        if (!item) Py_CLEAR(l);
        else PyList_SET_ITEM(l, j, item);
    }
    return l;
}

/* node_scopes() -> per node, the scope index it was traced under. */
static PyObject *Graph_node_scopes(pr_Graph *g, PyObject *noargs) {
    PyObject *l = PyList_New(g->n_nodes);
    for (int j = 0; l && j < g->n_nodes; j++) {
        PyObject *x = PyLong_FromLong(g->nodes[j].scope);
        if (!x) Py_CLEAR(l);
        else PyList_SET_ITEM(l, j, x);
    }
    return l;
}

static PyObject *Graph_get_scope(pr_Graph *g, void *c) { return PyLong_FromLong(g->scope); }
static int Graph_set_scope(pr_Graph *g, PyObject *v, void *c) {
    long x = v ? PyLong_AsLong(v) : -1;
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < 0 || x >= PR_SCOPE_GRADIENT) {
        PyErr_SetString(PyExc_ValueError, "Graph.scope: expected an int in [0, 2**30)");
        return -1;
    }
    g->scope = (int)x;
    return 0;
}

static PyObject *Graph_get_outputs(pr_Graph *g, void *c) { return int_list(g->outputs, g->n_outputs); }
static PyObject *Graph_get_captures(pr_Graph *g, void *c) {
    Py_INCREF(g->captures);
    return g->captures;
}
static PyObject *Graph_get_symbols(pr_Graph *g, void *c) {
    int n = pr_symtab_n_symbols(g->syms);
    PyObject *l = PyList_New(n);
    for (int k = 0; l && k < n; k++) {
        PyObject *x = PyUnicode_FromString(pr_symtab_symbol_name(g->syms, k));
        if (!x) Py_CLEAR(l);
        else PyList_SET_ITEM(l, k, x);
    }
    return l;
}
/* The value id of a symbolic tensor of this graph, or -1. */
static int own_value(pr_Graph *g, PyObject *t) {
    if (!pr_Tensor_Check(t) || !((pr_Tensor *)t)->sym) return -1;
    PyObject *sym = ((pr_Tensor *)t)->sym;
    if (PyTuple_GET_ITEM(sym, 0) != (PyObject *)g) return -1;
    return (int)PyLong_AsLong(PyTuple_GET_ITEM(sym, 1));
}

/* input_index(t) -> the input position of symbolic tensor t of this graph
 * (a placeholder or a lifted value), else -1. */
static PyObject *Graph_input_index(pr_Graph *g, PyObject *t) {
    int v = own_value(g, t);
    if (v < 0 && pr_Tensor_Check(t) && ((pr_Tensor *)t)->sym && g->parent) {
        PyObject *found = PyDict_GetItem(g->capture_ids, ((pr_Tensor *)t)->sym); /* lifted */
        if (found) v = (int)PyLong_AsLong(found);
    }
    return PyLong_FromLong(v >= 0 && g->vals[v].kind == PR_VAL_INPUT ? g->vals[v].index : -1);
}

/* owns(t, enclosing=False) -> whether t is a symbolic tensor of this graph
 * (or, with enclosing, of a graph this loop body is nested in). */
static PyObject *Graph_owns(pr_Graph *g, PyObject *args) {
    PyObject *t;
    int enclosing = 0;
    if (!PyArg_ParseTuple(args, "O|p:owns", &t, &enclosing)) return NULL;
    if (!pr_Tensor_Check(t) || !((pr_Tensor *)t)->sym) Py_RETURN_FALSE;
    PyObject *owner = PyTuple_GET_ITEM(((pr_Tensor *)t)->sym, 0);
    for (pr_Graph *a = g; a; a = enclosing ? a->parent : NULL)
        if ((PyObject *)a == owner) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyObject *Graph_get_bodies(pr_Graph *g, void *c) {
    PyObject *l = PyList_New(g->n_loops);
    for (int k = 0; l && k < g->n_loops; k++) {
        PyObject *b = g->loops[k].body ? (PyObject *)g->loops[k].body : Py_None;
        Py_INCREF(b);
        PyList_SET_ITEM(l, k, b);
    }
    return l;
}
static PyObject *Graph_get_n_inputs(pr_Graph *g, void *c) { return PyLong_FromLong(g->n_inputs); }
static PyObject *Graph_get_passes(pr_Graph *g, void *c) {
    return Py_BuildValue("{s:i,s:i}", "removed", g->n_removed, "fused", g->n_fused);
}

/* suspend() -> token; resume(token): stop tracing in this thread for a while
 * (pyresnet.init_scope: create variables from concrete values mid-trace). */
static PyObject *py_trace_suspend(PyObject *self, PyObject *noargs) {
    PyObject *token = current ? (PyObject *)current : Py_None;
    Py_INCREF(token);
    set_current(NULL);
    return token;
}

static PyObject *py_trace_resume(PyObject *self, PyObject *token) {
    if (token != Py_None && !PyObject_TypeCheck(token, &pr_GraphType)) {
        PyErr_SetString(PyExc_TypeError, "trace_resume: expected a token from trace_suspend");
        return NULL;
    }
    set_current(token == Py_None ? NULL : (pr_Graph *)token); /* kept alive by its tracer */
    Py_RETURN_NONE;
}

static PyObject *py_tracing(PyObject *self, PyObject *noargs) { return PyBool_FromLong(current != NULL); }

static PyMethodDef Graph_methods[] = {
    {"placeholder", (PyCFunction)Graph_placeholder, METH_VARARGS,
     "placeholder(dtype, shape) -> symbolic Tensor (a graph input); str entries are symbols."},
    {"begin", (PyCFunction)Graph_begin, METH_NOARGS, "Trace op calls of this thread into the graph."},
    {"end", (PyCFunction)Graph_end, METH_NOARGS, "Stop tracing into the graph."},
    {"input_index", (PyCFunction)Graph_input_index, METH_O,
     "input_index(t) -> input position of symbolic tensor t of this graph, or -1."},
    {"owns", (PyCFunction)Graph_owns, METH_VARARGS,
     "owns(t, enclosing=False) -> whether t is a symbolic tensor of this graph (or an enclosing one)."},
    {"placeholder_like", (PyCFunction)Graph_placeholder_like, METH_O,
     "placeholder_like(tensor) -> symbolic Tensor: an input of that dtype and traced shape."},
    {"add_loop", (PyCFunction)(void (*)(void))Graph_add_loop, METH_VARARGS | METH_KEYWORDS,
     "add_loop(body, inits, carry_in, carry_out, ...) -> final values: append a loop node."},
    {"host_call", (PyCFunction)Graph_host_call, METH_VARARGS,
     "host_call(fn, tensors): call fn(*arrays) on every run (with the GIL)."},
    {"finalize", (PyCFunction)Graph_finalize, METH_VARARGS,
     "finalize(outputs, jit): set the outputs and run the graph passes."},
    {"values", (PyCFunction)Graph_values, METH_NOARGS, "[(kind, dtype, shape, index)] per value."},
    {"nodes", (PyCFunction)Graph_nodes, METH_NOARGS, "[(op, input ids, output ids)] per node."},
    {"node_scopes", (PyCFunction)Graph_node_scopes, METH_NOARGS,
     "[scope index] per node: the graph's `scope` when it was traced."},
    {NULL}};

static PyGetSetDef Graph_getset[] = {
    {"outputs", (getter)Graph_get_outputs, NULL, "Value ids of the outputs.", NULL},
    {"captures", (getter)Graph_get_captures, NULL, "Captured real tensors (by reference).", NULL},
    {"symbols", (getter)Graph_get_symbols, NULL, "Names of the unknown sizes, in binding order.",
     NULL},
    {"bodies", (getter)Graph_get_bodies, NULL, "The loop bodies (Graphs), in loop order.", NULL},
    {"n_inputs", (getter)Graph_get_n_inputs, NULL, "Inputs (placeholders and lifted values).",
     NULL},
    {"scope", (getter)Graph_get_scope, (setter)Graph_set_scope,
     "Scope index (int >= 0) given to the nodes traced from now on (pyresnet.name_scope).", NULL},
    {"passes", (getter)Graph_get_passes, NULL, "What the passes did: removed/fused/inplace.", NULL},
    {NULL}};

PyTypeObject pr_GraphType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyresnet._C.Graph",
    .tp_basicsize = sizeof(pr_Graph),
    .tp_dealloc = (destructor)Graph_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Graph(): a traced graph of op calls (driven by pyresnet.compile).",
    .tp_traverse = (traverseproc)Graph_traverse,
    .tp_clear = (inquiry)Graph_clear,
    .tp_methods = Graph_methods,
    .tp_getset = Graph_getset,
    .tp_new = Graph_new,
};

static PyMethodDef module_methods[] = {
    {"trace_suspend", py_trace_suspend, METH_NOARGS, "Pause tracing in this thread -> token."},
    {"trace_resume", py_trace_resume, METH_O, "Resume the trace paused by trace_suspend."},
    {"tracing", py_tracing, METH_NOARGS, "Whether this thread is tracing a graph."},
    {NULL}};

int pr_graph_init(PyObject *module) {
    if (PyType_Ready(&pr_GraphType) < 0) return -1;
    Py_INCREF(&pr_GraphType);
    if (PyModule_AddObject(module, "Graph", (PyObject *)&pr_GraphType) < 0) {
        Py_DECREF(&pr_GraphType);
        return -1;
    }
    if (PyModule_AddFunctions(module, module_methods) < 0) return -1;
    pr_hooks.tracing_active = tracing_active;
    pr_hooks.trace_call = trace_call;
    pr_hooks.trace_known_value = trace_known_value;
    pr_hooks.trace_size_arith = trace_size_arith;
    pr_hooks.trace_gradient_scope = trace_gradient_scope;
    pr_hooks.trace_restore_scope = trace_restore_scope;
    pr_hooks.symtab_of = symtab_of;
    return 0;
}
