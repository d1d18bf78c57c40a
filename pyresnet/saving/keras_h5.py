"""Weights in Keras 3's HDF5 layout (``model.weights.h5``, ``.weights.h5``),
through h5py (the ``keras`` extra: ``pip install pyresnet[keras]``).

Layout (Keras 3's ``H5IOStore``): a dataset ``<group>/vars/<i>`` per variable
of each layer, the group ``layers/<snake class>[_n]`` named in Keras's layer
order (see :mod:`.keras_config`); the optimizer's variables as
``optimizer/vars/<i>`` (iterations, the learning rate when it is a variable,
then each trainable weight's slots, weight by weight, as Keras's
``add_optimizer_variables`` interleaves them).  State that Keras has no
place for (pyresnet's random layers' generator states) goes under
``pyresnet/state/<weight path>``, which Keras does not read.

Reading never trusts the file: only hard-linked, contiguous or chunked
datasets inside the file (no external storage, no virtual datasets, no
soft or external links) of a numeric dtype are read, and every shape and
dtype is checked against the model before any value is assigned.
"""
import io

import numpy as np

from ..tensor import Variable

OPTIMIZER_GROUP = "optimizer/vars"
EXTRA_GROUP = "pyresnet/state"


def h5py_or_none():
    """The h5py module, or None when it is not installed."""
    try:
        import h5py  # noqa: PLC0415
    except ImportError:
        return None
    return h5py


def require_h5py(what):
    """h5py, or ImportError saying how to get it."""
    h5py = h5py_or_none()
    if h5py is None:
        raise ImportError(f"{what} needs h5py for Keras 3's .h5 weights: "
                          "pip install 'pyresnet[keras]' (or pip install h5py)")
    return h5py


def _value(v):
    return np.array(v.numpy() if isinstance(v, Variable) else v, copy=True)


def optimizer_variables(model, trainable):
    """``[Variable]`` of the compiled optimizer in Keras 3's order
    (iterations, learning rate variable, then per trainable weight in
    ``trainable`` order each of its slots), or [] without an optimizer.
    Slots are created (zeros) where missing, as Keras builds its optimizer
    before saving."""
    opt = getattr(model, "optimizer", None)
    if opt is None:
        return []
    out = [opt.iterations]
    if isinstance(opt._learning_rate, Variable):
        out.append(opt._learning_rate)
    existing = {(id(v), name): slot for name, v, slot in opt.slot_variables()}
    for variable in trainable:
        for name in opt._slot_names:
            slot = existing.get((id(variable), name))
            out.append(slot if slot is not None else ("__slot__", variable, name))
    return out


def h5_bytes(lowered, extras=(), optimizer=()):
    """The bytes of an HDF5 file holding ``lowered.groups``
    (``<group>/<i>``, each array with its variable's shape and dtype:
    float32 weights, the int64 iteration count), ``optimizer`` at
    ``optimizer/vars/<i>`` and ``extras`` (``[(weight path, Variable)]``)
    under ``pyresnet/state``.

    Raises:
        ImportError: without h5py.
    """
    h5py = require_h5py("saving")
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        for path, variables in lowered.groups:
            group = f.require_group(path)
            for i, v in enumerate(variables):
                group.create_dataset(str(i), data=_value(v))
        if optimizer:
            group = f.require_group(OPTIMIZER_GROUP)
            for i, v in enumerate(optimizer):
                if isinstance(v, tuple):  # a slot not created yet: zeros of its weight
                    v = np.zeros(tuple(v[1].shape), np.float32)
                group.create_dataset(str(i), data=_value(v))
        for path, v in extras:
            f.create_dataset(f"{EXTRA_GROUP}/{path}", data=_value(v))
    return buffer.getvalue()


class H5Reader:
    """Checked reads from the bytes of a Keras 3 ``.h5`` weights file.

    Raises (from the constructor):
        ValueError: for bytes that are not an HDF5 file.
    """

    def __init__(self, data, where):
        h5py = require_h5py("loading")
        self.h5py, self.where = h5py, where
        try:
            self.file = h5py.File(io.BytesIO(data), "r")
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise ValueError(f"{where} is not a valid HDF5 weights file ({e})") from None

    def close(self):
        """Release the file."""
        self.file.close()

    def _node(self, path):
        """The object at ``path`` (hard links only), or None."""
        h5py = self.h5py
        obj = self.file
        for part in [p for p in path.split("/") if p]:
            if not isinstance(obj, h5py.Group) or part not in obj:
                return None
            link = obj.get(part, getlink=True)
            if not isinstance(link, h5py.HardLink):
                raise ValueError(f"{self.where}: {path} is a {type(link).__name__}, not data "
                                 "stored in the file")
            obj = obj[part]
        return obj

    def datasets(self):
        """Every dataset path in the file (hard links only)."""
        found = []

        def visit(name, obj):
            if isinstance(obj, self.h5py.Dataset):
                found.append(name)

        try:
            self.file.visititems(visit)
        except (OSError, RuntimeError, KeyError, ValueError) as e:
            raise ValueError(f"{self.where}: corrupted HDF5 structure ({e})") from None
        return found

    def group_size(self, path):
        """Number of datasets in group ``path`` (0 when it is absent)."""
        group = self._node(path)
        if group is None:
            return 0
        if not isinstance(group, self.h5py.Group):
            raise ValueError(f"{self.where}: {path} is not a group")
        count = 0
        for key in group:
            link = group.get(key, getlink=True)
            if not isinstance(link, self.h5py.HardLink):
                raise ValueError(f"{self.where}: {path}/{key} is a {type(link).__name__}, not "
                                 "data stored in the file")
            count += isinstance(group[key], self.h5py.Dataset)
        return count

    def read(self, path, shape, kinds, label):
        """The array at ``path`` after checking that it is a dataset of
        ``shape`` with a dtype kind in ``kinds`` stored in the file.

        Raises:
            ValueError: naming ``label``, the path and both shapes.
        """
        ds = self._node(path)
        if ds is None:
            raise ValueError(f"{self.where}: {label}: {path} is missing")
        if not isinstance(ds, self.h5py.Dataset):
            raise ValueError(f"{self.where}: {label}: {path} is not a dataset")
        if ds.is_virtual or ds.external:
            raise ValueError(f"{self.where}: {label}: {path} refers to data outside the file")
        if tuple(ds.shape) != tuple(shape):
            raise ValueError(f"{self.where}: {label} has shape {tuple(shape)} in the model but "
                             f"{tuple(ds.shape)} in the file ({path}). No weight was changed")
        if ds.dtype.kind not in kinds or ds.dtype.hasobject or ds.dtype.itemsize > 8:
            raise ValueError(f"{self.where}: {label}: {path} has dtype {ds.dtype}, expected "
                             f"{'float' if 'f' in kinds else 'integer'} data. "
                             "No weight was changed")
        try:
            return np.asarray(ds[()])
        except (OSError, RuntimeError, ValueError, TypeError) as e:
            raise ValueError(f"{self.where}: {label}: {path} cannot be read ({e})") from None


def _kinds(target):
    dtype = np.dtype(target.dtype if isinstance(target, Variable) else target.dtype)
    return "iu" if dtype.kind in "iu" else "f"


def plan_weights(reader, lowered, label_of, extras=(), strict=True):
    """``[(Variable, array)]`` for every weight of ``lowered`` (and the
    ``extras`` present in the file), everything checked; constants (a
    zero-pad shortcut kernel) must equal the model's.

    Raises:
        ValueError: for a missing group or dataset, a count, shape, dtype or
            constant that differs, or (``strict``) datasets no weight of the
            model reads, naming the layer.  Nothing is assigned.
    """
    plan, expected = [], set()
    for path, targets in lowered.groups:
        label = label_of(path)
        count = reader.group_size(path)
        if count != len(targets):
            raise ValueError(f"{reader.where}: {label} has {len(targets)} variables in the "
                             f"model but {count} in the file ({path}). No weight was changed")
        for i, target in enumerate(targets):
            name = f"{path}/{i}"
            expected.add(name)
            value = reader.read(name, tuple(target.shape), _kinds(target), f"{label} variable {i}")
            if isinstance(target, Variable):
                plan.append((target, value.astype(np.dtype(target.dtype))))
            elif not np.array_equal(value, target):
                raise ValueError(f"{reader.where}: {label}: {name} must hold the fixed "
                                 "zero-pad shortcut kernel. No weight was changed")
    for path, variable in extras:
        name = f"{EXTRA_GROUP}/{path}"
        expected.add(name)
        if reader._node(name) is not None:
            value = reader.read(name, tuple(variable.shape), _kinds(variable), path)
            plan.append((variable, value.astype(np.dtype(variable.dtype))))
    if strict:
        extra = [p for p in reader.datasets() if p not in expected
                 and not p.startswith(("optimizer/", f"{EXTRA_GROUP}/"))]
        if extra:
            raise ValueError(f"{reader.where}: the file's datasets {extra[:10]} match no weight "
                             "of the model. No weight was changed")
    return plan


def plan_optimizer(reader, model, trainable):
    """``[(Variable, array)]`` restoring the optimizer from
    ``optimizer/vars``, or ``None`` when the file has none or a different
    count (Keras's rule: the optimizer then stays fresh, with a warning by
    the caller).  Missing slots are created.

    Raises:
        ValueError: for a shape or dtype that differs.
    """
    wanted = optimizer_variables(model, trainable)
    count = reader.group_size(OPTIMIZER_GROUP)
    if not wanted or count == 0:
        return None
    if count != len(wanted):
        return None
    opt, plan = model.optimizer, []
    for i, target in enumerate(wanted):
        if isinstance(target, tuple):
            target = opt._get_slot(target[1], target[2])
        value = reader.read(f"{OPTIMIZER_GROUP}/{i}", tuple(target.shape), _kinds(target),
                            f"optimizer variable {i}")
        plan.append((target, value.astype(np.dtype(target.dtype))))
    return plan
