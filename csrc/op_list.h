/* Every registered op, by family: X(name) stands for `const pr_op pr_op_<name>`,
 * defined in csrc/ops_<family>.c.  Adding an op: define it there and add its
 * name here (and a row in tests/op_table.py); a unary elementwise op is one
 * line of PR_UNARY_OPS instead (kernels/elementwise.h), whose entries carry
 * more arguments: the X given to these lists takes (name, ...).  The registry
 * (module.c) is made from these lists, and C code calls an op by its symbol,
 * pr_call1(&pr_op_negative, ...): a misspelt op fails at compile time. */
#ifndef PR_OP_LIST_H
#define PR_OP_LIST_H

#include "ops.h"
#include "kernels/elementwise.h"

#define PR_OPS_ARRAY(X) \
    X(greater) X(greater_equal) X(less) X(less_equal) X(equal) X(not_equal) X(where) X(cast) \
    X(stop_gradient) X(transpose) X(strided_slice) X(strided_slice_backward) X(pad) \
    X(concatenate) X(take) X(take_backward) X(one_hot) X(max) X(min) X(argmax) X(argmin)

#define PR_OPS_AUGMENT(X) \
    X(random_flip) X(alternating_flip) X(random_crop) X(center_crop) X(random_resized_crop) \
    X(resize_bilinear) X(affine_transform) X(random_affine) X(random_contrast) \
    X(random_lighting) X(cutout) X(mixup) X(normalize_channels)

#define PR_OPS_CONV(X) \
    X(matmul) X(conv2d) X(conv2d_backprop_input) X(conv2d_backprop_filter) X(max_pool2d) \
    X(max_pool2d_backward) X(avg_pool2d) X(avg_pool2d_backward) X(global_average_pool) \
    X(global_average_pool_backward)

#define PR_OPS_DISTRIBUTE(X) \
    X(allreduce) X(allreduce_inplace) X(flat_assign) X(flat_slice)

#define PR_OPS_ELEMENTWISE(X) \
    X(add) X(subtract) X(multiply) X(divide) X(maximum) X(minimum) X(power) X(negative) \
    X(scale) X(relu) X(relu_backward) X(gelu) X(gelu_backward) X(clip) X(clip_backward) \
    X(ones_like) X(zeros_like) \
    X(broadcast_to) X(sum_to_shape) PR_UNARY_OPS(X)

#define PR_OPS_FUSED(X) \
    X(batch_norm_relu_train) X(batch_norm_relu_infer) X(batch_norm_add_relu_train) \
    X(batch_norm_relu_train_backward) X(multiply_sum_to_shape)

#define PR_OPS_NN(X) \
    X(sum) X(mean) X(reshape) X(flatten) X(dim_size) X(size) X(softmax) X(log_softmax) \
    X(softmax_backward) X(log_softmax_backward) X(sparse_softmax_cross_entropy) \
    X(softmax_cross_entropy) X(sparse_categorical_crossentropy) X(categorical_crossentropy) \
    X(sparse_categorical_accuracy) X(categorical_accuracy) \
    X(sparse_softmax_cross_entropy_backward) X(softmax_cross_entropy_backward) \
    X(sparse_categorical_crossentropy_backward) X(categorical_crossentropy_backward) \
    X(batch_norm_train) X(batch_norm_train_backward) X(batch_norm_infer) \
    X(batch_norm_infer_backward)

#define PR_OPS_RANDOM(X) \
    X(random_normal) X(random_uniform)

#define PR_OPS_STATE(X) \
    X(assign) X(assign_add) X(assign_sub) X(moving_average_update) X(ema_update) \
    X(sgd_update) \
    X(sgd_momentum_update) X(adam_update) X(rmsprop_update) X(cosine_decay_schedule) \
    X(exponential_decay_schedule) X(piecewise_constant_schedule)

#define PR_OPS(X) \
    PR_OPS_ARRAY(X) PR_OPS_AUGMENT(X) PR_OPS_CONV(X) PR_OPS_DISTRIBUTE(X) PR_OPS_ELEMENTWISE(X) \
    PR_OPS_FUSED(X) PR_OPS_NN(X) PR_OPS_RANDOM(X) PR_OPS_STATE(X)

#define PR_OP_DECLARE(name, ...) extern const pr_op pr_op_##name;
PR_OPS(PR_OP_DECLARE)
#undef PR_OP_DECLARE

#endif
