"""``LeakyReLU``."""
from .. import ops
from .layer import Layer


class LeakyReLU(Layer):
    """``x`` for ``x >= 0`` and ``negative_slope * x`` below, as
    ``keras.layers.LeakyReLU`` (Maas et al. 2013, "Rectifier Nonlinearities
    Improve Neural Network Acoustic Models"), computed as
    ``relu(x) - negative_slope * relu(-x)``.  Float32 input of any shape;
    output of the same shape.

    Args:
        negative_slope (float): >= 0; Keras 3's default 0.3.
        alpha (float): Keras 2's name for ``negative_slope`` (the guides
            still use it).
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for a negative or NaN slope, or both names given.
    """

    def __init__(self, negative_slope=0.3, alpha=None, **kwargs):
        super().__init__(**kwargs)
        if alpha is not None:
            if negative_slope != 0.3:
                raise ValueError("LeakyReLU: give `negative_slope` or its old name `alpha`, not "
                                 "both")
            negative_slope = alpha
        negative_slope = float(negative_slope)
        if not negative_slope >= 0.0:
            raise ValueError(f"LeakyReLU: `negative_slope` must be >= 0, got {negative_slope!r}")
        self.negative_slope = negative_slope

    def call(self, inputs):
        if self.negative_slope == 0.0:
            return ops.relu(inputs)
        return ops.subtract(ops.relu(inputs),
                            ops.scale(ops.relu(ops.negative(inputs)), self.negative_slope))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.pop("alpha", None)
        config["negative_slope"] = self.negative_slope
        return config
