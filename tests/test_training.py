"""Training: compile/fit/evaluate/predict against NumPy references, data
checks that leave every weight unchanged, callbacks, and a small ResNet
learning on real CIFAR-10."""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from seeding import seeded_normal as _rand


@pytest.fixture(autouse=True)
def _fresh_session():
    pr.utils.clear_session()
    pr.utils.set_random_seed(2024)


def _dense_model(features=5, classes=3):
    inputs = layers.Input((features,))
    return pr.Model(inputs, layers.Dense(classes)(inputs), name="linear")


def _sgd_reference(w, b, x, y, lr, momentum, nesterov, decay, batch_size, epochs):
    """Keras 3 SGD on softmax cross-entropy (mean over the batch) in float64;
    returns the final weights and the per-epoch sample-weighted mean loss."""
    w, b = w.astype(np.float64), b.astype(np.float64)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    epoch_losses = []
    for _ in range(epochs):
        total = 0.0
        for start in range(0, len(x), batch_size):
            xb, yb = x[start:start + batch_size].astype(np.float64), y[start:start + batch_size]
            logits = xb @ w + b
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            total += -np.log(p[np.arange(len(yb)), yb]).sum()
            g = p.copy()
            g[np.arange(len(yb)), yb] -= 1
            g /= len(yb)
            grads = [xb.T @ g, g.sum(0)]
            for var, grad, vel in ((w, grads[0], vw), (b, grads[1], vb)):
                var -= var * decay * lr
                if momentum:
                    vel[...] = momentum * vel - lr * grad
                    var += momentum * vel - lr * grad if nesterov else vel
                else:
                    var -= lr * grad
        epoch_losses.append(total / len(x))
    return w, b, epoch_losses


@pytest.mark.parametrize("lr,momentum,nesterov,decay", [(0.3, 0.0, False, None),
                                                       (0.1, 0.9, False, None),
                                                       (0.1, 0.8, True, 0.05)])
def test_fit_matches_a_numpy_sgd(lr, momentum, nesterov, decay):
    model = _dense_model()
    model.compile(pr.optimizers.SGD(lr, momentum=momentum, nesterov=nesterov, weight_decay=decay),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = _rand(10, 5, seed=1)
    y = np.array([0, 1, 2, 1, 0, 2, 2, 1, 0, 0])
    w0, b0 = model.get_weights()
    history = model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    w, b, losses = _sgd_reference(w0, b0, x, y, lr, momentum, nesterov, decay or 0.0, 4, 3)
    np.testing.assert_allclose(model.get_weights()[0], w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(model.get_weights()[1], b, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(history.history["loss"], losses, rtol=1e-5)
    assert history.epoch == [0, 1, 2] and model.history is history
    assert model.optimizer.built and float(model.optimizer.learning_rate) == pytest.approx(lr)


def test_learning_rate_is_a_variable_and_slots_are_lazy():
    opt = pr.optimizers.SGD(0.5, momentum=0.9)
    assert isinstance(opt.learning_rate, pr.Variable) and opt.variables == [opt.learning_rate]
    var = pr.Variable(np.ones(3, np.float32))
    opt.learning_rate = 0.1
    opt.apply_gradients([(np.full(3, 2.0, np.float32), var), (None, pr.Variable([1.0]))])
    np.testing.assert_allclose(var.numpy(), 1 - 0.1 * 2, rtol=1e-6)
    assert len(opt.variables) == 2  # one velocity slot, created by the first apply
    with pytest.raises(ValueError, match=r"gradient of shape \(2,\).*shape \(3,\)"):
        opt.apply_gradients([(np.ones(3, np.float32), var), (np.ones(2, np.float32), var)])
    np.testing.assert_allclose(var.numpy(), 0.8, rtol=1e-6)  # nothing applied
    with pytest.raises(ValueError, match="momentum"):
        pr.optimizers.SGD(momentum=1.5)
    assert isinstance(pr.optimizers.get("sgd"), pr.optimizers.SGD)


class Gated(layers.Layer):
    """y = x * sigmoid-free gate: x * g + x @ W, written with ops in Python."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight((input_shape[-1], self.units), "glorot_uniform", name="w")
        self.g = self.add_weight((self.units,), "ones", name="g")

    def call(self, inputs, training=None):
        return pr.ops.relu(pr.ops.matmul(inputs, self.w) * self.g)


def test_a_custom_python_layer_trains():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 4)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + 2 * (x[:, 2] > 0.5)
    model = pr.Sequential([Gated(16), layers.Dense(4)])
    model.compile(pr.optimizers.SGD(0.1, momentum=0.9),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y, batch_size=32, epochs=8, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0]
    assert history.history["accuracy"][-1] > 0.8
    assert [w.path for w in model.trainable_weights][:2] == ["gated/w", "gated/g"]
    assert model.get_config()["layers"][0]["config"]["units"] == 16


# ---- data checks: errors before any weight changes --------------------------------


def _conv_model():
    inputs = layers.Input((6, 6, 3))
    x = layers.Conv2D(4, 3, padding="same")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.GlobalAveragePooling2D()(layers.ReLU()(x))
    model = pr.Model(inputs, layers.Dense(5)(x), name="small")
    model.compile(pr.optimizers.SGD(0.1, momentum=0.9),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def _state(model):
    return [np.array(v, copy=True) for v in model.weights + model.optimizer.variables]


X = _rand(8, 6, 6, 3, seed=4)
Y = np.arange(8) % 5

BAD_DATA = {
    "wrong rank": (ValueError, X[:, :, :, 0], Y,
                   r'"small".*expected ndim=4, found ndim=3.*\(8, 6, 6\).*\(None, 6, 6, 3\)'),
    "channel mismatch": (ValueError, np.concatenate([X, X], -1), Y,
                         r'"small".*value 3, but received input with shape \(8, 6, 6, 6\).*'
                         r"\(None, 6, 6, 3\)"),
    "wrong dtype": (TypeError, X.astype(np.complex64), Y,
                    r'"small".*numeric.*complex64.*\(8, 6, 6, 3\)'),
    "string labels": (TypeError, X, Y.astype(str), r'"small".*numeric.*<U'),
    "labels out of range": (ValueError, X, Y + 3,
                            r'"small".*\[0, 5\).*"dense".*\(None, 5\).*\[3, 7\].*\(8,\)'),
    "negative labels": (ValueError, X, Y - 1, r'"small".*\[0, 5\).*\[-1, 3\]'),
    "length mismatch": (ValueError, X, Y[:7], r'"small".*same number of samples.*'
                                              r"\(8, 6, 6, 3\).*\(7,\)"),
    "empty arrays": (ValueError, X[:0], Y[:0], r'"small".*empty.*\(0, 6, 6, 3\).*\(0,\)'),
    "label shape": (ValueError, X, np.stack([Y, Y], 1), r'"small".*\(N,\) or \(N, 1\).*\(8, 2\)'),
}


@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_raises_before_any_update(case):
    error, x, y, message = BAD_DATA[case]
    model = _conv_model()
    model.fit(X, Y, batch_size=4, verbose=0)  # optimizer slots and BN statistics exist
    before = _state(model)
    with pytest.raises(error, match=message):
        model.fit(x, y, batch_size=4, verbose=0)
    with pytest.raises(error, match=message):
        model.fit(X, Y, validation_data=(x, y), verbose=0)
    with pytest.raises(error, match=message):
        model.evaluate(x, y, verbose=0)
    after = _state(model)
    assert len(after) == len(before)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)


def test_bad_data_for_a_subclassed_model_is_caught_by_the_dry_run():
    class Net(pr.Model):
        def __init__(self):
            super().__init__()
            self.conv = layers.Conv2D(2, 3)
            self.bn = layers.BatchNormalization()
            self.head = layers.Dense(3)

        def call(self, inputs, training=None):
            x = pr.ops.global_average_pool2d(self.bn(self.conv(inputs)))
            return self.head(x)

    net = Net()
    net.compile("sgd", "sparse_categorical_crossentropy")
    net.compile("sgd", pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    net.fit(X, Y % 3, verbose=0)
    before = _state(net)
    with pytest.raises(ValueError, match=r'Layer "net/conv2d".*value 3.*\(1, 6, 6, 2\)'):
        net.fit(X[..., :2], Y % 3, verbose=0)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        net.fit(X, Y, verbose=0)
    for a, b in zip(_state(net), before):
        np.testing.assert_array_equal(a, b)
    assert [layer.name for layer in net.layers] == ["conv2d", "batch_normalization", "dense"]


def test_compile_and_argument_errors():
    model = _dense_model()
    with pytest.raises(RuntimeError, match="compiled"):
        model.fit(_rand(4, 5), np.zeros(4, int), verbose=0)
    with pytest.raises(ValueError, match="unknown loss"):
        model.compile("sgd", "hinge")
    with pytest.raises(ValueError, match="unknown optimizer"):
        model.compile("adagrad", "sparse_categorical_crossentropy")
    model.compile("sgd", "sparse_categorical_crossentropy")
    with pytest.raises(ValueError, match="batch_size"):
        model.fit(_rand(4, 5), np.zeros(4, int), batch_size=0, verbose=0)
    with pytest.raises(ValueError, match="validation_split"):
        model.fit(_rand(4, 5), np.zeros(4, int), validation_split=1.0, verbose=0)


# ---- the loop: history, validation, evaluate, predict, callbacks -------------------


def test_history_validation_evaluate_and_predict():
    model = _conv_model()
    history = model.fit(X, Y, batch_size=3, epochs=2, validation_split=0.25, verbose=0)
    assert sorted(history.history) == ["accuracy", "loss", "val_accuracy", "val_loss"]
    assert all(len(v) == 2 for v in history.history.values())
    # validation = the last 2 of 8 samples, evaluated in inference mode
    val_loss, val_acc = model.evaluate(X[6:], Y[6:], verbose=0)
    assert val_loss == pytest.approx(history.history["val_loss"][-1], rel=1e-6)
    logits = model(X, training=False).numpy().astype(np.float64)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    loss_ref = -np.log(p[np.arange(8), Y]).mean()
    result = model.evaluate(X, Y, batch_size=3, verbose=0, return_dict=True)
    assert result["loss"] == pytest.approx(loss_ref, rel=1e-5)  # means over samples
    assert result["accuracy"] == pytest.approx(np.mean(logits.argmax(1) == Y))
    np.testing.assert_allclose(model.predict(X, batch_size=3, verbose=0), logits, rtol=1e-5,
                               atol=1e-6)
    history = model.fit(X, Y, epochs=1, validation_data=(X[:4], Y[:4]), verbose=0)
    assert history.history["val_loss"][0] == pytest.approx(
        model.evaluate(X[:4], Y[:4], verbose=0)[0], rel=1e-6)
    model.compile("sgd", pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    assert isinstance(model.evaluate(X, Y, verbose=0), float)  # no metrics: the loss alone


@pytest.mark.parametrize("freq, validated", [(2, [2, 4]), ([1, 4], [1, 4]), (5, [])])
def test_validation_freq(freq, validated):
    """Keras's ``validation_freq``: validation after the epochs it names
    (1-based), the others' logs without ``val_*``; bad values raise before
    any update."""
    model = _conv_model()
    seen = []

    class Epochs(pr.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append((epoch + 1, "val_loss" in logs))

    history = model.fit(X, Y, batch_size=4, epochs=4, validation_data=(X[:4], Y[:4]),
                        validation_freq=freq, verbose=0, callbacks=[Epochs()])
    assert seen == [(e, e in validated) for e in (1, 2, 3, 4)]
    assert len(history.history.get("val_loss", [])) == len(validated)
    if 4 in validated:  # the last validation: the trained model's loss on those samples
        assert history.history["val_loss"][-1] == pytest.approx(
            model.evaluate(X[:4], Y[:4], verbose=0)[0], rel=1e-6)
    before = [np.array(w) for w in model.weights]
    for bad in (0, -1, 1.5, True, "2", [0, 2], [1.0]):
        with pytest.raises(ValueError, match="validation_freq must be an int >= 1"):
            model.fit(X, Y, epochs=1, validation_data=(X, Y), validation_freq=bad, verbose=0)
    for w, b in zip(model.weights, before):
        np.testing.assert_array_equal(np.array(w), b)


def test_uint8_images_are_converted_as_given_and_runs_are_reproducible():
    images = np.random.default_rng(5).integers(0, 256, (8, 6, 6, 3), dtype=np.uint8)
    results = []
    for x in (images, images.astype(np.float32), images):
        pr.utils.clear_session()
        pr.utils.set_random_seed(11)
        model = _conv_model()
        model.compile(pr.optimizers.SGD(1e-4),
                      pr.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, Y.reshape(-1, 1).astype(np.uint8), batch_size=4, epochs=2, verbose=0)
        results.append(model.get_weights())
    for a, b, c in zip(*results):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    assert results[0][0].dtype == np.float32


def test_categorical_loss_and_accuracy_resolution():
    model = _dense_model(classes=4)
    model.compile("sgd", pr.losses.CategoricalCrossentropy(from_logits=True), metrics=["acc"])
    x = _rand(6, 5, seed=7)
    onehot = np.eye(4, dtype=np.float32)[[0, 3, 1, 1, 2, 0]]
    logits = model(x).numpy().astype(np.float64)
    log_p = logits - logits.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    loss, acc = model.evaluate(x, onehot, verbose=0)
    assert loss == pytest.approx(-(onehot * log_p).sum(1).mean(), rel=1e-5)
    assert acc == pytest.approx(np.mean(logits.argmax(1) == onehot.argmax(1)))
    with pytest.raises(ValueError, match=r"targets.*\(None, 4\).*\(6, 3\)"):
        model.fit(x, onehot[:, :3], verbose=0)
    probs = pr.losses.SparseCategoricalCrossentropy()  # probabilities, as Keras's default
    soft = np.array([[0.7, 0.2, 0.1]], np.float32)
    assert float(probs(np.array([1]), soft)) == pytest.approx(-np.log(0.2), rel=1e-5)


def test_multi_output_fit():
    inputs = layers.Input((5,))
    hidden = layers.Dense(8, activation="relu")(inputs)
    model = pr.Model(inputs, [layers.Dense(3, name="a")(hidden), layers.Dense(2, name="b")(hidden)])
    model.compile("sgd", [pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                          pr.losses.CategoricalCrossentropy(from_logits=True)],
                  metrics=["accuracy"])
    x = _rand(12, 5, seed=8)
    ya, yb = np.arange(12) % 3, np.eye(2, dtype=np.float32)[np.arange(12) % 2]
    history = model.fit(x, [ya, yb], batch_size=12, verbose=0)
    logs = {k: v[0] for k, v in history.history.items()}
    assert sorted(logs) == ["a_accuracy", "a_loss", "b_accuracy", "b_loss", "loss"]
    assert logs["loss"] == pytest.approx(logs["a_loss"] + logs["b_loss"], rel=1e-6)
    with pytest.raises(ValueError, match="2 output"):
        model.compile("sgd", ["sparse_categorical_crossentropy"])
    model.compile("sgd", {"a": "sparse_categorical_crossentropy",
                          "b": pr.losses.CategoricalCrossentropy(from_logits=True)},
                  metrics=[["accuracy"], []])
    logs = model.evaluate(x, [ya, yb], verbose=0, return_dict=True)
    assert sorted(logs) == ["a_accuracy", "a_loss", "b_loss", "loss"]


def test_callbacks_see_every_hook_and_can_stop_training():
    class Spy(pr.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.calls = []

        def on_train_begin(self, logs=None):
            self.calls.append("train_begin")

        def on_epoch_begin(self, epoch, logs=None):
            self.calls.append(f"epoch_begin {epoch}")

        def on_train_batch_end(self, batch, logs=None):
            self.calls.append(f"batch_end {batch} {sorted(logs)}")

        def on_epoch_end(self, epoch, logs=None):
            self.calls.append(f"epoch_end {epoch} {sorted(logs)}")
            self.model.stop_training = True

        def on_train_end(self, logs=None):
            self.calls.append("train_end")

    spy = Spy()
    model = _conv_model()
    calls = []
    model.train_function = lambda data: calls.append(len(data[0])) or model.train_step(data)
    model.fit(X, Y, batch_size=5, epochs=3, callbacks=[spy], verbose=0)
    assert calls == [5, 3]  # fit goes through model.train_function: the compile hook
    assert spy.calls == ["train_begin", "epoch_begin 0", "batch_end 0 ['accuracy', 'loss']",
                         "batch_end 1 ['accuracy', 'loss']", "epoch_end 0 ['accuracy', 'loss']",
                         "train_end"]
    assert spy.params["steps"] == 2 and spy.params["samples"] == 8


def test_progress_output(capsys):
    model = _conv_model()
    model.fit(X, Y, batch_size=4, epochs=2, verbose=1, validation_data=(X, Y))
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "2/2" in out
    assert "ms/step" in out and "img/s" in out and "loss: " in out and "accuracy: " in out
    assert "val_accuracy: " in out and "Evaluate" not in out  # validation draws no bar
    model.evaluate(X, Y, verbose=1)
    assert "Evaluate" in capsys.readouterr().out
    model.fit(X, Y, batch_size=4, epochs=2, verbose=2, validation_data=(X, Y))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Epoch")]
    assert len(lines) == 2 and "val_loss: " in lines[1] and "img/s" in lines[1]
    model.evaluate(X, Y, verbose=0)
    model.predict(X, verbose=0)
    assert capsys.readouterr().out == ""


class Batches:
    """A minimal dataset: re-iterable, len(), (x, y) batches of Tensors (the
    interface of pyresnet.data.Dataset after batch())."""

    def __init__(self, x, y, size):
        self.x, self.y, self.size = x, y, size

    def __len__(self):
        return -(-len(self.x) // self.size)

    def __iter__(self):
        for i in range(0, len(self.x), self.size):
            yield pr.Tensor(self.x[i:i + self.size]), pr.Tensor(self.y[i:i + self.size])


def test_fit_evaluate_predict_on_a_dataset_match_arrays():
    y32 = Y.astype(np.int32)
    results = []
    for use_dataset in (False, True):
        pr.utils.clear_session()
        pr.utils.set_random_seed(3)
        model = _conv_model()
        events = []

        class Spy(pr.callbacks.Callback):
            def on_test_begin(self, logs=None):
                events.append(("test_begin", self.params["samples"]))

        if use_dataset:
            history = model.fit(Batches(X, y32, 3), epochs=2, callbacks=[Spy()], verbose=0,
                                validation_data=Batches(X[:4], y32[:4], 2))
            evaluated = model.evaluate(Batches(X, y32, 5), verbose=0)
            predicted = model.predict(Batches(X, y32, 5), verbose=0)
        else:
            history = model.fit(X, y32, batch_size=3, epochs=2, shuffle=False, callbacks=[Spy()],
                                verbose=0, validation_data=(X[:4], y32[:4]))
            evaluated = model.evaluate(X, y32, batch_size=5, verbose=0)
            predicted = model.predict(X, batch_size=5, verbose=0)
        assert events == [("test_begin", None if use_dataset else 8)] * 2  # validation in fit
        results.append((history.history, evaluated, predicted, model.get_weights()))
    (h_a, e_a, p_a, w_a), (h_d, e_d, p_d, w_d) = results
    assert h_a.keys() == h_d.keys()
    for key in h_a:
        np.testing.assert_allclose(h_a[key], h_d[key], rtol=1e-6)
    np.testing.assert_allclose(e_a, e_d, rtol=1e-6)
    np.testing.assert_allclose(p_a, p_d, rtol=1e-6)
    for a, d in zip(w_a, w_d):
        np.testing.assert_array_equal(a, d)


def test_a_bad_first_batch_of_a_dataset_raises_before_any_update():
    model = _conv_model()
    model.fit(X, Y, verbose=0)
    before = _state(model)
    with pytest.raises(ValueError, match=r'"small".*\[0, 5\).*\[3, 6\]'):  # the first batch
        model.fit(Batches(X, (Y + 3).astype(np.int32), 4), verbose=0)
    with pytest.raises(ValueError, match=r'"small".*value 3.*\(4, 6, 6, 2\)'):
        model.fit(Batches(X[..., :2], Y.astype(np.int32), 4), verbose=0)
    with pytest.raises(ValueError, match=r"\(x, y\) batches"):
        model.evaluate(_Singles(X), verbose=0)
    assert model.predict(_Singles(X), verbose=0).shape == (8, 5)
    with pytest.raises(ValueError, match="validation_split"):
        model.fit(Batches(X, Y.astype(np.int32), 4), validation_split=0.5, verbose=0)
    for a, b in zip(_state(model), before):
        np.testing.assert_array_equal(a, b)


class _Singles(Batches):
    """A dataset of x batches only (fine for predict, not for fit)."""

    def __init__(self, x):
        super().__init__(x, x, 4)

    def __iter__(self):
        for x, _ in super().__iter__():
            yield x


# ---- real data -------------------------------------------------------------------------


def test_small_resnet_learns_cifar10_subset(cifar10_dir):
    (x_train, y_train), (x_test, y_test) = pr.datasets.cifar10.load_data(cifar10_dir)
    x = x_train[:2000].astype(np.float32) / 255
    mean = x.mean(axis=(0, 1, 2))
    x -= mean
    x_val = x_test[:1000].astype(np.float32) / 255 - mean
    # ResNet-8 (He et al. 2015 sec. 4.2 with n = 1, width 16); BN momentum 0.9
    # so that ~100 steps suffice for the moving statistics used at test time
    inputs = layers.Input((32, 32, 3))
    h = layers.Conv2D(16, 3, padding="same", use_bias=False, kernel_initializer="he_normal")(inputs)
    h = layers.ReLU()(layers.BatchNormalization(momentum=0.9)(h))
    for filters, strides in ((16, 1), (32, 2), (64, 2)):
        h = layers.ResidualBlock(filters, strides=strides, momentum=0.9)(h)
    model = pr.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(h)))
    model.compile(pr.optimizers.SGD(0.1, momentum=0.9),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(x, y_train[:2000], batch_size=64, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert losses[1] < losses[0] - 0.1
    test_loss, test_acc = model.evaluate(x_val, y_test[:1000], batch_size=250, verbose=0)
    assert test_acc > 0.2  # chance is 0.1
    assert test_loss < np.log(10)  # the loss of a uniform guess
