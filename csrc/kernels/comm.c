/* Allreduce through the MPI library mpi4py loaded (see comm.h).  The
 * approach is Horovod's (horovod/common/ops/mpi_operations.cc: one
 * MPI_Allreduce on a fused buffer, the communicator from the framework's
 * MPI context), without linking MPI at build time. */
#define _GNU_SOURCE
#include "comm.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The two calling signatures of each MPI function: handles passed as C ints
 * (MPICH, Intel MPI) or as pointer-sized values (Open MPI, MPI ABI).  A
 * request is stored in 8 zeroed bytes, which hold either kind (little- or
 * big-endian alike, since only MPI reads what MPI wrote); a status goes to
 * a buffer larger than any implementation's MPI_Status. */
typedef int (*allreduce_int_fn)(const void *, void *, int, int, int, int);
typedef int (*allreduce_ptr_fn)(const void *, void *, int, intptr_t, intptr_t, intptr_t);
typedef int (*iallreduce_int_fn)(const void *, void *, int, int, int, int, void *);
typedef int (*iallreduce_ptr_fn)(const void *, void *, int, intptr_t, intptr_t, intptr_t,
                                 void *);
/* MPI_Isend / MPI_Irecv: buffer, count, datatype, peer, tag, comm, request */
typedef int (*p2p_int_fn)(void *, int, int, int, int, int, void *);
typedef int (*p2p_ptr_fn)(void *, int, intptr_t, int, int, intptr_t, void *);
typedef int (*test_fn)(void *, int *, void *);
typedef int (*abort_int_fn)(int, int);
typedef int (*abort_ptr_fn)(intptr_t, int);
typedef int (*error_string_fn)(int, char *, int *);

typedef struct {
    int64_t handle; /* an MPI_Request of 4 or 8 bytes, zero-extended */
} request;

static struct {
    void *allreduce, *iallreduce, *isend, *irecv, *abort;
    test_fn test;
    error_string_fn error_string;
    int handle_bytes;
    int64_t comm, float_type, sum_op, arrival_comm;
    int size, rank;
    double timeout;      /* seconds a collective may wait; 0: wait forever */
    int64_t collectives; /* collectives this rank has entered (for messages) */
    request *arrivals;   /* 2 (size - 1): receives, then sends */
    float *arrived;      /* size - 1: what the receives land in */
} mpi = {.timeout = PR_COMM_DEFAULT_TIMEOUT};

#define ARRIVAL_TAG 0x7072 /* "pr": the tag of the arrival messages */

int pr_comm_bind(const char *path, int handle_bytes, int64_t comm, int64_t float_type,
                 int64_t sum_op, int64_t arrival_comm, int size, int rank) {
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
    const char *names[] = {"MPI_Allreduce", "MPI_Iallreduce", "MPI_Isend", "MPI_Irecv",
                           "MPI_Test", "MPI_Abort", "MPI_Error_string"};
    void *found[7];
    for (int i = 0; i < 7; i++)
        if (!(found[i] = dlsym(lib, names[i]))) {
            dlclose(lib);
            pr_kernel_error("no %s reachable from %s", names[i], path);
            return PR_ERR_VALUE;
        }
    dlclose(lib); /* the object stays loaded: mpi4py holds it */
    request *arrivals = calloc((size_t)(2 * size), sizeof(request));
    float *arrived = calloc((size_t)size, sizeof(float));
    if (!arrivals || !arrived) {
        free(arrivals);
        free(arrived);
        return PR_ERR_MEMORY;
    }
    free(mpi.arrivals);
    free(mpi.arrived);
    mpi.arrivals = arrivals, mpi.arrived = arrived;
    mpi.allreduce = found[0], mpi.iallreduce = found[1], mpi.isend = found[2];
    mpi.irecv = found[3], mpi.test = (test_fn)found[4], mpi.abort = found[5];
    mpi.error_string = (error_string_fn)found[6];
    mpi.handle_bytes = handle_bytes;
    mpi.comm = comm, mpi.float_type = float_type, mpi.sum_op = sum_op;
    mpi.arrival_comm = arrival_comm;
    mpi.size = size, mpi.rank = rank;
    return PR_OK;
}

void pr_comm_set_timeout(double seconds) { mpi.timeout = seconds > 0 ? seconds : 0; }
double pr_comm_timeout(void) { return mpi.timeout; }

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

static int call_iallreduce(const float *in, float *out, int count, request *r) {
    if (mpi.handle_bytes == 4)
        return ((iallreduce_int_fn)mpi.iallreduce)(in, out, count, (int)mpi.float_type,
                                                   (int)mpi.sum_op, (int)mpi.comm, r);
    return ((iallreduce_ptr_fn)mpi.iallreduce)(in, out, count, (intptr_t)mpi.float_type,
                                               (intptr_t)mpi.sum_op, (intptr_t)mpi.comm, r);
}

/* One float to (send) or from (receive) `peer` on the arrival communicator. */
static int call_p2p(void *fn, float *buf, int peer, request *r) {
    if (mpi.handle_bytes == 4)
        return ((p2p_int_fn)fn)(buf, 1, (int)mpi.float_type, peer, ARRIVAL_TAG,
                                (int)mpi.arrival_comm, r);
    return ((p2p_ptr_fn)fn)(buf, 1, (intptr_t)mpi.float_type, peer, ARRIVAL_TAG,
                            (intptr_t)mpi.arrival_comm, r);
}

static int done(request *r, int *flag) {
    char status[256]; /* MPI_Status: 20 bytes in MPICH, 24 in Open MPI */
    return mpi.test(r, flag, status);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int mpi_failed(const char *what, int rc) {
    char msg[1024]; /* >= MPI_MAX_ERROR_STRING of MPICH and Open MPI */
    int len = 0;
    if (mpi.error_string(rc, msg, &len) != 0 || len <= 0) len = 0;
    msg[len < (int)sizeof msg ? len : (int)sizeof msg - 1] = 0;
    pr_kernel_error("%s failed (error %d: %s)", what, rc, len ? msg : "?");
    return PR_ERR_RUNTIME;
}

/* The deadline passed: say on stderr which collective this rank waited in
 * (with its number of floats unless `count` < 0) and which ranks had not
 * arrived at it, then end the job (MPI_Abort). */
static void give_up(const char *what, int64_t count, double waited) {
    char floats[48] = "";
    if (count >= 0) snprintf(floats, sizeof floats, " (%lld floats)", (long long)count);
    char late[512];
    size_t used = 0;
    int n_late = 0;
    late[0] = 0;
    for (int k = 0, peer = 0; peer < mpi.size; peer++) {
        if (peer == mpi.rank) continue;
        int flag = 0;
        if (done(&mpi.arrivals[k++], &flag) == 0 && !flag && used < sizeof late - 16) {
            int w = snprintf(late + used, sizeof late - used, "%s%d", n_late ? ", " : "", peer);
            used += w > 0 ? (size_t)w : 0;
            n_late++;
        }
    }
    fprintf(stderr,
            "pyresnet.distribute: rank %d of %d waited %.1f s in %s #%lld%s for %s%s "
            "(stopped, hung or dead?); ending the job.  The collective timeout is %g s "
            "(pyresnet.distribute.init(collective_timeout=...), --collective-timeout)\n",
            mpi.rank, mpi.size, waited, what, (long long)mpi.collectives, floats,
            n_late ? (n_late > 1 ? "ranks " : "rank ") : "",
            n_late ? late : "the ranks to finish it (all had entered it)", mpi.timeout);
    fflush(stderr);
    /* mpiexec forwards a rank's stderr through its proxy and MPI_Abort kills
     * the job at once: give the proxy a moment to pass the message on (as
     * pyresnet.distribute's exception hook does; without it the message was
     * lost in one CI run of four) */
    nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = 500000000}, NULL);
    if (mpi.handle_bytes == 4) ((abort_int_fn)mpi.abort)((int)mpi.comm, 1);
    else ((abort_ptr_fn)mpi.abort)((intptr_t)mpi.comm, 1);
    _exit(1); /* (MPI_Abort does not return) */
}

/* Poll request r, then the arrival messages, with MPI_Test until done or
 * until the timeout from `start` has passed (then give_up). */
static int wait_timed(request *r, const char *what, int64_t count, double start) {
    int spins = 0;
    double deadline = start + mpi.timeout;
    for (;;) {
        int flag = 0, rc = done(r, &flag);
        if (rc != 0) return mpi_failed(what, rc);
        if (flag) break;
        double t = now();
        if (t > deadline) give_up(what, count, t - start);
        if (++spins > 1000) { /* after ~a millisecond of spinning, poll every 100 us */
            struct timespec nap = {0, 100000};
            nanosleep(&nap, NULL);
        } else {
            sched_yield();
        }
    }
    /* Every peer has entered the collective, so its arrival message is sent. */
    for (int k = 0; k < 2 * (mpi.size - 1); k++) {
        int flag = 0;
        while (!flag) {
            int rc = done(&mpi.arrivals[k], &flag);
            if (rc != 0) return mpi_failed("the arrival messages of a collective", rc);
            if (!flag && now() > deadline) give_up(what, count, now() - start);
        }
    }
    return PR_OK;
}

/* One allreduce of `count` floats, with the timeout when there is one;
 * `shown` is the count its report gives (-1: none).  Timed, every rank first
 * tells every other that it has arrived (one float each way per peer, on the
 * arrival communicator), so that a rank that waits too long can name the
 * ranks that never came. */
static int allreduce_piece(const float *in, float *out, int count, const char *what,
                           int64_t shown) {
    mpi.collectives++;
    if (mpi.timeout <= 0 || mpi.size == 1) {
        int rc = call_allreduce(in, out, count);
        return rc ? mpi_failed("MPI_Allreduce", rc) : PR_OK;
    }
    double start = now();
    static float here = 1.0f; /* what the arrival messages carry (read-only) */
    for (int k = 0, peer = 0; peer < mpi.size; peer++) {
        if (peer == mpi.rank) continue;
        request *recv = &mpi.arrivals[k], *send = &mpi.arrivals[mpi.size - 1 + k];
        recv->handle = send->handle = 0;
        int rc = call_p2p(mpi.irecv, &mpi.arrived[k], peer, recv);
        if (rc == 0) rc = call_p2p(mpi.isend, &here, peer, send);
        if (rc != 0) return mpi_failed("MPI_Isend/MPI_Irecv (arrival messages)", rc);
        k++;
    }
    request r = {0};
    int rc = call_iallreduce(in, out, count, &r);
    if (rc != 0) return mpi_failed("MPI_Iallreduce", rc);
    return wait_timed(&r, what, shown, start);
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
        int rc = allreduce_piece(in + off, out + off, count, "allreduce", count);
        if (rc != PR_OK) return rc;
    }
    if (average && mpi.size > 1) {
        /* division, not a multiply by 1/size: exactly the mean for any size */
        const float d = (float)mpi.size;
        for (int64_t i = 0; i < n; i++) out[i] /= d;
    }
    return PR_OK;
}

int pr_comm_barrier(const char *what) {
    if (!mpi.allreduce) {
        pr_kernel_error("MPI is not bound: call pyresnet.distribute.init() first");
        return PR_ERR_VALUE;
    }
    float one = 1.0f, sum = 0.0f;
    return allreduce_piece(&one, &sum, 1, what, -1);
}
