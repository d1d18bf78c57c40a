"""``keras.optimizers.Adam`` and ``AdamW`` (keras/src/optimizers/adam.py,
adamw.py)."""
from .. import ops
from .base_optimizer import Optimizer


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization",
    Algorithm 1, with the bias corrections folded into the step size as in
    section 2), as ``keras.optimizers.Adam``; one fused C op per variable
    (float32, Keras's operation order, ``t = iterations + 1``)::

        w -= w * weight_decay * lr                       (if weight_decay)
        alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)
        m += (g - m) * (1 - beta_1);  v += (g * g - v) * (1 - beta_2)
        v_hat = max(v_hat, v)                            (amsgrad: used as v)
        w -= m * alpha / (sqrt(v) + epsilon)

    Slots ``<variable>/momentum`` and ``<variable>/velocity`` (and
    ``velocity_hat`` with amsgrad, Reddi et al. 2018) are created on a
    variable's first update.

    Args:
        learning_rate: float >= 0, a schedule or a callable; default 0.001.
        beta_1, beta_2 (float): in [0, 1); defaults 0.9, 0.999.
        epsilon (float): > 0, default 1e-7 (Keras's; the paper's 1e-8).
        amsgrad (bool): the AMSGrad variant.
        weight_decay, clipnorm, clipvalue, global_clipnorm, name, **kwargs:
            see :class:`~pyresnet.optimizers.Optimizer`.
    Raises:
        ValueError: for arguments out of range.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, **kwargs):
        for arg, value in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name or type(self).__name__}: `{arg}` must be in [0, 1), got {value!r}")
        if not epsilon > 0:
            raise ValueError(f"{name or type(self).__name__}: `epsilon` must be > 0, got {epsilon!r}")
        self.beta_1, self.beta_2 = float(beta_1), float(beta_2)
        self.epsilon, self.amsgrad = float(epsilon), bool(amsgrad)
        self._slot_names = ("momentum", "velocity") + (("velocity_hat",) if amsgrad else ())
        super().__init__(learning_rate, weight_decay=weight_decay, clipnorm=clipnorm,
                         clipvalue=clipvalue, global_clipnorm=global_clipnorm, name=name, **kwargs)

    def _update(self, gradient, variable, learning_rate):
        v_hat = self._get_slot(variable, "velocity_hat") if self.amsgrad else self._unused_slot()
        ops.adam_update(variable, gradient, self._get_slot(variable, "momentum"),
                        self._get_slot(variable, "velocity"), v_hat, learning_rate,
                        self.iterations, beta_1=self.beta_1, beta_2=self.beta_2,
                        epsilon=self.epsilon, weight_decay=self._decay_of(variable))

    def get_config(self):
        """The constructor arguments as a dict (see Optimizer.get_config)."""
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2,
                "epsilon": self.epsilon, "amsgrad": self.amsgrad}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019,
    "Decoupled Weight Decay Regularization", Algorithm 2), as
    ``keras.optimizers.AdamW``: :class:`Adam` whose update first does
    ``w -= w * weight_decay * lr`` (Keras multiplies by the learning rate,
    as PyTorch's AdamW does).  ``weight_decay`` defaults to 0.004 and may
    not be None; ``exclude_from_weight_decay`` keeps it off chosen
    variables (batch-norm parameters and biases, say).

    Raises:
        ValueError: for ``weight_decay=None`` or arguments out of range.
    """

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-7, amsgrad=False, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, name=None, **kwargs):
        if weight_decay is None:
            raise ValueError("AdamW: argument `weight_decay` must be a float, got None")
        super().__init__(learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         amsgrad=amsgrad, weight_decay=weight_decay, clipnorm=clipnorm,
                         clipvalue=clipvalue, global_clipnorm=global_clipnorm, name=name,
                         **kwargs)
