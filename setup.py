"""Build the C core ``pyresnet._C`` against the NumPy C API and the OpenBLAS
that the ``scipy-openblas32`` wheel ships (symbols prefixed ``scipy_``).

Flags are portable (no ``-march=native``); CPU-specific kernels are compiled
per function with ``__attribute__((target(...)))`` and chosen at run time.
"""
import glob
import os

import numpy
import scipy_openblas32
from setuptools import Extension, setup

sources = sorted(glob.glob("csrc/*.c") + glob.glob("csrc/kernels/*.c"))

ext = Extension(
    "pyresnet._C",
    sources=sources,
    include_dirs=["csrc", numpy.get_include(), scipy_openblas32.get_include_dir()],
    library_dirs=[scipy_openblas32.get_lib_dir()],
    libraries=[scipy_openblas32.get_library()],
    # The wheel's lib folder sits beside ours in site-packages; pyresnet/__init__
    # also preloads it, so either mechanism finds it wherever pip put it.
    runtime_library_dirs=["$ORIGIN/../scipy_openblas32/lib"],
    define_macros=[("BLAS_SYMBOL_PREFIX", "scipy_"),
                   ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    extra_compile_args=["-O3", "-std=c11", "-fopenmp", "-fno-math-errno",
                        "-Wall", "-Wno-unused-function"],
    extra_link_args=["-fopenmp"],
)

setup(ext_modules=[ext])
