"""Metrics with Keras's names (``keras.metrics``).

A metric here is a function ``(y_true, y_pred) -> per-sample float32
values``, computed with pyresnet ops inside the train/test step; the
training loop averages them over the samples of an epoch (which is what
Keras's stateful mean metrics report).
"""
from . import losses, ops


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
    return ops.categorical_accuracy(y_true, y_pred)


class MeanMetricWrapper:
    """A named per-sample metric function, as Keras's metric classes (whose
    running mean the training loop keeps).

    Args:
        fn: ``(y_true, y_pred) -> per-sample values``.
        name (str): the key in logs and history.
    """

    def __init__(self, fn, name):
        self.fn = fn
        self.name = name

    def __call__(self, y_true, y_pred):
        return self.fn(y_true, y_pred)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """:func:`sparse_categorical_accuracy` as a metric object."""

    def __init__(self, name="sparse_categorical_accuracy"):
        super().__init__(sparse_categorical_accuracy, name)


class CategoricalAccuracy(MeanMetricWrapper):
    """:func:`categorical_accuracy` as a metric object."""

    def __init__(self, name="categorical_accuracy"):
        super().__init__(categorical_accuracy, name)


def _accuracy_by_shape(y_true, y_pred):
    # Keras 3's rule: labels of lower rank, or a trailing axis of 1, are sparse.
    sparse = len(y_true.shape) < len(y_pred.shape) or y_true.shape[-1] == 1
    return (sparse_categorical_accuracy if sparse else categorical_accuracy)(y_true, y_pred)


_BY_NAME = {"sparse_categorical_accuracy": sparse_categorical_accuracy,
            "categorical_accuracy": categorical_accuracy}


def get(identifier, loss=None):
    """A :class:`MeanMetricWrapper` from a Keras name, a metric object or a
    function.  ``"accuracy"``/``"acc"`` resolve from the loss as Keras does:
    sparse categorical accuracy for ``SparseCategoricalCrossentropy``,
    categorical accuracy for ``CategoricalCrossentropy``, otherwise from the
    label and prediction shapes.

    Args:
        identifier: name, MeanMetricWrapper or ``(y_true, y_pred) -> values``.
        loss: the compiled :class:`pyresnet.losses.Loss` of the same output.
    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if isinstance(identifier, MeanMetricWrapper):
        return identifier
    if identifier in ("accuracy", "acc"):
        fn = sparse_categorical_accuracy if losses.is_sparse(loss) else \
            categorical_accuracy if losses.is_categorical(loss) else _accuracy_by_shape
        return MeanMetricWrapper(fn, identifier)
    if isinstance(identifier, str):
        if identifier not in _BY_NAME:
            raise ValueError(f"unknown metric {identifier!r}; known: "
                             f"{sorted(_BY_NAME) + ['accuracy', 'acc']}")
        return MeanMetricWrapper(_BY_NAME[identifier], identifier)
    if callable(identifier):
        return MeanMetricWrapper(identifier, getattr(identifier, "__name__", "metric"))
    raise TypeError(f"metric must be a name, a metric object or a function, got {identifier!r}")
