/* Collective communication over the MPI library that mpi4py loaded.
 *
 * The C core is built without MPI: pr_comm_bind() finds MPI_Allreduce and
 * MPI_Error_string at run time with dlsym in the dependency tree of a shared
 * object that links the MPI library (mpi4py's MPI extension module), and
 * takes the communicator, datatype and reduction-op handles as integers
 * (mpi4py's MPI._handleof).  A handle is an int in MPICH's ABI and a pointer
 * in Open MPI's and in the MPI 5 standard ABI: `handle_bytes` (mpi4py's
 * MPI._sizeof(MPI.Comm)) says which calling signature to use.
 * No Python.h here. */
#ifndef PR_K_COMM_H
#define PR_K_COMM_H

#include "kernels.h"

/* Bind the MPI library reachable from the shared object at `path`;
 * `arrival_comm` is a duplicate of `comm` that carries the arrival messages
 * of timed collectives (see pr_k_allreduce).  Returns PR_OK, or
 * PR_ERR_VALUE with pr_kernel_error_message() set (file not loadable,
 * symbol missing, handle size neither 4 nor 8, bad size/rank). */
int pr_comm_bind(const char *path, int handle_bytes, int64_t comm, int64_t float_type,
                 int64_t sum_op, int64_t arrival_comm, int size, int rank);
/* Seconds a collective waits for the other ranks before this rank reports
 * and ends the job (0: forever); PR_COMM_DEFAULT_TIMEOUT until set. */
#define PR_COMM_DEFAULT_TIMEOUT 600.0
void pr_comm_set_timeout(double seconds);
double pr_comm_timeout(void);
/* Whether pr_comm_bind succeeded; the bound world's size and this rank. */
int pr_comm_bound(void);
int pr_comm_size(void);
int pr_comm_rank(void);

/* out[i] = sum over ranks of in[i] (divided by the number of ranks when
 * `average`), for n float32 elements; in == out is allowed only through
 * `scratch` (n floats): the input is copied there first.  Messages longer
 * than 2^30 elements go in pieces.  Every rank must call it with the same n
 * in the same order (MPI's rule for collectives).  PR_ERR_RUNTIME with the
 * MPI error string on failure; PR_ERR_VALUE when nothing is bound.
 *
 * With a timeout (pr_comm_set_timeout), each piece is an MPI_Iallreduce
 * polled with MPI_Test until the deadline, after every rank has sent every
 * other a one-float arrival message (2 (size - 1) tiny messages per rank);
 * past the deadline the rank prints on stderr which collective it waited in
 * and which ranks had not arrived, and calls MPI_Abort: the job ends with
 * status 1 instead of hanging on a stopped or hung rank. */
int pr_k_allreduce(const float *in, float *out, int64_t n, int average, float *scratch);

/* A barrier with the same timeout and report (an allreduce of one float),
 * `what` naming it in the report: for collectives made elsewhere (mpi4py's
 * broadcasts), so that a missing rank is found before they block. */
int pr_comm_barrier(const char *what);

#endif
