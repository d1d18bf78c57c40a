"""Keras 3's view of a pyresnet model, and pyresnet's view of a Keras 3
config (issue 29, item 1).

:func:`lower_model` turns a built functional or Sequential pyresnet model
into what Keras 3 writes for the same network: a config item per layer
(``module: "keras.layers"``, Keras's ``class_name`` and argument names, a
``DTypePolicy`` dict, initializers as ``keras.initializers`` dicts) and, for
each layer in the order Keras 3 lists them (``Functional.layers`` is its
graph's operations by decreasing depth, then first DFS visit from the
outputs: :func:`keras_layer_order`), the variables that Keras's
``Layer.save_own_variables`` stores as ``layers/<snake class>[_n]/vars/<i>``.

Layers Keras does not have keep pyresnet's config under a registered name
(``pyresnet>RandomCrop``; a Python layer keeps its own), so pyresnet still
rebuilds them and Keras names the class it cannot load.  A
:class:`~pyresnet.layers.ResidualBlock` called once is written expanded into
the Keras layers it computes (Conv2D, BatchNormalization, ReLU, Add; its
parameter-free ``"zero_pad"`` shortcut as a frozen 1x1 Conv2D whose 0/1
kernel is stored), its last ReLU keeping the block's name.

:func:`from_keras_config` goes the other way: a Keras 3 config (as
``config.json`` holds it) becomes pyresnet's serialized form, which
:func:`pyresnet.saving.serialization.deserialize_layer` rebuilds.  It only
reads names and plain values: an unknown class or an argument pyresnet does
not implement (with a value other than Keras's default) raises ValueError
naming the layer and the argument.
"""
import numpy as np

from .. import activations, initializers, regularizers
from ..utils.naming import to_snake_case

# Keras class -> the arguments copied between Keras's and pyresnet's configs (the names
# are the same on both sides; ``name``, ``trainable`` and ``dtype`` go with every layer).
_CONV = ("filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate",
         "groups", "activation", "use_bias", "kernel_initializer", "bias_initializer",
         "kernel_regularizer", "bias_regularizer")
KERAS_LAYERS = {
    "Conv2D": _CONV,
    "Conv1D": _CONV,
    "SeparableConv2D": ("filters", "kernel_size", "strides", "padding", "data_format",
                        "dilation_rate", "depth_multiplier", "activation", "use_bias",
                        "depthwise_initializer", "pointwise_initializer", "bias_initializer",
                        "depthwise_regularizer", "pointwise_regularizer", "bias_regularizer"),
    "GlobalAveragePooling1D": ("data_format", "keepdims"),
    "GlobalMaxPooling1D": ("data_format", "keepdims"),
    "Dense": ("units", "activation", "use_bias", "kernel_initializer", "bias_initializer",
              "kernel_regularizer", "bias_regularizer"),
    "BatchNormalization": ("axis", "momentum", "epsilon", "center", "scale", "beta_initializer",
                           "gamma_initializer", "moving_mean_initializer",
                           "moving_variance_initializer", "beta_regularizer",
                           "gamma_regularizer"),
    "DepthwiseConv2D": ("kernel_size", "strides", "padding", "depth_multiplier", "data_format",
                        "dilation_rate", "activation", "use_bias", "depthwise_initializer",
                        "bias_initializer"),
    "LayerNormalization": ("axis", "epsilon", "center", "scale", "beta_initializer",
                           "gamma_initializer"),
    "Activation": ("activation",),
    "ReLU": (),
    "LeakyReLU": ("negative_slope",),
    "Softmax": ("axis",),
    "Add": (), "Subtract": (), "Multiply": (), "Average": (),
    "Concatenate": ("axis",),
    "MaxPooling2D": ("pool_size", "strides", "padding", "data_format"),
    "AveragePooling2D": ("pool_size", "strides", "padding", "data_format"),
    "GlobalAveragePooling2D": ("data_format", "keepdims"),
    "GlobalMaxPooling2D": ("data_format", "keepdims"),
    "Dropout": ("rate", "noise_shape", "seed"),
    "Flatten": ("data_format",),
    "Reshape": ("target_shape",),
    "Permute": ("dims",),
    "ZeroPadding2D": ("padding", "data_format"),
    "UpSampling2D": ("size", "data_format", "interpolation"),
    "Rescaling": ("scale", "offset"),
    # the image-augmentation layers (no variables; the identity at inference)
    "RandomFlip": ("mode", "seed"),
    "RandomTranslation": ("height_factor", "width_factor", "fill_mode", "interpolation", "seed",
                          "fill_value", "data_format"),
    "RandomRotation": ("factor", "fill_mode", "interpolation", "seed", "fill_value",
                       "data_format"),
    "RandomZoom": ("height_factor", "width_factor", "fill_mode", "interpolation", "seed",
                   "fill_value", "data_format"),
    "RandomContrast": ("factor", "value_range", "seed"),
}
# Keras arguments pyresnet does not implement, and the values that mean "not used"
# (Keras's defaults): a Keras config with any other value is refused.
_KERAS_DEFAULTS = {
    "dilation_rate": ([1, 1], 1, (1, 1)), "groups": (1,), "data_format": ("channels_last", None),
    "activity_regularizer": (None,), "kernel_constraint": (None,), "bias_constraint": (None,),
    "depthwise_regularizer": (None,), "depthwise_constraint": (None,),
    "beta_constraint": (None,),
    "gamma_constraint": (None,), "synchronized": (False,), "renorm": (False,),
    "renorm_clipping": (None,), "renorm_momentum": (0.99,), "rms_scaling": (False,),
    "quantization_config": (None,), "lora_rank": (None,), "lora_alpha": (None,),
    "max_value": (None,), "negative_slope": (0.0,), "threshold": (0.0,),
    "keepdims": (False,), "noise_shape": (None,), "seed": (None,),
    "interpolation": ("nearest",), "offset": (0.0,),
}
_INIT_CLASSES = {  # Keras initializer class <-> pyresnet initializer function name
    "GlorotUniform": "glorot_uniform", "GlorotNormal": "glorot_normal",
    "HeNormal": "he_normal", "HeUniform": "he_uniform", "Zeros": "zeros", "Ones": "ones",
    "LecunNormal": "lecun_normal", "LecunUniform": "lecun_uniform",
    "RandomNormal": "random_normal", "RandomUniform": "random_uniform",
    "TruncatedNormal": "truncated_normal",
}
_INIT_NAMES = {v: k for k, v in _INIT_CLASSES.items()}
_RANDOM_INITS = {"GlorotUniform", "GlorotNormal", "HeNormal", "HeUniform", "LecunNormal",
                 "LecunUniform"}
_MODEL_MODULES = ("keras", "keras.models", "keras.src.models.functional",
                  "keras.src.models.sequential", "keras.src.models.model")
_COMPOSITES = ("ResidualBlock", "PreActivationResidualBlock")


class NotKeras(Exception):
    """A layer Keras 3 does not have (internal: it is saved under pyresnet's name)."""


# ---- values ----------------------------------------------------------------------------

def _policy(name):
    return {"module": "keras", "class_name": "DTypePolicy", "config": {"name": str(name)},
            "registered_name": None}


def _keras_value(key, value):
    """One pyresnet config value as Keras 3 writes it (raises NotKeras)."""
    if key.endswith("_initializer"):
        if isinstance(value, str) and value in _INIT_NAMES:
            cls = _INIT_NAMES[value]
            return {"module": "keras.initializers", "class_name": cls,
                    "config": {"seed": None} if cls in _RANDOM_INITS or "Random" in cls
                    or "Truncated" in cls else {}, "registered_name": None}
        name = getattr(value, "__name__", None)
        if callable(value) and name in _INIT_NAMES and initializers._BY_NAME.get(name) is value:
            return _keras_value(key, name)
        raise NotKeras(f"{key}={value!r}")
    if key == "activation":
        if value is None:
            return "linear"
        name = value if isinstance(value, str) else getattr(value, "__name__", None)
        if name in activations._BY_NAME and (isinstance(value, str)
                                             or activations._BY_NAME[name] is value):
            return name
        raise NotKeras(f"activation={value!r}")
    if key.endswith("_regularizer"):
        if value is None:
            return None
        if type(value) in regularizers._CLASSES.values():
            return {"module": "keras.regularizers", "class_name": type(value).__name__,
                    "config": dict(value.get_config()), "registered_name": None}
        raise NotKeras(f"{key}={value!r}")
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_keras_value("", v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise NotKeras(f"{key}={value!r}")


def keras_layer_item(layer):
    """``{"module": "keras.layers", "class_name", "config", "registered_name"}``
    of one pyresnet layer whose class Keras 3 also has, or raise NotKeras
    (the class or a non-default argument is pyresnet's own)."""
    from ..saving.object_registration import is_builtin  # noqa: PLC0415
    cls = type(layer)
    name = cls.__name__
    if name not in KERAS_LAYERS or not is_builtin(cls):
        raise NotKeras(name)
    ours = layer.get_config()
    config = {"name": layer.name, "trainable": bool(layer.trainable),
              "dtype": _policy(layer.dtype_policy.name)}
    for key, value in ours.items():
        if key in ("name", "trainable", "dtype"):
            continue
        if key not in KERAS_LAYERS[name]:
            raise NotKeras(f"{name}.{key}")
        config[key] = _keras_value(key, value)
    if name == "LayerNormalization" and isinstance(config.get("axis"), int):
        config["axis"] = [config["axis"]]
    return {"module": "keras.layers", "class_name": name, "config": config,
            "registered_name": None}


def _input_item(layer):
    shape = list(layer.batch_shape)
    return {"module": "keras.layers", "class_name": "InputLayer",
            "config": {"batch_shape": shape, "dtype": "float32", "sparse": False,
                       "ragged": False, "name": layer.name}, "registered_name": None}


def _own_item(layer):
    """pyresnet's item for a layer Keras does not have: pyresnet's own
    layers under ``pyresnet>Name``, Python layers as they are registered."""
    from .object_registration import is_builtin  # noqa: PLC0415
    from .serialization import serialize_layer  # noqa: PLC0415
    item = serialize_layer(layer)
    if is_builtin(type(layer)):
        item["registered_name"] = f"pyresnet>{type(layer).__name__}"
    return item


def layer_variables(layer):
    """Keras 3's ``save_own_variables`` list: trainable then non-trainable,
    in creation order."""
    return list(layer._trainable_variables) + list(layer._non_trainable_variables)


def _own_groups(layer, path):
    """``[(h5 group path, [Variable])]`` of a layer Keras does not have: its
    own variables at ``<path>/vars``, its random state at
    ``<path>/seed_generator/vars``, its sublayers by attribute name (Keras's
    object walk)."""
    from ..tensor import Variable  # noqa: PLC0415
    from .saving_lib import _children  # noqa: PLC0415
    groups, seen = [], set()

    def walk(obj, where):
        if id(obj) in seen:
            return
        seen.add(id(obj))
        own = layer_variables(obj) + [v for k, v in vars(obj).items()
                                      if isinstance(v, Variable) and k != "_init_args"]
        unique, ids = [], set()
        for v in own:
            if id(v) not in ids:
                ids.add(id(v))
                unique.append(v)
        if unique:
            groups.append((f"{where}/vars", unique))
        state = getattr(getattr(obj, "_seed_generator", None), "state", None)
        if isinstance(state, Variable):
            groups.append((f"{where}/seed_generator/vars", [state]))
        for rel, child in sorted(_children(obj), key=lambda kv: kv[0]):
            walk(child, f"{where}/{rel}")

    walk(layer, path)
    return groups


# ---- the graph order ----------------------------------------------------------------------

def history_refs(data):
    """Every ``(layer, node, index)`` keras_history inside a node's args (a
    Keras 3 functional config's ``inbound_nodes`` entry), in order."""
    found = []
    if isinstance(data, dict):
        if data.get("class_name") == "__keras_tensor__":
            history = data.get("config", {}).get("keras_history")
            if isinstance(history, list) and len(history) == 3:
                found.append((str(history[0]), int(history[1]), int(history[2])))
            return found
        for v in data.values():
            found += history_refs(v)
    elif isinstance(data, list):
        for v in data:
            found += history_refs(v)
    return found


def output_refs(structure):
    """The ``(layer, node, index)`` references of a functional config's
    ``input_layers`` or ``output_layers`` (a reference, or a list or dict
    of them), flattened in order.

    Raises:
        ValueError: for an entry that is no reference.
    """
    if isinstance(structure, list) and len(structure) == 3 and isinstance(structure[0], str):
        return [(structure[0], int(structure[1]), int(structure[2]))]
    if isinstance(structure, dict):
        structure = list(structure.values())
    if isinstance(structure, list):
        return [r for s in structure for r in output_refs(s)]
    raise ValueError(f"malformed input_layers/output_layers entry {structure!r}")


def keras_layer_order(config):
    """The layer names of a Keras functional ``config`` in the order of
    Keras 3's ``Functional.layers`` (``ops.function.map_graph``: by
    decreasing depth from the outputs, ties by first visit of a depth-first
    walk from the outputs), which names the weight groups
    ``layers/<snake class>[_n]``.

    Raises:
        ValueError: for a reference to a layer or call that does not exist,
            or a cycle.
    """
    items = {item.get("name"): item for item in config["layers"]}
    parents = {}
    for name, item in items.items():
        for k, node in enumerate(item.get("inbound_nodes") or []):
            parents[(name, k)] = [(n, j) for n, j, _ in history_refs(node)]
    finished, in_progress, ordered, first_seen = set(), set(), [], {}

    def visit(start):  # Keras's recursive walk, with an explicit stack (any depth)
        stack = [(start, None)]
        while stack:
            node, pending = stack.pop()
            if pending is None:
                if node in finished:
                    continue
                if node[0] not in items:
                    raise ValueError(f"the config refers to layer {node[0]!r}, which it does "
                                     "not define")
                if node in in_progress:
                    raise ValueError(f"the config's graph has a cycle through layer "
                                     f"{node[0]!r}")
                first_seen.setdefault(node[0], len(first_seen))
                in_progress.add(node)
                pending = list(parents.get(node, []))
            if pending:
                stack.append((node, pending[1:]))
                stack.append((pending[0], None))
                continue
            finished.add(node)
            in_progress.discard(node)
            ordered.append(node)

    for ref in output_refs(config["output_layers"]):
        visit(ref[:2])
    node_depth, op_depth = {}, {}
    for node in reversed(ordered):
        depth = max(node_depth.setdefault(node, 0), op_depth.get(node[0], 0))
        op_depth[node[0]] = node_depth[node] = depth
        for parent in parents.get(node, []):
            node_depth[parent] = max(depth + 1, node_depth.get(parent, 0))
    for ref in output_refs(config["input_layers"]):
        if ref[0] not in op_depth:
            op_depth[ref[0]] = 0
            first_seen[ref[0]] = -1
    return sorted(op_depth, key=lambda n: (-op_depth[n], first_seen[n]))


def group_paths(class_names, prefix="layers"):
    """``layers/<snake class>``, ``layers/<snake class>_1``, ... for layer
    class names in Keras's order (Keras's ``_save_container_state``)."""
    used, out = {}, []
    for cls in class_names:
        base = to_snake_case(cls)
        n = used.get(base, -1) + 1
        used[base] = n
        out.append(f"{prefix}/{base}" if n == 0 else f"{prefix}/{base}_{n}")
    return out


# ---- pyresnet -> Keras ------------------------------------------------------------------------

class Lowered:
    """What :func:`lower_model` returns.

    Attributes:
        item (dict): the model's Keras 3 config item (``config.json``).
        groups (list): ``[(h5 group path, [Variable or ndarray])]`` in Keras's
            order; an ndarray is a constant (a zero-pad shortcut's kernel).
        keras (bool): whether every layer is one Keras 3 has (so Keras can
            load the file).
    """

    def __init__(self, item, groups, keras, labels=None):
        self.item, self.groups, self.keras = item, groups, keras
        self.labels = labels or {}

    def label(self, path):
        """``layer "<name>" (<group>)`` for a weight group path."""
        for prefix, name in sorted(self.labels.items(), key=lambda kv: -len(kv[0])):
            if path == prefix or path.startswith(prefix + "/"):
                return f'layer "{name}" ({path})'
        return f"weight group {path}"

    def trainable_variables(self):
        """The model's trainable Variables in Keras's ``model.trainable_variables``
        order (what optimizer slots are listed by)."""
        from ..tensor import Variable  # noqa: PLC0415
        return [v for _, vs in self.groups for v in vs
                if isinstance(v, Variable) and v.trainable]


def _kt(ref, shape):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": list(shape), "dtype": "float32", "keras_history": ref}}


def _expand_residual(block, item, taken):
    """Keras items (functional, with inbound nodes) and per-item variables
    for one call of a built ResidualBlock; the last one keeps the block's
    name, so calls of later layers need no change."""
    from ..layers import Add, ReLU  # noqa: PLC0415
    nodes = item["inbound_nodes"]
    source = nodes[0]["args"][0]
    in_shape = source["config"]["shape"]
    out = []

    def name(suffix):
        candidate = f"{block.name}_{suffix}"
        if candidate in taken:
            raise NotKeras(f"{block.name}: the name {candidate} is taken")
        taken.add(candidate)
        return candidate

    def add(layer_item, new_name, args, shape, variables):
        layer_item = dict(layer_item)
        layer_item["config"] = dict(layer_item["config"], name=new_name)
        layer_item["name"] = new_name
        layer_item["inbound_nodes"] = [{"args": args, "kwargs": {}}]
        out.append((layer_item, variables))
        return _kt([new_name, 0, 0], shape)

    def sublayer(layer, suffix, args, shape):
        """Add ``layer`` (a sublayer of the block, or a new ReLU or Add) with
        its variables under the name ``<block>_<suffix>``."""
        return add(keras_layer_item(layer), name(suffix), args, shape, layer_variables(layer))

    mid_shape = list(block.compute_output_shape(tuple(in_shape)))
    if type(block).__name__ == "PreActivationResidualBlock":
        _expand_preact(block, source, in_shape, mid_shape, name, add, sublayer)
        return out
    x = sublayer(block.conv1, "conv1", [source], mid_shape)
    x = sublayer(block.bn1, "bn1", [x], mid_shape)
    x = sublayer(ReLU(name="r"), "relu1", [x], mid_shape)
    x = sublayer(block.conv2, "conv2", [x], mid_shape)
    x = sublayer(block.bn2, "bn2", [x], mid_shape)
    if block.projection:
        s = sublayer(block.shortcut_conv, "shortcut_conv", [source], mid_shape)
        s = sublayer(block.shortcut_bn, "shortcut_bn", [s], mid_shape)
    else:
        s = _plain_shortcut(block, source, source, mid_shape, name, add)
    x = sublayer(Add(name="a"), "add", [[x, s]], mid_shape)
    taken.discard(block.name)
    add(keras_layer_item(ReLU(name="r")), block.name, [x], mid_shape, [])
    return out


def _plain_shortcut(block, value, source, mid_shape, name, add):
    """The shortcut of a block without a projection: the zero-pad of
    ``value`` to more channels (a frozen strided 1x1 Conv2D holding the
    block's pad kernel), or the block's input ``source`` as it is."""
    if block._pad_kernel is None:
        return source
    from ..layers import Conv2D  # noqa: PLC0415
    pad = Conv2D(block.filters, 1, strides=block.strides, padding="same", use_bias=False,
                 name="p")
    item = keras_layer_item(pad)
    item["config"]["trainable"] = False
    return add(item, name("shortcut_pad"), [value], mid_shape,
               [np.asarray(block._pad_kernel.numpy(), np.float32)])


def _expand_preact(block, source, in_shape, mid_shape, name, add, sublayer):
    """The Keras layers of one call of a PreActivationResidualBlock (He et
    al. 2016): BN, ReLU, conv, BN, ReLU, conv, plus the shortcut (a
    projection or zero-pad of the first ReLU's output, else the input); the
    final Add keeps the block's name."""
    from ..layers import Add, ReLU  # noqa: PLC0415
    x = sublayer(block.bn1, "bn1", [source], list(in_shape))
    a = sublayer(ReLU(name="r"), "relu1", [x], list(in_shape))
    x = sublayer(block.conv1, "conv1", [a], mid_shape)
    x = sublayer(block.bn2, "bn2", [x], mid_shape)
    x = sublayer(ReLU(name="r"), "relu2", [x], mid_shape)
    x = sublayer(block.conv2, "conv2", [x], mid_shape)
    if block.projection:
        s = sublayer(block.shortcut_conv, "shortcut_conv", [a], mid_shape)
    else:
        s = _plain_shortcut(block, a, source, mid_shape, name, add)
    add(keras_layer_item(Add(name="a")), block.name, [[x, s]], mid_shape, [])
    return None


def lower_model(model, functional=False):
    """Keras 3's config item and weight groups for a built functional or
    Sequential ``model`` (see the module docstring).

    Args:
        functional (bool): describe a Sequential model as the functional
            graph it is (for the ONNX export), not as Keras's Sequential.

    Returns:
        Lowered.
    Raises:
        NotKeras: for a model with no layer graph (a subclassed model).
        ValueError: for a config value that cannot be saved (naming the layer).
    """
    from ..layers.input_layer import InputLayer  # noqa: PLC0415
    from ..models.model import Model  # noqa: PLC0415
    from ..models.sequential import Sequential  # noqa: PLC0415
    from . import serialization  # noqa: PLC0415
    if getattr(model, "_graph", None) is None:
        raise NotKeras(f"model {model.name!r} has no layer graph")
    all_keras = True

    def one(layer):
        """(item, variables or None for a nested model's groups, sub-Lowered)."""
        nonlocal all_keras
        if isinstance(layer, InputLayer):
            return _input_item(layer), [], None
        if isinstance(layer, Model):
            sub = lower_model(layer, functional)
            all_keras = all_keras and sub.keras
            return sub.item, None, sub
        try:
            return keras_layer_item(layer), layer_variables(layer), None
        except NotKeras:
            all_keras = False
            return _own_item(layer), None, None

    sequential = not functional and isinstance(model, Sequential) and not any(
        type(layer).__name__ in _COMPOSITES for layer in model.layers)
    if sequential:
        items, classes, parts = [], [], []
        for layer in model._stack:
            item, variables, sub = one(layer)
            item.pop("build_config", None) if isinstance(model._stack[0], InputLayer) else None
            items.append(item)
            if not isinstance(layer, InputLayer):
                classes.append(item["class_name"])
                parts.append((layer, variables, sub))
        config = {"name": model.name, "trainable": bool(model.trainable),
                  "dtype": _policy("float32"), "layers": items}
        item = {"module": "keras", "class_name": "Sequential", "config": config,
                "registered_name": None}
        if model._stack and isinstance(model._stack[0], InputLayer):
            config["build_input_shape"] = list(model._stack[0].batch_shape)
            item["build_config"] = {"input_shape": list(model._stack[0].batch_shape)}
        labels = {}
        groups = _groups(group_paths(classes), parts, labels,
                         [layer.name for layer, _, _ in parts])
        return Lowered(item, groups, all_keras, labels)

    ours = serialization.functional_config(model)
    taken = {entry["name"] for entry in ours["layers"]}
    by_name = {layer.name: layer for layer in model._graph.layers}
    items, variables_of = [], {}
    for entry in ours["layers"]:
        layer = by_name[entry["name"]]
        if type(layer).__name__ in _COMPOSITES and len(entry["inbound_nodes"]) == 1 \
                and layer.built and type(layer).__module__.startswith("pyresnet.") \
                and not entry["inbound_nodes"][0]["kwargs"] \
                and len(entry["inbound_nodes"][0]["args"]) == 1:
            try:
                for sub_item, variables in _expand_residual(layer, entry, taken):
                    items.append(sub_item)
                    variables_of[sub_item["name"]] = (layer, variables, None)
                continue
            except NotKeras:
                pass
        item, variables, sub = one(layer)
        item.pop("build_config", None)
        item["name"] = entry["name"]
        item["inbound_nodes"] = [_clean_node(node) for node in entry["inbound_nodes"]]
        items.append(item)
        variables_of[entry["name"]] = (layer, variables, sub)
    config = {"name": model.name, "trainable": bool(model.trainable), "layers": items,
              "input_layers": ours["input_layers"], "output_layers": ours["output_layers"]}
    item = {"module": "keras.src.models.functional", "class_name": "Functional",
            "config": config, "registered_name": "Functional"}
    order = [n for n in keras_layer_order(config)]
    classes = {i["name"]: i["class_name"] for i in items}
    layer_order = [n for n in order if n in classes]
    labels = {}
    groups = _groups(group_paths([classes[n] for n in layer_order]),
                     [variables_of[n] for n in layer_order], labels, layer_order)
    return Lowered(item, groups, all_keras, labels)


def _clean_node(node):
    """An inbound node as Keras 3 writes it: tuples as lists, no
    ``training`` argument (Keras passes the call's own)."""
    kwargs = {k: v for k, v in node.get("kwargs", {}).items() if k not in ("training", "mask")}
    return {"args": _untuple(node.get("args", [])), "kwargs": _untuple(kwargs)}


def _untuple(data):
    if isinstance(data, dict):
        if data.get("class_name") == "__tuple__":
            return [_untuple(v) for v in data["config"]["value"]]
        return {k: _untuple(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_untuple(v) for v in data]
    return data


def _groups(paths, parts, labels, names):
    groups = []
    for path, (layer, variables, sub), name in zip(paths, parts, names):
        labels[path] = name
        if sub is not None:
            groups += [(f"{path}/{p}", vs) for p, vs in sub.groups]
            labels.update({f"{path}/{p}": f"{name}/{n}" for p, n in sub.labels.items()})
        elif variables is None:
            groups += _own_groups(layer, path)
        elif variables:
            groups.append((f"{path}/vars", list(variables)))
    return groups


# ---- Keras -> pyresnet --------------------------------------------------------------------------

def _our_value(where, key, value):
    if isinstance(value, dict) and "class_name" in value and key.endswith("_initializer"):
        cls = value.get("class_name")
        if cls not in _INIT_CLASSES:
            raise ValueError(f"{where}: initializer {cls!r} of `{key}` is not one pyresnet has "
                             f"({sorted(_INIT_CLASSES)})")
        return _INIT_CLASSES[cls]
    if isinstance(value, str) and key.endswith("_initializer"):
        if value not in initializers._BY_NAME:
            raise ValueError(f"{where}: initializer {value!r} of `{key}` is not one pyresnet has")
        return value
    if key == "activation":
        if not isinstance(value, str) or value not in activations._BY_NAME:
            raise ValueError(f"{where}: activation {value!r} is not one pyresnet has "
                             f"({sorted(activations._BY_NAME)})")
        return value
    if key.endswith("_regularizer"):
        if value is None:
            return None
        config = value.get("config") if isinstance(value, dict) else None
        if not (isinstance(value, dict) and value.get("class_name") in ("L1", "L2", "L1L2")
                and isinstance(config, dict) and set(config) <= {"l1", "l2"}
                and all(isinstance(v, (int, float)) and v >= 0 for v in config.values())):
            raise ValueError(f"{where}: `{key}` {str(value)[:80]} is not supported (L1, L2 "
                             "and L1L2 are)")
        return {"class_name": "__regularizer__",
                "config": {"class_name": value["class_name"], "config": dict(config)}}
    if isinstance(value, dict):
        raise ValueError(f"{where}: argument `{key}` holds an object ({str(value)[:80]}), "
                         "which pyresnet does not read")
    if isinstance(value, list):
        if key == "axis" and len(value) == 1:
            return value[0]
        return tuple(value)
    return value


def _dtype_name(where, value):
    if isinstance(value, dict):
        value = (value.get("config") or {}).get("name")
    if value not in (None, "float32", "mixed_bfloat16"):
        raise ValueError(f"{where}: dtype policy {value!r} is not supported "
                         "(float32 or mixed_bfloat16)")
    return value or "float32"


def _from_keras_layer(item, path):
    cls = item.get("class_name")
    module = str(item.get("module") or "")
    config = item.get("config")
    if not isinstance(config, dict):
        raise ValueError(f"{path}: layer has no config dict")
    name = config.get("name", item.get("name"))
    where = f'layer "{name}" ({cls})'
    if cls == "InputLayer":
        shape = config.get("batch_shape")
        if shape is None and "batch_input_shape" in config:
            shape = config["batch_input_shape"]
        if not isinstance(shape, list) or not shape or \
                not all(d is None or (isinstance(d, int) and d > 0) for d in shape):
            raise ValueError(f"{where}: batch_shape {shape!r} is not a list of positive ints")
        if config.get("sparse") or config.get("ragged") or config.get("optional"):
            raise ValueError(f"{where}: sparse, ragged or optional inputs are not supported")
        if str(config.get("dtype", "float32")) != "float32":
            raise ValueError(f"{where}: only float32 inputs are supported, got "
                             f"{config.get('dtype')!r}")
        return {"module": "pyresnet.layers", "class_name": "InputLayer",
                "config": {"name": name, "shape": tuple(shape[1:]), "batch_size": shape[0],
                           "dtype": "float32"}, "registered_name": None}
    if cls in ("Functional", "Sequential", "Model") and module in _MODEL_MODULES:
        return from_keras_config(item, path)
    if not module.startswith("keras.") or cls not in KERAS_LAYERS:
        raise ValueError(f"{where} from module {module!r}: pyresnet cannot load this class "
                         f"(the Keras layers it reads: {sorted(KERAS_LAYERS)})")
    ours = {"name": name, "trainable": bool(config.get("trainable", True)),
            "dtype": _dtype_name(where, config.get("dtype"))}
    for key, value in config.items():
        if key in ("name", "trainable", "dtype"):
            continue
        if key in KERAS_LAYERS[cls] and not (cls == "Conv2D" and key == "dilation_rate"):
            ours[key] = _our_value(where, key, value)
            continue
        defaults = _KERAS_DEFAULTS.get(key, (None, False))
        if value is None or value is False or any(value == d for d in defaults):
            continue
        raise ValueError(f"{where}: argument {key}={str(value)[:80]} is not supported by "
                         "pyresnet")
    item_out = {"module": "pyresnet.layers", "class_name": cls, "config": ours,
                "registered_name": None}
    if isinstance(item.get("build_config"), dict):
        shape = item["build_config"].get("input_shape")
        if shape is not None:
            item_out["build_config"] = {"input_shape": _shape_value(shape)}
    return item_out


def _shape_value(shape):
    if isinstance(shape, list) and all(d is None or isinstance(d, int) for d in shape):
        return {"class_name": "__tuple__", "config": {"value": shape}}
    if isinstance(shape, list):
        return [_shape_value(s) for s in shape]
    return shape


def from_keras_config(item, path="config.json"):
    """pyresnet's serialized model (for
    :func:`pyresnet.saving.serialization.deserialize_layer`) from a Keras 3
    model config item (``Functional`` or ``Sequential`` of the layers in
    :data:`KERAS_LAYERS`, ``InputLayer``, nested models; pyresnet's own and
    registered layers pass through).

    Raises:
        ValueError: naming the first layer (and argument) pyresnet does not
            support, or a malformed config.
    """
    if not isinstance(item, dict) or not isinstance(item.get("config"), dict):
        raise ValueError(f"{path}: a model config must be a dict with a config dict")
    cls, config = item.get("class_name"), item["config"]
    module = str(item.get("module") or "")
    if cls == "Sequential" and module in _MODEL_MODULES:
        layers = config.get("layers")
        if not isinstance(layers, list):
            raise ValueError(f"{path}: the Sequential config has no layer list")
        converted = [convert_item(layer, path) for layer in layers]
        if not converted or converted[0]["class_name"] != "InputLayer":
            shape = config.get("build_input_shape")
            if isinstance(shape, list):
                converted.insert(0, _from_keras_layer(
                    {"class_name": "InputLayer", "module": "keras.layers",
                     "config": {"batch_shape": shape, "name": f"{config.get('name')}_input"}},
                    path))
        return {"module": "pyresnet.models", "class_name": "Sequential",
                "config": {"name": config.get("name"), "trainable": config.get("trainable", True),
                           "layers": converted}, "registered_name": None}
    if cls in ("Functional", "Model") and module in _MODEL_MODULES:
        layers = config.get("layers")
        if not isinstance(layers, list):
            raise ValueError(f"{path}: the functional config has no layer list")
        out = []
        for layer in layers:
            if not isinstance(layer, dict):
                raise ValueError(f"{path}: a layer entry is not a dict")
            converted = convert_item(layer, path)
            converted.pop("build_config", None)
            converted["name"] = layer.get("name", converted["config"].get("name"))
            converted["inbound_nodes"] = [
                {"args": node.get("args", []),
                 "kwargs": {k: v for k, v in (node.get("kwargs") or {}).items()
                            if k not in ("training", "mask")}}
                for node in (layer.get("inbound_nodes") or []) if isinstance(node, dict)]
            out.append(converted)
        return {"module": "pyresnet.models", "class_name": "Functional",
                "config": {"name": config.get("name"), "trainable": config.get("trainable", True),
                           "layers": out, "input_layers": config.get("input_layers"),
                           "output_layers": config.get("output_layers")},
                "registered_name": None}
    raise ValueError(f"{path}: the top-level object {cls!r} (module {module!r}) is not a Keras "
                     "Functional or Sequential model")


def convert_item(item, path):
    """One layer item of a Keras config in pyresnet's form: Keras layers
    translated, pyresnet's (``pyresnet>Name``) and other registered layers
    passed through for the registry to resolve."""
    if not isinstance(item, dict):
        raise ValueError(f"{path}: a layer entry is not a dict")
    module = str(item.get("module") or "")
    registered = item.get("registered_name")
    if isinstance(registered, str) and registered.startswith("pyresnet>"):
        return dict(item, registered_name=None, module="pyresnet.layers")
    if module.startswith("keras") or item.get("class_name") == "InputLayer":
        return _from_keras_layer(item, path)
    return item


def is_keras_written(config):
    """Whether a config.json item uses Keras 3's modules (not pyresnet's)."""
    return str(config.get("module") or "").startswith("keras")


# ---- compile settings ----------------------------------------------------------------------

_OPTIMIZERS = ("SGD", "Adam", "AdamW", "RMSprop")
# Keras optimizer arguments pyresnet does not have, and their "unused" values
_KERAS_OPTIMIZER_DEFAULTS = {"loss_scale_factor": (None,),
                             "gradient_accumulation_steps": (None,)}
_KERAS_LOSS_DEFAULTS = {"ignore_class": (None,), "axis": (-1,), "dtype": (None,)}


def keras_compile_config(ours):
    """Keras 3's ``compile_config`` from pyresnet's
    (:func:`serialization.compile_config`), or None when something in it
    has no Keras equivalent (a learning-rate schedule, a metric object...):
    Keras then loads the model uncompiled."""
    if not isinstance(ours, dict):
        return None
    opt = ours.get("optimizer") or {}
    if opt.get("class_name") not in _OPTIMIZERS or \
            not isinstance((opt.get("config") or {}).get("learning_rate"), float):
        return None

    def loss(data):
        if data is None or isinstance(data, str):
            return data
        if isinstance(data, dict) and "class_name" in data:
            config = dict(data["config"])
            if data["class_name"] == "SparseCategoricalCrossentropy":
                if config.pop("label_smoothing", 0.0) != 0.0:
                    raise NotKeras("label_smoothing")
            return {"module": "keras.losses", "class_name": data["class_name"],
                    "config": config, "registered_name": None}
        if isinstance(data, list):
            return [loss(d) for d in data]
        if isinstance(data, dict):
            return {k: loss(v) for k, v in data.items()}
        raise NotKeras(str(data))

    metrics = ours.get("metrics")
    if metrics is not None and not (isinstance(metrics, list)
                                    and all(isinstance(m, str) for m in metrics)):
        return None
    try:
        keras_loss = loss(ours.get("loss"))
    except NotKeras:
        return None
    return {"optimizer": {"module": "keras.optimizers", "class_name": opt["class_name"],
                          "config": dict(opt["config"]), "registered_name": None},
            "loss": keras_loss, "loss_weights": ours.get("loss_weights"), "metrics": metrics,
            "weighted_metrics": None, "run_eagerly": bool(ours.get("run_eagerly") or False),
            "steps_per_execution": ours.get("steps_per_execution", 1),
            "jit_compile": False}


def from_keras_compile_config(config):
    """pyresnet's compile settings from Keras 3's ``compile_config``, or
    ``(None, reason)`` when they use something pyresnet does not have.

    Returns:
        (dict or None, str or None).
    """
    from .. import losses  # noqa: PLC0415
    if not isinstance(config, dict):
        return None, "no compile_config"
    opt = config.get("optimizer")
    if isinstance(opt, str):
        opt = {"class_name": {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW",
                              "rmsprop": "RMSprop"}.get(opt.lower(), opt), "config": {}}
    if not isinstance(opt, dict) or opt.get("class_name") not in _OPTIMIZERS:
        return None, f"optimizer {str(opt)[:80]}"
    opt_config = {}
    for key, value in (opt.get("config") or {}).items():
        if key in _KERAS_OPTIMIZER_DEFAULTS:
            if value not in _KERAS_OPTIMIZER_DEFAULTS[key]:
                return None, f"optimizer argument {key}={value!r}"
            continue
        if key == "learning_rate" and not isinstance(value, (int, float)):
            return None, "a learning-rate schedule"
        opt_config[key] = value
    known = {cls.__name__ for cls in losses._BY_NAME.values()}

    def loss(data):
        if data is None:
            return None
        if isinstance(data, str):
            if data not in losses._BY_NAME:
                raise NotKeras(f"loss {data!r}")
            return data
        if isinstance(data, dict) and "class_name" in data:
            if data["class_name"] not in known:
                raise NotKeras(f"loss {data['class_name']!r}")
            out = {}
            for key, value in (data.get("config") or {}).items():
                if key in _KERAS_LOSS_DEFAULTS:
                    if value not in _KERAS_LOSS_DEFAULTS[key]:
                        raise NotKeras(f"loss argument {key}={value!r}")
                    continue
                out[key] = value
            return {"class_name": data["class_name"], "config": out}
        if isinstance(data, list):
            return [loss(d) for d in data]
        if isinstance(data, dict):
            return {k: loss(v) for k, v in data.items()}
        raise NotKeras(f"loss {str(data)[:80]}")

    try:
        our_loss = loss(config.get("loss"))
    except NotKeras as e:
        return None, str(e)
    metrics = config.get("metrics")
    if metrics is not None and not (isinstance(metrics, list)
                                    and all(isinstance(m, str) for m in metrics)):
        return None, f"metrics {str(metrics)[:80]}"
    return {"optimizer": {"class_name": opt["class_name"], "config": opt_config},
            "loss": our_loss, "metrics": metrics, "loss_weights": config.get("loss_weights"),
            "run_eagerly": None, "jit_compile": "auto",
            "steps_per_execution": config.get("steps_per_execution", 1)}, None
