"""Input pipelines (``tf.data``-style): :class:`Dataset` over in-memory
arrays (with augmentation run in C on a worker thread) or Python
generators, and the training recipes built on it
(:mod:`pyresnet.data.recipes`)."""
from .dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset
from . import recipes

__all__ = ["Dataset", "AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "recipes"]
