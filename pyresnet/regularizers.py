"""Weight regularizers with Keras's names (``keras.regularizers``).

A regularizer maps a weight to a float32 scalar penalty, computed with
pyresnet ops so that it differentiates and traces.  Given to a layer
(``Dense(..., kernel_regularizer=regularizers.l2(1e-4))``), the penalty of
the weight's current value is part of ``layer.losses`` and so of the loss
that ``fit`` minimises.  Formulas as Keras: ``L1``: ``l1 * sum(|w|)``;
``L2``: ``l2 * sum(w ** 2)`` (no factor 1/2).
"""
from . import ops


def _abs(x):
    return ops.maximum(x, ops.negative(x))


def _factor(value, name, cls):
    value = float(value)
    if not value >= 0.0:  # also refuses NaN
        raise ValueError(f"{cls}: `{name}` must be a non-negative number, got {value!r}")
    return value


class Regularizer:
    """Base class: ``__call__(weight) -> float32 scalar Tensor``;
    ``get_config``/``from_config`` for saving."""

    def __call__(self, x):
        return ops.scale(ops.sum(x), 0.0)

    def get_config(self):
        """The constructor arguments as a dict."""
        return {}

    @classmethod
    def from_config(cls, config):
        """A new regularizer from ``get_config()``'s dict."""
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class L1L2(Regularizer):
    """``l1 * sum(|w|) + l2 * sum(w ** 2)`` (``keras.regularizers.L1L2``).

    Args:
        l1, l2 (float): non-negative factors (default 0).
    Raises:
        ValueError: for a negative or NaN factor.
    """

    def __init__(self, l1=0.0, l2=0.0):
        self.l1 = _factor(l1, "l1", type(self).__name__)
        self.l2 = _factor(l2, "l2", type(self).__name__)

    def __call__(self, x):
        penalty = None
        if self.l1:
            penalty = ops.scale(ops.sum(_abs(x)), self.l1)
        if self.l2:
            term = ops.scale(ops.sum(ops.square(x)), self.l2)
            penalty = term if penalty is None else ops.add(penalty, term)
        return penalty if penalty is not None else super().__call__(x)

    def get_config(self):
        return {"l1": self.l1, "l2": self.l2}


class L1(L1L2):
    """``l1 * sum(|w|)`` (``keras.regularizers.L1``); default ``l1=0.01``."""

    def __init__(self, l1=0.01):
        super().__init__(l1=l1)

    def get_config(self):
        return {"l1": self.l1}


class L2(L1L2):
    """``l2 * sum(w ** 2)`` (``keras.regularizers.L2``); default ``l2=0.01``."""

    def __init__(self, l2=0.01):
        super().__init__(l2=l2)

    def get_config(self):
        return {"l2": self.l2}


l1 = L1
l2 = L2


def l1_l2(l1=0.01, l2=0.01):  # noqa: F811 (Keras's function of the same names)
    """``L1L2(l1, l2)`` with Keras's defaults of this function (0.01 each)."""
    return L1L2(l1=l1, l2=l2)


_BY_NAME = {"l1": L1, "l2": L2, "l1_l2": l1_l2, "L1": L1, "L2": L2, "L1L2": L1L2}
_CLASSES = {"L1": L1, "L2": L2, "L1L2": L1L2}


def get(identifier):
    """A regularizer from None, a name (``"l1"``, ``"l2"``, ``"l1_l2"``, with
    Keras's defaults), ``{"class_name", "config"}``, a Regularizer or a
    callable ``weight -> scalar`` (returned as is).

    Raises:
        ValueError: for an unknown name or class; TypeError for anything else.
    """
    if identifier is None or isinstance(identifier, Regularizer):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _BY_NAME:
            raise ValueError(f"unknown regularizer {identifier!r}; known: {sorted(_BY_NAME)}")
        return _BY_NAME[identifier]()
    if isinstance(identifier, dict) and "class_name" in identifier:
        if identifier["class_name"] not in _CLASSES:
            raise ValueError(f"unknown regularizer class {identifier['class_name']!r}")
        return _CLASSES[identifier["class_name"]].from_config(identifier.get("config", {}))
    if callable(identifier):
        return identifier
    raise TypeError(f"regularizer must be a name, a Regularizer or a callable, got "
                    f"{identifier!r}")


def serialize(regularizer):
    """``{"class_name", "config"}`` of a built-in regularizer."""
    return {"class_name": type(regularizer).__name__, "config": regularizer.get_config()}
