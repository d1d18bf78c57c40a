"""``RandomTranslation``."""
from ._affine import AffineLayer, factor_range


class RandomTranslation(AffineLayer):
    """Shift each image by a random fraction of its height and width, as
    ``keras.layers.RandomTranslation`` (Keras 3): the vertical shift is
    ``height * U(height_factor)`` pixels, the horizontal one ``width *
    U(width_factor)`` (positive: down and right), drawn per image; the
    uncovered area is filled by ``fill_mode``.  Identity with
    ``training=False``.  Runs the ``random_affine`` op (C, Philox draws from
    ``seed``).

    Input: (N, H, W, C) or (H, W, C), uint8 or float32; output: float32 of
    the same shape.  Not differentiable: a gradient stops here (augmentation
    sits in front of the model; Keras has none either).

    Args:
        height_factor: a float f (range (-f, f)) or a pair (lower, upper),
            fractions of the height in [-1, 1].
        width_factor: likewise for the width.
        fill_mode: "reflect" (d c b a | a b c d | d c b a, the default),
            "wrap", "constant" or "nearest".
        interpolation: "bilinear" (default) or "nearest".
        seed (int): seed of the draws (None: from Python's ``random``).
        fill_value (float): the value of "constant" filling.
        data_format: None or "channels_last" only.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: a factor out of range; NotImplementedError: an unknown
            fill_mode or interpolation (as Keras).
    """

    def __init__(self, height_factor, width_factor, fill_mode="reflect",
                 interpolation="bilinear", seed=None, fill_value=0.0, data_format=None,
                 **kwargs):
        super().__init__(fill_mode, interpolation, fill_value, seed, data_format, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self.height_lower, self.height_upper = factor_range("RandomTranslation", height_factor,
                                                            "height_factor")
        self.width_lower, self.width_upper = factor_range("RandomTranslation", width_factor,
                                                          "width_factor")

    def _ranges(self):
        return {"height_lower": self.height_lower, "height_upper": self.height_upper,
                "width_lower": self.width_lower, "width_upper": self.width_upper}
