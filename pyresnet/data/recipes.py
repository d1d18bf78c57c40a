"""Training-data recipes on :class:`Dataset`: the standard CIFAR
augmentation and the ImageNet-style recipe used to reproduce RegNets.

Both take uint8 NHWC images and integer labels as
``pyresnet.datasets.cifar10.load_data`` returns them and produce float32
NHWC batches normalised per channel; every step runs in C on the pipeline's
worker thread.
"""
import numpy as np

from ..layers.mix_up import MixUp
from ..layers.normalization import Normalization
from ..layers.random_crop import RandomCrop
from ..layers.random_flip import RandomFlip
from ..layers.random_lighting import RandomLighting
from ..layers.random_resized_crop import RandomResizedCrop
from ..ops.augment import rgb_pca
from .dataset import Dataset

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
"""Per-channel mean of the CIFAR-10 training images on the [0, 1] scale."""
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
"""Per-channel standard deviation of the CIFAR-10 training images on [0, 1]."""


def _seeds(seed, n):
    """n independent layer seeds from one seed (None stays None)."""
    if seed is None:
        return [None] * n
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(n, np.uint64) >> 1]


def normalization(mean=CIFAR10_MEAN, std=CIFAR10_STD):
    """A :class:`~pyresnet.layers.Normalization` for uint8 (0..255) images
    from a mean and standard deviation quoted on the [0, 1] scale."""
    mean, std = 255 * np.asarray(mean, np.float64), 255 * np.asarray(std, np.float64)
    return Normalization(mean=mean, variance=std * std)


def _labels(y):
    """Integer labels (N,) or (N, 1) as int32 (N,)."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise ValueError(f"expected integer labels of shape (N,) or (N, 1), got {y.dtype} "
                         f"{y.shape}")
    return y.astype(np.int32)


def cifar_augmentation(seed=None, padding=4, mean=CIFAR10_MEAN, std=CIFAR10_STD):
    """The standard CIFAR augmentation (He et al. 2015, section 4.2) as
    layers: ``[RandomCrop(32, 32, padding=4) with zero padding,
    RandomFlip("horizontal"), per-channel normalisation]``.

    Args:
        seed (int): seeds the two random layers (None: unseeded).
        padding (int): zero padding before the 32x32 crop.
        mean, std: per-channel statistics on the [0, 1] scale (CIFAR-10's).
    """
    crop_seed, flip_seed = _seeds(seed, 2)
    return [RandomCrop(32, 32, seed=crop_seed, padding=padding),
            RandomFlip("horizontal", seed=flip_seed), normalization(mean, std)]


def cifar_train_dataset(x, y, batch_size=128, seed=None, prefetch=2, mean=CIFAR10_MEAN,
                        std=CIFAR10_STD, drop_remainder=False, augment=True, mixup_alpha=0.0,
                        num_classes=None):
    """Shuffled, augmented CIFAR training batches (:func:`cifar_augmentation`,
    then mixup when ``mixup_alpha > 0``).

    Args:
        x: uint8 images (N, 32, 32, 3).
        y: integer labels (N,) or (N, 1).
        batch_size (int): images per batch.
        seed (int): makes the shuffling and the augmentation reproducible.
        prefetch (int): batches prepared ahead on the C worker thread.
        mean, std: normalisation statistics on [0, 1] (CIFAR-10's; use the
            CIFAR-100 ones for CIFAR-100).
        drop_remainder (bool): drop the last, smaller batch.
        augment (bool): False only shuffles and normalises (no mixup either).
        mixup_alpha (float): > 0 adds :class:`~pyresnet.layers.MixUp` (Zhang
            et al. 2018) with Beta(alpha, alpha): the labels become soft
            (B, num_classes) float32.
        num_classes (int): the soft labels' width (needed with mixup).
    Returns:
        Dataset of ``(float32 (B, 32, 32, 3), int32 (B,))`` (soft labels with
        mixup), reshuffled every pass.
    Raises:
        ValueError: images not (N, 32, 32, 3), labels not integers, mixup
            without num_classes.
    """
    x = np.asarray(x)
    if x.ndim != 4 or x.shape[1:] != (32, 32, 3):
        raise ValueError(f"cifar_train_dataset: expected images (N, 32, 32, 3), got {x.shape}")
    if mixup_alpha and not num_classes:
        raise ValueError("cifar_train_dataset: mixup needs num_classes")
    shuffle_seed, aug_seed = _seeds(seed, 2)
    ds = Dataset.from_tensor_slices((x, _labels(y))).shuffle(len(x), seed=shuffle_seed)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    steps = cifar_augmentation(aug_seed, mean=mean, std=std) if augment \
        else [normalization(mean, std)]
    if augment and mixup_alpha:
        steps.append(MixUp(mixup_alpha, num_classes=num_classes, seed=_seeds(aug_seed, 3)[2]))
    for layer in steps:
        ds = ds.map(layer)
    return ds.prefetch(prefetch)


def eval_dataset(x, y, batch_size=256, mean=CIFAR10_MEAN, std=CIFAR10_STD, num_classes=None):
    """Evaluation batches: normalisation only, in order.

    Args:
        num_classes (int or None): give it to get one-hot float32 labels
            (B, num_classes), for a model trained on soft (mixup) labels.
    Returns:
        a Dataset of ``(float32 images, int32 labels)`` (one-hot labels with
        ``num_classes``).
    """
    labels = _labels(y)
    if num_classes:
        labels = np.eye(num_classes, dtype=np.float32)[labels]
    ds = Dataset.from_tensor_slices((np.asarray(x), labels)).batch(batch_size)
    return ds.map(normalization(mean, std)).prefetch(2)


def regnet_augmentation(num_classes, size=32, seed=None, eigval=None, eigvec=None,
                        area_factor=(0.08, 1.0), lighting_stddev=0.1, mixup_alpha=0.2,
                        mean=CIFAR10_MEAN, std=CIFAR10_STD):
    """The recipe used to reproduce RegNets (Radosavovic et al. 2020, as in
    pycls: Inception crop, flip, PCA lighting) plus mixup, as layers:
    ``[RandomResizedCrop(size), RandomFlip("horizontal"), RandomLighting,
    normalisation, MixUp(mixup_alpha)]``.  The last one (left out when
    ``mixup_alpha`` is 0) turns the labels into soft labels (N, num_classes):
    train with ``CategoricalCrossentropy``.

    Args:
        num_classes (int): for the soft labels.
        size (int): output height and width.
        seed (int): seeds the random layers (None: unseeded).
        eigval, eigvec: RGB PCA on the [0, 1] scale (:func:`rgb_pca` of the
            training images); default ImageNet's.
        area_factor: the crop's area range.
        lighting_stddev (float): alpha's standard deviation.
        mixup_alpha (float): Beta(alpha, alpha) for mixup; 0: no mixup.
        mean, std: normalisation statistics on [0, 1].
    """
    seeds = _seeds(seed, 4)
    lighting = {} if eigval is None else {"eigval": eigval, "eigvec": eigvec}
    steps = [RandomResizedCrop((size, size), crop_area_factor=area_factor, seed=seeds[0]),
             RandomFlip("horizontal", seed=seeds[1]),
             RandomLighting(stddev=lighting_stddev, seed=seeds[2], **lighting),
             normalization(mean, std)]
    if mixup_alpha:
        steps.append(MixUp(mixup_alpha, num_classes=num_classes, seed=seeds[3]))
    return steps


def regnet_train_dataset(x, y, num_classes, batch_size=128, seed=None, prefetch=2, size=None,
                         mixup_alpha=0.2, mean=CIFAR10_MEAN, std=CIFAR10_STD,
                         drop_remainder=False, area_factor=(0.08, 1.0), pca="train"):
    """Shuffled batches augmented with :func:`regnet_augmentation`.

    Args:
        x: uint8 images (N, H, W, 3); y: integer labels (N,) or (N, 1).
        num_classes (int): for the soft labels.
        size (int): output side (default: the images' height).
        area_factor: the Inception crop's area range (a fraction of the image).
        pca (str): the PCA lighting's eigenvalues and eigenvectors:
            ``"train"`` computes them from ``x`` (:func:`rgb_pca`),
            ``"imagenet"`` takes ImageNet's (AlexNet's, as pycls).
        others: as :func:`cifar_train_dataset` and :func:`regnet_augmentation`.
    Returns:
        Dataset of ``(float32 (B, size, size, 3), float32 soft labels (B, num_classes))``
        (int32 labels (B,) when ``mixup_alpha`` is 0).
    Raises:
        ValueError: for images that are not (N, H, W, 3) or an unknown ``pca``.
    """
    x = np.asarray(x)
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"regnet_train_dataset: expected images (N, H, W, 3), got {x.shape}")
    if pca not in ("train", "imagenet"):
        raise ValueError(f"regnet_train_dataset: pca must be 'train' or 'imagenet', got {pca!r}")
    eigval, eigvec = rgb_pca(x) if pca == "train" else (None, None)
    shuffle_seed, aug_seed = _seeds(seed, 2)
    ds = Dataset.from_tensor_slices((x, _labels(y))).shuffle(len(x), seed=shuffle_seed)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    for layer in regnet_augmentation(num_classes, size or x.shape[1], aug_seed, eigval, eigvec,
                                     area_factor=area_factor, mixup_alpha=mixup_alpha,
                                     mean=mean, std=std):
        ds = ds.map(layer)
    return ds.prefetch(prefetch)
