/* Allreduce through the MPI library mpi4py loaded (see comm.h).  The
 * approach is Horovod's (horovod/common/ops/mpi_operations.cc: one
 * MPI_Allreduce on a fused buffer, the communicator from the framework's
 * MPI context), without linking MPI at build time. */
#define _GNU_SOURCE
#include "comm.h"

#include <dlfcn.h>
#include <string.h>

/* The two calling signatures of MPI_Allreduce: handles passed as C ints
 * (MPICH, Intel MPI) or as pointer-sized values (Open MPI, MPI ABI). */
typedef int (*allreduce_int_fn)(const void *, void *, int, int, int, int);
typedef int (*allreduce_ptr_fn)(const void *, void *, int, intptr_t, intptr_t, intptr_t);
typedef int (*error_string_fn)(int, char *, int *);

static struct {
    void *allreduce;
    error_string_fn error_string;
    int handle_bytes;
    int64_t comm, float_type, sum_op;
    int size, rank;
} mpi;

int pr_comm_bind(const char *path, int handle_bytes, int64_t comm, int64_t float_type,
                 int64_t sum_op, int size, int rank) {
    if (handle_bytes != 4 && handle_bytes != 8) {
        pr_kernel_error("MPI handles of %d bytes are not supported (expected 4 or 8)",
                        handle_bytes);
        return PR_ERR_VALUE;
    }
    if (size < 1 || rank < 0 || rank >= size) {
        pr_kernel_error("rank %d of %d ranks is not a valid place in a world", rank, size);
        return PR_ERR_VALUE;
    }
    /* RTLD_NOLOAD: only an object already in the process (mpi4py imported
     * it); its handle's dlsym searches it and the libraries it needs. */
    void *lib = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) {
        const char *e = dlerror();
        pr_kernel_error("%s is not loaded in this process (%s)", path, e ? e : "dlopen failed");
        return PR_ERR_VALUE;
    }
    void *allreduce = dlsym(lib, "MPI_Allreduce");
    void *error_string = dlsym(lib, "MPI_Error_string");
    dlclose(lib); /* the object stays loaded: mpi4py holds it */
    if (!allreduce || !error_string) {
        pr_kernel_error("no MPI_Allreduce/MPI_Error_string reachable from %s", path);
        return PR_ERR_VALUE;
    }
    mpi.allreduce = allreduce;
    mpi.error_string = (error_string_fn)error_string;
    mpi.handle_bytes = handle_bytes;
    mpi.comm = comm, mpi.float_type = float_type, mpi.sum_op = sum_op;
    mpi.size = size, mpi.rank = rank;
    return PR_OK;
}

int pr_comm_bound(void) { return mpi.allreduce != NULL; }
int pr_comm_size(void) { return mpi.allreduce ? mpi.size : 1; }
int pr_comm_rank(void) { return mpi.allreduce ? mpi.rank : 0; }

static int call_allreduce(const float *in, float *out, int count) {
    if (mpi.handle_bytes == 4)
        return ((allreduce_int_fn)mpi.allreduce)(in, out, count, (int)mpi.float_type,
                                                 (int)mpi.sum_op, (int)mpi.comm);
    return ((allreduce_ptr_fn)mpi.allreduce)(in, out, count, (intptr_t)mpi.float_type,
                                             (intptr_t)mpi.sum_op, (intptr_t)mpi.comm);
}

int pr_k_allreduce(const float *in, float *out, int64_t n, int average, float *scratch) {
    if (!mpi.allreduce) {
        pr_kernel_error("MPI is not bound: call pyresnet.distribute.init() first");
        return PR_ERR_VALUE;
    }
    if (n <= 0) return PR_OK; /* nothing to reduce (and no scratch to copy into) */
    if (in == out) {
        memcpy(scratch, in, (size_t)n * sizeof(float));
        in = scratch;
    }
    const int64_t piece = (int64_t)1 << 30;
    for (int64_t off = 0; off < n; off += piece) {
        int count = (int)(n - off < piece ? n - off : piece);
        int rc = call_allreduce(in + off, out + off, count);
        if (rc != 0) {
            char msg[1024]; /* >= MPI_MAX_ERROR_STRING of MPICH and Open MPI */
            int len = 0;
            if (mpi.error_string(rc, msg, &len) != 0 || len <= 0) len = 0;
            msg[len < (int)sizeof msg ? len : (int)sizeof msg - 1] = 0;
            pr_kernel_error("MPI_Allreduce failed (error %d: %s)", rc, len ? msg : "?");
            return PR_ERR_RUNTIME;
        }
    }
    if (average && mpi.size > 1) {
        /* division, not a multiply by 1/size: exactly the mean for any size */
        const float d = (float)mpi.size;
        for (int64_t i = 0; i < n; i++) out[i] /= d;
    }
    return PR_OK;
}
