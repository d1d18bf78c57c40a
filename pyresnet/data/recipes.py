"""Training-data recipes on :class:`Dataset`: the standard CIFAR
augmentation and the ImageNet-style recipe used to reproduce RegNets.

Both take uint8 NHWC images and integer labels as
``pyresnet.datasets.cifar10.load_data`` returns them and produce float32
NHWC batches normalised per channel; every step runs in C on the pipeline's
worker thread.
"""
import numpy as np

from ..layers.alternating_flip import AlternatingFlip
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


_FLIPS = ("random", "alternate", None)
# Keras fill_mode names -> RandomCrop's (NumPy's) padding modes.
_PADDING_OF_FILL = {"constant": "zero", "reflect": "symmetric", "mirror": "reflect",
                    "nearest": "edge", "wrap": "wrap"}


def cifar_augmentation(seed=None, padding=4, mean=CIFAR10_MEAN, std=CIFAR10_STD, flip="random",
                       fill_mode="constant"):
    """The CIFAR augmentation as layers: ``[RandomCrop(32, 32, padding),
    a horizontal flip, per-channel normalisation]``.  The defaults are the
    standard one (He et al. 2015, section 4.2: 4 pixels of zero padding and
    a random flip); ``padding=2, flip="alternate", fill_mode="mirror"`` is
    airbench94's (Jordan 2024, arXiv 2404.00498: reflect padding by 2 and a
    random crop, and the alternating flip).

    Args:
        seed (int): seeds the two random layers (None: unseeded).
        padding (int): the largest shift, in pixels: the images are padded by
            it and a random 32x32 window is cropped (a uniform shift in
            [-padding, padding] on each axis); 0: no shift.
        mean, std: per-channel statistics on the [0, 1] scale (CIFAR-10's).
        flip: "random" (:class:`~pyresnet.layers.RandomFlip`, each image
            flipped left-right with probability 1/2 every time),
            "alternate" (:class:`~pyresnet.layers.AlternatingFlip`: flipped in
            every other pass), or None (no flip).
        fill_mode: what the padding holds, Keras's names: "constant" (zeros),
            "reflect" (d c b a | a b c d, the edge repeated), "mirror"
            (d c b | a b c d, PyTorch's "reflect"), "nearest" or "wrap".
    Raises:
        ValueError: unknown flip or fill_mode, a negative padding.
    """
    if flip not in _FLIPS:
        raise ValueError(f"cifar_augmentation: flip must be one of {_FLIPS}, got {flip!r}")
    if fill_mode not in _PADDING_OF_FILL:
        raise ValueError(f"cifar_augmentation: fill_mode must be one of "
                         f"{sorted(_PADDING_OF_FILL)}, got {fill_mode!r}")
    if isinstance(padding, bool) or not isinstance(padding, (int, np.integer)) or padding < 0:
        raise ValueError(f"cifar_augmentation: padding must be an int >= 0, got {padding!r}")
    crop_seed, flip_seed = _seeds(seed, 2)
    steps = []
    if padding:
        steps.append(RandomCrop(32, 32, seed=crop_seed, padding=int(padding),
                                padding_mode=_PADDING_OF_FILL[fill_mode]))
    if flip == "random":
        steps.append(RandomFlip("horizontal", seed=flip_seed))
    elif flip == "alternate":
        steps.append(AlternatingFlip("horizontal", seed=flip_seed))
    return steps + [normalization(mean, std)]


def cifar_train_dataset(x, y, batch_size=128, seed=None, prefetch=2, mean=CIFAR10_MEAN,
                        std=CIFAR10_STD, drop_remainder=False, augment=True, mixup_alpha=0.0,
                        num_classes=None, flip="random", translate=4, fill_mode="constant"):
    """Shuffled, augmented CIFAR training batches (:func:`cifar_augmentation`,
    then mixup when ``mixup_alpha > 0``).  airbench94's augmentation (Jordan
    2024, arXiv 2404.00498) is ``flip="alternate", translate=2,
    fill_mode="mirror"``.

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
        flip: "random" (default), "alternate" (flipped in every other pass,
            starting from a random choice per image) or None.
        translate (int): the largest shift in pixels (pad, then a random
            32x32 crop); 0: none.
        fill_mode: what the shift brings in: "constant" (zeros, default),
            "reflect" (Keras's: the edge repeated), "mirror" (PyTorch's
            reflect), "nearest" or "wrap".
    Returns:
        Dataset of ``(float32 (B, 32, 32, 3), int32 (B,))`` (soft labels with
        mixup), reshuffled every pass.
    Raises:
        ValueError: images not (N, 32, 32, 3), labels not integers, mixup
            without num_classes, unknown flip or fill_mode.
    """
    x = np.asarray(x)
    if x.ndim != 4 or x.shape[1:] != (32, 32, 3):
        raise ValueError(f"cifar_train_dataset: expected images (N, 32, 32, 3), got {x.shape}")
    if mixup_alpha and not num_classes:
        raise ValueError("cifar_train_dataset: mixup needs num_classes")
    shuffle_seed, aug_seed = _seeds(seed, 2)
    ds = Dataset.from_tensor_slices((x, _labels(y))).shuffle(len(x), seed=shuffle_seed)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    steps = cifar_augmentation(aug_seed, padding=translate, mean=mean, std=std, flip=flip,
                               fill_mode=fill_mode) if augment else [normalization(mean, std)]
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
