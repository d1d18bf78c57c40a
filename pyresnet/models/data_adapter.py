"""Data for ``fit``/``evaluate``/``predict``: NumPy arrays (conversion,
checks, the validation split, batching) or a dataset of ready batches (a
:class:`pyresnet.data.Dataset` or any re-iterable with ``len()``).  Only
bookkeeping happens here (dtype conversion, slicing, shuffling); all math
runs in the model's steps."""
import math
import warnings

import numpy as np

from .._loader import _C
from ..tensor import Tensor
from ..utils import tree
from ..utils.rng import get_rng


def to_arrays(model_name, what, data, count):
    """``data`` (an array, or a list/tuple of ``count`` arrays) as a list of
    NumPy arrays of numeric dtype.

    Raises:
        ValueError: for a wrong number of arrays.
        TypeError: for a non-numeric dtype (strings, objects, complex).
    """
    arrays = list(data) if isinstance(data, (list, tuple)) else [data]
    if len(arrays) != count:
        raise ValueError(f'Model "{model_name}" expects {count} {what} array(s), got '
                         f"{len(arrays)}")
    out = []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        if a.dtype.kind not in "biuf":
            raise TypeError(f'Model "{model_name}": {what}[{i}] must be numeric (float32, uint8, '
                            f"int, ...), got dtype {a.dtype} of shape {a.shape}")
        out.append(a)
    return out


def check_lengths(model_name, xs, ys):
    """Every x and y array has the same, non-zero number of samples.

    Raises:
        ValueError: naming the model and the shapes.
    """
    shapes = [a.shape for a in xs + ys]
    if any(len(s) == 0 for s in shapes):
        raise ValueError(f'Model "{model_name}": inputs must have a batch axis, got shapes '
                         f"x: {[a.shape for a in xs]}, y: {[a.shape for a in ys]}")
    if len({s[0] for s in shapes}) != 1:
        raise ValueError(f'Model "{model_name}": x and y must have the same number of samples, '
                         f"got x shape(s) {[a.shape for a in xs]} and y shape(s) "
                         f"{[a.shape for a in ys]}")
    if shapes[0][0] == 0:
        raise ValueError(f'Model "{model_name}": empty input: x shape(s) '
                         f"{[a.shape for a in xs]}, y shape(s) {[a.shape for a in ys]}")


def split(arrays, validation_split):
    """(train, validation) lists: the last samples (before any shuffling) are
    held out, as Keras 3's ``train_validation_split``: the training part is
    the first ``floor(n * (1 - validation_split))`` samples (so 10 samples
    at 0.3 give 7 and 3, although ``10 * 0.7`` is ``7.000000000000001``).

    Raises:
        ValueError: when either part would be empty (as Keras).
    """
    n = len(arrays[0])
    at = int(math.floor(n * (1.0 - validation_split)))
    if at == 0 or at == n:
        raise ValueError(f"Training data contains {n} samples, which is not sufficient to split "
                         f"it into a validation and training set as specified by "
                         f"`validation_split={validation_split}`. Either provide more data, or "
                         "a different value for the `validation_split` argument.")
    return [a[:at] for a in arrays], [a[at:] for a in arrays]


def is_dataset(x, unsized=False):
    """Whether ``x`` is a dataset of batches rather than array data: a
    re-iterable with ``len()`` (or, with ``unsized``, any iterable, e.g. a
    generator when ``steps_per_epoch`` is given) that is not an array,
    Tensor, list, tuple or dict."""
    return hasattr(x, "__iter__") and (unsized or hasattr(x, "__len__")) \
        and not isinstance(x, (np.ndarray, Tensor, list, tuple, dict))


def known_len(data):
    """``len(data)``, or None when the data cannot tell (a
    :class:`pyresnet.data.Dataset` of unknown or infinite length raises
    TypeError, as tf.data's)."""
    try:
        return len(data)
    except TypeError:
        return None


def num_samples(data):
    """The batch size of a batch ``(x, ...)`` or ``x`` (its first input's
    leading dimension)."""
    x = data[0] if isinstance(data, tuple) else data
    return len(tree.flatten(x)[0])


def pack(x, y=None, sample_weight=None):
    """One batch as the steps get it: ``x`` alone (no targets), ``(x, y)`` or
    ``(x, y, sample_weight)``; each part a Tensor, or a list of them for
    several inputs/outputs."""
    x, y, sample_weight = (None if p is None else p[0] if len(p) == 1 else p
                           for p in (x, y, sample_weight))
    if y is None:
        return x
    return (x, y) if sample_weight is None else (x, y, sample_weight)


class Steps:
    """At most ``steps`` batches of ``data`` per pass (``steps_per_epoch``,
    ``validation_steps``, ``steps``).

    Args:
        data: ArrayBatches, DatasetBatches or any iterable of batches.
        steps (int): batches per pass.
        persistent (bool): the batches continue from one pass to the next
            (``fit``'s ``steps_per_epoch``, Keras's rule); when the data run
            out, a warning says so, the pass ends there and the next pass
            starts over.  Data of known length whose batches were all taken
            start over at the next pass without a warning (Keras 3's
            EpochIterator: e.g. ``ds.repeat().take(n)`` with
            ``steps_per_epoch`` dividing its batches).  Else every pass takes
            the first ``steps`` batches.
    """

    def __init__(self, data, steps, persistent):
        self.data, self.steps, self.persistent = data, int(steps), persistent
        self.batch_size = getattr(data, "batch_size", None)
        self.num_samples = None
        self._iterator = None
        self._seen = 0

    def __len__(self):
        return self.steps

    def get_state(self):
        """The wrapped adapter's :meth:`get_state` (None when it has none)."""
        get = getattr(self.data, "get_state", None)
        return None if get is None else get()

    def set_state(self, state):
        """Pass ``state`` to the wrapped adapter's ``set_state``, if any."""
        if hasattr(self.data, "set_state"):
            self.data.set_state(state)

    def __iter__(self):
        iterator = self._iterator if self.persistent else None
        length = known_len(self.data) if iterator is not None else None
        if iterator is None or (length is not None and self._seen >= length):
            iterator, self._seen = iter(self.data), 0
        self._iterator = iterator if self.persistent else None
        for _ in range(self.steps):
            try:
                element = next(iterator)
                self._seen += 1
            except StopIteration:
                self._iterator = None
                if self.persistent:
                    warnings.warn(f"the data ran out after fewer than steps_per_epoch="
                                  f"{self.steps} batches; this epoch ends here. Give data for "
                                  "at least steps_per_epoch * epochs batches (e.g. "
                                  "Dataset.repeat()).", stacklevel=3)
                return
            yield element

def loop_passes(data):
    """``data.loop_passes()`` when the data can feed a compiled loop, else None."""
    get = getattr(data, "loop_passes", None)
    return None if get is None else get()


def _tensor(a, dtype):
    """``a`` as a Tensor of ``dtype`` (None: float32 for floats, int32 for ints)."""
    if dtype is None:
        dtype = np.int32 if np.asarray(a).dtype.kind in "iub" else np.float32
    if isinstance(a, Tensor) and a.dtype == np.dtype(dtype).name:
        return a
    return Tensor(np.ascontiguousarray(a, dtype=dtype))


class ArrayBatches:
    """Batches of NumPy arrays as Tensors: x arrays as float32 (uint8 images
    are converted as given, without scaling, as Keras does), y arrays as
    given by ``y_dtypes``.  Every batch is gathered by the C batch iterator
    (``_C.BatchIterator``, csrc/pipeline.c) from the arrays converted once
    (x to float32 and y to its dtype, contiguous: a copy only when the
    arrays are not so already, e.g. 4 bytes per pixel for uint8 images), the
    same iterator that feeds compiled loops (``steps_per_execution``).

    Args:
        xs: list of arrays, one per model input (same length).
        ys: list of arrays, one per output, or None (predict).
        batch_size (int): >= 1, or None for Keras's 32; the last batch may
            be smaller.
        shuffle (bool): a new order every pass (epoch): pass ``p`` uses the
            permutation of ``numpy.random.default_rng((seed, p))``, so the
            order is a function of ``(seed, p)`` alone and a resumed run (see
            :class:`pyresnet.callbacks.BackupAndRestore`) shuffles as the
            uninterrupted one.
        y_dtypes: NumPy dtype per y array.
        sws: list of per-sample weight arrays (one, or one per output), or None.
        seed (int): the shuffling seed; None draws one from the generator
            seeded by :func:`pyresnet.utils.set_random_seed`.
    Attributes:
        passes (int): the passes started so far (the next pass's index).
    Iterating yields batches as :func:`pack` makes them: ``(x, y)``, ``(x,
    y, sample_weight)``, or ``x`` alone without ``ys`` (predict, or fit
    without targets), x a Tensor (or a list of Tensors for several inputs),
    y and the weights likewise.
    """

    def __init__(self, xs, ys, batch_size, shuffle=False, y_dtypes=None, seed=None, sws=None):
        batch_size = 32 if batch_size is None else batch_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.xs, self.ys, self.sws = xs, ys, sws
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.y_dtypes = y_dtypes
        self.num_samples = len(xs[0])
        self.seed = int(get_rng().integers(2**63)) if shuffle and seed is None else seed
        self.passes = 0
        self._converted = None

    def get_state(self):
        """The shuffling state: ``{"seed", "passes"}`` (JSON-able)."""
        return {"seed": self.seed, "passes": self.passes}

    def set_state(self, state):
        """Continue from a :meth:`get_state`: the next pass shuffles as the
        pass ``state["passes"]`` of that run."""
        self.seed, self.passes = state["seed"], int(state["passes"])

    def __len__(self):
        return -(-self.num_samples // self.batch_size)

    def _pass_order(self):
        """The sample order of the next pass, batch by batch (counts the pass)."""
        self.passes += 1
        n, size = self.num_samples, self.batch_size
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        order = np.random.default_rng((self.seed, self.passes - 1)).permutation(n)
        return np.concatenate([np.sort(order[s:s + size]) for s in range(0, n, size)])

    def _arrays(self):
        """The components the batches gather, converted once: the x arrays
        (float32), the y arrays (``y_dtypes``; int32 for integer labels
        without one, else float32) and, with y, the weights (float32)."""
        if self._converted is None:
            ys = self.ys or []
            dtypes = self.y_dtypes or [np.int32 if a.dtype.kind in "iub" else np.float32
                                       for a in ys]
            sws = self.sws if self.ys is not None and self.sws is not None else []
            self._converted = tuple(
                [np.ascontiguousarray(a, np.float32) for a in self.xs] +
                [np.ascontiguousarray(a, dt) for a, dt in zip(ys, dtypes)] +
                [np.ascontiguousarray(a, np.float32) for a in sws])
        return self._converted

    def _batches(self, order):
        return _C.BatchIterator(self._arrays(), order, self.batch_size, False, [])

    def loop_passes(self):
        """For compiled loops (``steps_per_execution``): ``(probe,
        next_pass, inputs)``: a BatchIterator giving the batch shapes,
        ``next_pass()`` -> the BatchIterator of the next pass (the batches
        iterating gives), the number of x components; None with sample
        weights or without targets."""
        if self.ys is None or self.sws is not None:
            return None
        probe = self._batches(np.arange(self.num_samples, dtype=np.int64))
        return probe, lambda: self._batches(self._pass_order()), len(self.xs)

    def __iter__(self):
        n_x, n_y = len(self.xs), len(self.ys or [])
        for batch in self._batches(self._pass_order()):
            yield pack(list(batch[:n_x]), list(batch[n_x:n_x + n_y]) or None,
                       list(batch[n_x + n_y:]) or None)


class DatasetBatches:
    """The batches of a dataset, as Tensors: x as float32 (uint8 converted
    as given), y in the dtypes ``check`` returns, sample weights float32.

    Args:
        dataset: an iterable (re-iterable with ``len()`` for several
            epochs) whose elements are batches: ``(x, y)``, ``(x, y,
            sample_weight)`` (tuples or lists), or ``x`` alone (a
            Tensor/array, a dict, or a 1-tuple); x and y a Tensor/array or
            a list of them for several inputs/outputs.
        check: ``check(xs, ys, sws) -> y_dtypes`` run on the NumPy views of
            the first batch before it is used (the data checks of the
            model; ``ys``/``sws`` None when absent).
        inputs_only (bool): keep only x (predict).
        arrange: ``arrange(x, y, sample_weight) -> (x, y, sample_weight)``
            applied to every batch first (the model orders dicts keyed by
            input and output names).
    """

    def __init__(self, dataset, check, inputs_only=False, arrange=None):
        self.dataset = dataset
        self._check = check
        self._arrange = arrange
        self.inputs_only = inputs_only
        self.y_dtypes = None
        self.num_samples = None
        self.batch_size = None

    def __len__(self):
        return len(self.dataset)

    def get_state(self):
        """``{"passes"}`` of a :class:`pyresnet.data.Dataset` (its pass
        counter fixes the pass's shuffle and augmentation draws), else None."""
        passes = getattr(self.dataset, "_passes", None)
        return None if passes is None else {"passes": int(passes)}

    def set_state(self, state):
        """Continue from a :meth:`get_state` (nothing for None)."""
        if state is not None and hasattr(self.dataset, "_passes"):
            self.dataset._passes = int(state["passes"])

    @staticmethod
    def _split(element):
        if isinstance(element, (tuple, list)) and len(element) in (2, 3):
            return element[0], element[1], element[2] if len(element) == 3 else None
        if isinstance(element, tuple) and len(element) == 1:
            return element[0], None, None
        return element, None, None

    def loop_passes(self):
        """As :meth:`ArrayBatches.loop_passes`, for a
        :class:`pyresnet.data.Dataset` of ``(x, y)`` batches made in C whose
        dtypes are the model's (x float32, y as the checks want); else None."""
        source = getattr(self.dataset, "_loop_source", None)
        source = source() if source is not None and not self.inputs_only else None
        if source is None:
            return None
        probe, single, feeder = source
        shapes = probe.batch_shapes
        if single or len(shapes) != 2 or len(probe) == 0:
            return None
        if self._check is not None:  # the model's checks, on the first batch of a probe pass
            x, y = next(iter(self.dataset._batch_iterator(0, self.dataset._c_maps()[0], 0)))
            self.y_dtypes = self._check([np.asarray(x)], [np.asarray(y)], None)
            self._check = None
        if shapes[0][0] != "float32" or not self.y_dtypes \
                or np.dtype(shapes[1][0]) != np.dtype(self.y_dtypes[0]):
            return None
        return probe, lambda: feeder()[0], 1

    def __iter__(self):
        for element in self.dataset:
            x, y, sw = self._split(element)
            if self.inputs_only:
                y = sw = None
            if self._arrange is not None:
                x, y, sw = self._arrange(x, y, sw)
            xs = list(x) if isinstance(x, (list, tuple)) else [x]
            ys = None if y is None else list(y) if isinstance(y, (list, tuple)) else [y]
            sws = None if sw is None else list(sw) if isinstance(sw, (list, tuple)) else [sw]
            if self._check is not None:
                views = [np.asarray(a) for a in xs]
                self.y_dtypes = self._check(views, None if ys is None else
                                            [np.asarray(a) for a in ys],
                                            None if sws is None else [np.asarray(a) for a in sws])
                self._check = None
            xt = [_tensor(a, np.float32) for a in xs]
            yt = None if ys is None else [
                _tensor(a, dt) for a, dt in zip(ys, self.y_dtypes or [None] * len(ys))]
            st = None if sws is None else [_tensor(a, np.float32) for a in sws]
            yield pack(xt, yt, st)
