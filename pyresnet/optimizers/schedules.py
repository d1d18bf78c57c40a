"""Learning-rate schedules with Keras 3's names and arguments
(``keras.optimizers.schedules``, keras/src/optimizers/schedules/
learning_rate_schedule.py).

A schedule is called with the optimizer's step count (``iterations``, an
int64 scalar Variable) and returns the rate as a float32 scalar Tensor.  The
built-in ones are one C op each (csrc/ops_state.c, float32 arithmetic in
Keras's order), so inside a compiled training step the rate is a graph node
computed from ``iterations``: it changes every step without a retrace and
without returning to Python.  A subclass may compute its rate from
``pyresnet.ops`` the same way.
"""
import numpy as np

from .._loader import _C

call = _C.call


class LearningRateSchedule:
    """Base class: subclasses define ``__call__(step)`` -> float32 scalar
    Tensor (built from ops, so it traces) and ``get_config()``."""

    def __call__(self, step):
        raise NotImplementedError(f"{type(self).__name__} must define __call__(step)")

    def get_config(self):
        """The constructor arguments as a dict."""
        raise NotImplementedError(f"{type(self).__name__} must define get_config()")

    @classmethod
    def from_config(cls, config):
        """A schedule from ``get_config()``'s dict."""
        return cls(**config)


def _positive(owner, name, value):
    try:
        ok = float(value) > 0 and np.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: argument `{name}` must be > 0, got {name}={value!r}")
    return value


def _rate(owner, name, value):
    try:
        ok = float(value) >= 0 and np.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}: argument `{name}` must be a finite float >= 0, got "
                         f"{name}={value!r}")
    return value


class CosineDecay(LearningRateSchedule):
    """Cosine decay (Loshchilov & Hutter 2017, "SGDR", eq. 5 without
    restarts) with an optional linear warmup (Goyal et al. 2017, section
    2.2), as ``keras.optimizers.schedules.CosineDecay``::

        without warmup_target:  s = min(step, decay_steps)
            lr = initial_learning_rate * ((1 - alpha) * c(s) + alpha)
        with warmup_target:     s = min(step, warmup_steps + decay_steps)
            s < warmup_steps: lr = initial_learning_rate
                + (warmup_target - initial_learning_rate) * s / warmup_steps
            else:             lr = warmup_target * ((1 - alpha) * c(s - warmup_steps) + alpha)
        c(s) = 0.5 * (1 + cos(pi * s / decay_steps))

    Args:
        initial_learning_rate (float): the rate at step 0.
        decay_steps (int): steps of the cosine part (> 0).
        alpha (float): the final rate as a fraction of the decayed-from rate.
        name (str): Keras's name argument.
        warmup_target (float or None): the rate the warmup reaches (None: no
            warmup).
        warmup_steps (int): steps of the linear warmup.
    Raises:
        ValueError: for ``decay_steps <= 0`` or rates out of range.
    """

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name="CosineDecay",
                 warmup_target=None, warmup_steps=0):
        self.initial_learning_rate = _rate("CosineDecay", "initial_learning_rate",
                                           initial_learning_rate)
        self.decay_steps = _positive("CosineDecay", "decay_steps", decay_steps)
        self.alpha = alpha
        self.name = name
        self.warmup_target = None if warmup_target is None else _rate(
            "CosineDecay", "warmup_target", warmup_target)
        if not warmup_steps >= 0:
            raise ValueError(f"CosineDecay: argument `warmup_steps` must be >= 0, got "
                             f"warmup_steps={warmup_steps!r}")
        self.warmup_steps = warmup_steps

    def _attrs(self):
        return dict(initial_learning_rate=float(self.initial_learning_rate),
                    decay_steps=float(self.decay_steps), alpha=float(self.alpha),
                    warmup=self.warmup_target is not None,
                    warmup_target=float(self.warmup_target or 0.0),
                    warmup_steps=float(self.warmup_steps))

    def __call__(self, step):
        """The rate at ``step`` (int or int/float scalar tensor) as a float32
        scalar Tensor (a graph node while tracing)."""
        return call("cosine_decay_schedule", step, **self._attrs())

    def get_config(self):
        """The constructor arguments as a dict."""
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "alpha": self.alpha, "name": self.name,
                "warmup_target": self.warmup_target, "warmup_steps": self.warmup_steps}


class OneCycle(LearningRateSchedule):
    """A one-cycle schedule (Smith & Topin 2019, "Super-Convergence",
    section 3; fast.ai's and PyTorch's ``OneCycleLR`` without the momentum
    cycle): a linear warmup from ``initial_learning_rate`` to
    ``maximal_learning_rate`` over ``warmup_steps``, then a linear
    (``annealing="linear"``) or cosine (``"cosine"``) decay to
    ``final_learning_rate`` at ``total_steps``, constant after.  Keras has no
    one-cycle schedule; this one is :class:`CosineDecay` with a warmup whose
    decay may be linear, computed by the same C op::

        s < warmup_steps: lr = initial + (maximal - initial) * s / warmup_steps
        else:             lr = maximal * ((1 - a) * c(s - warmup_steps) + a),
                          a = final / maximal,  c(t) = 1 - t / (total - warmup)
                          (cosine: CosineDecay's c)

    Args:
        maximal_learning_rate (float): the peak rate (> 0).
        total_steps (int): steps of the whole cycle (> warmup_steps).
        warmup_steps (int): steps of the rise (>= 0).
        initial_learning_rate (float): the rate at step 0 (default 0).
        final_learning_rate (float): the rate at ``total_steps`` (default 0).
        annealing (str): ``"linear"`` or ``"cosine"``.
        name (str): a name.
    Raises:
        ValueError: for arguments out of range.
    """

    def __init__(self, maximal_learning_rate, total_steps, warmup_steps=0,
                 initial_learning_rate=0.0, final_learning_rate=0.0, annealing="linear",
                 name="OneCycle"):
        self.maximal_learning_rate = _positive("OneCycle", "maximal_learning_rate",
                                               maximal_learning_rate)
        self.initial_learning_rate = _rate("OneCycle", "initial_learning_rate",
                                           initial_learning_rate)
        self.final_learning_rate = _rate("OneCycle", "final_learning_rate", final_learning_rate)
        if not 0 <= warmup_steps < total_steps:
            raise ValueError(f"OneCycle: needs 0 <= warmup_steps < total_steps, got "
                             f"warmup_steps={warmup_steps!r}, total_steps={total_steps!r}")
        if annealing not in ("linear", "cosine"):
            raise ValueError(f"OneCycle: `annealing` must be 'linear' or 'cosine', got "
                             f"{annealing!r}")
        self.total_steps, self.warmup_steps = total_steps, warmup_steps
        self.annealing, self.name = annealing, name

    def __call__(self, step):
        """The rate at ``step`` as a float32 scalar Tensor."""
        peak = float(self.maximal_learning_rate)
        return call("cosine_decay_schedule", step,
                    initial_learning_rate=float(self.initial_learning_rate),
                    decay_steps=float(self.total_steps - self.warmup_steps),
                    alpha=float(self.final_learning_rate) / peak, warmup=True,
                    warmup_target=peak, warmup_steps=float(self.warmup_steps),
                    linear=self.annealing == "linear")

    def get_config(self):
        """The constructor arguments as a dict."""
        return {"maximal_learning_rate": self.maximal_learning_rate,
                "total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "initial_learning_rate": self.initial_learning_rate,
                "final_learning_rate": self.final_learning_rate, "annealing": self.annealing,
                "name": self.name}


class ExponentialDecay(LearningRateSchedule):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)``
    (the exponent floored when ``staircase``), as
    ``keras.optimizers.schedules.ExponentialDecay``.

    Raises:
        ValueError: for ``decay_steps <= 0``.
    """

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False,
                 name="ExponentialDecay"):
        self.initial_learning_rate = _rate("ExponentialDecay", "initial_learning_rate",
                                           initial_learning_rate)
        self.decay_steps = _positive("ExponentialDecay", "decay_steps", decay_steps)
        self.decay_rate = _rate("ExponentialDecay", "decay_rate", decay_rate)
        self.staircase, self.name = bool(staircase), name

    def __call__(self, step):
        """The rate at ``step`` as a float32 scalar Tensor."""
        return call("exponential_decay_schedule", step,
                    initial_learning_rate=float(self.initial_learning_rate),
                    decay_steps=float(self.decay_steps), decay_rate=float(self.decay_rate),
                    staircase=self.staircase)

    def get_config(self):
        """The constructor arguments as a dict."""
        return {"initial_learning_rate": self.initial_learning_rate,
                "decay_steps": self.decay_steps, "decay_rate": self.decay_rate,
                "staircase": self.staircase, "name": self.name}


class PiecewiseConstantDecay(LearningRateSchedule):
    """``values[0]`` while ``step <= boundaries[0]``, ``values[i]`` while
    ``boundaries[i-1] < step <= boundaries[i]``, ``values[-1]`` after the
    last boundary, as ``keras.optimizers.schedules.PiecewiseConstantDecay``
    (He et al. 2015's step schedule: ``boundaries=[32000, 48000],
    values=[0.1, 0.01, 0.001]``).

    Args:
        boundaries (list of int): increasing step numbers.
        values (list of float): one more than ``boundaries``.
        name (str): Keras's default "PiecewiseConstant".
    Raises:
        ValueError: for lengths that do not fit or boundaries that decrease.
    """

    def __init__(self, boundaries, values, name="PiecewiseConstant"):
        if len(boundaries) != len(values) - 1:
            raise ValueError(f"PiecewiseConstantDecay: the length of boundaries should be 1 less "
                             f"than the length of values, got boundaries={boundaries} of length "
                             f"{len(boundaries)} and values={values} of length {len(values)}")
        if any(b > a for a, b in zip(boundaries[1:], boundaries)):
            raise ValueError(f"PiecewiseConstantDecay: boundaries must not decrease, got "
                             f"{boundaries}")
        self.boundaries, self.values, self.name = list(boundaries), list(values), name
        self._boundaries = np.asarray(boundaries, np.float32 if any(
            isinstance(b, float) for b in boundaries) else np.int64).reshape(-1)
        self._values = np.asarray(values, np.float32).reshape(-1)

    def __call__(self, step):
        """The rate at ``step`` as a float32 scalar Tensor."""
        return call("piecewise_constant_schedule", step, self._boundaries, self._values)

    def get_config(self):
        """The constructor arguments as a dict."""
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


_CLASSES = {c.__name__: c for c in (CosineDecay, OneCycle, ExponentialDecay,
                                    PiecewiseConstantDecay)}


def serialize(schedule):
    """``{"class_name": ..., "config": ...}`` of a built-in schedule.

    Raises:
        TypeError: for a schedule of another class (a user's subclass).
    """
    name = type(schedule).__name__
    if _CLASSES.get(name) is not type(schedule):
        raise TypeError(f"cannot serialize the learning-rate schedule {schedule!r}: only "
                        f"{sorted(_CLASSES)} can be saved")
    return {"class_name": name, "config": schedule.get_config()}


def deserialize(config):
    """The schedule :func:`serialize` described.

    Raises:
        ValueError: for an unknown class name.
    """
    return _from_class_config(config, _CLASSES, "learning-rate schedule")


def _from_class_config(config, classes, what):
    """``classes[config["class_name"]].from_config(config["config"])``: the
    one lookup of a saved ``{"class_name", "config"}`` for the schedules and
    the optimizers.  ValueError naming ``what`` and the known names for an
    unknown class name."""
    cls = classes.get(config.get("class_name"))
    if cls is None:
        raise ValueError(f"unknown {what} {config.get('class_name')!r}; known: "
                         f"{sorted(classes)}")
    return cls.from_config(config["config"])


__all__ = ["LearningRateSchedule", "CosineDecay", "OneCycle", "ExponentialDecay",
           "PiecewiseConstantDecay", "serialize", "deserialize"]
