"""The Keras 3 names added for issue 17, against NumPy references: losses
(BinaryCrossentropy, MeanAbsoluteError, sample weights), stateful metrics,
regularizers, Conv2DTranspose / UpSampling2D / GlobalMaxPooling2D /
LeakyReLU / Rescaling / Softmax (forward and float64 finite-difference gradients), the random
draws, initializer names, ``to_categorical``, ``plot_model`` without
Graphviz, unsupported names, uint8 model inputs and ``layer.output``."""
import shutil

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers, ops
from gradcheck import check_forward, check_gradients


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---- losses ----------------------------------------------------------------------------

def test_binary_crossentropy_against_numpy(rng):
    logits = rng.standard_normal((6, 3)) * 3
    z = rng.integers(0, 2, (6, 3)).astype(np.float64)
    p = np_sigmoid(logits)
    for smoothing in (0.0, 0.2):
        zs = z * (1 - smoothing) + 0.5 * smoothing
        want = -(zs * np.log(p) + (1 - zs) * np.log(1 - p)).mean(-1)
        got = pr.losses.binary_crossentropy(z.astype("float32"), logits.astype("float32"),
                                            from_logits=True, label_smoothing=smoothing)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
        got = pr.losses.binary_crossentropy(z.astype("float32"), p.astype("float32"),
                                            label_smoothing=smoothing)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4)
    loss = pr.losses.BinaryCrossentropy(from_logits=True)
    sw = rng.random(6)
    per = -(z * np.log(p) + (1 - z) * np.log(1 - p)).mean(-1)
    assert float(loss(z, logits.astype("float32"), sample_weight=sw.astype("float32"))) == \
        pytest.approx(np.sum(per * sw) / 6, rel=1e-5)  # Keras: divided by the batch size
    # the gradient with respect to the logits: (sigmoid(x) - z) / d
    check_gradients(lambda x: pr.losses.binary_crossentropy(z.astype("float32"), x,
                                                            from_logits=True),
                    lambda x: (np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))).mean(-1),
                    [logits.astype("float32")])
    with pytest.raises(ValueError, match="label_smoothing"):
        pr.losses.binary_crossentropy(z, p, label_smoothing=1.5)


def test_mean_absolute_error_and_names(rng):
    y, p = rng.standard_normal((5, 4)).astype("float32"), rng.standard_normal((5, 4))
    p = p.astype("float32")
    np.testing.assert_allclose(np.asarray(pr.losses.MeanAbsoluteError()(y, p)),
                               np.abs(y - p).mean(), rtol=1e-6)
    for name, cls in [("mae", pr.losses.MeanAbsoluteError), ("mse", pr.losses.MeanSquaredError),
                      ("binary_crossentropy", pr.losses.BinaryCrossentropy)]:
        assert isinstance(pr.losses.get(name), cls)


# ---- metrics ----------------------------------------------------------------------------

def test_stateful_metrics_against_numpy(rng):
    y = rng.integers(0, 5, 40)
    scores = rng.standard_normal((40, 5)).astype("float32")
    one_hot = np.eye(5, dtype="float32")[y]
    sw = rng.random(40).astype("float32")
    rank = (scores > scores[np.arange(40), y][:, None]).sum(1)
    cases = [
        (pr.metrics.SparseCategoricalAccuracy(), (y, scores), scores.argmax(1) == y),
        (pr.metrics.CategoricalAccuracy(), (one_hot, scores), scores.argmax(1) == y),
        (pr.metrics.TopKCategoricalAccuracy(k=2), (one_hot, scores), rank < 2),
        (pr.metrics.MeanAbsoluteError(), (one_hot, scores), np.abs(one_hot - scores).mean(1)),
        (pr.metrics.BinaryAccuracy(), (one_hot, np_sigmoid(scores).astype("float32")),
         ((np_sigmoid(scores) > 0.5) == one_hot).mean(1)),
        (pr.metrics.Accuracy(), (y.astype("float32"), scores.argmax(1).astype("float32")),
         scores.argmax(1) == y),
    ]
    for metric, (a, b), values in cases:
        assert float(metric.result()) == 0.0
        metric.update_state(a[:25], b[:25])
        metric.update_state(a[25:], b[25:])  # two batches: the mean over all 40
        assert float(metric.result()) == pytest.approx(np.mean(values), abs=1e-6), metric.name
        metric.reset_state()
        metric.update_state(a, b, sample_weight=sw)
        assert float(metric.result()) == pytest.approx(np.sum(values * sw) / sw.sum(),
                                                       rel=1e-5), metric.name
        metric.reset_state()
        assert float(metric.result()) == 0.0 and float(metric.count) == 0.0
    mean = pr.metrics.Mean(name="loss")
    assert float(mean([1.0, 2.0, 6.0])) == pytest.approx(3.0)  # __call__: update, result
    mean.update_state(4.0, sample_weight=3.0)
    assert float(mean.result()) == pytest.approx(21.0 / 6.0)


def test_metric_updated_inside_a_compiled_function(rng):
    metric = pr.metrics.SparseCategoricalAccuracy()
    eager = pr.metrics.SparseCategoricalAccuracy()

    @pr.compile
    def update(y, scores):
        metric.update_state(y, scores)
        return metric.result()

    for _ in range(3):
        y = rng.integers(0, 4, 16).astype("int32")
        scores = rng.standard_normal((16, 4)).astype("float32")
        got = float(update(y, scores))
        eager.update_state(y, scores)
        assert got == pytest.approx(float(eager.result()))
    assert update.tracing_count == 1 and float(metric.count) == 48


def test_compiled_metric_objects_evaluate_and_save(tmp_path, rng):
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    model.compile(optimizer="adam", loss=pr.losses.CategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", pr.metrics.TopKCategoricalAccuracy(k=2, name="top2"),
                           "mae"])
    x = rng.standard_normal((8, 4)).astype("float32")
    y = pr.utils.to_categorical(rng.integers(0, 3, 8), 3)
    logs = model.evaluate(x, y, verbose=0, return_dict=True)
    scores = model.predict(x, verbose=0)
    rank = (scores > (scores * y).sum(1, keepdims=True)).sum(1)
    assert logs["accuracy"] == pytest.approx(np.mean(scores.argmax(1) == y.argmax(1)))
    assert logs["top2"] == pytest.approx(np.mean(rank < 2))
    assert logs["mae"] == pytest.approx(np.abs(scores - y).mean(), rel=1e-5)
    model.save(tmp_path / "m.keras")
    restored = pr.models.load_model(tmp_path / "m.keras")
    assert [m.name for _, _, m, _ in restored._compile_metrics.entries] == ["accuracy", "top2",
                                                                             "mae"]
    assert restored.evaluate(x, y, verbose=0, return_dict=True) == logs


# ---- regularizers -----------------------------------------------------------------------

def test_regularizers(rng):
    w = rng.standard_normal((3, 4)).astype("float32")
    w64 = w.astype(np.float64)
    assert float(pr.regularizers.l1(0.1)(w)) == pytest.approx(0.1 * np.abs(w64).sum(), rel=1e-5)
    assert float(pr.regularizers.l2(0.01)(w)) == pytest.approx(0.01 * (w64 ** 2).sum(), rel=1e-5)
    both = pr.regularizers.l1_l2(l1=0.1, l2=0.01)
    assert float(both(w)) == pytest.approx(0.1 * np.abs(w64).sum() + 0.01 * (w64 ** 2).sum(),
                                           rel=1e-5)
    assert pr.regularizers.L2().l2 == 0.01 and pr.regularizers.get("l1").l1 == 0.01
    with pytest.raises(ValueError, match="non-negative"):
        pr.regularizers.L2(-1.0)

    conv = layers.Conv2D(2, 3, kernel_regularizer="l2", bias_regularizer=pr.regularizers.l1(0.5),
                         activity_regularizer=pr.regularizers.l1(1e-3))
    x = rng.standard_normal((2, 5, 5, 3)).astype("float32")
    y = np.asarray(conv(x))
    kernel, bias = np.asarray(conv.kernel, np.float64), np.asarray(conv.bias, np.float64)
    got = sorted(float(v) for v in conv.losses)
    want = sorted([0.01 * (kernel ** 2).sum(), 0.5 * np.abs(bias).sum(),
                   1e-3 * np.abs(y.astype(np.float64)).sum()])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # saved and rebuilt with its regularizers
    model = pr.Sequential([layers.Input((5, 5, 3)), layers.Conv2D(
        2, 3, kernel_regularizer=pr.regularizers.L1L2(l1=0.2, l2=0.3))])
    clone = pr.models.model_from_json(model.to_json())
    reg = clone.layers[0].kernel_regularizer
    assert isinstance(reg, pr.regularizers.L1L2) and (reg.l1, reg.l2) == (0.2, 0.3)


# ---- layers -------------------------------------------------------------------------------

def conv_transpose_ref(x, k, stride, same):
    """Scatter each input pixel through the kernel (the adjoint of a
    convolution), then crop TensorFlow's padding."""
    n, h, w, c = x.shape
    kh, kw, o, _ = k.shape
    out_h = h * stride if same else h * stride + max(kh - stride, 0)
    out_w = w * stride if same else w * stride + max(kw - stride, 0)
    pad_h = max((h - 1) * stride + kh - out_h, 0) // 2 if same else 0
    pad_w = max((w - 1) * stride + kw - out_w, 0) // 2 if same else 0
    full = np.zeros((n, max((h - 1) * stride + kh, out_h + pad_h),
                     max((w - 1) * stride + kw, out_w + pad_w), o))
    for i in range(h):
        for j in range(w):
            full[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :] += \
                np.einsum("nc,pqoc->npqo", x[:, i, j, :], k)
    return full[:, pad_h:pad_h + out_h, pad_w:pad_w + out_w, :]


@pytest.mark.parametrize("stride,same,kernel", [(2, True, 4), (2, False, 3), (1, False, 3),
                                                (3, True, 2), (2, False, 1), (1, True, 3)])
def test_conv2d_transpose_against_numpy(rng, stride, same, kernel):
    x = rng.standard_normal((2, 3, 4, 3)).astype("float32")
    k = rng.standard_normal((kernel, kernel, 5, 3)).astype("float32")
    fn = lambda a, b: ops.conv2d_transpose(a, b, strides=stride,  # noqa: E731
                                           padding="same" if same else "valid")
    ref = lambda a, b: conv_transpose_ref(a, b, stride, same)  # noqa: E731
    check_forward(fn, ref, [x, k], rtol=1e-4, atol=1e-4)
    check_gradients(fn, ref, [x, k])
    layer = layers.Conv2DTranspose(5, kernel, strides=stride, padding="same" if same else "valid")
    y = layer(x)
    assert tuple(layer.kernel.shape) == (kernel, kernel, 5, 3)  # Keras's layout
    assert layer.compute_output_shape((None, 3, 4, 3)) == (None,) + tuple(y.shape[1:])
    np.testing.assert_allclose(np.asarray(y), conv_transpose_ref(x, np.asarray(layer.kernel),
                                                                 stride, same), atol=1e-4)


def test_conv2d_transpose_compiled_with_any_batch(rng):
    layer = layers.Conv2DTranspose(4, 3, strides=2, padding="same", activation="relu")
    f = pr.compile(lambda t: layer(t), reduce_retracing=True)
    for n in (3, 5):
        x = rng.standard_normal((n, 4, 4, 2)).astype("float32")
        np.testing.assert_allclose(np.asarray(f(x)), np.asarray(layer(x)), rtol=1e-5, atol=1e-5)
    assert f.tracing_count == 1
    with pytest.raises(ValueError, match="output_padding"):
        layers.Conv2DTranspose(4, 3, output_padding=1)


def test_upsampling_pooling_leaky_relu(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype("float32")
    up = layers.UpSampling2D((2, 3))
    check_forward(up, lambda a: a.repeat(2, axis=1).repeat(3, axis=2), [x])
    check_gradients(up, lambda a: a.repeat(2, axis=1).repeat(3, axis=2), [x])
    assert up.compute_output_shape((None, 3, 4, 5)) == (None, 6, 12, 5)
    gmp = layers.GlobalMaxPooling2D()
    check_forward(gmp, lambda a: a.max(axis=(1, 2)), [x])
    check_gradients(gmp, lambda a: a.max(axis=(1, 2)), [x])
    assert layers.GlobalMaxPooling2D(keepdims=True)(x).shape == (2, 1, 1, 5)
    for layer, slope in [(layers.LeakyReLU(), 0.3), (layers.LeakyReLU(alpha=0.2), 0.2),
                         (layers.LeakyReLU(negative_slope=0.0), 0.0)]:
        check_forward(layer, lambda a: np.where(a >= 0, a, slope * a), [x])
        check_gradients(layer, lambda a: np.where(a >= 0, a, slope * a), [x])
    assert layers.LeakyReLU(alpha=0.2).get_config()["negative_slope"] == 0.2
    with pytest.raises(ValueError, match="negative_slope"):
        layers.LeakyReLU(-1.0)


def np_softmax(a, axis=-1):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_rescaling_and_softmax(rng):
    x = rng.standard_normal((2, 3, 4, 3)).astype("float32")
    for layer, ref in [(layers.Rescaling(1 / 127.5, offset=-1), lambda a: a / 127.5 - 1),
                       (layers.Rescaling([1.0, 2.0, 0.5], offset=[0.0, 1.0, -1.0]),
                        lambda a: a * np.array([1, 2, 0.5]) + np.array([0, 1, -1]))]:
        check_forward(layer, ref, [x])
        check_gradients(layer, ref, [x])
    pixels = np.arange(24, dtype=np.uint8).reshape(2, 2, 2, 3)  # uint8 in, float32 out
    out = layers.Rescaling(1 / 255)(pixels).numpy()
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, pixels / 255, rtol=1e-6)
    with pytest.raises(ValueError, match="`scale` must be a finite float"):
        layers.Rescaling(float("nan"))
    for axis in (-1, 1):
        check_forward(layers.Softmax(axis=axis), lambda a: np_softmax(a, axis), [x])
        check_gradients(layers.Softmax(axis=axis), lambda a: np_softmax(a, axis), [x])
    assert layers.Softmax(axis=1).get_config()["axis"] == 1


# ---- random ------------------------------------------------------------------------------

def test_random_draws():
    gen = pr.random.SeedGenerator(5)
    a = np.asarray(pr.random.normal((4000,), mean=1.0, stddev=2.0, seed=gen))
    b = np.asarray(pr.random.normal((4000,), mean=1.0, stddev=2.0, seed=gen))
    assert abs(a.mean() - 1.0) < 0.1 and abs(a.std() - 2.0) < 0.1
    assert not np.array_equal(a, b)  # the generator advanced
    again = np.asarray(pr.random.normal((4000,), mean=1.0, stddev=2.0,
                                        seed=pr.random.SeedGenerator(5)))
    np.testing.assert_array_equal(again, a)  # a seed reproduces
    u = np.asarray(pr.random.uniform((2, 3000), minval=-1.0, maxval=3.0, seed=7))
    assert u.shape == (2, 3000) and u.min() > -1.0 and u.max() < 3.0
    assert abs(u.mean() - 1.0) < 0.1
    np.testing.assert_array_equal(np.asarray(pr.random.uniform((5,), seed=7)),
                                  np.asarray(pr.random.uniform((5,), seed=7)))  # int: same draws
    with pytest.raises(ValueError, match=">= 0"):
        pr.random.normal((2, -1))
    with pytest.raises(TypeError, match="seed"):
        pr.random.normal((2,), seed="x")

    @pr.compile
    def noise(x):
        return x + pr.random.normal(ops.shape(x), seed=gen)

    z = np.zeros((3, 2), "float32")
    assert not np.array_equal(np.asarray(noise(z)), np.asarray(noise(z)))  # fresh per call
    assert noise.tracing_count == 1


# ---- utilities and conversions -------------------------------------------------------------

def test_initializer_names():
    for name, std in [("random_normal", 0.05), ("truncated_normal", 0.05 * 0.8796),
                      ("random_uniform", 0.1 / np.sqrt(12))]:
        w = pr.initializers.get(name)((200, 100))
        assert abs(w.std() - std) < 0.1 * std, name
    assert np.all(pr.initializers.Constant(3.0)((2,)) == 3.0)
    w = pr.initializers.RandomNormal(stddev=1.0, seed=3)((5,))
    np.testing.assert_array_equal(w, pr.initializers.RandomNormal(stddev=1.0, seed=3)((5,)))


def test_to_categorical():
    np.testing.assert_array_equal(pr.utils.to_categorical([[1], [0], [2]]),
                                  np.eye(3, dtype="float32")[[1, 0, 2]])
    assert pr.utils.to_categorical([1, 2], num_classes=5).shape == (2, 5)
    with pytest.raises(ValueError, match="out of range"):
        pr.utils.to_categorical([3], num_classes=3)
    with pytest.raises(ValueError, match="integers"):
        pr.utils.to_categorical([0.5])


def test_plot_model_without_graphviz(monkeypatch, tmp_path):
    model = pr.Sequential([layers.Input((4,)), layers.Dense(2)])
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ImportError, match="Graphviz"):
        pr.utils.plot_model(model, str(tmp_path / "m.png"))
    assert not (tmp_path / "m.png").exists()
    pr.utils.plot_model(model, str(tmp_path / "m.dot"))  # DOT needs no Graphviz
    assert (tmp_path / "m.dot").read_text().startswith("digraph")


def test_unsupported_names_say_so():
    for name in ("Embedding", "LSTM", "Conv3D", "MaxPooling1D", "RandomBrightness"):
        with pytest.raises(AttributeError, match="not provided by pyresnet"):
            getattr(layers, name)
    with pytest.raises(AttributeError, match="has no attribute 'Nonsense'"):
        layers.Nonsense  # noqa: B018


def test_uint8_images_are_cast_as_keras_does(rng):
    model = pr.Sequential([layers.Input((4, 4, 3)), layers.Conv2D(2, 3), layers.Flatten()])
    images = rng.integers(0, 256, (2, 4, 4, 3), dtype=np.uint8)
    as_float = np.asarray(model(images.astype("float32")))
    np.testing.assert_array_equal(np.asarray(model(images)), as_float)
    np.testing.assert_array_equal(np.asarray(model(pr.Tensor(images))), as_float)


def test_layer_output_and_input():
    inputs = pr.Input((3,))
    dense = layers.Dense(2)
    out = dense(inputs)
    assert dense.output is out and dense.input is inputs
    with pytest.raises(AttributeError, match="never been called"):
        layers.Dense(2).output  # noqa: B018


def test_on_batch_methods_loss_and_shapes(rng):
    """train_on_batch is one fit step on the whole batch (same weights as
    fit with batch_size=N); test_on_batch equals evaluate on that batch;
    predict_on_batch equals predict; model.loss, input_shape, output_shape."""
    x = rng.standard_normal((16, 5)).astype("float32")
    y = rng.integers(0, 3, 16).astype("int32")

    def model():
        pr.utils.set_random_seed(7)
        m = pr.Sequential([pr.Input((5,)), layers.Dense(4, activation="relu"), layers.Dense(3)])
        m.compile(optimizer=pr.optimizers.SGD(0.1),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
        return m

    a, b = model(), model()
    assert a.input_shape == (None, 5) and a.output_shape == (None, 3)
    assert isinstance(a.loss, pr.losses.SparseCategoricalCrossentropy)
    loss, acc = a.train_on_batch(x, y)
    logs = b.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0).history
    np.testing.assert_allclose(loss, logs["loss"][0], rtol=1e-6)
    np.testing.assert_allclose(acc, logs["accuracy"][0], rtol=1e-6)
    for wa, wb in zip(a.weights, b.weights):
        np.testing.assert_array_equal(wa.numpy(), wb.numpy())
    got = a.test_on_batch(x, y, return_dict=True)
    want = a.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    assert got.keys() == want.keys()
    for k in got:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
    np.testing.assert_array_equal(a.predict_on_batch(x), a.predict(x, verbose=0))
    with pytest.raises(RuntimeError, match="must be compiled"):
        pr.Sequential([pr.Input((5,)), layers.Dense(3)]).train_on_batch(x, y)
    assert pr.Sequential([pr.Input((5,)), layers.Dense(3)]).loss is None


def test_generators_with_steps(rng):
    x = rng.standard_normal((64, 4)).astype("float32")
    y = rng.integers(0, 3, 64)
    drawn = []

    def batches():
        while True:  # an endless generator: the steps say when an epoch ends
            i = len(drawn) % 4
            drawn.append(i)
            yield x[16 * i:16 * (i + 1)], y[16 * i:16 * (i + 1)]

    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    model.compile(optimizer="sgd", loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(batches(), steps_per_epoch=3, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and len(drawn) == 6  # one generator, 3 per epoch
    drawn.clear()
    loss = model.evaluate(batches(), steps=4, verbose=0)
    assert len(drawn) == 4 and loss == pytest.approx(model.evaluate(x, y, verbose=0), rel=1e-5)


# ---- rank alignment of labels and predictions (issue 25, item 3) ------------------------

def _rank_aligned_cases(rng, n=7):
    """(name, object, reference(y, p) on (n,) label and (n,) prediction vectors)."""
    bce = lambda y, p: -(y * np.log(p) + (1 - y) * np.log(1 - p))
    sig = np_sigmoid
    return [
        ("BinaryCrossentropy", pr.losses.BinaryCrossentropy(), lambda y, p: bce(y, p).mean()),
        ("BinaryCrossentropy(logits)", pr.losses.BinaryCrossentropy(from_logits=True),
         lambda y, p: bce(y, sig(p)).mean()),
        ("MeanSquaredError", pr.losses.MeanSquaredError(), lambda y, p: ((y - p) ** 2).mean()),
        ("MeanAbsoluteError", pr.losses.MeanAbsoluteError(), lambda y, p: abs(y - p).mean()),
        ("BinaryAccuracy", pr.metrics.BinaryAccuracy(),
         lambda y, p: ((p > 0.5) == (y > 0.5)).mean()),
        ("metrics.MeanAbsoluteError", pr.metrics.MeanAbsoluteError(),
         lambda y, p: abs(y - p).mean()),
        ("metrics.MeanSquaredError", pr.metrics.MeanSquaredError(),
         lambda y, p: ((y - p) ** 2).mean()),
    ]


def _value(obj, y, p):
    if isinstance(obj, pr.metrics.Metric):
        obj.reset_state()
        obj.update_state(y, p)
        return obj.result()
    return obj(y, p)


def test_labels_and_predictions_of_ranks_one_and_two_are_aligned_not_broadcast(rng):
    """(N,) labels against (N, 1) predictions (and the other way round) compare
    N pairs, as Keras's squeeze_or_expand_to_same_rank makes them, eagerly and
    in a compiled function with an unknown batch; an (N, N) broadcast would
    average every label against every prediction."""
    n = 7
    y = rng.integers(0, 2, n).astype(np.float32)
    p = rng.uniform(0.05, 0.95, n).astype(np.float32)
    for name, obj, ref in _rank_aligned_cases(rng, n):
        want = ref(y.astype(np.float64), p.astype(np.float64))
        for yy, pp in ((y, p[:, None]), (y[:, None], p), (y[:, None], p[:, None])):
            got = float(_value(obj, yy, pp))
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=f"{name} {yy.shape} "
                                                                     f"{pp.shape}")
            f = pr.compile(lambda a, b: _value(obj, a, b),
                           input_signature=[pr.TensorSpec((None,) + yy.shape[1:]),
                                            pr.TensorSpec((None,) + pp.shape[1:])])
            np.testing.assert_allclose(float(f(yy, pp)), want, rtol=1e-5,
                                       err_msg=f"compiled {name} {yy.shape} {pp.shape}")
    # per-sample values keep the batch
    per_sample = pr.losses.BinaryCrossentropy(reduction="none")(y, p[:, None])
    assert per_sample.shape == (n,)


def test_shapes_that_cannot_be_aligned_are_refused_naming_both(rng):
    y, p = np.zeros((4, 3), np.float32), np.full((4, 2), 0.5, np.float32)
    for fn in (pr.losses.BinaryCrossentropy(), pr.losses.MeanSquaredError(),
               pr.losses.MeanAbsoluteError(), pr.metrics.BinaryAccuracy()):
        # ((2,) against (4, 2) and (1,) against (4, 1) would broadcast silently)
        for yy, pp in ((y, p), (y[:, 0], p), (np.zeros(4, np.float32), p[None]),
                       (y[0, :2], p), (y[0, :1], p[:, :1])):
            with pytest.raises(ValueError) as info:
                _value(fn, yy, pp)
            assert str(yy.shape) in str(info.value) and str(pp.shape) in str(info.value)


def test_binary_classifier_as_in_the_keras_examples_learns(rng):
    """Dense(1, sigmoid) with (N,) 0/1 labels, binary_crossentropy and
    "accuracy": the Keras examples' binary classifier (it learnt nothing when
    the (N,) labels broadcast against the (N, 1) outputs)."""
    x = rng.standard_normal((256, 4)).astype(np.float32)
    y = (x[:, 0] - 0.5 * x[:, 1] > 0).astype(np.float32)
    pr.utils.set_random_seed(3)
    model = pr.Sequential([layers.Input((4,)), layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=pr.optimizers.SGD(0.5), loss="binary_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=8, verbose=0)
    assert history.history["accuracy"][-1] > 0.9
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]
