"""``to_categorical`` (``keras.utils.to_categorical``)."""
import numpy as np


def to_categorical(x, num_classes=None):
    """One-hot float32 rows of integer class labels (``keras.utils.to_categorical``).

    Args:
        x: integer labels of any shape (a trailing axis of 1 is dropped, as
            Keras).
        num_classes (int): the number of classes; default ``max(x) + 1``.
    Returns:
        numpy.ndarray float32 of shape ``x.shape + (num_classes,)``.
    Raises:
        ValueError: for non-integral or negative labels, or a label
            >= ``num_classes``.
    """
    x = np.asarray(x)
    if x.ndim > 1 and x.shape[-1] == 1:
        x = x.reshape(x.shape[:-1])
    if x.dtype.kind == "f":
        if not np.all(np.floor(x) == x):
            raise ValueError("to_categorical: labels must be integers, got non-integral values")
    elif x.dtype.kind not in "iub":
        raise ValueError(f"to_categorical: labels must be integers, got dtype {x.dtype}")
    x = x.astype(np.int64)
    if x.size and x.min() < 0:
        raise ValueError(f"to_categorical: labels must be >= 0, got {x.min()}")
    if num_classes is None:
        num_classes = int(x.max()) + 1 if x.size else 0
    num_classes = int(num_classes)
    if x.size and x.max() >= num_classes:
        raise ValueError(f"to_categorical: label {x.max()} is out of range for "
                         f"num_classes={num_classes}")
    out = np.zeros(x.shape + (num_classes,), np.float32)
    np.put_along_axis(out, x[..., None], 1.0, axis=-1)
    return out
