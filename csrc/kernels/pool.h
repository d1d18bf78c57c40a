/* 2D pooling kernels over NHWC tensors: max, average (padding excluded
 * from the count, as TensorFlow/Keras), global average.  Window geometry
 * (pr_window, with kh x kw the pool size) comes from conv.h. */
#ifndef PR_K_POOL_H
#define PR_K_POOL_H

#include "conv.h"

/* y (N, HO, WO, C) = max of x (N, H, W, C) over each window (valid taps only);
 * x, y (and dy, dx below) of dtype dt: float32 or bfloat16. */
int pr_max_pool2d_forward(const pr_window *g, pr_dtype dt, const void *x, void *y);
/* dx (N, H, W, C): each dy value goes to the first maximum of its window
 * (row-major over the window, as NumPy argmax); overlapping windows add. */
int pr_max_pool2d_backward(const pr_window *g, pr_dtype dt, const void *x, const void *dy,
                           void *dx);
/* y = mean of x over the valid taps of each window. */
int pr_avg_pool2d_forward(const pr_window *g, const float *x, float *y);
/* dx: dy / (valid taps) spread over each window; overlapping windows add. */
int pr_avg_pool2d_backward(const pr_window *g, const float *dy, float *dx);
/* y (N, C) = mean of x (N, HW, C) over its HW pixels. */
int pr_global_avg_pool_forward(const float *x, int64_t n, int64_t hw, int64_t c, float *y);
/* dx (N, HW, C) = dy (N, C) / HW broadcast over the pixels. */
int pr_global_avg_pool_backward(const float *dy, int64_t n, int64_t hw, int64_t c, float *dx);

#endif
