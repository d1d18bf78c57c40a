"""``Reshape``."""
import numpy as np

from .. import ops
from .layer import Layer


class Reshape(Layer):
    """Reshape each sample to ``target_shape`` (batch axis kept), as
    ``keras.layers.Reshape``; one entry may be -1.

    Args:
        target_shape (tuple): the per-sample shape.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: on call, sizes that do not match (naming both shapes).
    """

    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        self.target_shape = tuple(int(d) for d in target_shape)

    def call(self, inputs):
        return ops.reshape(inputs, (ops.shape(inputs)[0],) + self.target_shape)

    def compute_output_shape(self, input_shape):
        shape = list(self.target_shape)
        if -1 in shape:
            known = input_shape[1:]
            i = shape.index(-1)
            rest = int(np.prod([d for d in shape if d != -1]))
            shape[i] = (None if None in known or rest == 0
                        else int(np.prod(known)) // rest)
        return (input_shape[0],) + tuple(shape)
