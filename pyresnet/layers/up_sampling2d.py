"""``UpSampling2D``."""
from .. import ops
from ._args import standardize_data_format, standardize_tuple
from .input_spec import InputSpec
from .layer import Layer


class UpSampling2D(Layer):
    """Repeat every pixel ``size`` times along height and width, as
    ``keras.layers.UpSampling2D`` with ``interpolation="nearest"``:
    float32 ``(batch, H, W, C)`` -> ``(batch, H * sh, W * sw, C)``.
    Computed as a reshape to ``(batch, H, 1, W, 1, C)``, a broadcast to
    ``(batch, H, sh, W, sw, C)`` and a reshape back (the gradient sums each
    block, the adjoint of the broadcast).

    Args:
        size: int or ``(sh, sw)``, positive.
        data_format: only None/``"channels_last"``.
        interpolation (str): only ``"nearest"`` (``"bilinear"``: use
            :func:`pyresnet.ops.resize_bilinear`, not differentiable).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: for another interpolation or a bad size; on call, for
            an input that is not rank 4.
    """

    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", **kwargs):
        super().__init__(**kwargs)
        self.size = standardize_tuple(size, 2, "size", "UpSampling2D")
        self.data_format = standardize_data_format(data_format, "UpSampling2D")
        if interpolation != "nearest":
            raise ValueError(f"UpSampling2D: only interpolation='nearest' is supported, got "
                             f"{interpolation!r}")
        self.interpolation = interpolation
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        sh, sw = self.size
        n, h, w, c = (ops.shape(inputs)[i] for i in range(4))
        x = ops.reshape(inputs, (n, h, 1, w, 1, c))
        x = ops.broadcast_to(x, (n, h, sh, w, sw, c))
        return ops.reshape(x, (n, h * sh, w * sw, c))

    def compute_output_shape(self, input_shape):
        n, h, w, c = input_shape
        return (n, None if h is None else h * self.size[0],
                None if w is None else w * self.size[1], c)
