"""``Add``: the elementwise sum of several inputs."""
import functools

from .. import ops
from ..utils import tree
from .layer import Layer


class Add(Layer):
    """Sum a list of at least two float32 tensors elementwise, as
    ``keras.layers.Add`` (shapes must be equal or broadcast, NumPy rules).

    Args:
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: when the input is not a list of >= 2 tensors or the
            shapes do not broadcast (naming all shapes).
    """

    def build(self, input_shape):
        self.compute_output_shape(input_shape)

    def call(self, inputs):
        return functools.reduce(ops.add, inputs)

    def compute_output_shape(self, input_shape):
        if tree.is_shape(input_shape) or len(input_shape) < 2:
            raise ValueError(f'Layer "{self.name}" expects a list of at least 2 inputs, got input '
                             f"shape(s) {input_shape}")
        ndim = max(len(s) for s in input_shape)
        out = []
        for axis in range(-ndim, 0):
            sizes = {s[axis] for s in input_shape if len(s) >= -axis} - {1}
            known = sizes - {None}
            if len(known) > 1:
                raise ValueError(f'Layer "{self.name}": inputs of shapes '
                                 f"{', '.join(map(str, input_shape))} cannot be added")
            out.append(known.pop() if known else (None if None in sizes else 1))
        return tuple(out)
