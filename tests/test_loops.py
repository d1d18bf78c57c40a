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
from train_steps import train_step_fn


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
    def gradient_of_a_variable_read_in_the_body(x):
        with pr.GradientTape() as tape:
            total = ops.sum(pr.fori_loop(0, 3, lambda i, v: ops.multiply(v, w), x))
        return tape.gradient(total, [w])

    with pytest.raises(NotImplementedError, match="gradients through a loop"):
        gradient_of_a_variable_read_in_the_body(np.ones(3, np.float32))

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


# ---- loops over a dataset ------------------------------------------------------------

def _augmented(x, y, seed):
    """Shuffled, augmented CIFAR-like batches (the C pipeline: crop, flip)."""
    return (pr.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=seed).batch(8)
            .map(layers.RandomCrop(6, 6, seed=seed + 1)).map(layers.RandomFlip(seed=seed + 2)))


def _conv_model():
    pr.utils.set_random_seed(5)
    return pr.Sequential([layers.Input((6, 6, 3)), layers.Conv2D(4, 3, padding="same"),
                          layers.BatchNormalization(), layers.ReLU(),
                          layers.GlobalAveragePooling2D(), layers.Dense(3)])


def test_compiled_epoch_equals_compiled_steps_bit_for_bit(rng):
    x = rng.standard_normal((30, 8, 8, 3)).astype(np.float32)  # 30 = 3 * 8 + 6: a last batch of 6
    y = rng.integers(0, 3, 30).astype(np.int32)
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    weights, losses = [], []
    for mode in ("steps", "epoch"):
        model, optimizer = _conv_model(), pr.optimizers.SGD(0.05, momentum=0.9)
        step = train_step_fn(model, loss_fn, optimizer)
        data = _augmented(x, y, seed=11)
        if mode == "steps":
            compiled_step = pr.compile(step, reduce_retracing=True)
            for _ in range(2):
                for xb, yb in data:
                    last = compiled_step(xb, yb)
        else:
            @pr.compile
            def epoch(data):
                loss = pr.convert_to_tensor(np.float32(0))  # a loop variable
                for xb, yb in data:
                    loss = step(xb, yb)
                return loss

            for _ in range(2):
                last = epoch(data)
            assert epoch.tracing_count == 1
            assert [n["op"] for n in epoch.get_concrete_function(data).nodes] == ["loop"]
        assert data._passes == 2  # a compiled call is a pass, as iterating eagerly
        weights.append(model.get_weights())
        losses.append(float(last))
    assert losses[0] == losses[1]
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)


def test_each_call_draws_a_new_shuffle_and_augmentation(rng):
    x = rng.standard_normal((20, 8, 8, 3)).astype(np.float32)
    y = np.zeros(20, np.int32)

    @pr.compile
    def checksum(data):
        total = pr.convert_to_tensor(np.float32(0))
        for xb, yb in data:  # order-dependent: which images, in which order, how cropped
            total = ops.add(ops.multiply(total, 0.5), ops.sum(ops.multiply(xb, xb)))
        return total

    data, reference = _augmented(x, y, seed=3), _augmented(x, y, seed=3)
    calls = [float(checksum(data)) for _ in range(3)]
    expected = []
    for _ in range(3):
        total = np.float32(0)
        for xb, yb in reference:
            total = np.float32(total * np.float32(0.5)) + ops.sum(ops.multiply(xb, xb)).numpy()
        expected.append(float(total))
    np.testing.assert_allclose(calls, expected, rtol=1e-6)
    assert len(set(calls)) == 3


def test_loop_variables_of_a_dataset_loop(rng):
    x = rng.standard_normal((16, 3)).astype(np.float32)
    data = pr.data.Dataset.from_tensor_slices((x, np.zeros(16, np.int32))).batch(4)

    @pr.compile
    def stats(data, scale):
        total = ops.multiply(scale, 0.0)     # carried, starts from a computed value
        for xb, yb in data:
            total = ops.add(total, ops.multiply(ops.sum(xb, axis=0), scale))
            last = ops.sum(xb, axis=0)       # no value before: the last iteration's
        return total, last, scale             # scale: read, unchanged

    total, last, scale = stats(data, np.full(3, 2.0, np.float32))
    np.testing.assert_allclose(total.numpy(), 2 * x.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(last.numpy(), x[12:].sum(axis=0), rtol=1e-6)
    np.testing.assert_array_equal(scale.numpy(), [2.0, 2.0, 2.0])

    @pr.compile
    def shadows(data, xb):  # the loop target reuses an argument's name
        count = ops.multiply(ops.sum(xb), 0.0)
        for xb, yb in data:
            count = ops.add(count, 1.0)
        return count

    assert float(shadows(data, np.ones(3, np.float32))) == 4.0
    one_short_batch = pr.data.Dataset.from_tensor_slices((x[:3], np.zeros(3, np.int32))).batch(4)
    assert float(shadows(one_short_batch, np.ones(3, np.float32))) == 1.0

    @pr.compile
    def leaves_early(data):
        for xb, yb in data:
            break
        return xb

    with pytest.raises(ValueError, match="left before its end"):
        leaves_early(data)


def test_a_dataset_loop_is_planned_before_the_call_runs(rng):
    """The loop's batches are fixed when the call is planned (its feeder is
    called then, never while the nodes run): a dataset loop inside another
    loop, which would need a new pass per outer iteration, is refused at
    trace time."""
    x = rng.standard_normal((8, 3)).astype(np.float32)
    data = pr.data.Dataset.from_tensor_slices((x, np.zeros(8, np.int32))).batch(4)

    @pr.compile
    def nested(data, v):
        def body(i, total):
            for xb, yb in data:
                total = ops.add(total, ops.sum(xb))
            return total
        return pr.fori_loop(0, 2, body, v)

    with pytest.raises(ValueError, match="cannot run inside another loop"):
        nested(data, np.float32(0))


def test_unrolled_loops_warn_once(rng):
    batches = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3)]

    @pr.compile
    def over_a_list(w):
        for xb in batches:
            w = ops.add(w, ops.sum(xb))
        for _ in range(2):  # a loop over Python ints unrolls without freezing data: no warning
            w = ops.add(w, 1.0)
        return w

    with pytest.warns(pr.loops.UnrolledLoopWarning, match=r"\(xb\) inside a compiled function "
                                                          r"is unrolled") as caught:
        value = over_a_list(np.zeros((), np.float32))
        over_a_list(np.zeros((1,), np.float32))  # a second trace: no second warning
    assert len([w for w in caught if w.category is pr.loops.UnrolledLoopWarning]) == 1
    np.testing.assert_allclose(float(value), sum(b.sum() for b in batches) + 2, rtol=1e-5)
    python_map = pr.data.Dataset.from_tensor_slices(batches[0]).batch(2).map(lambda b: b)

    @pr.compile
    def over_a_python_map(data):
        total = pr.convert_to_tensor(np.float32(0))
        for xb in data:
            total = ops.add(total, ops.sum(xb))
        return total

    with pytest.warns(pr.loops.UnrolledLoopWarning, match="a map runs in Python") as caught:
        over_a_python_map(python_map)
    assert len(caught) == 1  # one warning for one loop


# ---- steps_per_execution ---------------------------------------------------------------

class _BatchEnds(pr.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_begin(self, batch, logs=None):
        self.ends.append(("begin", batch, self.model.optimizer.iterations.numpy().item()))

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(batch)


def _fit(steps_per_execution, data, labels=None, **kwargs):
    pr.utils.set_random_seed(1)
    model = pr.Sequential([layers.Input((6,)), layers.Dense(5, activation="relu"),
                           layers.BatchNormalization(), layers.Dense(3)])
    model.compile(pr.optimizers.SGD(0.1, momentum=0.9),
                  pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=steps_per_execution)
    ends = _BatchEnds()
    history = model.fit(data, labels, epochs=2, verbose=0, callbacks=[ends], **kwargs)
    return model, history.history, ends.ends


def test_steps_per_execution_gives_the_weights_of_one_step_per_call(rng):
    x = rng.standard_normal((100, 6)).astype(np.float32)  # 7 batches of 16, the last of 4
    y = rng.integers(0, 3, 100).astype(np.int32)
    one, one_logs, one_ends = _fit(1, x, y, batch_size=16, validation_data=(x, y))
    four, four_logs, four_ends = _fit(4, x, y, batch_size=16, validation_data=(x, y))
    for a, b in zip(one.get_weights(), four.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert [e for e in one_ends if not isinstance(e, tuple)] == list(range(7)) * 2
    # Once per execution: begin with the group's first batch (before it runs),
    # end with its last; the last group has 3 steps.
    assert four_ends == [("begin", 0, 0), 3, ("begin", 4, 4), 6,
                         ("begin", 0, 7), 3, ("begin", 4, 11), 6]
    for key in one_logs:  # the running sums add float32 sums: equal to float32 rounding
        np.testing.assert_allclose(four_logs[key], one_logs[key], rtol=1e-6)
    # One compiled loop for training and one for validation, each traced once
    # (the last, shorter group and the last, smaller batch need no retrace).
    assert sorted(f.tracing_count for _, f in four._group_functions.values()) == [1, 1]
    np.testing.assert_allclose(four.evaluate(x, y, verbose=0), one.evaluate(x, y, verbose=0),
                               rtol=1e-6)

    def dataset():
        return pr.data.Dataset.from_tensor_slices((x, y)).shuffle(100, seed=4).batch(16)

    on_dataset = [_fit(n, dataset())[0].get_weights() for n in (1, 3)]
    for a, b in zip(*on_dataset):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="steps_per_execution must be an int >= 1"):
        one.compile("sgd", "mse", steps_per_execution=0)
