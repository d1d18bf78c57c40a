"""Ready-made architectures (``keras.applications``): the CIFAR ResNets and
their pre-activation variants."""
from .preact_resnet_cifar import (preact_resnet20, preact_resnet32, preact_resnet44,
                                  preact_resnet56, preact_resnet110, preact_resnet_cifar)
from .resnet_cifar import resnet20, resnet32, resnet44, resnet56, resnet110, resnet_cifar

__all__ = ["resnet_cifar", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110",
           "preact_resnet_cifar", "preact_resnet20", "preact_resnet32", "preact_resnet44",
           "preact_resnet56", "preact_resnet110"]
