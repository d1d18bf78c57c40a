"""``Model``: a layer graph with a training API (``keras.Model``)."""
import threading

import numpy as np

from ..layers.input_spec import InputSpec
from ..layers.layer import Layer, _call_params
from ..ops.array import cast
from ..tensor import Tensor
from ..utils import tree
from . import summary as summary_module
from .functional import FunctionalGraph
from .trainer import Trainer


def _as_float32(model_name, x):
    """NumPy input, or a concrete non-float32 Tensor (uint8 images) -> float32
    (Keras converts inputs to the Input's dtype); a symbolic one is cast
    with ``ops.cast`` where available."""
    if isinstance(x, Tensor) and x.dtype != "float32":
        if x.is_symbolic or x.dtype == "bfloat16":
            return cast(x, "float32")
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        return x
    a = x
    if a.dtype.kind not in "biuf":
        raise TypeError(f'Model "{model_name}": inputs must be numeric, got dtype {a.dtype} of '
                        f"shape {a.shape}")
    return a.astype(np.float32, copy=False)


def _unbuilt_sublayers(layer):
    """(sublayer, snapshot of its attributes) for every sublayer at any depth
    that is not built yet, so a failed build can restore them."""
    found, stack, seen = [], list(layer._sublayers), set()
    while stack:
        sub = stack.pop()
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        if not sub.built:
            found.append((sub, {k: list(v) if isinstance(v, list) else v
                                for k, v in vars(sub).items()}))
        stack.extend(sub._sublayers)
    return found


_building_from = threading.local()  # the caller's inputs while a data call builds a model


class Model(Trainer, Layer):
    """A model: layers plus ``compile``/``fit``/``evaluate``/``predict``/
    ``summary``, as ``keras.Model``.  A Model is a Layer: callable on data
    or KerasTensors, nestable in other models.

    Two ways to make one:

    * functional: ``Model(inputs, outputs)`` with KerasTensors from
      ``layers.Input`` and layer calls on them; several inputs/outputs are
      lists (or dicts), a layer called twice shares its weights;
    * subclassing: define the layers in ``__init__`` and the forward pass in
      ``call(inputs, training=None)``.

    Calling a model converts NumPy inputs to float32 (uint8 images as
    given, unscaled) and checks them against the Inputs' shapes.

    Args:
        inputs, outputs: see above (both or neither).
        name (str): default ``functional`` for ``Model(inputs, outputs)``,
            else snake_case of the class name.
        trainable (bool): see :class:`pyresnet.layers.Layer`.
    Raises:
        TypeError/ValueError: for inputs/outputs that are not KerasTensors, an
            input that is not an ``Input``, or a disconnected graph.
    """

    def __init__(self, inputs=None, outputs=None, name=None, trainable=True, **kwargs):
        Layer.__init__(self, name=name, trainable=trainable, **kwargs)
        self._init_trainer()
        self._graph = None
        if (inputs is None) != (outputs is None):
            raise ValueError(f'Model "{self.name}": pass both `inputs` and `outputs` (functional '
                             "model) or neither (subclassed model)")
        if inputs is not None:
            self._init_graph(inputs, outputs)

    @classmethod
    def _default_name(cls):
        return "functional" if cls is Model else super()._default_name()

    def _init_graph(self, inputs, outputs):
        graph = FunctionalGraph(self.name, inputs, outputs)
        self._graph = graph
        self._functional_layers = graph.layers
        self.inputs, self.outputs = graph.flat_inputs, graph.flat_outputs
        shapes = [t.shape for t in graph.flat_inputs]
        self.input_spec = [InputSpec(ndim=len(s), axes={i: d for i, d in enumerate(s) if i})
                           for s in shapes]
        self._build_shapes = shapes[0] if len(shapes) == 1 else shapes
        self.built = True

    @property
    def input(self):
        """A functional model's input KerasTensor(s), as given to the
        constructor (else :attr:`Layer.input`)."""
        return self._graph.inputs if self._graph is not None else Layer.input.fget(self)

    @property
    def output(self):
        """A functional model's output KerasTensor(s), as given to the
        constructor (else :attr:`Layer.output`)."""
        return self._graph.outputs if self._graph is not None else Layer.output.fget(self)

    @property
    def input_shape(self):
        """A functional model's input shape(s), batch dimension first (None:
        any), as Keras 3's; AttributeError for a model without a graph."""
        return self._graph_shapes("inputs", "input_shape")

    @property
    def output_shape(self):
        """A functional model's output shape(s), as :attr:`input_shape`."""
        return self._graph_shapes("outputs", "output_shape")

    def _graph_shapes(self, tensors, what):
        if getattr(self, "_graph", None) is None:
            raise AttributeError(f'Model "{self.name}" has no {what}: only functional models '
                                 "(and built Sequential models) have one")
        shapes = [tuple(t.shape) for t in getattr(self, tensors)]
        return shapes[0] if len(shapes) == 1 else shapes

    @property
    def layers(self):
        """The model's layers: in graph order for functional models (Inputs
        first), else the sublayers in attribute order."""
        return list(self._graph.layers) if self._graph is not None else self._sublayers

    def get_layer(self, name=None, index=None):
        """A layer by name or by index in :attr:`layers`.

        Raises:
            ValueError: when no layer matches.
        """
        layers = self.layers
        if index is not None:
            if not -len(layers) <= index < len(layers):
                raise ValueError(f'Model "{self.name}" has {len(layers)} layers, no index {index}')
            return layers[index]
        for layer in layers:
            if layer.name == name:
                return layer
        raise ValueError(f'Model "{self.name}" has no layer named {name!r}; layers: '
                         f"{[layer.name for layer in layers]}")

    def _by_input_name(self, inputs):
        """A dict of inputs keyed by Input name -> the list in the model's
        input order (Keras matches dict inputs by name).

        Raises:
            ValueError: for missing or unknown names.
        """
        if not isinstance(inputs, dict) or self._graph is None \
                or isinstance(self._graph.inputs, dict):
            return inputs
        names = [t.name for t in self._graph.flat_inputs]
        if set(inputs) != set(names):
            raise ValueError(f'Model "{self.name}" has inputs {names}, got a dict with keys '
                             f"{sorted(inputs)}")
        ordered = [inputs[n] for n in names]
        return ordered if len(ordered) > 1 else ordered[0]

    def __call__(self, inputs, *args, **kwargs):
        inputs = self._by_input_name(inputs)
        inputs = tree.map_structure(lambda x: _as_float32(self.name, x), inputs)
        outputs = super().__call__(inputs, *args, **kwargs)
        # A model's outputs are float32 whatever its layers compute in (Keras's
        # mixed-precision rule for the final outputs).
        return tree.map_structure(
            lambda t: cast(t, "float32") if isinstance(t, Tensor) and t.dtype == "bfloat16"
            else t, outputs)

    def _call_eager(self, inputs, args, kwargs):
        if self._graph is not None or self.built:
            return super()._call_eager(inputs, args, kwargs)
        outer = getattr(_building_from, "inputs", None)
        _building_from.inputs = (self, inputs)
        try:
            return super()._call_eager(inputs, args, kwargs)
        finally:
            _building_from.inputs = outer

    def build(self, input_shape):
        """Build a subclassed model for inputs of ``input_shape`` (batch
        first) by running ``call`` once on zeros of batch 1 in inference
        mode, so that its weights exist (``summary``, ``count_params``).
        When that run fails during a call on data, ``call`` runs again on the
        caller's inputs, so the error names their shapes (and batch size),
        not the zeros'.  Functional models are built when made."""
        if self._graph is None:
            accepts_training = _call_params(type(self).call)[0]
            kw = {"training": False} if accepts_training else {}
            unbuilt = _unbuilt_sublayers(self)
            try:
                try:
                    self.call(self._zero_batch(input_shape), **kw)
                except (ValueError, TypeError):
                    owner, inputs = getattr(_building_from, "inputs", None) or (None, None)
                    if owner is not self:
                        raise
                    self.call(inputs, **kw)  # raises again, about the caller's shapes
            except BaseException:
                for layer, state in unbuilt:  # a failed build leaves no sublayer built
                    layer.__dict__.clear()
                    layer.__dict__.update(state)
                raise

    def call(self, inputs, training=None):
        """Run the functional graph (subclassed models override this)."""
        if self._graph is None:
            raise NotImplementedError(
                f'Model "{self.name}": a subclassed Model must implement call(); or build a '
                "functional model with Model(inputs, outputs)")
        flat = tree.flatten(inputs)
        return self._graph.run(flat)

    def compute_output_shape(self, input_shape):
        if self._graph is None:
            return super().compute_output_shape(input_shape)
        return self._graph.output_shapes(input_shape)

    def summary(self, line_length=None, print_fn=None):
        """Print a Keras-like table of the layers (name and type, output
        shape, parameter count; "Connected to" for non-sequential graphs),
        then the total, trainable and non-trainable parameter counts with
        their float32 size (as Keras: 1 KB = 1024 bytes).

        Args:
            line_length (int): table width (default: fits the content).
            print_fn: function taking the text (default: ``print``).
        Raises:
            ValueError: when the model is not built yet.
        """
        if not self.built:
            raise ValueError(f'Model "{self.name}" has not been built yet: call it on data, or '
                             "start it with an Input, before summary()")
        text = summary_module.render(self, line_length)
        (print_fn or print)(text)

    def get_config(self):
        """The model's config: for a functional model Keras 3's graph config
        (``{"name", "trainable", "layers": [{"module", "class_name",
        "config", "registered_name", "name", "inbound_nodes"}],
        "input_layers", "output_layers"}``, shared layers and nested models
        included); for a subclassed model its constructor arguments (see
        :meth:`Layer.get_config`).

        Raises:
            ValueError: when a layer's config or a call's arguments cannot be
                saved as JSON, or two layers share a name.
        """
        if self._graph is not None:
            from ..saving.serialization import functional_config  # noqa: PLC0415
            return functional_config(self)
        return super().get_config()

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A new model from :meth:`get_config`'s dict (a functional config
        rebuilds the graph; ``custom_objects``: class name -> class).

        Raises:
            ValueError: for an unknown layer class or a malformed graph.
        """
        from ..saving.object_registration import custom_object_scope  # noqa: PLC0415
        from ..saving.serialization import functional_from_config  # noqa: PLC0415
        with custom_object_scope(custom_objects):
            if isinstance(config, dict) and {"layers", "input_layers",
                                             "output_layers"} <= set(config):
                return functional_from_config(cls, config)
            return cls(**config)

    # ---- saving ----------------------------------------------------------------------

    def save(self, filepath, overwrite=True, weights_format=None):
        """Save the model to a ``.keras`` file (``keras.Model.save``): one
        zip archive with the architecture (``config.json``), the compile
        settings, the weights and the optimizer state and ``metadata.json``,
        written to a temporary file in the same folder, fsynced and renamed,
        so an interrupted save leaves the previous file intact.  Load it
        with :func:`pyresnet.models.load_model`.

        With h5py installed (``pip install 'pyresnet[keras]'``), a
        functional or Sequential model is written in Keras 3's own format
        (Keras's layer configs and ``model.weights.h5``), which Keras 3's
        ``keras.saving.load_model`` opens when every layer is one Keras has
        (a ``ResidualBlock`` is written as its Conv2D/BatchNormalization/
        ReLU/Add layers); see :mod:`pyresnet.saving.keras_saving`.  Without
        h5py (a UserWarning says so, once per process), or with ``weights_format="npz"``, or for a
        subclassed model, the weights are pyresnet's ``model.weights.npz``.

        Args:
            weights_format (str): ``None`` (the rule above), ``"h5"`` or ``"npz"``.
        Raises:
            ValueError: for a name not ending in ``.keras``, an unbuilt model,
                or a layer config that cannot be saved (naming the layer).
            FileExistsError: when ``overwrite`` is False and the file exists.
            FileNotFoundError: when the folder of ``filepath`` does not exist
                (naming ``filepath``, as ``open()`` does; nothing is written).
        """
        from ..saving.saving_lib import save_model  # noqa: PLC0415
        save_model(self, filepath, overwrite=overwrite, weights_format=weights_format)

    def export(self, filepath, format="onnx", verbose=None, opset_version=None):  # noqa: A002
        """Export the inference graph (``keras.Model.export``); only
        ``format="onnx"`` is implemented: an ONNX model (needs the ``onnx``
        package, ``pip install 'pyresnet[onnx]'``) taking float32 NHWC
        inputs ``(batch, H, W, C)`` with a symbolic batch dimension and
        returning the outputs of ``predict`` (float32), batch norm folded
        into the convolutions; written atomically.  See
        :mod:`pyresnet.export.onnx_export`.

        Args:
            filepath: where to write (``.onnx``).
            format (str): ``"onnx"``.
            verbose: accepted for Keras's signature; unused.
            opset_version (int): ONNX opset (default 17).
        Raises:
            ValueError: for another format, an unbuilt or subclassed model,
                or a layer the export does not support (naming it).
            ImportError: without the onnx package.
        """
        if format != "onnx":
            raise ValueError(f'export: format must be "onnx" (the only format pyresnet '
                             f"exports), got {format!r}")
        if not self.built:
            raise ValueError(f'Model "{self.name}" is not built yet: call it on data or '
                             "start it with an Input before export")
        from ..export.onnx_export import export_onnx  # noqa: PLC0415
        export_onnx(self, filepath, opset_version=opset_version)

    def save_weights(self, filepath, overwrite=True):
        """Save the weights (and random layers' generator states) to a
        ``.weights.npz`` file, keyed by path (``layers/dense/kernel``), atomically.

        Raises:
            ValueError: for another suffix or an unbuilt model.
        """
        from ..saving.saving_lib import save_weights  # noqa: PLC0415
        save_weights(self, filepath, overwrite=overwrite)

    def load_weights(self, filepath):
        """Load weights saved by :meth:`save_weights` (or from a ``.keras``
        file), matched by path.  Every weight is checked before any is
        assigned: a missing or extra weight, or one whose shape differs
        (the message names it and both shapes), raises ValueError and
        leaves the model unchanged.

        Raises:
            FileNotFoundError, ValueError (also for truncated, corrupted or
            foreign files).
        """
        from ..saving.saving_lib import load_weights  # noqa: PLC0415
        load_weights(self, filepath)

    def to_json(self, **kwargs):
        """The architecture as a JSON string (``keras.Model.to_json``; no
        weights); :func:`pyresnet.models.model_from_json` rebuilds it.
        ``kwargs`` go to ``json.dumps``."""
        import json  # noqa: PLC0415

        from ..saving.serialization import serialize_layer  # noqa: PLC0415
        return json.dumps(serialize_layer(self), **kwargs)
