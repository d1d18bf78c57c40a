"""``Conv2D``: 2D convolution over NHWC images."""
import numpy as np

from .. import activations, ops, regularizers
from ._args import (pooled_shape, standardize_data_format, standardize_padding,
                    standardize_tuple)
from .input_spec import InputSpec
from .layer import Layer


class Conv2D(Layer):
    """2D convolution (cross-correlation, as every framework), as
    ``keras.layers.Conv2D``: ``activation(conv2d(inputs, kernel) + bias)``.

    Input float32 ``(batch, H, W, C)``; output ``(batch, H', W', filters)``
    with H' = floor((H - kh) / sh) + 1 for ``"valid"`` and ceil(H / sh) for
    ``"same"`` (TensorFlow's padding split: the extra pixel at the end).
    ``kernel`` is HWIO ``(kh, kw, C, filters)``, ``bias`` ``(filters,)``.

    Args:
        filters (int): output channels.
        kernel_size: int or (kh, kw).
        strides: int or (sh, sw).
        padding (str): ``"valid"`` or ``"same"``.
        data_format: only None/``"channels_last"``.
        activation: None, a Keras name or a callable.
        groups (int): grouped convolution (Xie et al. 2017, ResNeXt): input
            and output channels split into ``groups`` parts, the kernel
            ``(kh, kw, C / groups, filters)`` (Keras's); both counts must
            divide.
        use_bias (bool): add a bias.
        kernel_initializer, bias_initializer: Keras names or callables.
        kernel_regularizer, bias_regularizer: None, a
            :mod:`pyresnet.regularizers` object or name: the weight's
            penalty joins ``layer.losses`` (and so the loss ``fit``
            minimises); ``activity_regularizer=`` (a :class:`Layer`
            argument) penalises the output.
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for bad arguments; on call, for an input that is not
            rank 4 or whose channel count differs from the one the layer was
            built for, or that is smaller than the kernel (``"valid"``).
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None,
                 groups=1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(filters, (int, np.integer)) or filters < 1:
            raise ValueError(f"Conv2D: `filters` must be a positive int, got {filters!r}")
        self.filters = int(filters)
        if not isinstance(groups, (int, np.integer)) or groups < 1 or self.filters % groups:
            raise ValueError(f"Conv2D: `groups` must be a positive int dividing filters="
                             f"{self.filters}, got {groups!r}")
        self.groups = int(groups)
        self.kernel_size = standardize_tuple(kernel_size, 2, "kernel_size", "Conv2D")
        self.strides = standardize_tuple(strides, 2, "strides", "Conv2D")
        self.padding = standardize_padding(padding, "Conv2D")
        self.data_format = standardize_data_format(data_format, "Conv2D")
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
        if channels % self.groups:
            raise ValueError(f'Layer "{self.name}": groups={self.groups} does not divide the '
                             f"{channels} input channels (input shape {input_shape})")
        self.compute_output_shape(input_shape)  # the kernel must fit the image
        self.kernel = self.add_weight(self.kernel_size + (channels // self.groups, self.filters),
                                      self.kernel_initializer, name="kernel",
                                      regularizer=self.kernel_regularizer)
        self.bias = self.add_weight((self.filters,), self.bias_initializer, name="bias",
                                    regularizer=self.bias_regularizer) \
            if self.use_bias else None
        self.input_spec = InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        y = ops.conv2d(inputs, self._compute_kernel(self.kernel), strides=self.strides,
                       padding=self.padding, groups=self.groups)
        if self.use_bias:
            y = ops.add(y, self.bias)
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        return pooled_shape(self, input_shape, self.kernel_size, self.strides, self.padding,
                            self.filters)
