"""Image files with Keras 3's names (``keras.utils.load_img``,
``img_to_array``, ``array_to_img``, ``save_img``, ``smart_resize``).

Reading and writing go through Pillow, an optional extra
(``pip install pyresnet[images]``); without it these functions raise an
ImportError that says so.  Arrays are NHWC (``channels_last``); Keras's
``data_format="channels_first"`` is refused.  Files are written atomically
(a temporary file fsynced and renamed, :mod:`pyresnet.utils.atomic`).
"""
import io
import os
import pathlib
import warnings

import numpy as np

from . import atomic

_PIL_FILTERS = ("nearest", "bilinear", "bicubic", "hamming", "box", "lanczos")


def pil_image():
    """The ``PIL.Image`` module, or ImportError naming the extra to install."""
    try:
        from PIL import Image  # noqa: PLC0415
    except ImportError:
        raise ImportError("pyresnet's image files need Pillow: pip install pyresnet[images] "
                          "(or pip install pillow)") from None
    return Image


def _channels_last(data_format, fn):
    if data_format not in (None, "channels_last"):
        raise ValueError(f"{fn}: only data_format='channels_last' (NHWC) is supported, got "
                         f"{data_format!r}")


def array_to_img(x, data_format=None, scale=True, dtype=None):
    """A ``PIL.Image`` from an (H, W, C) array, as ``keras.utils.array_to_img``.

    Args:
        x: (H, W, C) array or Tensor, C = 1 (mode "L", or "I" when a value
            exceeds 255), 3 ("RGB") or 4 ("RGBA").
        data_format: None or "channels_last".
        scale (bool): rescale the values to [0, 255] first (``x - min``, then
            ``* 255 / max``); False: cast as they are (truncated to uint8).
        dtype: the working dtype (float32 by default).
    Returns:
        a ``PIL.Image.Image``.
    Raises:
        ImportError: Pillow is missing.  ValueError: not rank 3, or a channel
            count other than 1, 3, 4.
    """
    image = pil_image()
    _channels_last(data_format, "array_to_img")
    x = np.array(np.asarray(x), dtype=dtype or "float32")
    if x.ndim != 3:
        raise ValueError(f"array_to_img: expected an image of rank 3 (H, W, C), got shape "
                         f"{x.shape}")
    if x.shape[2] not in (1, 3, 4):
        raise ValueError(f"array_to_img: expected 1, 3 or 4 channels, got {x.shape[2]}")
    if scale:
        x = x - np.min(x)
        top = np.max(x)
        if top != 0:
            x /= top
        x *= 255
    if x.shape[2] == 4:
        return image.fromarray(x.astype("uint8"), "RGBA")
    if x.shape[2] == 3:
        return image.fromarray(x.astype("uint8"), "RGB")
    if np.max(x) > 255:
        return image.fromarray(x[:, :, 0].astype("int32"), "I")
    return image.fromarray(x[:, :, 0].astype("uint8"), "L")


def img_to_array(img, data_format=None, dtype=None):
    """A ``PIL.Image`` (or anything ``numpy.asarray`` takes) as an (H, W, C)
    array, as ``keras.utils.img_to_array``: a grayscale image gets a channel
    axis of 1.

    Args:
        img: the image.
        data_format: None or "channels_last".
        dtype: the array's dtype (float32 by default, values 0..255 for 8-bit
            images).
    Returns:
        numpy array (H, W, C).
    Raises:
        ValueError: an image that is not 2- or 3-dimensional.
    """
    _channels_last(data_format, "img_to_array")
    x = np.asarray(img, dtype=dtype or "float32")
    if x.ndim == 2:
        return x.reshape(x.shape + (1,))
    if x.ndim != 3:
        raise ValueError(f"img_to_array: unsupported image shape {x.shape}")
    return x


def save_img(path, x, data_format=None, file_format=None, scale=True, **kwargs):
    """Write an (H, W, C) array to an image file, as ``keras.utils.save_img``
    (through :func:`array_to_img`), atomically.

    Args:
        path: str or PathLike (the format follows its extension unless
            ``file_format`` is given), or a binary file object.
        x: (H, W, C) array or Tensor.
        data_format: None or "channels_last".
        file_format (str): e.g. "png", "jpeg" ("jpg" accepted).
        scale (bool): as :func:`array_to_img`.
        **kwargs: passed to ``PIL.Image.save`` (``quality=`` for JPEG...).
    Raises:
        ImportError: no Pillow.  ValueError: a bad array, an unknown format.
    """
    if file_format is None and isinstance(path, (str, pathlib.Path)):
        file_format = pathlib.Path(path).suffix[1:].lower() or None
    if file_format and file_format.lower() == "jpg":
        file_format = "jpeg"
    img = array_to_img(x, data_format=data_format, scale=scale)
    if img.mode == "RGBA" and file_format == "jpeg":
        warnings.warn("save_img: JPEG cannot hold an alpha channel; converting RGBA to RGB",
                      stacklevel=2)
        img = img.convert("RGB")
    if not isinstance(path, (str, os.PathLike)):
        img.save(path, format=file_format, **kwargs)
        return
    buffer = io.BytesIO()
    try:
        img.save(buffer, format=file_format, **kwargs)
    except KeyError:
        raise ValueError(f"save_img: unknown image format {file_format!r}") from None
    atomic.write_bytes(path, buffer.getvalue())


def load_img(path, color_mode="rgb", target_size=None, interpolation="nearest",
             keep_aspect_ratio=False):
    """Read an image file into a ``PIL.Image``, as ``keras.utils.load_img``.

    Args:
        path: str, PathLike or bytes path, or an ``io.BytesIO``.
        color_mode: "rgb" (default), "rgba" or "grayscale" (8-bit "L";
            16/32-bit grayscale kept as it is).
        target_size: (height, width) to resize to, or None.
        interpolation: Pillow's filter for the resize: "nearest" (default),
            "bilinear", "bicubic", "hamming", "box" or "lanczos".
        keep_aspect_ratio (bool): crop the central box of the target's
            aspect ratio before resizing.
    Returns:
        a ``PIL.Image.Image`` (its pixels read, the file closed).
    Raises:
        ImportError: no Pillow.  TypeError: a path of another type.
        ValueError: unknown color_mode or interpolation.  OSError: an
            unreadable file (Pillow's ``UnidentifiedImageError`` for a file that
            is not an image).
    """
    image = pil_image()
    if color_mode not in ("rgb", "rgba", "grayscale"):
        raise ValueError(f'load_img: color_mode must be "grayscale", "rgb" or "rgba", got '
                         f'{color_mode!r}')
    if isinstance(path, io.BytesIO):
        img = image.open(path)
    elif isinstance(path, (str, bytes, os.PathLike)):
        with open(path, "rb") as f:
            img = image.open(io.BytesIO(f.read()))
    else:
        raise TypeError(f"load_img: path must be path-like or io.BytesIO, got "
                        f"{type(path).__name__}")
    if color_mode == "grayscale":
        if img.mode not in ("L", "I;16", "I"):
            img = img.convert("L")
    elif img.mode != color_mode.upper():
        img = img.convert(color_mode.upper())
    if target_size is not None:
        size = (int(target_size[1]), int(target_size[0]))
        if img.size != size:
            if interpolation not in _PIL_FILTERS:
                raise ValueError(f"load_img: interpolation must be one of {_PIL_FILTERS}, got "
                                 f"{interpolation!r}")
            resample = getattr(image.Resampling, interpolation.upper())
            box = None
            if keep_aspect_ratio:
                width, height = img.size
                crop_h = min(height, width * size[1] // size[0])
                crop_w = min(width, height * size[0] // size[1])
                top, left = (height - crop_h) // 2, (width - crop_w) // 2
                box = (left, top, left + crop_w, top + crop_h)
            img = img.resize(size, resample, box=box)
    img.load()
    return img


def smart_resize(x, size, interpolation="bilinear", data_format="channels_last"):
    """Resize (H, W, C) or (N, H, W, C) images to ``size`` without
    distorting them, as ``keras.preprocessing.image.smart_resize``: the
    central box of the target's aspect ratio is cropped, then resized
    (:func:`resize_images`).

    Returns:
        float32 array of the target size.
    Raises:
        ValueError: a bad size or rank.
    """
    _channels_last(data_format, "smart_resize")
    x = np.asarray(x)
    if len(size) != 2:
        raise ValueError(f"smart_resize: size must be (height, width), got {size!r}")
    if x.ndim not in (3, 4):
        raise ValueError(f"smart_resize: expected (H, W, C) or (N, H, W, C), got {x.shape}")
    height, width = x.shape[-3], x.shape[-2]
    th, tw = size
    crop_h = max(min(height, int(float(width * th) / tw)), 1)
    crop_w = max(min(width, int(float(height * tw) / th)), 1)
    top, left = int(float(height - crop_h) / 2), int(float(width - crop_w) / 2)
    x = x[..., top:top + crop_h, left:left + crop_w, :]
    return resize_images(x, size, interpolation)


def resize_images(x, size, interpolation="bilinear"):
    """Resize (H, W, C) or (N, H, W, C) images to ``size`` as
    ``tf.image.resize`` does (``antialias=False``), in float32:
    "bilinear" by the ``resize_bilinear`` op (C; half-pixel centres), "nearest"
    reading source index ``floor((i + 0.5) * in / out)``.

    Raises:
        NotImplementedError: another interpolation.
    """
    from ..ops.augment import resize_bilinear  # noqa: PLC0415
    x = np.asarray(x)
    single = x.ndim == 3
    batch = x[None] if single else x
    th, tw = int(size[0]), int(size[1])
    if interpolation == "bilinear":
        if batch.dtype not in (np.uint8, np.float32):
            batch = batch.astype(np.float32)
        out = np.asarray(resize_bilinear(np.ascontiguousarray(batch), (th, tw)))
    elif interpolation == "nearest":
        h, w = batch.shape[1:3]
        rows = np.minimum(np.floor((np.arange(th) + 0.5) * h / th).astype(np.int64), h - 1)
        cols = np.minimum(np.floor((np.arange(tw) + 0.5) * w / tw).astype(np.int64), w - 1)
        out = batch[:, rows][:, :, cols].astype(np.float32)
    else:
        raise NotImplementedError(f"resize: interpolation {interpolation!r} is not provided; "
                                  f"use 'bilinear' or 'nearest'")
    return out[0] if single else out
