"""``Flatten``."""
import numpy as np

from .. import ops
from ._args import standardize_data_format
from .input_spec import InputSpec
from .layer import Layer


class Flatten(Layer):
    """Flatten every axis but the batch, as ``keras.layers.Flatten``:
    ``(batch, d1, ..., dk)`` -> ``(batch, d1 * ... * dk)`` (row-major, so an
    NHWC image becomes H*W*C features, channel fastest); a rank-1 input
    becomes ``(batch, 1)``.

    Args:
        data_format: only None/``"channels_last"``.
        **kwargs: ``name``, ... of :class:`Layer`.
    """

    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.data_format = standardize_data_format(data_format, "Flatten")
        self.input_spec = InputSpec(min_ndim=1)

    def call(self, inputs):
        return ops.flatten(inputs)

    def compute_output_shape(self, input_shape):
        rest = input_shape[1:]
        size = None if any(d is None for d in rest) else int(np.prod(rest, dtype=np.int64))
        return (input_shape[0], size)
