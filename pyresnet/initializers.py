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


def lecun_normal(shape, dtype="float32"):
    """Truncated normal with variance 1 / fan_in (LeCun et al. 1998, "Efficient BackProp")."""
    return _variance_scaling(shape, dtype, 1.0, "fan_in", "normal")


def lecun_uniform(shape, dtype="float32"):
    """U(-l, l) with l = sqrt(3 / fan_in)."""
    return _variance_scaling(shape, dtype, 1.0, "fan_in", "uniform")


class RandomNormal:
    """Normal draws N(mean, stddev**2) (``keras.initializers.RandomNormal``;
    Keras's defaults mean 0, stddev 0.05).  ``seed`` (int) makes it draw
    from its own generator, else from the one
    :func:`pyresnet.utils.set_random_seed` seeds."""

    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = float(mean), float(stddev), seed

    def __call__(self, shape, dtype="float32"):
        rng = get_rng() if self.seed is None else np.random.default_rng(self.seed)
        return rng.normal(self.mean, self.stddev, tuple(shape)).astype(dtype)


class RandomUniform:
    """Uniform draws U(minval, maxval) (``keras.initializers.RandomUniform``;
    Keras's defaults -0.05, 0.05); ``seed`` as :class:`RandomNormal`."""

    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval, self.maxval, self.seed = float(minval), float(maxval), seed

    def __call__(self, shape, dtype="float32"):
        rng = get_rng() if self.seed is None else np.random.default_rng(self.seed)
        return rng.uniform(self.minval, self.maxval, tuple(shape)).astype(dtype)


class TruncatedNormal:
    """Normal draws N(mean, stddev**2) redrawn beyond two standard
    deviations (``keras.initializers.TruncatedNormal``; defaults 0, 0.05).
    As Keras, ``stddev`` is that of the normal before truncation."""

    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = float(mean), float(stddev), seed

    def __call__(self, shape, dtype="float32"):
        z = _truncated_normal(tuple(int(d) for d in shape), _TRUNCATED_STD)
        return (self.mean + self.stddev * z).astype(dtype)


class Constant:
    """Every element ``value`` (``keras.initializers.Constant``)."""

    def __init__(self, value=0.0):
        self.value = float(value)

    def __call__(self, shape, dtype="float32"):
        return np.full(tuple(shape), self.value, dtype)


def random_normal(shape, dtype="float32"):
    """:class:`RandomNormal` with Keras's defaults (stddev 0.05)."""
    return RandomNormal()(shape, dtype)


def random_uniform(shape, dtype="float32"):
    """:class:`RandomUniform` with Keras's defaults (-0.05, 0.05)."""
    return RandomUniform()(shape, dtype)


def truncated_normal(shape, dtype="float32"):
    """:class:`TruncatedNormal` with Keras's defaults (stddev 0.05)."""
    return TruncatedNormal()(shape, dtype)


_BY_NAME = {f.__name__: f for f in (glorot_uniform, glorot_normal, he_normal, he_uniform,
                                    lecun_normal, lecun_uniform, random_normal, random_uniform,
                                    truncated_normal, zeros, ones)}


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
