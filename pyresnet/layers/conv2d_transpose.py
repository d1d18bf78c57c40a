"""``Conv2DTranspose``: the transposed 2D convolution."""
import numpy as np

from .. import activations, ops, regularizers
from ._args import standardize_data_format, standardize_padding, standardize_tuple
from .input_spec import InputSpec
from .layer import Layer


class Conv2DTranspose(Layer):
    """Transposed convolution (sometimes called deconvolution), as
    ``keras.layers.Conv2DTranspose``: ``activation(conv2d_transpose(inputs,
    kernel) + bias)`` (:func:`pyresnet.ops.conv2d_transpose`).

    Input float32 ``(batch, H, W, C)``; output ``(batch, H', W', filters)``
    with H' = H * sh for ``"same"`` and H * sh + max(kh - sh, 0) for
    ``"valid"``.  ``kernel`` has shape ``(kh, kw, filters, C)`` (Keras's
    layout), ``bias`` ``(filters,)``.

    Args:
        filters (int): output channels.
        kernel_size: int or (kh, kw).
        strides: int or (sh, sw).
        padding (str): ``"valid"`` or ``"same"``.
        output_padding, dilation_rate: only None / 1 (not supported).
        data_format: only None/``"channels_last"``.
        activation: None, a Keras name or a callable.
        use_bias (bool): add a bias.
        kernel_initializer, bias_initializer: Keras names or callables.
        kernel_regularizer, bias_regularizer: see :mod:`pyresnet.regularizers`.
        **kwargs: ``name``, ``trainable``, ``activity_regularizer``, ... of
            :class:`Layer`.
    Raises:
        ValueError: for bad or unsupported arguments; on call, for an input
            that is not rank 4 or whose channels differ from the ones the
            layer was built for.
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", output_padding=None,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(filters, (int, np.integer)) or filters < 1:
            raise ValueError(f"Conv2DTranspose: `filters` must be a positive int, got {filters!r}")
        if output_padding is not None:
            raise ValueError("Conv2DTranspose: output_padding is not supported")
        if standardize_tuple(dilation_rate, 2, "dilation_rate", "Conv2DTranspose") != (1, 1):
            raise ValueError(f"Conv2DTranspose: only dilation_rate=1 is supported, got "
                             f"{dilation_rate!r}")
        self.filters = int(filters)
        self.kernel_size = standardize_tuple(kernel_size, 2, "kernel_size", "Conv2DTranspose")
        self.strides = standardize_tuple(strides, 2, "strides", "Conv2DTranspose")
        self.padding = standardize_padding(padding, "Conv2DTranspose")
        self.data_format = standardize_data_format(data_format, "Conv2DTranspose")
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.input_spec = InputSpec(ndim=4)

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(f'Layer "{self.name}": the channel axis (last) of the input must be '
                             f"known, got input shape {input_shape}")
        self.kernel = self.add_weight(self.kernel_size + (self.filters, channels),
                                      self.kernel_initializer, name="kernel",
                                      regularizer=self.kernel_regularizer)
        self.bias = self.add_weight((self.filters,), self.bias_initializer, name="bias",
                                    regularizer=self.bias_regularizer) if self.use_bias else None
        self.input_spec = InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        y = ops.conv2d_transpose(inputs, self._compute_kernel(self.kernel), strides=self.strides,
                                 padding=self.padding)
        if self.use_bias:
            y = ops.add(y, self.bias)
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        n, h, w = input_shape[:3]
        same = self.padding == "same"
        size = [None if d is None else ops.conv._transposed_length(d, k, s, same)
                for d, k, s in zip((h, w), self.kernel_size, self.strides)]
        return (n, size[0], size[1], self.filters)
