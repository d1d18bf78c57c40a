"""``compile``/``fit``/``evaluate``/``predict`` for Models (Keras 3's
``Trainer``).

The steps follow Keras 3: ``train_step(self, data)``, ``test_step(self,
data)`` and ``predict_step(self, data)`` get one batch as ``fit`` was
given it: ``(x, y)``, ``(x, y, sample_weight)``, or ``x`` alone (arrays
with no ``y``, or a dataset yielding only inputs);
:func:`pyresnet.utils.unpack_x_y_sample_weight` takes it apart.
``train_step``/``test_step`` update the stateful metrics (``model.metrics``:
the loss tracker ``loss``, per-output ``<output>_loss`` trackers with
several outputs, and ``compile_metrics``) and return their results; the
loops reset them at the start of every epoch and evaluation and report
what the last step returned (nested dicts flattened), as Keras does.

The earlier form ``train_step(self, x, y)`` / ``test_step(self, x, y)``
still works in a subclass: an override that takes two positional
arguments is called with ``x`` and ``y`` (sample weights are then not
passed), and its returned values are per-batch values that the loop
averages over the samples, as before.

The loops call the steps through ``make_train_function()`` /
``make_test_function()`` / ``make_predict_function()``, which compile them
with ``pyresnet.compile`` unless ``run_eagerly=True`` (``jit_compile``
chooses the jit passes).

A pass over the data is one loop over the calls of an
:class:`EpochIterator` (Keras 3's): each call runs one or more steps and
returns the last step's logs; array data always comes through the C batch
iterator (csrc/pipeline.c), as datasets made in C do; only a generic Python
iterable is batched in Python.

With ``compile(steps_per_execution=N)`` (Keras 3), ``fit`` and ``evaluate``
run N steps per compiled call: one loop node (:mod:`pyresnet.loops`) whose
body is the step, fed by the C input pipeline (the batches of arrays, or of
a :class:`pyresnet.data.Dataset` made in C); the metrics are updated in
the loop and the call returns the last step's logs (the loop's batches
are fixed when the call is planned: the executor never calls back into
Python).  The batch callbacks
and the progress bar then update once per call, with the index of the
group's first batch (``on_*_batch_begin``, before the call) and last batch
(``on_*_batch_end``), as in Keras; a last group of fewer steps runs the same
graph.  Data the pipeline cannot make in C (a Python map, a generic
iterable, sample or class weights, ``steps_per_epoch``, dtypes other than
the model's), an ``(x, y)`` step override, a distribution strategy and
``predict`` run one step per call.
"""
import inspect
import warnings

import numpy as np

from .. import callbacks as callbacks_module
from .. import distribute
from .. import losses as losses_module
from .. import metrics as metrics_module
from .. import ops
from .. import optimizers
from ..autodiff import GradientTape
from ..compile import compile as pr_compile, name_scope
from ..layers.input_spec import check_input_specs
from ..loops import run_batches
from ..tensor import Tensor
from ..utils import tree
from ..utils.data import unpack_x_y_sample_weight
from . import data_adapter


def _verbosity(verbose):
    if verbose == "auto":
        return 1
    if verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2, got {verbose!r}")
    return verbose


def _validation_epochs(freq):
    """``fit``'s ``validation_freq`` as a test of a 1-based epoch number.
    Raises ValueError for anything but an int >= 1 or a list/tuple/set of
    ints >= 1 (Keras: ``Trainer._should_eval``)."""
    def positive(n):
        return isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1
    if positive(freq):
        return lambda epoch: epoch % int(freq) == 0
    if isinstance(freq, (list, tuple, set, frozenset)) and all(positive(n) for n in freq):
        epochs = {int(n) for n in freq}
        return lambda epoch: epoch in epochs
    raise ValueError(f"validation_freq must be an int >= 1 or a list of epoch numbers >= 1, "
                     f"got {freq!r}")


def _per_output(model_name, value, names, what):
    """A dict keyed by output name -> a list with one entry per output."""
    unknown = set(value) - set(names)
    if unknown:
        raise ValueError(f'Model "{model_name}": {what} for unknown outputs {sorted(unknown)}; '
                         f"outputs are {names}")
    return [value.get(n) for n in names]


def _per_output_list(model_name, value, names, what, default):
    """``value`` (one for all, a list with one per output, or a dict by
    output name) as a list with one entry per output."""
    if isinstance(value, dict):
        return [default if v is None else v
                for v in _per_output(model_name, value, names, what)]
    if isinstance(value, (list, tuple)):
        if len(value) != len(names):
            raise ValueError(f'Model "{model_name}" has {len(names)} output(s) {names}, got '
                             f"{len(value)} {what}")
        return list(value)
    return [default if value is None else value] * len(names)


def _batch_size(t):
    """The number of samples of ``t`` as a float32 scalar: a Python float
    when the batch size is static, else a Tensor (under tracing)."""
    if t.shape[0] is not None:
        return float(t.shape[0])
    per_sample = int(np.prod([d for d in t.shape[1:]])) if t.shape[1:] else 1
    return ops.scale(ops.sum(ops.ones_like(t)), 1.0 / per_sample)


def _legacy_step(method):
    """Whether a step override takes ``(x, y)`` (two positional arguments
    after ``self``) instead of Keras 3's ``(data)``."""
    params = [p for p in list(inspect.signature(method).parameters.values())[1:]
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(params) >= 2 and params[1].default is inspect.Parameter.empty


def pythonify_logs(logs):
    """A step's returned logs as ``{name: float}``: Tensors and NumPy values
    converted, nested dicts (``compile_metrics``) flattened into their keys."""
    out = {}
    for key, value in (logs or {}).items():
        if isinstance(value, dict):
            out.update(pythonify_logs(value))
        else:
            out[key] = float(np.asarray(value))
    return out


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
        # the distribution train_function was made for (a user's own: kept)
        self._train_distribution = distribute.NO_DISTRIBUTION
        self.steps_per_execution = 1
        self._group_functions = {}
        self._losses = []
        self._loss_tracker = None
        self._compile_metrics = None

    # ---- configuration ------------------------------------------------------

    def compile(self, optimizer="rmsprop", loss=None, loss_weights=None, metrics=None,
                weighted_metrics=None, run_eagerly=None, jit_compile="auto",
                steps_per_execution=1):
        """Configure training, as ``keras.Model.compile``.

        Args:
            optimizer: a name (``"sgd"``, ``"adam"``, ``"adamw"``,
                ``"rmsprop"``) or an optimizer object
                (:mod:`pyresnet.optimizers`).
            loss: a Keras loss name, a :class:`pyresnet.losses.Loss` or a
                function ``(y_true, y_pred) -> per-sample losses``; for several
                outputs one loss for all, a list (one per output) or a dict by
                output layer name.  None (or None for an output) is allowed
                when the model's losses come from ``add_loss`` or its own
                ``train_step``; the total loss is the weighted sum over the
                outputs plus ``model.losses``.
            loss_weights: a float for all outputs, a list (one per output) or
                a dict by output name: each output's loss is multiplied by it
                (default 1).
            metrics: list of metric names (``"accuracy"`` resolves from the
                loss as Keras does), metric objects or functions, applied to
                every output; or, for several outputs, a list of such lists
                (one per output) or a dict by output layer name.  Logged as
                ``<name>``, or ``<output>_<name>`` with several outputs.
                They ignore sample weights, as in Keras.
            weighted_metrics: as ``metrics``, weighted by ``sample_weight``
                (and ``class_weight``).
            run_eagerly: None/False/True: True runs the steps eagerly; else
                ``fit``/``evaluate``/``predict`` run them compiled
                (``pyresnet.compile``), as Keras does.
            jit_compile: ``"auto"``/True/False: the compiled steps' jit
                passes (fusion, in-place updates, kernels chosen by timing);
                ``"auto"`` = False.
            steps_per_execution (int): training/evaluation steps per
                compiled call (see the module docstring); 1 calls the step
                from Python for every batch.
        Raises:
            ValueError/TypeError: for unknown names or mismatched structures.
        """
        if isinstance(steps_per_execution, bool) or \
                not isinstance(steps_per_execution, (int, np.integer)) or steps_per_execution < 1:
            raise ValueError(f"steps_per_execution must be an int >= 1, got "
                             f"{steps_per_execution!r}")
        names = self.output_names
        loss_list = _per_output_list(self.name, loss, names, "losses", None)
        losses = [None if item is None else losses_module.get(item) for item in loss_list]
        weights = [float(w) for w in
                   _per_output_list(self.name, loss_weights, names, "loss weights", 1.0)]
        entries = []
        for group, weighted in ((metrics, False), (weighted_metrics, True)):
            if isinstance(group, dict):
                per_output = _per_output(self.name, group, names, "metrics")
            elif isinstance(group, (list, tuple)) and len(names) > 1 \
                    and len(group) == len(names) \
                    and all(m is None or isinstance(m, (list, tuple)) for m in group):
                per_output = list(group)
            else:
                per_output = [group] * len(names)
            for out, (name, items, loss_obj) in enumerate(zip(names, per_output, losses)):
                for item in items or []:
                    metric = metrics_module.get(item, loss_obj)
                    if len(names) > 1 and not isinstance(item, metrics_module.Metric):
                        metric.name = f"{name}_{metric.name}"
                    entries.append((metric.name, out, metric, weighted))
        self.optimizer = optimizers.get(optimizer)
        self._losses, self._loss_weights = losses, weights
        self._loss_tracker = metrics_module.Mean(name="loss")
        self._output_loss_trackers = [metrics_module.Mean(name=f"{n}_loss") for n in names] \
            if len(names) > 1 else []
        self._compile_metrics = metrics_module.CompileMetrics(entries)
        self._compile_args = {"loss": loss, "metrics": metrics, "run_eagerly": run_eagerly,
                              "jit_compile": jit_compile, "loss_weights": loss_weights,
                              "weighted_metrics": weighted_metrics,
                              "steps_per_execution": int(steps_per_execution)}  # for model.save
        self.run_eagerly = run_eagerly
        self.jit_compile = jit_compile
        self.steps_per_execution = int(steps_per_execution)
        self.compiled = True
        self.train_function = self.test_function = self.predict_function = None
        self._group_functions = {}

    @property
    def output_names(self):
        """Names of the layers producing the outputs (functional models and
        built Sequentials), else ``["output"]`` (one output assumed)."""
        graph = getattr(self, "_graph", None)
        if graph is None:
            return ["output"]
        return [t._history[0].layer.name for t in graph.flat_outputs]

    @property
    def metrics(self):
        """The stateful metrics ``fit``/``evaluate`` reset at every epoch or
        evaluation (Keras 3): once compiled, the loss tracker (a
        :class:`pyresnet.metrics.Mean` named ``loss``), one ``<output>_loss``
        tracker per output when there are several, and the
        :class:`pyresnet.metrics.CompileMetrics` of ``compile(metrics=)``;
        ``[]`` before.  A subclass may override this property to list its
        own metric objects (they are then reset for it)."""
        if not self.compiled:
            return []
        return [self._loss_tracker, *self._output_loss_trackers, self._compile_metrics]

    @property
    def metrics_names(self):
        """``[m.name for m in model.metrics]`` (Keras 3: ``["loss",
        "compile_metrics"]`` once compiled)."""
        return [m.name for m in self.metrics]

    # ---- the steps ---------------------------------------------------------------

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The total loss of a batch (Keras 3): the sum over outputs of each
        compiled loss (weighted by ``sample_weight`` and ``loss_weights``)
        plus the sum of ``model.losses`` (``add_loss`` terms and weight
        regularizers); a float32 scalar Tensor.  With several outputs it
        also updates the ``<output>_loss`` trackers.  ``x`` and ``training``
        are unused (Keras's signature).

        Raises:
            ValueError: when there is no loss at all (no compiled loss and no
                ``add_loss`` term), or a compiled loss gets no targets.
        """
        return self._compute_losses(y, y_pred, sample_weight)

    def _compute_losses(self, y, y_pred, sample_weight=None, track=True):
        preds = tree.flatten(y_pred)
        total = None
        if any(loss is not None for loss in self._losses):
            if y is None:
                raise ValueError(f'Model "{self.name}": the compiled loss needs targets, but the '
                                 "data has no y; pass y to fit/evaluate (or yield (x, y) "
                                 "batches), or compile without a loss")
            ys = tree.flatten(y)
            weights = tree.flatten(sample_weight) if sample_weight is not None else None
            for i, (loss, w) in enumerate(zip(self._losses, self._loss_weights)):
                if loss is None:
                    continue
                sw = None if weights is None else weights[i] if len(weights) > 1 else weights[0]
                value = loss(ys[i], preds[i], sample_weight=sw)
                if self._output_loss_trackers and track:
                    self._output_loss_trackers[i].update_state(
                        value, sample_weight=_batch_size(preds[i]))
                if w != 1.0:
                    value = ops.scale(value, w)
                total = value if total is None else ops.add(total, value)
        for term in self.losses:
            total = term if total is None else ops.add(total, term)
        if total is None:
            raise ValueError(f'Model "{self.name}": no loss to compute; pass a `loss` to '
                             "compile(), or add loss terms with add_loss() in the layers")
        return total

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """Update the compiled metrics with a batch and return every
        metric's result (:meth:`get_metrics_result`), as Keras 3."""
        if self._compile_metrics is not None and y is not None:
            self._compile_metrics.update_state(y, y_pred, sample_weight)
        return self.get_metrics_result()

    def get_metrics_result(self):
        """``{name: result}`` of ``model.metrics`` (dict results, such as
        ``compile_metrics``, merged in): float32 scalar Tensors."""
        logs = {}
        for metric in self.metrics:
            with name_scope(metric.name):
                result = metric.result()
            if isinstance(result, dict):
                logs.update(result)
            else:
                logs[metric.name] = result
        return logs

    def train_step(self, data):
        """One optimisation step on a batch (Keras 3's ``train_step``).

        Args:
            data: ``(x, y)``, ``(x, y, sample_weight)`` or ``x``: x a float32
                Tensor (or list, one per input) batch first, y labels or
                targets (or a list, one per output), sample_weight float32
                ``(batch,)``.
        Returns:
            dict: ``loss`` (and per-output losses), then the metrics: the
            running results since the epoch began, float32 scalar Tensors.
        """
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
        weights = self.trainable_weights
        grads = tape.gradient(loss, weights)
        self.optimizer.apply_gradients(zip(grads, weights))
        with name_scope("metrics"):  # (traced: the metric updates' scope)
            self._loss_tracker.update_state(loss,
                                            sample_weight=_batch_size(tree.flatten(y_pred)[0]))
            logs = self.compute_metrics(x, y, y_pred, sample_weight)
        return logs

    def test_step(self, data):
        """Loss and metrics of a batch in inference mode (see train_step)."""
        x, y, sample_weight = unpack_x_y_sample_weight(data)
        y_pred = self(x, training=False)
        loss = self.compute_loss(x, y, y_pred, sample_weight, training=False)
        with name_scope("metrics"):  # (traced: the metric updates' scope)
            self._loss_tracker.update_state(loss,
                                            sample_weight=_batch_size(tree.flatten(y_pred)[0]))
            return self.compute_metrics(x, y, y_pred, sample_weight)

    def predict_step(self, data):
        """The model's output on a batch (``data``: x, or a tuple whose first
        item is x), in inference mode."""
        x, _, _ = unpack_x_y_sample_weight(data)
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

    def _uses_legacy_step(self, name):
        method = getattr(type(self), name)
        return method is not getattr(Trainer, name) and _legacy_step(method)

    def _data_step(self, name):
        """The bound step ``name`` as a function of one ``data`` argument
        (an ``(x, y)`` override is adapted)."""
        method = getattr(self, name)
        if not self._uses_legacy_step(name):
            return method

        def legacy(data):
            x, y, _ = unpack_x_y_sample_weight(data)
            return method(x, y)
        legacy.__name__ = name
        return legacy

    def make_train_function(self, force=False):
        """The function ``fit`` calls on each batch: ``train_step`` (wrapped
        by the distribution in force, which averages the gradients and the
        logs over the ranks: :class:`pyresnet.distribute.DataParallel`),
        compiled unless ``run_eagerly=True``."""
        strategy = distribute.distribution() or distribute.NO_DISTRIBUTION
        if self.train_function is None or force or strategy is not self._train_distribution:
            self.train_function = self._step_function(
                strategy._wrap_step(self, self._data_step("train_step")))
            self._train_distribution = strategy
        return self.train_function

    def make_test_function(self, force=False):
        """The function ``evaluate`` calls on each batch: ``test_step``,
        compiled unless ``run_eagerly=True``."""
        if self.test_function is None or force:
            self.test_function = self._step_function(self._data_step("test_step"))
        return self.test_function

    def make_predict_function(self, force=False):
        """The function ``predict`` calls on each batch: ``predict_step``,
        compiled unless ``run_eagerly=True``."""
        if self.predict_function is None or force:
            self.predict_function = self._step_function(self.predict_step)
        return self.predict_function

    def _epoch_iterator(self, data, mode, function):
        """How a pass of ``mode`` ("train"/"test") over ``data`` runs (see
        :class:`EpochIterator`): ``steps_per_execution`` steps per compiled
        call when the data can feed a compiled loop, else one call of
        ``function`` (the step) per batch (see the module docstring)."""
        name = f"{mode}_step"
        if self.steps_per_execution <= 1 or self.run_eagerly or self._uses_legacy_step(name) \
                or distribute.distribution() is not None:
            return EpochIterator(data, function)
        passes = data_adapter.loop_passes(data)
        if passes is None:
            return EpochIterator(data, function)
        probe, next_pass, n_x = passes
        key = (mode, n_x, tuple((dtype, shape[1:]) for dtype, shape, _ in probe.batch_shapes))
        entry = self._group_functions.get(key)
        if entry is None:
            feed, step = _GroupFeed(probe), getattr(self, name)

            def group(feed):
                return run_batches(feed._loop_source(), step, n_x)

            entry = (feed, pr_compile(group, jit_compile=self.jit_compile is True))
            self._group_functions[key] = entry
        return _GroupedEpochIterator(entry[0], entry[1], next_pass, self.steps_per_execution)

    # ---- data checks ----------------------------------------------------------------

    def _custom_steps(self):
        """Whether ``train_step`` or ``test_step`` is the user's: the data
        checks that run the model then do not apply (such a model may have
        no ``call``, e.g. a GAN)."""
        return any(getattr(type(self), n) is not getattr(Trainer, n)
                   for n in ("train_step", "test_step"))

    def _by_output_name(self, y):
        """A dict of targets keyed by output name -> the list in output order."""
        if not isinstance(y, dict):
            return y
        names = self.output_names
        if set(y) != set(names):
            raise ValueError(f'Model "{self.name}" has outputs {names}, got targets for '
                             f"{sorted(y)}")
        ordered = [y[n] for n in names]
        return ordered if len(ordered) > 1 else ordered[0]

    def _check_x(self, x):
        """x as NumPy arrays, checked against the model's Input shapes."""
        x = self._by_input_name(x)
        count = len(self.input_spec) if isinstance(self.input_spec, list) else 1
        xs = data_adapter.to_arrays(self.name, "x", x, count)
        if self.input_spec is not None:
            check_input_specs(self, self.input_spec, [a.shape for a in xs], self._build_shapes)
        return xs

    def _check_arrays(self, x, y, sample_weight=None):
        """Check and convert ``(x, y, sample_weight)`` before any step runs:
        sample counts, dtypes, shapes against the model's Inputs, label
        ranges against the output sizes; then (for the built-in steps) run
        the model and the loss once in inference mode on the first sample,
        which builds the model and raises any other error now, while no
        weight has changed.

        Returns:
            (xs, ys, sws, y_dtypes): lists of NumPy arrays (ys/sws None when
            absent) and the label dtypes.
        """
        if not self.compiled:
            raise RuntimeError(f'Model "{self.name}" must be compiled before fit/evaluate: call '
                               "model.compile(optimizer, loss, metrics)")
        custom = self._custom_steps()
        x, y = self._by_input_name(x), self._by_output_name(y)
        sample_weight = self._by_output_name(sample_weight)
        xs = self._check_x(x) if not custom else data_adapter.to_arrays(self.name, "x", x,
                                                                         len(tree.flatten(x)))
        n_out = len(self._losses) if not custom else None
        ys = None if y is None else data_adapter.to_arrays(
            self.name, "y", y, n_out if n_out is not None else len(tree.flatten(y)))
        sws = None if sample_weight is None else data_adapter.to_arrays(
            self.name, "sample_weight", sample_weight, len(tree.flatten(sample_weight)))
        data_adapter.check_lengths(self.name, xs, (ys or []) + (sws or []))
        if custom:
            return xs, ys, sws, None if ys is None else \
                [np.int32 if a.dtype.kind in "iub" else np.float32 for a in ys]
        x1 = next(iter(data_adapter.ArrayBatches([a[:1] for a in xs], None, 1)))
        y_pred = tree.flatten(self(x1, training=False))
        if ys is None:
            return xs, None, sws, None
        y_dtypes = [self._check_labels(i, a, loss, tuple(pred.shape))
                    for i, (a, loss, pred) in enumerate(zip(ys, self._losses, y_pred))]
        y1 = [Tensor(np.ascontiguousarray(a[:1], dt)) for a, dt in zip(ys, y_dtypes)]
        self._compute_losses(y1 if len(y1) > 1 else y1[0], y_pred, track=False)
        return xs, ys, sws, y_dtypes

    def _dataset_batches(self, dataset):
        """A dataset's batches, its first batch checked as arrays are."""
        if not self.compiled:
            raise RuntimeError(f'Model "{self.name}" must be compiled before fit/evaluate')

        def check(xs, ys, sws):
            return self._check_arrays(xs if len(xs) > 1 else xs[0],
                                      None if ys is None else ys if len(ys) > 1 else ys[0],
                                      None if sws is None else sws if len(sws) > 1 else sws[0])[3]
        return data_adapter.DatasetBatches(dataset, check, arrange=self._by_name)

    def _by_name(self, x, y, sample_weight):
        """Dict inputs and targets (keyed by Input and output names) as lists
        in the model's order."""
        return (self._by_input_name(x), self._by_output_name(y),
                self._by_output_name(sample_weight))

    def _batches(self, x, y, batch_size, shuffle=False, sample_weight=None, class_weight=None,
                 unsized=False):
        """Checked batches of arrays or of a dataset (whose first batch is
        checked the same way when it arrives; ``unsized``: an iterable
        without ``len()`` counts as a dataset, when steps are given)."""
        if data_adapter.is_dataset(x, unsized):
            if y is not None or sample_weight is not None:
                raise ValueError(f'Model "{self.name}": `y` and `sample_weight` must be None when '
                                 "`x` is a dataset (it yields (x, y[, sample_weight]) batches)")
            if class_weight is not None:
                raise ValueError(f'Model "{self.name}": class_weight needs array data; give a '
                                 "dataset per-sample weights as (x, y, sample_weight) batches")
            return self._dataset_batches(x)
        xs, ys, sws, y_dtypes = self._check_arrays(x, y, sample_weight)
        if class_weight is not None:
            sws = [self._class_weights(class_weight, ys, sws)]
        return data_adapter.ArrayBatches(xs, ys, batch_size, shuffle=shuffle, y_dtypes=y_dtypes,
                                         sws=sws)

    def _class_weights(self, class_weight, ys, sws):
        """Per-sample weights ``class_weight[label]`` (times the given
        ``sample_weight``), for one output with sparse or one-hot labels.

        Raises:
            ValueError: for several outputs, a class missing from the dict,
                or no labels.
        """
        if ys is None or len(ys) != 1:
            raise ValueError(f'Model "{self.name}": class_weight needs labels of exactly one '
                             "output")
        if not isinstance(class_weight, dict):
            raise ValueError(f"class_weight must be a dict {{class index: weight}}, got "
                             f"{class_weight!r}")
        y = ys[0]
        labels = y.reshape(len(y)) if y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1) \
            else np.argmax(y.reshape(len(y), -1), axis=1)
        labels = labels.astype(np.int64)
        missing = sorted(set(np.unique(labels).tolist()) - {int(k) for k in class_weight})
        if missing:
            raise ValueError(f'Model "{self.name}": class_weight has no weight for classes '
                             f"{missing}")
        table = np.zeros(max(int(k) for k in class_weight) + 1, np.float32)
        for k, w in class_weight.items():
            table[int(k)] = float(w)
        weights = table[labels]
        if sws is not None:
            weights = weights * np.asarray(sws[0], np.float32).reshape(len(y))
        return weights.astype(np.float32)

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
        if loss is None:
            return np.int32 if y.dtype.kind in "iu" else np.float32
        # Regression and binary losses compute in float32 (Keras casts y_true).
        sparse_metric = any(out == i and m.fn in (metrics_module.sparse_categorical_accuracy,
                                                  metrics_module._accuracy_by_shape)
                            for _, out, m, _ in self._compile_metrics.entries
                            if isinstance(m, metrics_module.MeanMetricWrapper))
        return np.int32 if y.dtype.kind in "iu" and sparse_metric and \
            not losses_module.is_binary(loss) else np.float32

    # ---- loops ------------------------------------------------------------------------

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, initial_epoch=0, steps_per_epoch=None, validation_steps=None,
            validation_batch_size=None, validation_freq=1):
        """Train the model, as ``keras.Model.fit``.

        Args:
            x: float32 or uint8 array ``(N, ...)`` (uint8 is converted to
                float32 as given: scale images yourself, as in Keras), or a
                list of arrays for several inputs; or a dataset yielding
                ``(x, y)``, ``(x, y, sample_weight)`` or ``x`` batches (a
                :class:`pyresnet.data.Dataset`, a
                :class:`pyresnet.utils.PyDataset`, or any re-iterable with
                ``len()``; any iterable with ``steps_per_epoch``), with ``y``
                None.
            y: labels ``(N,)``/``(N, 1)`` ints for sparse losses, float
                targets otherwise; a list for several outputs; None when
                the model needs no targets (``add_loss`` or its own
                ``train_step``: each batch is then ``x`` alone).
            batch_size (int): samples per step for arrays (the last batch may
                be smaller; None means 32); unused with a dataset.
            epochs (int): index of the last epoch (runs ``initial_epoch`` to
                ``epochs - 1``).
            verbose: ``"auto"`` (= 1), 0 silent, 1 progress bar, 2 a line per
                epoch.
            callbacks: list of :class:`pyresnet.callbacks.Callback`.  One
                that changes what trains (a Variable's ``trainable``) sets
                ``model.train_function = None`` in ``on_epoch_begin``: the
                step is traced again for that epoch (Keras needs another
                ``compile()``).
            validation_split (float): fraction in [0, 1) of the array samples,
                the last ones before shuffling, held out for validation.
            validation_data: ``(x_val, y_val)`` or ``(x_val, y_val,
                sample_weight_val)`` arrays, or a dataset; takes precedence
                over ``validation_split``.  Evaluated after the epochs
                ``validation_freq`` names, in inference mode (callbacks see
                ``on_test_*``).
            shuffle (bool): reshuffle array samples every epoch (a dataset
                shuffles itself).
            class_weight (dict): class index -> weight; each sample's loss
                is weighted by its class's weight (one output; array data).
            sample_weight: float array ``(N,)``: per-sample loss weights
                (multiplied by ``class_weight`` when both are given).
            initial_epoch (int): epoch to start at (resuming).
            steps_per_epoch (int): batches per epoch; the batches continue
                from one epoch to the next (a dataset is iterated once
                through over several epochs); when the data run out, a
                warning says so and the epoch ends there (Keras's rule), the
                next one starting a new pass.
            validation_steps (int): batches of the validation data per
                evaluation (the first ones of each pass).
            validation_batch_size (int): batch size of validation arrays
                (default ``batch_size``).
            validation_freq: an int N: validate after every N-th epoch
                (epochs counted from 1: N, 2N, ...); or a list of the 1-based
                epochs to validate after (Keras's rule).  The logs and the
                history of the other epochs have no ``val_*`` entries.
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
        for name, value in (("steps_per_epoch", steps_per_epoch),
                            ("validation_steps", validation_steps)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        should_validate = _validation_epochs(validation_freq)
        val = None
        val_batch_size = validation_batch_size or batch_size
        if data_adapter.is_dataset(x, steps_per_epoch is not None):
            if validation_split:
                raise ValueError("validation_split is not supported for a dataset; pass "
                                 "validation_data")
            data = self._batches(x, y, batch_size, sample_weight=sample_weight,
                                 class_weight=class_weight, unsized=True)
        else:
            xs, ys, sws, y_dtypes = self._check_arrays(x, y, sample_weight)
            if class_weight is not None:
                sws = [self._class_weights(class_weight, ys, sws)]
            if validation_split and validation_data is None:
                parts = [data_adapter.split(a, validation_split) if a is not None else (None, None)
                         for a in (xs, ys, sws)]
                (xs, vx), (ys, vy), (sws, vsw) = parts
                data_adapter.check_lengths(self.name, xs, (ys or []) + (sws or []))
                data_adapter.check_lengths(self.name, vx, (vy or []) + (vsw or []))
                val = data_adapter.ArrayBatches(vx, vy, val_batch_size, y_dtypes=y_dtypes,
                                                sws=vsw)
            data = data_adapter.ArrayBatches(xs, ys, batch_size, shuffle=shuffle,
                                             y_dtypes=y_dtypes, sws=sws)
        if validation_data is not None:
            if data_adapter.is_dataset(validation_data, validation_steps is not None):
                val = self._batches(validation_data, None, val_batch_size, unsized=True)
            elif isinstance(validation_data, (list, tuple)) and len(validation_data) in (2, 3):
                val = self._batches(validation_data[0], validation_data[1], val_batch_size,
                                    sample_weight=validation_data[2]
                                    if len(validation_data) == 3 else None)
            else:
                raise ValueError("validation_data must be (x_val, y_val), (x_val, y_val, "
                                 "sample_weight_val) or a dataset")
        strategy = distribute.distribution() or distribute.NO_DISTRIBUTION
        data, callbacks, verbose = strategy._fit_begin(data, callbacks, verbose)
        if steps_per_epoch is not None:
            data = data_adapter.Steps(data, steps_per_epoch, persistent=True)
        if val is not None and validation_steps is not None:
            val = data_adapter.Steps(val, validation_steps, persistent=False)
        cbs = self._callbacks(callbacks, data, verbose, add_history=True, epochs=epochs)
        train_function = self.make_train_function()
        epoch_iterator = self._epoch_iterator(data, "train", train_function)
        averaged = self._uses_legacy_step("train_step")
        self.stop_training = False
        self.history = cbs.history
        self._fit_progress = progress = FitProgress(self, data, val, cbs.history, initial_epoch)
        try:
            cbs.on_train_begin()
            strategy._train_begin(self, progress)
            logs, trained = None, False
            for epoch in range(progress.epoch, epochs):
                trained = True
                progress.start_epoch(epoch)
                cbs.on_epoch_begin(epoch)
                if self.train_function is None:  # a callback changed what trains: trace again
                    self._group_functions = {k: v for k, v in self._group_functions.items()
                                             if k[0] != "train"}
                    train_function = self.make_train_function()
                    epoch_iterator = self._epoch_iterator(data, "train", train_function)
                logs = self._run(epoch_iterator, cbs, "train", model=self, progress=progress,
                                 averaged=averaged)
                strategy._epoch_end(self)
                if val is not None and should_validate(epoch + 1):
                    val_logs = self._evaluate_batches(val, cbs)
                    logs.update({f"val_{k}": v for k, v in val_logs.items()})
                progress.end_epoch(logs)
                cbs.on_epoch_end(epoch, logs)
                if self.stop_training:
                    break
            if trained and hasattr(self.optimizer, "finalize_variable_values"):
                # Keras 3: the EMA / Lookahead weights replace the trained ones
                self.optimizer.finalize_variable_values(self.trainable_weights)
            cbs.on_train_end(logs)
        finally:
            self._fit_progress = None
        return self.history

    def _callbacks(self, callbacks, data, verbose, add_history=False, **params):
        return callbacks_module.CallbackList(
            callbacks, self, {**params, "steps": data_adapter.known_len(data),
                              "samples": data.num_samples,
                              "batch_size": getattr(data, "batch_size", None),
                              "verbose": verbose, "samples_seen": 0},
            add_history=add_history, add_progbar=verbose != 0)

    def _reset_metrics(self):
        for metric in self.metrics:
            metric.reset_state()

    def _evaluate_batches(self, data, cbs):
        """Reset the metrics and run the test step over ``data``."""
        self._reset_metrics()
        cbs.on_test_begin()
        logs = self._run(self._epoch_iterator(data, "test", self.make_test_function()), cbs,
                         "test", averaged=self._uses_legacy_step("test_step"))
        cbs.on_test_end(logs)
        return logs

    @staticmethod
    def _run(epoch_iterator, cbs, mode, model=None, progress=None, averaged=False):
        """Run one pass of ``epoch_iterator`` (an :class:`EpochIterator`:
        each call runs one or more steps) and return the logs of the last
        step (the metrics' running results), calling the batch callbacks
        around each call with the index of its first and last batch.  With
        ``averaged`` (an ``(x, y)`` step returning per-batch values) the
        logs are instead the sample-weighted means of the values returned
        so far.  With ``model``, stop after the call at whose end a
        callback set ``model.stop_training`` (as Keras: the epoch's logs
        then cover the batches run; validation and ``on_epoch_end`` still
        follow).  With ``progress`` (a :class:`FitProgress`), the batches it
        has done already (a resumed epoch) are skipped, and it follows the
        logs."""
        logs, sums, seen, done = None, {}, 0, -1
        if progress is not None:
            logs, sums, seen, done = progress.logs, dict(progress.sums), progress.seen, \
                progress.batch
        for first, last, call in epoch_iterator.calls(done + 1):
            getattr(cbs, f"on_{mode}_batch_begin")(first)
            out, n = call()
            out = pythonify_logs(out)
            seen += n
            if averaged:
                for key, value in out.items():
                    sums[key] = sums.get(key, 0.0) + value * n
                out = {k: v / seen for k, v in sums.items()}
            logs = out
            if progress is not None:
                progress.batch, progress.logs, progress.sums, progress.seen = \
                    last, logs, sums, seen
            cbs.set_samples_seen(seen)
            getattr(cbs, f"on_{mode}_batch_end")(last, dict(logs))
            if model is not None and model.stop_training:
                break
        if logs is None:
            raise ValueError("the data yielded no batches")
        return dict(logs)

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, return_dict=False):
        """Loss and metrics in inference mode, as ``keras.Model.evaluate``
        (data as for :meth:`fit`: arrays or a dataset of batches).

        Args:
            sample_weight: float array ``(N,)`` of per-sample loss weights.
            steps (int): evaluate only the first ``steps`` batches.
        Returns:
            the loss (float) when no metric is compiled; else the list
            ``[loss, *metrics]``; or ``{name: value}`` with ``return_dict``.
            Values are means over the samples.
        Raises:
            as :meth:`fit`.
        """
        verbose = _verbosity(verbose)
        data = self._batches(x, y, batch_size, sample_weight=sample_weight,
                             unsized=steps is not None)
        if steps is not None:
            data = data_adapter.Steps(data, steps, persistent=False)
        cbs = self._callbacks(callbacks, data, verbose)
        return self._logs_result(self._evaluate_batches(data, cbs), return_dict)

    # ---- one batch (keras.Model.train_on_batch, test_on_batch, predict_on_batch) ----

    def _one_batch(self, x, y, sample_weight, class_weight):
        """The checked ``(x, y[, sample_weight])`` arrays as one batch."""
        if data_adapter.is_dataset(x, False):
            raise ValueError(f'Model "{self.name}": the *_on_batch methods take arrays (one '
                             "batch), not a dataset")
        xs, ys, sws, y_dtypes = self._check_arrays(x, y, sample_weight)
        if class_weight is not None:
            sws = [self._class_weights(class_weight, ys, sws)]
        return next(iter(data_adapter.ArrayBatches(xs, ys, len(xs[0]), y_dtypes=y_dtypes,
                                                   sws=sws)))

    @staticmethod
    def _logs_result(logs, return_dict):
        """Keras's return form: the dict, else the loss alone when it is the
        only value, else the list of values."""
        logs = pythonify_logs(logs)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def train_on_batch(self, x, y=None, sample_weight=None, class_weight=None,
                       return_dict=False):
        """One training step on one batch, as ``keras.Model.train_on_batch``:
        the compiled ``train_step`` that :meth:`fit` runs, on all of ``x``
        at once.  The metrics are not reset between calls (Keras 3's rule:
        they accumulate until ``reset_metrics()``).

        Args:
            x, y: arrays (or lists/dicts of them) holding one batch.
            sample_weight: float array ``(N,)``; class_weight: as in :meth:`fit`.
            return_dict (bool): return ``{name: value}``.
        Returns:
            the loss (float) when no metric is compiled, else the list
            ``[loss, *metrics]`` (running results), or the dict.
        Raises:
            RuntimeError: when the model is not compiled; ValueError /
                TypeError: for bad data, as :meth:`fit` (before any weight changes).
        """
        batch = self._one_batch(x, y, sample_weight, class_weight)
        train_function = self.make_train_function()
        return self._logs_result(train_function(batch), return_dict)

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        """Loss and metrics of one batch in inference mode, as
        ``keras.Model.test_on_batch`` (the metrics are reset first, so the
        values are this batch's).  Arguments, returns and errors as
        :meth:`train_on_batch`."""
        batch = self._one_batch(x, y, sample_weight, None)
        self._reset_metrics()
        return self._logs_result(self.make_test_function()(batch), return_dict)

    def predict_on_batch(self, x):
        """The outputs for one batch in inference mode, as
        ``keras.Model.predict_on_batch``: NumPy float32 ``(N, ...)`` (a list
        for several outputs).  Raises as :meth:`predict`."""
        xs = self._check_x(x)
        data_adapter.check_lengths(self.name, xs, [])
        out = self.make_predict_function()(next(iter(data_adapter.ArrayBatches(xs, None,
                                                                                len(xs[0])))))
        flat = [np.array(t) for t in tree.flatten(out)]
        return flat[0] if len(flat) == 1 else flat

    def reset_metrics(self):
        """Reset the state of every compiled metric (``keras.Model.reset_metrics``)."""
        self._reset_metrics()

    @property
    def loss(self):
        """The ``loss`` given to :meth:`compile` (None before), as Keras 3's
        ``model.loss``."""
        return self._compile_args["loss"] if getattr(self, "compiled", False) else None

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """The model's outputs in inference mode, as ``keras.Model.predict``.

        Args:
            x: as for :meth:`fit`; a dataset may yield ``x`` or ``(x, y)``
                batches (``y`` is ignored).
            steps (int): predict only the first ``steps`` batches.
        Returns:
            numpy.ndarray float32 ``(N, ...)``, or a list of them for several
            outputs.
        Raises:
            ValueError/TypeError: for empty, wrongly shaped or typed input,
                naming the model or layer and the shapes.
        """
        verbose = _verbosity(verbose)
        if data_adapter.is_dataset(x, steps is not None):
            data = data_adapter.DatasetBatches(x, lambda xs, ys, sws: self._check_x(xs),
                                               inputs_only=True, arrange=self._by_name)
        else:
            xs = self._check_x(x)
            data_adapter.check_lengths(self.name, xs, [])
            data = data_adapter.ArrayBatches(xs, None, batch_size)
        if steps is not None:
            data = data_adapter.Steps(data, steps, persistent=False)
        cbs = self._callbacks(callbacks, data, verbose)
        step = self.make_predict_function()
        cbs.on_predict_begin()
        outputs, seen, out = [], 0, None
        for batch, bx in enumerate(data):
            cbs.on_predict_batch_begin(batch)
            out = step(bx)
            outputs.append([np.array(t) for t in tree.flatten(out)])
            seen += len(outputs[-1][0])
            cbs.set_samples_seen(seen)
            cbs.on_predict_batch_end(batch, {"outputs": tree.pack_sequence_as(out, outputs[-1])})
        cbs.on_predict_end()
        if not outputs:
            raise ValueError(f'Model "{self.name}": predict() got no batches')
        merged = [np.concatenate(parts) for parts in zip(*outputs)]
        return tree.pack_sequence_as(out, merged)


class FitProgress:
    """Where a ``fit`` run is, for :class:`pyresnet.callbacks.BackupAndRestore`
    (``model._fit_progress`` while ``fit`` runs): the epoch, the last batch
    done in it with the logs it returned, the state of ``model.metrics``
    (their running totals), the History, and the data's shuffling state
    (the seed and pass counter of array data, the pass counter of a
    :class:`pyresnet.data.Dataset`).  :meth:`get_state` is JSON-able;
    :meth:`set_state` (from ``on_train_begin``) makes ``fit`` continue
    exactly there: the remaining batches of that epoch, drawn from the same
    pass of the data, then the next epochs."""

    def __init__(self, model, data, val, history, initial_epoch):
        self.model, self.data, self.val, self.history = model, data, val, history
        self.epoch, self.batch, self.logs, self.sums, self.seen = initial_epoch, -1, None, {}, 0
        self._metric_state = None  # the metrics' values to restore at a resumed epoch
        self._pass = None  # the data's state at the start of the current epoch
        self._epochs, self._logs = list(history.epoch), {k: list(v) for k, v in
                                                         history.history.items()}

    def _metric_variables(self):
        return [v for m in self.model.metrics for v in m.variables]

    def start_epoch(self, epoch):
        """Begin ``epoch``: reset the metrics, or put back those of the
        resumed epoch."""
        if self.epoch != epoch or self.batch < 0:
            self.epoch, self.batch, self.logs, self.sums, self.seen = epoch, -1, None, {}, 0
            self._metric_state = None
        if self._metric_state is None:
            self.model._reset_metrics()
        else:
            for variable, value in zip(self._metric_variables(), self._metric_state):
                variable.assign(np.asarray(value, np.float32).reshape(variable.shape))
            self._metric_state = None
        self._pass = _data_state(self.data)

    def end_epoch(self, logs):
        """Record the finished epoch's ``logs`` (dict of floats) for History
        and move on to the next epoch."""
        self._epochs.append(self.epoch)  # (History records it after the other callbacks)
        for key, value in logs.items():
            self._logs.setdefault(key, []).append(value)
        self.epoch, self.batch, self.logs, self.sums, self.seen = self.epoch + 1, -1, None, {}, 0
        self._pass = None

    def get_state(self):
        """``{"epoch", "batch", "logs", "sums", "seen", "metrics", "data",
        "val", "history"}``: ``epoch`` is the epoch to run next (or the one
        under way when ``batch`` >= 0, the last batch done in it)."""
        mid = self.batch >= 0 and self._pass is not None
        return {"epoch": self.epoch, "batch": self.batch if mid else -1,
                "logs": self.logs if mid else None,
                "sums": self.sums if mid else {}, "seen": self.seen if mid else 0,
                "metrics": [np.asarray(v, np.float64).ravel().tolist()
                            for v in self._metric_variables()] if mid else None,
                "data": self._pass if mid else _data_state(self.data),
                "val": _data_state(self.val),
                "history": {"epoch": self._epochs, "history": self._logs}}

    def set_state(self, state):
        """Continue from :meth:`get_state`'s dict (see the class)."""
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])
        self.logs = state.get("logs")
        self.sums, self.seen = dict(state["sums"]), int(state["seen"])
        self._metric_state = state.get("metrics") if self.batch >= 0 else None
        for data, key in ((self.data, "data"), (self.val, "val")):
            if data is not None and state.get(key) is not None and hasattr(data, "set_state"):
                data.set_state(state[key])
        self._epochs = list(state["history"]["epoch"])
        self._logs = {k: list(v) for k, v in state["history"]["history"].items()}
        self.history.epoch = list(self._epochs)
        self.history.history = {k: list(v) for k, v in self._logs.items()}


class _GroupFeed:
    """The batches one call of a ``steps_per_execution`` function runs:
    the runner sets :attr:`batches` (the pass's C iterator), :attr:`first`
    and :attr:`count` before each call; the loop node's feeder reads them."""

    def __init__(self, probe):
        self.probe = probe
        self.batches, self.first, self.count = None, 0, 0

    def _loop_source(self):
        return self.probe, False, lambda: (self.batches, self.first, self.count)


class EpochIterator:
    """One pass over the data as calls of the step function (Keras 3's
    ``EpochIterator``): :meth:`calls` yields ``(first, last, call)`` per
    call, ``first..last`` the indices of the batches it runs and ``call()``
    -> ``(logs, samples)`` running them.  This one runs ``function`` (the
    train or test step) on one batch per call; :class:`_GroupedEpochIterator`
    runs ``steps_per_execution`` batches per compiled call.

    Args:
        data: the batches (ArrayBatches, DatasetBatches, Steps, or any
            iterable of ``(x, y[, sample_weight])`` or ``x`` batches).
        function: ``batch -> logs``.
    """

    def __init__(self, data, function):
        self.data, self.function = data, function

    def calls(self, start):
        """Start the data's next pass; yield one call per batch from batch
        ``start`` on (those before it are drawn but not run: a resumed
        epoch)."""
        for batch, element in enumerate(self.data):
            if batch >= start:
                yield batch, batch, lambda element=element: (
                    self.function(element), data_adapter.num_samples(element))


class _GroupedEpochIterator:
    """An :class:`EpochIterator` whose calls run ``group_size`` batches each
    in one call of the compiled loop ``function`` (see
    :meth:`Trainer._epoch_iterator`), reading them from the pass's C batch
    iterator through ``feed``."""

    def __init__(self, feed, function, next_pass, group_size):
        self.feed, self.function = feed, function
        self.next_pass, self.group_size = next_pass, group_size

    def calls(self, start):
        """Start the data's next pass; yield the groups of batches from
        batch ``start`` to the pass's end."""
        batches = self.next_pass()
        n_batches = len(batches)
        (_, full, short) = batches.batch_shapes[0]
        for first in range(start, n_batches, self.group_size):
            last = min(first + self.group_size, n_batches) - 1
            samples = (last - first + 1) * full[0] + (short[0] - full[0]
                                                      if last == n_batches - 1 else 0)
            yield first, last, lambda first=first, last=last, samples=samples: (
                self._run(batches, first, last), samples)

    def _run(self, batches, first, last):
        """Run batches ``first..last`` of the pass in one call: the last
        step's logs."""
        self.feed.batches, self.feed.first, self.feed.count = batches, first, last - first + 1
        try:
            return self.function(self.feed)
        finally:
            self.feed.batches = None


def _data_state(data):
    get = getattr(data, "get_state", None)
    return None if get is None else get()
