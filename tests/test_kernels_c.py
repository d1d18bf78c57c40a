"""The C core off x86-64: the kernels as plain C here and on aarch64, and
the whole package on arm64 Python, under qemu.

tests/c/kernels_driver.c runs the portable kernels of csrc/kernels/ (the
ones every CPU gets) on small awkward shapes and prints their inputs and
outputs; these tests build it, run it and check every output against NumPy
(the float64 references of test_ops_conv.py and the formulas of the kernel
headers): natively by GCC and by clang, then cross-compiled with Debian's
gcc-aarch64-linux-gnu (all of csrc/, -Werror, against the arm64 Python's
headers) and run under qemu-aarch64.  The cross-compiled objects then make
the extension for Debian's arm64 Python, which imports pyresnet and trains
ResNet-8 for an epoch under qemu.  The arm64 side needs
``PYRESNET_AARCH64_SYSROOT``: a folder with root/ (Debian's arm64 Python and
the libraries it loads, unpacked) and site/ (the aarch64 wheels of
pyresnet's dependencies), which .ci/run makes.  Marked ``build`` (slow:
they compile the C core again): ``pytest -m build`` runs them, as .ci/run
does once.
"""
import concurrent.futures
import math
import os
import pathlib
import re
import shutil
import subprocess

import ml_dtypes
import numpy as np
import pytest
import scipy_openblas32

from conftest import data_root
from philox_ref import Stream
from test_train_cli import check_success
from test_ops_conv import conv_bpf_ref, conv_bpi_ref, conv_ref, max_pool_grad_ref, pool_ref

pytestmark = pytest.mark.build

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNELS = sorted((ROOT / "csrc" / "kernels").glob("*.c"))
CORE = sorted((ROOT / "csrc").glob("*.c"))
DRIVER = ROOT / "tests" / "c" / "kernels_driver.c"
# setup.py's compile flags and macros, with every warning an error on our own files
CFLAGS = ["-O3", "-std=c11", "-ffp-contract=off", "-fopenmp", "-fno-math-errno",
          "-fno-trapping-math", "-Wall", "-Wno-unused-function", "-Werror", "-fPIC", "-DBLAS_SYMBOL_PREFIX=scipy_",
          "-DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION"]
CROSS_CC, QEMU = "aarch64-linux-gnu-gcc", "qemu-aarch64"


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


def run(cmd, timeout=600, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
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


SIMDE = pathlib.Path("/usr/include/simde/x86/avx512.h")


def test_direct_bf16_patches_under_simde(tmp_path):
    """avx512_direct_bf16's patches (conv_direct_bf16.c) on any x86-64 CPU:
    the kernel file with its target pragmas and attributes removed, its
    AVX-512 intrinsics emulated by SIMDe (tests/c/simde/immintrin.h), run by
    tests/c/conv_direct_bf16_simde.c against float64 (the filter gradient on
    patches, the forward pass of the same shapes on units; thread
    independence, Inf/NaN reach).  A CPU without
    AVX512_BF16 (CI's) never runs the real variant; this checks the
    patches' lanes, masks and offsets there."""
    assert SIMDE.is_file(), "SIMDe's headers not found: apt-get install libsimde-dev (.ci/run does)"
    kernels = ROOT / "csrc" / "kernels"
    for name in ("conv_direct_bf16.c", "conv_direct_tiles.h", "conv_direct_geom.h",
                 "conv_direct.h", "conv.h", "kernels.h", "bf16.h", "gemm_bf16.h", "cpu.h"):
        text = (kernels / name).read_text()
        text = re.sub(r'__attribute__\(\(target\("[a-z0-9,_]*"\)\)\)', "", text)
        text = re.sub(r"#pragma GCC (push_options|pop_options|target.*)\n", "\n", text)
        (tmp_path / name).write_text(text)
    exe = tmp_path / "simde"
    run(["gcc", "-O0", "-std=gnu11", "-fopenmp", "-DSIMDE_NO_NATIVE",  # -O1: 3 minutes
         f"-I{ROOT / 'tests' / 'c' / 'simde'}", f"-I{tmp_path}",
         str(ROOT / "tests" / "c" / "conv_direct_bf16_simde.c"), "-o", str(exe), "-lm"])
    out = run([str(exe)])
    assert out.strip().endswith("\n0 failures") and "FAIL" not in out, out
    assert out.count("ok ") == 14 * 8, out


@pytest.fixture(scope="module")
def aarch64(tmp_path_factory):
    """The arm64 sysroot and the C core cross-compiled against its Python:
    (sysroot, its Python, objects of csrc/kernels, of the rest of csrc, of
    the driver, the output folder)."""
    missing = [t for t in (CROSS_CC, QEMU) if not shutil.which(t)]
    assert not missing, (f"{' and '.join(missing)} not found: apt-get install "
                         f"gcc-aarch64-linux-gnu qemu-user (.ci/run does)")
    sysroot = pathlib.Path(os.environ.get("PYRESNET_AARCH64_SYSROOT", "/nonexistent"))
    pythons = [p for p in (sysroot / "root" / "usr" / "bin").glob("python3.*")
               if re.fullmatch(r"python3\.\d+", p.name)]
    assert pythons and (sysroot / "site" / "numpy").is_dir(), (
        "PYRESNET_AARCH64_SYSROOT must name an arm64 sysroot: root/ with Debian's arm64 "
        "Python and the libraries it needs, site/ with the aarch64 wheels of pyresnet's "
        "dependencies: .ci/aarch64-sysroot DIR makes one")
    out = tmp_path_factory.mktemp("aarch64")
    include = sysroot / "root" / "usr" / "include"
    includes = [ROOT / "csrc", ROOT / "csrc" / "kernels", include, include / pythons[-1].name,
                sysroot / "site" / "numpy" / "_core" / "include",
                sysroot / "site" / "scipy_openblas32" / "include"]
    objects = compile_all(CROSS_CC, [*KERNELS, *CORE, DRIVER], includes, out)
    n = len(KERNELS)
    return sysroot, pythons[-1], objects[:n], objects[n:-1], objects[-1], out


def qemu(sysroot, *args, env=(), **kw):
    """Run an aarch64 program under qemu with the sysroot's libraries."""
    sets = [a for k, v in env for a in ("-E", f"{k}={v}")]
    return run([QEMU, "-L", str(sysroot / "root"), *sets, *map(str, args)], **kw)


def test_kernels_on_aarch64_under_qemu(aarch64):
    sysroot, _, kernels, _, driver, out = aarch64
    blas = sysroot / "site" / "scipy_openblas32" / "lib"
    exe = link_driver(CROSS_CC, [*kernels, driver], blas, out / "driver")
    check_driver_output(parse(qemu(sysroot, exe)))


def test_package_on_aarch64_under_qemu(aarch64, tmp_path):
    """The whole package on arm64 Python under qemu: the extension linked from
    the cross-compiled objects, one epoch of ResNet-8 on a CIFAR-10 subset."""
    sysroot, python, kernels, core, _, _ = aarch64
    package = tmp_path / "pyresnet"
    shutil.copytree(ROOT / "pyresnet", package,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    ext = package / f"_C.cpython-{python.name[6:].replace('.', '')}-aarch64-linux-gnu.so"
    run([CROSS_CC, "-shared", "-fopenmp", *map(str, kernels + core),
         f"-L{sysroot / 'site' / 'scipy_openblas32' / 'lib'}", "-lscipy_openblas", "-lm",
         "-o", str(ext)])
    assert "AArch64" in run(["readelf", "-h", str(ext)])
    work = tmp_path / "work"
    work.mkdir()
    env = [("PYTHONPATH", f"{tmp_path}:{sysroot / 'site'}"), ("PYRESNET_DATA", data_root()),
           ("HOME", work)]
    code = ("import pyresnet as pr; c = pr.config.config(); "
            "print(c['features'], c['kernels']['float32'], pr.config.kernel_notice(), sep='\\n')")
    features, kernel, notice = qemu(sysroot, python, "-c", code, env=env, cwd=work).splitlines()
    # no fast kernels off x86-64, and the notice says what that costs
    assert (features, kernel) == ("[]", "im2col_blas")
    assert notice.startswith("convolution kernels: float32 im2col_blas, the portable reference "
                             "(this CPU runs none of "), notice
    out = qemu(sysroot, python, "-m", "pyresnet.train", "--model", "resnet8", "--subset", "64",
               "--test-subset", "32", "--batch-size", "32", "--epochs", "1", "--verbose", "0",
               env=env, cwd=work, timeout=1800)
    check_success(0, out.strip().splitlines(), "", 64, 32, notice=notice)
