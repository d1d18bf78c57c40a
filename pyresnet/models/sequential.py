"""``Sequential``: a plain stack of layers."""
from ..layers.input_layer import InputLayer
from ..layers.layer import Layer
from ..layers.node import KerasTensor
from .model import Model


class Sequential(Model):
    """A linear stack of layers, each feeding the next, as
    ``keras.Sequential``.

    With a leading ``layers.Input(shape)`` (or ``input_shape=`` on the first
    layer) the model is built at once; otherwise on its first call (or
    ``build(input_shape)``), from that input's shape.  Once built it is a
    functional model over an Input.

    Args:
        layers: list of Layers (optionally starting with an ``Input``).
        trainable (bool), name (str): see :class:`Model`.
    Raises:
        TypeError: for an item that is not a Layer.
        ValueError: for an ``Input`` that is not first.
    """

    def __init__(self, layers=None, trainable=True, name=None):
        super().__init__(trainable=trainable, name=name)
        self._stack = []
        for layer in layers or []:
            self.add(layer, rebuild=False)
        self._maybe_rebuild()

    def add(self, layer, rebuild=True):
        """Append a layer (or an ``Input`` as the first item).

        Raises:
            TypeError: for something that is not a Layer.
            ValueError: for an Input after other layers.
        """
        if isinstance(layer, KerasTensor) and isinstance(layer._history[0].layer, InputLayer):
            layer = layer._history[0].layer
        if not isinstance(layer, Layer):
            raise TypeError(f'Sequential "{self.name}": only Layers can be added, got '
                            f"{type(layer).__name__}")
        if isinstance(layer, InputLayer) and self._stack:
            raise ValueError(f'Sequential "{self.name}": an Input must be the first layer')
        if not self._stack and layer._input_shape_arg is not None:
            self._stack.append(InputLayer(shape=layer._input_shape_arg))
        self._stack.append(layer)
        self._reset_graph()
        if rebuild:
            self._maybe_rebuild()

    def pop(self, rebuild=True):
        """Remove and return the last layer.

        Raises:
            ValueError: when there is no layer.
        """
        if not self.layers:
            raise ValueError(f'Sequential "{self.name}" has no layer to pop')
        layer = self._stack.pop()
        self._reset_graph()
        if rebuild:
            self._maybe_rebuild()
        return layer

    def _reset_graph(self):
        self._graph = None
        self._functional_layers = []
        self._build_shapes = None
        self.input_spec = None
        self.built = False

    def _maybe_rebuild(self):
        if len(self._stack) > 1 and isinstance(self._stack[0], InputLayer):
            self.build(self._stack[0].batch_shape)

    @property
    def layers(self):
        """The layers, without the InputLayer (as Keras)."""
        return [layer for layer in self._stack if not isinstance(layer, InputLayer)]

    def build(self, input_shape):
        """Build every layer for inputs of ``input_shape`` (batch first) by
        calling them in turn on an Input of that shape (any batch size).

        Raises:
            ValueError: when there is no layer, or a layer rejects the shape
                (naming it and the shapes).
        """
        if not self.layers:
            raise ValueError(f'Sequential "{self.name}" has no layers to build')
        first = self._stack[0]
        if isinstance(first, InputLayer) and tuple(first.batch_shape[1:]) == tuple(input_shape[1:]):
            inputs = first.output
        else:
            inputs = InputLayer(shape=tuple(input_shape[1:])).output
        x = inputs
        for layer in self.layers:
            x = layer(x)
        self._init_graph(inputs, x)

    def get_config(self):
        """``{"name", "trainable", "layers": [{"module", "class_name",
        "config", "registered_name"}, ...]}`` (the InputLayer included), as
        Keras."""
        from ..saving.serialization import serialize_layer  # noqa: PLC0415
        items = []
        for layer in self._stack:
            item = serialize_layer(layer)
            if isinstance(self._stack[0], InputLayer):
                item.pop("build_config", None)  # the Input builds it
            items.append(item)
        return {"name": self.name, "trainable": self.trainable, "layers": items}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """A new, unshared Sequential from ``get_config()``'s dict.

        Args:
            custom_objects (dict): class name -> class, for Python layers that
                are neither in ``pyresnet.layers`` nor registered with
                :func:`pyresnet.saving.register_serializable`.
        Raises:
            ValueError: for an unknown layer class name (naming both fixes).
        """
        from ..saving.object_registration import custom_object_scope  # noqa: PLC0415
        from ..saving.serialization import deserialize_layer  # noqa: PLC0415
        with custom_object_scope(custom_objects):
            stack = [item if isinstance(item, Layer) else
                     deserialize_layer({"module": None, "registered_name": None, **item})
                     for item in config["layers"]]
        return cls(stack, trainable=config.get("trainable", True), name=config.get("name"))
