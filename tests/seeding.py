"""Each test's own seed (tests/conftest.py sets it before every test).

Kept out of conftest.py so that test modules importing :func:`test_rng` get
the same module object as the fixture (pytest loads conftest.py under its
own name).
"""
import zlib

import numpy as np

current = {"rng": None}


def test_seed(nodeid):
    """The seed of the test ``nodeid``: CRC-32 of its id (stable across runs)."""
    return zlib.crc32(nodeid.encode())


def test_rng():
    """The running test's own NumPy Generator (seeded from its id)."""
    if current["rng"] is None:
        raise RuntimeError("test_rng() is only available while a test runs")
    return current["rng"]


def seeded_normal(*shape, seed=0):
    """float32 standard normal values of ``shape`` from a generator of their
    own ``seed``: the same values whichever test asks."""
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


test_seed.__test__ = test_rng.__test__ = False  # helpers, not tests
