"""``GlobalAveragePooling2D``."""
from .. import ops
from ._args import standardize_data_format
from .input_spec import InputSpec
from .layer import Layer


class GlobalAveragePooling2D(Layer):
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

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = standardize_data_format(data_format, "GlobalAveragePooling2D")
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        y = ops.global_average_pool2d(inputs)
        if self.keepdims:
            y = ops.reshape(y, (-1, 1, 1, ops.shape(y)[1]))
        return y

    def compute_output_shape(self, input_shape):
        n, c = input_shape[0], input_shape[-1]
        return (n, 1, 1, c) if self.keepdims else (n, c)
