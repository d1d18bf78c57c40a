"""ONNX export of a model's inference graph (issue 29, item 2): Keras 3's
``model.export(path, format="onnx")``.

The graph is built from Keras's view of the model (the same lowering as
``model.save``, :func:`pyresnet.saving.keras_config.lower_model`, so a
``ResidualBlock`` is its Conv2D/BatchNormalization/ReLU/Add layers) with the
``onnx`` package's helpers (the ``onnx`` extra).  It

* takes float32 NHWC inputs (as ``predict``), named after the model's
  inputs, with a symbolic batch dimension ``"batch"``, and returns the
  model's outputs (float32, NHWC where 4-D);
* works channels-first inside (one Transpose after each input, and back
  only where a layer needs the channels-last order: Flatten, Reshape,
  Dense on 4-D tensors, LayerNormalization, Softmax, the outputs);
* folds every inference-mode BatchNormalization that follows a
  convolution (Conv2D, DepthwiseConv2D, no activation, used only by the
  BN) into that convolution's kernel and bias, and turns the others into
  one Mul and one Add;
* drops Dropout (identity at inference).

Layers it cannot write (pyresnet's own layers other than ResidualBlock,
Python layers, nested models, arguments it does not implement) raise
ValueError naming the layer.
"""
import os

import numpy as np

_OPSET = 17


def _onnx():
    try:
        import onnx  # noqa: PLC0415
        from onnx import helper, numpy_helper  # noqa: PLC0415
    except ImportError:
        raise ImportError("model.export(format='onnx') needs the onnx package: "
                          "pip install 'pyresnet[onnx]' (or pip install onnx)") from None
    return onnx, helper, numpy_helper


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def _same_pads(size, kernel, stride, dilation=1):
    """(begin, end) padding of TensorFlow/Keras ``"same"``: the extra
    pixel at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


class _Builder:
    def __init__(self, helper, numpy_helper):
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.inits, self.count = [], [], 0
        self.tensors = {}  # (layer, node, index) -> (onnx name, layout, static shape NHWC)
        self.cache = {}

    def name(self, base):
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, array, base):
        name = self.name(base)
        self.inits.append(self.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op, inputs, base, **attrs):
        out = self.name(base)
        self.nodes.append(self.helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def layout(self, ref, want):
        """The ONNX name of tensor ``ref`` in layout ``want`` ("nchw" or
        "nhwc"; rank-4 tensors only differ)."""
        name, layout, shape = self.tensors[ref]
        if len(shape) != 4 or layout == want:
            return name
        key = (name, want)
        if key not in self.cache:
            perm = [0, 3, 1, 2] if want == "nchw" else [0, 2, 3, 1]
            self.cache[key] = self.node("Transpose", [name], "transpose", perm=perm)
        return self.cache[key]


def _shape_of(args):
    found = []

    def walk(a):
        if isinstance(a, dict) and a.get("class_name") == "__keras_tensor__":
            found.append(tuple(a["config"]["shape"]))
        elif isinstance(a, dict):
            for v in a.values():
                walk(v)
        elif isinstance(a, list):
            for v in a:
                walk(v)
    walk(args)
    return found


def _activation(b, x, name, where):
    if name in (None, "linear"):
        return x
    ops = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}
    if name in ops:
        return b.node(ops[name], [x], name)
    raise ValueError(f"{where}: activation {name!r} is not supported by the ONNX export")


def _bn_affine(cfg, values):
    """(scale, shift) of an inference-mode BatchNormalization from Keras's
    variable list (gamma if scale, beta if center, moving mean, moving
    variance)."""
    values = list(values)
    gamma = values.pop(0) if cfg.get("scale", True) else None
    beta = values.pop(0) if cfg.get("center", True) else None
    mean, var = values
    scale = 1.0 / np.sqrt(var.astype(np.float64) + float(cfg.get("epsilon", 1e-3)))
    if gamma is not None:
        scale = scale * gamma
    shift = -mean * scale + (beta if beta is not None else 0.0)
    return scale, shift


def build_onnx(model, opset_version=None):
    """An ``onnx.ModelProto`` of ``model``'s inference graph (see the
    module docstring).

    Raises:
        ValueError: for a layer or argument the export does not support
            (named), a subclassed model.
        ImportError: without the onnx package.
    """
    onnx, helper, numpy_helper = _onnx()
    from ..saving import keras_config  # noqa: PLC0415
    from ..tensor import Variable  # noqa: PLC0415
    try:
        lowered = keras_config.lower_model(model, functional=True)
    except keras_config.NotKeras as e:
        raise ValueError(f"export: {e}; ONNX export needs a functional or Sequential model") \
            from None
    item = lowered.item
    config = item["config"]
    items = {i["name"]: i for i in config["layers"]}
    order = keras_config.keras_layer_order(config)
    # variables of each layer in Keras's order, by layer name
    values = {}
    names_in_order = [n for n in order if items[n]["class_name"] != "InputLayer"]
    paths = keras_config.group_paths([items[n]["class_name"] for n in names_in_order])
    by_path = {p.rsplit("/vars", 1)[0]: vs for p, vs in lowered.groups}
    for path, n in zip(paths, names_in_order):
        vs = by_path.get(path, [])
        values[n] = [np.asarray(v.numpy() if isinstance(v, Variable) else v, np.float32)
                     for v in vs]
    consumers = {}
    for n, it in items.items():
        for node in it.get("inbound_nodes") or []:
            for ref in keras_config.history_refs(node.get("args")):
                consumers.setdefault(ref, []).append(n)
    outputs = keras_config.output_refs(config["output_layers"])
    for ref in outputs:
        consumers.setdefault(ref, []).append("__output__")

    b = _Builder(helper, numpy_helper)
    graph_inputs = []
    folded = {}  # conv output ref -> (kind, W, bias, attrs, input name)
    for n in order:
        it = items[n]
        cls, cfg = it["class_name"], it["config"]
        where = f'export: layer "{n}" ({cls})'
        if cls == "InputLayer":
            shape = list(cfg["batch_shape"])
            graph_inputs.append(helper.make_tensor_value_info(
                n, onnx.TensorProto.FLOAT, ["batch"] + shape[1:]))
            b.tensors[(n, 0, 0)] = (n, "nhwc", tuple(shape))
            continue
        if it.get("module") not in ("keras.layers",):
            raise ValueError(f"{where}: this layer is not supported by the ONNX export "
                             "(only Keras layers, ResidualBlock and functional/Sequential "
                             "models of them)")
        nodes = it.get("inbound_nodes") or []
        for k, node in enumerate(nodes):
            refs = keras_config.history_refs(node.get("args"))
            shapes = _shape_of(node.get("args"))
            out = _emit(b, cls, cfg, values[n], refs, shapes, (n, k, 0), where, consumers,
                        items, folded)
            if out is not None:
                b.tensors[(n, k, 0)] = out
    graph_outputs, out_nodes = [], []
    for i, ref in enumerate(outputs):
        name, _, shape = b.tensors[ref]
        x = b.layout(ref, "nhwc")
        final = f"output_{i}"
        out_nodes.append(helper.make_node("Identity", [x], [final], name=final))
        graph_outputs.append(helper.make_tensor_value_info(
            final, onnx.TensorProto.FLOAT, ["batch"] + list(shape[1:])))
    graph = helper.make_graph(b.nodes + out_nodes, model.name, graph_inputs, graph_outputs,
                              b.inits)
    proto = helper.make_model(graph, producer_name="pyresnet",
                              opset_imports=[helper.make_opsetid("", opset_version or _OPSET)])
    proto.ir_version = min(proto.ir_version, 8)
    onnx.checker.check_model(proto)
    return proto


def _emit(b, cls, cfg, vals, refs, shapes, out_ref, where, consumers, items, folded):
    """Append the ONNX nodes of one layer call; returns (name, layout, shape)."""
    in_shape = shapes[0] if shapes else None
    if cls in ("Conv2D", "DepthwiseConv2D"):
        if tuple(_pair(cfg.get("dilation_rate", 1))) != (1, 1):
            raise ValueError(f"{where}: dilation_rate is not supported")
        k = _pair(cfg["kernel_size"])
        s = _pair(cfg.get("strides", 1))
        kernel = vals[0]
        if cls == "Conv2D":
            w = kernel.transpose(3, 2, 0, 1)
            group = int(cfg.get("groups", 1))
        else:
            kh, kw, cin, mult = kernel.shape
            w = kernel.reshape(kh, kw, cin * mult).transpose(2, 0, 1).reshape(cin * mult, 1,
                                                                              kh, kw)
            group = cin
        bias = vals[1] if cfg.get("use_bias", True) else np.zeros(w.shape[0], np.float32)
        pads = [0, 0, 0, 0]
        if cfg.get("padding", "valid") == "same":
            (t, bo), (le, r) = (_same_pads(in_shape[1], k[0], s[0]),
                                _same_pads(in_shape[2], k[1], s[1]))
            pads = [t, le, bo, r]
        out_h = (in_shape[1] + pads[0] + pads[2] - k[0]) // s[0] + 1
        out_w = (in_shape[2] + pads[1] + pads[3] - k[1]) // s[1] + 1
        out_shape = (None, out_h, out_w, w.shape[0])
        attrs = dict(kernel_shape=list(k), strides=list(s), pads=pads, group=group)
        x = b.layout(refs[0], "nchw")
        users = consumers.get(out_ref, [])
        if cfg.get("activation", "linear") in (None, "linear") and len(users) == 1 \
                and items.get(users[0], {}).get("class_name") == "BatchNormalization" \
                and len(items[users[0]].get("inbound_nodes") or []) == 1:
            folded[out_ref] = (w, bias, attrs, x, out_shape)
            return (None, "nchw", out_shape)
        y = b.node("Conv", [x, b.const(w.astype(np.float32), "W"),
                            b.const(bias.astype(np.float32), "B")], "conv", **attrs)
        y = _activation(b, y, cfg.get("activation"), where)
        return (y, "nchw", out_shape)
    if cls == "BatchNormalization":
        if cfg.get("axis", -1) not in (-1, len(in_shape) - 1, [-1]):
            raise ValueError(f"{where}: only axis=-1 (channels) is supported")
        scale, shift = _bn_affine(cfg, vals)
        if refs[0] in folded:
            w, bias, attrs, x, out_shape = folded.pop(refs[0])
            w = (w.astype(np.float64) * scale.reshape(-1, 1, 1, 1)).astype(np.float32)
            bias = (bias.astype(np.float64) * scale + shift).astype(np.float32)
            y = b.node("Conv", [x, b.const(w, "W"), b.const(bias, "B")], "conv_bn", **attrs)
            return (y, "nchw", out_shape)
        x = b.layout(refs[0], "nchw")
        shape = (1, -1, 1, 1) if len(in_shape) == 4 else (-1,)
        y = b.node("Mul", [x, b.const(scale.astype(np.float32).reshape(shape), "bn_scale")],
                   "bn_mul")
        y = b.node("Add", [y, b.const(shift.astype(np.float32).reshape(shape), "bn_shift")],
                   "bn_add")
        return (y, "nchw", in_shape)
    if cls in ("ReLU", "Activation", "LeakyReLU", "Dropout"):
        name, layout, shape = b.tensors[refs[0]]
        if cls == "Dropout":
            return (name, layout, shape)
        if cls == "LeakyReLU":
            return (b.node("LeakyRelu", [name], "leaky_relu",
                           alpha=float(cfg.get("negative_slope", 0.3))), layout, shape)
        act = "relu" if cls == "ReLU" else cfg.get("activation")
        if act == "softmax":
            return _emit(b, "Softmax", {"axis": -1}, vals, refs, shapes, out_ref, where,
                         consumers, items, folded)
        return (_activation(b, name, act, where), layout, shape)
    if cls == "Softmax":
        if cfg.get("axis", -1) != -1:
            raise ValueError(f"{where}: only axis=-1 is supported")
        x = b.layout(refs[0], "nhwc")
        return (b.node("Softmax", [x], "softmax", axis=-1), "nhwc", in_shape)
    if cls in ("Add", "Subtract", "Multiply", "Average"):
        layout = "nchw" if len(in_shape) == 4 else "nhwc"
        xs = [b.layout(r, layout) for r in refs]
        op = {"Add": "Add", "Subtract": "Sub", "Multiply": "Mul", "Average": "Add"}[cls]
        y = xs[0]
        for x in xs[1:]:
            y = b.node(op, [y, x], op.lower())
        if cls == "Average":
            y = b.node("Mul", [y, b.const(np.float32(1.0 / len(xs)), "inv_n")], "mean")
        return (y, layout, in_shape)
    if cls == "Concatenate":
        axis = int(cfg.get("axis", -1))
        rank = len(in_shape)
        axis = axis % rank
        if rank == 4:
            xs = [b.layout(r, "nchw") for r in refs]
            axis = {0: 0, 1: 2, 2: 3, 3: 1}[axis]
            layout = "nchw"
        else:
            xs = [b.layout(r, "nhwc") for r in refs]
            layout = "nhwc"
        shape = list(in_shape)
        shape[int(cfg.get("axis", -1)) % rank] = sum(s[int(cfg.get("axis", -1)) % rank]
                                                     for s in shapes)
        return (b.node("Concat", xs, "concat", axis=axis), layout, tuple(shape))
    if cls in ("MaxPooling2D", "AveragePooling2D"):
        k = _pair(cfg.get("pool_size", 2))
        s = _pair(cfg.get("strides") or k)
        pads = [0, 0, 0, 0]
        if cfg.get("padding", "valid") == "same":
            (t, bo), (le, r) = (_same_pads(in_shape[1], k[0], s[0]),
                                _same_pads(in_shape[2], k[1], s[1]))
            pads = [t, le, bo, r]
        x = b.layout(refs[0], "nchw")
        attrs = dict(kernel_shape=list(k), strides=list(s), pads=pads)
        if cls == "AveragePooling2D":
            attrs["count_include_pad"] = 0
        y = b.node("MaxPool" if cls == "MaxPooling2D" else "AveragePool", [x], "pool", **attrs)
        out_h = (in_shape[1] + pads[0] + pads[2] - k[0]) // s[0] + 1
        out_w = (in_shape[2] + pads[1] + pads[3] - k[1]) // s[1] + 1
        return (y, "nchw", (None, out_h, out_w, in_shape[3]))
    if cls in ("GlobalAveragePooling2D", "GlobalMaxPooling2D"):
        x = b.layout(refs[0], "nchw")
        keep = bool(cfg.get("keepdims", False))
        op = "ReduceMean" if cls == "GlobalAveragePooling2D" else "ReduceMax"
        y = b.node(op, [x], "global_pool", axes=[2, 3], keepdims=int(keep))
        if keep:
            return (y, "nchw", (None, 1, 1, in_shape[3]))
        return (y, "nhwc", (None, in_shape[3]))
    if cls in ("Flatten", "Reshape"):
        x = b.layout(refs[0], "nhwc")
        if cls == "Flatten":
            size = int(np.prod(in_shape[1:]))
            return (b.node("Flatten", [x], "flatten", axis=1), "nhwc", (None, size))
        target = [int(d) for d in cfg["target_shape"]]
        shape = b.const(np.array([0] + target, np.int64), "shape")
        return (b.node("Reshape", [x, shape], "reshape"), "nhwc", (None, *target))
    if cls == "Dense":
        x = b.layout(refs[0], "nhwc")
        y = b.node("MatMul", [x, b.const(vals[0], "kernel")], "dense")
        if cfg.get("use_bias", True):
            y = b.node("Add", [y, b.const(vals[1], "bias")], "dense_bias")
        out_shape = tuple(in_shape[:-1]) + (vals[0].shape[1],)
        y = _activation_nhwc(b, y, cfg.get("activation"), where)
        return (y, "nhwc", out_shape)
    if cls == "LayerNormalization":
        axis = cfg.get("axis", -1)
        if axis not in (-1, [-1], len(in_shape) - 1, [len(in_shape) - 1]):
            raise ValueError(f"{where}: only axis=-1 is supported")
        x = b.layout(refs[0], "nhwc")
        vals = list(vals)
        c = in_shape[-1]
        gamma = vals.pop(0) if cfg.get("scale", True) else np.ones(c, np.float32)
        beta = vals.pop(0) if cfg.get("center", True) else np.zeros(c, np.float32)
        y = b.node("LayerNormalization", [x, b.const(gamma, "ln_gamma"),
                                          b.const(beta, "ln_beta")], "layer_norm", axis=-1,
                   epsilon=float(cfg.get("epsilon", 1e-3)))
        return (y, "nhwc", in_shape)
    if cls == "ZeroPadding2D":
        padding = cfg.get("padding", 1)
        if isinstance(padding, int):
            padding = (padding, padding)
        (t, bo), (le, r) = [tuple(p) if isinstance(p, (list, tuple)) else (p, p)
                            for p in padding]
        x = b.layout(refs[0], "nchw")
        pads = b.const(np.array([0, 0, t, le, 0, 0, bo, r], np.int64), "pads")
        y = b.node("Pad", [x, pads], "pad")
        return (y, "nchw", (None, in_shape[1] + t + bo, in_shape[2] + le + r, in_shape[3]))
    if cls == "Rescaling":
        name, layout, shape = b.tensors[refs[0]]
        x = b.layout(refs[0], "nhwc")
        scale = np.asarray(cfg.get("scale", 1.0), np.float32)
        offset = np.asarray(cfg.get("offset", 0.0), np.float32)
        y = b.node("Mul", [x, b.const(scale, "scale")], "rescale")
        y = b.node("Add", [y, b.const(offset, "offset")], "offset")
        return (y, "nhwc", shape)
    if cls == "Permute":
        dims = [int(d) for d in cfg["dims"]]
        x = b.layout(refs[0], "nhwc")
        shape = (None,) + tuple(in_shape[d] for d in dims)
        return (b.node("Transpose", [x], "permute", perm=[0] + dims), "nhwc", shape)
    if cls == "UpSampling2D":
        if cfg.get("interpolation", "nearest") != "nearest":
            raise ValueError(f"{where}: only nearest interpolation is supported")
        sh, sw = _pair(cfg.get("size", 2))
        x = b.layout(refs[0], "nchw")
        scales = b.const(np.array([1, 1, sh, sw], np.float32), "scales")
        y = b.node("Resize", [x, "", scales], "upsample", mode="nearest",
                   coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        return (y, "nchw", (None, in_shape[1] * sh, in_shape[2] * sw, in_shape[3]))
    raise ValueError(f"{where}: this layer is not supported by the ONNX export")


def _activation_nhwc(b, x, name, where):
    if name == "softmax":
        return b.node("Softmax", [x], "softmax", axis=-1)
    return _activation(b, x, name, where)


def export_onnx(model, filepath, opset_version=None):
    """Write ``model``'s inference graph to ``filepath`` as ONNX,
    atomically (temporary file, fsync, rename); see :func:`build_onnx`."""
    from ..utils.atomic import atomic_write  # noqa: PLC0415
    proto = build_onnx(model, opset_version)
    with atomic_write(os.fspath(filepath), "wb") as f:
        f.write(proto.SerializeToString())
