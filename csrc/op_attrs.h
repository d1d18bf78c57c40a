/* Attribute structs shared between op families, so that a gradient rule can
 * fill the attributes of the ops it calls.  FLOAT attributes are doubles. */
#ifndef PR_OP_ATTRS_H
#define PR_OP_ATTRS_H

#include "ops.h"

/* reshape, broadcast_to, sum_to_shape: the target shape. */
typedef struct {
    pr_ints shape;
} pr_shape_attrs;

/* sum, mean: axes (n == 0: all axes; negative counts from the end). */
typedef struct {
    pr_ints axes;
    int keepdims;
} pr_reduce_attrs;

/* ema_update: every `period` steps, the moving average; `overwrite_frequency`
 * (0: never) copies it into the variable; `first_step_copy`: momentum 0 at
 * the first step (Keras's EMA). */
typedef struct {
    int64_t period, overwrite_frequency;
    int first_step_copy;
} pr_ema_attrs;

/* A single float: scale, ema momentum, leaky slope, ... */
typedef struct {
    double value;
} pr_scalar_attrs;

/* scale: x * (value / divisor).  `divisor` is a size (default 1): the count
 * a mean divides by, a symbolic dimension while tracing (symdim.h). */
typedef struct {
    double value;
    int64_t divisor;
} pr_scale_attrs;

/* clip, clip_backward: the closed interval [min, max]. */
typedef struct {
    double min, max;
} pr_clip_attrs;

/* sgd_update, sgd_momentum_update (Keras 3 SGD with decoupled weight decay). */
typedef struct {
    double momentum;
    int nesterov;
    double weight_decay;
} pr_sgd_attrs;

/* conv2d and its backprop ops (NHWC input, HWIO filter as Keras stores it).
 * `strides` holds 1 or 2 ints (n == 0 means 1).  `same` is 1 for
 * padding="same" (TensorFlow's split: extra pad at the end), 0 for "valid".
 * `shape` is the shape the backprop op produces (the input's for
 * backprop_input, the filter's for backprop_filter), unused otherwise.
 * With `groups` > 1 the filter is (KH, KW, C / groups, O) (kernels/conv.h). */
typedef struct {
    pr_ints strides;
    int same;
    pr_ints shape;
    int64_t groups; /* grouped convolution: C and O split in `groups` parts (default 1) */
} pr_conv_attrs;

/* max/average pooling 2D (NHWC).  `strides` with n == 0 means pool_size.
 * `shape` is the input's shape for avg_pool2d_backward, unused otherwise. */
typedef struct {
    pr_ints pool_size;
    pr_ints strides;
    int same;
    pr_ints shape;
} pr_pool_attrs;

/* matmul: multiply by the transpose of a and/or b. */
typedef struct {
    int transpose_a;
    int transpose_b;
} pr_matmul_attrs;

/* cast: the pr_dtype code of the result (float32 or bfloat16). */
typedef struct {
    int64_t dtype;
} pr_cast_attrs;

/* batch normalization over all axes but the last; the training backward
 * ops also take dx_dtype, the pr_dtype code of dx (float32, or bfloat16
 * where jit_compile folds the cast of dx into them). */
typedef struct {
    double epsilon;
    int64_t dx_dtype;
} pr_bn_attrs;

#endif
