"""Optimizers with Keras 3's names and arguments (``keras.optimizers``):
:class:`SGD`, :class:`Adam`, :class:`AdamW`, :class:`RMSprop` (each with
Keras's ``use_ema``, and this package's ``lookahead=`` :class:`Lookahead` and
per-variable ``lr_multipliers``), and the learning-rate schedules in :mod:`pyresnet.optimizers.schedules`.

Each variable's update is one fused C op (csrc/ops_state.c,
csrc/kernels/optim.c) run in place, eagerly or as a node of a compiled step;
see :mod:`pyresnet.optimizers.base_optimizer` for the order of a step.
"""
from . import schedules
from .adam import Adam, AdamW
from .base_optimizer import Lookahead, Optimizer, clip_by_global_norm, global_norm
from .rmsprop import RMSprop
from .sgd import SGD

_BY_NAME = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}
_CLASSES = {c.__name__: c for c in (SGD, Adam, AdamW, RMSprop)}


def get(identifier):
    """An optimizer from a Keras name (``"sgd"``, ``"adam"``, ``"adamw"``,
    ``"rmsprop"``: the class with its defaults, any case) or an optimizer
    object (returned as is).

    Raises:
        ValueError: for an unknown name; TypeError for anything else.
    """
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(f"unknown optimizer {identifier!r}; known: {sorted(_BY_NAME)}")
        return cls()
    raise TypeError(f"optimizer must be a name or an optimizer object, got {identifier!r}")


def deserialize(config):
    """An optimizer from ``{"class_name": ..., "config": ...}`` (as
    ``model.save`` stores it).

    Raises:
        ValueError: for an unknown class name.
    """
    return schedules._from_class_config(config, _CLASSES, "saved optimizer")


__all__ = ["Optimizer", "Lookahead", "SGD", "Adam", "AdamW", "RMSprop", "schedules", "get", "deserialize",
           "global_norm", "clip_by_global_norm"]
