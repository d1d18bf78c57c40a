"""pyresnet.data.Dataset's tf.data methods: repeat, take, skip, filter, cache,
from_generator, zip, prefetch(AUTOTUNE), against tf.data's documented
semantics (element order, counts, cardinality, reshuffling per repetition),
the same results from the C path (arrays) and the Python path (a generator
source), and model.fit on each."""
import itertools
import warnings

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from pyresnet.data import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset
from pyresnet.data import dataset as dataset_module
from philox_ref import buffer_shuffle


def values(ds):
    """The elements (or batches) of one pass as lists (tuples of lists)."""
    out = []
    for e in ds:
        out.append(tuple(np.asarray(c).tolist() for c in e) if isinstance(e, tuple)
                   else np.asarray(e).tolist())
    return out


def r10():
    return Dataset.from_tensor_slices(np.arange(10, dtype=np.int32))


def g10():
    """The same ten elements from a Python generator (the Python path)."""
    return Dataset.from_generator(lambda: (np.int32(i) for i in range(10)),
                                  output_signature=pr.TensorSpec((), "int32"))


@pytest.mark.parametrize("make", [r10, g10], ids=["arrays", "generator"])
def test_take_skip_as_tf_data(make):
    ds = make()
    assert values(ds.take(3)) == [0, 1, 2]
    assert values(ds.take(-1)) == list(range(10))       # -1: everything
    assert values(ds.take(25)) == list(range(10))
    assert values(ds.take(0)) == []
    assert values(ds.skip(7)) == [7, 8, 9]
    assert values(ds.skip(25)) == []                     # beyond the end: empty
    assert values(ds.skip(-1)) == []                     # -1: skips everything
    assert values(ds.skip(2).take(3)) == [2, 3, 4]
    assert values(ds.take(6).skip(4)) == [4, 5]
    # after batch(): whole batches
    assert values(ds.batch(3).take(2)) == [[0, 1, 2], [3, 4, 5]]
    assert values(ds.batch(3).skip(3)) == [[9]]
    assert values(ds.take(7).batch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    if make is r10:
        assert ds.take(3).cardinality() == 3 and len(ds.skip(7)) == 3
        assert ds.skip(25).cardinality() == 0 and ds.skip(-1).cardinality() == 0
        assert len(ds.take(7).batch(3)) == 3 and len(ds.batch(3).skip(1)) == 3
    else:
        assert ds.take(3).cardinality() == UNKNOWN_CARDINALITY
    for bad in (-2, 1.5, "3", True):
        with pytest.raises(ValueError, match="count must be an int >= -1"):
            ds.take(bad)
        with pytest.raises(ValueError, match="count must be an int >= -1"):
            ds.skip(bad)


@pytest.mark.parametrize("make", [r10, g10], ids=["arrays", "generator"])
def test_repeat_as_tf_data(make):
    ds = make()
    assert values(ds.repeat(2)) == list(range(10)) * 2
    assert values(ds.repeat(0)) == [] and values(ds.repeat(1)) == list(range(10))
    # before batch(), batches run across the repetitions' seams (tf.data)
    assert values(ds.repeat(2).batch(4)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1],
                                             [2, 3, 4, 5], [6, 7, 8, 9]]
    # after batch(), batches repeat whole (the short one too)
    assert values(ds.batch(4).repeat(2)) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] * 2
    # forever: as many as taken
    assert values(ds.repeat().take(23)) == (list(range(10)) * 3)[:23]
    assert values(ds.repeat(-1).take(12).batch(5)) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [0, 1]]
    assert ds.repeat().cardinality() == INFINITE_CARDINALITY
    assert ds.repeat().take(12).batch(5).cardinality() == 3
    with pytest.raises(TypeError, match="infinite"):
        len(ds.repeat())
    if make is r10:
        assert ds.repeat(3).cardinality() == 30 and len(ds.repeat(3).batch(4)) == 8
    # an empty dataset repeated forever is empty (tf.data ends it)
    assert values(ds.take(0).repeat()) == []
    assert values(ds.skip(-1).batch(2).repeat()) == []
    with pytest.raises(ValueError, match="count must be an int >= -1"):
        ds.repeat(-3)


def test_repeat_of_a_shuffle_reshuffles_each_repetition():
    """tf.data: with reshuffle_each_iteration=True each repetition is a new
    order.  Here repetition r of pass e runs the shuffle as pass e * k + r:
    the orders are the reference buffer shuffle with counters 0, 1, 2, ..."""
    ds = r10().shuffle(4, seed=5)
    got = values(ds.repeat(3))
    reps = [got[10 * r:10 * (r + 1)] for r in range(3)]
    assert reps == [buffer_shuffle(10, 4, 5, r) for r in range(3)]
    assert reps[0] != reps[1] != reps[2]
    # the second pass of the repeated dataset goes on: counters 3, 4, 5
    repeated = ds.repeat(3)
    values(repeated)
    again = values(repeated)
    assert again[:10] == buffer_shuffle(10, 4, 5, 3)
    # reshuffle_each_iteration=False: every repetition the same order
    fixed = values(r10().shuffle(10, seed=5, reshuffle_each_iteration=False).repeat(3))
    assert fixed[:10] == fixed[10:20] == fixed[20:] == buffer_shuffle(10, 10, 5, 0)
    # each repetition is a permutation, also for an endless repeat batched in C
    endless = list(itertools.islice(r10().shuffle(10, seed=1).repeat().batch(5), 8))
    flat = np.concatenate([np.asarray(b) for b in endless])
    for r in range(4):
        assert sorted(flat[10 * r:10 * (r + 1)].tolist()) == list(range(10))
        assert flat[10 * r:10 * (r + 1)].tolist() == buffer_shuffle(10, 10, 1, r)


def test_endless_order_batched_in_chunks_equals_the_finite_one(monkeypatch):
    """An infinite order is batched by several C iterators (chunks); the
    batches equal those of the same number of finite repetitions."""
    monkeypatch.setattr(dataset_module, "_CHUNK_ELEMENTS", 12)  # chunks of 3 batches
    x = np.arange(10, dtype=np.int32)
    endless = Dataset.from_tensor_slices((x, x * 2)).shuffle(6, seed=3).repeat().batch(4)
    finite = Dataset.from_tensor_slices((x, x * 2)).shuffle(6, seed=3).repeat(4).batch(4)
    assert values(itertools.islice(endless, 10)) == values(finite)
    # augmentation layers run in C on every chunk, each chunk with its own draws
    images = np.random.default_rng(0).integers(0, 256, (10, 6, 6, 3), dtype=np.uint8)
    flip = Dataset.from_tensor_slices(images).repeat().batch(4).map(
        layers.RandomFlip("horizontal", seed=1))
    got = [np.asarray(b) for b in itertools.islice(flip, 6)]
    stream = np.concatenate(got)
    for k, img in enumerate(stream):
        src = images[k % 10]
        assert np.array_equal(img, src) or np.array_equal(img, src[:, ::-1])
    assert not all(np.array_equal(a, b) for a, b in zip(got[:3], got[3:]))


@pytest.mark.parametrize("make", [r10, g10], ids=["arrays", "generator"])
def test_filter_as_tf_data(make):
    ds = make()
    even = ds.filter(lambda v: np.asarray(v) % 2 == 0)
    assert values(even) == [0, 2, 4, 6, 8]
    assert values(even.batch(2)) == [[0, 2], [4, 6], [8]]
    assert even.cardinality() == UNKNOWN_CARDINALITY
    with pytest.raises(TypeError, match="unknown"):
        len(even)
    # after a map the predicate sees the mapped element
    assert values(ds.map(lambda v: np.asarray(v) * 3).filter(
        lambda v: np.asarray(v) % 2 == 1)) == [3, 9, 15, 21, 27]
    # on batches after batch()
    assert values(ds.batch(3).filter(lambda b: np.asarray(b).sum() > 10)) == [[3, 4, 5],
                                                                              [6, 7, 8]]
    assert values(ds.repeat().filter(lambda v: np.asarray(v) == 3).take(3)) == [3, 3, 3]
    # lazily: a take after it stops the predicate calls (in pieces of 256 on the order)
    seen = []
    big = Dataset.from_tensor_slices(np.arange(5000, dtype=np.int32)) if make is r10 else ds
    first = big.filter(lambda v: seen.append(1) or np.asarray(v) % 2 == 1).take(2)
    assert values(first) == [1, 3] and len(seen) <= 256
    with pytest.raises(TypeError, match="scalar bool"):
        values(ds.filter(lambda v: np.asarray(v) * 2))
    with pytest.raises(TypeError, match="callable"):
        ds.filter(3)


def test_filter_before_batch_keeps_the_c_pipeline():
    x = np.random.default_rng(1).integers(0, 256, (20, 4, 4, 3), dtype=np.uint8)
    y = np.arange(20, dtype=np.int32)
    norm = layers.Normalization(mean=[100, 100, 100], variance=[400, 400, 400])
    ds = Dataset.from_tensor_slices((x, y)).filter(lambda a, b: np.asarray(b) % 3 == 0) \
        .batch(3).map(norm)
    assert ds._one_c_pass() and ds._loop_source() is not None   # one C iteration
    keep = y % 3 == 0
    got = values(ds)
    assert [b[1] for b in got] == [[0, 3, 6], [9, 12, 15], [18]]
    np.testing.assert_allclose(np.concatenate([np.asarray(b[0]) for b in got]),
                               (x[keep].astype(np.float32) - 100) / 20, rtol=1e-6)


def test_cache_runs_upstream_once_and_replays():
    calls = []

    def noisy(v):
        calls.append(int(np.asarray(v)))
        return np.asarray(v) + 100

    cached = r10().map(noisy).cache()
    assert values(cached.batch(4)) == [[100, 101, 102, 103], [104, 105, 106, 107], [108, 109]]
    assert values(cached.batch(4)) == values(cached.batch(4))
    assert calls == list(range(10))                      # the map ran once per element
    assert cached._arrays is not None and cached.batch(4)._one_c_pass()  # now arrays: C
    # a shuffle after the cache reshuffles every pass; one before it is frozen
    after = cached.shuffle(10, seed=2)
    assert values(after) == [100 + i for i in buffer_shuffle(10, 10, 2, 0)]
    assert values(after) == [100 + i for i in buffer_shuffle(10, 10, 2, 1)]
    frozen = r10().shuffle(10, seed=2).cache()
    first = values(frozen)
    assert values(frozen) == first == buffer_shuffle(10, 10, 2, 0)
    # a pass stopped early fills nothing; an endless dataset is never cached
    calls.clear()
    partial = r10().map(noisy).cache()
    assert values(partial.take(3)) == [100, 101, 102]
    assert values(partial) == [100 + i for i in range(10)] and len(calls) == 13
    assert values(partial) == [100 + i for i in range(10)] and len(calls) == 13
    assert values(r10().repeat().cache().take(12)) == list(range(10)) + [0, 1]
    # batches (or nested elements) are replayed as they were
    batched = g10().batch(3).cache()
    assert values(batched) == values(batched) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    with pytest.raises(NotImplementedError, match="in-memory"):
        r10().cache("/tmp/cache")


def test_from_generator_signature_and_passes():
    passes = []

    def gen(n):
        passes.append(n)
        for i in range(n):
            yield np.full((2,), i, np.float64), i

    ds = Dataset.from_generator(gen, args=(5,), output_signature=(
        pr.TensorSpec((None,), "float32"), pr.TensorSpec((), "int32")))
    first = values(ds)
    assert first == [([float(i)] * 2, i) for i in range(5)]
    e = next(iter(ds))
    assert e[0].dtype == "float32" and e[1].dtype == "int32" and e[1].shape == ()
    assert passes == [5, 5]                               # called once per pass
    assert values(ds.batch(2))[0] == ([[0.0, 0.0], [1.0, 1.0]], [0, 1])
    assert sorted(v[1] for v in values(ds.shuffle(3, seed=1))) == list(range(5))
    # tf.data's older output_types / output_shapes form
    old = Dataset.from_generator(lambda: iter([1, 2]), output_types="int64", output_shapes=())
    assert values(old) == [1, 2] and next(iter(old)).dtype == "int64"
    bad_shape = Dataset.from_generator(lambda: iter([np.zeros(3)]),
                                       output_signature=pr.TensorSpec((2,), "float32"))
    with pytest.raises(ValueError, match="element 0.*shape \\(3,\\) does not match \\(2,\\)"):
        values(bad_shape)
    bad_dtype = Dataset.from_generator(lambda: iter([0.5]),
                                       output_signature=pr.TensorSpec((), "int32"))
    with pytest.raises(TypeError, match="dtype float64 does not match int32"):
        values(bad_dtype)
    bad_structure = Dataset.from_generator(lambda: iter([1]), output_signature=(
        pr.TensorSpec(()), pr.TensorSpec(())))
    with pytest.raises(TypeError, match="element 0 does not match"):
        values(bad_structure)
    with pytest.raises(TypeError, match="output_signature"):
        Dataset.from_generator(lambda: iter([]))
    with pytest.raises(TypeError, match="callable"):
        Dataset.from_generator([1, 2], output_signature=pr.TensorSpec(()))


def test_zip_as_tf_data():
    a, b = r10(), Dataset.from_tensor_slices(np.arange(4, dtype=np.int32) * 2)
    z = Dataset.zip((a, b))
    assert values(z) == [(0, 0), (1, 2), (2, 4), (3, 6)]  # up to the shortest
    assert z.cardinality() == 4 and z._arrays is not None  # plain slices: arrays, C path
    assert values(Dataset.zip(a, b).batch(3)) == [([0, 1, 2], [0, 2, 4]), ([3], [6])]
    # datasets with their own steps are iterated side by side in Python
    mixed = Dataset.zip((a.skip(5), g10().map(lambda v: np.asarray(v) * 10)))
    assert values(mixed) == [(5, 0), (6, 10), (7, 20), (8, 30), (9, 40)]
    assert mixed.cardinality() == UNKNOWN_CARDINALITY
    assert Dataset.zip((a, a.repeat())).cardinality() == 10
    assert Dataset.zip((a.repeat(), a.repeat())).cardinality() == INFINITE_CARDINALITY
    # nested elements stay nested, also batched
    pairs = Dataset.from_tensor_slices((np.arange(3), np.arange(3) + 10))
    nested = Dataset.zip((pairs, a)).batch(2)
    first = next(iter(nested))
    assert [np.asarray(t).tolist() for t in first[0]] == [[0, 1], [10, 11]]
    assert np.asarray(first[1]).tolist() == [0, 1]
    with pytest.raises(TypeError, match="expected Datasets"):
        Dataset.zip((a, np.arange(3)))


def test_autotune_and_parallel_calls_are_accepted():
    assert pr.data.AUTOTUNE == AUTOTUNE == -1
    ds = r10().map(lambda v: np.asarray(v) + 1, num_parallel_calls=AUTOTUNE, deterministic=True)
    ds = ds.batch(4, num_parallel_calls=AUTOTUNE).prefetch(AUTOTUNE)
    assert values(ds) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    assert values(r10().map(lambda v: v, num_parallel_calls=4).take(2)) == [0, 1]
    with pytest.raises(ValueError, match="num_parallel_calls"):
        r10().map(lambda v: v, num_parallel_calls=0)
    with pytest.raises(ValueError, match="buffer_size"):
        r10().prefetch(-2)


def _model():
    model = pr.Sequential([layers.Input((4,)), layers.Dense(2)])
    model.compile(optimizer=pr.optimizers.SGD(0.1),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


class _Count(pr.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = []

    def on_epoch_begin(self, epoch, logs=None):
        self.steps.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.steps[-1] += 1


@pytest.mark.parametrize("case", ["repeat_take", "repeat_forever", "batch_repeat", "filter",
                                  "generator", "cache", "zip", "skip_take"])
def test_fit_on_each(case, rng):
    x = rng.standard_normal((48, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    base = Dataset.from_tensor_slices((x, y))
    ds, kwargs, want = {
        # Keras 3: a finite dataset taken whole each epoch starts over without a warning
        "repeat_take": (base.shuffle(48).repeat().take(40).batch(8), {"steps_per_epoch": 5},
                        [5, 5]),
        "repeat_forever": (base.shuffle(48).repeat().batch(8).prefetch(AUTOTUNE),
                           {"steps_per_epoch": 7}, [7, 7]),
        "batch_repeat": (base.batch(16).repeat(2), {}, [6, 6]),
        "filter": (base.filter(lambda a, b: np.asarray(b) == 1).batch(8), {},
                   [-(-int(y.sum()) // 8)] * 2),
        "generator": (Dataset.from_generator(lambda: zip(x, y), output_signature=(
            pr.TensorSpec((4,)), pr.TensorSpec((), "int32"))).batch(16), {}, [3, 3]),
        "cache": (base.map(lambda a, b: (np.asarray(a) * 2, b)).cache().shuffle(48).batch(16),
                  {}, [3, 3]),
        "zip": (Dataset.zip((Dataset.from_tensor_slices(x), Dataset.from_tensor_slices(y)))
                .batch(12), {}, [4, 4]),
        "skip_take": (base.batch(8).skip(2).take(3), {}, [3, 3]),
    }[case]
    model, count = _model(), _Count()
    before = model.evaluate(x, y, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # no "ran out of data"
        history = model.fit(ds, epochs=2, verbose=0, callbacks=[count], **kwargs)
    assert count.steps == want
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    assert model.evaluate(x, y, verbose=0) < before
