/* The op registry and the one way to call an op (eager or traced). */
#include "ops.h"

#include <stdarg.h>
#include <string.h>

#include "op_attrs.h"

static PyObject *op_table; /* name -> capsule(const pr_op *) */
/* The cast op, which pr_call runs to widen bfloat16 inputs; ops_array.c
 * defines it, a floor above: looked up once when the registry is made. */
static const pr_op *cast_op;

/* ---- hooks (ops.h): filled by autodiff.c and graph.c at init ---------------- */

pr_hook_table pr_hooks;

int pr_tracing_active(void) { return pr_hooks.tracing_active && pr_hooks.tracing_active(); }
int pr_trace_known_value(PyObject *t, int64_t *out) {
    return pr_hooks.trace_known_value ? pr_hooks.trace_known_value(t, out) : 0;
}
PyObject *pr_trace_size_arith(int kind, PyObject *a, PyObject *b) {
    return pr_hooks.trace_size_arith ? pr_hooks.trace_size_arith(kind, a, b) : NULL;
}
int pr_trace_gradient_scope(PyObject *forward_output) {
    return pr_hooks.trace_gradient_scope ? pr_hooks.trace_gradient_scope(forward_output) : -1;
}
void pr_trace_restore_scope(int scope) {
    if (pr_hooks.trace_restore_scope) pr_hooks.trace_restore_scope(scope);
}
pr_symtab *pr_symtab_of(PyObject *sym) {
    return pr_hooks.symtab_of ? pr_hooks.symtab_of(sym) : NULL;
}
int pr_tape_record(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
                   PyObject *const *outputs, int n_out) {
    return pr_hooks.tape_record ? pr_hooks.tape_record(op, inputs, n_in, attrs, outputs, n_out)
                                : 0;
}

const pr_op *pr_op_lookup(const char *name) {
    if (!name) return NULL; /* e.g. a name PyUnicode_AsUTF8 could not convert */
    PyObject *cap = PyDict_GetItemString(op_table, name);
    if (!cap) return NULL;
    return (const pr_op *)PyCapsule_GetPointer(cap, "pr_op");
}

/* ---- errors --------------------------------------------------------------- */

int pr_fail(const pr_op *op, PyObject *exc, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_Format(exc, "%s: %s", op->name, msg);
    return -1;
}

int pr_expect_dtype(const pr_op *op, const pr_view *in, int i, pr_dtype dtype) {
    if (in[i].dtype != dtype)
        return pr_fail(op, PyExc_TypeError, "input %d must be %s, got %s", i,
                       pr_dtype_name(dtype), pr_dtype_name(in[i].dtype));
    return 0;
}

int pr_activation_dtype(const pr_op *op, const pr_view *in, pr_dtype *dtype) {
    unsigned mask = op->bf16_inputs;
    int first = -1;
    for (int i = 0; mask >> i; i++) {
        if (!(mask >> i & 1)) continue;
        if (first < 0) {
            first = i;
            if (in[i].dtype != PR_F32 && in[i].dtype != PR_BF16)
                return pr_fail(op, PyExc_TypeError, "input %d must be float32 or bfloat16, got %s",
                               i, pr_dtype_name(in[i].dtype));
        } else if (in[i].dtype != in[first].dtype) {
            return pr_fail(op, PyExc_TypeError,
                           "inputs %d and %d must have the same dtype, got %s and %s", first, i,
                           pr_dtype_name(in[first].dtype), pr_dtype_name(in[i].dtype));
        }
    }
    *dtype = first < 0 ? PR_F32 : in[first].dtype;
    return 0;
}

static int same_shape(const pr_view *a, const pr_view *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (!pr_dim_maybe_equal(a->shape[d], b->shape[d])) return 0;
    return 1;
}

int pr_expect_shape_like(const pr_op *op, const pr_view *in, int i, int j) {
    if (same_shape(&in[i], &in[j])) return 0;
    char a[128], b[128];
    return pr_fail(op, PyExc_ValueError, "input %d has shape %s, expected %s (input %d's)", i,
                   pr_shape_str(&in[i], a, sizeof a), pr_shape_str(&in[j], b, sizeof b), j);
}

int pr_expect_like(const pr_op *op, const pr_view *in, int i, int j) {
    if (pr_expect_dtype(op, in, i, PR_F32) < 0) return -1;
    return pr_expect_shape_like(op, in, i, j);
}

int pr_expect_rng_state(const pr_op *op, const pr_view *in, int i) {
    if (in[i].dtype != PR_I64 || in[i].ndim != 1 || in[i].shape[0] != 2) {
        char s[128];
        return pr_fail(op, PyExc_TypeError,
                       "the RNG state (input %d) must be an int64 Variable of shape (2,) "
                       "holding [seed, counter], got %s of shape %s",
                       i, pr_dtype_name(in[i].dtype), pr_shape_str(&in[i], s, sizeof s));
    }
    return 0;
}

int pr_broadcast_shape(const pr_op *op, const pr_view *a, const pr_view *b, int *ndim,
                       int64_t *shape) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        /* While tracing, sizes that may be equal (pr_dim_maybe_equal) are
         * accepted: the plan checks each call's sizes.  A known size wins. */
        if (x != y && x != 1 && y != 1 && !pr_dim_maybe_equal(x, y)) {
            char sa[128], sb[128];
            return pr_fail(op, PyExc_ValueError, "shapes %s and %s cannot be broadcast together",
                           pr_shape_str(a, sa, sizeof sa), pr_shape_str(b, sb, sizeof sb));
        }
        shape[d] = x == 1 ? y : y == 1 ? x : pr_dim_is_sym(x) && !pr_dim_is_sym(y) ? y : x;
    }
    *ndim = nd;
    return 0;
}

int pr_expect_ndim(const pr_op *op, const pr_view *in, int i, int ndim) {
    if (in[i].ndim != ndim) {
        char s[128];
        return pr_fail(op, PyExc_ValueError, "input %d must have rank %d, got shape %s", i, ndim,
                       pr_shape_str(&in[i], s, sizeof s));
    }
    return 0;
}

void pr_set_out(pr_view *out, pr_dtype dtype, int ndim, const int64_t *shape) {
    out->data = NULL;
    out->dtype = dtype;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) out->shape[i] = shape[i];
    /* a symbolic dimension while tracing; -1: pr_infer raises */
    out->size = pr_dims_size(ndim, shape, pr_dtype_size(dtype));
}

/* ---- attributes ----------------------------------------------------------- */

/* An int attribute value (Python int or anything with __index__). */
static int parse_int(const pr_op *op, const char *name, PyObject *v, int64_t *out) {
    PyObject *i = PyNumber_Index(v);
    if (!i) {
        PyErr_Clear();
        return pr_fail(op, PyExc_TypeError, "'%s' must hold ints, got %.80s", name,
                       Py_TYPE(v)->tp_name);
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow)
        return pr_fail(op, PyExc_ValueError, "'%s' holds an int outside the 64-bit range", name);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (pr_dim_is_sym(x)) /* that range is the symbolic dimensions' (symdim.h) */
        return pr_fail(op, PyExc_ValueError, "'%s' holds %lld, below the supported -2^40", name,
                       x);
    *out = x;
    return 0;
}

/* A size in a shape attribute: an int, None (-1, unknown), or a scalar
 * integer Tensor: a real one's value, or while tracing the size that
 * pyresnet.ops.shape returned for an unknown dimension (its symbol). */
static int parse_size(const pr_op *op, const char *name, PyObject *v, int64_t *out) {
    if (v == Py_None) return *out = -1, 0;
    if (pr_Tensor_Check(v)) {
        pr_Tensor *t = (pr_Tensor *)v;
        int integer = t->v.dtype == PR_I32 || t->v.dtype == PR_I64;
        if (t->v.ndim == 0 && integer && t->sym) {
            if (pr_trace_known_value(v, out)) return 0;
            return pr_fail(op, PyExc_TypeError,
                           "'%s': a size computed inside a compiled function is not known when "
                           "it is traced; use the sizes pyresnet.ops.shape(x) returns as they "
                           "are, or Python ints",
                           name);
        }
        if (t->v.ndim == 0 && integer && pr_tracing_active())
            return pr_fail(op, PyExc_TypeError,
                           "'%s': a tensor's value as a size inside a compiled function would be "
                           "read once, when it is traced (a Variable would then not follow its "
                           "updates); use a Python int or a size from pyresnet.ops.shape",
                           name);
        if (t->v.ndim == 0 && integer) {
            int64_t x = t->v.dtype == PR_I32 ? *(int32_t *)t->v.data : *(int64_t *)t->v.data;
            if (x < 0)
                return pr_fail(op, PyExc_ValueError, "'%s' holds a negative size %lld", name,
                               (long long)x);
            return *out = x, 0;
        }
    }
    return parse_int(op, name, v, out);
}

int pr_parse_attrs(const pr_op *op, PyObject *kwargs, void *attrs) {
    memset(attrs, 0, PR_ATTR_BYTES);
    Py_ssize_t used = 0;
    for (const pr_attr_spec *s = op->attrs; s && s->name; s++) {
        char *field = (char *)attrs + s->offset;
        PyObject *v = kwargs ? PyDict_GetItemString(kwargs, s->name) : NULL;
        if (v) used++;
        if (!v || v == Py_None) {
            if (s->required)
                return pr_fail(op, PyExc_TypeError, "missing required argument '%s'%s", s->name,
                               v ? " (got None)" : "");
            switch (s->kind) {
            case PR_ATTR_INT: *(int64_t *)field = (int64_t)s->dflt; break;
            case PR_ATTR_BOOL: *(int *)field = s->dflt != 0; break;
            case PR_ATTR_FLOAT: *(double *)field = s->dflt; break;
            case PR_ATTR_INTS: ((pr_ints *)field)->n = 0; break;
            }
            continue;
        }
        switch (s->kind) {
        case PR_ATTR_INT:
            if (parse_int(op, s->name, v, (int64_t *)field) < 0) return -1;
            break;
        case PR_ATTR_BOOL: {
            int b = PyObject_IsTrue(v);
            if (b < 0)
                return PyErr_Clear(), pr_fail(op, PyExc_TypeError, "'%s' must be a bool, got %.80s",
                                              s->name, Py_TYPE(v)->tp_name);
            *(int *)field = b;
            break;
        }
        case PR_ATTR_FLOAT: {
            double x = PyFloat_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred())
                return PyErr_Clear(),
                       pr_fail(op, PyExc_TypeError, "'%s' must be a number, got %.80s", s->name,
                               Py_TYPE(v)->tp_name);
            *(double *)field = x;
            break;
        }
        case PR_ATTR_INTS: {
            pr_ints *ints = (pr_ints *)field;
            if (PyIndex_Check(v)) {
                ints->n = 1;
                if (parse_int(op, s->name, v, &ints->v[0]) < 0) return -1;
                break;
            }
            PyObject *seq = PyUnicode_Check(v) || PyBytes_Check(v) ? NULL : PySequence_Fast(v, "");
            if (!seq)
                return PyErr_Clear(), pr_fail(op, PyExc_TypeError,
                                              "'%s' must be an int or a sequence of ints, got %.80s",
                                              s->name, Py_TYPE(v)->tp_name);
            Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
            if (n > PR_MAX_DIMS) {
                Py_DECREF(seq);
                return pr_fail(op, PyExc_ValueError, "'%s' has %zd entries, at most %d allowed",
                               s->name, n, PR_MAX_DIMS);
            }
            ints->n = (int)n;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
                /* None stands for an unknown dimension (-1), as in Keras shapes. */
                if (parse_size(op, s->name, item, &ints->v[i]) < 0) {
                    Py_DECREF(seq);
                    return -1;
                }
            }
            Py_DECREF(seq);
            break;
        }
        }
    }
    if (kwargs && PyDict_GET_SIZE(kwargs) > used) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            const char *k = PyUnicode_AsUTF8(key);
            int known = 0;
            for (const pr_attr_spec *s = op->attrs; s && s->name && k; s++)
                if (strcmp(s->name, k) == 0) known = 1;
            if (!known)
                return pr_fail(op, PyExc_TypeError, "unexpected argument '%s'", k ? k : "?");
        }
    }
    return 0;
}

/* ---- running -------------------------------------------------------------- */

int pr_infer(const pr_op *op, const pr_view *in, int n_in, const void *attrs, pr_view *out,
             size_t *scratch_bytes) {
    *scratch_bytes = 0;
    memset(out, 0, sizeof(pr_view) * (size_t)(op->n_out ? op->n_out : 1));
    if (op->infer(op, in, n_in, attrs, out, scratch_bytes) < 0) return -1;
    /* One check for every op: no output with a negative dimension or a size
     * whose products overflow (kernels index with int64 products of dims). */
    for (int i = 0; i < op->n_out; i++) {
        out[i].size = pr_dims_size(out[i].ndim, out[i].shape, pr_dtype_size(out[i].dtype));
        if (out[i].size < 0 && !pr_dim_is_sym(out[i].size)) {
            char s[160];
            return pr_fail(op, PyExc_ValueError, "output %d would have shape %s, which %s", i,
                           pr_shape_str(&out[i], s, sizeof s), pr_shape_error(&out[i]));
        }
    }
    return 0;
}

int pr_variant_usable(const pr_op *op, int v, const pr_view *in, int n_in, const pr_view *out,
                      const void *attrs) {
    if (v < 0 || v >= op->n_variants) return v < 0 && !op->variants;
    if (v == op->n_variants - 1) return 1; /* the reference */
    const pr_variant *k = &op->variants[v];
    return pr_cpu_fast(k->cpu) &&
           (!k->supports || k->supports(in, n_in, out, attrs));
}

int pr_variant_default(const pr_op *op, const pr_view *in, int n_in, const pr_view *out,
                       const void *attrs) {
    for (int v = 0; v < op->n_variants; v++)
        if (pr_variant_usable(op, v, in, n_in, out, attrs)) return v;
    return -1;
}

size_t pr_variant_scratch(const pr_op *op, int v, const pr_view *in, int n_in,
                          const pr_view *out, const void *attrs, size_t infer_scratch) {
    if (v < 0 || !op->variants[v].scratch) return infer_scratch;
    return op->variants[v].scratch(in, n_in, out, attrs);
}

int pr_op_run(const pr_op *op, int v, const pr_view *in, int n_in, pr_view *out,
              const void *attrs, void *scratch) {
    /* Every output empty and no input written: nothing to compute (and a
     * kernel's row loops could walk a huge empty shape for a long time). */
    int empty = op->n_out > 0 && !op->mutates;
    for (int i = 0; empty && i < op->n_out; i++) empty = out[i].size == 0;
    if (empty) return PR_OK;
    return v < 0 ? op->forward(in, n_in, out, attrs, scratch)
                 : op->variants[v].run(in, n_in, out, attrs, scratch);
}

const char *pr_variant_name(const pr_op *op, int v) {
    return v >= 0 && v < op->n_variants ? op->variants[v].name : NULL;
}

int pr_run_forward(const pr_op *op, int v, const pr_view *in, int n_in, pr_view *out,
                   const void *attrs, size_t scratch_bytes) {
    void *scratch = NULL;
    if (scratch_bytes) {
        scratch = pr_alloc(scratch_bytes);
        if (!scratch) {
            PyErr_NoMemory();
            return -1;
        }
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pr_op_run(op, v, in, n_in, out, attrs, scratch);
    Py_END_ALLOW_THREADS
    pr_free(scratch);
    return pr_kernel_status(op, rc);
}

int pr_kernel_status(const pr_op *op, int rc) {
    switch (rc) {
    case PR_OK: return 0;
    case PR_ERR_VALUE:
        PyErr_Format(PyExc_ValueError, "%s: %s", op->name, pr_kernel_error_message());
        return -1;
    case PR_ERR_MEMORY: PyErr_NoMemory(); return -1;
    case PR_ERR_RUNTIME:
        PyErr_Format(PyExc_RuntimeError, "%s: %s", op->name, pr_kernel_error_message());
        return -1;
    default:
        PyErr_Format(PyExc_RuntimeError, "%s: internal kernel error %d", op->name, rc);
        return -1;
    }
}

/* Which bfloat16 inputs of a call an op takes as they are (struct pr_op's
 * bf16_inputs): all for PR_OP_BF16 ops, those of the mask when every input
 * of the mask is bfloat16, none otherwise. */
static unsigned bf16_taken(const pr_op *op, PyObject *const *t, int n_in) {
    if (op->flags & PR_OP_BF16) return ~0u;
    unsigned mask = op->bf16_inputs;
    for (int i = 0; i < n_in && mask; i++)
        if ((mask >> i & 1) && ((pr_Tensor *)t[i])->v.dtype != PR_BF16) mask = 0;
    return mask;
}

/* A bfloat16 input the op does not take (and does not update in place)
 * becomes cast(x, float32), called like any op, so tapes and traced graphs
 * record it. */
static int widen_bf16(const pr_op *op, int i, unsigned taken, PyObject **t) {
    if ((taken >> i & 1) || (op->mutates >> i & 1) || ((pr_Tensor *)*t)->v.dtype != PR_BF16)
        return 0;
    pr_cast_attrs a = {PR_F32};
    PyObject *wide = pr_call1(cast_op, t, 1, &a);
    if (!wide) return -1;
    Py_SETREF(*t, wide);
    return 0;
}

static int is_int_dtype(pr_dtype d) { return d == PR_I32 || d == PR_I64 || d == PR_U8; }

/* NumPy's promotion of two of int32, int64, uint8. */
static pr_dtype promote_int(pr_dtype a, pr_dtype b) {
    if (a == b) return a;
    return a == PR_I64 || b == PR_I64 ? PR_I64 : PR_I32;
}

/* A Python int as a 0-d tensor of integer dtype `dt`; OverflowError when it
 * does not fit (as NumPy 2: uint8 + 300 raises). */
static PyObject *weak_int(PyObject *v, pr_dtype dt) {
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return NULL;
    long long lo = dt == PR_U8 ? 0 : dt == PR_I32 ? INT32_MIN : INT64_MIN;
    long long hi = dt == PR_U8 ? 255 : dt == PR_I32 ? INT32_MAX : INT64_MAX;
    if (x < lo || x > hi)
        return PyErr_Format(PyExc_OverflowError, "Python integer %lld out of bounds for %s", x,
                            pr_dtype_name(dt));
    pr_Tensor *t = pr_tensor_new(dt, 0, NULL);
    if (!t) return NULL;
    if (dt == PR_U8) *(uint8_t *)t->v.data = (uint8_t)x;
    else if (dt == PR_I32) *(int32_t *)t->v.data = (int32_t)x;
    else *(int64_t *)t->v.data = (int64_t)x;
    return (PyObject *)t;
}

/* PR_OP_INT ops: integer inputs promoted to one dtype (NumPy's rule; a
 * Python int is "weak" and takes the tensors' integer dtype), or cast to
 * float32 when a float input is present (Keras's rule; NumPy would give
 * float64, which pyresnet does not have).  Casts are calls of `cast`, so
 * tapes and traced graphs record them. */
static int promote_int_inputs(const pr_op *op, PyObject *const *inputs, PyObject **t, int n_in) {
    int any_int = 0, any_float = 0;
    pr_dtype idt = PR_I32;
    for (int i = 0; i < n_in; i++) {
        if (PyLong_Check(inputs[i])) continue; /* weak */
        pr_dtype d = ((pr_Tensor *)t[i])->v.dtype;
        if (is_int_dtype(d)) idt = any_int++ ? promote_int(idt, d) : d;
        else if (pr_dtype_is_float(d)) any_float = 1;
    }
    if (!any_int) return 0;
    pr_dtype target = any_float ? PR_F32 : idt;
    for (int i = 0; i < n_in; i++) {
        if (op->mutates >> i & 1) continue;
        PyObject *made = NULL;
        if (PyLong_Check(inputs[i])) { /* bool too: NumPy keeps the integer dtype */
            if (any_float) continue; /* already a float32 scalar */
            if (!(made = weak_int(inputs[i], target))) return -1;
        } else {
            pr_dtype d = ((pr_Tensor *)t[i])->v.dtype;
            if (!is_int_dtype(d) || d == target) continue;
            pr_cast_attrs a = {target};
            if (!(made = pr_call1(cast_op, &t[i], 1, &a))) return -1;
        }
        Py_SETREF(t[i], made);
    }
    return 0;
}

int pr_call(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
            PyObject **outputs) {
    if (n_in != op->n_in)
        return pr_fail(op, PyExc_TypeError, "takes %d tensor inputs, got %d", op->n_in, n_in);
    PR_ATTR_ALIGN char default_attrs[PR_ATTR_BYTES];
    if (!attrs) {
        if (pr_parse_attrs(op, NULL, default_attrs) < 0) return -1;
        attrs = default_attrs;
    }
    PyObject *t[PR_MAX_INPUTS];
    int symbolic = 0, rc = -1, n_made = 0;
    for (int i = 0; i < n_in; i++) t[i] = NULL;
    for (int i = 0; i < n_in; i++) {
        if ((op->mutates >> i & 1) && !pr_Tensor_Check(inputs[i])) {
            pr_fail(op, PyExc_TypeError, "input %d is updated in place and must be a Variable, "
                    "got %.80s", i, Py_TYPE(inputs[i])->tp_name);
            goto done;
        }
        char what[32];
        snprintf(what, sizeof what, "input %d", i);
        t[i] = (PyObject *)pr_tensor_from_arg(inputs[i], op->name, what);
        if (!t[i]) goto done;
    }
    if ((op->flags & PR_OP_INT) && promote_int_inputs(op, inputs, t, n_in) < 0) goto done;
    unsigned taken = bf16_taken(op, t, n_in);
    for (int i = 0; i < n_in; i++) {
        if (widen_bf16(op, i, taken, &t[i]) < 0) goto done;
        symbolic |= pr_is_symbolic(t[i]);
    }
    /* While a function is traced every call is traced, also on real inputs:
     * a Variable must be re-read on every run, not folded into a constant. */
    if (symbolic || pr_tracing_active()) {
        if (!pr_hooks.trace_call) {
            PyErr_SetString(PyExc_SystemError, "a symbolic tensor, but no tracer is installed");
            goto done;
        }
        if (pr_hooks.trace_call(op, t, n_in, attrs, outputs) < 0) goto done;
        n_made = op->n_out;
        /* A traced in-place update changes a captured Variable for the rest
         * of the program too: a tape that recorded it must see that. */
        for (int i = 0; i < n_in; i++)
            if (op->mutates >> i & 1) ((pr_Tensor *)t[i])->version++;
    } else {
        pr_view in[PR_MAX_INPUTS], out[PR_MAX_OUTPUTS];
        size_t scratch = 0;
        for (int i = 0; i < n_in; i++) in[i] = ((pr_Tensor *)t[i])->v;
        if (pr_infer(op, in, n_in, attrs, out, &scratch) < 0) goto done;
        for (int i = 0; i < op->n_out; i++) {
            pr_Tensor *o = pr_tensor_new(out[i].dtype, out[i].ndim, out[i].shape);
            if (!o) goto done;
            outputs[n_made++] = (PyObject *)o;
            out[i].data = o->v.data;
        }
        int v = pr_variant_default(op, in, n_in, out, attrs);
        scratch = pr_variant_scratch(op, v, in, n_in, out, attrs, scratch);
        if (pr_run_forward(op, v, in, n_in, out, attrs, scratch) < 0) goto done;
        for (int i = 0; i < n_in; i++)
            if (op->mutates >> i & 1) ((pr_Tensor *)t[i])->version++;
    }
    if ((op->gradient || (op->flags & PR_OP_NO_GRADIENT_RULE)) &&
        pr_tape_record(op, t, n_in, attrs, outputs, op->n_out) < 0)
        goto done;
    rc = 0;
done:
    if (rc < 0)
        for (int i = 0; i < n_made; i++) Py_CLEAR(outputs[i]);
    for (int i = 0; i < n_in && t[i]; i++) Py_DECREF(t[i]);
    return rc;
}

PyObject *pr_call1(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs) {
    PyObject *out[PR_MAX_OUTPUTS];
    if (op->n_out != 1) {
        pr_fail(op, PyExc_RuntimeError, "pr_call1 on an op with %d outputs", op->n_out);
        return NULL;
    }
    if (pr_call(op, inputs, n_in, attrs, out) < 0) return NULL;
    return out[0];
}

/* ---- Python boundary ------------------------------------------------------ */

/* _C.call(name, *inputs, **attrs) */
static PyObject *py_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0))) {
        PyErr_SetString(PyExc_TypeError, "call(name, *inputs, **attrs)");
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
    if (!name) return NULL;
    const pr_op *op = pr_op_lookup(name);
    if (!op) {
        PyErr_Format(PyExc_NotImplementedError, "op '%s' is not registered", name);
        return NULL;
    }
    if (n - 1 != op->n_in)
        return pr_fail(op, PyExc_TypeError, "takes %d tensor inputs, got %zd", op->n_in, n - 1),
               NULL;
    PR_ATTR_ALIGN char attrs[PR_ATTR_BYTES];
    if (pr_parse_attrs(op, kwargs, attrs) < 0) return NULL;
    PyObject *out[PR_MAX_OUTPUTS];
    if (pr_call(op, &PyTuple_GET_ITEM(args, 1), (int)(n - 1), attrs, out) < 0) return NULL;
    if (op->n_out == 0) Py_RETURN_NONE;
    if (op->n_out == 1) return out[0];
    PyObject *tuple = PyTuple_New(op->n_out);
    if (!tuple) {
        for (int i = 0; i < op->n_out; i++) Py_DECREF(out[i]);
        return NULL;
    }
    for (int i = 0; i < op->n_out; i++) PyTuple_SET_ITEM(tuple, i, out[i]);
    return tuple;
}

static PyObject *py_op_names(PyObject *self, PyObject *noargs) { return PyDict_Keys(op_table); }

/* cpu_info() -> dict: brand, vendor, features (list of names), reference_only, amx, kernels. */
static PyObject *py_cpu_info(PyObject *self, PyObject *noargs) {
    unsigned f = pr_cpu_features();
    PyObject *names = PyList_New(0);
    for (int k = 0; names && k < PR_CPU_N_FEATURES; k++) {
        if (!(f >> k & 1)) continue;
        PyObject *s = PyUnicode_FromString(pr_cpu_feature_name(k));
        if (!s || PyList_Append(names, s) < 0) Py_CLEAR(names);
        Py_XDECREF(s);
    }
    if (!names) return NULL;
    return Py_BuildValue("{s:s,s:s,s:N,s:O,s:s,s:s}", "brand", pr_cpu_brand(), "vendor",
                         pr_cpu_vendor(), "features", names, "reference_only",
                         pr_cpu_reference_only() ? Py_True : Py_False, "amx", pr_cpu_amx_status(),
                         "kernels", pr_cpu_kernels_setting());
}

/* The op a Python name names, or NULL with KeyError. */
static const pr_op *op_named(PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "expected an op name (str), got %.80s",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    const pr_op *op = pr_op_lookup(name);
    if (!op) PyErr_Format(PyExc_KeyError, "op '%s' is not registered", name);
    return op;
}

/* op_variants(name) -> [(variant name, runs on this CPU)], priority order. */
static PyObject *py_op_variants(PyObject *self, PyObject *arg) {
    const pr_op *op = op_named(arg);
    if (!op) return NULL;
    PyObject *l = PyList_New(op->n_variants);
    for (int v = 0; l && v < op->n_variants; v++) {
        const pr_variant *k = &op->variants[v];
        int cpu_ok = (pr_cpu_features() & k->cpu) == k->cpu;
        PyObject *item = Py_BuildValue("(sO)", k->name, cpu_ok ? Py_True : Py_False);
        if (!item) Py_CLEAR(l);
        else PyList_SET_ITEM(l, v, item);
    }
    return l;
}

/* run_variant(name, variant, *inputs, **attrs): run one kernel variant of an
 * op eagerly on real inputs (for tests and benchmarks); ValueError when it
 * cannot run them on this CPU.  Not recorded on tapes. */
static PyObject *py_run_variant(PyObject *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 2 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)) ||
        !PyUnicode_Check(PyTuple_GET_ITEM(args, 1))) {
        PyErr_SetString(PyExc_TypeError, "run_variant(name, variant, *inputs, **attrs)");
        return NULL;
    }
    const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
    const char *vname = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 1));
    if (!name || !vname) return NULL;
    const pr_op *op = pr_op_lookup(name);
    if (!op) {
        PyErr_Format(PyExc_NotImplementedError, "op '%s' is not registered", name);
        return NULL;
    }
    int v = -1;
    for (int k = 0; k < op->n_variants; k++)
        if (strcmp(op->variants[k].name, vname) == 0) v = k;
    if (v < 0) return pr_fail(op, PyExc_ValueError, "has no kernel variant '%s'", vname), NULL;
    if (n - 2 != op->n_in || op->n_out != 1)
        return pr_fail(op, PyExc_TypeError, "run_variant: takes %d inputs and one output",
                       op->n_in), NULL;
    PR_ATTR_ALIGN char attrs[PR_ATTR_BYTES];
    if (pr_parse_attrs(op, kwargs, attrs) < 0) return NULL;
    pr_Tensor *t[PR_MAX_INPUTS] = {NULL};
    pr_view in[PR_MAX_INPUTS], out[PR_MAX_OUTPUTS];
    PyObject *result = NULL;
    size_t scratch;
    for (int i = 0; i < op->n_in; i++) {
        t[i] = pr_tensor_from_arg(PyTuple_GET_ITEM(args, 2 + i), op->name, "input");
        if (!t[i]) goto done;
        if (t[i]->sym) {
            pr_fail(op, PyExc_TypeError, "run_variant: inputs must be real tensors");
            goto done;
        }
        in[i] = t[i]->v;
    }
    if (pr_infer(op, in, op->n_in, attrs, out, &scratch) < 0) goto done;
    if (!pr_variant_usable(op, v, in, op->n_in, out, attrs)) {
        pr_fail(op, PyExc_ValueError,
                "kernel variant '%s' cannot run these inputs on this CPU (a feature it needs "
                "is missing, it does not take these shapes, or PYRESNET_KERNELS=reference)",
                vname);
        goto done;
    }
    pr_Tensor *o = pr_tensor_new(out[0].dtype, out[0].ndim, out[0].shape);
    if (!o) goto done;
    out[0].data = o->v.data;
    scratch = pr_variant_scratch(op, v, in, op->n_in, out, attrs, scratch);
    if (pr_run_forward(op, v, in, op->n_in, out, attrs, scratch) < 0) Py_DECREF(o);
    else result = (PyObject *)o;
done:
    for (int i = 0; i < op->n_in; i++) Py_XDECREF(t[i]);
    return result;
}

static PyObject *py_op_info(PyObject *self, PyObject *arg) {
    const pr_op *op = op_named(arg);
    if (!op) return NULL;
    PyObject *attrs = PyList_New(0);
    for (const pr_attr_spec *s = op->attrs; attrs && s && s->name; s++) {
        PyObject *nm = PyUnicode_FromString(s->name);
        if (!nm || PyList_Append(attrs, nm) < 0) Py_CLEAR(attrs);
        Py_XDECREF(nm);
    }
    if (!attrs) return NULL;
    return Py_BuildValue("{s:s,s:i,s:i,s:I,s:I,s:N,s:O,s:O,s:s}", "name", op->name, "n_in",
                         op->n_in, "n_out", op->n_out, "mutates", op->mutates, "flags", op->flags,
                         "attrs", attrs, "differentiable", op->gradient ? Py_True : Py_False,
                         "fusible", op->fuse ? Py_True : Py_False, "doc", op->doc ? op->doc : "");
}

/* More threads than this buys nothing on any CPU we run on, and OpenMP aborts
 * the process when it cannot create the threads it was told to use. */
#define MAX_THREADS 1024

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg) {
    int overflow;
    long n = PyLong_AsLongAndOverflow(arg, &overflow);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (overflow || n < 1 || n > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "set_num_threads: expected an int in [1, %d], got %R",
                     MAX_THREADS, arg);
        return NULL;
    }
    pr_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *noargs) {
    return PyLong_FromLong(pr_get_num_threads());
}

static PyMethodDef ops_methods[] = {
    {"call", (PyCFunction)(void (*)(void))py_call, METH_VARARGS | METH_KEYWORDS,
     "call(name, *inputs, **attrs): run a registered op (eager or traced)."},
    {"op_names", py_op_names, METH_NOARGS, "Names of all registered ops."},
    {"op_info", py_op_info, METH_O, "op_info(name) -> dict describing a registered op."},
    {"cpu_info", py_cpu_info, METH_NOARGS,
     "cpu_info() -> dict: brand, vendor (cpuid's: GenuineIntel, AuthenticAMD), features, "
     "reference_only (PYRESNET_KERNELS=reference), amx "
     "(the tile-state request's outcome), kernels (the PYRESNET_KERNELS setting in effect)."},
    {"op_variants", py_op_variants, METH_O,
     "op_variants(name) -> [(kernel variant, runs on this CPU)] in priority order."},
    {"run_variant", (PyCFunction)(void (*)(void))py_run_variant, METH_VARARGS | METH_KEYWORDS,
     "run_variant(name, variant, *inputs, **attrs): run one kernel variant eagerly."},
    {"set_num_threads", py_set_num_threads, METH_O,
     "set_num_threads(n): threads for our kernels and OpenBLAS (1 <= n <= 1024)."},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "Threads used by kernels."},
    {NULL}};

int pr_ops_init(PyObject *module, const pr_op *const *ops) {
    pr_cpu_features(); /* the one probe, while the GIL serialises it */
    op_table = PyDict_New();
    if (!op_table) return -1;
    for (const pr_op *const *p = ops; *p; p++) {
        const pr_op *op = *p;
        int attrs_unsized = op->attrs && op->attrs[0].name && op->attr_size == 0;
        int bad_variants = op->variants && (op->n_variants < 1 ||
                           op->variants[op->n_variants - 1].run != op->forward);
        if (attrs_unsized || bad_variants || op->attr_size > PR_ATTR_BYTES ||
            op->n_in > PR_MAX_INPUTS ||
            op->n_out > PR_MAX_OUTPUTS || PyDict_GetItemString(op_table, op->name)) {
            PyErr_Format(PyExc_SystemError, "bad or duplicate op registration '%s'", op->name);
            return -1;
        }
        PyObject *cap = PyCapsule_New((void *)op, "pr_op", NULL);
        if (!cap || PyDict_SetItemString(op_table, op->name, cap) < 0) {
            Py_XDECREF(cap);
            return -1;
        }
        Py_DECREF(cap);
    }
    if (!(cast_op = pr_op_lookup("cast"))) {
        PyErr_SetString(PyExc_SystemError, "the registry has no cast op");
        return -1;
    }
    if (PyModule_AddFunctions(module, ops_methods) < 0) return -1;
    pr_set_num_threads(pr_get_num_threads());
    return 0;
}
