"""pyresnet.data: Dataset semantics, the C pipeline against eager ops on the
same draws, determinism under prefetching and thread counts, the Python
fallback, errors, and the training recipes on real CIFAR-10."""
import pickle

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from pyresnet.data import Dataset, recipes
from pyresnet.ops import augment as A
from seeding import test_rng
from philox_ref import buffer_shuffle


def arrays(n=50, hw=8):
    """n random uint8 images and int32 labels from the test's own generator."""
    rng = test_rng()
    x = rng.integers(0, 256, (n, hw, hw, 3), dtype=np.uint8)
    y = rng.integers(0, 10, n).astype(np.int32)
    return x, y


def collect(ds):
    return [tuple(np.array(t) for t in b) if isinstance(b, tuple) else np.array(b) for b in ds]


def assert_same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        for s, t in zip(u if isinstance(u, tuple) else (u,), v if isinstance(v, tuple) else (v,)):
            np.testing.assert_array_equal(s, t)


def test_slices_and_batches():
    x, y = arrays(10)
    ds = Dataset.from_tensor_slices((x, y))
    assert len(ds) == 10
    elements = collect(ds)
    np.testing.assert_array_equal(elements[3][0], x[3])
    assert elements[3][1] == y[3]
    batches = collect(ds.batch(4))
    assert [b[0].shape[0] for b in batches] == [4, 4, 2] and len(ds.batch(4)) == 3
    np.testing.assert_array_equal(batches[2][0], x[8:])
    assert [b[1].shape for b in collect(ds.batch(4, drop_remainder=True))] == [(4,), (4,)]
    single = collect(Dataset.from_tensor_slices(x.astype(np.float64)).batch(3))
    assert single[0].dtype == np.float32 and single[0].shape == (3, 8, 8, 3)


@pytest.mark.parametrize("buffer_size", [1, 7, 50, 1000])
def test_shuffle_matches_tf_buffer_algorithm(buffer_size):
    x = np.arange(50, dtype=np.int32)
    ds = Dataset.from_tensor_slices(x).shuffle(buffer_size, seed=9).batch(8)
    first, second = (np.concatenate(collect(ds)) for _ in range(2))
    np.testing.assert_array_equal(first, buffer_shuffle(50, buffer_size, 9, 0))
    np.testing.assert_array_equal(second, buffer_shuffle(50, buffer_size, 9, 1))
    assert buffer_size == 1 or not np.array_equal(first, second)  # reshuffled each pass
    fixed = Dataset.from_tensor_slices(x).shuffle(buffer_size, seed=9,
                                                 reshuffle_each_iteration=False).batch(8)
    assert_same(collect(fixed), collect(fixed))


def test_c_pipeline_equals_eager_ops_on_the_same_draws():
    x, y = arrays(37, 12)
    crop, flip = layers.RandomCrop(10, 10, seed=3, padding=2), layers.RandomFlip(seed=4)
    norm = layers.Normalization(mean=[100, 110, 120], variance=[900, 1600, 2500])
    ds = Dataset.from_tensor_slices((x, y)).shuffle(37, seed=5).batch(16)
    ds = ds.map(crop).map(flip).map(norm)
    for epoch in range(2):
        order = buffer_shuffle(37, 37, 5, epoch)
        for b, (xb, yb) in enumerate(ds):
            rows = order[16 * b:16 * b + 16]
            np.testing.assert_array_equal(yb.numpy(), y[rows])
            counter = (epoch << 32) + b  # the pipeline's counter for batch b of pass `epoch`
            want = A.random_crop(x[rows], pr.Variable(np.array([3, counter]), trainable=False),
                                 10, padding=2)
            want = A.random_flip(want, pr.Variable(np.array([4, counter]), trainable=False),
                                 "horizontal_and_vertical")
            want = A.normalize_channels(want, norm.mean, norm.variance)
            np.testing.assert_array_equal(xb.numpy(), want.numpy())
    # mapping does not advance the layers' own states
    assert list(crop._seed_generator.state.numpy()) == [3, 0]


def test_deterministic_whatever_prefetch_and_threads():
    x, y = arrays(300, 16)
    eigval, eigvec = A.rgb_pca(x)

    def make(prefetch):
        ds = Dataset.from_tensor_slices((x, y)).shuffle(100, seed=1).batch(32)
        ds = ds.map(layers.RandomResizedCrop((12, 12), seed=2))
        ds = ds.map(layers.RandomLighting(eigval, eigvec, seed=3))
        ds = ds.map(layers.CutOut(4, seed=4)).map(layers.MixUp(0.5, num_classes=10, seed=5))
        return ds.prefetch(prefetch) if prefetch else ds

    before = pr.get_num_threads()
    try:
        runs = []
        for threads, prefetch in [(1, 0), (2, 0), (2, 3), (3, 1)]:
            pr.set_num_threads(threads)
            ds = make(prefetch)
            runs.append(collect(ds) + collect(ds))  # two passes
    finally:
        pr.set_num_threads(before)
    for other in runs[1:]:
        assert_same(runs[0], other)
    # a pass cut short by the consumer does not shift the next one
    ds = make(4)
    next(iter(ds))
    assert_same(collect(ds), runs[0][len(runs[0]) // 2:])


def test_sequential_of_preprocessing_layers_runs_in_c():
    x, y = arrays(30)

    def augment():
        return [layers.RandomCrop(6, 6, seed=1, padding=1), layers.RandomFlip(seed=2)]

    base = Dataset.from_tensor_slices((x, y)).shuffle(30, seed=3).batch(8)
    one_by_one = base
    for layer in augment():
        one_by_one = one_by_one.map(layer)
    together = base.map(pr.Sequential(augment()))
    first_pass = collect(one_by_one)
    assert_same(first_pass, collect(together))
    # behind a Python map the Sequential's layers run eagerly on their own
    # RNG states, whose counters 0, 1, ... match the pipeline's in pass 0
    in_python = base.map(lambda a, b: (a, b)).map(pr.Sequential(augment()))
    assert_same(first_pass, collect(in_python))


def test_python_maps_and_fallback_prefetch():
    x, y = arrays(40)
    norm = layers.Normalization(mean=[0, 0, 0], variance=[1, 1, 1])
    base = Dataset.from_tensor_slices((x, y)).shuffle(40, seed=2).batch(16)
    plus = base.map(norm).map(lambda a, b: (a, np.asarray(b) + 100))
    sync, threaded = collect(plus), collect(plus.prefetch(2))
    assert_same(sync, threaded)  # both are pass 0 of their Dataset
    assert np.all(sync[0][1] >= 100)
    # a Python map before batch runs per element; layers after it run in Python too
    per_element = (Dataset.from_tensor_slices((x, y)).map(lambda a, b: (a, np.asarray(b) * 2))
                   .batch(16).map(norm))
    got = collect(per_element)
    np.testing.assert_array_equal(got[0][1], y[:16] * 2)
    np.testing.assert_array_equal(got[0][0], x[:16].astype(np.float32))
    # an error inside a Python map reaches the consumer
    failing = base.map(lambda a, b: (a, np.asarray(b)[1000])).prefetch(2)
    with pytest.raises(IndexError):
        collect(failing)


def test_pipeline_errors():
    x, y = arrays(20)
    with pytest.raises(ValueError, match="after batch"):
        collect(Dataset.from_tensor_slices((x, y)).map(layers.MixUp(num_classes=10)).batch(4))
    with pytest.raises(ValueError, match="same first dimension"):
        Dataset.from_tensor_slices((x, y[:5]))
    with pytest.raises(ValueError, match="positive int"):
        Dataset.from_tensor_slices(x).batch(0)
    with pytest.raises(TypeError, match="callable"):
        Dataset.from_tensor_slices(x).map(3)
    with pytest.raises(NotImplementedError, match="shuffle after batch"):
        Dataset.from_tensor_slices(x).batch(2).shuffle(3)
    with pytest.raises(ValueError, match="larger than the padded image"):
        collect(Dataset.from_tensor_slices(x).batch(4).map(layers.RandomCrop(20, 20)))
    # a data error in the worker (label 10 with 10 classes) surfaces as ValueError
    bad = Dataset.from_tensor_slices((x, np.full(20, 10, np.int32))).batch(4)
    for prefetch in (1, 2):
        with pytest.raises(ValueError, match="outside \\[0, 10\\)"):
            collect(bad.map(layers.MixUp(num_classes=10)).prefetch(prefetch))
    with pytest.raises(ValueError, match="outside \\[0, 10\\)"):
        collect(bad.map(layers.MixUp(num_classes=10)))


def load_cifar_subset(cifar10_dir, n):
    with open(cifar10_dir / "data_batch_1", "rb") as f:
        d = pickle.load(f, encoding="bytes")
    x = np.ascontiguousarray(d[b"data"][:n].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return x, np.array(d[b"labels"][:n]).reshape(-1, 1).astype(np.uint8)


def test_cifar_recipe_on_real_data(cifar10_dir):
    x, y = load_cifar_subset(cifar10_dir, 1000)
    ds = recipes.cifar_train_dataset(x, y, batch_size=128, seed=0)
    batches = collect(ds)
    assert len(batches) == 8 and batches[0][0].shape == (128, 32, 32, 3)
    assert batches[0][0].dtype == np.float32 and batches[0][1].dtype == np.int32
    images = np.concatenate([b[0] for b in batches])
    assert sorted(np.concatenate([b[1] for b in batches])) == sorted(y[:, 0])
    mean, std = np.array(recipes.CIFAR10_MEAN) * 255, np.array(recipes.CIFAR10_STD) * 255
    # zero padding shows up as pixels (0 - mean) / std: with offsets uniform
    # in 0..8, a row or column is padding with probability E|offset - 4| / 32
    padding = np.all(np.abs(images - (-mean / std)) < 1e-5, axis=-1)
    p_axis = np.mean(np.abs(np.arange(9) - 4)) / 32
    assert abs(padding.mean() - (1 - (1 - p_axis) ** 2)) < 0.02
    # the rest is normalised with the CIFAR-10 statistics
    assert np.all(np.abs(images[~padding].mean(0)) < 0.1)
    assert np.all(np.abs(images[~padding].std(0) - 1) < 0.1)
    assert_same(batches, collect(recipes.cifar_train_dataset(x, y, batch_size=128, seed=0)))
    test = collect(recipes.eval_dataset(x[:10], y[:10], batch_size=4))
    np.testing.assert_allclose(test[0][0], (x[:4] - mean) / std, rtol=1e-5, atol=1e-5)


def test_regnet_recipe_on_real_data(cifar10_dir):
    x, y = load_cifar_subset(cifar10_dir, 300)
    ds = recipes.regnet_train_dataset(x, y, num_classes=10, batch_size=64, seed=0)
    batches = collect(ds)
    assert len(batches) == 5
    xb, yb = batches[0]
    assert xb.shape == (64, 32, 32, 3) and xb.dtype == np.float32
    assert yb.shape == (64, 10) and yb.dtype == np.float32
    np.testing.assert_allclose(yb.sum(1), 1.0, rtol=1e-6)
    assert np.all(np.isfinite(xb)) and 0.2 < xb.std() < 2


def test_fit_takes_a_dataset_with_mixup_soft_labels():
    x, y = arrays(64)
    pr.utils.set_random_seed(0)
    model = pr.Sequential([layers.Input((8, 8, 3)), layers.Flatten(), layers.Dense(10)])
    model.compile(optimizer=pr.optimizers.SGD(0.01),
                  loss=pr.losses.CategoricalCrossentropy(from_logits=True))
    norm = layers.Normalization(mean=[128] * 3, variance=[64 ** 2] * 3)
    train = (Dataset.from_tensor_slices((x, y)).shuffle(64, seed=1).batch(16)
             .map(layers.RandomFlip("horizontal", seed=2)).map(norm)
             .map(layers.MixUp(1.0, num_classes=10, seed=3)).prefetch(2))
    history = model.fit(train, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.all(np.isfinite(history.history["loss"]))
    # evaluation on one-hot labels from a plain pipeline
    onehot = np.eye(10, dtype=np.float32)[y]
    loss = model.evaluate(Dataset.from_tensor_slices((x, onehot)).batch(32).map(norm), verbose=0)
    assert np.isfinite(loss)


def test_cifar_recipe_without_augmentation():
    x, y = arrays(20, 32)
    batches = collect(recipes.cifar_train_dataset(x, y, batch_size=8, seed=4, augment=False))
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    mean, std = np.array(recipes.CIFAR10_MEAN) * 255, np.array(recipes.CIFAR10_STD) * 255
    want = (x.astype(np.float32) - mean.astype(np.float32)) / std.astype(np.float32)
    # every output is one input image, normalised, with its label: a permutation
    source = [int(np.argmin(np.abs(want - image).reshape(20, -1).max(1))) for image in images]
    assert sorted(source) == list(range(20)) and source != list(range(20))
    np.testing.assert_allclose(images, want[source], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(labels, y[source])
