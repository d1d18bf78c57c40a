"""Array ops (csrc/ops_array.c) with ``keras.ops`` names and arguments:
comparisons, where, cast, stop_gradient, transpose, slicing and indexing,
concatenate/stack/split, pad, take, one_hot, max/min/argmax/argmin, and
ones/zeros/full.

Moves and selections are exact; their gradients are ops of the same family,
so gradients of any order exist.  Comparisons return bool tensors.
"""
import builtins
import operator

import numpy as np

from .._loader import _C
from ..tensor import Tensor, convert_to_tensor

call = _C.call

__all__ = ["greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
           "logical_and", "logical_or", "logical_xor", "logical_not", "any", "all", "where",
           "cast", "stop_gradient", "transpose", "slice", "strided_slice", "getitem",
           "concatenate", "stack", "split", "expand_dims", "squeeze", "pad", "take", "one_hot",
           "max", "min", "argmax", "argmin", "ones", "zeros", "full", "ones_like", "zeros_like",
           "full_like", "DTYPES"]

# dtype names and the codes of csrc/kernels/kernels.h (pr_dtype)
DTYPES = {"float32": 0, "int32": 1, "int64": 2, "uint8": 3, "bool": 4, "bfloat16": 5}


def _dtype_name(dtype):
    if dtype is None:
        return None
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise TypeError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return name


def _axes(axis):
    if axis is None:
        return ()
    if isinstance(axis, (int, np.integer)):
        return (int(axis),)
    return tuple(int(a) for a in axis)


# ---- comparisons, where, cast ------------------------------------------------------------

def greater(x1, x2):
    """``x1 > x2`` elementwise as a bool tensor, NumPy broadcasting (``keras.ops.greater``).

    Inputs of any dtypes (float32, int32, int64, uint8, bool, Python numbers)
    are compared by value.  Not differentiable.  Raises ValueError for
    shapes that do not broadcast.
    """
    return call("greater", x1, x2)


def greater_equal(x1, x2):
    """``x1 >= x2`` as a bool tensor (``keras.ops.greater_equal``); as :func:`greater`."""
    return call("greater_equal", x1, x2)


def less(x1, x2):
    """``x1 < x2`` as a bool tensor (``keras.ops.less``); as :func:`greater`."""
    return call("less", x1, x2)


def less_equal(x1, x2):
    """``x1 <= x2`` as a bool tensor (``keras.ops.less_equal``); as :func:`greater`."""
    return call("less_equal", x1, x2)


def equal(x1, x2):
    """``x1 == x2`` as a bool tensor (``keras.ops.equal``); NaN equals nothing."""
    return call("equal", x1, x2)


def not_equal(x1, x2):
    """``x1 != x2`` as a bool tensor (``keras.ops.not_equal``); NaN differs from all."""
    return call("not_equal", x1, x2)


def logical_not(x):
    """``x == 0`` elementwise as a bool tensor (``keras.ops.logical_not``; any dtype)."""
    return call("equal", x, False)


def _truth(x):
    """float32 1.0 where x is nonzero (true), else 0.0."""
    return cast(call("not_equal", x, False), "float32")


def logical_and(x1, x2):
    """Both nonzero, elementwise, as a bool tensor (``keras.ops.logical_and``;
    any dtypes, NumPy broadcasting).  Not differentiable."""
    return call("not_equal", call("multiply", _truth(x1), _truth(x2)), 0.0)


def logical_or(x1, x2):
    """Either nonzero, as a bool tensor (``keras.ops.logical_or``)."""
    return call("not_equal", call("maximum", _truth(x1), _truth(x2)), 0.0)


def logical_xor(x1, x2):
    """Exactly one nonzero, as a bool tensor (``keras.ops.logical_xor``)."""
    return call("not_equal", _truth(x1), _truth(x2))


def any(x, axis=None, keepdims=False):  # noqa: A001 (the Keras name)
    """Whether any element over ``axis`` is nonzero, bool (``keras.ops.any``):
    ``max(x != 0) > 0``; an empty reduction raises ValueError (NumPy gives
    False)."""
    return call("greater", max(_truth(x), axis=axis, keepdims=keepdims), 0.0)


def all(x, axis=None, keepdims=False):  # noqa: A001 (the Keras name)
    """Whether every element over ``axis`` is nonzero, bool (``keras.ops.all``):
    ``min(x != 0) > 0``; an empty reduction raises ValueError (NumPy gives True)."""
    return call("greater", min(_truth(x), axis=axis, keepdims=keepdims), 0.0)


def where(condition, x1=None, x2=None):
    """``x1`` where ``condition`` is true (nonzero), else ``x2`` (``keras.ops.where``).

    Args:
        condition: tensor of any dtype (bool from a comparison, usually).
        x1, x2: float32 tensors or numbers; all three broadcast (NumPy rules).
    Returns:
        float32 tensor of the broadcast shape.  Gradients flow to ``x1`` and
        ``x2`` through the elements each supplies.
    Raises:
        ValueError: shapes that do not broadcast, or only one of x1/x2 given
        (the one-argument form, NumPy's nonzero, has a data-dependent shape
        and is not supported).
    """
    if x1 is None or x2 is None:
        raise ValueError("where: give both x1 and x2 (the one-argument form has a "
                         "data-dependent shape and is not supported)")
    return call("where", condition, x1, x2)


def cast(x, dtype):
    """``x`` converted to ``dtype`` (``keras.ops.cast``).

    Args:
        x: tensor, array or number.
        dtype: "float32", "int32", "int64", "uint8", "bool", "bfloat16" or a
            NumPy dtype of those (``ml_dtypes.bfloat16``).  bfloat16 converts
            from and to float32 only: rounding to nearest even (NaN stays
            NaN, as ml_dtypes), back exactly.
    Returns:
        A new tensor.  Float to integer truncates toward 0 (NaN gives 0 and
        values past the range clamp to its ends); integers wrap as NumPy's
        ``astype``; to bool is ``!= 0``.  The gradient passes float32 to
        float32 and bfloat16 only (an integer cast stops it, as in TensorFlow).
    Raises:
        TypeError: an unsupported dtype.
    """
    return call("cast", x, dtype=DTYPES[_dtype_name(dtype)])


def stop_gradient(variable):
    """``variable``'s value with no gradient flowing back (``keras.ops.stop_gradient``)."""
    return call("stop_gradient", variable)


# ---- shape moves ----------------------------------------------------------------------------

def transpose(x, axes=None):
    """Permute the axes of ``x`` (``keras.ops.transpose`` / ``np.transpose``).

    Args:
        x: tensor of any dtype.
        axes: a permutation of ``range(x.ndim)`` (negative entries count from
            the end); None reverses the axes.
    Raises:
        ValueError: ``axes`` is not a permutation of the axes.
    """
    x = convert_to_tensor(x)
    nd = x.ndim
    perm = tuple(range(nd))[::-1] if axes is None else tuple(a + nd if a < 0 else a
                                                               for a in _axes(axes))
    return call("transpose", x, perm=perm)


def strided_slice(x, begin, strides, size):
    """The registry op behind slicing: along each dimension ``d`` the
    elements ``begin[d] + i * strides[d]`` for ``i < size[d]`` (``size`` -1:
    the whole dimension).  Any dtype.  Raises ValueError for a slice that
    leaves the tensor."""
    return call("strided_slice", x, begin=tuple(begin), strides=tuple(strides), size=tuple(size))


def slice(inputs, start_indices, shape):  # noqa: A001 (the Keras name)
    """The block of ``shape`` starting at ``start_indices`` (``keras.ops.slice``).

    Args:
        inputs: tensor of any dtype.
        start_indices: one int >= 0 per dimension.
        shape: one size per dimension (-1: to the end of the dimension).
    Raises:
        ValueError: a block that leaves the tensor or wrong lengths.
    """
    x = convert_to_tensor(inputs)
    start, size = list(start_indices), list(shape)
    if len(start) != x.ndim or len(size) != x.ndim:
        raise ValueError(f"slice: start_indices and shape need {x.ndim} entries, got "
                         f"{len(start)} and {len(size)}")
    for d, (b, n) in enumerate(zip(start, size)):
        if n == -1 and b != 0:
            if x.shape[d] is None:
                raise ValueError(f"slice: dimension {d} has an unknown size; only start 0 "
                                 "with size -1 slices it")
            size[d] = x.shape[d] - b
    return strided_slice(x, start, [1] * x.ndim, size)


def _index_items(key, ndim):
    """Expand `key` into one entry per input dimension plus None entries."""
    if not isinstance(key, tuple):
        key = (key,)
    n_ell = builtins.sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices for a tensor of rank {ndim}: {used} were indexed")
    items = []
    for k in key:
        if k is Ellipsis:
            items.extend([builtins.slice(None)] * (ndim - used))
        else:
            items.append(k)
    if not n_ell:
        items.extend([builtins.slice(None)] * (ndim - used))
    return items


def _is_int(k):
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def getitem(x, key):
    """``x[key]`` with NumPy's rules for basic indexing: ints, slices
    (negative steps too), ``...`` and ``None``; and one integer array (a
    list, NumPy array or int tensor) gathered along its axis (``take``).

    Works eagerly, under a tape and compiled; the gradient scatters back into
    x's shape.  While tracing, a dimension of unknown size can only be taken
    whole (``:``).

    Raises:
        IndexError: an int out of range, too many indices, two ellipses.
        TypeError: a key of another kind (floats, bool masks, two arrays).
        ValueError: a partial slice of an unknown dimension.
    """
    x = convert_to_tensor(x)
    items = _index_items(key, x.ndim)
    begin, strides, size = [], [], []
    gather = None  # (axis, indices)
    d = 0
    for k in items:
        if k is None:
            continue
        dim = x.shape[d]
        if isinstance(k, builtins.slice):
            if k == builtins.slice(None):
                begin.append(0), strides.append(1), size.append(-1)
            elif dim is None:
                raise ValueError(f"getitem: dimension {d} has an unknown size while tracing; "
                                 "only ':' slices it (index the known dimensions)")
            else:
                r = range(*k.indices(dim))
                begin.append(r.start if len(r) else 0), strides.append(r.step)
                size.append(len(r))
        elif _is_int(k):
            if dim is None:
                raise ValueError(f"getitem: dimension {d} has an unknown size while tracing; "
                                 "an integer index needs a known size")
            i = operator.index(k)
            if not -dim <= i < dim:
                raise IndexError(f"index {i} is out of bounds for axis {d} with size {dim}")
            begin.append(i % dim), strides.append(1), size.append(1)
        else:
            idx = k if isinstance(k, Tensor) else np.asarray(k)
            if idx.dtype not in ("int32", "int64") and getattr(idx.dtype, "kind", "") not in "iu":
                raise TypeError(f"getitem: only ints, slices, '...', None and integer arrays "
                                f"index a tensor, got {type(k).__name__} of dtype {idx.dtype}")
            if gather is not None:
                raise TypeError("getitem: at most one integer array per index (use take)")
            gather = (d, idx if isinstance(idx, Tensor) else idx.astype(np.int64))
            begin.append(0), strides.append(1), size.append(-1)
        d += 1
    y = x
    if builtins.any(s != -1 for s in size):
        y = strided_slice(y, begin, strides, size)
    if gather is not None:
        y = take(y, gather[1], axis=gather[0])
    # the result's shape: None -> 1, an int drops its dimension, an array
    # contributes the index's dimensions
    dims = list(_sizes(y))
    out, j = [], 0
    for k in items:
        if k is None:
            out.append(1)
        elif _is_int(k):
            j += 1
        elif isinstance(k, builtins.slice):
            out.append(dims[j])
            j += 1
        else:
            n = gather[1].ndim
            out.extend(dims[j:j + n])
            j += n
    out.extend(dims[j:])
    if len(out) != y.ndim or builtins.any(k is None for k in items):
        from .nn import reshape
        y = reshape(y, tuple(out))
    return y


def _sizes(x):
    from .nn import shape
    return shape(x)


def concatenate(xs, axis=0):
    """Join a sequence of tensors along ``axis`` (``keras.ops.concatenate``).

    All of one dtype and rank, equal outside ``axis``.  Folded pairwise
    through the two-input registry op (k - 1 copies for k tensors).
    Raises ValueError for an empty sequence or shapes that do not fit.
    """
    xs = list(xs)
    if not xs:
        raise ValueError("concatenate: needs at least one tensor")
    y = convert_to_tensor(xs[0])
    for x in xs[1:]:
        y = call("concatenate", y, x, axis=int(axis))
    return y


def expand_dims(x, axis):
    """``x`` with a new axis of length 1 at ``axis`` (``keras.ops.expand_dims``)."""
    x = convert_to_tensor(x)
    nd = x.ndim + 1
    a = axis + nd if axis < 0 else axis
    if not 0 <= a < nd:
        raise ValueError(f"expand_dims: axis {axis} is out of bounds for rank {nd}")
    s = list(_sizes(x))
    from .nn import reshape
    return reshape(x, tuple(s[:a] + [1] + s[a:]))


def squeeze(x, axis=None):
    """``x`` without its length-1 axes (all, or those in ``axis``;
    ``keras.ops.squeeze``).  Raises ValueError for an axis whose length is not 1."""
    x = convert_to_tensor(x)
    s = list(_sizes(x))
    axes = [a + x.ndim if a < 0 else a for a in _axes(axis)] if axis is not None else \
        [d for d, n in enumerate(x.shape) if n == 1]
    for a in axes:
        if not 0 <= a < x.ndim or x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} of shape {x.shape} does not have length 1")
    from .nn import reshape
    return reshape(x, tuple(n for d, n in enumerate(s) if d not in axes))


def stack(x, axis=0):
    """Join tensors of one shape along a new ``axis`` (``keras.ops.stack``)."""
    xs = list(x)
    if not xs:
        raise ValueError("stack: needs at least one tensor")
    return concatenate([expand_dims(t, axis) for t in xs], axis=axis)


def split(x, indices_or_sections, axis=0):
    """Split ``x`` along ``axis`` (``keras.ops.split`` / ``np.split``).

    Args:
        indices_or_sections: an int (that many equal parts; the size must
            divide) or a sorted list of split points.
    Returns:
        list of tensors (slices of x; gradients flow back).
    Raises:
        ValueError: a 0-d ``x``, an axis outside ``[-rank, rank)``, an int
            that does not divide the size; an unknown size.
    """
    x = convert_to_tensor(x)
    if x.ndim == 0:
        raise ValueError("split: x must have at least one dimension, got a 0-d tensor")
    a = axis + x.ndim if axis < 0 else axis
    if not 0 <= a < x.ndim:
        raise ValueError(f"split: axis must be in [{-x.ndim}, {x.ndim}) for x of shape "
                         f"{tuple(x.shape)}, got {axis!r}")
    n = x.shape[a]
    if n is None:
        raise ValueError(f"split: axis {axis} has an unknown size while tracing")
    if _is_int(indices_or_sections):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError(f"split: {k} sections do not divide a size of {n} equally")
        points = [n // k * i for i in range(1, k)]
    else:
        points = [int(p) for p in indices_or_sections]
    bounds = [0] + [builtins.min(builtins.max(p, 0), n) for p in points] + [n]
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        begin = [0] * x.ndim
        size = [-1] * x.ndim
        begin[a], size[a] = lo, builtins.max(hi - lo, 0)
        parts.append(strided_slice(x, begin, [1] * x.ndim, size))
    return parts


def pad(x, pad_width, mode="constant", constant_values=None):
    """Pad ``x`` with a constant (``keras.ops.pad``; mode "constant" only).

    Args:
        pad_width: ``((before, after), ...)`` per dimension, one pair for
            all, or one int for all sides (np.pad's forms).
        constant_values: the fill (default 0).
    Raises:
        ValueError: another mode, negative or mis-shaped widths.
    """
    if mode != "constant":
        raise ValueError(f"pad: only mode='constant' is supported, got {mode!r}")
    x = convert_to_tensor(x)
    w = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    return call("pad", x, before=tuple(int(v) for v in w[:, 0]),
                after=tuple(int(v) for v in w[:, 1]),
                value=float(0.0 if constant_values is None else constant_values))


def take(x, indices, axis=None):
    """Elements of ``x`` at ``indices`` along ``axis`` (``keras.ops.take`` /
    ``np.take``; axis None: of the flattened tensor).

    Args:
        indices: int32/int64 tensor or array of any shape; negative values
            count from the end.
    Returns:
        ``x.shape[:axis] + indices.shape + x.shape[axis + 1:]``.  The gradient
        adds back into the taken positions (repeats accumulate).
    Raises:
        ValueError: an index out of range (named with its position).
        TypeError: non-integer indices.
    """
    x = convert_to_tensor(x)
    if isinstance(indices, (list, tuple, int, np.integer)):
        indices = np.asarray(indices, np.int64)
    if axis is None:
        from .nn import reshape
        x = reshape(x, (-1,))
        axis = 0
    return call("take", x, indices, axis=int(axis))


def one_hot(x, num_classes, axis=-1, dtype=None):
    """One-hot float32 rows along a new last axis (``keras.ops.one_hot``).

    Args:
        x: int32/int64/uint8 class indices; out-of-range ones give zero rows.
            Float indices (float32 tensors, float arrays or Python floats) are
            cast to int32 first, truncating toward 0, as Keras's TensorFlow
            backend casts them (``2.0`` is class 2).
        num_classes (int): length of the new axis.
        axis: only -1.
        dtype: None or "float32" (other dtypes through :func:`cast`).
    Raises:
        ValueError: another axis or num_classes < 1.
    """
    if axis != -1:
        raise ValueError(f"one_hot: only axis=-1 is supported, got {axis}")
    if isinstance(x, Tensor):
        if x.dtype in ("float32", "bfloat16"):
            x = cast(x, "int32")
    elif np.asarray(x).dtype.kind == "f":
        x = np.asarray(x).astype(np.int32)
    y = call("one_hot", x, num_classes=int(num_classes))
    return y if dtype in (None, "float32") else cast(y, dtype)


# ---- reductions ------------------------------------------------------------------------------

def _reduce(name, x, axis, keepdims):
    axes = _axes(axis)
    if axis is not None and not axes:  # axis=() reduces nothing, as NumPy
        return convert_to_tensor(x)
    return call(name, x, axes=axes, keepdims=bool(keepdims))


def max(x, axis=None, keepdims=False, initial=None):  # noqa: A001 (the Keras name)
    """Largest element over ``axis`` (``keras.ops.max`` / ``np.max``).

    Args:
        x: float32 tensor.
        axis: None (all), an int or a tuple of ints.
        keepdims (bool): keep reduced axes with length 1.
        initial: optional float; the result is ``maximum(result, initial)``.
    Returns:
        float32; NaN where a reduced element is NaN.  The gradient is shared
        equally among tied maxima (TensorFlow's rule).
    Raises:
        ValueError: an axis out of range or repeated, or an empty reduction.
    """
    y = _reduce("max", x, axis, keepdims)
    return y if initial is None else call("maximum", y, float(initial))


def min(x, axis=None, keepdims=False, initial=None):  # noqa: A001 (the Keras name)
    """Smallest element over ``axis`` (``keras.ops.min``); as :func:`max`."""
    y = _reduce("min", x, axis, keepdims)
    return y if initial is None else call("minimum", y, float(initial))


def argmax(x, axis=None, keepdims=False):
    """int32 index of the first largest element along ``axis`` (None: of the
    flattened tensor), as ``keras.ops.argmax``; the first NaN counts as the
    largest (np.argmax).  Not differentiable.  Raises ValueError for a bad
    axis or an empty dimension."""
    return call("argmax", x, axes=() if axis is None else (int(axis),), keepdims=bool(keepdims))


def argmin(x, axis=None, keepdims=False):
    """int32 index of the first smallest element (``keras.ops.argmin``); as :func:`argmax`."""
    return call("argmin", x, axes=() if axis is None else (int(axis),), keepdims=bool(keepdims))


# ---- constants ---------------------------------------------------------------------------------

def full(shape, fill_value, dtype=None):
    """A tensor of ``shape`` filled with ``fill_value`` (``keras.ops.full``).

    ``shape`` entries are ints or, while tracing, sizes from
    :func:`pyresnet.ops.shape`; dtype defaults to float32.  Built as
    ``broadcast_to`` of a scalar (then :func:`cast` for other dtypes).

    Raises:
        ValueError: a ``None`` size, as ``x.shape`` holds for the sizes a
            compiled function does not know: the message points to
            ``pyresnet.ops.shape(x)`` (those sizes as traced values) and
            ``zeros_like``/``ones_like``/``full_like``.
    """
    if isinstance(shape, (int, np.integer)) or (isinstance(shape, Tensor) and shape.ndim == 0):
        shape = (shape,)
    shape = tuple(shape)
    if builtins.any(d is None for d in shape):
        raise ValueError(f"full/zeros/ones: shape {shape} has unknown sizes (None), as x.shape "
                         f"reads inside a compiled function for sizes not known when tracing; "
                         f"pass pyresnet.ops.shape(x) instead (its unknown sizes are traced "
                         f"values), or use zeros_like(x) / ones_like(x) / full_like(x, value)")
    y = call("broadcast_to", float(fill_value), shape=shape)
    name = _dtype_name(dtype)
    return y if name in (None, "float32") else cast(y, name)


def ones(shape, dtype=None):
    """Ones of ``shape`` (``keras.ops.ones``); float32 unless ``dtype``."""
    return full(shape, 1.0, dtype)


def zeros(shape, dtype=None):
    """Zeros of ``shape`` (``keras.ops.zeros``); float32 unless ``dtype``."""
    return full(shape, 0.0, dtype)


def full_like(x, fill_value, dtype=None):
    """``fill_value`` in x's shape (``keras.ops.full_like``); x's dtype unless ``dtype``."""
    x = convert_to_tensor(x)
    return full(_sizes(x), fill_value, dtype or x.dtype)


def ones_like(x, dtype=None):
    """Ones in x's shape and dtype, or ``dtype`` (``keras.ops.ones_like``)."""
    x = convert_to_tensor(x)
    y = call("ones_like", x)
    name = _dtype_name(dtype) or x.dtype
    return y if name == "float32" else cast(y, name)


def zeros_like(x, dtype=None):
    """Zeros in x's shape and dtype, or ``dtype`` (``keras.ops.zeros_like``)."""
    x = convert_to_tensor(x)
    y = call("zeros_like", x)
    name = _dtype_name(dtype) or x.dtype
    return y if name == "float32" else cast(y, name)
