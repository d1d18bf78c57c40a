"""``RandomFlip``."""
from ._preprocessing import IMAGES, PreprocessingLayer

_MODES = {"horizontal": (True, False), "vertical": (False, True),
          "horizontal_and_vertical": (True, True)}


class RandomFlip(PreprocessingLayer):
    """Flip each image left-right and/or upside down with probability 1/2, as
    ``keras.layers.RandomFlip`` (the two flips drawn independently); identity
    with ``training=False``.  Runs the ``random_flip`` op.

    Input: (N, H, W, C) uint8 or float32; output: the same shape and dtype.

    Args:
        mode: "horizontal", "vertical" or "horizontal_and_vertical" (Keras's
            default).
        seed (int): seed of the draws (None: from Python's ``random``).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: unknown mode; on call, images not of rank 4.
    """

    def __init__(self, mode="horizontal_and_vertical", seed=None, **kwargs):
        if mode not in _MODES:
            raise ValueError(f"RandomFlip: mode must be one of {sorted(_MODES)}, got {mode!r}")
        super().__init__(seed=seed, **kwargs)
        self.mode = mode

    def _stages(self, images_shape):
        horizontal, vertical = _MODES[self.mode]
        return [("random_flip", {"horizontal": horizontal, "vertical": vertical},
                 [IMAGES, self._seed_generator.state])]
