"""``InputSpec``: what a layer accepts, checked on every call (as Keras)."""


class InputSpec:
    """Constraints on one input of a layer.

    Args:
        ndim (int): exact rank, batch dimension included.
        min_ndim (int): minimum rank.
        axes (dict): ``{axis: size}``, e.g. ``{-1: 3}`` for 3 channels (NHWC).
    """

    def __init__(self, ndim=None, min_ndim=None, axes=None):
        self.ndim = ndim
        self.min_ndim = min_ndim
        self.axes = dict(axes or {})

    def __repr__(self):
        return f"InputSpec(ndim={self.ndim}, min_ndim={self.min_ndim}, axes={self.axes})"


def _any_batch(shapes):
    """A built-for shape (or list of shapes) with the batch dimension as None:
    a layer is built for any batch size, whatever batch its build call had."""
    if isinstance(shapes, (tuple, list)) and shapes and all(
            isinstance(s, (tuple, list)) for s in shapes):
        return type(shapes)(_any_batch(s) for s in shapes)
    if isinstance(shapes, (tuple, list)) and shapes:
        return (None,) + tuple(shapes[1:])
    return shapes


def check_input_specs(layer, specs, shapes, built_for=None):
    """Check input shapes against a layer's InputSpec(s).

    Args:
        layer: the Layer (for its name in messages).
        specs: an InputSpec, a list of them (one per input) or None.
        shapes: the flat list of input shapes (tuples, batch first).
        built_for: the input shape the layer was built for, quoted in messages.
    Raises:
        ValueError: naming the layer, the expected and the received shape.
    """
    if specs is None:
        return
    specs = specs if isinstance(specs, (list, tuple)) else [specs]
    if len(specs) != len(shapes):
        raise ValueError(f'Layer "{layer.name}" expects {len(specs)} input(s), '
                         f"but it received {len(shapes)} input tensors")
    hint = f" (the layer was built for input shape {_any_batch(built_for)})" \
        if built_for is not None else ""
    for i, (spec, shape) in enumerate(zip(specs, shapes)):
        if spec is None:
            continue
        where = f'Input {i} of layer "{layer.name}" is incompatible with the layer'
        if spec.ndim is not None and len(shape) != spec.ndim:
            raise ValueError(f"{where}: expected ndim={spec.ndim}, found ndim={len(shape)}. "
                             f"Full shape received: {shape}{hint}")
        if spec.min_ndim is not None and len(shape) < spec.min_ndim:
            raise ValueError(f"{where}: expected min_ndim={spec.min_ndim}, found "
                             f"ndim={len(shape)}. Full shape received: {shape}{hint}")
        for axis, size in spec.axes.items():
            if size is not None and -len(shape) <= axis < len(shape) \
                    and shape[axis] not in (None, size):
                raise ValueError(f"{where}: expected axis {axis} of input shape to have value "
                                 f"{size}, but received input with shape {shape}{hint}")
