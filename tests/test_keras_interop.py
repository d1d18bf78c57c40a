"""Keras 3 interoperability (issue 29, items 1 and 2).

* ``.keras`` files both ways with the real Keras 3 (its ``numpy`` backend, in
  one subprocess per test session, so no TensorFlow): CIFAR ResNet-20 and
  ResNet-56 (functional, ResidualBlocks written as Keras layers), a
  pre-activation ResNet-20 with projection shortcuts and a Sequential CNN saved by pyresnet give Keras the same logits within 1e-5
  (2e-5 for ResNet-56, see below) on 64 CIFAR-10 test images; a functional model of the layers Keras and
  pyresnet share and a Sequential CNN saved by Keras load in pyresnet with
  the same logits; likewise ``.weights.h5`` files; a compiled model's
  optimizer (SGD with momentum, Adam) crosses over both ways, every slot
  equal.
* Unsafe or unsupported files: an unknown class, an argument pyresnet does
  not implement, a shape mismatch, a link to data outside the file, a
  corrupted archive: ValueError naming the layer, nothing assigned.
* ONNX: ``model.export(format="onnx")`` of ResNet-20 run by ONNX Runtime
  equals ``predict`` within 1e-4 at batch sizes 1 and 37.
"""
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile

import h5py
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import pyresnet as pr
from pyresnet import layers
from pyresnet.applications.preact_resnet_cifar import preact_resnet_cifar
from pyresnet.applications.resnet_cifar import resnet20, resnet56
from pyresnet.saving import keras_config, keras_h5


KERAS_SIDE = r'''
import json, os, sys
os.environ["KERAS_BACKEND"] = "numpy"
import numpy as np
import keras
from keras import layers

folder = sys.argv[1]
x = np.load(folder + "/x.npy")
out = {}
# 1. pyresnet's files in Keras
for name in ("resnet20", "resnet56", "preact20", "cnn", "zoo"):
    model = keras.saving.load_model(f"{folder}/{name}.keras")
    out[f"keras_of_{name}"] = model.predict(x, verbose=0)
    if name in ("resnet20", "cnn"):  # compiled by pyresnet: Keras compiles it and reads the optimizer
        assert model.compiled, name
        out[f"keras_opt_of_{name}"] = np.concatenate(
            [np.ravel(np.asarray(v).astype(np.float64)) for v in model.optimizer.variables])
        out[f"keras_opt_class_of_{name}"] = np.array(type(model.optimizer).__name__)
        model.save(f"{folder}/{name}_resaved.keras")


def cnn():
    return keras.Sequential([
        keras.Input((32, 32, 3)), layers.Conv2D(8, 3, padding="same", use_bias=False),
        layers.BatchNormalization(), layers.ReLU(), layers.MaxPooling2D(),
        layers.Conv2D(16, 3, strides=2, padding="same"), layers.BatchNormalization(),
        layers.Activation("relu"), layers.Dropout(0.3), layers.GlobalAveragePooling2D(),
        layers.Dense(10)])


model = cnn()
model.load_weights(f"{folder}/cnn.weights.h5")
out["keras_of_cnn_weights"] = model.predict(x, verbose=0)

# 2. Keras's files for pyresnet
rng = np.random.default_rng(1)


def fill(model):
    for v in model.weights:
        if "moving_variance" in v.path or "gamma" in v.path:
            v.assign(rng.uniform(0.5, 1.5, v.shape).astype("float32"))
        elif "moving_mean" in v.path or "beta" in v.path:
            v.assign(rng.uniform(-0.2, 0.2, v.shape).astype("float32"))


inputs = keras.Input((32, 32, 3))
a = layers.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
a = layers.BatchNormalization()(a)
a = layers.ReLU()(a)
b = layers.Conv2D(8, 1, strides=2, padding="same")(a)
a = layers.MaxPooling2D()(a)
a = layers.Add()([a, b])
a = layers.Dropout(0.5)(a)
a = layers.DepthwiseConv2D(3, padding="same")(a)
a = layers.LayerNormalization()(a)
a = layers.Activation("relu")(a)
c = layers.AveragePooling2D(4)(a)
c = layers.Flatten()(c)
a = layers.GlobalAveragePooling2D()(a)
a = layers.Concatenate()([a, c])
a = layers.Reshape((17, 8))(a)
a = layers.Flatten()(a)
outputs = layers.Dense(10, kernel_regularizer=keras.regularizers.L2(1e-4))(a)
functional = keras.Model(inputs, outputs, name="keras_functional")
fill(functional)
functional.save(f"{folder}/k_functional.keras")
out["k_functional"] = functional.predict(x, verbose=0)
sequential = cnn()
fill(sequential)
sequential.save(f"{folder}/k_cnn.keras")
sequential.save_weights(f"{folder}/k_cnn.weights.h5")
out["k_cnn"] = sequential.predict(x, verbose=0)
np.savez(folder + "/keras_out.npz", **out)
print("KERAS", keras.__version__)
'''


def _cnn():
    return pr.Sequential([
        layers.Input((32, 32, 3)), layers.Conv2D(8, 3, padding="same", use_bias=False,
                                                 kernel_regularizer=pr.regularizers.L2(1e-4)),
        layers.BatchNormalization(), layers.ReLU(), layers.MaxPooling2D(),
        layers.Conv2D(16, 3, strides=2, padding="same"), layers.BatchNormalization(),
        layers.Activation("relu"), layers.Dropout(0.3), layers.GlobalAveragePooling2D(),
        layers.Dense(10)])


def _zoo():
    """A functional model of the other layers Keras and pyresnet share (and a
    nested model)."""
    inputs = layers.Input((32, 32, 3))
    a = layers.Rescaling(0.5, offset=0.1)(inputs)
    a = layers.ZeroPadding2D(((1, 0), (2, 1)))(a)
    a = layers.Conv2D(4, 3, strides=2, activation="relu")(a)
    a = layers.LeakyReLU(0.2)(a)
    b = layers.Multiply()([a, a])
    c = layers.Subtract()([a, b])
    d = layers.Average()([a, b, c])
    d = layers.UpSampling2D()(d)
    d = layers.Permute((2, 1, 3))(d)
    d = layers.AveragePooling2D(4)(d)
    e = layers.Flatten()(d)
    d = layers.GlobalMaxPooling2D()(d)
    d = layers.Concatenate()([d, e])
    inner_in = layers.Input((260,))
    inner = pr.Model(inner_in, layers.Dense(6, activation="tanh")(inner_in), name="inner")
    return pr.Model(inputs, layers.Softmax()(layers.Dense(10)(inner(d))), name="zoo")


def _batch_norms(layer):
    for sub in getattr(layer, "_sublayers", []):
        if isinstance(sub, layers.BatchNormalization):
            yield sub
        yield from _batch_norms(sub)


def calibrated(model, x):
    """``model`` with every BatchNormalization's moving statistics set to
    the statistics of ``x`` (one training-mode pass with momentum 0), so
    its logits have the scale of a trained network's."""
    norms = list(_batch_norms(model))
    saved = [bn.momentum for bn in norms]
    for bn in norms:
        bn.momentum = 0.0
    model(x, training=True)
    for bn, momentum in zip(norms, saved):
        bn.momentum = momentum
    return model


@pytest.fixture(scope="module")
def cifar64():
    (_, _), (x, _) = pr.datasets.cifar10.load_data()
    return ((x[:64].astype("float32") / 255.0 - 0.5) / 0.25).astype("float32")


@pytest.fixture(scope="module")
def exchanged(tmp_path_factory, cifar64):
    """Files written by pyresnet and by Keras 3, and each side's logits."""
    folder = tmp_path_factory.mktemp("keras_interop")
    x = cifar64
    np.save(folder / "x.npy", x)
    pr.utils.set_random_seed(29)
    ours = {}
    for name, model in (("resnet20", resnet20()), ("resnet56", resnet56()),
                        ("preact20", preact_resnet_cifar(20, shortcut="projection")),
                        ("cnn", _cnn()), ("zoo", _zoo())):
        if name in ("resnet20", "cnn"):  # optimizer state for Keras: SGD with momentum, Adam
            model.compile(optimizer=pr.optimizers.SGD(0.01, momentum=0.9) if name == "resnet20"
                          else pr.optimizers.Adam(1e-3),
                          loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                          metrics=["accuracy"])
            model.fit(x[:16], np.arange(16) % 10, batch_size=8, epochs=1, verbose=0)
            lowered = keras_config.lower_model(model)
            ours[f"opt_{name}"] = np.concatenate([
                np.ravel(np.asarray(v, np.float64)) for v in
                keras_h5.optimizer_variables(model, lowered.trainable_variables())])
        calibrated(model, x)
        model.save(folder / f"{name}.keras")
        ours[name] = model.predict(x, verbose=0)
        if name == "cnn":
            model.save_weights(folder / "cnn.weights.h5")
    env = {**os.environ, "KERAS_BACKEND": "numpy"}
    run = subprocess.run([sys.executable, "-c", KERAS_SIDE, str(folder)],
                         cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    theirs = dict(np.load(folder / "keras_out.npz"))
    return folder, x, ours, theirs


def test_pyresnet_files_load_in_keras_with_the_same_logits(exchanged):
    folder, _, ours, theirs = exchanged
    for name in ("resnet20", "resnet56", "preact20", "cnn", "zoo"):
        assert np.abs(ours[name]).max() > (0.05 if name == "zoo" else 1.0)  # not degenerate  # real logits, not a degenerate network
        # ResNet-56: float32 sums in another order over 56 layers differ by up to 1.2e-5 on
        # logits of magnitude 20 (6e-7 relative; measured over seeds), so 2e-5 there.
        np.testing.assert_allclose(theirs[f"keras_of_{name}"], ours[name], rtol=0,
                                   atol=2e-5 if name == "resnet56" else 1e-5, err_msg=name)
    np.testing.assert_allclose(theirs["keras_of_cnn_weights"], ours["cnn"], rtol=0, atol=1e-5)
    for name, optimizer in (("resnet20", "SGD"), ("cnn", "Adam")):
        assert str(theirs[f"keras_opt_class_of_{name}"]) == optimizer
        assert theirs[f"keras_opt_of_{name}"][0] == 2  # iterations
        np.testing.assert_array_equal(theirs[f"keras_opt_of_{name}"], ours[f"opt_{name}"])
    config = json.loads(zipfile.ZipFile(folder / "resnet20.keras").read("config.json"))
    classes = {item["class_name"] for item in config["config"]["layers"]}
    assert classes == {"InputLayer", "Conv2D", "BatchNormalization", "ReLU", "Add",
                       "GlobalAveragePooling2D", "Dense"}
    assert all(item["module"] == "keras.layers" for item in config["config"]["layers"])


def test_keras_files_load_in_pyresnet_with_the_same_logits(exchanged):
    folder, x, _, theirs = exchanged
    for name in ("k_functional", "k_cnn"):
        model = pr.models.load_model(folder / f"{name}.keras")
        np.testing.assert_allclose(model.predict(x, verbose=0), theirs[name], rtol=0, atol=1e-5,
                                   err_msg=name)
    functional = pr.models.load_model(folder / "k_functional.keras")
    assert functional.name == "keras_functional"
    assert {type(layer).__name__ for layer in functional.layers} >= {
        "Conv2D", "BatchNormalization", "ReLU", "Add", "Dropout", "DepthwiseConv2D",
        "LayerNormalization", "Concatenate", "Reshape", "Flatten", "Dense"}
    for name in ("resnet20", "cnn"):  # Keras's save of a compiled model: compiled again
        model = pr.models.load_model(folder / f"{name}_resaved.keras")
        assert model.compiled and int(model.optimizer.iterations) == 2
        lowered = keras_config.lower_model(model)
        state = np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in
                                keras_h5.optimizer_variables(model, lowered.trainable_variables())])
        np.testing.assert_array_equal(state, theirs[f"keras_opt_of_{name}"])
        np.testing.assert_allclose(model.predict(x, verbose=0), theirs[f"keras_of_{name}"],
                                   rtol=0, atol=1e-5)
    dense = functional.layers[-1]
    assert isinstance(dense.kernel_regularizer, pr.regularizers.L2)
    target = _cnn()
    target.load_weights(folder / "k_cnn.weights.h5")
    np.testing.assert_allclose(target.predict(x, verbose=0), theirs["k_cnn"], rtol=0, atol=1e-5)


def test_resnet_round_trip_in_pyresnet_keeps_its_blocks_and_training_state(tmp_path, cifar64):
    x, y = cifar64[:16], np.arange(16) % 10
    model = resnet20()
    model.compile(optimizer=pr.optimizers.SGD(0.01, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    model.save(tmp_path / "r.keras")
    with zipfile.ZipFile(tmp_path / "r.keras") as z:
        assert "model.weights.h5" in z.namelist() and "model.weights.npz" not in z.namelist()
        with h5py.File(io.BytesIO(z.read("model.weights.h5"))) as f:
            assert f["layers/conv2d/vars/0"].shape == (3, 3, 3, 16)
            assert f["optimizer/vars/0"][()] == 2  # iterations
    loaded = pr.models.load_model(tmp_path / "r.keras")
    assert any(isinstance(layer, layers.ResidualBlock) for layer in loaded.layers)
    assert np.array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert int(loaded.optimizer.iterations) == 2
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def _keras_file(tmp_path, edit_config=None, edit_h5=None):
    """A small Keras-format file (written by pyresnet, read back as Keras's:
    no pyresnet_config), its config and weights edited."""
    model = pr.Sequential([layers.Input((4, 4, 2)), layers.Conv2D(3, 3, name="conv"),
                           layers.Flatten(), layers.Dense(2, name="head")])
    path = tmp_path / "m.keras"
    model.save(path)
    with zipfile.ZipFile(path) as z:
        config = json.loads(z.read("config.json"))
        weights = z.read("model.weights.h5")
    config.pop("pyresnet_config")
    if edit_config:
        edit_config(config)
    if edit_h5:
        buffer = io.BytesIO(weights)
        with h5py.File(buffer, "a") as f:
            edit_h5(f)
        weights = buffer.getvalue()
    bad = tmp_path / "edited.keras"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("metadata.json", "{}")
        z.writestr("config.json", json.dumps(config))
        z.writestr("model.weights.h5", weights)
    return model, bad


def test_an_unedited_keras_file_loads(tmp_path):
    _, good = _keras_file(tmp_path)
    assert isinstance(pr.models.load_model(good), pr.Sequential)


# (layer index, keys set on the layer item, keys set in its config, the error's pattern)
_UNSUPPORTED_LAYER_EDITS = [
    (1, {"class_name": "EinsumDense"}, {}, r'layer "conv" \(EinsumDense\).*cannot load'),
    (1, {"module": "os", "class_name": "system"}, {}, "system"),
    (1, {}, {"dilation_rate": [2, 2]}, r'layer "conv" \(Conv2D\): argument dilation_rate'),
    (3, {}, {"kernel_constraint": {"module": "keras.constraints", "class_name": "MaxNorm",
                                   "config": {}}},
     r'layer "head" \(Dense\): argument kernel_constraint'),
    (3, {}, {"kernel_initializer": {"module": "keras.initializers", "class_name": "Orthogonal",
                                    "config": {}}}, "Orthogonal"),
]


@pytest.mark.parametrize("index,item,layer_config,match", _UNSUPPORTED_LAYER_EDITS)
def test_unknown_or_unsupported_keras_configs_name_the_layer(tmp_path, index, item,
                                                             layer_config, match):
    def edit(config):
        layer = config["config"]["layers"][index]
        layer.update(item)
        layer["config"].update(layer_config)

    _, bad = _keras_file(tmp_path, edit)
    with pytest.raises(ValueError, match=match):
        pr.models.load_model(bad)


def test_h5_shape_mismatch_and_links_raise_and_change_nothing(tmp_path):
    def wrong_shape(f):
        del f["layers/dense/vars/0"]
        f["layers/dense/vars/0"] = np.zeros((12, 5), np.float32)

    model, bad = _keras_file(tmp_path, edit_h5=wrong_shape)
    with pytest.raises(ValueError, match=r'layer "head".*\(12, 2\).*\(12, 5\)'):
        pr.models.load_model(bad)
    before = model.get_weights()
    with pytest.raises(ValueError, match=r'layer "head".*No weight was changed'):
        model.load_weights(bad)
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))

    def missing(f):
        del f["layers/conv2d/vars/1"]

    _, bad = _keras_file(tmp_path, edit_h5=missing)
    with pytest.raises(ValueError, match=r'layer "conv".*2 variables in the model but 1'):
        pr.models.load_model(bad)

    def linked(f):
        del f["layers/dense/vars/1"]
        f["layers/dense/vars/1"] = h5py.ExternalLink("/etc/passwd", "/x")

    _, bad = _keras_file(tmp_path, edit_h5=linked)
    with pytest.raises(ValueError, match="ExternalLink"):
        pr.models.load_model(bad)

    def strings(f):
        del f["layers/dense/vars/1"]
        f["layers/dense/vars/1"] = np.array([b"ab", b"cd"])

    _, bad = _keras_file(tmp_path, edit_h5=strings)
    with pytest.raises(ValueError, match="dtype"):
        pr.models.load_model(bad)

    def extra(f):
        f["layers/dense_7/vars/0"] = np.zeros(3, np.float32)

    _, bad = _keras_file(tmp_path, edit_h5=extra)
    with pytest.raises(ValueError, match="dense_7.*match no weight"):
        pr.models.load_model(bad)


def test_truncated_and_corrupted_h5_archives_raise_value_error(tmp_path, rng):
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    path = tmp_path / "good.keras"
    model.save(path)
    good = path.read_bytes()
    x = rng.standard_normal((2, 4)).astype("float32")
    reference = model.predict(x, verbose=0)
    bad = tmp_path / "bad.keras"
    for cut in sorted(set(rng.integers(1, len(good), 10).tolist())):
        bad.write_bytes(good[:cut])
        with pytest.raises(ValueError):
            pr.models.load_model(bad)
    for at in rng.integers(0, len(good), 30).tolist():
        flipped = bytearray(good)
        flipped[at] ^= 0xFF
        bad.write_bytes(bytes(flipped))
        try:
            loaded = pr.models.load_model(bad)
        except ValueError:
            continue
        assert np.array_equal(loaded.predict(x, verbose=0), reference)


def test_an_inflating_weights_entry_is_refused_before_it_is_read(tmp_path):
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    model.save(tmp_path / "good.keras")
    bomb = tmp_path / "bomb.keras"
    with zipfile.ZipFile(tmp_path / "good.keras") as src, \
            zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for name in ("metadata.json", "config.json"):
            dst.writestr(name, src.read(name))
        with dst.open("model.weights.h5", "w", force_zip64=True) as f:
            chunk = bytes(2**20)
            for _ in range(64):
                f.write(chunk)
    assert bomb.stat().st_size < 2**20
    with pytest.raises(ValueError, match="more than the model's weights can need"):
        pr.models.load_model(bomb)
    with pytest.raises(ValueError, match="more than the model's weights can need"):
        model.load_weights(bomb)


def test_without_h5py_save_says_so_and_writes_npz(tmp_path, monkeypatch):
    from pyresnet.saving import keras_h5
    monkeypatch.setattr(keras_h5, "h5py_or_none", lambda: None)
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    with pytest.warns(UserWarning, match="h5py is not installed"):
        model.save(tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as z:
        assert "model.weights.npz" in z.namelist()
    assert pr.models.load_model(tmp_path / "m.keras").count_params() == 15
    with pytest.raises(ImportError, match="h5py"):
        model.save_weights(tmp_path / "m.weights.h5")


def test_without_h5py_the_warning_shows_once_per_process_not_once_per_saving_line(
        tmp_path, monkeypatch):
    """Under Python's default filter the warning shows once however many
    lines save (python -m pyresnet.train saves best.keras from ModelCheckpoint
    and model.keras at the end: it showed twice); "always" still shows each."""
    import warnings
    from pyresnet.saving import keras_h5
    monkeypatch.setattr(keras_h5, "h5py_or_none", lambda: None)
    model = pr.Sequential([layers.Input((4,)), layers.Dense(3)])
    for action, expected in (("default", 1), ("always", 3)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter(action)
            model.save(tmp_path / "a.keras")
            model.save(tmp_path / "b.keras")  # another line
            checkpoint = pr.callbacks.ModelCheckpoint(str(tmp_path / "c.keras"))
            checkpoint.set_model(model)
            checkpoint.on_epoch_end(0, {"loss": 1.0})  # a third, inside pyresnet
        texts = [str(w.message) for w in caught if "h5py is not installed" in str(w.message)]
        assert len(texts) == expected, (action, texts)


def test_onnx_export_of_resnet20_matches_predict(tmp_path, cifar64):
    x = np.concatenate([cifar64, cifar64[:8]])[:37]
    model = calibrated(resnet20(), cifar64)
    model.export(tmp_path / "r20.onnx", format="onnx")
    session = ort.InferenceSession(str(tmp_path / "r20.onnx"),
                                   providers=["CPUExecutionProvider"])
    (entry,) = session.get_inputs()
    assert entry.shape[0] == "batch" and entry.shape[1:] == [32, 32, 3]
    assert not any(node.op_type == "BatchNormalization"
                   for node in onnx.load(str(tmp_path / "r20.onnx")).graph.node)
    for batch in (1, 37):
        got = session.run(None, {entry.name: x[:batch]})[0]
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, model.predict(x[:batch], verbose=0), rtol=0, atol=1e-4)


def test_onnx_export_of_other_layers_matches_predict(tmp_path, rng):
    inputs = layers.Input((8, 8, 3))
    a = layers.Conv2D(4, 3, padding="same")(inputs)
    a = layers.BatchNormalization()(a)
    a = layers.ReLU()(a)
    b = layers.Conv2D(4, 1, strides=2, padding="same")(a)
    a = layers.MaxPooling2D()(a)
    a = layers.Add()([a, b])
    a = layers.Dropout(0.5)(a)
    a = layers.DepthwiseConv2D(3, padding="same")(a)
    a = layers.BatchNormalization()(a)
    a = layers.LayerNormalization()(a)
    a = layers.Activation("relu")(a)
    c = layers.AveragePooling2D(3, strides=2, padding="same")(a)
    c = layers.Flatten()(c)
    a = layers.GlobalMaxPooling2D()(a)
    a = layers.Concatenate()([a, c])
    a = layers.Reshape((4, 5))(a)
    a = layers.Flatten()(a)
    model = pr.Model(inputs, layers.Dense(3, activation="softmax")(a))
    x = rng.standard_normal((5, 8, 8, 3)).astype("float32")
    calibrated(model, x)
    model.export(tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=0, atol=1e-5)
    zoo = _zoo()
    with pytest.raises(ValueError, match=r'layer "inner" \(Functional\).*not supported'):
        zoo.export(tmp_path / "zoo.onnx")  # a nested model
    flat = pr.Model(zoo.input, zoo.get_layer("inner").layers[-1](zoo.layers[-4].output))
    flat.export(tmp_path / "flat.onnx")
    session = ort.InferenceSession(str(tmp_path / "flat.onnx"),
                                   providers=["CPUExecutionProvider"])
    x = rng.standard_normal((3, 32, 32, 3)).astype("float32")
    got = session.run(None, {session.get_inputs()[0].name: x})[0]
    np.testing.assert_allclose(got, flat.predict(x, verbose=0), rtol=0, atol=1e-5)
    odd = pr.Sequential([layers.Input((8, 8, 3)), layers.RandomFlip(), layers.Flatten()])
    with pytest.raises(ValueError, match=r"RandomFlip.*not supported by the ONNX export"):
        odd.export(tmp_path / "odd.onnx")
    with pytest.raises(ValueError, match="onnx"):
        model.export(tmp_path / "m.pb", format="tf_saved_model")
