/* Batch normalization over all axes but the last (NHWC or (N, C)): x is
 * viewed as m rows of c channels, contiguous.  Sums accumulate in double over
 * a fixed partition of the rows, combined in a fixed order, so results do not
 * depend on the thread count. */
#ifndef PR_K_NORM_H
#define PR_K_NORM_H

#include "kernels.h"

/* Scratch bytes every kernel below needs for m rows of c channels. */
size_t pr_bn_scratch_bytes(int64_t m, int64_t c);

/* Training forward (Ioffe & Szegedy 2015, Algorithm 1): per channel
 * mean = E[x], var = E[(x - mean)^2] (biased, as keras.ops.moments),
 * y = gamma * (x - mean) / sqrt(var + eps) + beta.  m >= 1. */
int pr_k_bn_train(const float *x, const float *gamma, const float *beta, int64_t m, int64_t c,
                  double eps, float *y, float *mean, float *var, void *scratch);

/* Training backward (Ioffe & Szegedy 2015, section 3), with xhat =
 * (x - mean) * invstd, invstd = 1 / sqrt(var + eps):
 *   dbeta = sum dy, dgamma = sum dy * xhat,
 *   dx = gamma * invstd * (dy - dbeta / m - xhat * dgamma / m). */
int pr_k_bn_train_backward(const float *dy, const float *x, const float *gamma,
                           const float *mean, const float *var, int64_t m, int64_t c, double eps,
                           float *dx, float *dgamma, float *dbeta, void *scratch);

/* Inference with fixed statistics: y = gamma * (x - mean) / sqrt(var + eps) + beta;
 * backward: dx = dy * gamma * invstd, dgamma = sum dy * xhat, dbeta = sum dy. */
int pr_k_bn_infer(const float *x, const float *gamma, const float *beta, const float *mean,
                  const float *var, int64_t m, int64_t c, double eps, float *y, void *scratch);
/* The same, with y = y + res (res not NULL) and then y = max(y, 0) (relu)
 * in the same pass: jit_compile's BN + ReLU and BN + add + ReLU fusions
 * (bit for bit the unfused ops' results). */
int pr_k_bn_train_act(const float *x, const float *gamma, const float *beta, const float *res,
                      int64_t m, int64_t c, double eps, float *y, float *mean, float *var,
                      void *scratch, int relu);
/* Training backward of relu(batch_norm_train(x)) when relu, from the ReLU's
 * output gradient dy: the ReLU's mask is recomputed from x, beta and the
 * statistics (exactly the forward's values), so the ReLU's backward pass
 * and its output are saved (jit_compile's fusion); without relu,
 * pr_k_bn_train_backward (beta unused).  dx is float32, or bfloat16 when
 * dx_bf16 (rounded as the cast op rounds: jit_compile's fusion of the cast
 * a bfloat16 convolution's backward makes of it). */
int pr_k_bn_train_backward_act(const float *dy, const float *x, const float *gamma,
                               const float *beta, const float *mean, const float *var, int64_t m,
                               int64_t c, double eps, void *dx, int dx_bf16, float *dgamma,
                               float *dbeta, void *scratch, int relu);
int pr_k_bn_infer_act(const float *x, const float *gamma, const float *beta, const float *mean,
                      const float *var, int64_t m, int64_t c, double eps, float *y, void *scratch,
                      int relu);
int pr_k_bn_infer_backward(const float *dy, const float *x, const float *gamma,
                           const float *mean, const float *var, int64_t m, int64_t c, double eps,
                           float *dx, float *dgamma, float *dbeta, void *scratch);

#endif
