"""CIFAR-100: 60,000 32x32 colour images in 100 fine classes grouped into 20
coarse superclasses (Krizhevsky 2009, "Learning Multiple Layers of Features
from Tiny Images", https://www.cs.toronto.edu/~kriz/cifar.html)."""
from . import _cache

ARCHIVE = _cache.Archive(
    name="CIFAR-100",
    filename="cifar-100-python.tar.gz",
    md5="eb9058c3a382ffc7106e4002c42a8d85",
    folder="cifar-100-python",
    files=("train", "test"),
)

_NUM_CLASSES = {"fine": 100, "coarse": 20}


def load_data(label_mode="fine", path=None):
    """Load CIFAR-100 as ``keras.datasets.cifar100.load_data()`` does.

    Args:
        label_mode: ``"fine"`` (100 classes, the ``fine_labels`` of the
            release) or ``"coarse"`` (20 superclasses, ``coarse_labels``).
        path: a directory containing ``cifar-100-python/`` (the official
            "python version" release) or that folder itself; None to look
            only in ``$PYRESNET_DATA`` (same two forms), the cache
            ``$PYRESNET_CACHE_DIR`` (default ``~/.pyresnet/datasets``),
            Keras's cache (``~/.keras/datasets/cifar-100-python``, or
            ``$KERAS_HOME``), the torchvision roots in
            ``$PYRESNET_TORCHVISION_ROOT`` (``<root>/cifar-100-python``), then
            the official archive that Keras or torchvision kept (unpacked
            into the cache if its MD5 is right), and only then download
            the official archive (MD5-checked) into the cache and unpack it
            there.  Details in ``_cache``.

    Returns:
        ``(x_train, y_train), (x_test, y_test)``: images uint8 NHWC
        (50000, 32, 32, 3) and (10000, 32, 32, 3), pixel values 0..255, RGB;
        labels uint8 (50000, 1) and (10000, 1), class indices 0..99 (fine)
        or 0..19 (coarse), in file order.  Shapes and image values match
        keras/src/datasets/cifar100.py (channels_last) and the labels
        match its documented uint8 (its code actually returns int64 labels
        there, as it reshapes a Python list); the image arrays are
        C-contiguous rather than transposed views.

    Raises:
        ValueError: ``label_mode`` is neither "fine" nor "coarse" (checked
            before anything is read or downloaded), or a file is not in the
            official format.
        FileNotFoundError: the data is nowhere and the download failed; the
            message lists every place looked and the URL.
        ChecksumError (an OSError): the download's MD5 is not the official one.
    """
    if label_mode not in ("fine", "coarse"):
        raise ValueError(f'cifar100.load_data: label_mode must be "fine" or "coarse", '
                         f"got {label_mode!r}")
    folder = _cache.locate(ARCHIVE, path)
    key, num_classes = label_mode + "_labels", _NUM_CLASSES[label_mode]
    x_train, y_train = _cache.read_batch(folder / "train", key, num_classes)
    x_test, y_test = _cache.read_batch(folder / "test", key, num_classes)
    return (x_train, y_train.reshape(-1, 1)), (x_test, y_test.reshape(-1, 1))
