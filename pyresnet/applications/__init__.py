"""Ready-made architectures (``keras.applications``): the CIFAR ResNets and
their pre-activation variants, the 24 RegNets X/Y (200MF to 32GF) of
tf.keras 2.x, and airbench94 (Jordan 2024)."""
from . import airbench
from .airbench import airbench94
from .preact_resnet_cifar import (preact_resnet20, preact_resnet32, preact_resnet44,
                                  preact_resnet56, preact_resnet110, preact_resnet_cifar)
from .regnet import (RegNetX002, RegNetX004, RegNetX006, RegNetX008, RegNetX016, RegNetX032,
                     RegNetX040, RegNetX064, RegNetX080, RegNetX120, RegNetX160, RegNetX320,
                     RegNetY002, RegNetY004, RegNetY006, RegNetY008, RegNetY016, RegNetY032,
                     RegNetY040, RegNetY064, RegNetY080, RegNetY120, RegNetY160, RegNetY320,
                     regnet, regnet_stages)
from .resnet_cifar import resnet20, resnet32, resnet44, resnet56, resnet110, resnet_cifar

__all__ = ["airbench", "airbench94", "resnet_cifar", "resnet20", "resnet32", "resnet44", "resnet56", "resnet110",
           "preact_resnet_cifar", "preact_resnet20", "preact_resnet32", "preact_resnet44",
           "preact_resnet56", "preact_resnet110", "regnet", "regnet_stages",
           "RegNetX002", "RegNetX004", "RegNetX006", "RegNetX008", "RegNetX016",
           "RegNetX032", "RegNetX040", "RegNetX064", "RegNetX080", "RegNetX120",
           "RegNetX160", "RegNetX320", "RegNetY002", "RegNetY004", "RegNetY006",
           "RegNetY008", "RegNetY016", "RegNetY032", "RegNetY040", "RegNetY064",
           "RegNetY080", "RegNetY120", "RegNetY160", "RegNetY320"]
