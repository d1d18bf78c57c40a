"""State ops: in-place Variable updates against NumPy float32 replays of the
Keras 3 formulas; bad calls raise and leave every variable unchanged."""
import numpy as np
import pytest

import pyresnet as pr
from keras_replays import keras_sgd

ops = pr.ops
f32 = np.float32


def var(a, dtype=np.float32):
    return pr.Variable(np.asarray(a, dtype))


def test_assign_family_with_broadcasting():
    v = var(np.arange(6).reshape(2, 3))
    ops.assign(v, np.array([1.0, 2.0, 3.0], f32))
    np.testing.assert_array_equal(v.numpy(), [[1, 2, 3], [1, 2, 3]])
    ops.assign_add(v, np.array([[10.0], [20.0]], f32))
    np.testing.assert_array_equal(v.numpy(), [[11, 12, 13], [21, 22, 23]])
    ops.assign_sub(v, 0.5)
    np.testing.assert_array_equal(v.numpy(), [[10.5, 11.5, 12.5], [20.5, 21.5, 22.5]])
    # the Variable methods call the same ops
    assert v.assign(np.zeros((2, 3), f32)) is v
    v.assign_add(np.ones((2, 3), f32)).assign_sub(np.full((2, 3), 0.25, f32))
    np.testing.assert_array_equal(v.numpy(), np.full((2, 3), 0.75, f32))
    s = var(3.0)
    s.assign_add(2.0)
    assert float(s) == 5.0


def test_int_counters():
    for dtype in (np.int64, np.int32):
        c = var(0, dtype)
        c.assign_add(1)  # a Python int arrives as float32 1.0: whole, accepted
        c.assign_add(np.int32(41))
        c.assign_sub(np.array(2, np.int64))
        assert c.numpy().dtype == dtype and int(c.numpy()) == 40
        c.assign(7)
        assert int(c.numpy()) == 7
    big = var([2**40], np.int64)
    big.assign_add(np.array([3], np.int64))
    assert big.numpy()[0] == 2**40 + 3


def unchanged(v, fn, exc, match):
    before = v.numpy().copy()
    with pytest.raises(exc, match=match):
        fn()
    np.testing.assert_array_equal(v.numpy(), before)


def test_assign_errors_leave_variable_unchanged():
    v = var(np.arange(6).reshape(2, 3))
    unchanged(v, lambda: ops.assign(v, np.ones((3, 2), f32)), ValueError,
              r"assign: a value of shape \(3, 2\) cannot be broadcast to the variable's shape \(2, 3\)")
    unchanged(v, lambda: ops.assign_add(v, np.ones((1, 2, 3), f32)), ValueError, "cannot be broadcast")
    unchanged(v, lambda: ops.assign_sub(v, np.ones((2, 3), np.int32)), TypeError,
              "the variable is float32, so the value must be float32, got int32")
    c = var([1, 2, 3], np.int32)
    unchanged(c, lambda: ops.assign_add(c, np.array([1.0, 2.5, 3.0], f32)), ValueError,
              r"assign_add: value 2.5 at index 1 cannot be stored in an int32 variable")
    unchanged(c, lambda: ops.assign(c, np.float32(3e9)), ValueError, "cannot be stored")
    u = pr.Variable(np.zeros(3, np.uint8))
    unchanged(u, lambda: ops.assign(u, np.ones(3, np.uint8)), TypeError,
              "must be float32, int32 or int64, got uint8")
    with pytest.raises(TypeError, match="updated in place and must be a Variable"):
        ops.assign(np.zeros(3, f32), np.ones(3, f32))


def test_moving_average_update_matches_keras():
    r = np.random.default_rng(0)
    mv = r.standard_normal(5).astype(f32)
    v = var(mv)
    for _ in range(3):
        batch = r.standard_normal(5).astype(f32)
        ops.moving_average_update(v, batch, momentum=0.99)
        # keras BatchNormalization: moving * momentum + batch * (1.0 - momentum), float32
        mv = mv * f32(0.99) + batch * f32(1.0 - 0.99)
    np.testing.assert_array_equal(v.numpy(), mv)
    unchanged(v, lambda: ops.moving_average_update(v, np.ones(4, f32), 0.9), ValueError,
              r"the value has shape \(4,\), expected the variable's shape \(5,\)")


@pytest.mark.parametrize("momentum,nesterov,wd", [
    (0.0, False, 0.0), (0.0, False, 5e-4), (0.9, False, 0.0), (0.9, True, 0.0),
    (0.9, False, 1e-2), (0.5, True, 1e-3),
])
def test_sgd_matches_keras_over_several_steps(momentum, nesterov, wd):
    r = np.random.default_rng(1)
    w0 = r.standard_normal((3, 5)).astype(f32)
    grads = [r.standard_normal((3, 5)).astype(f32) for _ in range(4)]
    lrs = [0.1, 0.05, 0.05, 0.01]  # a schedule: the rate is a tensor input
    w, lr = var(w0), var(0.0)
    velocity = var(np.zeros((3, 5)))
    for g, rate in zip(grads, lrs):
        lr.assign(rate)
        if momentum:
            ops.sgd_momentum_update(w, g, velocity, lr, momentum=momentum, nesterov=nesterov,
                                    weight_decay=wd)
        else:
            ops.sgd_update(w, g, lr, weight_decay=wd)
    want_w, want_m = keras_sgd(w0, grads, lrs, momentum, nesterov, wd)
    np.testing.assert_array_equal(w.numpy(), want_w)  # same float32 ops in the same order
    np.testing.assert_array_equal(velocity.numpy(), want_m)
    assert not np.array_equal(want_w, w0)


def test_sgd_errors_leave_everything_unchanged():
    w, vel = var(np.ones((2, 3))), var(np.full((2, 3), 0.5))
    g = np.ones((2, 3), f32)
    for fn, exc, match in [
        (lambda: ops.sgd_update(w, np.ones((3, 2), f32), 0.1), ValueError,
         r"sgd_update: the gradient has shape \(3, 2\), expected the variable's shape \(2, 3\)"),
        (lambda: ops.sgd_update(w, np.ones((2, 3), np.int32), 0.1), TypeError,
         "input 1 must be float32, got int32"),
        (lambda: ops.sgd_update(w, g, np.array([0.1, 0.2], f32)), ValueError,
         r"the learning rate must hold one number, got shape \(2,\)"),
        (lambda: ops.sgd_momentum_update(w, g, var(np.zeros(3)), 0.1, 0.9), ValueError,
         r"the velocity has shape \(3,\)"),
        (lambda: ops.sgd_momentum_update(w, g, vel, np.array(1, np.int32), 0.9), TypeError,
         "input 3 must be float32"),
        (lambda: ops.sgd_momentum_update(w, g, vel.numpy(), 0.1, 0.9), TypeError,
         "input 2 is updated in place"),
    ]:
        with pytest.raises(exc, match=match):
            fn()
        np.testing.assert_array_equal(w.numpy(), np.ones((2, 3), f32))
        np.testing.assert_array_equal(vel.numpy(), np.full((2, 3), 0.5, f32))


def test_state_ops_registry_entries():
    for name, mutates in [("assign", 1), ("assign_add", 1), ("assign_sub", 1),
                          ("moving_average_update", 1), ("sgd_update", 1),
                          ("sgd_momentum_update", 5), ("adam_update", 1 | 4 | 8 | 16),
                          ("rmsprop_update", 1 | 4 | 8 | 16)]:
        info = pr._C.op_info(name)
        assert info["n_out"] == 0 and info["mutates"] == mutates and info["flags"] & 1
        assert not info["differentiable"]
