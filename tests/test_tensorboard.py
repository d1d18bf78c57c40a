"""callbacks.TensorBoard (issue 9): the events written are read back (a
TFRecord reader here, every record's masked CRC-32C checked, decoded with
tensorboardX's Event protobuf) and their tags, steps and values are the
fit's logs."""
import glob
import os
import struct

import numpy as np
import pytest
from tensorboardX.crc32c import crc32c
from tensorboardX.proto import event_pb2

import pyresnet as pr
from pyresnet import layers


def _masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(folder):
    """Every Event of every event file in ``folder``, in file order (the
    TFRecord framing read by hand, every CRC checked)."""
    events = []
    for path in sorted(glob.glob(os.path.join(folder, "events.out.tfevents.*"))):
        with open(path, "rb") as f:
            data = f.read()
        at = 0
        while at < len(data):
            header = data[at:at + 8]
            (length,) = struct.unpack("<Q", header)
            assert struct.unpack("<I", data[at + 8:at + 12])[0] == _masked(header)
            record = data[at + 12:at + 12 + length]
            assert struct.unpack("<I", data[at + 12 + length:at + 16 + length])[0] == \
                _masked(record)
            at += 16 + length
            events.append(event_pb2.Event.FromString(record))
    return events


def read_scalars(folder):
    """``{tag: [(step, value)]}`` of every event file in ``folder``."""
    out = {}
    for event in read_events(folder):
        for value in event.summary.value:
            out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out


def _fit(tmp_path, rng, update_freq, epochs=3):
    x = rng.standard_normal((40, 5)).astype("float32")
    y = rng.integers(0, 3, 40)
    model = pr.Sequential([layers.Input((5,)), layers.Dense(8, activation="relu"),
                           layers.Dense(3)])
    model.compile(optimizer=pr.optimizers.SGD(0.1, momentum=0.9), metrics=["accuracy"],
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=10, epochs=epochs, verbose=0, validation_split=0.25,
                        callbacks=[pr.callbacks.LearningRateScheduler(lambda e, lr: 0.1 / (e + 1)),
                                   pr.callbacks.TensorBoard(tmp_path, update_freq=update_freq)])
    return history.history


def _close(a, b):
    return np.allclose(a, b, rtol=1e-6, atol=0)  # (events hold float32)


def test_epoch_scalars_read_back(tmp_path, rng):
    h = _fit(tmp_path, rng, "epoch")
    train, val = read_scalars(tmp_path / "train"), read_scalars(tmp_path / "validation")
    assert set(train) == {"epoch_loss", "epoch_accuracy", "epoch_learning_rate"}
    assert set(val) == {"epoch_loss", "epoch_accuracy"}
    for key in ("loss", "accuracy"):
        assert [s for s, _ in train[f"epoch_{key}"]] == [0, 1, 2]
        assert _close([v for _, v in train[f"epoch_{key}"]], h[key])
        assert _close([v for _, v in val[f"epoch_{key}"]], h[f"val_{key}"])
    assert _close([v for _, v in train["epoch_learning_rate"]], [0.1, 0.05, 0.1 / 3])


@pytest.mark.parametrize("update_freq,every", [("batch", 1), (2, 2)])
def test_batch_scalars_read_back(tmp_path, rng, update_freq, every):
    _fit(tmp_path, rng, update_freq, epochs=2)  # 3 batches per epoch: steps 1..6
    train = read_scalars(tmp_path / "train")
    assert {"batch_loss", "batch_accuracy", "batch_learning_rate", "epoch_loss"} <= set(train)
    assert [s for s, _ in train["batch_loss"]] == list(range(every, 7, every))
    lrs = dict(train["batch_learning_rate"])
    assert all(_close(lrs[s], 0.1 if s <= 3 else 0.05) for s in lrs)


def test_bad_update_freq():
    with pytest.raises(ValueError, match="update_freq"):
        pr.callbacks.TensorBoard("x", update_freq=0)
