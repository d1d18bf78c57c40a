"""The Keras names real scripts reached for (issue 29, item 4), each against
NumPy references, float64 finite-difference gradients or Keras 3 itself
(its ``numpy`` backend in one subprocess, as tests/test_keras_interop.py):
Conv1D, GlobalAverage/MaxPooling1D, SeparableConv2D, ``Lambda(output_shape=)``,
``Input(batch_shape=)``, ``layer(a, b)``, ``ops.one_hot`` of floats, integer
labels in losses and metrics, MeanAbsolutePercentageError,
``Dataset.from_tensor_slices`` of nested structures, ``Tensor.__format__``,
integer arithmetic, ``logs={}`` in callbacks, ``validation_split``'s
rounding, the progress bar off a terminal, and the saving names
(``get_custom_objects``, registered functions, ``serialize_keras_object``,
``layers.serialize``, ``clone_model``)."""
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import pyresnet as pr
from gradcheck import check_gradients
from pyresnet import layers, ops

# ---- Keras 3's values (numpy backend, one subprocess) ---------------------------------------

KERAS_SIDE = r"""
import json, sys
import numpy as np
import keras
from keras.src.trainers.data_adapters.array_slicing import train_validation_split

d = dict(np.load(sys.argv[1]))
out = {}
for pad in ("valid", "same", "causal"):
    layer = keras.layers.Conv1D(4, 3, strides=2, padding=pad, groups=2, activation="relu")
    layer.build((None,) + d["seq"].shape[1:])
    layer.set_weights([d["k1"], d["b1"]])
    out["conv1d_" + pad] = np.asarray(layer(d["seq"]))
sep = keras.layers.SeparableConv2D(5, 3, strides=2, padding="same", depth_multiplier=2)
sep.build(d["img"].shape)
sep.set_weights([d["dk"], d["pk"], d["pb"]])
out["separable"] = np.asarray(sep(d["img"]))
out["separable_weights"] = np.array([w.path.split("/")[-1] for w in sep.weights])
out["gap1d"] = np.asarray(keras.layers.GlobalAveragePooling1D()(d["seq"]))
out["gmp1d"] = np.asarray(keras.layers.GlobalMaxPooling1D(keepdims=True)(d["seq"]))
m = keras.metrics.MeanAbsolutePercentageError()
m.update_state(d["t"], d["p"])
out["mape"] = np.asarray(m.result())
out["mape_fn"] = np.asarray(keras.losses.mean_absolute_percentage_error(d["t"], d["p"]))
out["sce_u8"] = np.asarray(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
    d["labels_u8"], d["logits"]))
out["mse_u8"] = np.asarray(keras.losses.MeanSquaredError()(
    d["labels_u8"][:, None].astype("float32"), d["pred1"]))
lam = keras.layers.Lambda(lambda x: x[:, :2], output_shape=(2,))
out["lambda_shape"] = np.array([-1 if s is None else s
                                for s in lam.compute_output_shape((None, 4))])
splits = []
for n, share in ((10, 0.3), (7, 0.5), (1000, 0.2), (9, 0.1)):
    train, val = train_validation_split((np.zeros((n, 1)),), share)
    splits.append([len(train[0]), len(val[0])])
out["splits"] = np.array(splits)
np.savez(sys.argv[2], **out)
"""


@pytest.fixture(scope="module")
def reference():
    rng = np.random.default_rng(29)
    d = {"seq": rng.standard_normal((3, 11, 4)).astype("float32"),
         "k1": (rng.standard_normal((3, 2, 4)) * 0.5).astype("float32"),
         "b1": rng.standard_normal(4).astype("float32"),
         "img": rng.standard_normal((2, 7, 6, 3)).astype("float32"),
         "dk": (rng.standard_normal((3, 3, 3, 2)) * 0.5).astype("float32"),
         "pk": (rng.standard_normal((1, 1, 6, 5)) * 0.5).astype("float32"),
         "pb": rng.standard_normal(5).astype("float32"),
         "t": rng.uniform(-3, 3, (6, 4)).astype("float32"),
         "p": rng.uniform(-3, 3, (6, 4)).astype("float32"),
         "labels_u8": rng.integers(0, 5, 8).astype(np.uint8),
         "logits": rng.standard_normal((8, 5)).astype("float32"),
         "pred1": rng.standard_normal((8, 1)).astype("float32") * 3}
    d["t"][0, 0] = 0.0  # the epsilon in the denominator
    folder = tempfile.mkdtemp()
    np.savez(os.path.join(folder, "in.npz"), **d)
    run = subprocess.run([sys.executable, "-c", KERAS_SIDE, os.path.join(folder, "in.npz"),
                          os.path.join(folder, "out.npz")], cwd=folder, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "KERAS_BACKEND": "numpy"})
    assert run.returncode == 0, run.stderr[-4000:]
    return d, dict(np.load(os.path.join(folder, "out.npz")))


# ---- layers -----------------------------------------------------------------------------------

def conv1d_ref(x, k, stride, padding, groups=1):
    """float64 NumPy 1D cross-correlation, NWC, kernel (k, C/groups, F)."""
    n, w, c = x.shape
    kw, cg, f = k.shape
    if padding == "causal":
        x = np.pad(x, ((0, 0), (kw - 1, 0), (0, 0)))
    elif padding == "same":
        out = -(-w // stride)
        total = max((out - 1) * stride + kw - w, 0)
        x = np.pad(x, ((0, 0), (total // 2, total - total // 2), (0, 0)))
    out = (x.shape[1] - kw) // stride + 1
    y = np.zeros((n, out, f))
    fg = f // groups
    for g in range(groups):
        xs = x[:, :, g * cg:(g + 1) * cg]
        for t in range(out):
            window = xs[:, t * stride:t * stride + kw, :]  # (n, kw, cg)
            y[:, t, g * fg:(g + 1) * fg] = np.einsum("nkc,kcf->nf", window,
                                                     k[:, :, g * fg:(g + 1) * fg])
    return y


@pytest.mark.parametrize("padding", ["valid", "same", "causal"])
def test_conv1d_matches_keras_and_numpy(reference, padding):
    d, keras_out = reference
    layer = layers.Conv1D(4, 3, strides=2, padding=padding, groups=2, activation="relu")
    layer.build((None, 11, 4))
    layer.set_weights([d["k1"], d["b1"]])
    got = np.asarray(layer(d["seq"]))
    np.testing.assert_allclose(got, keras_out[f"conv1d_{padding}"], rtol=1e-5, atol=1e-5)
    want = np.maximum(conv1d_ref(d["seq"].astype(np.float64), d["k1"].astype(np.float64), 2,
                                 padding, groups=2) + d["b1"], 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert layer.compute_output_shape((None, 11, 4)) == (None,) + got.shape[1:]
    assert [w.name for w in layer.weights] == ["kernel", "bias"]


@pytest.mark.parametrize("padding", ["valid", "same", "causal"])
def test_conv1d_gradients(rng, padding):
    layer = layers.Conv1D(3, 3, strides=2, padding=padding)
    layer.build((None, 7, 2))
    x = rng.standard_normal((2, 7, 2)).astype("float32")
    k = rng.standard_normal((3, 2, 3)).astype("float32")
    check_gradients(lambda x, k: layer._convolve(x, k),
                    lambda x, k: conv1d_ref(x, k, 2, padding), [x, k])


def test_conv1d_checks_and_sequence_model(rng):
    with pytest.raises(ValueError, match="Conv1D.*kernel_size"):
        layers.Conv1D(2, (3, 3))
    layer = layers.Conv1D(2, 5)
    with pytest.raises(ValueError, match="rank 3|ndim"):
        layer(np.zeros((1, 4, 4, 2), "float32"))
    with pytest.raises(ValueError, match="does not fit"):
        layers.Conv1D(2, 5)(np.zeros((1, 3, 2), "float32"))
    # a Keras-guide 1D CNN: Conv1D, GlobalMaxPooling1D, Dense, trained by fit
    inputs = pr.Input((20, 3))
    x = layers.Conv1D(8, 3, activation="relu", padding="same")(inputs)
    x = layers.GlobalMaxPooling1D()(x)
    model = pr.Model(inputs, layers.Dense(2)(x))
    model.compile("adam", pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    xs = rng.standard_normal((32, 20, 3)).astype("float32")
    ys = (xs[:, :, 0].mean(axis=1) > 0).astype(np.int64)
    history = model.fit(xs, ys, epochs=3, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_global_pooling_1d(reference, rng):
    d, keras_out = reference
    np.testing.assert_allclose(np.asarray(layers.GlobalAveragePooling1D()(d["seq"])),
                               keras_out["gap1d"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(layers.GlobalMaxPooling1D(keepdims=True)(d["seq"])),
                               keras_out["gmp1d"], rtol=1e-6)
    x = rng.standard_normal((2, 5, 3)).astype("float32")
    check_gradients(lambda t: layers.GlobalAveragePooling1D()(t), lambda t: t.mean(axis=1), [x])
    check_gradients(lambda t: layers.GlobalMaxPooling1D()(t), lambda t: t.max(axis=1), [x])
    assert layers.GlobalAveragePooling1D(keepdims=True).compute_output_shape((None, 5, 3)) \
        == (None, 1, 3)


def separable_ref(x, dk, pk, pb, stride):
    """float64: depthwise ("same", TF's split) then pointwise, plus bias."""
    n, h, w, c = x.shape
    kh, kw, _, m = dk.shape
    oh, ow = -(-h // stride), -(-w // stride)
    ph = max((oh - 1) * stride + kh - h, 0)
    pw = max((ow - 1) * stride + kw - w, 0)
    xp = np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    dw = np.zeros((n, oh, ow, c * m))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            dw[:, i, j, :] = np.einsum("nabc,abcm->ncm", win, dk).reshape(n, c * m)
    return dw @ pk[0, 0] + pb


def test_separable_conv2d_matches_keras_and_numpy(reference, rng):
    d, keras_out = reference
    layer = layers.SeparableConv2D(5, 3, strides=2, padding="same", depth_multiplier=2)
    layer.build(d["img"].shape)
    assert [w.name for w in layer.weights] == list(keras_out["separable_weights"])
    layer.set_weights([d["dk"], d["pk"], d["pb"]])
    got = np.asarray(layer(d["img"]))
    np.testing.assert_allclose(got, keras_out["separable"], rtol=1e-5, atol=1e-5)
    want = separable_ref(*(d[k].astype(np.float64) for k in ("img", "dk", "pk", "pb")), 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    small = layers.SeparableConv2D(2, 3, strides=2, padding="same", depth_multiplier=2)
    small.build((None, 5, 4, 2))

    def run(x, dk, pk, pb):
        small.set_weights([np.asarray(dk), np.asarray(pk), np.asarray(pb)])
        return ops.add(ops.conv2d(ops.depthwise_conv2d(x, dk, strides=2, padding="same"), pk),
                       pb)

    args = [rng.standard_normal(s).astype("float32")
            for s in ((1, 5, 4, 2), (3, 3, 2, 2), (1, 1, 4, 2), (2,))]
    check_gradients(run, lambda x, dk, pk, pb: separable_ref(x, dk, pk, pb, 2), args)
    np.testing.assert_allclose(np.asarray(small(args[0])),
                               separable_ref(*(a.astype(np.float64) for a in args), 2),
                               rtol=1e-5, atol=1e-5)


def test_lambda_output_shape_excludes_the_batch(reference):
    _, keras_out = reference
    lam = layers.Lambda(lambda x: x[:, :2], output_shape=(2,))
    shape = lam.compute_output_shape((None, 4))
    assert [-1 if s is None else s for s in shape] == list(keras_out["lambda_shape"])
    out = lam(pr.Input((4,)))
    assert out.shape == (None, 2)
    lam2 = layers.Lambda(lambda x: x, output_shape=lambda s: s)  # a function: full shapes
    assert lam2(pr.Input((3,))).shape == (None, 3)


def test_input_batch_shape():
    x = pr.Input(batch_shape=(None, 28, 28))
    assert x.shape == (None, 28, 28)
    assert pr.Input(batch_shape=(32, 10)).shape == (32, 10)
    with pytest.raises(ValueError, match="batch_shape"):
        pr.Input(shape=(3,), batch_shape=(None, 3))
    model = pr.Model(x, layers.Flatten()(x))
    assert model.predict(np.zeros((2, 28, 28), "float32"), verbose=0).shape == (2, 784)


def test_input_of_an_int_shape_is_refused_naming_the_tuple():
    """Input(32) (a shape without its tuple) is a ValueError that shows the
    tuple meant, not a TypeError from inside."""
    with pytest.raises(ValueError, match=r"got the int 32; .* shape=\(32,\)"):
        pr.Input(32)
    assert pr.Input((32,)).shape == (None, 32)


class WeightedSum(layers.Layer):
    def build(self, input_shape):  # gets the first argument's shape, as Keras
        self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones")

    def call(self, a, b):
        return a * self.w + 2.0 * b


def test_a_layer_called_on_two_symbolic_inputs(tmp_path):
    a, b = pr.Input((3,)), pr.Input((3,))
    layer = WeightedSum()
    out = layer(a, b)
    assert out.shape == (None, 3)
    model = pr.Model([a, b], layers.Dense(1, kernel_initializer="ones")(out))
    xa = np.arange(6, dtype="float32").reshape(2, 3)
    xb = np.ones((2, 3), "float32")
    want = (xa + 2 * xb).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict([xa, xb], verbose=0), want)
    assert model.output_shape == (None, 1)
    # the graph sees both inputs (summary, saving)
    assert len(model._graph.nodes[0].input_tensors) == 2
    model.save(tmp_path / "two.keras")
    loaded = pr.models.load_model(tmp_path / "two.keras", custom_objects={"WeightedSum":
                                                                           WeightedSum})
    np.testing.assert_allclose(loaded.predict([xa, xb], verbose=0), want)

    class Concat(layers.Layer):  # compute_output_shape by argument name, as Keras
        def call(self, a, b):
            return ops.concatenate([a, b], axis=-1)

        def compute_output_shape(self, a_shape, b_shape):
            return a_shape[:-1] + (a_shape[-1] + b_shape[-1],)

    assert Concat()(a, pr.Input((5,))).shape == (None, 8)


class Bilinear(layers.Layer):
    def build(self, a_shape, b_shape):  # Keras's rule: the shapes by argument name
        self.w = self.add_weight(shape=(a_shape[-1], b_shape[-1]), initializer="random_normal")

    def call(self, a, b):
        return ops.sum(ops.matmul(a, self.w) * b, axis=-1, keepdims=True)


def test_build_with_the_shapes_of_several_arguments(tmp_path, rng):
    a, b = pr.Input((3,)), pr.Input((2,))
    layer = Bilinear()
    model = pr.Model([a, b], layer(a, b))
    assert layer.w.shape == (3, 2)
    xa = rng.standard_normal((4, 3)).astype("float32")
    xb = rng.standard_normal((4, 2)).astype("float32")
    want = np.einsum("ni,ij,nj->n", xa, np.asarray(layer.w), xb)[:, None]
    np.testing.assert_allclose(model.predict([xa, xb], verbose=0), want, rtol=1e-5, atol=1e-6)
    eager = Bilinear()
    assert eager(xa, xb).shape == (4, 1) and eager.w.shape == (3, 2)
    model.save(tmp_path / "bilinear.keras")
    loaded = pr.models.load_model(tmp_path / "bilinear.keras",
                                  custom_objects={"Bilinear": Bilinear})
    np.testing.assert_allclose(loaded.predict([xa, xb], verbose=0), want, rtol=1e-5, atol=1e-6)
    again = layers.deserialize(layers.serialize(eager), custom_objects={"Bilinear": Bilinear})
    assert not again.built  # built by its first call, from that call's shapes


# ---- ops, losses, metrics ----------------------------------------------------------------------

def test_one_hot_of_float_indices():
    x = np.array([[0.0, 2.0], [1.9, -0.5]], np.float32)
    want = np.eye(3, dtype=np.float32)[np.trunc(x).astype(int)]  # cast truncates, as TF/torch
    np.testing.assert_array_equal(np.asarray(ops.one_hot(x, 3)), want)
    np.testing.assert_array_equal(np.asarray(ops.one_hot(pr.Tensor(x), 3)), want)
    np.testing.assert_array_equal(np.asarray(ops.one_hot([2.0, 0.0], 3)), np.eye(3)[[2, 0]])

    @pr.compile
    def traced(t):
        return ops.one_hot(t, 3)

    np.testing.assert_array_equal(np.asarray(traced(x)), want)


def test_losses_and_metrics_take_integer_labels(reference):
    d, keras_out = reference
    sce = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    for labels in (d["labels_u8"], pr.Tensor(d["labels_u8"]),
                   d["labels_u8"].astype(np.int64)):
        assert float(sce(labels, d["logits"])) == pytest.approx(float(keras_out["sce_u8"]),
                                                                rel=1e-5)
    mse = pr.losses.MeanSquaredError()
    u8 = pr.Tensor(d["labels_u8"][:, None])
    assert float(mse(u8, d["pred1"])) == pytest.approx(float(keras_out["mse_u8"]), rel=1e-5)

    @pr.compile
    def traced(y, p):  # uint8 labels inside a compiled step
        return sce(y, p), mse(ops.expand_dims(y, -1), d["pred1"])

    a, b = traced(d["labels_u8"], d["logits"])
    assert float(a) == pytest.approx(float(keras_out["sce_u8"]), rel=1e-5)
    assert float(b) == pytest.approx(float(keras_out["mse_u8"]), rel=1e-5)
    one_hot_u8 = np.eye(5, dtype=np.uint8)[d["labels_u8"]]  # integer one-hot targets
    cce = pr.losses.CategoricalCrossentropy(from_logits=True)
    for labels in (one_hot_u8, pr.Tensor(one_hot_u8)):
        assert float(cce(labels, d["logits"])) == pytest.approx(float(keras_out["sce_u8"]),
                                                                rel=1e-5)
    acc = pr.metrics.SparseCategoricalAccuracy()
    acc.update_state(pr.Tensor(d["labels_u8"]), d["logits"])
    want = np.mean(np.argmax(d["logits"], 1) == d["labels_u8"])
    assert float(acc.result()) == pytest.approx(want)


def test_mean_absolute_percentage_error(reference):
    d, keras_out = reference
    metric = pr.metrics.MeanAbsolutePercentageError()
    metric.update_state(d["t"], d["p"])
    assert float(metric.result()) == pytest.approx(float(keras_out["mape"]), rel=1e-5)
    np.testing.assert_allclose(
        np.asarray(pr.losses.mean_absolute_percentage_error(d["t"], d["p"])),
        keras_out["mape_fn"], rtol=1e-5)
    t, p = d["t"].astype(np.float64), d["p"].astype(np.float64)
    want = 100 * np.mean(np.abs(t - p) / np.maximum(np.abs(t), 1e-7))
    assert float(metric.result()) == pytest.approx(want, rel=1e-5)
    assert metric.name == "mean_absolute_percentage_error"
    assert type(pr.metrics.get("mape")) is pr.metrics.MeanAbsolutePercentageError
    assert float(pr.losses.get("mape")(d["t"], d["p"])) == pytest.approx(want, rel=1e-5)


def test_tensor_format():
    loss = pr.Tensor(np.float32(0.123456))
    assert f"{loss:.2f}" == "0.12" and "{:7.3f}".format(loss) == "  0.123"
    assert f"{pr.Tensor(np.int64(42)):04d}" == "0042"
    assert f"{loss}" == str(loss)
    with pytest.raises(TypeError):
        f"{pr.Tensor(np.ones(2, np.float32)):.2f}"  # as NumPy: no spec for arrays


@pytest.mark.parametrize("dt_a,dt_b", [("int32", "int32"), ("int32", "int64"),
                                       ("uint8", "uint8"), ("uint8", "int32"),
                                       ("uint8", "int64"), ("int64", "int64")])
def test_integer_arithmetic_as_numpy(rng, dt_a, dt_b):
    a = rng.integers(0, 200, (3, 4)).astype(dt_a)
    b = rng.integers(0, 200, (4,)).astype(dt_b)
    for name, fn in (("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                     ("maximum", np.maximum), ("minimum", np.minimum)):
        want = fn(a, b)
        for got in (getattr(ops, name)(a, b), getattr(ops, name)(pr.Tensor(a), pr.Tensor(b))):
            assert got.dtype == want.dtype.name, (name, got.dtype, want.dtype)
            np.testing.assert_array_equal(np.asarray(got), want)  # wraps as NumPy's
    got = ops.sum(pr.Tensor(a), axis=0)
    assert got.dtype == "int64"
    np.testing.assert_array_equal(np.asarray(got), a.sum(axis=0, dtype=np.int64))
    # a Python int takes the tensor's dtype (NumPy 2); a float gives float32 (Keras)
    t = pr.Tensor(a)
    assert (t + 1).dtype == dt_a and (2 * t).dtype == dt_a and (t - 1).dtype == dt_a
    np.testing.assert_array_equal(np.asarray(t * 3), a * a.dtype.type(3))
    mixed = t + np.float32(0.5)
    assert mixed.dtype == "float32"
    np.testing.assert_allclose(np.asarray(mixed), a.astype(np.float32) + 0.5)


def test_integer_arithmetic_compiled_and_errors():
    a = np.array([[1, 2, 3], [4, 5, 6]], np.int32)

    @pr.compile
    def f(x, y):
        return (x + y) * x - 1, ops.sum(x * y)

    r, s = f(a, np.int64(3))
    assert r.dtype == "int64" and s.dtype == "int64"
    np.testing.assert_array_equal(np.asarray(r), (a + np.int64(3)) * a - 1)
    assert int(s) == int((a * 3).sum())
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        pr.Tensor(np.uint8([1])) + 300
    with pytest.raises(TypeError, match="float32"):
        ops.divide(pr.Tensor(a), pr.Tensor(a))  # integer division is not provided


# ---- data, callbacks, fit ------------------------------------------------------------------

def test_from_tensor_slices_of_nested_structures():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    meta = np.arange(18, dtype=np.uint8).reshape(6, 3)
    y = np.arange(6)
    ds = pr.data.Dataset.from_tensor_slices(({"image": x, "meta": meta}, (y, y * 2)))
    first = next(iter(ds))
    assert isinstance(first, tuple) and set(first[0]) == {"image", "meta"}
    np.testing.assert_array_equal(np.asarray(first[0]["meta"]), meta[0])
    assert int(first[1][1]) == 0
    batches = list(ds.shuffle(6, seed=3).batch(4))
    assert [len(np.asarray(b[1][0])) for b in batches] == [4, 2]
    order = np.concatenate([np.asarray(b[1][0]) for b in batches])
    assert sorted(order) == list(range(6))
    for b in batches:  # the components of an element stay together
        idx = np.asarray(b[1][0])
        np.testing.assert_array_equal(np.asarray(b[0]["image"]), x[idx])
        np.testing.assert_array_equal(np.asarray(b[0]["meta"]), meta[idx])
        np.testing.assert_array_equal(np.asarray(b[1][1]), 2 * idx)
    mapped = next(iter(ds.batch(3).map(lambda f, l: (f["image"] + f["meta"][:, :2], l[0]))))
    np.testing.assert_array_equal(np.asarray(mapped[0]), x[:3] + meta[:3, :2])
    # into fit/evaluate: dict features by Input name, as Keras
    a, m = pr.Input((2,), name="image"), pr.Input((3,), name="meta")
    model = pr.Model([a, m], layers.Dense(1)(layers.Concatenate()([a, m])))
    model.compile("sgd", "mse")
    features = ({"image": x, "meta": meta.astype(np.float32)}, y.astype(np.float32))
    model.fit(pr.data.Dataset.from_tensor_slices(features).batch(4), epochs=1, verbose=0)
    got = model.evaluate(pr.data.Dataset.from_tensor_slices(features).batch(4), verbose=0)
    pred = model.predict([x, meta.astype(np.float32)], verbose=0)[:, 0].astype(np.float64)
    assert got == pytest.approx(np.mean((pred - y) ** 2), rel=1e-5)
    dict_ds = pr.data.Dataset.from_tensor_slices({"a": x, "b": y})
    np.testing.assert_array_equal(np.asarray(next(iter(dict_ds.batch(6)))["b"]), y)
    with pytest.raises(ValueError, match="same first"):
        pr.data.Dataset.from_tensor_slices({"a": x, "b": y[:3]})


def test_callbacks_get_dicts_as_keras_passes_them():
    seen = {}

    class Spy(pr.callbacks.Callback):
        def __getattribute__(self, name):
            attr = object.__getattribute__(self, name)
            if name.startswith("on_"):
                def hook(*args):
                    logs = args[-1]
                    assert isinstance(logs, dict), (name, logs)
                    seen.setdefault(name, sorted(logs))
                return hook
            return attr

    model = pr.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile("sgd", "mse")
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 2), "float32")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[Spy()])
    model.evaluate(x, y, verbose=0, callbacks=[Spy()])
    model.predict(x, batch_size=4, verbose=0, callbacks=[Spy()])
    assert seen["on_train_begin"] == [] and seen["on_epoch_begin"] == []
    assert seen["on_train_batch_begin"] == [] and seen["on_train_batch_end"] == ["loss"]
    assert seen["on_predict_batch_end"] == ["outputs"] and seen["on_predict_end"] == []


@pytest.mark.parametrize("n,share", [(10, 0.3), (7, 0.5), (1000, 0.2), (9, 0.1)])
def test_validation_split_rounds_as_keras(reference, n, share):
    _, keras_out = reference
    row = [(10, 0.3), (7, 0.5), (1000, 0.2), (9, 0.1)].index((n, share))
    train, val = keras_out["splits"][row]
    model = pr.Sequential([layers.Input((1,)), layers.Dense(1)])
    model.compile("sgd", "mse")
    seen = []

    class Count(pr.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(self.params["samples_seen"])

        def on_test_batch_end(self, batch, logs=None):
            seen.append(-self.params["samples_seen"])

    model.fit(np.zeros((n, 1), "float32"), np.zeros((n, 1), "float32"), batch_size=n,
              validation_split=share, epochs=1, verbose=0, callbacks=[Count()])
    assert seen == [train, -val]


def test_validation_split_too_small_raises():
    model = pr.Sequential([layers.Input((1,)), layers.Dense(1)])
    model.compile("sgd", "mse")
    with pytest.raises(ValueError, match="not sufficient to split"):
        model.fit(np.zeros((1, 1), "float32"), np.zeros((1, 1), "float32"),
                  validation_split=0.5, verbose=0)


class _Tty(io.StringIO):
    """A text stream that says it is a terminal (what tqdm draws on)."""

    def isatty(self):
        return True


def _progress_model():
    """A compiled 3 -> 2 Dense model and 64 samples of data for it."""
    model = pr.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile("sgd", "mse", metrics=["mae"])
    return model, np.ones((64, 3), "float32"), np.zeros((64, 2), "float32")


def test_progress_bar_prints_epoch_lines_only_off_a_terminal(monkeypatch):
    model, x, y = _progress_model()
    for stream, interactive in ((io.StringIO(), False), (_Tty(), True)):
        monkeypatch.setattr(sys, "stdout", stream)
        model.fit(x, y, batch_size=4, epochs=2, verbose=1)
        monkeypatch.undo()
        text = stream.getvalue()
        lines = text.splitlines()
        if interactive:  # tqdm redraws the bar in place with carriage returns
            assert text.count("\r") >= 2 and "16/16" in text and "|" in text
        else:  # a log file: one final line per epoch, as Keras's progress bar
            assert "\r" not in text and len(lines) == 2
            assert lines[0].startswith("Epoch 1/2 - ") and "loss: " in lines[0]
            assert lines[1].startswith("Epoch 2/2 - ") and "mae: " in lines[1]


def test_progress_bar_without_summary_draws_the_live_bar_only(monkeypatch):
    """ProgbarLogger(summary=False), for a caller that prints its own line
    per epoch: off a terminal nothing at all; on one the bar is drawn and
    erased at the epoch's end (its final values are not left behind)."""
    model, x, y = _progress_model()
    for stream in (io.StringIO(), _Tty()):
        for verbose in (1, 2):
            stream.seek(0), stream.truncate()
            monkeypatch.setattr(sys, "stdout", stream)
            model.fit(x, y, batch_size=4, epochs=2, verbose=verbose,
                      callbacks=[pr.callbacks.ProgbarLogger(summary=False)])
            monkeypatch.undo()
            text = stream.getvalue()
            if isinstance(stream, _Tty) and verbose == 1:
                assert "Epoch 1/2:" in text and "Epoch 2/2:" in text and "|" in text  # drawn
                shown = ""  # what the terminal's line shows at the end
                for part in text.split("\r"):
                    shown = part + shown[len(part):]
                assert "\n" not in text and not shown.strip(), repr(text)  # erased
            else:
                assert text == "", (verbose, text)


# ---- saving ---------------------------------------------------------------------------------

def test_custom_objects_and_registered_functions(tmp_path):
    before = dict(pr.saving.get_custom_objects())
    try:
        @pr.saving.register_keras_serializable(package="names_test")
        def shifted_relu(x):
            return ops.relu(x - 0.5)

        assert pr.saving.get_custom_objects()["names_test>shifted_relu"] is shifted_relu
        assert pr.activations.get("names_test>shifted_relu") is shifted_relu
        data = pr.saving.serialize_keras_object(shifted_relu)
        assert data["class_name"] == "function" and data["config"] == "names_test>shifted_relu"
        assert pr.saving.deserialize_keras_object(data) is shifted_relu
        inputs = pr.Input((3,))
        model = pr.Model(inputs, layers.Dense(2, activation=shifted_relu)(inputs))
        x = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
        dense = model.layers[1]
        want = np.maximum(x @ np.asarray(dense.kernel) + np.asarray(dense.bias) - 0.5, 0)
        np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=1e-6, atol=1e-7)
        model.save(tmp_path / "act.keras")
        loaded = pr.models.load_model(tmp_path / "act.keras")
        np.testing.assert_allclose(loaded.predict(x, verbose=0), want, rtol=1e-6, atol=1e-7)
        # by hand into get_custom_objects, as Keras users do
        pr.saving.get_custom_objects().clear()
        with pytest.raises(ValueError, match="shifted_relu"):
            pr.models.load_model(tmp_path / "act.keras")
        pr.saving.get_custom_objects()["shifted_relu"] = shifted_relu
        assert pr.models.load_model(tmp_path / "act.keras").layers[1].activation \
            is shifted_relu
        # a lambda is never saved, and a name never resolves to a class's module
        with pytest.raises(ValueError, match="cannot be saved"):
            pr.saving.serialize_keras_object(lambda t: t)
    finally:
        pr.saving.get_custom_objects().clear()
        pr.saving.get_custom_objects().update(before)


def test_serialize_deserialize_and_clone():
    layer = layers.Conv2D(4, 3, padding="same", activation="relu", name="c")
    data = layers.serialize(layer)
    assert data["class_name"] == "Conv2D" and data["config"]["filters"] == 4
    json.dumps(data)
    again = layers.deserialize(data)
    assert isinstance(again, layers.Conv2D) and again is not layer and again.filters == 4
    loss = pr.saving.deserialize_keras_object(pr.saving.serialize_keras_object(
        pr.losses.MeanSquaredError()))
    assert isinstance(loss, pr.losses.MeanSquaredError)
    assert pr.saving.deserialize_keras_object(layer) is layer  # already an object
    with pytest.raises(ValueError, match="Could not locate class"):
        layers.deserialize({"module": "evil", "class_name": "Popen", "config": {}})

    inputs = pr.Input((8, 8, 3))
    shared = layers.Dense(4)
    x1 = layers.Flatten()(layers.Conv2D(2, 3, padding="same")(inputs))
    x2 = layers.Flatten()(layers.Conv2D(2, 3, padding="same")(inputs))
    model = pr.Model(inputs, layers.Add()([shared(x1), shared(x2)]))
    clone = pr.models.clone_model(model)
    assert [type(x) for x in clone.layers] == [type(x) for x in model.layers]
    assert all(c is not m for c, m in zip(clone.layers[1:], model.layers[1:]))
    assert len(clone.weights) == len(model.weights)  # the shared Dense stays shared
    clone.set_weights(model.get_weights())
    x = np.random.default_rng(0).random((2, 8, 8, 3)).astype("float32")
    np.testing.assert_allclose(clone.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)
    renamed = pr.models.clone_model(
        model, clone_function=lambda l: l if isinstance(l, layers.Conv2D)
        else type(l).from_config(l.get_config()))
    assert renamed.layers[1] is model.layers[1]  # shared by the clone_function
    seq = pr.Sequential([layers.Input((3,)), layers.Dense(2)])
    seq_clone = pr.models.clone_model(seq)
    assert isinstance(seq_clone, pr.Sequential) and seq_clone.input_shape == (None, 3)


KERAS_EXCHANGE = r"""
import sys
import numpy as np
import keras

folder = sys.argv[1]
d = dict(np.load(folder + "/io.npz"))
out = {}
for name, x in (("seq", d["a"]), ("sep", d["b"])):
    model = keras.saving.load_model(f"{folder}/{name}.keras")
    out[name] = model.predict(x, verbose=0)
    model.save(f"{folder}/{name}_keras.keras")
np.savez(folder + "/keras_out.npz", **out)
"""


def test_conv1d_and_separable_models_go_to_keras_and_back(tmp_path):
    rng = np.random.default_rng(5)
    i = pr.Input((16, 3))
    x = layers.Conv1D(4, 3, padding="causal", activation="relu")(i)
    seq = pr.Model(i, layers.Dense(2)(layers.GlobalMaxPooling1D()(x)))
    j = pr.Input((8, 8, 3))
    y = layers.SeparableConv2D(4, 3, strides=2, padding="same", depth_multiplier=2)(j)
    sep = pr.Model(j, layers.GlobalAveragePooling2D()(y))
    a = rng.random((5, 16, 3)).astype("float32")
    b = rng.random((5, 8, 8, 3)).astype("float32")
    ours = {"seq": seq.predict(a, verbose=0), "sep": sep.predict(b, verbose=0)}
    seq.save(tmp_path / "seq.keras")
    sep.save(tmp_path / "sep.keras")
    np.savez(tmp_path / "io.npz", a=a, b=b)
    run = subprocess.run([sys.executable, "-c", KERAS_EXCHANGE, str(tmp_path)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "KERAS_BACKEND": "numpy"})
    assert run.returncode == 0, run.stderr[-4000:]
    theirs = dict(np.load(tmp_path / "keras_out.npz"))
    for name, x in (("seq", a), ("sep", b)):
        assert np.abs(ours[name]).max() > 1e-3
        np.testing.assert_allclose(theirs[name], ours[name], rtol=1e-5, atol=1e-6)
        back = pr.models.load_model(tmp_path / f"{name}_keras.keras")  # written by Keras
        np.testing.assert_allclose(back.predict(x, verbose=0), ours[name], rtol=1e-5, atol=1e-6)
