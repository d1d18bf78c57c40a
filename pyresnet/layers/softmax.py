"""``Softmax``: the softmax activation as a layer."""
from .. import ops
from .layer import Layer


class Softmax(Layer):
    """Softmax along ``axis``, as ``keras.layers.Softmax``
    (:func:`pyresnet.ops.softmax`: max-shifted, so large logits do not
    overflow).  Float32 input of rank >= 1; output of the same shape whose
    entries along ``axis`` are in [0, 1] and sum to 1.

    Args:
        axis (int): the axis to normalise (default the last).
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: on call, for an axis out of range.
    """

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)

    def call(self, inputs, mask=None):
        if mask is not None:
            raise NotImplementedError("Softmax: masks are not supported")
        return ops.softmax(inputs, axis=self.axis)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
