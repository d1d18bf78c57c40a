"""The Keras 3 guide "Training & evaluation with the built-in methods",
walked through with pyresnet: fit/evaluate/predict with validation data and
the History, string names for optimizer, loss and metrics, a custom loss
function and a ``Loss`` subclass, a ``Metric`` subclass with
``add_variable``, ``add_loss`` in a layer, ``validation_split``, datasets
(with ``steps_per_epoch`` and ``validation_steps``), a ``PyDataset``,
``class_weight`` and ``sample_weight``, several inputs and outputs with
per-output losses, metrics and loss weights, and callbacks, on MNIST-shaped
CIFAR-10 crops and CIFAR-10 images."""
import math

import numpy as np
import pytest

import pyresnet as keras
from pyresnet import layers, ops


def get_uncompiled_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    return keras.Model(inputs=inputs, outputs=outputs)


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy",
                  metrics=["sparse_categorical_accuracy"])
    return model


def mnist(mnist_like):
    (x_train, y_train), (x_test, y_test) = mnist_like
    x_train = x_train.reshape(-1, 784).astype("float32")
    x_test = x_test.reshape(-1, 784).astype("float32")
    return (x_train[:-500], y_train[:-500]), (x_train[-500:], y_train[-500:]), (x_test, y_test)


def test_api_overview(mnist_like):
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = mnist(mnist_like)
    model = get_uncompiled_model()
    model.compile(optimizer=keras.optimizers.RMSprop(),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    history = model.fit(x_train, y_train, batch_size=64, epochs=2,
                        validation_data=(x_val, y_val), verbose=0)
    assert set(history.history) == {"loss", "sparse_categorical_accuracy", "val_loss",
                                    "val_sparse_categorical_accuracy"}
    assert history.history["loss"][1] < history.history["loss"][0]
    results = model.evaluate(x_test, y_test, batch_size=128, verbose=0)
    assert len(results) == 2  # "test loss, test acc"
    predictions = model.predict(x_test[:3], verbose=0)
    assert predictions.shape == (3, 10)  # probabilities (softmax output)
    np.testing.assert_allclose(predictions.sum(1), 1.0, rtol=1e-5)
    probs = model.predict(x_test, verbose=0)
    assert results[0] == pytest.approx(
        -np.mean(np.log(np.clip(probs[np.arange(len(y_test)), y_test], 1e-7, 1))), rel=1e-4)
    assert results[1] == pytest.approx(np.mean(probs.argmax(1) == y_test), abs=1e-6)
    assert model.metrics_names == ["loss", "compile_metrics"]


def custom_mean_squared_error(y_true, y_pred):
    return ops.mean(ops.square(y_true - y_pred), axis=-1)


class CustomMSE(keras.losses.Loss):
    def __init__(self, regularization_factor=0.1, name="custom_mse"):
        super().__init__(name=name)
        self.regularization_factor = regularization_factor

    def call(self, y_true, y_pred):
        mse = ops.mean(ops.square(y_true - y_pred), axis=-1)
        reg = ops.mean(ops.square(0.5 - y_pred), axis=-1)
        return mse + reg * self.regularization_factor


class CategoricalTruePositives(keras.metrics.Metric):
    def __init__(self, name="categorical_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.reshape(ops.argmax(y_pred, axis=1), (-1, 1))
        values = ops.cast(ops.reshape(y_true, (-1, 1)), "int32") == ops.cast(y_pred, "int32")
        values = ops.cast(values, "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            values = ops.multiply(values, sample_weight)
        self.true_positives.assign_add(ops.sum(values))

    def result(self):
        return self.true_positives

    def reset_state(self):
        self.true_positives.assign(0.0)


def test_custom_losses_and_metrics(mnist_like):
    (x_train, y_train), _, (x_test, y_test) = mnist(mnist_like)
    y_train_one_hot = keras.utils.to_categorical(y_train, num_classes=10)
    model = get_uncompiled_model()
    model.compile(optimizer=keras.optimizers.Adam(), loss=custom_mean_squared_error)
    model.fit(x_train, y_train_one_hot, batch_size=64, epochs=1, verbose=0)
    probs = model.predict(x_train[:64], verbose=0)
    want = np.mean(np.mean((y_train_one_hot[:64] - probs) ** 2, axis=-1))
    assert model.evaluate(x_train[:64], y_train_one_hot[:64], batch_size=64,
                          verbose=0) == pytest.approx(want, rel=1e-5)

    model = get_uncompiled_model()
    model.compile(optimizer=keras.optimizers.Adam(), loss=CustomMSE())
    model.fit(x_train, y_train_one_hot, batch_size=64, epochs=1, verbose=0)
    probs = model.predict(x_train[:64], verbose=0)
    want = np.mean(np.mean((y_train_one_hot[:64] - probs) ** 2, -1)
                   + 0.1 * np.mean((0.5 - probs) ** 2, -1))
    assert model.evaluate(x_train[:64], y_train_one_hot[:64], batch_size=64,
                          verbose=0) == pytest.approx(want, rel=1e-5)

    model = get_uncompiled_model()
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[CategoricalTruePositives()])
    history = model.fit(x_train, y_train, batch_size=64, epochs=2, verbose=0)
    assert "categorical_true_positives" in history.history
    logs = model.evaluate(x_test, y_test, verbose=0, return_dict=True)
    correct = np.sum(model.predict(x_test, verbose=0).argmax(1) == y_test)
    assert logs["categorical_true_positives"] == correct  # a count, reset per evaluation


class ActivityRegularizationLayer(layers.Layer):
    def call(self, inputs):
        self.add_loss(ops.sum(inputs) * 0.1)
        return inputs  # pass-through layer


def test_add_loss_in_a_layer(mnist_like):
    (x_train, y_train), _, _ = mnist(mnist_like)
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = ActivityRegularizationLayer()(x)  # the activity regularization as a layer
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    xb, yb = x_train[:64], y_train[:64]
    logs = model.evaluate(xb, yb, batch_size=64, verbose=0, return_dict=True)
    hidden = keras.Model(inputs, model.get_layer("dense_1").output).predict(xb, verbose=0)
    logits = model.predict(xb, verbose=0).astype(np.float64)
    log_p = logits - logits.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    ce = -np.mean(log_p[np.arange(64), yb])
    # "the displayed loss will be much higher than before": the penalty is added
    assert logs["loss"] == pytest.approx(ce + 0.1 * hidden.sum(), rel=1e-4)
    model.fit(xb, yb, batch_size=64, epochs=1, verbose=0)


def test_validation_split_and_datasets(mnist_like):
    (x_train, y_train), (x_val, y_val), _ = mnist(mnist_like)
    model = get_compiled_model()
    history = model.fit(x_train, y_train, batch_size=64, validation_split=0.2, epochs=1,
                        verbose=0)
    assert "val_loss" in history.history

    train_dataset = keras.data.Dataset.from_tensor_slices((x_train, y_train))
    train_dataset = train_dataset.shuffle(buffer_size=1024, seed=0).batch(64)
    val_dataset = keras.data.Dataset.from_tensor_slices((x_val, y_val)).batch(64)
    model = get_compiled_model()
    history = model.fit(train_dataset, epochs=2, validation_data=val_dataset, verbose=0)
    assert len(history.history["val_loss"]) == 2
    logs = model.evaluate(val_dataset, verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(history.history["val_loss"][-1], rel=1e-6)

    # steps_per_epoch: "the epoch ends after that many batches", continuing the data
    steps = []

    class CountBatches(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            steps.append(0)

        def on_train_batch_end(self, batch, logs=None):
            steps[-1] += 1

    model = get_compiled_model()
    with pytest.warns(UserWarning, match="ran out"):
        model.fit(train_dataset, epochs=3, steps_per_epoch=10, validation_data=val_dataset,
                  validation_steps=2, callbacks=[CountBatches()], verbose=0)
    assert steps == [10, 10, 4]  # 24 batches in the data: the third epoch runs out
    assert model.evaluate(val_dataset, steps=2, verbose=0, return_dict=True)["loss"] \
        == pytest.approx(model.evaluate(x_val[:128], y_val[:128], verbose=0)[0], rel=1e-5)


class ExamplePyDataset(keras.utils.PyDataset):
    def __init__(self, x, y, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size
        self.epochs_ended = 0

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, idx):
        batch_x = self.x[idx * self.batch_size:(idx + 1) * self.batch_size]
        batch_y = self.y[idx * self.batch_size:(idx + 1) * self.batch_size]
        return batch_x, batch_y

    def on_epoch_end(self):
        self.epochs_ended += 1


def test_py_dataset(mnist_like):
    (x_train, y_train), (x_val, y_val), _ = mnist(mnist_like)
    train_py_dataset = ExamplePyDataset(x_train, y_train, batch_size=64)
    val_py_dataset = ExamplePyDataset(x_val, y_val, batch_size=64)
    model = get_compiled_model()
    history = model.fit(train_py_dataset, validation_data=val_py_dataset, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and train_py_dataset.epochs_ended == 2
    assert model.evaluate(val_py_dataset, verbose=0)[0] == pytest.approx(
        model.evaluate(x_val, y_val, verbose=0)[0], rel=1e-5)


def test_class_weight_and_sample_weight(mnist_like):
    (x_train, y_train), _, _ = mnist(mnist_like)
    class_weight = {i: 1.0 for i in range(10)}
    class_weight[5] = 2.0  # twice the weight for class "5"
    model = get_compiled_model()
    keras.utils.set_random_seed(1)
    model_b = get_compiled_model()
    model_b.set_weights(model.get_weights())
    h1 = model.fit(x_train, y_train, class_weight=class_weight, batch_size=64, epochs=1,
                   shuffle=False, verbose=0)
    sample_weight = np.ones(shape=(len(y_train),), dtype="float32")
    sample_weight[y_train == 5] = 2.0
    h2 = model_b.fit(x_train, y_train, sample_weight=sample_weight, batch_size=64, epochs=1,
                     shuffle=False, verbose=0)
    assert h1.history == h2.history  # class_weight is per-class sample_weight
    for a, b in zip(model.weights, model_b.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    probs = model.predict(x_train[:64], verbose=0)
    nll = -np.log(np.clip(probs[np.arange(64), y_train[:64]], 1e-7, 1))
    logs = model.evaluate(x_train[:64], y_train[:64], sample_weight=sample_weight[:64],
                          batch_size=64, verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(np.sum(nll * sample_weight[:64]) / 64, rel=1e-5)


def test_multi_input_multi_output(cifar10, rng, tmp_path):
    image_input = keras.Input(shape=(32, 32, 3), name="img_input")
    vector_input = keras.Input(shape=(20,), name="vec_input")
    x1 = layers.Conv2D(3, 3)(image_input)
    x1 = layers.GlobalMaxPooling2D()(x1)
    x2 = layers.Dense(3)(vector_input)
    x = layers.concatenate([x1, x2])
    score_output = layers.Dense(1, name="score_output")(x)
    class_output = layers.Dense(5, name="class_output")(x)
    model = keras.Model(inputs=[image_input, vector_input],
                        outputs=[score_output, class_output])
    keras.utils.plot_model(model, str(tmp_path / "multi_input_and_output_model.png"),
                           show_shapes=True)
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3),
                  loss={"score_output": keras.losses.MeanSquaredError(),
                        "class_output": keras.losses.CategoricalCrossentropy()},
                  metrics={"score_output": [keras.metrics.MeanAbsoluteError()],
                           "class_output": [keras.metrics.CategoricalAccuracy()]},
                  loss_weights={"score_output": 2.0, "class_output": 1.0})
    (images, _), _ = cifar10
    img_data = images[:100].astype("float32") / 255.0
    vec_data = rng.random((100, 20)).astype("float32")
    score_targets = rng.random((100, 1)).astype("float32")
    class_targets = keras.utils.to_categorical(rng.integers(0, 5, 100), 5)
    history = model.fit({"img_input": img_data, "vec_input": vec_data},
                        {"score_output": score_targets, "class_output": class_targets},
                        batch_size=32, epochs=1, verbose=0)
    assert set(history.history) == {"loss", "score_output_loss", "class_output_loss",
                                    "mean_absolute_error", "categorical_accuracy"}
    logs = model.evaluate([img_data, vec_data], [score_targets, class_targets], verbose=0,
                          return_dict=True)
    assert logs["loss"] == pytest.approx(2.0 * logs["score_output_loss"]
                                         + logs["class_output_loss"], rel=1e-5)

    class DictBatches(keras.utils.PyDataset):  # a dataset of dicts keyed by name
        def __len__(self):
            return 4

        def __getitem__(self, i):
            rows = slice(25 * i, 25 * (i + 1))
            return ({"vec_input": vec_data[rows], "img_input": img_data[rows]},
                    {"class_output": class_targets[rows], "score_output": score_targets[rows]})

    by_dict = model.evaluate(DictBatches(), verbose=0, return_dict=True)
    for key, value in logs.items():
        assert by_dict[key] == pytest.approx(value, rel=1e-5), key
    model.fit(DictBatches(), epochs=1, verbose=0)


def test_callbacks(mnist_like, tmp_path):
    (x_train, y_train), _, _ = mnist(mnist_like)
    model = get_compiled_model()
    callbacks = [
        keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=1e-2, patience=1,
                                      verbose=0),
        keras.callbacks.ModelCheckpoint(filepath=str(tmp_path / "mymodel_{epoch}.keras"),
                                        save_best_only=True, monitor="val_loss"),
    ]
    history = model.fit(x_train, y_train, epochs=4, batch_size=64, callbacks=callbacks,
                        validation_split=0.2, verbose=0)
    assert 1 <= len(history.history["loss"]) <= 4
    assert (tmp_path / "mymodel_1.keras").exists()
    restored = keras.models.load_model(tmp_path / "mymodel_1.keras")
    assert restored.predict(x_train[:2], verbose=0).shape == (2, 10)
