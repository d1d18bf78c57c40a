"""``.keras`` files and ``.weights.h5`` files in Keras 3's own format
(issue 29, item 1), so that Keras 3's ``keras.saving.load_model`` opens what
pyresnet saves and pyresnet opens what Keras 3 saves.

A ``.keras`` file written here is a zip archive of

* ``config.json``: Keras 3's config of the model (:func:`keras_config.lower_model`),
  plus two keys Keras does not read: ``pyresnet_config`` (pyresnet's own
  config, so pyresnet rebuilds the very same layers, ``ResidualBlock`` and
  Python layers included) and ``pyresnet_compile_config``;
* ``model.weights.h5``: the weights in Keras's layout (:mod:`.keras_h5`);
* ``metadata.json``.

Loading a file without ``pyresnet_config`` (one Keras 3 wrote) translates
its Keras config (:func:`keras_config.from_keras_config`) and Keras's
``compile_config`` (SGD, Adam, AdamW, RMSprop with a float learning rate,
pyresnet's losses, metrics by name; anything else: the model comes back
uncompiled, with a warning saying why).  pyresnet writes a Keras
``compile_config`` under the same rule, so Keras 3 compiles the model and
reads the optimizer state from ``optimizer/vars``.
"""
import datetime
import io
import json
import os
import struct
import warnings
import zipfile
import zlib

import numpy as np

from ..utils.atomic import atomic_write
from .saving_lib import MAX_JSON
from . import keras_config, keras_h5, serialization

CONFIG = "config.json"
METADATA = "metadata.json"
H5_WEIGHTS = "model.weights.h5"
FORMAT_VERSION = 2


def can_save(model):
    """Whether ``model.save`` writes Keras 3's format: h5py is installed and
    the model is functional or Sequential (a subclassed model has no layer
    graph Keras could rebuild)."""
    return keras_h5.h5py_or_none() is not None and getattr(model, "_graph", None) is not None


def save_keras_model(model, name, compile_config):
    """Write ``model`` to ``name`` in Keras 3's format, atomically (temporary
    file, fsync, rename).

    Args:
        compile_config: pyresnet's compile settings (or None).
    Raises:
        ValueError: for a config value that cannot be saved (naming the layer).
        ImportError: without h5py.
    """
    from .. import __version__  # noqa: PLC0415
    lowered = keras_config.lower_model(model)
    config = dict(lowered.item)
    config["compile_config"] = keras_config.keras_compile_config(compile_config)
    config["pyresnet_config"] = serialization.serialize_layer(model)
    config["pyresnet_compile_config"] = compile_config
    optimizer = []
    if compile_config is not None or getattr(model, "optimizer", None) is not None:
        optimizer = keras_h5.optimizer_variables(model, lowered.trainable_variables())
    weights = keras_h5.h5_bytes(lowered, extras_of(model, lowered), optimizer)
    metadata = {"pyresnet_version": __version__,
                "format_version": FORMAT_VERSION, "keras_loadable": lowered.keras,
                "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}
    from .saving_lib import write_archive  # noqa: PLC0415
    write_archive(name, metadata, config, H5_WEIGHTS, weights)


def extras_of(model, lowered):
    """``[(weight path, Variable)]`` of the model's state that Keras's layout
    has no place for (random layers' generator states of Keras layers)."""
    from .saving_lib import weight_paths  # noqa: PLC0415
    covered = {id(v) for _, vs in lowered.groups for v in vs}
    return [(p, v) for p, v in weight_paths(model) if id(v) not in covered]


def is_h5_archive(name):
    """Whether the ``.keras`` file ``name`` holds ``model.weights.h5``
    (False for pyresnet's older npz files and for anything unreadable)."""
    try:
        with zipfile.ZipFile(name) as z:
            return H5_WEIGHTS in z.namelist()
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError,
            struct.error, NotImplementedError, OverflowError, KeyError):
        return False


class _Archive:
    """An open Keras-format ``.keras`` archive: its config, and its weights
    entry read on demand with a size bound (so a small zip cannot inflate
    to gigabytes)."""

    def __init__(self, name):
        self.name = name
        with open(name, "rb") as f:
            data = f.read()
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            names = set(self.zip.namelist())
            missing = [n for n in (CONFIG, H5_WEIGHTS) if n not in names]
            if missing:
                raise ValueError(f"{name} is not a valid .keras file: it lacks "
                                 f"{', '.join(missing)}")
            if self.zip.getinfo(CONFIG).file_size > MAX_JSON:
                raise ValueError(f"{name}: config.json is implausibly large")
            text = self.zip.read(CONFIG)
        except _ZIP_ERRORS as e:
            raise ValueError(f"{name} is not a valid .keras file (not a zip archive, or "
                             f"truncated or corrupted: {type(e).__name__}: {e})") from None
        try:
            self.config = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{name}: config.json is not valid JSON ({e})") from None
        if not isinstance(self.config, dict):
            raise ValueError(f"{name}: config.json must hold a JSON object")

    def weights(self, limit=None):
        """The bytes of ``model.weights.h5``.

        Raises:
            ValueError: when it is larger than ``limit`` bytes, or corrupted.
        """
        try:
            size = self.zip.getinfo(H5_WEIGHTS).file_size
            if limit is not None and size > limit:
                raise ValueError(f"{self.name}: {H5_WEIGHTS} holds {size} bytes, more than "
                                 f"the model's weights can need ({limit})")
            return self.zip.read(H5_WEIGHTS)
        except _ZIP_ERRORS as e:
            raise ValueError(f"{self.name} is not a valid .keras file (truncated or corrupted: "
                             f"{type(e).__name__}: {e})") from None


_ZIP_ERRORS = (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError,
               struct.error, NotImplementedError, OverflowError, KeyError)


def weights_bound(lowered, extras, optimizer):
    """An upper bound (bytes) on an honest ``model.weights.h5`` for this
    model: every array (twice, for an optimizer slot per weight and more),
    plus HDF5's per-object overhead for every group and dataset."""
    arrays = [v for _, vs in lowered.groups for v in vs] + [v for _, v in extras]
    nbytes = sum(int(np.prod(v.shape)) * 8 for v in arrays)
    return 4 * nbytes + 16384 * (len(arrays) + len(lowered.groups) + len(optimizer)
                                 + 4 * len(lowered.labels)) + 4 * 2**20


def read_h5_archive(name):
    """(config dict, weights bytes) of a Keras-format ``.keras`` file.

    Raises:
        ValueError: for a truncated, corrupted or incomplete archive.
    """
    archive = _Archive(name)
    return archive.config, archive.weights()


def load_keras_model(name, custom_objects=None, compile=True):
    """A model from a Keras-format ``.keras`` file (written by pyresnet or
    by Keras 3); see :func:`pyresnet.saving.load_model`.

    Raises:
        ValueError: for a corrupted file, a layer or argument pyresnet does
            not support (named), weights that do not fit (named).
        ImportError: without h5py.
    """
    from .saving_lib import model_from_config  # noqa: PLC0415
    archive = _Archive(name)
    config = archive.config
    ours = config.get("pyresnet_config")
    compile_cfg = config.get("pyresnet_compile_config") if ours is not None else None
    if ours is None and not keras_config.is_keras_written(config):
        ours = config  # pyresnet's own config beside Keras-layout weights
        compile_cfg = config.get("compile_config")
    elif ours is None:
        try:
            ours = keras_config.from_keras_config(config, name)
        except (KeyError, TypeError, AttributeError, IndexError, RecursionError) as e:
            raise ValueError(f"{name}: the Keras config does not describe a model pyresnet "
                             f"can rebuild ({type(e).__name__}: {e})") from None
        if compile and config.get("compile_config"):
            compile_cfg, reason = keras_config.from_keras_compile_config(
                config["compile_config"])
            if compile_cfg is None:
                warnings.warn(f"{name}: Keras's compile settings use {reason}, which pyresnet "
                              "does not have; the model is returned uncompiled: compile it "
                              "again", stacklevel=3)
    model = model_from_config(ours, custom_objects, where=name)
    if compile and compile_cfg is not None:
        try:
            serialization.compile_from_config(model, compile_cfg)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{name}: malformed compile_config ({type(e).__name__}: "
                             f"{e})") from None
    lowered = keras_config.lower_model(model)
    optimizer = keras_h5.optimizer_variables(model, lowered.trainable_variables()) \
        if compile and compile_cfg is not None else []
    limit = weights_bound(lowered, extras_of(model, lowered), optimizer)
    reader = keras_h5.H5Reader(archive.weights(limit), f"{name} ({H5_WEIGHTS})")
    try:
        plan = keras_h5.plan_weights(reader, lowered, lowered.label,
                                     extras_of(model, lowered))
        opt_plan = None
        if compile and compile_cfg is not None:
            opt_plan = keras_h5.plan_optimizer(reader, model, lowered.trainable_variables())
            if opt_plan is None and reader.group_size(keras_h5.OPTIMIZER_GROUP):
                warnings.warn(f"{name}: the saved optimizer state does not match the "
                              "optimizer; it starts fresh", stacklevel=3)
    finally:
        reader.close()
    for variable, value in plan + (opt_plan or []):
        variable.assign(value)
    if opt_plan:
        model.optimizer.built = True
    return model


def save_h5_weights(model, name):
    """Write the model's weights to ``name`` (``.weights.h5``) in Keras 3's
    layout, atomically.

    Raises:
        ImportError: without h5py.
        ValueError: for a model Keras's layout cannot describe (subclassed).
    """
    try:
        lowered = keras_config.lower_model(model)
    except keras_config.NotKeras as e:
        raise ValueError(f"save_weights: {e}; save to a .weights.npz file instead") from None
    data = keras_h5.h5_bytes(lowered, extras_of(model, lowered))
    with atomic_write(name, "wb") as f:
        f.write(data)


def load_h5_weights(model, name):
    """Assign the weights of a Keras-layout ``.weights.h5`` file (Keras 3's
    ``save_weights``, or :func:`save_h5_weights`) or of a Keras-format
    ``.keras`` file to ``model``; everything is checked first.

    Raises:
        FileNotFoundError, ValueError (naming the layer group and shapes),
        ImportError without h5py.
    """
    try:
        lowered = keras_config.lower_model(model)
    except keras_config.NotKeras as e:
        raise ValueError(f"load_weights: {e}; Keras's .h5 layout needs a functional or "
                         "Sequential model") from None
    if str(name).endswith(".keras"):
        limit = weights_bound(lowered, extras_of(model, lowered),
                              keras_h5.optimizer_variables(model,
                                                           lowered.trainable_variables()))
        data = _Archive(name).weights(limit)
        where = f"{name} ({H5_WEIGHTS})"
    else:
        if not os.path.isfile(name):
            raise FileNotFoundError(f"load_weights: no file {name!r}")
        with open(name, "rb") as f:
            data = f.read()
        where = name
    reader = keras_h5.H5Reader(data, where)
    try:
        plan = keras_h5.plan_weights(reader, lowered, lowered.label,
                                     extras_of(model, lowered))
    finally:
        reader.close()
    for variable, value in plan:
        variable.assign(value)
