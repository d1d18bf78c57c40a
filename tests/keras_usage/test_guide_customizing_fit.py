"""The Keras 3 guide "Customizing what happens in fit()" (TensorFlow
flavour), walked through with pyresnet: ``train_step(self, data)`` with
``compute_loss`` and the compiled metrics, a lower-level step with its own
``Mean``/``MeanAbsoluteError`` metrics listed in a ``metrics`` property
(reset by ``fit`` at every epoch), ``sample_weight`` reaching the step,
``test_step`` for ``evaluate``, and the GAN trained by ``fit`` on a dataset
that yields only images, with ``keras.random.normal`` and a
``SeedGenerator``; also the earlier ``train_step(self, x, y)`` form."""
import numpy as np
import pytest

import pyresnet as keras
from pyresnet import layers, ops

from guide_models import gan_models


def update_metrics(metrics, loss, y, y_pred):
    """The guide's metric loop: the "loss" tracker takes ``loss``, the
    others ``(y, y_pred)``; returns every metric's result by name."""
    for metric in metrics:
        if metric.name == "loss":
            metric.update_state(loss)
        else:
            metric.update_state(y, y_pred)
    return {m.name: m.result() for m in metrics}


class CustomModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with keras.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        return update_metrics(self.metrics, loss, y, y_pred)


def regression_data(rng, n=256):
    x = rng.random((n, 32)).astype("float32")
    y = (x @ rng.standard_normal((32, 1)) * 0.2).astype("float32")
    return x, y


def test_a_first_simple_example(rng):
    inputs = keras.Input(shape=(32,))
    outputs = layers.Dense(1)(inputs)
    model = CustomModel(inputs, outputs)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    x, y = regression_data(rng)
    history = model.fit(x, y, epochs=3, batch_size=32, verbose=0)
    assert set(history.history) == {"loss", "mae"}  # compile_metrics' results, flattened
    assert history.history["loss"][2] < history.history["loss"][0]
    assert model.metrics_names == ["loss", "compile_metrics"]
    # the reported value is the running mean over the last epoch's batches
    mae = model.metrics[1].entries[0][2]
    assert float(mae.count) == 256 and history.history["mae"][-1] == pytest.approx(
        float(mae.result()))


class LowLevelModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data
        with keras.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.loss_fn(y, y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply_gradients(zip(gradients, trainable_vars))
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    @property
    def metrics(self):
        # listed here, so that fit() and evaluate() reset them
        return [self.loss_tracker, self.mae_metric]


def test_going_lower_level(rng):
    inputs = keras.Input(shape=(32,))
    model = LowLevelModel(inputs, layers.Dense(1)(inputs))
    model.compile(optimizer="adam")  # no loss, no metrics
    x, y = regression_data(rng)
    history = model.fit(x, y, epochs=5, batch_size=32, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    # reset at every epoch: the trackers hold the last epoch's 8 batches only
    assert float(model.loss_tracker.count) == 8 and float(model.mae_metric.count) == 256
    assert history.history["mae"][-1] == pytest.approx(float(model.mae_metric.result()))


class WeightedModel(keras.Model):
    seen_structure = []

    def train_step(self, data):
        if len(data) == 3:
            x, y, sample_weight = data
        else:
            (x, y), sample_weight = data, None
        WeightedModel.seen_structure.append(len(data))  # (runs while tracing)
        with keras.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred, sample_weight=sample_weight)
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)
        return {m.name: m.result() for m in self.metrics}


def test_sample_weight_reaches_the_step(rng):
    inputs = keras.Input(shape=(32,))
    model = WeightedModel(inputs, layers.Dense(1)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    x, y = regression_data(rng)
    sw = rng.random((256, 1)).astype("float32")
    WeightedModel.seen_structure.clear()
    model.fit(x, y, sample_weight=sw, epochs=3, batch_size=32, verbose=0)
    assert WeightedModel.seen_structure == [3]  # traced once, on (x, y, sample_weight)
    # the weighted loss of a batch: sum(w * squared error) / batch size, as Keras
    loss = model.compute_loss(y=y[:32], y_pred=model(x[:32]), sample_weight=sw[:32])
    want = np.sum(sw[:32, 0] * (np.asarray(model(x[:32]))[:, 0] - y[:32, 0]) ** 2) / 32
    assert float(loss) == pytest.approx(want, rel=1e-5)


class EvalModel(keras.Model):
    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        return update_metrics(self.metrics, loss, y, y_pred)


def test_providing_your_own_evaluation_step(rng):
    inputs = keras.Input(shape=(32,))
    model = EvalModel(inputs, layers.Dense(1)(inputs))
    model.compile(loss="mse", metrics=["mae"])
    x, y = regression_data(rng)
    logs = model.evaluate(x, y, batch_size=256, verbose=0, return_dict=True)
    pred = model.predict(x, verbose=0)
    assert logs["loss"] == pytest.approx(np.mean((pred - y) ** 2), rel=1e-5)
    assert logs["mae"] == pytest.approx(np.mean(np.abs(pred - y)), rel=1e-5)


class LegacyModel(keras.Model):
    def train_step(self, x, y):  # the earlier pyresnet form: per-batch values, averaged by fit
        with keras.GradientTape() as tape:
            loss = keras.losses.mean_squared_error(y, self(x, training=True))
            loss = ops.mean(loss)
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        return {"loss": loss}


def test_the_earlier_x_y_form_still_works(rng):
    inputs = keras.Input(shape=(32,))
    model = LegacyModel(inputs, layers.Dense(1)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.05))
    x, y = regression_data(rng)
    history = model.fit(x, y, epochs=2, batch_size=32, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.seed_generator = keras.random.SeedGenerator(1337)

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real_images):
        if isinstance(real_images, tuple):
            real_images = real_images[0]
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        generated_images = self.generator(random_latent_vectors)
        combined_images = ops.concatenate([generated_images, real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)
        labels += 0.05 * keras.random.uniform(ops.shape(labels), seed=self.seed_generator)
        with keras.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))

        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        misleading_labels = ops.zeros((batch_size, 1))
        with keras.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


def test_gan_trained_by_fit_on_images_only(mnist_like):
    latent_dim = 16
    discriminator, generator = gan_models(latent_dim)
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
    gan.compile(d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
                g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
                loss_fn=keras.losses.BinaryCrossentropy(from_logits=True))
    all_digits = mnist_like[0][0][:256].reshape(-1, 28, 28, 1)
    dataset = keras.data.Dataset.from_tensor_slices(all_digits).shuffle(256, seed=0).batch(64)
    g_before = [np.array(w) for w in generator.weights]
    history = gan.fit(dataset, epochs=2, verbose=0)
    assert set(history.history) == {"d_loss", "g_loss"}
    assert all(np.isfinite(v) for values in history.history.values() for v in values)
    assert float(gan.d_loss_tracker.count) == 4  # reset at the start of the second epoch
    assert np.asarray(gan.seed_generator.state).tolist() == [1337, 24]  # 3 draws x 8 steps
    assert all(not np.array_equal(b, np.array(w)) for b, w in zip(g_before, generator.weights))
