"""``keras.optimizers.SGD`` (keras/src/optimizers/sgd.py)."""
from .. import ops
from .base_optimizer import Optimizer


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum, as
    ``keras.optimizers.SGD``, one fused C op per variable (float32, Keras's
    operation order)::

        w -= w * weight_decay * lr                  (if weight_decay)
        v = momentum * v - lr * g;  w += v          (momentum > 0)
        w += momentum * v - lr * g                  (nesterov, after v's update)
        w -= lr * g                                 (momentum == 0)

    (Sutskever et al. 2013 for momentum and Nesterov's variant.)  Keras's
    ``weight_decay`` is decoupled (Loshchilov & Hutter 2019, times lr); the
    coupled L2 decay of He et al. and PyTorch (``g += wd * w``, which passes
    through the momentum) has, with momentum m and a slowly changing rate,
    the per-step shrink of a decoupled ``wd / (1 - m)``.

    Velocity slots (``<variable>/velocity``, zeros of each variable's shape)
    are created on the first update of a variable.

    Args:
        learning_rate: float >= 0, a schedule or a callable (see
            :class:`~pyresnet.optimizers.Optimizer`); Keras's default 0.01.
        momentum (float): in [0, 1].
        nesterov (bool): Nesterov momentum.
        weight_decay, clipnorm, clipvalue, global_clipnorm, name, **kwargs:
            see :class:`~pyresnet.optimizers.Optimizer`.
    Raises:
        ValueError: for arguments out of range.
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=None,
                 clipnorm=None, clipvalue=None, global_clipnorm=None, name=None, **kwargs):
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"SGD: `momentum` must be in [0, 1], got {momentum!r}")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self._slot_names = ("velocity",) if self.momentum else ()
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm,
                         clipvalue=clipvalue, global_clipnorm=global_clipnorm, name=name, **kwargs)

    def _update(self, gradient, variable, learning_rate):
        decay = self._decay_of(variable)
        if self.momentum == 0.0:
            ops.sgd_update(variable, gradient, learning_rate, weight_decay=decay)
        else:
            ops.sgd_momentum_update(variable, gradient, self._get_slot(variable, "velocity"),
                                    learning_rate, momentum=self.momentum,
                                    nesterov=self.nesterov, weight_decay=decay)

    def get_config(self):
        """The constructor arguments as a dict (see Optimizer.get_config)."""
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}
