"""``keras.optimizers.RMSprop`` (keras/src/optimizers/rmsprop.py)."""
from .. import ops
from .base_optimizer import Optimizer


class RMSprop(Optimizer):
    """RMSprop (Hinton, Neural Networks for Machine Learning, lecture 6e;
    the centered form of Graves 2013, "Generating Sequences With Recurrent
    Neural Networks", eq. 38-40), as ``keras.optimizers.RMSprop``; one fused
    C op per variable (float32, Keras's operation order)::

        w -= w * weight_decay * lr                           (if weight_decay)
        vel = rho * vel + (1 - rho) * g * g
        avg = rho * avg + (1 - rho) * g;  d = vel - avg * avg + epsilon  (centered)
        d = vel + epsilon                                    (otherwise)
        inc = lr * g / sqrt(d)
        mom = momentum * mom + inc;  w -= mom                (momentum > 0)
        w -= inc                                             (otherwise)

    Slots ``velocity``, ``momentum`` (momentum > 0) and ``average_gradient``
    (centered) are created on a variable's first update.

    Args:
        learning_rate: float >= 0, a schedule or a callable; default 0.001.
        rho (float): discount of the squared-gradient average, in [0, 1).
        momentum (float): in [0, 1].
        epsilon (float): > 0, default 1e-7.
        centered (bool): normalise by the gradient's estimated variance.
        weight_decay, clipnorm, clipvalue, global_clipnorm, name, **kwargs:
            see :class:`~pyresnet.optimizers.Optimizer`.
    Raises:
        ValueError: for arguments out of range.
    """

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7,
                 centered=False, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, **kwargs):
        if not 0.0 <= rho < 1.0:
            raise ValueError(f"{name or type(self).__name__}: `rho` must be in [0, 1), got {rho!r}")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{name or type(self).__name__}: `momentum` must be in [0, 1], got {momentum!r}")
        if not epsilon > 0:
            raise ValueError(f"{name or type(self).__name__}: `epsilon` must be > 0, got {epsilon!r}")
        self.rho, self.momentum = float(rho), float(momentum)
        self.epsilon, self.centered = float(epsilon), bool(centered)
        self._slot_names = (("velocity",) + (("momentum",) if self.momentum > 0 else ())
                            + (("average_gradient",) if self.centered else ()))
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm,
                         clipvalue=clipvalue, global_clipnorm=global_clipnorm, name=name, **kwargs)

    def _update(self, gradient, variable, learning_rate):
        mom = self._get_slot(variable, "momentum") if self.momentum > 0 else self._unused_slot()
        avg = self._get_slot(variable, "average_gradient") if self.centered \
            else self._unused_slot()
        ops.rmsprop_update(variable, gradient, self._get_slot(variable, "velocity"), mom, avg,
                           learning_rate, rho=self.rho, momentum=self.momentum,
                           epsilon=self.epsilon, weight_decay=self._decay_of(variable))

    def get_config(self):
        """The constructor arguments as a dict (see Optimizer.get_config)."""
        return {**super().get_config(), "rho": self.rho, "momentum": self.momentum,
                "epsilon": self.epsilon, "centered": self.centered}
