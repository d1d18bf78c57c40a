/* pyresnet._C: module init, type registration and the registry's methods. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define PY_ARRAY_UNIQUE_SYMBOL PR_ARRAY_API
#include <numpy/arrayobject.h>

#include "ops.h"

int pr_pipeline_init(PyObject *module); /* pipeline.c: the input pipeline */

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyresnet._C",
    .m_doc = "The pyresnet C core: Tensor, the op registry, autodiff tapes, graphs.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__C(void) {
    import_array();
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (pr_tensor_init_type(m) < 0 || pr_ops_init(m) < 0 || pr_autodiff_init(m) < 0 ||
        pr_graph_init(m) < 0 || pr_pipeline_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
