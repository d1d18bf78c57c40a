"""state ops (csrc/ops_state.c): in-place updates of Variables.

Each op writes into its Variable argument(s) and returns None; under
``pyresnet.compile`` the update becomes a graph node that is never pruned.
Shapes and dtypes are checked before anything is written, so a call that
raises leaves every variable unchanged.  Arguments updated in place must be
:class:`pyresnet.Variable` (or Tensor) objects, not NumPy arrays.
"""
from .._loader import _C

call = _C.call


def assign(variable, value):
    """``variable[...] = value`` in place.

    Args:
        variable: float32, int32 or int64 Variable.
        value: broadcastable to the variable's shape.  A float32 variable
            takes float32 values; an int variable takes integers, or float32
            values that are whole numbers (so ``counter.assign(0)`` works).
    Raises:
        ValueError: the value does not broadcast (both shapes named), or a
            non-whole value for an int variable.
        TypeError: a dtype the variable cannot take, or a non-Tensor variable.
    """
    call("assign", variable, value)


def assign_add(variable, value):
    """``variable += value`` in place; arguments and errors as :func:`assign`.
    Integer variables wrap around on overflow."""
    call("assign_add", variable, value)


def assign_sub(variable, value):
    """``variable -= value`` in place; arguments and errors as :func:`assign`."""
    call("assign_sub", variable, value)


def moving_average_update(variable, value, momentum):
    """``variable = variable * momentum + value * (1 - momentum)`` in place
    (Keras BatchNormalization's moving mean/variance update, float32).

    Args:
        variable: float32 Variable.
        value: float32 of the same shape.
        momentum (float): e.g. 0.99, Keras' BatchNormalization default.
    Raises:
        ValueError: shapes differ.  TypeError: not float32.
    """
    call("moving_average_update", variable, value, momentum=float(momentum))


def ema_update(variable, average, momentum, iterations, period=1, overwrite_frequency=0,
               first_step_copy=False):
    """A moving average of ``variable`` and, optionally, the variable reset
    to it, in place (float32).  With ``t = iterations + 1`` (the step the
    optimizer has just applied, ``iterations`` counting the steps before it)::

        if t % period == 0:
            m = 0 if (first_step_copy and t == 1) else momentum
            average = m * average + (1 - m) * variable
            if overwrite_frequency and t % overwrite_frequency == 0:
                variable = average

    ``period=1, first_step_copy=True`` is Keras 3's optimizer EMA
    (``use_ema``, keras/src/optimizers/base_optimizer.py,
    ``_update_model_variables_moving_averages`` and
    ``_overwrite_model_variables_with_average_value``);
    ``period = overwrite_frequency = k`` with ``momentum = 1 - alpha`` is
    Lookahead's synchronisation (Zhang et al. 2019, Algorithm 1: slow
    weights ``phi += alpha * (theta - phi)``, then ``theta = phi``).

    Args:
        variable, average: float32 Variables of the same shape.
        momentum: float32 scalar tensor (or a float): the weight of the
            old average, computed in the graph for a schedule.
        iterations: the optimizer's step count before this step (int64
            scalar).
        period (int >= 1), overwrite_frequency (int >= 0; 0: never),
        first_step_copy (bool): see above.
    Raises:
        ValueError: shapes differ, momentum or iterations not one number,
            period < 1.  TypeError: not float32.
    """
    call("ema_update", variable, average, momentum, iterations, period=int(period),
         overwrite_frequency=int(overwrite_frequency), first_step_copy=bool(first_step_copy))


def sgd_update(variable, gradient, learning_rate, weight_decay=0.0):
    """One Keras 3 SGD step without momentum, in place (float32):
    ``variable -= variable * weight_decay * lr`` (decoupled weight decay of
    keras/src/optimizers/base_optimizer.py, skipped when 0), then
    ``variable -= gradient * lr`` (keras/src/optimizers/sgd.py).

    Args:
        variable: float32 Variable.
        gradient: float32 of the variable's shape.
        learning_rate: float32 tensor (or number) holding one value; a tensor
            input, so a schedule does not bake a constant into a traced graph.
        weight_decay (float): 0 disables it.
    Raises:
        ValueError: shapes differ or the learning rate is not one number.
        TypeError: not float32.
    """
    call("sgd_update", variable, gradient, learning_rate, weight_decay=float(weight_decay))


def sgd_momentum_update(variable, gradient, velocity, learning_rate, momentum, nesterov=False,
                        weight_decay=0.0):
    """One Keras 3 SGD step with momentum, updating ``variable`` and
    ``velocity`` in place (float32, keras/src/optimizers/sgd.py)::

        variable -= variable * weight_decay * lr          # if weight_decay
        velocity = velocity * momentum - gradient * lr
        variable += velocity * momentum - gradient * lr   # nesterov
        variable += velocity                              # otherwise

    Args:
        variable, velocity: float32 Variables of the same shape.
        gradient: float32 of that shape.
        learning_rate: float32 tensor (or number) holding one value.
        momentum (float), nesterov (bool), weight_decay (float): as Keras' SGD.
    Raises:
        ValueError: shapes differ or the learning rate is not one number.
        TypeError: not float32, or a non-Tensor variable/velocity.
    """
    call("sgd_momentum_update", variable, gradient, velocity, learning_rate,
         momentum=float(momentum), nesterov=bool(nesterov), weight_decay=float(weight_decay))


def adam_update(variable, gradient, momentum, velocity, velocity_hat, learning_rate, iterations,
                beta_1=0.9, beta_2=0.999, epsilon=1e-7, weight_decay=0.0):
    """One Keras 3 Adam (or AdamW) step, updating ``variable`` and its slots
    in place (float32, keras/src/optimizers/adam.py; Kingma & Ba 2015)::

        variable -= variable * weight_decay * lr      # if weight_decay (AdamW)
        t = iterations + 1
        alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        momentum += (gradient - momentum) * (1 - beta_1)
        velocity += (gradient**2 - velocity) * (1 - beta_2)
        velocity_hat = maximum(velocity_hat, velocity)  # amsgrad: used as velocity
        variable -= momentum * alpha / (sqrt(velocity) + epsilon)

    Args:
        variable, momentum, velocity: float32 Variables of one shape.
        gradient: float32 of that shape.
        velocity_hat: float32 Variable of that shape (amsgrad), or of shape
            ``(0,)`` (plain Adam).
        learning_rate: float32 tensor holding one value.
        iterations: the optimizer's step count before this step (int64,
            int32 or float32, one value).
        beta_1, beta_2, epsilon, weight_decay (float): as Keras's Adam/AdamW.
    Raises:
        ValueError: shapes differ, or lr/iterations hold more than one value.
        TypeError: wrong dtypes, or a slot that is not a Variable.
    """
    call("adam_update", variable, gradient, momentum, velocity, velocity_hat, learning_rate,
         iterations, beta_1=float(beta_1), beta_2=float(beta_2), epsilon=float(epsilon),
         weight_decay=float(weight_decay))


def rmsprop_update(variable, gradient, velocity, momentum_slot, average_gradient, learning_rate,
                   rho=0.9, momentum=0.0, epsilon=1e-7, weight_decay=0.0):
    """One Keras 3 RMSprop step in place (float32,
    keras/src/optimizers/rmsprop.py; Graves 2013, eq. 38-40, centered)::

        variable -= variable * weight_decay * lr       # if weight_decay
        velocity = rho * velocity + (1 - rho) * gradient**2
        average_gradient = rho * average_gradient + (1 - rho) * gradient  # centered
        denominator = velocity - average_gradient**2 + epsilon  # centered
        denominator = velocity + epsilon                        # otherwise
        increment = lr * gradient / sqrt(denominator)
        momentum_slot = momentum * momentum_slot + increment;  variable -= momentum_slot
        variable -= increment                                   # momentum == 0

    Args:
        variable, velocity: float32 Variables of one shape.
        gradient: float32 of that shape.
        momentum_slot, average_gradient: float32 Variables of that shape, or
            of shape ``(0,)`` when unused (momentum 0; not centered).
        learning_rate: float32 tensor holding one value.
        rho, momentum, epsilon, weight_decay (float): as Keras's RMSprop.
    Raises:
        ValueError: shapes differ or the learning rate is not one number.
        TypeError: wrong dtypes, or a slot that is not a Variable.
    """
    call("rmsprop_update", variable, gradient, velocity, momentum_slot, average_gradient,
         learning_rate, rho=float(rho), momentum=float(momentum), epsilon=float(epsilon),
         weight_decay=float(weight_decay))
