"""``PreActivationResidualBlock``: the residual block with batch norm and
ReLU before each convolution (He et al. 2016)."""
import numpy as np

from .. import ops
from ..tensor import Tensor
from ._args import conv_output_length, standardize_tuple
from .batch_normalization import BatchNormalization
from .conv2d import Conv2D
from .input_spec import InputSpec
from .layer import Layer


class PreActivationResidualBlock(Layer):
    """The pre-activation residual unit of He et al. 2016, "Identity
    Mappings in Deep Residual Networks" (section 4, figure 4(e)):

        a = relu(BN(x))
        y = conv3x3(relu(BN(conv3x3_stride(a)))) + shortcut

    Nothing follows the addition, so the identity path runs unchanged from
    block to block (the paper's point); a network of these blocks ends with
    BN + ReLU before its pooling.  The shortcut is ``x`` itself, or, when
    the stride is not 1 or the channel count changes, a function of the
    pre-activated ``a`` (fb.resnet.torch's ``preresnet.lua``, "both_preact"):

    * ``shortcut="projection"`` (default): a 1x1 conv(stride) without bias
      or BN (option B);
    * ``shortcut="zero_pad"``: ``a`` subsampled with the stride and
      zero-padded to ``filters`` channels, parameter-free (option A, the
      CIFAR default of preresnet.lua), as in :class:`ResidualBlock`.

    Input float32 ``(batch, H, W, C)``; output
    ``(batch, ceil(H / s), ceil(W / s), filters)``.  Sublayers ``bn1``,
    ``conv1``, ``bn2``, ``conv2`` and, with a projection, ``shortcut_conv``.

    Args:
        filters (int): output channels.
        strides (int or tuple): stride of the first conv and the shortcut.
        shortcut (str): ``"projection"`` or ``"zero_pad"``, see above.
        kernel_initializer: for every conv (default ``"he_normal"``).
        momentum, epsilon (float): of the BatchNormalization layers.
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for bad arguments, a ``"zero_pad"`` shortcut to fewer
            channels; on call, for an input that is not rank 4 or has another
            channel count than it was built for.
    """

    def __init__(self, filters, strides=1, shortcut="projection", kernel_initializer="he_normal",
                 momentum=0.99, epsilon=1e-3, **kwargs):
        super().__init__(**kwargs)
        if shortcut not in ("projection", "zero_pad"):
            raise ValueError(f"PreActivationResidualBlock: `shortcut` must be 'projection' or "
                             f"'zero_pad', got {shortcut!r}")
        self.filters = filters
        self.strides = standardize_tuple(strides, 2, "strides", "PreActivationResidualBlock")
        self.shortcut = shortcut
        self.kernel_initializer = kernel_initializer
        self.momentum, self.epsilon = momentum, epsilon
        self._pad_kernel = None
        self.bn1 = BatchNormalization(momentum=momentum, epsilon=epsilon, dtype=self.dtype_policy)
        self.conv1 = self._conv(3, self.strides)
        self.bn2 = BatchNormalization(momentum=momentum, epsilon=epsilon, dtype=self.dtype_policy)
        self.conv2 = self._conv(3, 1)
        self.input_spec = InputSpec(ndim=4)

    def _conv(self, size, strides):
        return Conv2D(self.filters, size, strides=strides, padding="same", use_bias=False,
                      kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.bn1.build(input_shape)
        self.conv1.build(input_shape)
        shape = self.conv1.compute_output_shape(input_shape)
        self.bn2.build(shape)
        self.conv2.build(shape)
        channels = input_shape[-1]
        if self.strides != (1, 1) or channels != self.filters:
            if self.shortcut == "projection":
                self.shortcut_conv = self._conv(1, self.strides)
                self.shortcut_conv.build(input_shape)
            elif channels > self.filters:
                raise ValueError(f'Layer "{self.name}": a "zero_pad" shortcut cannot reduce '
                                 f"{channels} input channels to {self.filters} filters")
            else:
                eye = np.eye(channels, self.filters, dtype=np.float32)
                self._pad_kernel = Tensor(eye.reshape(1, 1, channels, self.filters))
        self.input_spec = InputSpec(ndim=4, axes={-1: channels})

    def call(self, inputs, training=None):
        a = ops.relu(self.bn1(inputs, training=training))
        x = self.conv1(a)
        x = self.conv2(ops.relu(self.bn2(x, training=training)))
        shortcut = inputs
        if hasattr(self, "shortcut_conv"):
            shortcut = self.shortcut_conv(a)
        elif self._pad_kernel is not None:
            shortcut = ops.conv2d(a, self._pad_kernel, strides=self.strides, padding="same")
        return ops.add(x, shortcut)

    def compute_output_shape(self, input_shape):
        n, h, w = input_shape[:3]
        return (n, conv_output_length(h, 3, self.strides[0], "same"),
                conv_output_length(w, 3, self.strides[1], "same"), self.filters)
