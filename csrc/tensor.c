/* The Tensor type and its NumPy interop (buffer protocol, __array__,
 * zero-copy .numpy()).  Its operators, which call registry ops, are
 * tensor_ops.c's: this file sits below the op registry. */
#include "tensor.h"

#include <string.h>

/* NumPy's C API table lives here, the lowest floor that uses it; the other
 * files define NO_IMPORT_ARRAY. */
#define PY_ARRAY_UNIQUE_SYMBOL PR_ARRAY_API
#include <numpy/arrayobject.h>

#include "symdim.h"
#include "kernels/bf16.h"

static const char TRACING_HINT[] =
    "is a symbolic tensor: the function is being traced by pyresnet.compile, which runs the "
    "Python code once per input signature to record its ops, so tensors have no values yet. "
    "Fix: compute with pyresnet ops instead of Python control flow, len() or NumPy on tensor "
    "values (e.g. ops.maximum(x, 0) instead of `if x > 0`, ops.shape(x)[0] instead of "
    "len(x)), "
    "print values with pyresnet.print, or run the function eagerly (call it without "
    "@pyresnet.compile, or model.compile(..., run_eagerly=True)).";

const char *pr_shape_str(const pr_view *v, char *buf, size_t n) {
    return pr_shape_str_in(pr_symtab_current(), v, buf, n);
}

const char *pr_shape_str_in(const pr_symtab *tab, const pr_view *v, char *buf, size_t n) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, n - used, "(");
    for (int i = 0; i < v->ndim && used < n; i++) {
        char d[96];
        used += (size_t)snprintf(buf + used, n - used, i ? ", %s" : "%s",
                                 pr_dim_str(tab, v->shape[i], d, sizeof d));
    }
    if (used < n) used += (size_t)snprintf(buf + used, n - used, v->ndim == 1 ? ",)" : ")");
    return buf;
}

static int set_shape(pr_Tensor *t, pr_dtype dtype, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > PR_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "Tensor: rank %d is outside the supported 0..%d", ndim,
                     PR_MAX_DIMS);
        return -1;
    }
    t->v.dtype = dtype;
    t->v.ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        t->v.shape[i] = shape[i];
        t->shape_py[i] = (Py_ssize_t)shape[i];
    }
    /* A symbolic tensor's size may be a symbolic dimension (symdim.h). */
    t->v.size = t->sym ? pr_dims_size(ndim, shape, pr_dtype_size(dtype))
                       : pr_shape_size(ndim, shape, pr_dtype_size(dtype));
    if (t->v.size < 0 && !(t->sym && pr_dim_is_sym(t->v.size))) {
        char s[160];
        PyErr_Format(PyExc_ValueError, "Tensor: shape %s %s", pr_shape_str(&t->v, s, sizeof s),
                     pr_shape_error(&t->v));
        return -1;
    }
    return 0;
}

const char *pr_shape_error(const pr_view *v) {
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] < 0) return "has a negative dimension";
    return "is too large: its buffer would exceed 2^63 - 1 bytes";
}

static pr_Tensor *alloc_object(void) {
    pr_Tensor *t = (pr_Tensor *)pr_TensorType.tp_alloc(&pr_TensorType, 0);
    return t;
}

/* MemoryError naming the bytes and the shape that could not be allocated. */
static void no_memory_for(const pr_view *v, size_t nbytes) {
    char s[128];
    PyErr_Format(PyExc_MemoryError, "cannot allocate %zu bytes for a %s tensor of shape %s",
                 nbytes, pr_dtype_name(v->dtype), pr_shape_str(v, s, sizeof s));
}

pr_Tensor *pr_tensor_new(pr_dtype dtype, int ndim, const int64_t *shape) {
    pr_Tensor *t = alloc_object();
    if (!t) return NULL;
    if (set_shape(t, dtype, ndim, shape) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    size_t nbytes = (size_t)t->v.size * pr_dtype_size(dtype);
    t->v.data = pr_alloc(nbytes);
    if (!t->v.data) {
        no_memory_for(&t->v, nbytes);
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

pr_Tensor *pr_tensor_new_symbolic(pr_dtype dtype, int ndim, const int64_t *shape, PyObject *sym) {
    pr_Tensor *t = alloc_object();
    if (!t) {
        Py_XDECREF(sym);
        return NULL;
    }
    t->sym = sym;
    if (set_shape(t, dtype, ndim, shape) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

pr_Tensor *pr_tensor_scalar(float value) {
    pr_Tensor *t = pr_tensor_new(PR_F32, 0, NULL);
    if (t) *(float *)t->v.data = value;
    return t;
}

/* NumPy's type number of ml_dtypes.bfloat16 (a user-defined dtype), found
 * once at import by pr_tensor_init_type. */
static int bf16_typenum = -1;

/* By kind and item size, not type number: int64 data may come as NPY_LONG or
 * NPY_LONGLONG, which are different type numbers of the same type. */
static int numpy_to_dtype(PyArrayObject *a, pr_dtype *out) {
    PyArray_Descr *d = PyArray_DESCR(a);
    npy_intp size = PyArray_ITEMSIZE(a);
    if (d->type_num == bf16_typenum) return *out = PR_BF16, bf16_typenum;
    if (PyDataType_ISFLOAT(d)) return *out = PR_F32, NPY_FLOAT;
    if (PyDataType_ISBOOL(d)) return *out = PR_BOOL, NPY_BOOL;
    if (PyDataType_ISUNSIGNED(d) && size == 1) return *out = PR_U8, NPY_UINT8;
    if (PyDataType_ISINTEGER(d) && size <= 2)
        return *out = PR_I32, NPY_INT32; /* int8, int16, uint16 */
    if (PyDataType_ISSIGNED(d) && size == 4) return *out = PR_I32, NPY_INT32;
    if (PyDataType_ISSIGNED(d) && size == 8) return *out = PR_I64, NPY_INT64;
    return -1; /* uint32, uint64 (values may not fit), complex, str, object, ... */
}

pr_Tensor *pr_tensor_from_object(PyObject *obj) {
    if (pr_Tensor_Check(obj)) {
        Py_INCREF(obj);
        return (pr_Tensor *)obj;
    }
    PyArrayObject *a = (PyArrayObject *)PyArray_FROM_O(obj);
    if (!a) {
        /* Keep NumPy's reason (ragged lists, a failing __array__); other
         * errors (MemoryError, KeyboardInterrupt) pass through as they are. */
        if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_ValueError))
            return NULL;
        PyObject *exc, *val, *tb;
        PyErr_Fetch(&exc, &val, &tb);
        PyErr_NormalizeException(&exc, &val, &tb);
        PyErr_Format(PyExc_TypeError,
                     "expected a Tensor, NumPy array or Python number, got %.100s (%S)",
                     Py_TYPE(obj)->tp_name, val);
        Py_XDECREF(exc), Py_XDECREF(val), Py_XDECREF(tb);
        return NULL;
    }
    /* Python ints become float32 scalars as Keras ops mix them with floats. */
    int python_scalar = PyLong_Check(obj) || PyFloat_Check(obj);
    pr_dtype dtype;
    int typenum = python_scalar ? (dtype = PR_F32, NPY_FLOAT) : numpy_to_dtype(a, &dtype);
    if (typenum < 0) {
        PyErr_Format(PyExc_TypeError,
                     "expected float, bfloat16, int32, int64 or uint8 data, got an array of "
                     "dtype %S",
                     (PyObject *)PyArray_DESCR(a));
        Py_DECREF(a);
        return NULL;
    }
    int ndim = PyArray_NDIM(a);
    if (ndim > PR_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "expected at most %d dimensions, got %d", PR_MAX_DIMS, ndim);
        Py_DECREF(a);
        return NULL;
    }
    int64_t shape[PR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) shape[i] = PyArray_DIM(a, i);
    pr_Tensor *t = pr_tensor_new(dtype, ndim, shape);
    if (!t) {
        Py_DECREF(a);
        return NULL;
    }
    /* Copy (and convert) into our aligned buffer through a NumPy view of it. */
    npy_intp dims[PR_MAX_DIMS];
    for (int i = 0; i < ndim; i++) dims[i] = (npy_intp)shape[i];
    PyObject *dst = PyArray_SimpleNewFromData(ndim, dims, typenum, t->v.data);
    if (!dst || PyArray_CopyInto((PyArrayObject *)dst, a) < 0) {
        Py_XDECREF(dst);
        Py_DECREF(a);
        Py_DECREF(t);
        return NULL;
    }
    Py_DECREF(dst);
    Py_DECREF(a);
    return t;
}

pr_Tensor *pr_tensor_from_arg(PyObject *obj, const char *who, const char *what) {
    pr_Tensor *t = pr_tensor_from_object(obj);
    if (t || !(PyErr_ExceptionMatches(PyExc_TypeError) ||
               PyErr_ExceptionMatches(PyExc_ValueError)))
        return t;
    PyObject *exc, *val, *tb;
    PyErr_Fetch(&exc, &val, &tb);
    PyErr_NormalizeException(&exc, &val, &tb);
    PyErr_Format(exc, "%s: %s: %S", who, what, val);
    Py_XDECREF(exc), Py_XDECREF(val), Py_XDECREF(tb);
    return NULL;
}

/* ---- type slots ---------------------------------------------------------- */

int pr_tensor_check_real(pr_Tensor *t, const char *what) {
    if (t->sym) {
        PyErr_Format(PyExc_TypeError, "%s: the tensor %s", what, TRACING_HINT);
        return -1;
    }
    return 0;
}

static PyObject *Tensor_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *value;
    static char *kwlist[] = {"value", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Tensor", kwlist, &value)) return NULL;
    pr_Tensor *src = pr_tensor_from_object(value);
    if (!src) return NULL;
    if (pr_tensor_check_real(src, "Tensor()") < 0) {
        Py_DECREF(src);
        return NULL;
    }
    pr_Tensor *t = (pr_Tensor *)type->tp_alloc(type, 0);
    if (!t) {
        Py_DECREF(src);
        return NULL;
    }
    if (set_shape(t, src->v.dtype, src->v.ndim, src->v.shape) < 0) goto fail;
    size_t nbytes = (size_t)t->v.size * pr_dtype_size(t->v.dtype);
    t->v.data = pr_alloc(nbytes);
    if (!t->v.data) {
        no_memory_for(&t->v, nbytes);
        goto fail;
    }
    /* A Tensor made from a Tensor is a copy, as tf.Variable(initial) copies. */
    memcpy(t->v.data, src->v.data, nbytes);
    Py_DECREF(src);
    return (PyObject *)t;
fail:
    Py_DECREF(src);
    Py_DECREF(t);
    return NULL;
}

static int Tensor_traverse(pr_Tensor *t, visitproc visit, void *arg) {
    Py_VISIT(t->sym);
    Py_VISIT(t->dict);
    return 0;
}

static int Tensor_clear(pr_Tensor *t) {
    Py_CLEAR(t->sym);
    Py_CLEAR(t->dict);
    return 0;
}

static void Tensor_dealloc(pr_Tensor *t) {
    PyObject_GC_UnTrack(t);
    if (t->weakreflist) PyObject_ClearWeakRefs((PyObject *)t);
    Tensor_clear(t);
    pr_free(t->v.data);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int npy_type(pr_dtype d) {
    switch (d) {
    case PR_F32: return NPY_FLOAT;
    case PR_I32: return NPY_INT32;
    case PR_I64: return NPY_INT64;
    case PR_U8: return NPY_UINT8;
    case PR_BOOL: return NPY_BOOL;
    case PR_BF16: return bf16_typenum;
    }
    return NPY_FLOAT;
}

static PyObject *Tensor_numpy(pr_Tensor *t, PyObject *Py_UNUSED(ignored)) {
    if (pr_tensor_check_real(t, "Tensor.numpy()") < 0) return NULL;
    npy_intp dims[PR_MAX_DIMS];
    for (int i = 0; i < t->v.ndim; i++) dims[i] = (npy_intp)t->v.shape[i];
    PyObject *a = PyArray_SimpleNewFromData(t->v.ndim, dims, npy_type(t->v.dtype), t->v.data);
    if (!a) return NULL;
    Py_INCREF(t);
    if (PyArray_SetBaseObject((PyArrayObject *)a, (PyObject *)t) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

/* NumPy's protocol: copy=True always copies, copy=False never does (a dtype
 * change then raises ValueError), copy=None copies only for a dtype change. */
static PyObject *Tensor_array(pr_Tensor *t, PyObject *args, PyObject *kwds) {
    PyObject *dtype = Py_None, *copy = Py_None;
    static char *kwlist[] = {"dtype", "copy", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:__array__", kwlist, &dtype, &copy))
        return NULL;
    PyObject *a = Tensor_numpy(t, NULL);
    if (!a) return NULL;
    PyArray_Descr *descr = NULL;
    if (dtype != Py_None && !PyArray_DescrConverter(dtype, &descr)) {
        Py_DECREF(a);
        return NULL;
    }
    int convert = descr && !PyArray_EquivTypes(descr, PyArray_DESCR((PyArrayObject *)a));
    if (convert && copy == Py_False) {
        Py_DECREF(descr);
        Py_DECREF(a);
        PyErr_Format(PyExc_ValueError,
                     "Tensor.__array__: a %s tensor cannot become another dtype without a copy "
                     "(copy=False)", pr_dtype_name(t->v.dtype));
        return NULL;
    }
    if (!convert && copy != Py_True) {
        Py_XDECREF(descr);
        return a;
    }
    if (!descr) descr = PyArray_DESCR((PyArrayObject *)a), Py_INCREF(descr);
    PyObject *b = PyArray_FromAny(a, descr, 0, 0, NPY_ARRAY_ENSURECOPY, NULL);
    Py_DECREF(a);
    return b;
}

static PyObject *Tensor_get_shape(pr_Tensor *t, void *c) {
    PyObject *s = PyTuple_New(t->v.ndim);
    if (!s) return NULL;
    for (int i = 0; i < t->v.ndim; i++) {
        /* An unknown size of a traced function reads as None, as in Keras. */
        PyObject *d = pr_dim_is_sym(t->v.shape[i]) ? (Py_INCREF(Py_None), Py_None)
                                                   : PyLong_FromLongLong(t->v.shape[i]);
        if (!d) {
            Py_DECREF(s);
            return NULL;
        }
        PyTuple_SET_ITEM(s, i, d);
    }
    return s;
}

static PyObject *Tensor_get_dtype(pr_Tensor *t, void *c) {
    return PyUnicode_FromString(pr_dtype_name(t->v.dtype));
}
static PyObject *Tensor_get_ndim(pr_Tensor *t, void *c) { return PyLong_FromLong(t->v.ndim); }
static PyObject *Tensor_get_size(pr_Tensor *t, void *c) {
    if (pr_dim_is_sym(t->v.size)) Py_RETURN_NONE; /* unknown while tracing */
    return PyLong_FromLongLong(t->v.size);
}
static PyObject *Tensor_get_symbolic(pr_Tensor *t, void *c) { return PyBool_FromLong(t->sym != NULL); }
static PyObject *Tensor_get_sym(pr_Tensor *t, void *c) {
    PyObject *s = t->sym ? t->sym : Py_None;
    Py_INCREF(s);
    return s;
}
static PyObject *Tensor_get_trainable(pr_Tensor *t, void *c) {
    return PyBool_FromLong(t->trainable);
}
static int Tensor_set_trainable(pr_Tensor *t, PyObject *v, void *c) {
    int b = v ? PyObject_IsTrue(v) : 0;
    if (b < 0) return -1;
    t->trainable = b;
    return 0;
}
static PyObject *Tensor_get_nbytes(pr_Tensor *t, void *c) {
    if (pr_dim_is_sym(t->v.size)) Py_RETURN_NONE;
    return PyLong_FromLongLong(t->v.size * (long long)pr_dtype_size(t->v.dtype));
}
static PyObject *Tensor_get_address(pr_Tensor *t, void *c) {
    return PyLong_FromVoidPtr(t->v.data);
}

static int Tensor_bool(pr_Tensor *t) {
    if (pr_tensor_check_real(t, "bool(Tensor)") < 0) return -1;
    if (t->v.size != 1) {
        PyErr_Format(PyExc_ValueError,
                     "bool(Tensor): the truth value of a tensor with %lld elements is ambiguous",
                     (long long)t->v.size);
        return -1;
    }
    switch (t->v.dtype) {
    case PR_F32: return *(float *)t->v.data != 0.0f;
    case PR_I32: return *(int32_t *)t->v.data != 0;
    case PR_I64: return *(int64_t *)t->v.data != 0;
    case PR_U8:
    case PR_BOOL: return *(uint8_t *)t->v.data != 0;
    case PR_BF16: return pr_bf16_to_f32(*(uint16_t *)t->v.data) != 0.0f;
    }
    return 0;
}

/* Hash by identity, as object's (a type with its own richcompare must say so). */
static Py_hash_t Tensor_hash(PyObject *t) {
    Py_hash_t h = (Py_hash_t)((uintptr_t)t >> 4);
    return h == -1 ? -2 : h;
}

static Py_ssize_t Tensor_len(pr_Tensor *t) {
    if (pr_tensor_check_real(t, "len(Tensor)") < 0) return -1;
    if (t->v.ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)t->v.shape[0];
}

static PyObject *Tensor_float(pr_Tensor *t) {
    if (pr_tensor_check_real(t, "float(Tensor)") < 0) return NULL;
    if (t->v.size != 1) {
        PyErr_Format(PyExc_TypeError, "float(Tensor): only size-1 tensors convert, got size %lld",
                     (long long)t->v.size);
        return NULL;
    }
    switch (t->v.dtype) {
    case PR_F32: return PyFloat_FromDouble(*(float *)t->v.data);
    case PR_I32: return PyFloat_FromDouble(*(int32_t *)t->v.data);
    case PR_I64: return PyFloat_FromDouble((double)*(int64_t *)t->v.data);
    case PR_U8:
    case PR_BOOL: return PyFloat_FromDouble(*(uint8_t *)t->v.data);
    case PR_BF16: return PyFloat_FromDouble(pr_bf16_to_f32(*(uint16_t *)t->v.data));
    }
    return NULL;
}

static PyObject *Tensor_int(pr_Tensor *t) {
    PyObject *f = Tensor_float(t);
    if (!f) return NULL;
    Py_DECREF(f);
    switch (t->v.dtype) { /* exact for integer data (int64 does not fit a double) */
    case PR_I32: return PyLong_FromLong(*(int32_t *)t->v.data);
    case PR_I64: return PyLong_FromLongLong(*(int64_t *)t->v.data);
    case PR_U8:
    case PR_BOOL: return PyLong_FromLong(*(uint8_t *)t->v.data);
    case PR_F32: return PyLong_FromDouble(*(float *)t->v.data);
    case PR_BF16: return PyLong_FromDouble(pr_bf16_to_f32(*(uint16_t *)t->v.data));
    }
    return NULL;
}

/* The conversions; the operators are tensor_ops.c's (pr_tensor_ops_init). */
static PyNumberMethods Tensor_as_number = {
    .nb_bool = (inquiry)Tensor_bool,
    .nb_float = (unaryfunc)Tensor_float,
    .nb_int = (unaryfunc)Tensor_int,
};

static PySequenceMethods Tensor_as_sequence = {
    .sq_length = (lenfunc)Tensor_len,
};

static PyMappingMethods Tensor_as_mapping = {
    .mp_length = (lenfunc)Tensor_len, /* mp_subscript: tensor_ops.c */
};

static int Tensor_getbuffer(pr_Tensor *t, Py_buffer *view, int flags) {
    if (pr_tensor_check_real(t, "memoryview(Tensor)") < 0) {
        view->obj = NULL;
        return -1;
    }
    /* A tensor is C-contiguous; it is also Fortran-contiguous when at most
     * one dimension exceeds 1. */
    int longer = 0;
    for (int i = 0; i < t->v.ndim; i++) longer += t->v.shape[i] > 1;
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && longer > 1) {
        PyErr_SetString(PyExc_BufferError, "Tensor: the buffer is C-contiguous, not Fortran");
        view->obj = NULL;
        return -1;
    }
    /* bfloat16 has no struct-module format: consumers that need one (NumPy
     * among them) fall back to __array__, which gives ml_dtypes.bfloat16. */
    if (t->v.dtype == PR_BF16 && (flags & PyBUF_FORMAT) == PyBUF_FORMAT) {
        PyErr_SetString(PyExc_BufferError,
                        "Tensor: bfloat16 has no buffer-protocol format; use .numpy() "
                        "(an ml_dtypes.bfloat16 array)");
        view->obj = NULL;
        return -1;
    }
    static char *formats[PR_N_DTYPES] = {"f", "i", "q", "B", "?", "H"};
    view->buf = t->v.data;
    view->obj = (PyObject *)t;
    Py_INCREF(t);
    view->itemsize = (Py_ssize_t)pr_dtype_size(t->v.dtype);
    view->len = (Py_ssize_t)t->v.size * view->itemsize;
    view->readonly = 0;
    view->format = (flags & PyBUF_FORMAT) ? formats[t->v.dtype] : NULL;
    /* Without PyBUF_ND the consumer sees plain bytes (as NumPy exports them). */
    view->ndim = (flags & PyBUF_ND) ? t->v.ndim : 0;
    view->shape = (flags & PyBUF_ND) ? t->shape_py : NULL;
    view->strides = NULL; /* contiguous */
    view->suboffsets = NULL;
    view->internal = NULL;
    t->exports++;
    return 0;
}

static void Tensor_releasebuffer(pr_Tensor *t, Py_buffer *view) { t->exports--; }

static PyBufferProcs Tensor_as_buffer = {
    .bf_getbuffer = (getbufferproc)Tensor_getbuffer,
    .bf_releasebuffer = (releasebufferproc)Tensor_releasebuffer,
};

static PyMethodDef Tensor_methods[] = {
    {"numpy", (PyCFunction)Tensor_numpy, METH_NOARGS,
     "numpy() -> numpy.ndarray\n\nA zero-copy NumPy view of the tensor's buffer (same shape and "
     "dtype; writes show through). Raises TypeError on a symbolic (traced) tensor."},
    {"__array__", (PyCFunction)(void (*)(void))Tensor_array, METH_VARARGS | METH_KEYWORDS,
     "__array__(dtype=None, copy=None): the NumPy interop hook."},
    {NULL}};

static PyGetSetDef Tensor_getset[] = {
    {"shape", (getter)Tensor_get_shape, NULL, "Shape as a tuple of ints (NHWC for images).", NULL},
    {"dtype", (getter)Tensor_get_dtype, NULL,
     "'float32', 'bfloat16', 'int32', 'int64', 'uint8' or 'bool'.", NULL},
    {"ndim", (getter)Tensor_get_ndim, NULL, "Rank.", NULL},
    {"size", (getter)Tensor_get_size, NULL, "Number of elements.", NULL},
    {"nbytes", (getter)Tensor_get_nbytes, NULL, "Buffer size in bytes.", NULL},
    {"is_symbolic", (getter)Tensor_get_symbolic, NULL,
     "True while tracing: the tensor stands for a value the compiled graph computes.", NULL},
    {"_sym", (getter)Tensor_get_sym, NULL, "Graph-side handle of a symbolic tensor.", NULL},
    {"_trainable", (getter)Tensor_get_trainable, (setter)Tensor_set_trainable,
     "Watched by every GradientTape (set by trainable Variables).", NULL},
    {"_address", (getter)Tensor_get_address, NULL, "Buffer address (tests).", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}};

PyTypeObject pr_TensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyresnet.Tensor",
    .tp_basicsize = sizeof(pr_Tensor),
    .tp_dealloc = (destructor)Tensor_dealloc,
    .tp_as_number = &Tensor_as_number,
    .tp_hash = Tensor_hash,
    .tp_as_sequence = &Tensor_as_sequence,
    .tp_as_mapping = &Tensor_as_mapping,
    .tp_as_buffer = &Tensor_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Tensor(value)\n\n"
              "A contiguous array of float32, bfloat16, int32, int64, uint8 or bool (images are\n"
              "NHWC).  `value` is a Tensor, NumPy array, nested list or Python number; it is\n"
              "copied.  Floating input becomes float32 (ml_dtypes.bfloat16 stays bfloat16); bool\n"
              "stays bool; int8/16 and uint16 become int32.\n"
              "Exposes the buffer protocol, __array__ and a zero-copy .numpy().\n"
              "Raises TypeError for other dtypes or objects.",
    .tp_traverse = (traverseproc)Tensor_traverse,
    .tp_clear = (inquiry)Tensor_clear,
    .tp_weaklistoffset = offsetof(pr_Tensor, weakreflist),
    .tp_dictoffset = offsetof(pr_Tensor, dict),
    .tp_methods = Tensor_methods,
    .tp_getset = Tensor_getset,
    .tp_new = Tensor_new,
};

/* The bfloat16 dtype comes from ml_dtypes, as in JAX and Keras. */
static int find_bfloat16(void) {
    PyObject *mod = PyImport_ImportModule("ml_dtypes");
    if (!mod) return -1;
    PyObject *type = PyObject_GetAttrString(mod, "bfloat16");
    Py_DECREF(mod);
    if (!type) return -1;
    PyArray_Descr *d = NULL;
    int ok = PyArray_DescrConverter(type, &d);
    Py_DECREF(type);
    if (!ok) return -1;
    bf16_typenum = d->type_num;
    int size_ok = PyDataType_ELSIZE(d) == 2;
    Py_DECREF(d);
    if (!size_ok) {
        PyErr_SetString(PyExc_ImportError, "ml_dtypes.bfloat16 is not a 2-byte dtype");
        return -1;
    }
    return 0;
}

int pr_tensor_init_type(PyObject *module) {
    import_array1(-1);
    if (find_bfloat16() < 0) return -1;
    if (PyType_Ready(&pr_TensorType) < 0) return -1;
    /* NumPy defers binary operators with a Tensor to the Tensor. */
    if (PyDict_SetItemString(pr_TensorType.tp_dict, "__array_ufunc__", Py_None) < 0) return -1;
    Py_INCREF(&pr_TensorType);
    if (PyModule_AddObject(module, "Tensor", (PyObject *)&pr_TensorType) < 0) {
        Py_DECREF(&pr_TensorType);
        return -1;
    }
    return 0;
}
