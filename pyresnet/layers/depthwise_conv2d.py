"""``DepthwiseConv2D``."""
import numpy as np

from .. import activations, ops
from ._args import (known_channels, pooled_shape, standardize_data_format, standardize_padding,
                    standardize_tuple)
from .input_spec import InputSpec
from .layer import Layer


class DepthwiseConv2D(Layer):
    """Depthwise 2D convolution (Howard et al. 2017, MobileNets, section
    3.1), as ``keras.layers.DepthwiseConv2D``: each input channel c is
    convolved with its own ``depth_multiplier`` filters (output channel
    ``c * depth_multiplier + m``), then bias and activation.

    Input float32 (N, H, W, C); output (N, H', W', C * depth_multiplier)
    with Conv2D's output sizes.  ``kernel`` is (kh, kw, C, depth_multiplier)
    as Keras stores it; it runs as the grouped ``conv2d`` op with groups = C.

    Args:
        kernel_size: int or (kh, kw).
        strides: int or (sh, sw).
        padding (str): ``"valid"`` or ``"same"``.
        depth_multiplier (int): filters per input channel.
        data_format: only None/``"channels_last"``.
        dilation_rate: only 1.
        activation: None, a Keras name or a callable.
        use_bias (bool): add a bias of C * depth_multiplier.
        depthwise_initializer, bias_initializer: Keras names or callables.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: bad arguments; on call, an input of another rank or
            channel count, or smaller than the kernel ("valid").
    """

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = standardize_tuple(kernel_size, 2, "kernel_size", "DepthwiseConv2D")
        self.strides = standardize_tuple(strides, 2, "strides", "DepthwiseConv2D")
        self.padding = standardize_padding(padding, "DepthwiseConv2D")
        if not isinstance(depth_multiplier, (int, np.integer)) or depth_multiplier < 1:
            raise ValueError(f"DepthwiseConv2D: depth_multiplier must be a positive int, got "
                             f"{depth_multiplier!r}")
        self.depth_multiplier = int(depth_multiplier)
        self.data_format = standardize_data_format(data_format, "DepthwiseConv2D")
        if standardize_tuple(dilation_rate, 2, "dilation_rate", "DepthwiseConv2D") != (1, 1):
            raise ValueError(f"DepthwiseConv2D: only dilation_rate 1 is supported, got "
                             f"{dilation_rate!r}")
        self.dilation_rate = (1, 1)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.depthwise_initializer = depthwise_initializer
        self.bias_initializer = bias_initializer
        self.input_spec = InputSpec(ndim=4)

    def build(self, input_shape):
        channels = known_channels(self, input_shape)
        self.compute_output_shape(input_shape)
        self.kernel = self.add_weight(self.kernel_size + (channels, self.depth_multiplier),
                                      self.depthwise_initializer, name="kernel")
        self.bias = self.add_weight((channels * self.depth_multiplier,), self.bias_initializer,
                                    name="bias") if self.use_bias else None
        self.input_spec = InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        y = ops.depthwise_conv2d(inputs, self.kernel, strides=self.strides, padding=self.padding)
        if self.use_bias:
            y = ops.add(y, self.bias)
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        c = input_shape[-1]
        return pooled_shape(self, input_shape, self.kernel_size, self.strides, self.padding,
                            None if c is None else c * self.depth_multiplier)
