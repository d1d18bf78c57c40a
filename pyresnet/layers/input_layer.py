"""``Input`` and ``InputLayer``: the entry points of a functional model."""
from ..utils import tree
from .layer import Layer
from .node import KerasTensor, Node


class InputLayer(Layer):
    """The layer behind :func:`Input`: it has no weights and passes its input
    through; in a functional model it marks where data enters.

    Args:
        shape (tuple): per-sample shape, e.g. ``(32, 32, 3)`` (NHWC, batch
            excluded); ``None`` for an unknown dimension.
        batch_size (int): fixed batch size, or None (any).
        dtype: only ``None``/``"float32"``.
        batch_shape (tuple): Keras's alternative to ``shape`` and
            ``batch_size``: the full shape, batch first (``(None, 28, 28)`` or
            ``(32, 10)``).
        name (str): default ``input_layer``, ``input_layer_1``, ...
    Raises:
        ValueError: for a missing shape, both ``shape`` and ``batch_shape``,
            or a dimension that is not a positive int or None.
    """

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None, batch_shape=None,
                 **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        shape, batch_size = _from_batch_shape(shape, batch_size, batch_shape)
        if isinstance(shape, int):  # Input(32): Keras refuses it too
            raise ValueError(f"InputLayer: `shape` must be a tuple of positive ints or None "
                             f"(batch excluded), got the int {shape}; for vectors of "
                             f"{shape} values write shape=({shape},)")
        if shape is None or not tree.is_shape(tuple(shape)) \
                or any(d is not None and d <= 0 for d in shape):
            raise ValueError(f"InputLayer: `shape` must be a tuple of positive ints or None "
                             f"(batch excluded), got {shape!r}")
        self.batch_shape = (batch_size,) + tuple(shape)
        self.built = True
        Node(self, [], (), {}, KerasTensor(self.batch_shape, "float32", name=self.name))

    def call(self, inputs):
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {"name": self.name, "shape": self.batch_shape[1:],
                "batch_size": self.batch_shape[0], "dtype": "float32"}


def _from_batch_shape(shape, batch_size, batch_shape):
    """(shape, batch_size) from Keras's ``batch_shape`` (when given)."""
    if batch_shape is None:
        return shape, batch_size
    if shape is not None or batch_size is not None:
        raise ValueError(f"Input: give either `shape` (and `batch_size`) or `batch_shape`, not "
                         f"both; got shape={shape!r}, batch_size={batch_size!r}, "
                         f"batch_shape={batch_shape!r}")
    if not tree.is_shape(batch_shape) or len(batch_shape) < 1:
        raise ValueError(f"Input: `batch_shape` must be a tuple of ints or None, batch first, "
                         f"got {batch_shape!r}")
    return tuple(batch_shape[1:]), batch_shape[0]


def Input(shape=None, batch_size=None, dtype=None, name=None, batch_shape=None):
    """A symbolic input of a functional model (``keras.Input``).

    Args:
        shape (tuple): per-sample shape, batch excluded, e.g. ``(32, 32, 3)``.
        batch_size (int): optional fixed batch size.
        dtype: only ``None``/``"float32"`` (uint8 images are converted by
            ``fit``/``predict``).
        name (str): the InputLayer's name.
        batch_shape (tuple): instead of ``shape`` and ``batch_size``, the
            full shape, batch first (``keras.Input(batch_shape=(None, 10))``).
    Returns:
        KerasTensor: of shape ``(batch_size, *shape)``.
    Raises:
        ValueError: as :class:`InputLayer`.
    """
    return InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, name=name,
                      batch_shape=batch_shape).output
