"""Augmentation ops (csrc/ops_augment.c, kernels in csrc/kernels/augment.c).

Images are NHWC batches of uint8 or float32.  Ops that only move pixels
(flip, crop, cutout) keep the dtype; ops that compute new values (resized
crop, lighting, mixup, normalisation) return float32 in the units of their
input (uint8 images stay on the 0..255 scale).

Random ops take ``state``, the RNG state made by :func:`rng_state` (an int64
Variable ``[seed, counter]``), and advance its counter on every call, eagerly
or in a compiled step.  Each image's draws come from the Philox-4x32-10
stream (seed, counter, image index), so results do not depend on the number
of threads and a fixed seed reproduces them bit for bit (csrc/kernels/rng.h
documents the streams).  ``return_params=True`` also returns the parameters
drawn (flip flags, crop offsets, boxes, lighting coefficients, mixup weights)
so a NumPy reference can recompute the output.

None of these ops is differentiable (gradients stop at them).
"""
import random

import numpy as np

from .._loader import _C
from ..tensor import Tensor, Variable

call = _C.call

__all__ = ["rng_state", "random_flip", "alternating_flip", "random_crop", "center_crop",
           "random_resized_crop", "resize_bilinear", "affine_transform", "random_affine",
           "random_contrast", "random_lighting", "cutout", "mixup", "normalize_channels",
           "rgb_pca", "PADDING_MODES", "FILL_MODES"]

PADDING_MODES = {"zero": 0, "constant": 0, "reflect": 1, "symmetric": 2, "edge": 3, "wrap": 4}
"""NumPy's (and torchvision's) names of how an image is extended beyond its
border, as the C kernels number them (csrc/kernels/augment.h, PR_FILL_*):
"reflect" mirrors without repeating the edge (d c b | a b c d), "symmetric"
repeats it (d c b a | a b c d), "edge" repeats the border pixel, "wrap" is
periodic; "zero"/"constant" fill with a constant."""

FILL_MODES = {"constant": 0, "mirror": 1, "reflect": 2, "nearest": 3, "wrap": 4}
"""Keras 3's ``fill_mode`` names (``keras.ops.image.affine_transform``) for
the same extensions: Keras's "reflect" is NumPy's "symmetric" (d c b a |
a b c d | d c b a), Keras's "mirror" is NumPy's and PyTorch's "reflect"
(d c b | a b c d | c b a), "nearest" is NumPy's "edge"."""


def _mode(value, modes, name, op):
    if value not in modes:
        raise ValueError(f"{op}: {name} must be one of {sorted(modes)}, got {value!r}")
    return modes[value]


def rng_state(seed=None):
    """A new RNG state: an int64 Variable ``[seed, 0]`` of shape (2,), not trainable.

    Args:
        seed: int in [0, 2**63), or None to draw one from Python's ``random``
            module (so ``random.seed(...)`` makes unseeded layers reproducible).
    Returns:
        Variable: the state random ops read and advance.
    Raises:
        ValueError: for a negative or too large seed; TypeError for a non-int.
    """
    if seed is None:
        seed = random.getrandbits(63)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"rng_state: seed must be an int or None, got {type(seed).__name__}")
    if not 0 <= seed < 2**63:
        raise ValueError(f"rng_state: seed must be in [0, 2**63), got {seed}")
    return Variable(np.array([seed, 0], np.int64), trainable=False, name="rng_state")


def _two(value, cast, name, op, expected):
    """``value`` unpacked into two values, each through ``cast``; TypeError
    ("{op}: {name} must be {expected}") for anything else."""
    try:
        a, b = value
        return cast(a), cast(b)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be {expected}, got {value!r}") from None


def _pair(value, name, op):
    """An int or a pair of ints -> (a, b)."""
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    return _two(value, int, name, op, "an int or a pair of ints")


def _range(value, name, op):
    """A pair of floats (lo, hi)."""
    return _two(value, float, name, op, "a pair (min, max)")


def real_array(value, name, op):
    """``value`` as a float32 array, refusing what is not real numbers.

    Integers and floats (and arrays of them) are accepted; datetimes,
    timedeltas, complex numbers, booleans, strings and Python objects
    (``None``) would otherwise be cast silently into meaningless statistics.

    Raises:
        TypeError: naming ``op``, ``name``, what was expected and what came.
    """
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{op}: {name} must be real numbers (int or float), got "
                        f"{arr.dtype.name} {value!r}")
    return arr.astype(np.float32)


def _floats(value, name, op):
    """Tensors (and Variables) pass through; anything else must be real
    numbers and becomes float32 (see :func:`real_array`)."""
    return value if isinstance(value, Tensor) else real_array(value, name, op)


def _result(out, return_params):
    return out if return_params else out[0]


_FLIP_MODES = {"horizontal": (True, False), "vertical": (False, True),
               "horizontal_and_vertical": (True, True)}


def random_flip(images, state, mode="horizontal", return_params=False):
    """Flip each image left-right and/or upside down with probability 1/2.

    Args:
        images: (N, H, W, C) uint8 or float32.
        state: RNG state Variable from :func:`rng_state` (advanced by one).
        mode: "horizontal", "vertical" or "horizontal_and_vertical" (Keras
            RandomFlip; the two flips are drawn independently).
    Returns:
        images of the same shape and dtype; with ``return_params`` also
        flags (N, 2) int32: (flipped left-right, flipped upside down).
    Raises:
        ValueError: unknown mode, images not of rank 4.  TypeError: bad dtype.
    """
    if mode not in _FLIP_MODES:
        raise ValueError(f"random_flip: mode must be one of {sorted(_FLIP_MODES)}, got {mode!r}")
    h, v = _FLIP_MODES[mode]
    return _result(call("random_flip", images, state, horizontal=h, vertical=v), return_params)


def alternating_flip(images, indices, state, mode="horizontal", return_params=False):
    """The alternating flip of airbench (Jordan 2024, "94% on CIFAR-10 in 3.29
    seconds on a single GPU", arXiv 2404.00498, section on data augmentation):
    each image is flipped in every other pass over the data, starting from a
    random choice per image.

    Image ``i`` is the dataset element ``indices[i]``; its first flip is drawn
    from Philox stream ``indices[i]`` at counter 0 of the state's seed (the same
    draw in every pass), and XORed with the pass parity ``(counter >> 32) & 1``
    -- the input pipeline runs batch ``b`` of pass ``e`` with counter
    ``(e << 32) + b`` (csrc/pipeline.c), so the flip alternates between passes.

    Args:
        images: (N, H, W, C) uint8 or float32.
        indices: (N,) int64 dataset indices of the images, in [0, 2**32).
        state: RNG state (its counter is advanced by one).
        mode: "horizontal", "vertical" or "horizontal_and_vertical".
    Returns:
        images of the same shape and dtype; with ``return_params`` also the
        flags (N, 2) int32 drawn.
    Raises:
        ValueError: unknown mode, bad shapes, an index outside [0, 2**32).
    """
    if mode not in _FLIP_MODES:
        raise ValueError(f"alternating_flip: mode must be one of {sorted(_FLIP_MODES)}, "
                         f"got {mode!r}")
    h, v = _FLIP_MODES[mode]
    if not isinstance(indices, Tensor):
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            raise TypeError(f"alternating_flip: indices must be integers, got {indices.dtype}")
        indices = indices.astype(np.int64)
    return _result(call("alternating_flip", images, indices, state, horizontal=h, vertical=v),
                   return_params)


def affine_transform(images, transform, interpolation="bilinear", fill_mode="constant",
                     fill_value=0.0):
    """``keras.ops.image.affine_transform`` (NHWC): sample each image at the
    points a projective transform maps its pixels to.

    ``transform[i] = (a0, a1, a2, b0, b1, b2, c0, c1)`` maps output pixel
    (x, y) = (column, row) to the input point ((a0 x + a1 y + a2) / k,
    (b0 x + b1 y + b2) / k), k = c0 x + c1 y + 1 (TensorFlow's and Keras 3's
    convention).  Bilinear interpolation reads the four pixels around the
    point, "nearest" the pixel at floor(v + 0.5) on each axis; points outside
    the image read its extension by ``fill_mode`` (:data:`FILL_MODES`,
    "constant": ``fill_value``).  Computed in C (float64 coordinates).  Not
    differentiable.

    Args:
        images: (N, H, W, C) or one (H, W, C) image, uint8 or float32.
        transform: (N, 8) or (8,) floats.
        interpolation: "bilinear" or "nearest".
        fill_mode: "constant", "reflect", "mirror", "wrap" or "nearest".
        fill_value (float): for "constant".
    Returns:
        float32 images of the input's shape.
    Raises:
        ValueError: unknown interpolation or fill_mode, bad shapes.
    """
    interp = _mode(interpolation, {"nearest": 0, "bilinear": 1}, "interpolation",
                   "affine_transform")
    mode = _mode(fill_mode, FILL_MODES, "fill_mode", "affine_transform")
    single = getattr(images, "ndim", np.ndim(images)) == 3
    if single:
        images = np.asarray(images)[None]
    t = _floats(transform, "transform", "affine_transform")
    if not isinstance(t, Tensor) and t.ndim == 1:
        t = t[None]
    out = call("affine_transform", images, t, interpolation=interp, fill_mode=mode,
               fill_value=float(fill_value))
    return Tensor(np.asarray(out)[0]) if single else out


def random_affine(images, state, height_factor=(0.0, 0.0), width_factor=(0.0, 0.0),
                  rotation=(0.0, 0.0), zoom_height=(1.0, 1.0), zoom_width=None,
                  interpolation="bilinear", fill_mode="reflect", fill_value=0.0,
                  return_params=False):
    """A random translation, rotation and zoom per image: the op behind
    ``layers.RandomTranslation``, ``RandomRotation`` and ``RandomZoom``.

    Image ``i`` draws five uniforms u0..u4 from its Philox stream and maps
    output point p to the input point
    ``C + R(angle) diag(zx, zy) (p - C) - (tx, ty)``, C the image centre
    ((W-1)/2, (H-1)/2), with ``ty = H * lerp(height_factor, u0)``,
    ``tx = W * lerp(width_factor, u1)``, ``angle = lerp(rotation, u2)``
    (radians), ``zy = lerp(zoom_height, u3)``, ``zx = lerp(zoom_width, u4)``
    (``zx = zy`` when zoom_width is None); then samples as
    :func:`affine_transform`.  Each piece alone gives Keras 3's matrix.

    Args:
        images: (N, H, W, C) uint8 or float32.
        state: RNG state (advanced by one).
        height_factor, width_factor: (lower, upper) fractions of the side, in [-1, 1].
        rotation: (lower, upper) radians.
        zoom_height, zoom_width: (lower, upper) scale of the sampled area, > 0
            (> 1 zooms out).
        interpolation, fill_mode, fill_value: as :func:`affine_transform`.
    Returns:
        float32 images; with ``return_params`` also the transforms (N, 8) float32.
    Raises:
        ValueError: ranges out of bounds, unknown modes.
    """
    op = "random_affine"
    interp = _mode(interpolation, {"nearest": 0, "bilinear": 1}, "interpolation", op)
    mode = _mode(fill_mode, FILL_MODES, "fill_mode", op)
    hl, hu = _range(height_factor, "height_factor", op)
    wl, wu = _range(width_factor, "width_factor", op)
    rl, ru = _range(rotation, "rotation", op)
    zhl, zhu = _range(zoom_height, "zoom_height", op)
    zwl, zwu = _range(zoom_width if zoom_width is not None else zoom_height, "zoom_width", op)
    out = call(op, images, state, interpolation=interp, fill_mode=mode,
               fill_value=float(fill_value), height_lower=hl, height_upper=hu, width_lower=wl,
               width_upper=wu, rotation_lower=rl, rotation_upper=ru, zoom_height_lower=zhl,
               zoom_height_upper=zhu, zoom_width_lower=zwl, zoom_width_upper=zwu,
               same_zoom=zoom_width is None)
    return _result(out, return_params)


def random_contrast(images, state, factor_range, value_range=(0.0, 255.0),
                    return_params=False):
    """Scale each image's deviation from its per-channel mean by a random
    factor (``keras.layers.RandomContrast``):
    ``clip((x - mean) * f + mean, *value_range)``, ``f ~ U(factor_range)``
    per image, the mean over height and width per channel.

    Args:
        images: (N, H, W, C) uint8 or float32.
        state: RNG state (advanced by one).
        factor_range: (lower, upper), 0 <= lower <= upper.
        value_range: (min, max) of the output.
    Returns:
        float32 images; with ``return_params`` also the factors (N,) float32.
    Raises:
        ValueError: a bad range.
    """
    lo, hi = _range(factor_range, "factor_range", "random_contrast")
    vmin, vmax = _range(value_range, "value_range", "random_contrast")
    out = call("random_contrast", images, state, lower=lo, upper=hi, value_min=vmin,
               value_max=vmax)
    return _result(out, return_params)


def random_crop(images, state, size, padding=0, padding_mode="zero", return_params=False):
    """Pad every image, then crop ``size`` at a uniformly random offset.

    The standard CIFAR augmentation is ``random_crop(x, s, 32, padding=4)``
    (He et al. 2015, section 4.2).

    Args:
        images: (N, H, W, C) uint8 or float32.
        state: RNG state (advanced by one).
        size: crop height and width (int or pair).
        padding: pixels added on each side (int or (pad_y, pad_x)).
        padding_mode: how the padding is filled, :data:`PADDING_MODES`
            (NumPy's names): "zero" (or "constant"), "reflect" (mirror without
            repeating the edge), "symmetric", "edge", "wrap".
    Returns:
        (N, h, w, C) of the input dtype; with ``return_params`` also offsets
        (N, 2) int32 (row, column) of the crop in the padded image, uniform
        over [0, H + 2 pad_y - h] x [0, W + 2 pad_x - w].
    Raises:
        ValueError: crop larger than the padded image, negative padding,
            unknown padding_mode.  TypeError: bad dtype.
    """
    mode = _mode(padding_mode, PADDING_MODES, "padding_mode", "random_crop")
    out = call("random_crop", images, state, size=_pair(size, "size", "random_crop"),
               padding=_pair(padding, "padding", "random_crop"), mode=mode)
    return _result(out, return_params)


def center_crop(images, size):
    """The central ``size`` window of each image, at offset ((H - h) // 2,
    (W - w) // 2).  (N, H, W, C) -> (N, h, w, C), dtype kept.
    Raises ValueError when ``size`` exceeds the image."""
    return call("center_crop", images, size=_pair(size, "size", "center_crop"))


def random_resized_crop(images, state, size, area_factor=(0.08, 1.0),
                        aspect_ratio=(3 / 4, 4 / 3), return_params=False):
    """Inception-style crop: a random box of random area and aspect ratio,
    resized bilinearly to ``size`` (Szegedy et al. 2015, as torchvision's
    RandomResizedCrop samples it: up to 10 attempts of area ~ U(area_factor)
    times the image area and log aspect ratio ~ U(log aspect_ratio), then a
    central crop).

    Args:
        images: (N, H, W, C) uint8 or float32.
        state: RNG state (advanced by one).
        size: output height and width.
        area_factor: (min, max) fraction of the image area, 0 < min <= max <= 1.
        aspect_ratio: (min, max) width / height, 0 < min <= max.
    Returns:
        (N, h, w, C) float32 in the input's units; with ``return_params``
        also boxes (N, 4) int32 (top, left, height, width).
    Raises:
        ValueError: area_factor outside (0, 1] or unordered, bad aspect ratio
            or size.  TypeError: bad dtype.
    """
    a0, a1 = _range(area_factor, "area_factor", "random_resized_crop")
    r0, r1 = _range(aspect_ratio, "aspect_ratio", "random_resized_crop")
    out = call("random_resized_crop", images, state,
               size=_pair(size, "size", "random_resized_crop"),
               area_min=a0, area_max=a1, ratio_min=r0, ratio_max=r1)
    return _result(out, return_params)


def resize_bilinear(images, size):
    """Bilinear resize with half-pixel centres (align_corners=False, no
    antialiasing, as PyTorch's interpolate).  (N, H, W, C) uint8/float32 ->
    (N, h, w, C) float32."""
    return call("resize_bilinear", images, size=_pair(size, "size", "resize_bilinear"))


def random_lighting(images, eigval, eigvec, state, stddev=0.1, return_params=False):
    """PCA colour ("lighting") jitter, Krizhevsky et al. 2012, section 4.1:
    add ``eigvec @ (alpha * eigval)`` to every RGB pixel of an image, with
    alpha ~ N(0, stddev^2) drawn per image and component.

    Args:
        images: (N, H, W, 3) uint8 or float32.
        eigval: (3,) eigenvalues of the RGB covariance, in the images' units
            (see :func:`rgb_pca`; the shift is linear in eigval).
        eigvec: (3, 3), column j the eigenvector of eigval[j].
        state: RNG state (advanced by one).
        stddev: standard deviation of alpha (the paper's 0.1).
    Returns:
        (N, H, W, 3) float32; with ``return_params`` also alpha (N, 3) float32.
    Raises:
        ValueError: not 3 channels, bad eigval/eigvec shapes, stddev < 0.
    """
    out = call("random_lighting", images, _floats(eigval, "eigval", "random_lighting"),
               _floats(eigvec, "eigvec", "random_lighting"), state,
               stddev=float(stddev))
    return _result(out, return_params)


def cutout(images, state, size, fill=0.0, return_params=False):
    """Cutout (DeVries and Taylor 2017): in each image set a ``size`` box
    centred at a uniformly random pixel (rows cy - h//2 .. cy - h//2 + h - 1,
    clipped at the borders) to ``fill``.

    Args:
        images: (N, H, W, C) uint8 or float32.
        state: RNG state (advanced by one).
        size: box height and width (int or pair).
        fill: value written (an integer in [0, 255] for uint8 images).
    Returns:
        images of the input's shape and dtype; with ``return_params`` also
        centres (N, 2) int32.
    """
    out = call("cutout", images, state, size=_pair(size, "size", "cutout"), fill=float(fill))
    return _result(out, return_params)


def mixup(images, labels, state, alpha=0.2, num_classes=None, per_sample=False,
          return_params=False):
    """Mixup (Zhang et al. 2018): mix the batch with a random permutation of
    itself, ``x[i] = lam x[i] + (1 - lam) x[perm[i]]`` and the labels alike,
    lam ~ Beta(alpha, alpha) once per batch (the paper) or per sample.

    Args:
        images: (N, ...) uint8 or float32.
        labels: (N,) or (N, 1) int32/int64/uint8 class indices with ``num_classes``,
            or (N, K) float32 soft labels.
        state: RNG state (advanced by one).
        alpha: Beta parameter, > 0.
        num_classes: K for integer labels.
        per_sample: one lam per example instead of one per batch.
    Returns:
        (images float32 of the input shape, soft labels (N, K) float32 whose
        rows sum to 1 for one-hot input); with ``return_params`` also
        lam (N,) float32 and perm (N,) int32.
    Raises:
        ValueError: alpha <= 0, label shapes, an integer label outside [0, K).
    """
    out = call("mixup", images, labels, state, alpha=float(alpha),
               num_classes=int(num_classes or 0), per_sample=bool(per_sample))
    return out if return_params else out[:2]


def normalize_channels(x, mean, variance, epsilon=1e-7):
    """Per-channel normalisation over the last axis, as
    ``keras.layers.Normalization``: ``(x - mean) / max(sqrt(variance), epsilon)``
    in float32.

    Args:
        x: (..., C) uint8 or float32.
        mean, variance: (C,) float32 (Tensors, Variables or arrays).
        epsilon: floor of the standard deviation (Keras's backend epsilon).
    Returns:
        float32 of x's shape.
    Raises:
        ValueError: mean/variance not of shape (C,).  TypeError: bad dtype of
            x, or mean/variance that are not real numbers (datetime64,
            complex, bool, strings, None).
    """
    return call("normalize_channels", x, _floats(mean, "mean", "normalize_channels"),
                _floats(variance, "variance", "normalize_channels"), epsilon=float(epsilon))


def rgb_pca(images, scale=None, chunk=4096):
    """Eigen-decomposition of the 3x3 covariance of the RGB values of a
    training set, for PCA lighting (Krizhevsky et al. 2012, section 4.1).

    Args:
        images: (N, H, W, 3) uint8 or float array (NumPy or Tensor).
        scale: the values are multiplied by it first; default 1/255 for uint8
            (the [0, 1] scale on which the ImageNet values (0.2175, 0.0188,
            0.0045) are usually quoted) and 1 otherwise.
        chunk: images per accumulation step (bounds memory), a positive int.
    Returns:
        (eigval (3,), eigvec (3, 3)) float64: eigenvalues in descending order,
        column j the unit eigenvector of eigval[j].
    Raises:
        ValueError: not a batch of RGB images with at least one pixel, a
            pixel that is not finite (NaN or infinity; the message gives
            its index), a ``scale`` that is not a finite number, ``chunk``
            not a positive int.
    """
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"rgb_pca: chunk must be a positive int (images per step), got "
                         f"{chunk!r}")
    x = np.asarray(images)
    if x.ndim != 4 or x.shape[-1] != 3 or x.size == 0:
        raise ValueError(f"rgb_pca: expected an (N, H, W, 3) batch with at least one pixel, "
                         f"got shape {x.shape}")
    if scale is None:
        scale = 1 / 255 if x.dtype == np.uint8 else 1.0
    if not np.isfinite(float(scale)):
        raise ValueError(f"rgb_pca: scale must be a finite number, got {scale!r}")
    total, outer, count = np.zeros(3), np.zeros((3, 3)), 0
    for i in range(0, len(x), chunk):
        p = x[i:i + chunk].reshape(-1, 3).astype(np.float64) * scale
        bad = ~np.isfinite(p)
        if bad.any():
            at = np.unravel_index(i * x[0].size + int(np.argmax(bad.ravel())), x.shape)
            raise ValueError(f"rgb_pca: images must be finite, got {x[at]} at index "
                             f"{tuple(int(k) for k in at)}")
        total += p.sum(0)
        outer += p.T @ p
        count += len(p)
    mean = total / count
    cov = outer / count - np.outer(mean, mean)
    eigval, eigvec = np.linalg.eigh(cov)
    order = np.argsort(eigval)[::-1]
    return eigval[order], eigvec[:, order]
