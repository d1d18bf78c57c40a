"""BackupAndRestore (issue 9): a fit killed at any moment and run again with
the same command ends with weights bit-identical to an uninterrupted fit --
weights, BN statistics, random layers' states, optimizer slots and
iterations, the epoch and batch counters and fit's shuffling all resume."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from child_process import kill_after
from test_saving import _bomb_npz

CHILD = '''
import sys, time
import numpy as np
import pyresnet as pr
from pyresnet import layers
backup_dir, out, slow = sys.argv[1], sys.argv[2], float(sys.argv[3])
pr.utils.set_random_seed(7)
data = np.random.default_rng(3)
x = data.standard_normal((48, 6, 6, 2)).astype("float32")
y = data.integers(0, 3, 48)
model = pr.Sequential([layers.Input((6, 6, 2)), layers.RandomFlip("horizontal"),
                       layers.Conv2D(4, 3, padding="same"), layers.BatchNormalization(),
                       layers.ReLU(), layers.GlobalAveragePooling2D(), layers.Dense(3)])
model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9), metrics=["accuracy"],
              loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
def begin(logs):
    p = model._fit_progress
    print(f"start {p.epoch} {p.batch}", flush=True)
def epoch_begin(epoch, logs):
    print(f"epoch {epoch}", flush=True)
def batch_end(batch, logs):
    time.sleep(slow)
history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[
    pr.callbacks.BackupAndRestore(backup_dir, save_freq=2),
    pr.callbacks.LambdaCallback(on_train_begin=begin, on_epoch_begin=epoch_begin,
                                on_train_batch_end=batch_end)])
np.savez(out, *[np.asarray(w) for w in model.weights + model.optimizer.variables],
         loss=np.array(history.history["loss"]), its=int(model.optimizer.iterations))
print("done", flush=True)
'''


def _child(backup_dir, out, slow=0.0):
    return subprocess.Popen([sys.executable, "-c", CHILD, str(backup_dir), str(out), str(slow)],
                            cwd=tempfile.gettempdir(), stdout=subprocess.PIPE, text=True)


def _finish(child):
    lines = child.communicate(timeout=300)[0].split("\n")
    assert child.returncode == 0
    return lines


def test_killed_fit_resumed_equals_uninterrupted_bitwise(tmp_path, rng):
    lines = _finish(_child(tmp_path / "a", tmp_path / "a.npz"))
    assert lines[0] == "start 0 -1" and "done" in lines
    assert not os.path.exists(tmp_path / "a" / "latest.backup")  # delete_checkpoint
    child = _child(tmp_path / "b", tmp_path / "b.npz", slow=0.03)
    # once the second epoch has begun
    kill_after(child, lambda line: line.strip() == "epoch 1", float(rng.uniform(0.05, 0.15)))
    assert os.path.exists(tmp_path / "b" / "latest.backup")
    lines = _finish(_child(tmp_path / "b", tmp_path / "b.npz"))
    epoch, batch = map(int, lines[0].split()[1:])
    assert (epoch, batch) >= (1, -1) and (epoch, batch) < (2, 0), lines[0]
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert sorted(a.files) == sorted(b.files)
    for key in a.files:
        assert np.array_equal(a[key], b[key]), key
    assert int(a["its"]) == 18


def _dataset_run(tmp_path, fail_at=None):
    pr.utils.set_random_seed(11)
    data = np.random.default_rng(5)
    x = data.integers(0, 255, (40, 32, 32, 3)).astype("uint8")
    y = data.integers(0, 4, 40)
    train = pr.data.recipes.cifar_train_dataset(x, y, batch_size=8, seed=4)
    model = pr.Sequential([layers.Input((32, 32, 3)), layers.Conv2D(4, 3, padding="same"),
                           layers.BatchNormalization(), layers.ReLU(),
                           layers.GlobalAveragePooling2D(), layers.Dense(4)])
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))

    def fail(epoch, batch):
        if (epoch, batch) == fail_at:
            raise KeyboardInterrupt

    state = {}
    cbs = [pr.callbacks.BackupAndRestore(tmp_path, delete_checkpoint=False),
           pr.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: state.update(epoch=e),
                                       on_train_batch_end=lambda b, logs: fail(state["epoch"], b))]
    history = model.fit(train, epochs=3, verbose=0, callbacks=cbs)
    return model, history


def test_resumed_dataset_pipeline_equals_uninterrupted(tmp_path):
    model, history = _dataset_run(tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        _dataset_run(tmp_path / "b", fail_at=(1, 2))
    resumed, resumed_history = _dataset_run(tmp_path / "b")
    for w, r in zip(model.weights + model.optimizer.variables,
                    resumed.weights + resumed.optimizer.variables):
        assert np.array_equal(np.asarray(w), np.asarray(r)), w.name
    assert resumed_history.history == history.history  # restored epochs included
    assert int(resumed.optimizer.iterations) == 15


def test_backup_arguments_and_bad_backup(tmp_path):
    with pytest.raises(ValueError, match="save_freq"):
        pr.callbacks.BackupAndRestore(tmp_path, save_freq=0)
    (tmp_path / "latest.backup").write_bytes(b"not a zip")
    model = pr.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    before = [np.asarray(w).copy() for w in model.weights]
    with pytest.raises(ValueError, match="not a valid backup"):
        model.fit(np.zeros((4, 3), "float32"), np.zeros((4, 2), "float32"), verbose=0,
                  callbacks=[pr.callbacks.BackupAndRestore(tmp_path)])
    assert all(np.array_equal(b, np.asarray(w)) for b, w in zip(before, model.weights))


def test_resumed_epoch_progress_bar_counts_the_batches_done(tmp_path, rng, capsys, monkeypatch):
    monkeypatch.setattr(pr.callbacks, "_interactive", lambda stream: True)  # draw the bar
    x = rng.standard_normal((40, 5)).astype("float32")
    y = rng.integers(0, 3, 40)

    def model():
        m = pr.Sequential([layers.Input((5,)), layers.Dense(3)])
        m.compile(optimizer="sgd", loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    class Stop(pr.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if self.model._fit_progress.epoch == 1 and batch == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model().fit(x, y, batch_size=5, epochs=2, verbose=0,
                    callbacks=[pr.callbacks.BackupAndRestore(tmp_path, save_freq=1), Stop()])
    capsys.readouterr()
    history = model().fit(x, y, batch_size=5, epochs=2, verbose=1,
                          callbacks=[pr.callbacks.BackupAndRestore(tmp_path, save_freq=1)])
    out = capsys.readouterr().out
    assert "Epoch 2/2:  38%|" in out and "3/8" in out and "Epoch 1/2" not in out
    assert len(history.history["loss"]) == 2
    assert not (tmp_path / "latest.backup").exists()


def _backup_of_a_small_fit(tmp_path):
    """(model, x, y, backup folder): one epoch of a small fit backed up."""
    x = np.random.default_rng(1).standard_normal((8, 3)).astype("float32")
    y = np.zeros((8, 2), "float32")
    model = pr.Sequential([layers.Input((3,)), layers.Dense(2)])
    model.compile(optimizer=pr.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    model.fit(x, y, batch_size=4, verbose=0,
              callbacks=[pr.callbacks.BackupAndRestore(tmp_path, delete_checkpoint=False)])
    return model, x, y, tmp_path


def _rewrite_backup(path, state=None, weights=None):
    import io
    import json
    import zipfile
    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    if state is not None:
        entries["state.json"] = json.dumps(state).encode()
    if weights is not None:
        entries["weights.npz"] = weights
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    path.write_bytes(buffer.getvalue())


@pytest.mark.parametrize("damage", ["history", "passes", "epoch type", "list"])
def test_malformed_backup_state_raises_value_error_naming_the_file(tmp_path, damage):
    """A backup whose state.json lacks what fit needs (a hand-edited or foreign
    file) raises the ValueError BackupAndRestore documents, naming the file,
    instead of a bare KeyError; no weight changes."""
    import json
    import zipfile
    model, x, y, folder = _backup_of_a_small_fit(tmp_path)
    path = folder / "latest.backup"
    with zipfile.ZipFile(path) as z:
        state = json.loads(z.read("state.json"))
    if damage == "history":
        del state["history"]
    elif damage == "passes":
        del state["data"]["passes"]
    elif damage == "epoch type":
        state["epoch"] = "one"
    else:
        state = {"epoch": 1, "history": [1, 2]}
    _rewrite_backup(path, state=state)
    before = [np.asarray(w).copy() for w in model.weights + model.optimizer.variables]
    with pytest.raises(ValueError, match="latest.backup is not a valid backup"):
        model.fit(x, y, batch_size=4, epochs=2, verbose=0,
                  callbacks=[pr.callbacks.BackupAndRestore(folder)])
    after = [np.asarray(w) for w in model.weights + model.optimizer.variables]
    assert all(np.array_equal(b, a) for b, a in zip(before, after))


def test_backup_whose_weights_inflate_hugely_is_refused_without_allocating(tmp_path):
    import tracemalloc
    model, x, y, folder = _backup_of_a_small_fit(tmp_path)
    big = 256 * 2**20
    _rewrite_backup(folder / "latest.backup",
                    weights=_bomb_npz("layers/dense/kernel", big))
    assert (folder / "latest.backup").stat().st_size < 2**20
    before = [np.asarray(w).copy() for w in model.weights]
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="latest.backup") as info:
            model.fit(x, y, batch_size=4, epochs=2, verbose=0,
                      callbacks=[pr.callbacks.BackupAndRestore(folder)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "bytes" in str(info.value)
    assert peak < 16 * 2**20, peak
    assert all(np.array_equal(b, np.asarray(w)) for b, w in zip(before, model.weights))
