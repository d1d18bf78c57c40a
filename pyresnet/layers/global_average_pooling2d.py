"""``GlobalAveragePooling2D``."""
from .. import ops
from ._global_pooling2d import GlobalPooling2DBase


class GlobalAveragePooling2D(GlobalPooling2DBase):
    """The mean over the spatial axes, as
    ``keras.layers.GlobalAveragePooling2D``: float32 ``(batch, H, W, C)`` ->
    ``(batch, C)``, or ``(batch, 1, 1, C)`` with ``keepdims=True``.

    Args:
        data_format: only None/``"channels_last"``.
        keepdims (bool): keep the spatial axes as size 1.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: on call, for an input that is not rank 4.
    """

    _layer_name = "GlobalAveragePooling2D"

    def call(self, inputs):
        y = ops.global_average_pool2d(inputs)
        if self.keepdims:
            y = ops.reshape(y, (-1, 1, 1, ops.shape(y)[1]))
        return y
