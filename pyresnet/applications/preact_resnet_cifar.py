"""The CIFAR pre-activation ResNets of He et al. 2016, "Identity Mappings in
Deep Residual Networks" (section 4, figure 4(e); the CIFAR layout of He et
al. 2015, section 4.2, with pre-activation units): depth 6n + 2.

    conv3x3(16)
    3 stages of n PreActivationResidualBlocks with 16, 32, 64 filters;
        stride 2 in the first block of stages 2 and 3
    BN - ReLU - global average pooling - Dense(num_classes) logits

The shortcuts are identities, subsampled and zero-padded where the shape
changes (option A, fb.resnet.torch's CIFAR default); the parameter counts
equal the post-activation networks' (the batch norms move, their number of
channels adds up the same): preact_resnet20 0.27M, preact_resnet56 0.85M,
preact_resnet110 1.7M.
"""
from ..layers import (BatchNormalization, Dense, GlobalAveragePooling2D, Input,
                      PreActivationResidualBlock, ReLU)
from ..models import Model
from .resnet_cifar import blocks_per_stage, stages, stem


def preact_resnet_cifar(depth, input_shape=(32, 32, 3), num_classes=10, width=16,
                        shortcut="zero_pad", name=None):
    """A CIFAR pre-activation ResNet of ``depth`` = 6n + 2 layers
    (functional Model).

    Args:
        depth (int): 6n + 2 with n >= 1 (20, 32, 44, 56, 110, ...).
        input_shape (tuple): NHWC sample shape, float32 images.
        num_classes (int): size of the logits.
        width (int): filters of the first stage (the stages have width,
            2 width, 4 width).
        shortcut (str): ``"zero_pad"`` (option A) or ``"projection"``
            (1x1 conv on the pre-activated input, option B); see
            :class:`~pyresnet.layers.PreActivationResidualBlock`.
        name (str): default ``preact_resnet<depth>``.
    Returns:
        Model: input ``(batch, *input_shape)`` float32, output logits
        ``(batch, num_classes)``.
    Raises:
        ValueError: when depth is not 6n + 2 with n >= 1.
    """
    n = blocks_per_stage(depth, "preact_resnet_cifar")
    inputs = Input(input_shape)
    x = stages(stem(inputs, width), n, width, PreActivationResidualBlock, shortcut)
    x = ReLU()(BatchNormalization()(x))
    outputs = Dense(num_classes)(GlobalAveragePooling2D()(x))
    return Model(inputs, outputs, name=name or f"preact_resnet{depth}")


def preact_resnet20(input_shape=(32, 32, 3), num_classes=10):
    """Pre-activation ResNet-20 (n = 3); see :func:`preact_resnet_cifar`."""
    return preact_resnet_cifar(20, input_shape, num_classes)


def preact_resnet32(input_shape=(32, 32, 3), num_classes=10):
    """Pre-activation ResNet-32 (n = 5); see :func:`preact_resnet_cifar`."""
    return preact_resnet_cifar(32, input_shape, num_classes)


def preact_resnet44(input_shape=(32, 32, 3), num_classes=10):
    """Pre-activation ResNet-44 (n = 7); see :func:`preact_resnet_cifar`."""
    return preact_resnet_cifar(44, input_shape, num_classes)


def preact_resnet56(input_shape=(32, 32, 3), num_classes=10):
    """Pre-activation ResNet-56 (n = 9); see :func:`preact_resnet_cifar`."""
    return preact_resnet_cifar(56, input_shape, num_classes)


def preact_resnet110(input_shape=(32, 32, 3), num_classes=10):
    """Pre-activation ResNet-110 (n = 18); see :func:`preact_resnet_cifar`."""
    return preact_resnet_cifar(110, input_shape, num_classes)
