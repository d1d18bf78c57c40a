"""pyresnet.datasets: the real shared CIFAR-10 copy, and look-up, download,
checksum, unpacking and error paths against a local HTTP server on 127.0.0.1
(never the internet: every test's download URL defaults to a closed port)."""
import contextlib
import dataclasses
import functools
import hashlib
import http.server
import io
import os
import pickle
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading

import numpy as np
import pytest

import pyresnet
from pyresnet.datasets import _cache

cifar10 = pyresnet.datasets.cifar10
cifar100 = pyresnet.datasets.cifar100
ChecksumError = pyresnet.datasets.ChecksumError


def closed_port_url():
    """An http URL on a local port nobody listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """A private empty cache, no $PYRESNET_DATA, an empty HOME without Keras's
    or torchvision's copies, downloads from a closed port."""
    monkeypatch.setenv("PYRESNET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYRESNET_DATA", raising=False)
    (tmp_path / "empty home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "empty home"))
    monkeypatch.delenv("KERAS_HOME", raising=False)
    monkeypatch.delenv("PYRESNET_TORCHVISION_ROOT", raising=False)
    monkeypatch.setenv("PYRESNET_DATASETS_URL", closed_port_url())
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def real(cifar10_dir):
    """The full shared CIFAR-10, loaded once."""
    return cifar10.load_data(path=cifar10_dir)


def raw_batch(file):
    with open(file, "rb") as f:
        return pickle.load(f, encoding="bytes")


# ---------------------------------------------------------------- real data

def test_real_cifar10_shapes_dtypes_and_class_counts(real):
    (x, y), (xt, yt) = real
    assert (x.shape, x.dtype, y.shape, y.dtype) == ((50000, 32, 32, 3), np.uint8, (50000, 1), np.uint8)
    assert (xt.shape, xt.dtype, yt.shape, yt.dtype) == ((10000, 32, 32, 3), np.uint8, (10000, 1), np.uint8)
    assert x.flags.c_contiguous and xt.flags.c_contiguous
    assert np.bincount(y[:, 0], minlength=10).tolist() == [5000] * 10
    assert np.bincount(yt[:, 0], minlength=10).tolist() == [1000] * 10
    assert y[0, 0] == 6


@pytest.mark.parametrize("file, offset", [("data_batch_1", 0), ("data_batch_4", 30000), ("test_batch", None)])
def test_real_cifar10_matches_raw_pickles(real, cifar10_dir, file, offset):
    (x, y), (xt, yt) = real
    images, labels = (xt, yt) if offset is None else (x[offset:offset + 10000], y[offset:offset + 10000])
    raw = raw_batch(cifar10_dir / file)
    data = raw[b"data"]
    assert labels[:, 0].tolist() == raw[b"labels"]
    # row n of the pickle: planes R, G, B of 1024 bytes, each row-major 32 x 32
    for n, row, col in [(0, 0, 0), (0, 31, 31), (1, 0, 31), (9999, 17, 5), (4321, 30, 2)]:
        expected = [data[n][c * 1024 + row * 32 + col] for c in range(3)]
        assert images[n, row, col].tolist() == expected


# ----------------------------------------------------------------- look-up

def fake_folder(parent, archive, files=None):
    """``parent/archive.folder`` with empty stand-ins for the given files."""
    folder = parent / archive.folder
    folder.mkdir(parents=True)
    for name in archive.files if files is None else files:
        (folder / name).touch()
    return folder


def test_locate_order_and_both_path_forms(tmp_path, monkeypatch, isolated):
    a = fake_folder(tmp_path / "a", cifar10.ARCHIVE)
    b = fake_folder(tmp_path / "b", cifar10.ARCHIVE)
    cached = fake_folder(isolated, cifar10.ARCHIVE)
    incomplete = fake_folder(tmp_path / "c", cifar10.ARCHIVE, files=["data_batch_1"])
    locate = functools.partial(_cache.locate, cifar10.ARCHIVE)
    assert locate() == cached
    monkeypatch.setenv("PYRESNET_DATA", str(b.parent))
    assert locate() == b
    monkeypatch.setenv("PYRESNET_DATA", str(b))
    assert locate() == b
    assert locate(tmp_path / "a") == a
    assert locate(a) == a
    assert locate(incomplete.parent) == b  # an incomplete folder is skipped


def test_incomplete_cache_folder_is_reported_not_deleted(isolated):
    folder = fake_folder(isolated, cifar10.ARCHIVE, files=["data_batch_1", "test_batch"])
    with pytest.raises(FileExistsError, match="data_batch_2, data_batch_3"):
        cifar10.load_data()
    assert sorted(os.listdir(folder)) == ["data_batch_1", "test_batch"]
    assert sorted(os.listdir(isolated)) == [cifar10.ARCHIVE.folder]


# ------------------------------------------------------------- downloading

def write_batch(file, keys, images=None, data=None, **labels):
    """Pickle a batch in the official layout: ``data`` uint8 (N, 3072) made of
    the channel planes of NHWC ``images`` (unless given), label lists."""
    if data is None:
        data = images.transpose(0, 3, 1, 2).reshape(len(images), 3072)
    batch = {"batch_label": "test batch", "data": data,
             **{k: np.asarray(v).tolist() for k, v in labels.items()},
             "filenames": [f"img_{i}.png" for i in range(len(data))]}
    if keys == "bytes":  # as the official Python 2 pickles read with encoding="bytes"
        batch = {k.encode(): v for k, v in batch.items()}
    with open(file, "wb") as f:
        pickle.dump(batch, f, protocol=2)


def make_tar_gz(file, source_dir, arcname):
    with tarfile.open(file, "w:gz") as tar:
        tar.add(source_dir, arcname=arcname)
    with open(file, "rb") as f:
        return hashlib.md5(f.read()).hexdigest()


@dataclasses.dataclass
class Served:
    dir: object  # the directory the server serves
    md5: str  # of dir / cifar10.ARCHIVE.filename
    train: tuple  # the (x, y) it should load as
    test: tuple


@pytest.fixture(scope="module")
def small_cifar10(real, cifar10_dir, tmp_path_factory):
    """A CIFAR-10 archive in the official layout holding the first 100 real
    images of each batch (so 500 train, 100 test)."""
    (x, y), (xt, yt) = real
    root = tmp_path_factory.mktemp("small_cifar10")
    folder = root / "src" / cifar10.ARCHIVE.folder
    folder.mkdir(parents=True)
    picks = np.concatenate([np.arange(100) + 10000 * i for i in range(5)])
    for i in range(5):
        part = picks[100 * i:100 * (i + 1)]
        write_batch(folder / f"data_batch_{i + 1}", "bytes", x[part], labels=y[part, 0])
    write_batch(folder / "test_batch", "bytes", xt[:100], labels=yt[:100, 0])
    shutil.copy(cifar10_dir / "batches.meta", folder)
    served = root / "served"
    served.mkdir()
    md5 = make_tar_gz(served / cifar10.ARCHIVE.filename, folder, cifar10.ARCHIVE.folder)
    return Served(served, md5, (x[picks], y[picks]), (xt[:100], yt[:100]))


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a directory, records each GET path, and can cut bodies short."""

    def do_GET(self):
        self.server.hits.append(self.path)
        if self.server.truncate:  # announce 1000 bytes, send 10, close
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"0123456789")
        else:
            super().do_GET()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serving(directory, monkeypatch, truncate=False):
    """Serve ``directory`` on 127.0.0.1 in a thread and point the loaders at
    it; yield the list of GET paths; stop the server afterwards."""
    httpd = http.server.HTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(directory)))
    httpd.hits, httpd.truncate = [], truncate
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        # no trailing slash: the loader adds it before the file name
        monkeypatch.setenv("PYRESNET_DATASETS_URL", f"http://127.0.0.1:{httpd.server_port}")
        yield httpd.hits
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def assert_loaded(result, served):
    (x, y), (xt, yt) = result
    for got, want in zip((x, y, xt, yt), served.train + served.test):
        assert got.dtype == np.uint8 and got.shape == want.shape
        assert np.array_equal(got, want)


def test_download_verifies_unpacks_caches_and_reuses(small_cifar10, monkeypatch, isolated, tmp_path):
    monkeypatch.setattr(cifar10, "ARCHIVE", dataclasses.replace(cifar10.ARCHIVE, md5=small_cifar10.md5))
    archive = "/" + cifar10.ARCHIVE.filename
    with serving(small_cifar10.dir, monkeypatch) as hits:
        assert_loaded(cifar10.load_data(path=tmp_path / "nothing here"), small_cifar10)
        assert hits == [archive]
        assert sorted(os.listdir(isolated)) == [cifar10.ARCHIVE.folder, cifar10.ARCHIVE.filename]
        assert_loaded(cifar10.load_data(), small_cifar10)
        assert hits == [archive]  # served from the unpacked cache
        shutil.rmtree(isolated / cifar10.ARCHIVE.folder)
        assert_loaded(cifar10.load_data(), small_cifar10)
        assert hits == [archive]  # unpacked again from the kept archive


def test_checksum_mismatch_raises_and_leaves_nothing(small_cifar10, monkeypatch, isolated):
    official = cifar10.ARCHIVE.md5
    with serving(small_cifar10.dir, monkeypatch) as hits:
        with pytest.raises(ChecksumError) as info:
            cifar10.load_data()
        assert hits == ["/" + cifar10.ARCHIVE.filename]
    assert official in str(info.value) and small_cifar10.md5 in str(info.value)
    assert isinstance(info.value, OSError)
    assert not isolated.exists()  # the cache directory it made is gone again


def test_offline_error_names_every_place_and_the_url(tmp_path, monkeypatch, isolated):
    monkeypatch.setenv("PYRESNET_DATA", str(tmp_path / "env data"))
    with pytest.raises(FileNotFoundError) as info:
        cifar10.load_data(path=tmp_path / "arg")
    message = str(info.value)
    folder, filename = cifar10.ARCHIVE.folder, cifar10.ARCHIVE.filename
    keras = tmp_path / "empty home" / ".keras" / "datasets" / folder
    for place in (tmp_path / "arg" / folder, tmp_path / "arg", tmp_path / "env data" / folder,
                  tmp_path / "env data", isolated / folder, keras, keras / folder,
                  isolated / filename):
        assert f"\n  {place}\n" in message
    assert os.environ["PYRESNET_DATASETS_URL"] + filename in message
    assert "Connection refused" in message
    assert not isolated.exists()  # the cache directory it made is gone again


@pytest.mark.parametrize("cache", [None, "deep/er/cache"])
def test_offline_load_leaves_no_cache_directory(tmp_path, monkeypatch, cache):
    """Loading offline used to leave an empty ~/.pyresnet/datasets behind."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    if cache is None:
        monkeypatch.delenv("PYRESNET_CACHE_DIR", raising=False)
        assert _cache.cache_dir() == home / ".pyresnet" / "datasets"
    else:
        monkeypatch.setenv("PYRESNET_CACHE_DIR", str(home / cache))
    with pytest.raises(FileNotFoundError, match="downloading .* failed"):
        cifar10.load_data()
    assert os.listdir(home) == []
    # an existing cache directory (and what is in it) stays
    keep = _cache.cache_dir()
    keep.mkdir(parents=True)
    (keep / "other.txt").write_text("x")
    with pytest.raises(FileNotFoundError):
        cifar10.load_data()
    assert os.listdir(keep) == ["other.txt"]


def test_interrupted_download_leaves_nothing(small_cifar10, monkeypatch, isolated):
    with serving(small_cifar10.dir, monkeypatch, truncate=True) as hits:
        with pytest.raises(FileNotFoundError) as info:
            cifar10.load_data()
        assert len(hits) == 1
    assert isinstance(info.value.__cause__, ConnectionError)
    assert "closed after 10 of 1000 bytes" in str(info.value)
    assert not isolated.exists()  # the cache directory it made is gone again


def test_unsafe_archive_member_is_refused(tmp_path, monkeypatch, isolated):
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / cifar10.ARCHIVE.filename, "w:gz") as tar:
        info = tarfile.TarInfo("../../escaped")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    md5 = hashlib.md5((served / cifar10.ARCHIVE.filename).read_bytes()).hexdigest()
    monkeypatch.setattr(cifar10, "ARCHIVE", dataclasses.replace(cifar10.ARCHIVE, md5=md5))
    with serving(served, monkeypatch):
        with pytest.raises(tarfile.FilterError):
            cifar10.load_data()
    assert not (tmp_path / "escaped").exists() and not (isolated / "escaped").exists()
    assert not isolated.exists()  # the cache directory it made is gone again


def test_archive_without_the_files_is_refused(tmp_path, monkeypatch, isolated):
    source = fake_folder(tmp_path / "src", cifar10.ARCHIVE, files=["data_batch_1"])
    served = tmp_path / "served"
    served.mkdir()
    md5 = make_tar_gz(served / cifar10.ARCHIVE.filename, source, cifar10.ARCHIVE.folder)
    monkeypatch.setattr(cifar10, "ARCHIVE", dataclasses.replace(cifar10.ARCHIVE, md5=md5))
    with serving(served, monkeypatch):
        with pytest.raises(ValueError, match="lacks cifar-10-batches-py/data_batch_2"):
            cifar10.load_data()
    assert not isolated.exists()  # the cache directory it made is gone again


# ------------------------------------------- Keras's and torchvision's copies

def copy_official(small_cifar10, destination):
    """The small CIFAR-10 folder (official layout) copied to ``destination``."""
    shutil.copytree(small_cifar10.dir.parent / "src" / cifar10.ARCHIVE.folder, destination)
    return destination


@pytest.mark.parametrize("layout", ["tf.keras 2.x", "keras 3"])
def test_found_in_keras_cache_without_download(small_cifar10, monkeypatch, isolated, tmp_path,
                                               layout):
    """~/.keras/datasets/cifar-10-batches-py (tf.keras's untar) or its nested
    cifar-10-batches-py/ (Keras 3's extract) is read; nothing is fetched and
    our cache is not created."""
    folder = tmp_path / "empty home" / ".keras" / "datasets" / cifar10.ARCHIVE.folder
    if layout == "keras 3":
        (folder / cifar10.ARCHIVE.folder).parent.mkdir(parents=True)
        copy_official(small_cifar10, folder / cifar10.ARCHIVE.folder)
    else:
        copy_official(small_cifar10, folder)
    with serving(small_cifar10.dir, monkeypatch) as hits:
        assert_loaded(cifar10.load_data(), small_cifar10)
    assert hits == [] and not isolated.exists()
    # $KERAS_HOME moves Keras's cache, as keras.utils.get_file
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "elsewhere" / "datasets")):
        cifar10.load_data()


def test_found_under_a_torchvision_root(small_cifar10, monkeypatch, isolated, tmp_path):
    """``<root>/cifar-10-batches-py`` of a root in $PYRESNET_TORCHVISION_ROOT
    (several joined by os.pathsep; a root without the data is skipped)."""
    copy_official(small_cifar10, tmp_path / "tv data" / cifar10.ARCHIVE.folder)
    (tmp_path / "tv empty").mkdir()
    roots = os.pathsep.join([str(tmp_path / "tv empty"), "", str(tmp_path / "tv data")])
    monkeypatch.setenv("PYRESNET_TORCHVISION_ROOT", roots)
    with serving(small_cifar10.dir, monkeypatch) as hits:
        assert_loaded(cifar10.load_data(), small_cifar10)
    assert hits == [] and not isolated.exists()


@pytest.mark.parametrize("where", ["tf.keras 2.x", "keras 3", "torchvision"])
def test_peer_archive_is_verified_and_unpacked_without_download(small_cifar10, monkeypatch,
                                                                isolated, tmp_path, where):
    """The official archive Keras or torchvision kept (the folder gone) is
    unpacked into our cache when its MD5 is right, and skipped when not."""
    keras = tmp_path / "empty home" / ".keras" / "datasets"
    name = {"tf.keras 2.x": keras / (cifar10.ARCHIVE.folder + ".tar.gz"),
            "keras 3": keras / (cifar10.ARCHIVE.folder + "_archive"),
            "torchvision": tmp_path / "tv" / cifar10.ARCHIVE.filename}[where]
    name.parent.mkdir(parents=True)
    shutil.copy(small_cifar10.dir / cifar10.ARCHIVE.filename, name)
    monkeypatch.setenv("PYRESNET_TORCHVISION_ROOT", str(tmp_path / "tv"))
    with serving(small_cifar10.dir, monkeypatch) as hits:
        with pytest.raises(ChecksumError):  # not the official MD5: skipped, then downloaded
            cifar10.load_data()
        assert hits == ["/" + cifar10.ARCHIVE.filename]
        monkeypatch.setattr(cifar10, "ARCHIVE",
                            dataclasses.replace(cifar10.ARCHIVE, md5=small_cifar10.md5))
        assert_loaded(cifar10.load_data(), small_cifar10)
        assert hits == ["/" + cifar10.ARCHIVE.filename]  # no second download
    assert sorted(os.listdir(isolated)) == [cifar10.ARCHIVE.folder]
    assert name.is_file()  # the peer's file is left as it was


def test_peer_copies_come_after_ours(tmp_path, monkeypatch, isolated):
    """Look-up order: path, $PYRESNET_DATA, our cache, Keras's (tf.keras's
    layout, then Keras 3's), torchvision roots in order; incomplete copies
    are skipped."""
    archive = cifar10.ARCHIVE
    locate = functools.partial(_cache.locate, archive)
    home = tmp_path / "empty home" / ".keras" / "datasets"
    tv2 = fake_folder(tmp_path / "tv2", archive)
    tv1 = fake_folder(tmp_path / "tv1", archive)
    fake_folder(tmp_path / "tv0", archive, files=["data_batch_1"])  # incomplete
    monkeypatch.setenv("PYRESNET_TORCHVISION_ROOT",
                       os.pathsep.join(str(tmp_path / f"tv{i}") for i in range(3)))
    assert locate() == tv1
    keras3 = fake_folder(home / archive.folder, archive)
    assert locate() == keras3
    for name in archive.files:  # tf.keras's layout, beside Keras 3's nested folder
        (home / archive.folder / name).touch()
    assert locate() == home / archive.folder
    cached = fake_folder(isolated, archive)
    assert locate() == cached
    env = fake_folder(tmp_path / "env", archive)
    monkeypatch.setenv("PYRESNET_DATA", str(env))
    assert locate() == env
    assert locate(tv2) == tv2


def test_cifar100_in_keras_and_torchvision_places(small_cifar100, monkeypatch, tmp_path):
    folder, split = small_cifar100
    keras = tmp_path / "empty home" / ".keras" / "datasets" / cifar100.ARCHIVE.folder
    shutil.copytree(folder, keras)
    (_, y), _ = cifar100.load_data()
    assert y[:, 0].tolist() == split["train"][1].tolist()
    shutil.rmtree(keras)
    with pytest.raises(FileNotFoundError, match="cifar-100-python"):
        cifar100.load_data()
    monkeypatch.setenv("PYRESNET_TORCHVISION_ROOT", str(folder.parent))
    (_, y), _ = cifar100.load_data(label_mode="coarse")
    assert y[:, 0].tolist() == split["train"][2].tolist()


# -------------------------------------------------------------- CIFAR-100

@pytest.fixture
def small_cifar100(tmp_path):
    """``cifar-100-python/`` with 50 train and 10 test random images, str keys."""
    rng = np.random.default_rng(100)
    folder = tmp_path / cifar100.ARCHIVE.folder
    folder.mkdir()
    split = {}
    for name, n in (("train", 50), ("test", 10)):
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        fine = rng.permutation(100)[:n]
        coarse = fine // 5  # any fixed map to 0..19 will do
        write_batch(folder / name, "str", data=data, fine_labels=fine, coarse_labels=coarse)
        split[name] = data, fine, coarse
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"f{i}" for i in range(100)],
                     "coarse_label_names": [f"c{i}" for i in range(20)]}, f, protocol=2)
    return folder, split


@pytest.mark.parametrize("label_mode", ["fine", "coarse"])
def test_cifar100_labels_and_layout(small_cifar100, label_mode):
    folder, split = small_cifar100
    (x, y), (xt, yt) = cifar100.load_data(label_mode, path=folder)
    for (images, labels), (data, fine, coarse) in (((x, y), split["train"]), ((xt, yt), split["test"])):
        n = len(data)
        assert (images.shape, images.dtype) == ((n, 32, 32, 3), np.uint8)
        assert (labels.shape, labels.dtype) == ((n, 1), np.uint8)
        assert labels[:, 0].tolist() == (fine if label_mode == "fine" else coarse).tolist()
        for c in range(3):  # channel plane c, row-major, is images[..., c]
            assert np.array_equal(images[..., c].reshape(n, 1024), data[:, 1024 * c:1024 * (c + 1)])


def test_cifar100_found_via_env_parent(small_cifar100, monkeypatch):
    folder, split = small_cifar100
    monkeypatch.setenv("PYRESNET_DATA", str(folder.parent))
    (_, y), _ = cifar100.load_data(label_mode="coarse")
    assert y[:, 0].tolist() == split["train"][2].tolist()


@pytest.mark.parametrize("label_mode", ["Fine", "both", "", None, ["fine"]])
def test_cifar100_bad_label_mode(label_mode):
    # raised before any look-up: with no data anywhere a look-up would be FileNotFoundError
    with pytest.raises(ValueError, match="label_mode"):
        cifar100.load_data(label_mode=label_mode)


@pytest.mark.parametrize("change, match", [
    (lambda b: b.update(fine_labels=[100] * 50), r"fine_labels must lie in \[0, 100\)"),
    (lambda b: b.update(fine_labels=[1] * 49), "expected 50 integer fine_labels"),
    (lambda b: b.update(data=b["data"][:, :3000]), r"expected data uint8 \(N, 3072\)"),
    (lambda b: b.update(data=b["data"].astype(np.int16)), "expected data uint8"),
    (lambda b: b.pop("fine_labels"), "no fine_labels entry"),
])
def test_malformed_batch_is_a_value_error(small_cifar100, change, match):
    folder, _ = small_cifar100
    batch = raw_batch(folder / "train")
    change(batch)
    with open(folder / "train", "wb") as f:
        pickle.dump(batch, f, protocol=2)
    with pytest.raises(ValueError, match=match) as info:
        cifar100.load_data(path=folder)
    assert str(folder / "train") in str(info.value)


class _Exploit:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return os.mkdir, (self.target,)


def test_pickled_code_is_not_run(small_cifar100, tmp_path):
    folder, _ = small_cifar100
    batch = raw_batch(folder / "train")
    batch["filenames"] = _Exploit(str(tmp_path / "pwned"))
    with open(folder / "train", "wb") as f:
        pickle.dump(batch, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="refusing to load"):
        cifar100.load_data(path=folder)
    assert not (tmp_path / "pwned").exists()


def test_staging_left_by_a_killed_unpack_is_removed_on_the_next_run(small_cifar10, monkeypatch,
                                                                    isolated):
    """An unpack killed before its cleanup leaves `.unpack-<pid>-*` behind;
    the next load removes those whose process is gone and keeps a running
    one's (issue 9)."""
    monkeypatch.setattr(cifar10, "ARCHIVE", dataclasses.replace(cifar10.ARCHIVE, md5=small_cifar10.md5))
    with serving(small_cifar10.dir, monkeypatch):
        cifar10.load_data()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    dead = isolated / f".unpack-{int(gone.stdout)}-abc"
    (dead / "cifar-10-batches-py").mkdir(parents=True)
    (dead / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"partial")
    alive = isolated / ".unpack-1-xyz"  # pid 1 runs as long as the machine does
    alive.mkdir()
    assert_loaded(cifar10.load_data(), small_cifar10)
    assert not dead.exists() and alive.exists()
