"""Eager/traced functional ops: thin wrappers over the C op registry.

Every function accepts Tensors, NumPy arrays or Python numbers, returns
Tensors, is recorded by an active :class:`pyresnet.GradientTape`, and is
appended to the graph when called on symbolic tensors under
``pyresnet.compile``.  Shape and dtype errors raise ValueError/TypeError
naming the op and the shapes.  Images are NHWC float32; ``cast`` converts
to and from bfloat16, which matmul and the convolutions also take.

One module per op family, mirroring csrc/ops_<family>.c.
"""
from .._loader import _C
from .elementwise import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .state import *  # noqa: F401,F403
from .augment import *  # noqa: F401,F403
from .distribute import *  # noqa: F401,F403
from .array import *  # noqa: F401,F403

call = _C.call
