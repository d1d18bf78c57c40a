"""Load the C core: make the OpenBLAS of the ``scipy-openblas32`` wheel
visible to the dynamic linker wherever pip installed it, then import ``_C``."""
import ctypes
import os

import scipy_openblas32

_lib = os.path.join(scipy_openblas32.get_lib_dir(), "lib" + scipy_openblas32.get_library() + ".so")
ctypes.CDLL(_lib, mode=ctypes.RTLD_GLOBAL)

from . import _C  # noqa: E402  (after the preload on purpose)

__all__ = ["_C"]
