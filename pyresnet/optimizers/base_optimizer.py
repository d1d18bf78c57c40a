"""The optimizer base class (Keras 3's ``keras.optimizers.Optimizer``,
keras/src/optimizers/base_optimizer.py).

One step, :meth:`Optimizer.apply`, does what Keras's does in Keras's order:
drop the pairs without a gradient; clip the gradients (``clipnorm`` per
variable, else ``global_clipnorm`` over all, else ``clipvalue``); then, per
variable, one fused in-place C update op (csrc/ops_state.c) applies the
decoupled weight decay ``w -= w * weight_decay * lr`` (unless the variable is
excluded) and the optimizer's rule; finally ``iterations += 1``.  Eagerly the
ops run at once; under ``pyresnet.compile`` they are graph nodes, and so is
the learning rate: a float lives in a float32 Variable, a
:class:`~pyresnet.optimizers.schedules.LearningRateSchedule` is evaluated
from ``iterations`` by a C op inside the graph.  A changing rate therefore
never retraces a compiled step and never returns to Python.
"""
import re

import numpy as np

from .. import ops
from ..compile import name_scope
from ..tensor import Tensor, Variable, convert_to_tensor
from . import schedules as schedules_module

# Keras arguments this implementation does not provide: name -> its "off" value
_NOT_PROVIDED = {"use_ema": False, "ema_momentum": 0.99, "ema_overwrite_frequency": None,
                 "loss_scale_factor": None, "gradient_accumulation_steps": None}


def _positive_or_none(owner, name, value):
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = None
    if v is None or not 0 <= v < np.inf:
        raise ValueError(f"{owner}: `{name}` must be a finite float >= 0 or None, got {value!r}")
    return v


class Optimizer:
    """Base class of the optimizers; subclasses define ``_update(gradient,
    variable, learning_rate)`` (one fused update op) and ``_slot_names``.

    Args:
        learning_rate: a float >= 0 (kept in a float32 Variable; assigning
            ``optimizer.learning_rate = x`` writes it in place), a
            :class:`~pyresnet.optimizers.schedules.LearningRateSchedule`
            (evaluated from ``iterations`` inside compiled steps), or a
            callable without arguments returning a float (called when an
            update is built: once per trace in compiled code, as a Python
            callable in a ``tf.function``).
        weight_decay (float or None): decoupled weight decay,
            ``w -= w * weight_decay * lr`` before each update (Loshchilov &
            Hutter 2019, with Keras's factor lr).
        clipnorm (float or None): clip each gradient to this L2 norm.
        clipvalue (float or None): clip each gradient element to
            ``[-clipvalue, clipvalue]``.
        global_clipnorm (float or None): scale all gradients together so
            that their joint L2 norm is at most this (Pascanu et al. 2013).
            At most one of the three clipping arguments may be set.
        name (str): for slot names and error messages.
        **kwargs: Keras's ``use_ema``, ``ema_momentum``,
            ``ema_overwrite_frequency``, ``loss_scale_factor`` and
            ``gradient_accumulation_steps`` are accepted at their defaults
            only.
    Raises:
        ValueError: for arguments out of range, or several clipping
            arguments.  NotImplementedError: for a Keras feature not
            provided (EMA, loss scaling, gradient accumulation).
        TypeError: for an unknown keyword argument.
    """

    _slot_names = ()  # the slots this configuration uses, in creation order

    def __init__(self, learning_rate, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, **kwargs):
        self.name = name if name is not None else type(self).__name__
        for key, value in kwargs.items():
            if key not in _NOT_PROVIDED:
                raise TypeError(f"{self.name}: unexpected keyword argument {key!r}")
            if value != _NOT_PROVIDED[key]:
                raise NotImplementedError(f"{self.name}: `{key}` is not provided by pyresnet "
                                          f"(got {value!r}; leave it at {_NOT_PROVIDED[key]!r})")
        self.weight_decay = _positive_or_none(self.name, "weight_decay", weight_decay)
        self.clipnorm = _positive_or_none(self.name, "clipnorm", clipnorm)
        self.clipvalue = _positive_or_none(self.name, "clipvalue", clipvalue)
        self.global_clipnorm = _positive_or_none(self.name, "global_clipnorm", global_clipnorm)
        if sum(x is not None for x in (self.clipnorm, self.clipvalue,
                                       self.global_clipnorm)) > 1:
            raise ValueError(f"{self.name}: only one of `clipnorm`, `clipvalue` and "
                             f"`global_clipnorm` can be set, got clipnorm={clipnorm}, "
                             f"clipvalue={clipvalue}, global_clipnorm={global_clipnorm}")
        if isinstance(learning_rate, schedules_module.LearningRateSchedule) or (
                callable(learning_rate) and not isinstance(learning_rate, (Tensor, np.ndarray))):
            self._learning_rate = learning_rate
        else:
            self._learning_rate = Variable(np.float32(self._check_lr(learning_rate)),
                                           trainable=False, name="learning_rate")
        # slot name -> {id(variable): (variable, slot)}, in creation order
        self._slots = {slot: {} for slot in self._slot_names}
        self._trainable_variables = []
        self._exclude_ids, self._exclude_pattern = set(), None
        # Steps applied so far (Keras's ``optimizer.iterations``): an int64
        # Variable counted in place, so compiled steps count too.
        self.iterations = Variable(np.int64(0), trainable=False, name="iteration")
        self.built = False

    def _check_lr(self, value):
        try:
            lr = float(value)
        except (TypeError, ValueError):
            lr = None
        if lr is None or not 0 <= lr < np.inf:
            raise ValueError(f"{self.name}: `learning_rate` must be a finite float >= 0, a "
                             f"LearningRateSchedule or a callable, got {value!r}")
        return lr

    # ---- the learning rate -------------------------------------------------------

    @property
    def learning_rate(self):
        """The learning rate now: the float32 scalar Variable for a float
        rate (``float()`` it to read); for a schedule, its value at
        ``iterations`` (a float32 scalar Tensor, symbolic while tracing).
        Assigning a float writes the Variable in place.

        Raises (on assignment):
            TypeError: when the optimizer was built with a schedule or a
                callable (as Keras), or when given a schedule (pass it to
                the constructor: a compiled step holds the Variable).
            ValueError: for a negative or non-finite rate.
        """
        lr = self._learning_rate
        if isinstance(lr, Variable):
            return lr
        if isinstance(lr, schedules_module.LearningRateSchedule):
            return convert_to_tensor(lr(self.iterations))
        return convert_to_tensor(np.float32(self._check_lr(lr())))

    @learning_rate.setter
    def learning_rate(self, value):
        if not isinstance(self._learning_rate, Variable):
            raise TypeError(f"{self.name} was created with a learning-rate schedule or callable, "
                            "hence its learning rate is not settable; create the optimizer with "
                            "a float `learning_rate` to set it")
        if isinstance(value, schedules_module.LearningRateSchedule) or callable(value):
            raise TypeError(f"{self.name}: pass a learning-rate schedule to the constructor; "
                            "assigning one to `learning_rate` is not supported (compiled steps "
                            "hold the rate Variable)")
        self._learning_rate.assign(np.float32(self._check_lr(value)))

    @property
    def variables(self):
        """The learning-rate Variable (for a float rate) and the slots created
        so far, in creation order (``iterations`` is kept apart)."""
        out = [self._learning_rate] if isinstance(self._learning_rate, Variable) else []
        return out + [slot for _, _, slot in self.slot_variables()]

    def slot_variables(self):
        """``[(slot_name, variable, slot)]`` for every slot created so far,
        in creation order (what ``model.save`` stores as
        ``optimizer/<slot_name>/<weight path>``)."""
        return [(name, var, slot) for name, slots in self._slots.items()
                for var, slot in slots.values()]

    def _get_slot(self, variable, slot_name):
        """Slot ``slot_name`` of ``variable`` (float32 zeros of its shape, a
        non-trainable Variable named ``<variable>/<slot_name>``), created on
        first use."""
        slots = self._slots[slot_name]
        if id(variable) not in slots:
            slots[id(variable)] = (variable, Variable(np.zeros(variable.shape, np.float32),
                                                      trainable=False,
                                                      name=f"{variable.name}/{slot_name}"))
        return slots[id(variable)][1]

    def _unused_slot(self):
        """An empty float32 Variable, shape (0,): what the fused update ops
        take for a slot this configuration does not use."""
        if getattr(self, "_empty", None) is None:
            self._empty = Variable(np.zeros(0, np.float32), trainable=False, name="unused")
        return self._empty

    # ---- weight decay ---------------------------------------------------------------

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Exclude variables from weight decay, as Keras: the Variables in
        ``var_list``, and every variable whose ``name`` contains a match of
        one of the regular expressions ``var_names`` (e.g.
        ``["gamma", "beta", "bias"]`` for batch-norm parameters and biases).

        Raises:
            ValueError: when called after the optimizer's first update.
        """
        if self.built:
            raise ValueError("`exclude_from_weight_decay()` can only be configured before "
                             "the optimizer is built")
        self._exclude_ids = {id(v) for v in var_list or []}
        self._exclude_pattern = re.compile("|".join(sorted(set(var_names)))) if var_names \
            else None

    def _decay_of(self, variable):
        """The weight decay factor of ``variable`` (0.0 when excluded or unset)."""
        if not self.weight_decay or id(variable) in self._exclude_ids:
            return 0.0
        if self._exclude_pattern is not None and self._exclude_pattern.search(str(variable.name)):
            return 0.0
        return self.weight_decay

    # ---- applying gradients ------------------------------------------------------------

    def build(self, variables):
        """Create the slots of ``variables`` now (``apply`` does it for the
        variables it updates otherwise) and remember them for
        ``apply(grads)`` without variables."""
        for v in variables:
            self._check_variable(v)
            if not any(v is t for t in self._trainable_variables):
                self._trainable_variables.append(v)
            for slot_name in self._slot_names:
                self._get_slot(v, slot_name)
        self.built = True

    def _check_variable(self, v):
        if not isinstance(v, Variable):
            raise TypeError(f"{self.name}: expected Variables, got {type(v).__name__}")

    def apply_gradients(self, grads_and_vars):
        """``apply`` on ``(gradient, variable)`` pairs; returns ``iterations``.

        Args/Raises: as :meth:`apply`.
        """
        pairs = list(grads_and_vars)
        self.apply([g for g, _ in pairs], [v for _, v in pairs])
        return self.iterations

    def apply(self, grads, trainable_variables=None):
        """Update each variable with its gradient, in place, then count the
        step in ``iterations`` (Keras 3's ``optimizer.apply``).

        Args:
            grads: list of gradients (float32, each of its variable's shape;
                None for a variable the loss does not depend on: skipped).
            trainable_variables: the Variables, one per gradient; None means
                the ones given to :meth:`build`.
        Raises:
            TypeError: a variable is not a Variable, or a gradient not float32.
            ValueError: a gradient's shape differs from its variable's, the
                lists differ in length, or no variables are known.
            Everything is checked before the first update, so a failing call
            changes nothing.
        """
        grads = list(grads)
        if trainable_variables is None:
            if not self.built:
                raise ValueError(f"{self.name}.apply: when passing `grads` without variables, "
                                 "the optimizer must be built: call "
                                 "`optimizer.build(trainable_variables)` first")
            trainable_variables = self._trainable_variables
        trainable_variables = list(trainable_variables)
        if len(grads) != len(trainable_variables):
            raise ValueError(f"{self.name}.apply: {len(grads)} gradients for "
                             f"{len(trainable_variables)} variables")
        pairs = []
        for g, v in zip(grads, trainable_variables):
            if g is None:
                continue
            self._check_variable(v)
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
        if not pairs:
            return
        for _, v in pairs:
            if not any(v is t for t in self._trainable_variables):
                self._trainable_variables.append(v)
        with name_scope(self.name):  # (traced: the update nodes' scope)
            grads = self._clip_gradients([g for g, _ in pairs])
            lr = self._current_learning_rate()
            for g, (_, v) in zip(grads, pairs):
                self._update(g, v, lr)
            ops.assign_add(self.iterations, np.int64(1))
        self.built = True

    def _current_learning_rate(self):
        """The rate of this step as a float32 scalar tensor (one graph node
        for a schedule, shared by every variable's update)."""
        lr = self.learning_rate
        return lr if isinstance(lr, (Tensor, Variable)) else convert_to_tensor(lr)

    def _clip_gradients(self, grads):
        """Keras's clipping (base_optimizer._clip_gradients), as graph ops."""
        if self.clipnorm:
            return [self._clip_by_norm(g) for g in grads]
        if self.global_clipnorm:
            return clip_by_global_norm(grads, self.global_clipnorm)
        if self.clipvalue:
            return [ops.clip(g, -self.clipvalue, self.clipvalue) for g in grads]
        return grads

    def _clip_by_norm(self, g):
        """``g * clipnorm / max(||g||, clipnorm)`` (Keras's _clip_by_norm)."""
        norm = ops.sqrt(ops.sum(ops.square(g)))
        return ops.divide(ops.multiply(g, np.float32(self.clipnorm)),
                          ops.maximum(norm, np.float32(self.clipnorm)))

    def _update(self, gradient, variable, learning_rate):
        raise NotImplementedError(f"{type(self).__name__} must define _update")

    # ---- configuration -------------------------------------------------------------------

    def get_config(self):
        """The constructor arguments as a dict (a float rate as its current
        value; a schedule as ``{"class_name", "config"}``)."""
        lr = self._learning_rate
        if isinstance(lr, Variable):
            lr = float(lr)
        elif isinstance(lr, schedules_module.LearningRateSchedule):
            lr = schedules_module.serialize(lr)
        else:
            raise TypeError(f"{self.name}: a callable learning rate cannot be serialized")
        return {"name": self.name, "learning_rate": lr, "weight_decay": self.weight_decay,
                "clipnorm": self.clipnorm, "global_clipnorm": self.global_clipnorm,
                "clipvalue": self.clipvalue}

    @classmethod
    def from_config(cls, config):
        """A new optimizer (without slots) from ``get_config()``'s dict."""
        config = dict(config)
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = schedules_module.deserialize(config["learning_rate"])
        return cls(**config)


def global_norm(values):
    """``sqrt(sum of every element squared)`` over a list of tensors."""
    total = None
    for v in values:
        s = ops.sum(ops.square(v))
        total = s if total is None else ops.add(total, s)
    return ops.sqrt(total)


def clip_by_global_norm(values, clip_norm):
    """Scale ``values`` together so their global norm is at most
    ``clip_norm`` (Keras's clip_by_global_norm; a non-finite norm makes every
    value NaN, as there)."""
    norm = global_norm(values)
    c = np.float32(clip_norm)
    scale = ops.multiply(ops.minimum(ops.divide(np.float32(1.0), norm), np.float32(1.0 / clip_norm)), c)
    scale = ops.add(scale, ops.subtract(norm, norm))
    return [ops.multiply(v, scale) for v in values]
