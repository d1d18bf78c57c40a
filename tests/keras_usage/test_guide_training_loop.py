"""The Keras 3 guide "Writing a training loop from scratch" (TensorFlow
flavour, with ``pyresnet.GradientTape`` and ``pyresnet.compile`` for
``tf.GradientTape`` and ``tf.function``), walked through with pyresnet: an
end-to-end loop over a dataset, stateful metrics (``update_state`` /
``result`` / ``reset_state``) for training and validation, the compiled
step, ``model.losses`` in the loop, and the GAN of the guide's last section
(``keras.random.normal`` with a ``SeedGenerator``, LeakyReLU,
GlobalMaxPooling2D, Conv2DTranspose), on MNIST-shaped CIFAR-10 crops."""
import numpy as np
import pytest

import pyresnet as keras
from pyresnet import layers, ops

from guide_models import gan_models


def get_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x1 = layers.Dense(64, activation="relu")(inputs)
    x2 = layers.Dense(64, activation="relu")(x1)
    outputs = layers.Dense(10, name="predictions")(x2)
    return keras.Model(inputs=inputs, outputs=outputs)


def datasets(mnist_like, batch_size=64):
    (x_train, y_train), (x_test, y_test) = mnist_like
    x_train = x_train.reshape(-1, 784).astype("float32")
    x_test = x_test.reshape(-1, 784).astype("float32")
    x_val, y_val = x_train[-500:], y_train[-500:]
    x_train, y_train = x_train[:-500], y_train[:-500]
    train_dataset = keras.data.Dataset.from_tensor_slices((x_train, y_train))
    train_dataset = train_dataset.shuffle(buffer_size=1024, seed=0).batch(batch_size)
    val_dataset = keras.data.Dataset.from_tensor_slices((x_val, y_val)).batch(batch_size)
    return train_dataset, val_dataset, (x_val, y_val)


def training_setup(mnist_like):
    """What the guide's loops start from: the model, SGD with momentum, the
    loss, the train and validation accuracy metrics, then ``datasets``."""
    model = get_model()
    optimizer = keras.optimizers.SGD(learning_rate=1e-2, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    metrics = (keras.metrics.SparseCategoricalAccuracy(), keras.metrics.SparseCategoricalAccuracy())
    return (model, optimizer, loss_fn, *metrics, *datasets(mnist_like))


def sgd_step(model, optimizer, loss_fn, x, y):
    """The guide's training step (eager, or traced inside ``keras.compile``):
    the loss under a tape, its gradients applied; returns the loss and the
    logits."""
    with keras.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss_value, logits


def test_end_to_end_loop_with_metrics(mnist_like):
    (model, optimizer, loss_fn, train_acc_metric, val_acc_metric, train_dataset, val_dataset,
     (x_val, y_val)) = training_setup(mnist_like)

    epoch_losses = []
    for epoch in range(2):
        seen_correct, seen, losses = 0, 0, []
        for step, (x_batch_train, y_batch_train) in enumerate(train_dataset):
            loss_value, logits = sgd_step(model, optimizer, loss_fn, x_batch_train, y_batch_train)
            train_acc_metric.update_state(y_batch_train, logits)
            seen_correct += int(np.sum(np.asarray(logits).argmax(1) == np.asarray(y_batch_train)))
            seen += len(np.asarray(y_batch_train))
            losses.append(float(loss_value))
        train_acc = float(train_acc_metric.result())
        assert train_acc == pytest.approx(seen_correct / seen, abs=1e-6)  # the epoch's accuracy
        train_acc_metric.reset_state()
        assert float(train_acc_metric.result()) == 0.0
        epoch_losses.append(np.mean(losses))

        for x_batch_val, y_batch_val in val_dataset:
            val_acc_metric.update_state(y_batch_val, model(x_batch_val, training=False))
        val_acc = float(val_acc_metric.result())
        val_acc_metric.reset_state()
        want = np.mean(model.predict(x_val, verbose=0).argmax(1) == y_val)
        assert val_acc == pytest.approx(want, abs=1e-6)
    assert epoch_losses[1] < epoch_losses[0]


def test_compiled_steps(mnist_like):
    (model, optimizer, loss_fn, train_acc_metric, val_acc_metric, train_dataset, val_dataset,
     (x_val, y_val)) = training_setup(mnist_like)

    @keras.compile
    def train_step(x, y):
        loss_value, logits = sgd_step(model, optimizer, loss_fn, x, y)
        train_acc_metric.update_state(y, logits)
        return loss_value

    @keras.compile
    def test_step(x, y):
        val_logits = model(x, training=False)
        val_acc_metric.update_state(y, val_logits)

    for x_batch_train, y_batch_train in train_dataset:
        train_step(x_batch_train, y_batch_train)
    assert 0.0 < float(train_acc_metric.result()) <= 1.0
    assert float(train_acc_metric.count) == 1500  # every sample counted once, in the graph
    for x_batch_val, y_batch_val in val_dataset:
        test_step(x_batch_val, y_batch_val)
    want = np.mean(model.predict(x_val, verbose=0).argmax(1) == y_val)
    assert float(val_acc_metric.result()) == pytest.approx(want, abs=1e-6)
    assert train_step.tracing_count <= 2 and test_step.tracing_count <= 2  # last batch smaller


class ActivityRegularizationLayer(layers.Layer):
    def call(self, inputs):
        self.add_loss(1e-2 * ops.sum(inputs))
        return inputs


def test_low_level_handling_of_losses(mnist_like, rng):
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu")(inputs)
    x = ActivityRegularizationLayer()(x)  # the layer's loss joins model.losses
    x = layers.Dense(64, activation="relu")(x)
    model = keras.Model(inputs=inputs, outputs=layers.Dense(10, name="predictions")(x))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.SGD(learning_rate=1e-3)
    (x_train, y_train), _ = mnist_like
    xb, yb = x_train[:32].reshape(32, 784).astype("float32"), y_train[:32]

    @keras.compile
    def train_step(x, y):
        with keras.GradientTape() as tape:
            logits = model(x, training=True)
            loss_value = loss_fn(y, logits)
            loss_value += sum(model.losses)  # add any extra losses created in the forward pass
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        return loss_value

    ce = float(loss_fn(yb, model(xb)))
    activations = np.asarray(model.layers[1](xb))
    assert float(train_step(xb, yb)) == pytest.approx(ce + 1e-2 * activations.sum(), rel=1e-4)


def test_gan_training_loop(mnist_like):
    latent_dim = 16
    discriminator, generator = gan_models(latent_dim)
    assert generator.outputs[0].shape == (None, 28, 28, 1)  # 7 -> 14 -> 28
    d_optimizer = keras.optimizers.Adam(learning_rate=0.0003)
    g_optimizer = keras.optimizers.Adam(learning_rate=0.0003)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
    seed_generator = keras.random.SeedGenerator(1337)

    @keras.compile
    def train_step(real_images):
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal((batch_size, latent_dim), seed=seed_generator)
        generated_images = generator(random_latent_vectors)
        combined_images = ops.concatenate([generated_images, real_images], axis=0)
        # labels: 1 for the fake images, 0 for the real ones, plus a little noise
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)
        labels += 0.05 * keras.random.uniform(ops.shape(labels), seed=seed_generator)
        with keras.GradientTape() as tape:
            predictions = discriminator(combined_images)
            d_loss = loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, discriminator.trainable_weights)
        d_optimizer.apply_gradients(zip(grads, discriminator.trainable_weights))

        random_latent_vectors = keras.random.normal((batch_size, latent_dim), seed=seed_generator)
        misleading_labels = ops.zeros((batch_size, 1))  # "all real images"
        with keras.GradientTape() as tape:
            predictions = discriminator(generator(random_latent_vectors))
            g_loss = loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, generator.trainable_weights)
        g_optimizer.apply(grads, generator.trainable_weights)
        return d_loss, g_loss, generated_images

    images = mnist_like[0][0][:256, :, :, None]
    d_before = [np.array(w) for w in discriminator.weights]
    g_before = [np.array(w) for w in generator.weights]
    for step in range(4):
        d_loss, g_loss, generated = train_step(images[step * 64:(step + 1) * 64])
    assert generated.shape == (64, 28, 28, 1)
    assert np.isfinite(float(d_loss)) and np.isfinite(float(g_loss))
    assert train_step.tracing_count == 1
    assert np.asarray(seed_generator.state).tolist() == [1337, 12]  # three draws per step
    for before, model in ((d_before, discriminator), (g_before, generator)):
        assert all(not np.array_equal(b, np.array(w)) for b, w in zip(before, model.weights))
