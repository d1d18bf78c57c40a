"""``Conv2D``: 2D convolution over NHWC images."""
from .. import ops
from ._args import pooled_shape
from ._base_conv import BaseConv


class Conv2D(BaseConv):
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
        super().__init__(filters, kernel_size, strides, padding, data_format,
                         activation=activation, use_bias=use_bias,
                         kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                         groups=groups, **kwargs)

    def _kernel_shape(self, channels):
        return self.kernel_size + (channels // self.groups, self.filters)

    def _convolve(self, inputs, kernel):
        return ops.conv2d(inputs, kernel, strides=self.strides, padding=self.padding,
                          groups=self.groups)

    def compute_output_shape(self, input_shape):
        return pooled_shape(self, input_shape, self.kernel_size, self.strides, self.padding,
                            self.filters)
