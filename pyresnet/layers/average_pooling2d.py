"""``AveragePooling2D``."""
from .. import ops
from .pooling2d import Pooling2D


class AveragePooling2D(Pooling2D):
    """The mean over each window, per channel, as
    ``keras.layers.AveragePooling2D`` (see :class:`Pooling2D` for arguments
    and shapes; with ``"same"`` padding the mean is over the positions inside
    the image, as TensorFlow)."""

    _op = staticmethod(ops.average_pool2d)
