"""Batch normalization on bfloat16 activations (Keras's mixed_bfloat16).

The BN ops and jit_compile's fused BN ops take bfloat16 x (dy, the
residual) as they are (struct pr_op's bf16_inputs), compute exactly as on
float32 data, and write y / dx in bfloat16, rounded once to nearest even
from the float32 value; statistics, dgamma and dbeta stay float32.  So
every result is compared bit for bit with the float32 op on the widened
(exact) inputs, its y / dx rounded by the cast op; a fused op with the
unfused chain (BN, add, ReLU each rounding its bfloat16 output).  A mix of
float32 and bfloat16 activations is widened by pr_call; a mix the shape rule
sees raises TypeError.
"""
import ml_dtypes
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import _C, ops

bf16 = ml_dtypes.bfloat16
f32 = np.float32
call = _C.call
EPS = {"epsilon": 1e-3}

# channels: below the 16-channel block, one block, a block and one left over,
# four blocks; rows: more than (and not a multiple of) the 64 chunks, and
# fewer rows than chunks
SHAPES = [(5, 13, c) for c in (3, 16, 17, 64)] + [(2, 1, 17), (3, 2, 2, 16)]


def bits(a):
    """The bit patterns of a float32 or bfloat16 array (NaN payloads too)."""
    a = np.asarray(a.numpy() if isinstance(a, pr.Tensor) else a)
    return a.view(np.uint16) if a.dtype == bf16 else a.view(np.uint32)


def assert_bits(got, want, what=""):
    g, w = bits(got), bits(want)
    assert g.dtype == w.dtype and g.shape == w.shape, what
    bad = np.argwhere(g != w)
    assert bad.size == 0, f"{what}: {len(bad)} differ, first at {bad[0]}: {g[tuple(bad[0])]:#x} " \
                          f"!= {w[tuple(bad[0])]:#x}"


def as16(t):
    """A float32 result rounded to bfloat16 by the cast op (a bfloat16 one as it is)."""
    t = t if isinstance(t, pr.Tensor) else pr.Tensor(np.asarray(t))
    return t.numpy() if t.dtype == "bfloat16" else ops.cast(t, "bfloat16").numpy()


def wide(a):
    return np.asarray(a).astype(f32)


def inputs(rng, shape, special=False):
    """x, dy, residual (bfloat16); gamma, beta, moving mean / variance (float32).
    `special`: NaN and Inf in x, dy and the residual."""
    c = shape[-1]
    x = (rng.standard_normal(shape) * 2 + 3).astype(bf16)
    dy = rng.standard_normal(shape).astype(bf16)
    res = (rng.standard_normal(shape) * 2).astype(bf16)
    if special:
        x.reshape(-1, c)[0, 0] = np.nan  # the first row: the shift's non-finite case
        x.reshape(-1, c)[-1, c - 1] = np.inf
        dy.reshape(-1, c)[1, c // 2] = np.nan
        res.reshape(-1, c)[-1, 0] = -np.inf
    gamma = rng.uniform(0.5, 1.5, c).astype(f32)
    beta, mm = rng.standard_normal(c).astype(f32), rng.standard_normal(c).astype(f32)
    mv = rng.uniform(0.2, 2, c).astype(f32)
    return x, dy, res, gamma, beta, mm, mv


def unfused_relu(y16):
    """relu of a bfloat16 value as the unfused ops give it, in bfloat16 (exact)."""
    return as16(call("relu", y16))


def masked(dy16, y16):
    """relu_backward(dy, relu(y)) in bfloat16 (exact)."""
    return as16(call("relu_backward", dy16, unfused_relu(y16)))


def bf16_results(x, dy, res, gamma, beta, mm, mv):
    """Every BN op and fused BN op on the bfloat16 activations."""
    out = {}
    out["train"] = call("batch_norm_train", x, gamma, beta, **EPS)
    _, mean, var = out["train"]
    out["relu_train"] = call("batch_norm_relu_train", x, gamma, beta, **EPS)
    out["add_relu_train"] = call("batch_norm_add_relu_train", x, gamma, beta, res, **EPS)
    out["train_backward"] = call("batch_norm_train_backward", dy, x, gamma, mean, var, **EPS)
    out["relu_train_backward"] = call("batch_norm_relu_train_backward", dy, x, gamma, beta,
                                      mean, var, **EPS)
    out["infer"] = (call("batch_norm_infer", x, gamma, beta, mm, mv, **EPS),)
    out["relu_infer"] = (call("batch_norm_relu_infer", x, gamma, beta, mm, mv, **EPS),)
    out["infer_backward"] = call("batch_norm_infer_backward", dy, x, gamma, mm, mv, **EPS)
    return out


def assert_backward(got, op, label, *args):
    """A batch-norm backward's (dx, dgamma, dbeta) on bfloat16 inputs: dx
    bfloat16, the float32 op's on the widened ``args`` rounded once; dgamma
    and dbeta float32, exactly the float32 op's (``label`` prefixes their
    names in a failure)."""
    dx, dg, db = got
    assert (dx.dtype, dg.dtype, db.dtype) == ("bfloat16", "float32", "float32")
    want = call(op, *args, **EPS)
    assert_bits(dx, as16(want[0]), f"{op} dx")
    assert_bits(dg, want[1], f"{label}dgamma")
    assert_bits(db, want[2], f"{label}dbeta")


@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan_inf"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bn_ops_on_bfloat16_equal_float32_ops_rounded_once(shape, special, rng):
    x, dy, res, gamma, beta, mm, mv = inputs(rng, shape, special)
    xw, dyw = wide(x), wide(dy)
    got = bf16_results(x, dy, res, gamma, beta, mm, mv)

    # training forward: y rounded once; statistics exactly the float32 op's
    y, mean, var = got["train"]
    assert (y.dtype, mean.dtype, var.dtype) == ("bfloat16", "float32", "float32")
    yw, mw, vw = call("batch_norm_train", xw, gamma, beta, **EPS)
    assert_bits(y, as16(yw), "batch_norm_train y")
    assert_bits(mean, mw, "mean")
    assert_bits(var, vw, "var")
    if special:  # NaN and Inf reach the statistics and outputs of their channels
        assert np.isnan(mean.numpy()[0]) and np.isinf(mean.numpy()[-1])
        assert np.isnan(y.numpy().reshape(-1, shape[-1])[:, [0, -1]].astype(f32)).all()

    # BN + ReLU: the float32 fused op rounded once, and the unfused chain
    yr, m2, v2 = got["relu_train"]
    assert yr.dtype == "bfloat16"
    assert_bits(yr, as16(call("batch_norm_relu_train", xw, gamma, beta, **EPS)[0]),
                "batch_norm_relu_train")
    assert_bits(yr, unfused_relu(y), "batch_norm_relu_train vs relu(BN)")
    assert_bits(m2, mw, "relu mean")
    assert_bits(v2, vw, "relu var")

    # BN + add + ReLU: y rounded, plus the residual, rounded, ReLU
    ya, m3, v3 = got["add_relu_train"]
    assert ya.dtype == "bfloat16"
    want = unfused_relu(as16(call("add", y, res)))
    assert_bits(ya, want, "batch_norm_add_relu_train")
    assert_bits(ya, unfused_relu(as16(wide(as16(yw)) + wide(res))), "add_relu from float32")
    assert_bits(m3, mw, "add_relu mean")
    assert_bits(v3, vw, "add_relu var")

    # training backward: dx rounded once (dx_dtype's default means x's dtype,
    # bfloat16 explicitly the same); dgamma, dbeta exactly the float32 op's
    assert_backward(got["train_backward"], "batch_norm_train_backward", "",
                    dyw, xw, gamma, mean, var)
    dx = got["train_backward"][0]
    again = call("batch_norm_train_backward", dy, x, gamma, mean, var, dx_dtype=5, **EPS)
    assert_bits(again[0], dx, "dx_dtype=5")

    # BN + ReLU backward: the mask from the bfloat16 forward output
    yf = call("batch_norm_infer", xw, gamma, beta, mean, var, **EPS)  # the forward's y
    g16 = masked(dy, as16(yf))
    want = call("batch_norm_train_backward", wide(g16), xw, gamma, mean, var, **EPS)
    dxr, dgr, dbr = got["relu_train_backward"]
    assert dxr.dtype == "bfloat16"
    assert_bits(dxr, as16(want[0]), "batch_norm_relu_train_backward dx")
    assert_bits(dgr, want[1], "relu dgamma")
    assert_bits(dbr, want[2], "relu dbeta")
    unfused = call("batch_norm_train_backward", g16, x, gamma, mean, var, **EPS)
    for k in range(3):
        assert_bits(got["relu_train_backward"][k], unfused[k], f"relu backward output {k}")

    # inference forward, with ReLU, backward
    (yi,) = got["infer"]
    assert yi.dtype == "bfloat16"
    yiw = call("batch_norm_infer", xw, gamma, beta, mm, mv, **EPS)
    assert_bits(yi, as16(yiw), "batch_norm_infer")
    (yir,) = got["relu_infer"]
    assert_bits(yir, unfused_relu(yi), "batch_norm_relu_infer")
    assert_bits(yir, as16(call("batch_norm_relu_infer", xw, gamma, beta, mm, mv, **EPS)),
                "batch_norm_relu_infer from float32")
    assert_backward(got["infer_backward"], "batch_norm_infer_backward", "infer ",
                    dyw, xw, gamma, mm, mv)


@pytest.mark.parametrize("shape", [(4, 40, 40, 16), (3, 41, 43, 17), (2, 20, 20, 64),
                                   (11, 1000, 3)], ids=str)
def test_bfloat16_results_do_not_depend_on_the_thread_count(shape, rng):
    """Above the kernels' parallel threshold (m * c >= 32768), one and two
    threads give the same bits, and the float32 ops' rounded results."""
    args = inputs(rng, shape)
    before = pr.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            pr.set_num_threads(threads)
            runs.append(bf16_results(*args))
    finally:
        pr.set_num_threads(before)
    for name in runs[0]:
        for k, (a, b) in enumerate(zip(runs[0][name], runs[1][name])):
            assert_bits(a, b, f"{name} output {k}: 1 vs 2 threads")
    x, dy, _, gamma, beta, _, _ = args
    yw, mw, _ = call("batch_norm_train", wide(x), gamma, beta, **EPS)
    assert_bits(runs[1]["train"][0], as16(yw), "y")
    assert_bits(runs[1]["train"][1], mw, "mean")


def test_relu_mask_follows_the_rounded_bfloat16_output():
    """A BN output that is a positive float32 too small for bfloat16 is stored
    as +0, so the unfused relu_backward masks it: the fused backward does the
    same (its mask comes from the rounded value, not the float32 one)."""
    c = 16
    x = np.zeros((8, c), bf16)
    x[::2] = 1.0
    dy = np.ones((8, c), bf16)
    gamma, mean, var = np.ones(c, f32), np.zeros(c, f32), np.ones(c, f32)
    beta = np.full(c, 2.0 ** -140, f32)  # float32 subnormal; bfloat16 rounds it to 0
    kw = {"epsilon": 0.0}
    y = call("batch_norm_infer", x, gamma, beta, mean, var, **kw)
    assert (bits(y)[1::2] == 0).all() and (wide(y)[::2] == 1).all()
    got = call("batch_norm_relu_train_backward", dy, x, gamma, beta, mean, var, **kw)
    unfused = call("batch_norm_train_backward", masked(dy, y.numpy()), x, gamma, mean, var, **kw)
    for k in range(3):
        assert_bits(got[k], unfused[k], f"output {k}")
    np.testing.assert_array_equal(got[2].numpy(), np.full(c, 4, f32))  # half the rows pass
    # on float32 data the same values pass everywhere (2^-140 > 0)
    f = call("batch_norm_relu_train_backward", wide(dy), wide(x), gamma, beta, mean, var, **kw)
    np.testing.assert_array_equal(f[2].numpy(), np.full(c, 8, f32))


def test_mixed_activation_dtypes_are_widened_by_pr_call(rng):
    """The mask's inputs all bfloat16 or none: a float32 dy with bfloat16 x
    (or the other way round, or a float32 residual) widens the bfloat16 ones,
    and the float32 op's results come out, dx and y float32."""
    x, dy, res, gamma, beta, _, _ = inputs(rng, (4, 5, 17))
    xw, dyw = wide(x), wide(dy)
    _, mean, var = call("batch_norm_train", xw, gamma, beta, **EPS)
    want = call("batch_norm_train_backward", dyw, xw, gamma, mean, var, **EPS)
    for a, b in ((dyw, x), (dy, xw)):
        got = call("batch_norm_train_backward", a, b, gamma, mean, var, **EPS)
        assert got[0].dtype == "float32"
        for k in range(3):
            assert_bits(got[k], want[k], f"output {k}")
    got = call("batch_norm_train_backward", dyw, x, gamma, mean, var, dx_dtype=5, **EPS)
    assert_bits(got[0], as16(want[0]), "mixed, dx_dtype=5")
    want = call("batch_norm_infer_backward", dyw, xw, gamma, mean, var, **EPS)
    got = call("batch_norm_infer_backward", dyw, x, gamma, mean, var, **EPS)
    assert got[0].dtype == "float32"
    assert_bits(got[0], want[0], "infer backward")
    want = call("batch_norm_add_relu_train", xw, gamma, beta, wide(res), **EPS)
    for a, b in ((x, wide(res)), (xw, res)):
        got = call("batch_norm_add_relu_train", a, gamma, beta, b, **EPS)
        assert got[0].dtype == "float32"
        assert_bits(got[0], want[0], "add_relu, mixed")
    # bfloat16 gamma / beta are not activations: widened, x stays bfloat16
    y = call("batch_norm_train", x, gamma.astype(bf16), beta, **EPS)[0]
    assert y.dtype == "bfloat16"
    assert_bits(y, as16(call("batch_norm_train", xw, wide(gamma.astype(bf16)), beta, **EPS)[0]))


def test_inconsistent_activation_dtypes_raise_type_error(rng):
    """What pr_call cannot widen reaches the shape rule, which names the
    mismatch (the rule jit_compile's passes meet when they build nodes)."""
    x, dy, res, gamma, beta, _, _ = inputs(rng, (2, 3, 16))
    mean = var = np.ones(16, f32)
    i32 = np.ones(x.shape, np.int32)
    with pytest.raises(TypeError, match="batch_norm_train_backward: inputs 0 and 1 must have "
                                        "the same dtype, got float32 and int32"):
        call("batch_norm_train_backward", dy, i32, gamma, mean, var, **EPS)
    with pytest.raises(TypeError, match="inputs 0 and 1 must have the same dtype"):
        call("batch_norm_infer_backward", dy, i32, gamma, mean, var, **EPS)
    with pytest.raises(TypeError, match="inputs 0 and 3 must have the same dtype, got float32 "
                                        "and int32"):
        call("batch_norm_add_relu_train", x, gamma, beta, i32, **EPS)
    with pytest.raises(TypeError, match="input 0 must be float32 or bfloat16, got int32"):
        call("batch_norm_train", i32, gamma, beta, **EPS)
    with pytest.raises(TypeError, match="input 0 must be float32 or bfloat16, got int32"):
        call("batch_norm_relu_train_backward", i32, x, gamma, beta, mean, var, **EPS)
    with pytest.raises(TypeError, match="input 1 must be float32, got int32"):
        call("batch_norm_infer", x, gamma.astype(np.int32), beta, mean, var, **EPS)
    with pytest.raises(ValueError, match="input 3 has shape"):
        call("batch_norm_add_relu_train", x, gamma, beta, res[:1], **EPS)


def test_gradient_of_a_bfloat16_batch_norm(rng):
    """Gradients are float32 (the tape's output gradients and the cast's
    gradient are), so the BN backward the tape runs gets float32 dy and
    bfloat16 x: pr_call widens x and the float32 op's results come out."""
    x, dy, _, gamma, beta, _, _ = inputs(rng, (3, 4, 4, 17))
    xt, gv, bv = pr.Tensor(x), pr.Variable(gamma), pr.Variable(beta)
    with pr.GradientTape() as tape:
        tape.watch(xt)
        y, mean, var = ops.batch_norm_train(xt, gv, bv)
    assert y.dtype == "bfloat16"
    gx, gg, gb = tape.gradient(y, [xt, gv, bv], output_gradients=pr.Tensor(wide(dy)))
    want = call("batch_norm_train_backward", wide(dy), wide(x), gamma, mean, var, **EPS)
    assert gx.dtype == gg.dtype == gb.dtype == "float32"
    for k, g in enumerate((gx, gg, gb)):
        assert_bits(g, want[k], f"gradient {k}")


def _block(residual_dtype):
    def f(x, gamma, beta, res, dz):
        with pr.GradientTape() as tape:
            tape.watch(x)
            r = ops.cast(res, residual_dtype)  # made before the BN, as a block's shortcut
            y, _, _ = ops.batch_norm_train(x, gamma, beta)
            z = ops.relu(ops.add(y, r))
            u, _, _ = ops.batch_norm_train(x, gamma, beta)
            v = ops.relu(u)
        grads = tape.gradient([z, v], [x, gamma, beta],
                              output_gradients=[ops.cast(dz, "float32")] * 2)
        return [z, v] + list(grads)
    return f


def _block_args(rng):
    x, dy, res, gamma, beta, _, _ = inputs(rng, (4, 5, 5, 16))
    return pr.Tensor(x), pr.Variable(gamma), pr.Variable(beta), pr.Tensor(wide(res)), \
        pr.Tensor(dy)


def _jit_equals_eager(f, args):
    eager = f(*args)
    jit = pr.compile(f, jit_compile=True)
    got = jit(*args)
    for k, (a, b) in enumerate(zip(got, eager)):
        assert_bits(a, b, f"jit vs eager output {k}")
    return [n["op"] for n in jit.get_concrete_function(*args).nodes]


def test_jit_never_fuses_a_bfloat16_bn_with_a_float32_residual(rng):
    """A bfloat16 BN output added to a float32 residual is widened first (a
    cast between BN and add): no batch_norm_add_relu_train, and the compiled
    function gives the eager bits."""
    names = _jit_equals_eager(_block("float32"), _block_args(rng))
    assert "batch_norm_add_relu_train" not in names, names


def test_jit_fuses_bfloat16_bn_relu_and_residual_chains(rng):
    """BN + ReLU and BN + bfloat16 residual add + ReLU fuse on bfloat16 data
    and give the eager (unfused) bits, gradients included."""
    names = _jit_equals_eager(_block("bfloat16"), _block_args(rng))
    assert {"batch_norm_relu_train", "batch_norm_add_relu_train"} <= set(names), names
    assert "relu" not in names, names
