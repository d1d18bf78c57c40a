"""Layers, models and compile settings as JSON-ready dicts and back
(Keras 3's ``serialization_lib``: ``{"module", "class_name", "config",
"registered_name", "build_config"}`` per object).

Only plain values go into a config: numbers, strings, bools, None, lists,
dicts with string keys, tuples (``{"class_name": "__tuple__", ...}``),
NumPy arrays (``"__numpy__"``), pyresnet's initializer and activation
functions (by name) and layers (nested objects).  Reading a config never
evaluates code or imports a module named in it: classes come from
:mod:`pyresnet.saving.object_registration`.
"""
import inspect
import warnings

import numpy as np

from .. import activations, initializers, regularizers
from ..utils import tree
from .object_registration import (BUILTIN_MODULES, get_registered_name, get_registered_object,
                                  is_builtin)


def _unserialisable(where, value):
    what = getattr(value, "__name__", None) or type(value).__name__
    return ValueError(f"{where} holds {what!r} ({type(value).__name__}), which cannot be saved "
                      "as JSON; make get_config() return plain values (numbers, strings, lists, "
                      "dicts, tuples, NumPy arrays, layer objects or the names of initializers "
                      "and activations)")


def serialize_value(value, where="config", tensor_ref=None):
    """``value`` as JSON-ready data (see the module docstring).

    Args:
        where (str): the location, for error messages (``config of layer "x"``).
        tensor_ref: ``KerasTensor -> dict`` for functional graphs' node args.
    Raises:
        ValueError: for a value that cannot be saved, naming ``where``.
    """
    from ..layers.layer import Layer  # noqa: PLC0415
    from ..layers.node import KerasTensor  # noqa: PLC0415
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return {"class_name": "__numpy__", "config": {"value": value.tolist(),
                                                      "dtype": value.dtype.name}}
    if isinstance(value, tuple):
        return {"class_name": "__tuple__",
                "config": {"value": [serialize_value(v, where, tensor_ref) for v in value]}}
    if isinstance(value, list):
        return [serialize_value(v, where, tensor_ref) for v in value]
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ValueError(f"{where}: dict keys must be strings to be saved, got {bad[0]!r}")
        return {k: serialize_value(v, f"{where}[{k!r}]", tensor_ref) for k, v in value.items()}
    if isinstance(value, KerasTensor) and tensor_ref is not None:
        return tensor_ref(value)
    if isinstance(value, Layer):
        return serialize_layer(value)
    if type(value) in regularizers._CLASSES.values():
        return {"class_name": "__regularizer__", "config": regularizers.serialize(value)}
    for module in (initializers, activations):
        if callable(value) and module._BY_NAME.get(getattr(value, "__name__", None)) is value:
            return value.__name__
    if inspect.isfunction(value) and value.__name__ != "<lambda>":
        return serialize_function(value)
    raise _unserialisable(where, value)


def serialize_function(fn):
    """A named Python function (a custom activation, ...) as Keras 3 saves
    one: ``{"module", "class_name": "function", "config": name,
    "registered_name": name}``, the name being its
    :func:`~pyresnet.saving.register_serializable` key (``"package>name"``)
    or else ``fn.__name__``.  Loading finds it by that name only (never by
    importing ``module``)."""
    name = get_registered_name(fn)
    return {"module": fn.__module__, "class_name": "function", "config": name,
            "registered_name": name}


_ACTIVATION_MODULES = ("pyresnet.activations", "keras.activations",
                       "keras.src.activations.activations")


def deserialize_function(data):
    """The function saved by :func:`serialize_function`: one of pyresnet's
    activations (saved from ``keras.activations``), else the object of that
    name in ``custom_objects``, an enclosing ``custom_object_scope``,
    :func:`~pyresnet.saving.get_custom_objects` or the registered ones (a
    ``"package>name"`` also under its bare ``name``, as Keras's loader
    finds ``custom_objects={"name": fn}``).

    Raises:
        ValueError: when no such function is known (naming both fixes), or
            the name resolves to something that is not a function.
    """
    name = data.get("config")
    registered = data.get("registered_name") or name
    if not isinstance(name, str):
        raise ValueError(f"a saved function has no name: {str(data)[:200]}")
    if data.get("module") in _ACTIVATION_MODULES and name in activations._BY_NAME:
        return activations._BY_NAME[name]
    fn = get_registered_object(name, registered, module=data.get("module"))
    if fn is None and ">" in registered:  # custom_objects={"custom_fn": fn} for "pkg>custom_fn"
        fn = get_registered_object(registered.split(">")[-1], module=data.get("module"))
    if fn is None:
        raise ValueError(
            f"Could not locate function {registered!r} (saved from module "
            f"{data.get('module')!r}). Fix it in one of two ways: pass it when loading, "
            f"load_model(path, custom_objects={{{registered!r}: {name.split('>')[-1]}}}), or "
            "register it where it is defined with the decorator "
            "@pyresnet.saving.register_keras_serializable() (its module must be imported "
            "before loading)")
    if inspect.isclass(fn) or not callable(fn):
        raise ValueError(f"the saved function {registered!r} resolves to {fn!r}, which is not "
                         "a function")
    return fn


def deserialize_value(data, tensor_of=None):
    """The inverse of :func:`serialize_value` (``tensor_of``: keras-history
    dict -> KerasTensor, for functional graphs)."""
    if isinstance(data, list):
        return [deserialize_value(v, tensor_of) for v in data]
    if not isinstance(data, dict):
        return data
    kind = data.get("class_name")
    if kind == "__tuple__":
        return tuple(deserialize_value(v, tensor_of) for v in data["config"]["value"])
    if kind == "__numpy__":
        return np.asarray(data["config"]["value"], dtype=_plain_dtype(data["config"]["dtype"]))
    if kind == "__regularizer__":
        return regularizers.get(data["config"])
    if kind == "function" and "config" in data:
        return deserialize_function(data)
    if kind == "__keras_tensor__":
        if tensor_of is None:
            raise ValueError("a symbolic tensor reference outside a functional model's nodes")
        return tensor_of(data["config"]["keras_history"])
    if isinstance(kind, str) and "config" in data and "module" in data:
        return deserialize_layer(data)
    return {k: deserialize_value(v, tensor_of) for k, v in data.items()}


def _plain_dtype(name):
    dtype = np.dtype(str(name))
    if dtype.kind not in "biuf":
        raise ValueError(f"a saved array has dtype {name!r}; only numbers can be loaded")
    return dtype


# ---- layers and models -----------------------------------------------------------------

def serialize_layer(layer):
    """``{"module", "class_name", "config", "registered_name", "build_config"}``
    for a layer or model (Keras's ``serialize_keras_object``).

    Raises:
        ValueError: when its config holds a value that cannot be saved.
    """
    cls = type(layer)
    functional = getattr(layer, "_graph", None) is not None and not _is_sequential(layer)
    if is_builtin(cls):
        module = "pyresnet.models" if cls.__name__ in ("Model", "Sequential") else "pyresnet.layers"
        class_name = "Functional" if cls.__name__ == "Model" and functional else cls.__name__
        registered = None
    else:
        module, class_name, registered = cls.__module__, cls.__name__, get_registered_name(cls)
    where = f'the config of layer "{layer.name}" ({cls.__name__})'
    config = functional_config(layer) if functional and class_name == "Functional" \
        else layer.get_config()
    if not isinstance(config, dict):
        raise ValueError(f"{where}: get_config() must return a dict, got {type(config).__name__}")
    item = {"module": module, "class_name": class_name,
            "config": serialize_value(config, where), "registered_name": registered}
    shapes = getattr(layer, "_build_shapes", None)
    named_build = len(inspect.signature(type(layer).build).parameters) > 2  # build(a_shape, b_shape)
    if layer.built and shapes is not None and not named_build:
        item["build_config"] = {"input_shape": serialize_value(
            tree.map_structure(tuple, shapes, is_leaf=tree.is_shape), where)}
    return item


def _is_sequential(layer):
    from ..models.sequential import Sequential  # noqa: PLC0415
    return isinstance(layer, Sequential)


def _is_sequential_class(cls):
    from ..models.sequential import Sequential  # noqa: PLC0415
    return issubclass(cls, Sequential)


def _lookup(item):
    class_name = item.get("class_name")
    registered = item.get("registered_name")
    module = item.get("module")
    if not isinstance(class_name, str):
        raise ValueError(f"a saved object has no class name: {str(item)[:200]}")
    cls = get_registered_object(class_name, registered, module=module)
    if cls is None:
        key = registered or class_name
        raise ValueError(
            f"Could not locate class {class_name!r} (saved as {key!r} from module {module!r}); "
            "it is not one of pyresnet's layers. Fix it in one of two ways: pass the class when "
            f"loading, load_model(path, custom_objects={{{class_name!r}: {class_name}}}), or "
            "register it where it is defined with the decorator "
            "@pyresnet.saving.register_serializable() (the class's module must be imported "
            "before loading)")
    from ..layers.layer import Layer  # noqa: PLC0415
    if not (inspect.isclass(cls) and issubclass(cls, Layer)):
        raise ValueError(f"{class_name!r} resolves to {cls!r}, which is not a Layer class")
    return cls


def deserialize_layer(item):
    """A new layer or model from :func:`serialize_layer`'s dict, built for
    its ``build_config`` when it is not built by its config alone.

    Raises:
        ValueError: for an unknown class (naming both fixes) or a malformed dict.
    """
    if not isinstance(item, dict):
        raise ValueError(f"a saved layer must be a dict, got {type(item).__name__}")
    cls = _lookup(item)
    config = item.get("config")
    if not isinstance(config, dict):
        raise ValueError(f"the saved {item['class_name']} has no config dict")
    if item["class_name"] == "Functional" or (
            "input_layers" in config and "output_layers" in config and "layers" in config):
        layer = functional_from_config(cls, config)
    elif _is_sequential_class(cls):
        layer = cls.from_config(config)  # deserializes its layers itself
    else:
        layer = cls.from_config(deserialize_value(config))
    build = item.get("build_config")
    if build is not None and not layer.built:
        layer.build(deserialize_value(build["input_shape"]))
    return layer


# ---- functional graphs ------------------------------------------------------------------

def functional_config(model):
    """Keras 3's functional config: ``{"name", "trainable", "layers":
    [{..., "name", "inbound_nodes": [{"args", "kwargs"}]}], "input_layers",
    "output_layers"}``; a tensor is ``[layer name, node index, tensor
    index]``, node indices counting the layer's calls in this model only.

    Raises:
        ValueError: when two layers share a name, or a call's arguments
            cannot be saved.
    """
    from ..layers.input_layer import InputLayer  # noqa: PLC0415
    graph = model._graph
    names = [layer.name for layer in graph.layers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f'Model "{model.name}" cannot be saved: layer names must be unique, '
                         f"{dupes} appear more than once")
    nodes = [t._history[0] for t in graph.flat_inputs] + list(graph.nodes)
    per_layer, index = {}, {}
    for node in nodes:
        calls = per_layer.setdefault(id(node.layer), [])
        if node.id not in index:
            index[node.id] = len(calls)
            calls.append(node)

    def ref(t):
        node, i = t._history
        return [node.layer.name, index[node.id], i]

    def tensor_ref(t):
        return {"class_name": "__keras_tensor__",
                "config": {"shape": list(t.shape), "dtype": t.dtype, "keras_history": ref(t)}}

    layers = []
    for layer in graph.layers:
        item = serialize_layer(layer)
        item.pop("build_config", None)  # the graph builds it
        item["name"] = layer.name
        where = f'a call of layer "{layer.name}" in model "{model.name}"'
        item["inbound_nodes"] = [] if isinstance(layer, InputLayer) else [
            {"args": serialize_value([node.inputs, *node.args], where, tensor_ref),
             "kwargs": serialize_value(node.kwargs, where, tensor_ref)}
            for node in per_layer[id(layer)]]
        layers.append(item)
    return {"name": model.name, "trainable": model.trainable, "layers": layers,
            "input_layers": tree.map_structure(ref, graph.inputs),
            "output_layers": tree.map_structure(ref, graph.outputs)}


def _is_ref(x):
    return isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) \
        and isinstance(x[1], int) and isinstance(x[2], int)


def _map_refs(fn, structure):
    if _is_ref(structure):
        return fn(structure)
    if isinstance(structure, list):
        return [_map_refs(fn, s) for s in structure]
    if isinstance(structure, dict):
        return {k: _map_refs(fn, v) for k, v in structure.items()}
    raise ValueError(f"malformed input_layers/output_layers entry {structure!r}")


def functional_from_config(cls, config):
    """A functional model of class ``cls`` from :func:`functional_config`'s
    dict: the layers made from their configs, then their calls replayed in
    an order where every call's inputs exist.

    Raises:
        ValueError: for unknown classes or a graph that cannot be rebuilt.
    """
    made, outputs_of, pending = {}, {}, []
    for item in config["layers"]:
        layer = deserialize_layer(item)
        name = item.get("name", layer.name)
        if name in made:
            raise ValueError(f"the saved model has two layers named {name!r}")
        made[name] = layer
        if getattr(layer, "output", None) is not None and not item.get("inbound_nodes"):
            outputs_of[(name, 0)] = [layer.output]  # an InputLayer
        pending.append([name, layer, list(item.get("inbound_nodes") or []), 0])

    def tensor_of(history):
        if not _is_ref(history) or (history[0], history[1]) not in outputs_of:
            raise KeyError(tuple(history) if isinstance(history, list) else history)
        return outputs_of[(history[0], history[1])][history[2]]

    def ready(data):
        try:
            deserialize_value(data, tensor_of)
            return True
        except KeyError:
            return False

    while any(entry[2] for entry in pending):
        progress = False
        for entry in pending:
            name, layer, nodes, done = entry
            while nodes and ready(nodes[0]):
                node = nodes.pop(0)
                args = deserialize_value(node.get("args", []), tensor_of)
                kwargs = deserialize_value(node.get("kwargs", {}), tensor_of)
                if not args:
                    raise ValueError(f"a saved call of layer {name!r} has no inputs")
                out = layer(args[0], *args[1:], **kwargs)
                outputs_of[(name, done)] = tree.flatten(out)
                entry[3] = done = done + 1
                progress = True
        if not progress:
            stuck = [e[0] for e in pending if e[2]]
            raise ValueError(f"the saved graph cannot be rebuilt: the calls of layers {stuck} "
                             "refer to tensors no call produces")

    def resolve(ref):
        try:
            return tensor_of(ref)
        except KeyError:
            raise ValueError(f"the saved model's inputs/outputs refer to {ref!r}, which no "
                             "layer call produces") from None

    inputs = _map_refs(resolve, config["input_layers"])
    outputs = _map_refs(resolve, config["output_layers"])
    return cls(inputs=inputs, outputs=outputs, name=config.get("name"),
               trainable=config.get("trainable", True))


# ---- keras.saving.serialize_keras_object / deserialize_keras_object ------------------------

def _object_tables():
    from .. import losses, metrics, optimizers  # noqa: PLC0415
    return {"pyresnet.losses": {c.__name__: c for c in set(losses._BY_NAME.values())},
            "pyresnet.metrics": dict(metrics._CLASSES),
            "pyresnet.optimizers": {c.__name__: c for c in optimizers._BY_NAME.values()}}


def serialize_keras_object(obj):
    """``obj`` as JSON-ready data, as ``keras.saving.serialize_keras_object``:
    a layer or model as ``{"module", "class_name", "config",
    "registered_name", "build_config"}``; a pyresnet loss, metric or
    optimizer object as ``{"module", "class_name", "config",
    "registered_name"}``; a named function (a custom activation) as
    ``{"module", "class_name": "function", "config": name, ...}``
    (:func:`serialize_function`); plain values (numbers, strings, lists,
    dicts, tuples, NumPy arrays) as :func:`serialize_value` makes them.

    Raises:
        ValueError: for an object that cannot be saved (a lambda, an
            arbitrary Python object), naming it.
    """
    from ..layers.layer import Layer  # noqa: PLC0415
    if isinstance(obj, Layer):
        return serialize_layer(obj)
    for module, table in _object_tables().items():
        if table.get(type(obj).__name__) is type(obj):
            return {"module": module, "class_name": type(obj).__name__,
                    "config": serialize_value(obj.get_config(), f"{type(obj).__name__} config"),
                    "registered_name": None}
    return serialize_value(obj, "serialize_keras_object")


def deserialize_keras_object(config, custom_objects=None, safe_mode=True, **kwargs):
    """The object :func:`serialize_keras_object` described, as
    ``keras.saving.deserialize_keras_object``: classes and functions are
    found by name only (``custom_objects``, an enclosing
    ``custom_object_scope``, :func:`~pyresnet.saving.get_custom_objects`,
    registered ones, pyresnet's own); nothing is imported or evaluated.
    An object that is already deserialized (a layer given to a custom
    ``from_config``, which pyresnet passes sublayers as) is returned as is,
    so the Keras idiom ``deserialize_keras_object(config.pop("sublayer"))``
    works either way.  A string is looked up in ``custom_objects`` and
    otherwise returned as is (Keras's rule).

    Args:
        config: the data, or an object.
        custom_objects (dict): name -> class or function.
        safe_mode (bool): accepted for Keras's signature; loading is
            always safe here (a saved lambda is refused when saving).
    Raises:
        ValueError: for an unknown class or function (naming the fixes) or
            a malformed dict.
    """
    from .object_registration import custom_object_scope  # noqa: PLC0415
    if isinstance(config, str) and custom_objects and config in custom_objects:
        return custom_objects[config]
    if config is None or isinstance(config, (bool, int, float, str)):
        return config
    if isinstance(config, (list, tuple)):
        return [deserialize_keras_object(c, custom_objects) for c in config]
    if not isinstance(config, dict):
        return config  # already an object
    with custom_object_scope(custom_objects):
        table = _object_tables().get(config.get("module"))
        if table is not None and config.get("class_name") in table:
            return table[config["class_name"]].from_config(deserialize_value(config["config"]))
        return deserialize_value(config)


# ---- compile settings -------------------------------------------------------------------

def _serialize_loss(loss):
    from .. import losses  # noqa: PLC0415
    if loss is None or isinstance(loss, str):
        return loss
    if isinstance(loss, (list, tuple)):
        return [_serialize_loss(item) for item in loss]
    if isinstance(loss, dict):
        return {k: _serialize_loss(v) for k, v in loss.items()}
    if type(loss) in set(losses._BY_NAME.values()):
        return {"class_name": type(loss).__name__, "config": loss.get_config()}
    for name, cls in losses._BY_NAME.items():
        if callable(loss) and getattr(loss, "__name__", None) == name \
                and getattr(losses, name, None) is loss:
            return name
    raise TypeError(f"loss {loss!r}")


def _deserialize_nested(data, leaf, what):
    """``data`` with each ``{"class_name": ...}`` dict made an object by
    ``leaf``, through lists and dicts; strings and None stay.  ValueError
    ("malformed saved <what>") for anything else."""
    if isinstance(data, dict) and "class_name" in data:
        return leaf(data)
    if isinstance(data, list):
        return [_deserialize_nested(item, leaf, what) for item in data]
    if isinstance(data, dict):
        return {k: _deserialize_nested(v, leaf, what) for k, v in data.items()}
    if data is not None and not isinstance(data, str):
        raise ValueError(f"malformed saved {what} {data!r}")
    return data


def _deserialize_loss(data):
    from .. import losses  # noqa: PLC0415

    def loss_object(item):
        known = {cls.__name__: cls for cls in losses._BY_NAME.values()}
        if item["class_name"] not in known:
            raise ValueError(f"unknown saved loss class {item['class_name']!r}")
        return known[item["class_name"]].from_config(item["config"])

    return _deserialize_nested(data, loss_object, "loss")


def _serialize_metrics(metrics):
    from .. import metrics as metrics_module  # noqa: PLC0415
    if isinstance(metrics, (list, tuple)):
        return [_serialize_metrics(m) for m in metrics]
    if isinstance(metrics, dict):
        return {k: _serialize_metrics(v) for k, v in metrics.items()}
    return metrics_module.serialize(metrics)


def _deserialize_metrics(data):
    from .. import metrics as metrics_module  # noqa: PLC0415
    return _deserialize_nested(data, metrics_module.deserialize, "metrics")


def compile_config(model):
    """The arguments of ``model.compile`` as JSON-ready data, or None when
    the model is not compiled or was compiled with something that cannot be
    saved (a Python loss or metric function: a warning says so, and
    ``load_model`` then returns the model uncompiled, as Keras does)."""
    args = getattr(model, "_compile_args", None)
    if not getattr(model, "compiled", False) or args is None:
        return None
    try:
        return {"optimizer": {"class_name": type(model.optimizer).__name__,
                              "config": serialize_value(model.optimizer.get_config())},
                "loss": _serialize_loss(args["loss"]),
                "metrics": _serialize_metrics(args["metrics"]),
                "loss_weights": args.get("loss_weights"),
                "run_eagerly": args["run_eagerly"], "jit_compile": args["jit_compile"],
                "steps_per_execution": args.get("steps_per_execution", 1)}
    except (TypeError, ValueError) as e:
        warnings.warn(f'Model "{model.name}": its compile() arguments cannot be saved ({e} is '
                      "Python code); the weights and the optimizer state are saved, and "
                      "load_model() returns the model uncompiled: compile it again",
                      stacklevel=3)
        return None


def compile_from_config(model, config):
    """``model.compile(...)`` with :func:`compile_config`'s settings."""
    from .. import optimizers  # noqa: PLC0415
    opt = config["optimizer"]
    model.compile(optimizer=optimizers.deserialize({"class_name": opt.get("class_name"),
                                                    "config": deserialize_value(opt["config"])}),
                  loss=_deserialize_loss(config["loss"]),
                  metrics=_deserialize_metrics(config.get("metrics")),
                  loss_weights=config.get("loss_weights"),
                  run_eagerly=config.get("run_eagerly"),
                  jit_compile=config.get("jit_compile", "auto"),
                  steps_per_execution=config.get("steps_per_execution", 1))


__all__ = ["serialize_value", "deserialize_value", "serialize_layer", "deserialize_layer",
           "serialize_function", "deserialize_function", "serialize_keras_object",
           "deserialize_keras_object",
           "functional_config", "functional_from_config", "compile_config",
           "compile_from_config", "BUILTIN_MODULES"]
