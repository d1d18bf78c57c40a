"""The text of ``Model.summary()``, laid out as Keras 3 prints it."""
import numpy as np

from ..utils import tree


def readable_memory_size(nbytes):
    """``"1.04 MB"``: bytes in the largest unit below 1024 (Keras's rule, 1 KB = 1024 B)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if nbytes < 1024:
            return f"{nbytes:.2f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.2f} PB"


def _count(weights):
    return int(sum(int(np.prod(w.shape)) for w in weights))


def _type_name(layer):
    if type(layer).__name__ == "Model" and getattr(layer, "_graph", None) is not None:
        return "Functional"  # Keras's class for Model(inputs, outputs)
    return type(layer).__name__


def _output_shape(model, layer):
    graph = model._graph
    shapes = graph.layer_output_shapes(layer) if graph is not None else []
    if not shapes and layer.built and layer._build_shapes is not None:  # a subclassed model
        unbatched = tree.map_structure(lambda s: (None,) + tuple(s[1:]), layer._build_shapes,
                                       is_leaf=tree.is_shape)
        try:
            shapes = [layer.compute_output_shape(unbatched)]
        except (ValueError, TypeError, NotImplementedError):
            shapes = []
    text = {str(s).replace("'", "") for s in shapes}
    return "?" if not text else text.pop() if len(text) == 1 else "multiple"


def _sequential_like(graph):
    if graph is None:
        return True
    reads = [id(t) for n in graph.nodes for t in n.input_tensors]
    return (all(len(n.input_tensors) == 1 and len(n.output_tensors) == 1 for n in graph.nodes)
            and len(reads) == len(set(reads)) and len(graph.flat_inputs) == 1)


def render(model, line_length=None):
    """The summary of a built model as one string (see ``Model.summary``)."""
    graph = model._graph
    layers = model.layers
    connected = not _sequential_like(graph)
    headers = ["Layer (type)", "Output Shape", "Param #"] + (["Connected to"] if connected else [])
    rows = []
    for layer in layers:
        params = f"{layer.count_params():,}" if layer.built else "0 (unbuilt)"
        row = [f"{layer.name} ({_type_name(layer)})", _output_shape(model, layer), params]
        if connected:
            row.append(", ".join(graph.inbound_layers(layer)) or "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows + [headers]) for i in range(len(headers))]
    if line_length is not None:
        widths[0] = max(12, widths[0] + line_length - (sum(widths) + 3 * len(widths) + 1))

    def line(left, mid, right, fill):
        return left + mid.join(fill * (w + 2) for w in widths) + right

    def cells(values, edge):
        texts = [v[:w].rjust(w) if i == 2 else v[:w].ljust(w)  # Param # right-aligned
                 for i, (v, w) in enumerate(zip(values, widths))]
        return edge + edge.join(f" {t} " for t in texts) + edge

    out = [f'Model: "{model.name}"', line("┏", "┳", "┓", "━"), cells(headers, "┃"),
           line("┡", "╇", "┩", "━")]
    out += [cells(r, "│") for r in rows]
    out.append(line("└", "┴", "┘", "─"))
    trainable, frozen = model.trainable_weights, model.non_trainable_weights
    n_t, n_f = _count(trainable), _count(frozen)
    out.append(f" Total params: {n_t + n_f:,} ({readable_memory_size(4 * (n_t + n_f))})")
    out.append(f" Trainable params: {n_t:,} ({readable_memory_size(4 * n_t)})")
    out.append(f" Non-trainable params: {n_f:,} ({readable_memory_size(4 * n_f)})")
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and optimizer.built:
        n_o = _count(optimizer.variables)
        out.append(f" Optimizer params: {n_o:,} ({readable_memory_size(4 * n_o)})")
    return "\n".join(out)
