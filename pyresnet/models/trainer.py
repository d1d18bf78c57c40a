"""``compile``/``fit``/``evaluate``/``predict`` for Models (Keras 3's
``Trainer``).

Each of ``train_step(x, y)``, ``test_step(x, y)`` and ``predict_step(x)``
works on one batch of Tensors.  The loops call them through
``make_train_function()`` / ``make_test_function()`` /
``make_predict_function()``, which compile them with ``pyresnet.compile``
unless ``run_eagerly=True`` (``jit_compile`` chooses the jit passes).
"""
import numpy as np

from .. import callbacks as callbacks_module
from .. import distribute
from .. import losses as losses_module
from .. import metrics as metrics_module
from .. import ops
from .. import optimizers
from ..autodiff import GradientTape
from ..compile import compile as pr_compile
from ..layers.input_spec import check_input_specs
from ..tensor import Tensor
from ..utils import tree
from . import data_adapter


def _verbosity(verbose):
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    return verbose


def _per_output(model_name, value, names, what):
    """A dict keyed by output name -> a list with one entry per output."""
    unknown = set(value) - set(names)
    if unknown:
        raise ValueError(f'Model "{model_name}": {what} for unknown outputs {sorted(unknown)}; '
                         f"outputs are {names}")
    return [value.get(n) for n in names]


class Trainer:
    """The training API of :class:`pyresnet.Model` (mixed into it)."""

    def _init_trainer(self):
        self.compiled = False
        self.optimizer = None
        self.run_eagerly = None
        self.jit_compile = "auto"
        self.stop_training = False
        self.history = None
        self.train_function = self.test_function = self.predict_function = None
        self._train_distribution = None  # the distribution train_function was made under

    # ---- configuration ------------------------------------------------------

    def compile(self, optimizer, loss, metrics=None, run_eagerly=None, jit_compile="auto"):
        """Configure training, as ``keras.Model.compile``.

        Args:
            optimizer: ``"sgd"`` or an optimizer object
                (:class:`pyresnet.optimizers.SGD`).
            loss: a Keras loss name, a :class:`pyresnet.losses.Loss` or a
                function ``(y_true, y_pred) -> per-sample losses``; for several
                outputs one loss for all, a list (one per output) or a dict by
                output layer name.  The total loss is the sum over outputs.
            metrics: list of metric names (``"accuracy"`` resolves from the
                loss as Keras does), metric objects or functions, applied to
                every output; or, for several outputs, a list of such lists
                (one per output) or a dict by output layer name.  Logged as
                ``<name>``, or ``<output>_<name>`` with several outputs.
            run_eagerly: None/False/True: True runs the steps eagerly; else
                ``fit``/``evaluate``/``predict`` run them compiled
                (``pyresnet.compile``), as Keras does.
            jit_compile: ``"auto"``/True/False: the compiled steps' jit
                passes (fusion, in-place updates, kernels chosen by timing);
                ``"auto"`` = False.
        Raises:
            ValueError/TypeError: for unknown names or mismatched structures.
        """
        names = self.output_names
        if isinstance(loss, dict):
            loss_list = _per_output(self.name, loss, names, "loss")
        elif isinstance(loss, (list, tuple)):
            if len(loss) != len(names):
                raise ValueError(f'Model "{self.name}" has {len(names)} output(s) {names}, got '
                                 f"{len(loss)} losses")
            loss_list = list(loss)
        else:
            loss_list = [loss] * len(names)
        if any(item is None for item in loss_list):
            raise ValueError(f'Model "{self.name}": compile() needs a loss for every output '
                             f"{names}, got {loss!r}")
        losses = [losses_module.get(item) for item in loss_list]
        if isinstance(metrics, dict):
            per_output = _per_output(self.name, metrics, names, "metrics")
        elif isinstance(metrics, (list, tuple)) and len(names) > 1 and len(metrics) == len(names) \
                and all(m is None or isinstance(m, (list, tuple)) for m in metrics):
            per_output = list(metrics)
        else:
            per_output = [metrics] * len(names)
        compiled_metrics = []
        for out, (name, items, loss_obj) in enumerate(zip(names, per_output, losses)):
            for item in items or []:
                metric = metrics_module.get(item, loss_obj)
                key = metric.name if len(names) == 1 else f"{name}_{metric.name}"
                compiled_metrics.append((key, out, metric))
        self.optimizer = optimizers.get(optimizer)
        self._losses, self._metrics = losses, compiled_metrics
        self._compile_args = {"loss": loss, "metrics": metrics, "run_eagerly": run_eagerly,
                              "jit_compile": jit_compile}  # for model.save
        self.run_eagerly = run_eagerly
        self.jit_compile = jit_compile
        self.compiled = True
        self.train_function = self.test_function = self.predict_function = None

    @property
    def output_names(self):
        """Names of the layers producing the outputs (functional models and
        built Sequentials), else ``["output"]`` (one output assumed)."""
        graph = getattr(self, "_graph", None)
        if graph is None:
            return ["output"]
        return [t._history[0].layer.name for t in graph.flat_outputs]

    # ---- the steps ---------------------------------------------------------------

    def compute_loss(self, x=None, y=None, y_pred=None):
        """The total loss of a batch: the sum over outputs of each output's
        compiled loss (a float32 scalar Tensor).  ``x`` is unused (Keras's
        signature)."""
        return self._compute_losses(y, y_pred)[0]

    def _compute_losses(self, y, y_pred):
        ys, preds = tree.flatten(y), tree.flatten(y_pred)
        values = [loss(t, p) for loss, t, p in zip(self._losses, ys, preds)]
        total = values[0]
        for v in values[1:]:
            total = ops.add(total, v)
        logs = {"loss": total}
        if len(values) > 1:
            logs.update({f"{name}_loss": v for name, v in zip(self.output_names, values)})
        return total, logs

    def compute_metrics(self, x, y, y_pred):
        """The compiled metrics of a batch: ``{name: float32 scalar Tensor}``
        (batch means of the per-sample values)."""
        ys, preds = tree.flatten(y), tree.flatten(y_pred)
        return {key: ops.mean(metric(ys[out], preds[out])) for key, out, metric in self._metrics}

    def train_step(self, x, y):
        """One optimisation step on a batch.

        Args:
            x: float32 Tensor (or list, one per input), batch first.
            y: labels/targets Tensor (or list, one per output).
        Returns:
            dict: ``loss`` (and per-output losses), then the metrics, as
            float32 scalar Tensors of this batch.
        """
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss, logs = self._compute_losses(y, y_pred)
        weights = self.trainable_weights
        grads = tape.gradient(loss, weights)
        strategy = distribute.distribution()
        if strategy is not None:
            grads = strategy.average_gradients(grads)
        self.optimizer.apply_gradients(zip(grads, weights))
        logs = {**logs, **self.compute_metrics(x, y, y_pred)}
        if strategy is not None:
            logs = {k: ops.allreduce(v, op="mean") for k, v in logs.items()}
        return logs

    def test_step(self, x, y):
        """Loss and metrics of a batch in inference mode (see train_step)."""
        y_pred = self(x, training=False)
        return {**self._compute_losses(y, y_pred)[1], **self.compute_metrics(x, y, y_pred)}

    def predict_step(self, x):
        """The model's output on a batch, in inference mode."""
        return self(x, training=False)

    def _step_function(self, step):
        """``step`` compiled with ``pyresnet.compile`` unless
        ``run_eagerly=True`` (Keras's rule), with ``reduce_retracing=True``
        so that the last, smaller batch of an epoch reuses the graph (the
        batch dimension is the symbol ``batch``: one trace, one memory plan
        per batch size).  ``jit_compile="auto"`` means
        False: the jit passes time kernels on the first call of each batch
        size, which costs seconds and, on a busy machine, can pick poorly;
        ask for them with ``jit_compile=True``."""
        if self.run_eagerly:
            return step
        return pr_compile(step, jit_compile=self.jit_compile is True, reduce_retracing=True)

    def make_train_function(self, force=False):
        """The function ``fit`` calls on each batch: ``train_step``, compiled
        unless ``run_eagerly=True``."""
        if self.train_function is None or force:
            self.train_function = self._step_function(self.train_step)
        return self.train_function

    def make_test_function(self, force=False):
        """The function ``evaluate`` calls on each batch: ``test_step``,
        compiled unless ``run_eagerly=True``."""
        if self.test_function is None or force:
            self.test_function = self._step_function(self.test_step)
        return self.test_function

    def make_predict_function(self, force=False):
        """The function ``predict`` calls on each batch: ``predict_step``,
        compiled unless ``run_eagerly=True``."""
        if self.predict_function is None or force:
            self.predict_function = self._step_function(self.predict_step)
        return self.predict_function

    # ---- data checks ----------------------------------------------------------------

    def _check_x(self, x):
        """x as NumPy arrays, checked against the model's Input shapes."""
        count = len(self.input_spec) if isinstance(self.input_spec, list) else 1
        xs = data_adapter.to_arrays(self.name, "x", x, count)
        if self.input_spec is not None:
            check_input_specs(self, self.input_spec, [a.shape for a in xs], self._build_shapes)
        return xs

    def _check_arrays(self, x, y):
        """Check and convert ``(x, y)`` before any step runs: sample counts,
        dtypes, shapes against the model's Inputs, label ranges against the
        output sizes; then run the model and the loss once in inference mode
        on the first sample, which builds the model and raises any other
        error now, while no weight has changed.

        Returns:
            (xs, ys, y_dtypes): lists of NumPy arrays and the label dtypes.
        """
        if not self.compiled:
            raise RuntimeError(f'Model "{self.name}" must be compiled before fit/evaluate: call '
                               "model.compile(optimizer, loss, metrics)")
        xs = self._check_x(x)
        ys = data_adapter.to_arrays(self.name, "y", y, len(self._losses))
        data_adapter.check_lengths(self.name, xs, ys)
        x1, _ = next(iter(data_adapter.ArrayBatches([a[:1] for a in xs], None, 1)))
        y_pred = tree.flatten(self(x1, training=False))
        y_dtypes = [self._check_labels(i, a, loss, tuple(pred.shape))
                    for i, (a, loss, pred) in enumerate(zip(ys, self._losses, y_pred))]
        y1 = [Tensor(np.ascontiguousarray(a[:1], dt)) for a, dt in zip(ys, y_dtypes)]
        self._compute_losses(y1, y_pred)
        return xs, ys, y_dtypes

    def _batches(self, x, y, batch_size, shuffle=False):
        """Checked batches of arrays or of a dataset (whose first batch is
        checked the same way when it arrives)."""
        if data_adapter.is_dataset(x):
            if y is not None:
                raise ValueError(f'Model "{self.name}": `y` must be None when `x` is a dataset '
                                 "(it yields (x, y) batches)")
            if not self.compiled:
                raise RuntimeError(f'Model "{self.name}" must be compiled before fit/evaluate')
            return data_adapter.DatasetBatches(x, lambda xs, ys: self._check_arrays(xs, ys)[2])
        xs, ys, y_dtypes = self._check_arrays(x, y)
        return data_adapter.ArrayBatches(xs, ys, batch_size, shuffle=shuffle, y_dtypes=y_dtypes)

    def _check_labels(self, i, y, loss, pred_shape):
        """Check output i's labels; return the dtype to feed them as."""
        out_name = self.output_names[i]
        classes = pred_shape[-1] if pred_shape else None
        expected = (None,) + tuple(pred_shape[1:])
        if losses_module.is_sparse(loss):
            if not (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)) or len(pred_shape) != 2:
                raise ValueError(f'Model "{self.name}": sparse labels for output "{out_name}" of '
                                 f"shape {expected} must have shape (N,) or (N, 1), got y of "
                                 f"shape {y.shape}")
            if y.dtype.kind == "f" and not np.all(np.floor(y) == y):
                raise ValueError(f'Model "{self.name}": sparse labels must be integers, got '
                                 f"non-integral values in y of dtype {y.dtype}")
            low, high = y.min(), y.max()
            if low < 0 or high >= classes:
                raise ValueError(
                    f'Model "{self.name}": labels must be class indices in [0, {classes}) for '
                    f'output "{out_name}" of shape {expected} ({classes} units in the last '
                    f"layer), got values in [{low}, {high}] in y of shape {y.shape}")
            return np.int32
        if losses_module.is_categorical(loss) and tuple(y.shape[1:]) != tuple(pred_shape[1:]):
            raise ValueError(f'Model "{self.name}": targets for output "{out_name}" must have '
                             f"the output's shape {expected}, got y of shape {y.shape}")
        return np.int32 if y.dtype.kind in "iu" else np.float32

    # ---- loops ------------------------------------------------------------------------

    def fit(self, x=None, y=None, batch_size=32, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, initial_epoch=0):
        """Train the model, as ``keras.Model.fit``.

        Args:
            x: float32 or uint8 array ``(N, ...)`` (uint8 is converted to
                float32 as given: scale images yourself, as in Keras), or a
                list of arrays for several inputs; or a dataset yielding
                ``(x, y)`` batches (a :class:`pyresnet.data.Dataset`, or any
                re-iterable with ``len()``), with ``y`` None.
            y: labels ``(N,)``/``(N, 1)`` ints for sparse losses, float
                targets otherwise; a list for several outputs.
            batch_size (int): samples per step for arrays (the last batch may
                be smaller; None means 32); unused with a dataset.
            epochs (int): index of the last epoch (runs ``initial_epoch`` to
                ``epochs - 1``).
            verbose: ``"auto"`` (= 1), 0 silent, 1 progress bar, 2 a line per
                epoch.
            callbacks: list of :class:`pyresnet.callbacks.Callback`.
            validation_split (float): fraction in [0, 1) of the array samples,
                the last ones before shuffling, held out for validation.
            validation_data: ``(x_val, y_val)`` arrays or a dataset; takes
                precedence over ``validation_split``.  Evaluated after every
                epoch in inference mode (callbacks see ``on_test_*``).
            shuffle (bool): reshuffle array samples every epoch (a dataset
                shuffles itself).
            initial_epoch (int): epoch to start at (resuming).
        Returns:
            :class:`pyresnet.callbacks.History`: ``history.history`` holds per
            epoch ``loss``, the metrics, ``val_loss`` and ``val_<metric>``.
        Raises:
            RuntimeError: when the model is not compiled.
            ValueError/TypeError: for inconsistent, empty, wrongly shaped or
                typed data or labels out of range, naming the model (or layer)
                and the shapes -- raised before the first step, with the
                weights unchanged.  A dataset is checked on its first batch;
                a label out of range in a later batch is reported by the loss
                op when that batch is reached.
        """
        verbose = _verbosity(verbose)
        if not 0.0 <= validation_split < 1.0:
            raise ValueError(f"validation_split must be in [0, 1), got {validation_split!r}")
        val = None
        if data_adapter.is_dataset(x):
            if validation_split:
                raise ValueError("validation_split is not supported for a dataset; pass "
                                 "validation_data")
            data = self._batches(x, y, batch_size)
        else:
            xs, ys, y_dtypes = self._check_arrays(x, y)
            if validation_split and validation_data is None:
                (xs, vx), (ys, vy) = data_adapter.split(xs, validation_split), \
                    data_adapter.split(ys, validation_split)
                data_adapter.check_lengths(self.name, xs, ys)
                data_adapter.check_lengths(self.name, vx, vy)
                val = data_adapter.ArrayBatches(vx, vy, batch_size, y_dtypes=y_dtypes)
            data = data_adapter.ArrayBatches(xs, ys, batch_size, shuffle=shuffle,
                                             y_dtypes=y_dtypes)
        if validation_data is not None:
            if data_adapter.is_dataset(validation_data):
                val = self._batches(validation_data, None, batch_size)
            elif isinstance(validation_data, (list, tuple)) and len(validation_data) == 2:
                val = self._batches(*validation_data, batch_size)
            else:
                raise ValueError("validation_data must be (x_val, y_val) or a dataset")
        strategy = distribute.distribution()
        if strategy is not None:
            data, callbacks, verbose = strategy._fit_begin(data, callbacks, verbose)
        cbs = self._callbacks(callbacks, data, verbose, add_history=True, epochs=epochs)
        train_function = self.make_train_function(force=strategy is not self._train_distribution)
        self._train_distribution = strategy
        self.stop_training = False
        self.history = cbs.history
        self._fit_progress = progress = FitProgress(data, val, cbs.history, initial_epoch)
        try:
            cbs.on_train_begin()
            if strategy is not None:
                strategy._train_begin(self, progress)
            logs = None
            for epoch in range(progress.epoch, epochs):
                progress.start_epoch(epoch)
                cbs.on_epoch_begin(epoch)
                logs = self._run(data, train_function, cbs, "train", model=self,
                                 progress=progress)
                if strategy is not None:
                    strategy._epoch_end(self)
                if val is not None:
                    cbs.on_test_begin()
                    val_logs = self._run(val, self.make_test_function(), cbs, "test")
                    cbs.on_test_end(val_logs)
                    logs.update({f"val_{k}": v for k, v in val_logs.items()})
                progress.end_epoch(logs)
                cbs.on_epoch_end(epoch, logs)
                if self.stop_training:
                    break
            cbs.on_train_end(logs)
        finally:
            self._fit_progress = None
        return self.history

    def _callbacks(self, callbacks, data, verbose, add_history=False, **params):
        return callbacks_module.CallbackList(
            callbacks, self, {**params, "steps": len(data), "samples": data.num_samples,
                              "batch_size": getattr(data, "batch_size", None),
                              "verbose": verbose, "samples_seen": 0},
            add_history=add_history, add_progbar=verbose != 0)

    @staticmethod
    def _run(data, step, cbs, mode, model=None, progress=None):
        """Run ``step`` on every batch; return the sample-weighted means of
        its outputs, calling the batch callbacks with the running means.
        With ``model``, stop after the batch at whose end a callback set
        ``model.stop_training`` (as Keras: the epoch's logs then cover the
        batches run; validation and ``on_epoch_end`` still follow).  With
        ``progress`` (a :class:`FitProgress`), the batches it has done
        already (a resumed epoch) are drawn but not run, and it follows the
        running sums."""
        sums, seen, done = {}, 0, -1
        if progress is not None:
            sums, seen, done = dict(progress.sums), progress.seen, progress.batch
        for batch, (x, y) in enumerate(data):
            if batch <= done:
                continue
            getattr(cbs, f"on_{mode}_batch_begin")(batch)
            out = step(x, y)
            n = len(x[0] if isinstance(x, list) else x)
            seen += n
            for key, value in out.items():
                sums[key] = sums.get(key, 0.0) + float(value) * n
            if progress is not None:
                progress.batch, progress.sums, progress.seen = batch, sums, seen
            cbs.set_samples_seen(seen)
            getattr(cbs, f"on_{mode}_batch_end")(batch, {k: v / seen for k, v in sums.items()})
            if model is not None and model.stop_training:
                break
        if not seen:
            raise ValueError("the data yielded no batches")
        return {k: v / seen for k, v in sums.items()}

    def evaluate(self, x=None, y=None, batch_size=32, verbose="auto", callbacks=None,
                 return_dict=False):
        """Loss and metrics in inference mode, as ``keras.Model.evaluate``
        (data as for :meth:`fit`: arrays or a dataset of ``(x, y)`` batches).

        Returns:
            the loss (float) when no metric is compiled; else the list
            ``[loss, *metrics]``; or ``{name: value}`` with ``return_dict``.
            Values are means over the samples.
        Raises:
            as :meth:`fit`.
        """
        verbose = _verbosity(verbose)
        data = self._batches(x, y, batch_size)
        cbs = self._callbacks(callbacks, data, verbose)
        cbs.on_test_begin()
        logs = self._run(data, self.make_test_function(), cbs, "test")
        cbs.on_test_end(logs)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=32, verbose="auto", callbacks=None):
        """The model's outputs in inference mode, as ``keras.Model.predict``.

        Args:
            x: as for :meth:`fit`; a dataset may yield ``x`` or ``(x, y)``
                batches (``y`` is ignored).
        Returns:
            numpy.ndarray float32 ``(N, ...)``, or a list of them for several
            outputs.
        Raises:
            ValueError/TypeError: for empty, wrongly shaped or typed input,
                naming the model or layer and the shapes.
        """
        verbose = _verbosity(verbose)
        if data_adapter.is_dataset(x):
            data = data_adapter.DatasetBatches(x, self._check_x, targets=False)
        else:
            xs = self._check_x(x)
            data_adapter.check_lengths(self.name, xs, [])
            data = data_adapter.ArrayBatches(xs, None, batch_size)
        cbs = self._callbacks(callbacks, data, verbose)
        step = self.make_predict_function()
        cbs.on_predict_begin()
        outputs, seen = [], 0
        for batch, (bx, _) in enumerate(data):
            cbs.on_predict_batch_begin(batch)
            out = step(bx)
            outputs.append([np.array(t) for t in tree.flatten(out)])
            seen += len(outputs[-1][0])
            cbs.set_samples_seen(seen)
            cbs.on_predict_batch_end(batch)
        cbs.on_predict_end()
        if not outputs:
            raise ValueError(f'Model "{self.name}": predict() got no batches')
        merged = [np.concatenate(parts) for parts in zip(*outputs)]
        return tree.pack_sequence_as(out, merged)


class FitProgress:
    """Where a ``fit`` run is, for :class:`pyresnet.callbacks.BackupAndRestore`
    (``model._fit_progress`` while ``fit`` runs): the epoch, the last batch
    done in it and the epoch's running sums, the History, and the data's
    shuffling state (the seed and pass counter of array data, the pass
    counter of a :class:`pyresnet.data.Dataset`).  :meth:`get_state` is
    JSON-able; :meth:`set_state` (from ``on_train_begin``) makes ``fit``
    continue exactly there: the remaining batches of that epoch, drawn from
    the same pass of the data, then the next epochs."""

    def __init__(self, data, val, history, initial_epoch):
        self.data, self.val, self.history = data, val, history
        self.epoch, self.batch, self.sums, self.seen = initial_epoch, -1, {}, 0
        self._pass = None  # the data's state at the start of the current epoch
        self._epochs, self._logs = list(history.epoch), {k: list(v) for k, v in
                                                         history.history.items()}

    def start_epoch(self, epoch):
        if self.epoch != epoch or self.batch < 0:
            self.epoch, self.batch, self.sums, self.seen = epoch, -1, {}, 0
        self._pass = _data_state(self.data)

    def end_epoch(self, logs):
        self._epochs.append(self.epoch)  # (History records it after the other callbacks)
        for key, value in logs.items():
            self._logs.setdefault(key, []).append(value)
        self.epoch, self.batch, self.sums, self.seen = self.epoch + 1, -1, {}, 0
        self._pass = None

    def get_state(self):
        """``{"epoch", "batch", "sums", "seen", "data", "val", "history"}``:
        ``epoch`` is the epoch to run next (or the one under way when
        ``batch`` >= 0, the last batch done in it)."""
        mid = self.batch >= 0 and self._pass is not None
        return {"epoch": self.epoch, "batch": self.batch if mid else -1,
                "sums": self.sums if mid else {}, "seen": self.seen if mid else 0,
                "data": self._pass if mid else _data_state(self.data),
                "val": _data_state(self.val),
                "history": {"epoch": self._epochs, "history": self._logs}}

    def set_state(self, state):
        """Continue from :meth:`get_state`'s dict (see the class)."""
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])
        self.sums, self.seen = dict(state["sums"]), int(state["seen"])
        for data, key in ((self.data, "data"), (self.val, "val")):
            if data is not None and state.get(key) is not None and hasattr(data, "set_state"):
                data.set_state(state[key])
        self._epochs = list(state["history"]["epoch"])
        self._logs = {k: list(v) for k, v in state["history"]["history"].items()}
        self.history.epoch = list(self._epochs)
        self.history.history = {k: list(v) for k, v in self._logs.items()}


def _data_state(data):
    get = getattr(data, "get_state", None)
    return None if get is None else get()
