"""``Add``: the elementwise sum of several inputs."""
from .. import ops
from ._merge import Merge


class Add(Merge):
    """Sum a list of at least two float32 tensors elementwise, as
    ``keras.layers.Add`` (shapes must be equal or broadcast, NumPy rules).

    Args:
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: when the input is not a list of >= 2 tensors or the
            shapes do not broadcast (naming all shapes).
    """

    _verb = "added"

    def _merge(self, x, y):
        return ops.add(x, y)


def add(inputs, **kwargs):
    """Functional form of :class:`Add` (``keras.layers.add``)."""
    return Add(**kwargs)(inputs)
