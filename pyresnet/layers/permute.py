"""``Permute``."""
from .. import ops
from .layer import Layer


class Permute(Layer):
    """Permute the non-batch axes, as ``keras.layers.Permute``: ``dims`` is
    a permutation of 1..rank-1 (1-based; the batch axis stays first).

    Args:
        dims (tuple): e.g. ``(2, 1)`` swaps the two axes of a (N, A, B) input.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: ``dims`` is not a permutation of 1..len(dims).
    """

    def __init__(self, dims, **kwargs):
        super().__init__(**kwargs)
        self.dims = tuple(int(d) for d in dims)
        if sorted(self.dims) != list(range(1, len(self.dims) + 1)):
            raise ValueError(f"Permute: dims must be a permutation of 1..{len(self.dims)}, got "
                             f"{dims!r}")

    def call(self, inputs):
        return ops.transpose(inputs, (0,) + self.dims)

    def compute_output_shape(self, input_shape):
        return (input_shape[0],) + tuple(input_shape[d] for d in self.dims)
