"""Saving (issue 9): .keras files loaded in a fresh process give identical
predictions (Sequential, functional with several inputs/outputs and a
shared layer, nested, Python custom layers); training continues exactly as
uninterrupted training; load_weights checks every shape before assigning;
truncated, corrupted and foreign files raise ValueError; a save killed with
SIGKILL at random moments always leaves the previous file loadable."""
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers

CUSTOM_MODULE = '''
import pyresnet as pr
from pyresnet import layers, ops


@pr.saving.register_serializable(package="tests")
class Scale(layers.Layer):
    """y = x * w + b per channel, with a constructor argument."""

    def __init__(self, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        self.offset = offset

    def build(self, input_shape):
        self.w = self.add_weight((input_shape[-1],), initializer="glorot_uniform", name="w")
        self.b = self.add_weight((input_shape[-1],), initializer="glorot_uniform", name="b")

    def call(self, inputs):
        return ops.add(ops.multiply(inputs, self.w), self.b + self.offset)


class Unregistered(layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight((input_shape[-1],), initializer="glorot_uniform", name="w")

    def call(self, inputs):
        return ops.multiply(inputs, self.w)
'''

CHILD = '''
import json, sys
import numpy as np
import pyresnet as pr
folder = sys.argv[1]
expected = json.load(open(folder + "/expected.json"))
data = np.load(folder + "/data.npz", allow_pickle=False)
try:
    pr.models.load_model(folder + "/unregistered.keras")
except ValueError as e:
    print("UNKNOWN:", e)
import custom_layers  # registers Scale
results = {}
for name, inputs in expected["inputs"].items():
    custom = {"Unregistered": custom_layers.Unregistered} if name == "unregistered" else None
    model = pr.models.load_model(f"{folder}/{name}.keras", custom_objects=custom)
    out = model.predict([data[k] for k in inputs] if len(inputs) > 1 else data[inputs[0]],
                        verbose=0)
    outs = out if isinstance(out, list) else [out]
    same = all(np.array_equal(o, data[f"{name}_out{i}"]) for i, o in enumerate(outs))
    results[name] = [same, model.compiled,
                     int(model.optimizer.iterations) if model.compiled else None]
print("RESULTS:", json.dumps(results))
'''


def _compile(model, lr=0.05, momentum=0.9):
    model.compile(optimizer=pr.optimizers.SGD(lr, momentum=momentum),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])


def _import_custom(folder):
    (folder / "custom_layers.py").write_text(CUSTOM_MODULE)
    sys.path.insert(0, str(folder))
    try:
        sys.modules.pop("custom_layers", None)
        import custom_layers  # noqa: PLC0415
    finally:
        sys.path.remove(str(folder))
    return custom_layers


def test_load_in_fresh_process_gives_identical_predictions(tmp_path, rng):
    custom = _import_custom(tmp_path)
    img = rng.standard_normal((10, 8, 8, 3)).astype("float32")
    labels = rng.integers(0, 3, 10)
    va, vb = (rng.standard_normal((10, 6)).astype("float32") for _ in range(2))
    data, inputs = {"img": img, "va": va, "vb": vb}, {}

    seq = pr.Sequential([layers.Input((8, 8, 3)), layers.Conv2D(4, 3, padding="same"),
                         layers.BatchNormalization(), layers.ReLU(),
                         layers.ResidualBlock(6, strides=2), layers.GlobalAveragePooling2D(),
                         layers.Dense(3)])
    _compile(seq)
    seq.fit(img, labels, batch_size=5, epochs=1, verbose=0)  # BN statistics, velocities

    a, b = layers.Input((6,), name="a"), layers.Input((6,), name="b")
    shared = layers.Dense(5, name="shared")
    summed = layers.Add()([shared(a), shared(b)])
    functional = pr.Model([a, b], [layers.Dense(3, name="head")(summed),
                                   layers.Dense(2, name="aux")(shared(b))])

    inner_in = layers.Input((6,))
    inner = pr.Model(inner_in, layers.Dense(4, activation="relu")(inner_in), name="inner")
    outer_in = layers.Input((6,))
    nested = pr.Model(outer_in, layers.Dense(3)(custom.Scale(offset=0.5)(inner(outer_in))))
    _compile(nested)
    nested.fit(va, labels, batch_size=5, epochs=1, verbose=0)

    unregistered = pr.Sequential([layers.Input((6,)), custom.Unregistered(), layers.Dense(2)])

    for name, model, ins in [("sequential", seq, ["img"]), ("functional", functional, ["va", "vb"]),
                             ("nested", nested, ["va"]), ("unregistered", unregistered, ["va"])]:
        model.save(tmp_path / f"{name}.keras")
        out = model.predict([data[k] for k in ins] if len(ins) > 1 else data[ins[0]], verbose=0)
        for i, o in enumerate(out if isinstance(out, list) else [out]):
            data[f"{name}_out{i}"] = o
        inputs[name] = ins
    np.savez(tmp_path / "data.npz", **data)
    (tmp_path / "expected.json").write_text(json.dumps({"inputs": inputs}))

    # the child imports this tree's pyresnet (not an installed one) and the custom layers
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), os.path.dirname(os.path.dirname(pr.__file__))])}
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], cwd=tempfile.gettempdir(),
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    results = json.loads(lines["RESULTS"])
    assert results == {"sequential": [True, True, 2], "functional": [True, False, None],
                       "nested": [True, True, 2], "unregistered": [True, False, None]}
    # An unknown class: the error names it and both fixes.
    message = lines["UNKNOWN"]
    assert "'Unregistered'" in message and "custom_objects" in message
    assert "register_serializable" in message


def _tiny(seed_layer_names=True):
    model = pr.Sequential([layers.Input((5,)), layers.Dense(8), layers.BatchNormalization(),
                           layers.ReLU(), layers.Dense(3)])
    _compile(model, lr=0.1)
    return model


def test_continued_training_equals_uninterrupted(tmp_path, rng):
    x = rng.standard_normal((24, 5)).astype("float32")
    y = rng.integers(0, 3, 24)
    model = _tiny()
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    model.save(tmp_path / "m.keras")
    resumed = pr.models.load_model(tmp_path / "m.keras")
    assert int(resumed.optimizer.iterations) == 6
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    resumed.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for w, r in zip(model.weights, resumed.weights):
        assert np.array_equal(np.asarray(w), np.asarray(r)), w.path
    slots = [np.asarray(v) for v in model.optimizer.variables]
    assert all(np.array_equal(s, np.asarray(r))
               for s, r in zip(slots, resumed.optimizer.variables))
    assert int(resumed.optimizer.iterations) == int(model.optimizer.iterations) == 12


def test_save_weights_load_weights_match_by_path(tmp_path, rng):
    source = _tiny()
    source.fit(rng.standard_normal((8, 5)).astype("float32"), rng.integers(0, 3, 8),
               verbose=0)
    source.save_weights(tmp_path / "w.weights.npz")
    target = _tiny()  # other auto-generated layer names: paths still match
    assert target.layers[0].name != source.layers[0].name
    target.load_weights(tmp_path / "w.weights.npz")
    assert all(np.array_equal(a, b) for a, b in zip(source.get_weights(), target.get_weights()))
    source.save(tmp_path / "m.keras")
    _tiny().load_weights(tmp_path / "m.keras")  # also from a .keras file
    with pytest.raises(ValueError, match=r"\.weights\.npz"):
        source.save_weights(tmp_path / "w.h5")


def test_load_weights_shape_mismatch_names_weight_and_shapes_changes_nothing(tmp_path):
    source = pr.Sequential([layers.Input((5,)), layers.Dense(8), layers.Dense(3)])
    source.save_weights(tmp_path / "w.weights.npz")
    target = pr.Sequential([layers.Input((5,)), layers.Dense(8), layers.Dense(4)])
    before = target.get_weights()
    with pytest.raises(ValueError) as info:
        target.load_weights(tmp_path / "w.weights.npz")
    message = str(info.value)
    assert "layers/dense_1/kernel" in message and "(8, 4)" in message and "(8, 3)" in message
    assert "No weight was changed" in message
    assert all(np.array_equal(a, b) for a, b in zip(before, target.get_weights()))
    extra = pr.Sequential([layers.Input((5,)), layers.Dense(8), layers.Dense(3), layers.Dense(1)])
    before = extra.get_weights()
    with pytest.raises(ValueError, match="layers/dense_2/kernel"):
        extra.load_weights(tmp_path / "w.weights.npz")
    assert all(np.array_equal(a, b) for a, b in zip(before, extra.get_weights()))


def test_config_json_and_functional_get_config(rng):
    a, b = layers.Input((4,), name="in_a"), layers.Input((4,), name="in_b")
    shared = layers.Dense(3, name="shared")
    model = pr.Model({"a": a, "b": b}, [shared(a), layers.ReLU(name="act")(shared(b))],
                     name="two")
    config = model.get_config()
    assert [item["name"] for item in config["layers"]] == ["in_a", "in_b", "shared", "act"]
    assert config["input_layers"] == {"a": ["in_a", 0, 0], "b": ["in_b", 0, 0]}
    assert config["output_layers"] == [["shared", 0, 0], ["act", 0, 0]]
    shared_item = next(item for item in config["layers"] if item["name"] == "shared")
    assert len(shared_item["inbound_nodes"]) == 2
    clone = pr.Model.from_config(json.loads(json.dumps(config)))
    clone.set_weights(model.get_weights())
    x = {"a": rng.standard_normal((2, 4)).astype("float32"),
         "b": rng.standard_normal((2, 4)).astype("float32")}
    for u, v in zip(model(x), clone(x)):
        assert np.array_equal(np.asarray(u), np.asarray(v))
    again = pr.models.model_from_json(model.to_json())
    assert again.name == "two" and again.count_params() == model.count_params()
    with pytest.raises(ValueError, match="JSON"):
        pr.models.model_from_json("{not json")


def test_unsaveable_config_names_the_layer(tmp_path):
    model = pr.Sequential([layers.Input((3,)), layers.Dense(2, activation=lambda t: t,
                                                             name="odd")])
    with pytest.raises(ValueError, match='layer "odd"'):
        model.save(tmp_path / "m.keras")
    assert not (tmp_path / "m.keras").exists() and not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match=r"\.keras"):
        model.save(tmp_path / "m.h5")


def _saved(tmp_path):
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    _compile(model)
    path = tmp_path / "good.keras"
    model.save(path, weights_format="npz")  # (Keras's .h5 format: tests/test_keras_interop.py)
    return model, path.read_bytes()


def test_truncated_corrupted_and_foreign_files_raise_value_error(tmp_path, rng):
    model, good = _saved(tmp_path)
    x = rng.standard_normal((2, 4)).astype("float32")
    reference = model.predict(x, verbose=0)
    bad = tmp_path / "bad.keras"

    def load(data):
        bad.write_bytes(data)
        return pr.models.load_model(bad)

    for cut in sorted(set(rng.integers(1, len(good), 12).tolist())) + [0, 22]:
        with pytest.raises(ValueError):
            load(good[:cut])
    for at in rng.integers(0, len(good), 40).tolist():
        flipped = bytearray(good)
        flipped[at] ^= 0xFF
        try:
            loaded = load(bytes(flipped))
        except ValueError:
            continue
        # A flip the format cannot see (a timestamp, a padding byte) changes nothing.
        assert np.array_equal(loaded.predict(x, verbose=0), reference)

    foreign = [b"hello, not a model\n", b"\x89HDF\r\n\x1a\n" + bytes(100)]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("something.txt", "x")
    foreign.append(buffer.getvalue())
    for data in foreign:
        with pytest.raises(ValueError, match="not a"):
            load(data)

    def rewrite(**replace):
        out = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(out, "w") as dst:
            for name in src.namelist():
                dst.writestr(name, replace.get(name.replace(".", "_"), src.read(name)))
        return out.getvalue()

    with pytest.raises(ValueError, match="JSON"):
        load(rewrite(config_json=b"{broken"))
    with pytest.raises(ValueError, match="rebuilt|config"):
        load(rewrite(config_json=b'{"class_name": "Functional", "module": "pyresnet.models",'
                                 b' "config": {"layers": 3, "input_layers": [],'
                                 b' "output_layers": []}}'))
    # Weights: an object array (would need pickle), a header claiming a huge shape.
    objects = io.BytesIO()
    np.savez(objects, **{"layers/dense/kernel": np.array([None, 1], dtype=object)})
    with pytest.raises(ValueError, match="dtype"):
        load(rewrite(model_weights_npz=objects.getvalue()))
    huge = io.BytesIO()
    with zipfile.ZipFile(huge, "w") as z:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 10**6)})
        z.writestr("layers/dense/kernel.npy", header.getvalue() + bytes(48))
    with pytest.raises(ValueError, match="bytes"):
        load(rewrite(model_weights_npz=huge.getvalue()))
    with pytest.raises(FileNotFoundError):
        pr.models.load_model(tmp_path / "missing.keras")
    weights = tmp_path / "w.weights.npz"
    weights.write_bytes(good[:100])
    with pytest.raises(ValueError):
        model.load_weights(weights)


KILL_CHILD = '''
import sys
import numpy as np
import pyresnet as pr
from pyresnet import layers
path = sys.argv[1]
model = pr.Sequential([layers.Input((256,)), layers.Dense(512), layers.Dense(256)])
i = 0
while True:
    model.set_weights([np.full(w.shape, i, np.float32) for w in model.weights])
    model.save(path)
    if i == 0:
        print("saved", flush=True)
    i += 1
'''


def test_kill_during_repeated_saves_leaves_a_loadable_file(tmp_path, rng):
    path = tmp_path / "loop.keras"
    for attempt in range(6):
        child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(path)],
                                 cwd=tempfile.gettempdir(), stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "saved"
            time.sleep(float(rng.uniform(0.0, 0.25)))
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            child.stdout.close()
        model = pr.models.load_model(path)
        values = {float(v) for w in model.get_weights() for v in np.unique(w)}
        assert len(values) == 1, f"attempt {attempt}: a mixed file {sorted(values)[:5]}"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "loop.keras"]
    assert all(name.startswith(".loop.keras.") and name.endswith(".tmp") for name in leftovers)


def test_registration_and_custom_object_scope():
    @pr.saving.register_serializable(package="test_saving")
    class Twice(layers.Layer):
        def call(self, inputs):
            return inputs * 2.0

    assert pr.saving.get_registered_name(Twice) == "test_saving>Twice"
    model = pr.Sequential([layers.Input((3,)), Twice()])
    clone = pr.models.model_from_json(model.to_json())
    assert isinstance(clone.layers[0], Twice)

    class Local(layers.Layer):
        def call(self, inputs):
            return inputs

    text = pr.Sequential([layers.Input((3,)), Local()]).to_json()
    with pytest.raises(ValueError, match="Local"):
        pr.models.model_from_json(text)
    with pr.saving.custom_object_scope({"Local": Local}):
        assert isinstance(pr.models.model_from_json(text).layers[0], Local)
    with pytest.raises(ValueError, match="register_serializable"):
        pr.saving.register_serializable()(lambda: None)


def test_atomic_write_keeps_the_old_file_on_error(tmp_path):
    from pyresnet.utils.atomic import atomic_write, write_text
    target = tmp_path / "f.txt"
    write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_write(target, "w") as f:
            f.write("new, half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]
    write_text(target, "new")
    assert target.read_text() == "new"
    mask = os.umask(0o022)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask  # as open() makes it, not 0600


def _writers():
    """Every public writer that goes through pyresnet.utils.atomic: name ->
    write(path) (path ends with the suffix the writer takes)."""
    from pyresnet.utils import atomic
    model = pr.Sequential([layers.Input((4,)), layers.Dense(2)])
    _compile(model)
    logger = pr.callbacks.CSVLogger
    return {
        "save .keras": ("m.keras", model.save),
        "save .keras npz": ("m.keras", lambda p: model.save(p, weights_format="npz")),
        "save_weights .h5": ("m.weights.h5", model.save_weights),
        "save_weights .npz": ("m.weights.npz", model.save_weights),
        "export onnx": ("m.onnx", lambda p: model.export(p, format="onnx")),
        "save_img": ("x.png", lambda p: pr.utils.save_img(p, np.zeros((2, 2, 3), np.uint8))),
        "plot_model .dot": ("m.dot", lambda p: pr.utils.plot_model(model, to_file=p)),
        "CSVLogger": ("log.csv", lambda p: (lambda cb: (cb.set_model(model), cb.on_train_begin(),
                                                       cb.on_epoch_end(0, {"loss": 1.0})))(
            logger(p))),
        "write_text": ("f.txt", lambda p: atomic.write_text(p, "x")),
        "write_bytes": ("f.bin", lambda p: atomic.write_bytes(p, b"x")),
    }


@pytest.mark.parametrize("writer", sorted(_writers()))
def test_a_missing_folder_is_named_as_open_names_it_and_nothing_is_left(tmp_path, monkeypatch,
                                                                         writer):
    """Saving into a folder that does not exist raises open()'s (and
    Keras's) FileNotFoundError naming the path given, not the temporary file
    the atomic write makes; saving onto a folder raises IsADirectoryError
    naming it and removes the temporary file."""
    suffix, write = _writers()[writer]
    monkeypatch.chdir(tmp_path)
    given = os.path.join("missing_folder", suffix)
    with pytest.raises(FileNotFoundError) as info:
        write(given)
    assert info.value.filename == given and ".tmp" not in str(info.value), str(info.value)
    assert str(info.value) == f"[Errno 2] No such file or directory: {given!r}"
    assert list(tmp_path.iterdir()) == []
    (tmp_path / suffix).mkdir()  # the destination is a folder: the rename fails
    with pytest.raises(IsADirectoryError) as info:
        write(suffix)
    assert info.value.filename == suffix and ".tmp" not in str(info.value), str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == [suffix]
    assert list((tmp_path / suffix).iterdir()) == []


STRAY_CHILD = '''
import os, sys
from pyresnet.utils.atomic import atomic_write
with atomic_write(sys.argv[1], "wb") as f:
    f.write(b"half a file")
    f.flush()
    print(os.path.basename(f.name), flush=True)
    os._exit(9)  # as kill -9: no cleanup runs
'''


def test_next_save_removes_the_temp_files_of_killed_saves_and_only_those(tmp_path):
    """A save killed mid-write leaves its temporary file; the next save of that
    file removes it (its writer is gone), and also one of ours untouched for
    longer than STALE_SECONDS; files of other names, patterns or live writers
    stay."""
    from pyresnet.utils import atomic
    path = tmp_path / "m.keras"
    strays = []
    for _ in range(2):  # the second killed save removes the first one's file
        p = subprocess.run([sys.executable, "-c", STRAY_CHILD, str(path)], capture_output=True,
                           text=True, cwd=tempfile.gettempdir(), timeout=60)
        assert p.returncode == 9, p.stderr
        strays.append(p.stdout.strip())
        assert sorted(q.name for q in tmp_path.iterdir()) == [strays[-1]]
    old = tmp_path / ".m.keras.abcd1234.tmp"  # an earlier version's name, an hour old
    kept = [tmp_path / n for n in (".m.keras.x.tmp", ".other.keras.12.abcd1234.tmp",
                                   f".m.keras.{os.getpid()}.abcd1234.tmp", "m.keras.tmp")]
    for f in [old] + kept:
        f.write_bytes(b"x")
    os.utime(old, (time.time() - atomic.STALE_SECONDS - 60,) * 2)
    pr.Sequential([layers.Input((2,)), layers.Dense(1)]).save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.keras"] +
                                                               [f.name for f in kept])
    pr.models.load_model(path)


def _bomb_npz(key, nbytes, outer=None):
    """An .npz whose entry ``key.npy`` declares (and holds) ``nbytes`` of
    zeros, deflated to a few hundred KiB; with ``outer``, that .npz stored
    (then deflated) as the ``model.weights.npz`` entry of a copy of the
    ``.keras`` bytes ``outer``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open(key + ".npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)})
            zeros = bytes(2**20)
            for _ in range(nbytes // 2**20):
                f.write(zeros)
    if outer is None:
        return buffer.getvalue()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(outer)) as src, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in src.namelist():
            if name != "model.weights.npz":
                dst.writestr(name, src.read(name))
        with dst.open("model.weights.npz", "w", force_zip64=True) as w, \
                zipfile.ZipFile(w, "w", zipfile.ZIP_STORED) as inner, \
                inner.open(key + ".npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<f4", "fortran_order": False, "shape": (nbytes // 4,)})
            zeros = bytes(2**20)
            for _ in range(nbytes // 2**20):
                f.write(zeros)
    return out.getvalue()


def test_small_files_that_inflate_hugely_are_refused_before_any_large_allocation(tmp_path):
    """A .keras whose model.weights.npz entry inflates to 256 MiB, and a
    .weights.npz whose kernel entry does, are under 1 MiB on disk: load_model
    and load_weights check the sizes the zip and .npy headers declare against
    the model's weights and raise ValueError without allocating them."""
    import tracemalloc
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    _compile(model)
    good = tmp_path / "good.keras"
    model.save(good, weights_format="npz")  # (Keras's h5 weights: test_keras_interop.py)
    big = 256 * 2**20
    keras_bomb = tmp_path / "bomb.keras"
    keras_bomb.write_bytes(_bomb_npz("layers/dense/kernel", big, outer=good.read_bytes()))
    npz_bomb = tmp_path / "bomb.weights.npz"
    npz_bomb.write_bytes(_bomb_npz("layers/dense/kernel", big))
    assert keras_bomb.stat().st_size < 2**20 and npz_bomb.stat().st_size < 2**20
    before = model.get_weights()
    for load, path in ((pr.models.load_model, keras_bomb), (model.load_weights, keras_bomb),
                       (model.load_weights, npz_bomb)):
        tracemalloc.start()
        try:
            with pytest.raises(ValueError, match="bytes") as info:
                load(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert path.name in str(info.value)
        assert peak < 16 * 2**20, f"{load.__name__}({path.name}): peak {peak} bytes"
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    pr.models.load_model(good)  # the right sizes still load
