"""nn ops (csrc/ops_nn.c): reductions, reshapes, softmax, losses, accuracies
and batch normalization.

Losses return one value per sample (the layers in ``pyresnet.losses``
average them).  Classes are on the last axis; images are NHWC float32.
"""
from .._loader import _C
from ..tensor import Tensor, convert_to_tensor

call = _C.call


def _axes(axis):
    if axis is None:
        return ()
    if isinstance(axis, int):
        return (axis,)
    return tuple(int(a) for a in axis)


def sum(x, axis=None, keepdims=False):  # noqa: A001 (the Keras name)
    """Sum of float32 ``x`` over ``axis`` (as ``keras.ops.sum`` / ``np.sum``).

    Args:
        x: float32 tensor of any rank.
        axis: None (all axes), an int or a tuple of ints; negative counts from
            the end.
        keepdims (bool): keep reduced axes with length 1.
    Returns:
        float32 tensor; accumulated in double in a fixed order (results do not
        depend on the thread count).
    Raises:
        ValueError: an axis out of range or repeated.  TypeError: x not float32.
    """
    axes = _axes(axis)
    if axis is not None and not axes:  # axis=() reduces nothing, as NumPy
        return reshape(x, shape(x))
    return call("sum", x, axes=axes, keepdims=bool(keepdims))


def mean(x, axis=None, keepdims=False):
    """Mean of float32 ``x`` over ``axis`` (as ``keras.ops.mean`` / ``np.mean``).

    Arguments, errors and accumulation as :func:`sum`.  The mean of no
    elements is NaN, as NumPy's.
    """
    axes = _axes(axis)
    if axis is not None and not axes:
        return reshape(x, shape(x))
    return call("mean", x, axes=axes, keepdims=bool(keepdims))


def reshape(x, newshape):
    """``x`` with shape ``newshape`` (as ``keras.ops.reshape`` / ``np.reshape``).

    Args:
        x: tensor of any dtype (the data are copied).
        newshape: int or tuple of sizes; one entry may be -1 and is inferred.
            A size is an int or, inside a compiled function, an unknown size
            that :func:`shape` returned (e.g. ``(shape(x)[0], 4, -1)``).
    Raises:
        ValueError: the sizes differ (the message names both shapes), more
        than one -1, or another negative entry; while tracing, also when the
        sizes differ for some value of an unknown size (e.g. ``(None, 3)``
        into ``(-1, 2)``).  TypeError: a size that is not an int or a size
        from :func:`shape`.
    """
    if isinstance(newshape, int) or _is_size_tensor(newshape):
        newshape = (newshape,)
    return call("reshape", x, shape=tuple(newshape))


def _is_size_tensor(x):
    return isinstance(x, Tensor) and x.ndim == 0


def shape(x):
    """The shape of ``x`` as a tuple of sizes (``keras.ops.shape``).

    Eagerly, and for every dimension a traced function knows, a size is a
    Python int.  Inside ``pyresnet.compile`` an unknown dimension (``None``
    in ``x.shape``: the batch under ``fit``, a None of an
    ``input_signature``) is an int32 scalar Tensor holding the size at run
    time, as Keras on TensorFlow returns.  Shape arguments (``reshape``,
    ``broadcast_to``) accept it as a size, so a graph sized by it fits every
    call: ``broadcast_to(0.0, (shape(x)[0], 10))`` has the batch's rows.
    Sizes combine with ``+``, ``-``, ``*`` and ``//`` by a Python int into
    sizes (``shape(x)[1] * shape(x)[2]``); there is no truth value or ``==``
    on them while tracing (branch on static sizes).

    Args:
        x: a Tensor, NumPy array or number.
    Returns:
        tuple of ints and (while tracing) int32 scalar Tensors.
    """
    t = convert_to_tensor(x)
    return tuple(d if d is not None else call("dim_size", t, axis=i)
                 for i, d in enumerate(t.shape))


def flatten(x):
    """``(N, d1, ..., dk)`` -> ``(N, d1 * ... * dk)``, any dtype (Keras ``Flatten``).

    Keeps the batch axis, so a traced graph carries no baked batch size in
    this op.  A rank-1 input becomes ``(N, 1)``.  Raises ValueError for a
    scalar.
    """
    return call("flatten", x)


def _last_axis(name, x, axis):
    nd = convert_to_tensor(x).ndim
    if axis not in (-1, nd - 1):
        raise ValueError(f"{name}: only the last axis is supported, got axis={axis} for rank {nd}")


def _on_last_axis(op, x, axis):
    """Run a last-axis op along ``axis`` by moving that axis last and back
    (two exact transposes)."""
    x = convert_to_tensor(x)
    nd = x.ndim
    if nd == 0:
        raise ValueError(f"{op}: needs rank >= 1, got a scalar")
    a = axis + nd if axis < 0 else axis
    if not 0 <= a < nd:
        raise ValueError(f"{op}: axis {axis} is out of bounds for rank {nd}")
    if a == nd - 1:
        return call(op, x)
    perm = [d for d in range(nd) if d != a] + [a]
    back = [0] * nd
    for i, p in enumerate(perm):
        back[p] = i
    y = call(op, call("transpose", x, perm=perm))
    return call("transpose", y, perm=back)


def softmax(x, axis=-1):
    """Softmax along ``axis`` (default the last), float32 (as ``keras.ops.softmax``).

    ``exp(x - max) / sum(exp(x - max))`` (max-shifted, so large logits do not
    overflow); another axis than the last is moved last and back.  Raises
    ValueError for an axis out of range or a scalar input.
    """
    return _on_last_axis("softmax", x, axis)


def log_softmax(x, axis=-1):
    """Log-softmax along ``axis``, float32 (as ``keras.ops.log_softmax``):
    ``x - max - log(sum(exp(x - max)))``.  Errors as :func:`softmax`."""
    return _on_last_axis("log_softmax", x, axis)


def var(x, axis=None, keepdims=False):
    """Biased variance ``mean((x - mean(x))**2)`` over ``axis`` (``keras.ops.var``,
    ``np.var``); float32, a composition of registry ops."""
    m = mean(x, axis=axis, keepdims=True)
    return mean(call("square", call("subtract", x, m)), axis=axis, keepdims=keepdims)


def std(x, axis=None, keepdims=False):
    """``sqrt(var(x))`` over ``axis`` (``keras.ops.std``, ``np.std``)."""
    return call("sqrt", var(x, axis=axis, keepdims=keepdims))


def moments(x, axes, keepdims=False):
    """``(mean, variance)`` over ``axes`` (``keras.ops.moments``; biased variance)."""
    return mean(x, axis=axes, keepdims=keepdims), var(x, axis=axes, keepdims=keepdims)


def logsumexp(x, axis=None, keepdims=False):
    """``log(sum(exp(x)))`` over ``axis``, shifted by the max so large values
    do not overflow (``keras.ops.logsumexp``); float32."""
    from .array import max as _max, stop_gradient
    m = stop_gradient(_max(x, axis=axis, keepdims=True))
    y = call("add", call("log", sum(call("exp", call("subtract", x, m)), axis=axis,
                                      keepdims=True)), m)
    return y if keepdims else reshape(y, shape(sum(y, axis=axis, keepdims=False)))


def layer_normalization(x, gamma=None, beta=None, axis=-1, epsilon=None):
    """Layer normalization (Ba, Kiros & Hinton 2016, "Layer Normalization",
    eq. 4), as ``keras.ops.layer_normalization``:
    ``(x - mean) / sqrt(var + epsilon) * gamma + beta`` with the mean and
    biased variance over ``axis`` of each sample.

    Args:
        x: float32 tensor.
        gamma, beta: optional float32 tensors broadcasting against the
            normalized axes (e.g. ``(C,)`` for ``axis=-1``).
        axis: int or tuple of ints.
        epsilon (float): default 1e-7 (``keras.config.epsilon()``, as
            ``keras.ops``; the LayerNormalization layer's default is 1e-3).
    Returns:
        float32 of x's shape; a composition of registry ops (gradients of
        every order).
    """
    eps = 1e-7 if epsilon is None else float(epsilon)
    m = mean(x, axis=axis, keepdims=True)
    d = call("subtract", x, m)
    v = mean(call("square", d), axis=axis, keepdims=True)
    y = call("divide", d, call("sqrt", call("add", v, eps)))
    if gamma is not None:
        y = call("multiply", y, gamma)
    if beta is not None:
        y = call("add", y, beta)
    return y


def dropout(inputs, rate, noise_shape=None, seed=None):
    """Inverted dropout: :func:`pyresnet.random.dropout` (``keras.random.dropout``)
    under the ``pyresnet.ops`` name; see it for the arguments (``seed``: a
    ``SeedGenerator``, an int or None) and errors."""
    from .. import random
    return random.dropout(inputs, rate, noise_shape=noise_shape, seed=seed)


def _squeeze_labels(target, output):
    """Keras accepts sparse labels shaped ``output.shape[:-1] + (1,)``."""
    target, output = convert_to_tensor(target), convert_to_tensor(output)
    if target.ndim == output.ndim and target.ndim > 0 and target.shape[-1] == 1:
        target = reshape(target, shape(target)[:-1])
    return target


def sparse_softmax_cross_entropy(logits, labels):
    """Per-sample cross-entropy of integer labels given logits
    (``tf.nn.sparse_softmax_cross_entropy_with_logits``).

    Args:
        logits: float32 ``(..., C)``.
        labels: int32 or int64 ``(...)`` in ``[0, C)``.
    Returns:
        float32 ``(...)``: ``logsumexp(logits) - logits[label]``.  Gradient wrt
        logits ``(softmax - onehot) * g``.
    Raises:
        ValueError: a label outside ``[0, C)`` (the message names the label and
        its index) or mismatched shapes.  TypeError: wrong dtypes.
    """
    return call("sparse_softmax_cross_entropy", logits, labels)


def softmax_cross_entropy(logits, labels):
    """Per-sample cross-entropy of soft labels (e.g. mixup) given logits
    (``tf.nn.softmax_cross_entropy_with_logits``).

    Args:
        logits, labels: float32 ``(..., C)`` of the same shape.
    Returns:
        float32 ``(...)``: ``-sum(labels * log_softmax(logits), -1)``.  Gradients
        for both: ``g * (softmax * sum(labels) - labels)`` and
        ``-g * log_softmax(logits)``.
    Raises:
        ValueError: shapes differ.  TypeError: not float32.
    """
    return call("softmax_cross_entropy", logits, labels)


def categorical_crossentropy(target, output, from_logits=False, axis=-1):
    """Per-sample categorical cross-entropy (as ``keras.ops.categorical_crossentropy``).

    Args:
        target: float32 ``(..., C)`` (one-hot or soft labels).
        output: float32 ``(..., C)``: probabilities, or logits when
            ``from_logits``.
        from_logits (bool): with False, as Keras, ``output`` is renormalised to
            sum 1 along the last axis and clipped to ``[1e-7, 1 - 1e-7]``
            before the log (keras/src/backend/numpy/nn.py); the gradient wrt
            ``output`` follows that chain (0 where clipped) and none flows to
            ``target``.  With True, :func:`softmax_cross_entropy`.
        axis: only -1 (the last axis) is supported.
    Returns:
        float32 ``(...)``.
    Raises:
        ValueError: shapes differ or another axis.  TypeError: not float32.
    """
    _last_axis("categorical_crossentropy", output, axis)
    if from_logits:
        return call("softmax_cross_entropy", output, target)
    return call("categorical_crossentropy", output, target)


def sparse_categorical_crossentropy(target, output, from_logits=False, axis=-1):
    """Per-sample cross-entropy of integer labels (as
    ``keras.ops.sparse_categorical_crossentropy``).

    Args:
        target: int32/int64 labels ``(...)`` (or ``(..., 1)``) in ``[0, C)``.
        output: float32 ``(..., C)``: probabilities, or logits when
            ``from_logits``.
        from_logits (bool): with False, Keras' renormalise-and-clip
            (``[1e-7, 1 - 1e-7]``) from-probabilities loss; with True,
            :func:`sparse_softmax_cross_entropy`.
        axis: only -1 is supported.
    Returns:
        float32 ``(...)``; gradient wrt ``output``.
    Raises:
        ValueError: a label outside ``[0, C)`` (named with its index), shapes
        that do not match, or another axis.  TypeError: wrong dtypes.
    """
    _last_axis("sparse_categorical_crossentropy", output, axis)
    target = _squeeze_labels(target, output)
    if from_logits:
        return call("sparse_softmax_cross_entropy", output, target)
    return call("sparse_categorical_crossentropy", output, target)


def sparse_categorical_accuracy(y_true, y_pred):
    """Per-sample 1.0/0.0: does ``argmax(y_pred)`` equal the integer label?
    (as ``keras.metrics.sparse_categorical_accuracy``).

    Args:
        y_true: int32/int64 ``(...)`` or ``(..., 1)``; out-of-range labels score 0.
        y_pred: float32 ``(..., C)``; the first maximum wins ties.
    Returns:
        float32 ``(...)``; no gradient.
    Raises:
        ValueError / TypeError: shapes or dtypes that do not fit.
    """
    return call("sparse_categorical_accuracy", y_pred, _squeeze_labels(y_true, y_pred))


def categorical_accuracy(y_true, y_pred):
    """Per-sample 1.0/0.0: ``argmax(y_pred) == argmax(y_true)`` (first maxima;
    as ``keras.metrics.categorical_accuracy``).

    Args:
        y_true, y_pred: float32 ``(..., C)`` of the same shape.
    Returns:
        float32 ``(...)``; no gradient.
    """
    return call("categorical_accuracy", y_pred, y_true)


def batch_norm_train(x, gamma, beta, epsilon=1e-3):
    """Batch normalization with batch statistics (training mode).

    Ioffe & Szegedy 2015, Algorithm 1, over all axes but the last:
    ``y = gamma * (x - mean) / sqrt(var + epsilon) + beta``.

    Args:
        x: float32 or bfloat16 ``(N, ..., C)`` (NHWC images or ``(N, C)``),
            rank >= 2; bfloat16 (mixed_bfloat16 activations) is read as
            it is and the result computed in float32, y rounded once.
        gamma, beta: float32 ``(C,)``.
        epsilon (float): Keras' default 1e-3.
    Returns:
        ``(y, batch_mean, batch_var)``: y like x (its dtype too); float32
        mean and the *biased*
        variance ``(C,)`` (as ``keras.ops.moments``; Keras'
        BatchNormalization feeds the same variance to its moving average).
        Gradients flow to x, gamma, beta through y (section 3 of the paper);
        the mean and variance outputs pass none.
    Raises:
        ValueError: rank < 2, no rows, or gamma/beta not ``(C,)``.
        TypeError: x not float32 or bfloat16, or the rest not float32.
    """
    return call("batch_norm_train", x, gamma, beta, epsilon=float(epsilon))


def batch_norm_infer(x, gamma, beta, moving_mean, moving_variance, epsilon=1e-3):
    """Batch normalization with fixed statistics (inference mode):
    ``gamma * (x - moving_mean) / sqrt(moving_variance + epsilon) + beta``.

    Args:
        x: float32 or bfloat16 ``(N, ..., C)``, rank >= 2.
        gamma, beta, moving_mean, moving_variance: float32 ``(C,)``.
        epsilon (float): Keras' default 1e-3.
    Returns:
        like x (its dtype too).  Gradients flow to x, gamma and beta (not to the
        statistics).
    Raises:
        ValueError / TypeError: as :func:`batch_norm_train`.
    """
    return call("batch_norm_infer", x, gamma, beta, moving_mean, moving_variance,
                epsilon=float(epsilon))
