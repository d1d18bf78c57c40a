/* In-place variable updates: assign family, moving averages, Keras 3 SGD.
 * Every kernel either fails before writing anything or updates every
 * element.  The optimizers' slots (momentum, moments, averages) stay zero
 * rather than subnormal, as under TensorFlow's flush-to-zero (optim.c,
 * `below`). */
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

/* A moving average of a variable (Keras 3's optimizer EMA,
 * base_optimizer._update_model_variables_moving_averages; Lookahead's slow
 * weights, Zhang et al. 2019, Algorithm 1), float32:
 *   average = momentum * average + one_minus_momentum * var
 *   if overwrite: var = average */
int pr_k_ema(float *var, float *average, int64_t n, float momentum, float one_minus_momentum,
             int overwrite);

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

/* Keras 3 Adam (keras/src/optimizers/adam.py; Kingma & Ba 2015, Algorithm 1
 * with the bias corrections folded into alpha) after the decoupled weight
 * decay, float32, Keras's operation order.  `step` is iterations + 1; the
 * factors one_minus_b1/b2 are (1 - beta) rounded from double, as Keras's
 * Python floats are:
 *   if wd != 0:  var = var - var * wd * lr
 *   alpha = lr * sqrt(1 - beta_2^step) / (1 - beta_1^step)
 *   m = m + (g - m) * one_minus_b1;  v = v + (g * g - v) * one_minus_b2
 *   amsgrad (vhat != NULL): vhat = max(vhat, v), used in place of v
 *   var = var - (m * alpha) / (sqrt(v) + epsilon)
 * AdamW is the same kernel with wd != 0 (Loshchilov & Hutter 2019). */
int pr_k_adam(float *var, const float *grad, float *m, float *v, float *vhat, int64_t n,
              float lr, float step, float beta_1, float beta_2, float one_minus_b1,
              float one_minus_b2, float epsilon, float wd);

/* Keras 3 RMSprop (keras/src/optimizers/rmsprop.py; Hinton's lecture 6e,
 * Graves 2013 eq. 38-40 for the centered form) after the decoupled weight
 * decay, float32, Keras's operation order (one_minus_rho = 1 - rho from
 * double):
 *   if wd != 0:  var = var - var * wd * lr
 *   vel = rho * vel + one_minus_rho * g * g
 *   centered (avg != NULL): avg = rho * avg + one_minus_rho * g;
 *                           denom = vel - avg * avg + epsilon
 *   else:                   denom = vel + epsilon
 *   inc = lr * g / sqrt(denom)
 *   momentum (mom != NULL): mom = momentum * mom + inc; var = var - mom
 *   else:                   var = var - inc */
int pr_k_rmsprop(float *var, const float *grad, float *vel, float *mom, float *avg, int64_t n,
                 float lr, float rho, float one_minus_rho, float momentum, float epsilon,
                 float wd);

/* Keras 3 learning-rate schedules (keras/src/optimizers/schedules/
 * learning_rate_schedule.py) of one step, in float32 as Keras computes them.
 *
 * CosineDecay (Loshchilov & Hutter 2017, SGDR, without restarts), with the
 * optional linear warmup from initial to warmup_target; `linear` anneals
 * linearly instead of along the cosine (the one-cycle schedule, Smith &
 * Topin 2019):
 *   no warmup: s = min(step, decay_steps); lr = initial * decayed(s)
 *   warmup:    s = min(step, decay_steps + warmup_steps)
 *              s < warmup_steps: lr = (target - initial) * (s / warmup_steps) + initial
 *              else:             lr = target * decayed(s - warmup_steps)
 *   decayed(s) = one_minus_alpha * c + alpha,
 *   c = 0.5 * (1 + cos(pi * s / decay_steps))  (linear: c = 1 - s / decay_steps) */
float pr_k_cosine_decay(double step, float initial, float decay_steps, float alpha,
                        float one_minus_alpha, int warmup, float warmup_target,
                        float warmup_steps, int linear);

/* ExponentialDecay: initial * decay_rate ^ p, p = step / decay_steps
 * (floor(p) when staircase). */
float pr_k_exponential_decay(double step, float initial, float decay_steps, float decay_rate,
                             int staircase);

/* PiecewiseConstantDecay: values[0] while step <= boundaries[0], values[i]
 * while boundaries[i-1] < step <= boundaries[i], values[n] after
 * boundaries[n-1] (n boundaries, n + 1 values). */
float pr_k_piecewise_constant(double step, const double *boundaries, int64_t n,
                              const float *values);

#endif
