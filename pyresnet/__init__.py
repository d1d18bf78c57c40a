"""pyresnet: Keras-style residual networks whose numeric core is C.

Layers, autodiff, augmentation and a traced training-step executor live in
the C extension ``pyresnet._C`` (NumPy C API, OpenBLAS).  See README.md.
"""
from ._loader import _C
from .autodiff import GradientTape
from .tensor import Tensor, Variable, convert_to_tensor
from . import ops
from .compile import compile, Function, ConcreteFunction, TensorSpec, Plan, init_scope, name_scope
from .compile import print  # noqa: A004  (pyresnet.print, as tf.print)
from .loops import while_loop, fori_loop
from . import activations, initializers, profiling, regularizers, summary, utils
from . import layers, losses, metrics, optimizers, callbacks, random
from . import models, saving
from . import mixed_precision
from .models import Model, Sequential
from .layers import Input
from . import distribute
from . import applications
from . import data, datasets
from .config import show_config


def set_num_threads(n):
    """Set the number of threads (int, 1 <= n <= 1024) that kernels and
    OpenBLAS use, the one place that decides it.  Raises ValueError for n
    outside that range."""
    _C.set_num_threads(int(n))


def get_num_threads():
    """The number of threads kernels and OpenBLAS use (int): until
    :func:`set_num_threads` is called, ``OMP_NUM_THREADS`` when it is set,
    else the number of processors this process may run on."""
    return _C.get_num_threads()


__version__ = "0.1.0"
