"""What the CIFAR loaders share: finding a dataset folder, downloading,
verifying and unpacking the official archive into the cache, and reading one
pickled batch of the official "python version" releases (Krizhevsky 2009,
"Learning Multiple Layers of Features from Tiny Images",
https://www.cs.toronto.edu/~kriz/cifar.html).

Look-up order for a dataset folder such as ``cifar-10-batches-py``:

1. the ``path`` argument: a directory containing the folder, or the folder itself;
2. ``$PYRESNET_DATA``: the same two forms;
3. the cache ``$PYRESNET_CACHE_DIR`` (default ``~/.pyresnet/datasets``): the
   folder in it;
4. Keras's cache, ``$KERAS_HOME/datasets`` (default ``~/.keras/datasets``, as
   ``keras.utils.get_file``): ``cifar-10-batches-py/`` as tf.keras 2.x
   unpacks it (``untar=True``) and ``cifar-10-batches-py/cifar-10-batches-py/``
   as Keras 3 does (``extract=True`` unpacks into a folder named ``fname``);
5. torchvision's layout under each root in ``$PYRESNET_TORCHVISION_ROOT``
   (one path or several joined by ``os.pathsep``): ``<root>/cifar-10-batches-py``,
   where ``torchvision.datasets.CIFAR10(root, download=True)`` puts it.
   torchvision has no default dataset root (``root`` is a required
   argument; ``$TORCH_HOME``, ``~/.cache/torch``, holds hub checkpoints, not
   datasets), hence the setting;
6. back in the cache: the archive in it (unpacked if its MD5 is right), else
   the official archive that Keras or torchvision kept after a download
   (:func:`peer_archives`; unpacked into the cache if its MD5 is right), else
   the archive downloaded from ``$PYRESNET_DATASETS_URL`` (default
   ``BASE_URL``, a mirror of the official files) and verified against the MD5
   pinned in the loader.

Places 1-5 and the peers' archives are only read (a folder counts when it
holds every file the loader reads; its batches are then parsed with the
restricted unpickler of :func:`read_batch`); nothing is written outside the
cache.
"""
import dataclasses
import hashlib
import http.client
import os
import pathlib
import pickle
import shutil
import tarfile
import tempfile
import time
import urllib.request

import numpy as np
import tqdm

from ..utils.atomic import atomic_write, fsync_tree

BASE_URL = "https://www.cs.toronto.edu/~kriz/"
DEFAULT_CACHE_DIR = "~/.pyresnet/datasets"
DOWNLOAD_TIMEOUT = 60.0  # seconds without data before a download fails
_CHUNK = 1 << 20  # bytes read at a time while downloading or hashing


class ChecksumError(OSError):
    """A downloaded archive's MD5 differs from the pinned one (the file was removed)."""


@dataclasses.dataclass(frozen=True)
class Archive:
    """One official release: ``name`` for messages, the archive ``filename``
    under the base URL, its ``md5`` (hex), the ``folder`` it unpacks to and
    the ``files`` in that folder that the loader reads."""
    name: str
    filename: str
    md5: str
    folder: str
    files: tuple


def cache_dir():
    """The download cache: ``$PYRESNET_CACHE_DIR`` or ``~/.pyresnet/datasets`` (a Path)."""
    return pathlib.Path(os.environ.get("PYRESNET_CACHE_DIR") or DEFAULT_CACHE_DIR).expanduser()


def keras_home():
    """Keras's cache root: ``$KERAS_HOME`` or ``~/.keras`` (a Path), as
    ``keras.utils.get_file`` (Keras 3 and tf.keras 2.x)."""
    return pathlib.Path(os.environ.get("KERAS_HOME") or "~/.keras").expanduser()


def peer_places(archive):
    """The folders where Keras and torchvision keep ``archive.folder`` (look-up
    steps 4 and 5 of the module docstring), in look-up order (Paths)."""
    keras = keras_home() / "datasets" / archive.folder
    places = [keras, keras / archive.folder]
    for root in (os.environ.get("PYRESNET_TORCHVISION_ROOT") or "").split(os.pathsep):
        if root:
            places.append(pathlib.Path(root).expanduser() / archive.folder)
    return places


def peer_archives(archive):
    """The official archive where Keras and torchvision keep it after a
    download: ``$KERAS_HOME/datasets/<folder>.tar.gz`` (tf.keras 2.x),
    ``<folder>_archive`` (Keras 3) and ``<root>/<filename>`` of each torchvision
    root (Paths, in look-up order)."""
    keras = keras_home() / "datasets"
    places = [keras / (archive.folder + ".tar.gz"), keras / (archive.folder + "_archive")]
    for root in (os.environ.get("PYRESNET_TORCHVISION_ROOT") or "").split(os.pathsep):
        if root:
            places.append(pathlib.Path(root).expanduser() / archive.filename)
    return places


def _missing(folder, archive):
    return [f for f in archive.files if not (folder / f).is_file()]


def locate(archive, path=None):
    """The folder (a Path) holding all of ``archive.files``, downloading and
    unpacking the archive into the cache when no look-up place has them.

    Raises FileNotFoundError naming every place looked and the URL when the
    data is nowhere and the download fails; ChecksumError when the download's
    MD5 is wrong; FileExistsError when the cache holds an incomplete folder
    (it is never deleted: remove it yourself); ValueError when a verified
    archive lacks some files and tarfile.FilterError when it has an unsafe
    member (neither happens with the official archives).  Whatever it
    raises, it leaves no new file or directory behind (a cache directory it
    had to create is removed again).
    """
    places = []
    for root in (path, os.environ.get("PYRESNET_DATA")):
        if root:
            root = pathlib.Path(root).expanduser()
            places += [root / archive.folder, root]
    cache = cache_dir()
    _remove_stale_staging(cache)  # left by an unpack killed on an earlier run
    target = cache / archive.folder
    places.append(target)
    places += peer_places(archive)
    for folder in places:
        if not _missing(folder, archive):
            return folder

    if target.exists():
        raise FileExistsError(f"{target} lacks {', '.join(_missing(target, archive))}; "
                              f"remove it so that {archive.name} can be fetched again")
    cached = cache / archive.filename
    if cached.is_file() and _md5(cached) == archive.md5:
        _unpack(cached, archive, cache)
        return target
    for other in peer_archives(archive):  # Keras's or torchvision's download, verified
        if other.is_file() and _md5(other) == archive.md5:
            made = _make_dirs(cache)
            try:
                _unpack(other, archive, cache)
            except BaseException:
                _remove_empty(made)
                raise
            return target

    url = (os.environ.get("PYRESNET_DATASETS_URL") or BASE_URL).rstrip("/") + "/" + archive.filename
    made = _make_dirs(cache)
    try:
        _fetch(url, archive, cache, cached, places)
    except BaseException:
        _remove_empty(made)  # a failed fetch leaves no new directory either
        raise
    return target


def _make_dirs(folder):
    """Create ``folder`` and its missing parents; return those created, outermost first."""
    missing = []
    for d in [folder, *folder.parents]:
        if d.exists():
            break
        missing.append(d)
    folder.mkdir(parents=True, exist_ok=True)
    return missing[::-1]


def _remove_empty(folders):
    """Remove the ``folders`` (outermost first) that are empty, innermost first."""
    for d in reversed(folders):
        try:
            d.rmdir()
        except OSError:  # not empty (another process put something there), or gone
            break


def _fetch(url, archive, cache, cached, places):
    """Download ``url`` into ``cache``, verify it, unpack it, keep the archive
    (written atomically: a temporary file renamed to ``cached`` only once
    it is verified and unpacked)."""
    with atomic_write(cached, "wb") as out:
        try:
            digest = _download(url, out)
        except (OSError, http.client.HTTPException) as exc:
            looked = "\n  ".join(map(str, places + [cached]))
            raise FileNotFoundError(
                f"{archive.name} not found; looked in\n  {looked}\n"
                f"and downloading {url} failed: {exc}.\n"
                f"Put the unpacked {archive.folder}/ in one of those places "
                f"(or set $PYRESNET_DATA to where it is), or {archive.filename} "
                f"into {cache}.") from exc
        if digest != archive.md5:
            raise ChecksumError(f"{archive.name}: {url} has MD5 {digest}, expected "
                                f"{archive.md5}; the download was removed")
        out.flush()
        _unpack(out.name, archive, cache)


def _md5(file):
    digest = hashlib.md5()
    with open(file, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url, out):
    """Stream ``url`` into the open binary file ``out``; return its MD5 (hex).
    ConnectionError when the body is shorter than its Content-Length."""
    digest, received = hashlib.md5(), 0
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
        size = response.headers.get("Content-Length")
        size = int(size) if size else None
        with tqdm.tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024,
                       desc=url.rsplit("/", 1)[-1]) as bar:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                received += len(chunk)
                bar.update(len(chunk))
    if size is not None and received != size:
        raise ConnectionError(f"connection closed after {received} of {size} bytes")
    return digest.hexdigest()


def _remove_stale_staging(cache):
    """Remove the staging folders (``.unpack-<pid>-*``) that an unpack killed
    before its cleanup left in ``cache``: those whose process is gone, and
    older-style ``.unpack-*`` ones without a process id after an hour."""
    try:
        entries = list(pathlib.Path(cache).glob(".unpack-*"))
    except OSError:
        return
    for entry in entries:
        parts = entry.name.split("-")
        pid = int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None
        if pid is not None and pid != os.getpid():
            try:
                os.kill(pid, 0)
                continue  # that unpack is still running
            except ProcessLookupError:
                pass
            except OSError:  # exists but is not ours to signal
                continue
        elif pid is None:
            try:
                if entry.stat().st_mtime > time.time() - 3600:
                    continue
            except OSError:
                continue
        else:
            continue  # our own, in use
        shutil.rmtree(entry, ignore_errors=True)


def _unpack(tar_path, archive, cache):
    """Unpack ``archive.folder`` of the tar.gz ``tar_path`` into ``cache``.

    Members go through tarfile's "data" filter (no absolute paths, no ``..``,
    no links out of the destination, no devices) into a private staging
    directory; the folder then moves into place in one rename, so an
    interrupted unpack never leaves a partial folder.  ValueError when the
    archive lacks some of ``archive.files``.
    """
    _remove_stale_staging(cache)
    staging = pathlib.Path(tempfile.mkdtemp(dir=cache, prefix=f".unpack-{os.getpid()}-"))
    try:
        with tarfile.open(tar_path, "r:gz") as tar:
            tar.extractall(staging, filter="data")
        missing = _missing(staging / archive.folder, archive)
        if missing:
            raise ValueError(f"{archive.name} archive {tar_path} lacks "
                             f"{', '.join(archive.folder + '/' + f for f in missing)}")
        fsync_tree(staging / archive.folder)  # contents durable before the rename
        try:
            os.replace(staging / archive.folder, cache / archive.folder)
        except OSError:
            if _missing(cache / archive.folder, archive):  # not a concurrent unpack that won
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _Unpickler(pickle.Unpickler):
    """Unpickles dicts of lists, bytes and NumPy arrays only, so that a
    tampered dataset file cannot run code through a pickled global."""
    ALLOWED = frozenset({
        ("numpy", "ndarray"), ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),  # files written by NumPy < 2
        ("numpy._core.multiarray", "_reconstruct"),  # NumPy >= 2
        ("numpy._core.numeric", "_frombuffer"),  # NumPy >= 2, pickle protocol 5
        ("_codecs", "encode"),  # Python 3 bytes at pickle protocol 2
    })

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a "
                                         "dataset file (not a CIFAR batch)")
        return super().find_class(module, name)


def read_batch(file, label_key, num_classes):
    """Read one pickled CIFAR batch (a dict with byte or str keys: ``data``,
    uint8 (N, 3072), each row the 32x32 channel planes R, G, B in row-major
    order, and ``label_key``, N ints in [0, num_classes)).

    Returns ``(images, labels)``: C-contiguous uint8 (N, 32, 32, 3) NHWC
    and uint8 (N,).  Raises ValueError (or pickle.UnpicklingError)
    naming the file when it is not such a batch.
    """
    with open(file, "rb") as f:
        try:
            batch = _Unpickler(f, encoding="bytes").load()
        except pickle.UnpicklingError as exc:
            raise pickle.UnpicklingError(f"{file}: {exc}") from exc
    if not isinstance(batch, dict):
        raise ValueError(f"{file}: expected a pickled dict, got {type(batch).__name__}")
    batch = {k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    missing = [k for k in ("data", label_key) if k not in batch]
    if missing:
        raise ValueError(f"{file}: no {' or '.join(missing)} entry (keys: {list(batch)})")
    data, labels = batch["data"], np.asarray(batch[label_key])
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8
            and data.ndim == 2 and data.shape[1] == 3 * 32 * 32):
        raise ValueError(f"{file}: expected data uint8 (N, 3072), got "
                         f"{getattr(data, 'dtype', type(data).__name__)} {np.shape(data)}")
    if labels.shape != (len(data),) or labels.dtype.kind not in "iu":
        raise ValueError(f"{file}: expected {len(data)} integer {label_key}, got "
                         f"{labels.dtype} {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"{file}: {label_key} must lie in [0, {num_classes}), got "
                         f"[{labels.min()}, {labels.max()}]")
    images = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, labels.astype(np.uint8)
