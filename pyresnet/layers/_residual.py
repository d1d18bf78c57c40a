"""What the two residual blocks share: their arguments, the shortcut (He et
al. 2015, section 3.3: identity, option A zero padding or option B
projection) and the output shape."""
import numpy as np

from .. import ops
from ..tensor import Tensor
from ._args import conv_output_length, standardize_tuple
from .batch_normalization import BatchNormalization
from .conv2d import Conv2D
from .input_spec import InputSpec
from .layer import Layer


class ResidualBase(Layer):
    """Base of :class:`ResidualBlock` and :class:`PreActivationResidualBlock`
    (see them for the arguments).

    Raises:
        ValueError: for a ``shortcut`` other than ``"projection"`` and
            ``"zero_pad"``, bad strides; in ``build``, a ``"zero_pad"``
            shortcut to fewer channels.
    """

    _autocast_inputs = True  # Keras's autocast: float32 inputs to a bfloat16 compute dtype
    # the sublayers __init__ makes, in the order of their weights (each subclass its own)
    _sublayer_order = ("conv1", "bn1", "conv2", "bn2")

    def __init__(self, filters, strides=1, shortcut="projection", kernel_initializer="he_normal",
                 momentum=0.99, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        cls = type(self).__name__
        if shortcut not in ("projection", "zero_pad"):
            raise ValueError(f"{cls}: `shortcut` must be 'projection' or 'zero_pad', "
                             f"got {shortcut!r}")
        self.filters = filters
        self.strides = standardize_tuple(strides, 2, "strides", cls)
        self.shortcut = shortcut
        self.kernel_initializer = kernel_initializer
        self.momentum, self.epsilon = momentum, epsilon
        self._pad_kernel = None  # the constant 0/1 kernel of a "zero_pad" shortcut
        self.input_spec = InputSpec(ndim=4)
        for name in self._sublayer_order:  # the 3x3 convolutions (conv1 strided) and the BNs
            if name.startswith("bn"):
                setattr(self, name, self._bn())
            else:
                setattr(self, name, self._conv(3, self.strides if name == "conv1" else 1))

    def _conv(self, size, strides):
        """A ``padding="same"`` Conv2D without bias, of this block's filters."""
        return Conv2D(self.filters, size, strides=strides, padding="same", use_bias=False,
                      kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy)

    def _bn(self):
        """A BatchNormalization with this block's momentum and epsilon."""
        return BatchNormalization(momentum=self.momentum, epsilon=self.epsilon,
                                  dtype=self.dtype_policy)

    @property
    def projection(self):
        """bool: whether the shortcut is a 1x1 convolution (known once built)."""
        return hasattr(self, "shortcut_conv")

    def _build_shortcut(self, input_shape, with_bn):
        """Make the shortcut for inputs of ``input_shape``: nothing (the
        identity) when stride and channels are kept; else ``shortcut_conv``
        (and ``shortcut_bn`` when ``with_bn``) or the zero-pad kernel."""
        channels = input_shape[-1]
        if self.strides == (1, 1) and channels == self.filters:
            pass
        elif self.shortcut == "projection":
            self.shortcut_conv = self._conv(1, self.strides)
            self.shortcut_conv.build(input_shape)
            if with_bn:
                self.shortcut_bn = self._bn()
                self.shortcut_bn.build(self.shortcut_conv.compute_output_shape(input_shape))
        elif channels > self.filters:
            raise ValueError(f'Layer "{self.name}": a "zero_pad" shortcut cannot reduce '
                             f"{channels} input channels to {self.filters} filters")
        else:
            eye = np.eye(channels, self.filters, dtype=np.float32)
            self._pad_kernel = Tensor(eye.reshape(1, 1, channels, self.filters))
        self.input_spec = InputSpec(ndim=4, axes={-1: channels})

    def _shortcut(self, source, identity, training):
        """The shortcut branch: ``source`` projected (1x1 conv, + BN when
        built with it) or subsampled and zero-padded (a 1x1 convolution
        with the 0/1 kernel, exact), else ``identity``."""
        if self.projection:
            y = self.shortcut_conv(source)
            return self.shortcut_bn(y, training=training) if hasattr(self, "shortcut_bn") else y
        if self._pad_kernel is not None:
            return ops.conv2d(source, self._pad_kernel, strides=self.strides, padding="same")
        return identity

    def compute_output_shape(self, input_shape):
        """``(batch, ceil(H / s), ceil(W / s), filters)``."""
        n, h, w = input_shape[:3]
        return (n, conv_output_length(h, 3, self.strides[0], "same"),
                conv_output_length(w, 3, self.strides[1], "same"), self.filters)
