"""``Conv2DTranspose``: the transposed 2D convolution."""
from .. import ops
from ._base_conv import BaseConv


class Conv2DTranspose(BaseConv):
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
        if output_padding is not None:
            raise ValueError("Conv2DTranspose: output_padding is not supported")
        super().__init__(filters, kernel_size, strides, padding, data_format, dilation_rate,
                         activation, use_bias, kernel_initializer, bias_initializer,
                         kernel_regularizer, bias_regularizer, **kwargs)

    def _kernel_shape(self, channels):
        return self.kernel_size + (self.filters, channels)

    def _convolve(self, inputs, kernel):
        return ops.conv2d_transpose(inputs, kernel, strides=self.strides, padding=self.padding)

    def compute_output_shape(self, input_shape):
        n, h, w = input_shape[:3]
        same = self.padding == "same"
        size = [None if d is None else ops.conv._transposed_length(d, k, s, same)
                for d, k, s in zip((h, w), self.kernel_size, self.strides)]
        return (n, size[0], size[1], self.filters)
