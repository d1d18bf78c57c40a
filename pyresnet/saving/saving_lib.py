"""The ``.keras`` file (Keras 3's ``saving_lib``) and weight files.

pyresnet's own ``.keras`` format (``weights_format="npz"``; Keras 3's format, the
default with h5py, is :mod:`.keras_saving`'s) is a zip archive holding

* ``metadata.json``: ``{"pyresnet_version", "date_saved", "format_version"}``;
* ``config.json``: the model (:func:`pyresnet.saving.serialization.serialize_layer`)
  plus ``"compile_config"`` (the ``compile`` arguments, when they can be saved);
* ``model.weights.npz``: every weight, random-layer state and optimizer
  variable, keyed by its path (see :func:`weight_paths`).

Weights are a NumPy ``.npz`` archive (uncompressed ``.npy`` entries):
NumPy is already pyresnet's dependency, the format is documented and read
by any NumPy, and it is read here entry by entry with the header checked
against the entry's size before any data is touched (no pickles, no object
arrays, no allocation a corrupted header could make huge).  HDF5 (Keras's
choice) would add h5py and a large C parser of untrusted files.

``model.weights.npz`` paths follow Keras 3's object walk: a functional or
Sequential model's layers are the container ``layers``, named by class and
position (``layers/dense``, ``layers/dense_1``: not by the layers'
auto-generated names, so two instances of one architecture match); a
layer's sublayers by attribute name (``layers/residual_block/conv1``); its
own weights by weight name (``.../kernel``); a random layer's generator
state ``.../seed_generator/state``; the optimizer's ``optimizer/iterations``,
``optimizer/learning_rate`` and ``optimizer/velocity/<weight path>``.
"""
import contextlib
import datetime
import io
import json
import os
import struct
import warnings
import zipfile
import zlib

import numpy as np

from ..tensor import Variable
from ..utils.atomic import atomic_write
from ..utils.naming import to_snake_case
from . import serialization

CONFIG = "config.json"
METADATA = "metadata.json"
WEIGHTS = "model.weights.npz"
FORMAT_VERSION = 1
MAX_JSON = 64 * 2**20  # bytes: a config larger than this is not ours
_DTYPES = ("float32", "int64", "int32", "uint8")


# ---- the weight paths ------------------------------------------------------------------

def _own_variables(layer):
    own = layer._trainable_variables + layer._non_trainable_variables
    own = own + [v for k, v in vars(layer).items() if isinstance(v, Variable) and k != "_init_args"]
    return own


def _children(layer):
    """(relative path, child layer) pairs, Keras 3's walk."""
    from ..layers.layer import Layer  # noqa: PLC0415
    from ..models.model import Model  # noqa: PLC0415
    if isinstance(layer, Model) and layer._graph is not None:
        return _container("layers", layer.layers)
    found = []
    for key, value in list(vars(layer).items()):
        if key in ("_init_args", "_functional_layers", "_stack") or key.startswith("__"):
            continue
        if isinstance(value, Layer) and value is not layer:
            found.append((key, value))
        elif isinstance(value, (list, tuple, dict)):
            items = list(value.values()) if isinstance(value, dict) else list(value)
            items = [v for v in items if isinstance(v, Layer) and v is not layer]
            found += _container(key, items)
    return found


def _container(prefix, items):
    used, found = {}, []
    for item in items:
        name = to_snake_case(type(item).__name__)
        n = used.get(name, -1) + 1
        used[name] = n
        found.append((f"{prefix}/{name}" if n == 0 else f"{prefix}/{name}_{n}", item))
    return found


def weight_paths(model):
    """``[(path, Variable)]``: every weight of ``model`` (trainable or not)
    and every random layer's generator state, each once, in walk order."""
    out, seen_vars, seen_layers = [], set(), set()

    def walk(layer, path):
        if id(layer) in seen_layers:
            return
        seen_layers.add(id(layer))
        names = set()
        for v in _own_variables(layer):
            if id(v) in seen_vars:
                continue
            seen_vars.add(id(v))
            name, k = str(v.name), 1
            while name in names:
                name, k = f"{v.name}_{k}", k + 1
            names.add(name)
            out.append((f"{path}/{name}" if path else name, v))
        generator = getattr(layer, "_seed_generator", None)
        state = getattr(generator, "state", None)
        if isinstance(state, Variable) and id(state) not in seen_vars:
            seen_vars.add(id(state))
            out.append((f"{path}/seed_generator/state" if path else "seed_generator/state",
                        state))
        for rel, child in _children(layer):
            walk(child, f"{path}/{rel}" if path else rel)

    walk(model, "")
    return out


def optimizer_paths(model, paths=None):
    """``[(path, Variable)]`` of the compiled optimizer's state: iterations,
    the learning rate (a float rate's Variable; a schedule is in the compile
    config and follows from iterations), and each slot of each weight as
    ``optimizer/<slot name>/<weight path>`` (``velocity``, ``momentum``,
    ...)."""
    opt = getattr(model, "optimizer", None)
    if opt is None:
        return []
    by_id = {id(v): p for p, v in (paths if paths is not None else weight_paths(model))}
    out = [("optimizer/iterations", opt.iterations)]
    if isinstance(opt._learning_rate, Variable):
        out.append(("optimizer/learning_rate", opt._learning_rate))
    for slot_name, variable, slot in opt.slot_variables():
        if id(variable) not in by_id:
            raise ValueError(f'Model "{model.name}": its optimizer has a slot for variable '
                             f"{getattr(variable, 'path', variable.name)}, which is not one of "
                             "the model's weights; it cannot be saved with the model")
        out.append((f"optimizer/{slot_name}/{by_id[id(variable)]}", slot))
    return out


# ---- npz bytes ----------------------------------------------------------------------------

def npz_bytes(entries):
    """``entries`` (path -> array) as the bytes of an uncompressed .npz."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        for path, array in entries.items():
            array = np.asarray(array, order="C")  # (ascontiguousarray makes 0-d 1-d)
            with z.open(path + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)
    return buffer.getvalue()


_CHUNK = 2**20  # bytes read at a time from an entry
_ENTRY_SLACK = 1024  # bytes of .npy header and zip records an entry may add to its data


def expected_entries(model, optimizer=False):
    """What a weights file for ``model`` may hold: ``{path: bytes}``, the
    data size of each weight (and, with ``optimizer``, of the compiled
    optimizer's iterations, learning rate and every slot it may have).
    Readers check the sizes that files declare against it before they
    inflate or allocate anything."""
    paths = weight_paths(model)
    out = {p: v.nbytes for p, v in paths}
    opt = getattr(model, "optimizer", None)
    if optimizer and opt is not None:
        out["optimizer/iterations"] = opt.iterations.nbytes
        if isinstance(opt._learning_rate, Variable):
            out["optimizer/learning_rate"] = opt._learning_rate.nbytes
        for p, v in paths:
            if v.trainable:
                out.update({f"optimizer/{slot}/{p}": 4 * v.size for slot in opt._slot_names})
    return out


def npz_limit(expected):
    """The most bytes an uncompressed ``.npz`` of the ``expected`` entries
    (see :func:`expected_entries`) can take, records and headers included."""
    return sum(n + _ENTRY_SLACK + 2 * len(k) for k, n in expected.items()) + 64 * 2**10


def check_entry_size(info, limit, where):
    """Raise ValueError (naming ``where`` and the entry) when the zip entry
    ``info`` declares more than ``limit`` bytes once inflated."""
    if info.file_size > limit:
        raise ValueError(f"{where}: entry {info.filename!r} declares {info.file_size} bytes "
                         f"once inflated, more than the {limit} bytes it can take here; "
                         "not read")


def read_npz(source, where, expected=None):
    """Path -> array from an .npz (a path or a seekable binary file), each
    entry checked before its data is read: a ``.npy`` v1-v3 header, a
    numeric dtype, a C-order shape whose size fills the entry exactly and,
    when ``expected`` (:func:`expected_entries`) is given, a path in it
    whose data size the entry does not exceed.  Entries under
    ``optimizer/`` that ``expected`` lacks are skipped.  The data are read
    in chunks of ``_CHUNK`` bytes straight into the result, so memory stays
    within the declared (and checked) sizes.

    Raises:
        ValueError: naming ``where`` and the entry, for anything else.
    """
    arrays = {}
    try:
        with zipfile.ZipFile(source) as z:
            for info in z.infolist():
                if not info.filename.endswith(".npy"):
                    raise ValueError(f"entry {info.filename!r} is not a .npy array")
                key = info.filename[:-4]
                if expected is not None and key not in expected:
                    if key.startswith("optimizer/"):
                        continue
                    raise ValueError(f"entry {key!r} matches no weight of the model")
                with z.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version in ((2, 0), (3, 0)):
                        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        raise ValueError(f"entry {key!r}: .npy version {version}")
                    if dtype.hasobject or dtype.name not in _DTYPES or fortran:
                        raise ValueError(f"entry {key!r}: dtype {dtype} "
                                         f"{'(Fortran order) ' if fortran else ''}is not one "
                                         f"of {list(_DTYPES)} in C order")
                    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
                    nbytes = count * dtype.itemsize
                    if nbytes != info.file_size - f.tell() or count < 0:
                        raise ValueError(f"entry {key!r}: shape {shape} of {dtype} needs "
                                         f"{nbytes} bytes, the entry holds "
                                         f"{info.file_size - f.tell()}")
                    if expected is not None and nbytes > expected[key]:
                        raise ValueError(f"entry {key!r}: shape {shape} of {dtype} needs "
                                         f"{nbytes} bytes, more than the model's weight "
                                         f"({expected[key]} bytes); not read")
                    raw = np.empty(nbytes, np.uint8)
                    view = memoryview(raw)
                    for at in range(0, nbytes, _CHUNK):
                        piece = view[at:at + _CHUNK]
                        if f.readinto(piece) != len(piece):
                            raise ValueError(f"entry {key!r} is truncated")
                arrays[key] = raw.view(dtype).reshape(shape).astype(dtype.newbyteorder("="),
                                                                    copy=False)
    except ValueError as e:
        raise ValueError(f"{where} is not a valid weights file: {e}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError,
            struct.error, KeyError, SyntaxError, TypeError, NotImplementedError,
            OverflowError) as e:
        raise ValueError(f"{where} is not a valid weights file (truncated or corrupted: "
                         f"{type(e).__name__}: {e})") from None
    return arrays


# ---- assigning -------------------------------------------------------------------------------

def assign_checked(targets, arrays, where, strict=True):
    """Assign ``arrays[path]`` to each ``(path, Variable)`` of ``targets``
    after checking them all: a missing or unexpected path, a shape or a
    dtype that differs raises ValueError (naming the weight and both shapes)
    and then nothing is assigned."""
    wanted = dict(targets)
    missing = [p for p in wanted if p not in arrays]
    extra = [p for p in arrays if p not in wanted]
    if strict and (missing or extra):
        parts = []
        if missing:
            parts.append(f"the model's weights {missing[:10]} are not in the file")
        if extra:
            parts.append(f"the file's entries {extra[:10]} match no weight of the model")
        raise ValueError(f"{where}: the weights do not match the model: {'; '.join(parts)}. "
                         "No weight was changed")
    plan = []
    for path, variable in targets:
        if path not in arrays:
            continue
        value, shape = arrays[path], tuple(variable.shape)
        if tuple(value.shape) != shape:
            raise ValueError(f"{where}: weight {path} has shape {shape} in the model but "
                             f"{tuple(value.shape)} in the file. No weight was changed")
        if value.dtype != np.dtype(variable.dtype):
            raise ValueError(f"{where}: weight {path} has dtype {variable.dtype} in the model "
                             f"but {value.dtype} in the file. No weight was changed")
        plan.append((variable, value))
    for variable, value in plan:
        variable.assign(value)


def snapshot(pairs):
    """``{path: a NumPy copy of the value}`` of ``[(path, Variable)]`` pairs
    (:func:`weight_paths`, :func:`optimizer_paths`): what a save writes,
    taken at once so later training does not change it."""
    return {path: np.array(v, copy=True) for path, v in pairs}


# ---- .keras files ----------------------------------------------------------------------------

def _check_suffix(filepath, suffix, what):
    name = os.fspath(filepath)
    if not str(name).endswith(suffix):
        raise ValueError(f"{what}: the file name must end with {suffix!r}, got {str(name)!r}")
    return name


def save_model(model, filepath, overwrite=True, weights_format=None):
    """Write ``model`` to ``filepath`` (``.keras``) atomically: the config,
    the compile settings, the weights, the optimizer state and metadata.

    Args:
        weights_format (str): ``"h5"``: Keras 3's own format (Keras's
            config and ``model.weights.h5``, see
            :mod:`pyresnet.saving.keras_saving`), which Keras 3's
            ``load_model`` reads; ``"npz"``: pyresnet's earlier format
            (``model.weights.npz``, read by pyresnet only).  Default: ``"h5"``
            for functional and Sequential models when h5py is installed,
            else ``"npz"`` (a UserWarning says why when h5py is missing: once
            per process under Python's default warning filter, whichever
            line saves).
    Raises:
        ValueError: for another suffix, a model that is not built, a
            config value that cannot be saved (naming the layer), or
            ``weights_format="h5"`` for a subclassed model.
        ImportError: for ``weights_format="h5"`` without h5py.
        FileExistsError: when ``overwrite`` is False and the file exists.
        FileNotFoundError: when the folder of ``filepath`` does not exist
            (naming ``filepath``, as ``open()`` does).
    """
    from . import keras_saving  # noqa: PLC0415
    from .. import __version__  # noqa: PLC0415
    name = _check_suffix(filepath, ".keras", "save")
    if not overwrite and os.path.exists(name):
        raise FileExistsError(f"save: {name} exists and overwrite=False")
    if not model.built:
        raise ValueError(f'Model "{model.name}" is not built yet, so it has no weights to '
                         "save: call it on data or start it with an Input first")
    if weights_format not in (None, "h5", "npz"):
        raise ValueError(f"save: weights_format must be 'h5' or 'npz', got {weights_format!r}")
    if weights_format is None:
        weights_format = "h5" if keras_saving.can_save(model) else "npz"
        if weights_format == "npz" and getattr(model, "_graph", None) is not None:
            # about the installation, not the call: attributed to this line (stacklevel 1),
            # so the default filter shows it once per process, not once per line that saves
            # (python -m pyresnet.train saves from ModelCheckpoint and at the end: twice)
            warnings.warn("save: h5py is not installed, so the files saved hold pyresnet's "
                          "model.weights.npz, which Keras 3 cannot read; pip install "
                          "'pyresnet[keras]' for Keras's model.weights.h5", stacklevel=1)
    if weights_format == "h5":
        if getattr(model, "_graph", None) is None:
            raise ValueError(f'save: model "{model.name}" is subclassed (no layer graph); '
                             "Keras's format needs a functional or Sequential model: use "
                             "weights_format='npz'")
        keras_saving.save_keras_model(model, name, serialization.compile_config(model))
        return
    config = serialization.serialize_layer(model)
    config["compile_config"] = serialization.compile_config(model)
    paths = weight_paths(model)
    entries = snapshot(paths)
    if config["compile_config"] is not None or getattr(model, "optimizer", None) is not None:
        entries.update(snapshot(optimizer_paths(model, paths)))
    metadata = {"pyresnet_version": __version__, "format_version": FORMAT_VERSION,
                "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S")}
    weights = npz_bytes(entries)
    write_archive(name, metadata, config, WEIGHTS, weights)


def write_archive(name, metadata, config, weights_name, weights):
    """Write a ``.keras`` zip atomically: ``metadata.json`` and
    ``config.json`` (dicts, as JSON) deflated, the weights entry
    ``weights_name`` (bytes) stored, with a fixed date so equal models give
    equal files.

    Raises:
        OSError: when the file cannot be written (nothing replaces it then).
    """
    with atomic_write(name, "wb") as f:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(METADATA, json.dumps(metadata, indent=1))
            z.writestr(CONFIG, json.dumps(config))
            z.writestr(zipfile.ZipInfo(weights_name, date_time=(1980, 1, 1, 0, 0, 0)), weights,
                       compress_type=zipfile.ZIP_STORED)


@contextlib.contextmanager
def _open_archive(filepath):
    """Open a ``.keras`` file: yields ``(config dict, read_weights)`` where
    ``read_weights(expected)`` reads its weights entry (see
    :func:`read_npz`) after checking the entry's declared size against
    :func:`npz_limit` of ``expected``.  Nothing is read whole: the JSON
    entries are checked against ``MAX_JSON`` first, the weights are read
    entry by entry in chunks.

    Raises:
        FileNotFoundError: when it does not exist.
        ValueError: when it is not a complete ``.keras`` archive of ours.
    """
    name = os.fspath(filepath)
    if not os.path.isfile(name):
        raise FileNotFoundError(f"load: no file {name!r}")
    with open(name, "rb") as f:  # unreadable: the OSError as it is
        try:
            z = zipfile.ZipFile(f)
            names = set(z.namelist())
            sizes = {n: z.getinfo(n).file_size for n in (CONFIG, METADATA) if n in names}
            if all(n in names for n in (CONFIG, METADATA, WEIGHTS)) \
                    and max(sizes.values()) <= MAX_JSON:
                texts = {n: z.read(n) for n in (CONFIG, METADATA)}
        except (ValueError, OSError, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error,
                EOFError, struct.error, NotImplementedError, OverflowError, KeyError) as e:
            # (OSError from seeks to offsets a corrupted directory gives)
            raise ValueError(f"{name} is not a valid .keras file (not a zip archive, or "
                             f"truncated or corrupted: {type(e).__name__}: {e})") from None
        with z:
            missing = [n for n in (CONFIG, METADATA, WEIGHTS) if n not in names]
            if missing:
                raise ValueError(f"{name} is not a pyresnet .keras file: it lacks "
                                 f"{', '.join(missing)}")
            if max(sizes.values()) > MAX_JSON:
                raise ValueError(f"{name}: config.json or metadata.json is implausibly large")
            try:
                config = json.loads(texts[CONFIG].decode("utf-8"))
                metadata = json.loads(texts[METADATA].decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
                raise ValueError(f"{name}: config.json or metadata.json is not valid JSON "
                                 f"({e})") from None
            if not isinstance(config, dict) or not isinstance(metadata, dict):
                raise ValueError(f"{name}: config.json and metadata.json must hold JSON "
                                 "objects")

            def read_weights(expected):
                where = f"{name} ({WEIGHTS})"
                info = z.getinfo(WEIGHTS)
                check_entry_size(info, npz_limit(expected), name)
                try:
                    entry = z.open(info)
                except (ValueError, OSError, zipfile.BadZipFile, NotImplementedError,
                        struct.error) as e:
                    raise ValueError(f"{where} is not a valid weights file (truncated or "
                                     f"corrupted: {type(e).__name__}: {e})") from None
                with entry:
                    return read_npz(entry, where, expected)

            yield config, read_weights


def load_model(filepath, custom_objects=None, compile=True):
    """A model from a ``.keras`` file: the same architecture, weights and,
    with ``compile=True`` (when it was saved compiled), the same compile
    settings and optimizer state, so predictions are bit-identical and
    training continues as it would have.

    Args:
        filepath: path of a file written by ``model.save``.
        custom_objects (dict): class name -> class for Python layers and
            models that are not registered with
            :func:`pyresnet.saving.register_serializable`.
        compile (bool): compile the model as it was saved and restore the
            optimizer state.
    Raises:
        FileNotFoundError: when the file does not exist.
        ValueError: for a file that is not a complete ``.keras`` file of
            pyresnet (truncated, corrupted, foreign), an unknown class
            (naming it and both fixes), or weights that do not fit
            (checked against the sizes the file declares before they are
            read: a small file cannot make a large allocation).
    """
    from . import keras_saving  # noqa: PLC0415
    name = os.fspath(filepath)
    if os.path.isfile(name) and keras_saving.is_h5_archive(name):
        return keras_saving.load_keras_model(name, custom_objects, compile)
    with _open_archive(name) as (config, read_weights):
        model = model_from_config(config, custom_objects, where=name)
        compile_cfg = config.get("compile_config")
        with_optimizer = bool(compile and compile_cfg is not None)
        if with_optimizer:
            try:
                serialization.compile_from_config(model, compile_cfg)
            except (KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{name}: malformed compile_config ({type(e).__name__}: {e})") \
                    from None
        arrays = read_weights(expected_entries(model, optimizer=with_optimizer))
    paths = weight_paths(model)
    model_arrays = {k: v for k, v in arrays.items() if not k.startswith("optimizer/")}
    assign_checked(paths, model_arrays, name)
    if with_optimizer:
        restore_optimizer(model, paths, arrays, name)
    return model


def restore_optimizer(model, paths, arrays, where):
    """Restore the optimizer state saved in ``arrays`` (``optimizer/*``
    entries): iterations, learning rate, and a slot per entry
    ``optimizer/<slot name>/<weight path>`` (created, then assigned).  A file
    saved without optimizer state leaves the optimizer fresh; a saved rate is
    ignored by an optimizer whose rate is a schedule.

    Raises:
        ValueError: for an entry naming no weight or a slot the optimizer
            does not use (velocities for SGD without momentum, say), a shape
            or dtype that differs.
    """
    saved = {k: v for k, v in arrays.items() if k.startswith("optimizer/")}
    if not saved:
        return
    opt, by_path = model.optimizer, dict(paths)
    targets = [("optimizer/iterations", opt.iterations)]
    if isinstance(opt._learning_rate, Variable):
        targets.append(("optimizer/learning_rate", opt._learning_rate))
    # (a rate saved for a float-rate optimizer is dropped by one with a schedule: the
    # schedule computes the rate from the restored iterations)
    slots = []
    for key in saved:
        if key in ("optimizer/iterations", "optimizer/learning_rate"):
            continue
        slot_name, _, path = key[len("optimizer/"):].partition("/")
        variable = by_path.get(path)
        if variable is None or not variable.trainable:
            raise ValueError(f"{where}: optimizer entry {key} names no trainable weight of "
                             "the model")
        if slot_name not in opt._slot_names:
            raise ValueError(f"{where}: {slot_name} slots are saved for an optimizer without "
                             f"them ({type(opt).__name__} with {opt.get_config()} uses "
                             f"{list(opt._slot_names)})")
        if tuple(saved[key].shape) != tuple(variable.shape):
            raise ValueError(f"{where}: optimizer entry {key} has shape "
                             f"{tuple(saved[key].shape)}, its weight {tuple(variable.shape)}")
        slots.append((key, slot_name, variable))
    targets += [(key, opt._get_slot(variable, slot_name)) for key, slot_name, variable in slots]
    assign_checked(targets, saved, where)
    if slots:  # the weights trained before, in the model's order (Lookahead / EMA cover them
        # even when one is frozen now and takes no gradient)
        opt.build([v for _, v in paths if any(v is s for _, _, s in slots)])


def model_from_config(config, custom_objects=None, where="config"):
    """A new model (or layer) from :func:`serialize_layer`'s dict (as
    ``config.json`` holds it), unknown classes looked up in ``custom_objects``.

    Raises:
        ValueError: for an unknown class or a malformed config.
    """
    from .object_registration import custom_object_scope  # noqa: PLC0415
    with custom_object_scope(custom_objects):
        try:
            return serialization.deserialize_layer(config)
        except (KeyError, TypeError, IndexError, AttributeError, RecursionError) as e:
            raise ValueError(f"{where}: the saved config does not describe a model that can be "
                             f"rebuilt ({type(e).__name__}: {e})") from e


# ---- weight files ------------------------------------------------------------------------------

def save_weights(model, filepath, overwrite=True):
    """Write the model's weights (and random-layer states) to
    ``filepath`` atomically: ``.weights.npz`` keyed by path, or
    ``.weights.h5`` in Keras 3's layout (``layers/<name>/vars/<i>``, needs
    h5py; Keras 3's ``load_weights`` reads it).

    Raises:
        ValueError: for another suffix or an unbuilt model.
        FileExistsError: when ``overwrite`` is False and the file exists.
        FileNotFoundError: when the folder of ``filepath`` does not exist
            (naming ``filepath``, as ``open()`` does).
    """
    from . import keras_saving  # noqa: PLC0415
    name = os.fspath(filepath)
    if not str(name).endswith(".weights.h5"):
        name = _check_suffix(filepath, ".weights.npz", "save_weights")
    if not overwrite and os.path.exists(name):
        raise FileExistsError(f"save_weights: {name} exists and overwrite=False")
    if not model.built:
        raise ValueError(f'Model "{model.name}" is not built yet, so it has no weights to save')
    if str(name).endswith(".weights.h5"):
        keras_saving.save_h5_weights(model, name)
        return
    data = npz_bytes(snapshot(weight_paths(model)))
    with atomic_write(name, "wb") as f:
        f.write(data)


def load_weights(model, filepath):
    """Assign the weights of a ``.weights.npz`` file, a Keras 3
    ``.weights.h5`` file (Keras's or ours) or a ``.keras`` file to
    ``model``, matched by path; all are checked first, so a
    missing or unexpected weight or a shape mismatch (named, with both
    shapes) raises ValueError and changes nothing.  Sizes the file declares
    are checked against the model's weights before anything is inflated.

    Raises:
        FileNotFoundError, ValueError.
    """
    name = os.fspath(filepath)
    if not model.built:
        raise ValueError(f'Model "{model.name}" is not built yet: build it (call it on data, or '
                         "start it with an Input) before load_weights")
    from . import keras_saving  # noqa: PLC0415
    if str(name).endswith(".weights.h5") or (
            str(name).endswith(".keras") and os.path.isfile(name)
            and keras_saving.is_h5_archive(name)):
        keras_saving.load_h5_weights(model, name)
        return
    expected = expected_entries(model)
    if str(name).endswith(".keras"):
        with _open_archive(name) as (_, read_weights):
            arrays = read_weights(expected)
    else:
        _check_suffix(name, ".weights.npz", "load_weights")
        if not os.path.isfile(name):
            raise FileNotFoundError(f"load_weights: no file {name!r}")
        with open(name, "rb") as f:
            arrays = read_npz(f, name, expected)
    assign_checked(weight_paths(model), arrays, name)
