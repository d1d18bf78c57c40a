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


class VarianceScaling:
    """``keras.initializers.VarianceScaling``: variance ``scale / n`` with
    ``n`` the fan of ``mode`` (``"fan_in"``, ``"fan_out"``, ``"fan_avg"``),
    drawn from a truncated normal or a uniform (``distribution``:
    ``"truncated_normal"``/``"normal"`` or ``"uniform"``).  PyTorch's
    default conv/linear init is ``VarianceScaling(1/3, "fan_in",
    "uniform")``: U(+-1/sqrt(fan_in)).

    Raises:
        ValueError: for a scale <= 0 or an unknown mode/distribution.
    """

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None):
        if not float(scale) > 0:
            raise ValueError(f"VarianceScaling: `scale` must be > 0, got {scale!r}")
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"VarianceScaling: unknown mode {mode!r}")
        if distribution not in ("truncated_normal", "normal", "uniform"):
            raise ValueError(f"VarianceScaling: unknown distribution {distribution!r}")
        self.scale, self.mode, self.distribution = float(scale), mode, distribution
        self.seed = seed

    def __call__(self, shape, dtype="float32"):
        if self.seed is not None:
            raise NotImplementedError("VarianceScaling: `seed` is not provided; seed the "
                                      "global generator with utils.set_random_seed")
        return _variance_scaling(shape, dtype, self.scale, self.mode,
                                 "uniform" if self.distribution == "uniform" else "normal")


class Dirac:
    """An identity convolution kernel (PyTorch's ``nn.init.dirac_``; Keras's
    ``Identity`` is for 2-D matrices only, hence the separate name):
    for a kernel ``(kh, kw, in, out)`` (HWIO, ``kh, kw`` odd for an exact
    identity), output filter ``o < min(in, out)`` is ``gain`` at the centre
    tap ``(kh // 2, kw // 2)`` of input channel ``o`` and 0 elsewhere, so a
    stride-1 "same" convolution copies its first ``min(in, out)`` input
    channels (times ``gain``).  The other ``out - in`` filters (when out >
    in) come from ``fill`` (an initializer; default zeros, as
    ``dirac_``).  airbench initialises its 3x3 convolutions so, with
    PyTorch's default init as ``fill`` (Jordan 2024, arXiv 2404.00498,
    section 3: "identity initialization").

    Args:
        gain (float): the centre value.
        fill: initializer of the remaining filters (name or callable).
    Raises:
        ValueError: (on call) for a shape that is not 3-D, 4-D or 5-D.
    """

    def __init__(self, gain=1.0, fill="zeros"):
        self.gain, self.fill = float(gain), fill

    def __call__(self, shape, dtype="float32"):
        shape = tuple(int(d) for d in shape)
        if not 3 <= len(shape) <= 5:
            raise ValueError(f"Dirac: expects a convolution kernel (spatial..., in, out), got "
                             f"shape {shape}")
        w = np.array(get(self.fill)(shape, dtype), dtype=dtype)
        n = min(shape[-2], shape[-1])
        centre = tuple(k // 2 for k in shape[:-2])
        w[..., :n] = 0
        w[centre + (np.arange(n), np.arange(n))] = self.gain
        return w


class PatchWhitening:
    """A patch-whitening convolution kernel from data (Jordan 2024, arXiv
    2404.00498, section 3, patch-whitening initialization; after Page 2018,
    "How to train your ResNet"):
    with ``P`` the ``kh*kw*C`` vectors of every ``kh x kw`` patch (stride
    1, in (h, w, c) order) of ``images`` and ``S = P^T P / n`` their
    (uncentred) second-moment matrix with eigenpairs ``(l_k, v_k)``, sorted
    by decreasing ``l_k``, the kernel's filters are ``v_k / sqrt(l_k + epsilon)``
    followed by their negatives: shape ``(kh, kw, C, 2*kh*kw*C)``.  A
    "valid" stride-1 convolution with it maps the patches to outputs whose
    first ``kh*kw*C`` channels have second moment ``diag(l / (l + epsilon))``
    (the identity for ``l >> epsilon``).  Freeze the kernel after building
    (``layer.kernel.trainable = False``), as airbench.

    Args:
        images: float array (N, H, W, C), preprocessed as the model's
            inputs will be (airbench: the first 5,000 normalised training
            images).
        epsilon (float): added to the eigenvalues (airbench's 5e-4).
        chunk (int): images per chunk of the moment computation (memory).
    Raises:
        ValueError: (on call) when the kernel's shape does not fit
            ``images`` (C channels, ``2*kh*kw*C`` filters).
    """

    def __init__(self, images, epsilon=5e-4, chunk=500):
        images = np.asarray(images)
        if images.ndim != 4 or images.dtype.kind != "f":
            raise ValueError(f"PatchWhitening: expected float images (N, H, W, C), got "
                             f"{images.dtype} {images.shape}")
        if not float(epsilon) >= 0:
            raise ValueError(f"PatchWhitening: `epsilon` must be >= 0, got {epsilon!r}")
        self.images, self.epsilon, self.chunk = images, float(epsilon), int(chunk)

    def moments(self, kh, kw):
        """``S`` (float64, (kh*kw*C, kh*kw*C)) of the images' patches."""
        x = self.images
        n, h, w, c = x.shape
        d = kh * kw * c
        total, count = np.zeros((d, d)), 0
        for start in range(0, n, self.chunk):
            part = x[start:start + self.chunk].astype(np.float64)
            patches = np.lib.stride_tricks.sliding_window_view(part, (kh, kw), axis=(1, 2))
            # (b, h', w', C, kh, kw) -> (b*h'*w', kh, kw, C)
            flat = patches.transpose(0, 1, 2, 4, 5, 3).reshape(-1, d)
            total += flat.T @ flat
            count += len(flat)
        return total / count

    def __call__(self, shape, dtype="float32"):
        shape = tuple(int(d) for d in shape)
        c = self.images.shape[-1]
        if len(shape) != 4 or shape[2] != c or shape[3] != 2 * shape[0] * shape[1] * c:
            raise ValueError(f"PatchWhitening: a kernel for {c}-channel images must have shape "
                             f"(kh, kw, {c}, 2*kh*kw*{c}), got {shape}")
        kh, kw = shape[:2]
        eigenvalues, eigenvectors = np.linalg.eigh(self.moments(kh, kw))
        order = np.argsort(eigenvalues)[::-1]
        filters = eigenvectors[:, order] / np.sqrt(eigenvalues[order] + self.epsilon)
        kernel = filters.reshape(kh, kw, c, -1)
        return np.concatenate([kernel, -kernel], axis=-1).astype(dtype)


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
