"""Datasets in the layout of ``keras.datasets``: ``cifar10.load_data()`` and
``cifar100.load_data()`` read the official python-pickle releases
(Krizhevsky 2009, "Learning Multiple Layers of Features from Tiny Images").

Where they look, in order: the ``path`` argument, ``$PYRESNET_DATA``, then the
cache ``$PYRESNET_CACHE_DIR`` (default ``~/.pyresnet/datasets``).  When the
data is nowhere, the official archive is downloaded from
``$PYRESNET_DATASETS_URL`` (default https://www.cs.toronto.edu/~kriz/, the
file name is appended) into the cache, checked against the official MD5
(ChecksumError otherwise) and unpacked there.
"""
from . import cifar10, cifar100
from ._cache import ChecksumError

__all__ = ["cifar10", "cifar100", "ChecksumError"]
