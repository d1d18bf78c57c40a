"""Data for the Keras-guide walk-throughs: the real CIFAR-10, loaded once per
session with ``pyresnet.datasets.cifar10.load_data`` (as the guides load
theirs with ``keras.datasets``), and MNIST-shaped arrays made from it for
the guides' 28x28 grey-scale sections (the centre 28x28 of each image's
grey levels), so every guide runs on real images."""
import numpy as np
import pytest

import pyresnet as pr


@pytest.fixture(scope="session")
def cifar10(cifar10_dir):
    """``(x_train, y_train), (x_test, y_test)`` as ``load_data`` returns them
    (uint8 images, (N, 1) uint8 labels)."""
    return pr.datasets.cifar10.load_data(cifar10_dir)


def grey28(images):
    """MNIST-shaped float32 images in [0, 1]: (N, 28, 28) grey levels of the
    centre of (N, 32, 32, 3) uint8 CIFAR images."""
    grey = images[:, 2:30, 2:30, :].astype(np.float32).mean(axis=-1)
    return grey / 255.0


@pytest.fixture(scope="session")
def mnist_like(cifar10):
    """``(x_train, y_train), (x_test, y_test)`` shaped as
    ``keras.datasets.mnist.load_data()`` gives them after the guides' scaling:
    float32 (N, 28, 28) in [0, 1] and int (N,) labels (2,000 and 500 images)."""
    (x_train, y_train), (x_test, y_test) = cifar10
    return ((grey28(x_train[:2000]), y_train[:2000, 0].astype(np.int64)),
            (grey28(x_test[:500]), y_test[:500, 0].astype(np.int64)))
