/* Batch normalization over all axes but the last (NHWC or (N, C)): x is
 * viewed as m rows of c channels, contiguous.  Sums accumulate in double over
 * a fixed partition of the rows, combined in a fixed order, so results do not
 * depend on the thread count. */
#ifndef PR_K_NORM_H
#define PR_K_NORM_H

#include "kernels.h"

/* Scratch bytes every kernel below needs for m rows of c channels. */
size_t pr_bn_scratch_bytes(int64_t m, int64_t c);

/* The activations x, res, y (forward) and dy, x (backward) are float32, or
 * bfloat16 when their dtype `xt` is PR_BF16 (Keras's mixed_bfloat16): read
 * and written as 16-bit words in the row loops (never widened into a
 * float32 copy), computed on their exact float32 values as the float32
 * kernels compute, and each bfloat16 output rounded once from the float32
 * value (to nearest even, NaN quieted: pr_bf16_from_f32).  gamma, beta, the
 * statistics, dgamma and dbeta are float32 either way. */

/* Training forward (Ioffe & Szegedy 2015, Algorithm 1): per channel
 * mean = E[x], var = E[(x - mean)^2] (biased, as keras.ops.moments),
 * y = gamma * (x - mean) / sqrt(var + eps) + beta.  m >= 1.  Then, in the
 * same pass, y = y + res (res not NULL) and y = max(y, 0) (relu):
 * jit_compile's BN + ReLU and BN + add + ReLU fusions, bit for bit the
 * unfused ops' results (with bfloat16 activations each unfused op's output
 * rounded to bfloat16 too: the BN's, the add's). */
int pr_k_bn_train(const void *x, const float *gamma, const float *beta, const void *res,
                  pr_dtype xt, int64_t m, int64_t c, double eps, void *y, float *mean,
                  float *var, void *scratch, int relu);

/* Training backward (Ioffe & Szegedy 2015, section 3), with xhat =
 * (x - mean) * invstd, invstd = 1 / sqrt(var + eps):
 *   dbeta = sum dy, dgamma = sum dy * xhat,
 *   dx = gamma * invstd * (dy - dbeta / m - xhat * dgamma / m).
 * dy and x of dtype xt; dx of dtype dxt (float32 dy and x with bfloat16 dx:
 * jit_compile's fusion of the cast a bfloat16 convolution's backward makes
 * of dx, the same rounding as the cast op).  With relu, the backward of
 * relu(batch_norm_train(x)) from the ReLU's output gradient dy: the ReLU's
 * mask is recomputed from x, beta and the statistics (exactly the forward's
 * value, rounded to xt as the forward stored it), so the ReLU's backward
 * pass and its output are saved (jit_compile's fusion); without relu beta is
 * unused. */
int pr_k_bn_train_backward(const void *dy, const void *x, pr_dtype xt, const float *gamma,
                           const float *beta, const float *mean, const float *var, int64_t m,
                           int64_t c, double eps, void *dx, pr_dtype dxt, float *dgamma,
                           float *dbeta, void *scratch, int relu);

/* Inference with fixed statistics: y = gamma * (x - mean) / sqrt(var + eps) + beta,
 * then max(y, 0) when relu; backward: dx = dy * gamma * invstd (dx of
 * dtype xt), dgamma = sum dy * xhat, dbeta = sum dy. */
int pr_k_bn_infer(const void *x, const float *gamma, const float *beta, const float *mean,
                  const float *var, pr_dtype xt, int64_t m, int64_t c, double eps, void *y,
                  void *scratch, int relu);
int pr_k_bn_infer_backward(const void *dy, const void *x, pr_dtype xt, const float *gamma,
                           const float *mean, const float *var, int64_t m, int64_t c,
                           double eps, void *dx, float *dgamma, float *dbeta, void *scratch);

#endif
