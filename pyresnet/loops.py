"""Loops that stay in the graph: :func:`while_loop` and :func:`fori_loop`
(TensorFlow's and JAX's semantics).

Eagerly they are Python loops.  Inside a function being compiled
(``pyresnet.compile``) the body is traced once into a subgraph, and the loop
becomes one node of the graph that runs the body over and over in C without
the GIL (csrc/executor.c): the body is planned once (one memory plan per
batch size), its loop variables are double-buffered, values of the
enclosing function it reads are its inputs.  Iterating a
:class:`pyresnet.data.Dataset` inside a compiled function makes the same
kind of node (see :mod:`pyresnet.data.dataset`).

Loop variables keep their dtype and shape from one iteration to the next
(``ValueError`` otherwise, naming the variable and both shapes).  Gradients
through a loop are not supported: ``GradientTape.gradient`` of a value that
depends on a loop's result raises ``NotImplementedError``; take the
gradient inside the body (a training step inside a loop is the usual case),
or write the loop in Python.
"""
import numpy as np

from ._loader import _C
import ctypes
import dis
import sys
import warnings
from .tensor import Tensor, Variable, convert_to_tensor
from . import _trace

__all__ = ["while_loop", "fori_loop", "UnrolledLoopWarning"]



def _leaves(structure_value, what):
    leaves = []
    structure = _trace.flatten(structure_value, leaves)
    tensors = []
    for i, x in enumerate(leaves):
        try:
            tensors.append(convert_to_tensor(x))
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what}: loop variable {i} must be a tensor, an array or a number, "
                            f"got {type(x).__name__}") from e
    return structure, tensors


def _same_structure(a, b):
    return a == b


def _is_scalar(t):
    return all(d == 1 for d in t.shape)


class _Body:
    """A loop body being traced: a Graph whose parent is the graph being
    traced now, pushed as the current trace (pyresnet.print, variable
    creation and nested loops see it)."""

    def __init__(self, what):
        traces = getattr(_trace.local, "traces", None)
        if not traces:
            raise RuntimeError(f"{what}: called while tracing outside pyresnet.compile")
        self.outer = traces[-1]
        self.graph = _C.Graph(parent=self.outer.graph)
        self.trace = _trace.Trace(self.graph, self.outer.name, first=self.outer.first)
        self.trace.jit = getattr(self.outer, "jit", False)
        self.open = False

    def __enter__(self):
        _trace.local.traces.append(self.trace)
        self.graph.begin()
        self.open = True
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        if self.open:
            self.open = False
            self.graph.end()
            _trace.local.traces.pop()
            self.outer.created.extend(self.trace.created)

    def finalize(self, outputs):
        self.graph.finalize(outputs, self.trace.jit)


def while_loop(cond, body, loop_vars, maximum_iterations=None):
    """Repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``
    (``tf.while_loop``).

    Args:
        cond: ``(*loop_vars) -> scalar`` tensor (nonzero: continue), or a
            Python bool.
        body: ``(*loop_vars) -> new loop_vars`` in the same structure.
        loop_vars: a tuple/list (nested structures allowed) of tensors,
            arrays or numbers, passed to ``cond`` and ``body`` unpacked; a
            single tensor is passed as one argument.
        maximum_iterations (int): stop after this many iterations at most.
    Returns:
        the final loop variables, in the structure of ``loop_vars``.
    Raises:
        ValueError: a loop variable changes dtype or shape, or ``cond`` is not
            a scalar; TypeError: ``body`` returns another structure.
        NotImplementedError: (later) a gradient through the loop.
    """
    single = not isinstance(loop_vars, (list, tuple))
    args = (loop_vars,) if single else tuple(loop_vars)
    if maximum_iterations is not None:
        maximum_iterations = int(maximum_iterations)
        if maximum_iterations < 0:
            raise ValueError(f"while_loop: maximum_iterations must be >= 0, got "
                             f"{maximum_iterations}")
    structure, inits = _leaves(args, "while_loop")

    def call(fn, values):
        return fn(*_trace.unflatten(structure, iter(values)))

    def check_cond(c):
        if isinstance(c, (bool, np.bool_)):
            return c
        c = convert_to_tensor(c)
        if not _is_scalar(c):
            raise ValueError(f"while_loop: cond must return a scalar, got shape {c.shape}")
        return c

    def new_leaves(result):
        result = (result,) if single else result
        if single is False and not isinstance(result, (list, tuple)):
            raise TypeError("while_loop: body must return the loop variables as a "
                            f"{type(loop_vars).__name__}, got {type(result).__name__}")
        s, values = _leaves(tuple(result), "while_loop")
        if s != structure:
            raise TypeError("while_loop: body must return the structure of loop_vars")
        return values

    if not _C.tracing():
        values, n = inits, 0
        while maximum_iterations is None or n < maximum_iterations:
            c = check_cond(call(cond, values))
            if not bool(c.numpy() if isinstance(c, Tensor) else c):
                break
            values = new_leaves(call(body, values))
            n += 1
        return _pack(structure, values, single, loop_vars)

    cond0 = check_cond(call(cond, inits))
    if isinstance(cond0, (bool, np.bool_)):
        if not cond0:
            return _pack(structure, inits, single, loop_vars)
        cond0 = None
    with _Body("while_loop") as b:
        params = [b.graph.placeholder_like(t) for t in inits]
        values = new_leaves(call(body, params))
        flag = check_cond(call(cond, values))
    if isinstance(flag, (bool, np.bool_)):
        if flag and maximum_iterations is None:
            raise ValueError("while_loop: cond is always True and maximum_iterations is None: "
                             "the loop would never end")
        flag = convert_to_tensor(np.float32(1.0 if flag else 0.0))
    b.finalize(values + [flag])
    n = len(inits)
    outs = b.outer.graph.add_loop(b.graph, inits, list(range(n)), list(range(n)), cond_out=n,
                                  cond0=cond0, max_iter=-1 if maximum_iterations is None
                                  else maximum_iterations)
    return _pack(structure, outs, single, loop_vars)


def _pack(structure, values, single, loop_vars):
    out = _trace.unflatten(structure, iter(values))
    if single:
        return out[0]
    return list(out) if isinstance(loop_vars, list) else out


def fori_loop(lower, upper, body, init_val):
    """``val = body(i, val)`` for ``i`` in ``range(lower, upper)``
    (``jax.lax.fori_loop``).

    Args:
        lower, upper: ints, or int32/int64 scalar tensors (a bound computed
            in the function, e.g. from :func:`pyresnet.ops.shape`).
        body: ``(i, val) -> val``; ``i`` is an int32 scalar tensor.
        init_val: a tensor, array, number or a nested tuple/list/dict of
            them (the loop variables).
    Returns:
        the final ``val``, in the structure of ``init_val``.
    Raises:
        ValueError/TypeError: as :func:`while_loop`.
    """
    structure, inits = _leaves(init_val, "fori_loop")

    def bound(x):
        if isinstance(x, Tensor):
            if x.ndim != 0:
                raise ValueError(f"fori_loop: a bound must be a scalar, got shape {x.shape}")
            return x if x.is_symbolic else int(x.numpy())
        return int(x)

    lower, upper = bound(lower), bound(upper)

    def new_leaves(result):
        s, values = _leaves(result, "fori_loop")
        if s != structure:
            raise TypeError("fori_loop: body must return the structure of init_val")
        return values

    if not _C.tracing():
        values = inits
        for i in range(lower, upper):
            values = new_leaves(body(Tensor(np.int32(i)), _trace.unflatten(structure,
                                                                              iter(values))))
        return _trace.unflatten(structure, iter(values))

    with _Body("fori_loop") as b:
        params = [b.graph.placeholder_like(t) for t in inits]
        index = b.graph.placeholder("int32", ())
        values = new_leaves(body(index, _trace.unflatten(structure, iter(params))))
    b.finalize(values)
    n = len(inits)
    outs = b.outer.graph.add_loop(b.graph, inits, list(range(n)), list(range(n)), lower=lower,
                                  upper=upper, iter_in=n)
    return _trace.unflatten(structure, iter(outs))


# ---- loops over a dataset ----------------------------------------------------------

class UnrolledLoopWarning(UserWarning):
    """A loop inside a compiled function was unrolled while tracing: its body
    is repeated in the graph and the data it iterated are frozen into it as
    constants (the same values on every call)."""


_warned_at = set()


def warn_unrolled(what, stacklevel=1, where=None):
    """Warn once per source line (``where``: (file, line), else the caller's
    ``stacklevel`` frames up) that a loop is being unrolled into constants."""
    if where is None:
        frame = sys._getframe(stacklevel)
        where = (frame.f_code.co_filename, frame.f_lineno)
    if where in _warned_at:
        return
    _warned_at.add(where)
    warnings.warn_explicit(
        f"{what} inside a compiled function is unrolled while tracing: the loop body is "
        f"repeated once per element in the graph and the elements are frozen into it as "
        f"constants (the same data on every call, no new shuffle or augmentation). Iterate "
        f"a pyresnet.data.Dataset whose maps are pyresnet layers (it becomes a loop node), "
        f"or use pyresnet.fori_loop / while_loop.", UnrolledLoopWarning, where[0], where[1])


_STORES = ("STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL")


def _for_loops(code):
    """{offset: (target names, line)} for the ``for`` loops of ``code``: the
    offset of the first instruction after the loop variables are stored."""
    instrs = list(dis.get_instructions(code))
    loops, line = {}, None
    for k, ins in enumerate(instrs):
        if ins.positions is not None and ins.positions.lineno is not None:
            line = ins.positions.lineno
        if ins.opname != "FOR_ITER":
            continue
        j, names = k + 1, []
        count = 1
        if j < len(instrs) and instrs[j].opname == "UNPACK_SEQUENCE":
            count, j = instrs[j].arg, j + 1
        while len(names) < count and j < len(instrs) and instrs[j].opname in _STORES:
            names.append(instrs[j].argval)
            j += 1
        if names and j < len(instrs):
            loops[instrs[j].offset] = (names, line)
    return loops


class watch_for_loops:
    """While a compiled function is traced: warn (once per loop) when a
    ``for`` loop of the function's own code hands it data -- NumPy arrays or
    real (non-Variable) tensors, from a list, a generator, any Python
    iterable -- since each of those iterations is traced into the graph with
    its data as constants.  Uses ``sys.settrace`` on that function's frame
    only (skipped when a tracer such as a debugger or coverage is active)."""

    def __init__(self, fn):
        fn = getattr(fn, "__func__", fn)
        self.code = getattr(fn, "__code__", None)
        self.loops = _for_loops(self.code) if self.code is not None else {}
        self.active = False

    def _local(self, frame, event, arg):
        if event == "opcode":
            loop = self.loops.get(frame.f_lasti)
            if loop is not None:
                names, line = loop
                values = [frame.f_locals.get(n) for n in names]
                if any(isinstance(v, np.ndarray) or (isinstance(v, Tensor) and not v.is_symbolic
                                                    and not isinstance(v, Variable))
                       for v in values):
                    warn_unrolled(f"a for loop over arrays or tensors ({', '.join(names)})",
                                  where=(self.code.co_filename, line))
        return self._local

    def _global(self, frame, event, arg):
        if event == "call" and frame.f_code is self.code:
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
            return self._local
        return None

    def __enter__(self):
        if self.loops and sys.gettrace() is None:
            self.active = True
            sys.settrace(self._global)
        return self

    def __exit__(self, *exc):
        if self.active:
            sys.settrace(None)
            self.active = False
        return False


def dataset_loop(dataset, source, stacklevel=1):
    """The iterator ``for ... in dataset`` gets while tracing: a loop node
    (:class:`_FeedLoop`) when ``source`` (``dataset._loop_source()``) is
    given, else None after warning that the loop is unrolled."""
    if source is None:
        warn_unrolled(f"iterating {dataset!r} (a map runs in Python)", stacklevel + 1)
        return None
    return _FeedLoop(source)


def _set_locals(frame, values):
    """Rebind local variables of a running function's frame."""
    frame.f_locals.update(values)
    if sys.version_info < (3, 13):  # 3.13+: f_locals writes through (PEP 667)
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


_loop_count = [0]


class _FeedLoop:
    """``for batch in source`` while tracing: yields one batch of symbolic
    tensors (the inputs of a loop body), and when the ``for`` asks for the
    next one, closes the body and appends the loop node.

    The loop's variables are the local variables of the function running
    the ``for``: at the start every tensor-valued local (not a Variable)
    becomes an input of the body; at the end, a local that holds a value
    computed in the body is carried from one iteration to the next (its
    initial value the one it had before the loop; zeros of its shape and
    dtype when it had none -- then it holds the last iteration's value),
    and after the loop holds the loop's final value.  The batches
    themselves (the ``for`` targets) and values whose shape depends on a
    smaller last batch cannot leave the loop (using them after it raises
    an error that says so), nor can values kept elsewhere than in local
    variables (a list appended to, an attribute).  ``break`` and
    ``return`` inside the loop are not supported."""

    def __init__(self, source):
        self.probe, self.single, self.feeder = source
        self.state = 0

    def __iter__(self):
        return self

    def __next__(self):
        frame = sys._getframe(1)
        if self.state == 0:
            self.state = 1
            return self._open(frame)
        if self.state == 1:
            self.state = 2
            self._close(frame)
        raise StopIteration

    def _open(self, frame):
        self.body = body = _Body("iterating a dataset")
        shapes = self.probe.batch_shapes
        _loop_count[0] += 1  # a smaller last batch: the batch size is a symbol of the body
        self.batch = f"loop{_loop_count[0]}.batch" if shapes[0][2][0] != shapes[0][1][0] \
            else shapes[0][1][0]
        self.rebound = {}
        for name, value in frame.f_locals.items():
            if isinstance(value, Tensor) and not isinstance(value, Variable) and (
                    not value.is_symbolic or body.outer.graph.owns(value, True)):
                self.rebound[name] = value
        body.outer.open_loops.append(self)
        body.__enter__()
        self.params = {name: body.graph.placeholder_like(t) for name, t in self.rebound.items()}
        self.feeds = [body.graph.placeholder(dtype, (self.batch,) + tuple(shape[1:]))
                      for dtype, shape, _ in shapes]
        _set_locals(frame, self.params)
        return self.feeds[0] if self.single else tuple(self.feeds)

    def abandon(self):
        """Leave a loop that did not finish (an exception, break, return)."""
        if self.state == 1:
            self.state = 3
            self.body.close()

    def _close(self, frame):
        body = self.body
        body.close()
        body.outer.open_loops.remove(self)
        graph = body.graph
        now = frame.f_locals
        inits, carry_in, outputs, names, restore = [], [], [], [], {}

        def is_feed(value):
            return any(value is t for t in self.feeds)

        def carry(name, init, param, value):
            inits.append(init)
            carry_in.append(graph.input_index(param))
            outputs.append(value)
            names.append(name)

        for name, init in self.rebound.items():
            param = self.params[name]
            value = now.get(name, param)
            if isinstance(value, Tensor) and value is not param and not is_feed(value):
                carry(name, init, param, value)       # a loop variable
            else:  # unchanged (the outer value again after the loop), or no longer a tensor
                carry(None, init, param, param)
                if value is param:
                    restore[name] = init
        for name, value in now.items():
            if name not in self.rebound and isinstance(value, Tensor) and graph.owns(value) \
                    and not is_feed(value) and all(isinstance(d, int) for d in value.shape):
                init = Tensor(np.zeros(value.shape, value.dtype))  # no value before the loop
                carry(name, init, graph.placeholder_like(init), value)
        body.finalize(outputs)
        try:
            outs = body.outer.graph.add_loop(
                graph, inits, carry_in, list(range(len(inits))), feeder=self.feeder,
                feed_in=[graph.input_index(t) for t in self.feeds], feed_batch=self.batch)
        except ValueError as e:
            message = str(e)
            if message.startswith("loop variable "):
                k = int(message.split()[2])
                message = f"`{names[k]}`: " + message
            raise ValueError(f"a loop over a dataset: {message}") from None
        final = {name: out for name, out in zip(names, outs) if name is not None}
        _set_locals(frame, {**final, **restore})


def run_batches(source, step, n_x):
    """Inside a compiled function: run ``step(data)`` on the batches the
    feeder picks, in one loop node, and return the last step's result (the
    loop behind ``steps_per_execution``).

    Args:
        source: ``(probe, single, feeder)`` as ``Dataset._loop_source()``
            gives; the feeder picks the pass and the batches of each call.
            Components: the ``n_x`` model inputs, then the targets.
        step: ``((x, y)) -> logs``, a structure of tensors whose shapes do not
            depend on the batch size (the metrics' results).
        n_x (int): how many components are model inputs.
    Returns:
        the logs of the last step run (zeros when no step ran).
    """
    probe, _, feeder = source
    _loop_count[0] += 1
    batch = f"loop{_loop_count[0]}.batch"  # one trace for every batch size
    shapes = probe.batch_shapes
    with _Body("steps_per_execution") as body:
        graph = body.graph
        feeds = [graph.placeholder(dtype, (batch,) + tuple(shape[1:]))
                 for dtype, shape, _ in shapes]
        xs, ys = feeds[:n_x], feeds[n_x:]
        logs = step((xs[0] if n_x == 1 else xs, ys[0] if len(ys) == 1 else ys))
        structure, values = _leaves(logs, "steps_per_execution")
        inits = [Tensor(np.zeros(v.shape, v.dtype)) for v in values]
        params = [graph.placeholder_like(t) for t in inits]
    body.finalize(values)
    outs = body.outer.graph.add_loop(
        graph, inits, [graph.input_index(p) for p in params], list(range(len(values))),
        feeder=feeder, feed_in=[graph.input_index(t) for t in feeds], feed_batch=batch)
    return _trace.unflatten(structure, iter(outs))
