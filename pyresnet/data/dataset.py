"""``Dataset``: an input pipeline with tf.data's names and semantics
(``from_tensor_slices``, ``from_generator``, ``zip``, ``shuffle``, ``batch``,
``map``, ``filter``, ``repeat``, ``take``, ``skip``, ``cache``,
``prefetch``).

How a pass runs.  For a dataset over in-memory arrays (``from_tensor_slices``,
a ``zip`` of them, or a filled ``cache()``), the element order is computed
first, as index arrays: each ``shuffle`` is a Philox-drawn buffer shuffle
(csrc/kernels/rng.c), and ``take``, ``skip``, ``repeat`` and ``filter``
before ``batch()`` only cut, chain or thin out that order (``filter`` calls
its predicate in Python on each source element the pass reaches, before any
map; see :meth:`Dataset.filter`).  Batches are then made by the C iterator
``_C.BatchIterator`` (csrc/pipeline.c): it gathers each batch's rows and runs
the ``map`` stages that are pyresnet preprocessing layers (``RandomCrop``,
``RandomFlip``, ``Normalization``, ``MixUp``, ..., or a ``Sequential`` of
them) as registered ops, with the GIL released.  With ``prefetch(n)`` it does
so on a worker thread (a pthread that touches no Python object), ``n``
batches ahead of the consumer, while the training step runs.  These kernels
run on one thread: a CIFAR-sized batch gains nothing from more, and the
worker should leave the cores to the training step.  ``take``, ``skip``,
``repeat`` and ``filter`` after ``batch()`` act on whole batches in Python
(a few operations per batch); the batches are still made in C.

A ``map`` of any other Python callable is supported too, but it runs in
Python: the C iterator makes the batches up to the first such map (without
its worker), the rest of the maps run in Python, and ``prefetch`` then uses a
Python thread, which competes with the consumer for the GIL.  A Python map
before ``batch()`` is called once per element (slow; put maps after
``batch()`` where you can).  Preprocessing layers mapped before ``batch()``
run after batching (they treat each image independently, so the result has
the same distribution; MixUp, which mixes a batch, must come after
``batch()``).  Likewise ``take``/``skip``/``repeat`` commute with maps.

Everything else runs in Python, element by element, with the same
semantics: ``from_generator``, a ``zip`` of datasets with their own
transformations, a ``filter`` after a map, a ``cache()`` on its first pass,
and whatever follows them until a ``cache()`` is filled (a filled cache of
single elements is arrays again, so what follows it runs in C).

Inside a compiled function (``pyresnet.compile``), ``for x, y in dataset:``
becomes one loop node of the graph (:mod:`pyresnet.loops`): every call
starts a new pass exactly as iterating eagerly does (the next shuffle, the
next augmentation draws), and the batches are made by the same C pipeline
between the body's runs, without returning to Python (on the loop's own
thread: ``prefetch`` does not apply there).  A dataset whose pass is not one
finite C iteration (a Python map, an infinite ``repeat``, ``take`` after
``batch``, ...) cannot be a loop node: iterating it while tracing warns and
unrolls the loop, its batches frozen into the graph as constants.

Determinism.  With fixed seeds (``shuffle(seed=...)``, the layers'
``seed=``) every pass is reproducible whatever the prefetching or thread
count: pass ``e`` shuffles with counter ``e`` (0 every pass with
``reshuffle_each_iteration=False``), and a random layer's draws for batch
``b`` of pass ``e`` come from the Philox stream (layer seed, (e << 32) + b,
image index).  Repetition ``r`` of a ``repeat(k)`` in pass ``e`` runs what
precedes it as pass ``e * k + r`` (``(e << 20) + r`` for ``repeat()``), so a
shuffled, repeated dataset reshuffles every repetition, as tf.data does with
``reshuffle_each_iteration=True``.  An infinite order is batched in chunks,
chunk ``c`` of pass ``e`` drawing as pass ``(e << 12) + c``.  Unseeded
shuffles and layers draw their seeds from Python's ``random`` (seeded by
:func:`pyresnet.utils.set_random_seed`).
"""
import itertools
import queue
import random
import threading

import numpy as np

from .._loader import _C
from ..models import Sequential
from ..tensor import Tensor
from ..utils import tree

_INT_KINDS = {np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)}

AUTOTUNE = -1
"""``tf.data.AUTOTUNE``: for ``prefetch`` (2 batches ahead) and
``map(num_parallel_calls=)`` (accepted)."""
INFINITE_CARDINALITY = -1
"""``cardinality()`` of an endless dataset (``tf.data.INFINITE_CARDINALITY``)."""
UNKNOWN_CARDINALITY = -2
"""``cardinality()`` when the length is not known before iterating
(``from_generator``, ``filter``; ``tf.data.UNKNOWN_CARDINALITY``)."""
_AUTOTUNE_DEPTH = 2
_CHUNK_ELEMENTS = 1 << 16  # indices per C iterator over an infinite order
_FILTER_PIECE = 256  # elements a filter on the order tests at a time
def _as_array(value, i):
    """A source component as a C-contiguous array of a dtype the core holds."""
    a = np.asarray(value)
    if a.dtype.kind == "f":
        a = a.astype(np.float32, copy=False)
    elif a.dtype.kind in "biu" and a.dtype not in _INT_KINDS:
        a = a.astype(np.int32)
    elif a.dtype.kind not in "iu":
        raise TypeError(f"Dataset.from_tensor_slices: component {i} must be numeric, got dtype "
                        f"{a.dtype}")
    if a.ndim == 0:
        raise ValueError(f"Dataset.from_tensor_slices: component {i} must have a first "
                         f"(element) axis, got a scalar")
    return np.ascontiguousarray(a)


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"Dataset.{name} must be a positive int, got {value!r}")
    return int(value)


def _pipeline_layers(fn):
    """The preprocessing layers that make up ``fn`` (the layer itself, or the
    layers of a Sequential made only of them), or None when C cannot run it."""
    if hasattr(fn, "_pipeline_stages"):
        return [fn]
    if isinstance(fn, Sequential) and fn.layers \
            and all(hasattr(layer, "_pipeline_stages") for layer in fn.layers):
        return list(fn.layers)
    return None


def _call_map(fn, element):
    """Apply a map in Python.  tf.data's convention: a tuple element is
    passed as positional arguments."""
    layers = _pipeline_layers(fn)
    if layers is None:
        return fn(*element) if isinstance(element, tuple) else fn(element)
    components = element if isinstance(element, tuple) else (element,)
    for layer in layers:
        components = layer._dataset_call(components)
    return components if isinstance(element, tuple) else components[0]




def _count_arg(value, name):
    """An element count: an int >= -1 (-1: all)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < -1:
        raise ValueError(f"Dataset.{name}: count must be an int >= -1 (-1: all), got {value!r}")
    return int(value)


def _truth(value, what):
    """The boolean a filter predicate returned (a bool, or a scalar bool
    array/Tensor, as tf.data wants).

    Raises:
        TypeError: anything else.
    """
    a = np.asarray(value)
    if a.shape != () or a.dtype != np.bool_:
        raise TypeError(f"Dataset.filter: {what} must return a scalar bool, got "
                        f"{type(value).__name__} of dtype {a.dtype} and shape {a.shape}")
    return bool(a)


def _inner_epoch(epoch, count, r):
    """The pass number repetition ``r`` of ``repeat(count)`` gives what precedes
    it in pass ``epoch`` (see the module docstring)."""
    return (epoch * count + r) if count is not None else ((epoch << 20) + r)


def _is_component(x):
    """A leaf of from_tensor_slices's nesting: anything but a dict or tuple."""
    return not isinstance(x, (dict, tuple))


def _unflat(flat, single):
    """An element from its components ``flat`` (a tuple): the one Tensor
    (``single`` True), the tuple (False), or the nesting of dicts and tuples
    that ``single`` holds (from_tensor_slices of a nested structure)."""
    if single is True:
        return flat[0]
    if single is False:
        return flat
    return tree.pack_sequence_as(single, list(flat), is_leaf=_is_component)


def _unflat_all(batches, single):
    return batches if single is False else (_unflat(b, single) for b in batches)


def _stack(items):
    """One batch of a list of (possibly nested) elements: each leaf stacked
    along a new first axis, as a Tensor."""
    flat = [tree.flatten(it) for it in items]
    leaves = [Tensor(np.stack([np.asarray(f[k]) for f in flat])) for k in range(len(flat[0]))]
    return tree.pack_sequence_as(items[0], leaves)


class _ArraySource:
    """Elements are the slices of ``arrays`` (a tuple), put together as
    ``single`` says (see :func:`_unflat`)."""

    def __init__(self, arrays, single):
        self.arrays, self.single = arrays, single

    def arrays_now(self):
        return self.arrays, self.single

    def cardinality(self):
        return len(self.arrays[0])

    def elements(self, epoch):
        for i in range(len(self.arrays[0])):
            yield _unflat(tuple(Tensor(a[i]) for a in self.arrays), self.single)


class _GeneratorSource:
    """Elements are what ``generator(*args)`` yields, checked against and
    converted to ``signature`` (a TensorSpec or a tuple of them)."""

    def __init__(self, generator, args, signature):
        self.generator, self.args, self.signature = generator, args, signature

    def arrays_now(self):
        return None

    def cardinality(self):
        return UNKNOWN_CARDINALITY

    def elements(self, epoch):
        specs = self.signature
        single = not isinstance(specs, tuple)
        for n, value in enumerate(self.generator(*self.args)):
            values = (value,) if single else value
            if not isinstance(values, (tuple, list)) or len(values) != len(specs if not single
                                                                           else (specs,)):
                raise TypeError(f"Dataset.from_generator: element {n} does not match "
                                f"output_signature {specs!r}: got {type(value).__name__}")
            out = []
            for k, (v, spec) in enumerate(zip(values, (specs,) if single else specs)):
                a = np.asarray(v.numpy() if isinstance(v, Tensor) else v)
                if a.dtype.kind not in "biuf" or (a.dtype.kind == "f") != (spec.dtype[0] == "f" or
                                                                          spec.dtype == "bfloat16"):
                    raise TypeError(f"Dataset.from_generator: element {n}, component {k}: "
                                    f"dtype {a.dtype} does not match {spec.dtype}")
                if a.ndim != len(spec.shape) or any(d is not None and d != s
                                                    for d, s in zip(spec.shape, a.shape)):
                    raise ValueError(f"Dataset.from_generator: element {n}, component {k}: "
                                     f"shape {a.shape} does not match {spec.shape}")
                out.append(Tensor(np.array(a, dtype=spec.dtype, order="C")))
            yield out[0] if single else tuple(out)


class _ZipSource:
    """Elements are tuples of the zipped datasets' elements, up to the shortest."""

    def __init__(self, datasets):
        self.datasets = datasets

    def arrays_now(self):
        """Arrays when every dataset is plain slices of single components."""
        if any(d._steps or d._source.arrays_now() is None or d._source.arrays_now()[1] is not True
               for d in self.datasets):
            return None
        n = min(len(d._source.arrays[0]) for d in self.datasets)
        return tuple(d._source.arrays[0][:n] for d in self.datasets), False

    def cardinality(self):
        counts = [d._cardinality() for d in self.datasets]
        if UNKNOWN_CARDINALITY in counts:
            return UNKNOWN_CARDINALITY
        finite = [c for c in counts if c != INFINITE_CARDINALITY]
        return min(finite) if finite else INFINITE_CARDINALITY

    def elements(self, epoch):
        return zip(*(d._pass(epoch) for d in self.datasets))


class _CacheSource:
    """The elements of ``upstream``, recorded on its first complete pass and
    replayed afterwards (as arrays when they are single elements of fixed
    shapes, so that what follows runs in C)."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.filled = None  # ("arrays", arrays, single) or ("list", elements)
        self.lock = threading.Lock()

    def arrays_now(self):
        filled = self.filled
        return (filled[1], filled[2]) if filled is not None and filled[0] == "arrays" else None

    def cardinality(self):
        return self.upstream._cardinality()

    def elements(self, epoch):
        filled = self.filled
        if filled is not None:
            if filled[0] == "list":
                yield from filled[1]
            else:
                yield from _ArraySource(filled[1], filled[2]).elements(epoch)
            return
        record = None if self.upstream._endless() else []
        for element in self.upstream._pass(epoch):
            if record is not None:
                record.append(element)
            yield element
        if record is not None:
            with self.lock:
                if self.filled is None:
                    self.filled = self._freeze(record)

    @staticmethod
    def _freeze(elements):
        first = elements[0] if elements else None
        flat = [tree.flatten(e) for e in elements]
        if first is not None and (not isinstance(first, tuple) or
                                  all(not isinstance(c, (tuple, list, dict)) for c in first)):
            shapes = {tuple(tuple(np.shape(c)) for c in f) for f in flat}
            if len(shapes) == 1:
                arrays = tuple(_as_array(np.stack([np.asarray(f[k]) for f in flat]), k)
                               for k in range(len(flat[0])))
                return ("arrays", arrays, not isinstance(first, tuple))
        return ("list", list(elements))


class Dataset:
    """A sequence of elements (a Tensor, or a tuple of Tensors such as
    ``(images, labels)``), transformed lazily; iterate it once per epoch.

    Make one with :meth:`from_tensor_slices`, :meth:`from_generator` or
    :meth:`zip`; every other method returns a new Dataset.  ``len(ds)`` is
    the number of elements (batches after ``batch()``) when it is finite
    and known.  See the module docstring for what runs in C, what in
    Python, and what makes passes deterministic.
    """

    def __init__(self, source, steps=()):
        self._source = source
        self._steps = steps
        self._passes = 0

    @property
    def _arrays(self):
        """The source arrays when the elements are slices of in-memory arrays
        (else None)."""
        now = self._source.arrays_now()
        return None if now is None else now[0]

    # ---- sources -------------------------------------------------------------------

    @classmethod
    def from_tensor_slices(cls, tensors):
        """A Dataset whose elements are the slices of ``tensors`` along the
        first axis.

        Args:
            tensors: an array or Tensor ``(N, ...)``, a tuple/list of them
                with the same N (e.g. ``(x_train, y_train)``), or, as tf.data,
                a nesting of dicts and tuples of them (``({"image": x,
                "meta": m}, y)``): elements then have that nesting (dicts
                with their keys, tuples as tuples; a list inside is one
                array, as tf.data converts it).  They are converted once:
                float data to float32, uint8/int32/int64 kept, other integer
                types to int32.  Do not modify the arrays while iterating.
                In a nested element the preprocessing layers of ``map`` run
                on the first array in flattening order (dict keys sorted),
                and the pass runs outside compiled loops.
        Raises:
            ValueError: different lengths, scalars, an empty tuple or dict.
            TypeError: non-numeric data.
        """
        single = not isinstance(tensors, (tuple, list, dict))
        top = (tensors,) if single else tuple(tensors) if isinstance(tensors, list) else tensors
        components = tree.flatten(top, is_leaf=_is_component)
        if not components:
            raise ValueError("Dataset.from_tensor_slices: got an empty tuple or dict")
        arrays = tuple(_as_array(c, i) for i, c in enumerate(components))
        lengths = [len(a) for a in arrays]
        if len(set(lengths)) != 1:
            raise ValueError(f"Dataset.from_tensor_slices: components must have the same first "
                             f"dimension, got shapes {[a.shape for a in arrays]}")
        if not single and (isinstance(top, dict) or not all(_is_component(c) for c in top)):
            single = tree.map_structure(lambda c: None, top, is_leaf=_is_component)
        return cls(_ArraySource(arrays, single))

    @classmethod
    def from_generator(cls, generator, output_types=None, output_shapes=None, args=None,
                       output_signature=None):
        """A Dataset of the elements ``generator(*args)`` yields
        (``tf.data.Dataset.from_generator``); runs in Python.

        Args:
            generator: a callable returning an iterator; called once per pass.
            output_types, output_shapes: tf.data's older form of the
                signature: a dtype (or tuple of dtypes) and a shape (or tuple
                of shapes, default unknown rank is not supported: give them).
            args: a tuple of arguments for ``generator``.
            output_signature: a :class:`pyresnet.TensorSpec` (or a tuple of
                them, one per component of a tuple element), e.g.
                ``(TensorSpec((32, 32, 3), "float32"), TensorSpec((), "int32"))``;
                ``None`` dimensions match any size.
        Returns:
            Dataset of Tensors of the signature's dtypes; ``cardinality()``
            is UNKNOWN_CARDINALITY.  A yielded element of another structure,
            kind of dtype (floats for ints or back) or shape raises
            TypeError / ValueError naming the element when it is reached.
        Raises:
            TypeError: ``generator`` not callable, or no signature given.
        """
        if not callable(generator):
            raise TypeError(f"Dataset.from_generator: generator must be callable (returning an "
                            f"iterator), got {type(generator).__name__}")
        from ..compile import TensorSpec
        if output_signature is None:
            if output_types is None:
                raise TypeError("Dataset.from_generator: give output_signature (a TensorSpec or "
                                "a tuple of them)")
            if isinstance(output_types, (tuple, list)):
                shapes = output_shapes if output_shapes is not None else [None] * len(output_types)
                if shapes is None or any(s is None for s in shapes):
                    raise TypeError("Dataset.from_generator: give output_shapes with "
                                    "output_types (or use output_signature)")
                output_signature = tuple(TensorSpec(s, t) for s, t in zip(shapes, output_types))
            else:
                if output_shapes is None:
                    raise TypeError("Dataset.from_generator: give output_shapes with "
                                    "output_types (or use output_signature)")
                output_signature = TensorSpec(output_shapes, output_types)
        specs = output_signature if isinstance(output_signature, tuple) else (output_signature,)
        if isinstance(output_signature, list) or not specs or not all(
                hasattr(s, "shape") and hasattr(s, "dtype") for s in specs):
            raise TypeError(f"Dataset.from_generator: output_signature must be a TensorSpec or "
                            f"a tuple of them, got {output_signature!r}")
        specs = tuple(TensorSpec(tuple(s.shape), str(getattr(s.dtype, "name", s.dtype)))
                      for s in specs)
        signature = specs if isinstance(output_signature, tuple) else specs[0]
        return cls(_GeneratorSource(generator, tuple(args or ()), signature))

    @staticmethod
    def zip(*datasets):
        """A Dataset of tuples of the elements of ``datasets`` (a tuple of
        Datasets, or several Datasets as arguments), up to the shortest one,
        as ``tf.data.Dataset.zip``.  Datasets of single components made only
        by ``from_tensor_slices`` zip into arrays (the pipeline after it runs
        in C); others are iterated side by side in Python.

        Raises:
            TypeError: something other than Datasets.
        """
        if len(datasets) == 1 and isinstance(datasets[0], (tuple, list)):
            datasets = tuple(datasets[0])
        if not datasets or not all(isinstance(d, Dataset) for d in datasets):
            raise TypeError(f"Dataset.zip: expected Datasets (or a tuple of them), got "
                            f"{[type(d).__name__ for d in datasets]}")
        return Dataset(_ZipSource(tuple(datasets)))

    # ---- transformations ---------------------------------------------------------------

    def _then(self, *step):
        return Dataset(self._source, self._steps + (step,))

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        """Shuffle the elements with a buffer of ``buffer_size`` (tf.data's
        algorithm: ``buffer_size >= len`` gives a uniform permutation).

        Args:
            buffer_size (int): >= 1.
            seed (int): in [0, 2**63); None draws one from Python's ``random``.
            reshuffle_each_iteration (bool): a new order every pass (and
                every repetition of a following ``repeat``).

        After an endless ``repeat()`` on an array dataset, each repetition
        is shuffled on its own (tf.data's buffer would also mix the seam
        between repetitions); shuffle before ``repeat()``, as the tf.data
        guide advises, for one permutation per repetition.
        Raises:
            ValueError: bad buffer_size or seed; NotImplementedError after batch().
        """
        buffer_size = _positive_int(buffer_size, "shuffle: buffer_size")
        if any(s[0] == "batch" for s in self._steps):
            raise NotImplementedError("Dataset.shuffle after batch() (shuffling batches) is not "
                                      "supported; shuffle the elements before batch()")
        if seed is None:
            seed = random.getrandbits(63)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
                or not 0 <= seed < 2**63:
            raise ValueError(f"Dataset.shuffle: seed must be an int in [0, 2**63), got {seed!r}")
        return self._then("shuffle", buffer_size, int(seed), bool(reshuffle_each_iteration))

    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None,
              deterministic=None):
        """Combine consecutive elements into batches of ``batch_size`` (the
        last one smaller unless ``drop_remainder``).  ``num_parallel_calls``
        and ``deterministic`` are accepted for tf.data's signature.

        Raises:
            ValueError: batch_size < 1; NotImplementedError for a second batch().
        """
        batch_size = _positive_int(batch_size, "batch: batch_size")
        if any(s[0] == "batch" for s in self._steps):
            raise NotImplementedError("Dataset.batch: batching twice is not supported")
        return self._then("batch", batch_size, bool(drop_remainder))

    def map(self, fn, num_parallel_calls=None, deterministic=None):
        """Apply ``fn`` to every element (every batch after ``batch()``).

        Args:
            fn: a pyresnet preprocessing layer, or a ``Sequential`` of them
                (runs in C; applied to the images, the first component, with
                ``training=True``; MixUp takes and returns ``(images,
                labels)``), or any callable taking the element's components as
                positional arguments and returning the new element (runs in
                Python).
            num_parallel_calls: None, an int or ``AUTOTUNE``: accepted for
                tf.data's signature; layers run on the C worker thread
                (``prefetch``), Python maps one at a time.
            deterministic: accepted (the output order is always deterministic).
        Raises:
            TypeError: when ``fn`` is not callable.
            ValueError: a num_parallel_calls other than None, AUTOTUNE or >= 1.
        """
        if not callable(fn):
            raise TypeError(f"Dataset.map: fn must be callable, got {type(fn).__name__}")
        if num_parallel_calls is not None and num_parallel_calls != AUTOTUNE:
            _positive_int(num_parallel_calls, "map: num_parallel_calls")
        return self._then("map", fn)

    def filter(self, predicate):
        """Keep the elements for which ``predicate`` (called with the
        element's components as positional arguments) returns True (a bool
        or a scalar bool Tensor/array), as ``tf.data.Dataset.filter``.

        Before any map and before ``batch()`` on an array dataset, the
        predicate runs in Python on each source element the pass reaches
        (once per pass) and only thins out the element order, so batching
        and augmentation still run in C; elsewhere it runs in the Python
        pass.  ``cardinality()`` becomes UNKNOWN_CARDINALITY.

        Raises:
            TypeError: ``predicate`` not callable (a non-bool result raises
                TypeError when it happens).
        """
        if not callable(predicate):
            raise TypeError(f"Dataset.filter: predicate must be callable, got "
                            f"{type(predicate).__name__}")
        return self._then("filter", predicate)

    def repeat(self, count=None):
        """The elements ``count`` times over (None or -1: forever), as
        ``tf.data.Dataset.repeat``: each repetition is a new pass of what
        precedes it, so a shuffle before it reshuffles every repetition
        (with ``reshuffle_each_iteration=True``) and augmentation draws
        anew.  Before ``batch()`` batches run across repetitions' seams.
        An empty dataset repeated forever is empty.

        Raises:
            ValueError: count not None or an int >= -1.
        """
        if count is not None:
            count = _count_arg(count, "repeat")
        return self._then("repeat", None if count in (None, -1) else count)

    def take(self, count):
        """The first ``count`` elements (all of them for -1 or a larger count).

        Raises:
            ValueError: count not an int >= -1.
        """
        return self._then("take", _count_arg(count, "take"))

    def skip(self, count):
        """All but the first ``count`` elements (none for -1; none when
        ``count`` exceeds the length).

        Raises:
            ValueError: count not an int >= -1.
        """
        return self._then("skip", _count_arg(count, "skip"))

    def cache(self, filename=""):
        """Keep the elements of the first complete pass in memory and replay
        them on later passes (``tf.data.Dataset.cache()``): what comes
        before runs once (random maps and shuffles before it are frozen;
        put ``shuffle`` and augmentation after it).  A pass stopped early
        fills nothing; an infinite dataset is never cached.  Single elements
        (a Tensor or a flat tuple) of fixed shapes are kept as arrays, so
        the pipeline after a filled cache runs in C.

        Args:
            filename: only ``""`` (in memory); a file cache is not supported.
        Raises:
            NotImplementedError: a filename.
        """
        if filename:
            raise NotImplementedError(f"Dataset.cache: only the in-memory cache (filename='') "
                                      f"is supported, got {filename!r}")
        return Dataset(_CacheSource(self))

    def prefetch(self, buffer_size):
        """Prepare up to ``buffer_size`` batches ahead on a background thread
        (the C worker when every map is a pyresnet layer and the batches
        come straight from C); 0 prefetches nothing; ``AUTOTUNE`` (-1) is 2.

        Raises:
            ValueError: a non-int buffer_size or one below -1.
        """
        if buffer_size == AUTOTUNE and not isinstance(buffer_size, bool):
            buffer_size = _AUTOTUNE_DEPTH
        elif buffer_size != 0:
            buffer_size = _positive_int(buffer_size, "prefetch: buffer_size")
        return self._then("prefetch", int(buffer_size))

    # ---- size ------------------------------------------------------------------------

    def _cardinality(self, steps=None):
        n = self._source.cardinality()
        for step in self._steps if steps is None else steps:
            kind = step[0]
            if kind == "batch" and n >= 0:
                n = n // step[1] if step[2] else -(-n // step[1])
            elif kind == "filter":
                n = UNKNOWN_CARDINALITY
            elif kind == "take" and step[1] >= 0:
                n = step[1] if n == INFINITE_CARDINALITY else min(n, step[1]) if n >= 0 else n
            elif kind == "skip" and n != UNKNOWN_CARDINALITY:
                n = n if n == INFINITE_CARDINALITY else 0 if step[1] == -1 else max(n - step[1], 0)
            elif kind == "repeat":
                if n == 0 or step[1] == 0:
                    n = 0
                elif step[1] is None:
                    n = INFINITE_CARDINALITY
                elif n >= 0:
                    n = n * step[1]
        return n

    def _endless(self, steps=None):
        """Whether a pass through ``steps`` (default all) may never end: an
        infinite source or ``repeat()`` not followed by a ``take``."""
        endless = self._source.cardinality() == INFINITE_CARDINALITY
        for step in self._steps if steps is None else steps:
            if step[0] == "repeat" and step[1] is None:
                endless = True
            elif step[0] == "take" and step[1] >= 0:
                endless = False
        return endless

    def cardinality(self):
        """The number of elements (batches after ``batch()``), as an int:
        INFINITE_CARDINALITY (-1) or UNKNOWN_CARDINALITY (-2) as tf.data."""
        return self._cardinality()

    def __len__(self):
        n = self._cardinality()
        if n == INFINITE_CARDINALITY:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN_CARDINALITY:
            raise TypeError("The dataset length is unknown.")
        return n

    # ---- planning ----------------------------------------------------------------------

    def _batch_spec(self):
        return next(((s[1], s[2]) for s in self._steps if s[0] == "batch"), None)

    def _split_steps(self):
        """(steps before batch, steps after) for the array path (all steps
        and None without batch()), or None when the steps need the Python
        pass (no arrays, a filter after a map before batch, a filter after
        batch before a map)."""
        if self._source.arrays_now() is None:
            return None
        at = next((i for i, s in enumerate(self._steps) if s[0] == "batch"), None)
        if at is None:
            pre, post = self._steps, ()
        else:
            pre, post = self._steps[:at], self._steps[at + 1:]
        mapped = False
        for s in pre:
            mapped = mapped or s[0] == "map"
            if s[0] == "filter" and mapped:
                return None
        filtered = False
        for s in post:
            filtered = filtered or s[0] == "filter"
            if s[0] == "map" and filtered:
                return None
        return pre, post

    def _plan(self):
        """(maps before batch, maps after batch, prefetch depth)."""
        before, after, depth, batched = [], [], 0, False
        for step in self._steps:
            if step[0] == "batch":
                batched = True
            elif step[0] == "map":
                (after if batched else before).append(step[1])
            elif step[0] == "prefetch":
                depth = max(depth, step[1])
        return before, after, depth

    def _c_maps(self):
        """(C layers, Python maps after them) when the batches are made in C
        (arrays, batched, every map before batch() a pyresnet layer), else None."""
        if self._split_steps() is None or self._batch_spec() is None:
            return None
        before, after, _ = self._plan()
        if any(_pipeline_layers(fn) is None for fn in before):
            return None
        for layer in (layer for fn in before for layer in _pipeline_layers(fn)):
            if getattr(layer, "_batch_level", False):
                raise ValueError(f"Dataset.map: {type(layer).__name__} mixes a batch; map it "
                                 "after batch()")
        maps = before + after
        n_c = next((i for i, fn in enumerate(maps) if _pipeline_layers(fn) is None), len(maps))
        return [layer for fn in maps[:n_c] for layer in _pipeline_layers(fn)], maps[n_c:]

    def _hoisted_maps(self):
        """The map steps that run in the C iterator (see :meth:`_c_maps`)."""
        maps = self._c_maps()
        if maps is None:
            return []
        steps = [s for s in self._steps if s[0] == "map"]
        return steps[:len(steps) - len(maps[1])]

    def _one_c_pass(self):
        """Whether a pass is exactly one finite C iteration (nothing after
        batch() but C layers and prefetch; a finite order)."""
        maps = self._c_maps()
        if maps is None or maps[1]:
            return False
        pre, post = self._split_steps()
        return all(s[0] in ("map", "prefetch") for s in post) and not self._endless(pre)

    # ---- the element order (arrays) -----------------------------------------------------

    def _element(self, i, arrays, single):
        return _unflat(tuple(Tensor(a[i]) for a in arrays), single)

    def _order_chunks(self, ops, epoch, arrays, single):
        """The element order of pass ``epoch`` through the order steps ``ops``
        (shuffle, take, skip, repeat, filter; maps and prefetch ignored), as
        a stream of int64 index arrays."""
        ops = [s for s in ops if s[0] not in ("map", "prefetch")]
        if not ops:
            yield np.arange(len(arrays[0]), dtype=np.int64)
            return
        *up, last = ops
        kind = last[0]
        if kind == "shuffle":
            _, buffer_size, seed, reshuffle = last
            counter = epoch if reshuffle else 0
            if not self._endless(up):
                order = np.concatenate(list(self._order_chunks(up, epoch, arrays, single))
                                       or [np.zeros(0, np.int64)])
                yield order[_C.shuffle_order(len(order), buffer_size, seed,
                                             counter & 0xFFFFFFFFFFFFFFFF)]
            else:  # each chunk of an endless order shuffled on its own
                for c, chunk in enumerate(self._order_chunks(up, epoch, arrays, single)):
                    yield chunk[_C.shuffle_order(len(chunk), buffer_size, seed,
                                                 ((counter << 20) + c) & 0xFFFFFFFFFFFFFFFF)]
        elif kind == "repeat":
            count = last[1]
            for r in itertools.count() if count is None else range(count):
                empty = True
                for chunk in self._order_chunks(up, _inner_epoch(epoch, count, r), arrays,
                                                single):
                    empty = empty and len(chunk) == 0
                    yield chunk
                if empty:
                    return
        elif kind == "take":
            left = last[1]
            if left == -1:
                yield from self._order_chunks(up, epoch, arrays, single)
                return
            if left == 0:
                return
            for chunk in self._order_chunks(up, epoch, arrays, single):
                yield chunk[:left]
                left -= len(chunk[:left])
                if left == 0:
                    return  # without drawing the next chunk
        elif kind == "skip":
            left = last[1]
            for chunk in self._order_chunks(up, epoch, arrays, single):
                if left == -1:
                    continue
                if left >= len(chunk):
                    left -= len(chunk)
                    continue
                yield chunk[left:]
                left = 0
        elif kind == "filter":
            predicate = last[1]
            for chunk in self._order_chunks(up, epoch, arrays, single):
                for at in range(0, len(chunk), _FILTER_PIECE):  # lazily, for a take after it
                    piece = chunk[at:at + _FILTER_PIECE]
                    keep = [_truth(_call_map(predicate, self._element(i, arrays, single)),
                                   "the predicate") for i in piece]
                    yield piece[np.asarray(keep, dtype=bool)]
        else:  # pragma: no cover - every order step is handled above
            raise AssertionError(kind)

    def _order(self, epoch):
        """Pass ``epoch``'s whole (finite) element order before batch()."""
        now = self._source.arrays_now()
        pre = self._split_steps()[0] if self._split_steps() is not None else self._steps
        chunks = list(self._order_chunks(pre, epoch, now[0], now[1]))
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int64)

    # ---- iteration ---------------------------------------------------------------------

    def _batch_iterator(self, epoch, c_layers, prefetch, order=None):
        """The C iterator over pass ``epoch``'s batches through ``c_layers``."""
        arrays = self._source.arrays_now()[0]
        stages, shapes = [], [(None,) + a.shape[1:] for a in arrays]
        for layer in c_layers:
            more, shapes = layer._pipeline_stages(shapes)
            stages += more
        spec = self._batch_spec()
        order = self._order(epoch) if order is None else order
        return _C.BatchIterator(arrays, order, spec[0], spec[1], stages,
                                prefetch=prefetch, epoch=epoch & 0xFFFFFFFF)

    def _loop_source(self):
        """For a compiled function iterating this dataset
        (:mod:`pyresnet.loops`): ``(probe, single, feeder)``, where probe is a
        BatchIterator giving the batch shapes (no pass is counted) and
        ``feeder()`` starts the next pass as iterating eagerly would
        (``(BatchIterator, 0, batches)``); None when the pass is not one
        finite C iteration."""
        if not self._one_c_pass() or self._source.arrays_now()[1] not in (True, False):
            return None  # (nested elements: iterated in Python)
        c_layers = self._c_maps()[0]

        def feeder():
            epoch = self._passes
            self._passes += 1
            batches = self._batch_iterator(epoch, c_layers, 0)
            return batches, 0, len(batches)

        return self._batch_iterator(0, c_layers, 0), self._source.arrays_now()[1], feeder

    def __iter__(self):
        if _C.tracing():
            from ..loops import dataset_loop
            loop = dataset_loop(self, self._loop_source(), stacklevel=2)
            if loop is not None:
                return loop
        epoch = self._passes
        self._passes += 1
        return self._pass(epoch)

    def _pass(self, epoch):
        """An iterator over pass ``epoch``'s elements."""
        depth = self._plan()[2]
        split = self._split_steps()
        if split is None:
            items = self._python_steps(self._steps, epoch)
            return _prefetched(lambda: items, depth) if depth else items
        if self._batch_spec() is None:  # elements: the order, then the maps, in Python
            arrays, single = self._source.arrays_now()
            maps = [s[1] for s in self._steps if s[0] == "map"]
            items = (_call_map_all(maps, self._element(i, arrays, single))
                     for i in itertools.chain.from_iterable(
                         self._order_chunks(self._steps, epoch, arrays, single)))
            return _prefetched(lambda: items, depth) if depth else items
        if self._one_c_pass():
            batches = self._batch_iterator(epoch, self._c_maps()[0], depth)
            return _unflat_all(batches, self._source.arrays_now()[1])
        items = self._post_steps(split[1], epoch)
        return _prefetched(lambda: items, depth) if depth else items

    def _batches(self, epoch):
        """Pass ``epoch``'s batches through the steps up to batch() and the C
        layers after it (in C unless a map before batch runs in Python)."""
        arrays, single = self._source.arrays_now()
        pre = self._split_steps()[0]
        maps = self._c_maps()
        if maps is None:  # Python maps before batch: the element-wise Python pass
            before = [s[1] for s in pre if s[0] == "map"]
            order = itertools.chain.from_iterable(self._order_chunks(pre, epoch, arrays, single))
            yield from self._python_batches(order, before, arrays, single)
            return
        c_layers = maps[0]
        if not self._endless(pre):
            batches = self._batch_iterator(epoch, c_layers, 0)
            yield from _unflat_all(batches, single)
            return
        size = self._batch_spec()[0]
        chunk_size = max(size, _CHUNK_ELEMENTS // size * size)
        pending, c = np.zeros(0, np.int64), 0
        for chunk in self._order_chunks(pre, epoch, arrays, single):
            pending = np.concatenate([pending, chunk])
            while len(pending) >= chunk_size:
                batches = self._batch_iterator((epoch << 12) + c, c_layers, 0,
                                               order=pending[:chunk_size])
                pending, c = pending[chunk_size:], c + 1
                yield from _unflat_all(batches, single)
        if len(pending):  # an endless order that ended after all (a take after repeat)
            batches = self._batch_iterator((epoch << 12) + c, c_layers, 0, order=pending)
            yield from _unflat_all(batches, single)

    def _python_batches(self, order, before, arrays, single):
        """Batches made in Python from the element ``order`` (an iterator of
        indices), each element through the ``before`` maps."""
        size, drop = self._batch_spec()
        while True:
            items = [_call_map_all(before, self._element(i, arrays, single))
                     for i in itertools.islice(order, size)]
            if not items or (drop and len(items) < size):
                return
            yield _stack(items)

    def _post_steps(self, post, epoch):
        """Apply the steps after batch() (``post``) to pass ``epoch``'s
        batches, in Python; the C layers among the maps already ran in C."""
        if not post:
            yield from self._batches(epoch)
            return
        *up, last = post
        kind = last[0]
        if kind == "map":
            if any(last is step for step in self._hoisted_maps()):
                yield from self._post_steps(up, epoch)  # ran in C
                return
            for element in self._post_steps(up, epoch):
                yield _call_map(last[1], element)
        elif kind == "prefetch":
            yield from self._post_steps(up, epoch)
        else:
            yield from _transform(kind, last, lambda e: self._post_steps(up, e), epoch)

    def _python_steps(self, steps, epoch):
        """Pass ``epoch`` through ``steps`` entirely in Python."""
        if not steps:
            yield from self._source.elements(epoch)
            return
        *up, last = steps
        kind = last[0]
        upstream = lambda e: self._python_steps(up, e)  # noqa: E731
        if kind == "map":
            for element in upstream(epoch):
                yield _call_map(last[1], element)
        elif kind == "prefetch":
            yield from upstream(epoch)
        elif kind == "batch":
            size, drop = last[1], last[2]
            iterator = upstream(epoch)
            while True:
                items = list(itertools.islice(iterator, size))
                if not items or (drop and len(items) < size):
                    return
                yield _stack(items)
        elif kind == "shuffle":
            _, buffer_size, seed, reshuffle = last
            yield from _buffer_shuffle(upstream(epoch), buffer_size, seed,
                                       epoch if reshuffle else 0)
        else:
            yield from _transform(kind, last, upstream, epoch)

    def __repr__(self):
        kinds = " -> ".join(s[0] for s in self._steps) or "elements"
        n = self._cardinality()
        size = {INFINITE_CARDINALITY: "infinite", UNKNOWN_CARDINALITY: "unknown number of"}.get(
            n, str(n))
        arrays = self._arrays
        shapes = f", element shapes {[a.shape[1:] for a in arrays]}" if arrays is not None else ""
        return f"<Dataset {kinds}, {size} elements{shapes}>"


def _call_map_all(maps, element):
    for fn in maps:
        element = _call_map(fn, element)
    return element


def _transform(kind, step, upstream, epoch):
    """take / skip / repeat / filter over the iterator ``upstream(epoch)``
    (``upstream(e)`` starts pass ``e`` of what precedes the step)."""
    if kind == "take":
        count = step[1]
        yield from upstream(epoch) if count == -1 else itertools.islice(upstream(epoch), count)
    elif kind == "skip":
        count = step[1]
        iterator = upstream(epoch)
        if count == -1:
            for _ in iterator:
                pass
            return
        yield from itertools.islice(iterator, count, None)
    elif kind == "repeat":
        count = step[1]
        for r in itertools.count() if count is None else range(count):
            empty = True
            for element in upstream(_inner_epoch(epoch, count, r)):
                empty = False
                yield element
            if empty:
                return
    elif kind == "filter":
        for element in upstream(epoch):
            if _truth(_call_map(step[1], element), "the predicate"):
                yield element
    else:  # pragma: no cover
        raise AssertionError(kind)


def _buffer_shuffle(iterator, buffer_size, seed, counter):
    """tf.data's shuffle buffer over an iterator of unknown length: fill
    ``buffer_size`` elements, emit a uniformly drawn one and put the next in
    its place (NumPy's Philox generator keyed by ``(seed, counter)``)."""
    rng = np.random.Generator(np.random.Philox(key=[seed & 0xFFFFFFFFFFFFFFFF,
                                                    counter & 0xFFFFFFFFFFFFFFFF]))
    buffer = list(itertools.islice(iterator, buffer_size))
    for element in iterator:
        k = int(rng.integers(len(buffer)))
        yield buffer[k]
        buffer[k] = element
    while buffer:
        k = int(rng.integers(len(buffer)))
        buffer[k], buffer[-1] = buffer[-1], buffer[k]
        yield buffer.pop()


class _prefetched:
    """Iterate ``make()`` on a Python thread, ``depth`` items ahead; errors
    are re-raised in the consumer.  Dropping the iterator stops the thread."""

    _DONE = object()

    def __init__(self, make, depth):
        self._queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        threading.Thread(target=_produce, args=(make, self._queue, self._stop),
                         daemon=True).start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._stop.is_set():
            raise StopIteration
        item, error = self._queue.get()
        if error is not None or item is _prefetched._DONE:
            self._stop.set()
            if error is not None:
                raise error
            raise StopIteration
        return item

    def __del__(self):
        self._stop.set()


def _produce(make, q, stop):
    """The producer thread of :class:`_prefetched` (holds no reference to it)."""

    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    try:
        for item in make():
            if not put((item, None)):
                return
    except BaseException as e:  # handed to the consumer
        put((None, e))
        return
    put((_prefetched._DONE, None))
