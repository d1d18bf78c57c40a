"""``CutOut``."""
from ._preprocessing import IMAGES, PreprocessingLayer


class CutOut(PreprocessingLayer):
    """Cutout (DeVries and Taylor 2017, "Improved regularization of
    convolutional neural networks with cutout"): in each image set a
    ``size`` box centred at a uniformly random pixel, clipped at the borders,
    to ``fill_value``.  Identity with ``training=False``.  Runs the
    ``cutout`` op.

    Input: (N, H, W, C) uint8 or float32; output: the same shape and dtype.

    Args:
        size: box side (int) or (height, width); the paper uses 16 on CIFAR-10.
        fill_value (float): written into the box (the paper cuts normalised
            images, so 0 is the mean; an integer in [0, 255] for uint8).
        seed (int): seed of the draws (None: from Python's ``random``).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: a non-positive size.
    """

    def __init__(self, size=16, fill_value=0.0, seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        size = (size, size) if isinstance(size, int) else tuple(int(v) for v in size)
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"CutOut: size must be a positive int or (height, width), got "
                             f"{size!r}")
        self.size = size
        self.fill_value = float(fill_value)

    def _stages(self, images_shape):
        return [("cutout", {"size": self.size, "fill": self.fill_value},
                 [IMAGES, self._seed_generator.state])]
