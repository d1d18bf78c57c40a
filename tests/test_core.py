"""Tensor interop, the registry boundary, elementwise ops and the tape."""
import numpy as np
import pytest

import pyresnet as pr
from gradcheck import check_forward, check_gradients


def test_tensor_roundtrip_and_dtypes():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    t = pr.Tensor(x)
    assert t.shape == (2, 3, 4) and t.dtype == "float32" and t.ndim == 3 and len(t) == 2
    np.testing.assert_array_equal(t.numpy(), x.astype(np.float32))
    np.testing.assert_array_equal(np.asarray(memoryview(t)), x.astype(np.float32))
    assert pr.Tensor(np.zeros(3, np.uint8)).dtype == "uint8"
    assert pr.Tensor(np.zeros(3, np.int64)).dtype == "int64"
    assert pr.Tensor(np.zeros(3, np.int32)).dtype == "int32"
    assert pr.Tensor(2.5).shape == () and float(pr.Tensor(2.5)) == 2.5
    # .numpy() is a zero-copy view that keeps the tensor alive
    view = t.numpy()
    view[0, 0, 0] = 42.0
    assert t.numpy()[0, 0, 0] == 42.0
    del t
    assert view[0, 0, 0] == 42.0


def test_tensor_rejects_bad_input():
    with pytest.raises(TypeError, match="complex"):
        pr.Tensor(np.zeros(2, np.complex64))
    with pytest.raises(TypeError):
        pr.Tensor(object())


@pytest.mark.parametrize("name,fn", [("add", np.add), ("subtract", np.subtract),
                                     ("multiply", np.multiply), ("divide", np.divide)])
@pytest.mark.parametrize("sa,sb", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)),
                                   ((), (2, 2)), ((1, 3, 1, 2), (4, 1, 3, 1, 1))])
def test_binary_broadcasting(name, fn, sa, sb):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(sa).astype(np.float32)
    b = (rng.uniform(0.5, 2.0, sb) * rng.choice([-1, 1], sb)).astype(np.float32)
    op = lambda x, y: pr.ops.call(name, x, y)
    check_forward(op, fn, [a, b], rtol=1e-6)
    check_gradients(op, fn, [a, b])


def test_operators_and_numpy_mixing():
    a = pr.Tensor([1.0, 2.0])
    np.testing.assert_allclose((2 * a + 1).numpy(), [3, 5])
    np.testing.assert_allclose((np.array([1.0, 1.0], np.float32) - a).numpy(), [0, -1])
    np.testing.assert_allclose((-a / 2).numpy(), [-0.5, -1])


def test_relu_and_broadcast_grad():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    x[np.abs(x) < 1e-2] = 0.5  # keep away from the kink
    check_forward(pr.ops.relu, lambda v: np.maximum(v, 0), [x])
    check_gradients(pr.ops.relu, lambda v: np.maximum(v, 0), [x])
    check_gradients(lambda v: pr.ops.broadcast_to(v, (4, 5, 7)),
                    lambda v: np.broadcast_to(v, (4, 5, 7)), [x[:1]])


def test_tape_semantics():
    w = pr.Variable(np.array([2.0, 3.0]))
    c = pr.Tensor(np.array([5.0, 7.0]))
    with pr.GradientTape() as tape:
        y = w * w + c
    gw, gc = tape.gradient(y, [w, c])
    np.testing.assert_allclose(gw.numpy(), [4.0, 6.0])
    assert gc is None  # not watched
    with pytest.raises(RuntimeError, match="once"):
        tape.gradient(y, [w])
    with pr.GradientTape(persistent=True) as tape:
        tape.watch(c)
        y = c * w + c
    grads = tape.gradient(y, {"w": w, "c": [c]})
    np.testing.assert_allclose(grads["c"][0].numpy(), [3.0, 4.0])
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), [5.0, 7.0])
    frozen = pr.Variable(np.ones(2), trainable=False)
    with pr.GradientTape() as tape:
        y = frozen * w
    assert tape.gradient(y, [frozen]) == [None]


def test_bad_call_leaves_nothing_changed():
    with pytest.raises(ValueError, match=r"add: shapes \(2,\) and \(3,\)"):
        pr.ops.add(np.ones(2, np.float32), np.ones(3, np.float32))
    with pytest.raises(TypeError, match="add: input 0 must be float32 or bfloat16, got bool"):
        pr.ops.add(np.ones(2, bool), np.ones(2, np.float32))  # (integers promote, as NumPy)
    with pytest.raises(TypeError, match="unexpected argument 'bogus'"):
        pr.ops.call("relu", np.ones(2, np.float32), bogus=1)
    with pytest.raises(NotImplementedError, match="not registered"):
        pr.ops.call("no_such_op", 1.0)
