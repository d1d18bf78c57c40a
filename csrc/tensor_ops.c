/* The Tensor's operators, in one place: arithmetic (+ - * / ** @ and unary
 * - abs) and comparisons as registry ops (so they are taped and traced),
 * while tracing + - * // on sizes from pyresnet.ops.shape as new sizes, the
 * methods written in Python (indexing, iteration, & | ^ ~, reshape, sum,
 * astype, T: pyresnet/tensor.py) and the repr.  tensor.c defines the type
 * below the op registry; pr_tensor_ops_init fills these slots before the
 * type is readied. */
#include "ops.h"
#include "op_list.h"

#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL PR_ARRAY_API
#include <numpy/arrayobject.h>

static PyObject *Tensor_repr(pr_Tensor *t) {
    char shape[256];
    pr_shape_str_in(t->sym ? pr_symtab_of(t->sym) : NULL, &t->v, shape, sizeof shape);
    if (t->sym)
        return PyUnicode_FromFormat("<symbolic Tensor shape=%s dtype=%s>", shape,
                                    pr_dtype_name(t->v.dtype));
    PyObject *a = PyObject_CallMethod((PyObject *)t, "numpy", NULL);
    if (!a) return NULL;
    PyObject *r = PyObject_Repr(a);
    Py_DECREF(a);
    if (!r) return NULL;
    PyObject *out = PyUnicode_FromFormat("<Tensor shape=%s dtype=%s numpy=%U>", shape,
                                         pr_dtype_name(t->v.dtype), r);
    Py_DECREF(r);
    return out;
}

/* Methods written in Python (pyresnet/tensor.py: reshape, sum, astype, T,
 * __getitem__, ...), installed once by _C._set_tensor_methods. */
static PyObject *py_methods;

static PyObject *py_method(const char *name) {
    PyObject *f = py_methods ? PyDict_GetItemString(py_methods, name) : NULL;
    if (!f) PyErr_Format(PyExc_TypeError, "Tensor.%s: pyresnet's tensor methods are not loaded "
                         "(import pyresnet)", name);
    return f;
}

static PyObject *call_py1(const char *name, PyObject *a) {
    PyObject *f = py_method(name);
    return f ? PyObject_CallOneArg(f, a) : NULL;
}
static PyObject *call_py2(const char *name, PyObject *a, PyObject *b) {
    PyObject *f = py_method(name);
    return f ? PyObject_CallFunctionObjArgs(f, a, b, NULL) : NULL;
}
static PyObject *Tensor_getitem(PyObject *t, PyObject *key) { return call_py2("__getitem__", t, key); }
static PyObject *Tensor_iter(PyObject *t) { return call_py1("__iter__", t); }
static PyObject *Tensor_and(PyObject *a, PyObject *b) { return call_py2("__and__", a, b); }
static PyObject *Tensor_or(PyObject *a, PyObject *b) { return call_py2("__or__", a, b); }
static PyObject *Tensor_xor(PyObject *a, PyObject *b) { return call_py2("__xor__", a, b); }
static PyObject *Tensor_invert(PyObject *a) { return call_py1("__invert__", a); }

/* Comparisons are elementwise registry ops giving bool tensors (as NumPy
 * and Keras tensors).  == and != with an object that is no array-like (None,
 * a string, a layer) fall back to identity, as Python's default.  Hashing
 * stays by identity, so tensors still key dicts and sets; a symbolic
 * comparison used as a Python bool raises the tracing error. */
static int array_like(PyObject *o) {
    return pr_Tensor_Check(o) || PyFloat_Check(o) || PyLong_Check(o) || PyArray_Check(o) ||
           PyArray_IsScalar(o, Generic);
}

static PyObject *Tensor_richcompare(PyObject *a, PyObject *b, int op) {
    static const pr_op *const ops[] = {&pr_op_less,      &pr_op_less_equal, &pr_op_equal,
                                       &pr_op_not_equal, &pr_op_greater,
                                       &pr_op_greater_equal}; /* Py_LT .. Py_GE */
    if ((op == Py_EQ || op == Py_NE) && !(array_like(a) && array_like(b)))
        Py_RETURN_NOTIMPLEMENTED;
    PyObject *inputs[2] = {a, b};
    return pr_call1(ops[op], inputs, 2, NULL);
}

/* Arithmetic dispatches to registered ops so it is recorded and traced;
 * while tracing, + - * on sizes from pyresnet.ops.shape (and ints) make new
 * sizes, as tf.shape(x)[1] * tf.shape(x)[2] does. */
static PyObject *binary(const pr_op *op, PyObject *a, PyObject *b) {
    PyObject *inputs[2] = {a, b};
    return pr_call1(op, inputs, 2, NULL);
}
static PyObject *size_or_binary(int kind, const pr_op *op, PyObject *a, PyObject *b) {
    PyObject *r = pr_trace_size_arith(kind, a, b);
    return r || PyErr_Occurred() ? r : binary(op, a, b);
}
static PyObject *Tensor_add(PyObject *a, PyObject *b) {
    return size_or_binary('+', &pr_op_add, a, b);
}
static PyObject *Tensor_sub(PyObject *a, PyObject *b) {
    return size_or_binary('-', &pr_op_subtract, a, b);
}
static PyObject *Tensor_mul(PyObject *a, PyObject *b) {
    return size_or_binary('*', &pr_op_multiply, a, b);
}
/* a // b: only for sizes while tracing (there is no integer tensor division). */
static PyObject *Tensor_floordiv(PyObject *a, PyObject *b) {
    PyObject *r = pr_trace_size_arith('/', a, b);
    if (r || PyErr_Occurred()) return r;
    Py_RETURN_NOTIMPLEMENTED;
}
static PyObject *Tensor_div(PyObject *a, PyObject *b) { return binary(&pr_op_divide, a, b); }
static PyObject *Tensor_matmul(PyObject *a, PyObject *b) { return binary(&pr_op_matmul, a, b); }
static PyObject *Tensor_neg(PyObject *a) { return pr_call1(&pr_op_negative, &a, 1, NULL); }
static PyObject *Tensor_pos(PyObject *a) { return Py_NewRef(a); }
static PyObject *Tensor_abs(PyObject *a) { return pr_call1(&pr_op_abs, &a, 1, NULL); }
static PyObject *Tensor_pow(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
    return binary(&pr_op_power, a, b);
}

/* _C._set_tensor_methods(dict): the Python-written methods.  Entries are
 * added to the type (functions become methods, properties attributes);
 * __getitem__ is called by the mapping slot. */
static PyObject *set_tensor_methods(PyObject *mod, PyObject *d) {
    if (!PyDict_Check(d)) return PyErr_Format(PyExc_TypeError, "expected a dict");
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &value))
        if (PyDict_SetItem(pr_TensorType.tp_dict, key, value) < 0) return NULL;
    PyType_Modified(&pr_TensorType);
    Py_XSETREF(py_methods, Py_NewRef(d));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"_set_tensor_methods", set_tensor_methods, METH_O,
     "Install Tensor methods written in Python (pyresnet/tensor.py)."},
    {NULL}};

int pr_tensor_ops_init(PyObject *module) {
    PyNumberMethods *nb = pr_TensorType.tp_as_number;
    nb->nb_add = Tensor_add;
    nb->nb_subtract = Tensor_sub;
    nb->nb_multiply = Tensor_mul;
    nb->nb_true_divide = Tensor_div;
    nb->nb_floor_divide = Tensor_floordiv;
    nb->nb_matrix_multiply = Tensor_matmul;
    nb->nb_negative = Tensor_neg;
    nb->nb_positive = Tensor_pos;
    nb->nb_absolute = Tensor_abs;
    nb->nb_power = Tensor_pow;
    nb->nb_and = Tensor_and;
    nb->nb_or = Tensor_or;
    nb->nb_xor = Tensor_xor;
    nb->nb_invert = Tensor_invert;
    pr_TensorType.tp_as_mapping->mp_subscript = Tensor_getitem;
    pr_TensorType.tp_iter = Tensor_iter;
    pr_TensorType.tp_richcompare = Tensor_richcompare;
    pr_TensorType.tp_repr = (reprfunc)Tensor_repr;
    return PyModule_AddFunctions(module, module_methods);
}
