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
