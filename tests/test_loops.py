"""Loops in the graph (pyresnet.while_loop, pyresnet.fori_loop): compiled
loop nodes against the same loops written in Python, a training loop inside
one compiled call against the compiled step called step by step (bit for
bit: the body runs the same kernels in the same order), and the errors:
a loop variable changing shape, a gradient through a loop, a kernel error
inside the body."""
import numpy as np
import pytest

import pyresnet as pr
from pyresnet import layers, ops


def test_fori_loop_matches_python_loop(rng):
    x = rng.standard_normal(5).astype(np.float32)
    w = rng.standard_normal(5).astype(np.float32)

    def body(i, v):
        return ops.add(ops.multiply(v, w), x)

    expected = x.copy()
    for _ in range(2, 9):
        expected = expected * w + x
    compiled = pr.compile(lambda x: pr.fori_loop(2, 9, body, x))
    np.testing.assert_array_equal(compiled(x).numpy(), expected)
    np.testing.assert_array_equal(pr.fori_loop(2, 9, body, x).numpy(), expected)  # eagerly
    assert [n["op"] for n in compiled.get_concrete_function(x).nodes] == ["loop"]


def test_fori_loop_index_and_structures(rng):
    x = rng.standard_normal(3).astype(np.float32)

    def body(i, state):  # i is an int32 scalar; collect it through a float mask
        acc, count = state["acc"], state["count"]
        return {"acc": ops.add(acc, x), "count": ops.add(count, 1.0)}

    init = {"acc": np.zeros(3, np.float32), "count": np.float32(0)}
    out = pr.compile(lambda x: pr.fori_loop(0, 4, body, init))(x)
    np.testing.assert_allclose(out["acc"].numpy(), 4 * x, rtol=1e-6)
    assert float(out["count"]) == 4.0
    seen = []
    pr.fori_loop(3, 6, lambda i, v: seen.append(int(i.numpy())) or v, np.float32(0))
    assert seen == [3, 4, 5]
    assert pr.compile(lambda: pr.fori_loop(5, 2, body, init))()["count"].numpy() == 0.0


def test_while_loop_matches_python_loop(rng):
    x = rng.standard_normal(4).astype(np.float32)
    limit = np.float32(5.0)

    def cond(v, k):
        return ops.greater_equal(limit, k)

    def body(v, k):
        return ops.add(ops.multiply(v, 0.5), x), ops.add(k, 1.0)

    v, k = x.copy(), np.float32(1.0)
    while limit >= k:
        v, k = v * 0.5 + x, k + 1
    compiled = pr.compile(lambda x, k0: pr.while_loop(cond, body, (x, k0)))
    out_v, out_k = compiled(x, np.array(1.0, np.float32))  # arrays: no retrace per value
    np.testing.assert_array_equal(out_v.numpy(), v)
    assert float(out_k) == k
    eager_v, eager_k = pr.while_loop(cond, body, (x, np.float32(1.0)))
    np.testing.assert_array_equal(eager_v.numpy(), v)
    # The condition false at once: no iteration; maximum_iterations caps the count.
    out_v, out_k = compiled(x, np.array(9.0, np.float32))
    np.testing.assert_array_equal(out_v.numpy(), x)
    capped = pr.compile(lambda x: pr.while_loop(cond, body, (x, np.float32(1.0)),
                                                maximum_iterations=2))(x)
    assert float(capped[1]) == 3.0
    assert compiled.tracing_count == 1


def test_loop_bound_from_a_size_needs_no_retrace():
    @pr.compile(reduce_retracing=True)
    def count_rows(xs):
        return pr.fori_loop(0, ops.shape(xs)[0], lambda i, n: ops.add(n, 1.0), np.float32(0))

    assert float(count_rows(np.zeros((7, 2), np.float32))) == 7.0
    assert float(count_rows(np.zeros((3, 2), np.float32))) == 3.0
    assert count_rows.tracing_count == 1


def _model(seed):
    pr.utils.set_random_seed(seed)
    return pr.Sequential([layers.Input((6,)), layers.Dense(8, activation="relu"),
                          layers.BatchNormalization(), layers.Dense(3)])


def test_training_loop_in_one_call_equals_compiled_steps(rng):
    x = rng.standard_normal((12, 6)).astype(np.float32)
    y = rng.integers(0, 3, 12).astype(np.int32)
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    runs = []
    for _ in range(2):
        model = _model(3)
        optimizer = pr.optimizers.SGD(0.1, momentum=0.9)

        def step(x, y, model=model, optimizer=optimizer):
            with pr.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
            return loss
        runs.append((model, step))
    stepwise = pr.compile(runs[0][1])
    for _ in range(5):
        last = stepwise(x, y)
    looped = pr.compile(lambda x, y: pr.fori_loop(0, 5, lambda i, l: runs[1][1](x, y),
                                                  np.float32(0)))
    assert float(looped(x, y)) == float(last)
    for a, b in zip(runs[0][0].get_weights(), runs[1][0].get_weights()):
        np.testing.assert_array_equal(a, b)  # weights, slots and BN statistics alike


def test_loop_errors(rng):
    with pytest.raises(ValueError, match=r"loop variable 0 enters the loop as float32 \(4,\) "
                                         r"but the body returns float32 \(2, 2\)"):
        pr.compile(lambda x: pr.fori_loop(0, 2, lambda i, v: ops.reshape(v, (2, 2)), x))(
            np.ones(4, np.float32))
    with pytest.raises(TypeError, match="structure"):
        pr.compile(lambda x: pr.fori_loop(0, 2, lambda i, v: (v, v), x))(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="never end"):
        pr.compile(lambda x: pr.while_loop(lambda v: True, lambda v: v, x))(np.ones(2, np.float32))
    w = pr.Variable(np.ones(3, np.float32))

    @pr.compile
    def gradient_through_loop(x):
        with pr.GradientTape() as tape:
            v = pr.fori_loop(0, 3, lambda i, v: ops.multiply(v, w), ops.multiply(x, w))
            total = ops.sum(v)
        return tape.gradient(total, [w])

    with pytest.raises(NotImplementedError, match="gradients through a loop"):
        gradient_through_loop(np.ones(3, np.float32))

    @pr.compile
    def bad_label(logits, labels):
        return pr.fori_loop(0, 2, lambda i, v: ops.add(v, ops.sparse_categorical_crossentropy(
            labels, logits, from_logits=True)), np.zeros(2, np.float32))

    with pytest.raises(ValueError, match=r"label 7 at index 1 is outside \[0, 3\)"):
        bad_label(np.zeros((2, 3), np.float32), np.array([0, 7], np.int32))


def test_nested_loops_and_print_in_body(capsys):
    @pr.compile
    def nested(x):
        def outer(i, v):
            pr.print("outer", i)
            return pr.fori_loop(0, 2, lambda j, u: ops.add(u, 1.0), v)
        return pr.fori_loop(0, 3, outer, x)

    np.testing.assert_array_equal(nested(np.zeros(2, np.float32)).numpy(), [6.0, 6.0])
    assert capsys.readouterr().out.split("\n")[:3] == ["outer 0", "outer 1", "outer 2"]
