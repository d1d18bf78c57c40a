"""``Conv1D``: 1D convolution over NWC sequences (as Keras's channels_last)."""
from .. import ops
from ._args import conv_output_length, standardize_tuple
from ._base_conv import BaseConv
from .input_spec import InputSpec


class Conv1D(BaseConv):
    """1D convolution (cross-correlation), as ``keras.layers.Conv1D``:
    ``activation(conv1d(inputs, kernel) + bias)``.

    Input float32 ``(batch, W, C)`` (channels last); output
    ``(batch, W', filters)`` with W' = floor((W - k) / s) + 1 for
    ``"valid"`` and ceil(W / s) for ``"same"`` and ``"causal"``
    (``"causal"``: k - 1 zeros on the left only, so output t never sees
    inputs after t; van den Oord et al. 2016, WaveNet, section 2.1).
    ``kernel`` is ``(k, C / groups, filters)`` as Keras stores it, ``bias``
    ``(filters,)``.  It runs as the ``conv2d`` op on the ``(batch, 1, W, C)``
    view with a ``(1, k, C / groups, filters)`` kernel (the same sums), so
    its gradients are conv2d's.

    Args:
        filters (int): output channels.
        kernel_size: int or (k,).
        strides: int or (s,).
        padding (str): ``"valid"``, ``"same"`` or ``"causal"``.
        data_format: only None/``"channels_last"``.
        dilation_rate: only 1.
        groups (int): grouped convolution, as :class:`Conv2D`.
        activation, use_bias, kernel_initializer, bias_initializer,
        kernel_regularizer, bias_regularizer: as :class:`Conv2D`.
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for bad arguments; on call, for an input that is not
            rank 3, whose channel count differs from the one the layer was
            built for, or shorter than the kernel (``"valid"``).
    """

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None,
                 dilation_rate=1, groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, **kwargs):
        (k,) = standardize_tuple(kernel_size, 1, "kernel_size", "Conv1D")
        (s,) = standardize_tuple(strides, 1, "strides", "Conv1D")
        (d,) = standardize_tuple(dilation_rate, 1, "dilation_rate", "Conv1D")
        causal = str(padding).lower() == "causal"
        super().__init__(filters, (1, k), (1, s), "valid" if causal else padding, data_format,
                         dilation_rate=(1, d), activation=activation, use_bias=use_bias,
                         kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                         kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                         groups=groups, **kwargs)
        self.kernel_size, self.strides, self.dilation_rate = (k,), (s,), (d,)
        if causal:
            self.padding = "causal"
        self.input_spec = InputSpec(ndim=3)

    def build(self, input_shape):
        super().build(input_shape)
        self.input_spec = InputSpec(ndim=3, axes={-1: input_shape[-1]})

    def _kernel_shape(self, channels):
        return self.kernel_size + (channels // self.groups, self.filters)

    def _convolve(self, inputs, kernel):
        (k,) = self.kernel_size
        x = ops.expand_dims(inputs, 1)  # (N, 1, W, C)
        padding = self.padding
        if padding == "causal":
            x = ops.pad(x, ((0, 0), (0, 0), (k - 1, 0), (0, 0)))
            padding = "valid"
        y = ops.conv2d(x, ops.expand_dims(kernel, 0), strides=(1,) + self.strides,
                       padding=padding, groups=self.groups)
        return ops.squeeze(y, 1)

    def compute_output_shape(self, input_shape):
        n, w = input_shape[0], input_shape[1]
        (k,), (s,) = self.kernel_size, self.strides
        out = conv_output_length(w, k, s, "same" if self.padding == "causal" else self.padding)
        if out is not None and out <= 0:
            raise ValueError(f'Layer "{self.name}": kernel size {k} with padding '
                             f'"{self.padding}" does not fit input shape {tuple(input_shape)}')
        return (n, out, self.filters)
