"""Callbacks with Keras's interface (``keras.callbacks``): hooks that
``Model.fit``/``evaluate``/``predict`` call around epochs and batches.

``logs`` dicts map metric names (``loss``, ``accuracy``, ``val_loss``, ...)
to Python floats: in batch hooks the running mean over the epoch so far,
in ``on_epoch_end`` the epoch's mean (means are over samples).

Besides the base class, :class:`History` and :class:`ProgbarLogger`,
Keras's standard callbacks: :class:`ModelCheckpoint`, :class:`EarlyStopping`,
:class:`CSVLogger`, :class:`TerminateOnNaN`, :class:`LambdaCallback`,
:class:`LearningRateScheduler`, :class:`BackupAndRestore` and
:class:`TensorBoard`.  A callback that sets
``model.stop_training`` ends ``fit`` after the current batch (the epoch's
validation and ``on_epoch_end`` still run), as in Keras.
"""
import csv
import io
import json
import math
import os
import struct
import sys
import time
import warnings
import zipfile
import zlib

import numpy as np
from tqdm import tqdm

from .utils.atomic import write_text


class Callback:
    """Base class: override the hooks you need (all do nothing by default).

    Attributes:
        model: the Model being trained (set by ``fit``).
        params (dict): ``epochs`` (fit only), ``steps`` (batches per epoch or
            run), ``samples`` and ``batch_size`` (None for a dataset),
            ``verbose``, and ``samples_seen``: the samples processed so far in
            the current epoch or run (the loop updates it before each
            ``on_*_batch_end``).
    """

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        """Called by the loop with the Model before training."""
        self.model = model

    def set_params(self, params):
        """Called by the loop with the run's ``params`` dict."""
        self.params = params

    def on_train_begin(self, logs=None):
        """Called once before the first epoch of ``fit``."""

    def on_train_end(self, logs=None):
        """Called once after the last epoch, with the last epoch's logs."""

    def on_epoch_begin(self, epoch, logs=None):
        """Called before each epoch (``epoch`` counts from 0)."""

    def on_epoch_end(self, epoch, logs=None):
        """Called after each epoch with its logs (validation ones prefixed ``val_``)."""

    def on_train_batch_begin(self, batch, logs=None):
        """Called before each training step (``batch`` counts from 0 per epoch)."""

    def on_train_batch_end(self, batch, logs=None):
        """Called after each training step with the running epoch means."""

    def on_test_begin(self, logs=None):
        """Called before ``evaluate`` runs."""

    def on_test_end(self, logs=None):
        """Called after ``evaluate`` with its logs."""

    def on_test_batch_begin(self, batch, logs=None):
        """Called before each evaluation step."""

    def on_test_batch_end(self, batch, logs=None):
        """Called after each evaluation step with the running means."""

    def on_predict_begin(self, logs=None):
        """Called before ``predict`` runs."""

    def on_predict_end(self, logs=None):
        """Called after ``predict``."""

    def on_predict_batch_begin(self, batch, logs=None):
        """Called before each prediction step."""

    def on_predict_batch_end(self, batch, logs=None):
        """Called after each prediction step; ``logs["outputs"]`` holds the
        step's outputs (NumPy arrays, nested as the model's outputs), as Keras."""


class History(Callback):
    """Records the epoch logs; ``fit`` returns it (and sets ``model.history``).

    Attributes:
        epoch (list): the epoch indices run.
        history (dict): metric name -> list of per-epoch values, e.g.
            ``{"loss": [...], "accuracy": [...], "val_loss": [...]}``.
    """

    def __init__(self):
        super().__init__()
        self.epoch = []
        self.history = {}

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(value)


def _format(logs):
    return " - ".join(f"{k}: {v:.4f}" for k, v in (logs or {}).items())


def _interactive(stream):
    """Whether a progress bar redrawn in place suits ``stream``: a terminal
    (``isatty()``) or a Jupyter kernel's output.  A log file, a pipe, ``nohup``
    or CI get no carriage-return updates, as Keras's ``Progbar`` (its
    ``_dynamic_display``) prints only each run's final line there."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return "ipykernel" in sys.modules and type(stream).__module__.startswith("ipykernel")


class ProgbarLogger(Callback):
    """Progress output, as Keras's ``ProgbarLogger`` but drawn with tqdm (on
    stdout).  ``verbose=1``: a bar per epoch (or per evaluate/predict run)
    showing the running loss and metrics, the time per step (ms/step:
    wall-clock time since the epoch began over the steps done) and the
    throughput (images/s, from ``params["samples_seen"]``); at the end of an
    epoch the validation values are added (the validation run inside ``fit``
    draws no bar of its own, as Keras).  ``verbose=2``: one such line per
    epoch, no bar; so is ``verbose=1`` when stdout is not a terminal (nor a
    Jupyter kernel): a log file, a pipe, ``nohup`` or CI get each epoch's
    final line only, as Keras's progress bar does there.  ``fit``,
    ``evaluate`` and ``predict`` add it when ``verbose`` is not 0.

    Args:
        summary (bool): keep each epoch's (or run's) final values: the
            finished bar on a terminal, the line elsewhere (default, as
            Keras).  ``False``: only the live bar, on a terminal, erased when
            the epoch ends, and no line when stdout is not a terminal: for a
            caller that prints its own line per epoch, which would otherwise
            show every epoch twice (``python -m pyresnet.train`` does this).
    """

    def __init__(self, summary=True):
        super().__init__()
        self.summary = bool(summary)
        self._bar = None
        self._start = None
        self._rate = ""
        self._done = self._seen = 0
        self._in_fit = False

    def _open(self, desc, done=0, seen=0):
        self._start = time.perf_counter()
        self._rate = ""
        self._done, self._seen = done, seen  # before (a resumed epoch: BackupAndRestore)
        if self.params.get("verbose") == 1 and _interactive(sys.stdout):
            self._bar = tqdm(total=self.params["steps"], desc=desc, unit="step", file=sys.stdout,
                             dynamic_ncols=True, leave=self.summary, initial=done)

    def _progress(self, batch, logs):
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        self._rate = (f"{1000 * elapsed / max(batch + 1 - self._done, 1):.0f}ms/step - "
                      f"{(self.params.get('samples_seen', 0) - self._seen) / elapsed:.0f} img/s")
        if self._bar is not None:
            text = " - ".join(s for s in (_format(logs), self._rate) if s)
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(1)

    def _close(self, logs, title):
        text = " - ".join(s for s in (self._rate, _format(logs)) if s)
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.close()
            self._bar = None
        elif self.summary and self.params.get("verbose") in (1, 2):  # 1 on a log file: as 2
            print(f"{title} - {text}", file=sys.stdout, flush=True)

    def _epoch_title(self, epoch):
        return f"Epoch {epoch + 1}/{self.params['epochs']}"

    def on_train_begin(self, logs=None):
        self._in_fit = True

    def on_train_end(self, logs=None):
        self._in_fit = False

    def on_epoch_begin(self, epoch, logs=None):
        progress = getattr(self.model, "_fit_progress", None)
        if progress is None:
            self._open(self._epoch_title(epoch))
        else:
            self._open(self._epoch_title(epoch), progress.batch + 1, progress.seen)

    def on_train_batch_end(self, batch, logs=None):
        self._progress(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._close(logs, self._epoch_title(epoch))

    def on_test_begin(self, logs=None):
        if not self._in_fit:
            self._open("Evaluate")

    def on_test_batch_end(self, batch, logs=None):
        if not self._in_fit:
            self._progress(batch, logs)

    def on_test_end(self, logs=None):
        if not self._in_fit:
            self._close(logs, "Evaluate")

    def on_predict_begin(self, logs=None):
        self._open("Predict")

    def on_predict_batch_end(self, batch, logs=None):
        self._progress(batch, None)

    def on_predict_end(self, logs=None):
        self._close(None, "Predict")


class CallbackList:
    """The callbacks of one fit/evaluate/predict run, called in order:
    ``callback_list.on_epoch_end(epoch, logs)`` calls every callback's hook,
    with ``logs={}`` when the loop passes none (Keras never passes None).

    Args:
        callbacks: a list of Callback (or None).
        model: the Model.
        params (dict): see :class:`Callback`.
        add_history (bool): append a :class:`History` (kept as ``history``).
        add_progbar (bool): append a :class:`ProgbarLogger` unless
            ``callbacks`` holds one (as Keras: put it before a callback
            that prints at an epoch's end, so the bar is closed first).
    Raises:
        TypeError: for an item that is not a Callback.
    """

    def __init__(self, callbacks, model, params, add_history=False, add_progbar=False):
        self.callbacks = list(callbacks or [])
        for cb in self.callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks must be Callback instances, got {type(cb).__name__}")
        self.history = History() if add_history else None
        if add_history:
            self.callbacks.append(self.history)
        if add_progbar and not any(isinstance(cb, ProgbarLogger) for cb in self.callbacks):
            self.callbacks.append(ProgbarLogger())
        for cb in self.callbacks:
            cb.set_model(model)
            cb.set_params(params)

    def set_samples_seen(self, n):
        """Publish the samples processed so far (``params["samples_seen"]``)."""
        for cb in self.callbacks:
            cb.params["samples_seen"] = n

    def __getattr__(self, hook):
        if not hook.startswith("on_"):
            raise AttributeError(hook)
        indexed = hook.startswith("on_epoch_") or "_batch_" in hook  # (index, logs) hooks

        def dispatch(*args, logs=None):
            # As Keras's CallbackList: a hook always gets a dict (``{}`` when the loop has
            # no logs), the same dict for every callback, so one may add a key for the next.
            if len(args) > indexed:
                args, logs = args[:indexed], args[indexed]
            logs = {} if logs is None else logs
            for cb in self.callbacks:
                getattr(cb, hook)(*args, logs)

        return dispatch


# ---- Keras's standard callbacks -------------------------------------------------------------

def _monitor_op(name, mode, monitor):
    """(np.less or np.greater) for ``mode``; ``"auto"`` is Keras's rule:
    maximise when ``"acc"`` is in the monitored name (or it starts with
    ``"fmeasure"``), else minimise."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"{name}: mode must be 'auto', 'min' or 'max', got {mode!r}")
    if mode == "max" or (mode == "auto" and ("acc" in monitor or monitor.startswith("fmeasure"))):
        return np.greater
    return np.less


class ModelCheckpoint(Callback):
    """Save the model (or its weights) during ``fit``, as
    ``keras.callbacks.ModelCheckpoint``.

    Args:
        filepath (str): where to save; may hold ``str.format`` fields filled
            with ``epoch`` (1-based), ``batch`` (1-based, with an int
            ``save_freq``) and the logs, e.g. ``"ckpt-{epoch:02d}-{val_accuracy:.3f}.keras"``.
            Must end with ``.keras``, or ``.weights.npz`` with
            ``save_weights_only`` (Keras: ``.weights.h5``).
        monitor (str): the logs key compared with ``save_best_only``.
        verbose (int): 1 prints a line per save decision.
        save_best_only (bool): save only when ``monitor`` improved on the
            best value so far (a missing key warns and skips the save).
        save_weights_only (bool): ``model.save_weights`` instead of ``model.save``.
        mode (str): ``"auto"``, ``"min"`` or ``"max"`` (see Keras; auto
            maximises names containing ``"acc"``).
        save_freq: ``"epoch"`` (at each epoch's end) or an int: every that
            many training batches (counted across epochs).
        initial_value_threshold (float): the best value to beat at first.
    Every file is written atomically (a temporary file renamed), so an
    interrupted save keeps the previous checkpoint.
    Raises:
        ValueError: for a wrong suffix, mode or save_freq.
    """

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False,
                 save_weights_only=False, mode="auto", save_freq="epoch",
                 initial_value_threshold=None):
        super().__init__()
        self.filepath = os.fspath(filepath)
        self.monitor = monitor
        self.verbose = verbose
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.save_freq = save_freq
        suffix = ".weights.npz" if save_weights_only else ".keras"
        if not self.filepath.endswith(suffix):
            raise ValueError(f"ModelCheckpoint: with save_weights_only={save_weights_only} the "
                             f"filepath must end with {suffix!r}, got {self.filepath!r}")
        if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0
                                         and not isinstance(save_freq, bool)):
            raise ValueError(f"ModelCheckpoint: save_freq must be 'epoch' or a positive int, got "
                             f"{save_freq!r}")
        self.monitor_op = _monitor_op("ModelCheckpoint", mode, monitor)
        self.best = initial_value_threshold if initial_value_threshold is not None else (
            np.inf if self.monitor_op is np.less else -np.inf)
        self._current_epoch = 0
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = -1

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        added = batch + 1 if batch <= self._last_batch_seen else batch - self._last_batch_seen
        self._batches_seen_since_last_saving += added
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            self._save_model(self._current_epoch, batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.save_freq == "epoch":
            self._save_model(epoch, None, logs)

    def _file_path(self, epoch, batch, logs):
        try:
            if batch is None or "batch" in logs:
                return self.filepath.format(epoch=epoch + 1, **logs)
            return self.filepath.format(epoch=epoch + 1, batch=batch + 1, **logs)
        except KeyError as e:
            raise KeyError(f'Failed to format this callback filepath: "{self.filepath}". '
                           f"Reason: {e} is not in the logs {sorted(logs)}") from None

    def _save_model(self, epoch, batch, logs):
        logs = dict(logs or {})
        filepath = self._file_path(epoch, batch, logs)
        folder = os.path.dirname(filepath)
        if folder:
            os.makedirs(folder, exist_ok=True)
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None:
                warnings.warn(f"Can save best model only with {self.monitor} available, "
                              "skipping.", stacklevel=2)
                return
            if not self.monitor_op(current, self.best):
                if self.verbose > 0:
                    print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from "
                          f"{self.best:.5f}")
                return
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: {self.monitor} improved from {self.best:.5f} to "
                      f"{current:.5f}, saving model to {filepath}")
            self.best = current
        elif self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: saving model to {filepath}")
        if self.save_weights_only:
            self.model.save_weights(filepath, overwrite=True)
        else:
            self.model.save(filepath, overwrite=True)


class EarlyStopping(Callback):
    """Stop training when a monitored value has stopped improving, as
    ``keras.callbacks.EarlyStopping``.

    After each epoch (from ``start_from_epoch`` on) the value counts as an
    improvement when it beats the best so far by more than ``min_delta``;
    after ``patience`` epochs without one, ``model.stop_training`` is set
    (never after the first epoch run).  With ``baseline``, an improvement
    resets the wait only when it also beats the baseline.

    Args:
        monitor (str): logs key, default ``"val_loss"``.
        min_delta (float): minimum change that counts (its absolute value).
        patience (int): epochs without improvement before stopping.
        verbose (int): 1 prints when it stops and restores.
        mode (str): ``"auto"``, ``"min"``, ``"max"`` (as :class:`ModelCheckpoint`).
        baseline (float): a value the monitor must beat.
        restore_best_weights (bool): at the end of training set the weights
            of the best epoch (kept in memory).
        start_from_epoch (int): epochs to wait before monitoring.
    Attributes:
        stopped_epoch (int): the epoch at which training stopped (0 if not).
        best, best_epoch, wait: the state of the rule.
    """

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto",
                 baseline=None, restore_best_weights=False, start_from_epoch=0):
        super().__init__()
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.restore_best_weights = restore_best_weights
        self.start_from_epoch = start_from_epoch
        self.monitor_op = _monitor_op("EarlyStopping", mode, monitor)
        self.min_delta = abs(min_delta) * (-1 if self.monitor_op is np.less else 1)
        self.wait = 0
        self.stopped_epoch = 0
        self.best = None
        self.best_weights = None
        self.best_epoch = 0

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = np.inf if self.monitor_op is np.less else -np.inf
        self.best_weights = None
        self.best_epoch = 0

    def _is_improvement(self, value, reference):
        return reference is None or bool(self.monitor_op(value - self.min_delta, reference))

    def on_epoch_end(self, epoch, logs=None):
        current = (logs or {}).get(self.monitor)
        if current is None:
            warnings.warn(f"Early stopping conditioned on metric `{self.monitor}` which is not "
                          f"available. Available metrics are: {','.join(logs or {})}",
                          stacklevel=2)
            return
        if epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                print(f"Restoring model weights from the end of the best epoch: "
                      f"{self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)


class CSVLogger(Callback):
    """Write each epoch's logs as a CSV row, as ``keras.callbacks.CSVLogger``:
    columns ``epoch`` (0-based) and the logs' keys sorted (when the first
    epoch has no ``val_`` keys, ``val_<key>`` columns are added for every
    key, holding ``NA``, as Keras does); a header row unless appending to a
    non-empty file.

    The whole file is rewritten atomically after every epoch (the previous
    content plus the new row, to a temporary file renamed into place), so an
    interrupted run never leaves a half-written row.

    Args:
        filename (str): the CSV file.
        separator (str): the field delimiter.
        append (bool): keep an existing file's rows and add to them.
    """

    def __init__(self, filename, separator=",", append=False):
        super().__init__()
        self.filename = os.fspath(filename)
        self.sep = separator
        self.append = append
        self.keys = None
        self._text = ""
        self._header = True

    def on_train_begin(self, logs=None):
        self.keys = None
        self._text, self._header = "", True
        if self.append and os.path.exists(self.filename):
            with open(self.filename, newline="") as f:
                self._text = f.read()
            self._header = not self._text.split("\n", 1)[0]

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.keys is None:
            self.keys = sorted(logs)
            if self.keys and not any(k.startswith("val_") for k in self.keys):
                self.keys += ["val_" + k for k in self.keys]

        def value(key):
            v = logs.get(key, "NA")
            if isinstance(v, str):
                return v
            if isinstance(v, (list, tuple, np.ndarray)) and np.ndim(v) > 0:
                return f'"[{", ".join(str(x) for x in np.ravel(v))}]"'
            return v

        class Dialect(csv.excel):
            delimiter = self.sep

        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["epoch"] + self.keys, dialect=Dialect)
        if self._header:
            writer.writeheader()
            self._header = False
        writer.writerow({"epoch": epoch, **{k: value(k) for k in self.keys}})
        self._text += out.getvalue()
        write_text(self.filename, self._text)


class TerminateOnNaN(Callback):
    """Stop training after a batch whose loss is NaN or infinite, as
    ``keras.callbacks.TerminateOnNaN`` (``model.stop_training``: the
    current batch is the last)."""

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True


class LambdaCallback(Callback):
    """A callback from functions, as ``keras.callbacks.LambdaCallback``:
    ``on_epoch_begin(epoch, logs)``, ``on_epoch_end(epoch, logs)``,
    ``on_train_begin(logs)``, ``on_train_end(logs)``,
    ``on_train_batch_begin(batch, logs)``, ``on_train_batch_end(batch, logs)``
    (``on_batch_begin``/``on_batch_end`` are accepted for the latter two),
    and any other hook by keyword.

    Raises:
        TypeError: for a keyword that is not a hook or a value that is not callable.
    """

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, on_train_batch_begin=None, on_train_batch_end=None,
                 **kwargs):
        super().__init__()
        hooks = {"on_epoch_begin": on_epoch_begin, "on_epoch_end": on_epoch_end,
                 "on_train_begin": on_train_begin, "on_train_end": on_train_end,
                 "on_train_batch_begin": on_train_batch_begin,
                 "on_train_batch_end": on_train_batch_end}
        for key, fn in kwargs.items():
            key = {"on_batch_begin": "on_train_batch_begin",
                   "on_batch_end": "on_train_batch_end"}.get(key, key)
            if not (key.startswith("on_") and callable(getattr(Callback, key, None))):
                raise TypeError(f"LambdaCallback: unknown hook {key!r}")
            hooks[key] = fn
        self._hooks = {}
        for key, fn in hooks.items():
            if fn is None:
                continue
            if not callable(fn):
                raise TypeError(f"LambdaCallback: {key} must be callable, got {fn!r}")
            self._hooks[key] = fn
            with_index = key.startswith(("on_epoch", "on_train_batch", "on_test_batch",
                                         "on_predict_batch"))
            setattr(self, key, self._bind(fn, with_index))

    @staticmethod
    def _bind(fn, with_index):
        if with_index:
            return lambda index, logs=None: fn(index, logs)
        return lambda logs=None: fn(logs)


class LearningRateScheduler(Callback):
    """Set the optimizer's learning rate at the start of every epoch, as
    ``keras.callbacks.LearningRateScheduler``: ``schedule(epoch, lr)`` (or
    ``schedule(epoch)``) returns the new rate (a float), ``epoch`` 0-based;
    each epoch's logs get ``learning_rate``.

    Args:
        schedule: the function.
        verbose (int): 1 prints the rate set.
    Raises (during fit):
        ValueError: when ``schedule`` returns something that is not a float.
    """

    def __init__(self, schedule, verbose=0):
        super().__init__()
        self.schedule = schedule
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None):
        optimizer = self.model.optimizer
        if not hasattr(optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        try:
            lr = self.schedule(epoch, float(optimizer.learning_rate))
        except TypeError:  # the one-argument form
            lr = self.schedule(epoch)
        if isinstance(lr, bool) or not isinstance(lr, (float, int, np.floating, np.integer)):
            raise ValueError(f"The output of the `schedule` function should be a float. "
                             f"Got: {lr!r}")
        optimizer.learning_rate = float(lr)
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {lr}.")

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = float(self.model.optimizer.learning_rate)


class ReduceLROnPlateau(Callback):
    """Reduce the learning rate when a monitored value has stopped
    improving, as ``keras.callbacks.ReduceLROnPlateau``.

    After each epoch the value improves when it beats the best so far by
    more than ``min_delta``; after ``patience`` epochs without improvement
    (outside a cooldown) the rate becomes ``max(lr * factor, min_lr)`` and
    ``cooldown`` epochs follow in which waiting does not count.  Each
    epoch's logs get ``learning_rate``.

    Args:
        monitor (str): logs key, default ``"val_loss"``.
        factor (float): multiplier of the rate, in (0, 1).
        patience (int): epochs without improvement before a reduction.
        verbose (int): 1 prints each reduction.
        mode (str): ``"auto"``, ``"min"``, ``"max"`` (as :class:`EarlyStopping`).
        min_delta (float): minimum change that counts as an improvement.
        cooldown (int): epochs after a reduction before waiting resumes.
        min_lr (float): lower bound of the rate.
    Raises:
        ValueError: ``factor`` not in (0, 1), or an unknown ``mode``.
    """

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto",
                 min_delta=1e-4, cooldown=0, min_lr=0.0):
        super().__init__()
        if not 0.0 < float(factor) < 1.0:
            raise ValueError(f"ReduceLROnPlateau does not support a factor >= 1.0 or <= 0, "
                             f"got {factor!r}")
        self.monitor = monitor
        self.factor = float(factor)
        self.patience = int(patience)
        self.verbose = verbose
        self.min_delta = float(min_delta)
        self.cooldown = int(cooldown)
        self.min_lr = float(min_lr)
        op = _monitor_op("ReduceLROnPlateau", mode, monitor)
        self._better = ((lambda a, b: a < b - self.min_delta) if op is np.less
                        else (lambda a, b: a > b + self.min_delta))
        self._minimise = op is np.less
        self._reset()

    def _reset(self):
        self.best = np.inf if self._minimise else -np.inf
        self.wait = 0
        self.cooldown_counter = 0

    def on_train_begin(self, logs=None):
        self._reset()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        optimizer = self.model.optimizer
        logs["learning_rate"] = float(optimizer.learning_rate)
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Learning rate reduction is conditioned on metric `{self.monitor}` "
                          f"which is not available. Available metrics are: {','.join(logs)}",
                          stacklevel=2)
            return
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self._better(current, self.best):
            self.best = current
            self.wait = 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.patience:
                old_lr = float(optimizer.learning_rate)
                if old_lr > self.min_lr:
                    new_lr = max(old_lr * self.factor, self.min_lr)
                    optimizer.learning_rate = new_lr
                    if self.verbose > 0:
                        print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate "
                              f"to {new_lr}.")
                    self.cooldown_counter = self.cooldown
                    self.wait = 0


class BackupAndRestore(Callback):
    """Back up the whole training state and resume from it, as
    ``keras.callbacks.BackupAndRestore``: when ``fit`` starts and
    ``backup_dir`` holds a backup, the run continues from it; otherwise it
    starts afresh.  A run killed at any moment (even during a save) and
    started again with the same command and this callback ends with
    bit-identical weights to a run that was never interrupted.

    The backup (``backup_dir/latest.backup``, one zip written atomically:
    ``state.json`` and ``weights.npz``) holds every weight, the batch
    normalisation moving statistics, the random layers' generator states,
    the optimizer's iterations, learning rate and velocity slots, the epoch
    (and, with an int ``save_freq``, the last batch done and the epoch's
    running loss and metric sums), the History so far, and the data's
    shuffling state: fit's seed and pass counter for array data (see
    :class:`pyresnet.models.data_adapter.ArrayBatches`), the pass counter of
    a :class:`pyresnet.data.Dataset` (whose shuffles and augmentations
    are functions of their seeds and the pass).  Not saved, as in Keras:
    other callbacks' state (EarlyStopping's patience count, ...).  A
    resumed epoch draws its finished batches from the data again without
    running them (the augmentation work is repeated, the steps are not).

    Args:
        backup_dir (str): folder for the backup (created when needed); use
            one folder per run.
        save_freq: ``"epoch"`` (back up at every epoch's end) or an int:
            also every that many training batches.
        delete_checkpoint (bool): delete the backup when training ends
            (``on_train_end``; a run that raises keeps it).
    Raises:
        ValueError: for a bad ``save_freq``; at train begin, for a backup
            that does not fit the model (naming the weight) or is corrupted,
            and for a model that is not built yet (start it with an Input).
    """

    FILE = "latest.backup"

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint=True):
        super().__init__()
        if not backup_dir:
            raise ValueError("BackupAndRestore: backup_dir must be a folder path")
        if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0
                                         and not isinstance(save_freq, bool)):
            raise ValueError(f"BackupAndRestore: save_freq must be 'epoch' or a positive int, "
                             f"got {save_freq!r}")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self.path = os.path.join(self.backup_dir, self.FILE)
        self._since_save = 0

    def _progress(self):
        progress = getattr(self.model, "_fit_progress", None)
        if progress is None:
            raise RuntimeError("BackupAndRestore works inside Model.fit only")
        return progress

    def on_train_begin(self, logs=None):
        progress = self._progress()
        self._since_save = 0
        if not os.path.exists(self.path):
            return
        from .saving import saving_lib  # noqa: PLC0415
        if not self.model.built:
            raise ValueError(f'BackupAndRestore: model "{self.model.name}" is not built, so the '
                             "backup cannot be restored; start it with an Input")
        state, arrays = read_backup(self.path,
                                    saving_lib.expected_entries(self.model, optimizer=True))
        before = progress.get_state()
        try:  # the state first: a malformed one changes no weight
            progress.set_state(state)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            progress.set_state(before)
            raise ValueError(f"{self.path} is not a valid backup (its training state: "
                             f"{type(e).__name__}: {e})") from None
        try:
            paths = saving_lib.weight_paths(self.model)
            saving_lib.assign_checked(paths, {k: v for k, v in arrays.items()
                                              if not k.startswith("optimizer/")}, self.path)
            saving_lib.restore_optimizer(self.model, paths, arrays, self.path)
        except BaseException:
            progress.set_state(before)
            raise

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        self._since_save += 1
        if self._since_save >= self.save_freq:
            self._since_save = 0
            self._backup()

    def on_epoch_end(self, epoch, logs=None):
        self._backup()

    def on_train_end(self, logs=None):
        if self.delete_checkpoint and os.path.exists(self.path):
            os.remove(self.path)

    def _backup(self):
        from .saving import saving_lib  # noqa: PLC0415
        from .utils.atomic import write_bytes  # noqa: PLC0415
        state = self._progress().get_state()
        paths = saving_lib.weight_paths(self.model)
        entries = saving_lib.snapshot(paths)
        entries.update(saving_lib.snapshot(saving_lib.optimizer_paths(self.model, paths)))
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
            z.writestr("state.json", json.dumps(state))
            z.writestr("weights.npz", saving_lib.npz_bytes(entries))
        os.makedirs(self.backup_dir, exist_ok=True)
        write_bytes(self.path, buffer.getvalue())


def read_backup(path, expected=None):
    """``(state dict, {path: array})`` of a :class:`BackupAndRestore` file,
    read without inflating anything whole: ``state.json`` is refused above
    64 MiB, and with ``expected`` (``saving_lib.expected_entries(model,
    optimizer=True)``) the weights entry and each array are checked against
    the model's sizes before they are read.

    Raises:
        ValueError: naming the file, for a file that is not a complete
            backup (or whose weights do not fit those sizes).
    """
    from .saving import saving_lib  # noqa: PLC0415
    broken = (ValueError, OSError, KeyError, zipfile.BadZipFile, EOFError, RecursionError,
              struct.error, NotImplementedError, zlib.error)
    with open(path, "rb") as f:
        try:
            z = zipfile.ZipFile(f)
            state_info, weights_info = z.getinfo("state.json"), z.getinfo("weights.npz")
        except broken as e:
            raise ValueError(f"{path} is not a valid backup ({type(e).__name__}: {e})") from None
        with z:
            saving_lib.check_entry_size(state_info, saving_lib.MAX_JSON, path)
            if expected is not None:
                saving_lib.check_entry_size(weights_info, saving_lib.npz_limit(expected), path)
            try:
                state = json.loads(z.read(state_info).decode("utf-8"))
                weights = z.open(weights_info)
            except broken as e:
                raise ValueError(f"{path} is not a valid backup ({type(e).__name__}: {e})") \
                    from None
            if not isinstance(state, dict) or "epoch" not in state:
                weights.close()
                raise ValueError(f"{path} is not a valid backup (no training state)")
            with weights:
                arrays = saving_lib.read_npz(weights, f"{path} (weights.npz)", expected)
    return state, arrays


class TensorBoard(Callback):
    """Write TensorBoard logs, as ``keras.callbacks.TensorBoard``.

    * **Scalars**: under ``log_dir/train`` the tags ``epoch_<name>`` (loss,
      metrics) and ``epoch_learning_rate`` at step ``epoch`` (0-based),
      under ``log_dir/validation`` the validation values as
      ``epoch_<name>`` (``val_`` dropped); with ``update_freq="batch"`` or
      an int ``N``, also ``batch_<name>`` (the running epoch means) and
      ``batch_learning_rate`` every ``N`` training batches at step
      ``optimizer.iterations``; with ``write_steps_per_second``,
      ``epoch_steps_per_second`` (and ``batch_steps_per_second``).
    * **Graph** (``write_graph``): after the first training batch, the
      compiled training step's traced graph under ``log_dir/train``
      (:func:`pyresnet.summary.graph_def`: nodes named by the layers that
      made them, so the Graphs dashboard folds the model into its layers
      and blocks).  Nothing is written under ``run_eagerly=True`` (there is
      no graph) or ``steps_per_execution > 1``.
    * **Histograms** (``histogram_freq=N``): every N epochs, each layer's
      weights (``<layer>/<weight>/histogram``, e.g.
      ``dense/kernel/histogram``; 30 equal bins over the values'
      range, ``numpy.histogram``'s) under ``log_dir/train`` at step
      ``epoch``; with ``write_images``, also the first convolution's
      kernels as one image (``<layer>/kernel/image``: a grid of the
      filters, each scaled to [0, 1], RGB for 3 input channels, else the
      mean over the input channels), as Keras writes images with the
      histograms.
    * **Profile** (``profile_batch=k`` or ``(start, stop)``, 1-based as in
      Keras): the compiled calls of those training batches are timed per
      node; the trace and per-op tables go to
      ``log_dir/train/plugins/profile/<time>/`` and the node times into
      the graph's run metadata (:func:`pyresnet.summary.trace_export`).

    The events are written with tensorboardX (``pip install
    'pyresnet[tensorboard]'``); the writers are flushed at each epoch's end
    and closed when training ends.  Keras's ``embeddings_freq`` and
    ``embeddings_metadata`` are accepted at their defaults only (pyresnet
    has no Embedding layer): another value raises.

    Args:
        log_dir (str): the folder ``tensorboard --logdir`` is pointed at.
        histogram_freq (int): epochs between weight histograms (0: none).
        write_graph (bool): write the training step's graph.
        write_images (bool): write the first convolution's kernels as an
            image with each histogram.
        write_steps_per_second (bool): log training steps per second.
        update_freq: ``"epoch"``, ``"batch"`` (= 1) or a positive int.
        profile_batch: 0 (none), a batch number, or ``(start, stop)``
            (inclusive, 1-based), or the text ``"start,stop"``.
        embeddings_freq: 0 only.
        embeddings_metadata: None only.
    Raises:
        ValueError: for a bad argument (named in the message).
        ImportError: when tensorboardX is not installed (naming the extra).
    """

    HISTOGRAM_BINS = 30

    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True, write_images=False,
                 write_steps_per_second=False, update_freq="epoch", profile_batch=0,
                 embeddings_freq=0, embeddings_metadata=None):
        super().__init__()
        if update_freq == "batch":
            update_freq = 1
        if update_freq != "epoch" and not (isinstance(update_freq, int) and update_freq > 0
                                           and not isinstance(update_freq, bool)):
            raise ValueError(f"TensorBoard: update_freq must be 'epoch', 'batch' or a positive "
                             f"int, got {update_freq!r}")
        if isinstance(histogram_freq, bool) or not isinstance(histogram_freq, (int, np.integer)) \
                or histogram_freq < 0:
            raise ValueError(f"TensorBoard: histogram_freq must be an int >= 0, got "
                             f"{histogram_freq!r}")
        if embeddings_freq:
            raise ValueError(f"TensorBoard: embeddings_freq={embeddings_freq!r} is not supported "
                             f"(pyresnet has no Embedding layer to project); leave it 0")
        if embeddings_metadata is not None:
            raise ValueError("TensorBoard: embeddings_metadata is not supported (pyresnet has "
                             "no Embedding layer to project); leave it None")
        self._profile_range = self._parse_profile_batch(profile_batch)
        try:
            from tensorboardX import SummaryWriter  # noqa: PLC0415
        except ImportError as e:
            raise ImportError("TensorBoard needs tensorboardX: pip install "
                              "'pyresnet[tensorboard]'") from e
        self._writer_class = SummaryWriter
        self.log_dir = os.fspath(log_dir)
        self.histogram_freq = int(histogram_freq)
        self.write_graph = bool(write_graph)
        self.write_images = bool(write_images)
        self.write_steps_per_second = bool(write_steps_per_second)
        self.update_freq = update_freq
        self.profile_batch = profile_batch
        self.embeddings_freq, self.embeddings_metadata = embeddings_freq, embeddings_metadata
        self._writers = {}
        self._batches = 0
        self._graph_written = False
        self._profiling = False
        self._profiled = False

    @staticmethod
    def _parse_profile_batch(profile_batch):
        """``(start, stop)`` (1-based, inclusive) or None, from Keras's forms."""
        value = profile_batch
        if isinstance(value, str):
            try:
                value = tuple(int(x) for x in value.split(","))
            except ValueError:
                value = None
        elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            value = (int(value), int(value))
        elif isinstance(value, (tuple, list)) and len(value) == 2 \
                and all(isinstance(x, (int, np.integer)) for x in value):
            value = (int(value[0]), int(value[1]))
        else:
            value = None
        if value is not None and len(value) == 1:
            value = (value[0], value[0])
        if value is None or len(value) != 2 or value[0] < 0 or value[1] < value[0] \
                or (value[0] == 0 and value[1] != 0):
            raise ValueError(f"TensorBoard: profile_batch must be 0, a positive batch number or "
                             f"a pair (start, stop) of them with start <= stop, got "
                             f"{profile_batch!r}")
        return None if value == (0, 0) else value

    def _writer(self, name):
        if name not in self._writers:
            self._writers[name] = self._writer_class(os.path.join(self.log_dir, name))
        return self._writers[name]

    def _learning_rate(self):
        opt = getattr(self.model, "optimizer", None)
        return None if opt is None else float(opt.learning_rate)

    def _train_concrete_function(self):
        """The compiled training step's ConcreteFunction, or None."""
        from .compile import Function  # noqa: PLC0415
        fn = getattr(self.model, "train_function", None)
        if not isinstance(fn, Function) or not fn._cache:
            return None
        return next(iter(fn._cache.values()))

    def on_train_begin(self, logs=None):
        self._batches = 0
        self._graph_written = self._profiled = False
        self._epoch_start = self._batch_start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = time.perf_counter()
        self._epoch_batches = 0

    def on_train_batch_begin(self, batch, logs=None):
        if self._profile_range and not self._profiled and not self._profiling \
                and self._batches + 1 == self._profile_range[0]:
            from . import summary  # noqa: PLC0415
            summary.trace_on(graph=False, profiler=True)
            self._profiling = True

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        self._epoch_batches = getattr(self, "_epoch_batches", 0) + 1
        if self.write_graph and not self._graph_written:
            self._graph_written = True
            concrete = self._train_concrete_function()
            if concrete is not None:
                from . import summary  # noqa: PLC0415
                summary.write_graph(concrete, writer=self._writer("train"), step=0)
        if self._profiling and self._batches >= self._profile_range[1]:
            self._stop_profile()
        if self.update_freq == "epoch" or self._batches % self.update_freq:
            return
        step = int(self.model.optimizer.iterations)
        writer = self._writer("train")
        for key, value in (logs or {}).items():
            writer.add_scalar(f"batch_{key}", float(value), step)
        lr = self._learning_rate()
        if lr is not None:
            writer.add_scalar("batch_learning_rate", lr, step)
        if self.write_steps_per_second:
            now = time.perf_counter()
            writer.add_scalar("batch_steps_per_second",
                              self.update_freq / max(now - self._batch_start, 1e-9), step)
            self._batch_start = now

    def _stop_profile(self):
        from . import summary  # noqa: PLC0415
        self._profiling, self._profiled = False, True
        if summary.recording() is not None and summary.recording().calls:
            run = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
            step = self._profile_range[0]
            profiles = summary.trace_export(run, os.path.join(self.log_dir, "train"), step=step,
                                            writer=self._writer("train"))
            concrete = self._train_concrete_function()
            if self.write_graph and concrete is not None and profiles:
                summary.write_run_metadata(concrete, profiles[0], writer=self._writer("train"),
                                           step=step)
        else:
            summary.trace_off()

    def _log_weights(self, epoch):
        writer = self._writer("train")
        image_written = False
        for layer in getattr(self.model, "layers", []):
            for weight in layer.weights:
                short = str(weight.name).split("/")[-1].split(":")[0]
                values = np.asarray(weight.numpy(), dtype=np.float64)
                tag = f"{layer.name}/{short}"
                writer.add_histogram(f"{tag}/histogram", values, epoch,
                                     bins=self.HISTOGRAM_BINS)
                if self.write_images and not image_written and values.ndim == 4 \
                        and short == "kernel":
                    writer.add_image(f"{tag}/image", _kernel_grid(values), epoch,
                                     dataformats="HWC")
                    image_written = True

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        train, val = self._writer("train"), None
        for key, value in logs.items():
            if not isinstance(value, (int, float, np.floating, np.integer)):
                continue
            if key.startswith("val_"):
                val = val or self._writer("validation")
                val.add_scalar(f"epoch_{key[4:]}", float(value), epoch)
            elif key != "learning_rate":
                train.add_scalar(f"epoch_{key}", float(value), epoch)
        lr = self._learning_rate()
        if lr is not None:
            train.add_scalar("epoch_learning_rate", lr, epoch)
        if self.write_steps_per_second:
            seconds = max(time.perf_counter() - self._epoch_start, 1e-9)
            train.add_scalar("epoch_steps_per_second",
                             getattr(self, "_epoch_batches", 0) / seconds, epoch)
        if self.histogram_freq and epoch % self.histogram_freq == 0:
            self._log_weights(epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        if self._profiling:  # fit ended inside the profiled batches
            self._stop_profile()
        for writer in self._writers.values():
            writer.close()
        self._writers = {}


def _kernel_grid(kernel, scale=4):
    """A convolution kernel ``(kh, kw, in, out)`` as one HWC float image in
    [0, 1]: the ``out`` filters in a near-square grid with a 1-pixel gap,
    each filter min-max scaled on its own and enlarged ``scale`` times;
    RGB for 3 input channels, else the mean over the input channels."""
    kh, kw, cin, cout = kernel.shape
    filters = np.moveaxis(kernel, 3, 0)  # (out, kh, kw, in)
    if cin != 3:
        filters = np.repeat(filters.mean(axis=3, keepdims=True), 3, axis=3)
    lo = filters.min(axis=(1, 2, 3), keepdims=True)
    hi = filters.max(axis=(1, 2, 3), keepdims=True)
    filters = (filters - lo) / np.where(hi > lo, hi - lo, 1.0)
    filters = filters.repeat(scale, axis=1).repeat(scale, axis=2)
    cols = int(math.ceil(math.sqrt(cout)))
    rows = int(math.ceil(cout / cols))
    h, w = kh * scale, kw * scale
    grid = np.ones((rows * (h + 1) + 1, cols * (w + 1) + 1, 3))
    for k in range(cout):
        r, c = divmod(k, cols)
        grid[1 + r * (h + 1):1 + r * (h + 1) + h, 1 + c * (w + 1):1 + c * (w + 1) + w] = filters[k]
    return grid.astype(np.float32)
