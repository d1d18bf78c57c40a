"""Activation functions with Keras names (``keras.activations``), built from
pyresnet ops so they trace and differentiate like any op."""
from . import ops


def relu(x):
    """max(x, 0); float32 Tensor of x's shape."""
    return ops.relu(x)


def softmax(x, axis=-1):
    """Softmax along ``axis`` (default the last); float32 Tensor of x's shape."""
    return ops.softmax(x, axis=axis)


def linear(x):
    """The identity (Keras's ``activation=None``)."""
    return x


def sigmoid(x):
    """``1 / (1 + exp(-x))`` (``keras.activations.sigmoid``)."""
    return ops.sigmoid(x)


def tanh(x):
    """Hyperbolic tangent (``keras.activations.tanh``)."""
    return ops.tanh(x)


def gelu(x, approximate=False):
    """GELU (``keras.activations.gelu``: exact erf form by default, unlike
    ``keras.ops.gelu``; Hendrycks & Gimpel 2016)."""
    return ops.gelu(x, approximate=approximate)


def silu(x):
    """``x * sigmoid(x)`` (``keras.activations.silu``)."""
    return ops.silu(x)


def swish(x):
    """``x * sigmoid(x)`` (``keras.activations.swish``, the same as silu)."""
    return ops.silu(x)


def softplus(x):
    """``log(1 + exp(x))`` (``keras.activations.softplus``)."""
    return ops.softplus(x)


_BY_NAME = {"relu": relu, "softmax": softmax, "linear": linear, "sigmoid": sigmoid,
            "tanh": tanh, "gelu": gelu, "silu": silu, "swish": swish, "softplus": softplus}


def get(identifier):
    """An activation from a Keras name, ``None`` (linear) or a callable
    ``Tensor -> Tensor`` (returned as is).  A name that is not one of
    pyresnet's activations is looked up, as in Keras, among the custom
    objects (:func:`pyresnet.saving.get_custom_objects`, registered
    functions by their ``"package>name"`` key, an enclosing
    ``custom_object_scope``).

    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    if isinstance(identifier, str):
        if identifier in _BY_NAME:
            return _BY_NAME[identifier]
        from .saving.object_registration import get_registered_object  # noqa: PLC0415
        custom = get_registered_object(identifier, identifier, module="")
        if custom is not None and callable(custom) and not isinstance(custom, type):
            return custom  # a custom activation by name, as Keras (custom objects)
        raise ValueError(f"unknown activation {identifier!r}; known: {sorted(_BY_NAME)} and "
                         "functions in pyresnet.saving.get_custom_objects() or a "
                         "custom_object_scope")
    raise TypeError(f"activation must be a name, None or a callable, got {identifier!r}")


def serialize(fn):
    """The Keras name of an activation function (for ``get_config``)."""
    return fn.__name__
