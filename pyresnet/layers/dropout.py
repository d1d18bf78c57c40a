"""``Dropout``."""
from .. import random
from .layer import Layer


class Dropout(Layer):
    """Inverted dropout (Srivastava et al. 2014, JMLR 15, section 2), as
    ``keras.layers.Dropout``: with ``training=True`` each element is zeroed
    with probability ``rate`` and the others scaled by ``1 / (1 - rate)``;
    with ``training=False`` (inference, ``evaluate``, ``predict``; the
    default when called alone, as Keras) the identity.

    The mask comes from :func:`pyresnet.random.dropout`: counter-based
    Philox draws from the layer's ``SeedGenerator`` (an int64 Variable
    advanced by every training call, eagerly and in compiled steps, saved
    with the model), so a seed reproduces a run and a compiled step draws a
    new mask each call.

    Args:
        rate (float): in [0, 1).
        noise_shape: None, or a shape broadcasting to the input's (None
            entries take the input's size), e.g. ``(None, 1, 1, C)``.
        seed (int): seed of the draws; None draws one from Python's ``random``.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: rate outside [0, 1).
    """

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"Dropout: rate must be in [0, 1), got {rate!r}")
        self.rate = float(rate)
        self.noise_shape = None if noise_shape is None else tuple(noise_shape)
        self.seed = seed
        self._seed_generator = random.SeedGenerator(seed)

    def call(self, inputs, training=False):
        if not training or self.rate == 0.0:
            return inputs
        return random.dropout(inputs, self.rate, noise_shape=self.noise_shape,
                              seed=self._seed_generator)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)
