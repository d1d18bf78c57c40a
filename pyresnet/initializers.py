"""Weight initialisers with Keras names (``keras.initializers``).

Each is a function ``init(shape, dtype="float32") -> numpy.ndarray`` drawing
from the generator that :func:`pyresnet.utils.set_random_seed` seeds.  The
variance-scaling rules and fan computation follow Keras's
``VarianceScaling`` (fans of a conv kernel HWIO: fan_in = H*W*I,
fan_out = H*W*O); the "normal" variants draw from a normal truncated at two
standard deviations, rescaled so that the variance is the intended one.

Glorot & Bengio 2010 (eq. 16) for ``glorot_*``; He et al. 2015,
"Delving Deep into Rectifiers", section 2.2 for ``he_*``.
"""
import numpy as np

from .utils.rng import get_rng

# Standard deviation of a unit normal truncated to [-2, 2] (Keras's constant).
_TRUNCATED_STD = 0.87962566103423978


def _fans(shape):
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def _truncated_normal(shape, stddev):
    z = get_rng().standard_normal(shape)
    bad = np.abs(z) > 2
    while bad.any():
        z[bad] = get_rng().standard_normal(int(bad.sum()))
        bad = np.abs(z) > 2
    return z * (stddev / _TRUNCATED_STD)


def _variance_scaling(shape, dtype, scale, mode, distribution):
    shape = tuple(int(d) for d in shape)
    fan_in, fan_out = _fans(shape)
    n = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
    var = scale / max(1.0, n)
    if distribution == "uniform":
        limit = np.sqrt(3.0 * var)
        return get_rng().uniform(-limit, limit, shape).astype(dtype)
    return _truncated_normal(shape, np.sqrt(var)).astype(dtype)


def glorot_uniform(shape, dtype="float32"):
    """U(-l, l) with l = sqrt(6 / (fan_in + fan_out)) (Keras's default kernel init)."""
    return _variance_scaling(shape, dtype, 1.0, "fan_avg", "uniform")


def glorot_normal(shape, dtype="float32"):
    """Truncated normal with variance 2 / (fan_in + fan_out)."""
    return _variance_scaling(shape, dtype, 1.0, "fan_avg", "normal")


def he_normal(shape, dtype="float32"):
    """Truncated normal with variance 2 / fan_in (He et al. 2015, sec. 2.2)."""
    return _variance_scaling(shape, dtype, 2.0, "fan_in", "normal")


def he_uniform(shape, dtype="float32"):
    """U(-l, l) with l = sqrt(6 / fan_in)."""
    return _variance_scaling(shape, dtype, 2.0, "fan_in", "uniform")


def zeros(shape, dtype="float32"):
    """All zeros."""
    return np.zeros(tuple(shape), dtype)


def ones(shape, dtype="float32"):
    """All ones."""
    return np.ones(tuple(shape), dtype)


_BY_NAME = {f.__name__: f for f in (glorot_uniform, glorot_normal, he_normal, he_uniform,
                                    zeros, ones)}


def get(identifier):
    """An initialiser from a Keras name (``"he_normal"``, ``"zeros"``, ...) or a
    callable ``(shape, dtype) -> array`` (returned as is).

    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if callable(identifier):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _BY_NAME:
            raise ValueError(f"unknown initializer {identifier!r}; known: {sorted(_BY_NAME)}")
        return _BY_NAME[identifier]
    raise TypeError(f"initializer must be a name or a callable, got {identifier!r}")
