"""The graph of a functional model: the layer calls between its Inputs and
its outputs, recorded as Nodes while the model was written (Keras 3's
``Functional``), and replayed on data."""
from ..layers.input_layer import InputLayer
from ..layers.node import KerasTensor
from ..utils import tree


def _check_keras_tensors(model_name, what, structure):
    for t in tree.flatten(structure):
        if not isinstance(t, KerasTensor):
            raise TypeError(f'Model "{model_name}": all {what} must be KerasTensors (from '
                            f"layers.Input or layer calls on them), got {type(t).__name__}")


class FunctionalGraph:
    """The Nodes leading from ``inputs`` to ``outputs`` in creation order
    (a topological order, since a call needs its inputs to exist).

    Args:
        model_name (str): for error messages.
        inputs: a KerasTensor from ``Input`` or a list/dict of them.
        outputs: a KerasTensor or a list/dict of them.
    Raises:
        TypeError: when inputs/outputs are not KerasTensors.
        ValueError: when an input is not an ``Input`` tensor, or an output
            depends on an Input that is not among ``inputs`` ("graph
            disconnected").
    """

    def __init__(self, model_name, inputs, outputs):
        _check_keras_tensors(model_name, "inputs", inputs)
        _check_keras_tensors(model_name, "outputs", outputs)
        self.inputs, self.outputs = inputs, outputs
        self.flat_inputs, self.flat_outputs = tree.flatten(inputs), tree.flatten(outputs)
        input_ids = {id(t) for t in self.flat_inputs}
        for t in self.flat_inputs:
            if not isinstance(t._history[0].layer, InputLayer):
                raise ValueError(f'Model "{model_name}": inputs must come from layers.Input(), '
                                 f'got the output of layer "{t._history[0].layer.name}"')
        nodes, seen = [], set()
        stack = [t for t in self.flat_outputs if id(t) not in input_ids]
        while stack:
            tensor = stack.pop()
            node = tensor._history[0]
            if node.id in seen:
                continue
            if isinstance(node.layer, InputLayer):
                raise ValueError(
                    f'Model "{model_name}": graph disconnected: an output depends on input '
                    f'"{node.layer.name}" of shape {tensor.shape}, which is not among the '
                    f"model's inputs {[t.name for t in self.flat_inputs]}")
            seen.add(node.id)
            nodes.append(node)
            stack.extend(t for t in node.input_tensors if id(t) not in input_ids)
        self.nodes = sorted(nodes, key=lambda n: n.id)
        layers = [t._history[0].layer for t in self.flat_inputs] + [n.layer for n in self.nodes]
        self.layers = list({id(layer): layer for layer in layers}.values())
        # How many times each tensor is read (to free activations early in run()).
        self._reads = {}
        for t in [t for n in self.nodes for t in n.input_tensors] + self.flat_outputs:
            self._reads[id(t)] = self._reads.get(id(t), 0) + 1

    def run(self, flat_inputs):
        """Replay the layer calls on data.

        Args:
            flat_inputs: one Tensor per Input, in ``flat_inputs`` order.
        Returns:
            The outputs' values, nested like ``outputs``.  Each layer call
            sees the ``training`` value of the enclosing call unless it was
            given explicitly when the model was written.
        """
        values = {id(t): v for t, v in zip(self.flat_inputs, flat_inputs)}
        reads = dict(self._reads)

        def read(t):
            value = values[id(t)]
            reads[id(t)] -= 1
            if reads[id(t)] == 0:
                del values[id(t)]
            return value

        def value(x):
            return read(x) if isinstance(x, KerasTensor) else x

        for node in self.nodes:
            args = tree.map_structure(read, node.inputs)
            if node.arg_tensors:  # layer(a, b): symbolic arguments besides the first
                out = node.layer(args, *tree.map_structure(value, list(node.args)),
                                 **tree.map_structure(value, node.kwargs))
            else:
                out = node.layer(args, *node.args, **node.kwargs)
            for t, v in zip(node.output_tensors, tree.flatten(out)):
                values[id(t)] = v
        return tree.pack_sequence_as(self.outputs, [read(t) for t in self.flat_outputs])

    def output_shapes(self, input_shapes):
        """The output shapes (nested like ``outputs``) for other input
        shapes, e.g. another batch size, checking every layer's input spec.

        Args:
            input_shapes: one shape per Input, nested like ``inputs``.
        """
        flat = tree.flatten(input_shapes, is_leaf=tree.is_shape)
        if [tuple(s) for s in flat] == [t.shape for t in self.flat_inputs]:
            return tree.map_structure(lambda t: t.shape, self.outputs)
        shapes = {id(t): tuple(s) for t, s in zip(self.flat_inputs, flat)}
        def stand_in(x):  # a KerasTensor of the new shape (recorded nowhere)
            return KerasTensor(shapes[id(x)], x.dtype) if isinstance(x, KerasTensor) else x

        for node in self.nodes:
            args = tree.map_structure(lambda t: shapes[id(t)], node.inputs)
            node.layer._maybe_build(args)
            if node.arg_tensors:
                out = node.layer._symbolic_output_shapes(
                    tree.map_structure(stand_in, node.inputs),
                    tree.map_structure(stand_in, list(node.args)),
                    tree.map_structure(stand_in, node.kwargs))
            else:
                out = node.layer.compute_output_shape(args)
            for t, s in zip(node.output_tensors, tree.flatten(out, is_leaf=tree.is_shape)):
                shapes[id(t)] = tuple(s)
        return tree.pack_sequence_as(self.outputs, [shapes[id(t)] for t in self.flat_outputs],
                                     is_leaf=tree.is_shape)

    def layer_output_shapes(self, layer):
        """The output shape(s) of ``layer``'s calls in this graph: one entry
        per call (a shared layer has several)."""
        nodes = [n for n in self.nodes if n.layer is layer]
        if not nodes:  # an InputLayer
            nodes = [t._history[0] for t in self.flat_inputs if t._history[0].layer is layer]
        return [tree.map_structure(lambda t: t.shape, n.outputs) for n in nodes]

    def inbound_layers(self, layer):
        """Names of the layers feeding ``layer`` in this graph, e.g.
        ``["conv2d[0][0]", "add[0][0]"]`` as Keras's summary prints them."""
        names = []
        for node in (n for n in self.nodes if n.layer is layer):
            for t in node.input_tensors:
                parent, index = t._history
                names.append(f"{parent.layer.name}[{parent.layer._inbound_nodes.index(parent)}]"
                             f"[{index}]")
        return names
