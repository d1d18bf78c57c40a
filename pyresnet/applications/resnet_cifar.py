"""The CIFAR-10 residual networks of He et al. 2015, "Deep Residual Learning
for Image Recognition", section 4.2: depth 6n + 2.

    conv3x3(16) - BN - ReLU
    3 stages of n ResidualBlocks with 16, 32, 64 filters; stride 2 in the
        first block of stages 2 and 3 (32x32 -> 16x16 -> 8x8 for CIFAR)
    global average pooling - Dense(num_classes) logits

As in the paper, the shortcuts are parameter-free identities, subsampled and
zero-padded where the shape changes (option A; ``shortcut="projection"``
uses 1x1 conv + BN there instead, option B).  Trainable parameters (BN
gamma/beta included) then equal the paper's table 6: resnet20 0.27M,
resnet32 0.46M, resnet44 0.66M, resnet56 0.85M, resnet110 1.7M.
"""
from ..layers import BatchNormalization, Conv2D, Dense, GlobalAveragePooling2D, Input, ReLU, \
    ResidualBlock
from ..models import Model


def resnet_cifar(depth, input_shape=(32, 32, 3), num_classes=10, width=16, shortcut="zero_pad",
                 name=None):
    """A CIFAR ResNet of ``depth`` = 6n + 2 layers (functional Model).

    Args:
        depth (int): 6n + 2 with n >= 1 (8, 14, 20, 32, 44, 56, 110, ...).
        input_shape (tuple): NHWC sample shape, float32 images.
        num_classes (int): size of the logits.
        width (int): filters of the first stage (16 in the paper; the stages
            have width, 2 width, 4 width).
        shortcut (str): ``"zero_pad"`` (the paper's option A) or
            ``"projection"`` (option B); see :class:`ResidualBlock`.
        name (str): default ``resnet<depth>``.
    Returns:
        Model: input ``(batch, *input_shape)`` float32, output logits
        ``(batch, num_classes)`` (use ``from_logits=True`` losses).
    Raises:
        ValueError: when depth is not 6n + 2 with n >= 1.
    """
    n = blocks_per_stage(depth, "resnet_cifar")
    inputs = Input(input_shape)
    x = stem(inputs, width)
    x = ReLU()(BatchNormalization()(x))
    x = stages(x, n, width, ResidualBlock, shortcut)
    x = GlobalAveragePooling2D()(x)
    outputs = Dense(num_classes)(x)
    return Model(inputs, outputs, name=name or f"resnet{depth}")


# ---- the CIFAR layout, shared with the pre-activation networks ------------------------------

def blocks_per_stage(depth, caller):
    """n of a depth 6n + 2; ValueError naming ``caller`` otherwise."""
    if not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ValueError(f"{caller}: depth must be 6n + 2 with n >= 1, got {depth!r}")
    return (depth - 2) // 6


def stem(inputs, width):
    """The first 3x3 convolution (``width`` filters, no bias, He normal)."""
    return Conv2D(width, 3, padding="same", use_bias=False, kernel_initializer="he_normal")(inputs)


def stages(x, n, width, block, shortcut):
    """Three stages of ``n`` ``block`` layers with width, 2 width, 4 width
    filters; stride 2 in the first block of stages 2 and 3 (He et al. 2015,
    section 4.2)."""
    for stage, filters in enumerate((width, 2 * width, 4 * width)):
        for i in range(n):
            x = block(filters, strides=2 if stage > 0 and i == 0 else 1, shortcut=shortcut)(x)
    return x


def resnet20(input_shape=(32, 32, 3), num_classes=10):
    """ResNet-20 (n = 3, 0.27M parameters); see :func:`resnet_cifar`."""
    return resnet_cifar(20, input_shape, num_classes)


def resnet32(input_shape=(32, 32, 3), num_classes=10):
    """ResNet-32 (n = 5, 0.46M parameters); see :func:`resnet_cifar`."""
    return resnet_cifar(32, input_shape, num_classes)


def resnet44(input_shape=(32, 32, 3), num_classes=10):
    """ResNet-44 (n = 7, 0.66M parameters); see :func:`resnet_cifar`."""
    return resnet_cifar(44, input_shape, num_classes)


def resnet56(input_shape=(32, 32, 3), num_classes=10):
    """ResNet-56 (n = 9, 0.85M parameters); see :func:`resnet_cifar`."""
    return resnet_cifar(56, input_shape, num_classes)


def resnet110(input_shape=(32, 32, 3), num_classes=10):
    """ResNet-110 (n = 18, 1.7M parameters); see :func:`resnet_cifar`."""
    return resnet_cifar(110, input_shape, num_classes)
