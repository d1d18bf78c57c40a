"""The shared base of ``MaxPooling2D`` and ``AveragePooling2D``."""
from ._args import pooled_shape, standardize_data_format, standardize_padding, standardize_tuple
from .input_spec import InputSpec
from .layer import Layer


class Pooling2D(Layer):
    """A 2D pooling window over NHWC images (subclasses pick the op).

    Input float32 ``(batch, H, W, C)``; output ``(batch, H', W', C)`` with
    the conv output-size rule (``"valid"``: floor((H - ph) / sh) + 1;
    ``"same"``: ceil(H / sh)).

    Args:
        pool_size: int or (ph, pw).
        strides: int, (sh, sw) or None (= pool_size).
        padding (str): ``"valid"`` or ``"same"``.
        data_format: only None/``"channels_last"``.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: for bad arguments; on call, for an input that is not rank
            4 or smaller than the window (``"valid"``).
    """

    _op = None  # the pyresnet op: (x, pool_size, strides, padding) -> Tensor

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None,
                 **kwargs):
        super().__init__(**kwargs)
        name = type(self).__name__
        self.pool_size = standardize_tuple(pool_size, 2, "pool_size", name)
        self.strides = self.pool_size if strides is None else \
            standardize_tuple(strides, 2, "strides", name)
        self.padding = standardize_padding(padding, name)
        self.data_format = standardize_data_format(data_format, name)
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        return type(self)._op(inputs, pool_size=self.pool_size, strides=self.strides,
                              padding=self.padding)

    def compute_output_shape(self, input_shape):
        return pooled_shape(self, input_shape, self.pool_size, self.strides, self.padding,
                            input_shape[-1])
