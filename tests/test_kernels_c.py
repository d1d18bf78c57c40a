"""The kernels as plain C, on this machine and on aarch64 under qemu.

tests/c/kernels_driver.c runs the portable kernels of csrc/kernels/ (the
ones every CPU gets) on small awkward shapes and prints their inputs and
outputs; these tests build it, run it and check every output against NumPy
(the float64 references of test_ops_conv.py and the formulas of the kernel
headers).  Built natively by GCC and by clang, then cross-built with Debian's
gcc-aarch64-linux-gnu with -Werror over all of csrc/ and run under
qemu-aarch64 against the aarch64 OpenBLAS of the scipy-openblas32 wheel
(``PYRESNET_AARCH64_OPENBLAS``: its unpacked ``scipy_openblas32`` folder;
.ci/run downloads it).  Marked ``build`` (slow: they compile the C core
again): ``pytest -m build`` runs them, as .ci/run does once.
"""
import concurrent.futures
import math
import os
import pathlib
import shutil
import subprocess
import sysconfig

import ml_dtypes
import numpy as np
import pytest
import scipy_openblas32

from philox_ref import Stream
from test_ops_conv import conv_bpf_ref, conv_bpi_ref, conv_ref, max_pool_grad_ref, pool_ref

pytestmark = pytest.mark.build

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNELS = sorted((ROOT / "csrc" / "kernels").glob("*.c"))
CORE = sorted((ROOT / "csrc").glob("*.c"))
DRIVER = ROOT / "tests" / "c" / "kernels_driver.c"
# setup.py's compile flags and macros, with every warning an error on our own files
CFLAGS = ["-O3", "-std=c11", "-ffp-contract=off", "-fopenmp", "-fno-math-errno", "-Wall",
          "-Wno-unused-function", "-Werror", "-fPIC", "-DBLAS_SYMBOL_PREFIX=scipy_",
          "-DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION"]
CROSS_CC, QEMU = "aarch64-linux-gnu-gcc", "qemu-aarch64"
CROSS_SYSROOT = "/usr/aarch64-linux-gnu"  # Debian's libc6-arm64-cross


def compile_all(cc, sources, includes, out_dir):
    """Compile each source to an object in out_dir (in parallel); return the objects."""
    def one(src):
        obj = out_dir / (src.parent.name + "_" + src.stem + ".o")
        p = subprocess.run([cc, *CFLAGS, *(f"-I{i}" for i in includes), "-c", str(src),
                            "-o", str(obj)], capture_output=True, text=True)
        assert p.returncode == 0, f"{cc} {src.name}:\n{p.stderr}"
        return obj
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        return list(pool.map(one, sources))


def link_driver(cc, objects, blas_lib, out):
    """The driver executable over the kernel objects and OpenBLAS (found by RPATH)."""
    p = subprocess.run([cc, "-fopenmp", *map(str, objects), f"-L{blas_lib}", "-lscipy_openblas",
                        f"-Wl,-rpath,{blas_lib}", "-lm", "-o", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out


def parse(text):
    """The driver's lines "name shape values..." as {name: float64 array}."""
    arrays = {}
    for line in text.splitlines():
        name, shape, *values = line.split()
        dims = () if shape == "-" else tuple(int(d) for d in shape.split(","))
        arrays[name] = np.array(values, dtype=np.float32).astype(np.float64).reshape(dims)
    return arrays


def close(got, want, rtol=1e-5):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max()))


def check_driver_output(a):
    """Every output of the driver against its NumPy reference."""
    for tag in ("conv_s2_same", "conv_s1_valid"):
        x, k, dy = a[f"{tag}.x"], a[f"{tag}.k"], a[f"{tag}.dy"]
        s, same = int(a[f"{tag}.stride"]), bool(a[f"{tag}.same"])
        close(a[f"{tag}.y"], conv_ref(x, k, s, same))
        close(a[f"{tag}.dx"], conv_bpi_ref(dy, k, x.shape, s, same))
        close(a[f"{tag}.dk"], conv_bpf_ref(x, dy, k.shape, s, same))
    x, dy = a["pool.x"], a["pool.dy"]
    close(a["pool.max"], pool_ref(x, 3, 2, True, "max"), rtol=0)
    close(a["pool.max_dx"], max_pool_grad_ref(x, dy, 3, 2, True))
    close(a["pool.avg"], pool_ref(x, 3, 2, True, "avg"))

    # batch norm: the formulas of csrc/kernels/norm.h
    x, dy, gamma, beta, eps = a["bn.x"], a["bn.dy"], a["bn.gamma"], a["bn.beta"], a["bn.eps"]
    mean, var = x.mean(0), x.var(0)
    invstd = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * invstd
    close(a["bn.mean"], mean)
    close(a["bn.var"], var)
    close(a["bn.y"], gamma * xhat + beta)
    dbeta, dgamma = dy.sum(0), (dy * xhat).sum(0)
    close(a["bn.dbeta"], dbeta)
    close(a["bn.dgamma"], dgamma)
    close(a["bn.dx"], gamma * invstd * (dy - dbeta / len(x) - xhat * dgamma / len(x)))

    logits, labels, g = a["ce.logits"], a["ce.labels"].astype(int), a["ce.g"]
    shifted = logits - logits.max(1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    rows = np.arange(len(labels))
    close(a["ce.loss"], -log_p[rows, labels])
    close(a["ce.dlogits"], g[:, None] * (np.exp(log_p) - np.eye(logits.shape[1])[labels]))

    # Keras's SGD with Nesterov momentum and decoupled weight decay (optim.h), float32
    f = np.float32
    var, grad, vel = (a[f"sgd.{n}"].astype(f) for n in ("var", "grad", "velocity"))
    lr, momentum, wd = f(0.1), f(0.9), f(0.01)
    var = var - var * wd * lr
    vel = vel * momentum - grad * lr
    close(a["sgd.velocity_out"], vel, rtol=1e-6)
    close(a["sgd.var_out"], var + (vel * momentum - grad * lr), rtol=1e-6)
    # Keras's Adam, step 3 (optim.h)
    var, m, v = (a[f"adam.{n}"] for n in ("var", "m", "v"))
    lr, b1, b2, step = 0.01, 0.9, 0.999, 3
    alpha = lr * math.sqrt(1 - b2**step) / (1 - b1**step)
    m, v = m + (grad - m) * (1 - b1), v + (grad * grad - v) * (1 - b2)
    close(a["adam.m_out"], m, rtol=1e-6)
    close(a["adam.v_out"], v, rtol=1e-6)
    close(a["adam.var_out"], var - m * alpha / (np.sqrt(v) + 1e-7), rtol=1e-6)

    # Philox streams (tests/philox_ref.py) and bfloat16 rounding: exact
    s = Stream(7, 3, 0)
    want = np.float32([-2.0 + 5.0 * s.uniform() for _ in range(9)])
    np.testing.assert_array_equal(a["rng.uniform"], want)
    s = Stream(7, 3, 0)
    close(a["rng.normal"], np.float32([0.5 + 2.0 * s.normal() for _ in range(9)]), rtol=1e-6)
    bf16 = a["bf16.x"].astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(a["bf16.rounded"], bf16)
    close(a["sgemm.c"], a["sgemm.a"] @ a["sgemm.b"].T)


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, f"{cmd[0]} exited {p.returncode}:\n{p.stderr}"
    return p.stdout


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_driver_here(cc, tmp_path):
    """Natively, with GCC and with clang (-Werror both), and the installed OpenBLAS."""
    assert shutil.which(cc), f"{cc} not found: apt-get install gcc clang libomp-dev (.ci/run does)"
    objects = compile_all(cc, [*KERNELS, DRIVER],
                          [ROOT / "csrc" / "kernels", scipy_openblas32.get_include_dir()],
                          tmp_path)
    exe = link_driver(cc, objects, scipy_openblas32.get_lib_dir(), tmp_path / "driver")
    check_driver_output(parse(run([str(exe)])))


@pytest.fixture(scope="module")
def aarch64(tmp_path_factory):
    """(objects of csrc/kernels, objects of the rest of csrc, the driver's
    object, the aarch64 OpenBLAS folder), compiled with the cross compiler."""
    missing = [t for t in (CROSS_CC, QEMU) if not shutil.which(t)]
    assert not missing, (f"{' and '.join(missing)} not found: apt-get install "
                         f"gcc-aarch64-linux-gnu qemu-user (.ci/run does)")
    blas = os.environ.get("PYRESNET_AARCH64_OPENBLAS")
    assert blas and pathlib.Path(blas, "lib", "libscipy_openblas.so").exists(), (
        "PYRESNET_AARCH64_OPENBLAS must name the scipy_openblas32 folder of the aarch64 wheel "
        "(pip download --no-deps --only-binary=:all: --platform manylinux2014_aarch64 "
        "scipy-openblas32, unzipped; .ci/run does)")
    blas = pathlib.Path(blas)
    out = tmp_path_factory.mktemp("aarch64")
    # The boundary files compile against this interpreter's Python and NumPy
    # headers: their layouts are those of any LP64 little-endian Linux.
    includes = [ROOT / "csrc", ROOT / "csrc" / "kernels", blas / "include",
                sysconfig.get_paths()["include"], np.get_include()]
    objects = compile_all(CROSS_CC, [*KERNELS, *CORE, DRIVER], includes, out)
    n = len(KERNELS)
    return objects[:n], objects[n:-1], objects[-1], blas, out


def test_kernels_on_aarch64_under_qemu(aarch64):
    kernels, _, driver, blas, out = aarch64
    exe = link_driver(CROSS_CC, [*kernels, driver], blas / "lib", out / "driver")
    # The wheel's libgfortran lists libz.so.1 but imports none of its symbols
    # (objdump -T), and the cross sysroot has no zlib: an empty one stands in.
    stub = out / "stub"
    stub.mkdir()
    run([CROSS_CC, "-shared", "-x", "c", os.devnull, "-o", str(stub / "libz.so.1")])
    check_driver_output(parse(run([QEMU, "-L", CROSS_SYSROOT, "-E", f"LD_LIBRARY_PATH={stub}",
                                   str(exe)])))


def test_c_core_links_for_aarch64(aarch64):
    """The whole extension links as an aarch64 shared object exporting its init."""
    kernels, core, _, blas, out = aarch64
    so = out / "_C.so"
    run([CROSS_CC, "-shared", "-fopenmp", *map(str, kernels + core), f"-L{blas / 'lib'}",
         "-lscipy_openblas", "-lm", "-o", str(so)])
    header = run(["readelf", "-h", str(so)])
    assert "AArch64" in header, header
    assert " PyInit__C" in run(["readelf", "--dyn-syms", "-W", str(so)])
