"""``Dataset``: an input pipeline over in-memory arrays with tf.data's names
(``from_tensor_slices``, ``shuffle``, ``batch``, ``map``, ``prefetch``).

How a pass runs.  The element order is computed first (each ``shuffle`` is a
Philox-drawn buffer shuffle, csrc/kernels/rng.c).  Batches are then made by
the C iterator ``_C.BatchIterator`` (csrc/pipeline.c): it gathers each
batch's rows and runs the ``map`` stages that are pyresnet preprocessing
layers (``RandomCrop``, ``RandomFlip``, ``Normalization``, ``MixUp``, ...,
or a ``Sequential`` of them) as registered ops, with the GIL released.  With
``prefetch(n)`` it does so on a worker thread (a pthread that touches no
Python object), ``n`` batches ahead of the consumer, while the training step
runs.  These kernels run on one thread: a CIFAR-sized batch gains nothing
from more, and the worker should leave the cores to the training step.

A ``map`` of any other Python callable is supported too, but it runs in
Python: the C iterator makes the batches up to the first such map (without
its worker), the rest of the maps run in Python, and ``prefetch`` then uses a
Python thread, which competes with the consumer for the GIL.  A Python map
before ``batch()`` is called once per element (slow; put maps after
``batch()`` where you can).  Preprocessing layers mapped before ``batch()``
run after batching (they treat each image independently, so the result has
the same distribution; MixUp, which mixes a batch, must come after
``batch()``).

Inside a compiled function (``pyresnet.compile``), ``for x, y in dataset:``
becomes one loop node of the graph (:mod:`pyresnet.loops`): every call
starts a new pass exactly as iterating eagerly does (the next shuffle, the
next augmentation draws), and the batches are made by the same C pipeline
between the body's runs, without returning to Python (on the loop's own
thread: ``prefetch`` does not apply there).  A dataset with a Python map
cannot be a loop node: iterating it while tracing warns and unrolls the
loop, its batches frozen into the graph as constants.

Determinism.  With fixed seeds (``shuffle(seed=...)``, the layers'
``seed=``) every pass is reproducible whatever the prefetching or thread
count: pass ``e`` shuffles with counter ``e`` (0 every pass with
``reshuffle_each_iteration=False``), and a random layer's draws for batch
``b`` of pass ``e`` come from the Philox stream (layer seed, (e << 32) + b,
image index).  Unseeded shuffles and layers draw their seeds from Python's
``random`` (seeded by :func:`pyresnet.utils.set_random_seed`).
"""
import queue
import random
import threading

import numpy as np

from .._loader import _C
from ..models import Sequential
from ..tensor import Tensor
from ..utils import tree

_INT_KINDS = {np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.uint8)}


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


def _is_component(x):
    """A leaf of from_tensor_slices's nesting: anything but a dict or tuple."""
    return not isinstance(x, (dict, tuple))


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


class Dataset:
    """A finite sequence of elements (a Tensor, or a tuple of Tensors such as
    ``(images, labels)``), transformed lazily; iterate it once per epoch.

    Make one with :meth:`from_tensor_slices`; every other method returns a
    new Dataset.  ``len(ds)`` is the number of elements (batches after
    ``batch()``).  See the module docstring for how passes run in C and what
    makes them deterministic.
    """

    def __init__(self, arrays, single, steps=()):
        self._arrays = arrays
        self._single = single
        self._steps = steps
        self._passes = 0

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
                on the first array in flattening order (dict keys sorted).
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
        dataset = cls(arrays, single)
        if isinstance(top, dict) or any(not _is_component(c) for c in top):
            dataset._structure = tree.map_structure(lambda c: None, top, is_leaf=_is_component)
        return dataset

    # The nesting of an element made of dicts and tuples (None: a Tensor or a
    # flat tuple): elements are packed into it as they leave the pipeline.
    _structure = None

    def _pack(self, flat):
        return tree.pack_sequence_as(self._structure, list(flat), is_leaf=_is_component)

    def _then(self, *step):
        dataset = Dataset(self._arrays, self._single, self._steps + (step,))
        dataset._structure = self._structure
        return dataset

    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=True):
        """Shuffle the elements with a buffer of ``buffer_size`` (tf.data's
        algorithm: ``buffer_size >= len`` gives a uniform permutation).

        Args:
            buffer_size (int): >= 1.
            seed (int): in [0, 2**63); None draws one from Python's ``random``.
            reshuffle_each_iteration (bool): a new order every pass.
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

    def batch(self, batch_size, drop_remainder=False):
        """Combine consecutive elements into batches of ``batch_size`` (the
        last one smaller unless ``drop_remainder``).

        Raises:
            ValueError: batch_size < 1; NotImplementedError for a second batch().
        """
        batch_size = _positive_int(batch_size, "batch: batch_size")
        if any(s[0] == "batch" for s in self._steps):
            raise NotImplementedError("Dataset.batch: batching twice is not supported")
        return self._then("batch", batch_size, bool(drop_remainder))

    def map(self, fn):
        """Apply ``fn`` to every element (every batch after ``batch()``).

        Args:
            fn: a pyresnet preprocessing layer, or a ``Sequential`` of them
                (runs in C; applied to the images, the first component, with
                ``training=True``; MixUp takes and returns ``(images,
                labels)``), or any callable taking the element's components as
                positional arguments and returning the new element (runs in
                Python).
        Raises:
            TypeError: when ``fn`` is not callable.
        """
        if not callable(fn):
            raise TypeError(f"Dataset.map: fn must be callable, got {type(fn).__name__}")
        return self._then("map", fn)

    def prefetch(self, buffer_size):
        """Prepare up to ``buffer_size`` batches ahead on a background thread
        (the C worker when every map is a pyresnet layer); 0 prefetches nothing.

        Raises:
            ValueError: a negative or non-int buffer_size.
        """
        if buffer_size != 0:
            buffer_size = _positive_int(buffer_size, "prefetch: buffer_size")
        return self._then("prefetch", int(buffer_size))

    # ---- iteration ---------------------------------------------------------------

    def _batch_spec(self):
        return next(((s[1], s[2]) for s in self._steps if s[0] == "batch"), None)

    def __len__(self):
        n = len(self._arrays[0])
        spec = self._batch_spec()
        if spec is None:
            return n
        size, drop = spec
        return n // size if drop else -(-n // size)

    def cardinality(self):
        """The number of elements (batches after ``batch()``), as an int."""
        return len(self)

    def _order(self, epoch):
        order = np.arange(len(self._arrays[0]), dtype=np.int64)
        for step in self._steps:
            if step[0] == "shuffle":
                _, buffer_size, seed, reshuffle = step
                order = order[_C.shuffle_order(len(order), buffer_size, seed,
                                               epoch if reshuffle else 0)]
        return order

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
        (batched, every map before batch() a pyresnet layer), else None."""
        before, after, _ = self._plan()
        if self._batch_spec() is None or any(_pipeline_layers(fn) is None for fn in before):
            return None
        for layer in (layer for fn in before for layer in _pipeline_layers(fn)):
            if getattr(layer, "_batch_level", False):
                raise ValueError(f"Dataset.map: {type(layer).__name__} mixes a batch; map it "
                                 "after batch()")
        maps = before + after
        n_c = next((i for i, fn in enumerate(maps) if _pipeline_layers(fn) is None), len(maps))
        return [layer for fn in maps[:n_c] for layer in _pipeline_layers(fn)], maps[n_c:]

    def _batch_iterator(self, epoch, c_layers, prefetch):
        """The C iterator over pass ``epoch``'s batches through ``c_layers``."""
        stages, shapes = [], [(None,) + a.shape[1:] for a in self._arrays]
        for layer in c_layers:
            more, shapes = layer._pipeline_stages(shapes)
            stages += more
        spec = self._batch_spec()
        return _C.BatchIterator(self._arrays, self._order(epoch), spec[0], spec[1], stages,
                                prefetch=prefetch, epoch=epoch)

    def _loop_source(self):
        """For a compiled function iterating this dataset
        (:mod:`pyresnet.loops`): ``(probe, single, feeder)``, where probe is a
        BatchIterator giving the batch shapes (no pass is counted) and
        ``feeder()`` starts the next pass as iterating eagerly would
        (``(BatchIterator, 0, batches)``); None when a map runs in Python."""
        maps = self._c_maps()
        if maps is None or maps[1] or self._structure is not None:
            return None
        c_layers = maps[0]

        def feeder():
            epoch = self._passes
            self._passes += 1
            batches = self._batch_iterator(epoch, c_layers, 0)
            return batches, 0, len(batches)

        return self._batch_iterator(0, c_layers, 0), self._single, feeder

    def __iter__(self):
        if _C.tracing():
            from ..loops import dataset_loop
            loop = dataset_loop(self, self._loop_source(), stacklevel=2)
            if loop is not None:
                return loop
        epoch = self._passes
        self._passes += 1
        maps = self._c_maps()
        if maps is None:
            before, after, depth = self._plan()
            return self._python_pass(self._order(epoch), epoch, before, after,
                                     self._batch_spec(), depth)
        c_layers, tail = maps
        depth = self._plan()[2]
        nested = self._structure is not None
        batches = self._batch_iterator(epoch, c_layers, 0 if tail or nested else depth)
        single = self._single
        if not tail and not nested:
            return (b[0] for b in batches) if single else batches

        def run():
            for b in batches:
                element = b[0] if single else self._pack(b) if nested else b
                for fn in tail:
                    element = _call_map(fn, element)
                yield element

        return _prefetched(run, depth) if depth else run()

    def _python_pass(self, order, epoch, before, after, spec, depth):
        """Elements (or batches) made in Python, for maps that C cannot run."""
        arrays, single = self._arrays, self._single

        def element(i):
            e = tuple(Tensor(a[i]) for a in arrays)
            e = e[0] if single else self._pack(e) if self._structure is not None else e
            for fn in before:
                e = _call_map(fn, e)
            return e

        def run():
            if spec is None:
                for i in order:
                    yield element(i)
                return
            size, drop = spec
            stop = len(order) - len(order) % size if drop else len(order)
            for start in range(0, stop, size):
                items = [element(i) for i in order[start:start + size]]
                leaves = [tree.flatten(it) for it in items]  # tuples, dicts, a Tensor
                batch = tree.pack_sequence_as(items[0], [
                    Tensor(np.stack([np.asarray(leaf[k]) for leaf in leaves]))
                    for k in range(len(leaves[0]))])
                for fn in after:
                    batch = _call_map(fn, batch)
                yield batch

        return _prefetched(run, depth) if depth else run()

    def __repr__(self):
        kinds = " -> ".join(s[0] for s in self._steps) or "slices"
        shapes = [a.shape[1:] for a in self._arrays]
        return f"<Dataset {kinds}, {len(self)} elements, element shapes {shapes}>"


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
