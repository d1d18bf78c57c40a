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
