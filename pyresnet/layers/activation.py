"""``Activation``: an activation function as a layer."""
from .. import activations
from .layer import Layer


class Activation(Layer):
    """Apply an activation function, as ``keras.layers.Activation``.

    Args:
        activation: a Keras name (``"relu"``, ``"softmax"``, ``"linear"``),
            None or a callable ``Tensor -> Tensor`` of the same shape.
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for an unknown activation name.
    """

    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs):
        return self.activation(inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
