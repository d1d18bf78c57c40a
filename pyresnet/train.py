"""Train a CIFAR ResNet from the command line: the main job.

    python -m pyresnet.train                      # ResNet-20 on the full CIFAR-10
    python -m pyresnet.train --epochs 1 --model resnet20 --dataset cifar10
    python -m pyresnet.train --subset 2000 --epochs 3 --model resnet8
    python -m pyresnet.train --subset 64 --test-subset 64 --epochs 1   # a smoke test

Recipe (He et al. 2015, "Deep Residual Learning for Image Recognition",
section 4.2): SGD with momentum 0.9, batch 128, learning rate 0.1 divided by
10 at 50% and 75% of the steps (the paper's 32k and 48k of 64k iterations),
4-pixel zero padding + random 32x32 crop + horizontal flip, per-channel
normalisation.  The paper's L2 weight decay of 1e-4 is applied the Keras way
(decoupled, ``w -= lr * wd * w`` per step); with momentum 0.9 the per-step
shrink of the paper's coupled 1e-4 equals a decoupled 1e-3, the default here.

Prints one line per epoch (training loss and accuracy, test loss and
accuracy, training images/s, seconds) and a final line with the test
accuracy, the wall time and the peak resident memory; exits non-zero on
failure (missing data, a non-finite loss, bad arguments).

Each run gets a folder ``<--log-dir>/<YYYYmmdd-HHMMSS>_<model>_<dataset>/``
holding ``config.json`` (every option, the seed, the pyresnet version, the
CPU and thread count), ``metrics.csv`` (a row per epoch, rewritten
atomically), ``backup/latest.backup`` (the whole training state after the
last epoch: :class:`pyresnet.callbacks.BackupAndRestore`), ``best.keras``
(the model of the best test accuracy so far), ``tensorboard/`` (the
scalars of :class:`pyresnet.callbacks.TensorBoard`, when tensorboardX is
installed) and, when training is over, ``model.keras``.  ``--resume RUN_DIR`` continues a killed run from its
backup with the options of its ``config.json``, ending with the same
weights as an uninterrupted run.  ``python -m pyresnet.runs`` lists the runs.

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
job.  Each rank runs its kernels on (cores / ranks on its machine) threads;
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

import pyresnet as pr

DEPTHS = {"resnet8": 8, "resnet14": 14, "resnet20": 20, "resnet32": 32, "resnet44": 44,
          "resnet56": 56, "resnet110": 110}


def build_parser():
    """The command line's ``argparse.ArgumentParser`` (every option, its default)."""
    p = argparse.ArgumentParser(prog="python -m pyresnet.train",
                                description="Train a CIFAR ResNet (He et al. 2015, 4.2).")
    p.add_argument("--model", default="resnet20", choices=sorted(DEPTHS, key=DEPTHS.get))
    p.add_argument("--dataset", default="cifar10", choices=["cifar10", "cifar100"])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1, help="initial learning rate")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-3,
                   help="decoupled (Keras) weight decay; 1e-3 matches the paper's L2 1e-4")
    p.add_argument("--subset", type=int, default=None, metavar="N",
                   help="train on the first N training images (all test images are used)")
    p.add_argument("--test-subset", type=int, default=None, metavar="N",
                   help="evaluate on the first N test images (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=None,
                   help="folder holding cifar-10-batches-py/ or cifar-100-python/ "
                        "(default: $PYRESNET_DATA, then ~/.pyresnet/datasets, else download)")
    p.add_argument("--no-augment", action="store_true", help="train without augmentation")
    p.add_argument("--run-eagerly", action="store_true", help="do not compile the steps")
    p.add_argument("--jit-compile", action="store_true", help="compile with fusion and tuning")
    p.add_argument("--verbose", default="auto", help="fit's progress bar: auto, 0, 1 or 2")
    p.add_argument("--log-dir", default="runs", metavar="DIR",
                   help="parent folder of the run folders (default: ./runs)")
    p.add_argument("--distributed", action="store_true",
                   help="data-parallel over the ranks of mpirun (the batch size stays global)")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue the killed run in RUN_DIR from its backup, with the options "
                        "of its config.json")
    return p


# options that do not change what is computed: a resumed run may give them anew
RUNTIME_OPTIONS = ("data", "verbose", "log_dir", "resume")


def parse_args(argv=None):
    """Parse and check ``argv`` (default ``sys.argv[1:]``).

    Returns:
        argparse.Namespace of the options.
    Raises:
        SystemExit: status 2 with a message naming the option, for an unknown
            option or a value out of range (``--epochs 0``, ``--lr -1``, ...).
    """
    p = build_parser()
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for name in ("subset", "test_subset"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if not args.lr > 0:
        p.error(f"--lr must be > 0, got {args.lr}")
    if args.resume is not None:
        given = [a for a in vars(args) if a not in RUNTIME_OPTIONS
                 and getattr(args, a) != p.get_default(a)]
        if given:
            p.error(f"--resume takes the run's options from its config.json; drop "
                    f"{', '.join('--' + a.replace('_', '-') for a in given)}")
    return args


def _ranks(strategy):
    return "" if strategy is None else f" per rank, {strategy.num_replicas} ranks"


def step_decay(initial, total_steps):
    """He et al. 2015 section 4.2: lr / 10 at 50% and 75% of training."""
    def lr_at(step):
        return initial * (0.1 ** ((step >= total_steps // 2) + (step >= (3 * total_steps) // 4)))
    return lr_at


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
    """``args`` with the options saved in ``args.resume``/config.json.

    Raises:
        FileNotFoundError: when RUN_DIR has no config.json.
    """
    path = os.path.join(args.resume, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--resume {args.resume}: no run there ({path} is missing)")
    with open(path) as f:
        saved = json.load(f)["options"]
    for key, value in saved.items():
        if key not in RUNTIME_OPTIONS:
            setattr(args, key, value)
    return args


def main(argv=None):
    """Train as ``argv`` says (see the module docstring); print one line per
    epoch and the final line.  Returns 0; raises on failure (:func:`cli`
    turns that into a message and a non-zero exit status)."""
    from .utils.atomic import write_text  # noqa: PLC0415
    args = parse_args(argv)
    t_start = time.perf_counter()
    strategy = pr.distribute.DataParallel() if args.distributed else None
    rank = strategy.rank if strategy is not None else 0
    if strategy is not None:
        threads = os.environ.get("OMP_NUM_THREADS")
        pr.set_num_threads(int(threads) if threads else
                           max(1, (os.cpu_count() or 1) // pr.distribute.local_size()))
    if args.resume is not None:
        args = _resumed_args(args)
        run_dir = args.resume
    else:
        run_dir = None
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
    say(f"{args.dataset}: {len(x_train)} training, {len(x_test)} test images; "
          f"{args.model}, batch {args.batch_size}, {args.epochs} epochs, {pr.get_num_threads()} "
          f"threads{_ranks(strategy)}; run folder {run_dir}", flush=True)

    train = pr.data.recipes.cifar_train_dataset(x_train, y_train, batch_size=args.batch_size,
                                                seed=args.seed, augment=not args.no_augment)
    test = pr.data.recipes.eval_dataset(x_test, y_test, batch_size=256)

    model = pr.applications.resnet_cifar(DEPTHS[args.model], num_classes=num_classes)
    optimizer = pr.optimizers.SGD(args.lr, momentum=args.momentum,
                                  weight_decay=args.weight_decay or None)
    model.compile(optimizer=optimizer,
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], run_eagerly=args.run_eagerly,
                  jit_compile=args.jit_compile)
    steps_per_epoch = len(train)
    schedule = step_decay(args.lr, steps_per_epoch * args.epochs)
    verbose = args.verbose if args.verbose == "auto" else int(args.verbose)
    metrics = MetricsCSV(os.path.join(run_dir, "metrics.csv"))
    best = BestCheckpoint(os.path.join(run_dir, "best.keras"), metrics)
    callbacks = [pr.callbacks.BackupAndRestore(os.path.join(run_dir, "backup"),
                                               delete_checkpoint=False),
                 pr.callbacks.ProgbarLogger(),  # closes its bar before the epoch line
                 EpochLogger(schedule, steps_per_epoch, len(x_train), say), metrics, best]
    if rank != 0:  # the others only follow the schedule (DataParallel drops the file writers)
        callbacks = [cb for cb in callbacks if isinstance(cb, EpochLogger)]
    try:
        if rank == 0:
            callbacks.append(pr.callbacks.TensorBoard(os.path.join(run_dir, "tensorboard")))
    except ImportError:  # the optional writer (pip install 'pyresnet[tensorboard]') is absent
        pass
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        history = model.fit(train, epochs=args.epochs, validation_data=test,
                            callbacks=callbacks, verbose=verbose)
    if rank == 0:
        model.save(os.path.join(run_dir, "model.keras"))
    final = history.history["val_accuracy"][-1]
    wall = time.perf_counter() - t_start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    say(f"final test accuracy {final:.4f}  wall time {wall:.1f} s  peak RSS {peak:.2f} GiB",
          flush=True)
    return 0


METRICS_COLUMNS = ["epoch", "loss", "accuracy", "val_loss", "val_accuracy", "learning_rate",
                   "images_per_s", "seconds"]


def read_metrics(path):
    """The rows of a run's metrics.csv as dicts of floats (``epoch`` an
    int, 1-based); [] when there is no file."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return [{k: int(v) if k == "epoch" else float(v) for k, v in row.items()}
                for row in csv.DictReader(f)]


class MetricsCSV(pr.callbacks.Callback):
    """A run's ``metrics.csv``: one row per epoch (``METRICS_COLUMNS``; the
    epoch 1-based), the whole file rewritten atomically after each epoch.
    A resumed run keeps the rows of the epochs before the one it resumes
    at (a row written after the last backup is written again)."""

    def __init__(self, path):
        super().__init__()
        self.path, self.rows = path, []

    def on_train_begin(self, logs=None):
        resumed_at = self.model._fit_progress.epoch  # (after BackupAndRestore restored it)
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
        done = [r["val_accuracy"] for r in self.metrics.rows]
        self.best = max(done) if done else -math.inf


class EpochLogger(pr.callbacks.Callback):
    """Sets the learning rate before every step (``schedule(step)``) and prints
    one line per epoch; raises FloatingPointError on a non-finite loss."""

    def __init__(self, schedule, steps_per_epoch, n_images, say=print):
        super().__init__()
        self.schedule, self.steps, self.n = schedule, steps_per_epoch, n_images
        self.say = say  # print, or nothing (ranks other than 0)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.t0, self.train_time = epoch, time.perf_counter(), None

    def on_train_batch_begin(self, batch, logs=None):
        self.model.optimizer.learning_rate = self.schedule(self.epoch * self.steps + batch)

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
        self.say(f"epoch {epoch + 1}: loss {logs['loss']:.4f}  accuracy "
              f"{logs.get('accuracy', float('nan')):.4f}  test loss "
              f"{logs.get('val_loss', float('nan')):.4f}  test accuracy "
              f"{logs.get('val_accuracy', float('nan')):.4f}  {self.n / train_time:.0f} images/s  "
              f"{seconds:.1f} s", flush=True)


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
