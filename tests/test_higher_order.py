"""Higher-order gradients: second derivatives through the backward ops
that have their own gradient rules, against float64 central differences of
the analytic first derivative; and a clear error (naming the op) where a
backward op has none, never a silent None."""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import ops

f32 = np.float32


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def hessian_vector(f, x, r):
    """d/dx sum(grad f(x) * r) with nested tapes (float32)."""
    v = pr.Variable(x.astype(f32))
    with pr.GradientTape() as outer:
        with pr.GradientTape() as inner:
            y = ops.sum(f(v))
        g = inner.gradient(y, v)
        s = ops.sum(ops.multiply(g, r.astype(f32)))
    h = outer.gradient(s, v)
    assert h is not None, "a second derivative came back None"
    return g.numpy(), h.numpy()


def central(grad64, x, r, eps=1e-4):
    """Central differences of x -> sum(grad64(x) * r) in float64."""
    out = np.zeros_like(x)
    flat = out.reshape(-1)
    for j in range(x.size):
        xp, xm = x.copy(), x.copy()
        xp.flat[j] += eps
        xm.flat[j] -= eps
        flat[j] = ((grad64(xp) - grad64(xm)) * r).sum() / (2 * eps)
    return out


C = np.array([[0.3, -1.2, 2.0, 0.5], [1.0, 0.2, -0.7, 0.1]])

CASES = {
    # f(x) and its float64 gradient
    "softmax": (lambda x: ops.multiply(ops.softmax(x), C.astype(f32)),
                lambda x: np_softmax(x) * (C - (C * np_softmax(x)).sum(-1, keepdims=True))),
    "log_softmax": (lambda x: ops.multiply(ops.log_softmax(x), C.astype(f32)),
                    lambda x: C - np_softmax(x) * C.sum(-1, keepdims=True)),
    "relu squared": (lambda x: ops.square(ops.relu(x)), lambda x: 2 * np.maximum(x, 0)),
    "clip times x": (lambda x: ops.multiply(ops.clip(x, -0.5, 0.5), x),
                     lambda x: np.clip(x, -0.5, 0.5) + np.where(np.abs(x) <= 0.5, x, 0)),
    "max over axis": (lambda x: ops.square(ops.max(x, axis=1)),
                      lambda x: 2 * x.max(1, keepdims=True) * (x == x.max(1, keepdims=True))),
    "slice, pad, concat, transpose": (
        lambda x: ops.square(ops.transpose(ops.concatenate([x[:, ::-2],
                                                            ops.pad(x, ((0, 0), (1, 1)))], 1))),
        lambda x: 2 * x + _slice_grad(x)),
}


def _slice_grad(x):
    g = np.zeros_like(x)
    g[:, ::-2] += 2 * x[:, ::-2]
    return g


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivative_matches_central_differences(name, rng):
    f, grad64 = CASES[name]
    x = rng.standard_normal((2, 4))
    x[np.abs(x) < 0.05] = 0.3          # away from relu's kink
    x[np.abs(np.abs(x) - 0.5) < 0.05] = 0.2  # and from clip's bounds
    r = rng.standard_normal(x.shape)
    g, h = hessian_vector(f, x, r)
    np.testing.assert_allclose(g, grad64(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, central(grad64, x, r), rtol=2e-3, atol=2e-3)


def test_second_derivative_compiled_equals_eager(rng):
    x = rng.standard_normal((2, 4)).astype(f32)
    r = rng.standard_normal((2, 4)).astype(f32)
    f = CASES["softmax"][0]

    def traced(a):
        with pr.GradientTape() as outer:
            outer.watch(a)
            with pr.GradientTape() as inner:
                inner.watch(a)
                y = ops.sum(f(a))
            g = inner.gradient(y, a)
            s = ops.sum(ops.multiply(g, r))
        return outer.gradient(s, a)

    np.testing.assert_array_equal(pr.compile(traced)(x).numpy(),
                                  traced(pr.Tensor(x)).numpy())


@pytest.mark.parametrize("make,op", [
    (lambda v: ops.sparse_softmax_cross_entropy(v, np.array([1, 0])),
     "sparse_softmax_cross_entropy_backward"),
    (lambda v: ops.max_pool2d(ops.reshape(v, (1, 2, 4, 1)), 2), "max_pool2d_backward"),
    (lambda v: ops.batch_norm_train(v, np.ones(4, f32), np.zeros(4, f32))[0] * v,
     "batch_norm_train_backward"),
])
def test_backward_ops_without_a_rule_raise_naming_them(make, op, rng):
    v = pr.Variable(rng.standard_normal((2, 4)).astype(f32))
    with pr.GradientTape() as outer:
        with pr.GradientTape() as inner:
            y = ops.sum(make(v))
        g = inner.gradient(y, v)
        s = ops.sum(ops.square(g))
    with pytest.raises(NotImplementedError, match=f"'{op}'"):
        outer.gradient(s, v)


def test_every_backward_op_has_a_rule_or_raises():
    """No backward op of the registry is silently non-differentiable: each
    has a gradient rule or the flag that makes tapes raise naming it."""
    from pyresnet import _C
    no_rule = 16  # PR_OP_NO_GRADIENT_RULE
    for name in _C.op_names():
        info = _C.op_info(name)
        if name.endswith("_backward"):
            assert info["differentiable"] or info["flags"] & no_rule, name
