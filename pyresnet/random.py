"""Random draws with Keras 3's names (``keras.random``): ``normal``,
``uniform`` and ``SeedGenerator``.

Draws come from the registry ops ``random_normal`` and ``random_uniform``
(csrc/ops_random.c): Philox-4x32-10 streams whose state is an int64
Variable ``[seed, counter]`` that every draw advances, so a compiled step
(``fit``'s, or ``pyresnet.compile``) draws new numbers on every call, as
Keras's ``SeedGenerator`` does, and a seed reproduces a run.
"""

import numpy as np

from . import ops
from .compile import init_scope
from .tensor import Variable
from .utils.masks import greater_equal_mask


class SeedGenerator:
    """A random state for the draws of this module (``keras.random.SeedGenerator``).

    Args:
        seed (int): in [0, 2**63); None draws one from Python's ``random``
            (so :func:`pyresnet.utils.set_random_seed` makes it reproducible).
    Attributes:
        state: the int64 Variable ``[seed, counter]`` (saved with the layer
            or model that owns the generator).
    Raises:
        ValueError/TypeError: for a bad seed.
    """

    def __init__(self, seed=None, name=None, **kwargs):
        with init_scope():
            self.state = ops.rng_state(seed)
        self.state.name = name or "seed_generator_state"

    def __repr__(self):
        seed, counter = np.asarray(self.state).tolist()
        return f"<SeedGenerator seed={seed} counter={counter}>"


_global = None


def global_seed_generator():
    """The generator used when no ``seed`` is given (made on first use)."""
    global _global
    if _global is None:
        _global = SeedGenerator(name="global_seed_generator_state")
    return _global


def _reseed_global(seed):
    """Called by :func:`pyresnet.utils.set_random_seed`."""
    if _global is not None:
        _global.state.assign(np.array([int(seed) % 2**63, 0], np.int64))


def _state(seed, what):
    if seed is None:
        return global_seed_generator().state
    if isinstance(seed, SeedGenerator):
        return seed.state
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        with init_scope():  # a fresh stream: the same draws for the same int seed
            return Variable(np.array([int(seed), 0], np.int64), trainable=False,
                            name="rng_state")
    raise TypeError(f"{what}: seed must be None, an int or a SeedGenerator, got "
                    f"{type(seed).__name__}")


def _check_dtype(dtype, what):
    if dtype not in (None, "float32", np.float32):
        raise ValueError(f"{what}: only dtype='float32' is supported, got {dtype!r}")


def normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
    """Normal draws N(mean, stddev**2), float32 of ``shape``
    (``keras.random.normal``).

    Args:
        shape: tuple of sizes; inside a compiled function a size may be
            ``pyresnet.ops.shape(x)[0]`` (the batch size).
        mean, stddev (float): the distribution's parameters (finite).
        dtype: only None/``"float32"``.
        seed: a :class:`SeedGenerator` (draws advance it), None (the global
            generator) or an int (a new stream from that seed: eagerly, the
            same draws on every call; in a compiled function the stream is
            made once, when tracing, and advances with every call).
    Returns:
        float32 Tensor of ``shape``.
    Raises:
        ValueError: for a negative size, non-finite parameters or another
            dtype; TypeError for a bad seed.
    """
    _check_dtype(dtype, "random.normal")
    return ops.call("random_normal", _state(seed, "random.normal"), shape=tuple(shape),
                    mean=float(mean), stddev=float(stddev))


def uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
    """Uniform draws in (minval, maxval), float32 of ``shape``
    (``keras.random.uniform``).  Arguments and errors as :func:`normal`."""
    _check_dtype(dtype, "random.uniform")
    return ops.call("random_uniform", _state(seed, "random.uniform"), shape=tuple(shape),
                    minval=float(minval), maxval=float(maxval))


def dropout(inputs, rate, noise_shape=None, seed=None):
    """Zero each element of ``inputs`` with probability ``rate`` and scale
    the others by ``1 / (1 - rate)`` (``keras.random.dropout``; Srivastava
    et al. 2014, "Dropout", section 10 for the inverted scaling), with
    draws from :func:`uniform` (an element is kept when its draw is >=
    ``rate``).

    Args:
        inputs: float32 Tensor.
        rate (float): in [0, 1).
        noise_shape: shape of the keep mask, broadcast to the input's
            (default: the input's own; a 1 shares the draw along that axis;
            a None entry takes the input's size, as Keras).
        seed: as :func:`normal`.
    Returns:
        float32 Tensor of the input's shape.
    Raises:
        ValueError: for a rate outside [0, 1).
    """
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"random.dropout: rate must be in [0, 1), got {rate!r}")
    if rate == 0.0:
        return inputs
    full = ops.shape(inputs)
    shape = full if noise_shape is None else tuple(
        full[i] if d is None else d for i, d in enumerate(noise_shape))
    keep = greater_equal_mask(uniform(shape, seed=seed), rate)
    return ops.scale(ops.multiply(inputs, keep), 1.0 / (1.0 - rate))


__all__ = ["SeedGenerator", "normal", "uniform", "dropout", "global_seed_generator"]
