/* The Tensor object: a contiguous buffer (float32, int32, int64 or uint8)
 * with a shape, or a symbolic stand-in for one while a function is traced. */
#ifndef PR_TENSOR_H
#define PR_TENSOR_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "kernels/kernels.h"

typedef struct {
    PyObject_HEAD
    pr_view v;           /* data == NULL for a symbolic tensor */
    PyObject *sym;       /* symbolic: owned by the graph code (graph.c); NULL when real */
    Py_ssize_t exports;  /* live buffer-protocol exports */
    uint64_t version;    /* bumped by every in-place op on it (tapes check it) */
    int trainable;       /* a trainable Variable: every GradientTape watches it */
    Py_ssize_t shape_py[PR_MAX_DIMS]; /* shape as Py_ssize_t for the buffer protocol */
    PyObject *dict;      /* attributes of Python subclasses (Variable) */
    PyObject *weakreflist;
} pr_Tensor;

extern PyTypeObject pr_TensorType;

#define pr_Tensor_Check(o) PyObject_TypeCheck((o), &pr_TensorType)
#define pr_is_symbolic(t) (((pr_Tensor *)(t))->sym != NULL)

/* A new real tensor with an uninitialised buffer of the given shape. */
pr_Tensor *pr_tensor_new(pr_dtype dtype, int ndim, const int64_t *shape);
/* A new symbolic tensor (no buffer); `sym` is stolen. */
pr_Tensor *pr_tensor_new_symbolic(pr_dtype dtype, int ndim, const int64_t *shape, PyObject *sym);
/* A float32 scalar tensor. */
pr_Tensor *pr_tensor_scalar(float value);
/* Any Tensor (new reference), NumPy array, Python number or nested list ->
 * Tensor.  Floating input becomes float32; int32/int64/uint8 stay as they
 * are; bool stays bool (PR_BOOL); int8, int16 and uint16 become int32.  Raises TypeError for
 * anything else (uint32/uint64, complex, strings, objects, ragged lists). */
pr_Tensor *pr_tensor_from_object(PyObject *obj);
/* The same for an argument: a TypeError/ValueError gets the prefix
 * "<who>: <what>: "; other exceptions (a user's __array__ raising,
 * MemoryError) pass through as they are. */
pr_Tensor *pr_tensor_from_arg(PyObject *obj, const char *who, const char *what);

/* "(2, 3, 4)" into buf; unknown sizes of the graph traced in this thread by
 * their names ("(batch, 32, 32, 3)"). */
const char *pr_shape_str(const pr_view *v, char *buf, size_t n);
/* The same with the symbols of table `tab` (may be NULL). */
struct pr_symtab;
const char *pr_shape_str_in(const struct pr_symtab *tab, const pr_view *v, char *buf, size_t n);
/* Why pr_shape_size rejects v's shape, as the end of a sentence. */
const char *pr_shape_error(const pr_view *v);

/* 0 for a real tensor; -1 with a TypeError saying `what` needs a value for
 * a symbolic one (the tracing hint). */
int pr_tensor_check_real(pr_Tensor *t, const char *what);

/* Ready the type (tensor.c; also imports NumPy's C API), after
 * pr_tensor_ops_init (tensor_ops.c) filled in its operators. */
int pr_tensor_init_type(PyObject *module);
int pr_tensor_ops_init(PyObject *module);

#endif
