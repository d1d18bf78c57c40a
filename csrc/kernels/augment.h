/* Data-augmentation kernels: batched NHWC images of uint8 or float32.
 *
 * Every random augmentation is split in two plain functions:
 *   pr_k_sample_*  draws the per-image parameters (flip flags, crop offsets,
 *                  boxes, lighting coefficients, mixup weights) from the
 *                  Philox streams of rng.h: image i uses stream i of
 *                  (seed, counter), batch-level draws the batch stream, so
 *                  the draws never depend on the number of threads;
 *   pr_k_*         applies given parameters, deterministic, OpenMP over
 *                  images or pixels; returns PR_OK or a PR_* error code.
 * The registry ops (ops_augment.c) return the parameters as an extra output
 * so that NumPy references can reproduce every output exactly.
 */
#ifndef PR_K_AUGMENT_H
#define PR_K_AUGMENT_H

#include "kernels.h"

/* A batch of images: n x h x w x c, row-major (NHWC). */
typedef struct {
    int64_t n, h, w, c;
} pr_nhwc;

/* ---- flips ----------------------------------------------------------------
 * flags[i] = (fh, fv): fh = below(2) of word 0 of stream i if `horizontal`
 * else 0; fv = below(2) of word 1 if `vertical` else 0.
 * y[i, r, s] = x[i, fv ? h-1-r : r, fh ? w-1-s : s]. */
void pr_k_sample_flip(int64_t n, int horizontal, int vertical, uint64_t seed, uint64_t counter,
                      int32_t *flags);
int pr_k_flip(const void *x, void *y, pr_dtype dt, pr_nhwc g, const int32_t *flags);

/* ---- pad and crop ---------------------------------------------------------
 * off[i] = (oy, ox): oy = below(range_y), ox = below(range_x) from stream i.
 * y[i, r, s] = P[i, oy + r, ox + s] where P is x padded by (pad_y, pad_x) on
 * every side with zeros, or, if `reflect`, by mirroring without repeating the
 * edge (numpy.pad mode="reflect"; needs pad_y < h and pad_x < w).
 * y is n x out_h x out_w x c of x's dtype. */
void pr_k_sample_offsets(int64_t n, int64_t range_y, int64_t range_x, uint64_t seed,
                         uint64_t counter, int32_t *off);
int pr_k_pad_crop(const void *x, void *y, pr_dtype dt, pr_nhwc g, int64_t pad_y, int64_t pad_x,
                   int reflect, int64_t out_h, int64_t out_w, const int32_t *off);

/* ---- random resized crop (Inception preprocessing) ------------------------
 * box[i] = (top, left, height, width), the sampling of torchvision's
 * RandomResizedCrop.get_params (torchvision/transforms/transforms.py): up to
 * 10 attempts of
 *     area  = h w (area_min + (area_max - area_min) uniform())
 *     ratio = exp(log_ratio_min + (log_ratio_max - log_ratio_min) uniform())
 *     cw = round(sqrt(area ratio)), ch = round(sqrt(area / ratio))  (half to even)
 *     accepted if 0 < cw <= w and 0 < ch <= h: top = below(h - ch + 1),
 *     left = below(w - cw + 1)
 * then the fallback: the central crop of the whole image with its aspect
 * ratio clamped to [ratio_min, ratio_max]. */
void pr_k_sample_resized_crop(int64_t n, int64_t h, int64_t w, double area_min, double area_max,
                              double ratio_min, double ratio_max, uint64_t seed, uint64_t counter,
                              int32_t *box);
/* y (n x out_h x out_w x c, float32) = the box of each image resized by
 * bilinear interpolation with half-pixel centres, as PyTorch's
 * upsample_bilinear2d with align_corners=False and no antialiasing:
 * src = max((dst + 0.5) * box_size / out_size - 0.5, 0), taps clamped to the
 * box.  box == NULL: the whole image.  scratch: pr_crop_resize_scratch bytes. */
size_t pr_crop_resize_scratch(int64_t n, int64_t out_w);
int pr_k_crop_resize(const void *x, pr_dtype dt, pr_nhwc g, const int32_t *box, int64_t out_h,
                      int64_t out_w, float *y, void *scratch);

/* ---- PCA lighting (Krizhevsky, Sutskever and Hinton 2012, section 4.1) -----
 * alpha[i, j] = stddev * normal() from stream i, j = 0, 1, 2.
 * y[i, p, c] = x[i, p, c] + shift[i, c] with
 * shift[i, c] = sum_j eigvec[c, j] alpha[i, j] eigval[j] (in double, rounded
 * to float32; eigvec's columns are the eigenvectors).  c must be 3. */
void pr_k_sample_normal(int64_t n, int64_t k, double stddev, uint64_t seed, uint64_t counter,
                        float *out);
int pr_k_lighting(const void *x, pr_dtype dt, pr_nhwc g, const float *eigval,
                   const float *eigvec, const float *alpha, float *y);

/* ---- cutout (DeVries and Taylor 2017, "Improved regularization of
 * convolutional neural networks with cutout") ------------------------------
 * centre[i] = (cy, cx): cy = below(h), cx = below(w) from stream i.
 * y = x with rows [cy - size_h/2, cy - size_h/2 + size_h) x columns likewise,
 * clipped to the image, set to `fill` (the paper's reference code for even
 * sizes). */
void pr_k_sample_centres(int64_t n, int64_t h, int64_t w, uint64_t seed, uint64_t counter,
                         int32_t *centre);
int pr_k_cutout(const void *x, void *y, pr_dtype dt, pr_nhwc g, int64_t size_h, int64_t size_w,
                 const int32_t *centre, float fill);

/* ---- mixup (Zhang, Cisse, Dauphin and Lopez-Paz 2018) ----------------------
 * perm: Fisher-Yates on the batch stream (for i = n-1 .. 1: swap perm[i] and
 * perm[below(i + 1)]); then lam = beta(alpha, alpha) once from the batch
 * stream, or, per_sample, lam[i] = beta(alpha, alpha) from stream i.
 * lam is rounded to float32. */
void pr_k_sample_mixup(int64_t n, double alpha, int per_sample, uint64_t seed, uint64_t counter,
                       float *lam, int32_t *perm);
/* y[i] = lam[i] x[i] + (1 - lam[i]) x[perm[i]] in float32, rows of `row` values. */
int pr_k_mixup(const void *x, pr_dtype dt, int64_t n, int64_t row, const float *lam,
                const int32_t *perm, float *y);
/* Soft labels out (n x k): from integer labels (dt int32/int64/uint8, n values,
 * one-hot of k classes) or soft labels (float32, n x k), mixed as the images.
 * Returns PR_ERR_VALUE (message set) for an integer label outside [0, k). */
int pr_k_mix_labels(const void *labels, pr_dtype dt, int64_t n, int64_t k, const float *lam,
                    const int32_t *perm, float *out);

/* ---- per-channel normalisation (keras.layers.Normalization) ---------------
 * y[p, c] = (x[p, c] - mean[c]) / max(sqrt(variance[c]), epsilon) in float32
 * over `pixels` pixels; `scratch` holds c floats. */
int pr_k_normalize(const void *x, pr_dtype dt, int64_t pixels, int64_t c, const float *mean,
                   const float *variance, float epsilon, float *y, float *scratch);

#endif
