"""Ready-made architectures (``keras.applications``): the CIFAR ResNets."""
from .resnet_cifar import resnet20, resnet32, resnet44, resnet56, resnet110, resnet_cifar

__all__ = ["resnet_cifar", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]
