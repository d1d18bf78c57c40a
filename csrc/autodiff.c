/* Reverse-mode autodiff: a tape of op calls and the walk that applies the
 * registry's gradient rules backwards.  The same code serves eager tensors
 * and, while tracing, symbolic ones: gradient rules call ops through
 * pr_call, which appends graph nodes when its inputs are symbolic.
 *
 * Semantics follow tf.GradientTape: trainable Variables are watched
 * automatically, other tensors through watch(); a non-persistent tape can
 * compute gradients once; unconnected sources get None.
 */
#include "ops.h" /* Python.h first */
#include "op_list.h"

#include <string.h>

typedef struct {
    const pr_op *op;
    PR_ATTR_ALIGN char attrs[PR_ATTR_BYTES];
    int n_in, n_out;
    PyObject *in[PR_MAX_INPUTS];
    PyObject *out[PR_MAX_OUTPUTS];
    uint64_t version[PR_MAX_INPUTS + PR_MAX_OUTPUTS]; /* of in, then out, when recorded */
} tape_entry;

typedef struct {
    PyObject_HEAD
    tape_entry *entries;
    Py_ssize_t n, cap;
    PyObject *watched; /* dict: id(tensor) -> tensor; outputs of recorded ops join it */
    int persistent;
    int used;          /* a non-persistent tape has computed its gradient */
    int active;
} pr_Tape;

static PyTypeObject pr_TapeType;

/* The tapes recording in this thread, innermost last. */
static _Thread_local PyObject *active_tapes;

static PyObject *key_of(PyObject *t) { return PyLong_FromVoidPtr(t); }

static int is_watched(pr_Tape *tape, PyObject *t) {
    if (((pr_Tensor *)t)->trainable) return 1;
    PyObject *k = key_of(t);
    if (!k) return -1;
    int r = PyDict_Contains(tape->watched, k);
    Py_DECREF(k);
    return r;
}

static int watch(pr_Tape *tape, PyObject *t) {
    PyObject *k = key_of(t);
    if (!k) return -1;
    int r = PyDict_SetItem(tape->watched, k, t);
    Py_DECREF(k);
    return r;
}

static int tape_record(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
                       PyObject *const *outputs, int n_out) {
    if (!active_tapes || PyList_GET_SIZE(active_tapes) == 0) return 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(active_tapes); k++) {
        pr_Tape *tape = (pr_Tape *)PyList_GET_ITEM(active_tapes, k);
        int any = 0;
        for (int i = 0; i < n_in && !any; i++) {
            if (!pr_dtype_is_float(((pr_Tensor *)inputs[i])->v.dtype)) continue;
            int w = is_watched(tape, inputs[i]);
            if (w < 0) return -1;
            any = w;
        }
        if (!any) continue;
        if (tape->n == tape->cap) {
            Py_ssize_t cap = tape->cap ? 2 * tape->cap : 64;
            tape_entry *e = PyMem_Realloc(tape->entries, sizeof(tape_entry) * (size_t)cap);
            if (!e) return PyErr_NoMemory(), -1;
            tape->entries = e;
            tape->cap = cap;
        }
        tape_entry *e = &tape->entries[tape->n++];
        e->op = op;
        memset(e->attrs, 0, PR_ATTR_BYTES); /* attrs may be a small struct of a gradient rule */
        memcpy(e->attrs, attrs, op->attr_size);
        e->n_in = n_in;
        e->n_out = n_out;
        for (int i = 0; i < n_in; i++) Py_INCREF(e->in[i] = inputs[i]);
        for (int i = 0; i < n_out; i++) Py_INCREF(e->out[i] = outputs[i]);
        for (int i = 0; i < n_in + n_out; i++)
            e->version[i] = ((pr_Tensor *)(i < n_in ? inputs[i] : outputs[i - n_in]))->version;
        for (int i = 0; i < n_out; i++)
            if (pr_dtype_is_float(((pr_Tensor *)outputs[i])->v.dtype) && watch(tape, outputs[i]) < 0)
                return -1;
    }
    return 0;
}

static void tape_clear(pr_Tape *tape) {
    for (Py_ssize_t j = 0; j < tape->n; j++) {
        tape_entry *e = &tape->entries[j];
        for (int i = 0; i < e->n_in; i++) Py_DECREF(e->in[i]);
        for (int i = 0; i < e->n_out; i++) Py_DECREF(e->out[i]);
    }
    tape->n = 0;
    if (tape->watched) PyDict_Clear(tape->watched);
}

/* Add g into grads[t] (summing where a tensor feeds several ops). */
static int accumulate(PyObject *grads, PyObject *t, PyObject *g) {
    PyObject *k = key_of(t);
    if (!k) return -1;
    PyObject *old = PyDict_GetItem(grads, k);
    int rc;
    if (old) {
        PyObject *pair[2] = {old, g};
        PyObject *sum = pr_call1(&pr_op_add, pair, 2, NULL);
        rc = sum ? PyDict_SetItem(grads, k, sum) : -1;
        Py_XDECREF(sum);
    } else {
        rc = PyDict_SetItem(grads, k, g);
    }
    Py_DECREF(k);
    return rc;
}

static int in_set(PyObject *set, PyObject *t) {
    PyObject *k = key_of(t);
    if (!k) return -1;
    int r = PySet_Contains(set, k);
    Py_DECREF(k);
    return r;
}

static int add_to_set(PyObject *set, PyObject *t) {
    PyObject *k = key_of(t);
    if (!k) return -1;
    int r = PySet_Add(set, k);
    Py_DECREF(k);
    return r;
}

/* A gradient rule reads the recorded tensors' values: refuse when one was
 * updated in place since (an optimizer step, assign), rather than return
 * gradients of values the forward pass never saw. */
static int check_versions(const tape_entry *e) {
    for (int i = 0; i < e->n_in + e->n_out; i++) {
        PyObject *t = i < e->n_in ? e->in[i] : e->out[i - e->n_in];
        if (((pr_Tensor *)t)->version != e->version[i]) {
            char s[160];
            PyErr_Format(PyExc_RuntimeError,
                         "GradientTape.gradient: %s %d of the recorded '%s' (shape %s) was "
                         "updated in place after the op was recorded, so its gradient cannot be "
                         "computed; update variables after tape.gradient",
                         i < e->n_in ? "input" : "output", i < e->n_in ? i : i - e->n_in,
                         e->op->name, pr_shape_str(&((pr_Tensor *)t)->v, s, sizeof s));
            return -1;
        }
    }
    return 0;
}

/* Seed grads[target] with d target / d target: ones, or `given` (the
 * caller's output gradient), which must be float32 of the target's shape:
 * the gradient rules rely on every gradient having its tensor's shape. */
static int seed_target(PyObject *grads, PyObject *target, PyObject *given) {
    if (!pr_Tensor_Check(target)) {
        PyErr_Format(PyExc_TypeError, "GradientTape.gradient: target must be a Tensor, got %.80s",
                     Py_TYPE(target)->tp_name);
        return -1;
    }
    PyObject *g = given == Py_None
                      ? pr_call1(&pr_op_ones_like, &target, 1, NULL)
                      : (PyObject *)pr_tensor_from_arg(given, "GradientTape.gradient",
                                                       "output_gradients");
    if (!g) return -1;
    const pr_view *t = &((pr_Tensor *)target)->v, *v = &((pr_Tensor *)g)->v;
    int same = v->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = v->shape[d] == t->shape[d];
    char st[160], sv[160];
    if (v->dtype != PR_F32)
        PyErr_Format(PyExc_TypeError,
                     "GradientTape.gradient: output_gradients must be float32, got %s",
                     pr_dtype_name(v->dtype));
    else if (!same)
        PyErr_Format(PyExc_ValueError,
                     "GradientTape.gradient: output_gradients has shape %s, expected the "
                     "target's shape %s",
                     pr_shape_str(v, sv, sizeof sv), pr_shape_str(t, st, sizeof st));
    int rc = v->dtype == PR_F32 && same ? accumulate(grads, target, g) : -1;
    Py_DECREF(g);
    return rc;
}

/* Seed every target: `target` is a Tensor or a list of Tensors (whose sum
 * is differentiated, as TensorFlow does); `given` is None, or the output
 * gradient(s) in the same structure. */
static int seed_targets(PyObject *grads, PyObject *target, PyObject *given) {
    if (pr_Tensor_Check(target) || !PyList_Check(target)) return seed_target(grads, target, given);
    Py_ssize_t n = PyList_GET_SIZE(target);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "GradientTape.gradient: target is an empty list");
        return -1;
    }
    if (given != Py_None && (!PyList_Check(given) || PyList_GET_SIZE(given) != n)) {
        PyErr_Format(PyExc_ValueError,
                     "GradientTape.gradient: output_gradients must be a list of %zd gradients, "
                     "one per target, got %.80s", n, Py_TYPE(given)->tp_name);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (seed_target(grads, PyList_GET_ITEM(target, i),
                        given == Py_None ? Py_None : PyList_GET_ITEM(given, i)) < 0)
            return -1;
    return 0;
}

/* tape.gradient(target (Tensor or list of Tensors), sources: list,
 *               output_gradient=None) -> list */
static PyObject *Tape_gradient(pr_Tape *tape, PyObject *args) {
    PyObject *target, *sources, *seed = Py_None;
    if (!PyArg_ParseTuple(args, "OO|O:gradient", &target, &sources, &seed)) return NULL;
    if (tape->used) {
        PyErr_SetString(PyExc_RuntimeError,
                        "GradientTape.gradient can only be called once on a non-persistent tape; "
                        "create it with GradientTape(persistent=True) to call it again");
        return NULL;
    }
    if (tape->active) {
        PyErr_SetString(PyExc_RuntimeError,
                        "GradientTape.gradient was called inside the tape's `with` block; call it "
                        "after the block ends");
        return NULL;
    }
    PyObject *src = PySequence_Fast(sources, "GradientTape.gradient: sources must be a list");
    if (!src) return NULL;
    Py_ssize_t n_src = PySequence_Fast_GET_SIZE(src);
    PyObject *grads = PyDict_New(), *relevant = PySet_New(NULL), *result = NULL;
    if (!grads || !relevant) goto done;
    for (Py_ssize_t i = 0; i < n_src; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(src, i);
        if (!pr_Tensor_Check(s)) {
            PyErr_Format(PyExc_TypeError,
                         "GradientTape.gradient: source %zd must be a Tensor or Variable, got %.80s",
                         i, Py_TYPE(s)->tp_name);
            goto done;
        }
        int w = is_watched(tape, s); /* unwatched sources get None, as in TF */
        if (w < 0 || (w && add_to_set(relevant, s) < 0)) goto done;
    }
    /* Forward sweep: which tensors depend on a source. */
    for (Py_ssize_t j = 0; j < tape->n; j++) {
        tape_entry *e = &tape->entries[j];
        int dep = 0;
        for (int i = 0; i < e->n_in && !dep; i++) {
            dep = in_set(relevant, e->in[i]);
            if (dep < 0) goto done;
        }
        for (int i = 0; dep && i < e->n_out; i++)
            if (add_to_set(relevant, e->out[i]) < 0) goto done;
    }
    if (seed_targets(grads, target, seed) < 0) goto done;
    /* Backward sweep. */
    for (Py_ssize_t j = tape->n - 1; j >= 0; j--) {
        tape_entry *e = &tape->entries[j];
        PyObject *gout[PR_MAX_OUTPUTS] = {0}, *gin[PR_MAX_INPUTS] = {0};
        int needs[PR_MAX_INPUTS] = {0}, any_out = 0, any_need = 0;
        for (int i = 0; i < e->n_out; i++) {
            PyObject *k = key_of(e->out[i]);
            if (!k) goto done;
            gout[i] = PyDict_GetItem(grads, k); /* borrowed */
            Py_DECREF(k);
            any_out |= gout[i] != NULL;
        }
        if (!any_out) continue;
        for (int i = 0; i < e->n_in; i++) {
            int r = in_set(relevant, e->in[i]);
            if (r < 0) goto done;
            needs[i] = r && pr_dtype_is_float(((pr_Tensor *)e->in[i])->v.dtype);
            any_need |= needs[i];
        }
        if (!any_need) continue;
        if (check_versions(e) < 0) goto done;
        if (!e->op->gradient) { /* PR_OP_NO_GRADIENT_RULE */
            PyErr_Format(PyExc_NotImplementedError,
                         "GradientTape.gradient: the gradient must pass through '%s', a backward "
                         "op without a gradient rule of its own (a higher-order derivative of "
                         "it is not implemented); differentiate once, or use ops with "
                         "second-order rules",
                         e->op->name);
            goto done;
        }
        /* The borrowed gout may be replaced in `grads` by accumulate below. */
        for (int i = 0; i < e->n_out; i++) Py_XINCREF(gout[i]);
        int scope = pr_trace_gradient_scope(e->out[0]); /* traced: "gradient_tape/<layer>" */
        int rc = e->op->gradient(e->in, e->out, e->attrs, gout, needs, gin);
        pr_trace_restore_scope(scope);
        for (int i = 0; i < e->n_out; i++) Py_XDECREF(gout[i]);
        if (rc < 0) {
            for (int i = 0; i < e->n_in; i++) Py_XDECREF(gin[i]);
            goto done;
        }
        for (int i = 0; i < e->n_in; i++) {
            if (!gin[i]) continue;
            rc = needs[i] ? accumulate(grads, e->in[i], gin[i]) : 0;
            Py_DECREF(gin[i]);
            if (rc < 0) {
                for (int k = i + 1; k < e->n_in; k++) Py_XDECREF(gin[k]);
                goto done;
            }
        }
    }
    result = PyList_New(n_src);
    if (!result) goto done;
    for (Py_ssize_t i = 0; i < n_src; i++) {
        PyObject *k = key_of(PySequence_Fast_GET_ITEM(src, i));
        if (!k) {
            Py_CLEAR(result);
            goto done;
        }
        PyObject *g = PyDict_GetItem(grads, k);
        Py_DECREF(k);
        if (!g) g = Py_None;
        Py_INCREF(g);
        PyList_SET_ITEM(result, i, g);
    }
    if (!tape->persistent) {
        tape->used = 1;
        tape_clear(tape);
    }
done:
    Py_DECREF(src);
    Py_XDECREF(grads);
    Py_XDECREF(relevant);
    return result;
}

static PyObject *Tape_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    int persistent = 0;
    static char *kwlist[] = {"persistent", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:Tape", kwlist, &persistent)) return NULL;
    pr_Tape *tape = (pr_Tape *)type->tp_alloc(type, 0);
    if (!tape) return NULL;
    tape->persistent = persistent;
    tape->watched = PyDict_New();
    if (!tape->watched) {
        Py_DECREF(tape);
        return NULL;
    }
    return (PyObject *)tape;
}

static PyObject *Tape_push(pr_Tape *tape, PyObject *noargs) {
    if (!active_tapes && !(active_tapes = PyList_New(0))) return NULL;
    if (tape->active) {
        PyErr_SetString(PyExc_RuntimeError, "GradientTape is already recording");
        return NULL;
    }
    if (PyList_Append(active_tapes, (PyObject *)tape) < 0) return NULL;
    tape->active = 1;
    Py_RETURN_NONE;
}

static PyObject *Tape_pop(pr_Tape *tape, PyObject *noargs) {
    if (!tape->active || !active_tapes) Py_RETURN_NONE;
    for (Py_ssize_t k = PyList_GET_SIZE(active_tapes) - 1; k >= 0; k--) {
        if (PyList_GET_ITEM(active_tapes, k) == (PyObject *)tape) {
            if (PySequence_DelItem(active_tapes, k) < 0) return NULL;
            break;
        }
    }
    tape->active = 0;
    Py_RETURN_NONE;
}

static PyObject *Tape_watch(pr_Tape *tape, PyObject *t) {
    if (!pr_Tensor_Check(t)) {
        PyErr_Format(PyExc_TypeError, "GradientTape.watch: expected a Tensor, got %.80s",
                     Py_TYPE(t)->tp_name);
        return NULL;
    }
    if (watch(tape, t) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Tape_len(pr_Tape *tape, void *c) { return PyLong_FromSsize_t(tape->n); }

static int Tape_traverse(pr_Tape *tape, visitproc visit, void *arg) {
    Py_VISIT(tape->watched);
    for (Py_ssize_t j = 0; j < tape->n; j++) {
        tape_entry *e = &tape->entries[j];
        for (int i = 0; i < e->n_in; i++) Py_VISIT(e->in[i]);
        for (int i = 0; i < e->n_out; i++) Py_VISIT(e->out[i]);
    }
    return 0;
}

static int Tape_clear_slot(pr_Tape *tape) {
    tape_clear(tape);
    Py_CLEAR(tape->watched);
    return 0;
}

static void Tape_dealloc(pr_Tape *tape) {
    PyObject_GC_UnTrack(tape);
    Tape_clear_slot(tape);
    PyMem_Free(tape->entries);
    Py_TYPE(tape)->tp_free((PyObject *)tape);
}

static PyMethodDef Tape_methods[] = {
    {"push", (PyCFunction)Tape_push, METH_NOARGS, "Start recording in this thread."},
    {"pop", (PyCFunction)Tape_pop, METH_NOARGS, "Stop recording."},
    {"watch", (PyCFunction)Tape_watch, METH_O, "watch(tensor): record ops that use it."},
    {"gradient", (PyCFunction)Tape_gradient, METH_VARARGS,
     "gradient(target, sources, output_gradient=None) -> list of Tensor or None."},
    {NULL}};

static PyGetSetDef Tape_getset[] = {
    {"num_entries", (getter)Tape_len, NULL, "Number of recorded op calls.", NULL}, {NULL}};

static PyTypeObject pr_TapeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyresnet._C.Tape",
    .tp_basicsize = sizeof(pr_Tape),
    .tp_dealloc = (destructor)Tape_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Tape(persistent=False): the C side of pyresnet.GradientTape.",
    .tp_traverse = (traverseproc)Tape_traverse,
    .tp_clear = (inquiry)Tape_clear_slot,
    .tp_methods = Tape_methods,
    .tp_getset = Tape_getset,
    .tp_new = Tape_new,
};

int pr_autodiff_init(PyObject *module) {
    if (PyType_Ready(&pr_TapeType) < 0) return -1;
    Py_INCREF(&pr_TapeType);
    if (PyModule_AddObject(module, "Tape", (PyObject *)&pr_TapeType) < 0) {
        Py_DECREF(&pr_TapeType);
        return -1;
    }
    pr_hooks.tape_record = tape_record;
    return 0;
}
