/* Softmax, cross-entropy losses and accuracies over the last axis (float32).
 * Every function works on `rows` contiguous rows of `n` elements (classes).
 * Labels are int32 (i64 == 0) or int64 (i64 != 0), one per row.  Functions
 * that take both a dense `target` (rows x n) and `labels` use the dense
 * target when it is non-NULL and one-hot labels otherwise; with labels, a
 * label outside [0, n) returns PR_ERR_VALUE before anything is written. */
#ifndef PR_K_LOSS_H
#define PR_K_LOSS_H

#include "kernels.h"

/* softmax:     y = exp(x - max) / sum(exp(x - max))
 * log_softmax: y = (x - max) - log(sum(exp(x - max)))        (log != 0)
 * backward, given the forward output y:
 *   softmax:     dx = y * (dy - sum(dy * y))
 *   log_softmax: dx = dy - exp(y) * sum(dy) */
int pr_k_softmax(const float *x, float *y, int64_t rows, int64_t n, int log);
int pr_k_softmax_backward(const float *dy, const float *y, float *dx, int64_t rows, int64_t n,
                          int log);

/* From logits: loss = -sum_j t_j * log_softmax(x)_j;
 * dx = g * (softmax(x) * sum_j t_j - t). */
int pr_k_softmax_ce(const float *logits, const float *target, const void *labels, int i64,
                    int64_t rows, int64_t n, float *loss);
int pr_k_softmax_ce_backward(const float *g, const float *logits, const float *target,
                             const void *labels, int i64, int64_t rows, int64_t n, float *dlogits);

/* From probabilities, as Keras with from_logits=False: q = p / sum(p),
 * c = clip(q, eps, 1 - eps) with eps = 1e-7, loss = -sum_j t_j log(c_j).
 * dp_k = g * (u_k - sum_j u_j q_j) / sum(p) with u_j = -t_j / c_j where the
 * clip passes q_j (eps <= q_j <= 1 - eps), else 0. */
int pr_k_probs_ce(const float *probs, const float *target, const void *labels, int i64,
                  int64_t rows, int64_t n, float *loss);
int pr_k_probs_ce_backward(const float *g, const float *probs, const float *target,
                           const void *labels, int i64, int64_t rows, int64_t n, float *dprobs);

/* out[r] = 1.0f if argmax(pred row) equals the label, or argmax(target row),
 * else 0.0f; argmax takes the first maximum.  Labels out of range score 0. */
int pr_k_accuracy(const float *pred, const float *target, const void *labels, int i64,
                  int64_t rows, int64_t n, float *out);

#endif
