/* The input pipeline's C half: _C.BatchIterator yields the batches of one
 * pass over in-memory arrays -- gather the rows of each batch in the given
 * order, run a chain of registered ops (the augmentations) on them, return
 * Tensors -- optionally computing the next batches on a worker thread
 * (pthread, no GIL, no Python object touched) while the caller trains.
 *
 * Determinism: a random stage of batch b in pass `epoch` runs its op with
 * the RNG state [seed, (epoch << 32) + b], so the numbers drawn depend only
 * on (seed, epoch, b, image index), never on prefetching or threads.  A
 * stage input given as the string "indices" receives the batch's rows'
 * indices in the source arrays (int64, (n,)): ops such as alternating_flip
 * key their draws on them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first: it sets the feature macros system headers read */

#include <pthread.h>
#include <string.h>
#include <time.h>

#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL PR_ARRAY_API
#include <numpy/arrayobject.h>

#include "kernels/rng.h"
#include "graph.h"

#define MAX_COMP PR_MAX_INPUTS /* components of an element: (images, labels, ...) */
#define IN_CONST (-1)
#define IN_STATE (-2)
#define IN_INDICES (-3) /* the batch's source row indices, int64 (n,) */

typedef struct {
    const pr_op *op;
    PR_ATTR_ALIGN char attrs[PR_ATTR_BYTES];
    int src[PR_MAX_INPUTS];      /* component index, IN_CONST or IN_STATE */
    pr_view konst[PR_MAX_INPUTS];
    int64_t seed;
    int dst[PR_MAX_OUTPUTS];     /* component replaced by output j, or -1 */
    int final[PR_MAX_OUTPUTS];   /* output j is the component's value in the batch returned */
    void *buf[PR_MAX_OUTPUTS];   /* output buffers, sized for the larger batch (non-final ones) */
    pr_view out[2][PR_MAX_OUTPUTS]; /* output views: [0] full batch, [1] last batch */
    int kernel[2];                  /* the variant an eager call would run, per batch size */
} stage;

enum { TASK_FREE, TASK_QUEUED, TASK_DONE };

typedef struct {
    int64_t batch;
    int status;
    int rc;                      /* PR_* code of the computation */
    char error[512];
    PyObject *tensors;           /* tuple of the batch's output Tensors (GIL side only) */
    void *dst[MAX_COMP];         /* their buffers (worker side) */
} task;

typedef struct {
    PyObject_HEAD
    int n_comp;
    PyObject *arrays;            /* tuple of the source arrays (kept alive) */
    pr_view src[MAX_COMP];
    int64_t row_bytes[MAX_COMP];
    void *gathered[MAX_COMP];
    int64_t *order, n_order;
    int64_t batch_size, n_batches, last_size;
    uint64_t epoch;
    int n_stages;
    stage *stages;
    PyObject *keep;              /* constants and states the stages read */
    pr_view final[2][MAX_COMP];  /* component views after the last stage */
    int untouched[MAX_COMP];     /* no stage replaces the component: gathered straight out */
    void *scratch;
    int64_t next;                /* next batch to return */
    double cpu_seconds;          /* CPU time spent computing batches (written under mu) */
    /* worker */
    int depth;                   /* batches computed ahead; 0 = no worker */
    int threads;                 /* the augmentation kernels' threads, worker or not */
    task *tasks;
    int64_t submitted, completed;
    int stop, started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} BatchIterator;

static PyTypeObject BatchIteratorType;

/* ---- computing one batch (no GIL) ----------------------------------------- */

static int64_t view_bytes(const pr_view *v) { return v->size * (int64_t)pr_dtype_size(v->dtype); }

static void with_batch(pr_view *v, int64_t n) {
    int64_t per = v->shape[0] ? v->size / v->shape[0] : 0;
    v->shape[0] = n;
    v->size = per * n;
}

static double thread_cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The view of n row indices (data set by the caller). */
static pr_view indices_view(int64_t n) {
    pr_view v;
    memset(&v, 0, sizeof v);
    v.dtype = PR_I64;
    v.ndim = 1;
    v.shape[0] = n;
    v.size = n;
    return v;
}

static int compute_batch(BatchIterator *it, int64_t b, void *const *dst, char *error) {
    int variant = b == it->n_batches - 1 && it->last_size != it->batch_size;
    int64_t n = variant ? it->last_size : it->batch_size, start = b * it->batch_size;
    pr_view cur[MAX_COMP];
    for (int k = 0; k < it->n_comp; k++) {
        const char *from = it->src[k].data;
        char *to = it->untouched[k] ? dst[k] : it->gathered[k];
        int64_t rb = it->row_bytes[k];
        for (int64_t r = 0; r < n; r++)
            memcpy(to + r * rb, from + it->order[start + r] * rb, (size_t)rb);
        cur[k] = it->src[k];
        cur[k].data = to;
        with_batch(&cur[k], n);
    }
    for (int s = 0; s < it->n_stages; s++) {
        stage *st = &it->stages[s];
        int64_t state[2] = {st->seed, (int64_t)((it->epoch << 32) + (uint64_t)b)};
        pr_view in[PR_MAX_INPUTS], out[PR_MAX_OUTPUTS];
        for (int i = 0; i < st->op->n_in; i++) {
            if (st->src[i] >= 0) {
                in[i] = cur[st->src[i]];
            } else if (st->src[i] == IN_INDICES) {
                in[i] = indices_view(n);
                in[i].data = it->order + start;
            } else {
                in[i] = st->konst[i];
                if (st->src[i] == IN_STATE) in[i].data = state;
            }
        }
        for (int j = 0; j < st->op->n_out; j++) {
            out[j] = st->out[variant][j];
            out[j].data = st->final[j] ? dst[st->dst[j]] : st->buf[j];
        }
        int rc = pr_op_run(st->op, st->kernel[variant], in, st->op->n_in, out, st->attrs,
                           it->scratch);
        if (rc != PR_OK) {
            snprintf(error, 512, "%s: %s", st->op->name,
                     rc == PR_ERR_VALUE ? pr_kernel_error_message() : "kernel error");
            return rc;
        }
        for (int j = 0; j < st->op->n_out; j++)
            if (st->dst[j] >= 0) cur[st->dst[j]] = out[j];
    }
    return PR_OK;
}

static void *worker_main(void *arg) {
    BatchIterator *it = arg;
    pr_set_thread_limit(it->threads);
    pthread_mutex_lock(&it->mu);
    for (;;) {
        while (!it->stop && it->completed == it->submitted) pthread_cond_wait(&it->cv, &it->mu);
        if (it->stop) break;
        task *t = &it->tasks[it->completed % it->depth];
        pthread_mutex_unlock(&it->mu);
        double t0 = thread_cpu_seconds();
        t->rc = compute_batch(it, t->batch, t->dst, t->error);
        double spent = thread_cpu_seconds() - t0;
        pthread_mutex_lock(&it->mu);
        it->cpu_seconds += spent;
        t->status = TASK_DONE;
        it->completed++;
        pthread_cond_broadcast(&it->cv);
    }
    pthread_mutex_unlock(&it->mu);
    return NULL;
}

/* ---- GIL side ------------------------------------------------------------- */

/* New output Tensors for batch b; fills dst with their buffers. */
static PyObject *new_outputs(BatchIterator *it, int64_t b, void **dst) {
    int variant = b == it->n_batches - 1 && it->last_size != it->batch_size;
    PyObject *tuple = PyTuple_New(it->n_comp);
    if (!tuple) return NULL;
    for (int k = 0; k < it->n_comp; k++) {
        const pr_view *v = &it->final[variant][k];
        pr_Tensor *t = pr_tensor_new(v->dtype, v->ndim, v->shape);
        if (!t) {
            Py_DECREF(tuple);
            return NULL;
        }
        dst[k] = t->v.data;
        PyTuple_SET_ITEM(tuple, k, (PyObject *)t);
    }
    return tuple;
}

static PyObject *raise_task_error(int rc, const char *error) {
    PyErr_SetString(rc == PR_ERR_VALUE ? PyExc_ValueError
                    : rc == PR_ERR_MEMORY ? PyExc_MemoryError : PyExc_RuntimeError, error);
    return NULL;
}

/* Queue batches up to `depth` ahead of it->next. */
static int submit(BatchIterator *it) {
    while (it->submitted < it->n_batches && it->submitted < it->next + it->depth) {
        task *t = &it->tasks[it->submitted % it->depth];
        t->tensors = new_outputs(it, it->submitted, t->dst);
        if (!t->tensors) return -1;
        t->batch = it->submitted;
        t->status = TASK_QUEUED;
        pthread_mutex_lock(&it->mu);
        it->submitted++;
        pthread_cond_broadcast(&it->cv);
        pthread_mutex_unlock(&it->mu);
    }
    return 0;
}

static void stop_worker(BatchIterator *it) {
    if (!it->started) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&it->mu);
    it->stop = 1;
    pthread_cond_broadcast(&it->cv);
    pthread_mutex_unlock(&it->mu);
    pthread_join(it->thread, NULL);
    Py_END_ALLOW_THREADS
    it->started = 0;
}

static PyObject *BatchIterator_next(BatchIterator *it) {
    if (it->next >= it->n_batches) {
        stop_worker(it);
        return NULL; /* StopIteration */
    }
    if (it->depth == 0) {
        void *dst[MAX_COMP];
        char error[512];
        PyObject *out = new_outputs(it, it->next, dst);
        if (!out) return NULL;
        int rc;
        double t0 = thread_cpu_seconds();
        Py_BEGIN_ALLOW_THREADS
        pr_set_thread_limit(it->threads);
        rc = compute_batch(it, it->next, dst, error);
        pr_set_thread_limit(0);
        Py_END_ALLOW_THREADS
        it->cpu_seconds += thread_cpu_seconds() - t0;
        if (rc != PR_OK) {
            Py_DECREF(out);
            return raise_task_error(rc, error);
        }
        it->next++;
        return out;
    }
    if (!it->started) {
        if (submit(it) < 0) return NULL;
        if (pthread_create(&it->thread, NULL, worker_main, it) != 0) {
            PyErr_SetString(PyExc_RuntimeError, "BatchIterator: cannot start the worker thread");
            return NULL;
        }
        it->started = 1;
    }
    task *t = &it->tasks[it->next % it->depth];
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&it->mu);
    while (t->status != TASK_DONE) pthread_cond_wait(&it->cv, &it->mu);
    pthread_mutex_unlock(&it->mu);
    Py_END_ALLOW_THREADS
    PyObject *out = t->tensors;
    t->tensors = NULL;
    t->status = TASK_FREE;
    it->next++;
    if (t->rc != PR_OK) {
        Py_DECREF(out);
        it->next = it->n_batches; /* a failed pass ends */
        stop_worker(it);
        return raise_task_error(t->rc, t->error);
    }
    if (submit(it) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* ---- for loop nodes: the executor's batch source (graph.h) ---------------- */

static int batches_info(PyObject *o, int *n_comp, int64_t *n_batches, const pr_view **full,
                        const pr_view **last) {
    if (!PyObject_TypeCheck(o, &BatchIteratorType)) return 0;
    BatchIterator *it = (BatchIterator *)o;
    *n_comp = it->n_comp;
    *n_batches = it->n_batches;
    *full = it->final[0];
    *last = it->final[1];
    return 1;
}

static int batches_fill(PyObject *o, int64_t b, void *const *dst, char *error) {
    BatchIterator *it = (BatchIterator *)o;
    if (b < 0 || b >= it->n_batches) {
        snprintf(error, 512, "BatchIterator: batch %lld of a pass of %lld", (long long)b,
                 (long long)it->n_batches);
        return PR_ERR_VALUE;
    }
    pr_set_thread_limit(it->threads);
    int rc = compute_batch(it, b, dst, error);
    pr_set_thread_limit(0);
    return rc;
}

/* ---- construction --------------------------------------------------------- */

static int dtype_of(PyArrayObject *a, pr_dtype *dt) {
    switch (PyArray_TYPE(a)) {
    case NPY_FLOAT: *dt = PR_F32; return 0;
    case NPY_INT32: *dt = PR_I32; return 0;
    case NPY_INT64: *dt = PR_I64; return 0;
    case NPY_UINT8: *dt = PR_U8; return 0;
    }
    PyErr_Format(PyExc_TypeError,
                 "BatchIterator: source arrays must be float32, int32, int64 or uint8, got %S",
                 (PyObject *)PyArray_DESCR(a));
    return -1;
}

static int parse_sources(BatchIterator *it, PyObject *sources) {
    if (!PyTuple_Check(sources) || PyTuple_GET_SIZE(sources) < 1 ||
        PyTuple_GET_SIZE(sources) > MAX_COMP) {
        PyErr_Format(PyExc_ValueError, "BatchIterator: sources must be a tuple of 1 to %d arrays",
                     MAX_COMP);
        return -1;
    }
    it->n_comp = (int)PyTuple_GET_SIZE(sources);
    it->arrays = PyTuple_New(it->n_comp);
    if (!it->arrays) return -1;
    for (int k = 0; k < it->n_comp; k++) {
        PyArrayObject *a = (PyArrayObject *)PyArray_FROM_OF(PyTuple_GET_ITEM(sources, k),
                                                           NPY_ARRAY_IN_ARRAY);
        if (!a) return -1;
        PyTuple_SET_ITEM(it->arrays, k, (PyObject *)a);
        pr_view *v = &it->src[k];
        if (dtype_of(a, &v->dtype) < 0) return -1;
        if (PyArray_NDIM(a) < 1 || PyArray_NDIM(a) > PR_MAX_DIMS) {
            PyErr_Format(PyExc_ValueError, "BatchIterator: source %d must have rank 1 to %d", k,
                         PR_MAX_DIMS);
            return -1;
        }
        v->data = PyArray_DATA(a);
        v->ndim = PyArray_NDIM(a);
        v->size = 1;
        for (int d = 0; d < v->ndim; d++) v->shape[d] = PyArray_DIM(a, d), v->size *= v->shape[d];
        if (v->shape[0] != it->src[0].shape[0]) {
            PyErr_Format(PyExc_ValueError,
                         "BatchIterator: sources must have the same length, got %lld and %lld",
                         (long long)it->src[0].shape[0], (long long)v->shape[0]);
            return -1;
        }
        it->row_bytes[k] = v->shape[0] ? view_bytes(v) / v->shape[0] : 0;
    }
    return 0;
}

static int parse_order(BatchIterator *it, PyObject *order) {
    PyArrayObject *a = (PyArrayObject *)PyArray_FROM_OTF(order, NPY_INT64, NPY_ARRAY_IN_ARRAY);
    if (!a) return -1;
    int ok = PyArray_NDIM(a) == 1;
    it->n_order = ok ? PyArray_DIM(a, 0) : 0;
    const int64_t *o = PyArray_DATA(a);
    for (int64_t i = 0; ok && i < it->n_order; i++) ok = o[i] >= 0 && o[i] < it->src[0].shape[0];
    if (!ok) {
        Py_DECREF(a);
        PyErr_Format(PyExc_ValueError,
                     "BatchIterator: order must be a 1-D array of indices in [0, %lld)",
                     (long long)it->src[0].shape[0]);
        return -1;
    }
    it->order = pr_alloc((size_t)it->n_order * sizeof(int64_t));
    if (!it->order) {
        Py_DECREF(a);
        PyErr_NoMemory();
        return -1;
    }
    memcpy(it->order, o, (size_t)it->n_order * sizeof(int64_t));
    Py_DECREF(a);
    return 0;
}

/* A stage: (op name, attrs dict, inputs, outputs).  inputs[i] is a component
 * index, the string "indices" (the rows' source indices), or a Tensor (a
 * constant, or the RNG state where the op mutates that input: only its seed
 * is read); outputs[j] is the component output j replaces, or None. */
static int parse_stage(BatchIterator *it, stage *st, PyObject *spec) {
    PyObject *name, *attrs, *inputs, *outputs;
    if (!PyArg_ParseTuple(spec, "UOOO;BatchIterator: a stage is (op, attrs, inputs, outputs)",
                          &name, &attrs, &inputs, &outputs))
        return -1;
    st->op = pr_op_lookup(PyUnicode_AsUTF8(name));
    if (!st->op) {
        PyErr_Format(PyExc_ValueError, "BatchIterator: op '%U' is not registered", name);
        return -1;
    }
    const pr_op *op = st->op;
    if (!PyDict_Check(attrs) || pr_parse_attrs(op, attrs, st->attrs) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "BatchIterator: attrs must be a dict");
        return -1;
    }
    if (!PyList_Check(inputs) || PyList_GET_SIZE(inputs) != op->n_in || !PyList_Check(outputs) ||
        PyList_GET_SIZE(outputs) != op->n_out)
        return pr_fail(op, PyExc_ValueError,
                       "pipeline stage needs lists of %d inputs and %d outputs", op->n_in,
                       op->n_out);
    for (int i = 0; i < op->n_in; i++) {
        PyObject *v = PyList_GET_ITEM(inputs, i);
        if (PyUnicode_Check(v) && PyUnicode_CompareWithASCIIString(v, "indices") == 0 &&
            !(op->mutates >> i & 1)) {
            st->src[i] = IN_INDICES;
            continue;
        }
        if (PyLong_Check(v)) {
            long k = PyLong_AsLong(v);
            if (k < 0 || k >= it->n_comp || (op->mutates >> i & 1))
                return pr_fail(op, PyExc_ValueError, "pipeline input %d: bad component %ld", i, k);
            st->src[i] = (int)k;
            continue;
        }
        if (!pr_Tensor_Check(v) || pr_is_symbolic(v))
            return pr_fail(op, PyExc_TypeError, "pipeline input %d must be an int or a Tensor", i);
        if (PyList_Append(it->keep, v) < 0) return -1;
        st->konst[i] = ((pr_Tensor *)v)->v;
        st->src[i] = IN_CONST;
        if (op->mutates >> i & 1) {
            const pr_view *s = &st->konst[i];
            if (s->dtype != PR_I64 || s->ndim != 1 || s->shape[0] != 2)
                return pr_fail(op, PyExc_TypeError,
                               "pipeline input %d must be an RNG state, int64 of shape (2,)", i);
            st->seed = ((int64_t *)s->data)[0];
            st->src[i] = IN_STATE;
        }
    }
    for (int j = 0; j < op->n_out; j++) {
        PyObject *v = PyList_GET_ITEM(outputs, j);
        long k = v == Py_None ? -1 : PyLong_AsLong(v);
        if ((k == -1 && PyErr_Occurred()) || k < -1 || k >= it->n_comp)
            return PyErr_Clear(),
                   pr_fail(op, PyExc_ValueError, "pipeline output %d: bad component", j);
        st->dst[j] = (int)k;
    }
    return 0;
}

/* Run the shape rules for one batch size; returns the scratch needed, or -1. */
static int infer_variant(BatchIterator *it, int variant, int64_t n, size_t *scratch) {
    pr_view cur[MAX_COMP];
    for (int k = 0; k < it->n_comp; k++) {
        cur[k] = it->src[k];
        with_batch(&cur[k], n);
    }
    for (int s = 0; s < it->n_stages; s++) {
        stage *st = &it->stages[s];
        pr_view in[PR_MAX_INPUTS];
        for (int i = 0; i < st->op->n_in; i++)
            in[i] = st->src[i] >= 0             ? cur[st->src[i]]
                    : st->src[i] == IN_INDICES ? indices_view(n)
                                               : st->konst[i];
        size_t ws;
        if (pr_infer(st->op, in, st->op->n_in, st->attrs, st->out[variant], &ws) < 0) return -1;
        st->kernel[variant] =
            pr_variant_default(st->op, in, st->op->n_in, st->out[variant], st->attrs);
        ws = pr_variant_scratch(st->op, st->kernel[variant], in, st->op->n_in, st->out[variant],
                                st->attrs, ws);
        if (ws > *scratch) *scratch = ws;
        for (int j = 0; j < st->op->n_out; j++)
            if (st->dst[j] >= 0) cur[st->dst[j]] = st->out[variant][j];
    }
    memcpy(it->final[variant], cur, sizeof cur);
    return 0;
}

/* The last stage output written to each component goes straight into the
 * returned Tensor; components no stage writes are gathered into it. */
static void mark_final_outputs(BatchIterator *it) {
    for (int k = 0; k < it->n_comp; k++) it->untouched[k] = 1;
    for (int s = it->n_stages - 1; s >= 0; s--) {
        stage *st = &it->stages[s];
        for (int j = st->op->n_out - 1; j >= 0; j--) {
            int k = st->dst[j];
            if (k >= 0 && it->untouched[k]) st->final[j] = 1, it->untouched[k] = 0;
        }
    }
}

static int allocate(BatchIterator *it, size_t scratch) {
    for (int k = 0; k < it->n_comp; k++)
        if (!it->untouched[k] &&
            !(it->gathered[k] = pr_alloc((size_t)(it->row_bytes[k] * it->batch_size))))
            return -1;
    for (int s = 0; s < it->n_stages; s++) {
        stage *st = &it->stages[s];
        for (int j = 0; j < st->op->n_out; j++) {
            int64_t a = view_bytes(&st->out[0][j]), b = view_bytes(&st->out[1][j]);
            if (!st->final[j] && !(st->buf[j] = pr_alloc((size_t)(a > b ? a : b)))) return -1;
        }
    }
    if (scratch && !(it->scratch = pr_alloc(scratch))) return -1;
    if (it->depth && !(it->tasks = PyMem_Calloc((size_t)it->depth, sizeof(task)))) return -1;
    return 0;
}

static void BatchIterator_dealloc(BatchIterator *it) {
    stop_worker(it);
    pthread_mutex_destroy(&it->mu);
    pthread_cond_destroy(&it->cv);
    for (int i = 0; it->tasks && i < it->depth; i++) Py_XDECREF(it->tasks[i].tensors);
    PyMem_Free(it->tasks);
    for (int s = 0; it->stages && s < it->n_stages; s++)
        for (int j = 0; j < PR_MAX_OUTPUTS; j++) pr_free(it->stages[s].buf[j]);
    PyMem_Free(it->stages);
    for (int k = 0; k < MAX_COMP; k++) pr_free(it->gathered[k]);
    pr_free(it->order);
    pr_free(it->scratch);
    Py_XDECREF(it->arrays);
    Py_XDECREF(it->keep);
    Py_TYPE(it)->tp_free((PyObject *)it);
}

static PyObject *BatchIterator_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sources", "order", "batch_size", "drop_remainder", "stages",
                             "prefetch", "epoch", "threads", NULL};
    PyObject *sources, *order, *stages;
    long long batch_size, epoch = 0;
    int drop_remainder = 0, prefetch = 0, threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOLpO|iLi:BatchIterator", kwlist, &sources,
                                     &order, &batch_size, &drop_remainder, &stages, &prefetch,
                                     &epoch, &threads))
        return NULL;
    if (batch_size < 1 || prefetch < 0 || prefetch > 1024 || epoch < 0 || epoch > 0xFFFFFFFFLL ||
        threads < 1 || !PyList_Check(stages)) {
        PyErr_SetString(PyExc_ValueError,
                        "BatchIterator: need batch_size >= 1, 0 <= prefetch <= 1024, "
                        "0 <= epoch < 2**32, threads >= 1 and a list of stages");
        return NULL;
    }
    BatchIterator *it = (BatchIterator *)type->tp_alloc(type, 0);
    if (!it) return NULL;
    pthread_mutex_init(&it->mu, NULL);
    pthread_cond_init(&it->cv, NULL);
    it->batch_size = batch_size;
    it->epoch = (uint64_t)epoch;
    it->depth = prefetch;
    it->threads = threads;
    if (!(it->keep = PyList_New(0)) || parse_sources(it, sources) < 0 || parse_order(it, order) < 0)
        goto fail;
    it->n_batches = it->n_order / batch_size;
    it->last_size = batch_size;
    if (!drop_remainder && it->n_order % batch_size) {
        it->last_size = it->n_order % batch_size;
        it->n_batches++;
    }
    it->n_stages = (int)PyList_GET_SIZE(stages);
    if (!(it->stages = PyMem_Calloc((size_t)it->n_stages + 1, sizeof(stage)))) {
        PyErr_NoMemory();
        goto fail;
    }
    for (int s = 0; s < it->n_stages; s++)
        if (parse_stage(it, &it->stages[s], PyList_GET_ITEM(stages, s)) < 0) goto fail;
    size_t scratch = 0;
    if (infer_variant(it, 0, batch_size, &scratch) < 0 ||
        infer_variant(it, 1, it->last_size, &scratch) < 0)
        goto fail;
    mark_final_outputs(it);
    if (allocate(it, scratch) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto fail;
    }
    return (PyObject *)it;
fail:
    Py_DECREF(it);
    return NULL;
}

static PyObject *BatchIterator_iter(PyObject *self) {
    Py_INCREF(self);
    return self;
}

static Py_ssize_t BatchIterator_len(BatchIterator *it) { return (Py_ssize_t)it->n_batches; }

static PyObject *BatchIterator_cpu_seconds(BatchIterator *it, void *c) {
    double seconds;
    pthread_mutex_lock(&it->mu);
    seconds = it->cpu_seconds;
    pthread_mutex_unlock(&it->mu);
    return PyFloat_FromDouble(seconds);
}

/* [(dtype, full batch shape, last batch shape)] per component. */
static PyObject *BatchIterator_batch_shapes(BatchIterator *it, void *c) {
    PyObject *l = PyList_New(it->n_comp);
    for (int k = 0; l && k < it->n_comp; k++) {
        PyObject *shapes[2] = {NULL, NULL};
        for (int r = 0; r < 2; r++) {
            const pr_view *v = &it->final[r][k];
            shapes[r] = PyTuple_New(v->ndim);
            for (int d = 0; shapes[r] && d < v->ndim; d++)
                PyTuple_SET_ITEM(shapes[r], d, PyLong_FromLongLong(v->shape[d]));
        }
        PyObject *item = shapes[0] && shapes[1]
                             ? Py_BuildValue("(sNN)", pr_dtype_name(it->final[0][k].dtype),
                                             shapes[0], shapes[1])
                             : NULL;
        if (!item) {
            Py_XDECREF(shapes[0]);
            Py_XDECREF(shapes[1]);
            Py_CLEAR(l);
        } else {
            PyList_SET_ITEM(l, k, item);
        }
    }
    return l;
}

static PyGetSetDef BatchIterator_getset[] = {
    {"batch_shapes", (getter)BatchIterator_batch_shapes, NULL,
     "[(dtype, full batch shape, last batch shape)] per component.", NULL},
    {"cpu_seconds", (getter)BatchIterator_cpu_seconds, NULL,
     "CPU time (s) spent so far gathering and augmenting this pass's batches.", NULL},
    {NULL}};

static PySequenceMethods BatchIterator_as_sequence = {.sq_length = (lenfunc)BatchIterator_len};

static PyTypeObject BatchIteratorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyresnet._C.BatchIterator",
    .tp_basicsize = sizeof(BatchIterator),
    .tp_dealloc = (destructor)BatchIterator_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "BatchIterator(sources, order, batch_size, drop_remainder, stages, prefetch=0, "
              "epoch=0, threads=1)\n\n"
              "One pass over in-memory arrays (pyresnet.data.Dataset builds it): yields tuples "
              "of Tensors, the rows `order` picks in batches of `batch_size`, each run through "
              "`stages` (registered ops) with the GIL released, their augmentation kernels on "
              "`threads` threads.  prefetch > 0 computes that many batches ahead on a worker "
              "thread.  Random "
              "stages draw from [seed, (epoch << 32) + batch index].",
    .tp_as_sequence = &BatchIterator_as_sequence,
    .tp_iter = BatchIterator_iter,
    .tp_iternext = (iternextfunc)BatchIterator_next,
    .tp_getset = BatchIterator_getset,
    .tp_new = BatchIterator_new,
};

/* _C.shuffle_order(n, buffer_size, seed, counter) -> int64 array */
static PyObject *py_shuffle_order(PyObject *self, PyObject *args) {
    long long n, buffer_size;
    unsigned long long seed, counter;
    if (!PyArg_ParseTuple(args, "LLKK:shuffle_order", &n, &buffer_size, &seed, &counter))
        return NULL;
    if (n < 0 || n > 0x7FFFFFFFLL || buffer_size < 1) {
        PyErr_Format(PyExc_ValueError,
                     "shuffle_order: need 0 <= n < 2**31 and buffer_size >= 1, got %lld and %lld",
                     n, buffer_size);
        return NULL;
    }
    if (buffer_size > n) buffer_size = n ? n : 1;
    npy_intp dims[1] = {(npy_intp)n};
    PyObject *order = PyArray_SimpleNew(1, dims, NPY_INT64);
    int64_t *scratch = pr_alloc((size_t)buffer_size * sizeof(int64_t));
    if (!order || !scratch) {
        Py_XDECREF(order);
        pr_free(scratch);
        return PyErr_NoMemory();
    }
    pr_rng_buffer_shuffle(n, buffer_size, seed, counter,
                          PyArray_DATA((PyArrayObject *)order), scratch);
    pr_free(scratch);
    return order;
}

static PyMethodDef pipeline_methods[] = {
    {"shuffle_order", py_shuffle_order, METH_VARARGS,
     "shuffle_order(n, buffer_size, seed, counter) -> int64 array: the element order of "
     "tf.data's shuffle(buffer_size) over range(n), drawn from Philox stream 0 of "
     "(seed, counter)."},
    {NULL}};

int pr_pipeline_init(PyObject *module) {
    if (PyType_Ready(&BatchIteratorType) < 0) return -1;
    pr_plan_set_batch_source((pr_batch_source){batches_info, batches_fill});
    Py_INCREF(&BatchIteratorType);
    if (PyModule_AddObject(module, "BatchIterator", (PyObject *)&BatchIteratorType) < 0) {
        Py_DECREF(&BatchIteratorType);
        return -1;
    }
    return PyModule_AddFunctions(module, pipeline_methods);
}
