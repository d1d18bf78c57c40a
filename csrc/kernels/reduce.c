/* Sum over a set of axes, NumPy semantics (np.sum / np.mean), with double
 * accumulators.  Layout: contiguous row-major.
 *
 * Adjacent dimensions of the same kind (kept / reduced) are merged, so the
 * walk is over rows of the last merged dimension: a reduced last dimension
 * sums a contiguous run into one accumulator, a kept one adds a contiguous
 * run into a run of accumulators.  Threads split the outermost merged
 * dimension when it is kept (each owns its own outputs), so the summation
 * order never depends on the thread count. */
#include "reduce.h"

#include <string.h>

#define PARALLEL_MIN 32768

int pr_k_reduce_sum(const float *x, int ndim, const int64_t *shape, const int *reduced,
                    double scale, float *out, int64_t out_size, double *acc) {
    int64_t ext[PR_MAX_DIMS], ost[PR_MAX_DIMS]; /* merged extents, output strides (0: reduced) */
    int red[PR_MAX_DIMS], k = 0;
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        total *= shape[d];
        if (shape[d] == 1) continue;
        if (k > 0 && red[k - 1] == (reduced[d] != 0)) {
            ext[k - 1] *= shape[d];
        } else {
            ext[k] = shape[d];
            red[k++] = reduced[d] != 0;
        }
    }
    if (out_size == 0) return PR_OK;
    memset(acc, 0, sizeof(double) * (size_t)out_size);
    if (total > 0 && k == 0) acc[0] = x[0]; /* every dimension has extent 1 */
    if (total > 0 && k > 0) {
        int64_t s = 1;
        for (int d = k - 1; d >= 0; d--) {
            ost[d] = red[d] ? 0 : s;
            if (!red[d]) s *= ext[d];
        }
        int64_t inner = ext[k - 1], rows = total / inner;
        int inner_red = red[k - 1];
        /* Rows are grouped by the outermost merged dimension; groups write
         * disjoint outputs when that dimension is kept. */
        int64_t groups = (k > 1 && !red[0]) ? ext[0] : 1, per = rows / groups;
#pragma omp parallel for num_threads(pr_get_num_threads()) if (groups > 1 && total >= PARALLEL_MIN)
        for (int64_t g = 0; g < groups; g++) {
            for (int64_t r = g * per; r < (g + 1) * per; r++) {
                int64_t off = 0, q = r;
                for (int d = k - 2; d >= 0; d--) {
                    off += (q % ext[d]) * ost[d];
                    q /= ext[d];
                }
                const float *xr = x + r * inner;
                if (inner_red) {
                    double t = 0.0;
                    for (int64_t i = 0; i < inner; i++) t += xr[i];
                    acc[off] += t;
                } else {
                    double *a = acc + off;
                    for (int64_t i = 0; i < inner; i++) a[i] += xr[i];
                }
            }
        }
    }
    for (int64_t i = 0; i < out_size; i++) out[i] = (float)(acc[i] * scale);
    return PR_OK;
}

int pr_k_reduce_sum_int(const void *x, pr_dtype dt, int ndim, const int64_t *shape,
                        const int *reduced, int64_t *out, int64_t out_size) {
    int64_t ost[PR_MAX_DIMS], total = 1, s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        ost[d] = reduced[d] ? 0 : s;
        if (!reduced[d]) s *= shape[d];
        total *= shape[d];
    }
    memset(out, 0, sizeof(int64_t) * (size_t)out_size);
    for (int64_t i = 0; i < total; i++) {
        int64_t r = i, o = 0;
        for (int d = ndim - 1; d >= 0; d--) {
            o += (r % shape[d]) * ost[d];
            r /= shape[d];
        }
        int64_t v = dt == PR_I32 ? ((const int32_t *)x)[i]
                    : dt == PR_U8 ? ((const uint8_t *)x)[i] : ((const int64_t *)x)[i];
        out[o] = (int64_t)((uint64_t)out[o] + (uint64_t)v); /* wraps, as NumPy's int64 sum */
    }
    return PR_OK;
}
