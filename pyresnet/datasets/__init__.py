"""Datasets in the layout of ``keras.datasets``: ``cifar10.load_data()`` and
``cifar100.load_data()`` read the official python-pickle releases
(Krizhevsky 2009), from ``path``, ``$PYRESNET_DATA`` or the cache
``~/.pyresnet/datasets``, downloading and MD5-checking them when absent."""
from . import cifar10, cifar100
from ._cache import ChecksumError

__all__ = ["cifar10", "cifar100", "ChecksumError"]
