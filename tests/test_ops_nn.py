"""nn-family ops and the unary elementwise math: forward against NumPy
float64 references, gradients against float64 central differences."""
import numpy as np
import pytest

import pyresnet as pr
from gradcheck import check_forward, check_gradients

ops = pr.ops


def rng(seed=0):
    return np.random.default_rng(seed)


# ---- unary and binary elementwise math ------------------------------------

@pytest.mark.parametrize("name,ref,lo,hi", [
    ("exp", np.exp, -3.0, 3.0),
    ("log", np.log, 0.2, 4.0),
    ("sqrt", np.sqrt, 0.2, 4.0),
    ("square", np.square, -3.0, 3.0),
])
def test_unary_math(name, ref, lo, hi):
    x = rng(1).uniform(lo, hi, (3, 5)).astype(np.float32)
    fn = getattr(ops, name)
    check_forward(fn, ref, [x], rtol=2e-6)
    check_gradients(fn, ref, [x])


def test_unary_math_edges():
    np.testing.assert_array_equal(ops.log(np.array([0.0, 1.0], np.float32)).numpy(), [-np.inf, 0])
    assert np.isnan(ops.sqrt(np.array([-1.0], np.float32)).numpy()[0])
    with pytest.raises(TypeError, match="exp: input 0 must be float32, got int32"):
        ops.exp(np.ones(2, np.int32))


def test_clip_forward_and_zero_gradient_outside():
    x = np.array([[-2.0, -0.5, 0.25, 0.7, 3.0], [0.1, -1.7, 1.9, -0.2, 0.9]], np.float32)
    ref = lambda v: np.clip(v, -0.6, 0.8)
    check_forward(lambda v: ops.clip(v, -0.6, 0.8), ref, [x])
    check_gradients(lambda v: ops.clip(v, -0.6, 0.8), ref, [x])
    v = pr.Variable(x)
    with pr.GradientTape() as tape:
        y = ops.clip(v, -0.6, 0.8)
    (g,) = tape.gradient(y, [v])
    np.testing.assert_array_equal(g.numpy(), ((x >= -0.6) & (x <= 0.8)).astype(np.float32))
    # lo > hi: NumPy gives hi everywhere
    np.testing.assert_array_equal(ops.clip(x, 1.0, 0.0).numpy(), np.clip(x, 1.0, 0.0))


@pytest.mark.parametrize("name,ref", [("maximum", np.maximum), ("minimum", np.minimum)])
@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 3))])
def test_maximum_minimum(name, ref, sa, sb):
    r = rng(2)
    # distinct values on a grid so no pair ties and finite differences stay on one side
    a = (r.permutation(60)[:int(np.prod(sa))].reshape(sa) * 0.1).astype(np.float32)
    b = (r.permutation(60)[:int(np.prod(sb))].reshape(sb) * 0.1 + 0.05).astype(np.float32)
    fn = getattr(ops, name)
    check_forward(fn, ref, [a, b], rtol=0, atol=0)
    check_gradients(fn, ref, [a, b])


def test_maximum_ties_and_nan():
    x, y = pr.Variable(np.array([1.0, 2.0], np.float32)), pr.Variable(np.array([1.0, 3.0], np.float32))
    with pr.GradientTape() as tape:
        z = ops.maximum(x, y)
    gx, gy = tape.gradient(z, [x, y])
    np.testing.assert_array_equal(gx.numpy(), [1, 0])  # a tie goes to x, as TensorFlow
    np.testing.assert_array_equal(gy.numpy(), [0, 1])
    nan = np.array([np.nan, 1.0], np.float32)
    assert np.isnan(ops.maximum(nan, np.float32(0.0)).numpy()[0])
    assert np.isnan(ops.minimum(np.float32(0.0), nan).numpy()[0])


# ---- sum, mean ---------------------------------------------------------------

@pytest.mark.parametrize("shape,axis,keepdims", [
    ((2, 3, 4), None, False), ((2, 3, 4), 1, False), ((2, 3, 4), -1, True),
    ((2, 3, 4), (0, 2), False), ((2, 3, 4), (2, 0), True), ((3, 1, 5), (1,), False),
    ((1, 5, 1, 3), (0, 1), False), ((4, 3, 3, 5), (1, 2), False), ((7,), 0, False), ((), None, False),
    ((2, 3), (), False),
])
@pytest.mark.parametrize("name", ["sum", "mean"])
def test_reductions(name, shape, axis, keepdims):
    x = rng(3).standard_normal(shape).astype(np.float32)
    fn = lambda v: getattr(ops, name)(v, axis=axis, keepdims=keepdims)
    ref = lambda v: getattr(np, name)(v, axis=axis, keepdims=keepdims)
    check_forward(fn, ref, [x])
    check_gradients(fn, ref, [x])


def test_reduction_errors_and_empty():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="sum: axis 2 is out of bounds for rank 2"):
        ops.sum(x, axis=2)
    with pytest.raises(ValueError, match="mean: axis -1 is repeated"):
        ops.mean(x, axis=(1, -1))
    assert ops.sum(np.ones((0, 3), np.float32), axis=0).numpy().tolist() == [0, 0, 0]
    assert np.isnan(ops.mean(np.ones((0,), np.float32)).numpy())


def test_reductions_are_deterministic_across_thread_counts():
    x = rng(4).standard_normal((64, 33, 17)).astype(np.float32) * 100
    before = pr.get_num_threads()
    try:
        results = []
        for n in (1, 2, 3):
            pr.set_num_threads(n)
            results.append([ops.sum(x, axis=a).numpy() for a in (None, 0, (1, 2), 1)])
    finally:
        pr.set_num_threads(before)
    for r in results[1:]:
        for a, b in zip(results[0], r):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(results[0][0], x.astype(np.float64).sum(), rtol=1e-6)


# ---- reshape, flatten --------------------------------------------------------

def test_reshape_and_flatten():
    x = rng(5).standard_normal((2, 3, 5)).astype(np.float32)
    for shape in [(6, 5), (-1,), (5, -1, 1), (2, 15), 30]:
        check_forward(lambda v: ops.reshape(v, shape), lambda v: np.reshape(v, shape), [x])
    check_gradients(lambda v: ops.reshape(v, (5, -1)), lambda v: np.reshape(v, (5, -1)), [x])
    labels = np.arange(6, dtype=np.int64)
    got = ops.reshape(labels, (2, 3))
    assert got.dtype == "int64" and got.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    img = rng(6).standard_normal((1, 3, 5, 2)).astype(np.float32)  # batch 1
    check_forward(ops.flatten, lambda v: v.reshape(v.shape[0], -1), [img])
    check_gradients(ops.flatten, lambda v: v.reshape(v.shape[0], -1), [img])
    assert ops.flatten(np.zeros(4, np.float32)).shape == (4, 1)
    assert ops.flatten(np.zeros((0, 3, 2), np.float32)).shape == (0, 6)


def test_reshape_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"reshape: cannot reshape a tensor of shape \(2, 3\) into shape \(4, -1\)"):
        ops.reshape(x, (4, -1))
    with pytest.raises(ValueError, match=r"\(2, 3\) into shape \(7,\)"):
        ops.reshape(x, 7)
    with pytest.raises(ValueError, match="one unknown dimension"):
        ops.reshape(x, (-1, -1))
    with pytest.raises(ValueError, match="negative dimension"):
        ops.reshape(x, (-2, -3))
    with pytest.raises(ValueError, match=r"\(0, 3\) into shape \(0, -1\)"):
        ops.reshape(np.zeros((0, 3), np.float32), (0, -1))
    with pytest.raises(ValueError, match="flatten: needs rank >= 1"):
        ops.flatten(np.float32(1.0))


# ---- softmax -------------------------------------------------------------------

def np_log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def np_softmax(x):
    return np.exp(np_log_softmax(x))


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 3, 5), (4,)])
def test_softmax_family(shape):
    x = rng(7).standard_normal(shape).astype(np.float32) * 2
    check_forward(ops.softmax, np_softmax, [x], rtol=1e-5, atol=1e-6)
    check_forward(ops.log_softmax, np_log_softmax, [x], rtol=1e-5, atol=1e-5)
    check_gradients(ops.softmax, np_softmax, [x])
    check_gradients(ops.log_softmax, np_log_softmax, [x])


def test_softmax_is_stable_for_large_logits():
    x = np.array([[1000.0, 999.0, -1000.0], [-1e30, 0.0, 1e30]], np.float32)
    np.testing.assert_allclose(ops.softmax(x).numpy(), np_softmax(x.astype(np.float64)), atol=1e-7)
    np.testing.assert_allclose(ops.log_softmax(x).numpy()[0], np_log_softmax(x.astype(np.float64))[0],
                               rtol=1e-6)
    y = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]], np.float32)  # another axis: moved last
    np.testing.assert_allclose(ops.softmax(y, axis=0).numpy(), np_softmax(y.T.astype(np.float64)).T,
                               atol=1e-7)
    with pytest.raises(ValueError, match="axis 2 is out of bounds for rank 2"):
        ops.softmax(x, axis=2)


# ---- losses ----------------------------------------------------------------------

def np_sparse_ce(logits, labels):
    return -np.take_along_axis(np_log_softmax(logits), labels[..., None].astype(np.int64), -1)[..., 0]


def np_soft_ce(logits, target):
    return -(target * np_log_softmax(logits)).sum(-1)


def np_keras_probs_ce(probs, target, eps=1e-7):
    q = probs / probs.sum(-1, keepdims=True)
    return -(target * np.log(np.clip(q, eps, 1 - eps))).sum(-1)


def onehot(labels, c):
    return np.eye(c)[labels]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(1, 3), (5, 7), (2, 3, 4)])
def test_sparse_softmax_cross_entropy(dtype, shape):
    r = rng(8)
    logits = (r.standard_normal(shape) * 3).astype(np.float32)
    labels = r.integers(0, shape[-1], shape[:-1]).astype(dtype)
    check_forward(ops.sparse_softmax_cross_entropy, np_sparse_ce, [logits, labels])
    check_gradients(ops.sparse_softmax_cross_entropy, np_sparse_ce, [logits, labels])


@pytest.mark.parametrize("bad,index", [(10, 2), (-1, 0)])
@pytest.mark.parametrize("name", ["sparse_softmax_cross_entropy", "sparse_categorical_crossentropy"])
def test_out_of_range_labels_raise(name, bad, index):
    probs = np.full((4, 10), 0.1, np.float32)
    labels = np.array([1, 2, 3, 4], np.int64)
    labels[index] = bad
    with pytest.raises(ValueError, match=rf"{name}: label {bad} at index {index} is outside \[0, 10\)"):
        ops.call(name, probs, labels)
    # the backward op checks too
    with pytest.raises(ValueError, match=rf"label {bad} at index {index}"):
        ops.call(name + "_backward", np.ones(4, np.float32), probs, labels)


def test_loss_shape_and_dtype_errors():
    with pytest.raises(ValueError, match=r"labels \(input 1\) have shape \(3,\), expected \(4, 10\)"):
        ops.sparse_softmax_cross_entropy(np.zeros((4, 10), np.float32), np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="labels .* must be int32 or int64, got float32"):
        ops.sparse_softmax_cross_entropy(np.zeros((4, 10), np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="input 1 has shape"):
        ops.softmax_cross_entropy(np.zeros((4, 10), np.float32), np.zeros((4, 9), np.float32))
    with pytest.raises(ValueError, match="at least one class"):
        ops.softmax_cross_entropy(np.zeros((4, 0), np.float32), np.zeros((4, 0), np.float32))


@pytest.mark.parametrize("shape", [(1, 2), (5, 7), (2, 3, 4)])
def test_softmax_cross_entropy_soft_labels(shape):
    r = rng(9)
    logits = (r.standard_normal(shape) * 2).astype(np.float32)
    target = r.uniform(0, 1, shape)
    target = (target / target.sum(-1, keepdims=True) * 1.3).astype(np.float32)  # need not sum to 1
    check_forward(ops.softmax_cross_entropy, np_soft_ce, [logits, target])
    check_gradients(ops.softmax_cross_entropy, np_soft_ce, [logits, target])


@pytest.mark.parametrize("shape", [(1, 3), (5, 7), (2, 3, 4)])
def test_categorical_crossentropy_from_probabilities(shape):
    r = rng(10)
    probs = r.uniform(0.05, 1.0, shape).astype(np.float32)  # not normalised: Keras renormalises
    target = r.uniform(0, 1, shape).astype(np.float32)
    check_forward(lambda p, t: ops.categorical_crossentropy(t, p),
                  lambda p, t: np_keras_probs_ce(p, t), [probs, target])
    check_gradients(lambda p, t: ops.categorical_crossentropy(t, p),
                    lambda p, t: np_keras_probs_ce(p, t), [probs, target], wrt=[0])
    labels = r.integers(0, shape[-1], shape[:-1]).astype(np.int32)
    ref = lambda p, l: np_keras_probs_ce(p, onehot(l, shape[-1]))
    check_forward(lambda p, l: ops.sparse_categorical_crossentropy(l, p), ref, [probs, labels])
    check_gradients(lambda p, l: ops.sparse_categorical_crossentropy(l, p), ref, [probs, labels])


def test_probability_losses_clip_like_keras():
    # class 0 holds 1e-9 of the mass: clipped to 1e-7 (gradient 0 through the clip);
    # class 2 is 1 - 2e-9: clipped to 1 - 1e-7
    probs = np.array([[1e-9, 0.3, 0.7], [1e-9, 1e-9, 1.0]], np.float32)
    target = np.array([[1.0, 0.5, 0.5], [0.0, 0.0, 1.0]], np.float32)
    want = np_keras_probs_ce(probs.astype(np.float64), target.astype(np.float64))
    got = ops.categorical_crossentropy(target, probs)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    np.testing.assert_allclose(got.numpy()[0], -np.log(1e-7) - 0.5 * np.log(0.3) - 0.5 * np.log(0.7),
                               rtol=1e-5)
    np.testing.assert_allclose(got.numpy()[1], -np.log(1 - 1e-7), rtol=1e-3)
    p = pr.Variable(probs)
    with pr.GradientTape() as tape:
        loss = ops.sparse_categorical_crossentropy(np.array([0, 2]), p)
    (g,) = tape.gradient(loss, [p])
    np.testing.assert_array_equal(g.numpy(), np.zeros((2, 3), np.float32))  # all clipped


def test_keras_style_wrappers():
    r = rng(11)
    logits = r.standard_normal((4, 5)).astype(np.float32)
    labels = np.array([[0], [4], [2], [2]], np.int32)  # (N, 1), squeezed as Keras does
    np.testing.assert_allclose(
        ops.sparse_categorical_crossentropy(labels, logits, from_logits=True).numpy(),
        np_sparse_ce(logits.astype(np.float64), labels[:, 0]), rtol=1e-5)
    soft = onehot(labels[:, 0], 5).astype(np.float32)
    np.testing.assert_allclose(
        ops.categorical_crossentropy(soft, logits, from_logits=True).numpy(),
        np_sparse_ce(logits.astype(np.float64), labels[:, 0]), rtol=1e-5)
    probs = np_softmax(logits.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(ops.sparse_categorical_crossentropy(labels, probs).numpy(),
                               np_sparse_ce(logits.astype(np.float64), labels[:, 0]), rtol=1e-5)


# ---- accuracies ------------------------------------------------------------------

def test_accuracies():
    pred = np.array([[0.1, 0.7, 0.2], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4], [0.0, 0.0, 0.0]], np.float32)
    labels = np.array([1, 1, 2, 0], np.int64)  # row 1 ties: the first maximum (0) wins
    np.testing.assert_array_equal(ops.sparse_categorical_accuracy(labels, pred).numpy(), [1, 0, 1, 1])
    np.testing.assert_array_equal(
        ops.sparse_categorical_accuracy(np.array([[1], [0], [7], [-1]], np.int32), pred).numpy(),
        [1, 1, 0, 0])  # (N, 1) labels; out-of-range labels score 0
    soft = np.array([[0.2, 0.8, 0.0], [0.0, 0.4, 0.6], [0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], np.float32)
    np.testing.assert_array_equal(ops.categorical_accuracy(soft, pred).numpy(), [1, 0, 0, 1])
    assert not pr._C.op_info("sparse_categorical_accuracy")["differentiable"]


# ---- batch normalization -----------------------------------------------------------

def np_bn_train(x, gamma, beta, eps=1e-3):
    axes = tuple(range(x.ndim - 1))
    mean, var = x.mean(axes), x.var(axes)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta, mean, var


def np_bn_infer(x, gamma, beta, mm, mv, eps=1e-3):
    return (x - mm) / np.sqrt(mv + eps) * gamma + beta


# channels < 16, = 16 + leftovers, 2 blocks + leftovers (the kernels keep 16-channel blocks)
BN_SHAPES = [(2, 3, 5, 7), (1, 4, 3, 2), (5, 3), (1, 3), (3, 1), (3, 2, 19), (4, 35)]


def bn_params(c, r):
    return (r.uniform(0.5, 1.5, c).astype(np.float32), r.standard_normal(c).astype(np.float32))


@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_train(shape):
    r = rng(12)
    x = (r.standard_normal(shape) * 2 + 3).astype(np.float32)
    gamma, beta = bn_params(shape[-1], r)
    fn = lambda *a: ops.batch_norm_train(*a, epsilon=1e-3)
    check_forward(fn, np_bn_train, [x, gamma, beta], rtol=1e-4, atol=1e-5)
    check_gradients(fn, np_bn_train, [x, gamma, beta], rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("shape", BN_SHAPES)
def test_batch_norm_infer(shape):
    r = rng(13)
    c = shape[-1]
    x = r.standard_normal(shape).astype(np.float32)
    gamma, beta = bn_params(c, r)
    mm, mv = r.standard_normal(c).astype(np.float32), r.uniform(0.2, 2, c).astype(np.float32)
    fn = lambda *a: ops.batch_norm_infer(*a, epsilon=1e-2)
    ref = lambda *a: np_bn_infer(*a, eps=1e-2)
    check_forward(fn, ref, [x, gamma, beta, mm, mv], rtol=1e-5, atol=1e-5)
    check_gradients(fn, ref, [x, gamma, beta, mm, mv], wrt=[0, 1, 2])


def test_batch_norm_training_versus_inference():
    r = rng(14)
    x = (r.standard_normal((4, 6, 6, 3)) * 3 - 2).astype(np.float32)
    gamma, beta = bn_params(3, r)
    y, mean, var = ops.batch_norm_train(x, gamma, beta)
    # training output is normalised by the batch: per channel mean beta, std ~ gamma
    y = y.numpy()
    np.testing.assert_allclose(y.mean((0, 1, 2)), beta, atol=1e-5)
    np.testing.assert_allclose(y.std((0, 1, 2)), gamma * np.sqrt(var.numpy() / (var.numpy() + 1e-3)),
                               rtol=1e-5)
    # inference with the batch statistics reproduces training; with other
    # statistics it does not depend on the batch
    np.testing.assert_allclose(ops.batch_norm_infer(x, gamma, beta, mean, var).numpy(), y,
                               rtol=1e-5, atol=1e-5)
    mm, mv = np.zeros(3, np.float32), np.ones(3, np.float32)
    one = ops.batch_norm_infer(x[:1], gamma, beta, mm, mv).numpy()
    np.testing.assert_allclose(one, ops.batch_norm_infer(x, gamma, beta, mm, mv).numpy()[:1])
    np.testing.assert_allclose(one, x[:1] / np.sqrt(1 + 1e-3) * gamma + beta, rtol=1e-5, atol=1e-6)
    # the biased variance, as keras.ops.moments
    np.testing.assert_allclose(var.numpy(), x.astype(np.float64).var((0, 1, 2)), rtol=1e-5)


@pytest.mark.parametrize("shape", [(16, 16, 16, 16), (8, 9, 9, 35)])
def test_batch_norm_large_is_deterministic_and_accurate(shape):
    """Activations on the parallel, many-chunk path; a large mean offset."""
    r = rng(15)
    c = shape[-1]
    x = (r.standard_normal(shape) * 0.5 + 100).astype(np.float32)
    gamma, beta = bn_params(c, r)
    dy = r.standard_normal(x.shape).astype(np.float32)
    before = pr.get_num_threads()
    runs = []
    try:
        for n in (1, 2, 3):
            pr.set_num_threads(n)
            out = ops.batch_norm_train(x, gamma, beta)
            back = ops.call("batch_norm_train_backward", dy, x, gamma, out[1], out[2], epsilon=1e-3)
            runs.append([t.numpy() for t in (*out, *back)])
    finally:
        pr.set_num_threads(before)
    for run in runs[1:]:
        for a, b in zip(runs[0], run):
            np.testing.assert_array_equal(a, b)
    y, mean, var = np_bn_train(x.astype(np.float64), gamma, beta)
    np.testing.assert_allclose(runs[0][0], y, rtol=1e-4, atol=2e-4)
    np.testing.assert_allclose(runs[0][1], mean, rtol=1e-7)
    np.testing.assert_allclose(runs[0][2], var, rtol=1e-5)
    # backward against the closed form in float64
    xhat = (x - mean) / np.sqrt(var + 1e-3)
    m = x.size // c
    dbeta, dgamma = dy.sum((0, 1, 2), dtype=np.float64), (dy * xhat).sum((0, 1, 2))
    dx = gamma / np.sqrt(var + 1e-3) * (dy - dbeta / m - xhat * dgamma / m)
    np.testing.assert_allclose(runs[0][4], dgamma, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(runs[0][5], dbeta, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(runs[0][3], dx, rtol=1e-3, atol=1e-4)


def test_batch_norm_errors():
    x = np.zeros((4, 3), np.float32)
    g = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"batch_norm_train: gamma \(input 1\) must have shape \(3,\), got \(4,\)"):
        ops.batch_norm_train(x, np.ones(4, np.float32), g)
    with pytest.raises(ValueError, match="rank >= 2"):
        ops.batch_norm_train(np.zeros(3, np.float32), g, g)
    with pytest.raises(ValueError, match="C >= 1"):
        ops.batch_norm_infer(np.zeros((2, 0), np.float32), *[np.zeros(0, np.float32)] * 4)
    with pytest.raises(ValueError, match="at least one row"):
        ops.batch_norm_train(np.zeros((0, 3), np.float32), g, g)
    with pytest.raises(TypeError, match="must be float32"):
        ops.batch_norm_infer(x, g, g, g, np.ones(3, np.int32))
    assert ops.batch_norm_infer(np.zeros((0, 3), np.float32), g, g, g, g).shape == (0, 3)


def test_batch_norm_gradient_ignores_statistics_outputs():
    r = rng(16)
    x = pr.Variable(r.standard_normal((3, 4)).astype(np.float32))
    gamma, beta = pr.Variable(np.ones(4, np.float32)), pr.Variable(np.zeros(4, np.float32))
    with pr.GradientTape() as tape:
        _, mean, var = ops.batch_norm_train(x, gamma, beta)
        loss = ops.sum(mean) + ops.sum(var)
    assert tape.gradient(loss, [x, gamma, beta]) == [None, None, None]


_BN_BITS_SCRIPT = """
import sys, numpy as np, pyresnet as pr
rng = np.random.default_rng(0)
outs = []
for c in (16, 32, 48, 64, 24):
    x = (rng.standard_normal((3, 5, 7, c)) * 2 + 3).astype(np.float32)
    x[0, 1, 2, 5], x[1, 0, 0, c - 1] = np.nan, np.inf
    dy, res = (rng.standard_normal(x.shape).astype(np.float32) for _ in range(2))
    dy[2, 4, 6, 7] = np.nan
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    call = pr.ops.call
    y, mean, var = call("batch_norm_train", x, gamma, beta, epsilon=1e-3)
    outs += [y, mean, var]
    outs += call("batch_norm_add_relu_train", x, gamma, beta, res, epsilon=1e-3)
    outs += call("batch_norm_train_backward", dy, x, gamma, mean, var, epsilon=1e-3)
    outs += call("batch_norm_relu_train_backward", dy, x, gamma, beta, mean, var, epsilon=1e-3)
np.savez(sys.argv[1], *[np.asarray(o) for o in outs])
"""


def test_batch_norm_fast_loops_give_the_generic_loops_bits(tmp_path):
    """The statistics loops of this CPU (AVX-512 or AVX2 intrinsics, for
    c % 16 == 0) add the same terms in the same order as the generic C
    loops (PYRESNET_KERNELS=reference): the batch-norm ops give the same
    bits either way, with NaN and Inf inputs too (in subprocesses)."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    got = {}
    for kernels in ("", "reference"):
        out = tmp_path / f"bn{kernels}.npz"
        env = {**os.environ, "PYRESNET_KERNELS": kernels}
        run = subprocess.run([sys.executable, "-c", _BN_BITS_SCRIPT, str(out)], env=env,
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        got[kernels] = np.load(out)
    fast, generic = got[""], got["reference"]
    assert fast.files == generic.files
    for name in fast.files:
        np.testing.assert_array_equal(fast[name], generic[name], err_msg=name)
