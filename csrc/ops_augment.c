/* Registry entries of the augment family: random_flip, alternating_flip,
 * random_crop, center_crop, random_resized_crop, resize_bilinear,
 * affine_transform, random_affine, random_contrast, random_lighting, cutout,
 * mixup, normalize_channels.
 *
 * Random ops take the RNG state, an int64 Variable [seed, counter], as their
 * last input and mutate it (counter += 1 per call; see kernels/rng.h), so a
 * compiled step draws new numbers on every call.  Besides the images they
 * return the parameters they drew, so tests can reproduce them.  No gradient:
 * augmentation sits in front of the model. */
#include "ops.h" /* Python.h first */

#include <math.h>

#include "kernels/augment.h"

/* ---- attributes ----------------------------------------------------------- */

typedef struct {
    int horizontal, vertical;
} flip_attrs;

typedef struct {
    pr_ints size;    /* (height, width) of the crop */
    pr_ints padding; /* (pad_y, pad_x) or one value for both */
    int64_t mode;    /* a PR_FILL_* (kernels/augment.h): 0 zeros, 1 reflect, 2 symmetric, ... */
} crop_attrs;

typedef struct {
    int64_t interpolation; /* 0 nearest, 1 bilinear */
    int64_t fill_mode;     /* a PR_FILL_* */
    double fill_value;
} affine_attrs;

typedef struct {
    affine_attrs how;
    double height_lower, height_upper, width_lower, width_upper, rotation_lower, rotation_upper,
        zoom_height_lower, zoom_height_upper, zoom_width_lower, zoom_width_upper;
    int same_zoom;
} random_affine_attrs;

typedef struct {
    double lower, upper, value_min, value_max;
} contrast_attrs;

typedef struct {
    pr_ints size;
    double area_min, area_max, ratio_min, ratio_max;
} resized_crop_attrs;

typedef struct {
    double stddev;
} lighting_attrs;

typedef struct {
    pr_ints size;
    double fill;
} cutout_attrs;

typedef struct {
    double alpha;
    int64_t num_classes;
    int per_sample;
} mixup_attrs;

typedef struct {
    double epsilon;
} normalize_attrs;

/* ---- shape-rule helpers --------------------------------------------------- */

/* Parameters are int32 and streams are indexed by uint32: keep every
 * extent (batch, height, width, padding) and element count well inside. */
#define MAX_BATCH 0x7FFFFFFF
#define MAX_EXTENT (1 << 24)
#define MAX_ELEMENTS 4e15

/* An output of n x h x w x c elements must be addressable. */
static int check_elements(const pr_op *op, int64_t n, int64_t h, int64_t w, int64_t c) {
    if (pr_dims_symbolic(4, (int64_t[]){n, h, w, c})) return 0; /* checked when known */
    if ((double)n * (double)h * (double)w * (double)c > MAX_ELEMENTS)
        return pr_fail(op, PyExc_ValueError, "output (%lld, %lld, %lld, %lld) is too large",
                       (long long)n, (long long)h, (long long)w, (long long)c);
    return 0;
}

static int check_images(const pr_op *op, const pr_view *in, int i) {
    char s[128];
    if (in[i].dtype != PR_U8 && in[i].dtype != PR_F32)
        return pr_fail(op, PyExc_TypeError, "images (input %d) must be uint8 or float32, got %s", i,
                       pr_dtype_name(in[i].dtype));
    if (in[i].ndim != 4)
        return pr_fail(op, PyExc_ValueError,
                       "images (input %d) must be a batch of rank 4 (N, H, W, C), got shape %s", i,
                       pr_shape_str(&in[i], s, sizeof s));
    for (int d = 1; d < 4; d++)
        if (!pr_dim_is_sym(in[i].shape[d]) && in[i].shape[d] < 1)
            return pr_fail(op, PyExc_ValueError, "images have an empty dimension: shape %s",
                           pr_shape_str(&in[i], s, sizeof s));
    for (int d = 0; d < 4; d++)
        if (in[i].shape[d] > (d ? MAX_EXTENT : MAX_BATCH))
            return pr_fail(op, PyExc_ValueError, "images of shape %s are too large",
                           pr_shape_str(&in[i], s, sizeof s));
    return 0;
}

/* `size` attribute: (height, width) or one value for both, each >= 1. */
static int get_size(const pr_op *op, const pr_ints *v, const char *name, int64_t *h, int64_t *w) {
    if (v->n != 1 && v->n != 2)
        return pr_fail(op, PyExc_ValueError,
                       "'%s' must be one int or (height, width), got %d values", name, v->n);
    *h = v->v[0], *w = v->v[v->n - 1];
    if (*h < 1 || *w < 1 || *h > MAX_EXTENT || *w > MAX_EXTENT)
        return pr_fail(op, PyExc_ValueError, "'%s' must be positive, got (%lld, %lld)", name,
                       (long long)*h, (long long)*w);
    return 0;
}

static pr_nhwc geometry(const pr_view *x) {
    pr_nhwc g = {x->shape[0], x->shape[1], x->shape[2], x->shape[3]};
    return g;
}

/* (N, k) int32 or float32 parameters. */
static void set_params(pr_view *out, pr_dtype dt, int64_t n, int64_t k) {
    int64_t shape[2] = {n, k};
    pr_set_out(out, dt, k ? 2 : 1, shape);
}

/* ---- RNG state ------------------------------------------------------------ */

typedef struct {
    uint64_t seed, counter;
} rng_call;

static rng_call state_read(const pr_view *state) {
    const int64_t *s = state->data;
    rng_call c = {(uint64_t)s[0], (uint64_t)s[1]};
    return c;
}

/* The call succeeded: the next call draws new numbers. */
static void state_advance(const pr_view *state) {
    int64_t *s = state->data;
    s[1] = (int64_t)((uint64_t)s[1] + 1);
}

/* ---- random_flip ---------------------------------------------------------- */

static int infer_flip(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                      size_t *ws) {
    const flip_attrs *a = attrs;
    if (check_images(op, in, 0) < 0 || pr_expect_rng_state(op, in, 1) < 0) return -1;
    if (!a->horizontal && !a->vertical)
        return pr_fail(op, PyExc_ValueError, "at least one of horizontal, vertical must be true");
    pr_set_out(&out[0], in[0].dtype, 4, in[0].shape);
    set_params(&out[1], PR_I32, in[0].shape[0], 2);
    return 0;
}

static int fw_flip(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const flip_attrs *a = attrs;
    rng_call r = state_read(&in[1]);
    pr_k_sample_flip(in[0].shape[0], a->horizontal, a->vertical, r.seed, r.counter, out[1].data);
    int rc = pr_k_flip(in[0].data, out[0].data, in[0].dtype, geometry(&in[0]), out[1].data);
    if (rc == PR_OK) state_advance(&in[1]);
    return rc;
}

/* ---- random_crop, center_crop --------------------------------------------- */

typedef struct {
    int64_t out_h, out_w, pad_y, pad_x;
} crop_geometry;

/* `padding`: none, one value for both axes, or (pad_y, pad_x). */
static void crop_pads(const crop_attrs *a, int64_t *pad_y, int64_t *pad_x) {
    *pad_y = a->padding.n ? a->padding.v[0] : 0;
    *pad_x = a->padding.n ? a->padding.v[a->padding.n - 1] : 0;
}

static int crop_shape(const pr_op *op, const pr_view *x, const crop_attrs *a, crop_geometry *cg) {
    if (get_size(op, &a->size, "size", &cg->out_h, &cg->out_w) < 0) return -1;
    if (a->padding.n > 2)
        return pr_fail(op, PyExc_ValueError,
                       "'padding' must be one int or (pad_y, pad_x), got %d values", a->padding.n);
    if (a->mode < 0 || a->mode >= PR_FILL_MODES)
        return pr_fail(op, PyExc_ValueError,
                       "'mode' must be 0 (zeros), 1 (reflect), 2 (symmetric), 3 (edge) or "
                       "4 (wrap), got %lld", (long long)a->mode);
    crop_pads(a, &cg->pad_y, &cg->pad_x);
    int64_t h = x->shape[1], w = x->shape[2];
    if (cg->pad_y < 0 || cg->pad_x < 0 || cg->pad_y > MAX_EXTENT || cg->pad_x > MAX_EXTENT)
        return pr_fail(op, PyExc_ValueError, "'padding' must be in [0, %d], got (%lld, %lld)",
                       MAX_EXTENT,
                       (long long)cg->pad_y, (long long)cg->pad_x);
    if (pr_dim_is_sym(h) || pr_dim_is_sym(w)) return 0; /* the rest is checked when known */
    if (cg->out_h > h + 2 * cg->pad_y || cg->out_w > w + 2 * cg->pad_x)
        return pr_fail(op, PyExc_ValueError,
                       "crop (%lld, %lld) is larger than the padded image (%lld, %lld)",
                       (long long)cg->out_h, (long long)cg->out_w, (long long)(h + 2 * cg->pad_y),
                       (long long)(w + 2 * cg->pad_x));
    return 0;
}

static int infer_crop_out(const pr_op *op, const pr_view *in, const crop_attrs *a, pr_view *out) {
    crop_geometry cg = {0};
    if (check_images(op, in, 0) < 0 || crop_shape(op, &in[0], a, &cg) < 0) return -1;
    int64_t shape[4] = {in[0].shape[0], cg.out_h, cg.out_w, in[0].shape[3]};
    if (check_elements(op, shape[0], shape[1], shape[2], shape[3]) < 0) return -1;
    pr_set_out(&out[0], in[0].dtype, 4, shape);
    return 0;
}

static int infer_random_crop(const pr_op *op, const pr_view *in, int n, const void *attrs,
                             pr_view *out, size_t *ws) {
    if (infer_crop_out(op, in, attrs, out) < 0 || pr_expect_rng_state(op, in, 1) < 0) return -1;
    set_params(&out[1], PR_I32, in[0].shape[0], 2);
    return 0;
}

static int fw_random_crop(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const crop_attrs *a = attrs;
    pr_nhwc g = geometry(&in[0]);
    int64_t oh = out[0].shape[1], ow = out[0].shape[2], pad_y, pad_x;
    crop_pads(a, &pad_y, &pad_x);
    rng_call r = state_read(&in[1]);
    pr_k_sample_offsets(g.n, g.h + 2 * pad_y - oh + 1, g.w + 2 * pad_x - ow + 1, r.seed, r.counter,
                        out[1].data);
    int rc = pr_k_pad_crop(in[0].data, out[0].data, in[0].dtype, g, pad_y, pad_x, (int)a->mode,
                           oh, ow, out[1].data);
    if (rc == PR_OK) state_advance(&in[1]);
    return rc;
}

static int infer_center_crop(const pr_op *op, const pr_view *in, int n, const void *attrs,
                             pr_view *out, size_t *ws) {
    if (infer_crop_out(op, in, attrs, out) < 0) return -1;
    *ws = pr_dim_is_sym(in[0].shape[0]) ? 0 : (size_t)in[0].shape[0] * 2 * sizeof(int32_t);
    return 0;
}

static int fw_center_crop(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    pr_nhwc g = geometry(&in[0]);
    int64_t oh = out[0].shape[1], ow = out[0].shape[2];
    int32_t *off = ws;
    for (int64_t i = 0; i < g.n; i++)
        off[2 * i] = (int32_t)((g.h - oh) / 2), off[2 * i + 1] = (int32_t)((g.w - ow) / 2);
    return pr_k_pad_crop(in[0].data, out[0].data, in[0].dtype, g, 0, 0, PR_FILL_ZERO, oh, ow, off);
}

/* ---- random_resized_crop, resize_bilinear --------------------------------- */

static int infer_resize_out(const pr_op *op, const pr_view *in, const pr_ints *size, pr_view *out,
                            size_t *ws) {
    int64_t oh = 0, ow = 0;
    if (check_images(op, in, 0) < 0 || get_size(op, size, "size", &oh, &ow) < 0) return -1;
    int64_t shape[4] = {in[0].shape[0], oh, ow, in[0].shape[3]};
    if (check_elements(op, shape[0], shape[1], shape[2], shape[3]) < 0) return -1;
    pr_set_out(&out[0], PR_F32, 4, shape);
    *ws = pr_dim_is_sym(in[0].shape[0]) ? 0 : pr_crop_resize_scratch(in[0].shape[0], ow);
    return 0;
}

static int infer_random_resized_crop(const pr_op *op, const pr_view *in, int n, const void *attrs,
                                     pr_view *out, size_t *ws) {
    const resized_crop_attrs *a = attrs;
    if (infer_resize_out(op, in, &a->size, out, ws) < 0 || pr_expect_rng_state(op, in, 1) < 0)
        return -1;
    if (!(a->area_min > 0.0 && a->area_min <= a->area_max && a->area_max <= 1.0))
        return pr_fail(op, PyExc_ValueError,
                       "the area range (%g, %g) must satisfy 0 < area_min <= area_max <= 1",
                       a->area_min, a->area_max);
    if (!(a->ratio_min > 0.0 && a->ratio_min <= a->ratio_max && a->ratio_max < 1e6))
        return pr_fail(op, PyExc_ValueError,
                       "the aspect-ratio range (%g, %g) must satisfy 0 < ratio_min <= ratio_max",
                       a->ratio_min, a->ratio_max);
    set_params(&out[1], PR_I32, in[0].shape[0], 4);
    return 0;
}

static int fw_random_resized_crop(const pr_view *in, int n, pr_view *out, const void *attrs,
                                  void *ws) {
    const resized_crop_attrs *a = attrs;
    pr_nhwc g = geometry(&in[0]);
    rng_call r = state_read(&in[1]);
    pr_k_sample_resized_crop(g.n, g.h, g.w, a->area_min, a->area_max, a->ratio_min, a->ratio_max,
                             r.seed, r.counter, out[1].data);
    int rc = pr_k_crop_resize(in[0].data, in[0].dtype, g, out[1].data, out[0].shape[1],
                              out[0].shape[2], out[0].data, ws);
    if (rc == PR_OK) state_advance(&in[1]);
    return rc;
}

static int infer_resize(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                        size_t *ws) {
    return infer_resize_out(op, in, attrs, out, ws);
}

static int fw_resize(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    return pr_k_crop_resize(in[0].data, in[0].dtype, geometry(&in[0]), NULL, out[0].shape[1],
                            out[0].shape[2], out[0].data, ws);
}

/* ---- random_lighting ------------------------------------------------------ */

static int infer_lighting(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    const lighting_attrs *a = attrs;
    char s[128];
    if (check_images(op, in, 0) < 0 || pr_expect_rng_state(op, in, 3) < 0) return -1;
    if (!pr_dim_maybe_equal(in[0].shape[3], 3))
        return pr_fail(op, PyExc_ValueError, "images must have 3 (RGB) channels, got shape %s",
                       pr_shape_str(&in[0], s, sizeof s));
    if (pr_expect_dtype(op, in, 1, PR_F32) < 0 || pr_expect_dtype(op, in, 2, PR_F32) < 0) return -1;
    if (in[1].ndim != 1 || !pr_dim_maybe_equal(in[1].shape[0], 3))
        return pr_fail(op, PyExc_ValueError, "eigval (input 1) must have shape (3,), got %s",
                       pr_shape_str(&in[1], s, sizeof s));
    if (in[2].ndim != 2 || !pr_dim_maybe_equal(in[2].shape[0], 3) ||
        !pr_dim_maybe_equal(in[2].shape[1], 3))
        return pr_fail(op, PyExc_ValueError, "eigvec (input 2) must have shape (3, 3), got %s",
                       pr_shape_str(&in[2], s, sizeof s));
    if (!(a->stddev >= 0.0))
        return pr_fail(op, PyExc_ValueError, "stddev must be >= 0, got %g", a->stddev);
    pr_set_out(&out[0], PR_F32, 4, in[0].shape);
    set_params(&out[1], PR_F32, in[0].shape[0], 3);
    return 0;
}

static int fw_lighting(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const lighting_attrs *a = attrs;
    rng_call r = state_read(&in[3]);
    pr_k_sample_normal(in[0].shape[0], 3, a->stddev, r.seed, r.counter, out[1].data);
    int rc = pr_k_lighting(in[0].data, in[0].dtype, geometry(&in[0]), in[1].data, in[2].data,
                           out[1].data, out[0].data);
    if (rc == PR_OK) state_advance(&in[3]);
    return rc;
}

/* ---- cutout --------------------------------------------------------------- */

static int infer_cutout(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                        size_t *ws) {
    const cutout_attrs *a = attrs;
    int64_t h, w;
    if (check_images(op, in, 0) < 0 || pr_expect_rng_state(op, in, 1) < 0 ||
        get_size(op, &a->size, "size", &h, &w) < 0)
        return -1;
    if (in[0].dtype == PR_U8 && !(a->fill >= 0.0 && a->fill <= 255.0 && a->fill == (int)a->fill))
        return pr_fail(op, PyExc_ValueError,
                       "fill must be an integer in [0, 255] for uint8 images, got %g", a->fill);
    pr_set_out(&out[0], in[0].dtype, 4, in[0].shape);
    set_params(&out[1], PR_I32, in[0].shape[0], 2);
    return 0;
}

static int fw_cutout(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const cutout_attrs *a = attrs;
    pr_nhwc g = geometry(&in[0]);
    rng_call r = state_read(&in[1]);
    pr_k_sample_centres(g.n, g.h, g.w, r.seed, r.counter, out[1].data);
    int rc = pr_k_cutout(in[0].data, out[0].data, in[0].dtype, g, a->size.v[0],
                         a->size.v[a->size.n - 1], out[1].data, (float)a->fill);
    if (rc == PR_OK) state_advance(&in[1]);
    return rc;
}

/* ---- mixup ---------------------------------------------------------------- */

static int infer_mixup(const pr_op *op, const pr_view *in, int n, const void *attrs, pr_view *out,
                       size_t *ws) {
    const mixup_attrs *a = attrs;
    char s[128], t[128];
    const pr_view *x = &in[0], *y = &in[1];
    if (x->dtype != PR_U8 && x->dtype != PR_F32)
        return pr_fail(op, PyExc_TypeError, "images must be uint8 or float32, got %s",
                       pr_dtype_name(x->dtype));
    if (x->ndim < 1 || x->shape[0] > MAX_BATCH)
        return pr_fail(op, PyExc_ValueError, "images must be a batch (N, ...), got shape %s",
                       pr_shape_str(x, s, sizeof s));
    if (pr_expect_rng_state(op, in, 2) < 0) return -1;
    if (!(a->alpha > 0.0 && a->alpha < 1e6))
        return pr_fail(op, PyExc_ValueError, "alpha must be > 0, got %g", a->alpha);
    int64_t k;
    if (y->dtype == PR_F32) {
        if (y->ndim != 2 || !pr_dim_maybe_equal(y->shape[0], x->shape[0]))
            return pr_fail(op, PyExc_ValueError,
                           "soft labels must have shape (N, num_classes) with N = %s, got %s",
                           pr_dim_str(pr_symtab_current(), x->shape[0], s, sizeof s),
                           pr_shape_str(y, t, sizeof t));
        k = y->shape[1];
        if (a->num_classes && a->num_classes != k)
            return pr_fail(op, PyExc_ValueError,
                           "num_classes is %lld but soft labels have shape %s",
                           (long long)a->num_classes, pr_shape_str(y, t, sizeof t));
    } else if (y->dtype == PR_I32 || y->dtype == PR_I64 || y->dtype == PR_U8) {
        int ok = y->ndim >= 1 && y->ndim <= 2 && pr_dim_maybe_equal(y->shape[0], x->shape[0]) &&
                 (y->ndim == 1 || y->shape[1] == 1);
        if (!ok)
            return pr_fail(op, PyExc_ValueError,
                           "integer labels must have shape (N,) or (N, 1) with N = %s, got %s",
                           pr_dim_str(pr_symtab_current(), x->shape[0], s, sizeof s),
                           pr_shape_str(y, t, sizeof t));
        if (a->num_classes < 1)
            return pr_fail(op, PyExc_ValueError,
                           "integer labels need num_classes >= 1, got %lld",
                           (long long)a->num_classes);
        if (check_elements(op, x->shape[0], a->num_classes, 1, 1) < 0) return -1;
        k = a->num_classes;
    } else {
        return pr_fail(op, PyExc_TypeError,
                       "labels must be integer class indices (int32, int64, uint8) or float32 "
                       "soft labels, got %s",
                       pr_dtype_name(y->dtype));
    }
    pr_set_out(&out[0], PR_F32, x->ndim, x->shape);
    set_params(&out[1], PR_F32, x->shape[0], k);
    set_params(&out[2], PR_F32, x->shape[0], 0);
    set_params(&out[3], PR_I32, x->shape[0], 0);
    return 0;
}

static int fw_mixup(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const mixup_attrs *a = attrs;
    int64_t batch = in[0].ndim ? in[0].shape[0] : 0;
    rng_call r = state_read(&in[2]);
    pr_k_sample_mixup(batch, a->alpha, a->per_sample, r.seed, r.counter, out[2].data, out[3].data);
    int rc = pr_k_mix_labels(in[1].data, in[1].dtype, batch, out[1].shape[1], out[2].data,
                             out[3].data, out[1].data);
    if (rc != PR_OK) return rc;
    rc = pr_k_mixup(in[0].data, in[0].dtype, batch, batch ? in[0].size / batch : 0, out[2].data,
                    out[3].data, out[0].data);
    if (rc == PR_OK) state_advance(&in[2]);
    return rc;
}

/* ---- normalize_channels --------------------------------------------------- */

static int infer_normalize(const pr_op *op, const pr_view *in, int n, const void *attrs,
                           pr_view *out, size_t *ws) {
    char s[128], t[128];
    if (in[0].dtype != PR_U8 && in[0].dtype != PR_F32)
        return pr_fail(op, PyExc_TypeError, "x must be uint8 or float32, got %s",
                       pr_dtype_name(in[0].dtype));
    if (in[0].ndim < 1)
        return pr_fail(op, PyExc_ValueError, "x must have a channel axis, got a scalar");
    if (pr_expect_dtype(op, in, 1, PR_F32) < 0 || pr_expect_dtype(op, in, 2, PR_F32) < 0) return -1;
    int64_t c = in[0].shape[in[0].ndim - 1];
    for (int i = 1; i < 3; i++)
        if (in[i].ndim != 1 || !pr_dim_maybe_equal(in[i].shape[0], c)) {
            char cs[64];
            return pr_fail(op, PyExc_ValueError, "%s must have shape (%s,) for x of shape %s, got %s",
                           i == 1 ? "mean" : "variance",
                           pr_dim_str(pr_symtab_current(), c, cs, sizeof cs),
                           pr_shape_str(&in[0], s, sizeof s), pr_shape_str(&in[i], t, sizeof t));
        }
    if (!(((const normalize_attrs *)attrs)->epsilon >= 0.0))
        return pr_fail(op, PyExc_ValueError, "epsilon must be >= 0");
    pr_set_out(&out[0], PR_F32, in[0].ndim, in[0].shape);
    *ws = pr_dim_is_sym(c) ? 0 : (size_t)c * sizeof(float);
    return 0;
}

static int fw_normalize(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    int64_t c = in[0].shape[in[0].ndim - 1];
    return pr_k_normalize(in[0].data, in[0].dtype, c ? in[0].size / c : 0, c, in[1].data,
                          in[2].data, (float)((const normalize_attrs *)attrs)->epsilon,
                          out[0].data, ws);
}

/* ---- alternating_flip ----------------------------------------------------- */

static int infer_alternating_flip(const pr_op *op, const pr_view *in, int n, const void *attrs,
                                  pr_view *out, size_t *ws) {
    const flip_attrs *a = attrs;
    char s[128];
    if (check_images(op, in, 0) < 0 || pr_expect_dtype(op, in, 1, PR_I64) < 0 ||
        pr_expect_rng_state(op, in, 2) < 0)
        return -1;
    if (in[1].ndim != 1 || !pr_dim_maybe_equal(in[1].shape[0], in[0].shape[0]))
        return pr_fail(op, PyExc_ValueError,
                       "indices (input 1) must have shape (N,) for images of shape %s", 
                       pr_shape_str(&in[0], s, sizeof s));
    if (!a->horizontal && !a->vertical)
        return pr_fail(op, PyExc_ValueError, "at least one of horizontal, vertical must be true");
    pr_set_out(&out[0], in[0].dtype, 4, in[0].shape);
    set_params(&out[1], PR_I32, in[0].shape[0], 2);
    return 0;
}

static int fw_alternating_flip(const pr_view *in, int n, pr_view *out, const void *attrs,
                               void *ws) {
    const flip_attrs *a = attrs;
    const int64_t *index = in[1].data;
    for (int64_t i = 0; i < in[1].size; i++)
        if (index[i] < 0 || index[i] > 0xFFFFFFFFLL) {
            pr_kernel_error("index %lld at position %lld is outside [0, 2**32)",
                            (long long)index[i], (long long)i);
            return PR_ERR_VALUE;
        }
    rng_call r = state_read(&in[2]);
    pr_k_sample_alternating_flip(in[0].shape[0], a->horizontal, a->vertical, r.seed, r.counter,
                                 index, out[1].data);
    int rc = pr_k_flip(in[0].data, out[0].data, in[0].dtype, geometry(&in[0]), out[1].data);
    if (rc == PR_OK) state_advance(&in[2]);
    return rc;
}

/* ---- affine_transform, random_affine -------------------------------------- */

static int check_affine_how(const pr_op *op, const affine_attrs *a) {
    if (a->interpolation != 0 && a->interpolation != 1)
        return pr_fail(op, PyExc_ValueError,
                       "'interpolation' must be 0 (nearest) or 1 (bilinear), got %lld",
                       (long long)a->interpolation);
    if (a->fill_mode < 0 || a->fill_mode >= PR_FILL_MODES)
        return pr_fail(op, PyExc_ValueError,
                       "'fill_mode' must be 0 (constant), 1 (reflect), 2 (symmetric), 3 (edge) "
                       "or 4 (wrap), got %lld", (long long)a->fill_mode);
    if (!isfinite(a->fill_value))
        return pr_fail(op, PyExc_ValueError, "'fill_value' must be finite, got %g", a->fill_value);
    return 0;
}

static int infer_affine(const pr_op *op, const pr_view *in, int n, const void *attrs,
                        pr_view *out, size_t *ws) {
    char s[128], t[128];
    if (check_images(op, in, 0) < 0 || check_affine_how(op, attrs) < 0 ||
        pr_expect_dtype(op, in, 1, PR_F32) < 0)
        return -1;
    if (in[1].ndim != 2 || !pr_dim_maybe_equal(in[1].shape[0], in[0].shape[0]) ||
        !pr_dim_maybe_equal(in[1].shape[1], 8))
        return pr_fail(op, PyExc_ValueError,
                       "transforms (input 1) must have shape (N, 8) for images of shape %s, got %s",
                       pr_shape_str(&in[0], s, sizeof s), pr_shape_str(&in[1], t, sizeof t));
    pr_set_out(&out[0], PR_F32, 4, in[0].shape);
    return 0;
}

static int fw_affine(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const affine_attrs *a = attrs;
    return pr_k_affine(in[0].data, in[0].dtype, geometry(&in[0]), in[1].data,
                       (int)a->interpolation, (int)a->fill_mode, (float)a->fill_value,
                       out[0].data);
}

static int check_range(const pr_op *op, const char *name, double lo, double hi, double min,
                       double max) {
    if (!(lo >= min && lo <= hi && hi <= max))
        return pr_fail(op, PyExc_ValueError,
                       "the %s range (%g, %g) must satisfy %g <= lower <= upper <= %g", name, lo,
                       hi, min, max);
    return 0;
}

static int infer_random_affine(const pr_op *op, const pr_view *in, int n, const void *attrs,
                               pr_view *out, size_t *ws) {
    const random_affine_attrs *a = attrs;
    if (check_images(op, in, 0) < 0 || pr_expect_rng_state(op, in, 1) < 0 ||
        check_affine_how(op, &a->how) < 0 ||
        check_range(op, "height", a->height_lower, a->height_upper, -1.0, 1.0) < 0 ||
        check_range(op, "width", a->width_lower, a->width_upper, -1.0, 1.0) < 0 ||
        check_range(op, "rotation", a->rotation_lower, a->rotation_upper, -1e6, 1e6) < 0 ||
        check_range(op, "zoom height", a->zoom_height_lower, a->zoom_height_upper, 1e-6, 1e6) < 0 ||
        check_range(op, "zoom width", a->zoom_width_lower, a->zoom_width_upper, 1e-6, 1e6) < 0)
        return -1;
    pr_set_out(&out[0], PR_F32, 4, in[0].shape);
    set_params(&out[1], PR_F32, in[0].shape[0], 8);
    return 0;
}

static int fw_random_affine(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const random_affine_attrs *a = attrs;
    pr_affine_ranges r = {a->height_lower, a->height_upper, a->width_lower, a->width_upper,
                          a->rotation_lower, a->rotation_upper, a->zoom_height_lower,
                          a->zoom_height_upper, a->zoom_width_lower, a->zoom_width_upper,
                          a->same_zoom};
    pr_nhwc g = geometry(&in[0]);
    rng_call c = state_read(&in[1]);
    pr_k_sample_affine(g.n, g.h, g.w, &r, c.seed, c.counter, out[1].data);
    int rc = pr_k_affine(in[0].data, in[0].dtype, g, out[1].data, (int)a->how.interpolation,
                         (int)a->how.fill_mode, (float)a->how.fill_value, out[0].data);
    if (rc == PR_OK) state_advance(&in[1]);
    return rc;
}

/* ---- random_contrast ------------------------------------------------------ */

static int infer_contrast(const pr_op *op, const pr_view *in, int n, const void *attrs,
                          pr_view *out, size_t *ws) {
    const contrast_attrs *a = attrs;
    if (check_images(op, in, 0) < 0 || pr_expect_rng_state(op, in, 1) < 0 ||
        check_range(op, "contrast factor", a->lower, a->upper, 0.0, 1e6) < 0)
        return -1;
    if (!(a->value_min <= a->value_max) || !isfinite(a->value_min) || !isfinite(a->value_max))
        return pr_fail(op, PyExc_ValueError, "value range (%g, %g) must be finite and ordered",
                       a->value_min, a->value_max);
    pr_set_out(&out[0], PR_F32, 4, in[0].shape);
    set_params(&out[1], PR_F32, in[0].shape[0], 0);
    return 0;
}

static int fw_contrast(const pr_view *in, int n, pr_view *out, const void *attrs, void *ws) {
    const contrast_attrs *a = attrs;
    pr_nhwc g = geometry(&in[0]);
    rng_call c = state_read(&in[1]);
    pr_k_sample_uniform(g.n, a->lower, a->upper, c.seed, c.counter, out[1].data);
    int rc = pr_k_contrast(in[0].data, in[0].dtype, g, out[1].data, (float)a->value_min,
                           (float)a->value_max, out[0].data);
    if (rc == PR_OK) state_advance(&in[1]);
    return rc;
}

/* ---- registry ------------------------------------------------------------- */

static const pr_attr_spec flip_spec[] = {
    {"horizontal", PR_ATTR_BOOL, offsetof(flip_attrs, horizontal), 0, 1},
    {"vertical", PR_ATTR_BOOL, offsetof(flip_attrs, vertical), 0, 0},
    {NULL}};
#define AFFINE_HOW(base)                                                                 \
    {"interpolation", PR_ATTR_INT, (base) + offsetof(affine_attrs, interpolation), 0, 1},        \
        {"fill_mode", PR_ATTR_INT, (base) + offsetof(affine_attrs, fill_mode), 0, 0},            \
        {"fill_value", PR_ATTR_FLOAT, (base) + offsetof(affine_attrs, fill_value), 0, 0.0}
static const pr_attr_spec affine_spec[] = {AFFINE_HOW(0), {NULL}};
#define RANGE(name, field, dflt)                                                            \
    {name, PR_ATTR_FLOAT, offsetof(random_affine_attrs, field), 0, dflt}
static const pr_attr_spec random_affine_spec[] = {
    AFFINE_HOW(offsetof(random_affine_attrs, how)),
    RANGE("height_lower", height_lower, 0.0), RANGE("height_upper", height_upper, 0.0),
    RANGE("width_lower", width_lower, 0.0), RANGE("width_upper", width_upper, 0.0),
    RANGE("rotation_lower", rotation_lower, 0.0), RANGE("rotation_upper", rotation_upper, 0.0),
    RANGE("zoom_height_lower", zoom_height_lower, 1.0),
    RANGE("zoom_height_upper", zoom_height_upper, 1.0),
    RANGE("zoom_width_lower", zoom_width_lower, 1.0),
    RANGE("zoom_width_upper", zoom_width_upper, 1.0),
    {"same_zoom", PR_ATTR_BOOL, offsetof(random_affine_attrs, same_zoom), 0, 0},
    {NULL}};
static const pr_attr_spec contrast_spec[] = {
    {"lower", PR_ATTR_FLOAT, offsetof(contrast_attrs, lower), 1, 0},
    {"upper", PR_ATTR_FLOAT, offsetof(contrast_attrs, upper), 1, 0},
    {"value_min", PR_ATTR_FLOAT, offsetof(contrast_attrs, value_min), 0, 0.0},
    {"value_max", PR_ATTR_FLOAT, offsetof(contrast_attrs, value_max), 0, 255.0},
    {NULL}};
static const pr_attr_spec crop_spec[] = {
    {"size", PR_ATTR_INTS, offsetof(crop_attrs, size), 1, 0},
    {"padding", PR_ATTR_INTS, offsetof(crop_attrs, padding), 0, 0},
    {"mode", PR_ATTR_INT, offsetof(crop_attrs, mode), 0, 0},
    {NULL}};
static const pr_attr_spec center_crop_spec[] = {
    {"size", PR_ATTR_INTS, offsetof(crop_attrs, size), 1, 0}, {NULL}};
static const pr_attr_spec resized_crop_spec[] = {
    {"size", PR_ATTR_INTS, offsetof(resized_crop_attrs, size), 1, 0},
    {"area_min", PR_ATTR_FLOAT, offsetof(resized_crop_attrs, area_min), 0, 0.08},
    {"area_max", PR_ATTR_FLOAT, offsetof(resized_crop_attrs, area_max), 0, 1.0},
    {"ratio_min", PR_ATTR_FLOAT, offsetof(resized_crop_attrs, ratio_min), 0, 3.0 / 4.0},
    {"ratio_max", PR_ATTR_FLOAT, offsetof(resized_crop_attrs, ratio_max), 0, 4.0 / 3.0},
    {NULL}};
static const pr_attr_spec resize_spec[] = {{"size", PR_ATTR_INTS, 0, 1, 0}, {NULL}};
static const pr_attr_spec lighting_spec[] = {
    {"stddev", PR_ATTR_FLOAT, offsetof(lighting_attrs, stddev), 0, 0.1}, {NULL}};
static const pr_attr_spec cutout_spec[] = {
    {"size", PR_ATTR_INTS, offsetof(cutout_attrs, size), 1, 0},
    {"fill", PR_ATTR_FLOAT, offsetof(cutout_attrs, fill), 0, 0.0},
    {NULL}};
static const pr_attr_spec mixup_spec[] = {
    {"alpha", PR_ATTR_FLOAT, offsetof(mixup_attrs, alpha), 0, 0.2},
    {"num_classes", PR_ATTR_INT, offsetof(mixup_attrs, num_classes), 0, 0},
    {"per_sample", PR_ATTR_BOOL, offsetof(mixup_attrs, per_sample), 0, 0},
    {NULL}};
static const pr_attr_spec normalize_spec[] = {
    {"epsilon", PR_ATTR_FLOAT, offsetof(normalize_attrs, epsilon), 0, 1e-7}, {NULL}};

#define RANDOM (PR_OP_RANDOM | PR_OP_STATEFUL)

const pr_op pr_op_random_flip = {
    .name = "random_flip", .n_in = 2, .n_out = 2, .mutates = 1u << 1, .flags = RANDOM,
    .attrs = flip_spec, .attr_size = sizeof(flip_attrs), .infer = infer_flip, .forward = fw_flip,
    .doc = "random_flip(images, state, horizontal=True, vertical=False) -> (images, flags): "
           "flip each NHWC image left-right and/or upside down with probability 1/2; "
           "flags (N, 2) int32 are the (horizontal, vertical) flips drawn. dtype preserved."};
const pr_op pr_op_alternating_flip = {
    .name = "alternating_flip", .n_in = 3, .n_out = 2, .mutates = 1u << 2, .flags = RANDOM,
    .attrs = flip_spec, .attr_size = sizeof(flip_attrs), .infer = infer_alternating_flip,
    .forward = fw_alternating_flip,
    .doc = "alternating_flip(images, indices, state, horizontal=True, vertical=False) -> "
           "(images, flags): airbench's alternating flip (Jordan 2024, arXiv 2404.00498): "
           "image i (dataset element indices[i], int64) is flipped by a draw of stream "
           "indices[i] at counter 0 XOR the pass parity (counter >> 32) & 1 of the state; "
           "flags (N, 2) int32. dtype preserved."};
const pr_op pr_op_affine_transform = {
    .name = "affine_transform", .n_in = 2, .n_out = 1, .attrs = affine_spec,
    .attr_size = sizeof(affine_attrs), .infer = infer_affine, .forward = fw_affine,
    .doc = "affine_transform(images, transforms, interpolation=1, fill_mode=0, fill_value=0) "
           "-> float32 images: keras.ops.image.affine_transform; transforms (N, 8) float32 "
           "(a0, a1, a2, b0, b1, b2, c0, c1) map output (x, y) to input ((a0 x + a1 y + a2)/k, "
           "(b0 x + b1 y + b2)/k), k = c0 x + c1 y + 1; interpolation 0 nearest, 1 bilinear; "
           "fill_mode 0 constant, 1 reflect (Keras 'mirror'), 2 symmetric (Keras 'reflect'), "
           "3 edge ('nearest'), 4 wrap."};
const pr_op pr_op_random_affine = {
    .name = "random_affine", .n_in = 2, .n_out = 2, .mutates = 1u << 1, .flags = RANDOM,
    .attrs = random_affine_spec, .attr_size = sizeof(random_affine_attrs),
    .infer = infer_random_affine, .forward = fw_random_affine,
    .doc = "random_affine(images, state, height_lower/upper, width_lower/upper (fractions of "
           "the side), rotation_lower/upper (radians), zoom_height_lower/upper, "
           "zoom_width_lower/upper, same_zoom, interpolation, fill_mode, fill_value) -> "
           "(float32 images, transforms (N, 8)): Keras's RandomTranslation/Rotation/Zoom "
           "(see kernels/augment.h for the matrix)."};
const pr_op pr_op_random_contrast = {
    .name = "random_contrast", .n_in = 2, .n_out = 2, .mutates = 1u << 1, .flags = RANDOM,
    .attrs = contrast_spec, .attr_size = sizeof(contrast_attrs), .infer = infer_contrast,
    .forward = fw_contrast,
    .doc = "random_contrast(images, state, lower, upper, value_min=0, value_max=255) -> "
           "(float32 images, factors (N,)): keras RandomContrast: per image f ~ U(lower, "
           "upper), clip((x - channel mean) f + channel mean, value_min, value_max)."};
const pr_op pr_op_random_crop = {
    .name = "random_crop", .n_in = 2, .n_out = 2, .mutates = 1u << 1, .flags = RANDOM,
    .attrs = crop_spec, .attr_size = sizeof(crop_attrs), .infer = infer_random_crop,
    .forward = fw_random_crop,
    .doc = "random_crop(images, state, size, padding=0, mode=0) -> (images, offsets): "
           "pad each image (mode, numpy.pad's names: 0 zeros, 1 reflect, 2 symmetric, 3 edge, "
           "4 wrap) and crop `size` at a uniform offset; offsets (N, 2) int32 index the padded "
           "image. dtype preserved."};
const pr_op pr_op_center_crop = {
    .name = "center_crop", .n_in = 1, .n_out = 1, .attrs = center_crop_spec,
    .attr_size = sizeof(crop_attrs), .infer = infer_center_crop, .forward = fw_center_crop,
    .doc = "center_crop(images, size): the central `size` window (offset (H - h) // 2, "
           "(W - w) // 2). dtype preserved."};
const pr_op pr_op_random_resized_crop = {
    .name = "random_resized_crop", .n_in = 2, .n_out = 2, .mutates = 1u << 1, .flags = RANDOM,
    .attrs = resized_crop_spec, .attr_size = sizeof(resized_crop_attrs),
    .infer = infer_random_resized_crop, .forward = fw_random_resized_crop,
    .doc = "random_resized_crop(images, state, size, area_min=0.08, area_max=1, ratio_min=3/4, "
           "ratio_max=4/3) -> (float32 images, boxes): Inception-style crop (torchvision's "
           "sampling) resized bilinearly to `size`; boxes (N, 4) int32 (top, left, h, w)."};
const pr_op pr_op_resize_bilinear = {
    .name = "resize_bilinear", .n_in = 1, .n_out = 1, .attrs = resize_spec,
    .attr_size = sizeof(pr_ints), .infer = infer_resize, .forward = fw_resize,
    .doc = "resize_bilinear(images, size) -> float32 images: bilinear, half-pixel centres "
           "(align_corners=False), no antialiasing."};
const pr_op pr_op_random_lighting = {
    .name = "random_lighting", .n_in = 4, .n_out = 2, .mutates = 1u << 3, .flags = RANDOM,
    .attrs = lighting_spec, .attr_size = sizeof(lighting_attrs), .infer = infer_lighting,
    .forward = fw_lighting,
    .doc = "random_lighting(images, eigval, eigvec, state, stddev=0.1) -> (float32 images, "
           "alpha): PCA colour jitter of Krizhevsky et al. 2012, section 4.1: add "
           "eigvec @ (alpha * eigval) to every RGB pixel, alpha (N, 3) ~ N(0, stddev)."};
const pr_op pr_op_cutout = {
    .name = "cutout", .n_in = 2, .n_out = 2, .mutates = 1u << 1, .flags = RANDOM,
    .attrs = cutout_spec, .attr_size = sizeof(cutout_attrs), .infer = infer_cutout,
    .forward = fw_cutout,
    .doc = "cutout(images, state, size, fill=0) -> (images, centres): set a `size` box "
           "around a uniform centre (clipped at the borders) to `fill` (DeVries and Taylor "
           "2017); centres (N, 2) int32. dtype preserved."};
const pr_op pr_op_mixup = {
    .name = "mixup", .n_in = 3, .n_out = 4, .mutates = 1u << 2, .flags = RANDOM,
    .attrs = mixup_spec, .attr_size = sizeof(mixup_attrs), .infer = infer_mixup,
    .forward = fw_mixup,
    .doc = "mixup(images, labels, state, alpha=0.2, num_classes=0, per_sample=False) -> "
           "(float32 images, soft labels (N, K), lam (N,), perm (N,) int32): mix the batch "
           "with a permutation of itself, lam ~ Beta(alpha, alpha) (Zhang et al. 2018)."};
const pr_op pr_op_normalize_channels = {
    .name = "normalize_channels", .n_in = 3, .n_out = 1, .attrs = normalize_spec,
    .attr_size = sizeof(normalize_attrs), .infer = infer_normalize, .forward = fw_normalize,
    .doc = "normalize_channels(x, mean, variance, epsilon=1e-7) -> float32 "
           "(x - mean) / max(sqrt(variance), epsilon) over the last axis (keras Normalization)."};

