"""Numeric checkers: forward against a NumPy reference and gradients against
float64 central finite differences of that reference.

The analytic gradient is the tape's gradient of ``sum(f(x) * R)`` for a fixed
random projection R, so the whole Jacobian is exercised, not just its row sums.
"""
import numpy as np

import pyresnet as pr


def _as_tuple(y):
    return y if isinstance(y, (tuple, list)) else (y,)


def check_forward(op_fn, ref_fn, inputs, rtol=1e-5, atol=1e-5):
    """Assert op_fn(*float32 inputs) == ref_fn(*float64 inputs) elementwise."""
    got = _as_tuple(op_fn(*[pr.Tensor(x) if x.dtype.kind == "f" else pr.Tensor(x) for x in inputs]))
    want = _as_tuple(ref_fn(*[np.asarray(x, np.float64) if x.dtype.kind == "f" else x for x in inputs]))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == np.shape(w), (g.shape, np.shape(w))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def check_gradients(op_fn, ref_fn, inputs, wrt=None, output=0, eps=1e-3, rtol=2e-3, atol=2e-3,
                    seed=0):
    """Compare the tape's gradients of op_fn with central differences of ref_fn.

    Args:
        op_fn: function of Tensors -> Tensor (or tuple; ``output`` picks one).
        ref_fn: the same function in float64 NumPy.
        inputs: list of NumPy arrays (floating ones are differentiated).
        wrt: indices of inputs to check (default: every floating input).
    """
    rng = np.random.default_rng(seed)
    if wrt is None:
        wrt = [i for i, x in enumerate(inputs) if x.dtype.kind == "f"]
    x64 = [np.asarray(x, np.float64) if x.dtype.kind == "f" else x for x in inputs]
    y_ref = np.asarray(_as_tuple(ref_fn(*x64))[output])
    R = rng.standard_normal(y_ref.shape)

    tensors = [pr.Variable(x.astype(np.float32)) if i in wrt else pr.Tensor(x)
               for i, x in enumerate(inputs)]
    with pr.GradientTape() as tape:
        y = _as_tuple(op_fn(*tensors))[output]
        loss = pr.ops.call("sum_to_shape", pr.ops.multiply(y, R.astype(np.float32)), shape=())
    grads = tape.gradient(loss, [tensors[i] for i in wrt])

    for i, g in zip(wrt, grads):
        num = np.zeros_like(x64[i])
        flat = num.reshape(-1)
        xi = x64[i].reshape(-1)
        for j in range(xi.size):
            old = xi[j]
            xi[j] = old + eps
            fp = np.sum(np.asarray(_as_tuple(ref_fn(*x64))[output]) * R)
            xi[j] = old - eps
            fm = np.sum(np.asarray(_as_tuple(ref_fn(*x64))[output]) * R)
            xi[j] = old
            flat[j] = (fp - fm) / (2 * eps)
        assert g is not None, f"no gradient for input {i}"
        np.testing.assert_allclose(np.asarray(g), num, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i}")
