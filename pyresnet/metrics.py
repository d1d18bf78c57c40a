"""Metrics with Keras 3's names and semantics (``keras.metrics``).

A metric object is stateful, as in Keras: its state lives in non-trainable
float32 Variables made with :meth:`Metric.add_variable`;
``update_state(...)`` accumulates a batch (with ops, so it runs eagerly and
inside a compiled step alike, the state updated in place), ``result()``
gives the current value as a float32 scalar Tensor and ``reset_state()``
starts again.  Calling a metric object updates it and returns
``result()``.  ``fit`` and ``evaluate`` reset ``model.metrics`` at the
start of every epoch and of every evaluation.

The functions (``sparse_categorical_accuracy``, ``mean_absolute_error``,
...) return per-sample float32 values; the mean metrics average them,
weighted by ``sample_weight`` when given (Keras's ``Mean`` rule:
``sum(v * w) / sum(w)``, the weights broadcast to the values).
"""
import numpy as np

from . import initializers, losses, ops
from .tensor import Tensor, Variable, convert_to_tensor
from .utils.masks import greater_equal_mask
from .utils.naming import to_snake_case


def _float(x):
    """``x`` as a float32 Tensor (integer, bool and bfloat16 Tensors cast,
    NumPy converted)."""
    if isinstance(x, Tensor):
        return x if x.dtype == "float32" else ops.cast(x, "float32")  # traced ones too
    return convert_to_tensor(np.asarray(x, np.float32))


def _abs(x):
    return ops.maximum(x, ops.negative(x))


# ---- per-sample metric functions ------------------------------------------------------

def sparse_categorical_accuracy(y_true, y_pred):
    """1.0 where ``argmax(y_pred) == y_true`` else 0.0.

    Args:
        y_true: int labels, ``(batch,)`` or ``(batch, 1)``.
        y_pred: float32 scores ``(batch, C)`` (logits or probabilities).
    Returns:
        float32 Tensor ``(batch,)``.
    """
    return ops.sparse_categorical_accuracy(losses.sparse_labels(y_true), y_pred)


def categorical_accuracy(y_true, y_pred):
    """1.0 where ``argmax(y_pred) == argmax(y_true)`` else 0.0.

    Args:
        y_true: float32 one-hot ``(batch, C)``.
        y_pred: float32 scores ``(batch, C)``.
    Returns:
        float32 Tensor ``(batch,)``.
    """
    return ops.categorical_accuracy(_float(y_true), y_pred)


def binary_accuracy(y_true, y_pred, threshold=0.5):
    """Per-sample mean over the last axis of 1.0 where ``(y_pred > threshold)``
    equals ``y_true`` (0/1 labels), as ``keras.metrics.binary_accuracy``.

    Args:
        y_true: 0/1 labels of ``y_pred``'s shape (ints or floats), or of a
            rank differing by a trailing axis of length 1
            (:func:`pyresnet.losses.align_ranks`).
        y_pred: float32 probabilities ``(batch, ..., d)`` (pass logits with
            ``threshold=0``).
    Returns:
        float32 Tensor ``(batch, ...)`` (the last axis averaged).
    Raises:
        ValueError: shapes that cannot be aligned (naming both).
    """
    y_true, y_pred = losses.align_ranks("binary_accuracy", y_true, y_pred)
    above = ops.subtract(1.0, greater_equal_mask(threshold, y_pred))  # y_pred > threshold
    hit = ops.subtract(1.0, _abs(ops.subtract(above, y_true)))
    return ops.mean(hit, axis=-1) if len(hit.shape) > 1 else hit


def accuracy(y_true, y_pred):
    """Per-sample mean over the last axis of 1.0 where ``y_pred == y_true``
    exactly (``keras.metrics.Accuracy``: predictions that are labels); ranks
    aligned as :func:`pyresnet.losses.align_ranks` (ValueError when they
    cannot be)."""
    y_true, y_pred = losses.align_ranks("accuracy", y_true, _float(y_pred))
    equal = ops.multiply(greater_equal_mask(y_true, y_pred), greater_equal_mask(y_pred, y_true))
    return ops.mean(equal, axis=-1) if len(equal.shape) > 1 else equal


def mean_absolute_error(y_true, y_pred):
    """Per-sample mean of ``|y_pred - y_true|`` over every axis but the
    first (for the usual ``(batch, d)`` targets Keras's mean over the last
    axis).  float32 Tensor ``(batch,)``.  Ranks aligned as
    :func:`pyresnet.losses.align_ranks` (ValueError when they cannot be)."""
    return losses.mean_absolute_error(y_true, y_pred)


def mean_absolute_percentage_error(y_true, y_pred):
    """Per-sample ``100 * mean(|y_true - y_pred| / max(|y_true|, 1e-7))``
    (see :func:`pyresnet.losses.mean_absolute_percentage_error`)."""
    return losses.mean_absolute_percentage_error(y_true, y_pred)


def mean_squared_error(y_true, y_pred):
    """Per-sample mean of ``(y_pred - y_true) ** 2`` (see
    :func:`pyresnet.losses.mean_squared_error`)."""
    return losses.mean_squared_error(y_true, y_pred)


def top_k_categorical_accuracy(y_true, y_pred, k=5):
    """1.0 where the true class (one-hot ``y_true``) is among the ``k``
    highest scores of ``y_pred`` (``(batch, C)``), else 0.0; float32
    ``(batch,)``.  The true class is in the top k when fewer than k scores
    exceed its score; a score equal to it counts against it (a tie at the
    k-th place is a miss, where ``tf.math.in_top_k`` may count it a hit)."""
    y_pred = _float(y_pred)
    classes = y_pred.shape[-1]
    true_score = ops.sum(ops.multiply(_float(y_true), y_pred), axis=-1, keepdims=True)
    at_most = ops.sum(greater_equal_mask(true_score, y_pred), axis=-1)  # scores <= the true one
    return greater_equal_mask(at_most, float(classes - k + 1))


# ---- metric objects ------------------------------------------------------------------

class Metric:
    """Base class of stateful metrics, as ``keras.metrics.Metric``.

    Subclass it: make state with :meth:`add_variable` in ``__init__``,
    accumulate in ``update_state(*args, sample_weight=None)`` (with ops and
    ``variable.assign_add``) and compute ``result()``; ``reset_state`` puts
    every variable back to its initial value.

    Args:
        name (str): the key in logs and history (default: snake_case of the
            class name).
        dtype: only None/``"float32"``.
    Raises:
        ValueError: for another dtype.
    """

    def __init__(self, name=None, dtype=None):
        if dtype not in (None, "float32"):
            raise ValueError(f"{type(self).__name__}: only dtype='float32' is supported, "
                             f"got {dtype!r}")
        self.name = name or to_snake_case(type(self).__name__)
        self._variables, self._initial = [], []

    def add_variable(self, shape=(), initializer="zeros", dtype=None, aggregation="sum",
                     name=None):
        """A non-trainable float32 state Variable of ``shape`` (``initializer``:
        a Keras name or a callable), tracked for ``reset_state``."""
        if dtype not in (None, "float32"):
            raise ValueError(f'Metric "{self.name}": state variables are float32, got {dtype!r}')
        value = np.asarray(initializers.get(initializer)(tuple(shape), "float32"), np.float32)
        variable = Variable(value, trainable=False, name=name or f"variable_{len(self._variables)}")
        variable.path = f"{self.name}/{variable.name}"
        self._variables.append(variable)
        self._initial.append(value.copy())
        return variable

    @property
    def variables(self):
        """The state Variables, in creation order."""
        return list(self._variables)

    def update_state(self, *args, **kwargs):
        """Accumulate a batch (override it)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement update_state()")

    def result(self):
        """The current value (override it)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement result()")

    def reset_state(self):
        """Put every state variable back to its initial value."""
        for variable, value in zip(self._variables, self._initial):
            variable.assign(value)

    reset_states = reset_state  # the Keras 2 name, still used by guides

    def __call__(self, *args, **kwargs):
        """``update_state(*args, **kwargs)``, then ``result()``."""
        self.update_state(*args, **kwargs)
        return self.result()

    def get_config(self):
        """``{"name", "dtype"}`` (subclasses add their arguments)."""
        return {"name": self.name, "dtype": "float32"}

    @classmethod
    def from_config(cls, config):
        """A new metric from ``get_config()``'s dict."""
        return cls(**config)

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}>"


class Mean(Metric):
    """The (weighted) mean of the values seen, as ``keras.metrics.Mean``:
    ``total = sum(values * sample_weight)``, ``count = sum(sample_weight)``
    (1 per value without weights), ``result = total / count`` (0 before any
    update).

    ``update_state(values, sample_weight=None)``: values of any shape (a
    scalar counts once); ``sample_weight`` broadcasts to them (a
    ``(batch, 1)`` weight for ``(batch,)`` values is squeezed, as Keras).
    """

    def __init__(self, name="mean", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable((), "zeros", name="total")
        self.count = self.add_variable((), "zeros", name="count")

    def update_state(self, values, sample_weight=None):
        values = _float(values)
        if sample_weight is None:
            weights = ops.ones_like(values)
        else:
            weights = _float(sample_weight)
            if len(weights.shape) == len(values.shape) + 1 and weights.shape[-1] == 1:
                weights = ops.reshape(weights, ops.shape(weights)[:-1])
            while len(weights.shape) < len(values.shape):  # (batch,) weights for (batch, d)
                weights = ops.reshape(weights, ops.shape(weights) + (1,))
            weights = ops.multiply(ops.ones_like(values), weights)
            values = ops.multiply(values, weights)
        self.total.assign_add(ops.sum(values))
        self.count.assign_add(ops.sum(weights))

    def result(self):
        # count + (count == 0) avoids 0/0 before the first update: the result is 0 then.
        return ops.divide(self.total, ops.add(self.count, greater_equal_mask(0.0, self.count)))


class Sum(Metric):
    """The (weighted) sum of the values seen (``keras.metrics.Sum``)."""

    def __init__(self, name="sum", dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable((), "zeros", name="total")

    def update_state(self, values, sample_weight=None):
        values = _float(values)
        if sample_weight is not None:
            values = ops.multiply(values, _float(sample_weight))
        self.total.assign_add(ops.sum(values))

    def result(self):
        return ops.add(self.total, 0.0)


class MeanMetricWrapper(Mean):
    """The mean of a per-sample function ``fn(y_true, y_pred, **kwargs)``
    (``keras.metrics.MeanMetricWrapper``): ``update_state(y_true, y_pred,
    sample_weight=None)``.

    Args:
        fn: ``(y_true, y_pred, **kwargs) -> per-sample float32 values``.
        name (str): the key in logs and history.
        **kwargs: passed to ``fn`` (e.g. ``threshold``, ``k``).
    """

    def __init__(self, fn, name=None, dtype=None, **kwargs):
        super().__init__(name=name or getattr(fn, "__name__", "metric"), dtype=dtype)
        self.fn = fn
        self._fn_kwargs = kwargs

    def values(self, y_true, y_pred):
        """The per-sample values of a batch (no state change)."""
        return self.fn(y_true, y_pred, **self._fn_kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        super().update_state(self.values(y_true, y_pred), sample_weight=sample_weight)

    def get_config(self):
        return {**super().get_config(), **self._fn_kwargs}


def _wrapper_init(fn, default_name, **defaults):
    """The ``__init__`` of a MeanMetricWrapper subclass for ``fn`` with Keras's
    default name and arguments (``defaults``, passed to ``fn``)."""
    params = "".join(f", {k}={v!r}" for k, v in defaults.items())

    def __init__(self, name=default_name, dtype=None, **kwargs):
        unknown = set(kwargs) - set(defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected arguments {sorted(unknown)}")
        MeanMetricWrapper.__init__(self, fn, name=name, dtype=dtype, **{**defaults, **kwargs})

    __init__.__doc__ = f"Args: name={default_name!r}, dtype=None{params}."
    return __init__


class Accuracy(MeanMetricWrapper):
    """How often predictions equal labels exactly (``keras.metrics.Accuracy``);
    see :func:`accuracy`."""
    __init__ = _wrapper_init(accuracy, "accuracy")


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """Mean of :func:`sparse_categorical_accuracy` (integer labels)."""
    __init__ = _wrapper_init(sparse_categorical_accuracy, "sparse_categorical_accuracy")


class CategoricalAccuracy(MeanMetricWrapper):
    """Mean of :func:`categorical_accuracy` (one-hot targets)."""
    __init__ = _wrapper_init(categorical_accuracy, "categorical_accuracy")


class BinaryAccuracy(MeanMetricWrapper):
    """Mean of :func:`binary_accuracy`; ``threshold`` (default 0.5)
    separates the predicted 0s from the 1s."""
    __init__ = _wrapper_init(binary_accuracy, "binary_accuracy", threshold=0.5)


class MeanAbsoluteError(MeanMetricWrapper):
    """Mean of :func:`mean_absolute_error` (``keras.metrics.MeanAbsoluteError``)."""
    __init__ = _wrapper_init(mean_absolute_error, "mean_absolute_error")


class MeanAbsolutePercentageError(MeanMetricWrapper):
    """Mean of :func:`mean_absolute_percentage_error`, in percent
    (``keras.metrics.MeanAbsolutePercentageError``)."""
    __init__ = _wrapper_init(mean_absolute_percentage_error, "mean_absolute_percentage_error")


class MeanSquaredError(MeanMetricWrapper):
    """Mean of :func:`mean_squared_error` (``keras.metrics.MeanSquaredError``)."""
    __init__ = _wrapper_init(mean_squared_error, "mean_squared_error")


class TopKCategoricalAccuracy(MeanMetricWrapper):
    """Mean of :func:`top_k_categorical_accuracy` with ``k`` (default 5)."""
    __init__ = _wrapper_init(top_k_categorical_accuracy, "top_k_categorical_accuracy", k=5)


class CompileMetrics(Metric):
    """The metrics given to ``Model.compile``, as one metric object named
    ``compile_metrics`` (Keras 3): ``update_state(y_true, y_pred,
    sample_weight=None)`` updates each on its output; ``result()`` is the
    dict ``{key: value}`` (``fit`` flattens nested result dicts into its
    logs).

    Args:
        entries: list of ``(key, output index, metric object, weighted)``:
            ``weighted`` metrics (``compile(weighted_metrics=)``) get the
            sample weights, the others not, as in Keras.
    """

    def __init__(self, entries, name="compile_metrics"):
        super().__init__(name=name)
        self.entries = list(entries)

    @property
    def variables(self):
        """The state Variables of every compiled metric, in entry order."""
        return [v for _, _, metric, _ in self.entries for v in metric.variables]

    def update_state(self, y_true, y_pred, sample_weight=None):
        from .utils import tree  # noqa: PLC0415
        ys, preds = tree.flatten(y_true), tree.flatten(y_pred)
        weights = tree.flatten(sample_weight) if sample_weight is not None else None
        for _, out, metric, weighted in self.entries:
            weight = None
            if weighted and weights is not None:
                weight = weights[out] if len(weights) > 1 else weights[0]
            metric.update_state(ys[out], preds[out], sample_weight=weight)

    def result(self):
        return {key: metric.result() for key, _, metric, _ in self.entries}

    def reset_state(self):
        for _, _, metric, _ in self.entries:
            metric.reset_state()


def _accuracy_by_shape(y_true, y_pred):
    # Keras 3's rule: one output unit is binary; labels of lower rank, or a
    # trailing axis of 1, are sparse; else one-hot.
    if len(y_pred.shape) >= 1 and y_pred.shape[-1] == 1:
        return binary_accuracy(y_true, y_pred)
    sparse = len(y_true.shape) < len(y_pred.shape) or y_true.shape[-1] == 1
    return (sparse_categorical_accuracy if sparse else categorical_accuracy)(y_true, y_pred)


_BY_NAME = {"sparse_categorical_accuracy": SparseCategoricalAccuracy,
            "categorical_accuracy": CategoricalAccuracy,
            "binary_accuracy": BinaryAccuracy,
            "top_k_categorical_accuracy": TopKCategoricalAccuracy,
            "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
            "mean_absolute_percentage_error": MeanAbsolutePercentageError,
            "mape": MeanAbsolutePercentageError,
            "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError}


def get(identifier, loss=None):
    """A new metric object from a Keras name, a Metric (returned as is) or a
    function ``(y_true, y_pred) -> per-sample values`` (wrapped in a
    :class:`MeanMetricWrapper` named after it).  ``"accuracy"``/``"acc"``
    resolve from the loss as Keras does: sparse categorical accuracy for
    ``SparseCategoricalCrossentropy``, categorical for
    ``CategoricalCrossentropy``, binary for ``BinaryCrossentropy``,
    otherwise from the label and prediction shapes.  A short name
    (``"mae"``) keeps it as the log key, as Keras.

    Args:
        identifier: name, Metric or function.
        loss: the compiled :class:`pyresnet.losses.Loss` of the same output.
    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if isinstance(identifier, Metric):
        return identifier
    if identifier in ("accuracy", "acc"):
        fn = sparse_categorical_accuracy if losses.is_sparse(loss) else \
            categorical_accuracy if losses.is_categorical(loss) else \
            binary_accuracy if losses.is_binary(loss) else _accuracy_by_shape
        return MeanMetricWrapper(fn, identifier)
    if isinstance(identifier, str):
        if identifier not in _BY_NAME:
            raise ValueError(f"unknown metric {identifier!r}; known: "
                             f"{sorted(_BY_NAME) + ['accuracy', 'acc']}")
        return _BY_NAME[identifier](name=identifier)
    if isinstance(identifier, type) and issubclass(identifier, Metric):
        return identifier()
    if callable(identifier):
        return MeanMetricWrapper(identifier, getattr(identifier, "__name__", "metric"))
    raise TypeError(f"metric must be a name, a Metric or a function, got {identifier!r}")


def serialize(metric):
    """A JSON-able description of a metric for ``model.save``: the Keras name
    or ``{"class_name", "config"}``.  Raises TypeError for what cannot be
    described (a wrapped user function)."""
    if isinstance(metric, str) or metric is None:
        return metric
    cls = type(metric)
    if cls.__name__ in _CLASSES and _CLASSES[cls.__name__] is cls:
        return {"class_name": cls.__name__, "config": metric.get_config()}
    raise TypeError(f"metric {metric!r} cannot be saved")


_CLASSES = {c.__name__: c for c in (Mean, Sum, Accuracy, SparseCategoricalAccuracy,
                                    CategoricalAccuracy, BinaryAccuracy, MeanAbsoluteError,
                                    MeanAbsolutePercentageError, MeanSquaredError,
                                    TopKCategoricalAccuracy)}


def deserialize(data):
    """The inverse of :func:`serialize`.  Raises ValueError for an unknown class."""
    if isinstance(data, dict) and "class_name" in data:
        if data["class_name"] not in _CLASSES:
            raise ValueError(f"unknown saved metric class {data['class_name']!r}")
        return _CLASSES[data["class_name"]].from_config(data["config"])
    return data
