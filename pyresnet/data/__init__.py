"""Input pipelines (``tf.data``-style): :class:`Dataset` over in-memory
arrays, with augmentation run in C on a worker thread, and the training
recipes built on it (:mod:`pyresnet.data.recipes`)."""
from .dataset import Dataset
from . import recipes

__all__ = ["Dataset", "recipes"]
