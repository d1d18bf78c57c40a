"""``clone_model``: a model of the same architecture with new weights
(``keras.models.clone_model``)."""
from ..layers.input_layer import Input, InputLayer
from ..layers.layer import Layer
from ..layers.node import KerasTensor
from ..utils import tree
from .model import Model
from .sequential import Sequential


def _default_clone(layer):
    if isinstance(layer, Model):
        return clone_model(layer)
    return type(layer).from_config(layer.get_config())


def clone_model(model, input_tensors=None, clone_function=None, call_function=None,
                recursive=False, **kwargs):
    """A new model with ``model``'s architecture and new, freshly
    initialized weights (``keras.models.clone_model``); copy the weights
    with ``clone.set_weights(model.get_weights())``.

    * Sequential: a Sequential of the cloned layers (after the same Input).
    * Functional: the layer calls replayed on new Inputs of the same shapes
      and names, each layer cloned once (a shared layer stays shared).
    * Subclassed: ``type(model).from_config(model.get_config())``.

    Args:
        model: a :class:`pyresnet.Model`.
        clone_function: ``layer -> new layer`` for each layer (not the
            Inputs); default ``type(layer).from_config(layer.get_config())``
            (a nested model is cloned this way too).  Return the layer
            itself to share it (and its weights) with ``model``.
        recursive (bool): with a ``clone_function``, also apply it inside
            nested Sequential/functional models instead of to them.
        input_tensors, call_function: not supported (ValueError).
    Returns:
        A new, unbuilt-weights-equal Model of the same class (a Sequential
        stays a Sequential).
    Raises:
        ValueError: for ``input_tensors``/``call_function``, unknown keyword
            arguments, or a subclassed model with a ``clone_function``.
        TypeError: ``model`` is not a Model, or ``clone_function`` does not
            return a Layer.
    """
    if not isinstance(model, Model):
        raise TypeError(f"clone_model: expected a pyresnet Model, got {type(model).__name__}")
    if input_tensors is not None or call_function is not None or kwargs:
        raise ValueError("clone_model: input_tensors, call_function and other keyword "
                         f"arguments are not supported, got {sorted(kwargs) or 'them'}")
    user = clone_function

    def clone(layer):
        if recursive and user is not None and isinstance(layer, Model) \
                and (isinstance(layer, Sequential) or layer._graph is not None):
            return clone_model(layer, clone_function=user, recursive=True)
        new = (user or _default_clone)(layer)
        if not isinstance(new, Layer):
            raise TypeError(f"clone_model: clone_function must return a Layer, got "
                            f"{type(new).__name__} for layer {layer.name!r}")
        return new

    if isinstance(model, Sequential):
        stack = [layer for layer in model._stack if not isinstance(layer, InputLayer)]
        head = [Input(batch_shape=model._stack[0].batch_shape, name=model._stack[0].name)] \
            if model._stack and isinstance(model._stack[0], InputLayer) else []
        return Sequential(head + [clone(layer) for layer in stack], name=model.name,
                          trainable=model.trainable)
    graph = model._graph
    if graph is None:
        if user is not None:
            raise ValueError(f'clone_model: model "{model.name}" is subclassed (no functional '
                             "graph), so it is cloned whole with from_config; a clone_function "
                             "cannot be applied to its layers")
        return type(model).from_config(model.get_config())
    mapped, clones = {}, {}
    for t in graph.flat_inputs:
        layer = t._history[0].layer
        mapped[id(t)] = Input(batch_shape=layer.batch_shape, name=layer.name)

    def value(x):
        return mapped[id(x)] if isinstance(x, KerasTensor) else x

    for node in graph.nodes:
        if id(node.layer) not in clones:
            clones[id(node.layer)] = clone(node.layer)
        new = clones[id(node.layer)]
        out = new(tree.map_structure(value, node.inputs),
                  *tree.map_structure(value, list(node.args)),
                  **tree.map_structure(value, node.kwargs))
        for t, v in zip(node.output_tensors, tree.flatten(out)):
            mapped[id(t)] = v
    return Model(inputs=tree.map_structure(value, graph.inputs),
                 outputs=tree.map_structure(value, graph.outputs), name=model.name,
                 trainable=model.trainable)
