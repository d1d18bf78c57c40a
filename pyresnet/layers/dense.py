"""``Dense``: a fully connected layer."""
import numpy as np

from .. import ops
from ._args import add_kernel_and_bias, set_kernel_bias_args
from .input_spec import InputSpec
from .layer import Layer


class Dense(Layer):
    """``activation(inputs @ kernel + bias)``, as ``keras.layers.Dense``.

    The input is float32 of shape ``(batch, ..., input_dim)``; the output is
    ``(batch, ..., units)`` (inputs of rank > 2 are applied on the last
    axis).  ``kernel`` has shape ``(input_dim, units)``, ``bias`` ``(units,)``.

    Args:
        units (int): output size.
        activation: None (linear), a Keras name (``"relu"``, ``"softmax"``)
            or a callable.
        use_bias (bool): add a bias.
        kernel_initializer, bias_initializer: Keras names or callables.
        kernel_regularizer, bias_regularizer: None, a
            :mod:`pyresnet.regularizers` object or name: the weight's
            penalty joins ``layer.losses`` (and so the loss ``fit``
            minimises); ``activity_regularizer=`` (a :class:`Layer`
            argument) penalises the output.
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for units < 1; on call, for an input whose last axis is
            not the ``input_dim`` the layer was built for.
    """

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(units, (int, np.integer)) or units < 1:
            raise ValueError(f"Dense: `units` must be a positive int, got {units!r}")
        self.units = int(units)
        set_kernel_bias_args(self, activation, use_bias, kernel_initializer, bias_initializer,
                             kernel_regularizer, bias_regularizer)
        self.input_spec = InputSpec(min_ndim=2)

    def build(self, input_shape):
        input_dim = input_shape[-1]
        if input_dim is None:
            raise ValueError(f'Layer "{self.name}": the last axis of the input must be known, '
                             f"got input shape {input_shape}")
        add_kernel_and_bias(self, (input_dim, self.units), self.units)
        self.input_spec = InputSpec(min_ndim=2, axes={-1: input_dim})

    def call(self, inputs):
        x = inputs
        rank = len(x.shape)
        if rank > 2:  # -1: the leading axes, whatever the batch size
            x = ops.reshape(x, (-1, x.shape[-1]))
        y = ops.matmul(x, self._compute_kernel(self.kernel))
        if self.use_bias:
            y = ops.add(y, self.bias)
        if rank > 2:
            y = ops.reshape(y, ops.shape(inputs)[:-1] + (self.units,))
        return self.activation(y)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)
