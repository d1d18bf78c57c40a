/* pyresnet._C: module init.  csrc/ is built in floors, each file calling
 * only its own floor and those below (docs/architecture.md,
 * tests/test_layering.py); this file, the top one, wires them together:
 * the ops of op_list.h into the registry, the tapes' and the tracer's hooks into
 * pr_call (their init functions install them), the executor into the Graph
 * type, the input pipeline into the executor. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "graph.h"
#include "op_list.h"

/* Every op of every family (op_list.h). */
#define PR_OP_ADDRESS(name, ...) &pr_op_##name,
static const pr_op *const registry[] = {PR_OPS(PR_OP_ADDRESS) NULL};
#undef PR_OP_ADDRESS

int pr_distribute_init(PyObject *module); /* ops_distribute.c: mpi_bind, mpi_world */
int pr_autodiff_init(PyObject *module);   /* autodiff.c: Tape; installs the tape hook */
int pr_pipeline_init(PyObject *module);   /* pipeline.c: BatchIterator; the batch source */

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyresnet._C",
    .m_doc = "The pyresnet C core: Tensor, the op registry, autodiff tapes, graphs.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__C(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (pr_tensor_ops_init(m) < 0 || pr_tensor_init_type(m) < 0 ||
        pr_ops_init(m, registry) < 0 || pr_distribute_init(m) < 0 || pr_autodiff_init(m) < 0 ||
        pr_graph_init(m) < 0 || pr_executor_init(m, &pr_GraphType) < 0 ||
        pr_pipeline_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
