"""``Rescaling``: ``x * scale + offset``."""
import numpy as np

from .. import ops
from .layer import Layer


class Rescaling(Layer):
    """Multiply by ``scale`` and add ``offset``, as ``keras.layers.Rescaling``
    (e.g. ``Rescaling(1 / 255)`` maps uint8 pixel values 0..255 to [0, 1],
    ``Rescaling(1 / 127.5, offset=-1)`` to [-1, 1]).  Any input shape; the
    output is float32 of the same shape (integer inputs are cast first).

    Args:
        scale (float or per-channel sequence): the factor; a sequence is
            broadcast along the last (channel) axis.
        offset (float or per-channel sequence): added after scaling.
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for a non-finite scale or offset.
    """

    def __init__(self, scale, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("scale", scale), ("offset", offset)):
            array = np.asarray(value, np.float64)
            if array.ndim > 1 or not np.all(np.isfinite(array)):
                raise ValueError(f"Rescaling: `{name}` must be a finite float or a sequence of "
                                 f"them, got {value!r}")
        self.scale, self.offset = scale, offset

    def call(self, inputs):
        x = ops.cast(inputs, "float32")
        x = ops.multiply(x, np.asarray(self.scale, np.float32))
        return ops.add(x, np.asarray(self.offset, np.float32))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
