"""The tracing state that :mod:`pyresnet.compile`, :mod:`pyresnet.loops` and
:mod:`pyresnet.summary` share: the stack of traces open in this thread, the
recorder that ``summary.trace_on`` installs, and how call arguments are
flattened into tensors and rebuilt.  Internal (no public names)."""
import threading

import numpy as np

from . import tensor as _tensor
from .tensor import Tensor, Variable

local = threading.local()  # .traces: stack of Trace for this thread
# pyresnet.summary.trace_on: called as recorder(concrete, tensors) instead of
# running each compiled call (it runs the call itself, timed or not)
recorder = None


def traces():
    """The traces open in this thread, innermost last (a list; may be empty)."""
    stack = getattr(local, "traces", None)
    if stack is None:
        stack = local.traces = []
    return stack


# ---- structures ------------------------------------------------------------

def flatten(obj, leaves):
    """Flatten nested lists/tuples/dicts into ``leaves``; return the structure
    with leaves replaced by None (hashable for tuples/dicts of hashables)."""
    if isinstance(obj, (list, tuple)) and not isinstance(obj, Tensor):
        inner = tuple(flatten(x, leaves) for x in obj)
        return (type(obj), inner)
    if isinstance(obj, dict):  # in insertion order, which the caller sees again
        keys = tuple(obj)
        return (dict, keys, tuple(flatten(obj[k], leaves) for k in keys))
    leaves.append(obj)
    return None


def unflatten(structure, leaves):
    if structure is None:
        return next(leaves)
    if structure[0] is dict:
        return {k: unflatten(s, leaves) for k, s in zip(structure[1], structure[2])}
    items = [unflatten(s, leaves) for s in structure[1]]
    if structure[0] is list:
        return items
    if structure[0] is tuple:
        return tuple(items)
    return structure[0](*items)  # namedtuple


def is_tensor_leaf(x):
    return (isinstance(x, (Tensor, np.ndarray)) and not isinstance(x, Variable))


class Trace:
    def __init__(self, graph, name="function", first=True):
        self.graph = graph
        self.name = name
        self.first = first  # only the first trace of a Function may create variables
        self.created = []
        self.jit = False  # jit_compile: loop bodies get the same passes
        self.open_loops = []  # loops over a dataset whose body is being traced
        # name scopes (name_scope): the open ones, and the scope paths seen;
        # the C graph gives each new node the index of the current one
        self.scope_stack = []
        self.scope_names = [""]
        self._scope_index = {"": 0}

    def mark_scope(self):
        """Nodes traced from now on belong to the current scope path."""
        name = "/".join(self.scope_stack)
        index = self._scope_index.get(name)
        if index is None:
            index = self._scope_index[name] = len(self.scope_names)
            self.scope_names.append(name)
        self.graph.scope = index

    def creation_error(self):
        names = ", ".join(getattr(v, "name", "?") for v in self.created[:5])
        return ValueError(
            f"{self.name}: a compiled function created variables ({names}) on a trace "
            f"other than its first; create variables on the first call only (layers build "
            f"and optimizer slots are fine on the first call), or outside the function")


def observe_variable(var):
    """Record a Variable made while tracing; on a trace that may not create
    variables, refuse it at once, before the caller (an optimizer's slot
    table, a layer's weight list) can keep it: a rejected trace leaves
    nothing behind, so retrying the same call fails the same way."""
    stack = getattr(local, "traces", None)
    if stack:
        trace = stack[-1]
        trace.created.append(var)
        if not trace.first:
            raise trace.creation_error()


_tensor._variable_observers.append(observe_variable)
