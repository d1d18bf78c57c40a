"""``ResidualBlock``: the basic two-convolution block of a residual network."""
from .. import ops
from ._residual import ResidualBase


class ResidualBlock(ResidualBase):
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

    def build(self, input_shape):
        self.conv1.build(input_shape)
        shape = self.conv1.compute_output_shape(input_shape)
        for layer in (self.bn1, self.conv2, self.bn2):
            layer.build(shape)
        self._build_shortcut(input_shape, with_bn=True)

    def call(self, inputs, training=None):
        x = ops.relu(self.bn1(self.conv1(inputs), training=training))
        x = self.bn2(self.conv2(x), training=training)
        return ops.relu(ops.add(x, self._shortcut(inputs, inputs, training)))
