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
import importlib
from .tensor import Tensor, convert_to_tensor

__all__ = ["while_loop", "fori_loop"]

_compile = importlib.import_module("pyresnet.compile")  # the module (pyresnet.compile is the function)


def _leaves(structure_value, what):
    leaves = []
    structure = _compile._flatten(structure_value, leaves)
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
        traces = getattr(_compile._local, "traces", None)
        if not traces:
            raise RuntimeError(f"{what}: called while tracing outside pyresnet.compile")
        self.outer = traces[-1]
        self.graph = _C.Graph(parent=self.outer.graph)
        self.trace = _compile._Trace(self.graph, self.outer.name, first=self.outer.first)
        self.trace.jit = getattr(self.outer, "jit", False)
        self.open = False

    def __enter__(self):
        _compile._local.traces.append(self.trace)
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
            _compile._local.traces.pop()
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
        return fn(*_compile._unflatten(structure, iter(values)))

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
    out = _compile._unflatten(structure, iter(values))
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
            values = new_leaves(body(Tensor(np.int32(i)), _compile._unflatten(structure,
                                                                              iter(values))))
        return _compile._unflatten(structure, iter(values))

    with _Body("fori_loop") as b:
        params = [b.graph.placeholder_like(t) for t in inits]
        index = b.graph.placeholder("int32", ())
        values = new_leaves(body(index, _compile._unflatten(structure, iter(params))))
    b.finalize(values)
    n = len(inits)
    outs = b.outer.graph.add_loop(b.graph, inits, list(range(n)), list(range(n)), lower=lower,
                                  upper=upper, iter_in=n)
    return _compile._unflatten(structure, iter(outs))
