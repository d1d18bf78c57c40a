"""airbench94 (Jordan 2024, "94% on CIFAR-10 in 3.29 seconds on a single
GPU", arXiv 2404.00498; the reference code is KellerJordan/cifar10-airbench,
legacy/airbench94.py): the network, its optimizer and its schedules with
pyresnet's Keras-style pieces.

The network (paper section 3, "Methods": the network architecture):

    Conv2D(24, 2x2, valid, bias), frozen kernel from patch whitening
    GELU
    3 groups (widths 64, 256, 256) of
        Conv2D(3x3, same, no bias) - MaxPool2D(2) - BN - GELU
        Conv2D(3x3, same, no bias) - BN - GELU
    MaxPool2D(3) - Flatten - Dense(10, no bias) - Rescaling(1/9)

with batch norm without learned scale (``scale=False``), momentum 0.6
(PyTorch's 0.4), epsilon 1e-12, and the 3x3 convolutions identity ("dirac")
initialised on their first ``in`` filters (section 3, identity initialization), the rest with
PyTorch's default init.

The training (section 3; the hyper-parameters of ``hyp`` in the code):
SGD with Nesterov momentum 0.85 on the summed label-smoothed (0.2)
cross-entropy of batches of 1024, learning rate 11.5 and weight decay
0.0153 "per 1024 examples" in airbench's decoupled form (divided by
``1024 * (1 + 1 / (1 - momentum))``), 64x the learning rate for the
batch-norm biases (not for the weight decay), a triangular schedule (from
0.2x up to 1x at 23% of the steps, then down to 0.07x), Lookahead every 5
steps with ``decay = 0.95**5 * (t / T)**3``, 9.9 epochs, the whitening
layer's bias trained for the first 3 epochs only.  :func:`training_setup`
converts these to Keras's mean-reduced loss: the learning rate is
``11.5 / (1 + 1/0.15) = 1.5`` and PyTorch's coupled L2 term becomes
``regularizers.L2`` penalties (``l2 = 0.0153 / 11.5 / 2`` on the kernels and
the whitening bias, that over 64 on the batch-norm biases).
"""
import math

import numpy as np

from .. import initializers, ops, regularizers
from ..callbacks import Callback
from ..layers import (Activation, BatchNormalization, Conv2D, Dense, Flatten, Input,
                      MaxPooling2D, Rescaling)
from ..models import Model
from ..optimizers import SGD, Lookahead
from ..optimizers.schedules import LearningRateSchedule, OneCycle

HYPERPARAMETERS = {
    "train_epochs": 9.9, "batch_size": 1024, "lr": 11.5, "momentum": 0.85,
    "weight_decay": 0.0153, "bias_scaler": 64.0, "label_smoothing": 0.2,
    "whiten_bias_epochs": 3, "widths": (64, 256, 256), "batchnorm_momentum": 0.6,
    "scaling_factor": 1 / 9, "translate": 2, "lookahead_every": 5,
    "lookahead_base": 0.95 ** 5, "warmup_fraction": 0.23, "lr_start": 0.2, "lr_end": 0.07,
    "whiten_images": 5000, "whiten_epsilon": 5e-4}
"""airbench94's hyper-parameters (legacy/airbench94.py's ``hyp`` and
constants), in airbench's own (PyTorch, summed-loss) units."""

# PyTorch's default Conv2d/Linear init: U(+-1/sqrt(fan_in))
_TORCH_DEFAULT = initializers.VarianceScaling(1 / 3, "fan_in", "uniform")


def _coupled_l2():
    """airbench's coupled weight decay as Keras L2's factor for the mean loss:
    PyTorch's ``g_sum + (wd / lr) * w`` with wd, lr airbench's values in
    summed-loss units is ``g_mean + (0.0153 / 11.5) * w``; L2's gradient
    is ``2 * l2 * w``."""
    h = HYPERPARAMETERS
    return h["weight_decay"] / h["lr"] / 2


def airbench94(input_shape=(32, 32, 3), num_classes=10, widths=None, whitening_images=None,
               batchnorm_momentum=None, name="airbench94"):
    """The airbench94 network (Jordan 2024, arXiv 2404.00498, section 3;
    see the module docstring) as a functional Model, logits out.

    The kernel regularizers hold airbench's (coupled) weight decay, see
    :func:`training_setup`; the whitening convolution (layer
    ``"whiten"``) has a frozen kernel (``kernel.trainable = False``) and a
    trainable bias.

    Args:
        input_shape (tuple): NHWC; images normalised per channel.
        num_classes (int): logits' width.
        widths (tuple of 3 ints): the groups' widths (default 64, 256, 256).
        whitening_images: float32 (N, H, W, C) images, normalised as the
            inputs (airbench: the first 5,000 training images), for the
            whitening kernel (:class:`pyresnet.initializers.PatchWhitening`);
            None leaves it at PyTorch's default init until
            :func:`init_whitening` is called.
        batchnorm_momentum (float): Keras's momentum (default 0.6).
        name (str): the model's name.
    Returns:
        Model: ``(batch, *input_shape)`` float32 -> ``(batch, num_classes)``
        logits.
    Raises:
        ValueError: for widths that are not 3 positive ints.
    """
    h = HYPERPARAMETERS
    widths = tuple(widths or h["widths"])
    if len(widths) != 3 or not all(isinstance(w, int) and w > 0 for w in widths):
        raise ValueError(f"airbench94: `widths` must be 3 positive ints, got {widths!r}")
    momentum = h["batchnorm_momentum"] if batchnorm_momentum is None else batchnorm_momentum
    l2 = _coupled_l2()
    kernel_reg = regularizers.L2(l2)
    bias_reg = regularizers.L2(l2 / h["bias_scaler"])
    channels = input_shape[-1]
    whiten_width = 2 * channels * 2 * 2
    inputs = Input(input_shape)
    # (the layers' configs name plain initializers so that the model saves as
    # .keras; the kernels are set below)
    whiten = Conv2D(whiten_width, 2, padding="valid", use_bias=True, bias_initializer="zeros",
                    bias_regularizer=kernel_reg, name="whiten")
    x = Activation("gelu")(whiten(inputs))
    convs = []
    for g, width in enumerate(widths, 1):
        for i in (1, 2):
            conv = Conv2D(width, 3, padding="same", use_bias=False,
                          kernel_regularizer=kernel_reg, name=f"group{g}_conv{i}")
            convs.append(conv)
            x = conv(x)
            if i == 1:
                x = MaxPooling2D(2, name=f"group{g}_pool")(x)
            x = BatchNormalization(momentum=momentum, epsilon=1e-12, scale=False,
                                   beta_regularizer=bias_reg, name=f"group{g}_norm{i}")(x)
            x = Activation("gelu")(x)
    x = MaxPooling2D(3)(x)
    x = Flatten()(x)
    head = Dense(num_classes, use_bias=False, kernel_regularizer=kernel_reg, name="head")
    outputs = Rescaling(h["scaling_factor"])(head(x))
    model = Model(inputs, outputs, name=name)
    dirac = initializers.Dirac(fill=_TORCH_DEFAULT)
    for layer in convs:
        layer.kernel.assign(dirac(tuple(layer.kernel.shape)))
    head.kernel.assign(_TORCH_DEFAULT(tuple(head.kernel.shape)))
    whiten.kernel.assign(_TORCH_DEFAULT(tuple(whiten.kernel.shape)))
    if whitening_images is not None:
        init_whitening(model, whitening_images)
    whiten.kernel.trainable = False
    return model


def init_whitening(model, images, epsilon=None):
    """Set ``model``'s layer ``"whiten"`` kernel from ``images``
    (:class:`pyresnet.initializers.PatchWhitening`, airbench's
    ``init_whitening_conv``).

    Args:
        model: a model from :func:`airbench94`.
        images: float32 (N, H, W, C), normalised as the model's inputs.
        epsilon (float): added to the eigenvalues (default 5e-4).
    """
    layer = model.get_layer("whiten")
    eps = HYPERPARAMETERS["whiten_epsilon"] if epsilon is None else epsilon
    layer.kernel.assign(initializers.PatchWhitening(images, eps)(tuple(layer.kernel.shape)))


class LookaheadDecay(LearningRateSchedule):
    """airbench's Lookahead step size ``alpha = 1 - base * (t / T)**3`` with
    ``t = step + 1`` the step just taken (capped at T) and ``base =
    0.95**5`` (legacy/airbench94.py's ``alpha_schedule``, its ``decay``
    being ``1 - alpha``), a float32 scalar computed with pyresnet ops (so it
    runs inside compiled steps).  Give it to
    :class:`pyresnet.optimizers.Lookahead` as ``slow_step_size``.

    Args:
        total_steps (int): T, the run's steps.
        base (float): the decay at T.
        power (float): the exponent (3).
    """

    def __init__(self, total_steps, base=0.95 ** 5, power=3.0):
        if not total_steps >= 1:
            raise ValueError(f"LookaheadDecay: total_steps must be >= 1, got {total_steps!r}")
        self.total_steps, self.base, self.power = int(total_steps), float(base), float(power)

    def __call__(self, step):
        """``alpha`` at the optimizer's ``iterations`` = ``step``."""
        t = ops.add(ops.cast(step, "float32"), np.float32(1.0))
        frac = ops.minimum(ops.divide(t, np.float32(self.total_steps)), np.float32(1.0))
        decay = ops.multiply(ops.power(frac, np.float32(self.power)), np.float32(self.base))
        return ops.subtract(np.float32(1.0), decay)

    def get_config(self):
        """The constructor arguments as a dict."""
        return {"total_steps": self.total_steps, "base": self.base, "power": self.power}


class FreezeAfter(Callback):
    """Freeze Variables from epoch ``epoch`` on: at that epoch's start their
    ``trainable`` becomes False and ``model.train_function`` is reset, so
    ``fit`` traces the step again without them (PyTorch's
    ``requires_grad_(False)``, as airbench does for the whitening bias after
    3 epochs).  The new step no longer computes their gradients, nor the
    gradients that only they needed: for airbench94 the 24->64
    convolution's input gradient and the GELU backward on the whitening
    output (about 5% of a step).  Lookahead still averages them, as
    airbench's, whose slow copy covers the whole ``state_dict``.  An epoch
    before ``epoch`` (a resumed run, say) makes them trainable again.

    Args:
        variables: the Variables to freeze.
        epoch (int): the first frozen epoch (0-based).
    """

    def __init__(self, variables, epoch):
        super().__init__()
        self.variables, self.epoch = list(variables), int(epoch)

    def on_epoch_begin(self, epoch, logs=None):
        trainable = epoch < self.epoch
        if any(v.trainable != trainable for v in self.variables):
            for v in self.variables:
                v.trainable = trainable
            self.model.train_function = None  # fit makes the step again


class StopAtStep(Callback):
    """Stop ``fit`` once the optimizer has taken ``steps`` steps in all
    (``optimizer.iterations``, so a run resumed from a backup stops at the
    same step): airbench's 9.9 epochs end inside the tenth epoch; that
    epoch's validation still runs."""

    def __init__(self, steps):
        super().__init__()
        self.steps = int(steps)

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) >= self.steps:
            self.model.stop_training = True


def training_setup(model, steps_per_epoch, train_epochs=None):
    """airbench94's optimizer, loss and callbacks for ``model`` (from
    :func:`airbench94`), in Keras's mean-loss units (Jordan 2024, section
    3; legacy/airbench94.py ``main``).

    * SGD, Nesterov momentum 0.85, rate ``11.5 / (1 + 1/(1 - 0.85)) = 1.5``
      (airbench's ``lr / kilostep_scale`` times its batch 1024, its loss
      being summed) on the :class:`~pyresnet.optimizers.schedules.OneCycle`
      triangle: 0.2x at step 0, 1x at ``int(0.23 T)``, 0.07x at T.
    * 64x the rate for the batch-norm biases (``lr_multipliers``); the weight
      decay is in the model's L2 regularizers (PyTorch's coupled form,
      divided by 64 for those biases, as airbench's ``wd / lr_biases``).
    * Lookahead every 5 steps with :class:`LookaheadDecay`; ``fit`` ends
      with the slow weights (airbench's final ``decay=1`` update).
    * the whitening bias frozen from epoch 3 (:class:`FreezeAfter`), and
      :class:`StopAtStep` at ``T = ceil(steps_per_epoch * train_epochs)``.

    Differences left: Keras's SGD keeps the rate inside the velocity
    (PyTorch multiplies the velocity by the current rate: the same for a
    constant rate); Lookahead covers the trained weights, not the
    batch-norm running statistics (airbench averages its whole
    ``state_dict``); the moving variance is the biased one (PyTorch's is
    unbiased).

    Args:
        model: from :func:`airbench94`.
        steps_per_epoch (int): batches per epoch (airbench: 48, dropping the
            last partial batch).
        train_epochs (float): default 9.9.
    Returns:
        dict with ``optimizer``, ``loss``, ``callbacks`` (a list),
        ``epochs`` (int, for ``fit``) and ``total_steps``.
    """
    h = HYPERPARAMETERS
    train_epochs = h["train_epochs"] if train_epochs is None else float(train_epochs)
    total = math.ceil(steps_per_epoch * train_epochs)
    lr = h["lr"] / (1 + 1 / (1 - h["momentum"]))
    warmup = int(total * h["warmup_fraction"])
    schedule = OneCycle(lr, total, warmup_steps=warmup, initial_learning_rate=lr * h["lr_start"],
                        final_learning_rate=lr * h["lr_end"])
    lookahead = Lookahead(h["lookahead_every"], LookaheadDecay(total, h["lookahead_base"]))
    optimizer = SGD(schedule, momentum=h["momentum"], nesterov=True, lookahead=lookahead,
                    lr_multipliers={r"norm\d/beta": h["bias_scaler"]})
    from ..losses import SparseCategoricalCrossentropy  # noqa: PLC0415
    loss = SparseCategoricalCrossentropy(from_logits=True, label_smoothing=h["label_smoothing"])
    callbacks = [FreezeAfter([model.get_layer("whiten").bias], h["whiten_bias_epochs"]),
                 StopAtStep(total)]
    return {"optimizer": optimizer, "loss": loss, "callbacks": callbacks,
            "epochs": math.ceil(train_epochs), "total_steps": total}


__all__ = ["airbench94", "init_whitening", "training_setup", "LookaheadDecay", "FreezeAfter",
           "StopAtStep", "HYPERPARAMETERS"]
