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

/* Alternating flip (Jordan 2024, "94% on CIFAR-10 in 3.29 seconds on a single
 * GPU", arXiv 2404.00498, the data-augmentation section): image i, the
 * dataset element index[i], draws (fh, fv) as pr_k_sample_flip does but from
 * stream index[i] at counter 0 (the same draw in every pass), and both are
 * XORed with the pass parity (counter >> 32) & 1 (the input pipeline's counter
 * is (pass << 32) + batch). */
void pr_k_sample_alternating_flip(int64_t n, int horizontal, int vertical, uint64_t seed,
                                  uint64_t counter, const int64_t *index, int32_t *flags);

/* ---- extension of an image beyond its border ------------------------------
 * How index k of an axis of n samples reads outside [0, n), numpy.pad's
 * names (Keras's fill_mode names in brackets):
 *   PR_FILL_ZERO       a constant                       ("constant")
 *   PR_FILL_REFLECT    d c b | a b c d | c b a           ("mirror")
 *   PR_FILL_SYMMETRIC  d c b a | a b c d | d c b a       ("reflect")
 *   PR_FILL_EDGE       a a a | a b c d | d d d           ("nearest")
 *   PR_FILL_WRAP       b c d | a b c d | a b c           ("wrap")
 * periodic, so any overhang works. */
enum { PR_FILL_ZERO, PR_FILL_REFLECT, PR_FILL_SYMMETRIC, PR_FILL_EDGE, PR_FILL_WRAP,
       PR_FILL_MODES };
/* The in-range index k maps to, or -1 for PR_FILL_ZERO outside. */
int64_t pr_fill_index(int64_t k, int64_t n, int mode);

/* ---- pad and crop ---------------------------------------------------------
 * off[i] = (oy, ox): oy = below(range_y), ox = below(range_x) from stream i.
 * y[i, r, s] = P[i, oy + r, ox + s] where P is x padded by (pad_y, pad_x) on
 * every side as `mode` (a PR_FILL_*, zeros for PR_FILL_ZERO) says.
 * y is n x out_h x out_w x c of x's dtype. */
void pr_k_sample_offsets(int64_t n, int64_t range_y, int64_t range_x, uint64_t seed,
                         uint64_t counter, int32_t *off);
int pr_k_pad_crop(const void *x, void *y, pr_dtype dt, pr_nhwc g, int64_t pad_y, int64_t pad_x,
                   int mode, int64_t out_h, int64_t out_w, const int32_t *off);

/* ---- projective / affine transform (keras.ops.image.affine_transform) -----
 * t[i] = (a0, a1, a2, b0, b1, b2, c0, c1) maps output pixel (x, y) (column,
 * row) of image i to the input point
 *     x' = (a0 x + a1 y + a2) / k,  y' = (b0 x + b1 y + b2) / k,  k = c0 x + c1 y + 1
 * (TensorFlow's ImageProjectiveTransformV3 and Keras 3's convention); y (float32,
 * x's shape) samples x there: `bilinear` from the four pixels around (x', y'),
 * else the nearest one, floor(v + 0.5) per axis (scipy.ndimage order 0);
 * pixels outside read the extension `mode` (PR_FILL_ZERO: fill_value). */
int pr_k_affine(const void *x, pr_dtype dt, pr_nhwc g, const float *t, int bilinear, int mode,
                float fill_value, float *y);

/* Random affine parameters, image i from stream i, five uniforms u0..u4 in
 * this order (all always drawn): ty = h (ty_lo + (ty_hi - ty_lo) u0),
 * tx = w (tx_lo + ...u1), angle = rot_lo + (rot_hi - rot_lo) u2 (radians),
 * zy = zy_lo + (zy_hi - zy_lo) u3, zx = zx_lo + ...u4, or zx = zy when
 * `same_zoom`.  t[i] (8 floats, as pr_k_affine's) maps an output point p to
 *     p' = C + R(angle) diag(zx, zy) (p - C) - (tx, ty),  C = ((w-1)/2, (h-1)/2),
 * Keras 3's RandomTranslation / RandomRotation / RandomZoom matrices when
 * only one of them is not the identity. */
typedef struct {
    double ty_lo, ty_hi, tx_lo, tx_hi, rot_lo, rot_hi, zy_lo, zy_hi, zx_lo, zx_hi;
    int same_zoom;
} pr_affine_ranges;
void pr_k_sample_affine(int64_t n, int64_t h, int64_t w, const pr_affine_ranges *r,
                        uint64_t seed, uint64_t counter, float *t);

/* ---- contrast (keras.layers.RandomContrast) -------------------------------
 * f[i] = lo + (hi - lo) uniform() from stream i;
 * y[i, :, :, c] = clip((x - m) f[i] + m, vmin, vmax), m = the mean of channel c
 * of image i (summed in double, rounded to float32). */
void pr_k_sample_uniform(int64_t n, double lo, double hi, uint64_t seed, uint64_t counter,
                         float *out);
int pr_k_contrast(const void *x, pr_dtype dt, pr_nhwc g, const float *f, float vmin, float vmax,
                  float *y);

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
