"""``ReLU``: the rectified linear unit as a layer."""
from .. import ops
from .layer import Layer


class ReLU(Layer):
    """``max(x, 0)`` elementwise, as ``keras.layers.ReLU`` with its defaults
    (Keras's ``max_value``, ``negative_slope`` and ``threshold`` are not
    supported).  Float32 input of any shape; output of the same shape.

    Args:
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    """

    def call(self, inputs):
        return ops.relu(inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
