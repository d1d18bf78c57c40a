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


def ones_like(x):
    """float32 ones of x's shape."""
    return call("ones_like", x)


def zeros_like(x):
    """float32 zeros of x's shape."""
    return call("zeros_like", x)


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


def greater_equal(x1, x2):
    """``x1 >= x2`` as a float32 mask (1.0 / 0.0), NumPy broadcasting.

    Unlike ``keras.ops.greater_equal`` the result is float32, not bool (the
    core has no bool dtype).  Not differentiable.
    """
    return call("greater_equal", x1, x2)


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
