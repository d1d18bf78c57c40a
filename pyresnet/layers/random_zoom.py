"""``RandomZoom``."""
from ._affine import AffineLayer, factor_range


class RandomZoom(AffineLayer):
    """Zoom each image in or out about its centre by a random factor, as
    ``keras.layers.RandomZoom`` (Keras 3): the sampled area is scaled by
    ``1 + U(height_factor)`` vertically and ``1 + U(width_factor)``
    horizontally (positive: zoom out, negative: zoom in); with
    ``width_factor=None`` the same draw serves both axes (aspect ratio kept).
    The area brought in is filled by ``fill_mode``.  Identity with
    ``training=False``.  Runs the ``random_affine`` op.

    Input: (N, H, W, C) or (H, W, C), uint8 or float32; output: float32 of
    the same shape.  Not differentiable (gradients stop here).

    Args:
        height_factor: a float f (range (-f, f)) or a pair (lower, upper) in (-1, 1].
        width_factor: likewise, or None (Keras's default).
        fill_mode: "reflect" (default), "wrap", "constant" or "nearest".
        interpolation: "bilinear" (default) or "nearest".
        seed (int): seed of the draws.
        fill_value (float): the value of "constant" filling.
        data_format: None or "channels_last" only.
    Raises:
        ValueError: a factor out of range; NotImplementedError: unknown
            fill_mode or interpolation.
    """

    def __init__(self, height_factor, width_factor=None, fill_mode="reflect",
                 interpolation="bilinear", seed=None, fill_value=0.0, data_format=None,
                 **kwargs):
        super().__init__(fill_mode, interpolation, fill_value, seed, data_format, **kwargs)
        self.height_factor, self.width_factor = height_factor, width_factor
        self.height_lower, self.height_upper = factor_range("RandomZoom", height_factor,
                                                            "height_factor", low_open=True)
        if width_factor is not None:
            self.width_lower, self.width_upper = factor_range("RandomZoom", width_factor,
                                                              "width_factor", low_open=True)

    def _ranges(self):
        ranges = {"zoom_height_lower": 1.0 + self.height_lower,
                  "zoom_height_upper": 1.0 + self.height_upper,
                  "same_zoom": self.width_factor is None}
        if self.width_factor is not None:
            ranges.update(zoom_width_lower=1.0 + self.width_lower,
                          zoom_width_upper=1.0 + self.width_upper)
        return ranges
