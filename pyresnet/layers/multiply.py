"""``Multiply``: the elementwise product of several inputs."""
from .. import ops
from ._merge import Merge


class Multiply(Merge):
    """Multiply a list of at least two float32 tensors elementwise, as
    ``keras.layers.Multiply`` (equal or broadcasting shapes; the
    squeeze-and-excitation gate ``x * s`` of shapes (N, H, W, C) and
    (N, 1, 1, C) is one).

    Args:
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: fewer than two inputs, or shapes that do not broadcast.
    """

    _verb = "multiplied"

    def _merge(self, x, y):
        return ops.multiply(x, y)


def multiply(inputs, **kwargs):
    """Functional form of :class:`Multiply` (``keras.layers.multiply``)."""
    return Multiply(**kwargs)(inputs)
