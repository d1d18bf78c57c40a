"""Keras 3 image-augmentation layers (RandomTranslation, RandomRotation,
RandomZoom, RandomContrast) and airbench94's alternating flip and
reflect-padded translation (issue 29 item 4, issue 28).

* The transforms the layers draw equal Keras 3's matrices for the same
  parameters, and the images equal both our NumPy references
  (tests/op_table.py) and Keras 3's own ``affine_transform`` /
  ``RandomContrast.transform_images`` (numpy backend, one subprocess) given
  the same draws, for every fill mode and both interpolations.
* The layers' draws follow their seed (philox_ref), cover the documented
  ranges, are the identity with ``training=False``, run in the C input
  pipeline with the same draws as eagerly, and stop gradients.
* The alternating flip: each image flipped in every other pass, keyed on its
  dataset index (not its batch position), whatever the shuffling, batching
  and prefetching; ``cifar_train_dataset(flip="alternate", translate=2,
  fill_mode="mirror")`` yields exactly flip^(pass parity)(a 2-pixel mirrored
  shift) of every image.
"""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers
from pyresnet.data import Dataset
from pyresnet.data.recipes import CIFAR10_MEAN, CIFAR10_STD, cifar_train_dataset
from pyresnet.ops import augment as A
from op_table import (NP_PAD_MODES, _affine_draws, _contrast_draws, affine_reference,
                      contrast_reference)

KERAS_FILL = {"constant": 0, "mirror": 1, "reflect": 2, "nearest": 3, "wrap": 4}

KERAS_SIDE = r'''
import os, sys
os.environ["KERAS_BACKEND"] = "numpy"
import numpy as np
import keras
d = dict(np.load(sys.argv[1]))
out = {}
x = d["x"]
for key in [k for k in d if k.startswith("t_")]:
    _, fill, interp = key.split("_")
    out["affine_" + fill + "_" + interp] = np.asarray(keras.ops.image.affine_transform(
        x, d[key], interpolation=interp, fill_mode=fill, fill_value=3.5))
h, w = x.shape[1:3]
tr = keras.layers.RandomTranslation(0.2, 0.2)
out["translation_matrix"] = np.asarray(tr._get_translation_matrix(d["translations"]))
zo = keras.layers.RandomZoom(0.2)
out["zoom_matrix"] = np.asarray(zo._get_zoom_matrix(d["zooms"], h, w))
ro = keras.layers.RandomRotation(0.2)
n = len(d["angles"])
out["rotation_matrix"] = np.asarray(ro._compute_affine_matrix(
    center_x=0.5, center_y=0.5, angle=d["angles"], translate_x=np.zeros(n, "float32"),
    translate_y=np.zeros(n, "float32"), scale=np.ones(n, "float32"),
    shear_x=np.zeros(n, "float32"), shear_y=np.zeros(n, "float32"), height=h, width=w))
co = keras.layers.RandomContrast(0.5)
out["contrast"] = np.asarray(co.transform_images(
    x, {"contrast_factor": d["contrast_factors"].reshape(-1, 1, 1, 1)}, training=True))
out["contrast_scalar_factor"] = np.array(co.factor, "float64")
out["contrast_pair_factor"] = np.array(keras.layers.RandomContrast((0.3, 0.4)).factor, "float64")
np.savez(sys.argv[2], **out)
'''


@pytest.fixture(scope="module")
def keras_run(tmp_path_factory):
    """Run KERAS_SIDE once on the inputs ``make(d)`` fills; returns (inputs, outputs)."""
    folder = tmp_path_factory.mktemp("keras_aug")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (3, 9, 11, 2)).astype(np.float32)
    d = {"x": x}
    state = np.array([5, 9], np.int64)
    cases = {  # the op's own draws: translations, rotations, zooms (anisotropic and not)
        "translate": dict(height_factor=(-0.4, 0.4), width_factor=(-0.3, 0.5)),
        "rotate": dict(rotation=(-math.pi, math.pi)),
        "zoom": dict(zoom_height=(0.6, 1.5), zoom_width=(0.7, 1.8)),
    }
    transforms = {k: np.asarray(A.random_affine(x, pr.Variable(state, trainable=False),
                                                return_params=True, **a)[1])
                  for k, a in cases.items()}
    for fill in KERAS_FILL:
        for interp in ("nearest", "bilinear"):
            t = np.concatenate(list(transforms.values()))
            d[f"t_{fill}_{interp}"] = t
    d["x"] = np.concatenate([x] * len(cases))
    d["translations"] = rng.uniform(-3, 3, (4, 2)).astype(np.float32)
    d["zooms"] = rng.uniform(0.5, 1.5, (4, 2)).astype(np.float32)
    d["angles"] = rng.uniform(-180, 180, 4).astype(np.float32)
    d["contrast_factors"] = rng.uniform(0.5, 1.5, len(d["x"])).astype(np.float32)
    np.savez(folder / "in.npz", **d)
    model = _augmenting_model()  # for test_keras_files_with_augmentation_layers_both_ways
    np.save(folder / "x.npy", _images(6, 12, 12).astype(np.float32))
    model.save(folder / "ours.keras")
    script = folder / "keras_side.py"
    script.write_text(KERAS_SIDE + KERAS_FILES.replace("sys.argv[1]", "sys.argv[3]"))
    env = dict(os.environ, KERAS_BACKEND="numpy", CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, str(script), str(folder / "in.npz"),
                          str(folder / "out.npz"), str(folder)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return d, dict(np.load(folder / "out.npz")), folder, model


@pytest.mark.parametrize("fill", list(KERAS_FILL))
@pytest.mark.parametrize("interp", ["nearest", "bilinear"])
def test_affine_transform_equals_keras(keras_run, fill, interp):
    """Every fill mode and interpolation on translations, rotations and
    zooms: our C kernel = Keras 3's affine_transform = our NumPy reference."""
    d, out, _, _ = keras_run
    t = d[f"t_{fill}_{interp}"]
    ours = np.asarray(A.affine_transform(d["x"], t, interp, fill, 3.5))
    ref = affine_reference(d["x"], t, interp == "bilinear", KERAS_FILL[fill], 3.5)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=2e-3)
    keras = out[f"affine_{fill}_{interp}"]
    if interp == "bilinear":
        np.testing.assert_allclose(ours, keras, rtol=1e-4, atol=2e-2)
    else:  # float32 coordinates (Keras) vs float64 (ours) may round a tie differently
        assert np.mean(ours == keras) > 0.995, np.mean(ours == keras)


def test_matrices_equal_keras(keras_run):
    """random_affine's matrix for a translation, a rotation and a zoom is
    Keras 3's (_get_translation_matrix, _compute_affine_matrix,
    _get_zoom_matrix) for the same parameters."""
    d, out, _, _ = keras_run
    x = np.zeros((4,) + d["x"].shape[1:], np.float32)
    h, w = x.shape[1:3]
    tx, ty = d["translations"][:, 0], d["translations"][:, 1]
    zx, zy = d["zooms"][:, 0], d["zooms"][:, 1]
    theta = np.radians(d["angles"].astype(np.float64))
    for i in range(4):  # the op's formula with a degenerate range = the given parameter
        s = pr.Variable(np.array([1, i], np.int64), trainable=False)
        t = A.random_affine(x[:1], s, height_factor=(ty[i] / h,) * 2,
                            width_factor=(tx[i] / w,) * 2, return_params=True)[1]
        np.testing.assert_allclose(np.asarray(t)[0], out["translation_matrix"][i], atol=1e-5)
        t = A.random_affine(x[:1], s, zoom_height=(zy[i],) * 2, zoom_width=(zx[i],) * 2,
                            return_params=True)[1]
        np.testing.assert_allclose(np.asarray(t)[0], out["zoom_matrix"][i], atol=1e-5)
        t = A.random_affine(x[:1], s, rotation=(theta[i],) * 2, return_params=True)[1]
        np.testing.assert_allclose(np.asarray(t)[0], out["rotation_matrix"][i], atol=1e-4)


def test_contrast_equals_keras(keras_run):
    d, out, _, _ = keras_run
    ours = np.asarray(A.random_contrast(d["x"], A.rng_state(0), (1.0, 1.0)))  # f = 1: clip only
    np.testing.assert_allclose(ours, np.clip(d["x"], 0, 255))
    f = d["contrast_factors"]
    ref = contrast_reference(d["x"], f, 0, 255)
    np.testing.assert_allclose(out["contrast"], ref, rtol=1e-5, atol=1e-3)
    # the layer reads its factor as Keras does
    assert layers.RandomContrast(0.5).factor == tuple(out["contrast_scalar_factor"])
    assert layers.RandomContrast((0.3, 0.4)).factor == tuple(out["contrast_pair_factor"])


# ---- the layers ---------------------------------------------------------------------------

def _images(n=5, h=9, w=8, c=3, dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == np.uint8:
        return rng.integers(0, 256, (n, h, w, c), dtype=np.uint8)
    return rng.standard_normal((n, h, w, c)).astype(dtype)


def _layer_attrs(layer):
    """The random_affine / random_contrast attributes of a layer."""
    ((op, attrs, _),) = layer._stages(None)
    return op, attrs


LAYERS = [
    lambda: layers.RandomTranslation(0.2, (-0.1, 0.3), seed=4),
    lambda: layers.RandomTranslation(0.5, 0.5, fill_mode="constant", interpolation="nearest",
                                     fill_value=9.0, seed=4),
    lambda: layers.RandomRotation(0.25, fill_mode="wrap", seed=5),
    lambda: layers.RandomRotation((-0.1, 0.05), fill_mode="nearest", interpolation="nearest",
                                  seed=5),
    lambda: layers.RandomZoom(0.3, seed=6),
    lambda: layers.RandomZoom((-0.5, -0.2), (0.1, 0.4), fill_mode="constant", seed=6),
    lambda: layers.RandomContrast(0.4, seed=7),
    lambda: layers.RandomContrast((0.5, 0.5), value_range=(0, 1), seed=7),
]


@pytest.mark.parametrize("make", LAYERS, ids=range(len(LAYERS)))
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_layer_equals_reference_on_its_seeded_draws(make, dtype):
    """A layer called twice: each call draws from its seed's Philox streams at
    counters 0 and 1 (recomputed here), the output is the NumPy reference on
    those draws, float32; training=False returns the input."""
    layer = make()
    x = _images(dtype=dtype)
    op, attrs = _layer_attrs(layer)
    seed = int(np.asarray(layer._seed_generator.state)[0])
    for counter in range(2):
        y = np.asarray(layer(x))
        assert y.dtype == np.float32 and y.shape == x.shape
        state = np.array([seed, counter], np.int64)
        if op == "random_affine":
            (t,) = _affine_draws(x, state, **attrs)
            ref = affine_reference(x, t, attrs["interpolation"], attrs["fill_mode"],
                                   attrs["fill_value"])
        else:
            (f,) = _contrast_draws(x, state, **attrs)
            ref = contrast_reference(x, f, attrs["value_min"], attrs["value_max"])
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=2e-3)
    np.testing.assert_array_equal(np.asarray(layer(x, training=False)), x)
    # one (H, W, C) image, as Keras accepts
    assert np.asarray(layer(x[0])).shape == x.shape[1:]


def test_draws_cover_the_keras_ranges():
    """Translations in pixels within height/width * factor, angles within
    360 * factor degrees, zooms within 1 + factor (one draw for both axes
    when width_factor is None), contrast factors in [1 - lower, 1 + upper]:
    each range filled to within 5% at both ends by 2,000 draws."""
    x = np.zeros((2000, 10, 20, 1), np.float32)

    def params(**a):
        return np.asarray(A.random_affine(x, A.rng_state(3), return_params=True, **a)[1])

    def spans(v, lo, hi):
        assert v.min() >= lo - 1e-5 and v.max() <= hi + 1e-5
        assert v.min() < lo + 0.05 * (hi - lo) and v.max() > hi - 0.05 * (hi - lo)

    layer = layers.RandomTranslation((-0.2, 0.1), 0.3)
    t = params(height_factor=(layer.height_lower, layer.height_upper),
               width_factor=(layer.width_lower, layer.width_upper))
    spans(-t[:, 5], -0.2 * 10, 0.1 * 10)
    spans(-t[:, 2], -0.3 * 20, 0.3 * 20)
    rot = layers.RandomRotation(0.1)._ranges()
    t = params(rotation=(rot["rotation_lower"], rot["rotation_upper"]))
    spans(np.degrees(np.arctan2(t[:, 3], t[:, 0])), -36, 36)
    zoom = layers.RandomZoom(0.3)._ranges()
    t = params(zoom_height=(zoom["zoom_height_lower"], zoom["zoom_height_upper"]),
               zoom_width=None)
    spans(t[:, 4], 0.7, 1.3)
    np.testing.assert_array_equal(t[:, 0], t[:, 4])
    f = np.asarray(A.random_contrast(x, A.rng_state(2), (0.6, 1.3), return_params=True)[1])
    spans(f, 0.6, 1.3)


def test_layer_arguments_as_keras():
    with pytest.raises(NotImplementedError, match="fill_mode"):
        layers.RandomRotation(0.1, fill_mode="mirror")
    with pytest.raises(NotImplementedError, match="interpolation"):
        layers.RandomZoom(0.1, interpolation="bicubic")
    with pytest.raises(ValueError, match="height_factor"):
        layers.RandomTranslation(1.5, 0.1)
    with pytest.raises(ValueError, match="height_factor"):
        layers.RandomZoom(-1.0)
    with pytest.raises(ValueError, match="factor"):
        layers.RandomRotation((0.1, 0.2, 0.3))
    with pytest.raises(ValueError, match="factor"):
        layers.RandomContrast(1.5)
    with pytest.raises(ValueError, match="channels_last"):
        layers.RandomTranslation(0.1, 0.1, data_format="channels_first")
    assert layers.RandomRotation(0.2).factor == (-0.2, 0.2)
    assert layers.RandomRotation((0.3, -0.1)).factor == (-0.1, 0.3)
    for layer in (layers.RandomTranslation(0.1, (0.0, 0.2), fill_mode="wrap", seed=3),
                  layers.RandomRotation(0.2, seed=3), layers.RandomZoom(0.1, 0.2, seed=3),
                  layers.RandomContrast(0.3, seed=3)):
        clone = type(layer).from_config(layer.get_config())
        assert _layer_attrs(clone) == _layer_attrs(layer)
        x = _images(2)
        np.testing.assert_array_equal(np.asarray(clone(x)), np.asarray(layer(x)))


def test_gradients_stop_at_the_layers():
    """As Keras's, these layers are not differentiable: a tape gives None."""
    x = pr.Variable(_images(2, dtype=np.float32))
    for layer in (layers.RandomRotation(0.1), layers.RandomContrast(0.2),
                  layers.AlternatingFlip()):
        with pr.GradientTape() as tape:
            y = pr.ops.sum(layer(x))
        assert tape.gradient(y, x) is None


def test_layers_in_the_pipeline_draw_as_eagerly():
    """Mapped over a Dataset (run in C on the worker thread), batch b of pass
    e draws from counter (e << 32) + b: the same images as the op called
    eagerly with that state."""
    x = _images(10, dtype=np.uint8)
    rot = layers.RandomRotation(0.2, seed=11)
    con = layers.RandomContrast(0.3, seed=12)
    ds = Dataset.from_tensor_slices(x).batch(4).map(rot).map(con).prefetch(2)
    for epoch in range(2):
        for b, got in enumerate(ds):
            counter = (epoch << 32) + b
            xb = x[4 * b:4 * b + 4]
            op, attrs = _layer_attrs(rot)
            y = A.random_affine(xb, pr.Variable(np.array([11, counter], np.int64),
                                                trainable=False),
                                interpolation="bilinear", fill_mode="reflect",
                                rotation=(attrs["rotation_lower"], attrs["rotation_upper"]))
            y = A.random_contrast(y, pr.Variable(np.array([12, counter], np.int64),
                                                 trainable=False), (1.0, 1.3))
            np.testing.assert_array_equal(np.asarray(got), np.asarray(y))


# ---- the alternating flip -----------------------------------------------------------------

def _flip_pattern(ds, x, passes):
    """flipped[e, i]: whether image i came out left-right flipped in pass e."""
    flipped = np.full((passes, len(x)), -1)
    for e in range(passes):
        for xb, ib in ds:
            for img, i in zip(np.asarray(xb), np.asarray(ib)):
                if np.array_equal(img, x[i]):
                    flipped[e, i] = 0
                elif np.array_equal(img, x[i][:, ::-1]):
                    flipped[e, i] = 1
    assert (flipped >= 0).all()
    return flipped


def test_alternating_flip_in_the_pipeline():
    """Pass 0 flips about half the images; every later pass flips exactly the
    others, alternately; the pattern belongs to the image (its dataset index)
    whatever the shuffle, batch size and prefetching."""
    x = _images(200, 4, 5, 3)
    idx = np.arange(200, dtype=np.int32)
    patterns = []
    for shuffle_seed, batch, prefetch in [(1, 16, 0), (2, 7, 3)]:
        ds = Dataset.from_tensor_slices((x, idx)).shuffle(200, seed=shuffle_seed).batch(batch)
        ds = ds.map(layers.AlternatingFlip(seed=42)).prefetch(prefetch)
        patterns.append(_flip_pattern(ds, x, 4))
    np.testing.assert_array_equal(patterns[0], patterns[1])
    p = patterns[0]
    assert 70 < p[0].sum() < 130
    for e in range(1, 4):
        np.testing.assert_array_equal(p[e], p[0] ^ (e & 1))
    # another seed, another first draw
    ds = Dataset.from_tensor_slices((x, idx)).batch(50).map(layers.AlternatingFlip(seed=43))
    assert (_flip_pattern(ds, x, 1)[0] != p[0]).any()


def test_alternating_flip_called_on_a_batch():
    """Outside a pipeline, image i of the batch plays element i and each call
    is one pass; training=False is the identity; Python maps refuse it."""
    x = _images(64, 3, 4, 1)
    layer = layers.AlternatingFlip(seed=3)
    first = np.asarray(layer(x))
    second = np.asarray(layer(x))
    f0 = np.array([not np.array_equal(a, b) for a, b in zip(first, x)])
    np.testing.assert_array_equal(second, np.where(f0[:, None, None, None], x, x[:, :, ::-1]))
    np.testing.assert_array_equal(np.asarray(layer(x, training=False)), x)
    vlayer = layers.AlternatingFlip("vertical", seed=3)
    v0, v1 = np.asarray(vlayer(x)), np.asarray(vlayer(x))
    fv = np.array([not np.array_equal(a, b) for a, b in zip(v0, x)])
    np.testing.assert_array_equal(v0, np.where(fv[:, None, None, None], x[:, ::-1], x))
    np.testing.assert_array_equal(v1, np.where(fv[:, None, None, None], x, x[:, ::-1]))
    with pytest.raises(ValueError, match="mode"):
        layers.AlternatingFlip("diagonal")
    ds = Dataset.from_tensor_slices(x).map(lambda a: a).batch(8).map(layer)
    with pytest.raises(NotImplementedError, match="dataset indices"):
        next(iter(ds))


@pytest.mark.parametrize("fill_mode", ["mirror", "reflect", "constant", "wrap", "nearest"])
def test_airbench_recipe_translation_and_flip(fill_mode):
    """cifar_train_dataset(flip="alternate", translate=2, fill_mode=...):
    every image of every pass is normalise(flip^(f_i XOR pass)(a 32x32 window
    of the image padded by 2 as fill_mode says)), each of the 5 x 5 offsets
    occurring (airbench94's batch_crop of the reflect-padded images)."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (60, 32, 32, 3), dtype=np.uint8)
    y = np.arange(60, dtype=np.int32)  # labels = indices, to find each image
    ds = cifar_train_dataset(x, y, batch_size=16, seed=7, flip="alternate", translate=2,
                             fill_mode=fill_mode)
    mean = 255 * np.array(CIFAR10_MEAN)
    std = 255 * np.array(CIFAR10_STD)
    padded = np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0)),
                    mode=NP_PAD_MODES[KERAS_FILL[fill_mode]])
    flips, offsets = np.full((3, 60), -1), set()
    for e in range(3):
        for xb, yb in ds:
            for img, i in zip(np.asarray(xb), np.asarray(yb)):
                raw = img * std + mean
                for f in (0, 1):
                    cand = raw[:, ::-1] if f else raw
                    hits = [(oy, ox) for oy in range(5) for ox in range(5)
                            if np.allclose(cand, padded[i, oy:oy + 32, ox:ox + 32], atol=1e-3)]
                    if hits:
                        flips[e, i] = f
                        offsets.update(hits)
                        break
    assert (flips >= 0).all()
    np.testing.assert_array_equal(flips[1], 1 - flips[0])
    np.testing.assert_array_equal(flips[2], flips[0])
    assert len(offsets) == 25
    with pytest.raises(ValueError, match="flip"):
        cifar_train_dataset(x, y, flip="sometimes")
    with pytest.raises(ValueError, match="fill_mode"):
        cifar_train_dataset(x, y, fill_mode="symmetric")


def test_default_cifar_recipe_unchanged():
    """The defaults are the standard recipe: zero padding by 4, random flip."""
    from pyresnet.data.recipes import cifar_augmentation
    crop, flip, norm = cifar_augmentation(seed=1)
    assert (crop.padding, crop.padding_mode) == ((4, 4), "zero")
    assert type(flip) is layers.RandomFlip
    assert [type(s).__name__ for s in cifar_augmentation(padding=0, flip=None)] \
        == ["Normalization"]


# ---- .keras files with augmentation layers, both ways ------------------------------------

KERAS_FILES = r'''
import os, sys
os.environ["KERAS_BACKEND"] = "numpy"
import numpy as np
import keras
from keras import layers
folder = sys.argv[1]
x = np.load(folder + "/x.npy")
model = keras.saving.load_model(folder + "/ours.keras")
np.save(folder + "/keras_of_ours.npy", model.predict(x, verbose=0))
with open(folder + "/ours_configs.txt", "w") as f:
    f.write(repr([(type(l).__name__, l.get_config()) for l in model.layers]))
theirs = keras.Sequential([
    keras.Input((12, 12, 3)), layers.RandomFlip("horizontal", seed=1),
    layers.RandomRotation(0.1, fill_mode="constant", seed=2),
    layers.RandomTranslation((-0.1, 0.2), 0.1, interpolation="nearest"),
    layers.RandomZoom(0.2, 0.3, fill_mode="wrap"), layers.RandomContrast(0.3),
    layers.Rescaling(1 / 255), layers.Conv2D(4, 3), layers.GlobalAveragePooling2D(),
    layers.Dense(2)])
theirs.save(folder + "/theirs.keras")
np.save(folder + "/theirs.npy", theirs.predict(x, verbose=0))
'''


def _augmenting_model():
    return pr.Sequential([
        layers.Input((12, 12, 3)), layers.RandomFlip("horizontal", seed=1),
        layers.RandomRotation(0.1, fill_mode="constant", seed=2),
        layers.RandomTranslation((-0.1, 0.2), 0.1, interpolation="nearest", seed=3),
        layers.RandomZoom(0.2, 0.3, fill_mode="wrap"), layers.RandomContrast(0.3),
        layers.Rescaling(1 / 255), layers.Conv2D(4, 3), layers.GlobalAveragePooling2D(),
        layers.Dense(2)])


def test_keras_files_with_augmentation_layers_both_ways(keras_run):
    """A model with the augmentation layers saved by pyresnet loads in Keras
    3 with the same layer arguments and logits (the layers are the identity
    at inference), and Keras's own file of such a model loads in pyresnet."""
    _, _, tmp_path, model = keras_run
    x = np.load(tmp_path / "x.npy")
    np.testing.assert_allclose(np.load(tmp_path / "keras_of_ours.npy"),
                               model.predict(x, verbose=0), rtol=1e-5, atol=1e-5)
    configs = (tmp_path / "ours_configs.txt").read_text()
    for text in ("'RandomRotation'", "'factor': (-0.1, 0.1)", "'fill_mode': 'constant'",
                 "'interpolation': 'nearest'", "'height_factor': (-0.1, 0.2)",
                 "'width_factor': 0.3", "'factor': (0.0, 0.3)"):
        assert text in configs.replace("[", "(").replace("]", ")"), text
    theirs = pr.models.load_model(tmp_path / "theirs.keras")
    kinds = [type(layer).__name__ for layer in theirs.layers]
    assert kinds[:5] == ["RandomFlip", "RandomRotation", "RandomTranslation", "RandomZoom",
                         "RandomContrast"]
    rot, tr, zoom, con = theirs.layers[1:5]
    assert (rot.factor, rot.fill_mode, rot.seed) == ((-0.1, 0.1), "constant", 2)
    assert (tr.height_lower, tr.height_upper, tr.interpolation) == (-0.1, 0.2, "nearest")
    assert (zoom.width_lower, zoom.fill_mode) == (-0.3, "wrap")
    assert con.factor == (0.0, 0.3)
    np.testing.assert_allclose(theirs.predict(x, verbose=0), np.load(tmp_path / "theirs.npy"),
                               rtol=1e-5, atol=1e-5)
