"""Keras's standard callbacks (issue 9) against small hand-computed cases:
EarlyStopping's patience, min_delta, baseline and restore_best_weights;
ModelCheckpoint's file names, best-only choice and batch frequency;
CSVLogger's columns and rows; TerminateOnNaN, LambdaCallback,
LearningRateScheduler; ``model.stop_training`` ends fit after the batch."""
import csv

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import callbacks, layers


class FakeModel:
    """What EarlyStopping touches: stop_training and get/set_weights."""

    def __init__(self):
        self.stop_training = False
        self.value = 0
        self.restored = None

    def get_weights(self):
        return [np.array(self.value)]

    def set_weights(self, weights):
        self.restored = int(weights[0])


def _drive(cb, values, key="val_loss"):
    """Run the callback over per-epoch values; return the epoch it stopped
    after (or None) and the fake model."""
    model = FakeModel()
    cb.set_model(model)
    cb.on_train_begin()
    for epoch, value in enumerate(values):
        model.value = epoch
        cb.on_epoch_end(epoch, {key: value})
        if model.stop_training:
            cb.on_train_end()
            return epoch, model
    cb.on_train_end()
    return None, model


def test_early_stopping_patience_by_hand():
    # best 1.0 (epoch 0), 0.9 (epoch 1); then no improvement: wait 1, 2 -> stop at epoch 3.
    assert _drive(callbacks.EarlyStopping(patience=2), [1.0, 0.9, 0.95, 0.91, 0.5])[0] == 3
    # patience 0: the first epoch without improvement stops (never epoch 0).
    assert _drive(callbacks.EarlyStopping(patience=0), [1.0, 1.0, 0.5])[0] == 1
    # min_delta 0.05: 0.87 is not 0.05 better than 0.9 -> stops at epoch 2 with patience 1.
    assert _drive(callbacks.EarlyStopping(patience=1, min_delta=0.05), [1.0, 0.9, 0.87])[0] == 2
    assert _drive(callbacks.EarlyStopping(patience=1, min_delta=0.05), [1.0, 0.9, 0.8])[0] is None
    # mode auto maximises accuracy.
    cb = callbacks.EarlyStopping(monitor="val_accuracy", patience=1)
    assert _drive(cb, [0.5, 0.6, 0.6], key="val_accuracy")[0] == 2 and cb.best == 0.6
    # baseline: improvements that do not beat it do not reset the wait (epochs 0 and 1
    # count), so the first epoch without improvement stops; without it, it would not.
    assert _drive(callbacks.EarlyStopping(patience=2, baseline=0.5), [0.9, 0.8, 0.85])[0] == 2
    assert _drive(callbacks.EarlyStopping(patience=2), [0.9, 0.8, 0.85])[0] is None
    # start_from_epoch: the first epochs are not monitored.
    cb = callbacks.EarlyStopping(patience=0, start_from_epoch=2)
    assert _drive(cb, [0.1, 0.2, 0.3, 0.4])[0] == 3


def test_early_stopping_restores_best_weights():
    stopped, model = _drive(callbacks.EarlyStopping(patience=2, restore_best_weights=True),
                            [1.0, 0.7, 0.8, 0.9, 0.1])
    assert stopped == 3 and model.restored == 1  # the weights of epoch 1
    _, model = _drive(callbacks.EarlyStopping(patience=5, restore_best_weights=True),
                      [1.0, 0.7, 0.8])
    assert model.restored == 1  # restored at the end even without stopping (Keras 3)


def _model(lr=0.1):
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    model.compile(optimizer=pr.optimizers.SGD(lr),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _data(rng, n=16):
    return rng.standard_normal((n, 4)).astype("float32"), rng.integers(0, 3, n)


def test_early_stopping_in_fit_with_a_constant_loss(rng):
    x, y = _data(rng)
    model = _model(lr=0.0)  # the loss is the same every epoch: no improvement after epoch 0
    history = model.fit(x, y, batch_size=8, epochs=10, shuffle=False, verbose=0,
                        callbacks=[callbacks.EarlyStopping(monitor="loss", patience=2)])
    assert len(history.history["loss"]) == 3


def test_stop_training_ends_fit_after_the_current_batch(rng):
    x, y = _data(rng, 32)
    model = _model()
    seen = []

    def stop(batch, logs):
        seen.append(batch)
        if batch == 1:
            model.stop_training = True

    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, validation_data=(x, y),
                        callbacks=[callbacks.LambdaCallback(on_train_batch_end=stop)])
    assert seen == [0, 1] and int(model.optimizer.iterations) == 2
    assert len(history.history["loss"]) == 1 and "val_loss" in history.history


def test_terminate_on_nan(rng, capsys):
    x, y = _data(rng, 32)
    x[9] = np.nan  # the second batch's loss is NaN
    model = _model()
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
              callbacks=[callbacks.TerminateOnNaN()])
    assert int(model.optimizer.iterations) == 2
    assert "Batch 1: Invalid loss, terminating training" in capsys.readouterr().out


def test_model_checkpoint_best_only_by_monitor(tmp_path, rng):
    model = _model()
    cb = callbacks.ModelCheckpoint(str(tmp_path / "{epoch:02d}-{val_loss:.2f}.keras"),
                                   save_best_only=True)
    cb.set_model(model)
    for epoch, value in enumerate([0.5, 0.7, 0.4, 0.45]):
        cb.on_epoch_begin(epoch)
        cb.on_epoch_end(epoch, {"loss": 1.0, "val_loss": value})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["01-0.50.keras", "03-0.40.keras"]
    assert cb.best == 0.4
    cb = callbacks.ModelCheckpoint(str(tmp_path / "acc-{epoch}.weights.npz"),
                                   monitor="val_accuracy", save_best_only=True,
                                   save_weights_only=True)  # mode auto: max for accuracy
    cb.set_model(model)
    for epoch, value in enumerate([0.5, 0.4, 0.6]):
        cb.on_epoch_end(epoch, {"val_accuracy": value})
    assert sorted(p.name for p in tmp_path.glob("acc-*")) == ["acc-1.weights.npz",
                                                              "acc-3.weights.npz"]
    with pytest.warns(UserWarning, match="val_loss available"):
        callbacks.ModelCheckpoint(str(tmp_path / "x.keras"), save_best_only=True) \
            .on_epoch_end(0, {"loss": 1.0})
    with pytest.raises(ValueError, match=".keras"):
        callbacks.ModelCheckpoint(str(tmp_path / "x.h5"))
    with pytest.raises(ValueError, match="save_freq"):
        callbacks.ModelCheckpoint(str(tmp_path / "x.keras"), save_freq="batch")


def test_model_checkpoint_in_fit_every_epoch_and_every_n_batches(tmp_path, rng):
    x, y = _data(rng, 32)
    model = _model()
    every_epoch = callbacks.ModelCheckpoint(str(tmp_path / "e{epoch}.keras"))
    every_3 = callbacks.ModelCheckpoint(str(tmp_path / "b{epoch}-{batch}.weights.npz"),
                                        save_weights_only=True, save_freq=3)
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
              callbacks=[every_epoch, every_3])
    # 4 batches per epoch: saves after global batches 3 and 6 (epoch 1 batch 3, epoch 2 batch 2).
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "b1-3.weights.npz", "b2-2.weights.npz", "e1.keras", "e2.keras"]
    last = pr.models.load_model(tmp_path / "e2.keras")
    assert np.array_equal(last.predict(x, verbose=0), model.predict(x, verbose=0))


def _rows(path, sep=","):
    with open(path, newline="") as f:
        return list(csv.reader(f, delimiter=sep))


def test_csv_logger_columns_and_rows(tmp_path, rng):
    x, y = _data(rng)
    model = _model()
    path = tmp_path / "log.csv"
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0, validation_data=(x, y),
                        callbacks=[callbacks.CSVLogger(str(path))])
    rows = _rows(path)
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [r[0] for r in rows[1:]] == ["0", "1"]
    for epoch, row in enumerate(rows[1:]):
        assert [float(v) for v in row[1:]] == [history.history[k][epoch] for k in rows[0][1:]]
    # append: no second header; a run without validation gets val_ columns of NA (Keras).
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[callbacks.CSVLogger(str(path), append=True)])
    rows = _rows(path)
    assert len(rows) == 4 and rows[3][0] == "0" and rows[3][3:] == ["NA", "NA"]
    other = tmp_path / "semi.csv"
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[callbacks.CSVLogger(str(other), separator=";")])
    assert _rows(other, ";")[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_learning_rate_scheduler_and_lambda_callback(rng):
    x, y = _data(rng)
    model = _model(lr=0.1)
    events = []
    log = callbacks.LambdaCallback(on_train_begin=lambda logs: events.append("begin"),
                                   on_epoch_begin=lambda e, logs: events.append(f"e{e}"),
                                   on_batch_end=lambda b, logs: events.append(f"b{b}"),
                                   on_train_end=lambda logs: events.append("end"))
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[
        callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5), log])
    assert np.allclose(history.history["learning_rate"], [0.05, 0.025, 0.0125])
    assert float(model.optimizer.learning_rate) == np.float32(0.0125)
    assert events == ["begin", "e0", "b0", "b1", "e1", "b0", "b1", "e2", "b0", "b1", "end"]
    model.fit(x, y, epochs=1, verbose=0,
              callbacks=[callbacks.LearningRateScheduler(lambda epoch: 0.2)])
    assert float(model.optimizer.learning_rate) == np.float32(0.2)
    with pytest.raises(ValueError, match="float"):
        model.fit(x, y, epochs=1, verbose=0,
                  callbacks=[callbacks.LearningRateScheduler(lambda epoch: "fast")])
    with pytest.raises(TypeError, match="unknown hook"):
        callbacks.LambdaCallback(on_everything=print)


def test_reduce_lr_on_plateau_by_hand():
    """patience 2, factor 0.5, cooldown 1 over val_loss 1, 1, 1, 1, .5, .5, .5:
    epoch 2 halves (two epochs without improvement), epoch 3 is the cooldown
    (its wait restarts), epoch 4 improves, epoch 6 halves again; min_lr bounds
    the second cut; a factor >= 1 is refused."""
    class Opt:
        learning_rate = 1.0

    class Model:
        optimizer = Opt()

    def run(**kwargs):
        cb = callbacks.ReduceLROnPlateau(patience=2, factor=0.5, cooldown=1, **kwargs)
        model = Model()
        model.optimizer.learning_rate = 1.0
        cb.set_model(model)
        cb.on_train_begin()
        rates = []
        for epoch, value in enumerate([1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5]):
            logs = {"val_loss": value}
            cb.on_epoch_end(epoch, logs)
            assert logs["learning_rate"] == (rates[-1] if rates else 1.0)
            rates.append(model.optimizer.learning_rate)
        return rates

    assert run() == [1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25]
    assert run(min_lr=0.3) == [1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.3]
    with pytest.raises(ValueError, match="factor >= 1.0"):
        callbacks.ReduceLROnPlateau(factor=1.0)


def test_reduce_lr_on_plateau_in_fit(rng):
    """In fit, a constant loss stalls: the rate is cut after `patience` epochs
    (each epoch logs the rate it ran with, as Keras's callback does)."""
    x = rng.standard_normal((16, 4)).astype(np.float32)
    model = pr.Sequential([layers.Input((4,)), layers.Dense(1, kernel_initializer="zeros",
                                                            bias_initializer="zeros")])
    model.compile(optimizer=pr.optimizers.SGD(0.1), loss="mean_squared_error")
    cb = callbacks.ReduceLROnPlateau(monitor="loss", patience=1, factor=0.5, min_delta=0.0)
    history = model.fit(x, np.zeros((16, 1), np.float32), epochs=3, batch_size=8, verbose=0,
                        callbacks=[cb])
    assert history.history["loss"] == [0.0, 0.0, 0.0]
    assert [round(r, 6) for r in history.history["learning_rate"]] == [0.1, 0.1, 0.05]
    assert round(float(model.optimizer.learning_rate), 6) == 0.025
