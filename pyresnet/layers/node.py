"""The symbolic side of the functional API (as Keras 3's ``KerasTensor`` and
``Node``): a graph of layer calls kept in Python, apart from the numeric
backend.  Calling a layer on KerasTensors records a Node and returns new
KerasTensors; ``Model(inputs, outputs)`` later walks these Nodes."""
import itertools

from ..utils import tree

_node_ids = itertools.count()


class KerasTensor:
    """A symbolic tensor of the functional API: a shape with a ``None``
    batch dimension, a dtype, and the layer call that produced it.  It holds
    no data; using it as a value raises TypeError.

    Attributes:
        shape (tuple): e.g. ``(None, 32, 32, 3)`` (NHWC).
        dtype (str): ``"float32"``.
        name (str): the producing layer's name.
    """

    def __init__(self, shape, dtype="float32", name=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name
        self._history = None  # (Node, index of this tensor among the node's outputs)

    @property
    def ndim(self):
        """Rank, batch dimension included."""
        return len(self.shape)

    def __repr__(self):
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype}, name={self.name}>"

    def _no_value(self, *args, **kwargs):
        """A symbolic input has no value: raises TypeError saying how to
        get one (build the model, call it on data)."""
        raise TypeError(
            f"{self!r} is a symbolic input of a functional model under construction and has "
            "no value; build the model with pyresnet.Model(inputs, outputs) and call it on data"
        )

    __array__ = __bool__ = __float__ = __int__ = __len__ = __iter__ = numpy = _no_value


class Node:
    """One call of a layer on KerasTensors.

    Args:
        layer: the Layer called.
        inputs: the call's first argument (a KerasTensor or a nested list/dict
            of them); ``[]`` for an InputLayer.
        args, kwargs: the call's other arguments, replayed as given (e.g.
            an explicit ``training=False``), KerasTensors among them replaced
            by their values (``layer(a, b)``).
        outputs: the KerasTensors the call returned (same nesting).
    """

    def __init__(self, layer, inputs, args, kwargs, outputs):
        self.id = next(_node_ids)  # creation order is a topological order
        self.layer = layer
        self.inputs = inputs
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        self.outputs = outputs
        # the KerasTensors the call reads: its first argument's, then any in
        # the other arguments (``layer(a, b)``)
        self.input_tensors = tree.flatten(inputs)
        self.arg_tensors = [t for t in tree.flatten([list(self.args), self.kwargs])
                            if isinstance(t, KerasTensor)]
        self.input_tensors += self.arg_tensors
        self.output_tensors = tree.flatten(outputs)
        for i, t in enumerate(self.output_tensors):
            t._history = (self, i)
            t.name = layer.name
        layer._inbound_nodes.append(self)

    @property
    def parents(self):
        """The Nodes that produced this node's inputs."""
        return [t._history[0] for t in self.input_tensors]
