"""Shared argument handling of the Keras 3 geometric augmentation layers
(``RandomTranslation``, ``RandomRotation``, ``RandomZoom``), which all run
the ``random_affine`` op (csrc/ops_augment.c)."""
from ..ops.augment import FILL_MODES
from ._preprocessing import IMAGES, PreprocessingLayer

_INTERPOLATIONS = {"nearest": 0, "bilinear": 1}
_KERAS_FILL_MODES = ("reflect", "wrap", "constant", "nearest")


def factor_range(layer, factor, name, low=-1.0, high=1.0, low_open=False):
    """Keras's reading of a factor: a number f gives (-|f|, |f|), a pair is
    sorted; each value must lie in [low, high] ((low, high] with
    ``low_open``).  Raises ValueError naming the layer and argument."""
    def check(v):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) \
            and (low < v if low_open else low <= v) and v <= high
        if not ok:
            bracket = "(" if low_open else "["
            raise ValueError(f"{layer}: {name} must be a number or a pair of numbers in "
                             f"{bracket}{low}, {high}], got {factor!r}")
        return float(v)

    if isinstance(factor, (tuple, list)):
        if len(factor) != 2:
            raise ValueError(f"{layer}: {name} must be a number or a pair of numbers, "
                             f"got {factor!r}")
        lo, hi = sorted(check(v) for v in factor)
        return lo, hi
    f = abs(check(factor))
    return -f, f


class AffineLayer(PreprocessingLayer):
    """Base of the layers that run ``random_affine``: checks ``fill_mode``
    and ``interpolation`` (Keras 3's values, NotImplementedError otherwise, as
    Keras) and builds the stage from :meth:`_ranges`.  Output float32."""

    def __init__(self, fill_mode, interpolation, fill_value, seed, data_format, **kwargs):
        layer = type(self).__name__
        if fill_mode not in _KERAS_FILL_MODES:
            raise NotImplementedError(f"{layer}: unknown fill_mode {fill_mode!r}; expected one "
                                      f"of {_KERAS_FILL_MODES}")
        if interpolation not in _INTERPOLATIONS:
            raise NotImplementedError(f"{layer}: unknown interpolation {interpolation!r}; "
                                      f"expected one of {tuple(_INTERPOLATIONS)}")
        if data_format not in (None, "channels_last"):
            raise ValueError(f"{layer}: only data_format='channels_last' (NHWC) is supported, "
                             f"got {data_format!r}")
        super().__init__(seed=seed, **kwargs)
        self.fill_mode, self.interpolation = fill_mode, interpolation
        self.fill_value = float(fill_value)
        self.data_format = "channels_last"

    def _ranges(self):
        """The ``random_affine`` range attributes of this layer."""
        raise NotImplementedError

    def _stages(self, images_shape):
        attrs = {"interpolation": _INTERPOLATIONS[self.interpolation],
                 "fill_mode": FILL_MODES[self.fill_mode], "fill_value": self.fill_value}
        attrs.update(self._ranges())
        return [("random_affine", attrs, [IMAGES, self._seed_generator.state])]
