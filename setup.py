"""Build the C core ``pyresnet._C`` against the NumPy C API and the OpenBLAS
that the ``scipy-openblas32`` wheel ships (symbols prefixed ``scipy_``).

Flags are portable (no ``-march=native``); CPU-specific kernels are compiled
per function with ``__attribute__((target(...)))`` on x86-64 only and chosen
at run time.  GCC and clang (``CC=clang``, with libomp) build it on Linux;
on macOS Apple clang takes OpenMP from Homebrew's libomp (``LIBOMP_PREFIX``
names another).  OpenBLAS stays in the scipy-openblas32 wheel:
pyresnet/_loader.py loads it before the extension, which also finds it
beside itself in site-packages through its RPATH (``$ORIGIN``,
``@loader_path``; ``auditwheel repair`` drops that entry from wheels).
"""
import glob
import os
import platform
import sys

import numpy
import scipy_openblas32
from setuptools import Extension, setup

sources = sorted(glob.glob("csrc/*.c") + glob.glob("csrc/kernels/*.c"))
headers = sorted(glob.glob("csrc/*.h") + glob.glob("csrc/kernels/*.h"))  # sdist, rebuilds
openblas_rpath = "../scipy_openblas32/lib"

if sys.platform == "darwin":
    libomp = os.environ.get("LIBOMP_PREFIX") or (
        "/opt/homebrew/opt/libomp" if platform.machine() == "arm64" else "/usr/local/opt/libomp")
    openmp_compile = ["-Xpreprocessor", "-fopenmp", f"-I{libomp}/include"]
    openmp_link = [f"-L{libomp}/lib", "-lomp"]
    # distutils passes no rpath on macOS: ask the linker directly
    rpath, rpath_link = [], [f"-Wl,-rpath,@loader_path/{openblas_rpath}"]
else:
    openmp_compile, openmp_link = ["-fopenmp"], ["-fopenmp"]
    rpath, rpath_link = [f"$ORIGIN/{openblas_rpath}"], []

ext = Extension(
    "pyresnet._C",
    sources=sources,
    depends=headers,
    include_dirs=["csrc", numpy.get_include(), scipy_openblas32.get_include_dir()],
    library_dirs=[scipy_openblas32.get_lib_dir()],
    libraries=[scipy_openblas32.get_library()],
    runtime_library_dirs=rpath,
    define_macros=[("BLAS_SYMBOL_PREFIX", "scipy_"),
                   ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    # -ffp-contract=off: no fused multiply-adds the C does not ask for, so the
    # x86-64 clones of a loop give the same bits (GCC's default under -std=c11,
    # not clang's); -fno-trapping-math: nothing reads the floating-point
    # exception flags, so branches on floats may become selects and the
    # loops with clamps (GELU's erf) vectorize
    extra_compile_args=["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno",
                        "-fno-trapping-math", "-Wall",
                        "-Wno-unused-function", *openmp_compile],
    extra_link_args=[*openmp_link, *rpath_link],
)

setup(ext_modules=[ext])
