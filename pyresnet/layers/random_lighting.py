"""``RandomLighting``: AlexNet's PCA colour jitter."""
import numpy as np

from ..tensor import Tensor
from ._preprocessing import IMAGES, PreprocessingLayer

# ImageNet's RGB eigenvalues/eigenvectors on the [0, 1] scale, as
# fb.resnet.torch and pycls (the RegNet code) quote them.
IMAGENET_EIGVAL = (0.2175, 0.0188, 0.0045)
IMAGENET_EIGVEC = ((-0.5675, 0.7192, 0.4009),
                   (-0.5808, -0.0045, -0.8140),
                   (-0.5836, -0.6948, 0.4203))


class RandomLighting(PreprocessingLayer):
    """PCA colour ("lighting") jitter, Krizhevsky, Sutskever and Hinton 2012,
    section 4.1: to every RGB pixel of an image add
    ``eigvec @ (alpha * eigval)``, alpha ~ N(0, stddev^2) per image and
    component.  Identity with ``training=False``.  Runs the
    ``random_lighting`` op.

    Input: (N, H, W, 3) uint8 or float32; output: float32, same shape.

    Args:
        eigval: (3,) eigenvalues of the training set's RGB covariance on the
            [0, 1] scale (:func:`pyresnet.ops.rgb_pca`); default ImageNet's.
        eigvec: (3, 3), column j the eigenvector of eigval[j].
        stddev (float): of alpha; the paper's 0.1.
        value_range: (low, high) of the images (default (0, 255)); the
            shift is scaled by high - low.
        seed (int): seed of the draws (None: from Python's ``random``).
        **kwargs: ``name``, ... of :class:`Layer`.
    Raises:
        ValueError: eigval/eigvec shapes, stddev < 0, empty value_range.
    """

    def __init__(self, eigval=IMAGENET_EIGVAL, eigvec=IMAGENET_EIGVEC, stddev=0.1,
                 value_range=(0, 255), seed=None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        eigval, eigvec = np.asarray(eigval, np.float64), np.asarray(eigvec, np.float64)
        if eigval.shape != (3,) or eigvec.shape != (3, 3):
            raise ValueError(f"RandomLighting: eigval must have shape (3,) and eigvec (3, 3), got "
                             f"{eigval.shape} and {eigvec.shape}")
        if not stddev >= 0:
            raise ValueError(f"RandomLighting: stddev must be >= 0, got {stddev!r}")
        low, high = (float(v) for v in value_range)
        if not high > low:
            raise ValueError(f"RandomLighting: value_range must be (low, high) with high > low, "
                             f"got {value_range!r}")
        self.eigval, self.eigvec = eigval, eigvec
        self.stddev = float(stddev)
        self.value_range = (low, high)
        self._eigval = Tensor((eigval * (high - low)).astype(np.float32))
        self._eigvec = Tensor(eigvec.astype(np.float32))

    def _stages(self, images_shape):
        return [("random_lighting", {"stddev": self.stddev},
                 [IMAGES, self._eigval, self._eigvec, self._seed_generator.state])]

    def get_config(self):
        config = super().get_config()
        config.update(eigval=self.eigval.tolist(), eigvec=self.eigvec.tolist(),
                      value_range=list(self.value_range))
        return config
