"""``Subtract``: the difference of two inputs."""
from .. import ops
from ._merge import Merge


class Subtract(Merge):
    """``inputs[0] - inputs[1]`` for exactly two float32 tensors, as
    ``keras.layers.Subtract`` (equal or broadcasting shapes).

    Args:
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: not exactly two inputs, or shapes that do not broadcast.
    """

    min_inputs = max_inputs = 2

    _verb = "subtracted"

    def _merge(self, x, y):
        return ops.subtract(x, y)


def subtract(inputs, **kwargs):
    """Functional form of :class:`Subtract` (``keras.layers.subtract``)."""
    return Subtract(**kwargs)(inputs)
