"""Kernel size thresholds: values just below, at and just above each one,
against NumPy.

Kernels change behaviour past size constants: a parallel loop starts at
PARALLEL_MIN elements, a binary op splits long rows into chunks of 16384,
batch norm cuts its rows into at most MAX_CHUNKS chunks and keeps CB
channels in registers, max-pool backward walks CBLOCK channels at a time,
the allocator reuses freed blocks from CACHE_MIN bytes, the jit fuses at
most PR_FUSED_MAX_INSTR instructions of PR_FUSED_MAX_IN inputs, the direct
convolutions tile 24 pixels by up to 4 blocks of 16 channels (AVX2: 12 by 8) and take
windows up to MAX_WINDOW and strides up to MAX_STRIDE...  A bug on one side
of such a constant passes every test that stays on the other side.

``THRESHOLDS`` names every numeric constant of csrc/kernels/ and, for each,
the cases (sizes t - 1, t, t + 1 of the dimension it governs) or the reason
it governs no size; ``test_every_kernel_constant_is_listed`` fails on a new
constant that is not listed.  Every case compares values (not only shapes)
with a float64 NumPy reference, through the op's default kernel (fast
variants in the first CI pass, the reference kernels under
PYRESNET_KERNELS=reference).
"""
import pathlib
import re

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import _C
from op_table import affine_reference, contrast_reference
from test_ops_conv import conv_bpf_ref, conv_bpi_ref, conv_ref, max_pool_grad_ref, pool_ref
from test_ops_nn import np_bn_train, np_softmax, np_sparse_ce

KERNELS = pathlib.Path(__file__).resolve().parents[1] / "csrc" / "kernels"
f32 = np.float32


def around(t):
    return (t - 1, t, t + 1)


def randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(f32)


def close(got, want, rtol=1e-5, atol=1e-5, what=""):
    got = np.asarray(got)
    assert got.shape == np.shape(want), f"{what}: shape {got.shape} vs {np.shape(want)}"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


# ---- the cases, one function per threshold ---------------------------------------------

def elementwise_parallel(rng):
    """elementwise.c PARALLEL_MIN = 32768 elements; chunk = 16384 per split
    row; rows < 4 split long rows.  Binary ops with each broadcast layout,
    unary ops on flat arrays."""
    for inner in around(16384) + around(32768):
        for rows in (1, 3, 4):
            a = randn(rng, rows, inner)
            for b, label in ((randn(rng, rows, inner), "same"), (randn(rng, inner), "row"),
                             (randn(rng, rows, 1), "column"), (randn(rng), "scalar")):
                for name, fn in (("add", np.add), ("multiply", np.multiply),
                                 ("maximum", np.maximum)):
                    close(_C.call(name, a, b), fn(a.astype(np.float64), b), 1e-6, 1e-6,
                          f"{name} {rows}x{inner} {label}")
                close(_C.call("subtract", b, a), b.astype(np.float64) - a, 1e-6, 1e-6,
                      f"subtract {label} - {rows}x{inner}")
    for n in around(32768):
        x = randn(rng, n)
        close(_C.call("relu", x), np.maximum(x, 0), 0, 0, f"relu {n}")
        close(_C.call("exp", x), np.exp(x.astype(np.float64)), 2e-6, 1e-6, f"exp {n}")
        close(_C.call("scale", x, value=2.5, divisor=3), x * (2.5 / 3), 1e-6, 1e-7, f"scale {n}")
        dy = randn(rng, n)
        close(_C.call("relu_backward", dy, np.maximum(x, 0)), np.where(x > 0, dy, 0), 0, 0,
              f"relu_backward {n}")
        close(_C.call("broadcast_to", x[:1], shape=[n]), np.full(n, x[0]), 0, 0,
              f"broadcast_to {n}")


def gelu_blocks(rng):
    """elementwise.c GELU_BLOCK = 64 elements staged in float32, GELU_CHUNK =
    16384 per thread's call, PARALLEL_MIN = 32768: gelu and gelu_backward in
    float32 and bfloat16 around each, against float64 erf."""
    from math import erf

    import ml_dtypes
    erf64 = np.vectorize(erf)
    for n in around(64) + around(16384) + around(32768):
        x = randn(rng, n, scale=3)
        dy = randn(rng, n)
        x64 = x.astype(np.float64)
        cdf = 0.5 * (1 + erf64(x64 / np.sqrt(2)))
        gelu = x64 * cdf
        grad = dy * (cdf + x64 * np.exp(-0.5 * x64 ** 2) / np.sqrt(2 * np.pi))
        close(_C.call("gelu", x), gelu, 1e-5, 1e-6, f"gelu {n}")
        close(_C.call("gelu_backward", dy, x), grad, 1e-5, 1e-6, f"gelu_backward {n}")
        xb, dyb = x.astype(ml_dtypes.bfloat16), dy.astype(ml_dtypes.bfloat16)
        xr, dyr = xb.astype(np.float64), dyb.astype(np.float64)
        cdf = 0.5 * (1 + erf64(xr / np.sqrt(2)))
        got = np.asarray(_C.call("gelu", xb)).astype(np.float64)
        close(got, xr * cdf, 8e-3, 1e-6, f"gelu bf16 {n}")
        got = np.asarray(_C.call("gelu_backward", dyb, xb)).astype(np.float64)
        want = dyr * (cdf + xr * np.exp(-0.5 * xr ** 2) / np.sqrt(2 * np.pi))
        close(got, want, 8e-3, 1e-6, f"gelu_backward bf16 {n}")


def reduce_parallel(rng):
    """reduce.c PARALLEL_MIN = 32768 elements, threads over a kept outer dim."""
    for shape in ((4681, 7), (2048, 16), (3, 10923), (32767,), (32769,)):
        x = randn(rng, *shape, scale=10)
        for axes in ([], [-1], [0]):
            ax = tuple(axes) or None
            for name, fn in (("sum", np.sum), ("mean", np.mean)):
                close(_C.call(name, x, axes=axes, keepdims=False),
                      fn(x.astype(np.float64), axis=ax), 1e-5, 1e-4, f"{name} {shape} {axes}")


def _bn_check(rng, m, c):
    x = randn(rng, m, c, scale=2) + 3
    gamma, beta = (rng.uniform(0.5, 1.5, c).astype(f32), randn(rng, c))
    y, mean, var = _C.call("batch_norm_train", x, gamma, beta, epsilon=1e-3)
    want_y, want_mean, want_var = np_bn_train(x.astype(np.float64), gamma, beta, 1e-3)
    close(y, want_y, 1e-4, 1e-4, f"bn train y m={m} c={c}")
    close(mean, want_mean, 1e-5, 1e-5, f"bn mean m={m} c={c}")
    close(var, want_var, 1e-4, 1e-5, f"bn var m={m} c={c}")
    dy = randn(rng, m, c)
    dx, dg, db = _C.call("batch_norm_train_backward", dy, x, gamma, mean, var, epsilon=1e-3)
    x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
    inv = 1 / np.sqrt(x64.var(0) + 1e-3)
    xhat = (x64 - x64.mean(0)) * inv
    want_db, want_dg = dy64.sum(0), (dy64 * xhat).sum(0)
    close(db, want_db, 1e-4, 1e-3, f"bn dbeta m={m} c={c}")
    close(dg, want_dg, 1e-4, 1e-3, f"bn dgamma m={m} c={c}")
    close(dx, gamma * inv * (dy64 - want_db / m - xhat * want_dg / m), 1e-3, 1e-4,
          f"bn dx m={m} c={c}")
    mm, mv = randn(rng, c), rng.uniform(0.2, 2, c).astype(f32)
    close(_C.call("batch_norm_infer", x, gamma, beta, mm, mv, epsilon=1e-3),
          (x64 - mm) / np.sqrt(mv.astype(np.float64) + 1e-3) * gamma + beta, 1e-5, 1e-4,
          f"bn infer m={m} c={c}")


def norm_chunks(rng):
    """norm.c MAX_CHUNKS = 64 row chunks."""
    for m in around(64) + (127, 128, 129):
        _bn_check(rng, m, 5)


def norm_channel_block(rng):
    """norm.c CB = 16 channels in registers; leftovers in memory."""
    for c in around(16) + around(32):
        _bn_check(rng, 9, c)


def norm_parallel(rng):
    """norm.c PARALLEL_MIN = 32768 = m * c values."""
    for m, c in ((4681, 7), (2048, 16), (10923, 3)):  # 32767, 32768, 32769
        _bn_check(rng, m, c)


def loss_parallel(rng):
    """loss.c PARALLEL_MIN = 32768 = rows * classes."""
    for rows, k in ((4681, 7), (2048, 16), (10923, 3)):
        x = randn(rng, rows, k, scale=3)
        labels = rng.integers(0, k, rows).astype(np.int32)
        close(_C.call("sparse_softmax_cross_entropy", x, labels),
              np_sparse_ce(x.astype(np.float64), labels), 1e-5, 1e-5, f"sparse ce {rows}x{k}")
        close(_C.call("softmax", x), np_softmax(x.astype(np.float64)), 1e-5, 1e-7,
              f"softmax {rows}x{k}")
        g = randn(rng, rows)
        close(_C.call("sparse_softmax_cross_entropy_backward", g, x, labels),
              g[:, None] * (np_softmax(x.astype(np.float64)) - np.eye(k)[labels]), 1e-5, 1e-6,
              f"sparse ce backward {rows}x{k}")


def optim_parallel(rng):
    """optim.c PARALLEL_MIN = 32768 parameters."""
    for n in around(32768):
        w, g, m = randn(rng, n), randn(rng, n), randn(rng, n, scale=0.1)
        wv, mv = pr.Variable(w), pr.Variable(m, trainable=False)
        _C.call("sgd_momentum_update", wv, g, mv, f32(0.05), momentum=0.9, nesterov=True,
                weight_decay=1e-3)
        w64 = w - w * 1e-3 * 0.05
        m64 = m * 0.9 - g * np.float64(0.05)
        close(wv.numpy(), w64 + m64 * 0.9 - g * np.float64(0.05), 1e-6, 1e-7, f"sgd w {n}")
        close(mv.numpy(), m64, 1e-6, 1e-7, f"sgd velocity {n}")
        wv, mv, vv = pr.Variable(w), pr.Variable(m, trainable=False), pr.Variable(
            np.abs(m), trainable=False)
        _C.call("adam_update", wv, g, mv, vv, pr.Variable(np.zeros(0, f32)), f32(0.01),
                np.int64(2), weight_decay=1e-3)
        m64 = m + (g - np.float64(m)) * 0.1
        v64 = np.abs(m) + (np.float64(g) ** 2 - np.abs(m)) * 0.001
        alpha = 0.01 * np.sqrt(1 - 0.999 ** 3) / (1 - 0.9 ** 3)
        close(wv.numpy(), w - w * 1e-3 * 0.01 - m64 * alpha / (np.sqrt(v64) + 1e-7), 1e-6, 1e-6,
              f"adam w {n}")
        wv, vv, e = pr.Variable(w), pr.Variable(np.abs(m), trainable=False), np.zeros(0, f32)
        _C.call("rmsprop_update", wv, g, vv, pr.Variable(e), pr.Variable(e), f32(0.01))
        v64 = 0.9 * np.abs(m) + 0.1 * np.float64(g) ** 2
        close(wv.numpy(), w - 0.01 * g / np.sqrt(v64 + 1e-7), 1e-6, 1e-6, f"rmsprop w {n}")


def _jit_chain(n_ops, n_inputs, size, rng):
    """A jit-fused chain: ((x0 + x1) * x2 - ...) with relu, over n_ops ops."""
    xs = [randn(rng, size) for _ in range(n_inputs)]

    def chain(*args):
        y = args[0]
        for i in range(1, n_ops + 1):
            a = args[i % n_inputs]
            y = pr.ops.relu(y) if i % 5 == 0 else (y + a if i % 2 else y * a * 0.5)
        return y

    def ref(*args):
        y = args[0].astype(np.float64)
        for i in range(1, n_ops + 1):
            a = args[i % n_inputs]
            y = np.maximum(y, 0) if i % 5 == 0 else (y + a if i % 2 else y * a * 0.5)
        return y

    got = pr.compile(chain, jit_compile=True)(*xs)
    close(got, ref(*xs), 1e-5, 1e-5, f"jit chain {n_ops} ops {n_inputs} inputs size {size}")


def fused_block(rng):
    """fused.c BLOCK = 512 elements per register block."""
    for size in around(512) + around(1024):
        _jit_chain(6, 3, size, rng)


def fused_parallel(rng):
    """fused.c PARALLEL_MIN = 32768 elements."""
    for size in around(32768):
        _jit_chain(6, 3, size, rng)


def fused_max_instr(rng):
    """fused.h PR_FUSED_MAX_INSTR = 24 instructions per fused node."""
    for n_ops in around(24) + (48,):
        _jit_chain(n_ops, 3, 1000, rng)


def fused_max_in(rng):
    """fused.h PR_FUSED_MAX_IN = 8 inputs per fused node."""
    for n_inputs in around(8):
        _jit_chain(2 * n_inputs + 1, n_inputs, 700, rng)


def pool_channel_block(rng):
    """pool.c CBLOCK = 64 channels per max-pool backward block."""
    for c in around(64) + around(128):
        shape = (2, 5, 5, c)
        x = (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.01 - 1.0).astype(f32)
        dy = randn(rng, 2, 3, 3, c)
        for same in (False, True):
            attrs = {"pool_size": [3], "strides": [2], "same": same}
            out = pool_ref(x.astype(np.float64), (3, 3), (2, 2), same, "max")
            close(_C.call("max_pool2d", x, **attrs), out, 0, 0, f"max pool c={c}")
            dyc = dy[:, :out.shape[1], :out.shape[2]]
            close(_C.call("max_pool2d_backward", x, np.ascontiguousarray(dyc), **attrs),
                  max_pool_grad_ref(x.astype(np.float64), dyc.astype(np.float64), (3, 3), (2, 2),
                                    same), 1e-6, 1e-6, f"max pool backward c={c} same={same}")
            close(_C.call("avg_pool2d", x, **attrs),
                  pool_ref(x.astype(np.float64), (3, 3), (2, 2), same, "avg"), 1e-6, 1e-6,
                  f"avg pool c={c}")


def max_pool_2x2_lanes(rng):
    """pool.c HAVE_2X2_AVX512: MaxPooling2D(2)'s backward pass 16 channels at
    a time, the rest by the general loop: channels 1, 15, 16, 17, 33, odd
    sizes (a row and a column no window covers), float32 and bfloat16, with
    ties (the first maximum wins) and NaNs (the first NaN wins), against
    float64; forward too."""
    import ml_dtypes
    for c in (1, 15, 16, 17, 33):
        shape = (2, 5, 7, c)
        x = np.round(randn(rng, *shape), 1)  # (ties within windows)
        x.flat[rng.choice(x.size, x.size // 20, replace=False)] = np.nan
        dy = randn(rng, 2, 2, 3, c)
        attrs = {"pool_size": [2], "strides": [2], "same": False}
        for dt in (np.float32, ml_dtypes.bfloat16):
            xd, dyd = x.astype(dt), dy.astype(dt)
            x64, dy64 = xd.astype(np.float64), dyd.astype(np.float64)
            got = np.asarray(_C.call("max_pool2d_backward", xd, dyd, **attrs)).astype(np.float64)
            want = max_pool_grad_ref(x64, dy64, (2, 2), (2, 2), False)
            close(got, want, 0, 0, f"max pool backward 2x2 c={c} {np.dtype(dt).name}")
            got = np.asarray(_C.call("max_pool2d", xd, **attrs)).astype(np.float64)
            np.testing.assert_array_equal(got, pool_ref(x64, (2, 2), (2, 2), False, "max"),
                                          err_msg=f"max pool 2x2 c={c} {np.dtype(dt).name}")


def augment_parallel(rng):
    """augment.c PARALLEL_MIN = 32768 values (n h w c): flip, crop, affine,
    contrast (per-thread sums); normalize's blocks of 4096 pixels, with the
    RGB and the general channel paths."""
    for n in around(32768 // 16):  # 16 values per image: 32752, 32768, 32784
        x = rng.integers(0, 256, (n, 2, 2, 4), dtype=np.uint8)
        state = pr.ops.augment.rng_state(3)
        y, flags = pr.ops.augment.random_flip(x, state, "horizontal_and_vertical",
                                              return_params=True)
        want = np.stack([xi[::-1 if fv else 1, ::-1 if fh else 1]
                         for xi, (fh, fv) in zip(x, flags.numpy())])
        close(y.numpy(), want, 0, 0, f"flip n={n}")
        y, off = pr.ops.augment.random_crop(x, state, 2, padding=1, return_params=True)
        padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        want = np.stack([p[oy:oy + 2, ox:ox + 2] for p, (oy, ox) in zip(padded, off.numpy())])
        close(y.numpy(), want, 0, 0, f"crop n={n}")
        t = (np.array([1, 0, 0, 0, 1, 0, 0, 0], f32) + rng.normal(0, 0.5, (n, 8))
             * [1, 1, 1, 1, 1, 1, 0, 0]).astype(f32)
        close(pr.ops.augment.affine_transform(x, t, "bilinear", "reflect"),
              affine_reference(x, t, 1, 2, 0.0), 1e-5, 2e-3, f"affine n={n}")
        y, f = pr.ops.augment.random_contrast(x, state, (0.5, 1.5), return_params=True)
        close(y, contrast_reference(x, f.numpy(), 0, 255), 1e-5, 1e-3, f"contrast n={n}")
    for pixels in around(4096) + around(32768 // 3 + 1):
        for c in (3, 1, 5):
            x = rng.integers(0, 256, (pixels, 1, 1, c), dtype=np.uint8)
            mean, var = rng.uniform(50, 200, c).astype(f32), rng.uniform(10, 5000, c).astype(f32)
            close(pr.ops.augment.normalize_channels(x, mean, var),
                  (x - mean.astype(np.float64)) / np.sqrt(var.astype(np.float64)), 1e-6, 1e-5,
                  f"normalize pixels={pixels} c={c}")


def allocator_cache(rng):
    """common.c CACHE_MIN = 256 KiB: freed blocks from this size are reused
    (dirty); outputs of that size must still be exactly the op's values."""
    for n in around((256 << 10) // 4):  # float32 elements of 256 KiB - 4, 256 KiB, + 4
        for _ in range(3):  # free dirty blocks of this size, then reuse them
            junk = _C.call("exp", np.full(n, 100.0, f32))  # inf everywhere
            del junk
            a, b = randn(rng, n), randn(rng, n)
            close(_C.call("add", a, b), a.astype(np.float64) + b, 1e-6, 1e-6, f"add after reuse {n}")
            close(_C.call("zeros_like", a), np.zeros(n), 0, 0, f"zeros_like after reuse {n}")
            close(_C.call("sum_to_shape", randn(rng, 2, n // 2), shape=[n // 2]).numpy().shape,
                  (n // 2,), 0, 0, "sum_to_shape shape")


def max_dims(rng):
    """kernels.h PR_MAX_DIMS = 8: ranks 7 and 8 work, rank 9 is refused clearly."""
    for rank in (7, 8):
        shape = (2, 1, 3, 1, 2, 1, 3, 2)[:rank]
        a, b = randn(rng, *shape), randn(rng, *shape[1:])
        close(_C.call("add", a, b), a.astype(np.float64) + b, 1e-6, 1e-6, f"rank {rank}")
        close(_C.call("sum", a, axes=[1, 3], keepdims=True),
              a.astype(np.float64).sum((1, 3), keepdims=True), 1e-6, 1e-6, f"sum rank {rank}")
    with pytest.raises(ValueError, match="rank|dimensions"):
        _C.call("add", np.ones((1,) * 9, f32), np.ones((1,) * 9, f32))


def _grouped_passes(rng, variant, xs, ks, s, what):
    """The three passes of a 2-group convolution ('same', stride s) against
    NumPy per group, through `variant` where this CPU runs it."""
    from op_table import _grouped_bpf_ref, _grouped_bpi_ref, _grouped_conv_ref
    runs = dict(_C.op_variants("conv2d"))[variant] and not _C.cpu_info()["reference_only"]
    x, w = randn(rng, *xs), randn(rng, *ks)
    attrs = {"strides": [s, s], "same": True, "groups": 2}

    def call(op, a, b, **more):
        if runs:
            return _C.run_variant(op, variant, a, b, **attrs, **more)
        return _C.call(op, a, b, **attrs, **more)

    y = _grouped_conv_ref(x.astype(np.float64), w.astype(np.float64), [s], True, 2)
    close(call("conv2d", x, w), y, 1e-4, 1e-4, f"{what} conv2d")
    dy = randn(rng, *y.shape)
    close(call("conv2d_backprop_input", dy, w, shape=list(xs)),
          _grouped_bpi_ref(dy.astype(np.float64), w.astype(np.float64), [s], True, xs, 2),
          1e-4, 1e-4, f"{what} backprop_input")
    close(call("conv2d_backprop_filter", x, dy, shape=list(ks)),
          _grouped_bpf_ref(x.astype(np.float64), dy.astype(np.float64), [s], True, list(ks), 2),
          1e-4, 2e-4, f"{what} backprop_filter")


def grouped_chunks(rng):
    """avx512_grouped and avx2_grouped: 119/120/121 output pixels (CHUNK 120
    a table; tiles of FT_W1 = 8 rows (AVX2) or PAIR_ACC = 24 (AVX-512) and
    their remainders) and 15/16/17 images (MAX_STRIPES 16), group width 8
    at strides 1 and 2, the three passes against NumPy per group."""
    for variant in ("avx512_grouped", "avx2_grouped"):
        for xs, s in (((1, 7, 17, 16), 1), ((1, 10, 12, 16), 1), ((1, 11, 11, 16), 1),
                      ((15, 2, 3, 16), 1), ((16, 3, 3, 16), 2), ((17, 2, 2, 16), 1),
                      ((1, 5, 5, 16), 1), ((1, 5, 6, 16), 1)):
            _grouped_passes(rng, variant, xs, (3, 3, 8, 16), s, f"{variant} {xs} s{s}")


def grouped_tile_kinds(rng):
    """The forward / input-gradient tile kinds of avx512_grouped and
    avx2_grouped (KIND0-KIND6: 8 channels a group with 9 taps, with the 4, 2
    and 1 taps of a stride-2 3x3 input gradient's phases, with 25 taps
    (5x5); 16 channels a group; 12, and for the AVX2 tiles 7, channel by
    channel), the three passes against NumPy per group."""
    for v in ("avx512_grouped", "avx2_grouped"):
        for cg, k, s in ((8, 3, 1), (8, 3, 2), (8, 5, 1), (16, 3, 2), (12, 3, 1), (12, 3, 2)):
            _grouped_passes(rng, v, (2, 7, 9, 2 * cg), (k, k, cg, 2 * cg), s,
                            f"{v} cg {cg} {k}x{k} s{s}")
    _grouped_passes(rng, "avx2_grouped", (2, 7, 9, 14), (3, 3, 7, 14), 2, "avx2_grouped cg 7")


def grouped_filter_tiles(rng):
    """avx2_grouped's filter-gradient tiles (CT_TT = 3 taps x CT_OO = 4
    output channels of vectors over 8 input channels): windows of 1, 4, 9
    and 25 taps (3-tap steps and their remainders), 3, 4, 5 and 8 output
    channels a group (4-channel steps and remainders), 5 and 8 input
    channels (a partial vector), the three passes against NumPy per group."""
    for k, og, cg in ((1, 3, 8), (2, 4, 5), (3, 5, 8), (3, 8, 5), (5, 4, 8), (3, 3, 8)):
        _grouped_passes(rng, "avx2_grouped", (3, 5, 6, 2 * cg), (k, k, cg, 2 * og), 1,
                        f"avx2_grouped {k}x{k} cg {cg} og {og}")


def _pointwise_runs():
    """Whether avx2_pointwise runs here (AVX2 and FMA, no AVX-512)."""
    info = _C.cpu_info()
    return dict(_C.op_variants("conv2d"))["avx2_pointwise"] and not info["reference_only"] \
        and "avx512f" not in info["features"]


def pointwise_tiles(rng):
    """avx2_pointwise (1x1 at stride 1): 23/24/25 and 49 output (and, in the
    input gradient, input) channels (PANEL = 24 columns a packed panel),
    47/48/49 and 97 pixels (ROW_BLOCK = 48 rows a thread's block), and
    3071/3072/3073 pixels of 8 + 8 channels (PIXEL_BYTES = 192 KiB of x and
    dy a block of the filter gradient: 3072 pixels), 127 and 128 input
    channels (FORWARD_MAX_C: the forward pass from 128 is sgemm's), the three
    passes against NumPy (through the default kernels where it does not run)."""
    v = "avx2_pointwise" if _pointwise_runs() else None
    for c, o in ((23, 24), (24, 25), (25, 23), (49, 5)):
        _conv_all_passes(rng, (1, 3, 5, c), (1, 1, c, o), 1, True, f"pointwise {c}->{o}", v)
    for pixels in (47, 48, 49, 97):
        _conv_all_passes(rng, (1, 1, pixels, 9), (1, 1, 9, 17), 1, True,
                         f"pointwise {pixels} pixels", v)
    for pixels in (3071, 3072, 3073):
        _conv_all_passes(rng, (1, 1, pixels, 8), (1, 1, 8, 8), 1, False,
                         f"pointwise {pixels} pixels of 8 + 8 channels", v)
    # FORWARD_MAX_C = 128: the forward pass runs here below 128 input channels, sgemm from
    # 128 (the other passes at any count); the values through the default kernels either way
    for c in (127, 128):
        _conv_all_passes(rng, (1, 2, 3, c), (1, 1, c, 9), 1, True, f"pointwise {c}->9", None)
        x, k = randn(rng, 1, 2, 3, c), randn(rng, 1, 1, c, 9)
        if v and c >= 128:
            with pytest.raises(ValueError, match="cannot run"):
                _C.run_variant("conv2d", v, x, k, same=True)
        elif v:
            close(_C.run_variant("conv2d", v, x, k, same=True),
                  conv_ref(x.astype(np.float64), k.astype(np.float64), (1, 1), True), 1e-4, 1e-4,
                  f"pointwise forward {c} input channels")


def _grouped_dp_bf16_passes(rng, xs, ks, s, groups, what):
    """avx512_grouped_dp_bf16's forward and input gradient (bfloat16 operands
    and outputs) against NumPy per group on the rounded operands: within
    float32 summation plus the output's one rounding (2^-8 relative); where
    the CPU lacks AVX512_BF16 (or kernels are reference-only) the variant
    must say it cannot run."""
    import ml_dtypes
    from op_table import _grouped_bpi_ref, _grouped_conv_ref
    bf16, v = ml_dtypes.bfloat16, "avx512_grouped_dp_bf16"
    runs = dict(_C.op_variants("conv2d"))[v] and not _C.cpu_info()["reference_only"]
    x, w = randn(rng, *xs).astype(bf16), randn(rng, *ks).astype(bf16)
    attrs = {"strides": [s, s], "same": True, "groups": groups}
    if not runs:
        with pytest.raises(ValueError, match=f"kernel variant '{v}' cannot run"):
            _C.run_variant("conv2d", v, x, w, **attrs)
        return
    y = _grouped_conv_ref(x.astype(np.float64), w.astype(np.float64), [s], True, groups)
    got = _C.run_variant("conv2d", v, x, w, **attrs).numpy()
    assert got.dtype == bf16
    close(got.astype(np.float64), y, 2 ** -8, 1e-3, f"{what} conv2d")
    dy = randn(rng, *y.shape).astype(bf16)
    got = _C.run_variant("conv2d_backprop_input", v, dy, w, shape=list(xs), **attrs).numpy()
    close(got.astype(np.float64),
          _grouped_bpi_ref(dy.astype(np.float64), w.astype(np.float64), [s], True, xs, groups),
          2 ** -8, 1e-3, f"{what} backprop_input")


def grouped_dp_bf16_tile_kinds(rng):
    """avx512_grouped_dp_bf16's tile kinds (DKIND0-DKIND6: 8 channels a group
    in two steps of 4 with 9 taps, with the 4, 2 and 1 taps of a stride-2 3x3
    input gradient's phases, with 25 taps (5x5); 16 channels (steps of 8);
    4, 12 and 20 (steps of 4)), the row tiles of PAIR_ACC = 24 pixels (one
    block of 8 output channels) and 11 (two) around their edges, and CHUNK
    120 +- 1 pixels, forward and input gradient against NumPy per group."""
    cases = [((2, 7, 9, 16), (3, 3, 8, 16), 1), ((2, 7, 9, 16), (3, 3, 8, 16), 2),
             ((2, 7, 9, 16), (5, 5, 8, 16), 1), ((2, 7, 9, 32), (3, 3, 16, 32), 2),
             ((2, 7, 9, 24), (3, 3, 12, 24), 1), ((2, 7, 9, 8), (3, 3, 4, 24), 2),
             ((1, 5, 5, 40), (3, 3, 20, 8), 1), ((1, 1, 24, 16), (3, 3, 8, 8), 1),
             ((1, 1, 25, 16), (3, 3, 8, 8), 1), ((1, 1, 23, 16), (3, 3, 8, 24), 1),
             ((1, 1, 11, 16), (3, 3, 8, 32), 1), ((1, 1, 12, 16), (3, 3, 8, 32), 1),
             ((1, 7, 17, 16), (3, 3, 8, 16), 1), ((1, 10, 12, 16), (3, 3, 8, 16), 1),
             ((11, 1, 11, 16), (3, 3, 8, 16), 1)]
    for xs, ks, s in cases:
        _grouped_dp_bf16_passes(rng, xs, ks, s, 2, f"avx512_grouped_dp_bf16 {xs} {ks} s{s}")


def _conv_all_passes(rng, xs, ks, strides, same, what, variant=None):
    """The three passes against NumPy, through the default kernels, or
    through `variant` where this CPU runs it (avx2_direct: any CPU with AVX2
    and FMA, AVX-512 ones too)."""
    x, k = randn(rng, *xs), randn(rng, *ks)
    st = tuple(strides) if isinstance(strides, tuple) else (strides, strides)
    y = conv_ref(x.astype(np.float64), k.astype(np.float64), st, same)
    attrs = {"strides": list(st), "same": same}
    runs = variant and dict(_C.op_variants("conv2d"))[variant] and \
        not _C.cpu_info()["reference_only"]

    def call(op, a, b, **more):
        if runs:
            return _C.run_variant(op, variant, a, b, **attrs, **more)
        return _C.call(op, a, b, **attrs, **more)

    close(call("conv2d", x, k), y, 1e-4, 1e-4, f"conv2d {what}")
    dy = randn(rng, *y.shape)
    close(call("conv2d_backprop_input", dy, k, shape=list(xs)),
          conv_bpi_ref(dy.astype(np.float64), k.astype(np.float64), xs, st, same), 1e-4, 1e-4,
          f"backprop_input {what}")
    close(call("conv2d_backprop_filter", x, dy, shape=list(ks)),
          conv_bpf_ref(x.astype(np.float64), dy.astype(np.float64), ks, st, same), 1e-4, 2e-4,
          f"backprop_filter {what}")


def conv_small_mnk(rng):
    """conv.c SMALL_MNK = 1e6: M N K of the im2col GEMM (M = n ho wo,
    K = kh kw c, N = o) below it run as one GEMM, above it blocked."""
    for c, o in ((37, 27), (40, 25), (11, 91)):  # 999,000 / 1,000,000 / 1,001,000
        _conv_all_passes(rng, (10, 10, 10, c), (1, 1, c, o), 1, True, f"1x1 M=1000 c={c} o={o}")


def conv_block_bytes(rng):
    """conv.c BLOCK_BYTES = 128 KiB of im2col rows per block: rows of K
    floats, so 32768 / K rows; images of that many pixels and one more."""
    k = 9 * 16
    rows = (128 << 10) // (4 * k)  # 227 pixels per block
    for width in (rows - 1, rows, rows + 1):
        _conv_all_passes(rng, (1, 1, width, 16), (3, 3, 16, 4), 1, True, f"width {width}")


def conv_pointwise_rows(rng):
    """conv.c PW_ROWS = 128: a pointwise (1x1, stride 1) conv whose
    SMALL_MNK blocks would be shorter (96 x 96 channels: 108 rows) takes
    blocks of 128 rows of the (n h w, c) matrix, across images; 127, 128,
    129 and 257 rows."""
    for n, w in ((1, 127), (2, 64), (1, 129), (1, 257)):
        _conv_all_passes(rng, (n, 1, w, 96), (1, 1, 96, 96), 1, True, f"1x1 M={n * w}")


def conv_direct_window_stride(rng):
    """conv_direct_geom.h MAX_WINDOW = 7 and MAX_STRIDE = 4: larger windows and
    strides go to the reference kernel."""
    for win in around(7):
        _conv_all_passes(rng, (1, 9, 10, 16), (win, win, 16, 16), 1, True, f"window {win}")
    for s in around(4):
        _conv_all_passes(rng, (1, 13, 14, 16), (3, 3, 16, 16), s, True, f"stride {s}")


def conv_direct_tiles(rng):
    """conv_direct_tiles.h MAX_TILE = 24 (and MAX_TILE3_NB1) output pixels per
    tile, float32 and bfloat16 (avx512_direct_bf16): output widths 23, 24,
    25, 47, 48, 49; and the bfloat16 weight gradient's tiles of MAX_TILE
    accumulators (bf16_direct_filter_tiles)."""
    for width in around(24) + around(48):
        _conv_all_passes(rng, (1, 3, width, 16), (3, 3, 16, 16), 1, True, f"width {width}")
        _bf16_conv_all_passes(rng, (1, 3, width, 16), (3, 3, 16, 16), 1, True,
                              f"bfloat16 width {width}", "avx512_direct_bf16")
    bf16_direct_filter_tiles(rng)


def conv_direct_channel_blocks(rng):
    """conv_direct_tiles.h MAX_NB = 4 and MAX_NB3 = 2 blocks of 16 output
    channels per tile; 16-channel input blocks (16 pairs in bfloat16): c and
    o at 15..17, 31..33, 63..65, float32 and bfloat16."""
    for o in around(32) + around(64):
        _conv_all_passes(rng, (1, 4, 9, 16), (3, 3, 16, o), 1, True, f"o={o}")
        _bf16_conv_all_passes(rng, (1, 4, 9, 16), (3, 3, 16, o), 1, True, f"bfloat16 o={o}",
                              "avx512_direct_bf16")
    for c in around(16) + around(32) + around(64):
        _conv_all_passes(rng, (1, 4, 9, c), (3, 3, c, 16), 1, True, f"c={c}")
        _bf16_conv_all_passes(rng, (1, 4, 9, c), (3, 3, c, 16), 1, True, f"bfloat16 c={c}",
                              "avx512_direct_bf16")


def conv_direct_filter3_channels(rng):
    """conv_direct.c FT3_CT = 8 input channels per weight-gradient tile of
    windows three taps wide (one block of output channels): c of 7, 8, 9
    and 15, 16, 17, output channels 1, 13 and 16, horizontal strides 1 and 2
    (and 2 down, 1 across), both paddings, widths 1 to 5 (every group an
    edge group) and 12."""
    for c in around(8) + around(16):
        _conv_all_passes(rng, (2, 5, 12, c), (3, 3, c, 16), 1, True, f"c={c}")
    for o in (1, 13, 16):
        for strides in (1, 2, (2, 1), (1, 2)):
            for same in (True, False):
                for width in (1, 2, 3, 4, 5, 12):
                    if not same and width < 3:
                        continue
                    _conv_all_passes(rng, (2, 4, width, 9), (3, 3, 9, o), strides, same,
                                     f"o={o} strides {strides} same={same} width {width}")


def avx2_direct_tiles(rng):
    """conv_direct_avx2.c MAX_TILE = 12 accumulators (11 pixels per tile for
    windows three taps wide, 12 otherwise; CT = 12 input channels per
    weight-gradient tile of one output block): output widths 10-13 and
    21-25, 3x3 and 2x2 windows; input channels 11, 12, 13, 23, 24, 25."""
    for width in (10, 11, 12, 13, 21, 22, 23, 24, 25):
        for kw in (3, 2):
            _conv_all_passes(rng, (1, 3, width, 5), (kw, kw, 5, 9), 1, True,
                             f"avx2 width {width} window {kw}", "avx2_direct")
    for c in (11, 12, 13, 23, 24, 25):
        _conv_all_passes(rng, (2, 4, 5, c), (2, 2, c, 8), 1, True, f"avx2 c={c}", "avx2_direct")


def avx2_direct_channel_blocks(rng):
    """conv_direct_avx2.c MAX_NB = 2 blocks of 8 output channels per
    weight-gradient tile (6 input channels each); 8-channel blocks of the
    forward and input-gradient tiles: c and o of 7, 8, 9, 15, 16, 17, 31,
    32, 33."""
    for n in (7, 8, 9, 15, 16, 17, 31, 32, 33):
        _conv_all_passes(rng, (1, 4, 6, 5), (3, 3, 5, n), 1, True, f"avx2 o={n}", "avx2_direct")
        _conv_all_passes(rng, (1, 4, 6, n), (3, 3, n, 12), 2, True, f"avx2 c={n}", "avx2_direct")


def avx2_direct_filter3_channels(rng):
    """conv_direct_avx2.c FT3_CT = 4 input channels per weight-gradient tile
    of windows three taps wide with one block of output channels (O <= 8):
    c of 3, 4, 5, 7, 8, 9, output channels 1, 5 and 8, horizontal strides 1
    and 2, both paddings, widths 1 to 5 (every group an edge group) and 12."""
    for c in (3, 4, 5, 7, 8, 9):
        _conv_all_passes(rng, (2, 5, 12, c), (3, 3, c, 8), 1, True, f"avx2 c={c}", "avx2_direct")
    for o in (1, 5, 8):
        for strides in (1, 2, (2, 1), (1, 2)):
            for same in (True, False):
                for width in (1, 2, 3, 4, 5, 12):
                    if not same and width < 3:
                        continue
                    _conv_all_passes(rng, (2, 4, width, 5), (3, 3, 5, o), strides, same,
                                     f"avx2 o={o} strides {strides} same={same} width {width}",
                                     "avx2_direct")


def avx2_direct_weight_bytes(rng):
    """conv_direct_avx2.c TILE_WEIGHT_BYTES = 24 KiB: the channel chunk
    whose weights fit, 9 taps x c x 8 x 4 bytes per output block, in
    multiples of 8 channels: 80; c of 79, 80, 81, 160, 161."""
    for c in (79, 80, 81, 160, 161):
        _conv_all_passes(rng, (1, 3, 6, c), (3, 3, c, 9), 1, True, f"avx2 c={c}", "avx2_direct")


def avx2_direct_image_groups(rng):
    """conv_direct_avx2.c MAX_IMAGE_GROUP = 16 images per forward /
    input-gradient group (and IMAGE_GROUP_BYTES = 160 KiB of their padded
    inputs): 3x3 images of 8 channels, whose groups the count caps, in
    batches of 15, 16, 17 and 33 (a full group, a partial last one); and
    16 x 16 images of 64 channels (82 KiB padded: one image a group)."""
    for n in (15, 16, 17, 33):
        _conv_all_passes(rng, (n, 3, 3, 8), (3, 3, 8, 8), 1, True, f"avx2 batch {n}",
                         "avx2_direct")
    _conv_all_passes(rng, (3, 16, 16, 64), (3, 3, 64, 8), 1, True, "avx2 one image a group",
                     "avx2_direct")


def avx2_direct_block_groups(rng):
    """conv_direct_avx2.c MAX_NB_FW = 3 blocks of 8 output channels per
    forward / input-gradient tile (the stride-2 windows' tiles share a
    broadcast among them; the last group of a row may be smaller): o and c
    of 16, 17, 24, 25, 33 at strides 2 and 1; and the weight gradient's
    repacked groups of images (c = 32, o = 64 on small images, a batch of 5
    split into groups)."""
    for n in (16, 17, 24, 25, 33):
        for strides in (2, 1):
            _conv_all_passes(rng, (2, 6, 13, 5), (3, 3, 5, n), strides, True,
                             f"avx2 o={n} strides {strides}", "avx2_direct")
            _conv_all_passes(rng, (2, 6, 13, n), (3, 3, n, 9), strides, True,
                             f"avx2 c={n} strides {strides}", "avx2_direct")
    _conv_all_passes(rng, (5, 8, 8, 32), (3, 3, 32, 64), 2, True, "avx2 packed groups",
                     "avx2_direct")


def allocator_huge_pages(rng):
    """common.c HUGE_MIN = 4 MiB: a compiled graph's arena from this size is
    2 MiB-aligned and advised to use huge pages (HUGE_PAGE); arenas of
    4 MiB - 64, 4 MiB and 4 MiB + 64 bytes, each run twice (fresh, then
    pooled), give the op's values."""
    def chain(x):
        return pr.ops.relu(x * 2.0 + 1.0) * 3.0  # in place: one arena buffer

    for n in ((4 << 20) // 4 - 16, (4 << 20) // 4, (4 << 20) // 4 + 16):
        x = randn(rng, n)
        f = pr.compile(chain)
        assert f.get_concrete_function(x).memory["arena_bytes"] == 4 * n, n
        want = np.maximum(x.astype(np.float64) * 2 + 1, 0) * 3
        for _ in range(2):
            close(f(x), want, 1e-6, 1e-6, f"arena of {4 * n} bytes")


def conv_direct_weight_bytes(rng):
    """conv_direct_tiles.h TILE_WEIGHT_BYTES = 24 KiB: the channel chunk whose
    weights fit, 9 taps x c x 16 x 4 bytes per output block: c of 42, 43;
    in bfloat16 a unit holds two channels (chunks of 16 units at 32 output
    channels: c of 31..33, 63..65)."""
    for c in (42, 43, 44, 85, 86):  # 24 KiB / 576 B = 42.7; twice that 85.3
        _conv_all_passes(rng, (1, 3, 8, c), (3, 3, c, 32), 1, True, f"c={c}")
    for c in around(32) + around(64):
        _bf16_conv_all_passes(rng, (1, 3, 8, c), (3, 3, c, 32), 1, True, f"bfloat16 c={c}",
                              "avx512_direct_bf16")


def bf16_direct_filter_stripes(rng):
    """conv_direct_bf16.c STRIPE_BYTES = 1 MiB of partial filter gradients:
    16 stripes up to 64 KiB of gradient (9 x c x o x 4 bytes), fewer above,
    at least 4 from 256 KiB: (c, o) of (40, 45) and (41, 45) around 16, (80,
    91) and (81, 91) around the floor of 4, at batch 17 (more images than
    stripes)."""
    for c, o in ((40, 45), (41, 45), (80, 91), (81, 91)):
        _bf16_conv_all_passes(rng, (17, 3, 4, c), (3, 3, c, o), 1, True, f"c={c} o={o}",
                              "avx512_direct_bf16")


def bf16_direct_filter_tiles(rng):
    """conv_direct_tiles.h MAX_TILE = 24 accumulators and MAX_NB = 4 blocks
    of 16 output channels per weight-gradient tile of conv_direct_bf16.c (24 /
    blocks input channels):
    c of 23..25 with 16 output channels, 11..13 with 32, o of 63..65; odd
    and even output widths (pairs of pixels), strides 1 and 2."""
    for c, o in [(c, 16) for c in around(24)] + [(c, 32) for c in around(12)] + \
            [(5, o) for o in around(64)]:
        for width, strides in ((9, 1), (8, 1), (9, 2), (12, 2)):
            _bf16_conv_all_passes(rng, (2, 3, width, c), (3, 3, c, o), strides, True,
                                  f"c={c} o={o} width {width} stride {strides}",
                                  "avx512_direct_bf16")


def bf16_direct_filter_sets(rng):
    """conv_direct_bf16.c FEW_ACC = 4 and SOME_ACC = 8 accumulators: weight-
    gradient tiles of at most 4 (8) accumulators sum consecutive pixel pairs
    into 4 (2) sets: input channels 3..5 and 7..9 at 16 output channels,
    rows of 3..5 and 8..9 pairs (odd widths too), strides 1 and 2, the
    output gradient in bfloat16 and in float32 (both pairing paths)."""
    import ml_dtypes
    for c in around(4) + around(8):
        for width, strides in ((6, 1), (8, 1), (9, 1), (10, 1), (17, 1), (18, 2), (19, 2)):
            what = f"c={c} width {width} stride {strides}"
            _bf16_conv_all_passes(rng, (2, 3, width, c), (3, 3, c, 16), strides, True, what,
                                  "avx512_direct_bf16")
            x = randn(rng, 2, 3, width, c).astype(ml_dtypes.bfloat16)
            ho, wo = -(-3 // strides), -(-width // strides)
            dy = randn(rng, 2, ho, wo, 16).astype(ml_dtypes.bfloat16)
            want = conv_bpf_ref(x.astype(np.float64), dy.astype(np.float64), (3, 3, c, 16),
                                (strides, strides), True)
            got = _C.call("conv2d_backprop_filter", x, dy, strides=strides, same=True,
                          shape=[3, 3, c, 16])
            close(got, want, rtol=1e-4, atol=2e-3, what=f"{what}, bfloat16 dy")


def bf16_direct_patches(rng):
    """conv_direct_bf16.c PATCH_VALUES = 32: an odd channel count whose
    windows hold at most 32 values (a zmm of bfloat16) runs the filter
    gradient on patches (units over (tap, channel)), more values the
    channel units: windows of 28, 30 (one and two weight-gradient
    tiles) and 33, 35 values, around 32 (no window of 31 or 32 values has
    an odd channel count and more than one tap)."""
    for xs, ks, strides in (((2, 5, 6, 7), (2, 2, 7, 20), 1),      # 28
                            ((2, 6, 7, 5), (2, 3, 5, 16), 1),      # 30
                            ((2, 9, 10, 1), (5, 6, 1, 17), 2),     # 30, stride 2
                            ((2, 4, 9, 11), (1, 3, 11, 16), 1),    # 33
                            ((2, 9, 10, 1), (5, 7, 1, 16), 1)):    # 35
        _bf16_conv_all_passes(rng, xs, ks, strides, True,
                              f"{ks[0]}x{ks[1]}x{ks[2]} window stride {strides}",
                              "avx512_direct_bf16")


def bf16_direct_patch_tiles(rng):
    """conv_direct_bf16.c PATCH_PAIRS = 64 pixel pairs a weight-gradient
    chunk of the patches (pixels of an image row after row: 127, 128, 129
    and 255, 256, 257 output pixels, odd counts ending on a pair of one
    pixel): the 3-channel stem's window."""
    for h, w in ((1, 127), (8, 16), (1, 129), (5, 51), (16, 16), (1, 257)):
        _bf16_conv_all_passes(rng, (2, h, w, 3), (3, 3, 3, 16), 1, True, f"{h}x{w} pixels",
                              "avx512_direct_bf16")


def conv_direct_image_groups(rng):
    """conv_direct_geom.h TILE_GROUP_PIXELS = 64 and MAX_TILE_GROUP = 16:
    the AVX-512 forward and stride-1 input-gradient passes of windows three
    taps wide take images of fewer than 64 output pixels in groups of
    ceil(64 / pixels), at most 16 (and as many as fit TILE_GROUP_BYTES =
    384 KiB of padded inputs): 7x9, 8x8 and 5x13 images (63, 64, 65 pixels:
    groups of 2, then one image), 1x3 images (22 capped at 16) in batches of
    15, 16, 17 and 33, 2x2 images (16) at stride 2 and 1, and 3x3 images of
    504 channels (float32: 7 a group by the bytes) in a batch of 9."""
    cases = [((5, 7, 9, 6), 1), ((5, 8, 8, 6), 1), ((5, 5, 13, 6), 1),
             ((15, 1, 3, 6), 1), ((16, 1, 3, 6), 1), ((17, 1, 3, 6), 1), ((33, 1, 3, 6), 1),
             ((17, 4, 4, 6), 2), ((17, 2, 2, 6), 1), ((9, 3, 3, 504), 1)]
    for xs, strides in cases:
        what = f"{xs[0]} images of {xs[1]}x{xs[2]}x{xs[3]} stride {strides}"
        o = 8 if xs[3] > 64 else 20
        _conv_all_passes(rng, xs, (3, 3, xs[3], o), strides, True, what, "avx512_direct")
        _bf16_conv_all_passes(rng, xs, (3, 3, xs[3], o), strides, True, what,
                              "avx512_direct_bf16")


def conv_direct_filter_groups(rng):
    """conv_direct_geom.h TILE_PIXELS = 96 and MAX_GROUP = 16: the AVX-512
    weight gradients (avx512_direct past 16 output channels, and
    avx512_direct_bf16) sum ceil(96 / output pixels of an image) images per
    tile call, at most 16: images of 95, 96 and 97 pixels (groups of 2, 1,
    1), of 7, 6 and 5 pixels (14, 16, and 20 capped at 16) and of 1 pixel
    (96, capped), 3x3 images at strides 1 and 2 (11), at batches with more
    groups than stripes and a short last group."""
    for (n, h, w), strides in (((5, 1, 95), 1), ((5, 8, 12), 1), ((5, 1, 97), 1),
                               ((40, 1, 7), 1), ((40, 1, 6), 1), ((40, 1, 5), 1),
                               ((70, 1, 1), 1), ((37, 3, 3), 1), ((37, 5, 5), 2)):
        c = 5 if n > 5 else 17
        what = f"{n} images of {h}x{w} stride {strides}"
        _conv_all_passes(rng, (n, h, w, c), (3, 3, c, 20), strides, True, what,
                         "avx512_direct")
        _bf16_conv_all_passes(rng, (n, h, w, c), (3, 3, c, 20), strides, True, what,
                              "avx512_direct_bf16")


def conv_direct_image_tiles(rng):
    """conv_direct_tiles.h MAX_IMAGE_TILE = 4 images and IMAGE_TILE_WIDTH = 3
    pixels: rows of at most 3 pixels in a group of images take tiles of 4
    images' same row (the group's last images one by one): 2x2 images in
    batches of 3, 4, 5 and 9, rows of 2, 3 and 4 pixels (4x2, 3x3, 2x4) in
    a batch of 11, 40 output channels (a tile of 2 blocks and one of 1), a
    3x3 output at stride 2; both variants."""
    cases = [((3, 2, 2, 6), 1), ((4, 2, 2, 6), 1), ((5, 2, 2, 6), 1), ((9, 2, 2, 6), 1),
             ((11, 4, 2, 6), 1), ((11, 3, 3, 6), 1), ((11, 2, 4, 6), 1), ((11, 6, 6, 6), 2)]
    for xs, strides in cases:
        what = f"{xs[0]} images of {xs[1]}x{xs[2]} stride {strides}"
        _conv_all_passes(rng, xs, (3, 3, 6, 40), strides, True, what, "avx512_direct")
        _bf16_conv_all_passes(rng, xs, (3, 3, 6, 40), strides, True, what,
                              "avx512_direct_bf16")


def bf16_parallel(rng):
    """bf16.c PAR_MIN = 65536 elements: conversions split across threads
    from there; float32 -> bfloat16 against ml_dtypes (exact), and back, and
    the rounded operands of a bfloat16 matmul (the reference kernel's)."""
    import ml_dtypes
    for n in around(65536):
        x = randn(rng, n)
        b = pr.ops.cast(x, "bfloat16")
        np.testing.assert_array_equal(b.numpy().view(np.uint16),
                                      x.astype(ml_dtypes.bfloat16).view(np.uint16), err_msg=n)
        np.testing.assert_array_equal(pr.ops.cast(b, "float32").numpy(),
                                      x.astype(ml_dtypes.bfloat16).astype(f32), err_msg=n)
        a = x.reshape(1, n)
        got = pr.ops.matmul(a, a.T.astype(ml_dtypes.bfloat16))
        r = a.astype(ml_dtypes.bfloat16).astype(np.float64)
        close(got, r @ r.T, rtol=1e-4, what=f"matmul n={n}")


def _bf16_conv_all_passes(rng, xs, ks, strides, same, what, variant=None):
    """conv2d and its two backprop ops with a bfloat16 kernel / input, through
    `variant` when this CPU runs it (else the default kernel), against float64
    on the rounded operands."""
    import ml_dtypes
    st = (strides, strides)
    runs = variant and dict(_C.op_variants("conv2d")).get(variant) and \
        not _C.cpu_info()["reference_only"]

    def call(op, a, b, **attrs):
        if runs:
            return _C.run_variant(op, variant, a, b, strides=strides, same=same, **attrs)
        return _C.call(op, a, b, strides=strides, same=same, **attrs)

    x, k = randn(rng, *xs), randn(rng, *ks).astype(ml_dtypes.bfloat16)
    xr, kr = x.astype(ml_dtypes.bfloat16).astype(np.float64), k.astype(np.float64)
    y = call("conv2d", x, k)
    close(y, conv_ref(xr, kr, st, same), rtol=1e-4, atol=1e-4, what=f"{what} forward")
    dy = randn(rng, *y.shape)
    dyr = dy.astype(ml_dtypes.bfloat16).astype(np.float64)
    dx = call("conv2d_backprop_input", dy, k, shape=list(xs))
    close(dx, conv_bpi_ref(dyr, kr, xs, st, same), rtol=1e-4, atol=1e-4, what=f"{what} bpi")
    dw = call("conv2d_backprop_filter", x.astype(ml_dtypes.bfloat16), dy, shape=list(ks))
    close(dw, conv_bpf_ref(xr, dyr, ks, st, same), rtol=1e-4, atol=2e-3, what=f"{what} bpf")


def bf16_blocks(rng):
    """gemm_bf16.c MB = 32 rows per block (and K padded to 32, N to 16 and
    column pairs of 32): bfloat16 matmuls of M, K, N around those, and a
    convolution with 31, 32, 33 output pixels."""
    import ml_dtypes
    for m in around(32) + around(64):
        for k, n in ((31, 15), (32, 16), (33, 17), (64, 31), (64, 33)):
            a, b = randn(rng, m, k), randn(rng, k, n).astype(ml_dtypes.bfloat16)
            want = a.astype(ml_dtypes.bfloat16).astype(np.float64) @ b.astype(np.float64)
            close(pr.ops.matmul(a, b), want, rtol=1e-4, atol=1e-4, what=f"{m}x{k}x{n}")
    for w in around(32):
        _bf16_conv_all_passes(rng, (1, 1, w, 3), (1, 3, 3, 16), 1, True, f"width {w}",
                              "amx_bf16")


def bf16_filter_chunks(rng):
    """conv_bf16.c CHUNK = 512 pixels per filter-gradient product, STRIPES = 8
    partial sums: N*HO*WO of 511, 512, 513 and 4095, 4096, 4097 (8 chunks)."""
    for n, h, w in ((1, 7, 73), (1, 16, 32), (1, 19, 27), (5, 21, 39), (1, 64, 64),
                    (1, 17, 241)):
        _bf16_conv_all_passes(rng, (n, h, w, 2), (3, 3, 2, 4), 1, True, f"{n}x{h}x{w}",
                              "amx_bf16")


def amx_direct_groups(rng):
    """conv_amx.c GROUP_POSITIONS = 1024 padded positions per filter-gradient
    group of images, SEGMENT = 16 K steps of 32 per pass over the output blocks,
    STRIPES = 8 partial sums, TILE_BYTES = 1024 (one packed B tile of 16
    output channels): 3x3 'same' convolutions whose images hold 1023, 1024,
    1025 positions ((H + 1) x (W + 1): rows and images share a zero column and
    row, conv_amx.c's wrapped_period; groups of one image) and 480, 512, 544
    (15, 16, 17 K steps); 9 and 10 groups (more than the stripes); 15, 17 and
    65 output channels (one, two and five blocks: pairs of blocks and a lone
    one)."""
    for n, h, w, o in ((2, 30, 32, 16), (2, 31, 31, 17), (2, 24, 40, 15), (1, 19, 23, 16),
                       (1, 15, 31, 16), (1, 16, 31, 65), (9, 22, 22, 16), (10, 22, 22, 17)):
        _bf16_conv_all_passes(rng, (n, h, w, 16), (3, 3, 16, o), 1, True,
                              f"{n}x{h}x{w} o{o}", "amx_direct_bf16")


# ---- the list of every constant --------------------------------------------------------

def array_parallel(rng):
    """array.c PARALLEL_MIN = 32768 elements: strided copies (transpose,
    slice), comparisons, where, casts, gathers and max/argmax reductions."""
    for rows in (4681, 2048, 10923):  # x 7, 16, 3 = 32767, 32768, 32769
        cols = {4681: 7, 2048: 16, 10923: 3}[rows]
        x = randn(rng, rows, cols)
        x64 = x.astype(np.float64)
        close(_C.call("transpose", x, perm=[1, 0]), x.T, 0, 0, f"transpose {rows}x{cols}")
        close(_C.call("strided_slice", x, begin=[rows - 1, 0], strides=[-1, 1],
                      size=[rows, -1]), x[::-1], 0, 0, f"reversed {rows}x{cols}")
        np.testing.assert_array_equal(_C.call("greater", x, 0.0).numpy(), x > 0)
        close(_C.call("where", x > 0, x, 0.0), np.where(x > 0, x, 0), 0, 0, f"where {rows}")
        np.testing.assert_array_equal(_C.call("cast", x * 10, dtype=1).numpy(),
                                      np.trunc(x * 10).astype(np.int32))
        idx = rng.integers(0, rows, rows)
        close(_C.call("take", x, idx, axis=0), x[idx], 0, 0, f"take {rows}")
        for axes in ([], [0], [1]):
            ax = axes[0] if axes else None
            close(_C.call("max", x, axes=axes, keepdims=False), x64.max(axis=ax), 0, 0,
                  f"max {rows}x{cols} {axes}")
            np.testing.assert_array_equal(_C.call("argmax", x, axes=axes, keepdims=False).numpy(),
                                          x.argmax(axis=ax))


def conv_grouped_parallel(rng):
    """conv_grouped.c PARALLEL_MIN = 4096 output (forward) or input
    (backprop_input) elements: grouped convolutions of 4095, 4096, 4097."""
    from test_ops_conv import conv_ref as ref
    for n, hw, c in ((1, 45, 2), (1, 32, 4), (1, 4097, 1)):  # 4050, 4096, 4097 values
        h, w = (hw, hw) if hw != 4097 else (1, 4097)
        x = randn(rng, n, h, w, c)
        k = randn(rng, 1, 1, 1, c)  # depthwise 1x1: groups = c
        want = np.concatenate([ref(x[..., g:g + 1].astype(np.float64), k[..., g:g + 1], (1, 1),
                                   False) for g in range(c)], -1)
        close(_C.call("conv2d", x, k, groups=c), want, 1e-6, 1e-6, f"grouped fw {x.shape}")
        close(_C.call("conv2d_backprop_input", x, k, groups=c, shape=list(x.shape)),
              x * k.reshape(-1), 1e-6, 1e-6, f"grouped bpi {x.shape}")


THRESHOLDS = {  # (file, constant) -> test function, or the reason it governs no size
    ("array.c", "PARALLEL_MIN"): array_parallel,
    ("conv_grouped.c", "PARALLEL_MIN"): conv_grouped_parallel,
    ("kernels.h", "PR_N_DTYPES"): "the number of tensor dtypes",
    ("augment.c", "PARALLEL_MIN"): augment_parallel,
    ("augment.c", "block = 4096"): augment_parallel,
    ("elementwise.c", "PARALLEL_MIN"): elementwise_parallel,
    ("elementwise.c", "GELU_BLOCK"): gelu_blocks,
    ("elementwise.c", "GELU_CHUNK"): gelu_blocks,
    ("elementwise.c", "GELU_INV_SQRT2"): "a formula constant (1/sqrt 2), not a size",
    ("elementwise.c", "GELU_INV_SQRT_2PI"): "a formula constant (1/sqrt(2 pi)), not a size",
    ("elementwise.c", "chunk = 16384"): elementwise_parallel,
    ("elementwise.c", "rows < 4"): elementwise_parallel,
    ("reduce.c", "PARALLEL_MIN"): reduce_parallel,
    ("norm.c", "MAX_CHUNKS"): norm_chunks,
    ("norm.c", "CB"): norm_channel_block,
    ("norm.c", "PARALLEL_MIN"): norm_parallel,
    ("loss.c", "PARALLEL_MIN"): loss_parallel,
    ("optim.c", "PARALLEL_MIN"): optim_parallel,
    ("fused.c", "BLOCK"): fused_block,
    ("fused.c", "PARALLEL_MIN"): fused_parallel,
    ("fused.h", "PR_FUSED_MAX_INSTR"): fused_max_instr,
    ("fused.h", "PR_FUSED_MAX_IN"): fused_max_in,
    ("pool.c", "CBLOCK"): pool_channel_block,
    ("pool.c", "HAVE_2X2_AVX512"): max_pool_2x2_lanes,
    ("common.c", "CACHE_MIN"): allocator_cache,
    ("kernels.h", "PR_MAX_DIMS"): max_dims,
    ("conv.c", "SMALL_MNK"): conv_small_mnk,
    ("conv.c", "BLOCK_BYTES"): conv_block_bytes,
    ("conv.c", "PW_ROWS"): conv_pointwise_rows,
    ("conv_direct_geom.h", "MAX_WINDOW"): conv_direct_window_stride,
    ("conv_direct_geom.h", "MAX_STRIDE"): conv_direct_window_stride,
    ("conv_direct_tiles.h", "MAX_TILE"): conv_direct_tiles,
    ("conv_direct_tiles.h", "MAX_TILE3_NB1"): conv_direct_tiles,
    ("conv_direct_tiles.h", "MAX_NB"): conv_direct_channel_blocks,
    ("conv_direct_tiles.h", "MAX_NB3"): conv_direct_channel_blocks,
    ("conv_direct_tiles.h", "TILE_WEIGHT_BYTES"): conv_direct_weight_bytes,
    ("conv_direct_bf16.c", "STRIPE_BYTES"): bf16_direct_filter_stripes,
    ("conv_direct_bf16.c", "FEW_ACC"): bf16_direct_filter_sets,
    ("conv_direct_bf16.c", "SOME_ACC"): bf16_direct_filter_sets,
    ("conv_direct_bf16.c", "PATCH_VALUES"): bf16_direct_patches,
    ("conv_direct_bf16.c", "PATCH_PAIRS"): bf16_direct_patch_tiles,
    ("conv_direct_tiles.h", "MAX_IMAGE_TILE"): conv_direct_image_tiles,
    ("conv_direct_tiles.h", "IMAGE_TILE_WIDTH"): conv_direct_image_tiles,
    ("conv_direct_geom.h", "TILE_GROUP_PIXELS"): conv_direct_image_groups,
    ("conv_direct_geom.h", "MAX_TILE_GROUP"): conv_direct_image_groups,
    ("conv_direct_geom.h", "TILE_PIXELS"): conv_direct_filter_groups,
    ("conv_direct_geom.h", "MAX_GROUP"): conv_direct_filter_groups,
    ("conv_direct.c", "FT3_CT"): conv_direct_filter3_channels,
    ("conv_grouped_simd.c", "CHUNK"): grouped_chunks,
    ("conv_grouped_simd.c", "CT_TT"): grouped_filter_tiles,
    ("conv_grouped_simd.c", "CT_OO"): grouped_filter_tiles,
    ("conv_pointwise_avx2.c", "PANEL"): pointwise_tiles,
    ("conv_pointwise_avx2.c", "ROW_BLOCK"): pointwise_tiles,
    ("conv_pointwise_avx2.c", "PIXEL_BYTES"): pointwise_tiles,
    ("conv_pointwise_avx2.c", "FORWARD_MAX_C"): pointwise_tiles,
    ("conv_grouped_simd.c", "FT_W1"): grouped_chunks,
    ("conv_grouped_simd.c", "PAIR_ACC"): grouped_chunks,
    ("conv_grouped_simd.c", "KIND0"): grouped_tile_kinds,
    ("conv_grouped_simd.c", "KIND1"): grouped_tile_kinds,
    ("conv_grouped_simd.c", "KIND2"): grouped_tile_kinds,
    ("conv_grouped_simd.c", "KIND3"): grouped_tile_kinds,
    ("conv_grouped_simd.c", "KIND4"): grouped_tile_kinds,
    ("conv_grouped_simd.c", "KIND5"): grouped_tile_kinds,
    ("conv_grouped_simd.c", "KIND6"): grouped_tile_kinds,
    ("conv_grouped_simd.c", "DKIND0"): grouped_dp_bf16_tile_kinds,
    ("conv_grouped_simd.c", "DKIND1"): grouped_dp_bf16_tile_kinds,
    ("conv_grouped_simd.c", "DKIND2"): grouped_dp_bf16_tile_kinds,
    ("conv_grouped_simd.c", "DKIND3"): grouped_dp_bf16_tile_kinds,
    ("conv_grouped_simd.c", "DKIND4"): grouped_dp_bf16_tile_kinds,
    ("conv_grouped_simd.c", "DKIND5"): grouped_dp_bf16_tile_kinds,
    ("conv_grouped_simd.c", "DKIND6"): grouped_dp_bf16_tile_kinds,
    ("conv_grouped_simd.c", "MAX_STRIPES"): grouped_chunks,
    ("conv_grouped_simd.c", "MAX_PHASE_TAPS"): "the supports rule's bound on the taps of a "
                                               "sub-pixel phase (8x8 windows at stride 1); "
                                               "larger ones run the reference",
    ("conv_grouped_simd.c", "MAX_THREADS"): "per-thread scratch areas: more threads are not "
                                            "started; the work split is by stripes, not threads",
    ("conv_direct_avx2.c", "MAX_TILE"): avx2_direct_tiles,
    ("conv_direct_avx2.c", "MAX_NB"): avx2_direct_channel_blocks,
    ("conv_direct_avx2.c", "FT3_CT"): avx2_direct_filter3_channels,
    ("conv_direct_avx2.c", "TILE_WEIGHT_BYTES"): avx2_direct_weight_bytes,
    ("conv_direct_avx2.c", "MAX_NB_FW"): avx2_direct_block_groups,
    ("conv_direct_avx2.c", "MAX_IMAGE_GROUP"): avx2_direct_image_groups,
    ("common.c", "HUGE_MIN"): allocator_huge_pages,
    ("common.c", "HUGE_PAGE"): allocator_huge_pages,
    ("bf16.c", "PAR_MIN"): bf16_parallel,
    ("gemm_bf16.c", "MB"): bf16_blocks,
    ("conv_bf16.c", "CHUNK"): bf16_filter_chunks,
    ("conv_bf16.c", "STRIPES"): bf16_filter_chunks,
    ("conv_amx.c", "GROUP_POSITIONS"): amx_direct_groups,
    ("conv_amx.c", "SEGMENT"): amx_direct_groups,
    ("conv_amx.c", "STRIPES"): amx_direct_groups,
    ("conv_amx.c", "TILE_BYTES"): amx_direct_groups,
    ("conv_amx.c", "HAVE_AMX"): "whether the AMX intrinsics exist (x86-64), not a size",
    ("norm.c", "HAVE_ROWS16"): "whether the AVX-512 row loops exist (x86-64), not a size; "
                               "they take c % 16 == 0 (test_bn_bf16: channels 3, 16, 17, 64)",
    ("gemm_bf16.c", "PR_BF16_MAX_SLOTS"): "threads sharing one product (the tests run 1-3)",
    ("gemm_bf16.c", "HAVE_X86"): "whether the intrinsics exist (x86-64), not a size",
    # constants that govern no size of the data
    ("conv.c", "MAX_SLOTS"): "threads sharing one conv (at most 16; the tests run 1-3 threads)",
    ("conv.c", "SLOT_BUDGET"): "scratch of all thread slots together, a memory budget",
    ("conv_direct_geom.h", "MAX_SLOTS"): "images in flight, bounded by the thread count",
    ("conv_direct_geom.h", "SLOT_BUDGET"): "scratch of all image slots together, a memory "
                                           "budget",
    ("common.c", "HEADER"): "allocation header and alignment, not a size of the data",
    ("common.c", "CACHE_SLOTS"): "how many freed blocks are kept, not their size",
    ("common.c", "CACHE_BYTES"): "total bytes kept for reuse (1 GiB), a memory budget",
    ("optim.c", "PI_F32"): "a value (pi in float32), tested by the op table's "
                           "cosine_decay_schedule",
    ("loss.c", "KERAS_EPSILON"): "a value (probability clip), tested by the op table's 'clipped'",
    ("rng.c", "PHILOX_M0"): "Philox constant (known-answer test in test_augment)",
    ("rng.c", "PHILOX_M1"): "Philox constant",
    ("rng.c", "PHILOX_W0"): "Philox constant",
    ("rng.c", "PHILOX_W1"): "Philox constant",
    ("rng.c", "TWO_PI"): "Box-Muller constant (test_random_draws)",
    ("rng.h", "PR_RNG_BATCH_STREAM"): "stream id of batch-level draws (test_augment mixup)",
    ("cpu.h", "PR_CPU_N_FEATURES"): "number of CPU feature flags",
    ("cpu.c", "ARCH_REQ_XCOMP_PERM"): "Linux arch_prctl request code (asm/prctl.h)",
    ("cpu.c", "XFEATURE_XTILEDATA"): "XSAVE feature number of the AMX tile data",
    ("kernels.h", "PR_N_DTYPES"): "number of tensor dtypes",
    ("conv_direct_avx2.c", "N_KINDS"): "number of (taps, stride) tile kinds, not a size",
    ("conv_direct_avx2.c", "LOAD_RATE"): "a weight of the tile cost estimate (loads a cycle): "
                                         "it picks among tiles that all give the same sums, "
                                         "each tested by avx2_direct_block_groups",
    ("comm.c", "ARRIVAL_TAG"): "MPI message tag of the arrival messages, not a size",
    ("comm.h", "PR_COMM_DEFAULT_TIMEOUT"): "seconds (the collective timeout's default), tested "
                                           "by test_distribute's collective timeout checks",
}

# literal thresholds inside code that the #define scan cannot see
LITERALS = {("augment.c", r"block = 4096"), ("elementwise.c", r"chunk = 16384"),
            ("elementwise.c", r"rows < 4")}


def kernel_constants():
    """(file, name) of every numeric #define of csrc/kernels/, and the literals."""
    found = set()
    for path in sorted(KERNELS.glob("*.[ch]")):
        text = path.read_text()
        for name, value in re.findall(r"^#define ([A-Z][A-Z0-9_]*)[ \t]+(\S[^\n]*)", text,
                                      flags=re.M):
            if re.match(r"\(*(\(size_t\))?\s*(0x[0-9A-Fa-f]+|[0-9][0-9.e-]*)", value):
                found.add((path.name, name))
        for file, literal in LITERALS:
            if file == path.name and literal in text:
                found.add((file, literal))
    return found


def test_every_kernel_constant_is_listed():
    """A new size constant in csrc/kernels/ needs threshold cases here (or a reason)."""
    found = kernel_constants()
    missing = sorted(found - set(THRESHOLDS))
    assert not missing, f"kernel constants without threshold cases in tests/test_thresholds.py: " \
                        f"{missing}"
    stale = sorted(set(THRESHOLDS) - found)
    assert not stale, f"listed constants no longer in csrc/kernels/: {stale}"
    for (file, name), case in THRESHOLDS.items():
        assert callable(case) or (isinstance(case, str) and case), (file, name)


CASES = sorted({fn for fn in THRESHOLDS.values() if callable(fn)}, key=lambda f: f.__name__)


@pytest.mark.parametrize("case", CASES, ids=[f.__name__ for f in CASES])
def test_values_around_threshold(case, rng):
    constants = [f"{file} {name}" for (file, name), fn in THRESHOLDS.items() if fn is case]
    assert case.__doc__, constants
    case(rng)
