"""pyresnet.ops with keras.ops names: the compositions and Python-level
helpers on top of the registry ops (the registry ops themselves are checked
by tests/test_op_table.py), and the Tensor methods and operators.

Each check compares with NumPy (float64 references), eagerly and inside
``pyresnet.compile``; gradients against float64 central differences."""
import math
import re

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import ops
from gradcheck import check_gradients

f32 = np.float32


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(f32)


def np_gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def np_sigmoid(x):
    return 1 / (1 + np.exp(-x))


# ---- activations and compositions -------------------------------------------------------

@pytest.mark.parametrize("name,fn,ref", [
    ("gelu tanh (keras.ops default)", ops.gelu, lambda x: np_gelu(x, True)),
    ("gelu erf", lambda x: ops.gelu(x, approximate=False), lambda x: np_gelu(x, False)),
    ("silu", ops.silu, lambda x: x * np_sigmoid(x)),
    ("swish", ops.swish, lambda x: x * np_sigmoid(x)),
    ("softplus", ops.softplus, lambda x: np.log1p(np.exp(x))),
    ("logsumexp axis 1", lambda x: ops.logsumexp(x, axis=1),
     lambda x: np.log(np.exp(x).sum(1))),
    ("var axis 0", lambda x: ops.var(x, axis=0), lambda x: x.var(0)),
    ("std keepdims", lambda x: ops.std(x, axis=-1, keepdims=True),
     lambda x: x.std(-1, keepdims=True)),
    ("softmax axis 0", lambda x: ops.softmax(x, axis=0),
     lambda x: np.exp(x) / np.exp(x).sum(0)),
    ("log_softmax axis 1 of 3", lambda x: ops.log_softmax(x[:, :, None] * 1.0, axis=1),
     lambda x: (x - np.log(np.exp(x).sum(1, keepdims=True)))[:, :, None]),
    ("layer_normalization", lambda x: ops.layer_normalization(x, np.array([1.5, 2, .5, 1], f32),
                                                              np.array([0, 1, 0, -1], f32),
                                                              epsilon=1e-3),
     lambda x: (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-3)
     * np.array([1.5, 2, .5, 1]) + np.array([0, 1, 0, -1])),
])
def test_compositions_match_numpy_eager_compiled_and_gradients(name, fn, ref, rng):
    x = randn(rng, 3, 4)
    want = ref(x.astype(np.float64))
    np.testing.assert_allclose(fn(x).numpy(), want, rtol=2e-6, atol=2e-6, err_msg=name)
    np.testing.assert_allclose(pr.compile(fn)(x).numpy(), fn(x).numpy(), rtol=0, atol=0)
    check_gradients(fn, ref, [x])


def test_gelu_defaults_follow_keras():
    """keras.ops.gelu approximates (tanh); keras.activations.gelu does not (erf):
    the values of the Keras docstrings."""
    x = np.array([-3.0, -1.0, 0.0, 1.0, 3.0], f32)
    np.testing.assert_allclose(ops.gelu(x).numpy(),
                               [-0.00363752, -0.15880796, 0.0, 0.841192, 2.9963627], atol=1e-6)
    np.testing.assert_allclose(pr.activations.gelu(x).numpy(),
                               [-0.00404951, -0.15865529, 0.0, 0.8413447, 2.9959507], atol=1e-6)


def test_second_derivatives_of_compositions(rng):
    """d2/dx2 of sum(tanh(x) * x) and of sum(sigmoid(x)**2) against central
    differences of the analytic first derivative."""
    x = randn(rng, 7).astype(np.float64)

    def grad(f, v):
        v = pr.Variable(v.astype(f32))
        with pr.GradientTape() as outer:
            with pr.GradientTape() as inner:
                y = ops.sum(f(v))
            g = inner.gradient(y, v)
            s = ops.sum(g)
        return g.numpy(), outer.gradient(s, v).numpy()

    for f, d1 in [(lambda v: ops.multiply(ops.tanh(v), v),
                   lambda v: np.tanh(v) + v * (1 - np.tanh(v) ** 2)),
                  (lambda v: ops.square(ops.sigmoid(v)),
                   lambda v: 2 * np_sigmoid(v) ** 2 * (1 - np_sigmoid(v)))]:
        g, h = grad(f, x)
        np.testing.assert_allclose(g, d1(x), rtol=1e-5, atol=1e-6)
        eps = 1e-4
        np.testing.assert_allclose(h, (d1(x + eps) - d1(x - eps)) / (2 * eps), rtol=1e-3,
                                   atol=1e-4)


# ---- array helpers ---------------------------------------------------------------------------

KEYS = [0, -1, np.s_[1:], np.s_[::-1], np.s_[..., 1], np.s_[None, 1, ..., ::2],
        np.s_[:, None], np.s_[1, :, -2], np.s_[:, [2, 0, 2]], np.s_[np.array([[1, 0]]), ..., 1],
        np.s_[..., 3:0:-2], (), np.s_[2:2]]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_getitem_matches_numpy(key, rng):
    x = randn(rng, 3, 4, 5)
    want = x[key]
    t = pr.Tensor(x)
    got = t[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(pr.compile(lambda a: a[key])(x).numpy(), want)
    if want.size:
        check_gradients(lambda a: a[key], lambda a: a[key], [x])


def test_getitem_errors(rng):
    t = pr.Tensor(randn(rng, 3, 4))
    with pytest.raises(IndexError, match="index 3 is out of bounds for axis 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(TypeError, match="only ints, slices"):
        t[0.5]
    with pytest.raises(ValueError, match="out of bounds for a dimension of size 4"):
        t[:, [4]]


def test_getitem_on_an_unknown_batch_compiled(rng):
    """x[:, 1:, ::2] on a batch of unknown size: one trace serves every batch."""
    f = pr.compile(lambda a: a[:, 1:, ::2] * 2.0, reduce_retracing=True)
    for n in (2, 5):
        x = randn(rng, n, 4, 5)
        np.testing.assert_array_equal(f(x).numpy(), x[:, 1:, ::2] * 2)
    assert f.tracing_count <= 2
    g = pr.compile(lambda a: a[1], input_signature=[pr.TensorSpec((None, 3))])
    with pytest.raises(ValueError, match="unknown size while tracing"):
        g(randn(rng, 2, 3))


def test_concatenate_stack_split_expand_squeeze(rng):
    a, b, c = randn(rng, 2, 3), randn(rng, 2, 1), randn(rng, 2, 2)
    np.testing.assert_array_equal(ops.concatenate([a, b, c], axis=1).numpy(),
                                  np.concatenate([a, b, c], 1))
    np.testing.assert_array_equal(ops.stack([a, a * 2], axis=1).numpy(), np.stack([a, a * 2], 1))
    for parts in (3, [1, 2]):
        for got, want in zip(ops.split(a, parts, axis=1), np.split(a, parts, axis=1)):
            np.testing.assert_array_equal(got.numpy(), want)
    assert ops.expand_dims(a, -1).shape == (2, 3, 1)
    assert ops.squeeze(ops.expand_dims(a, 0)).shape == (2, 3)
    with pytest.raises(ValueError, match="3 sections do not divide a size of 2"):
        ops.split(a, 3, axis=0)
    check_gradients(lambda x, y: ops.concatenate([x, y, x], axis=-1),
                    lambda x, y: np.concatenate([x, y, x], -1), [a, b])


def test_split_and_conv2d_name_a_bad_axis_or_a_0d_input(rng):
    """These raised a bare IndexError from inside the Python wrappers."""
    a = randn(rng, 2, 4)
    for axis in (2, -3, 7):
        with pytest.raises(ValueError, match=re.escape(
                f"split: axis must be in [-2, 2) for x of shape (2, 4), got {axis}")):
            ops.split(a, 2, axis=axis)
    with pytest.raises(ValueError, match="split: x must have at least one dimension, got a "
                                         "0-d tensor"):
        ops.split(np.float32(3.0), 1)
    assert [p.shape for p in ops.split(a, 2, axis=-1)] == [(2, 2), (2, 2)]
    kernel = randn(rng, 3, 3, 2, 4)
    with pytest.raises(ValueError, match="conv2d: x must have rank 4"):
        ops.conv2d(np.float32(1.0), kernel)
    with pytest.raises(ValueError, match="conv2d: .*rank 4"):
        ops.conv2d(randn(rng, 1, 5, 5, 2), np.float32(1.0))


def test_zeros_ones_full_of_a_traced_shape(rng):
    """Inside a compiled function with unknown sizes ``y.shape`` holds None
    for them: zeros/ones/full of it name the fix (ops.shape(y), zeros_like)
    instead of failing in broadcast_to on (-1, -1, -1, 4); ops.shape(y)
    works."""
    sig = [pr.TensorSpec((None, None, None, 4))]
    for make in (ops.zeros, ops.ones, lambda s: ops.full(s, 2.0)):
        with pytest.raises(ValueError, match=re.escape(
                "shape (None, None, None, 4) has unknown sizes (None)") + ".*ops.shape"):
            pr.compile(lambda y: make(y.shape) + y, input_signature=sig)(randn(rng, 1, 2, 3, 4))
    f = pr.compile(lambda y: ops.full(ops.shape(y), 2.0) + ops.zeros(ops.shape(y)) * y,
                   input_signature=sig)
    for shape in ((1, 2, 3, 4), (2, 5, 1, 4)):
        np.testing.assert_array_equal(f(randn(rng, *shape)).numpy(), np.full(shape, 2.0))


def test_take_slice_pad_one_hot_where_cast(rng):
    x = randn(rng, 4, 3)
    np.testing.assert_array_equal(ops.take(x, [3, 3, 0]).numpy(), np.take(x, [3, 3, 0]))
    np.testing.assert_array_equal(ops.take(x, [[2], [0]], axis=1).numpy(),
                                  np.take(x, [[2], [0]], axis=1))
    np.testing.assert_array_equal(ops.slice(x, (1, 0), (2, -1)).numpy(), x[1:3, 0:])
    np.testing.assert_array_equal(ops.pad(x, ((1, 0), (0, 2)), constant_values=3).numpy(),
                                  np.pad(x, ((1, 0), (0, 2)), constant_values=3))
    np.testing.assert_array_equal(ops.pad(x, 1).numpy(), np.pad(x, 1))
    np.testing.assert_array_equal(ops.one_hot(np.array([1, 0, 3]), 3).numpy(),
                                  np.eye(3, dtype=f32)[[1, 0]].tolist() + [[0, 0, 0]])
    np.testing.assert_array_equal(ops.where(x > 0, x, -1.0).numpy(), np.where(x > 0, x, -1))
    assert ops.cast(x, "int64").dtype == "int64" and ops.cast(x, np.bool_).dtype == "bool"
    with pytest.raises(TypeError, match="dtype must be one of"):
        ops.cast(x, "float64")
    with pytest.raises(ValueError, match="only mode='constant'"):
        ops.pad(x, 1, mode="reflect")


def test_reductions_and_constants(rng):
    x = randn(rng, 2, 3, 4)
    for fn, ref in [(ops.max, np.max), (ops.min, np.min)]:
        np.testing.assert_array_equal(fn(x, axis=(0, 2), keepdims=True).numpy(),
                                      ref(x, axis=(0, 2), keepdims=True))
    np.testing.assert_array_equal(ops.max(x, initial=10.0).numpy(), 10.0)
    np.testing.assert_array_equal(ops.argmax(x, axis=1).numpy(), x.argmax(1))
    assert ops.argmin(x).numpy() == x.argmin()
    assert ops.argmax(x).dtype == "int32"
    np.testing.assert_array_equal(ops.ones((2, 3)).numpy(), np.ones((2, 3)))
    assert ops.zeros(4, dtype="int32").dtype == "int32"
    np.testing.assert_array_equal(ops.full((2,), 7.5).numpy(), [7.5, 7.5])
    assert ops.ones_like(np.arange(3)).dtype == "int64"
    np.testing.assert_array_equal(ops.full_like(x, 2.0).numpy(), np.full_like(x, 2.0))

    @pr.compile(reduce_retracing=True)
    def sized(a):
        return ops.zeros((ops.shape(a)[0], 2)) + ops.ones_like(a)[:, :1]

    for n in (1, 3):
        np.testing.assert_array_equal(sized(randn(rng, n, 4)).numpy(), np.ones((n, 2)))


def test_dropout_is_seeded_inverted_and_counter_based(rng):
    """ops.dropout is pyresnet.random.dropout: inverted scaling, a
    SeedGenerator advanced by every call (eagerly and compiled, the same
    draws), an int seed repeating its mask, noise_shape sharing draws."""
    x = np.ones((200, 50), f32)
    gen = pr.random.SeedGenerator(3)
    y1 = ops.dropout(x, 0.3, seed=gen).numpy()
    y2 = ops.dropout(x, 0.3, seed=gen).numpy()
    assert set(np.unique(y1)) <= {0.0, f32(1 / 0.7)}
    assert abs((y1 == 0).mean() - 0.3) < 0.02
    assert not np.array_equal(y1, y2), "the state advances: a new mask per call"
    assert gen.state.numpy().tolist() == [3, 2]
    np.testing.assert_array_equal(ops.dropout(x, 0.3, seed=5).numpy(),
                                  ops.dropout(x, 0.3, seed=5).numpy())
    z = ops.dropout(x, 0.5, noise_shape=(None, 1), seed=1).numpy()
    assert (z == z[:, :1]).all()
    g_eager, g_graph = pr.random.SeedGenerator(9), pr.random.SeedGenerator(9)
    f = pr.compile(lambda a: ops.dropout(a, 0.25, seed=g_graph))
    for _ in range(2):
        np.testing.assert_array_equal(f(x).numpy(), ops.dropout(x, 0.25, seed=g_eager).numpy())
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\), got 1"):
        ops.dropout(x, 1.0, seed=1)
    v = pr.Variable(randn(rng, 3, 4))
    with pr.GradientTape() as tape:
        out = ops.dropout(v, 0.5, seed=pr.random.SeedGenerator(4))
        loss = ops.sum(out)
    np.testing.assert_array_equal(tape.gradient(loss, v).numpy(),
                                  np.where(out.numpy() != 0, 2.0, 0.0))


# ---- Tensor methods and operators ------------------------------------------------------------

def test_tensor_operators_match_numpy(rng):
    a, b = randn(rng, 3, 4), rng.uniform(0.5, 2, (4,)).astype(f32)
    ta, tb = pr.Tensor(a), pr.Tensor(b)
    cases = [(ta + tb, a + b), (1.0 - ta, 1 - a), (ta * 2, a * 2), (2.0 / tb, 2 / b),
             (tb ** 2.5, b ** 2.5), (2.0 ** ta, 2 ** a), (ta @ ta.T, a @ a.T), (-ta, -a),
             (abs(ta), np.abs(a)), (+ta, a), (ta.T, a.T), (ta.reshape(2, 6), a.reshape(2, 6)),
             (ta.reshape((4, 3)), a.reshape(4, 3)), (ta.transpose(1, 0), a.T),
             (ta.sum(axis=1), a.sum(1)), (ta.mean(), a.mean()),
             (ta.max(axis=0, keepdims=True), a.max(0, keepdims=True)),
             (ta.min(), a.min()), (ta.argmax(axis=1), a.argmax(1))]
    for k, (got, want) in enumerate(cases):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6, err_msg=str(k))
    for got, want in [(ta > 0, a > 0), (ta <= tb, a <= b), (0.5 < ta, 0.5 < a),
                      (ta == ta, a == a), (ta != 0.1, a != 0.1), (ta >= tb, a >= b)]:
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.numpy(), want)
    assert ta.astype("int32").dtype == "int32"


def test_equality_keeps_identity_hashing(rng):
    a = pr.Tensor(randn(rng, 2))
    b = pr.Tensor(a.numpy())
    assert {a: 1, b: 2}[a] == 1 and len({a, b}) == 2 and hash(a) != hash(b)
    assert a in [a] and (a == None) is False and (a != "x") is True  # noqa: E711
    assert (a == b).numpy().all()
    v = pr.Variable(np.zeros(2, f32))
    assert v in {v} and (v == 0).numpy().all()


def test_symbolic_comparison_as_python_bool_raises_the_tracing_error(rng):
    @pr.compile
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(TypeError, match="bool\\(Tensor\\)"):
        f(np.ones(1, f32))

    @pr.compile(reduce_retracing=True)
    def g(x):
        n = ops.shape(x)[0]
        return ops.zeros((n * 2,)), (n == 3)

    zeros, eq = g(randn(rng, 3, 2))
    assert zeros.shape == (6,) and bool(eq)


def test_depthwise_and_grouped_conv_match_per_channel_convs(rng):
    """depthwise_conv2d (Keras's (KH, KW, C, M) kernel) and conv2d with an
    inferred groups against NumPy convolutions of each channel group; the
    gradients against central differences."""
    from test_ops_conv import conv_ref
    x, k = randn(rng, 2, 5, 6, 3), randn(rng, 3, 3, 3, 2)
    want = np.concatenate([conv_ref(x[..., c:c + 1].astype(np.float64), k[:, :, c:c + 1, :],
                                    (2, 2), True) for c in range(3)], -1)
    np.testing.assert_allclose(ops.depthwise_conv2d(x, k, strides=2, padding="same").numpy(),
                               want, rtol=1e-5, atol=1e-5)
    kg = randn(rng, 3, 3, 1, 6)  # (C / groups) = 1 -> groups inferred as 3
    np.testing.assert_allclose(
        ops.conv2d(x, kg, padding="same").numpy(),
        np.concatenate([conv_ref(x[..., g:g + 1].astype(np.float64), kg[..., 2 * g:2 * g + 2],
                                 (1, 1), True) for g in range(3)], -1), rtol=1e-5, atol=1e-5)
    check_gradients(lambda a, b: ops.depthwise_conv2d(a, b, padding="same"),
                    lambda a, b: np.concatenate([conv_ref(a[..., c:c + 1], b[:, :, c:c + 1, :],
                                                          (1, 1), True) for c in range(3)], -1),
                    [x[:1, :4, :4], k], rtol=5e-3, atol=5e-3)
    with pytest.raises(ValueError, match="groups must be >= 1 and divide the output channels"):
        ops.conv2d(x, randn(rng, 3, 3, 1, 4), groups=3)


def test_logical_ops_operators_and_iteration(rng):
    a, b = randn(rng, 3, 4), randn(rng, 3, 4)
    ta, tb = pr.Tensor(a), pr.Tensor(b)
    for got, want in [((ta > 0) & (tb > 0), (a > 0) & (b > 0)),
                      ((ta > 0) | (tb < 0), (a > 0) | (b < 0)),
                      ((ta > 0) ^ (tb > 0), (a > 0) ^ (b > 0)), (~(ta > 0), ~(a > 0)),
                      (ops.logical_and(a, 0.0), np.logical_and(a, 0.0)),
                      (ops.logical_not(np.array([0, 3, -1])), np.logical_not([0, 3, -1])),
                      (ops.any(ta > 1, axis=1), (a > 1).any(1)),
                      (ops.all(ta > -3, axis=0, keepdims=True), (a > -3).all(0, keepdims=True)),
                      (ops.any(ta > 100), np.array(False))]:
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.numpy(), want)
    rows = list(ta)
    assert len(rows) == 3 and all(np.array_equal(r.numpy(), a[i]) for i, r in enumerate(rows))
    with pytest.raises(TypeError, match="0-d"):
        iter(pr.Tensor(np.float32(1)))

    @pr.compile
    def f(x):
        return [r for r in x]

    with pytest.raises(TypeError, match="len\\(Tensor\\)"):
        f(a)
