"""What Conv2D and Conv2DTranspose share (Keras's ``BaseConv``): argument
checks, the kernel and bias weights, bias + activation after the op."""
import numpy as np

from .. import ops
from ._args import (add_kernel_and_bias, known_channels, set_kernel_bias_args,
                    standardize_data_format, standardize_padding, standardize_tuple)
from .input_spec import InputSpec
from .layer import Layer


class BaseConv(Layer):
    """Base of :class:`Conv2D` and :class:`Conv2DTranspose` (see them for the
    arguments).  A subclass gives :meth:`_kernel_shape`, :meth:`_convolve`
    and ``compute_output_shape``.

    Raises:
        ValueError: for bad or unsupported arguments (naming the subclass);
            in ``build``, an unknown channel axis or ``groups`` not dividing
            the input channels.
    """

    _autocast_inputs = True  # Keras's autocast: float32 inputs to a bfloat16 compute dtype

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, groups=1, **kwargs):
        super().__init__(**kwargs)
        cls = type(self).__name__
        if not isinstance(filters, (int, np.integer)) or filters < 1:
            raise ValueError(f"{cls}: `filters` must be a positive int, got {filters!r}")
        self.filters = int(filters)
        if not isinstance(groups, (int, np.integer)) or groups < 1 or self.filters % groups:
            raise ValueError(f"{cls}: `groups` must be a positive int dividing filters="
                             f"{self.filters}, got {groups!r}")
        self.groups = int(groups)
        if standardize_tuple(dilation_rate, 2, "dilation_rate", cls) != (1, 1):
            raise ValueError(f"{cls}: only dilation_rate=1 is supported, got {dilation_rate!r}")
        self.kernel_size = standardize_tuple(kernel_size, 2, "kernel_size", cls)
        self.strides = standardize_tuple(strides, 2, "strides", cls)
        self.padding = standardize_padding(padding, cls)
        self.data_format = standardize_data_format(data_format, cls)
        set_kernel_bias_args(self, activation, use_bias, kernel_initializer, bias_initializer,
                             kernel_regularizer, bias_regularizer)
        self.input_spec = InputSpec(ndim=4)

    def _kernel_shape(self, channels):
        """The kernel's shape for ``channels`` input channels."""
        raise NotImplementedError

    def _convolve(self, inputs, kernel):
        """The op, before bias and activation."""
        raise NotImplementedError

    def build(self, input_shape):
        channels = known_channels(self, input_shape)
        if channels % self.groups:
            raise ValueError(f'Layer "{self.name}": groups={self.groups} does not divide the '
                             f"{channels} input channels (input shape {input_shape})")
        self.compute_output_shape(input_shape)  # the kernel must fit the image
        add_kernel_and_bias(self, self._kernel_shape(channels), self.filters)
        self.input_spec = InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs):
        y = self._convolve(inputs, self._compute_kernel(self.kernel))
        if self.use_bias:
            y = ops.add(y, self._compute_kernel(self.bias))
        return self.activation(y)
