"""Each test's own seed (tests/conftest.py sets it before every test).

Kept out of conftest.py so that test modules importing :func:`test_rng` get
the same module object as the fixture (pytest loads conftest.py under its
own name).
"""
import zlib

current = {"rng": None}


def test_seed(nodeid):
    """The seed of the test ``nodeid``: CRC-32 of its id (stable across runs)."""
    return zlib.crc32(nodeid.encode())


def test_rng():
    """The running test's own NumPy Generator (seeded from its id)."""
    if current["rng"] is None:
        raise RuntimeError("test_rng() is only available while a test runs")
    return current["rng"]


test_seed.__test__ = test_rng.__test__ = False  # helpers, not tests
