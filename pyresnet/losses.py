"""Losses with Keras's names, arguments and reduction (``keras.losses``).

A loss object maps ``(y_true, y_pred)`` to a float32 scalar: the per-sample
losses of :meth:`Loss.call` reduced with ``reduction``
(``"sum_over_batch_size"``, the default, is the mean over the batch).
Everything is computed with pyresnet ops, so losses differentiate and trace.
"""
import numpy as np

from . import ops
from .compile import name_scope
from .tensor import Tensor, convert_to_tensor

_REDUCTIONS = ("sum_over_batch_size", "sum", "none", None)


def sparse_labels(y_true):
    """Integer class labels as a Tensor: NumPy/list integers become int32
    (the label dtype of the ops), and so do uint8 and bool Tensors (eager or
    traced; Keras takes any integer labels); int32/int64 and float Tensors
    pass through (the ops refuse float labels by name)."""
    if isinstance(y_true, Tensor):
        return ops.cast(y_true, "int32") if y_true.dtype in ("uint8", "bool") else y_true
    y_true = np.asarray(y_true)
    return convert_to_tensor(y_true.astype(np.int32) if y_true.dtype.kind in "iu" else y_true)


def _check_smoothing(label_smoothing):
    ls = float(label_smoothing)
    if not 0.0 <= ls <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing!r}")
    return ls


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0):
    """Per-sample cross-entropy between integer labels and class scores
    (``keras.losses.sparse_categorical_crossentropy``).

    Args:
        y_true: int labels in [0, C), shape ``(batch,)`` or ``(batch, 1)``.
        y_pred: float32 ``(batch, C)``: logits if ``from_logits`` (a stable
            log-softmax inside), else probabilities (renormalised and clipped
            to [1e-7, 1 - 1e-7] as Keras).
        from_logits (bool): see above.
        label_smoothing (float): in [0, 1]; the loss against the smoothed
            target ``one_hot * (1 - ls) + ls / C`` (Szegedy et al. 2016,
            "Rethinking the Inception Architecture", section 7), computed as
            ``(1 - ls) * CE(label) + ls * CE(uniform)``.  Keras 3 offers it
            for the categorical loss only; here the sparse one has it too,
            with the categorical one's result.
    Returns:
        float32 Tensor ``(batch,)``: ``-log p[label]`` (smoothed: see above).
    Raises:
        ValueError/TypeError (from the op): on shape/dtype mismatches or a
            label out of range; ValueError for label_smoothing outside [0, 1].
    """
    ls = _check_smoothing(label_smoothing)
    loss = ops.sparse_categorical_crossentropy(sparse_labels(y_true), y_pred,
                                               from_logits=from_logits)
    if not ls:
        return loss
    uniform = ops.multiply(ops.ones_like(y_pred), 1.0 / y_pred.shape[-1])
    return ops.add(ops.multiply(loss, 1.0 - ls),
                   ops.multiply(ops.categorical_crossentropy(uniform, y_pred,
                                                             from_logits=from_logits), ls))


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0):
    """Per-sample cross-entropy between one-hot (or soft) targets and scores
    (``keras.losses.categorical_crossentropy``).

    Args:
        y_true: float32 ``(batch, C)``, rows summing to 1 (integer one-hot
            rows, uint8 included, are cast to float32).
        y_pred: float32 ``(batch, C)``: logits if ``from_logits``, else
            probabilities (renormalised and clipped as Keras).
        label_smoothing (float): in [0, 1]; the targets become
            ``y_true * (1 - ls) + ls / C`` first, as Keras does.
    Returns:
        float32 Tensor ``(batch,)``: ``-sum_c y_true[c] * log p[c]``.
    Raises:
        ValueError/TypeError (from the op): on shape/dtype mismatches;
            ValueError for label_smoothing outside [0, 1].
    """
    ls = _check_smoothing(label_smoothing)
    y_true = _float(y_true)  # integer one-hot targets (uint8, ...) as Keras casts them
    if ls:
        y_true = ops.add(ops.multiply(y_true, 1.0 - ls), ls / y_pred.shape[-1])
    return ops.categorical_crossentropy(y_true, y_pred, from_logits=from_logits)


def align_ranks(name, y_true, y_pred):
    """``(y_true, y_pred)`` as float32 Tensors of one shape, their ranks
    aligned as Keras 3 aligns them before an elementwise loss or metric
    (``squeeze_or_expand_to_same_rank`` in ``keras/src/losses/loss.py``):
    when the ranks differ by one and the longer one's last axis has length
    1, a rank-1 tensor gets a trailing axis (``(N,)`` labels for ``(N, 1)``
    predictions), any other loses that axis.  So ``(N,)`` against
    ``(N, 1)`` compares N pairs, never an ``(N, N)`` broadcast.  Works on
    traced tensors (unknown sizes stay unknown).

    Args:
        name (str): the loss or metric, for messages.
        y_true: targets (Tensor, NumPy array or numbers; ints become float32).
        y_pred: float32 predictions.
    Returns:
        (y_true, y_pred), float32 Tensors.
    Raises:
        ValueError: the shapes cannot be aligned (ranks that differ
            otherwise, or sizes that differ where both are known); the
            message names both shapes.
        TypeError: a symbolic target that is not float32.
    """
    y_true, y_pred = _float(y_true), convert_to_tensor(y_pred)
    given = tuple(y_true.shape), tuple(y_pred.shape)

    def drop_last(x):
        return ops.reshape(x, ops.shape(x)[:-1])

    if y_true.ndim == y_pred.ndim + 1 and y_true.shape[-1] == 1:
        if y_pred.ndim == 1:
            y_pred = ops.expand_dims(y_pred, -1)
        else:
            y_true = drop_last(y_true)
    elif y_pred.ndim == y_true.ndim + 1 and y_pred.shape[-1] == 1:
        if y_true.ndim == 1:
            y_true = ops.expand_dims(y_true, -1)
        else:
            y_pred = drop_last(y_pred)
    known_differ = any(t is not None and p is not None and t != p
                       for t, p in zip(y_true.shape, y_pred.shape))
    if y_true.ndim != y_pred.ndim or known_differ:
        raise ValueError(f"{name}: y_true and y_pred must have the same shape (or ranks that "
                         f"differ by a trailing axis of length 1), got y_true of shape "
                         f"{given[0]} and y_pred of shape {given[1]}")
    return y_true, y_pred


def mean_squared_error(y_true, y_pred):
    """Per-sample mean squared error (``keras.losses.mean_squared_error``).

    Args:
        y_true, y_pred: float32 of the same shape ``(batch, d1, ...)``, or
            ranks differing by a trailing axis of length 1 (see
            :func:`align_ranks`: ``(batch,)`` against ``(batch, 1)``).
    Returns:
        float32 Tensor ``(batch,)``: the mean over all axes but the first of
        ``(y_true - y_pred) ** 2``.
    Raises:
        ValueError: shapes that cannot be aligned (naming both);
            TypeError (from the ops) on dtype mismatches.
    """
    y_true, y_pred = align_ranks("mean_squared_error", y_true, y_pred)
    diff = ops.square(ops.subtract(y_pred, y_true))
    return ops.mean(diff, axis=tuple(range(1, diff.ndim))) if diff.ndim > 1 else diff


def _float(x):
    """``x`` as float32: integer (int32, int64, uint8), bool and bfloat16
    targets are cast (``ops.cast``, so traced ones too), as Keras converts
    ``y_true`` to ``y_pred``'s dtype; NumPy and numbers become float32."""
    if isinstance(x, Tensor):
        return x if x.dtype == "float32" else ops.cast(x, "float32")
    return convert_to_tensor(np.asarray(x, np.float32))


def _abs(x):
    return ops.maximum(x, ops.negative(x))


def mean_absolute_error(y_true, y_pred):
    """Per-sample mean absolute error (``keras.losses.mean_absolute_error``).

    Args:
        y_true, y_pred: float32 of the same shape ``(batch, d1, ...)``, or
            ranks differing by a trailing axis of length 1 (see
            :func:`align_ranks`).
    Returns:
        float32 Tensor ``(batch,)``: the mean over all axes but the first of
        ``|y_true - y_pred|`` (Keras averages the last axis only; for the
        usual ``(batch, d)`` targets the two agree, and so do the reduced
        losses for any shape).
    Raises:
        ValueError: shapes that cannot be aligned (naming both).
    """
    y_true, y_pred = align_ranks("mean_absolute_error", y_true, y_pred)
    diff = _abs(ops.subtract(y_pred, y_true))
    return ops.mean(diff, axis=tuple(range(1, diff.ndim))) if diff.ndim > 1 else diff


def mean_absolute_percentage_error(y_true, y_pred):
    """Per-sample mean absolute percentage error
    (``keras.losses.mean_absolute_percentage_error``):
    ``100 * mean(|y_true - y_pred| / max(|y_true|, 1e-7))``, the mean over
    all axes but the first (Keras: the last; the same for ``(batch, d)``),
    ``1e-7`` being Keras's ``backend.epsilon()``.

    Args:
        y_true, y_pred: float32 (integer targets are cast) of one shape, or
            ranks differing by a trailing axis of length 1 (:func:`align_ranks`).
    Returns:
        float32 Tensor ``(batch,)``, in percent.
    Raises:
        ValueError: shapes that cannot be aligned (naming both).
    """
    y_true, y_pred = align_ranks("mean_absolute_percentage_error", y_true, y_pred)
    diff = ops.divide(_abs(ops.subtract(y_true, y_pred)), ops.maximum(_abs(y_true), 1e-7))
    diff = ops.multiply(diff, 100.0)
    return ops.mean(diff, axis=tuple(range(1, diff.ndim))) if diff.ndim > 1 else diff


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Binary cross-entropy averaged over the last axis
    (``keras.losses.binary_crossentropy``).

    With ``z`` the (smoothed) target and ``p`` the probability:
    ``-(z log p + (1 - z) log(1 - p))``, ``p`` clipped to
    ``[1e-7, 1 - 1e-7]`` as Keras.  From logits ``x`` it is computed stably as
    ``max(x, 0) - x z + log(1 + exp(-|x|))`` (TensorFlow's
    ``sigmoid_cross_entropy_with_logits``).

    Args:
        y_true: targets in [0, 1] of ``y_pred``'s shape (ints or floats), or
            of a rank differing by a trailing axis of length 1 (see
            :func:`align_ranks`: ``(batch,)`` labels for ``(batch, 1)``).
        y_pred: float32 ``(batch, ..., d)``: probabilities, or logits with
            ``from_logits=True``.
        from_logits (bool): see above.
        label_smoothing (float): in [0, 1]: ``z = y (1 - s) + s / 2``.
        axis: only -1.
    Returns:
        float32 Tensor ``(batch, ...)`` (the last axis averaged).
    Raises:
        ValueError: for another axis, a smoothing outside [0, 1], or shapes
            that cannot be aligned (naming both); TypeError (from the ops)
            on dtype mismatches.
    """
    if axis != -1:
        raise ValueError(f"binary_crossentropy: only axis=-1 is supported, got {axis!r}")
    ls = _check_smoothing(label_smoothing)
    z, y_pred = align_ranks("binary_crossentropy", y_true, y_pred)
    if ls:
        z = ops.add(ops.scale(z, 1.0 - ls), 0.5 * ls)
    if from_logits:
        x = y_pred
        values = ops.add(ops.subtract(ops.relu(x), ops.multiply(x, z)),
                         ops.log(ops.add(ops.exp(ops.negative(_abs(x))), 1.0)))
    else:
        p = ops.clip(y_pred, 1e-7, 1.0 - 1e-7)
        values = ops.negative(ops.add(ops.multiply(z, ops.log(p)),
                                      ops.multiply(ops.subtract(1.0, z),
                                                   ops.log(ops.subtract(1.0, p)))))
    return ops.mean(values, axis=-1) if values.ndim > 1 else values


def _weighted(values, sample_weight):
    """``values * sample_weight`` with Keras's broadcasting: a ``(batch, 1)``
    weight for ``(batch,)`` values is squeezed, a ``(batch,)`` weight for
    ``(batch, ...)`` values gets trailing axes."""
    weights = _float(sample_weight)
    if weights.ndim == values.ndim + 1 and weights.shape[-1] == 1:
        weights = ops.reshape(weights, ops.shape(weights)[:-1])
    while weights.ndim < values.ndim:
        weights = ops.reshape(weights, ops.shape(weights) + (1,))
    return ops.multiply(values, weights)


class Loss:
    """Base class: subclasses implement ``call(y_true, y_pred)`` returning
    per-sample losses; calling the object reduces them.

    Args:
        name (str): the loss's name.
        reduction (str): ``"sum_over_batch_size"`` (mean), ``"sum"`` or
            ``"none"``/None (per-sample values).
    Raises:
        ValueError: for an unknown reduction.
    """

    def __init__(self, name=None, reduction="sum_over_batch_size"):
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {_REDUCTIONS}, "
                             f"got {reduction!r}")
        self.name = name
        self.reduction = reduction

    def call(self, y_true, y_pred):
        """Per-sample losses, float32 ``(batch,)`` (override it)."""
        raise NotImplementedError

    def __call__(self, y_true, y_pred, sample_weight=None):
        """The reduced loss: a float32 scalar Tensor (``(batch,)`` for
        reduction ``"none"``).  ``sample_weight`` (``(batch,)`` or
        ``(batch, 1)``, or the per-sample values' shape) multiplies the
        per-sample losses before the reduction; ``"sum_over_batch_size"``
        still divides by their number, as Keras."""
        with name_scope(self.name or "loss"):  # (traced: the loss nodes' scope)
            values = self.call(y_true, y_pred)
            if sample_weight is not None:
                values = _weighted(values, sample_weight)
            if self.reduction == "sum_over_batch_size":
                return ops.mean(values)
            if self.reduction == "sum":
                return ops.sum(values)
            return values

    def get_config(self):
        """The constructor arguments as a dict."""
        return {"name": self.name, "reduction": self.reduction}

    @classmethod
    def from_config(cls, config):
        """A new loss from ``get_config()``'s dict."""
        return cls(**config)


class LossFunctionWrapper(Loss):
    """A loss object around a function ``fn(y_true, y_pred, **kwargs)`` that
    returns per-sample losses."""

    def __init__(self, fn, name=None, reduction="sum_over_batch_size", **kwargs):
        super().__init__(name=name or fn.__name__, reduction=reduction)
        self.fn = fn
        self._fn_kwargs = kwargs

    def call(self, y_true, y_pred):
        return self.fn(y_true, y_pred, **self._fn_kwargs)


class _CrossentropyWrapper(LossFunctionWrapper):
    """A cross-entropy loss object around ``fn``: ``from_logits`` and
    ``label_smoothing`` (checked in [0, 1]) passed to it and kept in the config."""

    def __init__(self, fn, from_logits, label_smoothing, reduction, name):
        super().__init__(fn, name=name, reduction=reduction, from_logits=from_logits,
                         label_smoothing=_check_smoothing(label_smoothing))
        self.from_logits = from_logits
        self.label_smoothing = float(label_smoothing)

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits,
                "label_smoothing": self.label_smoothing}


class SparseCategoricalCrossentropy(_CrossentropyWrapper):
    """Cross-entropy for integer labels (``keras.losses.SparseCategoricalCrossentropy``);
    see :func:`sparse_categorical_crossentropy` for shapes.

    Args:
        from_logits (bool): ``y_pred`` are logits (recommended: a final
            ``Dense`` without activation) rather than probabilities.
        label_smoothing (float): in [0, 1] (not a Keras 3 argument of this
            class: the result is CategoricalCrossentropy's with one-hot
            targets and the same smoothing).
        reduction, name: see :class:`Loss`.
    Raises:
        ValueError: for label_smoothing outside [0, 1].
    """

    def __init__(self, from_logits=False, reduction="sum_over_batch_size",
                 name="sparse_categorical_crossentropy", label_smoothing=0.0):
        super().__init__(sparse_categorical_crossentropy, from_logits, label_smoothing, reduction,
                         name)


class CategoricalCrossentropy(_CrossentropyWrapper):
    """Cross-entropy for one-hot targets (``keras.losses.CategoricalCrossentropy``);
    see :func:`categorical_crossentropy` for shapes.

    Args:
        from_logits (bool): ``y_pred`` are logits rather than probabilities.
        label_smoothing (float): in [0, 1]; targets become
            ``y_true * (1 - ls) + ls / C`` (Keras's argument).
        reduction, name: see :class:`Loss`.
    Raises:
        ValueError: for label_smoothing outside [0, 1].
    """

    def __init__(self, from_logits=False, label_smoothing=0.0, reduction="sum_over_batch_size",
                 name="categorical_crossentropy"):
        super().__init__(categorical_crossentropy, from_logits, label_smoothing, reduction, name)


class MeanSquaredError(LossFunctionWrapper):
    """Mean squared error (``keras.losses.MeanSquaredError``); see
    :func:`mean_squared_error` for shapes.  ``reduction``, ``name``: see
    :class:`Loss`."""

    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_error"):
        super().__init__(mean_squared_error, name=name, reduction=reduction)


class MeanAbsoluteError(LossFunctionWrapper):
    """Mean absolute error (``keras.losses.MeanAbsoluteError``); see
    :func:`mean_absolute_error` for shapes.  ``reduction``, ``name``: see
    :class:`Loss`."""

    def __init__(self, reduction="sum_over_batch_size", name="mean_absolute_error"):
        super().__init__(mean_absolute_error, name=name, reduction=reduction)


class MeanAbsolutePercentageError(LossFunctionWrapper):
    """Mean absolute percentage error (``keras.losses.MeanAbsolutePercentageError``);
    see :func:`mean_absolute_percentage_error`.  ``reduction``, ``name``: see
    :class:`Loss`."""

    def __init__(self, reduction="sum_over_batch_size", name="mean_absolute_percentage_error"):
        super().__init__(mean_absolute_percentage_error, name=name, reduction=reduction)


class BinaryCrossentropy(LossFunctionWrapper):
    """Binary cross-entropy for 0/1 (or soft) targets
    (``keras.losses.BinaryCrossentropy``); see :func:`binary_crossentropy`.

    Args:
        from_logits (bool): ``y_pred`` are logits (a final ``Dense(1)``
            without activation) rather than probabilities.
        label_smoothing (float): in [0, 1], see :func:`binary_crossentropy`.
        axis: only -1.
        reduction, name: see :class:`Loss`.
    """

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1,
                 reduction="sum_over_batch_size", name="binary_crossentropy"):
        super().__init__(binary_crossentropy, name=name, reduction=reduction,
                         from_logits=from_logits, label_smoothing=label_smoothing, axis=axis)
        self.from_logits, self.label_smoothing, self.axis = from_logits, label_smoothing, axis

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits,
                "label_smoothing": self.label_smoothing, "axis": self.axis}


_BY_NAME = {"mean_squared_error": MeanSquaredError, "mse": MeanSquaredError,
            "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
            "mean_absolute_percentage_error": MeanAbsolutePercentageError,
            "mape": MeanAbsolutePercentageError,
            "binary_crossentropy": BinaryCrossentropy,
            "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
            "categorical_crossentropy": CategoricalCrossentropy}


def get(identifier):
    """A :class:`Loss` from a Keras name (``"sparse_categorical_crossentropy"``,
    ``"categorical_crossentropy"``; probabilities, as Keras), a Loss object
    (returned as is) or a function ``(y_true, y_pred) -> per-sample losses``.

    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if isinstance(identifier, Loss):
        return identifier
    if isinstance(identifier, str):
        if identifier not in _BY_NAME:
            raise ValueError(f"unknown loss {identifier!r}; known: {sorted(_BY_NAME)}")
        return _BY_NAME[identifier]()
    if callable(identifier):
        return LossFunctionWrapper(identifier)
    raise TypeError(f"loss must be a name, a Loss or a function, got {identifier!r}")


def is_sparse(loss):
    """Whether ``loss`` takes integer class labels (for label checks and the
    resolution of ``metrics=["accuracy"]``)."""
    return isinstance(loss, LossFunctionWrapper) and loss.fn is sparse_categorical_crossentropy


def is_binary(loss):
    """Whether ``loss`` is a binary cross-entropy (``"accuracy"`` then means
    binary accuracy)."""
    return isinstance(loss, LossFunctionWrapper) and loss.fn is binary_crossentropy


def is_categorical(loss):
    """Whether ``loss`` takes one-hot targets of the prediction's shape."""
    return isinstance(loss, LossFunctionWrapper) and loss.fn is categorical_crossentropy
