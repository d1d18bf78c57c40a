"""``SeparableConv2D``: a depthwise then a pointwise (1x1) convolution."""
from .. import activations, ops, regularizers
from ._args import known_channels, standardize_tuple
from .depthwise_conv2d import DepthwiseConv2D
from .input_spec import InputSpec


class SeparableConv2D(DepthwiseConv2D):
    """Depthwise separable 2D convolution (Chollet 2017, Xception, section
    2; Howard et al. 2017, MobileNets, section 3.1), as
    ``keras.layers.SeparableConv2D``: each input channel convolved with its
    own ``depth_multiplier`` filters (:class:`DepthwiseConv2D`, with the
    strides and padding), then a 1x1 convolution mixing the
    ``C * depth_multiplier`` channels into ``filters``, then bias and
    activation.

    Input float32 ``(N, H, W, C)``; output ``(N, H', W', filters)`` with
    Conv2D's output sizes.  Weights, in Keras's order: ``depthwise_kernel``
    ``(kh, kw, C, depth_multiplier)``, ``pointwise_kernel``
    ``(1, 1, C * depth_multiplier, filters)``, ``bias`` ``(filters,)``.

    Args:
        filters (int): output channels.
        kernel_size: int or (kh, kw).
        strides: int or (sh, sw).
        padding (str): ``"valid"`` or ``"same"``.
        data_format: only None/``"channels_last"``.
        dilation_rate: only 1.
        depth_multiplier (int): depthwise filters per input channel.
        activation: None, a Keras name or a callable.
        use_bias (bool): add a bias of ``filters``.
        depthwise_initializer, pointwise_initializer, bias_initializer:
            Keras names or callables.
        depthwise_regularizer, pointwise_regularizer, bias_regularizer:
            None, a :mod:`pyresnet.regularizers` object or name.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: bad arguments; on call, an input of another rank or
            channel count, or smaller than the kernel ("valid").
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", pointwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None,
                 pointwise_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(kernel_size, strides=strides, padding=padding,
                         depth_multiplier=depth_multiplier, data_format=data_format,
                         dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                         depthwise_initializer=depthwise_initializer,
                         bias_initializer=bias_initializer, **kwargs)
        (self.filters,) = standardize_tuple(filters, 1, "filters", "SeparableConv2D")
        self.pointwise_initializer = pointwise_initializer
        self.depthwise_regularizer = regularizers.get(depthwise_regularizer)
        self.pointwise_regularizer = regularizers.get(pointwise_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)

    def build(self, input_shape):
        channels = known_channels(self, input_shape)
        self.compute_output_shape(input_shape)
        m = self.depth_multiplier
        self.depthwise_kernel = self.add_weight(self.kernel_size + (channels, m),
                                                self.depthwise_initializer,
                                                name="depthwise_kernel",
                                                regularizer=self.depthwise_regularizer)
        self.pointwise_kernel = self.add_weight((1, 1, channels * m, self.filters),
                                                self.pointwise_initializer,
                                                name="pointwise_kernel",
                                                regularizer=self.pointwise_regularizer)
        self.bias = self.add_weight((self.filters,), self.bias_initializer, name="bias",
                                    regularizer=self.bias_regularizer) if self.use_bias else None
        self.input_spec = InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        y = ops.depthwise_conv2d(inputs, self.depthwise_kernel, strides=self.strides,
                                 padding=self.padding)
        y = ops.conv2d(y, self.pointwise_kernel)
        if self.use_bias:
            y = ops.add(y, self.bias)
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        n, h, w, _ = super().compute_output_shape(input_shape)
        return (n, h, w, self.filters)
