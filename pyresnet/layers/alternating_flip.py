"""``AlternatingFlip`` (airbench's alternating flip; not a Keras layer)."""
import numpy as np

from .._loader import _C
from ..tensor import Tensor
from ._preprocessing import IMAGES, INDICES, PreprocessingLayer
from .random_flip import _MODES


class AlternatingFlip(PreprocessingLayer):
    """Flip each image in every other pass over the data, as airbench94 does
    (Jordan 2024, "94% on CIFAR-10 in 3.29 seconds on a single GPU", arXiv
    2404.00498, the data-augmentation section, "alternating flip"): in pass
    0 each image is flipped with probability 1/2; in pass ``e`` it is flipped
    iff that first draw XOR ``e`` is odd.  Any two consecutive passes thus
    show every image both ways, where a random flip repeats one orientation
    for a quarter of the images.

    In a :class:`pyresnet.data.Dataset` (``ds.batch(...).map(layer)``, run in
    C) the draw of an image is keyed on its index in the dataset and the
    pass number, whatever the shuffling and batching.  Called on a batch
    (``training=True``), image ``i`` of the batch stands for element ``i``
    and each call is one pass.  Identity with ``training=False``.  Runs the
    ``alternating_flip`` op.  Not differentiable.

    Input: (N, H, W, C) uint8 or float32; output: the same shape and dtype.

    Args:
        mode: "horizontal" (default, airbench's), "vertical" or
            "horizontal_and_vertical".
        seed (int): seed of the first pass's draws (None: from Python's
            ``random``).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: unknown mode.  RuntimeError: called on a batch inside
            ``pyresnet.compile`` (map it over a Dataset instead).
    """

    def __init__(self, mode="horizontal", seed=None, **kwargs):
        if mode not in _MODES:
            raise ValueError(f"AlternatingFlip: mode must be one of {sorted(_MODES)}, got "
                             f"{mode!r}")
        super().__init__(seed=seed, **kwargs)
        self.mode = mode
        self._calls = 0

    def _stages(self, images_shape):
        horizontal, vertical = _MODES[self.mode]
        return [("alternating_flip", {"horizontal": horizontal, "vertical": vertical},
                 [IMAGES, INDICES, self._seed_generator.state])]

    def call(self, inputs, training=True):
        if inputs.ndim == 3 or not training:
            return super().call(inputs, training)
        if _C.tracing():
            raise RuntimeError("AlternatingFlip: calling it on a batch inside pyresnet.compile "
                               "is not supported; map it over a pyresnet.data.Dataset")
        horizontal, vertical = _MODES[self.mode]
        seed = int(np.asarray(self._seed_generator.state)[0])
        state = Tensor(np.array([seed, self._calls << 32], np.int64))
        self._calls += 1
        indices = np.arange(inputs.shape[0], dtype=np.int64)
        return _C.call("alternating_flip", inputs, indices, state, horizontal=horizontal,
                       vertical=vertical)[0]

    def _dataset_call(self, components):
        raise NotImplementedError("AlternatingFlip needs the images' dataset indices: map it "
                                  "after batch(), with only pyresnet preprocessing layers "
                                  "before it, so that the C pipeline runs it")
