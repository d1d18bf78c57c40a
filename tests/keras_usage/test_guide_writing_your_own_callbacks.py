"""The Keras 3 guide "Writing your own callbacks", walked through with
pyresnet (the guide's code, only the import changed): a callback printing
the log keys of every hook in ``fit``/``evaluate``/``predict`` (Keras passes
``logs={}`` where it has none, and ``{"outputs": ...}`` to
``on_predict_batch_end``), the ``logs`` dict with ``"{:7.2f}"`` formats,
``self.model`` with early stopping at the minimum loss (``stop_training``,
restoring the best weights) and a learning-rate schedule set through
``model.optimizer.learning_rate``.  The data: MNIST-shaped CIFAR-10 crops
(flattened to 784 values in [0, 1]) with CIFAR-10's uint8 labels as the
regression targets (MNIST's labels are uint8 too), 1,000 samples as the
guide takes."""
import numpy as np
import pytest

import pyresnet as keras


def get_model():
    model = keras.Sequential()
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    return model


@pytest.fixture(scope="module")
def data(cifar10):
    """The guide's ``(x_train, y_train), (x_test, y_test)`` after its
    reshaping, scaling and ``[:1000]`` limits (uint8 labels, as MNIST's)."""
    (x_train, y_train), (x_test, y_test) = cifar10

    def grey(images):  # the centre 28x28 grey levels, as uint8 MNIST digits
        return images[:, 2:30, 2:30, :].mean(axis=-1).astype(np.uint8)

    x_train = grey(x_train[:1000]).reshape(-1, 784).astype("float32") / 255.0
    x_test = grey(x_test[:1000]).reshape(-1, 784).astype("float32") / 255.0
    y_train, y_test = y_train[:1000, 0], y_test[:1000, 0]
    assert y_train.dtype == np.uint8
    return (x_train, y_train), (x_test, y_test)


class CustomCallback(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        keys = list(logs.keys())
        print("Starting training; got log keys: {}".format(keys))

    def on_train_end(self, logs=None):
        keys = list(logs.keys())
        print("Stop training; got log keys: {}".format(keys))

    def on_epoch_begin(self, epoch, logs=None):
        keys = list(logs.keys())
        print("Start epoch {} of training; got log keys: {}".format(epoch, keys))

    def on_epoch_end(self, epoch, logs=None):
        keys = list(logs.keys())
        print("End epoch {} of training; got log keys: {}".format(epoch, keys))

    def on_test_begin(self, logs=None):
        keys = list(logs.keys())
        print("Start testing; got log keys: {}".format(keys))

    def on_test_end(self, logs=None):
        keys = list(logs.keys())
        print("Stop testing; got log keys: {}".format(keys))

    def on_predict_begin(self, logs=None):
        keys = list(logs.keys())
        print("Start predicting; got log keys: {}".format(keys))

    def on_predict_end(self, logs=None):
        keys = list(logs.keys())
        print("Stop predicting; got log keys: {}".format(keys))

    def on_train_batch_begin(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Training: start of batch {}; got log keys: {}".format(batch, keys))

    def on_train_batch_end(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Training: end of batch {}; got log keys: {}".format(batch, keys))

    def on_test_batch_begin(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Evaluating: start of batch {}; got log keys: {}".format(batch, keys))

    def on_test_batch_end(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Evaluating: end of batch {}; got log keys: {}".format(batch, keys))

    def on_predict_batch_begin(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Predicting: start of batch {}; got log keys: {}".format(batch, keys))

    def on_predict_batch_end(self, batch, logs=None):
        keys = list(logs.keys())
        print("...Predicting: end of batch {}; got log keys: {}".format(batch, keys))


def test_a_basic_example_prints_the_log_keys_of_every_hook(data, capsys):
    (x_train, y_train), (x_test, y_test) = data
    model = get_model()
    model.fit(
        x_train,
        y_train,
        batch_size=128,
        epochs=1,
        verbose=0,
        validation_split=0.5,
        callbacks=[CustomCallback()],
    )
    lines = capsys.readouterr().out.splitlines()
    metrics = "['loss', 'mean_absolute_error']"
    both = "['loss', 'mean_absolute_error', 'val_loss', 'val_mean_absolute_error']"
    # 500 training samples (floor(1000 * 0.5)): batches 0..3, then 500 validation ones
    assert lines[:4] == ["Starting training; got log keys: []",
                         "Start epoch 0 of training; got log keys: []",
                         "...Training: start of batch 0; got log keys: []",
                         f"...Training: end of batch 0; got log keys: {metrics}"]
    assert f"...Training: end of batch 3; got log keys: {metrics}" in lines
    assert "...Training: start of batch 4; got log keys: []" not in lines
    assert "Start testing; got log keys: []" in lines
    assert f"...Evaluating: end of batch 3; got log keys: {metrics}" in lines
    assert lines[-3:] == [f"Stop testing; got log keys: {metrics}",
                          f"End epoch 0 of training; got log keys: {both}",
                          f"Stop training; got log keys: {both}"]

    res = model.evaluate(x_test, y_test, batch_size=128, verbose=0,
                         callbacks=[CustomCallback()])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Start testing; got log keys: []"
    assert lines[-1] == f"Stop testing; got log keys: {metrics}"
    assert len(lines) == 2 + 2 * 8  # 1000 samples in 8 batches of 128

    res = model.predict(x_test, batch_size=128, callbacks=[CustomCallback()])
    lines = [line for line in capsys.readouterr().out.splitlines() if "log keys" in line]
    assert lines[0] == "Start predicting; got log keys: []"
    assert "...Predicting: end of batch 7; got log keys: ['outputs']" in lines
    assert lines[-1] == "Stop predicting; got log keys: []"
    assert res.shape == (1000, 1)


def test_the_predict_batch_logs_hold_the_outputs(data):
    (x_train, y_train), (x_test, y_test) = data
    model = get_model()
    model.fit(x_train, y_train, batch_size=128, epochs=1, verbose=0)
    seen = []

    class Outputs(keras.callbacks.Callback):
        def on_predict_batch_end(self, batch, logs=None):
            seen.append(np.asarray(logs["outputs"]))

    res = model.predict(x_test, batch_size=128, verbose=0, callbacks=[Outputs()])
    np.testing.assert_array_equal(np.concatenate(seen), res)


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        print(
            "Up to batch {}, the average loss is {:7.2f}.".format(batch, logs["loss"])
        )

    def on_test_batch_end(self, batch, logs=None):
        print(
            "Up to batch {}, the average loss is {:7.2f}.".format(batch, logs["loss"])
        )

    def on_epoch_end(self, epoch, logs=None):
        print(
            "The average loss for epoch {} is {:7.2f} "
            "and mean absolute error is {:7.2f}.".format(
                epoch, logs["loss"], logs["mean_absolute_error"]
            )
        )


def test_usage_of_logs_dict(data, capsys):
    (x_train, y_train), (x_test, y_test) = data
    model = get_model()
    history = model.fit(
        x_train,
        y_train,
        batch_size=128,
        epochs=2,
        verbose=0,
        callbacks=[LossAndErrorPrintingCallback()],
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 * (8 + 1)
    for epoch, line in ((0, lines[8]), (1, lines[17])):
        assert line == ("The average loss for epoch {} is {:7.2f} and mean absolute error is "
                        "{:7.2f}.".format(epoch, history.history["loss"][epoch],
                                          history.history["mean_absolute_error"][epoch]))
    res = model.evaluate(x_test, y_test, batch_size=128, verbose=0,
                         callbacks=[LossAndErrorPrintingCallback()])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "Up to batch 7, the average loss is {:7.2f}.".format(res[0])
    # the loss is the mean squared error against the uint8 labels
    pred = model.predict(x_test, verbose=0)[:, 0].astype(np.float64)
    assert res[0] == pytest.approx(np.mean((pred - y_test) ** 2), rel=1e-4)
    assert res[1] == pytest.approx(np.mean(np.abs(pred - y_test)), rel=1e-4)


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    """Stop training when the loss is at its min, i.e. the loss stops decreasing.

    Arguments:
        patience: Number of epochs to wait after min has been hit. After this
        number of no improvement, training stops.
    """

    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        # best_weights to store the weights at which the minimum loss occurs.
        self.best_weights = None

    def on_train_begin(self, logs=None):
        # The number of epoch it has waited when loss is no longer minimum.
        self.wait = 0
        # The epoch the training stops at.
        self.stopped_epoch = 0
        # Initialize the best as infinity.
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            # Record the best weights if current results is better (less).
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                print("Restoring model weights from the end of the best epoch.")
                self.model.set_weights(self.best_weights)

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")


def test_early_stopping_at_minimum_loss(data, capsys):
    (x_train, y_train), _ = data
    model = get_model()
    stopper = EarlyStoppingAtMinLoss()
    history = model.fit(
        x_train,
        y_train,
        batch_size=64,
        epochs=30,
        verbose=0,
        callbacks=[LossAndErrorPrintingCallback(), stopper],
    )
    losses = history.history["loss"]
    # it stops at the first epoch whose loss is not below the best so far
    first_rise = next(i for i in range(1, len(losses)) if losses[i] >= min(losses[:i]))
    assert len(losses) == first_rise + 1 < 30 and stopper.stopped_epoch == first_rise
    out = capsys.readouterr().out
    assert "Restoring model weights from the end of the best epoch." in out
    assert f"Epoch {first_rise + 1}: early stopping" in out
    for w, best in zip(model.get_weights(), stopper.best_weights):
        np.testing.assert_array_equal(w, best)


class CustomLearningRateScheduler(keras.callbacks.Callback):
    """Learning rate scheduler which sets the learning rate according to schedule.

    Arguments:
        schedule: a function that takes an epoch index
            (integer, indexed from 0) and current learning rate
            as inputs and returns a new learning rate as output (float).
    """

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model.optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        # Get the current learning rate from model's optimizer.
        lr = self.model.optimizer.learning_rate
        # Call schedule function to get the scheduled learning rate.
        scheduled_lr = self.schedule(epoch, lr)
        # Set the value back to the optimizer before this epoch starts
        self.model.optimizer.learning_rate = scheduled_lr
        print(f"\nEpoch {epoch}: Learning rate is {float(np.array(scheduled_lr))}.")


LR_SCHEDULE = [
    # (epoch to start, learning rate) tuples
    (3, 0.05),
    (6, 0.01),
    (9, 0.005),
    (12, 0.001),
]


def lr_schedule(epoch, lr):
    """Helper function to retrieve the scheduled learning rate based on epoch."""
    if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
        return lr
    for i in range(len(LR_SCHEDULE)):
        if epoch == LR_SCHEDULE[i][0]:
            return LR_SCHEDULE[i][1]
    return lr


def test_learning_rate_scheduling(data, capsys):
    (x_train, y_train), _ = data
    model = get_model()
    model.fit(
        x_train,
        y_train,
        batch_size=64,
        epochs=15,
        verbose=0,
        callbacks=[
            LossAndErrorPrintingCallback(),
            CustomLearningRateScheduler(lr_schedule),
        ],
    )
    rates = [float(line.split("is ")[1].rstrip("."))
             for line in capsys.readouterr().out.splitlines() if "Learning rate is" in line]
    expected = [0.1] * 3 + [0.05] * 3 + [0.01] * 3 + [0.005] * 3 + [0.001] * 3
    np.testing.assert_allclose(rates, expected, rtol=1e-6)
    assert float(model.optimizer.learning_rate) == pytest.approx(0.001)
