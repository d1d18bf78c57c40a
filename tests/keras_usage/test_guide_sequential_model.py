"""The Keras 3 guide "The Sequential model", walked through with pyresnet:
a stack of Dense layers called on data, ``layers``/``add``/``pop``/names,
weights created on the first call, an ``Input`` (or ``input_shape``) for a
model built at once and its summary, a Conv2D/MaxPooling2D/
GlobalMaxPooling2D stack whose shapes the guide prints, feature extraction
through ``layer.output`` and ``get_layer``, and transfer learning with
frozen layers on CIFAR-10."""
import numpy as np
import pytest

import pyresnet as keras
from pyresnet import layers, ops


def test_a_stack_of_layers(rng):
    model = keras.Sequential([
        layers.Dense(2, activation="relu", name="layer1"),
        layers.Dense(3, activation="relu", name="layer2"),
        layers.Dense(4, name="layer3"),
    ])
    x = ops.ones((3, 3))
    y = model(x)
    assert y.shape == (3, 4)
    # ... the same as calling the layers in turn
    layer1, layer2, layer3 = model.layers
    np.testing.assert_array_equal(np.asarray(layer3(layer2(layer1(x)))), np.asarray(y))
    assert [layer.name for layer in model.layers] == ["layer1", "layer2", "layer3"]

    model = keras.Sequential(name="my_sequential")
    model.add(layers.Dense(2, activation="relu", name="layer1"))
    model.add(layers.Dense(3, activation="relu", name="layer2"))
    model.add(layers.Dense(4, name="layer3"))
    assert model.name == "my_sequential" and len(model.layers) == 3
    model.pop()
    assert len(model.layers) == 2


def test_weights_exist_after_the_first_call():
    layer = layers.Dense(3)
    assert layer.weights == []  # no weights before the layer sees its input
    layer(ops.ones((1, 4)))
    assert [tuple(w.shape) for w in layer.weights] == [(4, 3), (3,)]

    model = keras.Sequential([layers.Dense(2, activation="relu"),
                              layers.Dense(3, activation="relu"), layers.Dense(4)])
    assert model.weights == []
    with pytest.raises(ValueError, match="not been built"):
        model.summary()  # "you can't do this" before the model is built
    model(np.ones((1, 4), "float32"))
    assert len(model.weights) == 6


def test_input_builds_at_once():
    model = keras.Sequential()
    model.add(keras.Input(shape=(4,)))
    model.add(layers.Dense(2, activation="relu"))
    lines = []
    model.summary(print_fn=lines.append)
    assert "(None, 2)" in lines[0] and "Total params: 10" in lines[0]
    assert len(model.layers) == 1  # the Input is not a layer of the model
    legacy = keras.Sequential([layers.Dense(2, activation="relu", input_shape=(4,))])
    assert len(legacy.weights) == 2


def test_conv_stack_shapes_as_printed():
    model = keras.Sequential()
    model.add(keras.Input(shape=(250, 250, 3)))  # 250x250 RGB images
    model.add(layers.Conv2D(32, 5, strides=2, activation="relu"))
    model.add(layers.Conv2D(32, 3, activation="relu"))
    model.add(layers.MaxPooling2D(3))
    assert model.outputs[0].shape == (None, 40, 40, 32)  # "(40, 40, 32)", as the guide prints
    model.add(layers.Conv2D(32, 3, activation="relu"))
    model.add(layers.Conv2D(32, 3, activation="relu"))
    model.add(layers.MaxPooling2D(3))
    model.add(layers.Conv2D(32, 3, activation="relu"))
    model.add(layers.Conv2D(32, 3, activation="relu"))
    model.add(layers.MaxPooling2D(2))
    assert model.outputs[0].shape == (None, 4, 4, 32)
    model.add(layers.GlobalMaxPooling2D())
    model.add(layers.Dense(10))
    assert model.outputs[0].shape == (None, 10)


def test_feature_extraction():
    initial_model = keras.Sequential([
        keras.Input(shape=(64, 64, 3)),
        layers.Conv2D(8, 3, strides=2, activation="relu"),
        layers.Conv2D(8, 3, activation="relu", name="my_intermediate_layer"),
        layers.Conv2D(8, 3, activation="relu"),
    ])
    feature_extractor = keras.Model(inputs=initial_model.inputs,
                                    outputs=[layer.output for layer in initial_model.layers])
    x = np.ones((1, 64, 64, 3), "float32")
    features = feature_extractor(x)
    assert [tuple(f.shape) for f in features] == [(1, 31, 31, 8), (1, 29, 29, 8), (1, 27, 27, 8)]

    feature_extractor = keras.Model(
        inputs=initial_model.inputs,
        outputs=initial_model.get_layer(name="my_intermediate_layer").output)
    np.testing.assert_array_equal(np.asarray(feature_extractor(x)), np.asarray(features[1]))


def test_transfer_learning_with_frozen_layers(cifar10):
    (x_train, y_train), _ = cifar10
    x, y = x_train[:128].astype("float32") / 255.0, y_train[:128]
    model = keras.Sequential([
        keras.Input(shape=(32, 32, 3)),
        layers.Conv2D(8, 3, strides=2, activation="relu"),
        layers.Conv2D(8, 3, activation="relu"),
        layers.GlobalMaxPooling2D(),
        layers.Dense(10),
    ])
    for layer in model.layers[:-1]:  # freeze all layers except the last one
        layer.trainable = False
    assert len(model.trainable_weights) == 2
    frozen = [np.array(w) for layer in model.layers[:-1] for w in layer.weights]
    last = [np.array(w) for w in model.layers[-1].weights]
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    after = [np.array(w) for layer in model.layers[:-1] for w in layer.weights]
    assert all(np.array_equal(a, b) for a, b in zip(frozen, after))  # only the head trains
    assert not any(np.array_equal(a, np.array(b)) for a, b in zip(last,
                                                                  model.layers[-1].weights))
