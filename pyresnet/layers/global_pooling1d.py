"""``GlobalAveragePooling1D`` and ``GlobalMaxPooling1D``: NWC sequences."""
from .. import ops
from ._args import standardize_data_format
from .input_spec import InputSpec
from .layer import Layer


class _GlobalPooling1D(Layer):
    _reduce = None  # ops.mean or ops.max

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = standardize_data_format(data_format, type(self).__name__)
        self.keepdims = bool(keepdims)
        self.input_spec = InputSpec(ndim=3)

    def call(self, inputs):
        return type(self)._reduce(inputs, axis=1, keepdims=self.keepdims)

    def compute_output_shape(self, input_shape):
        n, c = input_shape[0], input_shape[-1]
        return (n, 1, c) if self.keepdims else (n, c)


class GlobalAveragePooling1D(_GlobalPooling1D):
    """The mean over the steps, as ``keras.layers.GlobalAveragePooling1D``:
    float32 ``(batch, W, C)`` -> ``(batch, C)``, or ``(batch, 1, C)`` with
    ``keepdims=True``.

    Args:
        data_format: only None/``"channels_last"``.
        keepdims (bool): keep the steps axis as size 1.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: on call, for an input that is not rank 3.
    """

    _reduce = staticmethod(ops.mean)


class GlobalMaxPooling1D(_GlobalPooling1D):
    """The maximum over the steps, as ``keras.layers.GlobalMaxPooling1D``:
    float32 ``(batch, W, C)`` -> ``(batch, C)``, or ``(batch, 1, C)`` with
    ``keepdims=True`` (NaN where a channel holds one; the gradient is shared
    among tied maxima, as :func:`pyresnet.ops.max`).

    Args:
        data_format: only None/``"channels_last"``.
        keepdims (bool): keep the steps axis as size 1.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: on call, for an input that is not rank 3.
    """

    _reduce = staticmethod(ops.max)
