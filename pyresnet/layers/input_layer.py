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
        name (str): default ``input_layer``, ``input_layer_1``, ...
    Raises:
        ValueError: for a missing shape or a dimension that is not a positive
            int or None.
    """

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
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


def Input(shape=None, batch_size=None, dtype=None, name=None):
    """A symbolic input of a functional model (``keras.Input``).

    Args:
        shape (tuple): per-sample shape, batch excluded, e.g. ``(32, 32, 3)``.
        batch_size (int): optional fixed batch size.
        dtype: only ``None``/``"float32"`` (uint8 images are converted by
            ``fit``/``predict``).
        name (str): the InputLayer's name.
    Returns:
        KerasTensor: of shape ``(batch_size, *shape)``.
    """
    return InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, name=name).output
