"""Callbacks with Keras's interface (``keras.callbacks``): hooks that
``Model.fit``/``evaluate``/``predict`` call around epochs and batches.

``logs`` dicts map metric names (``loss``, ``accuracy``, ``val_loss``, ...)
to Python floats: in batch hooks the running mean over the epoch so far,
in ``on_epoch_end`` the epoch's mean (means are over samples).
"""
import sys
import time

from tqdm import tqdm


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
        """Called after each prediction step."""


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


class ProgbarLogger(Callback):
    """Progress output, as Keras's ``ProgbarLogger`` but drawn with tqdm (on
    stdout).  ``verbose=1``: a bar per epoch (or per evaluate/predict run)
    showing the running loss and metrics, the time per step (ms/step:
    wall-clock time since the epoch began over the steps done) and the
    throughput (images/s, from ``params["samples_seen"]``); at the end of an
    epoch the validation values are added (the validation run inside ``fit``
    draws no bar of its own, as Keras).  ``verbose=2``: one such line per
    epoch, no bar.  ``fit``, ``evaluate`` and ``predict`` add it when
    ``verbose`` is not 0.
    """

    def __init__(self):
        super().__init__()
        self._bar = None
        self._start = None
        self._rate = ""
        self._in_fit = False

    def _open(self, desc):
        self._start = time.perf_counter()
        self._rate = ""
        if self.params.get("verbose") == 1:
            self._bar = tqdm(total=self.params["steps"], desc=desc, unit="step", file=sys.stdout,
                             dynamic_ncols=True, leave=True)

    def _progress(self, batch, logs):
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        self._rate = (f"{1000 * elapsed / (batch + 1):.0f}ms/step - "
                      f"{self.params.get('samples_seen', 0) / elapsed:.0f} img/s")
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
        elif self.params.get("verbose") == 2:
            print(f"{title} - {text}", file=sys.stdout, flush=True)

    def _epoch_title(self, epoch):
        return f"Epoch {epoch + 1}/{self.params['epochs']}"

    def on_train_begin(self, logs=None):
        self._in_fit = True

    def on_train_end(self, logs=None):
        self._in_fit = False

    def on_epoch_begin(self, epoch, logs=None):
        self._open(self._epoch_title(epoch))

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
    ``callback_list.on_epoch_end(epoch, logs)`` calls every callback's hook.

    Args:
        callbacks: a list of Callback (or None).
        model: the Model.
        params (dict): see :class:`Callback`.
        add_history (bool): append a :class:`History` (kept as ``history``).
        add_progbar (bool): append a :class:`ProgbarLogger`.
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
        if add_progbar:
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

        def dispatch(*args):
            for cb in self.callbacks:
                getattr(cb, hook)(*args)

        return dispatch
