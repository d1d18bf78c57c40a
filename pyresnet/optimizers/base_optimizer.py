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
_NOT_PROVIDED = {"loss_scale_factor": None, "gradient_accumulation_steps": None}


class Lookahead:
    """Lookahead's slow weights (Zhang et al. 2019, "Lookahead Optimizer: k
    steps forward, 1 step back", Algorithm 1), given to any optimizer as
    ``lookahead=``: every ``sync_period`` steps, the slow copy ``phi`` of
    each variable moves toward the variable ``theta`` and the variable is
    reset to it::

        phi = phi + alpha * (theta - phi);  theta = phi

    (computed as ``phi = (1 - alpha) * phi + alpha * theta`` by the
    ``ema_update`` op).  The slow copies start as the variables' values when
    the optimizer creates its slots.  At the end of ``fit``,
    ``optimizer.finalize_variable_values`` sets each variable to its slow
    copy (the last steps since a synchronisation are dropped), as airbench
    does (Jordan 2024, arXiv 2404.00498, section 3, "Lookahead optimization":
    its "EMA" is this, with ``sync_period=5`` and ``alpha = 1 - 0.95**5 * (t / T)**3``, see
    :class:`pyresnet.applications.airbench.LookaheadDecay`).  TensorFlow
    Addons' names (``tfa.optimizers.Lookahead(sync_period=6,
    slow_step_size=0.5)``); Keras has no Lookahead.

    Args:
        sync_period (int >= 1): k, the steps between synchronisations.
        slow_step_size: alpha in [0, 1], a float, or a callable of the
            optimizer's ``iterations`` (the count before the step, as a
            learning-rate schedule is called) returning a float32 scalar
            tensor built from pyresnet ops (a
            :class:`~pyresnet.optimizers.schedules.LearningRateSchedule`
            qualifies): evaluated inside compiled steps.
    Raises:
        ValueError: for arguments out of range.
    """

    def __init__(self, sync_period=6, slow_step_size=0.5):
        if isinstance(sync_period, bool) or not isinstance(sync_period, (int, np.integer)) \
                or sync_period < 1:
            raise ValueError(f"Lookahead: `sync_period` must be an int >= 1, got "
                             f"{sync_period!r}")
        if not callable(slow_step_size):
            slow_step_size = _unit_float(slow_step_size, "Lookahead: `slow_step_size` must be a "
                                         "float in [0, 1] or a schedule")
        self.sync_period, self.slow_step_size = int(sync_period), slow_step_size

    def momentum(self, iterations):
        """``1 - alpha`` at ``iterations`` as a float32 scalar tensor."""
        alpha = self.slow_step_size
        if callable(alpha):
            return ops.subtract(np.float32(1.0), convert_to_tensor(alpha(iterations)))
        return convert_to_tensor(np.float32(1.0 - alpha))

    def __repr__(self):
        return f"Lookahead(sync_period={self.sync_period}, slow_step_size={self.slow_step_size!r})"


def _unit_float(value, message):
    """``value`` as a float in [0, 1]; ValueError ``message`` (+ what came) otherwise."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = None
    if v is None or not 0.0 <= v <= 1.0:
        raise ValueError(f"{message}, got {value!r}")
    return v


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
        use_ema (bool): keep an exponential moving average of the trained
            variables (Keras 3): after every step, ``average = m * average
            + (1 - m) * variable`` with ``m = ema_momentum`` (0 at the first
            step, so the average starts at the variables), one
            ``ema_update`` C op per variable.
        ema_momentum (float): in [0, 1].
        ema_overwrite_frequency (int or None): with ``use_ema``, every this
            many steps the variables are set to their averages; None leaves
            them, and ``finalize_variable_values`` (called at the end of
            ``fit``, as Keras) sets them then.
        lookahead (:class:`Lookahead` or None): Lookahead's slow weights
            (not with ``use_ema``); not a Keras argument.
        lr_multipliers (dict or None): per-variable learning-rate factors,
            ``{regex: factor}``: a variable whose ``path`` (else ``name``)
            contains a match of ``regex`` takes its gradient step with
            ``learning_rate * factor`` (the first matching pattern wins;
            see :meth:`set_lr_multiplier` to name Variables).  The decoupled
            weight decay keeps the base rate, ``w -= w * weight_decay *
            learning_rate``, as airbench's ``bias_scaler`` (Jordan 2024,
            section 3: 64x for the batch-norm biases).  A factor is a
            float >= 0 or a scalar float32 Variable (changeable during
            training, e.g. set to 0 to freeze a variable; not with weight
            decay on that variable).  Not a Keras argument (Keras has
            none; PyTorch's per-group ``lr`` plays the role).
        name (str): for slot names and error messages.
        **kwargs: Keras's ``loss_scale_factor`` and
            ``gradient_accumulation_steps`` are accepted at their defaults
            only.
    Raises:
        ValueError: for arguments out of range, or several clipping
            arguments.  NotImplementedError: for a Keras feature not
            provided (loss scaling, gradient accumulation).
        TypeError: for an unknown keyword argument.
    """

    _slot_names = ()  # the slots this configuration uses, in creation order

    # grads -> grads applied first by apply(): set by a distribution while
    # fit traces its step (pyresnet.distribute.DataParallel), else None
    _gradient_reducer = None

    def __init__(self, learning_rate, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, use_ema=False, ema_momentum=0.99,
                 ema_overwrite_frequency=None, lookahead=None, lr_multipliers=None, **kwargs):
        self.name = name if name is not None else type(self).__name__
        self.use_ema = bool(use_ema)
        self.ema_momentum = _unit_float(ema_momentum,
                                        f"{self.name}: `ema_momentum` must be in [0, 1]")
        if ema_overwrite_frequency is not None and (
                isinstance(ema_overwrite_frequency, bool)
                or not isinstance(ema_overwrite_frequency, (int, np.integer))
                or ema_overwrite_frequency < 1):
            raise ValueError(f"{self.name}: `ema_overwrite_frequency` must be an int >= 1 or "
                             f"None, got {ema_overwrite_frequency!r}")
        self.ema_overwrite_frequency = None if ema_overwrite_frequency is None \
            else int(ema_overwrite_frequency)
        if lookahead is not None and not isinstance(lookahead, Lookahead):
            raise TypeError(f"{self.name}: `lookahead` must be an optimizers.Lookahead or "
                            f"None, got {lookahead!r}")
        if lookahead is not None and self.use_ema:
            raise ValueError(f"{self.name}: `use_ema` and `lookahead` cannot be combined")
        self.lookahead = lookahead
        self._multiplier_ids = {}  # id(variable) -> (variable, factor)
        self._multiplier_patterns = []  # [(compiled regex, factor)]
        for pattern, factor in (lr_multipliers or {}).items():
            self._multiplier_patterns.append((re.compile(pattern),
                                              self._check_multiplier(factor)))
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
        # (the EMA / Lookahead slot joins the configuration's, so that saving and
        # loading handle it as any slot)
        self._slot_names = tuple(self._slot_names) + self._average_slot()
        self._slots = {slot: {} for slot in self._slot_names}
        self._trainable_variables = []
        self._exclude_ids, self._exclude_pattern = set(), None
        # Steps applied so far (Keras's ``optimizer.iterations``): an int64
        # Variable counted in place, so compiled steps count too.
        self.iterations = Variable(np.int64(0), trainable=False, name="iteration")
        self.built = False

    def _average_slot(self):
        """The moving-average slot's name, as a 1-tuple (or empty)."""
        if self.use_ema:
            return ("average",)
        return ("slow",) if self.lookahead is not None else ()

    def _check_multiplier(self, factor):
        if isinstance(factor, Variable):
            if factor.dtype != "float32" or factor.size != 1 or factor.trainable:
                raise ValueError(f"{self.name}: a learning-rate multiplier Variable must be a "
                                 f"non-trainable float32 scalar, got {factor!r}")
            return factor
        try:
            ok = 0.0 <= float(factor) < np.inf
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{self.name}: a learning-rate multiplier must be a finite float "
                             f">= 0 or a scalar Variable, got {factor!r}")
        return float(factor)

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
        non-trainable Variable named ``<variable>/<slot_name>``; Lookahead's
        ``slow`` slot starts as a copy of the variable), created on first
        use."""
        slots = self._slots[slot_name]
        if id(variable) not in slots:
            init = np.array(variable, np.float32) if slot_name == "slow" \
                else np.zeros(variable.shape, np.float32)
            slots[id(variable)] = (variable, Variable(init, trainable=False,
                                                      name=f"{variable.name}/{slot_name}"))
        return slots[id(variable)][1]

    # ---- learning-rate multipliers ----------------------------------------------------

    def set_lr_multiplier(self, factor, var_list=None, var_names=None):
        """Give the Variables in ``var_list``, and those whose ``path`` (else
        ``name``) matches one of the regular expressions ``var_names``, the
        learning-rate factor ``factor`` (see ``lr_multipliers`` in the
        class docstring).  Later calls take precedence over earlier ones and
        over the constructor's ``lr_multipliers``.

        Raises:
            ValueError: for a factor out of range, or after the optimizer's
                first update.
        """
        if self.built:
            raise ValueError("`set_lr_multiplier()` can only be configured before the "
                             "optimizer is built")
        factor = self._check_multiplier(factor)
        for v in var_list or []:
            self._check_variable(v)
            self._multiplier_ids[id(v)] = (v, factor)
        for pattern in var_names or []:
            self._multiplier_patterns.insert(0, (re.compile(pattern), factor))

    def lr_multiplier_of(self, variable):
        """The learning-rate factor of ``variable``: a float (1.0 by default)
        or a scalar Variable."""
        if id(variable) in self._multiplier_ids:
            return self._multiplier_ids[id(variable)][1]
        name = str(getattr(variable, "path", None) or variable.name)
        for pattern, factor in self._multiplier_patterns:
            if pattern.search(name):
                return factor
        return 1.0

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
        """The weight decay factor of ``variable`` (0.0 when excluded or
        unset), divided by its learning-rate multiplier (the update ops
        compute ``w * weight_decay * lr`` with the variable's multiplied
        rate, so the decay keeps the base rate)."""
        if not self.weight_decay or id(variable) in self._exclude_ids:
            return 0.0
        if self._exclude_pattern is not None and self._exclude_pattern.search(str(variable.name)):
            return 0.0
        factor = self.lr_multiplier_of(variable)
        if isinstance(factor, Variable):
            raise ValueError(f"{self.name}: variable {variable.name} has a Variable learning-"
                             "rate multiplier and weight decay; exclude it from weight decay "
                             "(`exclude_from_weight_decay`) or give a float multiplier")
        if factor == 0.0:
            return 0.0
        return self.weight_decay / factor

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
                lists differ in length, no variables are known, or a variable
                has both weight decay and a Variable learning-rate multiplier.
            Everything is checked before the first update, so a failing call
            changes nothing.
        """
        grads = list(grads)
        if self._gradient_reducer is not None:  # a distribution's fit step (averaged)
            grads = self._gradient_reducer(grads)
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
            self._decay_of(v)  # (raises for a Variable multiplier with weight decay)
        for _, v in pairs:
            if not any(v is t for t in self._trainable_variables):
                self._trainable_variables.append(v)
            for slot_name in self._average_slot():  # (Lookahead's copy: before the update)
                self._get_slot(v, slot_name)
        with name_scope(self.name):  # (traced: the update nodes' scope)
            grads = self._clip_gradients([g for g, _ in pairs])
            lr = self._current_learning_rate()
            scaled = {}  # factor (float or id of a Variable) -> the scaled rate, one node each
            for g, (_, v) in zip(grads, pairs):
                factor = self.lr_multiplier_of(v)
                if isinstance(factor, float) and factor == 1.0:
                    self._update(g, v, lr)
                    continue
                key = id(factor) if isinstance(factor, Variable) else factor
                if key not in scaled:
                    scaled[key] = ops.multiply(lr, factor if isinstance(factor, Variable)
                                               else np.float32(factor))
                self._update(g, v, scaled[key])
            self._update_averages()
            ops.assign_add(self.iterations, np.int64(1))
        self.built = True

    def _update_averages(self):
        """Keras 3's EMA step (after the updates, before ``iterations`` is
        counted; base_optimizer.apply) or Lookahead's synchronisation, one
        ``ema_update`` op per trained variable."""
        if self.use_ema:
            momentum = convert_to_tensor(np.float32(self.ema_momentum))
            for v in self._trainable_variables:
                ops.ema_update(v, self._get_slot(v, "average"), momentum, self.iterations,
                               overwrite_frequency=self.ema_overwrite_frequency or 0,
                               first_step_copy=True)
        elif self.lookahead is not None:
            k = self.lookahead.sync_period
            momentum = self.lookahead.momentum(self.iterations)
            for v in self._trainable_variables:
                ops.ema_update(v, self._get_slot(v, "slow"), momentum, self.iterations,
                               period=k, overwrite_frequency=k)

    def finalize_variable_values(self, var_list):
        """Set each Variable of ``var_list`` that has a moving average (with
        ``use_ema``) or slow weights (with ``lookahead``) to it, as Keras 3
        (``fit`` calls this at the end of training).  Does nothing
        otherwise."""
        name = "average" if self.use_ema else "slow" if self.lookahead is not None else None
        if name is None:
            return
        for v in var_list:
            if id(v) in self._slots[name]:
                v.assign(self._slots[name][id(v)][1])

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
                "clipvalue": self.clipvalue, "use_ema": self.use_ema,
                "ema_momentum": self.ema_momentum,
                "ema_overwrite_frequency": self.ema_overwrite_frequency}

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
