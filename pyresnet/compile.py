"""``pyresnet.compile``: trace a Python function of tensors once per input
signature into a graph of registered ops, and run that graph in C with the
GIL released (csrc/graph.c, csrc/executor.c).

Semantics follow ``tf.function``:

* The function is traced on the first call of each *signature*: the
  structure of the arguments, the shape and dtype of every tensor or array
  argument, and the value of every other (hashable) argument (Python
  numbers, strings, ``training=True``...).  Variables passed as arguments
  are used by reference (keyed by identity), like captured ones.
* Python side effects (``print``, appending to a list) happen only while
  tracing; :func:`print` (``pyresnet.print``) prints on every call.
* Real tensors the function uses (Variables, constants, optimizer slots)
  are captured by reference: eager and compiled calls see the same state.
  Variables may be created on the first trace only (optimizer slots, layer
  weights built on the first call); a later trace that creates one raises.
* ``input_signature=[TensorSpec((None, 32, 32, 3)), ...]`` fixes the
  signature; ``None`` dimensions are unknown sizes.  A call whose argument
  does not match its spec raises ValueError naming both, as tf.function
  refuses it: another rank or static size, or another dtype (a float64 or
  int32 array where float32 is declared is not cast; a Python number takes
  the spec's dtype if it is of its kind: an int for float32, not a float
  for int32).  ``reduce_retracing=True``
  makes the leading dimension of every tensor argument unknown.  A graph
  with unknown sizes is traced once, with each one a named symbol: under an
  ``input_signature`` the leading ``None`` of every argument is the symbol
  ``batch`` (one batch size per call; two arguments that disagree raise an
  error naming both), any other ``None`` its own symbol
  (``<TensorSpec name>.dim2``, or ``arg1.dim2``); under
  ``reduce_retracing`` each argument's leading dimension is its own symbol
  (``arg0.dim0``), as TensorFlow relaxes each dimension on its own.  Shape
  rules compute with the symbols (``(h + 1)//2`` after a stride-2
  convolution, nested floor divisions in one canonical form) and refuse
  only what is wrong for every size (``h - 2`` rows against ``h``); what
  holds only for some sizes (``(batch, 3)`` into ``(-1, 2)``, two unknown
  sizes added) is checked on each call, with the eager error.  Attributes
  that depend on a size hold its expression.  Each call binds the symbols
  to its arguments' sizes and runs the memory plan made for that binding,
  so a new size costs a plan, not a trace (at most 32 plans are kept per
  graph, the least recently used dropped first).  While tracing,
  ``x.shape`` reads ``None`` for an unknown size, as in Keras;
  :func:`pyresnet.ops.shape` gives it as an int32 scalar tensor for shape
  arguments (``reshape``, ``broadcast_to``).  Such a tensor has no truth
  value or equality while tracing (``TypeError``): branch on static sizes.
* ``jit_compile=True`` adds the fusion passes (elementwise chains, bias-add
  or BN + ReLU into one kernel), in-place reuse of dying buffers, and a
  per-shape kernel choice: on the first call of each shape every node's
  candidates (its op's alternative kernels, each on all threads or on one)
  are timed on the call's own data and the fastest kept, once per distinct
  (op, shapes, attributes) in a process.  Fused kernels do the unfused
  float32 operations in the same order and kernels do not depend on the
  thread count, so results equal eager execution; an op's alternative
  kernel may sum in another order, so the stated tolerance is that of
  float32 rounding: relative differences of about 1e-5 in one step and
  1e-4 after ten training steps.

Errors raised inside the graph (a kernel's ValueError, e.g. a label out of
range) are the eager call's exception.  The graph runs every state update
(BN moving statistics, optimizer steps, ``assign``) as late as the values
it writes allow, so in a training step they all follow the loss: when a
forward or loss kernel fails, no variable has changed (eagerly, the BN
statistics of that call would have).  A failure after some update has run
(in an update itself, or in a node that reads an updated variable) leaves
the updates before it applied.
"""
import builtins
import contextlib
import functools
import inspect
import json
import threading
import warnings
import weakref

import numpy as np

from ._loader import _C
from . import tensor as _tensor
from . import profiling
from . import _trace
from ._trace import flatten as _flatten, unflatten as _unflatten, is_tensor_leaf as _is_tensor_leaf
from .tensor import Tensor, Variable
from .utils.atomic import write_text

__all__ = ["compile", "Function", "ConcreteFunction", "TensorSpec", "print", "init_scope",
           "name_scope"]

RETRACE_WARNING_THRESHOLD = 5

# set in a node's scope index by the C tape for the backward nodes of a
# forward node (csrc/ops.h, PR_SCOPE_GRADIENT): "gradient_tape/<its scope>"
_SCOPE_GRADIENT = 1 << 30


class TensorSpec:
    """Describes a tensor argument of a compiled function (``tf.TensorSpec``).

    Args:
        shape: tuple of ints or ``None`` (an unknown size: a symbol of the
            trace, bound per call; see the module docstring).
        dtype (str): ``"float32"``, ``"int32"``, ``"int64"`` or ``"uint8"``.
        name (str): optional, for messages.
    """

    def __init__(self, shape, dtype="float32", name=None):
        self.shape = tuple(None if d is None else int(d) for d in shape)
        self.dtype = str(np.dtype(dtype))
        self.name = name

    def is_compatible_with(self, t):
        """Whether Tensor ``t`` matches this spec's dtype, rank and static dims."""
        return (t.dtype == self.dtype and t.ndim == len(self.shape)
                and all(s is None or s == d for s, d in zip(self.shape, t.shape)))

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype!r}, name={self.name!r})"


@contextlib.contextmanager
def init_scope():
    """Run ops eagerly inside a function being traced (``tf.init_scope``):
    for computing the initial value of a Variable created on the first call
    (e.g. an optimizer slot ``zeros_like(weight)``).  Outside tracing it does
    nothing."""
    token = _C.trace_suspend()
    try:
        yield
    finally:
        _C.trace_resume(token)


@contextlib.contextmanager
def name_scope(name):
    """Name the graph nodes traced inside the block (``tf.name_scope``).

    While a :func:`compile` function is being traced, every node made in
    the block gets ``name`` as a scope, nested under the enclosing scopes:
    ``ConcreteFunction.nodes`` reports it (``"scope"``) and the TensorBoard
    graph (:func:`pyresnet.summary.graph_def`) folds the nodes of one
    scope into one box.  Layers open a scope named after themselves on
    every call (so a model's graph folds into its layers and blocks),
    ``GradientTape.gradient`` opens ``gradient_tape`` (the backward nodes
    of a forward node get ``gradient_tape/<its scope>``), a loss and an
    optimizer's update open their names.  Outside tracing it does nothing
    (one check).

    Args:
        name (str): the scope's name (``/`` is replaced by ``_``).
    """
    traces = getattr(_trace.local, "traces", None)
    if not traces or not _C.tracing():
        yield
        return
    trace = traces[-1]
    trace.scope_stack.append(str(name).replace("/", "_") or "_")
    trace.mark_scope()
    try:
        yield
    finally:
        trace.scope_stack.pop()
        trace.mark_scope()


def print(*args, sep=" ", end="\n", file=None):
    """Print values, tensors included, on every call of a compiled function
    (``tf.print``); eagerly it prints at once.  Tensors print as NumPy
    arrays.  Inside a trace the print becomes a graph node that takes the
    GIL when it runs; it is kept even if nothing uses its value."""
    tensors = [a for a in args if isinstance(a, Tensor)]
    if not _C.tracing():
        builtins.print(*[a.numpy() if isinstance(a, Tensor) else a for a in args],
                       sep=sep, end=end, file=file)
        return
    slots = [isinstance(a, Tensor) for a in args]

    def callback(*arrays):
        values = iter(arrays)
        builtins.print(*[next(values).numpy() if s else a for s, a in zip(slots, args)],
                       sep=sep, end=end, file=file)

    _trace.local.traces[-1].graph.host_call(callback, tensors)


# ---- concrete functions ------------------------------------------------------

class ConcreteFunction:
    """One traced graph of a :class:`Function` for one input signature.

    Call it with arguments of that signature.  Inspection:
    :attr:`nodes`, :meth:`to_dot`, :attr:`peak_memory_bytes`, :attr:`flops`,
    :meth:`profile`.  Shapes and memory figures are those of the arguments
    the concrete function was obtained with (unknown sizes bound to theirs).
    """

    def __init__(self, graph, out_structure, out_leaves, example, name, scopes=None):
        self._graph = graph
        self._out_structure = out_structure
        self._out_leaves = out_leaves  # per leaf: graph output index, or ("const", value)
        self._example = example  # tensor leaves of the call that traced it
        self.name = name
        self._scopes = scopes or [""]  # the graph's scope indices -> scope paths (_trace.Trace)

    def _run(self, tensors):
        outs = self._graph.run(tensors)
        return self._pack(outs)

    def _pack(self, outs):
        leaves = (outs[x] if isinstance(x, int) else x[1] for x in self._out_leaves)
        return _unflatten(self._out_structure, leaves)

    def __call__(self, *args, **kwargs):
        leaves = []
        _flatten((args, kwargs), leaves)
        return self._run([_tensor.convert_to_tensor(x) for x in leaves if _is_tensor_leaf(x)])

    def _plan(self):
        return self._graph._describe(self._example)

    def plan(self, *args, **kwargs):
        """The plan for these arguments' sizes (default: the arguments the
        concrete function was obtained with), as a :class:`Plan`:
        ``plan.tune(*args)`` times the kernel choices (``jit_compile``),
        ``plan.run(*args)`` runs a call of those sizes without planning.

        Raises:
            TypeError, ValueError: arguments that do not fit the signature
                (as a call).
        """
        if args or kwargs:
            leaves = []
            _flatten((args, kwargs), leaves)
            tensors = [_tensor.convert_to_tensor(x) for x in leaves if _is_tensor_leaf(x)]
        else:
            tensors = self._example
        return Plan(self._graph, tensors, self._graph._describe(tensors), self)

    @property
    def graph(self):
        """The C graph (``pyresnet._C.Graph``)."""
        return self._graph

    @property
    def nodes(self):
        """List of dicts, one per node in run order: ``op`` (name), ``inputs``
        and ``outputs`` (value ids), ``output_shapes`` (tuples), ``flops``,
        ``kernel`` (the kernel variant the node runs, e.g.
        ``"avx512_direct"``; None for ops with one kernel).  Under
        ``jit_compile`` the kernel is the one timing chose, once the first
        call of these shapes has run, with ``" @1 thread"`` appended when it
        runs on one thread; ``scope`` (the name scope that made the node,
        :attr:`node_scopes`)."""
        plan = self._plan()
        result = []
        scopes = self.node_scopes
        for j, (op, ins, outs) in enumerate(self._graph.nodes()):
            result.append({"op": op, "inputs": ins, "outputs": outs,
                           "output_shapes": [plan["shapes"][v] for v in outs],
                           "flops": plan["node_flops"][j], "kernel": plan["kernels"][j],
                           "scope": scopes[j]})
        return result

    @property
    def node_scopes(self):
        """Per node in run order, the name scope it was traced in (str): the
        scopes open then, outermost first, joined by ``/`` (e.g.
        ``"resnet20/residual_block_1/conv2d_3"``), ``""`` outside every
        scope.  A backward node that ``GradientTape.gradient`` made from a
        forward node has ``"gradient_tape/"`` and that node's scope (as
        TensorFlow names gradients); a node fused under ``jit_compile`` has
        the scope of the node that absorbed the others.  See
        :func:`name_scope`."""
        names, flag = self._scopes, _SCOPE_GRADIENT
        return [names[k] if not k & flag else
                "/".join(filter(None, ("gradient_tape", names[k & ~flag])))
                for k in self._graph.node_scopes()]

    @property
    def values(self):
        """List of dicts per value id: ``kind`` ("input", "capture" or
        "node"), ``dtype``, ``shape``."""
        shapes = self._plan()["shapes"]
        return [{"kind": k, "dtype": d, "shape": shapes[i]}
                for i, (k, d, _, _) in enumerate(self._graph.values())]

    @property
    def peak_memory_bytes(self):
        """Planned peak bytes of one call: the arena (intermediate values and
        kernel scratch, reused by liveness) plus the returned outputs.
        Inputs and captured variables are not counted (they exist anyway)."""
        plan = self._plan()
        return plan["arena_bytes"] + plan["output_bytes"]

    @property
    def memory(self):
        """dict: ``arena_bytes``, ``naive_bytes`` (every intermediate in its own
        buffer), ``output_bytes``, ``inplace`` (values written over an input)."""
        plan = self._plan()
        return {k: plan[k] for k in ("arena_bytes", "naive_bytes", "output_bytes", "inplace")}

    @property
    def flops(self):
        """Floating-point operations of one call (a multiply-add counts 2;
        ops without a FLOP rule count one per output element)."""
        return self._plan()["flops"]

    @property
    def threads(self):
        """Threads the kernels of one call may use (int): every thread
        (``pyresnet.get_num_threads()``), or 1 for a call of fewer than 3e7
        floating-point operations (``flops``), whose kernels are too short
        for waking other threads to pay (csrc/executor.c,
        PLAN_PARALLEL_MIN_FLOPS).  A loop's body decides for itself."""
        return self._plan()["threads"]

    @property
    def passes(self):
        """What the graph passes did: nodes ``removed`` (dead), ``fused``."""
        return self._graph.passes

    def to_dot(self):
        """The graph in Graphviz DOT: inputs and captures as ellipses, op
        nodes as boxes labelled with the op and output shapes."""
        values = self._graph.values()
        shapes = self._plan()["shapes"]
        lines = [f'digraph "{self.name}" {{', "  rankdir=TB;",
                 '  node [fontname="Helvetica", fontsize=10];']
        producer = {}
        for j, (op, ins, outs) in enumerate(self._graph.nodes()):
            for v in outs:
                producer[v] = f"n{j}"
        used = set()
        for op, ins, outs in self._graph.nodes():
            used.update(ins)
        used.update(self._graph.outputs)
        for v in sorted(used):
            kind = values[v][0]
            if kind != "node":
                label = f"{kind} {v}\\n{values[v][1]} {shapes[v]}"
                lines.append(f'  v{v} [shape=ellipse, label="{label}"];')
                producer[v] = f"v{v}"
        for j, (op, ins, outs) in enumerate(self._graph.nodes()):
            label = op + "".join(f"\\n{shapes[v]}" for v in outs)
            lines.append(f'  n{j} [shape=box, label="{label}"];')
            for i in ins:
                lines.append(f"  {producer[i]} -> n{j};")
        for k, v in enumerate(self._graph.outputs):
            lines.append(f'  out{k} [shape=doublecircle, label="output {k}"];')
            lines.append(f"  {producer[v]} -> out{k};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def profile(self, *args, repeats=1, path=None, logdir=None, **kwargs):
        """Run ``repeats`` calls with these arguments and time every node.

        The calls have their effects (variable updates) as normal calls do.
        Under ``jit_compile`` the first call of a new shape also times the
        kernel candidates: call the function once before profiling it.

        Args:
            *args, **kwargs: the arguments, as for a call.
            repeats: how many calls to time (int >= 1).
            path: when given, the Chrome trace is written there as JSON
                (atomically).
            logdir: when given, a TensorBoard run folder: the graph with
                these node times and memory as run metadata (the Graphs
                dashboard) and the gzipped trace with the tables under
                ``logdir/plugins/profile/<function name>/``
                (:func:`pyresnet.summary.write_graph`,
                :func:`~pyresnet.summary.write_profile`).

        Returns:
            :class:`pyresnet.profiling.Profile`: ``by_op`` (a table per op
            and kernel variant: calls, total and mean milliseconds, share of
            the node time, GFLOP/s), ``by_node`` (the same per node),
            ``trace`` (the Chrome trace dict); ``print`` it for text,
            ``.by_op.to_dicts()`` for a list of dicts.

        Raises:
            ValueError: ``repeats`` below 1; the errors of a call.
        """
        if int(repeats) < 1:
            raise ValueError(f"profile(repeats=...) expects an int >= 1, got {repeats!r}")
        leaves = []
        _flatten((args, kwargs), leaves)
        tensors = [_tensor.convert_to_tensor(x) for x in leaves if _is_tensor_leaf(x)]
        calls = [self._graph.run(tensors, True)[1] for _ in range(int(repeats))]
        result = profiling.summarize(self.name, self._graph.nodes(),
                                     self._graph.plan(tensors), calls)
        if path is not None:
            write_text(path, json.dumps(result.trace))
        if logdir is not None:
            from . import summary  # noqa: PLC0415  (tensorboardX, only when asked)
            concrete = ConcreteFunction(self._graph, self._out_structure, self._out_leaves,
                                        tensors, self.name, self._scopes)
            summary.write_graph(concrete, logdir, profile=result)
            summary.write_profile(result, logdir, self.name, concrete)
        return result

# ---- plans ---------------------------------------------------------------------

def _spec_str(spec):
    dtype, shape = spec
    return f"{dtype} {tuple(shape)}"


class Plan(dict):
    """A graph's plan for one set of input sizes, as one object: what
    ``Graph.plan(inputs)`` and :meth:`ConcreteFunction.plan` return.

    Planning, tuning and running are three calls::

        plan = concrete.plan(x)     # shapes, memory placement, loop bodies' plans
        plan.tune(x)                # jit_compile: time the kernel choices once
        for batch in batches:       # batches of x's shape and dtype
            out = plan.run(batch)   # only runs

    It is the dict that describes the plan (keys ``shapes``: per value id a
    shape tuple; ``node_flops``, ``variants`` (per node the kernel choice,
    -1 while it is still to be timed under ``jit_compile``), ``kernels``
    (per node the kernel variant's name or None), ``arena_bytes``,
    ``naive_bytes``, ``output_bytes``, ``flops``, ``binding`` (unknown size
    name -> int), ``inplace``, ``threads``), so code that reads it as a dict
    keeps working.  While the object lives its plan stays among the
    graph's plans (never evicted by calls of other sizes), so :meth:`run`
    looks it up and never plans again.  :attr:`input_specs` lists the
    ``(dtype, shape)`` of each input it was planned for (str, tuple).

    A graph's loops over a dataset take their batches when a call starts,
    as a normal call does: a run of the plan runs the dataset's next pass.
    """

    def __init__(self, graph, inputs, description, concrete=None):
        super().__init__(description)
        tensors = [_tensor.convert_to_tensor(x) for x in inputs]
        self._graph = graph
        self._pin = graph._pin(tensors)
        self._concrete = concrete
        self.input_specs = [(t.dtype, tuple(t.shape)) for t in tensors]

    def _inputs(self, who, args, kwargs):
        if self._concrete is not None:
            leaves = []
            _flatten((args, kwargs), leaves)
            args = [x for x in leaves if _is_tensor_leaf(x)]
        elif kwargs:
            raise TypeError(f"Plan.{who}: a graph's plan takes its inputs by position, "
                            f"got keywords {sorted(kwargs)}")
        if len(args) != len(self.input_specs):
            raise TypeError(f"Plan.{who}: the plan has {len(self.input_specs)} tensor "
                            f"inputs, got {len(args)}")
        tensors = [_tensor.convert_to_tensor(x) for x in args]
        got = [(t.dtype, tuple(t.shape)) for t in tensors]
        if got != self.input_specs:
            k = next(i for i, (a, b) in enumerate(zip(got, self.input_specs)) if a != b)
            raise ValueError(
                f"Plan.{who}: input {k} is {_spec_str(got[k])}, the plan is for "
                f"{_spec_str(self.input_specs[k])} (expected "
                f"[{', '.join(map(_spec_str, self.input_specs))}], got "
                f"[{', '.join(map(_spec_str, got))}]); make a plan for these sizes "
                f"(or call the function, which plans each size it meets)")
        return tensors

    def run(self, *args, **kwargs):
        """Run the planned graph once on inputs of the planned sizes.

        Args:
            *args, **kwargs: the inputs: for a graph's plan, its tensor
                inputs in order (Tensors or arrays); for a
                :class:`ConcreteFunction`'s, the function's arguments as for
                a call.  Each must have the dtype and shape of
                :attr:`input_specs` (the inputs the plan was made for).

        Returns:
            What a call returns: the graph's outputs (a list of Tensors) for
            a graph's plan, the function's result for a concrete function's.
            The run has a call's effects (variable updates).

        Raises:
            TypeError: another number of tensor inputs.
            ValueError: an input of another dtype or shape than planned (the
                message names the expected and the given ones); the errors
                of a call.
        """
        tensors = self._inputs("run", args, kwargs)
        outs = self._graph.run(tensors)
        return outs if self._concrete is None else self._concrete._pack(outs)

    def tune(self, *args, **kwargs):
        """Choose the kernels the plan still lacks, by timing (``jit_compile``).

        Under ``jit_compile`` a node with several kernels (variants, one or
        all threads) runs the one timing chose for its shapes; the choices
        are made once per process and shape.  ``tune`` makes them now: it
        runs the graph once on these inputs, timing each candidate kernel
        (the work a first call of these sizes does otherwise), so later
        :meth:`run` calls only run.  A plan without choices to make
        (compiled without ``jit_compile``, or timed before) is not run.
        A tuning run has a call's effects (variable updates).

        Args:
            *args, **kwargs: inputs as for :meth:`run` (the planned dtypes
                and shapes).

        Returns:
            list: per node the kernel it runs now (``self["kernels"]``, e.g.
            ``"avx512_direct"``, ``" @1 thread"`` appended when timing chose
            one thread; None for ops with one kernel).  ``self["variants"]``
            and ``self["kernels"]`` are updated.

        Raises:
            TypeError, ValueError: as :meth:`run`.
        """
        tensors = self._inputs("tune", args, kwargs)
        if -1 in self["variants"]:
            self._graph.run(tensors)
            self.update(self._graph._describe(tensors))
        return list(self["kernels"])

    def __repr__(self):
        return (f"<Plan inputs=[{', '.join(map(_spec_str, self.input_specs))}] "
                f"flops={self['flops']:.3g} arena_bytes={self['arena_bytes']}>")

    def __reduce__(self):  # pickled (or copied) as the description dict it is
        return (dict, (dict(self),))


_C._set_plan_class(Plan)


# ---- functions ------------------------------------------------------------------

def _given_dtype(x):
    """The dtype (str) of an array, Tensor or NumPy scalar; None for a
    Python number (it has none of its own)."""
    python = isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)
    dtype = None if python else getattr(x, "dtype", None)  # (np.float64 is a float too)
    if dtype is None:
        return None
    try:
        return str(np.dtype(dtype))
    except TypeError:  # a dtype NumPy does not know (bfloat16, another library's)
        return str(dtype)


def _check_dtype(name, i, x, spec):
    """Refuse argument ``i`` when its dtype is not ``spec``'s, as
    tf.function refuses an input that does not match its input_signature
    (no silent cast: float64 data rounded to float32, floats truncated to
    int32).  A Python number takes the spec's dtype when it is of the same
    kind (an int for a float spec, not a float for an int spec).

    Raises:
        ValueError: naming the argument, the expected and the given dtype.
    """
    given = _given_dtype(x)
    if given is None:
        natural = np.asarray(x).dtype
        if np.can_cast(natural, spec.dtype, "same_kind"):
            return
        given = f"{type(x).__name__} ({natural})"
    elif given == spec.dtype:
        return
    shape = getattr(x, "shape", ())
    raise ValueError(
        f"{name}: argument {i} of dtype {given} and shape {tuple(shape)} does not match the "
        f"input_signature's {spec}: expected dtype {spec.dtype}, got {given}; an "
        f"input_signature does not cast its arguments (as tf.function's): pass {spec.dtype} "
        f"data, e.g. np.asarray(x, {spec.dtype!r})")


class Function:
    """A compiled function: what ``pyresnet.compile`` returns.

    Call it like the Python function.  ``tracing_count`` (also
    ``experimental_get_tracing_count()``) counts traces;
    ``get_concrete_function(*args)`` traces (if needed) and returns the
    :class:`ConcreteFunction` for those arguments.
    """

    def __init__(self, fn, input_signature=None, jit_compile=False, reduce_retracing=False):
        self._fn = fn
        self._signature = None if input_signature is None else list(input_signature)
        self.jit_compile = bool(jit_compile)
        self.reduce_retracing = bool(reduce_retracing)
        self._cache = {}
        self._lock = threading.RLock()
        self.tracing_count = 0
        self._warned = False
        self._bound = weakref.WeakKeyDictionary()
        # A callable object (a Layer, a Model) keeps its own attributes: only a
        # function's __dict__ is merged, and an object is named by its class.
        functools.update_wrapper(self, fn, updated=functools.WRAPPER_UPDATES
                                 if inspect.isroutine(fn) else ())
        if not hasattr(self, "__name__"):
            self.__name__ = type(fn).__name__

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        bound = self._bound.get(instance)
        if bound is None:
            bound = Function(self._fn.__get__(instance, owner), self._signature, self.jit_compile,
                             self.reduce_retracing)
            self._bound[instance] = bound
        return bound

    def experimental_get_tracing_count(self):
        """Number of traces so far (int), as tf.function's."""
        return self.tracing_count

    # -- signatures --
    def _key(self, args, kwargs):
        """(cache key, leaves, tensor leaves, traced dims) of a call.  A traced
        shape holds ints and symbol names (str) for the unknown sizes."""
        leaves = []
        structure = _flatten((args, kwargs), leaves)
        if self._signature is not None:
            specs = []
            _flatten(self._signature, specs)
            if len(specs) != len(leaves) or kwargs:
                raise TypeError(
                    f"{self.__name__}: called with {len(leaves)} arguments but its "
                    f"input_signature has {len(specs)} TensorSpecs (keyword arguments are not "
                    f"allowed with an input_signature)")
        parts, tensors, dims, names_used = [], [], [], {}
        for i, x in enumerate(leaves):
            if self._signature is not None:
                spec = specs[i]
                _check_dtype(self.__name__, i, x, spec)
                t = _tensor.convert_to_tensor(x, spec.dtype)
                if not spec.is_compatible_with(t):
                    raise ValueError(
                        f"{self.__name__}: argument {i} of shape {t.shape} and dtype {t.dtype} "
                        f"does not match the input_signature's {spec}")
                name = spec.name or f"arg{i}"
                if name in names_used and names_used[name] != i:  # two specs, one name
                    name = f"{name}#{i}"
                names_used[name] = i
                traced = tuple(n if s is not None else "batch" if d == 0 else f"{name}.dim{d}"
                               for d, (s, n) in enumerate(zip(spec.shape, t.shape)))
            elif _is_tensor_leaf(x):
                t = _tensor.convert_to_tensor(x)
                if t.is_symbolic:
                    raise TypeError(f"{self.__name__}: argument {i} is a symbolic tensor")
                traced = tuple(t.shape)
                if self.reduce_retracing and t.ndim >= 1:
                    traced = (f"arg{i}.dim0",) + traced[1:]
            else:
                if isinstance(x, Variable):
                    parts.append(("variable", id(x)))
                else:
                    try:
                        hash(x)
                        parts.append(("value", type(x), x))
                    except TypeError:
                        parts.append(("object", id(x)))
                continue
            tensors.append(t)
            dims.append(traced)
            parts.append(("tensor", t.dtype, traced))
        return (structure, tuple(parts)), leaves, tensors, dims

    def _concrete(self, args, kwargs):
        key, leaves, tensors, dims = self._key(args, kwargs)
        concrete = self._cache.get(key)
        if concrete is None:
            with self._lock:
                concrete = self._cache.get(key)
                if concrete is None:
                    concrete = self._trace(args, kwargs, leaves, tensors, dims)
                    self._cache[key] = concrete
        return concrete, tensors

    def __call__(self, *args, **kwargs):
        if _C.tracing():  # called from another traced function: inline it
            return self._fn(*args, **kwargs)
        concrete, tensors = self._concrete(args, kwargs)
        recorder = _trace.recorder
        if recorder is not None:  # pyresnet.summary.trace_on
            return recorder(concrete, tensors)
        return concrete._run(tensors)

    def get_concrete_function(self, *args, **kwargs):
        """The :class:`ConcreteFunction` for these arguments (traced if new)."""
        concrete, tensors = self._concrete(args, kwargs)
        if tensors is not concrete._example:
            concrete = ConcreteFunction(concrete._graph, concrete._out_structure,
                                        concrete._out_leaves, tensors, concrete.name,
                                        concrete._scopes)
        return concrete

    # -- tracing --
    def _trace(self, args, kwargs, leaves, tensors, dims):
        graph = _C.Graph()
        trace = _trace.Trace(graph, self.__name__, first=self.tracing_count == 0)
        trace.jit = self.jit_compile
        traces = getattr(_trace.local, "traces", None)
        if traces is None:
            traces = _trace.local.traces = []
        traces.append(trace)
        graph.begin()
        try:
            symbols = iter([graph.placeholder(t.dtype, d) for t, d in zip(tensors, dims)])
            call_leaves = [next(symbols) if _is_tensor_leaf(x) or self._signature is not None
                           else x for x in leaves]
            structure = _flatten((args, kwargs), [])
            sym_args, sym_kwargs = _unflatten(structure, iter(call_leaves))
            from .loops import watch_for_loops
            with watch_for_loops(self._fn):
                result = self._fn(*sym_args, **sym_kwargs)
            if trace.open_loops:
                raise ValueError(
                    f"{self.__name__}: a `for` loop over a dataset was left before its end "
                    f"(break or return inside it); a loop over a dataset in a compiled "
                    f"function runs every batch of the pass: use pyresnet.while_loop for an "
                    f"early exit, or take() fewer batches")
        finally:
            for loop in reversed(trace.open_loops):
                loop.abandon()
            graph.end()
            del traces[traces.index(trace):]
        if trace.created and not trace.first:  # the function swallowed the error
            raise trace.creation_error()
        out_leaves_raw = []
        out_structure = _flatten(result, out_leaves_raw)
        graph_outputs, out_leaves = [], []
        for x in out_leaves_raw:
            if isinstance(x, Tensor):
                out_leaves.append(len(graph_outputs))
                graph_outputs.append(x)
            else:
                out_leaves.append(("const", x))
        graph.finalize(graph_outputs, self.jit_compile)
        self.tracing_count += 1
        if self.tracing_count > RETRACE_WARNING_THRESHOLD and not self._warned:
            self._warned = True
            warnings.warn(
                f"{self.__name__} has been traced {self.tracing_count} times. Each new shape, "
                f"dtype or Python value of an argument costs a trace; pass tensors instead of "
                f"Python numbers, use reduce_retracing=True or an input_signature with None "
                f"dimensions for varying batch sizes, and define compiled functions outside "
                f"loops.", RuntimeWarning, stacklevel=4)
        name = getattr(self._fn, "__name__", "function")
        return ConcreteFunction(graph, out_structure, out_leaves, tensors, name,
                                trace.scope_names)


def compile(func=None, *, input_signature=None, jit_compile=False, reduce_retracing=False):
    """Compile a function of tensors into a graph run in C (``tf.function``).

    Usable as ``@pyresnet.compile``, ``@pyresnet.compile(jit_compile=True)``
    or ``pyresnet.compile(fn, input_signature=[TensorSpec(...)])``; works on
    functions, methods (one graph cache per instance) and closures over
    models and optimizers.  See the module docstring for the tracing rules.

    Args:
        func: the Python function.
        input_signature: optional list (nested structure) of
            :class:`TensorSpec`; calls must match it (rank, static sizes and
            dtype: an argument of another dtype is not cast, ValueError);
            ``None`` dims are unknown sizes (symbols of one trace).
        jit_compile (bool): fuse elementwise chains, update in place where
            safe, choose kernels per shape by timing.
        reduce_retracing (bool): the leading dimension of each tensor
            argument is an unknown size (one graph for all batch sizes).
    Returns:
        :class:`Function` (or a decorator when ``func`` is None).
    """
    def wrap(fn):
        return Function(fn, input_signature, jit_compile, reduce_retracing)

    return wrap if func is None else wrap(func)
