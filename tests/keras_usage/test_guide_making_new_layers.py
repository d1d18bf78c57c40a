"""The Keras 3 guide "Making new layers and models via subclassing", walked
through with pyresnet: a ``Linear`` layer with ``add_weight`` and the
``"random_normal"`` initializer, non-trainable weights, deferred ``build``,
nested layers, ``add_loss``/``losses`` (reset at every outermost call),
``kernel_regularizer``, losses in a GradientTape loop and in ``fit``
(with and without a compiled loss), ``training=`` with a
``SeedGenerator``-driven dropout, ``get_config``/``from_config``, and the
end-to-end variational autoencoder (``keras.random.normal`` in a sampling
layer, the KL term through ``add_loss``) on MNIST-shaped CIFAR-10 crops."""
import numpy as np
import pytest

import pyresnet as keras
from pyresnet import layers, ops


class Linear(layers.Layer):
    def __init__(self, units=32, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], self.units),
                                 initializer="random_normal", trainable=True)
        self.b = self.add_weight(shape=(self.units,), initializer="zeros", trainable=True)

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def test_linear_layer_weights_and_deferred_build():
    x = ops.ones((2, 2))
    linear_layer = Linear(4)
    assert linear_layer.weights == []  # created lazily, by build
    y = linear_layer(x)
    assert y.shape == (2, 4)
    assert linear_layer.weights == [linear_layer.w, linear_layer.b]
    np.testing.assert_allclose(np.asarray(y), np.asarray(linear_layer.w).sum(0)[None].repeat(2, 0),
                               rtol=1e-6)
    w = np.asarray(linear_layer.w)
    assert np.all(np.abs(w) < 0.5)  # random_normal: stddev 0.05

    config = linear_layer.get_config()
    new_layer = Linear.from_config(config)
    assert new_layer.units == 4 and not new_layer.built


class ComputeSum(layers.Layer):
    def __init__(self, input_dim):
        super().__init__()
        self.total = self.add_weight(initializer="zeros", shape=(input_dim,), trainable=False)

    def call(self, inputs):
        self.total.assign_add(ops.sum(inputs, axis=0))
        return self.total


def test_non_trainable_weight():
    x = np.ones((2, 2), "float32")
    my_sum = ComputeSum(2)
    np.testing.assert_array_equal(np.asarray(my_sum(x)), [2.0, 2.0])
    np.testing.assert_array_equal(np.asarray(my_sum(x)), [4.0, 4.0])
    assert len(my_sum.weights) == 1 and len(my_sum.non_trainable_weights) == 1
    assert my_sum.trainable_weights == []


class MLPBlock(layers.Layer):
    def __init__(self):
        super().__init__()
        self.linear_1 = Linear(32)
        self.linear_2 = Linear(32)
        self.linear_3 = Linear(1)

    def call(self, inputs):
        x = ops.relu(self.linear_1(inputs))
        x = ops.relu(self.linear_2(x))
        return self.linear_3(x)


def test_nested_layers():
    mlp = MLPBlock()
    y = mlp(np.ones((3, 64), "float32"))  # the first call creates the weights
    assert y.shape == (3, 1)
    assert len(mlp.weights) == 6 and len(mlp.trainable_weights) == 6


class ActivityRegularizationLayer(layers.Layer):
    def __init__(self, rate=1e-2):
        super().__init__()
        self.rate = rate

    def call(self, inputs):
        self.add_loss(self.rate * ops.mean(inputs))
        return inputs


class OuterLayer(layers.Layer):
    def __init__(self):
        super().__init__()
        self.activity_reg = ActivityRegularizationLayer(1e-2)

    def call(self, inputs):
        return self.activity_reg(inputs)


class OuterLayerWithKernelRegularizer(layers.Layer):
    def __init__(self):
        super().__init__()
        self.dense = layers.Dense(32, kernel_regularizer=keras.regularizers.l2(1e-3))

    def call(self, inputs):
        return self.dense(inputs)


def test_add_loss_and_losses():
    layer = OuterLayer()
    assert len(layer.losses) == 0  # no losses yet: never called
    layer(ops.zeros((1, 1)))
    assert len(layer.losses) == 1
    layer(ops.full((1, 1), 3.0))
    assert len(layer.losses) == 1  # reset at the start of every outermost call
    assert float(layer.losses[0]) == pytest.approx(0.03)

    layer = OuterLayerWithKernelRegularizer()
    layer(np.zeros((1, 1), "float32"))
    (penalty,) = layer.losses  # 1e-3 * sum(kernel ** 2)
    kernel = np.asarray(layer.dense.kernel, np.float64)
    assert float(penalty) == pytest.approx(1e-3 * np.sum(kernel ** 2), rel=1e-5)


def mlp_with_activity_regularization():
    inputs = keras.Input(shape=(3,))
    x = ActivityRegularizationLayer()(inputs)
    return keras.Model(inputs, layers.Dense(1)(x))


def test_losses_in_a_training_loop_and_in_fit(rng):
    model = mlp_with_activity_regularization()
    optimizer = keras.optimizers.SGD(1e-2)
    loss_fn = keras.losses.MeanSquaredError()
    x = rng.random((8, 3)).astype("float32")
    y = rng.random((8, 1)).astype("float32")
    with keras.GradientTape() as tape:
        logits = model(x)
        loss_value = loss_fn(y, logits)
        loss_value += sum(model.losses)  # the add_loss terms of this forward pass
    pred = np.asarray(logits)
    assert float(loss_value) == pytest.approx(np.mean((pred - y) ** 2) + 1e-2 * x.mean(),
                                              rel=1e-5)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))

    # fit() adds them to the compiled loss ...
    model.compile(optimizer="adam", loss="mse")
    logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    pred = model.predict(x, verbose=0)
    assert logs["loss"] == pytest.approx(np.mean((pred - y) ** 2) + 1e-2 * x.mean(), rel=1e-5)
    model.fit(x, y, verbose=0)
    # ... or they are the whole loss when compile() has none
    model.compile(optimizer="adam")
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert history.history["loss"][0] == pytest.approx(1e-2 * x.mean(), rel=1e-5)
    assert model.losses == []  # the compiled step's terms are not kept after its trace
    model(x)
    assert float(model.losses[0]) == pytest.approx(1e-2 * x.mean(), rel=1e-5)

    model = keras.Sequential([keras.Input((3,)), layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(1e-2))
    with pytest.raises(ValueError, match="no loss to compute"):
        model.fit(x, y, verbose=0)


class CustomDropout(layers.Layer):
    def __init__(self, rate, **kwargs):
        super().__init__(**kwargs)
        self.rate = rate
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs, training=None):
        if training:
            return keras.random.dropout(inputs, rate=self.rate, seed=self.seed_generator)
        return inputs


def test_training_argument():
    layer = CustomDropout(0.5)
    x = np.ones((200, 50), "float32")
    np.testing.assert_array_equal(np.asarray(layer(x)), x)  # inference: identity
    y = np.asarray(layer(x, training=True))
    assert set(np.unique(y)) == {0.0, 2.0}  # dropped, or scaled by 1 / (1 - rate)
    assert abs((y == 0).mean() - 0.5) < 0.03
    assert not np.array_equal(np.asarray(layer(x, training=True)), y)  # new draws per call


class Sampling(layers.Layer):
    """z = z_mean + exp(0.5 * z_log_var) * epsilon."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class Encoder(layers.Layer):
    def __init__(self, latent_dim=8, intermediate_dim=32, name="encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_mean = layers.Dense(latent_dim)
        self.dense_log_var = layers.Dense(latent_dim)
        self.sampling = Sampling()

    def call(self, inputs):
        x = self.dense_proj(inputs)
        z_mean = self.dense_mean(x)
        z_log_var = self.dense_log_var(x)
        return z_mean, z_log_var, self.sampling((z_mean, z_log_var))


class Decoder(layers.Layer):
    def __init__(self, original_dim, intermediate_dim=32, name="decoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_output = layers.Dense(original_dim)

    def call(self, inputs):
        return self.dense_output(self.dense_proj(inputs))


class VariationalAutoEncoder(keras.Model):
    def __init__(self, original_dim, intermediate_dim=32, latent_dim=8,
                 name="autoencoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.original_dim = original_dim
        self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
        self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

    def call(self, inputs):
        z_mean, z_log_var, z = self.encoder(inputs)
        reconstructed = self.decoder(z)
        # the KL divergence regularization loss
        kl_loss = -0.5 * ops.mean(z_log_var - ops.square(z_mean) - ops.exp(z_log_var) + 1)
        self.add_loss(kl_loss)
        return reconstructed


def test_variational_autoencoder_end_to_end(mnist_like):
    original_dim = 784
    x_train = mnist_like[0][0][:512].reshape(512, 784).astype("float32")
    vae = VariationalAutoEncoder(original_dim, 32, 8)
    vae.compile(keras.optimizers.Adam(learning_rate=1e-3), loss=keras.losses.MeanSquaredError())
    history = vae.fit(x_train, x_train, epochs=3, batch_size=64, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0]
    vae(x_train[:4])
    assert len(vae.losses) == 1  # the KL term of the last call
    # sampling draws new noise on every call: two encodings of one batch differ
    z1 = np.asarray(vae.encoder(x_train[:4])[2])
    z2 = np.asarray(vae.encoder(x_train[:4])[2])
    assert not np.array_equal(z1, z2)
    state = np.asarray(vae.encoder.sampling.seed_generator.state)
    assert state[0] == 1337 and state[1] >= 3 * 8 + 2  # one draw per step and per call
