"""``RandomRotation``."""
import math

from ._affine import AffineLayer, factor_range


class RandomRotation(AffineLayer):
    """Rotate each image about its centre by a random angle, as
    ``keras.layers.RandomRotation`` (Keras 3): ``angle = 360 * U(factor)``
    degrees per image (positive: counter-clockwise on screen, Keras's sign),
    about the centre ((W-1)/2, (H-1)/2); corners are filled by ``fill_mode``.
    Identity with ``training=False``.  Runs the ``random_affine`` op.

    Input: (N, H, W, C) or (H, W, C), uint8 or float32; output: float32 of
    the same shape.  Not differentiable (gradients stop here).

    Args:
        factor: a float f (range (-f, f)) or a pair (lower, upper), fractions
            of a full turn in [-1, 1] (0.1: up to 36 degrees either way).
        fill_mode: "reflect" (default), "wrap", "constant" or "nearest".
        interpolation: "bilinear" (default) or "nearest".
        seed (int): seed of the draws.
        fill_value (float): the value of "constant" filling.
        data_format: None or "channels_last" only.
    Raises:
        ValueError: a factor out of range; NotImplementedError: unknown
            fill_mode or interpolation.
    """

    def __init__(self, factor, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, data_format=None, **kwargs):
        super().__init__(fill_mode, interpolation, fill_value, seed, data_format, **kwargs)
        self.factor = factor_range("RandomRotation", factor, "factor")

    def _ranges(self):
        turn = 2.0 * math.pi
        return {"rotation_lower": self.factor[0] * turn, "rotation_upper": self.factor[1] * turn}

    def get_config(self):
        config = super().get_config()
        config["factor"] = list(self.factor)
        return config
