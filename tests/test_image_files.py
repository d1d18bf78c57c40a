"""Image files (issue 29 item 4): ``utils.load_img``, ``img_to_array``,
``array_to_img``, ``save_img`` and ``image_dataset_from_directory``.

* Against Keras 3 itself (numpy backend, one subprocess; its image utilities
  are Pillow too): the same arrays from ``array_to_img`` (scaled or not, 1,
  3, 4 channels), ``load_img`` (colour modes, target_size, interpolation,
  keep_aspect_ratio), and the same file order, class names and
  training/validation split as Keras's ``index_directory`` and
  ``get_training_or_validation_split`` for a seed.
* ``image_dataset_from_directory``'s images are the decoded files resized
  as ``tf.image.resize`` (bilinear half-pixel, tests/test_augment.py's
  reference; nearest; crop/pad to aspect ratio), its labels follow
  label_mode, batches and subsets are as documented, bad arguments raise.
"""
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import pyresnet as pr
from pyresnet import utils
from test_augment import resize_reference

KERAS_SIDE = r'''
import json, os, sys
os.environ["KERAS_BACKEND"] = "numpy"
import numpy as np
import keras
from keras.src.utils import dataset_utils
folder = sys.argv[1]
d = dict(np.load(folder + "/in.npz"))
out = {}
for k in ("rgb", "grey", "rgba", "big"):
    out["a2i_" + k] = np.asarray(keras.utils.array_to_img(d[k]))
    out["a2i_noscale_" + k] = np.asarray(keras.utils.array_to_img(d[k], scale=False))
for mode in ("rgb", "rgba", "grayscale"):
    for interp in ("nearest", "bilinear", "bicubic"):
        for keep in (False, True):
            img = keras.utils.load_img(folder + "/photo.png", color_mode=mode,
                                       target_size=(7, 13), interpolation=interp,
                                       keep_aspect_ratio=keep)
            out[f"load_{mode}_{interp}_{keep}"] = keras.utils.img_to_array(img)
    out[f"load_{mode}"] = keras.utils.img_to_array(
        keras.utils.load_img(folder + "/photo.png", color_mode=mode))
paths, labels, names = dataset_utils.index_directory(
    folder + "/tree", "inferred", formats=(".bmp", ".gif", ".jpeg", ".jpg", ".png"),
    shuffle=True, seed=1337, verbose=False)
tr = dataset_utils.get_training_or_validation_split(paths, labels, 0.3, "training")
va = dataset_utils.get_training_or_validation_split(paths, labels, 0.3, "validation")
json.dump({"train": [list(map(str, tr[0])), [int(v) for v in tr[1]]],
           "val": [list(map(str, va[0])), [int(v) for v in va[1]]], "names": names},
          open(folder + "/index.json", "w"))
np.savez(folder + "/out.npz", **out)
'''


def _photo(rng, h=20, w=30):
    """A smooth RGB test image (so resizing is not all noise)."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([yy * 255 / h, xx * 255 / w, (yy + xx) * 127 / (h + w)], -1)
    return np.clip(base + rng.integers(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)


def _tree(root, rng, counts=(("cats", 7), ("dogs", 5), ("zebras", 4))):
    """Class folders of PNG files (one nested one level deeper, and files to skip)."""
    files = {}
    for name, n in counts:
        for i in range(n):
            sub = os.path.join(root, name, "deep") if i == 0 else os.path.join(root, name)
            os.makedirs(sub, exist_ok=True)
            x = _photo(rng, int(rng.integers(8, 20)), int(rng.integers(8, 20)))
            path = os.path.join(sub, f"{i:03d}.png")
            Image.fromarray(x).save(path)
            files[path] = x
        with open(os.path.join(root, name, "notes.txt"), "w") as f:
            f.write("not an image")
    os.makedirs(os.path.join(root, ".hidden"), exist_ok=True)
    return files


@pytest.fixture(scope="module")
def keras_images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keras_images")
    rng = np.random.default_rng(0)
    d = {"rgb": rng.uniform(-3, 7, (5, 6, 3)).astype(np.float32),
         "grey": rng.uniform(0, 200, (5, 6, 1)).astype(np.float32),
         "rgba": rng.uniform(0, 1, (5, 6, 4)).astype(np.float32),
         "big": rng.uniform(0, 1000, (5, 6, 1)).astype(np.float32)}
    np.savez(folder / "in.npz", **d)
    Image.fromarray(_photo(rng)).save(folder / "photo.png")
    files = _tree(str(folder / "tree"), rng)
    (folder / "keras_side.py").write_text(KERAS_SIDE)
    env = dict(os.environ, KERAS_BACKEND="numpy")
    run = subprocess.run([sys.executable, str(folder / "keras_side.py"), str(folder)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    import json
    return folder, d, files, dict(np.load(folder / "out.npz")), \
        json.loads((folder / "index.json").read_text())


def test_array_to_img_and_load_img_equal_keras(keras_images):
    folder, d, _, out, _ = keras_images
    for k in ("rgb", "grey", "rgba", "big"):
        np.testing.assert_array_equal(np.asarray(utils.array_to_img(d[k])), out["a2i_" + k])
        np.testing.assert_array_equal(np.asarray(utils.array_to_img(d[k], scale=False)),
                                      out["a2i_noscale_" + k])
    assert utils.array_to_img(d["big"], scale=False).mode == "I"
    for mode in ("rgb", "rgba", "grayscale"):
        for interp in ("nearest", "bilinear", "bicubic"):
            for keep in (False, True):
                img = utils.load_img(folder / "photo.png", color_mode=mode, target_size=(7, 13),
                                     interpolation=interp, keep_aspect_ratio=keep)
                got = utils.img_to_array(img)
                assert got.dtype == np.float32 and got.shape[:2] == (7, 13)
                np.testing.assert_array_equal(got, out[f"load_{mode}_{interp}_{keep}"])
        np.testing.assert_array_equal(
            utils.img_to_array(utils.load_img(str(folder / "photo.png"), color_mode=mode)),
            out[f"load_{mode}"])


def test_index_order_and_split_equal_keras(keras_images):
    """Same shuffled file order, labels, class names and split as Keras for
    seed 1337 (int(0.3 * 16) = 4 validation files: Keras floors)."""
    folder, _, _, _, index = keras_images
    train, val = utils.image_dataset_from_directory(
        folder / "tree", validation_split=0.3, subset="both", seed=1337, image_size=(8, 8),
        batch_size=4, verbose=False)
    assert train.class_names == index["names"] == ["cats", "dogs", "zebras"]
    assert train.file_paths == index["train"][0]
    assert val.file_paths == index["val"][0]
    assert len(val.file_paths) == 4 and len(train.file_paths) == 12
    labels = np.concatenate([np.asarray(y) for _, y in val])
    np.testing.assert_array_equal(labels, index["val"][1])  # validation: not reshuffled


def test_save_and_load_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (9, 11, 3)).astype(np.float32)
    utils.save_img(tmp_path / "a.png", x, scale=False)
    np.testing.assert_array_equal(utils.img_to_array(utils.load_img(tmp_path / "a.png")), x)
    grey = rng.integers(0, 256, (4, 5, 1)).astype(np.float32)
    utils.save_img(str(tmp_path / "g.png"), grey, scale=False)
    np.testing.assert_array_equal(
        utils.img_to_array(utils.load_img(tmp_path / "g.png", color_mode="grayscale")), grey)
    utils.save_img(tmp_path / "j.jpg", x, quality=95)  # "jpg" is JPEG; kwargs reach Pillow
    assert Image.open(tmp_path / "j.jpg").format == "JPEG"
    with pytest.warns(UserWarning, match="alpha"):
        utils.save_img(tmp_path / "rgba.jpeg", rng.uniform(0, 1, (4, 4, 4)))
    buffer = io.BytesIO()
    utils.save_img(buffer, x, file_format="png", scale=False)
    np.testing.assert_array_equal(utils.img_to_array(utils.load_img(io.BytesIO(buffer.getvalue()))), x)
    assert sorted(os.listdir(tmp_path)) == ["a.png", "g.png", "j.jpg", "rgba.jpeg"]  # no temps
    with pytest.raises(ValueError, match="rank 3"):
        utils.array_to_img(x[None])
    with pytest.raises(ValueError, match="channels"):
        utils.array_to_img(x[..., :2])
    with pytest.raises(ValueError, match="color_mode"):
        utils.load_img(tmp_path / "a.png", color_mode="cmyk")
    with pytest.raises(TypeError, match="path"):
        utils.load_img(12)
    with pytest.raises(ValueError, match="channels_last"):
        utils.img_to_array(Image.open(tmp_path / "a.png"), data_format="channels_first")


def test_without_pillow_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ImportError, match=r"pyresnet\[images\]"):
        utils.array_to_img(np.zeros((2, 2, 3)))


@pytest.fixture
def tree(tmp_path):
    return str(tmp_path), _tree(str(tmp_path), np.random.default_rng(3))


def _all(ds):
    xs, ys = zip(*[(np.asarray(x), np.asarray(y)) for x, y in ds])
    return np.concatenate(xs), np.concatenate(ys)


def test_images_are_the_files_resized_as_tf(tree, capsys):
    """Bilinear: each image is its decoded file resized with half-pixel
    centres and no antialiasing (tf.image.resize); nearest: source index
    floor((i + 0.5) in / out); labels by folder; printed counts as Keras."""
    root, files = tree
    ds = utils.image_dataset_from_directory(root, image_size=(12, 10), batch_size=5, seed=4)
    assert capsys.readouterr().out == "Found 16 files belonging to 3 classes.\n"
    assert isinstance(ds, pr.data.Dataset) and len(ds) == 4
    x, y = _all(ds)
    assert x.dtype == np.float32 and x.shape == (16, 12, 10, 3) and y.dtype == np.int32
    by_path = dict(zip(ds.file_paths, range(16)))
    assert set(by_path) == set(files)
    seen = 0
    for img, label in zip(x, y):  # shuffled: find each image among the references
        match = [p for p, src in files.items()
                 if np.array_equal(img, resize_reference(src[None], [(0, 0) + src.shape[:2]],
                                                         12, 10)[0])]
        assert len(match) == 1
        assert ds.class_names[label] == os.path.relpath(match[0], root).split(os.sep)[0]
        seen += 1
    assert seen == 16
    near = utils.image_dataset_from_directory(root, image_size=(7, 9), batch_size=None,
                                              shuffle=False, interpolation="nearest",
                                              verbose=False)
    for (img, _), path in zip(near, near.file_paths):
        src = files[path]
        r = np.minimum(((np.arange(7) + 0.5) * src.shape[0] / 7).astype(int), src.shape[0] - 1)
        c = np.minimum(((np.arange(9) + 0.5) * src.shape[1] / 9).astype(int), src.shape[1] - 1)
        np.testing.assert_array_equal(np.asarray(img), src[r][:, c])


def test_label_modes_subsets_and_aspect_ratio(tree, capsys):
    root, files = tree
    kw = dict(image_size=(6, 6), seed=9, verbose=False)
    _, y = _all(utils.image_dataset_from_directory(root, label_mode="categorical", **kw))
    assert y.dtype == np.float32 and y.shape == (16, 3)
    np.testing.assert_array_equal(np.sort(y.argmax(1)), [0] * 7 + [1] * 5 + [2] * 4)
    two = utils.image_dataset_from_directory(root, label_mode="binary",
                                             class_names=["zebras", "cats"], **kw)
    _, y = _all(two)
    assert two.class_names == ["zebras", "cats"] and y.shape == (11, 1)
    np.testing.assert_array_equal(np.sort(y[:, 0]), [0] * 4 + [1] * 7)  # zebras are 0
    only = utils.image_dataset_from_directory(root, label_mode=None, batch_size=3, **kw)
    assert np.asarray(next(iter(only))).shape == (3, 6, 6, 3)
    grey = utils.image_dataset_from_directory(root, color_mode="grayscale", batch_size=16, **kw)
    assert np.asarray(next(iter(grey))[0]).shape == (16, 6, 6, 1)
    given = utils.image_dataset_from_directory(root, labels=list(range(16)), shuffle=False,
                                               batch_size=16, image_size=(4, 4), verbose=False)
    assert given.class_names == [str(i) for i in range(16)]
    train = utils.image_dataset_from_directory(root, validation_split=0.2, subset="training",
                                               image_size=(4, 4), seed=2, batch_size=2)
    val = utils.image_dataset_from_directory(root, validation_split=0.2, subset="validation",
                                             image_size=(4, 4), seed=2, batch_size=2)
    assert capsys.readouterr().out.splitlines() == [
        "Found 16 files belonging to 3 classes.", "Using 13 files for training.",
        "Found 16 files belonging to 3 classes.", "Using 3 files for validation."]
    assert not set(train.file_paths) & set(val.file_paths)
    assert len(train.file_paths) + len(val.file_paths) == 16
    # the training set is reshuffled every pass, the same images
    a, b = _all(train)[0], _all(train)[0]
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(np.sort(a.reshape(13, -1), 0), np.sort(b.reshape(13, -1), 0))
    # aspect ratio: crop the central box, or pad with zeros around the resized image
    path = sorted(files)[0]
    src = files[path]
    crop = utils.smart_resize(src, (5, 10))
    h, w = src.shape[:2]
    ch, cw = max(min(h, int(w * 5 / 10)), 1), max(min(w, int(h * 10 / 5)), 1)
    top, left = int((h - ch) / 2), int((w - cw) / 2)
    np.testing.assert_array_equal(crop, resize_reference(
        src[None], [(top, left, ch, cw)], 5, 10)[0])
    padded = utils.image_dataset_from_directory(os.path.dirname(path), labels=None,
                                                image_size=(20, 6), pad_to_aspect_ratio=True,
                                                shuffle=False, batch_size=None, verbose=False)
    img = np.asarray(next(iter(padded)))
    ratio = max(w / 6, h / 20)
    rh, rw = int(h / ratio), int(w / ratio)
    assert rw == 6 and (img[:(20 - rh) // 2] == 0).all() and (img[(20 - rh) // 2 + rh:] == 0).all()


@pytest.mark.parametrize("kwargs,match", [
    (dict(label_mode="sparse"), "label_mode"),
    (dict(color_mode="cmyk"), "color_mode"),
    (dict(image_size=(0, 4)), "image_size"),
    (dict(validation_split=1.5, subset="training", seed=1), "validation_split"),
    (dict(validation_split=0.2), "subset"),
    (dict(validation_split=0.2, subset="training"), "seed"),
    (dict(subset="testing", validation_split=0.2, seed=1), "subset"),
    (dict(label_mode="binary"), "2 classes"),
    (dict(class_names=["cats", "lions"]), "class_names"),
    (dict(labels=[0, 1]), "labels for 16"),
    (dict(labels=[0] * 16, class_names=["a"]), "class_names"),
    (dict(crop_to_aspect_ratio=True, pad_to_aspect_ratio=True), "only one"),
    (dict(format="grain"), "format"),
])
def test_bad_arguments(tree, kwargs, match):
    root, _ = tree
    with pytest.raises(ValueError, match=match):
        utils.image_dataset_from_directory(root, verbose=False, **kwargs)


def test_empty_or_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="no images"):
        utils.image_dataset_from_directory(tmp_path, verbose=False)
    with pytest.raises(ValueError, match="not a directory"):
        utils.image_dataset_from_directory(tmp_path / "nope", verbose=False)
    with pytest.raises(NotImplementedError, match="bicubic"):
        utils.image_dataset_from_directory(tmp_path, interpolation="bicubic", verbose=False)
