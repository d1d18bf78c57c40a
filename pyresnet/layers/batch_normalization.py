"""``BatchNormalization`` over the channel (last) axis."""
import numpy as np

from .. import ops
from ..tensor import Tensor
from .input_spec import InputSpec
from .layer import Layer


class BatchNormalization(Layer):
    """Batch normalization (Ioffe & Szegedy 2015, Algorithm 1 and 2), as
    ``keras.layers.BatchNormalization`` with Keras's defaults.

    ``training=True`` (and the layer trainable): normalise with the batch's
    mean and (biased) variance over every axis but the last,
    ``y = gamma * (x - mean) / sqrt(var + epsilon) + beta``, and update
    ``moving = moving * momentum + batch_stat * (1 - momentum)`` for the
    mean and variance.  Otherwise (inference, ``training`` None/False, or a
    frozen layer as in Keras): normalise with the moving statistics.

    Input float32 ``(batch, ..., C)``; output of the same shape.  Weights:
    ``gamma``, ``beta`` (trainable, ``(C,)``), ``moving_mean``,
    ``moving_variance`` (non-trainable, ``(C,)``).

    Args:
        axis (int): only -1 (channels-last) or the last axis's index.
        momentum (float): moving-average momentum in [0, 1].
        epsilon (float): added to the variance, > 0.
        center, scale (bool): learn ``beta`` / ``gamma`` (else 0 / 1).
        beta_initializer, gamma_initializer, moving_mean_initializer,
        moving_variance_initializer: Keras names or callables.
        beta_regularizer, gamma_regularizer: None or a
            :mod:`pyresnet.regularizers` object or name (Keras's): the
            weight's penalty joins ``layer.losses``.
        **kwargs: ``name``, ``trainable``, ... of :class:`Layer`.
    Raises:
        ValueError: for bad arguments; on call, for a channel count other than
            the one the layer was built for.
    """

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones",
                 moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        from .. import regularizers  # noqa: PLC0415
        self.beta_regularizer = regularizers.get(beta_regularizer)
        self.gamma_regularizer = regularizers.get(gamma_regularizer)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"BatchNormalization: `momentum` must be in [0, 1], got {momentum!r}")
        if not epsilon > 0:
            raise ValueError(f"BatchNormalization: `epsilon` must be > 0, got {epsilon!r}")
        self.axis = int(axis)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.beta_initializer = beta_initializer
        self.gamma_initializer = gamma_initializer
        self.moving_mean_initializer = moving_mean_initializer
        self.moving_variance_initializer = moving_variance_initializer
        self.input_spec = InputSpec(min_ndim=2)

    def build(self, input_shape):
        if self.axis not in (-1, len(input_shape) - 1):
            raise ValueError(f'Layer "{self.name}": only the last axis (channels-last) can be '
                             f"normalised, got axis={self.axis} for input shape {input_shape}")
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(f'Layer "{self.name}": the channel axis (last) must be known, got '
                             f"input shape {input_shape}")
        shape = (channels,)
        self.gamma = self.add_weight(shape, self.gamma_initializer, name="gamma",
                                     regularizer=self.gamma_regularizer) \
            if self.scale else Tensor(np.ones(shape, np.float32))
        self.beta = self.add_weight(shape, self.beta_initializer, name="beta",
                                    regularizer=self.beta_regularizer) \
            if self.center else Tensor(np.zeros(shape, np.float32))
        self.moving_mean = self.add_weight(shape, self.moving_mean_initializer,
                                           trainable=False, name="moving_mean")
        self.moving_variance = self.add_weight(shape, self.moving_variance_initializer,
                                               trainable=False, name="moving_variance")
        self.input_spec = InputSpec(ndim=len(input_shape), axes={-1: channels})

    def call(self, inputs, training=None):
        if training and self.trainable:
            y, mean, var = ops.batch_norm_train(inputs, self.gamma, self.beta,
                                                epsilon=self.epsilon)
            ops.moving_average_update(self.moving_mean, mean, momentum=self.momentum)
            ops.moving_average_update(self.moving_variance, var, momentum=self.momentum)
            return y
        return ops.batch_norm_infer(inputs, self.gamma, self.beta, self.moving_mean,
                                    self.moving_variance, epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
