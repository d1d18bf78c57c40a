"""Ready-made architectures (``keras.applications``): the CIFAR ResNets and
their pre-activation variants, the RegNets X/Y 200MF/400MF, and airbench94
(Jordan 2024)."""
from . import airbench
from .airbench import airbench94
from .preact_resnet_cifar import (preact_resnet20, preact_resnet32, preact_resnet44,
                                  preact_resnet56, preact_resnet110, preact_resnet_cifar)
from .regnet import RegNetX002, RegNetX004, RegNetY002, RegNetY004, regnet, regnet_stages
from .resnet_cifar import resnet20, resnet32, resnet44, resnet56, resnet110, resnet_cifar

__all__ = ["airbench", "airbench94", "resnet_cifar", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110",
           "preact_resnet_cifar", "preact_resnet20", "preact_resnet32", "preact_resnet44",
           "preact_resnet56", "preact_resnet110", "regnet", "regnet_stages", "RegNetX002",
           "RegNetX004", "RegNetY002", "RegNetY004"]
