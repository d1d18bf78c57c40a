"""The Keras 3 guide "Save, serialize, and export models", walked through
with pyresnet (the guide's code, only the import changed): ``model.save``
and ``load_model`` giving the same predictions; custom objects (a layer and
an activation function) registered with ``register_keras_serializable``,
``get_custom_objects().clear()``, ``custom_objects=`` and
``custom_object_scope``; layer and model configs (``get_config``/
``from_config``, ``to_json``/``model_from_json``, ``layers.serialize``/
``deserialize``, a custom layer whose config holds a layer), in-memory
cloning with ``clone_model``; weights only (``get_weights``/``set_weights``
between layers and between functional, subclassed and stateless-layer
models, ``save_weights``/``load_weights``, transfer of a pretrained part).

Left out: the guide's ``get_build_config``/``build_from_config`` and
``get_compile_config`` overrides (a ``build`` with extra arguments) and the
``export`` (TF SavedModel) section."""
import numpy as np
import pytest

import pyresnet as keras
from pyresnet import ops


@pytest.fixture
def clean_registry():
    """The guide clears the global custom objects; restore them afterwards
    for the other tests of the session."""
    before = dict(keras.saving.get_custom_objects())
    yield
    keras.saving.get_custom_objects().clear()
    keras.saving.get_custom_objects().update(before)


def get_model():
    # Create a simple model.
    inputs = keras.Input(shape=(32,))
    outputs = keras.layers.Dense(1)(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(), loss="mean_squared_error")
    return model


def test_saving_and_loading_a_whole_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = get_model()

    # Train the model.
    test_input = np.random.random((128, 32))
    test_target = np.random.random((128, 1))
    model.fit(test_input, test_target, verbose=0)

    # Calling `save('my_model.keras')` creates a zip archive `my_model.keras`.
    model.save("my_model.keras")

    # It can be used to reconstruct the model identically.
    reconstructed_model = keras.models.load_model("my_model.keras")

    # Let's check:
    np.testing.assert_allclose(
        model.predict(test_input, verbose=0), reconstructed_model.predict(test_input, verbose=0)
    )
    # "the optimizer state is restored": training continues from the same point
    model.fit(test_input, test_target, verbose=0, shuffle=False)
    reconstructed_model.fit(test_input, test_target, verbose=0, shuffle=False)
    for a, b in zip(model.get_weights(), reconstructed_model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def define_custom_objects():
    """The guide's registered ``CustomLayer`` and ``custom_fn``."""

    # Upon registration, you can optionally specify a package or a name.
    # If left blank, the package defaults to `Custom` and the name defaults to
    # the class name.
    @keras.saving.register_keras_serializable(package="MyLayers")
    class CustomLayer(keras.layers.Layer):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def call(self, x):
            return x * self.factor

        def get_config(self):
            return {"factor": self.factor}

    @keras.saving.register_keras_serializable(package="my_package", name="custom_fn")
    def custom_fn(x):
        return x**2

    return CustomLayer, custom_fn


def test_custom_objects(tmp_path, monkeypatch, clean_registry):
    monkeypatch.chdir(tmp_path)
    # Clear all previously registered custom objects
    keras.saving.get_custom_objects().clear()
    CustomLayer, custom_fn = define_custom_objects()
    assert set(keras.saving.get_custom_objects()) == {"MyLayers>CustomLayer",
                                                     "my_package>custom_fn"}

    # Create the model.
    def get_model():
        inputs = keras.Input(shape=(4,))
        mid = CustomLayer(0.5)(inputs)
        outputs = keras.layers.Dense(1, activation=custom_fn)(mid)
        model = keras.Model(inputs, outputs)
        model.compile(optimizer="rmsprop", loss="mean_squared_error")
        return model

    # Train the model.
    def train_model(model):
        input = np.random.random((4, 4))
        target = np.random.random((4, 1))
        model.fit(input, target, verbose=0)
        return model

    test_input = np.random.random((4, 4))

    model = get_model()
    model = train_model(model)
    model.save("custom_model.keras")

    # Now, we can simply load without worrying about our custom objects.
    reconstructed_model = keras.models.load_model("custom_model.keras")

    # Let's check:
    np.testing.assert_allclose(
        model.predict(test_input, verbose=0), reconstructed_model.predict(test_input, verbose=0)
    )
    assert reconstructed_model.layers[2].activation is custom_fn
    # the activation really is applied: (0.5 x W + b) ** 2
    dense = model.layers[2]
    expected = (0.5 * test_input @ np.asarray(dense.kernel) + np.asarray(dense.bias)) ** 2
    np.testing.assert_allclose(model.predict(test_input, verbose=0), expected, rtol=1e-5)

    # Passing custom objects to load_model() (here unregistered: the registry cleared)
    keras.saving.get_custom_objects().clear()
    with pytest.raises(ValueError, match="CustomLayer"):
        keras.models.load_model("custom_model.keras")
    reconstructed_model = keras.models.load_model(
        "custom_model.keras",
        custom_objects={"CustomLayer": CustomLayer, "custom_fn": custom_fn},
    )
    np.testing.assert_allclose(model.predict(test_input, verbose=0),
                               reconstructed_model.predict(test_input, verbose=0))

    # Using a custom object scope
    custom_objects = {"CustomLayer": CustomLayer, "custom_fn": custom_fn}
    with keras.saving.custom_object_scope(custom_objects):
        reconstructed_model = keras.models.load_model("custom_model.keras")
    np.testing.assert_allclose(model.predict(test_input, verbose=0),
                               reconstructed_model.predict(test_input, verbose=0))


def test_layer_and_model_configs():
    # Layer example
    layer = keras.layers.Dense(3, activation="relu")
    layer_config = layer.get_config()
    new_layer = keras.layers.Dense.from_config(layer_config)
    assert new_layer.units == 3 and new_layer.activation is keras.activations.relu

    # Sequential model example
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1)])
    config = model.get_config()
    new_model = keras.Sequential.from_config(config)
    assert [type(x).__name__ for x in new_model.layers] == ["Dense"]
    assert new_model.layers[0].kernel.shape == (32, 1)

    # Functional model example
    inputs = keras.Input((32,))
    outputs = keras.layers.Dense(1)(inputs)
    model = keras.Model(inputs, outputs)
    config = model.get_config()
    new_model = keras.Model.from_config(config)
    assert new_model.output_shape == (None, 1)

    # to_json() and keras.models.model_from_json()
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(1)])
    json_config = model.to_json()
    new_model = keras.models.model_from_json(json_config)
    assert new_model.layers[0].kernel.shape == (32, 1)


def test_arbitrary_object_serialization(clean_registry):
    @keras.saving.register_keras_serializable(package="MyLayers", name="KernelMult")
    class MyDense(keras.layers.Layer):
        def __init__(
            self,
            units,
            *,
            kernel_regularizer=None,
            kernel_initializer=None,
            nested_model=None,
            **kwargs
        ):
            super().__init__(**kwargs)
            self.hidden_units = units
            self.kernel_regularizer = kernel_regularizer
            self.kernel_initializer = kernel_initializer
            self.nested_model = nested_model

        def get_config(self):
            config = super().get_config()
            # Update the config with the custom layer's parameters
            config.update(
                {
                    "units": self.hidden_units,
                    "kernel_regularizer": self.kernel_regularizer,
                    "kernel_initializer": self.kernel_initializer,
                    "nested_model": self.nested_model,
                }
            )
            return config

        def build(self, input_shape):
            input_units = input_shape[-1]
            self.kernel = self.add_weight(
                name="kernel",
                shape=(input_units, self.hidden_units),
                regularizer=self.kernel_regularizer,
                initializer=self.kernel_initializer,
            )

        def call(self, inputs):
            return ops.matmul(inputs, self.kernel)

    layer = MyDense(units=16, kernel_regularizer="l1", kernel_initializer="ones")
    layer3 = MyDense(units=64, nested_model=layer)

    config = keras.layers.serialize(layer3)
    assert config["registered_name"] == "MyLayers>KernelMult"
    assert config["config"]["nested_model"]["registered_name"] == "MyLayers>KernelMult"

    new_layer = keras.layers.deserialize(config)
    assert isinstance(new_layer, MyDense) and new_layer.hidden_units == 64
    nested = new_layer.nested_model
    assert isinstance(nested, MyDense) and nested is not layer and nested.hidden_units == 16
    y = nested(np.ones((2, 3), "float32"))  # "ones" kernel: every output is the input sum
    np.testing.assert_array_equal(np.asarray(y), np.full((2, 16), 3.0))
    assert float(nested.losses[0]) == pytest.approx(0.01 * 3 * 16)  # l1 = 0.01 * sum|w|


def test_a_custom_layer_whose_config_holds_a_layer(tmp_path, clean_registry):
    @keras.saving.register_keras_serializable(package="ComplexModels")
    class CustomLayer(keras.layers.Layer):
        def __init__(self, sublayer, **kwargs):
            super().__init__(**kwargs)
            self.sublayer = sublayer

        def call(self, x):
            return self.sublayer(x)

        def get_config(self):
            base_config = super().get_config()
            config = {
                "sublayer": keras.saving.serialize_keras_object(self.sublayer),
            }
            return {**base_config, **config}

        @classmethod
        def from_config(cls, config):
            sublayer_config = config.pop("sublayer")
            sublayer = keras.saving.deserialize_keras_object(sublayer_config)
            return cls(sublayer, **config)

    inputs = keras.Input((4,))
    outputs = CustomLayer(keras.layers.Dense(2, activation="tanh"))(inputs)
    model = keras.Model(inputs, outputs)
    model.save(tmp_path / "nested.keras")
    loaded = keras.models.load_model(tmp_path / "nested.keras")
    x = np.random.default_rng(0).random((3, 4)).astype("float32")
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)
    assert isinstance(loaded.layers[1].sublayer, keras.layers.Dense)


def test_in_memory_model_cloning():
    inputs = keras.Input((32,))
    model = keras.Model(inputs, keras.layers.Dense(4, activation="relu")(inputs))
    new_model = keras.models.clone_model(model)
    # the same architecture, new weights (not the compilation or the weight values)
    assert [type(x) for x in new_model.layers] == [type(x) for x in model.layers]
    assert new_model.layers[1] is not model.layers[1]
    assert not np.array_equal(new_model.get_weights()[0], model.get_weights()[0])
    new_model.set_weights(model.get_weights())
    x = np.random.default_rng(1).random((5, 32)).astype("float32")
    np.testing.assert_array_equal(new_model.predict(x, verbose=0), model.predict(x, verbose=0))


def three_layer_mlp(dropout=False):
    """The guide's functional "3_layer_mlp" (784 -> 64 -> 64 -> 10), with a
    Dropout(0.5), which has no weights, before the output layer if
    ``dropout``."""
    inputs = keras.Input(shape=(784,), name="digits")
    x = keras.layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = keras.layers.Dense(64, activation="relu", name="dense_2")(x)
    if dropout:
        x = keras.layers.Dropout(0.5)(x)
    outputs = keras.layers.Dense(10, name="predictions")(x)
    return keras.Model(inputs=inputs, outputs=outputs, name="3_layer_mlp")


def create_layer():
    layer = keras.layers.Dense(64, activation="relu", name="dense_2")
    layer.build((None, 784))
    return layer


def test_transfer_weights_between_layers_and_models():
    layer_1 = create_layer()
    layer_2 = create_layer()

    # Copy weights from layer 1 to layer 2
    layer_2.set_weights(layer_1.get_weights())
    for a, b in zip(layer_1.get_weights(), layer_2.get_weights()):
        np.testing.assert_array_equal(a, b)

    # Create a simple functional model
    functional_model = three_layer_mlp()

    # Define a subclassed model with the same architecture
    class SubclassedModel(keras.Model):
        def __init__(self, output_dim, name=None):
            super().__init__(name=name)
            self.output_dim = output_dim
            self.dense_1 = keras.layers.Dense(64, activation="relu", name="dense_1")
            self.dense_2 = keras.layers.Dense(64, activation="relu", name="dense_2")
            self.dense_3 = keras.layers.Dense(output_dim, name="predictions")

        def call(self, inputs):
            x = self.dense_1(inputs)
            x = self.dense_2(x)
            x = self.dense_3(x)
            return x

        def get_config(self):
            return {"output_dim": self.output_dim, "name": self.name}

    subclassed_model = SubclassedModel(10)
    # Call the subclassed model once to create the weights.
    subclassed_model(np.ones((1, 784)))

    # Copy weights from functional_model to subclassed_model.
    subclassed_model.set_weights(functional_model.get_weights())

    assert len(functional_model.weights) == len(subclassed_model.weights)
    for a, b in zip(functional_model.weights, subclassed_model.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy())

    # The case of stateless layers
    # Add a dropout layer, which does not contain any weights.
    functional_model_with_dropout = three_layer_mlp(dropout=True)

    functional_model_with_dropout.set_weights(functional_model.get_weights())
    probe = np.random.default_rng(2).random((2, 784)).astype("float32")
    np.testing.assert_allclose(functional_model_with_dropout.predict(probe, verbose=0),
                               functional_model.predict(probe, verbose=0), rtol=1e-6)


def test_weights_only_saving_and_transfer_learning(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Runnable example
    sequential_model = keras.Sequential(
        [
            keras.Input(shape=(784,), name="digits"),
            keras.layers.Dense(64, activation="relu", name="dense_1"),
            keras.layers.Dense(64, activation="relu", name="dense_2"),
            keras.layers.Dense(10, name="predictions"),
        ]
    )
    saved = sequential_model.get_weights()
    sequential_model.save_weights("my_model.weights.h5")
    for w in sequential_model.weights:
        w.assign(np.zeros(w.shape, "float32"))
    sequential_model.load_weights("my_model.weights.h5")
    for a, b in zip(saved, sequential_model.get_weights()):
        np.testing.assert_array_equal(a, b)

    functional_model = three_layer_mlp()

    # Extract a portion of the functional model defined in the Setup section.
    # The following lines produce a new model that excludes the final output
    # layer of the functional model.
    pretrained = keras.Model(
        functional_model.inputs, functional_model.layers[-1].input, name="pretrained_model"
    )
    # Randomly assign "trained" weights.
    for w in pretrained.weights:
        w.assign(np.random.random(w.shape))
    trained = pretrained.get_weights()
    pretrained.save_weights("pretrained_model.weights.h5")
    pretrained.load_weights("pretrained_model.weights.h5")

    # Create a new model by extracting layers from the original model:
    extracted_layers = pretrained.layers[:-1]
    extracted_layers.append(keras.layers.Dense(5, name="dense_3"))
    model = keras.Sequential(extracted_layers)
    assert [x.name for x in model.layers] == ["dense_1", "dense_3"]
    assert model.output_shape == (None, 5)
    np.testing.assert_array_equal(model.get_weights()[0], trained[0])
