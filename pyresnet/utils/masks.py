"""Comparison masks as float32 1.0/0.0 tensors, whatever dtype the
comparison ops return (float32 masks, or bool tensors cast with
``ops.cast``), for the metrics and the dropout of ``pyresnet.random``."""
from .. import ops


def greater_equal_mask(x1, x2):
    """float32 ``1.0`` where ``x1 >= x2`` else ``0.0`` (NumPy broadcasting)."""
    mask = ops.greater_equal(x1, x2)
    return mask if mask.dtype == "float32" else ops.cast(mask, "float32")
