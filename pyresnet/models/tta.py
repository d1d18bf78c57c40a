"""Test-time augmentation: a model wrapper whose output averages the wrapped
model's outputs over mirrored and translated views of each image."""
from .. import ops
from ..tensor import convert_to_tensor
from .model import Model


def _shift(x, t, axis, forward):
    """``x`` (NHWC) translated by ``t`` pixels along ``axis`` (1: H, 2: W)
    with reflect padding (no edge repeat): ``forward`` moves the content to
    higher indices (the ``[0:H]`` crop of the padded image), else to lower
    ones (the ``[2t:2t+H]`` crop)."""
    n = x.shape[axis]

    def sl(start, stop, step=1):
        key = [slice(None)] * 4
        key[axis] = slice(start, stop, step)
        return ops.getitem(x, tuple(key))
    if forward:  # rows t, t-1, ..., 1 then 0 .. n-t-1
        return ops.concatenate([sl(t, 0, -1), sl(0, n - t)], axis=axis)
    # rows t .. n-1 then n-2, ..., n-1-t
    return ops.concatenate([sl(t, n), sl(n - 2, n - 2 - t, -1)], axis=axis)


class TestTimeAugmentation(Model):
    """A model whose inference output is the weighted mean of ``model``'s
    outputs over augmented views of the input (airbench's ``tta_level``,
    Jordan 2024, arXiv 2404.00498, section 3, multi-crop evaluation; legacy/airbench94.py
    ``infer``): with ``f`` the wrapped model and ``m(v) = (f(v) +
    f(mirror(v))) / 2`` (just ``f(v)`` without ``flip``)::

        translate == 0:  m(x)
        translate == t:  m(x) / 2 + (m(shift(x, +t)) + m(shift(x, -t))) / 4

    where ``shift(x, +-t)`` translates both axes by ``t`` pixels (down-right,
    up-left) with reflect padding.  airbench94 uses ``flip=True,
    translate=1``: 6 views, weights 1/4, 1/4, 1/8 x 4.  The outputs
    averaged are the model's (logits, for a model without softmax, as
    airbench).  ``training=True`` calls the model once, unaugmented; the
    wrapper has no weights of its own (it shares the model's).

    Use it as any model: ``tta = TestTimeAugmentation(model);
    tta.compile(loss=..., metrics=["accuracy"]); tta.evaluate(x, y)`` or
    ``tta.predict(x)``; both run compiled, one graph for all views.  When
    ``model`` is compiled, the wrapper is compiled with its loss and
    metrics (no optimizer: it is not meant for ``fit``).

    Args:
        model: a Model (or any callable layer) taking NHWC images
            ``(batch, H, W, C)``.
        flip (bool): average with the horizontally mirrored views.
        translate (int): t >= 0 pixels (0: no translated views); t < H/2,
            W/2.
        name (str): default ``<model name>_tta``.
    Raises:
        ValueError: for a negative ``translate``; on call, for inputs that
            are not 4-D or too small for ``translate``.
    """

    def __init__(self, model, flip=True, translate=1, name=None):
        if isinstance(translate, bool) or not isinstance(translate, int) or translate < 0:
            raise ValueError(f"TestTimeAugmentation: `translate` must be an int >= 0, got "
                             f"{translate!r}")
        super().__init__(name=name or f"{getattr(model, 'name', 'model')}_tta")
        self.model, self.flip, self.translate = model, bool(flip), translate
        args = getattr(model, "_compile_args", None) if getattr(model, "compiled", False) \
            else None
        if args:
            self.compile(loss=args.get("loss"), metrics=args.get("metrics"))

    def _mirrored(self, x):
        y = self.model(x, training=False)
        if not self.flip:
            return y
        flipped = self.model(ops.getitem(x, (slice(None), slice(None), slice(None, None, -1))),
                             training=False)
        return ops.multiply(ops.add(y, flipped), 0.5)

    def call(self, inputs, training=None):
        if training:
            return self.model(inputs, training=True)
        x = convert_to_tensor(inputs)
        t = self.translate
        if x.ndim != 4:
            raise ValueError(f'Model "{self.name}": expects NHWC images (batch, H, W, C), got '
                             f"shape {tuple(x.shape)}")
        if t and not (x.shape[1] > 2 * t and x.shape[2] > 2 * t):
            raise ValueError(f'Model "{self.name}": translate={t} needs images larger than '
                             f"{2 * t}x{2 * t}, got shape {tuple(x.shape)}")
        out = self._mirrored(x)
        if not t:
            return out
        views = []
        for forward in (True, False):
            v = _shift(_shift(x, t, 1, forward), t, 2, forward)
            views.append(self._mirrored(v))
        return ops.add(ops.multiply(out, 0.5), ops.multiply(ops.add(views[0], views[1]), 0.25))

    def compute_output_shape(self, input_shape):
        return self.model.compute_output_shape(input_shape)
