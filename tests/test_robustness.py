"""Robustness of the C boundary: odd input reachable from Python gets a clear
ValueError/TypeError naming the op (or Tensor, GradientTape, layer), never a
crash, hang, leak or out-of-bounds access, and a call that raises changes no
state.

Probes that crashed the interpreter before their fix run in a subprocess
(`run_isolated`), so a regression fails one test instead of killing pytest.
This file is also the script those subprocesses run for the every-op fuzz
(`python test_robustness.py fuzz N SEED`).
"""
import gc
import hashlib
import os
import random
import resource
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import _C
from op_table import TABLE as OP_TABLE

C = _C.call
f32 = np.float32

PRELUDE = """
import gc, re, numpy as np, pyresnet as pr
from pyresnet import _C
C = _C.call
def raises(exc, match, f, *args, **kwargs):
    try:
        f(*args, **kwargs)
    except exc as e:
        assert re.search(match, str(e)), f"{type(e).__name__}: {e} does not match {match!r}"
        return e
    raise AssertionError(f"{f} did not raise {exc.__name__}")
"""


def run_isolated(code, timeout=120):
    """Run `code` (after PRELUDE) in a fresh interpreter outside the source
    tree; a crash or a hang fails the test with the child's stderr."""
    p = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=timeout,
                       cwd=tempfile.gettempdir())
    assert p.returncode == 0, f"exit code {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return p.stdout


def snapshot(tensors):
    return [np.array(t, copy=True) for t in tensors]


def assert_unchanged(tensors, before):
    for t, b in zip(tensors, before):
        np.testing.assert_array_equal(np.asarray(t), b)


# ---- Tensor(...) ------------------------------------------------------------------


@pytest.mark.parametrize("dtype, want", [
    (np.float16, "float32"), (np.float32, "float32"), (np.float64, "float32"),
    (np.longdouble, "float32"), (">f4", "float32"),
    (np.bool_, "bool"), (np.int8, "int32"), (np.int16, "int32"), (np.uint16, "int32"),
    (np.int32, "int32"), (np.intc, "int32"),
    (np.int64, "int64"), (np.longlong, "int64"), (">i8", "int64"),
    (np.uint8, "uint8"),
])
def test_tensor_takes_every_supported_numpy_dtype(dtype, want):
    a = np.array([[0, 1, 2], [3, 4, 5]]).astype(dtype)
    t = pr.Tensor(a)
    assert t.dtype == want and t.shape == (2, 3)
    np.testing.assert_array_equal(t.numpy(), a.astype(np.float64))


@pytest.mark.parametrize("value", [
    np.ones(3, np.uint32), np.ones(3, np.uint64), np.ones(3, np.complex64), np.array(["ab"]),
    np.array([1, "a"], dtype=object), np.array(["2020-01-01"], dtype="datetime64[D]"),
    np.zeros(2, dtype=[("a", "f4")]), b"abc", None,
])
def test_tensor_rejects_other_dtypes_naming_them(value):
    with pytest.raises(TypeError, match="expected float, bfloat16, int32, int64 or uint8 data, got an "
                                        "array of dtype"):
        pr.Tensor(value)


def test_tensor_copies_odd_layouts_exactly():
    base = np.arange(60, dtype=f32).reshape(3, 4, 5)
    odd = {
        "negative strides": base[::-1, ::-2, ::-1],
        "fortran": np.asfortranarray(base),
        "strided slice": base[:, 1:3, ::2],
        "broadcast view": np.broadcast_to(np.arange(5, dtype=f32), (4, 5)),
        "0-d": np.array(7.5, f32),
        "zero-size": np.ones((0, 3, 0), f32),
        "ndarray subclass": np.arange(3, dtype=f32).view(type("Sub", (np.ndarray,), {})),
        "memoryview": memoryview(np.arange(4, dtype=f32)),
    }
    for name, a in odd.items():
        t = pr.Tensor(a)
        assert t.shape == np.shape(a), name
        np.testing.assert_array_equal(t.numpy(), np.asarray(a), err_msg=name)
        assert t.numpy().flags.c_contiguous, name
    src = np.ones(3, f32)
    t = pr.Tensor(src)
    src[0] = 5
    assert t.numpy()[0] == 1  # a copy, not a view of the source


def test_tensor_rank_and_size_limits():
    with pytest.raises(ValueError, match="at most 8 dimensions, got 9"):
        pr.Tensor(np.ones([1] * 9, f32))
    with pytest.raises(ValueError, match="at most 8 dimensions, got 9"):
        pr.Tensor(np.ones([0] * 9, f32))
    # Zero-stride views NumPy allows, whose int32 copy would need 2^64 bytes.
    with pytest.raises(ValueError, match=r"Tensor: shape \(2147483648, 2147483648\) is too large"):
        pr.Tensor(np.broadcast_to(np.int8(1), (2 ** 31, 2 ** 31)))
    with pytest.raises(MemoryError):
        pr.Tensor(np.broadcast_to(np.uint8(1), (2 ** 31, 2 ** 30)))
    # 2^60 bytes: more than any address space, whatever the overcommit policy
    with pytest.raises(MemoryError, match=r"cannot allocate 1152921504606846976 bytes for a "
                                          r"float32 tensor of shape \(288230376151711744,\)"):
        pr.ops.zeros((2 ** 58,))


def test_conversion_errors_keep_their_reason():
    with pytest.raises(TypeError, match=r"got list \(.*inhomogeneous"):
        pr.Tensor([[1.0, 2.0], [3.0]])

    class Failing:
        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("boom")

    # a user's own error passes through, also as an op input
    with pytest.raises(RuntimeError, match="boom"):
        pr.Tensor(Failing())
    with pytest.raises(RuntimeError, match="boom"):
        C("add", pr.Tensor(1.0), Failing())
    with pytest.raises(TypeError, match=r"add: input 1: expected .* dtype <U1"):
        C("add", pr.Tensor(1.0), "a")


def test_scalar_conversions_are_exact():
    assert int(pr.Tensor(np.int64(2 ** 62 + 1))) == 2 ** 62 + 1
    assert int(pr.Tensor(np.int32(-7))) == -7
    assert int(pr.Tensor(np.uint8(255))) == 255
    assert int(pr.Tensor(f32(-2.75))) == -2
    assert float(pr.Tensor(np.int64(3))) == 3.0
    with pytest.raises(ValueError):
        int(pr.Tensor(f32("nan")))
    with pytest.raises(TypeError, match="only size-1 tensors"):
        int(pr.Tensor(np.ones(2, f32)))
    with pytest.raises(ValueError, match="ambiguous"):
        bool(pr.Tensor(np.ones(2, f32)))


# ---- NumPy interop and the buffer protocol --------------------------------------------


def test_array_protocol_follows_numpy_copy_semantics():
    t = pr.Tensor(np.arange(4, dtype=f32))
    assert np.shares_memory(np.asarray(t), t.numpy())
    assert np.shares_memory(t.__array__(np.float32, copy=False), t.numpy())
    assert not np.shares_memory(np.array(t, copy=True), t.numpy())
    as64 = t.__array__(np.float64)
    assert as64.dtype == np.float64 and not np.shares_memory(as64, t.numpy())
    with pytest.raises(ValueError, match="without a copy"):
        t.__array__(np.float64, copy=False)
    with pytest.raises(ValueError):
        np.asarray(t, dtype=np.float64, copy=False)
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])


def test_views_outlive_their_tensor():
    t = pr.Tensor(np.arange(6, dtype=f32).reshape(2, 3))
    a, m, b = t.numpy(), memoryview(t), np.frombuffer(t, f32)
    del t
    gc.collect()
    junk = [pr.Tensor(np.full((2, 3), 9, f32)) for _ in range(50)]  # reuse freed memory
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    assert m.tolist() == [[0, 1, 2], [3, 4, 5]] and m.format == "f"
    np.testing.assert_array_equal(b, np.arange(6))
    assert len(junk) == 50


def test_buffer_requests():
    t = pr.Tensor(np.arange(6, dtype=f32).reshape(2, 3))
    # A plain-bytes request (hashlib) sees the bytes, as with a NumPy array.
    assert hashlib.sha256(t).hexdigest() == hashlib.sha256(t.numpy().tobytes()).hexdigest()
    assert bytes(t) == t.numpy().tobytes()
    import _testbuffer as testbuffer  # CPython's buffer test module: required, never skipped
    with pytest.raises(BufferError, match="not Fortran"):
        testbuffer.ndarray(t, getbuf=testbuffer.PyBUF_F_CONTIGUOUS)
    row = pr.Tensor(np.arange(3, dtype=f32).reshape(1, 3))  # C- and Fortran-contiguous
    assert testbuffer.ndarray(row, getbuf=testbuffer.PyBUF_F_CONTIGUOUS).shape == (1, 3)


# ---- arithmetic operators --------------------------------------------------------


def test_operators_with_odd_operands():
    t = pr.Tensor(np.ones(3, f32))
    i = pr.Tensor(np.ones(3, np.int32))
    for fn, exc, match in [
        (lambda: t + "a", TypeError, "add: input 1: expected"),
        (lambda: t - None, TypeError, "subtract: input 1: expected .* dtype object"),
        (lambda: t * {}, TypeError, "multiply: input 1"),
        (lambda: t * (i > 0), TypeError, "multiply: input 1 must be float32, got bool"),
        (lambda: i / t, TypeError, "divide: input 0 must be float32, got int32"),
        (lambda: -i, TypeError, "negative: input 0 must be float32, got int32"),
        (lambda: t @ t, ValueError, r"matmul: input 0 must have rank 2, got shape \(3,\)"),
        (lambda: t + np.ones(4, f32), ValueError, "add: shapes .* cannot be broadcast"),
    ]:
        with pytest.raises(exc, match=match):
            fn()
    np.testing.assert_array_equal((np.full(3, 2, f32) - t).numpy(), [1, 1, 1])
    np.testing.assert_array_equal(([1.0, 2.0, 3.0] * t).numpy(), [1, 2, 3])
    np.testing.assert_array_equal((t / 4).numpy(), [0.25] * 3)
    assert (t * i).dtype == "float32" and (i * i).dtype == "int32"  # Keras's/NumPy's promotion


# ---- pyresnet.ops.call: names, arity, attributes --------------------------------------------


def test_call_with_bad_names_and_arity():
    run_isolated("""
        raises(UnicodeEncodeError, "surrogates", C, "\\udc80", 1.0)
        x = pr.Tensor(np.ones((4, 2), np.float32))  # the input pipeline looks ops up too
        raises(ValueError, "not registered", _C.BatchIterator, (x,), np.arange(4), 2, False,
               [("\\udc80", {}, [0], [0])])
        raises(NotImplementedError, "op 'nope' is not registered", C, "nope", 1.0)
        raises(KeyError, "nope", _C.op_info, "nope")
        raises(TypeError, r"call\\(name", C)
        raises(TypeError, r"call\\(name", C, 3)
        raises(TypeError, "add: takes 2 tensor inputs, got 1", C, "add", 1.0)
        raises(TypeError, "relu: takes 1 tensor inputs, got 3", C, "relu", 1.0, 2.0, 3.0)
    """)


X4 = np.ones((1, 4, 4, 2), f32)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(pool_size="22"), TypeError, "'pool_size' must be an int or a sequence of ints, got str"),
    (dict(pool_size=2.5), TypeError, "'pool_size' must be an int or a sequence of ints, got float"),
    (dict(pool_size=[2.5]), TypeError, "'pool_size' must hold ints, got float"),
    (dict(pool_size=[1] * 9), ValueError, "'pool_size' has 9 entries, at most 8 allowed"),
    (dict(pool_size=2 ** 70), ValueError, "'pool_size' holds an int outside the 64-bit range"),
    (dict(pool_size=[2, 2 ** 70]), ValueError, "'pool_size' holds an int outside the 64-bit"),
    (dict(pool_size=None), TypeError, r"missing required argument 'pool_size' \(got None\)"),
    (dict(), TypeError, "missing required argument 'pool_size'"),
    (dict(pool_size=0), ValueError, "'pool_size' must be positive ints, got 0"),
    (dict(pool_size=[2, -1]), ValueError, "'pool_size' must be positive ints, got -1"),
    (dict(pool_size=2 ** 40), ValueError, "'pool_size' must be at most 2.31 - 1, got 1099511627"),
    (dict(pool_size=2, strides=[0]), ValueError, "'strides' must be positive ints, got 0"),
    (dict(pool_size=[1, 2, 3]), ValueError, "'pool_size' must be 1 or 2 ints, got 3"),
    (dict(pool_size=2, bogus=1), TypeError, "unexpected argument 'bogus'"),
])
def test_attribute_errors_name_the_op_and_attribute(kwargs, exc, match):
    with pytest.raises(exc, match="max_pool2d: " + match):
        C("max_pool2d", X4, **kwargs)


def test_attributes_accept_numpy_ints_and_check_floats():
    assert C("max_pool2d", X4, pool_size=np.int64(2)).shape == (1, 2, 2, 2)
    assert C("max_pool2d", X4, pool_size=(np.int32(2), 1)).shape == (1, 2, 4, 2)
    x, g = np.ones((2, 2, 2, 3), f32), np.ones(3, f32)
    for op, args in [("batch_norm_train", (x, g, g)), ("batch_norm_infer", (x, g, g, g, g)),
                     ("batch_norm_train_backward", (x, x, g, g, g))]:
        for eps in (float("nan"), -1e-3, float("inf")):
            with pytest.raises(ValueError, match=f"{op}: epsilon must be a finite float >= 0"):
                C(op, *args, epsilon=eps)
        with pytest.raises(TypeError, match=f"{op}: 'epsilon' must be a number, got str"):
            C(op, *args, epsilon="x")
    with pytest.raises(TypeError, match="reshape: missing required argument 'shape'"):
        C("reshape", np.ones(1, f32), shape=None)
    with pytest.raises(TypeError, match="sum: 'keepdims' must be a bool, got numpy.ndarray"):
        C("sum", np.ones(2, f32), keepdims=np.ones(2))


def test_shape_products_that_overflow_int64_raise():
    run_isolated("""
        x = pr.Tensor(np.ones(4, np.float32))
        big = [2 ** 62 + 1, 4]  # the product wraps to 4
        raises(ValueError, r"reshape: cannot reshape a tensor of shape \\(4,\\) into shape "
               r"\\(4611686018427387905, 4\\)", C, "reshape", x, shape=big)
        raises(ValueError, "reshape: cannot reshape", C, "reshape", x, shape=[-1, 2 ** 62, 2 ** 62])
        raises(ValueError, r"broadcast_to: output 0 would have shape \\(4611686018427387905, 4\\), "
               "which is too large", C, "broadcast_to", np.ones((1, 1), np.float32), shape=big)
        raises(ValueError, r"broadcast_to: output 0 would have shape \\(-5, 1\\), which has a "
               "negative dimension", C, "broadcast_to", np.ones((1, 1), np.float32), shape=[-5, 1])
        raises(ValueError, "avg_pool2d_backward: shape .* too large", C, "avg_pool2d_backward",
               np.ones((1, 1, 1, 1), np.float32), pool_size=1, shape=[2 ** 40, 2 ** 40, 1, 1])
        raises(ValueError, "conv2d_backprop_input: shape .* too large", C, "conv2d_backprop_input",
               np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32),
               shape=[2 ** 62, 1, 1, 1])
    """)


def test_huge_empty_shapes_do_not_hang():
    # Row loops over a (2^29 * 2^30)-row tensor with no columns would run for years.
    out = run_isolated("""
        e = C("reshape", np.ones(0, np.float32), shape=[2 ** 29, 2 ** 30, 0])
        for op in ("softmax", "log_softmax", "relu", "exp", "flatten", "ones_like"):
            print(op, C(op, e).shape)
        print("add", C("add", e, 1.0).shape)
        print("softmax_backward", C("softmax_backward", e, e).shape)
        x = C("reshape", e, shape=[2 ** 20, 2 ** 19, 2 ** 20, 0])
        print("max_pool2d", C("max_pool2d", x, pool_size=1).shape)
        print("global_average_pool", C("global_average_pool", x).shape)
        print("mean", float(C("mean", e)))
    """, timeout=60)
    assert "softmax (536870912, 1073741824, 0)" in out
    assert "global_average_pool (1048576, 0)" in out
    assert "mean nan" in out


def test_huge_empty_shapes_do_not_hang_compiled():
    # The executor skips empty nodes as eager calls do.
    out = run_isolated("""
        @pr.compile
        def f(x):
            e = C("reshape", x, shape=[2 ** 29, 2 ** 30, 0])
            return C("softmax", e), C("relu", C("add", e, 1.0))
        a, b = f(np.ones(0, np.float32))
        print("compiled", a.shape, b.shape)
    """, timeout=60)
    assert "compiled (536870912, 1073741824, 0) (536870912, 1073741824, 0)" in out


def test_set_num_threads_bounds():
    before = pr.get_num_threads()
    for n in (0, -1, 1025, 2 ** 31, 2 ** 70):
        with pytest.raises(ValueError, match=r"set_num_threads: expected an int in \[1, 1024\]"):
            pr.set_num_threads(n)
    with pytest.raises(TypeError):
        _C.set_num_threads("2")
    assert pr.get_num_threads() == before


def test_thread_count_defaults_to_omp_num_threads():
    """OMP_NUM_THREADS gives the default thread count (as PyTorch's); unset,
    it is the number of processors the process may use."""
    code = "import pyresnet as pr; print(pr.get_num_threads())"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run = lambda e: subprocess.run([sys.executable, "-c", code], env=e, capture_output=True,
                                   text=True, timeout=120, check=True,
                                   cwd=tempfile.gettempdir()).stdout.strip()  # the installed package
    assert run({**env, "OMP_NUM_THREADS": "1"}) == "1"
    assert run({**env, "OMP_NUM_THREADS": "3"}) == "3"
    assert run(env) == str(len(os.sched_getaffinity(0)))


# ---- every registered op, mutated calls ---------------------------------------------------


def _fuzz_templates(rng, nrng):
    """A valid call (inputs as NumPy arrays, attrs) per op name."""
    def f(*s): return nrng.standard_normal(s).astype(f32)
    def pos(*s): return (nrng.random(s) + 0.1).astype(f32)
    def lab(n, c): return nrng.integers(0, c, n).astype(rng.choice([np.int32, np.int64]))
    def d(lo=1, hi=5): return rng.randint(lo, hi)

    n, h, w, c, o, r, k = d(0, 3), d(1, 6), d(1, 6), d(1, 4), d(1, 4), d(0, 4), d(1, 5)
    kh, kw, same = d(1, 3), d(1, 3), rng.random() < .5
    st = [rng.choice([1, 2, 3])] * rng.choice([1, 2])
    h, w = h + kh, w + kw
    ho = -(-h // st[0]) if same else (h - kh) // st[0] + 1
    wo = -(-w // st[-1]) if same else (w - kw) // st[-1] + 1
    s = tuple(d(0, 4) for _ in range(d(0, 4)))
    t = tuple(x if rng.random() < .6 else 1 for x in s)[rng.randint(0, len(s)):]
    pool = {"pool_size": [kh, kw], "strides": st, "same": same}
    conv = {"strides": st, "same": same}
    bn_bw = ([f(n, h, w, c), f(n, h, w, c), pos(c), f(c), pos(c)], {"epsilon": 1e-3})
    v = tuple(d() for _ in range(d(0, 3)))
    img = f(n, h, w, c) if rng.random() < .5 else nrng.integers(0, 256, (n, h, w, c), np.uint8)
    state = np.array([rng.randint(0, 99), rng.randint(0, 99)], np.int64)
    oh, ow = d(1, h + 1), d(1, w + 1)
    return {
        "random_flip": ([img, state], {"horizontal": True, "vertical": rng.random() < .5}),
        "random_crop": ([img, state], {"size": [oh, ow], "padding": [d(0, 2)],
                                       "mode": rng.randint(0, 4)}),
        "alternating_flip": ([img, nrng.integers(0, 99, n).astype(np.int64), state],
                             {"horizontal": True, "vertical": rng.random() < .5}),
        "affine_transform": ([img, (nrng.standard_normal((n, 8)) * 2).astype(f32)],
                             {"interpolation": d(0, 2), "fill_mode": d(0, 5),
                              "fill_value": 1.0}),
        "random_affine": ([img, state], {"height_lower": -.5, "height_upper": .5,
                                         "rotation_lower": -3.0, "rotation_upper": 3.0,
                                         "zoom_height_lower": .2, "zoom_height_upper": 4.0,
                                         "fill_mode": d(0, 5), "interpolation": d(0, 2)}),
        "random_contrast": ([img, state], {"lower": 0.0, "upper": 2.0}),
        "center_crop": ([img], {"size": [oh, ow]}),
        "random_resized_crop": ([img, state], {"size": [d(), d()]}),
        "resize_bilinear": ([img], {"size": [d(), d()]}),
        "random_lighting": ([img[..., :1].repeat(3, -1), pos(3), f(3, 3), state], {"stddev": 0.1}),
        "cutout": ([img, state], {"size": [d(1, 3), d(1, 3)], "fill": 0.0}),
        "mixup": ([img, nrng.integers(0, k, n), state], {"alpha": 0.2, "num_classes": k}),
        "normalize_channels": ([img, f(c), pos(c)], {"epsilon": 1e-7}),
        **{op: ([f(*s), f(*t)], {}) for op in ("add", "subtract", "multiply", "divide",
                                               "maximum", "minimum", "greater_equal")},
        **{op: ([f(*s)], {}) for op in ("exp", "log", "sqrt", "square", "negative", "relu",
                                        "ones_like", "zeros_like", "softmax", "log_softmax")},
        "flatten": ([f(d(), *s)], {}),
        "scale": ([f(*s)], {"value": 2.0}),
        "clip": ([f(*s)], {"min": -.5, "max": .5}),
        "clip_backward": ([f(*s), f(*s)], {"min": -.5, "max": .5}),
        **{op: ([f(r, k), f(r, k)], {}) for op in ("relu_backward", "softmax_backward",
                                                   "log_softmax_backward")},
        "broadcast_to": ([f(1, 3)], {"shape": [d(), 3]}),
        "sum_to_shape": ([f(4, 3)], {"shape": [1, 3]}),
        **{op: ([f(*s)], {"axes": sorted(rng.sample(range(len(s)), rng.randint(0, len(s)))),
                          "keepdims": rng.random() < .5}) for op in ("sum", "mean")},
        "reshape": ([f(2, 6)], {"shape": rng.choice([[3, 4], [-1], [12, 1], [2, -1, 3]])}),
        **{op: ([pos(r, k), lab(r, k)], {}) for op in (
            "sparse_softmax_cross_entropy", "sparse_categorical_crossentropy",
            "sparse_categorical_accuracy")},
        **{op: ([pos(r, k), pos(r, k)], {}) for op in (
            "softmax_cross_entropy", "categorical_crossentropy", "categorical_accuracy")},
        **{op: ([f(r), pos(r, k), lab(r, k)], {}) for op in (
            "sparse_softmax_cross_entropy_backward", "sparse_categorical_crossentropy_backward")},
        **{op: ([f(r), pos(r, k), pos(r, k)], {}) for op in (
            "softmax_cross_entropy_backward", "categorical_crossentropy_backward")},
        "batch_norm_train": ([f(n + 1, h, w, c), pos(c), f(c)], {"epsilon": 1e-3}),
        "batch_norm_train_backward": bn_bw, "batch_norm_infer_backward": bn_bw,
        "batch_norm_infer": ([f(n, h, w, c), pos(c), f(c), f(c), pos(c)], {}),
        "batch_norm_relu_train": ([f(n + 1, h, w, c), pos(c), f(c)], {"epsilon": 1e-3}),
        "batch_norm_relu_infer": ([f(n, h, w, c), pos(c), f(c), f(c), pos(c)], {}),
        "batch_norm_add_relu_train": ([f(n + 1, h, w, c), pos(c), f(c), f(n + 1, h, w, c)],
                                      {"epsilon": 1e-3}),
        "batch_norm_relu_train_backward": ([f(n, h, w, c), f(n, h, w, c), pos(c), f(c), f(c),
                                            pos(c)], {"epsilon": 1e-3}),
        "matmul": ([f(r, k), f(k, c)], {}),
        "conv2d": ([f(n, h, w, c), f(kh, kw, c, o)], conv),
        "conv2d_backprop_input": ([f(n, ho, wo, o), f(kh, kw, c, o)],
                                  {**conv, "shape": [n, h, w, c]}),
        "conv2d_backprop_filter": ([f(n, h, w, c), f(n, ho, wo, o)],
                                   {**conv, "shape": [kh, kw, c, o]}),
        "max_pool2d": ([f(n, h, w, c)], pool), "avg_pool2d": ([f(n, h, w, c)], pool),
        "max_pool2d_backward": ([f(n, h, w, c), f(n, ho, wo, c)], pool),
        "avg_pool2d_backward": ([f(n, ho, wo, c)], {**pool, "shape": [n, h, w, c]}),
        "global_average_pool": ([f(n, h, w, c)], {}),
        "global_average_pool_backward": ([f(n, c)], {"shape": [n, h, w, c]}),
        **{op: ([f(*v).astype(dt), f(*v[rng.randint(0, len(v)):]).astype(dt)], {})
           for op, dt in (("assign", f32), ("assign_add", np.int32), ("assign_sub", np.int64))},
        "moving_average_update": ([f(*v), f(*v)], {"momentum": 0.9}),
        "sgd_update": ([f(*v), f(*v), f32(0.1)], {"weight_decay": 0.01}),
        "sgd_momentum_update": ([f(*v), f(*v), f(*v), f32(0.1)],
                                {"momentum": 0.9, "nesterov": rng.random() < .5}),
        "adam_update": ([f(*v), f(*v), f(*v), pos(*v), pos(*v) if rng.random() < .5
                         else f(0), f32(0.1), np.int64(rng.randint(0, 9))], {}),
        "rmsprop_update": ([f(*v), f(*v), pos(*v), f(*v) if rng.random() < .5 else f(0),
                            f(0), f32(0.1)], {"momentum": 0.9}),
        "cosine_decay_schedule": ([np.int64(rng.randint(0, 99))],
                                  {"initial_learning_rate": 0.1, "decay_steps": 50,
                                   "warmup": True, "warmup_steps": 5, "warmup_target": 0.2}),
        "exponential_decay_schedule": ([np.int64(rng.randint(0, 99))],
                                       {"initial_learning_rate": 0.1, "decay_steps": 50,
                                        "decay_rate": 0.5}),
        "piecewise_constant_schedule": ([np.int64(rng.randint(0, 9)), np.array([3, 6]),
                                         f(3)], {}),
    }


WEIRD_INTS = [0, -1, -2, 2 ** 31, 2 ** 31 - 1, 2 ** 40, 2 ** 62 + 1, 2 ** 63 - 1, -2 ** 63]


def _mutate_array(rng, nrng, a):
    r, s = rng.random(), list(a.shape)
    if r < .35 and s:
        i = rng.randrange(len(s))
        s[i] = rng.choice([0, 1, s[i] + 1, max(s[i] - 1, 0), 2])
    elif r < .5:
        s = s[1:] if s and rng.random() < .5 else [rng.choice([1, 2])] + s
    elif r < .6:
        s = s[:-1]
    elif r < .75:
        return a.astype(rng.choice([np.int32, np.int64, np.uint8, f32]))
    elif r < .85:
        b = a.copy()
        if b.size:
            bad = [-1, 5, 10 ** 6, -2 ** 31] if b.dtype.kind in "iu" else [np.nan, np.inf, 1e38]
            b.flat[rng.randrange(b.size)] = rng.choice(bad) if b.dtype != np.uint8 else 200
        return b
    else:
        return f32(rng.uniform(-2, 2))
    return nrng.standard_normal(int(np.prod(s))).reshape(s).astype(a.dtype)


def _mutate_attr(rng, v):
    if isinstance(v, list):
        r = rng.random()
        if r < .4 and v:
            v = list(v)
            v[rng.randrange(len(v))] = rng.choice(WEIRD_INTS + [1, 2, 3])
            return v
        if r < .6:
            return v[:-1]
        if r < .75:
            return v + [rng.choice([1, 2, 3])]
        return rng.choice([[], [1] * 9, "ab", 2.5, [2.5], None, rng.choice(WEIRD_INTS)])
    if isinstance(v, bool):
        return rng.choice([2, "yes", None, 1.5])
    return rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e300, "x", None])


def _random_inputs(rng, nrng, info):
    """For ops without a template: inputs of random shapes and dtypes."""
    shapes = [(), (0,), (3,), (2, 3), (2, 0), (1, 1, 1, 1), (2, 4, 4, 3), (3, 3, 3, 2)]
    ins = [nrng.standard_normal(rng.choice(shapes)).astype(
        rng.choice([f32, f32, np.int32, np.int64, np.uint8])) for _ in range(info["n_in"])]
    return ins, {a: _mutate_attr(rng, rng.choice([[1], [2, 2], 1.0, True]))
                 for a in info["attrs"] if rng.random() < .5}


def fuzz(trials, seed):
    """Mutated calls of every registered op; print one line per problem: a
    non-ValueError/TypeError error, an error not prefixed with the op name,
    an input changed by a call that raised or that does not mutate it.
    A call starts from a valid one: half the time a random case of the op's
    entry in the op table (tests/op_table.py: fixed awkward shapes, threaded
    sizes, every dtype the entry covers), else its `_fuzz_templates` call
    (random small shapes, empty batches, random windows and strides).
    Address space is capped at 3 GiB: a fuzzed shape asking for gigabytes
    gets a MemoryError instead of filling the machine's memory."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    rng, nrng = random.Random(seed), np.random.default_rng(seed)
    for name in sorted(_C.op_names()):
        info = _C.op_info(name)
        entry = OP_TABLE.get(name)
        for _ in range(trials):
            calls = _fuzz_templates(rng, nrng)
            if entry is not None and entry.cases and (name not in calls or rng.random() < .5):
                case = rng.choice(entry.cases)
                calls[name] = (entry.inputs(case, nrng), case.attrs)
            if name in calls:
                ins, attrs = calls[name]
                ins, attrs = [np.asarray(a) for a in ins], dict(attrs)
                for _ in range(rng.choice([0, 1, 1, 1, 2])):
                    if ins and (rng.random() < .6 or not attrs):
                        i = rng.randrange(len(ins))
                        ins[i] = np.asarray(_mutate_array(rng, nrng, ins[i]))
                    elif attrs:
                        a = rng.choice(list(attrs))
                        attrs[a] = _mutate_attr(rng, attrs[a])
            else:
                ins, attrs = _random_inputs(rng, nrng, info)
            ts = [pr.Tensor(a) for a in ins]
            if len(ts) > 1 and rng.random() < .1:  # the same tensor twice
                ts[rng.randrange(len(ts))] = ts[0]
            before = snapshot(ts)
            desc = f"{name}({', '.join(f'{t.dtype}{t.shape}' for t in ts)}, {attrs})"
            print("CALL", desc, file=sys.stderr, flush=True)  # the last one names a crash
            raised = True
            try:
                out = C(name, *ts, **attrs)
                raised = False
                for o in (out if isinstance(out, tuple) else (out,) if out is not None else ()):
                    o.numpy().sum()
            except (ValueError, TypeError) as e:
                if not str(e).startswith(name + ":"):
                    print("UNPREFIXED", desc, type(e).__name__, e)
            except MemoryError:
                pass
            except Exception as e:  # noqa: BLE001 - any other error is a finding
                print("OTHER", desc, type(e).__name__, e)
            written = {id(ts[i]) for i in range(len(ts)) if info["mutates"] >> i & 1}
            for i, (t, b) in enumerate(zip(ts, before)):
                if (raised or id(t) not in written) and not np.array_equal(t.numpy(), b,
                                                                           equal_nan=True):
                    print("CHANGED", desc, f"input {i}", "by a call that raised" if raised else "")


def test_every_op_survives_mutated_calls():
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "fuzz", "50", "5"],
                       capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir())
    calls = [line for line in p.stderr.splitlines() if line.startswith("CALL")]
    assert p.returncode == 0, f"crash in {calls[-1:]}:\n{p.stderr[-3000:]}"
    assert len(calls) == 50 * len(_C.op_names())
    assert p.stdout == ""


def test_random_crop_inside_the_padding():
    """A crop lying wholly in the padding once memset a negative size."""
    run_isolated("""
        x = np.ones((3, 4, 3, 1), np.float32)
        state = pr.Variable(np.array([1, 3], np.int64))
        y, off = C("random_crop", x, state, size=[1, 1], padding=[1, 3])
        assert off.numpy().tolist() == [[4, 0], [2, 6], [5, 3]]  # image 0: left of the image
        assert y.numpy().sum() == 0  # every crop lies in the zero padding
    """)


# ---- in-place state ops -------------------------------------------------------------


def test_state_ops_refuse_bad_calls_and_change_nothing():
    v = pr.Variable(np.arange(6, dtype=f32).reshape(2, 3))
    vel = pr.Variable(np.ones((2, 3), f32))
    iv = pr.Variable(np.arange(3, dtype=np.int32))
    arr = np.ones((2, 3), f32)
    state = [v, vel, iv, arr]
    before = snapshot(state)
    for fn, exc, match in [
        (lambda: C("assign", arr, v), TypeError, "assign: input 0 is updated in place and must "
                                                 "be a Variable, got numpy.ndarray"),
        (lambda: C("assign", v, np.ones(4, f32)), ValueError, r"cannot be broadcast to the "
                                                              r"variable's shape \(2, 3\)"),
        (lambda: C("assign", v, np.ones((2, 3), np.int32)), TypeError, "the value must be float32"),
        (lambda: C("assign", pr.Variable(np.ones(2, np.uint8)), np.ones(2, np.uint8)), TypeError,
         "variable must be float32, int32 or int64, got uint8"),
        (lambda: C("assign", iv, np.array([1, 2 ** 40, 3], np.int64)), ValueError,
         "value 1099511627776 at index 1 cannot be stored in an int32 variable"),
        (lambda: C("assign_add", iv, np.array([1, 1.5, 1], f32)), ValueError,
         "value 1.5 at index 1 cannot be stored"),
        (lambda: C("sgd_update", v, np.ones((3, 2), f32), f32(0.1)), ValueError,
         r"gradient has shape \(3, 2\), expected the variable's shape"),
        (lambda: C("sgd_update", v, arr, np.ones(2, f32)), ValueError,
         "learning rate must hold one number"),
        (lambda: C("sgd_momentum_update", v, arr, np.ones((2, 3), f32), f32(.1), momentum=.9),
         TypeError, "input 2 is updated in place and must be a Variable"),
        (lambda: C("sgd_momentum_update", v, arr, pr.Variable(np.ones(6, f32)), f32(.1),
                   momentum=.9), ValueError, "velocity has shape"),
        (lambda: C("moving_average_update", v, np.ones((2, 1), f32), momentum=.9), ValueError,
         "value has shape"),
    ]:
        with pytest.raises(exc, match=match):
            fn()
        assert_unchanged(state, before)


def test_optimizer_checks_every_gradient_before_the_first_update():
    ws = [pr.Variable(np.ones((2, 2), f32)), pr.Variable(np.ones(3, f32))]
    for momentum in (0.0, 0.9):
        opt = pr.optimizers.SGD(0.1, momentum=momentum)
        good = np.ones((2, 2), f32)
        before = snapshot(ws)
        for bad, exc, match in [
            (np.ones(3, np.int32), TypeError, "gradient for variable .* must be float32, got int"),
            ("abc", TypeError, "gradient for variable .*: expected float"),
            (np.ones(4, f32), ValueError, r"gradient of shape \(4,\) for variable"),
        ]:
            with pytest.raises(exc, match="SGD.apply_gradients: " + match):
                opt.apply_gradients([(good, ws[0]), (bad, ws[1])])
            assert_unchanged(ws, before)
    for lr in ("x", float("inf"), float("nan"), -1.0):
        with pytest.raises(ValueError, match="`learning_rate` must be a finite float >= 0"):
            opt.learning_rate = lr
    assert float(opt.learning_rate) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="`weight_decay` must be a finite float"):
        pr.optimizers.SGD(weight_decay=float("nan"))


def test_set_weights_converts_everything_before_assigning():
    layer = pr.layers.Dense(2)
    layer(np.ones((1, 3), f32))
    before = snapshot(layer.weights)
    with pytest.raises(ValueError, match=r'Layer "dense.*": weight .*: could not convert'):
        layer.set_weights([np.zeros((3, 2)), np.array(["a", "b"])])
    assert_unchanged(layer.weights, before)


# ---- GradientTape ----------------------------------------------------------------


def test_output_gradients_must_match_the_target():
    x = pr.Variable(np.ones((2, 3), f32))
    for seed, exc, match in [
        (np.ones(3, f32), ValueError, r"output_gradients has shape \(3,\), expected the "
                                      r"target's shape \(2, 3\)"),
        (np.ones((2, 3), np.int32), TypeError, "output_gradients must be float32, got int32"),
        ("a", TypeError, "GradientTape.gradient: output_gradients: expected float"),
    ]:
        with pr.GradientTape() as tape:
            y = C("exp", x)
        with pytest.raises(exc, match=match):
            tape.gradient(y, [x], output_gradients=seed)
    # A rank-8 output gradient for a rank-7 loss made softmax_cross_entropy's
    # gradient rule write past a stack array.
    run_isolated("""
        x = pr.Tensor(np.ones((1,) * 6 + (2, 3), np.float32))
        t = pr.Variable(np.ones((1,) * 6 + (2, 3), np.float32))
        with pr.GradientTape() as tape:
            y = C("softmax_cross_entropy", x, t)
        raises(ValueError, "output_gradients has shape", tape.gradient, y, [t],
               output_gradients=np.ones((1,) * 6 + (2, 1), np.float32))
    """)


def test_a_list_of_targets_is_differentiated_as_their_sum():
    x = pr.Variable(np.array([1.0, 2.0, 3.0], f32))
    with pr.GradientTape(persistent=True) as tape:
        y = x * 2.0
        z = C("square", x)
    g = tape.gradient([y, z], x)
    np.testing.assert_allclose(g.numpy(), 2 + 2 * x.numpy())
    g = tape.gradient((y, z), [x], output_gradients=[None, np.full(3, 10, f32)])[0]
    np.testing.assert_allclose(g.numpy(), 2 + 20 * x.numpy())
    with pytest.raises(ValueError, match="target is an empty list"):
        tape.gradient([], x)
    with pytest.raises(ValueError, match="a list of 2 gradients, one per target"):
        tape.gradient([y, z], x, output_gradients=[np.ones(3, f32)])
    with pytest.raises(TypeError, match="target must be a Tensor, got float"):
        tape.gradient([y, 1.0], x)


def test_tape_refuses_values_updated_in_place_after_recording():
    x = pr.Variable(np.ones(3, f32))
    with pr.GradientTape(persistent=True) as tape:
        y = C("sum", x * x)
    np.testing.assert_array_equal(tape.gradient(y, [x])[0].numpy(), [2, 2, 2])
    pr.optimizers.SGD(0.1).apply_gradients([(np.ones(3, f32), x)])
    with pytest.raises(RuntimeError, match=r"input 0 of the recorded 'multiply' \(shape \(3,\)\) "
                                           "was updated in place"):
        tape.gradient(y, [x])  # would use the new x: 2 * 0.9, not 2
    with pr.GradientTape() as tape:
        h = C("relu", x)
        C("assign", h, np.zeros(3, f32))  # an op's output changed under the tape
    with pytest.raises(RuntimeError, match="output 0 of the recorded 'relu'"):
        tape.gradient(h, [x])


def test_compiled_tape_refuses_variables_updated_in_place_after_recording():
    x = pr.Variable(np.ones(3, f32))

    @pr.compile
    def step():
        with pr.GradientTape() as tape:
            y = C("sum", x * x)
        x.assign(np.full(3, 5.0, f32))
        return tape.gradient(y, [x])[0]  # eager raises; tracing must too, not give 10

    with pytest.raises(RuntimeError, match=r"recorded 'multiply'.*updated in place"):
        step()


def test_tape_misuse():
    x = pr.Variable(np.ones(3, f32))
    tape = pr.GradientTape()
    with tape:
        y = C("sum", x * x)
        with pytest.raises(RuntimeError, match="inside the tape's `with` block"):
            tape.gradient(y, [x])
        with pytest.raises(TypeError, match="watch: expected a Tensor, got int"):
            tape.watch(3)
        with pytest.raises(RuntimeError, match="already recording"):
            tape.__enter__()
    with pytest.raises(TypeError, match="source 0 must be a Tensor or Variable, got int"):
        tape.gradient(y, [3])
    with pytest.raises(TypeError, match="target must be a Tensor, got float"):
        tape.gradient(3.0, [x])
    np.testing.assert_array_equal(tape.gradient(y, [x])[0].numpy(), [2, 2, 2])
    with pytest.raises(RuntimeError, match="only be called once"):
        tape.gradient(y, [x])


# ---- layers and models ---------------------------------------------------------------


def test_bad_model_calls_leave_every_variable_unchanged():
    pr.utils.clear_session()
    pr.utils.set_random_seed(3)
    L = pr.layers
    inp = L.Input((6, 6, 2))
    h = L.ReLU()(L.BatchNormalization()(L.Conv2D(3, 3, padding="same")(inp)))
    out = L.Dense(3)(L.GlobalAveragePooling2D()(L.MaxPooling2D(2)(h)))
    model = pr.Model(inp, out)
    model.compile(optimizer=pr.optimizers.SGD(0.1, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.default_rng(0).standard_normal((4, 6, 6, 2)).astype(f32)
    y = np.array([0, 1, 2, 0])
    model.fit(x, y, batch_size=2, verbose=0)
    state = model.weights + model.optimizer.variables
    before = snapshot(state)
    for fn in [
        lambda: model.fit(np.ones((4, 7, 6, 2), f32), y, verbose=0),
        lambda: model.fit(x, np.array([0, 1, 3, 0]), verbose=0),
        lambda: model.fit(x, y[:3], verbose=0),
        lambda: model(np.ones((2, 6, 6, 5), f32), training=True),
        lambda: model(np.ones((0, 6, 6, 2), f32), training=True),
        lambda: model.predict(np.ones((2, 6, 6), f32), verbose=0),
        lambda: model.layers[1](np.ones((2, 6, 6, 3), f32)),
    ]:
        with pytest.raises(ValueError):
            fn()
        assert_unchanged(state, before)


# ---- leaks ----------------------------------------------------------------------


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_in_failing_or_succeeding_calls():
    x = pr.Tensor(np.ones((8, 16), f32))
    v = pr.Variable(np.ones((8, 16), f32))
    w = pr.Variable(np.ones((16, 4), f32))
    bad_labels = pr.Tensor(np.array([0, 1, 2, 3, 4, 5, 6, 99], np.int32))

    def step():
        C("add", x, x)
        C("batch_norm_train", x, np.ones(16, f32), np.zeros(16, f32))
        for fn in (lambda: C("add", x, np.ones(3, f32)), lambda: C("add", x, "a"),
                   lambda: C("sparse_softmax_cross_entropy", x, bad_labels),
                   lambda: C("reshape", x, shape=[2 ** 70]), lambda: C("assign", v, np.ones(3)),
                   lambda: pr.Tensor([[1.0], [1.0, 2.0]])):
            with pytest.raises((ValueError, TypeError)):
                fn()
        with pr.GradientTape(persistent=True) as tape:
            y = C("matmul", v, w)
        tape.gradient(C("sum", y), [v, w])
        with pytest.raises(ValueError):
            tape.gradient(y, [v], output_gradients=np.ones((3, 3), f32))

    def live_tensors():
        gc.collect()
        return sum(isinstance(o, pr.Tensor) for o in gc.get_objects())

    for _ in range(200):
        step()
    n0, r0 = live_tensors(), _rss()
    for _ in range(3000):
        step()
    assert live_tensors() == n0
    assert _rss() - r0 < 4 << 20


if __name__ == "__main__" and sys.argv[1:2] == ["fuzz"]:
    fuzz(int(sys.argv[2]), int(sys.argv[3]))
