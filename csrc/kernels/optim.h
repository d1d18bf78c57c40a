/* In-place variable updates: assign family, moving averages, Keras 3 SGD.
 * Every kernel either fails before writing anything or updates every
 * element. */
#ifndef PR_K_OPTIM_H
#define PR_K_OPTIM_H

#include "kernels.h"

typedef enum { PR_ASSIGN_SET, PR_ASSIGN_ADD, PR_ASSIGN_SUB } pr_assign_kind;

/* var (dtype vt, `shape` of rank ndim) = / += / -= value, where value (dtype
 * valt, val_size elements) is read through broadcast strides `st` (rank
 * ndim, 0 on broadcast dimensions).  A float32 var takes a float32 value; an
 * int32/int64 var takes int32, int64, uint8 or float32 values that it can
 * hold: float32 ones whole, all in its range (else PR_ERR_VALUE, nothing
 * written).  Integer arithmetic wraps. */
int pr_k_assign(pr_assign_kind k, void *var, pr_dtype vt, int ndim, const int64_t *shape,
                const void *value, pr_dtype valt, int64_t val_size, const int64_t *st);

/* Keras BatchNormalization's moving statistics:
 * var = var * momentum + value * one_minus_momentum (float32 arithmetic). */
int pr_k_moving_average(float *var, const float *value, int64_t n, float momentum,
                        float one_minus_momentum);

/* Keras 3 SGD (keras/src/optimizers/sgd.py) after the base optimizer's
 * decoupled weight decay (base_optimizer._apply_weight_decay), in float32,
 * with the same operation order:
 *   if wd != 0:  var = var - var * wd * lr
 *   plain:       var = var - g * lr
 *   momentum:    m = m * momentum - g * lr;
 *                var = var + (nesterov ? m * momentum - g * lr : m) */
int pr_k_sgd(float *var, const float *grad, int64_t n, float lr, float wd);
int pr_k_sgd_momentum(float *var, const float *grad, float *velocity, int64_t n, float lr,
                      float momentum, int nesterov, float wd);

#endif
