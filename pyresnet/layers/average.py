"""``Average``: the elementwise mean of several inputs."""
from .. import ops
from ._merge import Merge


class Average(Merge):
    """The elementwise mean of a list of at least two float32 tensors, as
    ``keras.layers.Average``: their sum (left to right) times 1/n.

    Args:
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: fewer than two inputs, or shapes that do not broadcast.
    """

    _verb = "averaged"

    def _merge(self, x, y):
        return ops.add(x, y)

    def _finish(self, y, n):
        return ops.scale(y, 1.0 / n)


def average(inputs, **kwargs):
    """Functional form of :class:`Average` (``keras.layers.average``)."""
    return Average(**kwargs)(inputs)
