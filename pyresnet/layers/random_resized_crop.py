"""``RandomResizedCrop`` (Inception-style crop)."""
import math

from .. import ops
from ._preprocessing import IMAGES, PreprocessingLayer


def _range(value, name, upper):
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"RandomResizedCrop: {name} must be a pair (min, max), got "
                         f"{value!r}") from None
    if not (0 < lo <= hi <= upper):
        raise ValueError(f"RandomResizedCrop: {name} must satisfy 0 < min <= max"
                         f"{' <= 1' if upper == 1 else ''}, got {value!r}")
    return lo, hi


class RandomResizedCrop(PreprocessingLayer):
    """Inception-style random resized crop (Szegedy et al. 2015, "Going
    deeper with convolutions", section 6), with keras_cv's argument names:
    per image a box of area ``crop_area_factor`` x the image area and aspect
    ratio (width / height) drawn log-uniformly from ``aspect_ratio_factor``,
    up to 10 attempts then a central crop (torchvision's RandomResizedCrop
    sampling), resized bilinearly to ``target_size``.  Runs the
    ``random_resized_crop`` op.

    With ``training=False`` the whole image is resized to ``target_size``.

    Input: (N, H, W, C) uint8 or float32; output: (N, h, w, C) float32 in the
    input's units.

    Args:
        target_size: (height, width) of the output.
        crop_area_factor: (min, max), 0 < min <= max <= 1.
        aspect_ratio_factor: (min, max), 0 < min <= max.
        interpolation: only "bilinear" (half-pixel centres, no antialiasing).
        seed (int): seed of the draws (None: from Python's ``random``).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: for any argument outside these ranges.
    """

    def __init__(self, target_size, crop_area_factor=(0.08, 1.0),
                 aspect_ratio_factor=(3 / 4, 4 / 3), interpolation="bilinear", seed=None,
                 **kwargs):
        if interpolation != "bilinear":
            raise ValueError(f"RandomResizedCrop: only interpolation='bilinear' is supported, "
                             f"got {interpolation!r}")
        super().__init__(seed=seed, **kwargs)
        try:
            h, w = (int(v) for v in target_size)
        except (TypeError, ValueError):
            raise ValueError(f"RandomResizedCrop: target_size must be (height, width), got "
                             f"{target_size!r}") from None
        if h < 1 or w < 1:
            raise ValueError(f"RandomResizedCrop: target_size must be positive, got "
                             f"{target_size!r}")
        self.target_size = (h, w)
        self.crop_area_factor = _range(crop_area_factor, "crop_area_factor", 1)
        self.aspect_ratio_factor = _range(aspect_ratio_factor, "aspect_ratio_factor", math.inf)
        self.interpolation = interpolation

    def _stages(self, images_shape):
        (a0, a1), (r0, r1) = self.crop_area_factor, self.aspect_ratio_factor
        return [("random_resized_crop", {"size": self.target_size, "area_min": a0, "area_max": a1,
                                         "ratio_min": r0, "ratio_max": r1},
                 [IMAGES, self._seed_generator.state])]

    def _inference(self, images):
        return ops.resize_bilinear(images, self.target_size)

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + self.target_size + (input_shape[3],)
