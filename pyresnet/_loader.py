"""Load the C core: make the OpenBLAS of the ``scipy-openblas32`` wheel
visible to the dynamic linker wherever pip installed it, then import ``_C``."""
import ctypes
import os

import scipy_openblas32

# Idle OpenMP threads sleep instead of spinning: on a shared or busy machine
# spinning threads steal the cores the kernels need (a loaded 2-core machine
# ran small steps 40x slower).  Read once by libgomp when _C loads it; set
# OMP_WAIT_POLICY=ACTIVE in the environment to choose spinning.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_lib = os.path.join(scipy_openblas32.get_lib_dir(), "lib" + scipy_openblas32.get_library() + ".so")
ctypes.CDLL(_lib, mode=ctypes.RTLD_GLOBAL)

try:
    from . import _C  # noqa: E402  (after the preload on purpose)
except ImportError as e:  # e.g. `import pyresnet` from an unbuilt source checkout
    raise ImportError(
        f"pyresnet's C extension pyresnet._C could not be loaded from {__file__!r} ({e}). "
        "Install the package with `pip install .` and import it from outside the source "
        "folder (Python puts the current folder, holding the unbuilt sources, first on sys.path)."
    ) from e

__all__ = ["_C"]
