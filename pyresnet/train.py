"""Train a CIFAR ResNet from the command line: the main job.

    python -m pyresnet.train                      # ResNet-20 on the full CIFAR-10
    python -m pyresnet.train --epochs 1 --model resnet20 --dataset cifar10
    python -m pyresnet.train --subset 2000 --epochs 3 --model resnet8
    python -m pyresnet.train --recipe regnet --epochs 15
    python -m pyresnet.train --recipe airbench94
    python -m pyresnet.train --subset 64 --test-subset 64 --epochs 1   # a smoke test

Three recipes; every option below overrides its recipe's value (airbench94
takes only the data, batch, epoch and precision options).
``--mixed-precision`` trains under Keras's ``mixed_bfloat16`` policy
(:mod:`pyresnet.mixed_precision`) with either.

``--recipe cifar`` (the default) is the recipe of the best public ResNet-20
reproduction (chenyaofo/pytorch-cifar-models: projection shortcuts (1x1
conv + BN, He et al.'s option B), SGD with Nesterov momentum 0.9, learning
rate 0.1, weight decay 5e-4 coupled, cosine decay to 0; 92.6% after 200
epochs at batch 256), at batch 128 (He et al.'s, twice the steps per epoch),
with a one-epoch linear warmup (Goyal et al. 2017, section 2.2) and the
budget of this machine: 36 epochs, which reached 91.1% test accuracy in 53
minutes on 2 Sapphire Rapids cores, evaluation included
(bench/results/resnet20_cifar10_recipe_cifar_36epochs.log).  The data pipeline is He et al. 2015's
(section 4.2): 4-pixel zero padding + random 32x32 crop + horizontal flip,
per-channel normalisation.

``--recipe regnet`` is the pipeline the RegNet reproduction for
tf.keras.applications used (Radosavovic et al. 2020 as in pycls, trained
with AdamW), at CIFAR size: Inception crop (area in ``[--area-factor, 1]``,
resized to 32x32), horizontal flip, PCA lighting (Krizhevsky et al. 2012,
the training set's eigenvectors or ImageNet's), mixup 0.2 (Zhang et al.
2018), AdamW (learning rate 2e-3) with decoupled weight decay 5e-5 off the
batch-norm parameters and biases, cosine decay with a one-epoch warmup, 15
epochs.

``--recipe airbench94`` is Jordan 2024's (arXiv 2404.00498;
:mod:`pyresnet.applications.airbench`): its network (``--model`` is
ignored), frozen patch-whitening first layer computed from the first 5,000
training images, batch 1024 (the last partial batch dropped), 9.9 epochs
(``--epochs`` may be fractional here: the run stops after
``ceil(steps_per_epoch * epochs)`` steps), SGD Nesterov with airbench's
hyper-parameters, Lookahead, alternating flip with 2-pixel mirror-padded
translation when the data pipeline has them (else random flip and
reflect-padded crop, said on the recipe line), and at the end the test
accuracy with test-time augmentation (mirror + two 1-pixel translations,
:class:`pyresnet.models.TestTimeAugmentation`), printed and written to
``final.json``.

Weight decay (``--weight-decay WD``) comes in two forms
(``--weight-decay-form``):

* ``coupled``: the L2 term ``WD * w`` added to the gradient (He et al. 2015,
  PyTorch's SGD).  Keras's optimizers decay decoupled only; with SGD and
  momentum m the coupled term, which passes through the momentum, shrinks
  the weights per step as a decoupled ``WD / (1 - m)`` does once the rate
  changes slowly, so the command gives SGD ``weight_decay = WD / (1 - m)``
  (SGD only).
* ``decoupled``: Loshchilov & Hutter 2019's lambda: ``w -= (lr_t / lr) *
  WD * w`` per step, the schedule's multiplier times WD (tfa's AdamW, the
  RegNet reproduction's); Keras multiplies its ``weight_decay`` by the
  current rate, so the command passes ``weight_decay = WD / lr``.

Schedules (``--schedule``): ``cosine`` (Keras ``CosineDecay`` to 0 after a
linear warmup of ``--warmup-epochs`` from 0), ``step`` (He et al.: the rate
/ 10 at 50% and 75% of the steps, ``PiecewiseConstantDecay``), ``onecycle``
(``OneCycle``: linear from lr / 25 up to lr over ``--warmup-epochs``,
default 30% of the epochs, then linear to 0).  All are computed from the
optimizer's step count inside the compiled step.

Prints one line per epoch (training loss and accuracy, test loss and
accuracy, training images/s, seconds), once whether stdout is a terminal, a
pipe or a file (on a terminal ``--verbose auto`` or ``1`` also draws a
progress bar during the epoch, erased before its line; ``0`` or ``2``: no
bar), and a final line with the test
accuracy, the wall time and the peak resident memory; exits non-zero on
failure (missing data, bad arguments, a non-finite loss: training stops
after the batch that gave it, ``TerminateOnNaN``).

Each run gets a folder ``<--log-dir>/<YYYYmmdd-HHMMSS>_<model>_<dataset>/``
holding ``config.json`` (every option, the seed, the pyresnet version, the
CPU and thread count), ``metrics.csv`` (a row per epoch, rewritten
atomically), ``backup/latest.backup`` (the whole training state after the
last epoch: :class:`pyresnet.callbacks.BackupAndRestore`), ``best.keras``
(the model of the best test accuracy so far), ``tensorboard/`` (the
scalars and the training step's graph of
:class:`pyresnet.callbacks.TensorBoard`, when tensorboardX is installed) and,
when training is over, ``model.keras``.  ``--resume RUN_DIR`` continues a
killed run from its backup with the options of its ``config.json`` (all of
them: ``--data``, ``--verbose`` and ``--collective-timeout``, which do not
change what is computed, may be given anew on the resume command line and then
replace the run's), ending with the same weights as an uninterrupted run;
without ``RUN_DIR/backup/latest.backup`` it refuses and changes nothing
(``--if-no-backup new-run``: train afresh in a new run folder beside it).
``python -m pyresnet.runs`` lists the runs.

Data-parallel over MPI ranks (``pip install "pyresnet[distributed]"``)::

    mpirun -n 2 python -m pyresnet.train --distributed --epochs 30

``--distributed`` trains under :class:`pyresnet.distribute.DataParallel`:
``--batch-size`` stays the global batch (each of N ranks trains on a 1/N
slice of it; every rank draws the same shuffled, augmented global batches
from the same seed) and the gradients are averaged over the ranks, so the
learning rate and its schedule are those of one process with that batch: no
rescaling rule is needed.  (To train with a larger global batch instead,
raise ``--batch-size`` and scale ``--lr`` with it, the linear rule of Goyal
et al. 2017, "Accurate, Large Minibatch SGD", section 2.1.)  Only rank 0
prints, creates the run folder and writes in it; a rank that fails ends the
job, and so does a rank that stops answering: a rank that waits more than
``--collective-timeout`` seconds (default 600; 0: forever) in a collective
reports which collective and which ranks it waited for, and ends the job
with status 1.  Each rank runs its kernels on (cores / ranks on its machine) threads;
OMP_NUM_THREADS, when set, gives the number instead.
"""
import argparse
import contextlib
import csv
import datetime
import io
import json
import math
import os
import resource
import sys
import time

import numpy as np

import pyresnet as pr
from pyresnet.applications.regnet import DESIGNS as REGNET_DESIGNS

DEPTHS = {"resnet8": 8, "resnet14": 14, "resnet20": 20, "resnet32": 32, "resnet44": 44,
          "resnet56": 56, "resnet110": 110}
"""The post-activation CIFAR ResNets (He et al. 2015) of ``--model``."""
PREACT_DEPTHS = {f"preact_resnet{d}": d for d in (20, 32, 44, 56, 110)}
"""The pre-activation CIFAR ResNets (He et al. 2016) of ``--model``."""
MODELS = {**{name: (pr.applications.resnet_cifar, d) for name, d in DEPTHS.items()},
          **{name: (pr.applications.preact_resnet_cifar, d) for name, d in PREACT_DEPTHS.items()}}
"""``--model`` name -> (builder, depth)."""
REGNETS = tuple(REGNET_DESIGNS)
"""The 24 RegNets (Radosavovic et al. 2020) of tf.keras 2.x as ``--model`` (``regnetx002`` ...
``regnety320``), built at the data's image size."""

RECIPES = {
    "cifar": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": True,
              "weight_decay": 5e-4, "weight_decay_form": "coupled", "schedule": "cosine",
              "warmup_epochs": 1.0, "label_smoothing": 0.0, "mixup": 0.0, "epochs": 36,
              "shortcut": "projection", "area_factor": None, "pca": None},
    "regnet": {"optimizer": "adamw", "lr": 2e-3, "momentum": 0.9, "nesterov": False,
               "weight_decay": 5e-5, "weight_decay_form": "decoupled", "schedule": "cosine",
               "warmup_epochs": 1.0, "label_smoothing": 0.0, "mixup": 0.2, "epochs": 15,
               "shortcut": "projection", "area_factor": 0.25, "pca": "train"},
    # airbench94 (Jordan 2024): these fields only describe it; the values used are
    # pyresnet.applications.airbench.HYPERPARAMETERS (its own units)
    "airbench94": {"optimizer": "sgd", "lr": 11.5, "momentum": 0.85, "nesterov": True,
                   "weight_decay": 0.0153, "weight_decay_form": "coupled",
                   "schedule": "onecycle", "warmup_epochs": 0.23 * 9.9,
                   "label_smoothing": 0.2, "mixup": 0.0, "epochs": 9.9,
                   "shortcut": "projection", "area_factor": None, "pca": None},
}
"""Each recipe's values of the options left unset (see the module docstring)."""
OPTIMIZER_LR = {"sgd": 0.1, "adam": 2e-3, "adamw": 2e-3, "rmsprop": 1e-3}
"""The --lr default of an optimizer other than the recipe's."""
NO_DECAY = ["gamma", "beta", "bias"]
"""Variable names the regnet recipe excludes from weight decay (batch norm, biases)."""


def build_model(name, num_classes, shortcut=None, input_shape=(32, 32, 3), stem_strides=2):
    """The --model ``name`` for images of ``input_shape``, with logits out
    (``shortcut`` applies to the ResNets, ``stem_strides`` to the RegNets)."""
    if name in REGNETS:
        return pr.applications.regnet(name, input_shape=input_shape, classes=num_classes,
                                      classifier_activation=None, stem_strides=stem_strides)
    builder, depth = MODELS[name]
    return builder(depth, input_shape=input_shape, num_classes=num_classes, shortcut=shortcut)


def build_parser():
    """The command line's ``argparse.ArgumentParser`` (every option, its
    default; None means "the recipe's value")."""
    p = argparse.ArgumentParser(prog="python -m pyresnet.train",
                                description="Train a CIFAR ResNet (He et al. 2015, 4.2) or a RegNet "
                                            "(Radosavovic et al. 2020).")
    p.add_argument("--model", default="resnet20", choices=list(MODELS) + list(REGNETS))
    p.add_argument("--shortcut", default=None, choices=["projection", "zero_pad"],
                   help="where a block changes shape: 1x1 conv + BN (option B, the recipes') "
                        "or the paper's zero-padded identity (option A); ResNets only")
    p.add_argument("--stem-strides", type=int, default=2, choices=[1, 2],
                   help="RegNets only: the stem convolution's stride (2, the paper's and "
                        "Keras's; 1 keeps CIFAR's 32x32 maps through the stem, so the stages "
                        "see 16x16 ... 2x2 as from a 64x64 input)")
    p.add_argument("--dataset", default="cifar10", choices=["cifar10", "cifar100"])
    p.add_argument("--recipe", default="cifar", choices=sorted(RECIPES),
                   help="the defaults of the options below (see the module docstring)")
    p.add_argument("--epochs", type=float, default=None,
                   help="cifar 36, regnet 15, airbench94 9.9 (whole epochs but for airbench94)")
    p.add_argument("--batch-size", type=int, default=None, help="128; airbench94 1024")
    p.add_argument("--optimizer", default=None, choices=["sgd", "adam", "adamw", "rmsprop"],
                   help="cifar: sgd, regnet: adamw")
    p.add_argument("--lr", type=float, default=None,
                   help="peak learning rate (cifar 0.1, regnet 2e-3)")
    p.add_argument("--momentum", type=float, default=None, help="sgd and rmsprop (0.9)")
    p.add_argument("--nesterov", action=argparse.BooleanOptionalAction, default=None,
                   help="Nesterov momentum for sgd (cifar: on)")
    p.add_argument("--weight-decay", type=float, default=None, metavar="WD",
                   help="cifar 5e-4 coupled, regnet 5e-5 decoupled")
    p.add_argument("--weight-decay-form", default=None, choices=["coupled", "decoupled"],
                   help="coupled: L2 term in the gradient (sgd only); decoupled: "
                        "Loshchilov & Hutter's per-step lambda")
    p.add_argument("--schedule", default=None, choices=["cosine", "step", "onecycle"])
    p.add_argument("--warmup-epochs", type=float, default=None,
                   help="linear warmup (cosine: 1, at most 10%% of the epochs; onecycle: 30%%)")
    p.add_argument("--label-smoothing", type=float, default=None, help="in [0, 1] (0)")
    p.add_argument("--mixup", type=float, default=None, metavar="ALPHA",
                   help="mixup with Beta(ALPHA, ALPHA) (cifar 0: off, regnet 0.2)")
    p.add_argument("--area-factor", type=float, default=None,
                   help="regnet: the Inception crop's smallest area fraction (0.25)")
    p.add_argument("--pca", default=None, choices=["train", "imagenet"],
                   help="regnet: PCA lighting from the training set or ImageNet's (train)")
    p.add_argument("--subset", type=int, default=None, metavar="N",
                   help="train on the first N training images (see --test-subset for the test images)")
    p.add_argument("--test-subset", type=int, default=None, metavar="N",
                   help="evaluate on the first N test images (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--validation-freq", type=int, default=1, metavar="N",
                   help="evaluate the test set after every N-th epoch (Keras's "
                        "validation_freq; default 1); the final accuracy is measured anyway")
    p.add_argument("--data", default=None,
                   help="folder holding cifar-10-batches-py/ or cifar-100-python/ "
                        "(default: $PYRESNET_DATA, then ~/.pyresnet/datasets, else download)")
    p.add_argument("--no-augment", action="store_true",
                   help="train without augmentation (and without mixup)")
    p.add_argument("--run-eagerly", action="store_true", help="do not compile the steps")
    p.add_argument("--jit-compile", action="store_true", help="compile with fusion and tuning")
    p.add_argument("--mixed-precision", action="store_true",
                   help="Keras's mixed_bfloat16 policy: float32 weights, convolutions and "
                        "matmuls in bfloat16 (AMX / AVX512_BF16 where the CPU has them)")
    p.add_argument("--verbose", default=None, choices=["auto", "0", "1", "2"],
                   help="the progress bar during each epoch, on a terminal: auto (the default) "
                        "or 1 draws it, 0 or 2 do not; each epoch's line is printed anyway "
                        "(with --resume: the run's setting unless given)")
    p.add_argument("--log-dir", default="runs", metavar="DIR",
                   help="parent folder of the run folders (default: ./runs)")
    p.add_argument("--distributed", action="store_true",
                   help="data-parallel over the ranks of mpirun (the batch size stays global)")
    p.add_argument("--collective-timeout", type=float, default=None, metavar="SECONDS",
                   help="with --distributed: seconds a rank waits for the others in a "
                        "collective before it reports them and ends the job (default 600; "
                        "0: forever)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue the killed run in RUN_DIR from its backup, with the options "
                        "of its config.json; of those, only --data, --verbose and "
                        "--collective-timeout may be given anew (they then replace the run's)")
    p.add_argument("--if-no-backup", default="refuse", choices=("refuse", "new-run"),
                   help="with --resume, when RUN_DIR has no backup/latest.backup: refuse "
                        "(default; the run's files are left as they are) or start a new run "
                        "folder beside it with the run's options")
    return p


# options that do not change what is computed: a resumed run may give them anew
RUNTIME_OPTIONS = ("data", "verbose", "log_dir", "resume", "if_no_backup",
                   "collective_timeout")
# of those, the ones a resumed run takes from the run's config.json when they are not given
# anew (their parser default is None: "not given"), as it takes every other option: resuming
# runs the run's command again, as rerunning a Lightning script with ckpt_path= would
RESTORED_RUNTIME_OPTIONS = ("data", "verbose", "collective_timeout")
# the options of runs made before the recipes, for resuming them
LEGACY = {"recipe": "cifar", "shortcut": "zero_pad", "optimizer": "sgd", "nesterov": False,
          "weight_decay_form": "decoupled", "schedule": "step", "warmup_epochs": 0.0,
          "label_smoothing": 0.0, "mixup": 0.0, "area_factor": None, "pca": None,
          "stem_strides": 2, "validation_freq": 1}


def resolve_recipe(args, error):
    """Fill the options left None with the recipe's values and check them
    together; ``error(message)`` reports a bad combination (it raises)."""
    recipe = dict(RECIPES[args.recipe])
    if args.stem_strides != 2 and (args.model not in REGNETS or args.recipe == "airbench94"):
        error(f"--stem-strides applies to the RegNets, not --model "
              f"{'airbench94' if args.recipe == 'airbench94' else args.model}")
    if args.validation_freq < 1:
        error(f"--validation-freq must be >= 1, got {args.validation_freq}")
    if args.batch_size is None:
        args.batch_size = 1024 if args.recipe == "airbench94" else 128
    if args.recipe == "airbench94":
        fixed = [name for name in ("optimizer", "lr", "momentum", "nesterov", "weight_decay",
                                   "weight_decay_form", "schedule", "warmup_epochs",
                                   "label_smoothing", "mixup", "shortcut", "area_factor", "pca")
                 if getattr(args, name) is not None]
        if fixed:
            error(f"--recipe airbench94 uses the paper's hyper-parameters "
                  f"(pyresnet.applications.airbench.HYPERPARAMETERS); drop "
                  f"{', '.join('--' + n.replace('_', '-') for n in fixed)}")
        for key, value in recipe.items():
            setattr(args, key, value if key != "epochs" or args.epochs is None else args.epochs)
        args.model = "airbench94"
        return args
    if args.epochs is not None:
        if args.epochs != int(args.epochs):
            error(f"--epochs must be a whole number for --recipe {args.recipe}, got "
                  f"{args.epochs:g}")
        args.epochs = int(args.epochs)
    if args.optimizer is not None and args.optimizer != recipe["optimizer"]:
        # another optimizer than the recipe's: its own usual rate, decoupled decay
        recipe.update(lr=OPTIMIZER_LR[args.optimizer], weight_decay_form="coupled"
                      if args.optimizer == "sgd" else "decoupled")
    for key, value in recipe.items():
        if getattr(args, key) is None and key != "warmup_epochs":
            setattr(args, key, value)
    if args.warmup_epochs is None:  # at most 10% of a short run; onecycle: 30% (PyTorch's)
        args.warmup_epochs = {"cosine": min(recipe["warmup_epochs"], 0.1 * args.epochs),
                              "step": 0.0, "onecycle": 0.3 * args.epochs}[args.schedule]
    if args.recipe != "regnet" and (args.area_factor is not None or args.pca is not None):
        error("--area-factor and --pca belong to --recipe regnet")
    if not args.lr > 0:
        error(f"--lr must be > 0, got {args.lr}")
    checks = [("momentum", 0 <= args.momentum <= 1, "in [0, 1]"),
              ("weight_decay", args.weight_decay >= 0, ">= 0"),
              ("label_smoothing", 0 <= args.label_smoothing <= 1, "in [0, 1]"),
              ("mixup", args.mixup >= 0, ">= 0"),
              ("warmup_epochs", 0 <= args.warmup_epochs < args.epochs,
               f"in [0, --epochs = {args.epochs})")]
    if args.area_factor is not None:
        checks.append(("area_factor", 0 < args.area_factor <= 1, "in (0, 1]"))
    for name, ok, what in checks:
        if not ok:
            error(f"--{name.replace('_', '-')} must be {what}, got {getattr(args, name)}")
    if args.schedule == "step" and args.warmup_epochs:
        error("--warmup-epochs applies to --schedule cosine and onecycle")
    if args.weight_decay_form == "coupled" and args.weight_decay and args.optimizer != "sgd":
        error(f"--weight-decay-form coupled is offered for sgd only (Keras's {args.optimizer} "
              "decays decoupled, and a coupled L2 term through its adaptive step has no "
              "decoupled equivalent); use --weight-decay-form decoupled")
    return args


def parse_args(argv=None):
    """Parse and check ``argv`` (default ``sys.argv[1:]``), filling the
    options left unset from ``--recipe``.

    Returns:
        argparse.Namespace of the options.
    Raises:
        SystemExit: status 2 with a message naming the option, for an unknown
            option or a value out of range (``--epochs 0``, ``--lr -1``, ...).
    """
    p = build_parser()
    args = p.parse_args(argv)
    if args.epochs is not None and not args.epochs > 0:
        p.error(f"--epochs must be >= 1, got {args.epochs:g} (with --recipe airbench94: a "
                f"number > 0)")
    for name in ("batch_size",):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("subset", "test_subset"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.data is not None and not os.path.isdir(os.path.expanduser(args.data)):
        # (the loaders would go on to $PYRESNET_DATA and the cache: a typo must not)
        p.error(f"--data {args.data}: no such directory")
    if args.collective_timeout is not None and not 0 <= args.collective_timeout <= 1e9:
        p.error(f"--collective-timeout must be seconds in [0, 1e9] (0: none), got "
                f"{args.collective_timeout}")
    if args.if_no_backup != "refuse" and args.resume is None:
        p.error("--if-no-backup goes with --resume RUN_DIR")
    if args.resume is not None:
        given = [a for a in vars(args) if a not in RUNTIME_OPTIONS
                 and getattr(args, a) != p.get_default(a)]
        if given:
            p.error(f"--resume takes the run's options from its config.json; drop "
                    f"{', '.join('--' + a.replace('_', '-') for a in given)}")
        return args  # (verbose stays None until _resumed_args has read the run's)
    if args.verbose is None:
        args.verbose = "auto"
    return resolve_recipe(args, p.error)


def _ranks(strategy):
    return "" if strategy is None else f" per rank, {strategy.num_replicas} ranks"


def make_schedule(args, steps_per_epoch):
    """The learning-rate schedule of ``--schedule`` over the whole run."""
    total = steps_per_epoch * args.epochs
    warmup = int(round(args.warmup_epochs * steps_per_epoch))
    schedules = pr.optimizers.schedules
    if args.schedule == "step":  # He et al. 2015: / 10 at 50% and 75% of the steps
        return schedules.PiecewiseConstantDecay(
            [total // 2 - 1, (3 * total) // 4 - 1], [args.lr, args.lr / 10, args.lr / 100])
    if args.schedule == "onecycle":
        return schedules.OneCycle(args.lr, total, warmup_steps=warmup,
                                  initial_learning_rate=args.lr / 25)
    if warmup:
        return schedules.CosineDecay(0.0, total - warmup, warmup_target=args.lr,
                                     warmup_steps=warmup)
    return schedules.CosineDecay(args.lr, total)


def keras_weight_decay(args):
    """The Keras ``weight_decay`` argument of ``--weight-decay`` in its form
    (see the module docstring), or None."""
    if not args.weight_decay:
        return None
    if args.weight_decay_form == "coupled":
        return args.weight_decay / (1.0 - args.momentum) if args.momentum < 1 else None
    return args.weight_decay / args.lr


def make_optimizer(args, steps_per_epoch):
    """The optimizer of ``--optimizer`` with the schedule and weight decay."""
    lr, wd = make_schedule(args, steps_per_epoch), keras_weight_decay(args)
    if args.optimizer == "sgd":
        opt = pr.optimizers.SGD(lr, momentum=args.momentum, nesterov=args.nesterov,
                                weight_decay=wd)
    elif args.optimizer == "rmsprop":
        opt = pr.optimizers.RMSprop(lr, momentum=args.momentum, weight_decay=wd)
    elif args.optimizer == "adamw":
        opt = pr.optimizers.AdamW(lr, weight_decay=wd or 0.0)
    else:
        opt = pr.optimizers.Adam(lr, weight_decay=wd)
    if args.recipe == "regnet":
        opt.exclude_from_weight_decay(var_names=NO_DECAY)
    return opt


def describe(args):
    """One line naming the recipe's choices (printed at the start)."""
    if args.recipe == "airbench94":
        return ("recipe airbench94 (Jordan 2024): SGD nesterov 0.85, lr 11.5 / wd 0.0153 per "
                "1024 (Keras lr 1.5, L2 coupled), 64x lr for BN biases, triangular schedule, "
                "Lookahead every 5 steps, label smoothing 0.2, alternating flip + 2-pixel mirror "
                "translation, TTA at the end")
    wd = "no weight decay" if not args.weight_decay else (
        f"weight decay {args.weight_decay:g} {args.weight_decay_form} (Keras weight_decay "
        f"{keras_weight_decay(args):.4g})")
    nesterov = " nesterov" if args.nesterov and args.optimizer == "sgd" else ""
    mom = f", momentum {args.momentum:g}{nesterov}" if args.optimizer in ("sgd", "rmsprop") \
        else ""
    extra = "".join([f", label smoothing {args.label_smoothing:g}" if args.label_smoothing
                     else "", f", mixup {args.mixup:g}" if args.mixup and not args.no_augment
                     else "", f", crop area [{args.area_factor:g}, 1], PCA {args.pca}"
                     if args.recipe == "regnet" else "",
                     f", stem stride {args.stem_strides}" if args.stem_strides != 2 else ""])
    return (f"recipe {args.recipe}: {args.optimizer} lr {args.lr:g}{mom}, {wd}, {args.schedule} "
            f"schedule, warmup {args.warmup_epochs:g} epochs, {args.shortcut} shortcuts{extra}")


def airbench_datasets(x_train, y_train, batch_size, seed):
    """airbench94's training batches (Jordan 2024, arXiv 2404.00498, section
    3): shuffled, last partial batch dropped, alternating flip + 2-pixel
    mirror-padded translation, normalised."""
    return pr.data.recipes.cifar_train_dataset(x_train, y_train, batch_size=batch_size,
                                               seed=seed, drop_remainder=True, flip="alternate",
                                               translate=2, fill_mode="mirror")


def _run_folder(args):
    """A new run folder ``<log_dir>/<YYYYmmdd-HHMMSS>_<model>_<dataset>[-k]``."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(args.log_dir, f"{stamp}_{args.model}_{args.dataset}")
    folder, k = base, 1
    while True:
        try:
            os.makedirs(folder)
            return folder
        except FileExistsError:
            folder, k = f"{base}-{k}", k + 1


def _resumed_args(args):
    """``args`` with the options saved in ``args.resume``/config.json: all
    of them but ``RUNTIME_OPTIONS``, and of those the
    ``RESTORED_RUNTIME_OPTIONS`` (``--data``, ``--verbose``,
    ``--collective-timeout``) that the resume command line does not give.

    Raises:
        FileNotFoundError: when RUN_DIR has no config.json, or when the
            run's ``--data`` folder (not given anew) is gone.
        ValueError: naming the file, when config.json is not JSON or holds
            no ``"options"`` object.
    """
    path = os.path.join(args.resume, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--resume {args.resume}: no run there ({path} is missing)")
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"--resume {args.resume}: {path} is not valid JSON ({e})") from None
    saved = saved.get("options") if isinstance(saved, dict) else None
    if not isinstance(saved, dict):
        raise ValueError(f"--resume {args.resume}: {path} holds no \"options\" object (the "
                         "options of the run); it was not written by python -m pyresnet.train")
    if "recipe" not in saved:  # a run from before the recipes: its decay was Keras's argument
        saved["weight_decay"] = saved.get("weight_decay", 1e-3) * saved.get("lr", 0.1)
    for key, value in {**LEGACY, **saved}.items():
        if key not in RUNTIME_OPTIONS or (key in RESTORED_RUNTIME_OPTIONS
                                          and getattr(args, key) is None):
            setattr(args, key, value)
    if args.verbose is None:
        args.verbose = "auto"
    if args.data is not None and not os.path.isdir(os.path.expanduser(args.data)):
        raise FileNotFoundError(f"--resume {args.resume}: the run's --data {args.data} is no "
                                "longer a directory; give the data's folder with --data")
    return args


def main(argv=None):
    """Train as ``argv`` says (see the module docstring); print one line per
    epoch and the final line.  Returns 0; raises on failure (:func:`cli`
    turns that into a message and a non-zero exit status)."""
    from .utils.atomic import write_text  # noqa: PLC0415
    args = parse_args(argv)
    t_start = time.perf_counter()
    if args.resume is not None:  # the run's options, --distributed among them, first
        args = _resumed_args(args)
    if args.distributed:
        pr.distribute.init(collective_timeout=args.collective_timeout)
    strategy = pr.distribute.DataParallel() if args.distributed else None
    rank = strategy.rank if strategy is not None else 0
    if strategy is not None:
        threads = os.environ.get("OMP_NUM_THREADS")
        pr.set_num_threads(int(threads) if threads else
                           max(1, (os.cpu_count() or 1) // pr.distribute.local_size()))
    run_dir = None
    if args.resume is not None:
        backup = os.path.join(args.resume, "backup", pr.callbacks.BackupAndRestore.FILE)
        if os.path.isfile(backup):
            run_dir = args.resume
        elif args.if_no_backup == "new-run":  # beside the run it was asked to resume
            args.log_dir = os.path.dirname(os.path.abspath(args.resume))
        else:
            raise FileNotFoundError(
                f"--resume {args.resume}: no backup to resume from ({backup} is missing); "
                "starting again there would overwrite the run's metrics.csv and best.keras, "
                "so nothing was changed.  Put the backup back, or add --if-no-backup new-run "
                "to train afresh in a new run folder with this run's options")
    pr.utils.set_random_seed(args.seed)
    loader = pr.datasets.cifar10 if args.dataset == "cifar10" else pr.datasets.cifar100
    (x_train, y_train), (x_test, y_test) = loader.load_data(path=args.data)
    if args.subset is not None:
        x_train, y_train = x_train[:args.subset], y_train[:args.subset]
    if args.test_subset is not None:
        x_test, y_test = x_test[:args.test_subset], y_test[:args.test_subset]
    num_classes = 10 if args.dataset == "cifar10" else 100
    if run_dir is None and rank == 0:
        run_dir = _run_folder(args)
        options = {k: v for k, v in vars(args).items() if k not in ("resume",)}
        config = {"options": options, "seed": args.seed, "pyresnet_version": pr.__version__,
                  "cpu": pr.config.config()["cpu"], "threads": pr.get_num_threads(),
                  "started": datetime.datetime.now().isoformat(timespec="seconds"),
                  "train_images": len(x_train), "test_images": len(x_test),
                  "command": "python -m pyresnet.train " + " ".join(argv if argv is not None
                                                                    else sys.argv[1:])}
        write_text(os.path.join(run_dir, "config.json"), json.dumps(config, indent=1) + "\n")
    if strategy is not None:
        run_dir = pr.distribute._bcast_object(run_dir)
    say = print if rank == 0 else (lambda *a, **k: None)
    def count(n, noun):
        return f"{n} {noun}" + ("s" if n != 1 else "")
    say(pr.config.kernel_notice(), flush=True)  # no silent slow path: the first line
    say(f"{args.dataset}: {len(x_train)} training, {len(x_test)} test images; "
          f"{args.model}, batch {args.batch_size}, {count(args.epochs, 'epoch')}, "
          f"{count(pr.get_num_threads(), 'thread')}{_ranks(strategy)}; run folder {run_dir}",
          flush=True)
    say(describe(args), flush=True)

    mixup = args.mixup if not args.no_augment else 0.0
    recipes = pr.data.recipes
    airbench = args.recipe == "airbench94"
    if airbench and not args.no_augment:
        train = airbench_datasets(x_train, y_train, args.batch_size, args.seed)
    elif airbench:
        train = recipes.cifar_train_dataset(x_train, y_train, batch_size=args.batch_size,
                                            seed=args.seed, augment=False, drop_remainder=True)
    elif args.recipe == "regnet" and not args.no_augment:
        train = recipes.regnet_train_dataset(
            x_train, y_train, num_classes, batch_size=args.batch_size, seed=args.seed,
            mixup_alpha=mixup, area_factor=(args.area_factor, 1.0), pca=args.pca)
    else:
        train = recipes.cifar_train_dataset(x_train, y_train, batch_size=args.batch_size,
                                            seed=args.seed, augment=not args.no_augment,
                                            mixup_alpha=mixup, num_classes=num_classes)
    test = recipes.eval_dataset(x_test, y_test, batch_size=256,
                                num_classes=num_classes if mixup else None)
    before = pr.mixed_precision.global_policy()
    # layers take the global policy when they are made
    pr.mixed_precision.set_global_policy("mixed_bfloat16" if args.mixed_precision else "float32")
    try:
        if airbench:
            n = pr.applications.airbench.HYPERPARAMETERS["whiten_images"]
            mean, std = (np.asarray(v, np.float32) for v in (recipes.CIFAR10_MEAN,
                                                            recipes.CIFAR10_STD))
            whiten = ((x_train[:n] / np.float32(255) - mean) / std).astype(np.float32)
            model = pr.applications.airbench94(tuple(x_train.shape[1:]), num_classes,
                                               whitening_images=whiten)
        else:
            model = build_model(args.model, num_classes, args.shortcut,
                                tuple(x_train.shape[1:]), args.stem_strides)
    finally:
        pr.mixed_precision.set_global_policy(before)
    steps_per_epoch = len(train)
    # mixup's soft labels need the categorical loss; the test labels are one-hot then
    loss = (pr.losses.CategoricalCrossentropy if mixup else
            pr.losses.SparseCategoricalCrossentropy)(from_logits=True,
                                                     label_smoothing=args.label_smoothing)
    extra_callbacks, fit_epochs = [], args.epochs
    if airbench:
        setup = pr.applications.airbench.training_setup(model, steps_per_epoch, args.epochs)
        optimizer, loss = setup["optimizer"], setup["loss"]
        extra_callbacks, fit_epochs = setup["callbacks"], setup["epochs"]
    else:
        optimizer = make_optimizer(args, steps_per_epoch)
    model.compile(optimizer=optimizer, loss=loss,
                  metrics=["accuracy"], run_eagerly=args.run_eagerly,
                  jit_compile=args.jit_compile)
    verbose = args.verbose if args.verbose == "auto" else int(args.verbose)
    metrics = MetricsCSV(os.path.join(run_dir, "metrics.csv"))
    best = BestCheckpoint(os.path.join(run_dir, "best.keras"), metrics)
    # the backup after metrics.csv and best.keras at each epoch's end: a run killed between
    # them resumes at the epoch before and writes its row again (none is lost)
    # EpochLogger prints the one line per epoch; the progress bar is only the live bar on a
    # terminal (erased before the epoch line): with its own summary every epoch showed twice
    callbacks = [pr.callbacks.ProgbarLogger(summary=False),
                 EpochLogger(len(x_train), say), metrics, best,
                 pr.callbacks.BackupAndRestore(os.path.join(run_dir, "backup"),
                                               delete_checkpoint=False),
                 pr.callbacks.TerminateOnNaN()] + extra_callbacks
    if rank != 0:  # the others only check the loss (DataParallel drops the file writers)
        callbacks = [cb for cb in callbacks
                     if isinstance(cb, (EpochLogger, pr.callbacks.TerminateOnNaN))]
    try:
        if rank == 0:
            callbacks.append(pr.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")))
    except ImportError:  # the optional writer (pip install 'pyresnet[tensorboard]') is absent
        pass
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        history = model.fit(train, epochs=fit_epochs, validation_data=test,
                            callbacks=callbacks, verbose=verbose,
                            validation_freq=args.validation_freq)
    if rank == 0:
        model.save(os.path.join(run_dir, "model.keras"))
    last_validated = history.epoch and (history.epoch[-1] + 1) % args.validation_freq == 0
    if not airbench:  # the last epoch's test accuracy (measured now if it was skipped)
        final = history.history["val_accuracy"][-1] if last_validated else \
            model.evaluate(test, verbose=0, return_dict=True)["accuracy"]
    tta_note = ""
    if airbench:  # the final (Lookahead) weights, with test-time augmentation
        tta = pr.models.TestTimeAugmentation(model, flip=True, translate=1)
        tta.compile(loss=loss, metrics=["accuracy"])
        final_logs = model.evaluate(test, verbose=0, return_dict=True)
        tta_logs = tta.evaluate(test, verbose=0, return_dict=True)
        final = tta_logs["accuracy"]
        tta_note = f"(with TTA; {final_logs['accuracy']:.4f} without)  "
        if rank == 0:
            write_text(os.path.join(run_dir, "final.json"), json.dumps(
                {"test_accuracy": final_logs["accuracy"], "test_accuracy_tta": final,
                 "test_loss": final_logs["loss"], "test_loss_tta": tta_logs["loss"],
                 "seconds": time.perf_counter() - t_start}, indent=1) + "\n")
    wall = time.perf_counter() - t_start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    say(f"final test accuracy {final:.4f}  {tta_note}wall time {wall:.1f} s  peak RSS "
        f"{peak:.2f} GiB", flush=True)
    return 0


METRICS_COLUMNS = ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "learning_rate",
                   "images_per_s", "seconds"]


def read_metrics(path):
    """The rows of a run's metrics.csv as dicts of floats (``epoch`` an
    int, 1-based); [] when there is no file.  Raises ValueError naming the
    file when it is not such a table (no ``epoch`` column, a short row, a
    value that is not a number)."""
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows, fields = list(reader), reader.fieldnames or []
    try:
        if "epoch" not in fields:
            raise KeyError("epoch")
        return [{k: int(v) if k == "epoch" else float(v) for k, v in row.items()}
                for row in rows]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path} is not a metrics file of python -m pyresnet.train (expected "
                         f"the columns {METRICS_COLUMNS} with numbers: {type(e).__name__}: "
                         f"{e})") from None


class MetricsCSV(pr.callbacks.Callback):
    """A run's ``metrics.csv``: one row per epoch (``METRICS_COLUMNS``; the
    epoch 1-based), the whole file rewritten atomically after each epoch.
    A resumed run keeps the rows of the epochs before the one it resumes
    at (a row written after the last backup is written again)."""

    def __init__(self, path):
        super().__init__()
        self.path, self.rows = path, None

    def on_train_begin(self, logs=None):
        self.rows = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.rows is None:  # the first epoch: BackupAndRestore has restored the progress
            resumed_at = self.model._fit_progress.epoch
            self.rows = [r for r in read_metrics(self.path) if r["epoch"] <= resumed_at]

    def on_epoch_end(self, epoch, logs=None):
        from .utils.atomic import write_text  # noqa: PLC0415
        row = {"epoch": epoch + 1, **{k: logs.get(k, float("nan")) for k in METRICS_COLUMNS[1:]}}
        self.rows.append(row)
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=METRICS_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        write_text(self.path, out.getvalue())


class BestCheckpoint(pr.callbacks.ModelCheckpoint):
    """``best.keras``: the model of the best test accuracy so far
    (``save_best_only`` on ``val_accuracy``); a resumed run starts from the
    best of the rows ``metrics`` kept."""

    def __init__(self, path, metrics):
        super().__init__(path, monitor="val_accuracy", save_best_only=True)
        self.metrics = metrics

    def on_train_begin(self, logs=None):
        self.started = False

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        if not self.started:  # after metrics.on_epoch_begin read the kept rows
            done = [r["val_accuracy"] for r in self.metrics.rows
                    if math.isfinite(r["val_accuracy"])]
            self.best = max(done) if done else -math.inf
            self.started = True

    def on_epoch_end(self, epoch, logs=None):
        if logs and "val_accuracy" in logs:  # (an epoch --validation-freq skips: no model)
            super().on_epoch_end(epoch, logs)


class EpochLogger(pr.callbacks.Callback):
    """Prints one line per epoch (the optimizer's schedule sets the rate of
    every step inside the compiled step); raises FloatingPointError on a
    non-finite loss."""

    def __init__(self, n_images, say=print):
        super().__init__()
        self.n = n_images
        self.say = say  # print, or nothing (ranks other than 0)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.t0, self.train_time = epoch, time.perf_counter(), None

    def on_test_begin(self, logs=None):
        if self.train_time is None:  # validation starts: the training part is over
            self.train_time = time.perf_counter() - self.t0

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        train_time = self.train_time or time.perf_counter() - self.t0
        if not math.isfinite(logs.get("loss", float("nan"))):
            raise FloatingPointError(f"epoch {epoch + 1}: training loss is {logs.get('loss')}; "
                                     "lower --lr")
        seconds = time.perf_counter() - self.t0
        # for the callbacks after this one (metrics.csv)
        logs.update(learning_rate=float(self.model.optimizer.learning_rate),
                    images_per_s=self.n / train_time, seconds=seconds)
        test = (f"test loss {logs['val_loss']:.4f}  test accuracy "
                f"{logs.get('val_accuracy', float('nan')):.4f}  ") if "val_loss" in logs else ""
        self.say(f"epoch {epoch + 1}: loss {logs['loss']:.4f}  accuracy "
                 f"{logs.get('accuracy', float('nan')):.4f}  {test}"
                 f"{self.n / train_time:.0f} images/s  {seconds:.1f} s", flush=True)


def cli(argv=None):
    """Run :func:`main`; report a failure on stderr and return its exit code."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - any failure is a non-zero exit with its reason
        ranks = pr.distribute.size()
        where = f"rank {pr.distribute.rank()} of {ranks}: " if ranks > 1 else ""
        print(f"{where}error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if ranks > 1:
            pr.distribute.abort(1)  # the other ranks would wait in their next allreduce
        return 1


if __name__ == "__main__":
    sys.exit(cli())
