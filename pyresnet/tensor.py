"""Tensors, Variables and conversion helpers (the Python face of csrc/tensor.c)."""
import itertools

import numpy as np

from ._loader import _C

Tensor = _C.Tensor

_variable_ids = itertools.count()
# Callables told about every new Variable (pyresnet.compile checks that no
# variable is created on a later trace than the first).
_variable_observers = []


def convert_to_tensor(value, dtype=None):
    """Return ``value`` as a :class:`Tensor` (no copy when it already is one).

    Args:
        value: a Tensor, NumPy array, nested list or Python number.
        dtype: optional ``"float32"``, ``"int32"``, ``"int64"`` or ``"uint8"``;
            NumPy converts the data first when given.
    Returns:
        Tensor: floating data as float32, integer data as it comes.
    Raises:
        TypeError: for objects or dtypes a Tensor cannot hold.
    """
    if isinstance(value, Tensor) and (dtype is None or value.dtype == dtype):
        return value
    if dtype is not None:
        value = np.asarray(value, dtype=dtype)
    return Tensor(value)


class Variable(Tensor):
    """A persistent, mutable tensor: a weight, an optimizer slot, a BN moving
    statistic or an RNG state (as ``tf.Variable`` / ``keras.Variable``).

    Compiled graphs refer to Variables, never copy them, so eager and compiled
    calls see the same values.  Trainable Variables are watched by every
    :class:`GradientTape` automatically.

    Args:
        initial_value: array-like (copied) or a Tensor.
        trainable (bool): watched by tapes and listed in ``trainable_weights``.
        name (str): for summaries and error messages.
    Raises:
        TypeError: when ``initial_value`` cannot become a Tensor.
    """

    def __init__(self, initial_value, trainable=True, name=None):
        self._trainable = bool(trainable)
        self.name = name if name is not None else f"variable_{next(_variable_ids)}"
        for observe in _variable_observers:
            observe(self)

    def __new__(cls, initial_value, trainable=True, name=None):
        if isinstance(initial_value, Tensor) and initial_value.is_symbolic:
            raise TypeError(
                "Variable(): the initial value is a symbolic tensor of a function being "
                "traced by pyresnet.compile; create variables outside the compiled "
                "function or on its first call from concrete values"
            )
        return super().__new__(cls, initial_value)

    @property
    def trainable(self):
        """bool: whether tapes watch it and optimizers update it."""
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        self._trainable = bool(value)

    def assign(self, value):
        """Write ``value`` into the variable in place (same shape; broadcasting
        a scalar is allowed).  Returns self.  Raises ValueError on a shape
        mismatch and TypeError on a dtype it cannot hold; the variable is
        unchanged then.  Traced when called inside a compiled function."""
        _C.call("assign", self, value)
        return self

    def assign_add(self, value):
        """``self += value`` in place (traced under compile).  Returns self."""
        _C.call("assign_add", self, value)
        return self

    def assign_sub(self, value):
        """``self -= value`` in place (traced under compile).  Returns self."""
        _C.call("assign_sub", self, value)
        return self

    def __repr__(self):
        return f"<Variable '{self.name}' shape={self.shape} dtype={self.dtype}>"


# ---- Tensor methods written in Python ---------------------------------------------------------
# Installed on the C type by _C._set_tensor_methods.  Operators are C slots calling registry
# ops (+ - * / ** @, comparisons giving bool tensors, abs, unary minus); the slots of
# indexing, iteration and & | ^ ~ call the dunder functions below (operands in the order
# Python gives them); the rest are the methods NumPy users reach for.

def _shape_args(shape):
    return shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


def _no_out(name, out):
    if out is not None:
        raise TypeError(f"Tensor.{name}: out= is not supported (tensors are immutable values)")


def _tensor_getitem(self, key):
    """``x[key]``: ints, slices, ``...``, ``None`` and one integer array
    (``pyresnet.ops.getitem``)."""
    from .ops import getitem
    return getitem(self, key)


def _tensor_reshape(self, *shape):
    """``x.reshape(2, 3)`` or ``x.reshape((2, 3))`` (``pyresnet.ops.reshape``)."""
    from .ops import reshape
    return reshape(self, tuple(_shape_args(shape)))


def _tensor_transpose(self, *axes):
    """``x.transpose()`` reverses the axes; ``x.transpose(1, 0, 2)`` permutes them."""
    from .ops import transpose
    axes = _shape_args(axes)
    return transpose(self, tuple(axes) if axes else None)


def _reduction(name):
    def method(self, axis=None, keepdims=False, dtype=None, out=None, **kwargs):
        _no_out(name, out)
        from . import ops
        y = getattr(ops, name)(self, axis=axis, keepdims=keepdims)
        return y if dtype is None else ops.cast(y, dtype)
    method.__name__ = name
    method.__doc__ = (f"``pyresnet.ops.{name}(x, axis, keepdims)`` as a method (NumPy's "
                      f"``dtype`` casts the result; ``out`` is not supported).")
    return method


def _arg_reduction(name):
    def method(self, axis=None, keepdims=False, out=None):
        _no_out(name, out)
        from . import ops
        return getattr(ops, name)(self, axis=axis, keepdims=keepdims)
    method.__name__ = name
    method.__doc__ = f"``pyresnet.ops.{name}(x, axis, keepdims)`` as a method (int32 result)."
    return method


def _tensor_astype(self, dtype):
    """``x`` converted to ``dtype`` (``pyresnet.ops.cast``)."""
    from .ops import cast
    return cast(self, dtype)


def _tensor_iter(self):
    """Iterate over the first axis (``x[0], x[1], ...``), as NumPy; a symbolic
    tensor raises the tracing error (its length is not a Python int then)."""
    n = len(self)  # raises now (0-d, symbolic), not at the first next()
    return (self[i] for i in range(n))


def _logical(name):
    def method(x1, x2):
        from . import ops
        return getattr(ops, name)(x1, x2)
    method.__name__ = name
    method.__doc__ = (f"``pyresnet.ops.{name}`` (a bool tensor; operands of any dtype by "
                      "their truth value).")
    return method


def _tensor_invert(self):
    """``~x``: ``pyresnet.ops.logical_not`` (a bool tensor)."""
    from .ops import logical_not
    return logical_not(self)


def _tensor_format(self, format_spec):
    """``f"{x:.2f}"``: the value formatted as NumPy formats it (a scalar
    tensor as its Python number, as ``tf.Tensor`` and ``np.ndarray`` do; an
    empty spec gives ``str(x)``).  Raises TypeError for a spec NumPy refuses
    on an array of several elements, and the tracing error for a symbolic
    tensor (it has no value yet)."""
    if not format_spec:
        return str(self)
    value = np.asarray(self)
    return format(value.item() if value.ndim == 0 else value, format_spec)


_METHODS = {
    "__format__": _tensor_format,
    "__getitem__": _tensor_getitem,
    "__iter__": _tensor_iter,
    "__and__": _logical("logical_and"),
    "__or__": _logical("logical_or"),
    "__xor__": _logical("logical_xor"),
    "__invert__": _tensor_invert,
    "reshape": _tensor_reshape,
    "transpose": _tensor_transpose,
    "T": property(lambda self: _tensor_transpose(self), doc="The axes reversed (``x.T``)."),
    "sum": _reduction("sum"),
    "mean": _reduction("mean"),
    "max": _reduction("max"),
    "min": _reduction("min"),
    "argmax": _arg_reduction("argmax"),
    "argmin": _arg_reduction("argmin"),
    "astype": _tensor_astype,
}
_C._set_tensor_methods(_METHODS)
