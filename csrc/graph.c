/* The traced graph IR (see the compile issue).  Until tracing lands, a call
 * on symbolic inputs is an error. */
#include "ops.h"

int pr_trace_call(const pr_op *op, PyObject *const *inputs, int n_in, const void *attrs,
                  PyObject **outputs) {
    PyErr_Format(PyExc_NotImplementedError, "%s: tracing is not implemented yet", op->name);
    return -1;
}

int pr_graph_init(PyObject *module) { return 0; }
