"""``ZeroPadding2D``."""
from .. import ops
from .input_spec import InputSpec
from .layer import Layer


class ZeroPadding2D(Layer):
    """Zero rows and columns around NHWC images, as ``keras.layers.ZeroPadding2D``.

    Args:
        padding: int (all four sides), ``(ph, pw)`` (symmetric) or
            ``((top, bottom), (left, right))``.
        data_format: only None/``"channels_last"``.
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: negative or malformed padding; another data format.
    """

    def __init__(self, padding=(1, 1), data_format=None, **kwargs):
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise ValueError(f"ZeroPadding2D: only channels_last is supported, got {data_format!r}")
        if isinstance(padding, int):
            pads = ((padding, padding), (padding, padding))
        else:
            pads = tuple(p if isinstance(p, (tuple, list)) else (p, p) for p in padding)
        if len(pads) != 2 or any(len(p) != 2 or min(p) < 0 for p in pads):
            raise ValueError(f"ZeroPadding2D: padding must be an int, (ph, pw) or "
                             f"((top, bottom), (left, right)) of non-negative ints, got {padding!r}")
        self.padding = tuple(tuple(int(v) for v in p) for p in pads)
        self.data_format = data_format
        self.input_spec = InputSpec(ndim=4)

    def call(self, inputs):
        return ops.pad(inputs, ((0, 0),) + self.padding + ((0, 0),))

    def compute_output_shape(self, input_shape):
        n, h, w, c = input_shape
        (t, b), (l, r) = self.padding
        return (n, None if h is None else h + t + b, None if w is None else w + l + r, c)
