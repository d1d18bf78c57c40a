"""``MaxPooling2D``."""
from .. import ops
from .pooling2d import Pooling2D


class MaxPooling2D(Pooling2D):
    """The maximum over each window, per channel, as
    ``keras.layers.MaxPooling2D`` (see :class:`Pooling2D` for arguments and
    shapes; ``"same"`` padding never selects a padded position; a NaN in a
    window gives NaN, as :func:`pyresnet.ops.max_pool2d`)."""

    _op = staticmethod(ops.max_pool2d)
