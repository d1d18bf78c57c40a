"""``RandomContrast``."""
from ._preprocessing import IMAGES, PreprocessingLayer


class RandomContrast(PreprocessingLayer):
    """Scale each image's contrast by a random factor, as
    ``keras.layers.RandomContrast`` (Keras 3): per image
    ``f ~ U(1 - lower, 1 + upper)`` and, per channel,
    ``y = clip((x - mean) * f + mean, *value_range)`` with the channel's mean
    over height and width.  Identity with ``training=False``.  Runs the
    ``random_contrast`` op (C, Philox draws from ``seed``).

    The factor is read as Keras 3 reads it (``_FACTOR_BOUNDS = (0, 1)``): a
    pair (lower, upper) gives ``[1 - lower, 1 + upper]``, but a single
    number f gives (0, f), i.e. ``f ~ U(1, 1 + f)``: contrast only
    increases.  Pass ``(f, f)`` for the symmetric range.

    Input: (N, H, W, C) or (H, W, C), uint8 or float32; output: float32 of
    the same shape.  Not differentiable (gradients stop here).

    Args:
        factor: a float in [0, 1] or a pair of them.
        value_range: (min, max) the output is clipped to (default (0, 255)).
        seed (int): seed of the draws.
    Raises:
        ValueError: a factor outside [0, 1], a bad value_range.
    """

    def __init__(self, factor, value_range=(0, 255), seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        bad = ValueError(f"RandomContrast: factor must be a number or a pair of numbers in "
                         f"[0, 1], got {factor!r}")
        if isinstance(factor, (tuple, list)):
            if len(factor) != 2 or not all(isinstance(v, (int, float)) for v in factor) \
                    or factor[0] > 1 or factor[1] < 0:
                raise bad
            lower, upper = sorted(float(v) for v in factor)
        elif isinstance(factor, (int, float)) and not isinstance(factor, bool) \
                and 0 <= factor <= 1:
            lower, upper = max(-float(factor), 0.0), float(factor)
        else:
            raise bad
        if not 0 <= lower or not upper <= 1 or lower > 1:
            raise bad
        self.factor = (lower, upper)
        try:
            lo, hi = (float(v) for v in value_range)
        except (TypeError, ValueError):
            raise ValueError(f"RandomContrast: value_range must be (min, max), got "
                             f"{value_range!r}") from None
        if not lo <= hi:
            raise ValueError(f"RandomContrast: value_range must be (min, max) with min <= max, "
                             f"got {value_range!r}")
        self.value_range = (lo, hi)

    def _stages(self, images_shape):
        return [("random_contrast", {"lower": 1.0 - self.factor[0], "upper": 1.0 + self.factor[1],
                                     "value_min": self.value_range[0],
                                     "value_max": self.value_range[1]},
                 [IMAGES, self._seed_generator.state])]

    def get_config(self):
        config = super().get_config()
        config.update(factor=list(self.factor), value_range=list(self.value_range))
        return config
