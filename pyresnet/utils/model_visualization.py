"""``plot_model`` and ``model_to_dot`` (``keras.utils.plot_model``): a
model's layer graph drawn by Graphviz."""
import os
import shutil
import subprocess

from ..layers.input_layer import InputLayer


def _quote(text):
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _shape_text(shapes):
    shapes = shapes if isinstance(shapes, list) else [shapes]
    return ", ".join(str(tuple(s)) for s in shapes)


def model_to_dot(model, show_shapes=False, show_dtype=False, show_layer_names=True,
                 rankdir="TB", dpi=200):
    """The model's layer graph as Graphviz DOT text: one box per layer
    (name and class; with ``show_shapes`` its input and output shapes,
    with ``show_dtype`` its dtype), an edge per connection.

    Args:
        model: a built functional or Sequential model.
        rankdir (str): ``"TB"`` (top to bottom) or ``"LR"``.
    Returns:
        str: the DOT source.
    Raises:
        ValueError: for a model without a layer graph (a subclassed model,
            or one not built), or a bad ``rankdir``.
    """
    graph = getattr(model, "_graph", None)
    if graph is None:
        raise ValueError(f'plot_model: model "{model.name}" has no layer graph (a subclassed '
                         "model, or a Sequential not built yet); build it from an Input")
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise ValueError(f"plot_model: rankdir must be 'TB', 'LR', 'BT' or 'RL', got {rankdir!r}")
    lines = [f"digraph {_quote(model.name)} {{", f"  graph [rankdir={rankdir}, dpi={int(dpi)}];",
             "  node [shape=record, fontname=Helvetica];"]
    ids = {id(layer): f"layer{i}" for i, layer in enumerate(graph.layers)}
    for layer in graph.layers:
        label = f"{layer.name} ({type(layer).__name__})" if show_layer_names \
            else type(layer).__name__
        if show_dtype:
            label += "|float32"
        if show_shapes:
            outputs = graph.layer_output_shapes(layer)
            inputs = [tuple(t.shape) for n in graph.nodes if n.layer is layer
                      for t in n.input_tensors] if not isinstance(layer, InputLayer) else outputs
            label += f"|{{input: {_shape_text(inputs)}|output: {_shape_text(outputs)}}}"
        lines.append(f"  {ids[id(layer)]} [label={_quote('{' + label + '}')}];")
    for node in graph.nodes:
        for t in node.input_tensors:
            parent = t._history[0].layer
            lines.append(f"  {ids[id(parent)]} -> {ids[id(node.layer)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def plot_model(model, to_file="model.png", show_shapes=False, show_dtype=False,
               show_layer_names=True, rankdir="TB", dpi=200, **kwargs):
    """Draw the model's layer graph into ``to_file`` with Graphviz's ``dot``
    (``keras.utils.plot_model``); the format follows the file's extension
    (``.png``, ``.svg``, ``.pdf``; ``.dot`` writes the DOT source and needs
    no Graphviz).  The file is written to a temporary name and renamed.

    Args:
        model, show_shapes, show_dtype, show_layer_names, rankdir, dpi: see
            :func:`model_to_dot`.
        **kwargs: Keras's other display options (``expand_nested``,
            ``show_layer_activations``, ...) are accepted and ignored.
    Returns:
        str: ``to_file``.
    Raises:
        ImportError: when Graphviz's ``dot`` program is not installed (the
            message says how to install it, or to write a ``.dot`` file).
        ValueError: as :func:`model_to_dot`; RuntimeError when ``dot`` fails.
    """
    from .atomic import write_bytes  # noqa: PLC0415
    source = model_to_dot(model, show_shapes, show_dtype, show_layer_names, rankdir, dpi)
    ext = os.path.splitext(to_file)[1][1:].lower() or "png"
    if ext == "dot":
        write_bytes(to_file, source.encode())
        return to_file
    dot = shutil.which("dot")
    if dot is None:
        raise ImportError("plot_model needs Graphviz's `dot` program, which was not found on "
                          "PATH: install Graphviz (e.g. `apt-get install graphviz`, `brew "
                          "install graphviz`, `conda install graphviz`), or write the DOT "
                          "source with to_file='model.dot' (or utils.model_to_dot)")
    result = subprocess.run([dot, f"-T{ext}"], input=source.encode(), capture_output=True,
                            check=False)
    if result.returncode != 0:
        raise RuntimeError(f"plot_model: Graphviz failed ({result.stderr.decode().strip()})")
    write_bytes(to_file, result.stdout)
    return to_file
