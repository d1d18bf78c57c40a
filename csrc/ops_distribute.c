/* Registry entries of the distribute family: collectives over the MPI
 * library that mpi4py loaded (kernels/comm.c), the module function that
 * binds it, and the two copies that pack tensors into one flat buffer and
 * out again (a bucket: one allreduce for many gradients, as Horovod's
 * tensor fusion and PyTorch DDP's buckets).  Collective ops are
 * PR_OP_STATEFUL (never removed from a graph: every rank must make the same
 * calls) and PR_OP_COLLECTIVE (the jit never times them by running them
 * again). */
#include "ops.h" /* Python.h first */
#include "op_list.h"

#include <string.h>

#include "kernels/comm.h"

typedef struct {
    int average;
} allreduce_attrs;

static int infer_allreduce(const pr_op *op, const pr_view *in, int n, const void *attrs,
                           pr_view *out, size_t *ws) {
    if (!pr_comm_bound())
        return pr_fail(op, PyExc_RuntimeError,
                       "MPI is not initialised in this process: call pyresnet.distribute.init() "
                       "first (it needs mpi4py: pip install 'pyresnet[distributed]')");
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    if (op->n_out) pr_set_out(&out[0], PR_F32, in[0].ndim, in[0].shape);
    else *ws = (size_t)in[0].size * sizeof(float); /* in place: the send copy */
    return 0;
}

static int fw_allreduce(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    return pr_k_allreduce(in[0].data, out[0].data, in[0].size,
                          ((const allreduce_attrs *)a)->average, NULL);
}

static int fw_allreduce_inplace(const pr_view *in, int n, pr_view *out, const void *a,
                                void *ws) {
    return pr_k_allreduce(in[0].data, in[0].data, in[0].size,
                          ((const allreduce_attrs *)a)->average, ws);
}

/* y = sum_r x_r on every rank, so dL/dx_r = sum_r' dL/dy_r': the gradient
 * is the same allreduce of the output gradients (Horovod's rule). */
static int gr_allreduce(PyObject *const *in, PyObject *const *out, const void *attrs,
                        PyObject *const *gout, const int *needs, PyObject **gin) {
    return (gin[0] = pr_call1(&pr_op_allreduce, &gout[0], 1, attrs)) ? 0 : -1;
}

static const pr_attr_spec attrs_spec[] = {
    {"average", PR_ATTR_BOOL, offsetof(allreduce_attrs, average), 0, 0}, {NULL}};

const pr_op pr_op_allreduce = {
    .name = "allreduce", .n_in = 1, .n_out = 1, .flags = PR_OP_STATEFUL | PR_OP_COLLECTIVE,
    .attrs = attrs_spec, .attr_size = sizeof(allreduce_attrs), .infer = infer_allreduce,
    .forward = fw_allreduce, .gradient = gr_allreduce,
    .doc = "allreduce(x; average=False): the float32 sum of x over all MPI ranks (the mean "
           "when average), on every rank.  Needs pyresnet.distribute.init()."};
const pr_op pr_op_allreduce_inplace = {
    .name = "allreduce_inplace", .n_in = 1, .n_out = 0, .mutates = 1,
    .flags = PR_OP_STATEFUL | PR_OP_COLLECTIVE, .attrs = attrs_spec,
    .attr_size = sizeof(allreduce_attrs), .infer = infer_allreduce,
    .forward = fw_allreduce_inplace,
    .doc = "allreduce_inplace(var; average=False): var = the sum (or mean) of var over all "
           "MPI ranks, in place.  Needs pyresnet.distribute.init()."};

/* ---- flat buffers (buckets) ------------------------------------------------ */

typedef struct {
    int64_t offset;
    pr_ints shape;
} flat_attrs;

/* Elements [offset, offset + count) must lie in a buffer of `size`; both sizes
 * known (a bucket holds weight-shaped gradients). */
static int check_range(const pr_op *op, int64_t offset, int64_t count, int64_t size) {
    if (pr_dim_is_sym(count) || pr_dim_is_sym(size))
        return pr_fail(op, PyExc_ValueError, "needs tensors of known sizes (no batch dimension)");
    if (offset < 0 || count < 0 || offset > size || count > size - offset)
        return pr_fail(op, PyExc_ValueError,
                       "elements [%lld, %lld + %lld) do not lie in a buffer of %lld elements",
                       (long long)offset, (long long)offset, (long long)count, (long long)size);
    return 0;
}

static int infer_flat_assign(const pr_op *op, const pr_view *in, int n, const void *attrs,
                             pr_view *out, size_t *ws) {
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0 || pr_expect_dtype(op, in, 1, PR_F32) < 0)
        return -1;
    return check_range(op, ((const flat_attrs *)attrs)->offset, in[1].size, in[0].size);
}

static int infer_flat_slice(const pr_op *op, const pr_view *in, int n, const void *attrs,
                            pr_view *out, size_t *ws) {
    const flat_attrs *a = attrs;
    if (pr_expect_dtype(op, in, 0, PR_F32) < 0) return -1;
    for (int d = 0; d < a->shape.n; d++)
        if (a->shape.v[d] < 0)
            return pr_fail(op, PyExc_ValueError, "shape must hold sizes >= 0, got %lld at %d",
                           (long long)a->shape.v[d], d);
    int64_t count = pr_shape_size(a->shape.n, a->shape.v, sizeof(float));
    if (count < 0) return pr_fail(op, PyExc_ValueError, "shape too large");
    if (check_range(op, a->offset, count, in[0].size) < 0) return -1;
    pr_set_out(&out[0], PR_F32, a->shape.n, a->shape.v);
    return 0;
}

static int fw_flat_assign(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    memcpy((float *)in[0].data + ((const flat_attrs *)a)->offset, in[1].data,
           (size_t)in[1].size * sizeof(float));
    return PR_OK;
}

static int fw_flat_slice(const pr_view *in, int n, pr_view *out, const void *a, void *ws) {
    memcpy(out[0].data, (const float *)in[0].data + ((const flat_attrs *)a)->offset,
           (size_t)out[0].size * sizeof(float));
    return PR_OK;
}

static const pr_attr_spec flat_assign_spec[] = {
    {"offset", PR_ATTR_INT, offsetof(flat_attrs, offset), 1, 0}, {NULL}};
static const pr_attr_spec flat_slice_spec[] = {
    {"offset", PR_ATTR_INT, offsetof(flat_attrs, offset), 1, 0},
    {"shape", PR_ATTR_INTS, offsetof(flat_attrs, shape), 1, 0}, {NULL}};

const pr_op pr_op_flat_assign = {
    .name = "flat_assign", .n_in = 2, .n_out = 0, .mutates = 1, .flags = PR_OP_STATEFUL,
    .attrs = flat_assign_spec, .attr_size = sizeof(flat_attrs), .infer = infer_flat_assign,
    .forward = fw_flat_assign,
    .doc = "flat_assign(var, value; offset): var.flat[offset:offset + value.size] = "
           "value.flat, in place (float32; packs a bucket)."};
const pr_op pr_op_flat_slice = {
    .name = "flat_slice", .n_in = 1, .n_out = 1, .attrs = flat_slice_spec,
    .attr_size = sizeof(flat_attrs), .infer = infer_flat_slice, .forward = fw_flat_slice,
    .doc = "flat_slice(x; offset, shape): x.flat[offset:offset + prod(shape)] as a new tensor "
           "of `shape` (float32; unpacks a bucket)."};


/* ---- binding MPI ---------------------------------------------------------- */

static PyObject *py_mpi_bind(PyObject *self, PyObject *args) {
    const char *path;
    int handle_bytes, size, rank;
    long long comm, float_type, sum_op, arrival_comm;
    if (!PyArg_ParseTuple(args, "siLLLLii:mpi_bind", &path, &handle_bytes, &comm, &float_type,
                          &sum_op, &arrival_comm, &size, &rank))
        return NULL;
    int rc = pr_comm_bind(path, handle_bytes, comm, float_type, sum_op, arrival_comm, size,
                          rank);
    if (rc == PR_ERR_MEMORY) return PyErr_NoMemory();
    if (rc != PR_OK) {
        PyErr_Format(PyExc_RuntimeError, "mpi_bind: %s", pr_kernel_error_message());
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *py_mpi_world(PyObject *self, PyObject *noargs) {
    return Py_BuildValue("(Oii)", pr_comm_bound() ? Py_True : Py_False, pr_comm_size(),
                         pr_comm_rank());
}

static PyObject *py_mpi_set_timeout(PyObject *self, PyObject *arg) {
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1.0 && PyErr_Occurred()) return NULL;
    if (!(seconds >= 0) || seconds > 1e9) /* (NaN fails the first test) */
        return PyErr_Format(PyExc_ValueError,
                            "collective_timeout must be seconds in [0, 1e9] (0: none), got %R",
                            arg);
    pr_comm_set_timeout(seconds);
    Py_RETURN_NONE;
}

static PyObject *py_mpi_timeout(PyObject *self, PyObject *noargs) {
    return PyFloat_FromDouble(pr_comm_timeout());
}

static PyObject *py_mpi_barrier(PyObject *self, PyObject *args) {
    const char *what;
    if (!PyArg_ParseTuple(args, "s:mpi_barrier", &what)) return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pr_comm_barrier(what);
    Py_END_ALLOW_THREADS
    if (rc != PR_OK) {
        PyErr_Format(PyExc_RuntimeError, "mpi_barrier: %s", pr_kernel_error_message());
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef distribute_methods[] = {
    {"mpi_bind", py_mpi_bind, METH_VARARGS,
     "mpi_bind(path, handle_bytes, comm, float_type, sum_op, arrival_comm, size, rank): "
     "resolve MPI_Allreduce and the calls of timed collectives from the MPI library the "
     "shared object at `path` (mpi4py's MPI module) links, with mpi4py's handles of the "
     "communicator, MPI_FLOAT, MPI_SUM and a duplicate of the communicator for the arrival "
     "messages."},
    {"mpi_world", py_mpi_world, METH_NOARGS,
     "mpi_world() -> (bound, size, rank); (False, 1, 0) before mpi_bind."},
    {"mpi_set_timeout", py_mpi_set_timeout, METH_O,
     "mpi_set_timeout(seconds): how long a collective waits for the other ranks before this "
     "rank reports them and ends the job (0: forever).  ValueError outside [0, 1e9]."},
    {"mpi_timeout", py_mpi_timeout, METH_NOARGS,
     "mpi_timeout() -> the collective timeout in seconds (0: none)."},
    {"mpi_barrier", py_mpi_barrier, METH_VARARGS,
     "mpi_barrier(what): wait (GIL released) until every rank has called it, with the "
     "collective timeout; `what` names it in the report."},
    {NULL}};

int pr_distribute_init(PyObject *module) {
    return PyModule_AddFunctions(module, distribute_methods);
}
