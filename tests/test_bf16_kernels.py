"""The bfloat16 kernels of matmul and the convolutions: direct AMX
convolutions (``amx_direct_bf16``), AMX
tiles on gathered rows (``amx_bf16``), AVX512_BF16 (``avx512_bf16``) and
the portable reference (the float32 kernels on bfloat16-rounded operands).

Every kernel is compared with a float64 reference computed on the same
bfloat16-rounded operands.  The bound is elementwise: a product of two
bfloat16 numbers (8-bit significands) is exact in float32 (24 bits), so
the only error is the float32 summation of the K products of each output,
at most gamma_K * sum_i |a_i| |b_i| with gamma_K = K u / (1 - K u),
u = 2^-24 (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd
ed., section 3.1; K is the reduction length: KH*KW*C for the forward pass,
KH*KW*O for the input gradient, N*HO*WO for the filter gradient).  The
float32 operand of a mixed call is rounded to bfloat16 by the kernel
(relative error up to 2^-8): the reference rounds it the same way, and a
second check against the unrounded float64 result allows that rounding
(2 * 2^-8 + 2^-16 relative per product) besides gamma_K.  Two kernels
agree within the sum of their bounds.

On this CPU (Sapphire Rapids class) all three kernels run; a kernel whose
CPU features are missing, or every fast kernel under
PYRESNET_KERNELS=reference, must refuse with ValueError instead, and
``test_which_bf16_kernels_ran`` prints which ones ran.
"""
import ml_dtypes
import numpy as np
import pytest

from pyresnet import _C
from test_ops_conv import conv_bpf_ref, conv_bpi_ref, conv_ref

bf16 = ml_dtypes.bfloat16
f32 = np.float32
U = 2.0 ** -24
CPU = _C.cpu_info()
BF16_VARIANTS = ("amx_direct_bf16", "amx_bf16", "avx512_direct_bf16", "avx512_bf16")
CONV_ONLY = {"amx_direct_bf16", "avx512_direct_bf16"}  # variants that matmul does not have
# conv variants that take float32 only
F32_ONLY = ("avx512_direct", "avx2_direct", "avx2_pointwise", "avx512_grouped", "avx2_grouped")
# one group here: the _grouped_bf16 variants take only groups > 1 (tested in test_variants,
# test_op_table, and avx512_grouped_dp_bf16 below)
SKIP = F32_ONLY + ("avx512_grouped_dp_bf16", "avx512_grouped_bf16", "avx2_grouped_bf16")


def gamma(k):
    return k * U / (1 - k * U)


def r64(a):
    """float64 of ``a`` rounded to bfloat16 (exact for bfloat16 input)."""
    return np.asarray(a).astype(bf16).astype(np.float64)


def expected_to_run(variant, op=None, attrs=None, kernel_shape=None):
    """Whether ``variant`` should run here: CPU features, reference-only,
    and (given the call) the geometries it takes: avx512_direct_bf16's rule
    (kernels/conv_direct_bf16.c: windows up to 7x7, strides up to 4, the
    forward's horizontal stride 1 or 2)."""
    if variant not in BF16_VARIANTS:
        return True
    runs = dict(_C.op_variants("conv2d"))[variant] and not CPU["reference_only"]
    if runs and variant == "avx512_direct_bf16" and kernel_shape is not None:
        kh, kw = kernel_shape[:2]
        sh, sw = attrs["strides"]
        runs = kh <= 7 and kw <= 7 and sh <= 4 and sw <= 4 and (op != "conv2d" or sw <= 2)
    return runs


# (label, x shape, kernel shape, strides, same): ResNet-20's convolutions at
# a small batch, the shortcut, odd sizes, and shapes around the kernels'
# blocks (32 rows, K padded to 32, N to 16 and pairs of 16 columns)
SHAPES = [
    ("resnet20 stage1 3x3 c16", (2, 32, 32, 16), (3, 3, 16, 16), 1, True),
    ("resnet20 stem c3", (2, 32, 32, 3), (3, 3, 3, 16), 1, True),
    ("resnet20 stage2 s2 c16->32", (2, 32, 32, 16), (3, 3, 16, 32), 2, True),
    ("resnet20 stage3 3x3 c64", (2, 8, 8, 64), (3, 3, 64, 64), 1, True),
    ("shortcut 1x1 s2", (2, 16, 16, 32), (1, 1, 32, 64), 2, True),
    ("odd 5x5 s(1,2) valid c17 o33", (3, 11, 13, 17), (5, 5, 17, 33), (1, 2), False),
    ("stride 3 c5 o15", (1, 10, 9, 5), (3, 2, 5, 15), 3, True),
    ("31 output rows c1 o17", (1, 1, 31, 1), (1, 1, 1, 17), 1, False),
    # amx_direct_bf16's blocks: 16 output pixels along the padded width (stride
    # 1) or an output row, up to 4 blocks of 16 output channels per pass,
    # padded channels 16 (two taps per tile row) or multiples of 32, groups
    # of images (about 1024 positions) in the filter gradient
    ("c48 o80 3x3 batch 1", (1, 7, 5, 48), (3, 3, 48, 80), 1, True),
    ("c96 o16 2x4 s2 valid", (2, 9, 12, 96), (2, 4, 96, 16), 2, False),
    ("c16 o64 8x8 groups of 10 images", (23, 8, 8, 16), (3, 3, 16, 64), 1, True),
    ("c8 o3 4x1 s(2,1)", (3, 10, 7, 8), (4, 1, 8, 3), (2, 1), True),
    # avx512_direct_bf16's patches (an odd C, at most 32 values a window): the stem's window
    # at stride 2 over an odd pixel count, 25 values of one channel into 33 outputs (3
    # blocks), 30 values (two weight-gradient tiles) at strides (1, 2)
    ("stem c3 s2 odd", (3, 9, 11, 3), (3, 3, 3, 16), 2, True),
    ("c1 5x5 o33", (2, 12, 13, 1), (5, 5, 1, 33), 1, True),
    ("c5 2x3 o16 s(1,2)", (2, 7, 9, 5), (2, 3, 5, 16), (1, 2), True),
    # avx512_direct_bf16's groups of small images (conv_direct_geom.h, tile_image_group):
    # 3x3 images in groups of 8, 8 and 1, their bfloat16 outputs gathered in float32;
    # 3x3 outputs at stride 2 (forward only: the input gradient goes image by image)
    ("c40 o24 3x3 groups", (17, 3, 3, 40), (3, 3, 40, 24), 1, True),
    ("c20 o36 s2 3x3 outputs", (11, 6, 5, 20), (3, 3, 20, 36), 2, True),
]


def _case(label, rng):
    label, xs, ks, strides, same = next(s for s in SHAPES if s[0] == label)
    x = rng.standard_normal(xs).astype(f32)
    k = rng.standard_normal(ks).astype(f32)
    st = (strides, strides) if np.isscalar(strides) else tuple(strides)
    y = conv_ref(np.zeros(xs[:3] + (1,)), np.zeros(ks[:2] + (1, 1)), st, same)
    dy = rng.standard_normal(y.shape[:3] + (ks[3],)).astype(f32)
    return x, k, dy, st, same


def _ops(x, k, dy, st, same):
    """(op, inputs, attrs, reference on float64 operands, reduction length)."""
    attrs = {"strides": list(st), "same": same}
    kh, kw, c, o = k.shape
    n, ho, wo = dy.shape[:3]
    return [
        ("conv2d", (x, k.astype(bf16)), attrs,
         lambda a, b: conv_ref(a, b, st, same), kh * kw * c),
        ("conv2d_backprop_input", (dy, k.astype(bf16)), {**attrs, "shape": list(x.shape)},
         lambda a, b: conv_bpi_ref(a, b, x.shape, st, same), kh * kw * o),
        ("conv2d_backprop_filter", (x.astype(bf16), dy), {**attrs, "shape": list(k.shape)},
         lambda a, b: conv_bpf_ref(a, b, k.shape, st, same), n * ho * wo),
    ]


def _check(op, inputs, attrs, ref, K, kernel_shape=None):
    """Each kernel within its bound of the float64 result on the rounded
    operands; kernels within the sum of their bounds of each other; the
    unrounded result within the bound that adds the operands' rounding."""
    a, b = (r64(t) for t in inputs)
    want = ref(a, b)
    scale = ref(np.abs(a), np.abs(b))
    bound = gamma(K) * scale
    exact = ref(*(np.asarray(t, np.float64) for t in inputs))
    outs = {}
    runs = [v for v in BF16_VARIANTS if expected_to_run(v, op, attrs, kernel_shape)
            and not (op == "matmul" and v in CONV_ONLY)]
    for variant, _ in _C.op_variants(op):
        if variant not in BF16_VARIANTS + (_C.op_variants(op)[-1][0],):
            continue  # the float32 kernels refuse bfloat16 operands
        if not expected_to_run(variant, op, attrs, kernel_shape):
            with pytest.raises(ValueError, match=f"kernel variant '{variant}' cannot run"):
                _C.run_variant(op, variant, *inputs, **attrs)
            continue
        got = _C.run_variant(op, variant, *inputs, **attrs).numpy()
        assert got.dtype == f32 and got.shape == want.shape
        err = np.abs(got - want)
        worst = np.unravel_index(np.argmax(err - bound), err.shape)
        assert np.all(err <= bound), (f"{op} {variant}: error {err[worst]:.3g} > bound "
                                      f"{bound[worst]:.3g} at {worst}")
        assert np.all(np.abs(got - exact) <= (2 * 2 ** -8 + 2 ** -16) * scale * 1.001 + bound)
        outs[variant] = got
    names = list(outs)  # every kernel that should run did
    assert names == runs + [_C.op_variants(op)[-1][0]], names
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            assert np.all(np.abs(outs[names[i]] - outs[names[j]]) <= 2 * bound), \
                (op, names[i], names[j])


@pytest.mark.parametrize("label", [s[0] for s in SHAPES])
def test_conv_bf16_kernels_against_float64(label, rng):
    x, k, dy, st, same = _case(label, rng)
    for op, inputs, attrs, ref, K in _ops(x, k, dy, st, same):
        _check(op, inputs, attrs, ref, K, k.shape)


@pytest.mark.parametrize("m,k,n,ta,tb", [(31, 33, 15, False, False), (64, 64, 64, False, True),
                                         (65, 17, 10, True, False), (128, 96, 33, True, True),
                                         (1, 1, 1, False, False)])
def test_matmul_bf16_kernels_against_float64(m, k, n, ta, tb, rng):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(f32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(bf16)
    op_a = (lambda t: t.T) if ta else (lambda t: t)
    op_b = (lambda t: t.T) if tb else (lambda t: t)
    _check("matmul", (a, b), {"transpose_a": ta, "transpose_b": tb},
           lambda x, y: op_a(x) @ op_b(y), k)


@pytest.mark.parametrize("c", [16, 3])
@pytest.mark.parametrize("strides", [1, 2])
def test_bf16_kernels_are_exact_on_exact_sums(strides, c, rng):
    """Small integers: every product and partial sum is exact in float32, so
    every kernel gives the exact result bit for bit: float32 with a float32
    operand, rounded once to bfloat16 (to nearest even) with two bfloat16
    operands, from the forward and the input-gradient pass alike (at stride
    2 the input gradient's phases write every other pixel of a row; 3
    channels: avx512_direct_bf16's patches)."""
    top = 5 if c == 16 else 9  # sums past 256 either way
    x = rng.integers(-top + 1, top, (2, 9, 9, c)).astype(bf16)
    k = rng.integers(-top + 1, top, (3, 3, c, 32)).astype(bf16)
    st = (strides, strides)
    want = conv_ref(x.astype(np.float64), k.astype(np.float64), st, True)
    assert np.abs(want).max() > 256  # above 256 bfloat16 drops integers: rounding is tested
    dy = want.astype(bf16)
    want_dx = conv_bpi_ref(dy.astype(np.float64), k.astype(np.float64), x.shape, st, True)
    for variant, _ in _C.op_variants("conv2d"):
        if variant not in SKIP and expected_to_run(variant):
            got = _C.run_variant("conv2d", variant, x, k.astype(f32), same=True,
                                 strides=strides).numpy()
            np.testing.assert_array_equal(got, want.astype(f32), err_msg=variant)
            got = _C.run_variant("conv2d", variant, x, k, same=True, strides=strides).numpy()
            assert got.dtype == bf16
            np.testing.assert_array_equal(got, want.astype(bf16), err_msg=variant)
    for variant, _ in _C.op_variants("conv2d_backprop_input"):
        if variant not in SKIP and expected_to_run(variant):
            got = _C.run_variant("conv2d_backprop_input", variant, dy, k, same=True,
                                 strides=strides, shape=x.shape).numpy()
            assert got.dtype == bf16
            np.testing.assert_array_equal(got, want_dx.astype(bf16), err_msg=variant)


def test_float32_kernels_refuse_bfloat16_operands_and_bf16_kernels_refuse_float32(rng):
    x = rng.standard_normal((1, 6, 6, 16)).astype(f32)
    k = rng.standard_normal((3, 3, 16, 16)).astype(f32)
    for v in F32_ONLY:
        with pytest.raises(ValueError, match=f"kernel variant '{v}' cannot run"):
            _C.run_variant("conv2d", v, x, k.astype(bf16))
    for v in BF16_VARIANTS:
        with pytest.raises(ValueError, match=f"kernel variant '{v}' cannot run"):
            _C.run_variant("conv2d", v, x, k)


def test_which_bf16_kernels_ran(capsys):
    """The suite says which bfloat16 kernels this CPU ran; on a CPU with AMX
    (this project's Sapphire Rapids machine) all three run unless
    PYRESNET_KERNELS=reference, and show_config lists them."""
    names = [v for v, _ in _C.op_variants("conv2d")]
    assert names == ["avx512_direct", "avx2_direct", "avx2_pointwise", "avx512_grouped",
                     "avx512_grouped_dp_bf16",
                     "avx512_grouped_bf16", "avx2_grouped", "avx2_grouped_bf16",
                     "amx_direct_bf16", "amx_bf16", "avx512_direct_bf16", "avx512_bf16",
                     "im2col_blas"]
    assert [v for v, _ in _C.op_variants("matmul")] == ["amx_bf16", "avx512_bf16", "sgemm"]
    ran = [v for v in BF16_VARIANTS if expected_to_run(v)] + ["reference"]
    with capsys.disabled():
        print(f"\nbfloat16 kernels run on this CPU: {', '.join(ran)} (AMX: {CPU['amx']})")
    if "amx_bf16" in CPU["features"] and "avx512_bf16" in CPU["features"]:
        assert CPU["amx"] == "tile state granted"
        assert ran == (["reference"] if CPU["reference_only"] else
                       ["amx_direct_bf16", "amx_bf16", "avx512_direct_bf16", "avx512_bf16",
                        "reference"])


_NO_AMX_SCRIPT = """
import json, numpy as np, ml_dtypes, pyresnet as pr
pr.mixed_precision.set_global_policy("mixed_bfloat16")
c = pr.config.config()
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 8, 8, 16)).astype(np.float32)
f = pr.compile(lambda a: pr.layers.Conv2D(16, 3, padding="same", use_bias=False)(a))
kernel = [n["kernel"] for n in f.get_concrete_function(x).nodes if n["op"] == "conv2d"][0]
print(json.dumps({"amx": c["amx"], "features": c["features"], "kernel": kernel}))
"""


def test_no_amx_runs_what_a_cpu_without_amx_runs(tmp_path):
    """PYRESNET_KERNELS=no_amx clears the AMX features at import, as on a
    CPU with AVX512_BF16 but no AMX (AMD Zen 4/5): show_config says so and
    a bfloat16 3x3 convolution runs avx512_direct_bf16 where the CPU has
    AVX512_BF16, else the
    reference (tested here in a subprocess, whatever this process's
    setting)."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    env = {**os.environ, "PYRESNET_KERNELS": "no_amx"}
    # run outside the checkout: there `import pyresnet` would find the sources
    run = subprocess.run([sys.executable, "-c", _NO_AMX_SCRIPT], env=env, cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert not {"amx_tile", "amx_bf16"} & set(got["features"])
    if "amx_bf16" in CPU["features"] or CPU["amx"].startswith("off"):
        assert got["amx"] == "off: PYRESNET_KERNELS=no_amx"
    want = "avx512_direct_bf16" if "avx512_bf16" in got["features"] else "im2col_blas"
    assert got["kernel"] == want, got


@pytest.mark.parametrize("variant", ["amx_direct_bf16", "avx512_direct_bf16"])
@pytest.mark.parametrize("strides", [1, 2])
def test_direct_bf16_nan_reaches_exactly_the_windows_that_hold_it(variant, strides, rng):
    """The direct bfloat16 kernels' forward and input gradient read every
    tap from a padded image and never multiply a pixel outside a window by
    a zero weight, so a NaN or an infinity in the input reaches exactly the
    outputs whose windows hold it (amx_direct_bf16's virtual columns are
    dropped; avx512_direct_bf16's input gradient skips the zero taps of
    each phase)."""
    x = rng.standard_normal((2, 9, 11, 16)).astype(f32)
    k = rng.standard_normal((3, 3, 16, 16)).astype(bf16)
    if not expected_to_run(variant):  # no such CPU, or PYRESNET_KERNELS=reference
        with pytest.raises(ValueError, match=f"kernel variant '{variant}' cannot run"):
            _C.run_variant("conv2d", variant, x, k, strides=strides, same=True)
        return
    x[1, 4, 6, 3], x[0, 0, 10, 7] = np.nan, np.inf
    got = _C.run_variant("conv2d", variant, x, k, strides=strides, same=True).numpy()
    bad = conv_ref(np.where(np.isfinite(x), 0.0, 1.0), np.ones((3, 3, 16, 1)), (strides,) * 2,
                   True)[..., 0] > 0
    assert np.array_equal(~np.isfinite(got).all(axis=-1), bad)
    dy = rng.standard_normal(got.shape).astype(f32)
    dy[0, 2, 3, 5] = np.nan
    dx = _C.run_variant("conv2d_backprop_input", variant, dy, k, strides=strides,
                        same=True, shape=list(x.shape)).numpy()
    holds = (~np.isfinite(dy).all(axis=-1, keepdims=True)).astype(np.float64)
    reach = conv_bpi_ref(holds, np.ones((3, 3, 1, 1)), (2, 9, 11, 1), (strides,) * 2,
                         True)[..., 0] > 0
    assert np.array_equal(~np.isfinite(dx).all(axis=-1), reach)


@pytest.mark.parametrize("strides", [1, 2])
def test_direct_bf16_filter_gradient_takes_no_product_past_the_last_pixel(strides, rng):
    """avx512_direct_bf16's filter gradient sums pairs of output pixels; an
    odd output width's last pair has no second pixel, and the x value it
    would read (an infinity in the image's last column, which tap 0 of that
    missing pixel would meet) must not reach dw: the taps that read the
    infinity from a real pixel are non-finite, the others finite, as in the
    float64 reference."""
    x = rng.standard_normal((2, 7, 9, 16)).astype(f32)
    dy = rng.standard_normal((2, 7 if strides == 1 else 4, 9 if strides == 1 else 5, 16))
    if not expected_to_run("avx512_direct_bf16"):
        with pytest.raises(ValueError, match="kernel variant 'avx512_direct_bf16' cannot run"):
            _C.run_variant("conv2d_backprop_filter", "avx512_direct_bf16", x.astype(bf16),
                           dy.astype(f32), strides=strides, same=True, shape=[3, 3, 16, 16])
        return
    x[1, 3, 8, 5] = np.inf  # the last column: odd output widths 9 and 5
    dw = _C.run_variant("conv2d_backprop_filter", "avx512_direct_bf16", x.astype(bf16),
                        dy.astype(bf16), strides=strides, same=True,
                        shape=[3, 3, 16, 16]).numpy()
    want = conv_bpf_ref(r64(x), r64(dy), (3, 3, 16, 16), (strides,) * 2, True)
    assert not np.isfinite(want).all() and np.isfinite(want).any()
    assert np.array_equal(np.isfinite(dw), np.isfinite(want))


@pytest.mark.parametrize("c,window,strides", [(3, 3, 1), (3, 3, 2), (1, 5, 1), (5, 2, 2)])
def test_direct_bf16_patches_nan_reaches_exactly_the_windows_that_hold_it(c, window, strides,
                                                                          rng):
    """avx512_direct_bf16's patches (an odd channel count, at most 32 values
    a window: the 3-channel stem) pad each window's values, not each pixel,
    with a zero, and pair the filter gradient's pixels across the rows of an
    image: an infinity or a NaN of x reaches exactly the outputs whose
    windows hold it, and exactly the weight-gradient taps that the float64
    reference makes non-finite (one in the last pixel, whose pair has no
    second pixel at an odd pixel count)."""
    variant = "avx512_direct_bf16"
    x = rng.standard_normal((2, 9, 11, c)).astype(f32)
    k = rng.standard_normal((window, window, c, 16)).astype(bf16)
    if not expected_to_run(variant):  # no such CPU, or PYRESNET_KERNELS=reference
        with pytest.raises(ValueError, match=f"kernel variant '{variant}' cannot run"):
            _C.run_variant("conv2d", variant, x, k, strides=strides, same=True)
        return
    x[1, 4, 6, c - 1], x[0, 0, 3, 0], x[1, 8, 10, c // 2] = np.nan, np.inf, -np.inf
    for xin in (x, x.astype(bf16)):
        got = _C.run_variant("conv2d", variant, xin, k, strides=strides, same=True).numpy()
        bad = conv_ref(np.where(np.isfinite(x), 0.0, 1.0), np.ones((window, window, c, 1)),
                       (strides,) * 2, True)[..., 0] > 0
        assert np.array_equal(~np.isfinite(got.astype(f32)).all(axis=-1), bad)
    dy = rng.standard_normal(got.shape).astype(f32)
    dw = _C.run_variant("conv2d_backprop_filter", variant, x.astype(bf16), dy.astype(bf16),
                        strides=strides, same=True, shape=list(k.shape)).numpy()
    want = conv_bpf_ref(r64(x), r64(dy), k.shape, (strides,) * 2, True)
    # one input channel: the three bad values share it, so every tap of the
    # 5x5 window meets one (all 25 non-finite); else some taps stay finite
    assert not np.isfinite(want).all() and (c == 1 or np.isfinite(want).any())
    assert np.array_equal(np.isfinite(dw), np.isfinite(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(dw[fin], want[fin], rtol=1e-4, atol=2e-3)


# ---- avx512_grouped_dp_bf16: grouped convolutions on VDPBF16PS -------------------------------

DP = "avx512_grouped_dp_bf16"


def _dp_runs():
    """Whether avx512_grouped_dp_bf16 runs here (AVX512_BF16, not reference-only)."""
    return dict(_C.op_variants("conv2d"))[DP] and not CPU["reference_only"]


def _grouped(fn, a, b, groups):
    """fn on each group's channel slices of a and b, joined on the channel axis."""
    ca, cb = a.shape[3] // groups, b.shape[3] // groups
    return np.concatenate([fn(a[..., i * ca:(i + 1) * ca], b[..., i * cb:(i + 1) * cb])
                           for i in range(groups)], 3)


# (label, x shape, group width in, out, groups, strides): the tile kinds (cg 8 with the 9
# taps of a 3x3 window and the 4, 2, 1 of its stride-2 input gradient's phases; cg 16 in
# steps of 8; cg 4 and 12 in steps of 4), one and two blocks of 8 output channels a tile
# with partial last blocks (og 4, 12, 20, 28), tiles of 24 (one block) and 11 (two) rows
# and their remainders (25, 23, 12 pixels), chunks of 120 pixels +- 1 across images
DP_SHAPES = [
    ("RegNet gw 8, 3 groups", (2, 6, 7, 24), (8, 8), 3, 1),
    ("gw 8 s2 (phases of 4, 2, 2, 1 taps)", (3, 9, 7, 16), (8, 8), 2, 2),
    ("gw 16 -> 16 (two steps of 8)", (2, 5, 5, 32), (16, 16), 2, 1),
    ("gw 12 -> 12 (steps of 4, partial block)", (1, 5, 5, 24), (12, 12), 2, 2),
    ("gw 4 -> 20 (two blocks, the last partial)", (2, 4, 6, 8), (4, 20), 2, 1),
    ("gw 20 -> 28 s2", (1, 7, 7, 40), (20, 28), 2, 2),
    ("24 / 25 pixels, gw 8 -> 4", (1, 5, 5, 16), (8, 4), 2, 1),
    ("23 pixels 8 -> 12", (1, 1, 23, 16), (8, 12), 2, 1),
    ("11 / 12 pixels, two blocks", (1, 3, 4, 16), (8, 16), 2, 1),
    ("119 pixels", (1, 7, 17, 16), (8, 8), 2, 1),
    ("120 pixels over 4 images", (4, 5, 6, 16), (8, 8), 2, 1),
    ("121 pixels over 11 images", (11, 1, 11, 16), (8, 8), 2, 1),
    ("1x1 images of 6 groups", (5, 1, 1, 48), (8, 8), 6, 1),
]


def _dp_case(label, rng):
    label, xs, (cg, og), groups, s = next(c for c in DP_SHAPES if c[0] == label)
    x = rng.standard_normal(xs).astype(f32)
    k = rng.standard_normal((3, 3, cg, og * groups)).astype(f32)
    st = (s, s)
    ho, wo = conv_ref(np.zeros(xs[:3] + (1,)), np.zeros((3, 3, 1, 1)), st, True).shape[1:3]
    dy = rng.standard_normal((xs[0], ho, wo, og * groups)).astype(f32)
    return x, k, dy, groups, st


def _dp_check(op, inputs, attrs, ref, K):
    """avx512_grouped_dp_bf16 within gamma_K of the float64 result on the
    rounded operands (and the reference variant too); a bfloat16 output (two
    bfloat16 operands) within that plus its one rounding (2^-8 relative)."""
    a, b = (r64(t) for t in inputs)
    want, scale = ref(a, b), ref(np.abs(a), np.abs(b))
    bound = gamma(K) * scale
    if not _dp_runs():
        with pytest.raises(ValueError, match=f"kernel variant '{DP}' cannot run"):
            _C.run_variant(op, DP, *inputs, **attrs)
        return
    got = _C.run_variant(op, DP, *inputs, **attrs).numpy()
    assert got.shape == want.shape
    bf16_out = all(np.asarray(t).dtype == bf16 for t in inputs)
    assert got.dtype == (bf16 if bf16_out else f32)
    err = np.abs(got.astype(np.float64) - want)
    allowed = bound + (2 ** -8 * np.abs(want) * (1 + 2 ** -7) if bf16_out else 0)
    worst = np.unravel_index(np.argmax(err - allowed), err.shape)
    assert np.all(err <= allowed), (f"{op} {DP}: error {err[worst]:.3g} > bound "
                                    f"{allowed[worst]:.3g} at {worst}")
    other = _C.run_variant(op, "im2col_blas", *inputs, **attrs).numpy()
    assert np.all(np.abs(got.astype(np.float64) - other.astype(np.float64)) <= 2 * allowed)


@pytest.mark.parametrize("label", [c[0] for c in DP_SHAPES])
@pytest.mark.parametrize("dtypes", ["bf16 bf16", "f32 bf16", "bf16 f32"])
def test_grouped_dp_bf16_against_float64(label, dtypes, rng):
    """The forward pass and the input gradient of avx512_grouped_dp_bf16
    against float64 on the same rounded operands, with either operand float32
    (rounded once by the variant: float32 output) or both bfloat16 (bfloat16
    output, rounded once)."""
    x, k, dy, groups, st = _dp_case(label, rng)
    ta, tb = (bf16 if t == "bf16" else f32 for t in dtypes.split())
    kh, kw, cg, o = k.shape
    attrs = {"strides": list(st), "same": True, "groups": groups}
    _dp_check("conv2d", (x.astype(ta), k.astype(tb)), attrs,
              lambda a, b: _grouped(lambda p, q: conv_ref(p, q, st, True), a, b, groups),
              kh * kw * cg)
    xg = x.shape[:3] + (cg,)
    _dp_check("conv2d_backprop_input", (dy.astype(ta), k.astype(tb)),
              {**attrs, "shape": list(x.shape)},
              lambda a, b: _grouped(lambda p, q: conv_bpi_ref(p, q, xg, st, True), a, b,
                                    groups), kh * kw * o // groups)


@pytest.mark.parametrize("strides", [1, 2])
def test_grouped_dp_bf16_is_exact_on_exact_sums(strides, rng):
    """Small integers, every sum exact in float32: avx512_grouped_dp_bf16
    gives the exact result bit for bit, float32 with a float32 operand,
    rounded once to bfloat16 (to nearest even) with two bfloat16 operands."""
    x = rng.integers(-4, 5, (2, 9, 9, 32)).astype(bf16)
    k = rng.integers(-4, 5, (3, 3, 16, 32)).astype(bf16)
    st, attrs = (strides, strides), {"strides": strides, "same": True, "groups": 2}
    want = _grouped(lambda p, q: conv_ref(p, q, st, True), x.astype(np.float64),
                    k.astype(np.float64), 2)
    assert np.abs(want).max() > 256  # above 256 bfloat16 drops integers: rounding is tested
    dy = want.astype(bf16)
    want_dx = _grouped(lambda p, q: conv_bpi_ref(p, q, (2, 9, 9, 16), st, True),
                       dy.astype(np.float64), k.astype(np.float64), 2)
    if not _dp_runs():
        with pytest.raises(ValueError, match=f"kernel variant '{DP}' cannot run"):
            _C.run_variant("conv2d", DP, x, k, **attrs)
        return
    got = _C.run_variant("conv2d", DP, x, k.astype(f32), **attrs).numpy()
    np.testing.assert_array_equal(got, want.astype(f32))
    got = _C.run_variant("conv2d", DP, x, k, **attrs).numpy()
    assert got.dtype == bf16
    np.testing.assert_array_equal(got, want.astype(bf16))
    got = _C.run_variant("conv2d_backprop_input", DP, dy, k, shape=x.shape, **attrs).numpy()
    assert got.dtype == bf16
    np.testing.assert_array_equal(got, want_dx.astype(bf16))


@pytest.mark.parametrize("strides", [1, 2])
def test_grouped_dp_bf16_nan_reaches_exactly_the_windows_that_hold_it(strides, rng):
    """Each group reads only its own channels (4 at a time, never across a
    group), padding taps read zeros and the input gradient's phases skip the
    taps that miss a pixel: a NaN or an infinity in x (dy) reaches exactly
    the outputs of its group whose windows hold it."""
    groups, cg = 3, 8
    x = rng.standard_normal((2, 9, 11, groups * cg)).astype(f32)
    k = rng.standard_normal((3, 3, cg, groups * cg)).astype(bf16)
    attrs = {"strides": strides, "same": True, "groups": groups}
    if not _dp_runs():
        with pytest.raises(ValueError, match=f"kernel variant '{DP}' cannot run"):
            _C.run_variant("conv2d", DP, x, k, **attrs)
        return
    x[1, 4, 6, 3], x[0, 0, 10, 17], x[0, 8, 0, 20] = np.nan, np.inf, -np.inf
    got = _C.run_variant("conv2d", DP, x.astype(bf16), k, **attrs).numpy().astype(f32)
    ones = np.ones((3, 3, cg, 1))
    for g in range(groups):
        holds = np.where(np.isfinite(x[..., g * cg:(g + 1) * cg]), 0.0, 1.0)
        bad = conv_ref(holds, ones, (strides,) * 2, True)[..., 0] > 0
        part = got[..., g * cg:(g + 1) * cg]
        assert np.array_equal(~np.isfinite(part).all(axis=-1), bad), g
        assert np.array_equal(~np.isfinite(part).any(axis=-1), bad), g
    dy = rng.standard_normal(got.shape).astype(f32)
    dy[0, 2, 3, 5], dy[1, 0, 0, 22] = np.nan, np.inf
    dx = _C.run_variant("conv2d_backprop_input", DP, dy.astype(bf16), k,
                        shape=list(x.shape), **attrs).numpy().astype(f32)
    for g in range(groups):
        holds = (~np.isfinite(dy[..., g * cg:(g + 1) * cg]).all(axis=-1, keepdims=True))
        reach = conv_bpi_ref(holds.astype(np.float64), np.ones((3, 3, 1, 1)), (2, 9, 11, 1),
                             (strides,) * 2, True)[..., 0] > 0
        assert np.array_equal(~np.isfinite(dx[..., g * cg:(g + 1) * cg]).all(axis=-1), reach), g


def test_grouped_dp_bf16_refuses_what_it_has_no_tiles_for(rng):
    """Group widths not a multiple of 4 (in or out), depthwise and one group
    go to the other variants; float32 calls too; it is no variant of the
    filter gradient.  Where it runs, a RegNet call (group width 8) runs it
    first, eagerly."""
    bx = rng.standard_normal((2, 6, 6, 24)).astype(bf16)
    for k_shape, groups in (((3, 3, 6, 24), 4), ((3, 3, 8, 6), 3), ((3, 3, 1, 24), 24),
                            ((3, 3, 24, 24), 1), ((3, 3, 8, 18), 3), ((3, 3, 2, 24), 12)):
        with pytest.raises(ValueError, match=f"kernel variant '{DP}' cannot run"):
            _C.run_variant("conv2d", DP, bx, rng.standard_normal(k_shape).astype(bf16),
                           same=True, groups=groups)
    k = rng.standard_normal((3, 3, 8, 24)).astype(bf16)
    with pytest.raises(ValueError, match=f"kernel variant '{DP}' cannot run"):
        _C.run_variant("conv2d", DP, bx.astype(f32), k.astype(f32), same=True, groups=3)
    assert DP not in dict(_C.op_variants("conv2d_backprop_filter"))
    if _dp_runs():
        eager = _C.call("conv2d", bx, k, same=True, groups=3).numpy()
        np.testing.assert_array_equal(
            eager, _C.run_variant("conv2d", DP, bx, k, same=True, groups=3).numpy())


def test_grouped_dp_bf16_rounds_a_subnormal_sum_as_the_reference(rng):
    """The two halves of a lane pair are added as the tile is stored, and
    their sum can be a float32 subnormal (1.5 * 2^-126 - 1.25 * 2^-126 =
    2^-128) that VCVTNEPS2BF16 would flush to zero: the stored bfloat16 is
    the reference's 2^-128 (pr_f32_to_bf16's rounding), in the forward pass
    and the input gradient."""
    x = np.zeros((1, 2, 3, 8), f32)
    k = np.zeros((1, 1, 4, 8), f32)
    x[..., 0], x[..., 2] = 1.5 * 2.0 ** -63, 2.0 ** -63   # channels 0, 2: lanes j = 0, 1
    k[0, 0, 0, :4], k[0, 0, 2, :4] = 2.0 ** -63, -1.25 * 2.0 ** -63
    attrs = {"strides": 1, "same": True, "groups": 2}
    want = np.zeros((1, 2, 3, 8))
    want[..., :4] = 2.0 ** -128
    if not _dp_runs():
        with pytest.raises(ValueError, match=f"kernel variant '{DP}' cannot run"):
            _C.run_variant("conv2d", DP, x.astype(bf16), k.astype(bf16), **attrs)
        return
    for v in (DP, "im2col_blas"):
        got = _C.run_variant("conv2d", v, x.astype(bf16), k.astype(bf16), **attrs).numpy()
        np.testing.assert_array_equal(got.astype(np.float64), want, err_msg=v)
    # input gradient: dx[c] = sum_o dy[o] k[c, o]; pair (o 0, 1) and (o 2, 3) of channel c 0
    dy = np.zeros((1, 2, 3, 8), f32)
    dy[..., 0], dy[..., 2] = 1.5 * 2.0 ** -63, 2.0 ** -63
    k2 = np.zeros((1, 1, 4, 8), f32)
    k2[0, 0, 0, 0], k2[0, 0, 0, 2] = 2.0 ** -63, -1.25 * 2.0 ** -63
    want_dx = np.zeros((1, 2, 3, 8))
    want_dx[..., 0] = 2.0 ** -128
    for v in (DP, "im2col_blas"):
        got = _C.run_variant("conv2d_backprop_input", v, dy.astype(bf16), k2.astype(bf16),
                             shape=[1, 2, 3, 8], **attrs).numpy()
        np.testing.assert_array_equal(got.astype(np.float64), want_dx, err_msg=v)
