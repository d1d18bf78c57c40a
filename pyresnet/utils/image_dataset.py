"""``image_dataset_from_directory`` (Keras 3's arguments), returning a
:class:`pyresnet.data.Dataset`.

Unlike tf.data, which decodes files on every pass, the images are decoded
(Pillow) and resized once, when the dataset is made, and held in memory as
float32 (N, height, width, channels): 4 bytes per value, so 10,000 images of
180 x 180 x 3 take 3.9 GB.  Every pass then shuffles, batches and runs
the preprocessing layers mapped on it in C like any in-memory Dataset.
"""
import os

import numpy as np

from .image_utils import pil_image, resize_images, smart_resize

ALLOWLIST_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
_CHANNELS = {"rgb": 3, "rgba": 4, "grayscale": 1}


def _index_directory(directory, labels, class_names, shuffle, seed, follow_links):
    """(file paths, integer labels or None, class names), in Keras 3's order
    (keras/src/utils/dataset_utils.py index_directory): class folders sorted
    by name (or ``class_names``' order), each walked in sorted order, then
    paths and labels shuffled by ``numpy.random.RandomState(seed)``."""
    if labels == "inferred":
        subdirs = [d for d in sorted(os.listdir(directory))
                   if os.path.isdir(os.path.join(directory, d)) and not d.startswith(".")]
        if class_names is not None:
            if not set(class_names) <= set(subdirs):
                raise ValueError(f"image_dataset_from_directory: class_names {class_names} do "
                                 f"not match the subdirectories of {directory}: expected {subdirs} "
                                 f"(or a subset)")
            subdirs = list(class_names)
    else:
        subdirs = [""]
    paths, found = [], []
    for k, sub in enumerate(subdirs):
        root_dir = os.path.join(directory, sub)
        walk = sorted(os.walk(root_dir, followlinks=follow_links), key=lambda w: w[0])
        for root, _, files in walk:
            for name in sorted(files):
                if name.lower().endswith(ALLOWLIST_FORMATS):
                    paths.append(os.path.join(root, name))
                    found.append(k)
    if labels == "inferred":
        labels = np.array(found, np.int32)
        names = subdirs
    elif labels is None:
        names = None
    else:
        if len(labels) != len(paths):
            raise ValueError(f"image_dataset_from_directory: {len(labels)} labels for "
                             f"{len(paths)} image files in {directory}")
        names = [str(v) for v in sorted(set(labels))]
        labels = np.asarray(labels)
    if shuffle:
        rng = np.random.RandomState(seed)
        rng.shuffle(paths)
        if labels is not None:
            rng = np.random.RandomState(seed)
            rng.shuffle(labels)
    return paths, labels, names


def _split(paths, labels, validation_split, subset, verbose):
    """Keras's split: the last ``int(validation_split * n)`` files validate."""
    if not validation_split:
        return paths, labels
    n_val = int(validation_split * len(paths))
    if subset == "training":
        if verbose:
            print(f"Using {len(paths) - n_val} files for training.")
        cut = len(paths) - n_val
        return paths[:cut], None if labels is None else labels[:cut]
    if verbose:
        print(f"Using {n_val} files for validation.")
    return paths[len(paths) - n_val:], None if labels is None else labels[len(paths) - n_val:]


def _load(path, image_module, color_mode, image_size, interpolation, crop, pad):
    """One file decoded (channels as ``tf.image.decode_image`` gives them)
    and resized: float32 (height, width, channels)."""
    with image_module.open(path) as img:
        img.seek(0)  # the first frame of an animation
        mode = {"rgb": "RGB", "rgba": "RGBA", "grayscale": "L"}[color_mode]
        x = np.asarray(img.convert(mode) if img.mode != mode else img, dtype=np.uint8)
    if x.ndim == 2:
        x = x[:, :, None]
    th, tw = image_size
    if crop:
        return smart_resize(x, image_size, interpolation)
    if pad:  # tf.image.resize_with_pad
        h, w = x.shape[:2]
        ratio = max(w / tw, h / th)
        rh, rw = int(np.floor(h / ratio)), int(np.floor(w / ratio))
        top, left = (th - rh) // 2, (tw - rw) // 2
        out = np.zeros((th, tw, x.shape[2]), np.float32)
        out[top:top + rh, left:left + rw] = resize_images(x, (rh, rw), interpolation)
        return out
    return resize_images(x, image_size, interpolation)


def _make_dataset(paths, labels, label_mode, num_classes, color_mode, image_size, interpolation,
                  crop, pad, batch_size, shuffle, seed, class_names):
    from ..data.dataset import Dataset  # noqa: PLC0415 (data imports models)
    image_module = pil_image()
    images = np.empty((len(paths),) + tuple(image_size) + (_CHANNELS[color_mode],), np.float32)
    for i, path in enumerate(paths):
        images[i] = _load(path, image_module, color_mode, image_size, interpolation, crop, pad)
    if label_mode is None:
        ds = Dataset.from_tensor_slices(images)
    else:
        if label_mode == "int":
            y = labels.astype(np.int32)
        elif label_mode == "categorical":
            y = np.eye(num_classes, dtype=np.float32)[labels]
        else:  # binary
            y = labels.astype(np.float32)[:, None]
        ds = Dataset.from_tensor_slices((images, y))
    if shuffle:
        ds = ds.shuffle(batch_size * 8 if batch_size else 1024, seed=seed)
    if batch_size is not None:
        ds = ds.batch(batch_size)
    ds = ds.prefetch(2)
    ds.class_names = class_names
    ds.file_paths = list(paths)
    return ds


def image_dataset_from_directory(directory, labels="inferred", label_mode="int",
                                 class_names=None, color_mode="rgb", batch_size=32,
                                 image_size=(256, 256), shuffle=True, seed=None,
                                 validation_split=None, subset=None, interpolation="bilinear",
                                 follow_links=False, crop_to_aspect_ratio=False,
                                 pad_to_aspect_ratio=False, data_format=None, format="tf",
                                 verbose=True):
    """A :class:`~pyresnet.data.Dataset` of the images in ``directory``, as
    ``keras.utils.image_dataset_from_directory`` (Keras 3).

    With ``labels="inferred"`` each subdirectory is a class (sorted by name;
    ``class_names`` picks and orders them) and its images, at any depth,
    are labelled by it.  Files ending in .bmp, .gif, .jpeg, .jpg, .png are
    read (the first frame of a GIF).  The file list is shuffled once with
    ``numpy.random.RandomState(seed)`` (Keras's order), the last
    ``int(validation_split * n)`` files are the validation subset, and the
    training dataset is reshuffled every pass (buffer ``8 * batch_size``).
    Images are decoded and resized once, when the dataset is made (see the
    module docstring for the memory this takes).

    Args:
        directory (str or PathLike): the folder.
        labels: "inferred", None (images only), or a list of integer labels,
            one per file in the sorted walk order.
        label_mode: "int" (int32 (B,)), "categorical" (float32 one-hot
            (B, num_classes)), "binary" (float32 (B, 1), two classes) or
            None (images only).
        class_names: the class subdirectories to use, in label order.
        color_mode: "rgb" (3 channels), "rgba" (4) or "grayscale" (1).
        batch_size (int or None): None yields single images.
        image_size: (height, width) (or one int) the images are resized to.
        shuffle (bool): shuffle the files (and every training pass).
        seed (int): the shuffling seed (needed with ``validation_split`` and
            ``shuffle``, as Keras requires).
        validation_split (float): in (0, 1).
        subset: "training", "validation" or "both" (a [train, validation]
            pair; the validation one is not shuffled).
        interpolation: "bilinear" (``tf.image.resize``'s half-pixel
            bilinear, no antialiasing, by the ``resize_bilinear`` op) or
            "nearest"; Keras's other methods raise NotImplementedError.
        follow_links (bool): follow symbolic links to folders.
        crop_to_aspect_ratio (bool): crop the central box of the target's
            aspect ratio before resizing (``smart_resize``).
        pad_to_aspect_ratio (bool): resize keeping the aspect ratio and pad
            with zeros to the target (``tf.image.resize_with_pad``).
        data_format: None or "channels_last".
        format: "tf" only (a pyresnet Dataset with tf.data's methods).
        verbose (bool): print the counts, as Keras.
    Returns:
        Dataset of ``(float32 images (B, height, width, channels), labels)``
        (images only without labels), with attributes ``class_names`` and
        ``file_paths``; a list of two with ``subset="both"``.
    Raises:
        ValueError: Keras's argument errors (a bad label_mode, color_mode,
            image_size, split or subset; validation_split with shuffle and no
            seed; binary labels for other than 2 classes; no images found).
        ImportError: Pillow is missing (pip install pyresnet[images]).
    """
    fn = "image_dataset_from_directory"
    if labels not in ("inferred", None):
        if not isinstance(labels, (list, tuple, np.ndarray)):
            raise ValueError(f'{fn}: labels must be "inferred", None or a list of integer '
                             f"labels, got {labels!r}")
        if class_names:
            raise ValueError(f'{fn}: class_names can only be given with labels="inferred"')
    if label_mode not in ("int", "categorical", "binary", None):
        raise ValueError(f'{fn}: label_mode must be "int", "categorical", "binary" or None, got '
                         f"{label_mode!r}")
    if labels is None or label_mode is None:
        labels, label_mode = None, None
    if color_mode not in _CHANNELS:
        raise ValueError(f'{fn}: color_mode must be "rgb", "rgba" or "grayscale", got '
                         f"{color_mode!r}")
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    if not isinstance(image_size, (list, tuple)) or len(image_size) != 2 \
            or not all(isinstance(v, int) and v > 0 for v in image_size):
        raise ValueError(f"{fn}: image_size must be (height, width) of positive ints, got "
                         f"{image_size!r}")
    interpolation = interpolation.lower()
    if interpolation not in ("bilinear", "nearest"):
        raise NotImplementedError(f"{fn}: interpolation {interpolation!r} is not provided; use "
                                  f"'bilinear' or 'nearest'")
    if crop_to_aspect_ratio and pad_to_aspect_ratio:
        raise ValueError(f"{fn}: only one of crop_to_aspect_ratio, pad_to_aspect_ratio can be "
                         f"True")
    if format != "tf":
        raise ValueError(f'{fn}: format must be "tf" (a pyresnet Dataset), got {format!r}')
    if data_format not in (None, "channels_last"):
        raise ValueError(f"{fn}: only data_format='channels_last' is supported, got "
                         f"{data_format!r}")
    if batch_size is not None and (isinstance(batch_size, bool) or
                                   not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"{fn}: batch_size must be a positive int or None, got {batch_size!r}")
    if validation_split and not 0 < validation_split < 1:
        raise ValueError(f"{fn}: validation_split must be between 0 and 1, got "
                         f"{validation_split}")
    if (validation_split or subset) and not (validation_split and subset):
        raise ValueError(f"{fn}: if subset is set, validation_split must be set, and inversely")
    if subset not in ("training", "validation", "both", None):
        raise ValueError(f'{fn}: subset must be "training", "validation" or "both", got '
                         f"{subset!r}")
    if validation_split and shuffle and seed is None:
        raise ValueError(f"{fn}: with validation_split and shuffle, give a seed, so that the "
                         f"training and validation subsets do not overlap")
    if not os.path.isdir(directory):
        raise ValueError(f"{fn}: {directory!r} is not a directory")
    if seed is None:
        seed = np.random.randint(1_000_000)
    paths, labels, class_names = _index_directory(directory, labels, class_names, shuffle, seed,
                                                  follow_links)
    if verbose:
        print(f"Found {len(paths)} files." if labels is None else
              f"Found {len(paths)} files belonging to {len(class_names)} classes.")
    if label_mode == "binary" and len(class_names) != 2:
        raise ValueError(f'{fn}: label_mode="binary" needs exactly 2 classes, got '
                         f"{class_names}")
    num_classes = len(class_names) if class_names else 0
    args = (label_mode, num_classes, color_mode, image_size, interpolation,
            crop_to_aspect_ratio, pad_to_aspect_ratio, batch_size)
    if subset == "both":
        train = _split(paths, labels, validation_split, "training", verbose)
        val = _split(paths, labels, validation_split, "validation", verbose)
        for part, name in ((train, "training"), (val, "validation")):
            if not part[0]:
                raise ValueError(f"{fn}: no {name} images found in {directory} (allowed "
                                 f"formats: {ALLOWLIST_FORMATS})")
        return [_make_dataset(*train, *args, shuffle, seed, class_names),
                _make_dataset(*val, *args, False, seed, class_names)]
    paths, labels = _split(paths, labels, validation_split, subset, verbose)
    if not paths:
        raise ValueError(f"{fn}: no images found in {directory} (allowed formats: "
                         f"{ALLOWLIST_FORMATS})")
    return _make_dataset(paths, labels, *args, shuffle, seed, class_names)
