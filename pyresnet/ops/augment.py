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

__all__ = ["rng_state", "random_flip", "random_crop", "center_crop", "random_resized_crop",
           "resize_bilinear", "random_lighting", "cutout", "mixup", "normalize_channels",
           "rgb_pca"]


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


def _pair(value, name, op):
    """An int or a pair of ints -> (a, b)."""
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    try:
        a, b = value
        return int(a), int(b)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}") from None


def _range(value, name, op):
    """A pair of floats (lo, hi)."""
    try:
        lo, hi = value
        return float(lo), float(hi)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {name} must be a pair (min, max), got {value!r}") from None


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


def random_crop(images, state, size, padding=0, padding_mode="zero", return_params=False):
    """Pad every image, then crop ``size`` at a uniformly random offset.

    The standard CIFAR augmentation is ``random_crop(x, s, 32, padding=4)``
    (He et al. 2015, section 4.2).

    Args:
        images: (N, H, W, C) uint8 or float32.
        state: RNG state (advanced by one).
        size: crop height and width (int or pair).
        padding: pixels added on each side (int or (pad_y, pad_x)).
        padding_mode: "zero", or "reflect" (mirror without repeating the
            edge, numpy.pad's "reflect"; padding must be smaller than the image).
    Returns:
        (N, h, w, C) of the input dtype; with ``return_params`` also offsets
        (N, 2) int32 (row, column) of the crop in the padded image, uniform
        over [0, H + 2 pad_y - h] x [0, W + 2 pad_x - w].
    Raises:
        ValueError: crop larger than the padded image, negative padding,
            unknown padding_mode.  TypeError: bad dtype.
    """
    if padding_mode not in ("zero", "reflect"):
        raise ValueError(f"random_crop: padding_mode must be 'zero' or 'reflect', "
                         f"got {padding_mode!r}")
    out = call("random_crop", images, state, size=_pair(size, "size", "random_crop"),
               padding=_pair(padding, "padding", "random_crop"),
               reflect=padding_mode == "reflect")
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
