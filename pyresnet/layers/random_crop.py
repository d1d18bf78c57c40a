"""``RandomCrop`` (with the padding of the CIFAR recipe)."""
from .. import ops
from ..ops.augment import PADDING_MODES
from ._args import standardize_data_format
from ._preprocessing import IMAGES, PreprocessingLayer


def _pair(value, name):
    values = (value, value) if isinstance(value, int) else tuple(value)
    if len(values) != 2 or not all(isinstance(v, int) and v >= 0 for v in values):
        raise ValueError(f"RandomCrop: {name} must be a non-negative int or a pair of them, "
                         f"got {value!r}")
    return values


class RandomCrop(PreprocessingLayer):
    """Crop a random ``height`` x ``width`` window of each image, as
    ``keras.layers.RandomCrop``, after padding it by ``padding`` pixels on
    every side (zeros or mirrored), as torchvision's RandomCrop does -- the
    standard CIFAR augmentation is ``RandomCrop(32, 32, padding=4)`` (He et
    al. 2015, section 4.2).  Offsets are uniform over every window of the
    padded image.  Runs the ``random_crop`` op.

    With ``training=False`` the output is the central window of the unpadded
    image (identity when the sizes agree).  Keras instead resizes inputs
    smaller than the target; here that raises.

    Input: (N, H, W, C) uint8 or float32; output: (N, height, width, C) of the
    same dtype.

    Args:
        height, width (int): crop size.
        seed (int): seed of the draws (None: from Python's ``random``).
        padding: int or (pad_y, pad_x), >= 0.
        padding_mode: how the padding is filled, NumPy's and torchvision's
            names: "zero" (or "constant"), "reflect" (mirror without repeating
            the edge, PyTorch's ``F.pad(mode="reflect")``), "symmetric" (with
            the edge repeated), "edge" or "wrap".
        data_format: only None/"channels_last".
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: bad sizes or padding mode; on call, a crop larger than
            the padded image.
    """

    def __init__(self, height, width, seed=None, padding=0, padding_mode="zero",
                 data_format=None, **kwargs):
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"RandomCrop: padding_mode must be one of {sorted(PADDING_MODES)}, "
                             f"got {padding_mode!r}")
        super().__init__(seed=seed, **kwargs)
        self.height, self.width = (int(v) for v in _pair((height, width), "height/width"))
        if self.height < 1 or self.width < 1:
            raise ValueError(f"RandomCrop: height and width must be positive, got "
                             f"({height}, {width})")
        self.padding = _pair(padding, "padding")
        self.padding_mode = padding_mode
        self.data_format = standardize_data_format(data_format, "RandomCrop")

    def _stages(self, images_shape):
        return [("random_crop", {"size": (self.height, self.width), "padding": self.padding,
                                 "mode": PADDING_MODES[self.padding_mode]},
                 [IMAGES, self._seed_generator.state])]

    def _inference(self, images):
        if tuple(images.shape[1:3]) == (self.height, self.width):
            return images
        return ops.center_crop(images, (self.height, self.width))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.height, self.width, input_shape[3])
