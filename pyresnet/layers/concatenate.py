"""``Concatenate``: join inputs along an axis."""
from .. import ops
from ..utils import tree
from .layer import Layer


class Concatenate(Layer):
    """Join a list of at least two tensors along ``axis``, as
    ``keras.layers.Concatenate`` (all other dimensions equal).

    Args:
        axis (int): default -1 (channels).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: fewer than two inputs, ranks that differ, or sizes that
            differ outside ``axis`` (naming the shapes).
    """

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)

    def build(self, input_shape):
        self.compute_output_shape(input_shape)

    def call(self, inputs):
        return ops.concatenate(inputs, axis=self.axis)

    def compute_output_shape(self, input_shape):
        if tree.is_shape(input_shape) or len(input_shape) < 2:
            raise ValueError(f'Layer "{self.name}" expects a list of at least 2 inputs, got input '
                             f"shape(s) {input_shape}")
        shapes = [tuple(s) for s in input_shape]
        nd = len(shapes[0])
        axis = self.axis + nd if self.axis < 0 else self.axis
        if any(len(s) != nd for s in shapes) or not 0 <= axis < nd:
            raise ValueError(f'Layer "{self.name}": cannot concatenate shapes {shapes} on axis '
                             f"{self.axis}")
        out = []
        for d in range(nd):
            sizes = [s[d] for s in shapes]
            if d == axis:
                out.append(None if None in sizes else sum(sizes))
                continue
            known = set(sizes) - {None}
            if len(known) > 1:
                raise ValueError(f'Layer "{self.name}": shapes {shapes} differ outside the '
                                 f"concatenation axis {self.axis}")
            out.append(known.pop() if known else None)
        return tuple(out)


def concatenate(inputs, axis=-1, **kwargs):
    """Functional form of :class:`Concatenate` (``keras.layers.concatenate``)."""
    return Concatenate(axis=axis, **kwargs)(inputs)
