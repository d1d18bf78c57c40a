"""The one host-side random generator.

Weight initialisers and ``Model.fit`` shuffling draw from one NumPy
``Generator``; ``set_random_seed`` reseeds it so that a run is reproducible
(as ``keras.utils.set_random_seed``).
"""
import random

import numpy as np

_rng = np.random.default_rng()


def set_random_seed(seed):
    """Seed every host-side random source: Python's ``random``, NumPy's global
    state and pyresnet's generator (initialisers, fit shuffling).

    Args:
        seed (int): a non-negative integer.
    Raises:
        ValueError: when ``seed`` is not a non-negative integer.
    """
    global _rng
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"set_random_seed: seed must be a non-negative int, got {seed!r}")
    random.seed(int(seed))
    np.random.seed(int(seed) % 2**32)
    _rng = np.random.default_rng(int(seed))
    from .. import random as pr_random  # noqa: PLC0415
    pr_random._reseed_global(seed)


def get_rng():
    """The ``numpy.random.Generator`` that initialisers and shuffling use."""
    return _rng
