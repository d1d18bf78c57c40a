"""``Lambda``: a Python function as a layer."""
from ..utils import tree
from .layer import Layer


class Lambda(Layer):
    """Wrap ``function(inputs, **arguments)`` as a layer, as
    ``keras.layers.Lambda``.  The function must use pyresnet ops to run
    compiled and to have gradients; it has no weights.

    Args:
        function: callable ``Tensor(s) -> Tensor(s)``.
        output_shape: optional output shape *without* the batch axis (as
            Keras: ``output_shape=(10,)`` gives ``(batch, 10)``; a list of
            such shapes for several outputs), or a function of the input
            shape (batch included) returning the full output shape; None:
            found by calling ``function`` on a zero batch.
        arguments (dict): extra keyword arguments for ``function``.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        TypeError: ``function`` is not callable.

    Saving: a Lambda's function is Python code; ``get_config`` records its
    name only, and loading needs it in ``custom_objects`` (Keras refuses
    unsafe deserialization of lambdas the same way).
    """

    def __init__(self, function, output_shape=None, arguments=None, **kwargs):
        super().__init__(**kwargs)
        if not callable(function):
            raise TypeError(f"Lambda: function must be callable, got {function!r}")
        self.function = function
        self.output_shape = output_shape
        self.arguments = dict(arguments or {})

    def call(self, inputs):
        return self.function(inputs, **self.arguments)

    def compute_output_shape(self, input_shape):
        if self.output_shape is None:
            return super().compute_output_shape(input_shape)
        if callable(self.output_shape):
            return self.output_shape(input_shape)
        flat = tree.flatten(input_shape, is_leaf=tree.is_shape)
        batch = flat[0][0] if flat and flat[0] else None
        return tree.map_structure(lambda s: (batch,) + tuple(s), self.output_shape,
                                  is_leaf=tree.is_shape)
