"""Optimizers with Keras's names and arguments (``keras.optimizers``).

Updates run as in-place state ops on the Variables (eagerly, or as graph
nodes while ``pyresnet.compile`` traces a step).  The learning rate lives in
a float32 scalar Variable, so changing it never retraces a compiled step.
"""
import numpy as np

from . import ops
from .tensor import Variable, convert_to_tensor


class SGD:
    """Stochastic gradient descent with optional (Nesterov) momentum and
    decoupled weight decay, as ``keras.optimizers.SGD``:

        w -= lr * weight_decay * w                  (if weight_decay)
        v = momentum * v - lr * g;  w += v          (momentum > 0)
        w += momentum * v - lr * g                  (nesterov, after v's update)
        w -= lr * g                                 (momentum == 0)

    (Sutskever et al. 2013 for momentum and Nesterov's variant; Loshchilov &
    Hutter 2019 for decoupled weight decay, Keras's ``weight_decay``.  He et
    al.'s CIFAR recipe uses L2 regularisation 1e-4 instead; with SGD the two
    differ only by the momentum's effect on the decay term.)

    Velocity slots (zeros of each variable's shape, non-trainable Variables)
    are created on the first ``apply_gradients`` of a variable.
    ``iterations`` (an int64 scalar Variable) counts the calls that updated
    something; ``model.save`` stores it with the learning rate and the slots.

    Args:
        learning_rate (float): >= 0.
        momentum (float): in [0, 1].
        nesterov (bool): Nesterov momentum.
        weight_decay (float or None): decoupled decay factor (>= 0).
        name (str): for error messages.
    Raises:
        ValueError: for arguments out of range.
    """

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, weight_decay=None,
                 name="SGD"):
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"SGD: `momentum` must be in [0, 1], got {momentum!r}")
        if weight_decay is not None and not 0 <= weight_decay < np.inf:
            raise ValueError(f"SGD: `weight_decay` must be a finite float >= 0 or None, got "
                             f"{weight_decay!r}")
        self.name = name
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.weight_decay = weight_decay
        self._learning_rate = Variable(np.float32(self._check_lr(learning_rate)),
                                       trainable=False, name="learning_rate")
        self._slots = {}  # id(variable) -> (variable, velocity)
        # Steps applied so far (Keras's ``optimizer.iterations``): an int64
        # Variable counted in place, so compiled steps count too.
        self.iterations = Variable(np.int64(0), trainable=False, name="iteration")
        self.built = False  # True after the first apply_gradients

    @staticmethod
    def _check_lr(value):
        try:
            lr = float(value)
        except (TypeError, ValueError):
            lr = None
        if lr is None or not 0 <= lr < np.inf:
            raise ValueError(f"SGD: `learning_rate` must be a finite float >= 0, got {value!r}")
        return lr

    @property
    def learning_rate(self):
        """The learning rate: a float32 scalar Variable (``float()`` it to
        read).  Assigning a float writes it in place."""
        return self._learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self._learning_rate.assign(np.float32(self._check_lr(value)))

    @property
    def variables(self):
        """The learning rate and the velocity slots created so far
        (``iterations`` is kept apart)."""
        return [self._learning_rate] + [slot for _, slot in self._slots.values()]

    def apply_gradients(self, grads_and_vars):
        """Update each variable with its gradient, in place.

        Args:
            grads_and_vars: iterable of ``(gradient, variable)``; pairs whose
                gradient is None (the loss does not depend on the variable)
                are skipped.
        Raises:
            TypeError: when a variable is not a Variable, or a gradient is not
                float data (or cannot become a Tensor).
            ValueError: when a gradient's shape differs from its variable's.
            Everything is checked before the first update, so a failing call
            changes nothing.
        """
        pairs = []
        for g, v in grads_and_vars:
            if g is None:
                continue
            if not isinstance(v, Variable):
                raise TypeError(f"{self.name}.apply_gradients: expected Variables, got "
                                f"{type(v).__name__}")
            name = getattr(v, "path", v.name)
            try:
                g = convert_to_tensor(g)
            except TypeError as e:
                raise TypeError(f"{self.name}.apply_gradients: gradient for variable {name}: "
                                f"{e}") from None
            if g.dtype != "float32":
                raise TypeError(f"{self.name}.apply_gradients: gradient for variable {name} "
                                f"must be float32, got {g.dtype}")
            if tuple(g.shape) != tuple(v.shape):
                raise ValueError(f"{self.name}.apply_gradients: gradient of shape "
                                 f"{tuple(g.shape)} for variable {name} of shape "
                                 f"{tuple(v.shape)}")
            pairs.append((g, v))
        decay = float(self.weight_decay or 0.0)
        for g, v in pairs:
            if self.momentum == 0.0:
                ops.sgd_update(v, g, self._learning_rate, weight_decay=decay)
            else:
                ops.sgd_momentum_update(v, g, self._velocity(v), self._learning_rate,
                                        momentum=self.momentum, nesterov=self.nesterov,
                                        weight_decay=decay)
        if pairs:
            ops.assign_add(self.iterations, 1)
        self.built = True

    def _velocity(self, variable):
        """The velocity slot of ``variable``, created (zeros) on first use."""
        if id(variable) not in self._slots:
            self._slots[id(variable)] = (variable, Variable(
                np.zeros(variable.shape, np.float32), trainable=False,
                name=f"{variable.name}/velocity"))
        return self._slots[id(variable)][1]

    def get_config(self):
        """The constructor arguments as a dict (the current learning rate)."""
        return {"name": self.name, "learning_rate": float(self._learning_rate),
                "momentum": self.momentum, "nesterov": self.nesterov,
                "weight_decay": self.weight_decay}

    @classmethod
    def from_config(cls, config):
        """A new optimizer (without slots) from ``get_config()``'s dict."""
        return cls(**config)


def get(identifier):
    """An optimizer from a Keras name (``"sgd"``: ``SGD()``) or an optimizer
    object (returned as is).

    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if isinstance(identifier, SGD):
        return identifier
    if isinstance(identifier, str):
        if identifier.lower() != "sgd":
            raise ValueError(f"unknown optimizer {identifier!r}; known: ['sgd']")
        return SGD()
    raise TypeError(f"optimizer must be a name or an optimizer object, got {identifier!r}")
