"""``ResidualBlock``: the basic two-convolution block of a residual network."""
import numpy as np

from .. import ops
from ..tensor import Tensor
from ._args import conv_output_length, standardize_tuple
from .batch_normalization import BatchNormalization
from .conv2d import Conv2D
from .input_spec import InputSpec
from .layer import Layer


class ResidualBlock(Layer):
    """The basic residual block of He et al. 2015, "Deep Residual Learning
    for Image Recognition" (section 3, figure 2; used for CIFAR-10 in
    section 4.2):

        y = relu(BN(conv3x3(relu(BN(conv3x3_stride(x))))) + shortcut(x))

    The convolutions use ``padding="same"``, no bias and He-normal init
    (He et al. 2015, "Delving Deep into Rectifiers").  The shortcut is the
    identity, or, when the stride is not 1 or the input channel count
    differs from ``filters``:

    * ``shortcut="projection"`` (default): 1x1 conv(stride) + BN, the
      paper's option B (section 3.3);
    * ``shortcut="zero_pad"``: the identity subsampled with the stride and
      zero-padded to ``filters`` channels, parameter-free, the paper's option
      A, which its CIFAR networks use (section 4.2).  It runs as a 1x1
      convolution with a constant 0/1 kernel, so it is exact.

    Input float32 ``(batch, H, W, C)``; output
    ``(batch, ceil(H / s), ceil(W / s), filters)``.  Its sublayers are the
    attributes ``conv1``, ``bn1``, ``conv2``, ``bn2`` and, with a projection,
    ``shortcut_conv``, ``shortcut_bn`` (created in ``build``).

    Args:
        filters (int): output channels.
        strides (int or tuple): stride of the first conv and the shortcut.
        shortcut (str): ``"projection"`` or ``"zero_pad"``, see above.
        kernel_initializer: for every conv (default ``"he_normal"``).
        momentum, epsilon (float): of the BatchNormalization layers
            (Keras's defaults 0.99 and 1e-3).
        **kwargs: ``name``, ``trainable``, ``dtype`` ... of :class:`Layer`;
            the sublayers get this layer's dtype policy.  Under
            ``"mixed_bfloat16"`` the convolutions compute in bfloat16 and
            the zero-pad shortcut stays float32 (it only moves values).
    Raises:
        ValueError: for bad arguments, a ``"zero_pad"`` shortcut to fewer
            channels; on call, for an input that is not rank 4 or has another
            channel count than it was built for.
    """

    def __init__(self, filters, strides=1, shortcut="projection", kernel_initializer="he_normal",
                 momentum=0.99, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        if shortcut not in ("projection", "zero_pad"):
            raise ValueError(f"ResidualBlock: `shortcut` must be 'projection' or 'zero_pad', "
                             f"got {shortcut!r}")
        self.filters = filters
        self.strides = standardize_tuple(strides, 2, "strides", "ResidualBlock")
        self.shortcut = shortcut
        self._pad_kernel = None  # the constant kernel of a "zero_pad" shortcut
        self.kernel_initializer = kernel_initializer
        self.momentum = momentum
        self.epsilon = epsilon
        self.conv1 = self._conv(3, self.strides)
        self.bn1 = self._bn()
        self.conv2 = self._conv(3, 1)
        self.bn2 = self._bn()
        self.input_spec = InputSpec(ndim=4)

    def _conv(self, size, strides):
        return Conv2D(self.filters, size, strides=strides, padding="same", use_bias=False,
                      kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy)

    def _bn(self):
        return BatchNormalization(momentum=self.momentum, epsilon=self.epsilon,
                                  dtype=self.dtype_policy)

    @property
    def projection(self):
        """bool: whether the shortcut is a 1x1 conv + BN (known once built)."""
        return hasattr(self, "shortcut_conv")

    def build(self, input_shape):
        self.conv1.build(input_shape)
        shape = self.conv1.compute_output_shape(input_shape)
        for layer in (self.bn1, self.conv2, self.bn2):
            layer.build(shape)
        channels = input_shape[-1]
        if (self.strides != (1, 1) or channels != self.filters) and self.shortcut == "projection":
            self.shortcut_conv = self._conv(1, self.strides)
            self.shortcut_bn = self._bn()
            self.shortcut_conv.build(input_shape)
            self.shortcut_bn.build(shape)
        elif self.strides != (1, 1) or channels != self.filters:
            if channels > self.filters:
                raise ValueError(f'Layer "{self.name}": a "zero_pad" shortcut cannot reduce '
                                 f"{channels} input channels to {self.filters} filters")
            eye = np.eye(channels, self.filters, dtype=np.float32)
            self._pad_kernel = Tensor(eye.reshape(1, 1, channels, self.filters))
        self.input_spec = InputSpec(ndim=4, axes={-1: input_shape[-1]})

    def call(self, inputs, training=None):
        x = ops.relu(self.bn1(self.conv1(inputs), training=training))
        x = self.bn2(self.conv2(x), training=training)
        shortcut = inputs
        if self.projection:
            shortcut = self.shortcut_bn(self.shortcut_conv(inputs), training=training)
        elif self._pad_kernel is not None:
            shortcut = ops.conv2d(inputs, self._pad_kernel, strides=self.strides, padding="same")
        return ops.relu(ops.add(x, shortcut))

    def compute_output_shape(self, input_shape):
        n, h, w = input_shape[:3]
        return (n, conv_output_length(h, 3, self.strides[0], "same"),
                conv_output_length(w, 3, self.strides[1], "same"), self.filters)
