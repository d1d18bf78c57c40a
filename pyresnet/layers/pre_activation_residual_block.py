"""``PreActivationResidualBlock``: the residual block with batch norm and
ReLU before each convolution (He et al. 2016)."""
from .. import ops
from ._residual import ResidualBase


class PreActivationResidualBlock(ResidualBase):
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

    _sublayer_order = ("bn1", "conv1", "bn2", "conv2")

    def build(self, input_shape):
        self.bn1.build(input_shape)
        self.conv1.build(input_shape)
        shape = self.conv1.compute_output_shape(input_shape)
        self.bn2.build(shape)
        self.conv2.build(shape)
        self._build_shortcut(input_shape, with_bn=False)

    def call(self, inputs, training=None):
        a = ops.relu(self.bn1(inputs, training=training))
        x = self.conv1(a)
        x = self.conv2(ops.relu(self.bn2(x, training=training)))
        return ops.add(x, self._shortcut(a, inputs, training))
