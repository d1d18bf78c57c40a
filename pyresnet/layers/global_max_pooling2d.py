"""``GlobalMaxPooling2D``."""
from .. import ops
from ._global_pooling2d import GlobalPooling2DBase


class GlobalMaxPooling2D(GlobalPooling2DBase):
    """The maximum over the spatial axes, as ``keras.layers.GlobalMaxPooling2D``:
    float32 ``(batch, H, W, C)`` -> ``(batch, C)``, or ``(batch, 1, 1, C)``
    with ``keepdims=True``.  Computed as one ``max_pool2d`` whose window is
    the whole image (NaN when a channel holds one; the gradient goes to the
    channel's first NaN, else to its first maximum).

    Args:
        data_format: only None/``"channels_last"``.
        keepdims (bool): keep the spatial axes as size 1.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: on call, for an input that is not rank 4 or whose height
            or width is unknown.
    """

    _layer_name = "GlobalMaxPooling2D"

    def call(self, inputs):
        h, w = inputs.shape[1], inputs.shape[2]
        if h is None or w is None:
            raise ValueError(f'Layer "{self.name}": the height and width of the input must be '
                             f"known, got input shape {tuple(inputs.shape)}")
        y = ops.max_pool2d(inputs, pool_size=(h, w), strides=(h, w))
        if not self.keepdims:
            y = ops.reshape(y, (-1, ops.shape(y)[3]))
        return y
