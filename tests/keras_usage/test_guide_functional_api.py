"""The Keras 3 guide "The Functional API", walked through with pyresnet:
the same uses of the API as the guide's image sections (a functional MLP,
summary and plot, fit/evaluate, save and load, an encoder/decoder of
Conv2D/GlobalMaxPooling2D/Conv2DTranspose/UpSampling2D, models called as
layers, several outputs with loss weights, the toy ResNet on CIFAR-10,
feature extraction through ``layer.output``, a custom layer with
``get_config``), asserting what the guide says happens.  MNIST sections use
MNIST-shaped grey crops of CIFAR-10 (conftest.py); text sections (Embedding,
LSTM) are not provided by pyresnet."""
import numpy as np
import pytest

import pyresnet as keras
from pyresnet import layers, ops


def mnist_model():
    inputs = keras.Input(shape=(784,))
    x = layers.Dense(64, activation="relu")(inputs)
    x = layers.Dense(64, activation="relu")(x)
    outputs = layers.Dense(10)(x)
    return inputs, keras.Model(inputs=inputs, outputs=outputs, name="mnist_model")


def test_inputs_summary_and_plot(tmp_path):
    inputs, model = mnist_model()
    assert inputs.shape == (None, 784) and inputs.dtype == "float32"
    assert keras.Input(shape=(32, 32, 3)).shape == (None, 32, 32, 3)
    lines = []
    model.summary(print_fn=lines.append)
    assert 'Model: "mnist_model"' in lines[0] and "Total params: 55,050" in lines[0]
    png = keras.utils.plot_model(model, str(tmp_path / "my_first_model.png"))
    shapes = keras.utils.plot_model(model, str(tmp_path / "with_shapes.png"), show_shapes=True)
    for path in (png, shapes):
        assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    dot = keras.utils.model_to_dot(model, show_shapes=True)
    assert dot.count("->") == 3 and "(None, 784)" in dot and "(None, 10)" in dot


def test_training_evaluation_and_saving(mnist_like, tmp_path):
    (x_train, y_train), (x_test, y_test) = mnist_like
    x_train = x_train.reshape(len(x_train), 784).astype("float32")
    x_test = x_test.reshape(len(x_test), 784).astype("float32")
    _, model = mnist_model()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.RMSprop(), metrics=["accuracy"])
    history = model.fit(x_train, y_train, batch_size=64, epochs=2, validation_split=0.2,
                        verbose=0)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history.history["loss"][1] < history.history["loss"][0]
    test_scores = model.evaluate(x_test, y_test, verbose=0)
    assert len(test_scores) == 2 and 0.0 <= test_scores[1] <= 1.0
    logits = model.predict(x_test, verbose=0)
    assert test_scores[1] == pytest.approx(np.mean(logits.argmax(1) == y_test), abs=1e-6)

    model.save(tmp_path / "path_to_my_model.keras")
    del model
    model = keras.models.load_model(tmp_path / "path_to_my_model.keras")  # the same model
    np.testing.assert_array_equal(model.predict(x_test, verbose=0), logits)


def encoder_layers(encoder_input):
    x = layers.Conv2D(16, 3, activation="relu")(encoder_input)
    x = layers.Conv2D(32, 3, activation="relu")(x)
    x = layers.MaxPooling2D(3)(x)
    x = layers.Conv2D(32, 3, activation="relu")(x)
    x = layers.Conv2D(16, 3, activation="relu")(x)
    return layers.GlobalMaxPooling2D()(x)


def decoder_layers(x):
    x = layers.Reshape((4, 4, 1))(x)
    x = layers.Conv2DTranspose(16, 3, activation="relu")(x)
    x = layers.Conv2DTranspose(32, 3, activation="relu")(x)
    x = layers.UpSampling2D(3)(x)
    x = layers.Conv2DTranspose(16, 3, activation="relu")(x)
    return layers.Conv2DTranspose(1, 3, activation="relu")(x)


def test_ensembling(rng):
    def get_model():
        inputs = keras.Input(shape=(128,))
        outputs = layers.Dense(1)(inputs)
        return keras.Model(inputs, outputs)

    model1, model2, model3 = get_model(), get_model(), get_model()
    inputs = keras.Input(shape=(128,))
    y1, y2, y3 = model1(inputs), model2(inputs), model3(inputs)
    outputs = layers.average([y1, y2, y3])
    ensemble_model = keras.Model(inputs=inputs, outputs=outputs)
    x = rng.random((4, 128)).astype("float32")
    want = (np.asarray(model1(x)) + np.asarray(model2(x)) + np.asarray(model3(x))) / 3
    np.testing.assert_allclose(np.asarray(ensemble_model(x)), want, rtol=1e-5, atol=1e-6)


def test_one_graph_two_models_and_models_as_layers(mnist_like):
    images = mnist_like[0][0][:8, :, :, None]
    encoder_input = keras.Input(shape=(28, 28, 1), name="img")
    encoder_output = encoder_layers(encoder_input)
    encoder = keras.Model(encoder_input, encoder_output, name="encoder")
    autoencoder = keras.Model(encoder_input, decoder_layers(encoder_output), name="autoencoder")
    # "the output shape is the same as the input shape (28, 28, 1)"
    assert encoder.outputs[0].shape == (None, 16)
    assert autoencoder.outputs[0].shape == (None, 28, 28, 1)
    assert autoencoder(images).shape == (8, 28, 28, 1)
    # the encoder's layers (and weights) are shared by both models
    assert all(any(w is v for v in autoencoder.weights) for w in encoder.weights)

    # Models are callable like layers: encoder and decoder chained
    encoder_input = keras.Input(shape=(28, 28, 1), name="original_img")
    encoder = keras.Model(encoder_input, encoder_layers(encoder_input), name="encoder")
    decoder_input = keras.Input(shape=(16,), name="encoded_img")
    decoder = keras.Model(decoder_input, decoder_layers(decoder_input), name="decoder")
    autoencoder_input = keras.Input(shape=(28, 28, 1), name="img")
    decoded_img = decoder(encoder(autoencoder_input))
    autoencoder = keras.Model(autoencoder_input, decoded_img, name="autoencoder")
    assert [layer.name for layer in autoencoder.layers] == ["img", "encoder", "decoder"]
    np.testing.assert_allclose(np.asarray(autoencoder(images)),
                               np.asarray(decoder(encoder(images))), rtol=1e-6, atol=1e-6)


def toy_resnet():
    inputs = keras.Input(shape=(32, 32, 3), name="img")
    x = layers.Conv2D(32, 3, activation="relu")(inputs)
    x = layers.Conv2D(64, 3, activation="relu")(x)
    block_1_output = layers.MaxPooling2D(3)(x)
    x = layers.Conv2D(64, 3, activation="relu", padding="same")(block_1_output)
    x = layers.Conv2D(64, 3, activation="relu", padding="same")(x)
    block_2_output = layers.add([x, block_1_output])
    x = layers.Conv2D(64, 3, activation="relu", padding="same")(block_2_output)
    x = layers.Conv2D(64, 3, activation="relu", padding="same")(x)
    block_3_output = layers.add([x, block_2_output])
    x = layers.Conv2D(64, 3, activation="relu")(block_3_output)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dense(256, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    outputs = layers.Dense(10)(x)
    return keras.Model(inputs, outputs, name="toy_resnet")


def test_toy_resnet_on_cifar10(cifar10, tmp_path):
    model = toy_resnet()
    lines = []
    model.summary(print_fn=lines.append)
    assert "Total params: 223,242" in lines[0]  # the guide's count
    assert "Connected to" in lines[0]  # a non-sequential graph
    keras.utils.plot_model(model, str(tmp_path / "mini_resnet.png"), show_shapes=True)

    (x_train, y_train), _ = cifar10
    x_train = x_train[:192].astype("float32") / 255.0
    y_train = keras.utils.to_categorical(y_train[:192], 10)
    assert y_train.shape == (192, 10) and np.all(y_train.sum(1) == 1)
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True), metrics=["acc"])
    history = model.fit(x_train, y_train, batch_size=64, epochs=1, validation_split=0.2,
                        verbose=0)
    assert set(history.history) == {"loss", "acc", "val_loss", "val_acc"}
    assert np.isfinite(history.history["val_loss"][0])

    # Feature extraction: a model returning every layer's activations
    features_list = [layer.output for layer in model.layers]
    feat_extraction_model = keras.Model(inputs=model.input, outputs=features_list)
    features = feat_extraction_model(x_train[:2])
    assert len(features) == len(model.layers)
    assert [tuple(f.shape[1:]) for f in features[:4]] == [(32, 32, 3), (30, 30, 32),
                                                         (28, 28, 64), (9, 9, 64)]
    np.testing.assert_allclose(np.asarray(features[-1]), np.asarray(model(x_train[:2])),
                               rtol=1e-5, atol=1e-5)


def test_several_outputs_with_loss_weights(rng):
    """The ticket-routing model's compile and fit, with image and vector
    inputs instead of text: per-output losses, loss weights by list and by
    output name, and dict data keyed by input and output names."""
    image_input = keras.Input(shape=(8, 8, 3), name="image")
    tags_input = keras.Input(shape=(12,), name="tags")
    x = layers.GlobalMaxPooling2D()(layers.Conv2D(4, 3, activation="relu")(image_input))
    x = layers.concatenate([x, tags_input])
    priority_pred = layers.Dense(1, name="priority")(x)
    department_pred = layers.Dense(4, name="department")(x)
    model = keras.Model(inputs=[image_input, tags_input], outputs=[priority_pred, department_pred])

    image_data = rng.random((64, 8, 8, 3)).astype("float32")
    tags_data = rng.integers(0, 2, (64, 12)).astype("float32")
    priority_targets = rng.random((64, 1)).astype("float32")
    dept_targets = keras.utils.to_categorical(rng.integers(0, 4, 64), 4)

    model.compile(optimizer=keras.optimizers.RMSprop(1e-3),
                  loss=[keras.losses.BinaryCrossentropy(from_logits=True),
                        keras.losses.CategoricalCrossentropy(from_logits=True)],
                  loss_weights=[1.0, 0.2])
    logs = model.evaluate([image_data, tags_data], [priority_targets, dept_targets],
                          batch_size=64, verbose=0, return_dict=True)
    priority, department = model.predict([image_data, tags_data], verbose=0)
    z = priority_targets
    bce = np.mean(np.maximum(priority, 0) - priority * z + np.log1p(np.exp(-np.abs(priority))))
    shifted = department - department.max(1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    cce = np.mean(-(dept_targets * log_p).sum(1))
    assert logs["priority_loss"] == pytest.approx(bce, rel=1e-5)
    assert logs["department_loss"] == pytest.approx(cce, rel=1e-5)
    assert logs["loss"] == pytest.approx(bce + 0.2 * cce, rel=1e-5)

    model.compile(optimizer=keras.optimizers.RMSprop(1e-3),
                  loss={"priority": keras.losses.BinaryCrossentropy(from_logits=True),
                        "department": keras.losses.CategoricalCrossentropy(from_logits=True)},
                  loss_weights={"priority": 1.0, "department": 0.2})
    history = model.fit({"image": image_data, "tags": tags_data},
                        {"priority": priority_targets, "department": dept_targets},
                        epochs=2, batch_size=32, verbose=0)
    assert set(history.history) == {"loss", "priority_loss", "department_loss"}
    assert history.history["loss"][0] == pytest.approx(logs["loss"], rel=0.05)


@keras.saving.register_keras_serializable(package="guide")
class CustomDense(layers.Layer):
    def __init__(self, units=32, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units),
                                 initializer="random_normal", trainable=True)
        self.b = self.add_weight(shape=(self.units,), initializer="random_normal",
                                 trainable=True)

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units})
        return config


def test_custom_layer_serialization(rng):
    inputs = keras.Input((4,))
    outputs = CustomDense(10)(inputs)
    model = keras.Model(inputs, outputs)
    w = np.asarray(model.layers[1].w)
    assert abs(w.std() - 0.05) < 0.03  # "random_normal": Keras's stddev 0.05
    config = model.get_config()
    new_model = keras.Model.from_config(config, custom_objects={"CustomDense": CustomDense})
    assert [type(layer).__name__ for layer in new_model.layers] == ["InputLayer", "CustomDense"]
    assert new_model.layers[1].units == 10
    x = rng.random((3, 4)).astype("float32")
    new_model.set_weights(model.get_weights())
    np.testing.assert_array_equal(np.asarray(new_model(x)), np.asarray(model(x)))
