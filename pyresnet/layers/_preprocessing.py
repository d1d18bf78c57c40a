"""Shared machinery of the preprocessing layers (RandomFlip, RandomCrop,
RandomResizedCrop, RandomLighting, CutOut, Normalization, MixUp).

A preprocessing layer describes its work as a list of *stages*: registered
augmentation ops (csrc/ops_augment.c) with their attributes and inputs, the
images standing at the place of :data:`IMAGES`.  The same list runs eagerly
(and under ``pyresnet.compile``, where the ops become graph nodes) in
``call``, and in C on the input pipeline's worker thread when the layer is
mapped over a :class:`pyresnet.data.Dataset`.
"""
from .. import ops
from .._loader import _C
from ..random import SeedGenerator
from .layer import Layer

IMAGES = object()
"""Placeholder for the images in a stage's input list."""

INDICES = object()
"""Placeholder for the images' dataset indices (int64 (N,)) in a stage's
input list: in the input pipeline, the rows' indices in the source arrays;
called on a batch, ``arange(N)`` (see :class:`~pyresnet.layers.AlternatingFlip`)."""


def run_stages(stages, images, indices=None):
    """Run (op, attrs, inputs) stages on ``images``; each stage's first
    output replaces the images; ``indices`` stands for :data:`INDICES`."""
    for op, attrs, inputs in stages:
        out = _C.call(op, *[images if v is IMAGES else indices if v is INDICES else v
                            for v in inputs], **attrs)
        images = out[0] if isinstance(out, tuple) else out
    return images


class PreprocessingLayer(Layer):
    """Base of the image preprocessing layers.

    ``call(images, training=True)`` runs the stages of :meth:`_stages` when
    ``training`` is true (Keras 3's default for these layers: called on its
    own a layer augments; ``fit`` passes ``training=True``, ``evaluate`` and
    ``predict`` ``training=False``), and :meth:`_inference` otherwise.
    Images are NHWC batches; a single (H, W, C) image is treated as a batch
    of one.

    Args:
        seed (int): seed of the layer's random draws (random layers only);
            None draws one from Python's ``random``.
        **kwargs: ``name``, ... of :class:`Layer`.
    """

    _random = True

    def __init__(self, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.seed = seed
        if self._random:
            self._seed_generator = SeedGenerator(seed)

    def _stages(self, images_shape):
        """[(op name, attrs dict, inputs)] for images of ``images_shape``."""
        raise NotImplementedError

    def _inference(self, images):
        """The output with ``training=False`` (identity by default)."""
        return images

    def call(self, inputs, training=True):
        if inputs.ndim == 3:  # one image (H, W, C), as Keras accepts
            out = self.call(ops.reshape(inputs, (1,) + ops.shape(inputs)), training)
            return ops.reshape(out, ops.shape(out)[1:])
        if not training:
            return self._inference(inputs)
        return run_stages(self._stages(tuple(inputs.shape)), inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    # ---- the input pipeline's hooks (pyresnet.data.Dataset) -------------------

    def _pipeline_stages(self, shapes):
        """Stages for ``_C.BatchIterator`` on elements whose components have
        ``shapes`` (batch first); returns (stages, shapes after them)."""
        self._maybe_build(shapes[0])
        stages = []
        for op, attrs, inputs in self._stages(shapes[0]):
            n_out = _C.op_info(op)["n_out"]
            stages.append((op, attrs, [0 if v is IMAGES else "indices" if v is INDICES else v
                                       for v in inputs],
                           [0] + [None] * (n_out - 1)))
        return stages, [tuple(self.compute_output_shape(shapes[0]))] + list(shapes[1:])

    def _dataset_call(self, components):
        """The layer as a Python map over an element's components."""
        return (self(components[0], training=True),) + tuple(components[1:])
