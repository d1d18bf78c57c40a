"""``MixUp``."""
from .. import ops
from ._preprocessing import PreprocessingLayer


class MixUp(PreprocessingLayer):
    """Mixup (Zhang, Cisse, Dauphin and Lopez-Paz 2018, "mixup: beyond
    empirical risk minimization"): mix a batch with a random permutation of
    itself, ``x = lam x + (1 - lam) x[perm]`` and the labels alike, lam ~
    Beta(alpha, alpha) once per batch (the paper) or per sample.  Train
    with a loss on soft labels (``CategoricalCrossentropy``).  Runs the
    ``mixup`` op.

    Called on ``(images, labels)``: images (N, ...) uint8/float32; labels
    (N,) or (N, 1) integer class indices (needs ``num_classes``) or (N, K)
    float32 soft labels.  Returns ``(images float32, soft labels (N, K)
    float32)``; with ``training=False`` the inputs unchanged.

    Args:
        alpha (float): > 0; 0.2 is common for ImageNet, 1.0 for CIFAR.
        num_classes (int): K for integer labels.
        per_sample (bool): one lam per example.
        seed (int): seed of the draws (None: from Python's ``random``).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: alpha <= 0; on call, label shapes or values out of range.
    """

    _batch_level = True

    def __init__(self, alpha=0.2, num_classes=None, per_sample=False, seed=None, **kwargs):
        if not alpha > 0:
            raise ValueError(f"MixUp: alpha must be > 0, got {alpha!r}")
        super().__init__(seed=seed, **kwargs)
        self.alpha = float(alpha)
        self.num_classes = None if num_classes is None else int(num_classes)
        self.per_sample = bool(per_sample)

    def _attrs(self):
        return {"alpha": self.alpha, "num_classes": self.num_classes or 0,
                "per_sample": self.per_sample}

    def call(self, inputs, training=True):
        images, labels = self._split(inputs)
        if not training:
            return images, labels
        return ops.mixup(images, labels, self._seed_generator.state, **self._attrs())

    def compute_output_shape(self, input_shape):
        images, labels = self._split(input_shape)
        k = self.num_classes if self.num_classes else labels[-1]
        return tuple(images), (labels[0], k)

    @staticmethod
    def _split(inputs):
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            raise ValueError("MixUp: call it on a pair (images, labels)")
        return inputs

    def _pipeline_stages(self, shapes):
        if len(shapes) < 2:
            raise ValueError("MixUp: the dataset's elements must be (images, labels)")
        stage = ("mixup", self._attrs(), [0, 1, self._seed_generator.state], [0, 1, None, None])
        return [stage], list(self.compute_output_shape(shapes[:2])) + list(shapes[2:])

    def _dataset_call(self, components):
        return tuple(self(tuple(components[:2]), training=True)) + tuple(components[2:])
