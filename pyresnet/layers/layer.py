"""``Layer``: the base class of every layer and model (Keras 3's contract:
``build``, ``call``, ``add_weight``, ``get_config``)."""
import functools
import inspect
import threading

import numpy as np

from .. import initializers, mixed_precision
from ..compile import name_scope
from ..ops.array import cast
from ..tensor import Tensor, Variable, convert_to_tensor
from ..utils import tree
from ..utils.naming import to_snake_case, unique_name
from .input_spec import InputSpec, check_input_specs
from .node import KerasTensor, Node

_context = threading.local()  # .training: the value of the outermost layer call in progress
# .depth: how many layer calls are in progress (0: the next call is an outermost one)


@functools.lru_cache(maxsize=None)
def _call_params(call):
    """(accepts ``training``, default of ``training``) for a ``call`` function."""
    params = inspect.signature(call).parameters
    if "training" in params:
        default = params["training"].default
        return True, None if default is inspect.Parameter.empty else default
    return any(p.kind is p.VAR_KEYWORD for p in params.values()), None


def _describe(inputs):
    leaves = tree.flatten(inputs)
    if len(leaves) == 1:
        t = leaves[0]
        return f"{getattr(t, 'dtype', '?')} input of shape {tuple(t.shape)}"
    return "inputs of shapes " + ", ".join(str(tuple(t.shape)) for t in leaves)


def _to_tensor(x):
    return x if isinstance(x, (Tensor, KerasTensor)) else convert_to_tensor(x)


def _widen_bfloat16(x):
    """A bfloat16 Tensor as float32 (exact); anything else as it is."""
    return cast(x, "float32") if isinstance(x, Tensor) and x.dtype == "bfloat16" else x


def _tracked_build(build):
    """Wrap a ``build`` method (as Keras does): on success mark the layer
    built for ``input_shape``; if it raises, remove every weight and
    attribute it created.  A nested ``super().build()`` is not tracked twice."""

    @functools.wraps(build)
    def wrapper(self, input_shape=None, **named_shapes):
        # named_shapes: Keras's build(self, a_shape, b_shape) for call(self, a, b)
        if self._building:
            return build(self, input_shape, **named_shapes) if input_shape is not None \
                else build(self, **named_shapes)
        named_shapes = {k: tree.map_structure(tuple, v, is_leaf=tree.is_shape)
                        for k, v in named_shapes.items()}
        if input_shape is None and named_shapes:
            input_shape = next(iter(named_shapes.values()))
            args = ()
        else:
            input_shape = tree.map_structure(tuple, input_shape, is_leaf=tree.is_shape)
            args = (input_shape,)
        n_t, n_nt = len(self._trainable_variables), len(self._non_trainable_variables)
        before = set(vars(self))
        self._building = True
        try:
            build(self, *args, **named_shapes)
        except BaseException:
            del self._trainable_variables[n_t:]
            del self._non_trainable_variables[n_nt:]
            for key in set(vars(self)) - before:
                delattr(self, key)
            raise
        finally:
            self._building = False
        self.built = True
        if self._build_shapes is None:  # a Model's build records its Input shapes itself
            self._build_shapes = input_shape
        if self.input_spec is None and tree.is_shape(input_shape) and input_shape \
                and self._trainable_variables + self._non_trainable_variables:
            # A Python layer with weights accepts what it was built for.
            self.input_spec = InputSpec(ndim=len(input_shape), axes={-1: input_shape[-1]})

    return wrapper


class Layer:
    """Base class of layers, as ``keras.layers.Layer``.

    Subclass it in Python: create weights in ``build(input_shape)`` with
    :meth:`add_weight`, compute in ``call(inputs)`` or
    ``call(inputs, training=None)`` with pyresnet ops, and return the
    constructor arguments from ``get_config``.  Layers (or lists/dicts of
    layers) assigned as attributes are sublayers: their weights are part of
    this layer's ``weights``, in attribute order.

    Calling a layer (``layer(x)``):

    * on data (Tensors, NumPy arrays): converts arrays to Tensors, builds
      the layer from the input shape(s) on the first call, checks the input
      against what the layer was built for (``input_spec``), resolves
      ``training`` (an explicit argument, else the value of the outer layer
      call in progress, else the default of ``call``'s ``training``
      parameter; ``None`` means inference) and runs ``call``;
    * on the symbolic KerasTensors of the functional API: builds, checks,
      records the call for ``Model(inputs, outputs)`` and returns
      KerasTensors of the output shape (``compute_output_shape``).

    A ValueError or TypeError raised inside is re-raised with the path of
    layer names, the layer's class and the input shapes prepended; a layer
    whose ``build`` raises keeps no weight from it.

    Args:
        name (str): unique name; default: snake_case of the class name made
            unique (``conv2d``, ``conv2d_1``, ...).
        trainable (bool): whether its weights are trained.
        dtype: the layer's dtype policy (:mod:`pyresnet.mixed_precision`):
            ``None`` (the global policy when the layer is made),
            ``"float32"``, ``"mixed_bfloat16"`` or a ``DTypePolicy``.  Under
            a bfloat16 compute dtype, floating inputs of a Python layer's
            ``call`` arrive as bfloat16 (Keras's input autocast); the
            built-in layers take either dtype and manage precision
            themselves.
        input_shape (tuple): Keras's legacy shorthand for an ``Input`` before
            the first layer of a ``Sequential`` (batch dimension excluded).
    Raises:
        TypeError: for unknown keyword arguments.
        ValueError: for a dtype policy other than float32 and mixed_bfloat16.
    """

    # Whether __call__ casts float32 inputs to a bfloat16 compute dtype: True
    # for layers written outside pyresnet (set in __init_subclass__) and for
    # the built-in ones that declare it (convolutions, residual blocks);
    # other built-in layers take either dtype and manage precision.
    _autocast_inputs = False

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._init_args = (args, kwargs)  # for get_config
        return self

    def __init__(self, name=None, trainable=True, dtype=None, **kwargs):
        input_shape = kwargs.pop("input_shape", None)
        activity_regularizer = kwargs.pop("activity_regularizer", None)
        if kwargs:
            raise TypeError(f"Unrecognized keyword arguments passed to {type(self).__name__}: "
                            f"{kwargs}")
        try:
            self._dtype_policy = mixed_precision.get(dtype)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{type(self).__name__}: dtype: {e}") from None
        self._trainable_variables = []
        self._non_trainable_variables = []
        self._inbound_nodes = []
        self._trainable = bool(trainable)
        self._build_shapes = None
        self._building = False
        self._input_shape_arg = None if input_shape is None else tuple(input_shape)
        self.name = name if name is not None else unique_name(self._default_name())
        self.built = False
        self.input_spec = None
        self._added_losses = []
        self._weight_regularizers = []  # (regularizer, variable)
        from .. import regularizers  # noqa: PLC0415
        self.activity_regularizer = regularizers.get(activity_regularizer)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_autocast_inputs" not in cls.__dict__ and not cls.__module__.startswith("pyresnet."):
            cls._autocast_inputs = True
        if "build" in cls.__dict__:
            cls.build = _tracked_build(cls.__dict__["build"])

    @classmethod
    def _default_name(cls):
        return to_snake_case(cls.__name__)

    # ---- the contract subclasses implement --------------------------------

    def build(self, input_shape):
        """Create the weights for inputs of ``input_shape`` (a tuple with the
        batch dimension first, or a list of them for several inputs)."""

    build = _tracked_build(build)

    def call(self, inputs, *args, **kwargs):
        """The forward computation on Tensors (override it)."""
        raise NotImplementedError(f"Layer {type(self).__name__} does not implement call()")

    def compute_output_shape(self, input_shape):
        """The output shape(s) for ``input_shape`` (batch dimension first,
        ``None`` if unknown).  By default ``call`` is run once eagerly on a
        zero batch of size 1 (inference mode) to find out.

        Raises:
            ValueError: when a dimension other than the batch is unknown;
                override this method for such layers.
        """
        outputs = self._call_eager(self._zero_batch(input_shape), (), {"training": False})
        flat = tree.flatten(input_shape, is_leaf=tree.is_shape)
        batch = flat[0][0] if flat and flat[0] else None
        return tree.map_structure(lambda t: (batch,) + tuple(t.shape[1:]), outputs)

    def _zero_batch(self, input_shape):
        """float32 zeros of ``input_shape`` with a batch of 1 (same nesting).

        Raises:
            ValueError: when a dimension other than the batch is unknown.
        """
        flat = tree.flatten(input_shape, is_leaf=tree.is_shape)
        for s in flat:
            if any(d is None for d in s[1:]):
                raise ValueError(
                    f'Layer "{self.name}" cannot infer its output shape for input shape {s} '
                    "(unknown dimensions besides the batch); define compute_output_shape()")
        zeros = [Tensor(np.zeros((1,) + tuple(s[1:]), np.float32)) for s in flat]
        return tree.pack_sequence_as(input_shape, zeros, is_leaf=tree.is_shape)

    def get_config(self):
        """The constructor arguments as a dict (``name``, ``trainable``,
        ``dtype`` and every argument of the subclass's ``__init__``, as
        given or defaulted), such that ``type(self).from_config(config)``
        makes an equivalent, unbuilt layer.  Override it when ``__init__``
        stores its arguments under other names."""
        config = {"name": self.name, "trainable": self.trainable,
                  "dtype": self._dtype_policy.name}
        init = type(self).__init__
        if init is not Layer.__init__:
            args, kwargs = self._init_args
            signature = inspect.signature(init)
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            for key, value in list(bound.arguments.items())[1:]:
                kind = signature.parameters[key].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    config.update({k: v for k, v in value.items() if k not in config})
                elif kind is not inspect.Parameter.VAR_POSITIONAL:
                    config[key] = value
        config["name"] = self.name
        config["dtype"] = self._dtype_policy.name
        return config

    @classmethod
    def from_config(cls, config):
        """A new layer from ``get_config()``'s dict."""
        return cls(**config)

    # ---- dtypes (Keras 3: dtype_policy, dtype, compute_dtype, variable_dtype) ---

    @property
    def dtype_policy(self):
        """The layer's :class:`pyresnet.mixed_precision.DTypePolicy`."""
        return self._dtype_policy

    @property
    def dtype(self):
        """The weights' dtype (str, ``"float32"``), as Keras's ``Layer.dtype``."""
        return self._dtype_policy.variable_dtype

    @property
    def compute_dtype(self):
        """The dtype the layer computes in (str: ``"float32"`` or ``"bfloat16"``)."""
        return self._dtype_policy.compute_dtype

    @property
    def variable_dtype(self):
        """The weights' dtype (str, always ``"float32"``)."""
        return self._dtype_policy.variable_dtype

    def _compute_kernel(self, kernel):
        """``kernel`` (a float32 Variable) as the convolutions and matmuls of
        this layer take it: cast to bfloat16 under a bfloat16 compute dtype
        (once per call), else as it is."""
        return cast(kernel, "bfloat16") if self.compute_dtype == "bfloat16" else kernel

    # ---- weights -------------------------------------------------------------

    def add_weight(self, shape=(), initializer="glorot_uniform", trainable=True, name=None,
                   dtype="float32", regularizer=None):
        """Create a weight, track it and return it.

        Args:
            shape (tuple): e.g. ``(3, 3, 16, 32)`` (HWIO) for a conv kernel.
            initializer: a Keras name (``"glorot_uniform"``, ``"he_normal"``,
                ``"zeros"``, ``"ones"``, ...) or a callable
                ``(shape, dtype) -> array``; draws from the generator seeded
                by :func:`pyresnet.utils.set_random_seed`.
            trainable (bool): watched by tapes and updated by optimizers.
            name (str): e.g. ``"kernel"``; the Variable's ``path`` is
                ``"<layer name>/<name>"``.
            dtype: only ``"float32"`` (None means float32).
            regularizer: None, a :mod:`pyresnet.regularizers` object, name or
                callable: its penalty of the weight joins :attr:`losses`.
        Returns:
            Variable: float32, of ``shape``.
        Raises:
            ValueError: when the initializer returns another shape.
        """
        if dtype not in ("float32", None):
            raise ValueError(f'Layer "{self.name}": add_weight supports float32 only, '
                             f"got {dtype!r}")
        from .. import regularizers  # noqa: PLC0415
        regularizer = regularizers.get(regularizer)
        shape = tuple(int(d) for d in shape)
        value = np.asarray(initializers.get(initializer)(shape, "float32"), np.float32)
        if value.shape != shape:
            raise ValueError(f'Layer "{self.name}": initializer of weight {name!r} returned shape '
                             f"{value.shape}, expected {shape}")
        variable = Variable(value, trainable=trainable and self.trainable,
                            name=name or f"variable_{len(self.weights)}")
        variable.path = f"{self.name}/{variable.name}"
        (self._trainable_variables if trainable else self._non_trainable_variables).append(variable)
        if regularizer is not None:
            self._weight_regularizers.append((regularizer, variable))
        return variable

    @property
    def _sublayers(self):
        """Direct sublayers: Layer attributes and the Layers in list, tuple
        or dict attributes, in attribute order, without duplicates."""
        found, seen = [], set()
        for key, value in list(vars(self).items()):
            if key == "_init_args":
                continue
            if isinstance(value, dict):
                value = list(value.values())
            candidates = value if isinstance(value, (list, tuple)) else [value]
            for v in candidates:
                if isinstance(v, Layer) and v is not self and id(v) not in seen:
                    seen.add(id(v))
                    found.append(v)
        return found

    @property
    def weights(self):
        """All weights: this layer's own (trainable first, in creation order)
        then each sublayer's, without duplicates (a shared layer counts once)."""
        own = self._trainable_variables + self._non_trainable_variables
        own += [v for v in vars(self).values() if isinstance(v, Variable)]
        found, seen = [], set()
        for w in own + [w for layer in self._sublayers for w in layer.weights]:
            if id(w) not in seen:
                seen.add(id(w))
                found.append(w)
        return found

    @property
    def trainable_weights(self):
        """The weights optimizers update (``[]`` when the layer is frozen)."""
        return [w for w in self.weights if w.trainable] if self.trainable else []

    @property
    def non_trainable_weights(self):
        """Weights not trained: BN moving statistics, and everything of a
        frozen layer."""
        return [w for w in self.weights if not w.trainable] if self.trainable else self.weights

    @property
    def trainable_variables(self):
        """Keras 3's name for :attr:`trainable_weights`."""
        return self.trainable_weights

    @property
    def non_trainable_variables(self):
        """Keras 3's name for :attr:`non_trainable_weights`."""
        return self.non_trainable_weights

    @property
    def variables(self):
        """Keras 3's name for :attr:`weights`."""
        return self.weights

    @property
    def trainable(self):
        """bool.  Setting it (un)freezes this layer's weights and sublayers
        (as Keras; a frozen BatchNormalization runs in inference mode)."""
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        self._trainable = bool(value)
        for v in self._trainable_variables:
            v.trainable = self._trainable
        for layer in self._sublayers:
            layer.trainable = self._trainable

    def count_params(self):
        """Number of scalars in all weights (int).

        Raises:
            ValueError: when the layer is not built yet.
        """
        if not self.built:
            raise ValueError(f'Layer "{self.name}" is not built yet, so its weights do not '
                             "exist; call it on data or on an Input first")
        return int(sum(int(np.prod(w.shape)) for w in self.weights))

    def get_weights(self):
        """The weights' values as a list of NumPy arrays (copies)."""
        return [np.array(w, copy=True) for w in self.weights]

    def set_weights(self, values):
        """Assign NumPy arrays to the weights, in ``weights`` order.

        Raises:
            ValueError: on a count or shape mismatch, or values that are not
                numbers; no weight changes then (all are converted and checked
                before the first is assigned).
        """
        weights = self.weights
        if len(values) != len(weights):
            raise ValueError(f'Layer "{self.name}": set_weights expects {len(weights)} arrays, '
                             f"got {len(values)}")
        arrays = []
        for w, v in zip(weights, values):
            name = getattr(w, "path", w.name)
            if tuple(np.shape(v)) != tuple(w.shape):
                raise ValueError(f'Layer "{self.name}": weight {name} has shape '
                                 f"{tuple(w.shape)}, got an array of shape {np.shape(v)}")
            try:
                arrays.append(np.asarray(v, np.float32))
            except (TypeError, ValueError) as e:
                raise ValueError(f'Layer "{self.name}": weight {name}: {e}') from None
        for w, a in zip(weights, arrays):
            w.assign(a)

    # ---- losses added by layers ------------------------------------------------------

    def add_loss(self, loss):
        """Add a scalar loss term computed in ``call`` (``keras.layers.Layer.add_loss``),
        e.g. an activity regularizer or a VAE's KL divergence.  The terms
        of the current outermost call are in :attr:`losses` (every call of
        the outermost layer or model starts an empty list), and ``fit`` adds
        their sum to the compiled loss.

        Args:
            loss: a float32 Tensor (reduced to its sum if not a scalar), a
                NumPy value or a Python number.
        """
        if not isinstance(loss, Tensor):
            loss = convert_to_tensor(np.asarray(loss, np.float32))
        if loss.shape != ():
            from .. import ops  # noqa: PLC0415
            loss = ops.sum(loss)
        self._added_losses.append(loss)

    @property
    def losses(self):
        """The scalar loss terms of this layer and its sublayers: those added
        with :meth:`add_loss` during the last outermost call, then the
        weight regularizers' penalties of the weights' current values
        (computed now, so that a tape records them), as float32 scalar
        Tensors.  Terms recorded while a compiled step was being traced
        belong to that trace and are left out once it is over."""
        from .._loader import _C  # noqa: PLC0415
        tracing = _C.tracing()
        found, seen = [], set()
        stack = [self]
        while stack:
            layer = stack.pop(0)
            if id(layer) in seen:
                continue
            seen.add(id(layer))
            found.extend(t for t in getattr(layer, "_added_losses", [])
                         if tracing or not t.is_symbolic)
            found.extend(regularizer(variable)
                         for regularizer, variable in getattr(layer, "_weight_regularizers", []))
            stack.extend(layer._sublayers)
        return found

    def _clear_losses(self):
        """Empty the :meth:`add_loss` terms of this layer and its sublayers."""
        stack, seen = [self], set()
        while stack:
            layer = stack.pop()
            if id(layer) in seen:
                continue
            seen.add(id(layer))
            if getattr(layer, "_added_losses", None):
                layer._added_losses = []
            stack.extend(layer._sublayers)

    # ---- the functional graph ---------------------------------------------------------

    def _first_node(self, what):
        if not self._inbound_nodes:
            raise AttributeError(f'Layer "{self.name}" has never been called on a symbolic '
                                 f"input, so it has no {what}")
        return self._inbound_nodes[0]

    @property
    def output(self):
        """The KerasTensor(s) returned by this layer's first call on symbolic
        inputs (``keras.layers.Layer.output``: node 0 of a shared layer),
        e.g. to build a feature-extraction model.  Raises AttributeError for
        a layer never called symbolically."""
        return self._first_node("output").outputs

    @property
    def input(self):
        """The KerasTensor(s) of this layer's first symbolic call (its own
        output for an InputLayer).  Raises AttributeError as :attr:`output`."""
        node = self._first_node("input")
        return node.outputs if not node.input_tensors else node.inputs

    # ---- calling -----------------------------------------------------------------

    def __call__(self, inputs, *args, **kwargs):
        symbolic = any(isinstance(t, KerasTensor) for t in tree.flatten([inputs, args, kwargs]))
        if not symbolic:
            inputs = tree.map_structure(_to_tensor, inputs)
        depth = getattr(_context, "depth", 0)
        if depth == 0:
            self._clear_losses()
        _context.depth = depth + 1
        try:
            if symbolic:
                return self._call_symbolic(inputs, args, kwargs)
            with name_scope(self.name):  # graph nodes traced here fold into the layer
                outputs = self._call_eager(inputs, args, kwargs)
            if self.activity_regularizer is not None:
                for t in tree.flatten(outputs):
                    self.add_loss(self.activity_regularizer(t))
            return outputs
        except (ValueError, TypeError) as e:
            raise self._annotate(e, inputs).with_traceback(e.__traceback__) from None
        finally:
            _context.depth = depth

    def _call_eager(self, inputs, args, kwargs):
        kwargs = dict(kwargs)
        accepts_training, default = _call_params(type(self).call)
        training = kwargs.pop("training", None)
        if training is None:
            training = getattr(_context, "training", None)
        if training is None:
            training = default
        if accepts_training:
            kwargs["training"] = training
        self._maybe_build_named(inputs, args, kwargs)
        self._maybe_build(tree.map_structure(lambda t: tuple(t.shape), inputs))
        if self.compute_dtype == "float32":
            # a float32 layer computes in float32 whatever precedes it (Keras's
            # autocast): the bfloat16 activations of mixed_bfloat16 layers are
            # widened (exactly), so e.g. a BatchNormalization(dtype="float32")
            # returns float32 and a float32 Conv2D does not round its kernel
            inputs = tree.map_structure(_widen_bfloat16, inputs)
        elif self._autocast_inputs:
            inputs = tree.map_structure(self._autocast, inputs)
        outer = getattr(_context, "training", None)
        _context.training = training
        try:
            return self.call(inputs, *args, **kwargs)
        finally:
            _context.training = outer

    def _autocast(self, x):
        """A float32 Tensor input cast to a bfloat16 compute dtype (others as
        they are)."""
        return cast(x, self.compute_dtype) if isinstance(x, Tensor) and x.dtype == "float32" \
            and self.compute_dtype != "float32" else x

    def _call_symbolic(self, inputs, args, kwargs):
        for t in tree.flatten(inputs):
            if not isinstance(t, KerasTensor):
                raise TypeError(f'Layer "{self.name}": a call on symbolic KerasTensors cannot '
                                f"also take concrete values, got {type(t).__name__}")
        shapes = tree.map_structure(lambda t: t.shape, inputs)
        self._maybe_build_named(inputs, args, kwargs)
        self._maybe_build(shapes)
        out_shapes = self._symbolic_output_shapes(inputs, args, kwargs)
        outputs = tree.map_structure(KerasTensor, out_shapes, is_leaf=tree.is_shape)
        Node(self, inputs, args, kwargs, outputs)
        return outputs

    def _symbolic_output_shapes(self, inputs, args, kwargs):
        """The output shape(s) of a call on KerasTensors.  With KerasTensors
        only in ``inputs``: :meth:`compute_output_shape` of their shapes.
        With more symbolic arguments (``layer(a, b)``, as Keras 3 allows): an
        overridden ``compute_output_shape`` with one parameter gets the first
        argument's shape, one with several gets ``<argument>_shape`` keywords
        for the tensor arguments of ``call`` (Keras's rule); otherwise
        ``call`` runs once on zero batches of size 1 (inference mode)."""
        shapes = tree.map_structure(lambda t: t.shape, inputs)
        if not any(isinstance(t, KerasTensor) for t in tree.flatten([args, kwargs])):
            return self.compute_output_shape(shapes)
        if type(self).compute_output_shape is not Layer.compute_output_shape:
            params = [p for p in inspect.signature(self.compute_output_shape).parameters.values()
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            if len(params) == 1:
                return self.compute_output_shape(shapes)
            bound = inspect.signature(self.call).bind(inputs, *args, **kwargs).arguments
            named = {f"{k}_shape": tree.map_structure(lambda t: t.shape, v)
                     for k, v in bound.items()
                     if any(isinstance(t, KerasTensor) for t in tree.flatten(v))}
            return self.compute_output_shape(**{p.name: named[p.name] for p in params
                                                if p.name in named})

        def zeros(x):
            if not isinstance(x, KerasTensor):
                return x
            return self._zero_batch(x.shape)

        outputs = self._call_eager(tree.map_structure(zeros, inputs),
                                   tuple(tree.map_structure(zeros, list(args))),
                                   {**tree.map_structure(zeros, dict(kwargs)), "training": False})
        batch = tree.flatten(shapes, is_leaf=tree.is_shape)[0][0]
        return tree.map_structure(lambda t: (batch,) + tuple(t.shape[1:]), outputs)

    def _maybe_build_named(self, inputs, args, kwargs):
        """Keras's rule for a ``build(self, a_shape, b_shape)`` (several
        parameters, each named after an argument of ``call`` plus
        ``_shape``): on the first call, build with the shapes of those
        arguments by name.  Other builds get the first argument's shape
        (:meth:`_maybe_build`)."""
        if self.built:
            return
        params = [p for p in list(inspect.signature(type(self).build).parameters.values())[1:]
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if len(params) < 2 or not all(p.name.endswith("_shape") for p in params):
            return
        try:
            bound = inspect.signature(self.call).bind(inputs, *args, **kwargs).arguments
        except TypeError:
            return  # call() itself will say what is wrong
        named = {p.name: tree.map_structure(lambda t: tuple(t.shape), bound[p.name[:-6]])
                 for p in params if bound.get(p.name[:-6]) is not None}
        self.build(**named)

    def _maybe_build(self, shapes):
        """Check ``shapes`` against the input spec; build on the first call."""
        check_input_specs(self, self.input_spec, tree.flatten(shapes, is_leaf=tree.is_shape),
                          self._build_shapes)
        if not self.built:
            self.build(shapes)

    def _annotate(self, error, inputs):
        """``error`` re-made with the layer path, class and input shapes in
        front of its message (the innermost layer's class and inputs)."""
        path = [self.name] + getattr(error, "_pr_path", [])
        detail = getattr(error, "_pr_detail", None) or (type(self).__name__, _describe(inputs),
                                                       str(error))
        cls, described, message = detail
        try:
            new = type(error)(f'Layer "{"/".join(path)}" ({cls}), called on {described}: {message}')
        except Exception:  # an exception type that needs other constructor arguments
            return error
        new._pr_path, new._pr_detail = path, detail
        return new

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"
