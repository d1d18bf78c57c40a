"""Load the C core: make the OpenBLAS of the ``scipy-openblas32`` wheel
visible to the dynamic linker wherever pip installed it, then import ``_C``."""
import ctypes
import os

import scipy_openblas32

# Idle OpenMP threads spin briefly, then sleep.  Waking a sleeping thread
# for each kernel cost a compiled ResNet-20 step (batch 128, 2 cores) 10%
# (144 ms with OMP_WAIT_POLICY=PASSIVE, 130 ms spinning 5000 times, about
# 0.2 ms, before sleeping); spinning for good (OMP_WAIT_POLICY=ACTIVE, or
# libgomp's default of 300000 spins) steals the cores from other work on a
# shared or busy machine (a loaded 2-core machine ran small steps 40x
# slower), and two such steps side by side ran 9% slower with the short
# spin than sleeping at once.  Read once by libgomp when _C loads it; either
# variable set in the environment is left alone (OMP_WAIT_POLICY=PASSIVE:
# sleep at once).
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "5000"

_lib = os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(fullname=True))
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
