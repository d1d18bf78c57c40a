"""CIFAR-10: 60,000 32x32 colour images in 10 classes (Krizhevsky 2009,
"Learning Multiple Layers of Features from Tiny Images",
https://www.cs.toronto.edu/~kriz/cifar.html)."""
import numpy as np

from . import _cache

ARCHIVE = _cache.Archive(
    name="CIFAR-10",
    filename="cifar-10-python.tar.gz",
    md5="c58f30108f718f92721af3b95e74349a",
    folder="cifar-10-batches-py",
    files=tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",),
)

CLASS_NAMES = ("airplane", "automobile", "bird", "cat", "deer",
               "dog", "frog", "horse", "ship", "truck")


def load_data(path=None):
    """Load CIFAR-10 as ``keras.datasets.cifar10.load_data()`` does.

    Args:
        path: a directory containing ``cifar-10-batches-py/`` (the official
            "python version" release) or that folder itself; None to look
            only in ``$PYRESNET_DATA`` (same two forms), the cache
            ``$PYRESNET_CACHE_DIR`` (default ``~/.pyresnet/datasets``),
            Keras's cache (``~/.keras/datasets/cifar-10-batches-py``, or
            ``$KERAS_HOME``), the torchvision roots in
            ``$PYRESNET_TORCHVISION_ROOT`` (``<root>/cifar-10-batches-py``), then
            the official archive that Keras or torchvision kept (unpacked
            into the cache if its MD5 is right), and only then download
            the official archive (MD5-checked) into the cache and unpack it
            there.  Details in ``_cache``.

    Returns:
        ``(x_train, y_train), (x_test, y_test)``: images uint8 NHWC
        (50000, 32, 32, 3) and (10000, 32, 32, 3), pixel values 0..255, RGB;
        labels uint8 (50000, 1) and (10000, 1), class indices 0..9 in the
        order of ``CLASS_NAMES``.  Training images come in file order
        (data_batch_1..5).  This matches keras/src/datasets/cifar10.py
        (channels_last) in values, dtypes and shapes; unlike Keras the
        image arrays are C-contiguous rather than transposed views.

    Raises:
        FileNotFoundError: the data is nowhere and the download failed; the
            message lists every place looked and the URL.
        ChecksumError (an OSError): the download's MD5 is not the official one.
        ValueError: a batch file is not in the official format.
    """
    folder = _cache.locate(ARCHIVE, path)
    train = [_cache.read_batch(folder / f"data_batch_{i}", "labels", 10) for i in range(1, 6)]
    x_train = np.concatenate([x for x, _ in train])
    y_train = np.concatenate([y for _, y in train]).reshape(-1, 1)
    x_test, y_test = _cache.read_batch(folder / "test_batch", "labels", 10)
    return (x_train, y_train), (x_test, y_test.reshape(-1, 1))
