"""``LayerNormalization``."""
from .. import ops
from .layer import Layer


class LayerNormalization(Layer):
    """Layer normalization (Ba, Kiros & Hinton 2016, eq. 4), as
    ``keras.layers.LayerNormalization``: each sample normalized over
    ``axis`` with its own mean and biased variance,
    ``(x - mean) / sqrt(var + epsilon) * gamma + beta``.

    Args:
        axis: int or tuple of ints (default -1); gamma and beta have the
            shape of those axes.
        epsilon (float): default 1e-3 (Keras's).
        center, scale (bool): use beta / gamma.
        beta_initializer, gamma_initializer: Keras names or callables.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: on build, an axis out of range or of unknown size.
    """

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", **kwargs):
        super().__init__(**kwargs)
        self.axis = axis
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self.beta_initializer, self.gamma_initializer = beta_initializer, gamma_initializer

    def build(self, input_shape):
        nd = len(input_shape)
        axes = (self.axis,) if isinstance(self.axis, int) else tuple(self.axis)
        axes = tuple(sorted(a + nd if a < 0 else a for a in axes))
        if any(not 0 < a < nd for a in axes) or any(input_shape[a] is None for a in axes):
            raise ValueError(f'Layer "{self.name}": axis {self.axis} does not name known, '
                             f"non-batch axes of input shape {input_shape}")
        self._axes = axes
        # parameters broadcast against x: the normalized axes' sizes, 1 elsewhere after them
        shape = tuple(input_shape[d] if d in axes else 1 for d in range(axes[0], nd))
        self.gamma = self.add_weight(shape, self.gamma_initializer, name="gamma") \
            if self.scale else None
        self.beta = self.add_weight(shape, self.beta_initializer, name="beta") \
            if self.center else None

    def call(self, inputs):
        return ops.layer_normalization(inputs, self.gamma, self.beta, axis=self._axes,
                                       epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
