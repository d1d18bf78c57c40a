"""Kernel variants seen from Python: the CPU probe and show_config, which
variant a node runs (nodes, profile), the reference path
forced by PYRESNET_KERNELS=reference, and results that do not depend on the
thread count.  Values of every variant against NumPy are in test_op_table.py.
"""
import io
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import ops
from pyresnet._loader import _C


def rng_array(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def first_float32_conv():
    """The conv2d variant a float32 call runs first on this CPU (the direct
    kernels take every shape of these tests)."""
    if _C.cpu_info()["reference_only"]:
        return "im2col_blas"
    return next(v for v, ok in _C.op_variants("conv2d") if ok and not v.endswith("_bf16"))


def test_config_lists_the_conv_variants_reference_last():
    c = pr.config.config()
    assert c["threads"] == pr.get_num_threads()
    has = set(c["features"])
    for op in ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"):
        names = [n for n, _ in c["variants"][op]]
        # avx512_grouped_dp_bf16 has no filter-gradient tiles: not a variant of that op
        dp = [] if op == "conv2d_backprop_filter" else ["avx512_grouped_dp_bf16"]
        assert names == ["avx512_direct", "avx2_direct", "avx2_pointwise", "avx512_grouped", *dp,
                         "avx512_grouped_bf16", "avx2_grouped", "avx2_grouped_bf16",
                         "amx_direct_bf16", "amx_bf16", "avx512_direct_bf16", "avx512_bf16",
                         "im2col_blas"]
        assert c["variants"][op][-1][1] is True   # the reference runs anywhere
        assert c["variants"][op][0][1] == ({"avx512f", "fma"} <= has)
        assert c["variants"][op][1][1] == ({"avx2", "fma"} <= has)
        assert c["variants"][op][2][1] == ({"avx2", "fma"} <= has)
        if dp:  # AVX512_BF16 (AVX-512 F, BW, VL) and FMA, as avx512_direct_bf16
            bf16_cpu = {"avx512f", "avx512bw", "avx512vl", "avx512_bf16", "fma"} <= has
            assert dict(c["variants"][op])["avx512_grouped_dp_bf16"] == bf16_cpu
    out = io.StringIO()
    pr.show_config(file=out)
    text = out.getvalue()
    assert text.startswith("CPU:") and "conv2d: avx512_direct" in text and "im2col_blas" in text
    assert "avx2_direct" in text


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_config_names_the_convolution_kernel_a_call_runs(dtype):
    """config()["kernels"] is what a compiled 3x3 convolution of that dtype runs."""
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    x, k = np.ones((2, 9, 9, 16), dt), pr.Variable(np.ones((3, 3, 16, 16), dt))
    f = pr.compile(lambda x: ops.conv2d(x, k, padding="same"))
    ran = [n["kernel"] for n in f.get_concrete_function(x).nodes if n["op"] == "conv2d"]
    assert ran == [pr.config.config()["kernels"][dtype]]


def test_cpu_vendor_is_cpuids():
    """cpu_info()["vendor"] is cpuid's vendor string (mixed_precision's warning
    for Intel cores without AMX reads it), as Linux reports it."""
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if platform.machine() != "x86_64" or not cpuinfo.exists():
        pytest.skip("the vendor comes from cpuid: x86-64 Linux only")
    want = next(line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                if line.startswith("vendor_id"))
    assert _C.cpu_info()["vendor"] == want


def test_kernel_notice_names_the_kernels_and_what_the_portable_ones_cost():
    c = pr.config.config()
    notice = pr.config.kernel_notice()
    assert notice == pr.config.kernel_notice(c)
    assert notice.startswith(f"convolution kernels: float32 {c['kernels']['float32']}")
    assert f"; bfloat16 {c['kernels']['bfloat16']}" in notice
    # the grouped variants take only grouped calls: never named as this CPU's kernels
    conv = [("avx512_direct", True), ("avx2_grouped", True), ("avx2_grouped_bf16", True),
            ("amx_direct_bf16", False), ("amx_bf16", False), ("avx512_bf16", False),
            ("im2col_blas", True)]
    fast = dict(c, reference_only=False, variants={"conv2d": conv},
                kernels={"float32": "avx512_direct", "bfloat16": "im2col_blas"})
    assert pr.config.kernel_notice(fast) == (
        "convolution kernels: float32 avx512_direct; bfloat16 im2col_blas, the portable "
        "reference (this CPU runs none of amx_direct_bf16, amx_bf16, avx512_bf16): float32 "
        "convolutions of the rounded operands, no faster than float32")
    portable = dict(fast, kernels={"float32": "im2col_blas", "bfloat16": "amx_direct_bf16"})
    assert pr.config.kernel_notice(portable) == (
        "convolution kernels: float32 im2col_blas, the portable reference (this CPU runs none "
        "of avx512_direct): ResNet-20's convolutions take about 1.5x as long as with "
        "avx512_direct; bfloat16 amx_direct_bf16")
    forced = dict(fast, reference_only=True,
                  kernels={"float32": "im2col_blas", "bfloat16": "im2col_blas"})
    assert pr.config.kernel_notice(forced).count("(PYRESNET_KERNELS=reference)") == 2
    out = io.StringIO()
    pr.show_config(file=out)
    assert notice in out.getvalue().splitlines()


def test_nodes_profile_and_summary_name_the_kernel():
    k = pr.Variable(rng_array(3, 3, 4, 8))
    f = pr.compile(lambda x: ops.sum(ops.relu(ops.conv2d(x, k, padding="same"))))
    x = rng_array(2, 9, 9, 4)
    cf = f.get_concrete_function(x)
    want = first_float32_conv()
    conv = [n for n in cf.nodes if n["op"] == "conv2d"]
    assert [n["kernel"] for n in conv] == [want]
    assert {n["kernel"] for n in cf.nodes if n["op"] != "conv2d"} == {None}
    profile = cf.profile(x, repeats=2)
    events = profile.trace["traceEvents"]
    assert [e["args"]["kernel"] for e in events if e["name"] == "conv2d"] == [want, want]
    rows = profile.by_op.to_dicts()
    assert {(r["op"], r["kernel"]) for r in rows} == {(n["op"], n["kernel"]) for n in cf.nodes}
    assert [r["kernel"] for r in profile.by_node] == [n["kernel"] for n in cf.nodes]
    assert f"conv2d  {want}" in str(profile.by_op)


def test_eager_runs_the_first_usable_variant():
    x, k = rng_array(2, 8, 8, 16), rng_array(3, 3, 16, 16, seed=1)
    got = ops.conv2d(x, k, padding="same").numpy()
    want = _C.run_variant("conv2d", first_float32_conv(), x, k, same=True).numpy()
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="has no kernel variant 'nope'"):
        _C.run_variant("conv2d", "nope", x, k)


def test_reference_path_forced_by_the_environment():
    code = ("import json, numpy as np, pyresnet as pr\n"
            "from pyresnet._loader import _C\n"
            "x = np.ones((1, 6, 6, 16), np.float32); k = np.ones((3, 3, 16, 16), np.float32)\n"
            "f = pr.compile(lambda x: pr.ops.conv2d(x, k, padding='same'))\n"
            "print(json.dumps([_C.cpu_info()['reference_only'],"
            " [n['kernel'] for n in f.get_concrete_function(x).nodes]]))\n")
    env = dict(os.environ, PYRESNET_KERNELS="reference")
    # from another folder: the checkout's unbuilt sources must not shadow the install
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, cwd=tempfile.gettempdir())
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1]) == [True, ["im2col_blas"]]


_AVX2_SCRIPT = """
import io, json, numpy as np, pyresnet as pr
from pyresnet._loader import _C
x = np.ones((2, 8, 8, 16), np.float32); k = np.ones((3, 3, 16, 16), np.float32)
f = pr.compile(lambda a: pr.ops.conv2d(a, k, padding="same"))
kernel = [n["kernel"] for n in f.get_concrete_function(x).nodes if n["op"] == "conv2d"][0]
# a 1x1 convolution at stride 1: its three passes, kernel names and largest errors
rng = np.random.default_rng(0)
x1, k1 = rng.standard_normal((3, 5, 4, 19)).astype(np.float32), rng.standard_normal((1, 1, 19, 29)).astype(np.float32)
dy1 = rng.standard_normal((3, 5, 4, 29)).astype(np.float32)
xm, km, dym = (a.astype(np.float64).reshape(-1, a.shape[-1]) for a in (x1, k1, dy1))
def pointwise(x, k, dy):
    with pr.GradientTape() as tape:
        tape.watch(x), tape.watch(k)
        y = pr.ops.conv2d(x, k, padding="valid")
    dx, dk = tape.gradient(y, [x, k], output_gradients=dy)
    return y, dx, dk
g = pr.compile(pointwise)
x1t, k1t, dy1t = pr.Tensor(x1), pr.Tensor(k1), pr.Tensor(dy1)
names = sorted({n["op"] + ":" + n["kernel"] for n in g.get_concrete_function(x1t, k1t, dy1t).nodes
                if n["op"].startswith("conv2d")})
y1, dx1, dk1 = (np.asarray(t, np.float64).reshape(-1, t.shape[-1]) for t in g(x1t, k1t, dy1t))
errors = [float(abs(y1 - xm @ km.reshape(19, 29)).max()), float(abs(dx1 - dym @ km.reshape(19, 29).T).max()),
          float(abs(dk1 - xm.T @ dym).max())]
out = io.StringIO()
pr.show_config(file=out)
print(json.dumps({"info": _C.cpu_info(), "kernel": kernel, "show": out.getvalue(),
                  "variants": dict(_C.op_variants("conv2d")), "pointwise": names,
                  "pointwise_errors": errors}))
"""


def test_avx2_setting_runs_what_a_cpu_without_avx512_runs(tmp_path):
    """PYRESNET_KERNELS=avx2 clears the AVX-512 and AMX features at import,
    as on a CPU with AVX2 and FMA only (AMD Zen 2/3, Intel client cores), so
    an AVX-512 machine tests the AVX2 paths as they run there: cpu_info and
    show_config say so, and a float32 convolution runs avx2_direct where the
    CPU has AVX2 and FMA (a 1x1 one at stride 1 avx2_pointwise, its three
    passes equal to NumPy's), else the reference (in a subprocess, whatever
    this process's setting)."""
    env = {**os.environ, "PYRESNET_KERNELS": "avx2"}
    # from another folder: the checkout's unbuilt sources must not shadow the install
    run = subprocess.run([sys.executable, "-c", _AVX2_SCRIPT], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    info, here = got["info"], _C.cpu_info()
    assert info["kernels"] == "avx2" and not info["reference_only"]
    assert info["features"] == [f for f in here["features"] if not f.startswith(("avx512", "amx"))]
    if "amx_bf16" in here["features"] or here["amx"].startswith("off"):
        assert info["amx"] == "off: PYRESNET_KERNELS=avx2"
    assert "kernels:  PYRESNET_KERNELS=avx2 (AVX-512 and AMX off)" in got["show"]
    fast = {"avx2", "fma"} <= set(info["features"])
    assert not got["variants"]["avx512_direct"] and got["variants"]["avx2_direct"] == fast
    assert got["kernel"] == ("avx2_direct" if fast else "im2col_blas")
    pointwise = "avx2_pointwise" if fast else "im2col_blas"
    assert got["pointwise"] == [f"{op}:{pointwise}" for op in
                                ("conv2d", "conv2d_backprop_filter", "conv2d_backprop_input")]
    assert max(got["pointwise_errors"]) < 1e-4, got["pointwise_errors"]


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"])
def test_conv_variants_do_not_depend_on_the_thread_count(op):
    # 13 images: amx_direct_bf16's filter gradient takes them in groups of 6; 3 channels:
    # avx512_direct_bf16's patches (the stem's window)
    before = pr.get_num_threads()
    feats = set(_C.cpu_info()["features"])
    for c, strides, kk in ((16, 2, 3), (16, 1, 3), (3, 1, 3), (24, 1, 1)):
        x, k = rng_array(13, 12, 10, c), rng_array(kk, kk, c, 32, seed=1)
        dy = rng_array(13, *((6, 5) if strides == 2 else (12, 10)), 32, seed=2)
        args = {"conv2d": (x, k, {}), "conv2d_backprop_input": (dy, k, {"shape": x.shape}),
                "conv2d_backprop_filter": (x, dy, {"shape": k.shape})}[op]
        for variant, ok in _C.op_variants(op):
            if not ok or (_C.cpu_info()["reference_only"] and variant != "im2col_blas"):
                continue
            if "_grouped" in variant:  # one group here: test_grouped_variants_...
                continue
            # avx2_pointwise: 1x1 windows at stride 1 only, on CPUs without AVX-512
            if (variant == "avx2_pointwise") != (kk == 1) and variant != "im2col_blas":
                continue
            if variant == "avx2_pointwise" and "avx512f" in feats:
                continue
            results = []
            a, b = args[0], args[1]
            if variant.endswith("_bf16"):  # the bfloat16 kernels take bfloat16 operands
                a, b = a.astype(ml_dtypes.bfloat16), b
            for threads in (1, 2, 3):
                pr.set_num_threads(threads)
                try:
                    results.append(_C.run_variant(op, variant, a, b, strides=strides, same=True,
                                                  **args[2]).numpy())
                finally:
                    pr.set_num_threads(before)
            for r in results[1:]:
                np.testing.assert_array_equal(r, results[0], err_msg=f"{variant} c{c} s{strides}")


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backprop_input"])
def test_conv_variants_on_small_images_do_not_depend_on_the_batch(op):
    """airbench94's last convolutions (3 x 3 images, many channels): the
    direct kernels take such images in groups (up to 16 at a time); each
    image's result is the same, bit for bit, alone, in a group, in the
    partial last group and on any thread count (the reference, OpenBLAS's
    sgemm over the batch's pixels, on any thread count)."""
    x, k = rng_array(19, 3, 3, 40), rng_array(3, 3, 40, 24, seed=1)
    dy = rng_array(19, 3, 3, 24, seed=2)
    before = pr.get_num_threads()
    for variant, ok in _C.op_variants(op):
        if not ok or variant.endswith("_bf16") or "_grouped" in variant or (  # (groups > 1)
                _C.cpu_info()["reference_only"] and variant != "im2col_blas"):
            continue
        if variant == "avx2_pointwise":  # 1x1 windows only (the thread-count test above)
            continue

        def run(lo, hi):
            a = x[lo:hi] if op == "conv2d" else dy[lo:hi]
            extra = {} if op == "conv2d" else {"shape": (hi - lo, 3, 3, 40)}
            return _C.run_variant(op, variant, a, k, same=True, **extra).numpy()

        whole = []
        for threads in (1, 2, 3):
            pr.set_num_threads(threads)
            try:
                whole.append(run(0, 19))
            finally:
                pr.set_num_threads(before)
        for r in whole[1:]:
            np.testing.assert_array_equal(r, whole[0], err_msg=variant)
        for lo, hi in ((0, 1), (16, 19), (5, 18)) if variant.endswith("_direct") else ():
            np.testing.assert_array_equal(run(lo, hi), whole[0][lo:hi], err_msg=variant)


@pytest.mark.parametrize("op", ["conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"])
@pytest.mark.parametrize("groups,cg", [(3, 8), (8, 2), (24, 1)])
@pytest.mark.parametrize("variant", ["avx512_grouped", "avx512_grouped_dp_bf16",
                                     "avx512_grouped_bf16", "avx2_grouped", "avx2_grouped_bf16"])
def test_grouped_variants_do_not_depend_on_the_thread_count(op, groups, cg, variant):
    """The grouped variants split the work into fixed stripes of images (and
    the filter gradient sums them in stripe order): same bits for 1, 2, 3
    threads; their _bf16 twins (bfloat16 operands, widened) as well, and
    all agree with the reference.  The AVX-512 ones refuse odd group widths
    (depthwise here); avx512_grouped_dp_bf16 (VDPBF16PS) group widths that
    are not a multiple of 4 (2 here) and is no variant of the filter
    gradient; without AVX512_BF16 it says it cannot run."""
    c = groups * cg
    x, k = rng_array(13, 9, 7, c), rng_array(3, 3, cg, c, seed=1)
    dy = rng_array(13, 5, 4, c, seed=2)
    args = {"conv2d": (x, k, {}), "conv2d_backprop_input": (dy, k, {"shape": x.shape}),
            "conv2d_backprop_filter": (x, dy, {"shape": k.shape})}[op]
    a, b = args[0], args[1]
    if variant.endswith("_bf16"):
        a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    if variant == "avx512_grouped_dp_bf16" and op == "conv2d_backprop_filter":
        assert variant not in dict(_C.op_variants(op))
        with pytest.raises(ValueError, match="variant"):
            _C.run_variant(op, variant, a, b, strides=2, same=True, groups=groups, **args[2])
        return
    ok = dict(_C.op_variants(op))[variant] and not (variant.startswith("avx512") and cg % 2)
    ok = ok and not (variant == "avx512_grouped_dp_bf16" and cg % 4)
    if not ok or _C.cpu_info()["reference_only"]:  # then it must refuse
        with pytest.raises(ValueError, match="cannot run"):
            _C.run_variant(op, variant, a, b, strides=2, same=True, groups=groups, **args[2])
        return
    before, results = pr.get_num_threads(), []
    for threads in (1, 2, 3):
        pr.set_num_threads(threads)
        try:
            results.append(_C.run_variant(op, variant, a, b, strides=2, same=True,
                                          groups=groups, **args[2]).numpy())
        finally:
            pr.set_num_threads(before)
    ref = _C.run_variant(op, "im2col_blas", a, b, strides=2, same=True, groups=groups,
                         **args[2]).numpy()
    assert results[0].dtype == ref.dtype
    tol = 2 ** -7 if ref.dtype == ml_dtypes.bfloat16 else 1e-4  # a bfloat16 result rounded once
    np.testing.assert_allclose(results[0].astype(np.float64), ref.astype(np.float64),
                               rtol=tol, atol=tol)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
