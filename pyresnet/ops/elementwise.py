"""Elementwise ops (csrc/ops_elementwise.c)."""
from .._loader import _C

call = _C.call


def add(x, y):
    """x + y, float32, NumPy broadcasting."""
    return call("add", x, y)


def subtract(x, y):
    """x - y, float32, NumPy broadcasting."""
    return call("subtract", x, y)


def multiply(x, y):
    """x * y, float32, NumPy broadcasting."""
    return call("multiply", x, y)


def divide(x, y):
    """x / y, float32, NumPy broadcasting."""
    return call("divide", x, y)


def negative(x):
    """-x, float32."""
    return call("negative", x)


def scale(x, value):
    """x * value for a Python float ``value`` baked into the op."""
    return call("scale", x, value=float(value))


def relu(x):
    """max(x, 0), float32, same shape."""
    return call("relu", x)


def broadcast_to(x, shape):
    """Broadcast x to ``shape`` (NumPy rules)."""
    return call("broadcast_to", x, shape=tuple(shape))


def sum_to_shape(x, shape):
    """Sum x over broadcast dimensions down to ``shape`` (adjoint of broadcast_to)."""
    return call("sum_to_shape", x, shape=tuple(shape))


def maximum(x1, x2):
    """Elementwise ``max(x1, x2)``, float32, NumPy broadcasting (as ``keras.ops.maximum``).

    NaN propagates.  The gradient goes to ``x1`` where ``x1 >= x2`` (ties
    included, as TensorFlow) and to ``x2`` elsewhere.
    Raises ValueError for shapes that do not broadcast, TypeError for
    non-float32 tensors.
    """
    return call("maximum", x1, x2)


def minimum(x1, x2):
    """Elementwise ``min(x1, x2)``, float32, NumPy broadcasting (as ``keras.ops.minimum``).

    NaN propagates.  The gradient goes to ``x1`` where ``x1 <= x2`` (ties
    included) and to ``x2`` elsewhere.  Errors as :func:`maximum`.
    """
    return call("minimum", x1, x2)


def exp(x):
    """``e ** x``, float32, same shape.  Gradient ``exp(x) * g``."""
    return call("exp", x)


def log(x):
    """Natural logarithm, float32, same shape (-inf at 0, NaN below 0).
    Gradient ``g / x``."""
    return call("log", x)


def sqrt(x):
    """Square root, float32, same shape (NaN below 0).  Gradient ``g / (2 sqrt(x))``."""
    return call("sqrt", x)


def square(x):
    """``x * x``, float32, same shape.  Gradient ``2 x g``."""
    return call("square", x)


def clip(x, x_min, x_max):
    """Clip ``x`` to ``[x_min, x_max]`` (as ``keras.ops.clip`` / ``np.clip``).

    Args:
        x: float32 tensor.
        x_min, x_max (float): the bounds, Python numbers baked into the op;
            when ``x_min > x_max`` every element becomes ``x_max`` (NumPy).
    Returns:
        float32 tensor of x's shape.  The gradient passes where
        ``x_min <= x <= x_max`` and is 0 outside (``tf.clip_by_value``).
    Raises:
        TypeError: x is not float32 or a bound is not a number.
    """
    return call("clip", x, min=float(x_min), max=float(x_max))


def power(x1, x2):
    """``x1 ** x2`` elementwise, float32, NumPy broadcasting (``keras.ops.power``).

    C99 ``powf``: NaN for a negative base with a non-integer exponent.
    Gradients ``x2 * x1 ** (x2 - 1)`` and ``x1 ** x2 * log(x1)`` (0 where
    ``x1 <= 0``, as TensorFlow's pow).
    """
    return call("power", x1, x2)


def abs(x):  # noqa: A001 (the Keras name)
    """``|x|``, float32 (``keras.ops.abs``); gradient ``sign(x) * g``."""
    return call("abs", x)


absolute = abs


def sign(x):
    """-1, 0 or 1 by the sign of x, float32 (``keras.ops.sign``); gradient 0."""
    return call("sign", x)


def sigmoid(x):
    """``1 / (1 + exp(-x))``, float32 (``keras.ops.sigmoid``); gradient ``y (1 - y) g``."""
    return call("sigmoid", x)


def tanh(x):
    """Hyperbolic tangent, float32 (``keras.ops.tanh``); gradient ``(1 - y**2) g``."""
    return call("tanh", x)


def erf(x):
    """The error function, float32 (``keras.ops.erf``, C99 ``erff``)."""
    return call("erf", x)


def silu(x):
    """``x * sigmoid(x)`` (``keras.ops.silu``; Ramachandran et al. 2017 "swish",
    Elfwing et al. 2018 "SiLU"); a composition of registry ops."""
    return call("multiply", x, call("sigmoid", x))


swish = silu

_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2 = 0.7071067811865476


def gelu(x, approximate=True):
    """Gaussian error linear unit (``keras.ops.gelu``; Hendrycks & Gimpel
    2016, "Gaussian Error Linear Units", section 2).

    Args:
        approximate (bool): True (the ``keras.ops.gelu`` default):
            ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``; False:
            ``0.5 x (1 + erf(x / sqrt(2)))`` (``keras.activations.gelu``'s
            default).
    Returns:
        x's dtype (float32, or bfloat16 for the exact form) and shape.  The
        exact form is one fused op (``gelu``, its gradient ``gelu_backward``:
        one pass each, vectorized, absolute error ~1e-7; gradients of every
        order follow); the tanh form is a composition of registry ops.
    """
    if not approximate:
        return call("gelu", x)
    if approximate:
        x3 = call("multiply", call("square", x), x)
        inner = call("scale", call("add", x, call("scale", x3, value=0.044715)),
                     value=_SQRT_2_OVER_PI)
        t = call("tanh", inner)
    else:
        t = call("erf", call("scale", x, value=_INV_SQRT_2))
    return call("multiply", call("scale", x, value=0.5), call("add", t, 1.0))


def softplus(x):
    """``log(1 + exp(x))`` computed stably as ``relu(x) + log(1 + exp(-|x|))``
    (``keras.ops.softplus``), float32."""
    return call("add", call("relu", x),
                call("log", call("add", call("exp", call("negative", call("abs", x))), 1.0)))
