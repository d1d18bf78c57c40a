/* Sum/mean over a set of axes (float32 in, double accumulation). */
#ifndef PR_K_REDUCE_H
#define PR_K_REDUCE_H

#include "kernels.h"

/* out = scale * (sum of x over the dimensions d with reduced[d] != 0).
 * x: contiguous row-major, `shape` of rank ndim; out: the kept dimensions in
 * order (out_size elements).  acc: scratch of out_size doubles.  The order of
 * accumulation is fixed (memory order of x), whatever the thread count. */
int pr_k_reduce_sum(const float *x, int ndim, const int64_t *shape, const int *reduced,
                    double scale, float *out, int64_t out_size, double *acc);

/* out (int64) = sum of integer x (dtype dt: int32, int64 or uint8) over the
 * dimensions d with reduced[d] != 0 (NumPy's integer sum: int64 result,
 * wrapping on overflow); serial, in memory order. */
int pr_k_reduce_sum_int(const void *x, pr_dtype dt, int ndim, const int64_t *shape,
                        const int *reduced, int64_t *out, int64_t out_size);

#endif
