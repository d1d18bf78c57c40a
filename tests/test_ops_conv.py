"""Conv-family ops: matmul, conv2d (+ backprop ops), pooling.

References are plain float64 NumPy written independently of the kernels
(shift-and-add convolution instead of im2col), with TensorFlow's "same"
padding split: pad_total = max((ceil(n/s) - 1) * s + k - n, 0), the smaller
half before.  Gradients are checked against central finite differences.
"""
import ml_dtypes
import numpy as np
import pytest

import pyresnet as pr
from seeding import test_rng
from gradcheck import check_forward, check_gradients


def randn(*shape):
    """Normal float32 values from the test's own generator."""
    return test_rng().standard_normal(shape).astype(np.float32)


# ---- NumPy references ---------------------------------------------------------

def _geometry(size, k, s, same):
    """(output size, pad before, pad after) along one axis."""
    if same:
        out = -(-size // s)
        total = max((out - 1) * s + k - size, 0)
        return out, total // 2, total - total // 2
    return (size - k) // s + 1, 0, 0


def _pair(v):
    return (v, v) if np.isscalar(v) else tuple(v)


def _taps(x_shape, window, strides, same):
    """Output size, padding and, per window tap (i, j), the strided slices of
    the padded input that the tap reads for every output pixel."""
    (kh, kw), (sh, sw) = window, strides
    ho, pt, pb = _geometry(x_shape[1], kh, sh, same)
    wo, pl, pr_ = _geometry(x_shape[2], kw, sw, same)
    pads = ((0, 0), (pt, pb), (pl, pr_), (0, 0))
    taps = [(i, j, (slice(None), slice(i, i + sh * (ho - 1) + 1, sh),
                    slice(j, j + sw * (wo - 1) + 1, sw)))
            for i in range(kh) for j in range(kw)]
    return ho, wo, pads, taps


def conv_ref(x, k, strides=1, same=False):
    ho, wo, pads, taps = _taps(x.shape, k.shape[:2], _pair(strides), same)
    xp = np.pad(x, pads)
    y = np.zeros((x.shape[0], ho, wo, k.shape[3]))
    for i, j, sl in taps:
        y += np.einsum("nhwc,co->nhwo", xp[sl], k[i, j])
    return y


def conv_bpi_ref(dy, k, x_shape, strides=1, same=False):
    """The adjoint of conv_ref in x: scatter dy @ k^T back into the image."""
    _, _, pads, taps = _taps(x_shape, k.shape[:2], _pair(strides), same)
    dxp = np.zeros([n + a + b for n, (a, b) in zip(x_shape, pads)])
    for i, j, sl in taps:
        dxp[sl] += np.einsum("nhwo,co->nhwc", dy, k[i, j])
    (_, _), (pt, _), (pl, _), _ = pads
    return dxp[:, pt:pt + x_shape[1], pl:pl + x_shape[2], :]


def conv_bpf_ref(x, dy, k_shape, strides=1, same=False):
    _, _, pads, taps = _taps(x.shape, k_shape[:2], _pair(strides), same)
    xp = np.pad(x, pads)
    dk = np.zeros(k_shape)
    for i, j, sl in taps:
        dk[i, j] = np.einsum("nhwc,nhwo->co", xp[sl], dy)
    return dk


def pool_ref(x, pool, strides, same, kind):
    """Max or average pooling; padding never wins a max and is not counted."""
    pool = _pair(pool)
    ho, wo, pads, taps = _taps(x.shape, pool, _pair(strides), same)
    if kind == "max":
        xp = np.pad(x, pads, constant_values=-np.inf)
        return np.max([xp[sl] for _, _, sl in taps], axis=0)
    xp, ones = np.pad(x, pads), np.pad(np.ones_like(x), pads)
    return sum(xp[sl] for _, _, sl in taps) / sum(ones[sl] for _, _, sl in taps)


def max_pool_grad_ref(x, dy, pool, strides, same):
    """dy routed to the first maximum (row-major window order) of each window."""
    (kh, kw), (sh, sw) = _pair(pool), _pair(strides)
    ho, wo, pads, _ = _taps(x.shape, (kh, kw), (sh, sw), same)
    (_, _), (pt, _), (pl, _), _ = pads
    dx = np.zeros_like(x, dtype=np.float64)
    for n in range(x.shape[0]):
        for a in range(ho):
            for b in range(wo):
                r0, c0 = a * sh - pt, b * sw - pl
                rs = range(max(r0, 0), min(r0 + kh, x.shape[1]))
                cs = range(max(c0, 0), min(c0 + kw, x.shape[2]))
                win = x[n, rs.start:rs.stop, cs.start:cs.stop, :].reshape(-1, x.shape[3])
                first = np.argmax(win, axis=0)
                for c, f in enumerate(first):
                    dx[n, rs.start + f // len(cs), cs.start + f % len(cs), c] += dy[n, a, b, c]
    return dx


# ---- matmul -------------------------------------------------------------------

@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul(ta, tb):
    a, b = randn(3, 4), randn(4, 5)
    a_in, b_in = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    op = lambda u, v: pr.ops.matmul(u, v, transpose_a=ta, transpose_b=tb)
    ref = lambda u, v: (u.T if ta else u) @ (v.T if tb else v)
    check_forward(op, ref, [a_in, b_in], rtol=1e-5)
    check_gradients(op, ref, [a_in, b_in])


def test_matmul_operator_and_empty_inner():
    a, b = randn(2, 3), randn(3, 4)
    np.testing.assert_allclose((pr.Tensor(a) @ pr.Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-6)
    z = pr.ops.matmul(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3)))


# ---- conv2d -------------------------------------------------------------------

CONV_CASES = [  # (kernel_h, kernel_w), strides, same
    ((1, 1), 1, False), ((1, 1), 2, True), ((1, 1), 2, False),
    ((3, 3), 1, True), ((3, 3), 2, True), ((3, 3), 2, False), ((3, 3), 1, False),
    ((2, 2), 1, True), ((2, 2), 2, True), ((5, 5), 2, True), ((4, 4), 3, True),
    ((2, 3), (1, 2), True), ((3, 1), (2, 1), False),
]


@pytest.mark.parametrize("ksize,strides,same", CONV_CASES)
def test_conv2d_forward_and_backprops(ksize, strides, same):
    x, k = randn(2, 5, 7, 3), randn(*ksize, 3, 4)
    pad = "same" if same else "valid"
    y = check_forward(lambda u, v: pr.ops.conv2d(u, v, strides, pad),
                      lambda u, v: conv_ref(u, v, strides, same), [x, k], rtol=1e-4, atol=1e-4)[0]
    dy = randn(*y.shape)
    attrs = dict(strides=strides, same=same)
    check_forward(lambda d, v: pr.ops.call("conv2d_backprop_input", d, v, shape=x.shape, **attrs),
                  lambda d, v: conv_bpi_ref(d, v, x.shape, strides, same), [dy, k],
                  rtol=1e-4, atol=1e-4)
    check_forward(lambda u, d: pr.ops.call("conv2d_backprop_filter", u, d, shape=k.shape, **attrs),
                  lambda u, d: conv_bpf_ref(u, d, k.shape, strides, same), [x, dy],
                  rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ksize,strides,same", [
    ((1, 1), 1, True), ((1, 1), 2, False), ((3, 3), 1, True), ((3, 3), 2, True),
    ((3, 3), 2, False), ((2, 2), 2, True), ((5, 5), 1, True), ((2, 3), (1, 2), True)])
def test_conv2d_gradients(ksize, strides, same):
    x, k = randn(1, 5, 7, 2), randn(*ksize, 2, 3)
    pad = "same" if same else "valid"
    check_gradients(lambda u, v: pr.ops.conv2d(u, v, strides, pad),
                    lambda u, v: conv_ref(u, v, strides, same), [x, k])


@pytest.mark.parametrize("strides,same", [(1, True), (2, False), (2, True)])
def test_conv2d_backprop_ops_gradients(strides, same):
    """The backprop ops are differentiable too (second-order gradients)."""
    x_shape, k = (1, 5, 6, 2), randn(3, 3, 2, 3)
    x = randn(*x_shape)
    y_shape = conv_ref(x, k, strides, same).shape
    dy = randn(*y_shape)
    attrs = dict(strides=strides, same=same)
    check_gradients(lambda d, v: pr.ops.call("conv2d_backprop_input", d, v, shape=x_shape, **attrs),
                    lambda d, v: conv_bpi_ref(d, v, x_shape, strides, same), [dy, k])
    check_gradients(lambda u, d: pr.ops.call("conv2d_backprop_filter", u, d, shape=k.shape,
                                             **attrs),
                    lambda u, d: conv_bpf_ref(u, d, k.shape, strides, same), [x, dy])


def test_conv2d_large_batch():
    """A batch whose im2col matrix (47 MB) exceeds every scratch budget of the
    kernels, so the forward and both backprops run in several pieces."""
    x, k = randn(10, 64, 64, 32), randn(3, 3, 32, 8)
    y = pr.ops.conv2d(x, k, padding="same").numpy()
    np.testing.assert_allclose(y, conv_ref(x.astype(np.float64), k, 1, True), rtol=1e-4, atol=1e-3)
    dy = randn(*y.shape)
    dx = pr.ops.call("conv2d_backprop_input", dy, k, shape=x.shape, same=True).numpy()
    np.testing.assert_allclose(dx, conv_bpi_ref(dy.astype(np.float64), k, x.shape, 1, True),
                               rtol=1e-4, atol=1e-3)
    dk = pr.ops.call("conv2d_backprop_filter", x, dy, shape=k.shape, same=True).numpy()
    np.testing.assert_allclose(dk, conv_bpf_ref(x.astype(np.float64), dy, k.shape, 1, True),
                               rtol=1e-4, atol=1e-2)


@pytest.fixture
def restore_threads():
    n = pr.get_num_threads()
    yield
    pr.set_num_threads(n)


@pytest.mark.parametrize("ksize,strides,same", [((3, 3), 1, True), ((3, 3), 2, True),
                                                ((1, 1), 1, False), ((2, 2), 2, False)])
def test_conv2d_deterministic_for_any_thread_count(restore_threads, ksize, strides, same):
    """The kernels split work by shape only: identical bits for any thread count."""
    x, k = randn(16, 17, 15, 16), randn(*ksize, 16, 8)
    dy = randn(16, *conv_ref(x[:1], k, strides, same).shape[1:])
    attrs = dict(strides=strides, same=same)

    def passes():
        return [pr.ops.call("conv2d", x, k, **attrs).numpy(),
                pr.ops.call("conv2d_backprop_input", dy, k, shape=x.shape, **attrs).numpy(),
                pr.ops.call("conv2d_backprop_filter", x, dy, shape=k.shape, **attrs).numpy()]

    results = []
    for n in (1, 2, 3):
        pr.set_num_threads(n)
        results.append(passes())
        for a, b in zip(results[-1], passes()):
            np.testing.assert_array_equal(a, b)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,k,n", [(301, 200, 70), (40, 160, 333)])
def test_matmul_large(ta, tb, m, k, n):
    """Products big enough for the threaded paths, tall and wide."""
    a, b = randn(k, m) if ta else randn(m, k), randn(n, k) if tb else randn(k, n)
    want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b)
    got = pr.ops.matmul(a, b, transpose_a=ta, transpose_b=tb).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_conv2d_empty_batch():
    x, k = np.zeros((0, 5, 5, 3), np.float32), randn(3, 3, 3, 4)
    assert pr.ops.conv2d(x, k, padding="same").shape == (0, 5, 5, 4)
    kv = pr.Variable(k)
    with pr.GradientTape() as tape:
        y = pr.ops.conv2d(x, kv, 2)
    assert y.shape == (0, 2, 2, 4)
    (dk,) = tape.gradient(y, [kv])
    np.testing.assert_array_equal(dk.numpy(), np.zeros_like(k))


@pytest.mark.parametrize("strides", [1, 2])
@pytest.mark.parametrize("o", [4, 8, 16, 17])
def test_conv2d_filter_gradient_nonfinite_edges(o, strides):
    """An Inf or NaN of x reaches only the taps that read it: every variant's
    weight gradient has the reference's NaN pattern (the edge columns of a
    'same' window are read by two of its three taps; a review found the
    three-tap kernel multiplying them by the zero dy of missing pixels)."""
    from pyresnet import _C
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 6, 3)).astype(np.float32)
    x[0, 1, 0, 0] = np.inf
    x[1, 2, 5, 1] = np.nan
    x[0, 3, 2, 2] = -np.inf
    wo = -(-6 // strides)
    dy = rng.standard_normal((2, -(-4 // strides), wo, o)).astype(np.float32)
    attrs = dict(strides=[strides, strides], same=True, shape=[3, 3, 3, o])
    want = _C.run_variant("conv2d_backprop_filter", "im2col_blas", x, dy, **attrs).numpy()
    for variant, ok in _C.op_variants("conv2d_backprop_filter"):
        if not ok:
            continue
        try:
            got = _C.run_variant("conv2d_backprop_filter", variant, x, dy, **attrs).numpy()
        except ValueError:  # a bfloat16-only variant
            continue
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=variant)
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4,
                                   err_msg=variant)


# ---- the direct kernels (avx512_direct, avx2_direct) ---------------------------------

DIRECT_VARIANTS = ("avx512_direct", "avx2_direct")


def direct_runs(variant):
    """Whether this CPU (and PYRESNET_KERNELS) lets `variant` run."""
    from pyresnet import _C
    return dict(_C.op_variants("conv2d"))[variant] and not _C.cpu_info()["reference_only"]


def refused_here(variant):
    """True, having checked that `variant` refuses to run, where it may not
    (the tests below then have nothing more to check: tests never skip, so
    test_which_direct_kernels_ran says which variants these tests ran)."""
    from pyresnet import _C
    if direct_runs(variant):
        return False
    x, k = randn(1, 4, 4, 8), randn(3, 3, 8, 8)
    with pytest.raises(ValueError, match=f"kernel variant '{variant}' cannot run"):
        _C.run_variant("conv2d", variant, x, k, same=True)
    return True


def test_which_direct_kernels_ran(capsys):
    """The suite says which direct float32 kernels this CPU ran, and why not
    the others."""
    from pyresnet import _C
    info = _C.cpu_info()
    need = {"avx512_direct": "avx512f fma", "avx2_direct": "avx2 fma"}
    notes = [v if direct_runs(v) else
             f"not {v} ({'PYRESNET_KERNELS=reference' if info['reference_only'] else 'needs ' + need[v]})"
             for v in DIRECT_VARIANTS]
    with capsys.disabled():
        print(f"\ndirect float32 conv kernels on this CPU ({' '.join(info['features'])}"
              f"{', PYRESNET_KERNELS=' + info['kernels'] if info['kernels'] else ''}): "
              + ", ".join(notes))
    assert direct_runs("avx2_direct") == (
        {"avx2", "fma"} <= set(info["features"]) and not info["reference_only"])


# (x shape, kernel shape, strides, same): the edges of the direct kernels'
# channel blocks (8 for AVX2, 16 for AVX-512: 1, 5, 7-9, 15, 17, 23-25, 40,
# 41 channels), of their tile widths (12 and 24 pixels: widths 12-14, 25,
# 26), windows 1 to 7 wide, strides 1 to 3, 1x1 images, batch 1
DIRECT_SHAPES = [
    ((2, 6, 13, 8), (3, 3, 8, 8), 1, True),
    ((1, 5, 25, 9), (3, 3, 9, 7), 1, True),
    ((2, 7, 12, 7), (3, 3, 7, 24), 2, True),
    ((1, 9, 26, 24), (3, 3, 24, 25), 1, False),
    ((2, 8, 9, 40), (3, 3, 40, 40), 2, False),
    # stride 2 on even images, more than one block of outputs: the AVX2 filter gradient
    # repacks x by phase (a partial last block, a lone last block; 'valid' and 'same')
    ((3, 10, 12, 13), (3, 3, 13, 20), 2, False),
    ((2, 8, 6, 16), (3, 3, 16, 24), 2, True),
    ((1, 11, 14, 5), (7, 7, 5, 9), 1, True),
    ((2, 10, 10, 23), (5, 5, 23, 8), 3, True),
    ((1, 4, 4, 64), (1, 1, 64, 41), 1, True),
    ((2, 7, 9, 33), (1, 1, 33, 17), 2, True),
    ((3, 1, 1, 9), (3, 3, 9, 15), 1, True),
    ((2, 5, 14, 1), (1, 3, 1, 16), (1, 2), True),
    ((1, 12, 6, 17), (3, 2, 17, 23), (3, 1), False),
    # airbench94's (applications.airbench94): the 2x2 whitening, odd images (31, 15, 7,
    # 3 pixels), 24 -> 64 and 256 -> 256 channels; 17 small images: a group of 16 images
    # and a group of 1 (the forward and input-gradient tiles take small images in groups)
    ((2, 32, 32, 3), (2, 2, 3, 24), 1, False),
    ((1, 31, 31, 24), (3, 3, 24, 64), 1, True),
    ((2, 7, 7, 256), (3, 3, 256, 256), 1, True),
    ((17, 3, 3, 40), (3, 3, 40, 24), 1, True),
    # AVX-512 groups (conv_direct_geom.h, tile_image_group): 3x3 outputs at stride 2 (the
    # forward's groups of 8 and 3; its input gradient goes image by image), 2x2 images in
    # one group of 5, 4 output blocks a tile
    ((11, 6, 5, 20), (3, 3, 20, 36), 2, True),
    ((5, 2, 2, 17), (3, 3, 17, 70), 1, True),
]


@pytest.mark.parametrize("xs,ks,strides,same", DIRECT_SHAPES)
@pytest.mark.parametrize("variant", DIRECT_VARIANTS)
def test_direct_variants_on_block_edges(variant, xs, ks, strides, same):
    """Each pass of a direct variant against the float64 NumPy references
    (the op table's shapes run every variant too, test_op_table.py); a pass
    it refuses (forward at horizontal stride 3, a 1x1 window's forward and
    input gradient, and in float32 a stride-1 1x1's filter gradient) runs the
    reference instead."""
    from pyresnet import _C
    if refused_here(variant):
        return
    x, k = randn(*xs), randn(*ks)
    y = conv_ref(x.astype(np.float64), k, strides, same)
    dy = randn(*y.shape)
    s = list(_pair(strides))
    calls = {"conv2d": (x, k, {}, y),
             "conv2d_backprop_input": (dy, k, {"shape": xs},
                                       conv_bpi_ref(dy.astype(np.float64), k, xs, strides, same)),
             "conv2d_backprop_filter": (x, dy, {"shape": ks},
                                        conv_bpf_ref(x.astype(np.float64), dy, ks, strides, same))}
    ran = []
    for op, (a, b, extra, want) in calls.items():
        try:
            got = _C.run_variant(op, variant, a, b, strides=s, same=same, **extra).numpy()
        except ValueError as err:
            assert "cannot run these inputs" in str(err)
            continue
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-4, err_msg=f"{variant} {op}")
        ran.append(op)
    # every window and stride up to 4, but float32's stride-1 1x1 (a GEMM)
    pointwise = ks[:2] == (1, 1) and strides == 1
    assert ("conv2d_backprop_filter" in ran) != pointwise, ran


@pytest.mark.parametrize("strides", [1, 2])
@pytest.mark.parametrize("variant", DIRECT_VARIANTS)
def test_direct_variants_nonfinite_reach_the_reference_outputs(variant, strides):
    """An Inf or NaN of x (forward) or dy (input gradient) reaches exactly
    the outputs it reaches in the reference kernel, those whose windows hold
    it: the zero padding around an image and the zero-padded channels of
    the repacked weights turn nothing else into a NaN."""
    from pyresnet import _C
    if refused_here(variant):
        return
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 9, 11)).astype(np.float32)
    k = rng.standard_normal((3, 3, 11, 13)).astype(np.float32)
    x[0, 0, 0, 3], x[1, 6, 8, 10], x[1, 3, 4, 0] = np.nan, np.inf, -np.inf
    ho, wo = -(-7 // strides), -(-9 // strides)
    dy = rng.standard_normal((2, ho, wo, 13)).astype(np.float32)
    dy[0, 0, wo - 1, 12], dy[1, ho - 1, 0, 0], dy[1, 1, 2, 5] = np.inf, np.nan, -np.inf
    attrs = dict(strides=strides, same=True)
    for op, a, b, extra in (("conv2d", x, k, {}),
                            ("conv2d_backprop_input", dy, k, {"shape": x.shape})):
        want = _C.run_variant(op, "im2col_blas", a, b, **attrs, **extra).numpy()
        got = _C.run_variant(op, variant, a, b, **attrs, **extra).numpy()
        assert (~np.isfinite(want)).any()
        for kind in (np.isnan, np.isposinf, np.isneginf):
            np.testing.assert_array_equal(kind(got), kind(want), err_msg=f"{variant} {op}")
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


def test_conv2d_bad_inputs():
    x, k = randn(1, 5, 5, 3), randn(3, 3, 3, 4)
    with pytest.raises(ValueError, match=r"conv2d: padding must be 'same' or 'valid', got 'full'"):
        pr.ops.conv2d(x, k, padding="full")
    assert pr.ops.conv2d(x, k, padding="SAME").shape == (1, 5, 5, 4)
    with pytest.raises(ValueError, match=r"conv2d: x must have rank 4 .*got shape \(5, 5, 3\)"):
        pr.ops.conv2d(x[0], k)
    with pytest.raises(ValueError, match=r"conv2d: kernel must have rank 4"):
        pr.ops.conv2d(x, k[0])
    with pytest.raises(ValueError, match=r"conv2d: x has 3 channels but kernel expects 2: "
                                         r"x \(1, 5, 5, 3\), kernel \(3, 3, 2, 4\)"):
        pr.ops.conv2d(x, k[:, :, :2])
    with pytest.raises(TypeError, match="conv2d: input 0 must be float32 or bfloat16, got int32"):
        pr.ops.conv2d(x.astype(np.int32), k)
    for bad in (0, -1, (1, 0), (1, 2, 3)):
        with pytest.raises(ValueError, match="conv2d: 'strides'"):
            pr.ops.conv2d(x, k, strides=bad)
    with pytest.raises(ValueError, match=r"conv2d: kernel \(7, 7, 3, 4\) gives an empty output "
                                         r"\(0 x 0\) for x \(1, 5, 5, 3\).*padding='valid'"):
        pr.ops.conv2d(x, randn(7, 7, 3, 4))
    with pytest.raises(ValueError, match="conv2d: kernel must have positive dimensions"):
        pr.ops.conv2d(x, np.zeros((0, 3, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"conv2d_backprop_input: dy \(input 0\) has shape "
                                         r"\(1, 4, 4, 4\), expected \(1, 5, 5, 4\)"):
        pr.ops.call("conv2d_backprop_input", randn(1, 4, 4, 4), k, shape=x.shape, same=True)
    with pytest.raises(ValueError, match=r"conv2d_backprop_filter: shape \(of kernel\) must "
                                         r"have rank 4"):
        pr.ops.call("conv2d_backprop_filter", x, randn(1, 3, 3, 4), shape=(3, 3, 3))
    with pytest.raises(TypeError, match="missing required argument 'shape'"):
        pr.ops.call("conv2d_backprop_input", randn(1, 3, 3, 4), k)


def test_matmul_bad_inputs():
    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ: a \(2, 3\) and "
                                         r"b \(4, 5\)"):
        pr.ops.matmul(randn(2, 3), randn(4, 5))
    with pytest.raises(ValueError, match=r"matmul: input 1 must have rank 2"):
        pr.ops.matmul(randn(2, 3), randn(3))
    with pytest.raises(TypeError, match="matmul: input 0 must be float32"):
        pr.ops.matmul(np.ones((2, 3), np.int32), randn(3, 2))


# ---- pooling ------------------------------------------------------------------

POOL_CASES = [  # pool_size, strides, same, x shape
    (2, None, False, (1, 5, 7, 3)), (2, None, True, (2, 5, 7, 3)), (3, 2, True, (1, 5, 7, 2)),
    (3, 1, False, (1, 5, 6, 2)), ((2, 3), (1, 2), True, (1, 4, 7, 2)), (3, 3, True, (1, 7, 5, 70)),
    (2, None, False, (2, 7, 7, 67)),  # airbench94's pools: odd images (a row, a column uncovered)
]


@pytest.mark.parametrize("pool,strides,same,shape", POOL_CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d(pool, strides, same, shape, kind):
    # distinct values spaced well above the finite-difference step: no ties
    x = (test_rng().permutation(np.prod(shape)).reshape(shape) * 0.01 - 1.0).astype(np.float32)
    fn = pr.ops.max_pool2d if kind == "max" else pr.ops.average_pool2d
    pad = "same" if same else "valid"
    s = pool if strides is None else strides
    op = lambda u: fn(u, pool, strides, pad)
    ref = lambda u: pool_ref(u, pool, s, same, kind)
    check_forward(op, ref, [x], rtol=1e-6, atol=1e-6)
    if shape[-1] <= 3:
        check_gradients(op, ref, [x])


def test_max_pool_ties_go_to_first_maximum():
    x = np.zeros((1, 5, 5, 2), np.float32)
    x[0, 1, 1, 1] = x[0, 2, 2, 1] = 1.0  # a tie across overlapping windows in channel 1
    xv = pr.Variable(x)
    dy = randn(1, 3, 3, 2)
    with pr.GradientTape() as tape:
        y = pr.ops.max_pool2d(xv, 3, 2, "same")
    (dx,) = tape.gradient(y, [xv], dy)
    np.testing.assert_allclose(dx.numpy(), max_pool_grad_ref(x, dy, 3, 2, True), rtol=1e-6)


def test_avg_pool_backward_gradient():
    x_shape, dy = (1, 5, 7, 2), randn(1, 3, 4, 2)
    attrs = dict(pool_size=3, strides=2, same=True, shape=x_shape)
    # avg_pool2d_backward is the adjoint of avg_pool2d: its gradient is avg_pool2d
    op = lambda d: pr.ops.call("avg_pool2d_backward", d, **attrs)
    check_forward(op, lambda d: _avg_adjoint(d, x_shape), [dy], rtol=1e-6, atol=1e-6)
    check_gradients(op, lambda d: _avg_adjoint(d, x_shape), [dy])


def _avg_adjoint(dy, x_shape):
    """Adjoint of pool_ref(avg, 3, 2, same) built column by column."""
    cols = []
    for idx in range(int(np.prod(x_shape))):
        e = np.zeros(x_shape)
        e.flat[idx] = 1.0
        cols.append(np.sum(pool_ref(e, 3, 2, True, "avg") * dy))
    return np.array(cols).reshape(x_shape)


def test_pool_bad_inputs():
    x = randn(1, 4, 4, 2)
    with pytest.raises(ValueError, match="max_pool2d: padding must be 'same' or 'valid', got 3"):
        pr.ops.max_pool2d(x, padding=3)
    with pytest.raises(ValueError, match="average_pool2d: padding must be"):
        pr.ops.average_pool2d(x, padding="causal")
    with pytest.raises(ValueError, match="max_pool2d: 'pool_size' must be positive ints, got 0"):
        pr.ops.max_pool2d(x, 0)
    with pytest.raises(ValueError, match=r"avg_pool2d: pool_size \(5, 5\) gives an empty output"):
        pr.ops.average_pool2d(x, 5)
    with pytest.raises(ValueError, match="max_pool2d: x must have rank 4"):
        pr.ops.max_pool2d(x[0])
    with pytest.raises(TypeError, match="max_pool2d: input 0 must be float32"):
        pr.ops.max_pool2d(x.astype(np.int32))
    with pytest.raises(ValueError, match=r"max_pool2d_backward: dy \(input 1\) has shape"):
        pr.ops.call("max_pool2d_backward", x, randn(1, 3, 3, 2), pool_size=2)


# ---- global average pooling -------------------------------------------------------

def test_global_average_pool():
    x = randn(2, 3, 5, 4)
    ref = lambda u: u.mean(axis=(1, 2))
    check_forward(pr.ops.global_average_pool2d, ref, [x], rtol=1e-6, atol=1e-6)
    check_gradients(pr.ops.global_average_pool2d, ref, [x])
    bw = lambda d: pr.ops.call("global_average_pool_backward", d, shape=x.shape)
    bw_ref = lambda d: np.broadcast_to(d[:, None, None, :] / 15.0, x.shape)
    check_forward(bw, bw_ref, [randn(2, 4)], rtol=1e-6, atol=1e-7)
    check_gradients(bw, bw_ref, [randn(2, 4)])
    with pytest.raises(ValueError, match=r"global_average_pool: x has no pixels to average: "
                                         r"shape \(2, 0, 5, 4\)"):
        pr.ops.global_average_pool2d(np.zeros((2, 0, 5, 4), np.float32))
    with pytest.raises(ValueError, match=r"global_average_pool_backward: dy \(input 0\) has shape "
                                         r"\(2, 3\), expected \(2, 4\)"):
        pr.ops.call("global_average_pool_backward", randn(2, 3), shape=x.shape)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("where", range(4))
def test_max_pool_2x2_windows_nan_infinity_and_channel_tail(where, dtype):
    """MaxPooling2D(2)'s windows of 2x2 valid taps (16 channels at a time with
    AVX-512, the rest in the portable loop: 37 channels): each window's max
    against NumPy, a NaN at window position `where` in a vector lane and in
    the tail is the window's max, -inf loses to everything, +inf wins, in
    float32 and bfloat16 (exact); an odd image leaves a row and a column
    out."""
    rng = np.random.default_rng(where)
    x = rng.standard_normal((2, 5, 7, 37)).astype(np.float32)
    r, c = divmod(where, 2)
    x[0, r, c, 3] = x[1, 2 + r, 4 + c, 36] = np.nan
    x[0, 2 + r, 2 + c, 20] = np.inf
    x[1, r, c, 17] = -np.inf
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    xd = x.astype(dt)
    win = xd.astype(np.float32)[:, :4, :6].reshape(2, 2, 2, 3, 2, 37)
    want = win.max(axis=(2, 4))  # NaN propagates, as in np.max
    got = pr.ops.max_pool2d(xd, 2).numpy()
    assert got.dtype == dt and got.shape == (2, 2, 3, 37)
    got = got.astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got).sum() == 2 and np.isposinf(got).sum() == 1


@pytest.mark.parametrize("where", range(9))
def test_max_pool_propagates_nan_at_every_window_position(where):
    """A NaN anywhere in a window is the window's max (np.max, torch), in
    max_pool2d eagerly and compiled, MaxPooling2D on bfloat16 inputs and
    GlobalMaxPooling2D; the gradient goes to the window's first NaN (np.argmax,
    PyTorch's indices).  70 channels: a whole block of the backward's 64 and a
    partial one, several vector widths of the forward."""
    x = randn(2, 3, 3, 70)
    r, c = divmod(where, 3)
    x[0, r, c, 5] = x[1, r, c, 66] = x[0, r, c, 69] = np.nan
    if where < 8:
        x[0, 2, 2, 5] = np.nan  # a later NaN in the same window: the first one wins
    dy = randn(2, 1, 1, 70)
    want = np.max(x, axis=(1, 2), keepdims=True)
    assert np.isnan(want).sum() == 3
    first = np.argmax(x.reshape(2, 9, 70), axis=1)  # the first NaN, else the first maximum
    want_dx = np.zeros_like(x).reshape(2, 9, 70)
    np.put_along_axis(want_dx, first[:, None, :], dy.reshape(2, 1, 70), axis=1)
    want_dx = want_dx.reshape(x.shape)
    assert want_dx[0, r, c, 5] == dy[0, 0, 0, 5]

    xv = pr.Variable(x)

    def pool_and_grad(d):
        with pr.GradientTape() as tape:
            y = pr.ops.max_pool2d(xv, 3)
        return y, tape.gradient(y, [xv], d)[0]

    for run in (pool_and_grad, pr.compile(pool_and_grad)):
        y, dx = run(dy)
        np.testing.assert_array_equal(y.numpy(), want)
        np.testing.assert_array_equal(dx.numpy(), want_dx)
    pooled = pr.layers.GlobalMaxPooling2D(keepdims=True)(x).numpy()
    np.testing.assert_array_equal(pooled, want)

    import ml_dtypes
    xb = x.astype(ml_dtypes.bfloat16)
    want_b = np.max(xb.astype(np.float32), axis=(1, 2), keepdims=True)
    layer = pr.layers.MaxPooling2D(3, dtype="mixed_bfloat16")
    for run in (layer, pr.compile(layer)):
        got = np.asarray(run(pr.Tensor(xb)).numpy(), np.float32)
        np.testing.assert_array_equal(got, want_b)
