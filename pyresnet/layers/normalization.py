"""``Normalization`` with ``adapt()``."""
import numpy as np

from ..ops.augment import real_array
from ._preprocessing import IMAGES, PreprocessingLayer, run_stages
from .input_spec import InputSpec


class Normalization(PreprocessingLayer):
    """Per-channel normalisation ``(x - mean) / max(sqrt(variance), 1e-7)``,
    as ``keras.layers.Normalization`` over the last axis, in training and
    inference alike.  Runs the ``normalize_channels`` op.

    The statistics come from ``mean``/``variance`` or from :meth:`adapt`;
    they are non-trainable weights ``mean`` and ``variance`` of shape (C,).
    For the CIFAR-10 recipe on uint8 images:
    ``Normalization(mean=255 * np.array(CIFAR10_MEAN),
    variance=(255 * np.array(CIFAR10_STD)) ** 2)``.

    Input: (..., C) uint8 or float32; output: float32 of the same shape.

    Args:
        axis: only -1 (the channels of NHWC; Keras's default).
        mean, variance: scalars or (C,) arrays, both or neither.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: another axis, only one of mean/variance, statistics that
            do not broadcast to the channels.
    """

    _random = False

    def __init__(self, axis=-1, mean=None, variance=None, **kwargs):
        if axis != -1:
            raise ValueError(f"Normalization: only axis=-1 is supported, got {axis!r}")
        if (mean is None) != (variance is None):
            raise ValueError("Normalization: pass both mean and variance, or neither (and adapt())")
        super().__init__(**kwargs)
        self.axis = axis
        self._given = None if mean is None else (
            real_array(mean, "mean", "Normalization"),
            real_array(variance, "variance", "Normalization"))

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(f"Normalization: the channel axis must be known, got input shape "
                             f"{input_shape}")
        mean, variance = np.zeros(channels, np.float32), np.ones(channels, np.float32)
        if self._given is not None:
            try:
                mean[:], variance[:] = self._given
            except ValueError:
                raise ValueError(f"Normalization: mean/variance of shapes {self._given[0].shape}/"
                                 f"{self._given[1].shape} do not fit {channels} channels") from None
        self.input_spec = InputSpec(min_ndim=1, axes={-1: channels})
        self.mean = self.add_weight((channels,), lambda s, d: mean, trainable=False, name="mean")
        self.variance = self.add_weight((channels,), lambda s, d: variance, trainable=False,
                                        name="variance")

    def _stages(self, images_shape):
        return [("normalize_channels", {"epsilon": 1e-7}, [IMAGES, self.mean, self.variance])]

    def call(self, inputs, training=None):
        return run_stages(self._stages(tuple(inputs.shape)), inputs)

    def adapt(self, data, batch_size=4096):
        """Set mean and variance to the per-channel statistics of ``data``
        (population variance, accumulated in float64), as Keras's adapt.

        Args:
            data: an array or Tensor (N, ..., C), or a :class:`pyresnet.data.Dataset`
                (its elements' first component is used).
            batch_size (int): rows per accumulation step for arrays.
        Raises:
            ValueError: empty data or a channel count other than the layer's.
        """
        if hasattr(data, "_arrays") and hasattr(data, "batch"):
            chunks = (np.asarray(e[0] if isinstance(e, tuple) else e) for e in data)
        else:
            array = np.asarray(data)
            chunks = (array[i:i + batch_size] for i in range(0, len(array), batch_size))
        count, total, squares = 0, 0.0, 0.0
        for chunk in chunks:
            values = chunk.reshape(-1, chunk.shape[-1]).astype(np.float64)
            count += len(values)
            total = total + values.sum(0)
            squares = squares + (values * values).sum(0)
        if count == 0:
            raise ValueError("Normalization.adapt: got no data")
        mean = total / count
        variance = np.maximum(squares / count - mean * mean, 0.0)
        if not self.built:
            self.build((None, len(mean)))
        if len(mean) != self.mean.shape[0]:
            raise ValueError(f"Normalization.adapt: data has {len(mean)} channels, the layer "
                             f"{self.mean.shape[0]}")
        self.mean.assign(mean.astype(np.float32))
        self.variance.assign(variance.astype(np.float32))

    def get_config(self):
        config = super().get_config()
        if self._given is not None:
            config.update(mean=self._given[0].tolist(), variance=self._given[1].tolist())
        return config
