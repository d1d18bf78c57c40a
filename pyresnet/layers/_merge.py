"""``Merge``: the base of the layers that combine a list of same-shaped
(or broadcasting) tensors elementwise (Add, Subtract, Multiply, Average,
Maximum...), as Keras's ``keras/src/layers/merging/base_merge.py``."""
import functools

from ..utils import tree
from .layer import Layer


class Merge(Layer):
    """Combine a list of at least ``min_inputs`` float32 tensors with the
    binary function ``_merge`` folded left to right; shapes must be equal
    or broadcast (NumPy rules).  Subclasses set ``_merge`` (and may override
    ``_finish`` for a last step on the folded result).

    Raises:
        ValueError: when the input is not a list of enough tensors or the
            shapes do not broadcast (naming all shapes).
    """

    min_inputs, max_inputs = 2, None
    _verb = "combined elementwise"  # for messages: "cannot be added", ...

    def build(self, input_shape):
        self.compute_output_shape(input_shape)

    def call(self, inputs):
        return self._finish(functools.reduce(self._merge, inputs), len(inputs))

    def _merge(self, x, y):
        raise NotImplementedError

    def _finish(self, y, n):
        return y

    def compute_output_shape(self, input_shape):
        n = 0 if tree.is_shape(input_shape) else len(input_shape)
        if n < self.min_inputs or (self.max_inputs and n > self.max_inputs):
            want = (f"exactly {self.min_inputs}" if self.max_inputs == self.min_inputs
                    else f"a list of at least {self.min_inputs}")
            raise ValueError(f'Layer "{self.name}" expects {want} inputs, got input shape(s) '
                             f"{input_shape}")
        ndim = max(len(s) for s in input_shape)
        out = []
        for axis in range(-ndim, 0):
            sizes = {s[axis] for s in input_shape if len(s) >= -axis} - {1}
            known = sizes - {None}
            if len(known) > 1:
                raise ValueError(f'Layer "{self.name}": inputs of shapes '
                                 f"{', '.join(map(str, input_shape))} cannot be {self._verb}")
            out.append(known.pop() if known else (None if None in sizes else 1))
        return tuple(out)
