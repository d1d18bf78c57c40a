"""What ``GlobalAveragePooling2D`` and ``GlobalMaxPooling2D`` share: their
arguments and output shape."""
from ._args import standardize_data_format
from .input_spec import InputSpec
from .layer import Layer


class GlobalPooling2DBase(Layer):
    """Base of :class:`GlobalAveragePooling2D` and
    :class:`GlobalMaxPooling2D` (see them for the arguments).

    Raises:
        ValueError: a ``data_format`` other than None/``"channels_last"``.
    """

    _layer_name = None  # the class named in argument errors

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = standardize_data_format(data_format, self._layer_name)
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=4)

    def compute_output_shape(self, input_shape):
        n, c = input_shape[0], input_shape[-1]
        return (n, 1, 1, c) if self.keepdims else (n, c)
