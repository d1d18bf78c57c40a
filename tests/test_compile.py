"""pyresnet.compile: traced graphs against eager execution, the tracing rules
(tf.function semantics), the executor (GIL released, threads, dynamic
shapes, errors) and the inspection/profiling exports.

Tolerances: compiled graphs run the very kernels eager calls run, and
jit_compile's fused kernels do the same float32 operations per element in
the same order, so elementwise graphs are compared with rtol=1e-6.  Whole
models are compared within rtol 1e-5 for one step and 1e-4 after ten SGD
steps: under jit_compile a conv kernel chosen by timing may sum in another
order (the pyresnet.compile docstring states the same bounds).
"""
import json
import re
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import _C, layers, ops


def rng_array(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- values ---------------------------------------------------------------------

def _mlp_like(x, w, b):
    # broadcasting, an elementwise chain, a reduction-free "loss"
    h = ops.relu(x * w + b)
    return ops.sum_to_shape(h * h - x, ())


@pytest.mark.parametrize("jit", [False, True])
def test_values_and_gradients_match_eager(jit):
    x = rng_array(5, 7, seed=1)
    w = pr.Variable(rng_array(7, seed=2))
    b = pr.Variable(rng_array(1, 7, seed=3))

    def step(x):
        with pr.GradientTape() as tape:
            loss = _mlp_like(x, w, b)
        gw, gb = tape.gradient(loss, [w, b])
        return loss, gw, gb

    eager = step(x)
    f = pr.compile(step, jit_compile=jit)
    compiled = f(x)
    if jit:  # relu(x * w + b) and the backward chain become fused nodes
        cf = f.get_concrete_function(x)
        assert cf.passes["fused"] >= 3
        assert "fused_elementwise" in [n["op"] for n in cf.nodes]
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-6, atol=1e-6)
        assert c.shape == e.shape


def test_nested_structures_and_python_outputs():
    @pr.compile
    def f(inputs, scale=2.0):
        a, (b, c) = inputs["a"], inputs["bc"]
        return {"sum": a + b, "list": [b * scale, c]}, "done", None

    a, b, c = rng_array(3), rng_array(3, seed=1), rng_array(2, 3, seed=2)
    out, tag, none = f({"a": a, "bc": (b, c)})
    assert list(out) == ["sum", "list"]  # dict order as returned
    np.testing.assert_allclose(out["sum"].numpy(), a + b)
    np.testing.assert_allclose(out["list"][0].numpy(), b * 2)
    np.testing.assert_allclose(out["list"][1].numpy(), c)
    assert tag == "done" and none is None


def test_variables_are_captured_by_reference():
    v = pr.Variable(np.ones(3, np.float32))

    @pr.compile
    def f(x):
        return x * v

    np.testing.assert_allclose(f(np.full(3, 2, np.float32)).numpy(), [2, 2, 2])
    v.numpy()[:] = 5.0  # an eager change is seen by the compiled graph
    np.testing.assert_allclose(f(np.full(3, 2, np.float32)).numpy(), [10, 10, 10])
    assert f.tracing_count == 1


# ---- tracing rules ---------------------------------------------------------------

def test_retrace_rules_and_python_side_effects(capsys):
    traced = []

    @pr.compile
    def f(x, k):
        traced.append(x.shape)  # a Python side effect: trace time only
        print("python print")
        pr.print("graph print", x)
        return x * k

    x = np.ones((2, 3), np.float32)
    f(x, 2.0)
    f(x, 2.0)
    assert f.tracing_count == 1 and traced == [(2, 3)]
    f(np.ones((4, 3), np.float32), 2.0)  # new shape
    assert f.tracing_count == 2
    f(x, 3.0)  # new Python value
    assert f.tracing_count == 3
    np.testing.assert_allclose(f(x, 3.0).numpy(), 3 * x)
    assert f.tracing_count == 3
    out = capsys.readouterr().out
    assert out.count("python print") == 3
    assert out.count("graph print") == 5
    assert f.experimental_get_tracing_count() == 3


def test_python_bool_arguments_retrace_once_each():
    @pr.compile
    def f(x, training=False):
        return x * 2.0 if training else x + 1.0

    x = np.ones(2, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no retracing warning
        for i in range(12):
            out = f(x, training=i % 2 == 0)
            np.testing.assert_allclose(out.numpy(), 2.0)
    assert f.tracing_count == 2


def test_retrace_on_dtype():
    @pr.compile
    def f(x):
        return ops.zeros_like(x)

    f(np.ones(3, np.float32))
    f(np.ones(3, np.int32))
    assert f.tracing_count == 2


def test_retracing_warning():
    @pr.compile
    def f(x):
        return x + 1.0

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 8):
            f(np.ones(n, np.float32))
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "traced 6 times" in msgs[0] and "reduce_retracing" in msgs[0]


@pytest.mark.parametrize("use", [bool, len, np.asarray, lambda t: t.numpy(), float])
def test_symbolic_tensor_misuse_raises_type_error(use):
    @pr.compile
    def f(x):
        use(x)
        return x

    with pytest.raises(TypeError, match="symbolic tensor.*traced by pyresnet.compile.*Fix"):
        f(np.ones(3, np.float32))


def test_variable_creation_only_on_first_trace():
    store = {}

    @pr.compile
    def f(x):
        if "v" not in store:
            store["v"] = pr.Variable(np.ones(3, np.float32))  # first call: fine
        return x * store["v"]

    np.testing.assert_allclose(f(np.full(3, 2, np.float32)).numpy(), 2)

    @pr.compile
    def g(x):
        return x * pr.Variable(np.ones(x.shape, np.float32))

    g(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="created variables .* other than its first"):
        g(np.ones(4, np.float32))


def test_rejected_trace_leaves_no_variables_behind():
    """A trace refused for creating variables changes nothing: the optimizer
    keeps no slot and the layer no weight from it, and retrying the same call
    fails the same way (issue 15)."""
    opt = pr.optimizers.SGD(0.1, momentum=0.9)
    w1 = pr.Variable(np.ones(3, np.float32), name="w1")
    w2 = pr.Variable(np.full(4, 2.0, np.float32), name="w2")
    late = layers.Dense(2)

    @pr.compile
    def step(x):
        w = w1 if x.shape[0] == 3 else w2
        with pr.GradientTape() as tape:
            loss = ops.sum(x * w)
        opt.apply_gradients([(tape.gradient(loss, [w])[0], w)])
        return loss

    @pr.compile
    def head(x):
        return late(x) if x.shape[-1] == 5 else x

    assert float(step(np.ones(3, np.float32))) == 3.0  # first trace: w1's slot is fine
    before = [v.numpy().copy() for v in opt.variables]
    head(np.ones((1, 4), np.float32))
    for _ in range(2):
        with pytest.raises(ValueError, match=r"created variables \(w2/velocity\) .* other than"):
            step(np.ones(4, np.float32))
        with pytest.raises(ValueError, match="created variables .* other than its first"):
            head(np.ones((1, 5), np.float32))
    assert len(opt.variables) == len(before) == 2
    for v, b in zip(opt.variables, before):
        np.testing.assert_array_equal(v.numpy(), b)
    np.testing.assert_array_equal(w2.numpy(), np.full(4, 2.0, np.float32))
    assert not late.built and late.weights == []
    assert step.tracing_count == head.tracing_count == 1


def test_init_scope_runs_ops_eagerly_while_tracing():
    w = pr.Variable(np.full(3, 2.0, np.float32))
    slots = []

    @pr.compile
    def f(x):
        if not slots:
            with pr.init_scope():  # e.g. an optimizer slot computed from a weight
                slots.append(pr.Variable(ops.scale(w, 3.0), trainable=False))
        return x * slots[0]

    np.testing.assert_allclose(f(np.ones(3, np.float32)).numpy(), 6.0)
    assert not slots[0].is_symbolic


def test_escaped_symbolic_tensor_is_reported():
    leaked = []

    @pr.compile
    def f(x):
        leaked.append(x * 2.0)
        return x

    f(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="escaped"):
        ops.add(leaked[0], 1.0)


def test_methods_bind_per_instance():
    class Scaler:
        def __init__(self, k):
            self.k = pr.Variable(np.full(2, k, np.float32))

        @pr.compile
        def __call__(self, x):
            return x * self.k

    a, b = Scaler(2.0), Scaler(3.0)
    x = np.ones(2, np.float32)
    np.testing.assert_allclose(a(x).numpy(), 2)
    np.testing.assert_allclose(b(x).numpy(), 3)
    np.testing.assert_allclose(a(x).numpy(), 2)
    assert Scaler.__call__.__get__(a).tracing_count == 1


def test_nested_compiled_functions_inline():
    inner = pr.compile(lambda x: x * 3.0)

    @pr.compile
    def outer(x):
        return inner(x) + 1.0

    np.testing.assert_allclose(outer(np.ones(2, np.float32)).numpy(), 4)
    assert inner.tracing_count == 0 and outer.tracing_count == 1


# ---- dynamic shapes -------------------------------------------------------------

def _column_mean_and_grad(x, w):
    # the batch size enters attributes: shapes (broadcast_to from ops.shape,
    # the gradients' sum_to_shape) and the mean's divisor (its gradient
    # scales by 1 / batch)
    with pr.GradientTape() as tape:
        y = x * w
        m = ops.mean(y, axis=0, keepdims=True)
        b = ops.broadcast_to(m, ops.shape(x)) * y
        loss = ops.sum_to_shape(b * b, ())
    return m, tape.gradient(loss, [w])[0]


@pytest.mark.parametrize("mode", ["signature", "reduce_retracing"])
def test_one_trace_for_two_batch_sizes(mode):
    w = pr.Variable(rng_array(1, 4, seed=5))
    fn = lambda x: _column_mean_and_grad(x, w)  # noqa: E731
    if mode == "signature":
        f = pr.compile(fn, input_signature=[pr.TensorSpec((None, 4))])
    else:
        f = pr.compile(fn, reduce_retracing=True)
    for n in (8, 3, 8, 1):
        x = rng_array(n, 4, seed=n)
        m, g = f(x)
        m_ref, g_ref = fn(x)
        assert m.shape == (1, 4)
        np.testing.assert_allclose(m.numpy(), m_ref.numpy(), rtol=1e-6)
        np.testing.assert_allclose(g.numpy(), g_ref.numpy(), rtol=1e-6)
    assert f.tracing_count == 1
    with pytest.raises(ValueError, match="input_signature|broadcast"):
        f(rng_array(3, 5))


def test_input_signature_checks():
    f = pr.compile(lambda x: x + 1.0, input_signature=[pr.TensorSpec((None, 2), "float32")])
    with pytest.raises(ValueError, match=r"does not match the input_signature"):
        f(np.ones((3, 3), np.float32))
    with pytest.raises(TypeError, match="input_signature has 1"):
        f(np.ones((3, 2), np.float32), np.ones(2))


def test_input_signature_refuses_another_dtype_as_it_refuses_another_shape():
    """An argument of another dtype than its TensorSpec's raises ValueError
    naming both (tf.function refuses it) instead of being cast (float64
    rounded to float32, floats truncated to int32) or traced anew; a Python
    number takes the spec's dtype when it is of its kind."""
    f = pr.compile(lambda x: x * 2.0, input_signature=[pr.TensorSpec((None, 2), "float32")])
    np.testing.assert_array_equal(f(np.full((3, 2), 1.5, np.float32)).numpy(), 3.0)
    for given in ("float64", "int32", "int64", "uint8"):
        message = (f"argument 0 of dtype {given} and shape (3, 2) does not match the "
                   f"input_signature's TensorSpec(shape=(None, 2), dtype='float32', name=None): "
                   f"expected dtype float32, got {given}")
        with pytest.raises(ValueError, match=re.escape(message)):
            f(np.ones((3, 2), given))
        if given != "float64":  # (a Tensor holds float data as float32)
            with pytest.raises(ValueError, match=f"expected dtype float32, got {given}"):
                f(pr.ops.convert_to_tensor(np.ones((3, 2), given)))
    assert f.tracing_count == 1
    g = pr.compile(lambda k: k + 1, input_signature=[pr.TensorSpec((None,), "int32")])
    with pytest.raises(ValueError, match="expected dtype int32, got float64"):
        g(np.array([1.7, 2.2]))  # was [2, 3]: truncated
    np.testing.assert_array_equal(g(np.array([1, 2], np.int32)).numpy(), [2, 3])
    scalar = pr.compile(lambda x: x * 2.0, input_signature=[pr.TensorSpec((), "float32")])
    assert float(scalar(3)) == 6.0 and float(scalar(1.5)) == 3.0  # Python numbers: same kind
    with pytest.raises(ValueError, match="expected dtype float32, got float64"):
        scalar(np.float64(1.5))  # a NumPy scalar has its dtype
    counter = pr.compile(lambda k: k + 1, input_signature=[pr.TensorSpec((), "int32")])
    assert int(counter(3)) == 4
    with pytest.raises(ValueError, match=r"expected dtype int32, got float \(float64\)"):
        counter(1.7)
    assert scalar.tracing_count == counter.tracing_count == g.tracing_count == 1


# ---- executor ---------------------------------------------------------------------

def test_gil_is_released_during_a_compiled_call():
    @pr.compile
    def heavy(x):
        for _ in range(60):
            x = x * 1.0001 + 0.5
        return x

    x = np.ones(2_000_000, np.float32)
    heavy(x)  # trace and plan first
    ticks = []
    done = threading.Event()

    def counter():
        while not done.is_set():
            ticks.append(1)
            time.sleep(0)

    start = time.perf_counter()
    heavy(x)
    single = time.perf_counter() - start
    t = threading.Thread(target=counter)
    t.start()
    try:
        time.sleep(0.01)
        before = len(ticks)
        heavy(x)
        during = len(ticks) - before
    finally:
        done.set()
        t.join()
    # With the GIL held for `single` seconds the counter could not tick at all
    # during the call; released, it ticks many times.
    assert single > 0.02 and during > 20, (single, during)


def test_threads_share_a_compiled_function():
    @pr.compile
    def f(x, y):
        return ops.relu(x * y + y)

    inputs = [(rng_array(300, 50, seed=s), rng_array(300, 50, seed=s + 100)) for s in range(8)]
    expected = [np.maximum(x * y + y, 0) for x, y in inputs]
    f(*inputs[0])
    errors = []

    def worker(k):
        for _ in range(20):
            for i in range(k % 2, len(inputs), 2):
                got = f(*inputs[i]).numpy()
                if not np.array_equal(got, expected[i]):
                    errors.append(i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and f.tracing_count == 1


def test_two_models_run_at_the_same_time():
    """Calls of different compiled functions in two threads overlap in time
    (each runs without the GIL), and each gets its own correct result."""
    def make(k):
        v = pr.Variable(np.full(1_000_000, k, np.float32))

        @pr.compile
        def f(x):
            for _ in range(40):
                x = x * 0.5 + v
            return x
        return f

    fns = [make(1.0), make(2.0)]
    x = np.zeros(1_000_000, np.float32)
    expected = [f(x).numpy() for f in fns]
    spans, results = [[], []], [None, None]
    barrier = threading.Barrier(2)

    def worker(i):
        barrier.wait()
        for _ in range(3):
            t0 = time.perf_counter()
            results[i] = fns[i](x).numpy()
            spans[i].append((t0, time.perf_counter()))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        np.testing.assert_array_equal(results[i], expected[i])
    assert any(a0 < b1 and b0 < a1 for a0, a1 in spans[0] for b0, b1 in spans[1])


def test_memory_plan_reuses_buffers():
    @pr.compile
    def chain(x):
        for _ in range(10):
            x = ops.relu(x * 2.0 + 1.0)
        return x

    x = np.ones((64, 64), np.float32)
    cf = chain.get_concrete_function(x)
    mem = cf.memory
    tensor_bytes = 64 * 64 * 4
    assert mem["naive_bytes"] >= 29 * tensor_bytes  # 30 intermediates, one is the output
    # every op after the first writes over its dying input: one buffer
    assert mem["arena_bytes"] <= tensor_bytes
    assert mem["inplace"] == 28  # 30 ops; the first reads the input, the last is the output
    assert cf.peak_memory_bytes == mem["arena_bytes"] + tensor_bytes
    np.testing.assert_allclose(chain(x).numpy(), np.full((64, 64), 2047.0))
    jit = pr.compile(chain.__wrapped__, jit_compile=True).get_concrete_function(x)
    assert jit.memory["arena_bytes"] <= tensor_bytes



ALTERNATING_BINDINGS = """
import resource, numpy as np, pyresnet as pr
f = pr.compile(lambda x: pr.ops.relu(x * 2.0 + 1.0) * 3.0 + x, reduce_retracing=True)
big, small = np.ones((128, 100000), np.float32), np.ones((80, 100000), np.float32)
f(big), f(small)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for _ in range(20):
    assert float(f(big).numpy()[0, 0]) == float(f(small).numpy()[0, 0]) == 10.0
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
"""


def test_alternating_bindings_reuse_their_arenas(tmp_path):
    """A full batch and a shorter last one (two bindings of one graph, as in
    fit) alternate: each switch gives the idle arena back to the allocator's
    cache, and the next call takes it from there (pr_alloc_huge), so memory
    stays flat.  Fresh arenas beside the full cache grew it by ~950 MiB
    (arenas of ~100 and ~60 MiB, 20 rounds); measured in a fresh process."""
    out = subprocess.run([sys.executable, "-c", ALTERNATING_BINDINGS], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    growth_mib = float(out.stdout.strip().splitlines()[-1])
    assert growth_mib < 250, f"peak RSS grew by {growth_mib:.0f} MiB over 20 alternations"

@pytest.mark.parametrize("dying", ["dy", "x"])
def test_batch_norm_backward_writes_over_a_dying_input(rng, dying):
    """batch_norm_train_backward's dx takes the buffer of dy or x when that
    input dies there (pr_op.inplace_inputs); values stay the eager ones."""
    x = rng.standard_normal((4, 5, 5, 16)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    gamma = rng.standard_normal(16).astype(np.float32)
    mean, var = x.mean((0, 1, 2)), x.var((0, 1, 2))

    def step(x, dy, gamma, mean, var):
        if dying == "dy":
            dy = dy * 2.0  # computed here: its buffer is the arena's
        else:
            x = x * 2.0
        dx, dgamma, dbeta = _C.call("batch_norm_train_backward", dy, x, gamma, mean, var,
                                    epsilon=1e-3)
        return ops.relu(dx), dgamma, dbeta

    compiled = pr.compile(step)
    assert compiled.get_concrete_function(x, dy, gamma, mean, var).memory["inplace"] == 1
    for got, want in zip(compiled(x, dy, gamma, mean, var), step(x, dy, gamma, mean, var)):
        np.testing.assert_array_equal(got.numpy(), np.asarray(want))


def test_dead_code_is_removed_but_side_effects_stay(capsys):
    @pr.compile
    def f(x):
        unused = x * 100.0  # noqa: F841
        pr.print("kept")
        return x + 1.0

    cf = f.get_concrete_function(np.ones(2, np.float32))
    ops_run = [n["op"] for n in cf.nodes]
    assert "multiply" not in ops_run and "host_callback" in ops_run and cf.passes["removed"] == 1


# ---- inspection and profiling ---------------------------------------------------

def test_nodes_dot_flops_and_chrome_trace(tmp_path):
    w = pr.Variable(rng_array(4, seed=1))

    @pr.compile
    def f(x):
        return ops.relu(x * w) + 1.0

    x = rng_array(3, 4)
    cf = f.get_concrete_function(x)
    nodes = cf.nodes
    assert [n["op"] for n in nodes] == ["multiply", "relu", "add"]
    assert all(n["output_shapes"] == [(3, 4)] for n in nodes)
    assert nodes[1]["inputs"] == nodes[0]["outputs"]
    assert cf.flops == 3 * 12
    dot = cf.to_dot()
    assert dot.startswith('digraph "f" {') and dot.rstrip().endswith("}")
    assert dot.count("->") == 2 + 1 + 2 + 1  # mul(x, w), relu, add(relu, 1), output
    trace = cf.profile(x, path=tmp_path / "trace.json").trace
    loaded = json.loads((tmp_path / "trace.json").read_text())
    assert loaded == json.loads(json.dumps(trace))
    events = loaded["traceEvents"]
    assert [e["name"] for e in events] == ["multiply", "relu", "add"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)


# ---- models -----------------------------------------------------------------------

def _small_resnet(seed):
    pr.utils.set_random_seed(seed)
    model = pr.applications.resnet_cifar(8, input_shape=(12, 12, 3), num_classes=5, width=4)
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _resnet_batch(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return (pr.Tensor(rng.standard_normal((n, 12, 12, 3)).astype(np.float32)),
            pr.Tensor(rng.integers(0, 5, n).astype(np.int32)))


def _assert_weights_close(a, b, rtol, atol):
    assert len(a.weights) == len(b.weights)
    for wa, wb in zip(a.weights, b.weights):
        np.testing.assert_allclose(wb.numpy(), wa.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("jit", [False, True])
def test_resnet_compiled_matches_eager(jit):
    """Forward values, gradients and ten SGD-momentum steps of a small
    ResNet-8: compiled equals eager within rtol 1e-5 (values, gradients) and
    1e-4 (weights after ten steps)."""
    eager, comp = _small_resnet(3), _small_resnet(3)
    _assert_weights_close(eager, comp, 0, 0)
    x, y = _resnet_batch()
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)

    def forward_and_grads(model, x, y):
        with pr.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        return logits, model(x, training=False), loss, tape.gradient(loss, model.trainable_weights)

    compiled_fwd = pr.compile(forward_and_grads, jit_compile=jit)
    want = forward_and_grads(eager, x, y)
    got = compiled_fwd(comp, x, y)
    for w, g in zip(want[:3] + tuple(want[3]), got[:3] + tuple(got[3])):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    # BN moving stats updated alike (exactly, unless jit timing chose another
    # conv kernel variant than eager's, which sums in another order)
    _assert_weights_close(eager, comp, 1e-5 if jit else 0, 1e-7 if jit else 0)

    step = pr.compile(comp.train_step, jit_compile=jit)
    if jit:  # BN + ReLU, BN + residual add + ReLU and the BN + ReLU backward are fused
        names = {n["op"] for n in step.get_concrete_function((x, y)).nodes}
        assert {"batch_norm_relu_train", "batch_norm_add_relu_train",
                "batch_norm_relu_train_backward", "fused_elementwise"} <= names
        assert "relu" not in names
        assert "batch_norm_relu_infer" in {n["op"] for n in compiled_fwd.get_concrete_function(
            comp, x, y).nodes}
    for i in range(10):
        xb, yb = _resnet_batch(seed=i)
        logs_e, logs_c = eager.train_step((xb, yb)), step((xb, yb))
        assert logs_e.keys() == logs_c.keys()
        for k in logs_e:
            np.testing.assert_allclose(float(logs_c[k]), float(logs_e[k]), rtol=1e-4, atol=1e-5)
    _assert_weights_close(eager, comp, 1e-4, 1e-5)
    assert step.tracing_count == 1
    if jit:  # every node's kernel (and thread count) has been chosen by timing
        cf = step.get_concrete_function((x, y))
        variants = cf.graph.plan([x, y])["variants"]
        assert all(v >= 0 for v in variants)
        kernels = {n["kernel"] for n in cf.nodes if n["op"].startswith("conv2d")}
        assert kernels and kernels <= {k + t for k in ("avx512_direct", "avx2_direct",
                                                       "im2col_blas")
                                       for t in ("", " @1 thread")}


@pytest.mark.parametrize("shortcut,policy", [("projection", "float32"), ("zero_pad", "float32"),
                                             ("projection", "mixed_bfloat16")])
def test_batch_norm_fusions_are_bit_for_bit(shortcut, policy):
    """jit_compile's batch-norm fusions (BN + ReLU, BN + residual add +
    ReLU, the BN + ReLU backward with its mask recomputed, and under
    mixed_bfloat16 the cast of the BN backward's dx folded into it) give the
    unfused ops' bits: each fused op against its composition, and three
    training steps of a ResNet-8 with and without jit_compile (exactly when
    every op has one kernel, as under PYRESNET_KERNELS=reference, CI's second
    pass; else to the rounding of another convolution kernel that timing
    chose)."""
    rng = np.random.default_rng(3)
    call = pr._C.call
    for shape in [(4, 5, 5, 16), (3, 7, 9, 15), (2, 4, 4, 35), (32, 8, 8, 64)]:
        c = shape[-1]
        x = (rng.standard_normal(shape) * 2 + 3).astype(np.float32)
        gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
        beta, res, dz = (rng.standard_normal(s).astype(np.float32) for s in (c, shape, shape))
        y, mean, var = call("batch_norm_train", x, gamma, beta, epsilon=1e-3)
        fused = call("batch_norm_add_relu_train", x, gamma, beta, res, epsilon=1e-3)
        np.testing.assert_array_equal(fused[0].numpy(), call("relu", call("add", y, res)).numpy())
        np.testing.assert_array_equal(fused[1].numpy(), mean.numpy())
        mask = call("relu_backward", dz, call("relu", y))
        want = call("batch_norm_train_backward", mask, x, gamma, mean, var, epsilon=1e-3)
        got = call("batch_norm_relu_train_backward", dz, x, gamma, beta, mean, var, epsilon=1e-3)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g.numpy(), w.numpy())
        for op, args in (("batch_norm_train_backward", (mask, x, gamma, mean, var)),
                         ("batch_norm_relu_train_backward", (dz, x, gamma, beta, mean, var))):
            dx16 = call(op, *args, epsilon=1e-3, dx_dtype=5)[0]  # dx rounded to bfloat16
            assert dx16.dtype == "bfloat16"
            np.testing.assert_array_equal(dx16.numpy(), pr.ops.cast(want[0], "bfloat16").numpy())
            with pytest.raises(ValueError, match="dx_dtype must be 0 .float32. or 5"):
                call(op, *args, epsilon=1e-3, dx_dtype=1)
    x, y = _resnet_batch()
    weights, casts = {}, {}
    before = pr.mixed_precision.global_policy()
    pr.mixed_precision.set_global_policy(policy)
    try:
        for jit in (False, True):
            pr.utils.set_random_seed(4)
            model = pr.applications.resnet_cifar(8, input_shape=(12, 12, 3), num_classes=5,
                                                 width=4, shortcut=shortcut)
            model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                          loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
            step = pr.compile(model.train_step, jit_compile=jit)
            for _ in range(3):
                step((x, y))
            weights[jit] = [w.numpy() for w in model.weights]
            casts[jit] = [n["op"] for n in step.get_concrete_function((x, y)).nodes].count("cast")
            if jit:
                ops_run = [n["op"] for n in step.get_concrete_function((x, y)).nodes]
                assert ops_run.count("batch_norm_relu_train_backward") == 4  # the stem, each BN1
                assert ops_run.count("batch_norm_add_relu_train") >= 1
    finally:
        pr.mixed_precision.set_global_policy(before)
    if policy == "mixed_bfloat16":  # bfloat16 activations have bfloat16 gradients: only the
        # kernels, the image and the pooled activations are cast, none folds into a BN
        assert casts[True] == casts[False], casts
    exact = pr.config.config()["reference_only"]
    for a, b in zip(weights[False], weights[True]):
        np.testing.assert_allclose(b, a, rtol=0 if exact else 1e-4, atol=0 if exact else 1e-5)


def test_product_sum_fusion_is_bit_for_bit():
    """jit_compile makes squeeze-and-excitation's gate gradient, sum_to_shape
    of dy * x per image and channel, one multiply_sum_to_shape node (the
    product never stored): the same bits as the unfused ops, eagerly and in
    graph mode; with one thread and two (its per-image parallel split);
    and a product read twice, or of broadcast operands, stays unfused."""
    rng = np.random.default_rng(5)
    x = pr.Tensor(rng.standard_normal((64, 8, 8, 33)).astype(np.float32))
    w = pr.Tensor(rng.standard_normal((64, 8, 8, 33)).astype(np.float32))
    s = pr.Variable(rng.standard_normal((64, 1, 1, 33)).astype(np.float32))

    def gate_grad(x, w):
        with pr.GradientTape() as tape:
            loss = pr.ops.sum(pr.ops.multiply(pr.ops.multiply(s, x), w))
        return tape.gradient(loss, s)  # sum_to_shape(w * x, (64, 1, 1, 33))

    def twice(x, w):
        p = pr.ops.multiply(x, w)
        return pr._C.call("sum_to_shape", p, shape=[64, 1, 1, 33]), p

    want = gate_grad(x, w).numpy()
    np.testing.assert_array_equal(
        want, pr._C.call("sum_to_shape", pr.ops.multiply(w, x), shape=[64, 1, 1, 33]).numpy())
    threads = pr.get_num_threads()
    try:
        for n in (1, 2):
            pr.set_num_threads(n)
            f = pr.compile(gate_grad, jit_compile=True)
            np.testing.assert_array_equal(f(x, w).numpy(), want)
            ops_run = [nd["op"] for nd in f.get_concrete_function(x, w).nodes]
            assert "multiply_sum_to_shape" in ops_run and "sum_to_shape" not in ops_run, ops_run
            np.testing.assert_array_equal(
                pr._C.call("multiply_sum_to_shape", w, x, shape=[64, 1, 1, 33]).numpy(), want)
        g = pr.compile(twice, jit_compile=True)
        got, _ = g(x, w)
        np.testing.assert_array_equal(got.numpy(), want)
        assert "multiply_sum_to_shape" not in [nd["op"] for nd in g.get_concrete_function(
            x, w).nodes]
    finally:
        pr.set_num_threads(threads)
    with pytest.raises(ValueError, match="inputs of one shape expected"):
        pr._C.call("multiply_sum_to_shape", x, s, shape=[64, 1, 1, 33])


def test_kernel_error_raises_like_eager_and_leaves_weights():
    model = _small_resnet(1)
    x, _ = _resnet_batch()
    bad = pr.Tensor(np.array([0, 1, 2, 3, 4, 9], np.int32))  # 9 is out of range
    step = pr.compile(model.train_step)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(ValueError) as compiled_err:
        step((x, bad))
    # The graph runs state updates (BN moving statistics, SGD) after the loss:
    # nothing changed.  (Eagerly, the forward pass has updated the BN moving
    # statistics before the loss raises.)
    for b, w in zip(before, model.weights):
        np.testing.assert_array_equal(w.numpy(), b)
    with pytest.raises(ValueError) as eager_err:
        model.train_step((x, bad))
    assert str(compiled_err.value) == str(eager_err.value)
    assert "label 9" in str(compiled_err.value)


def test_custom_python_layer_traces():
    class Gate(pr.layers.Layer):
        """A custom layer in Python: y = x * (relu(g) + 1) + b."""

        def build(self, input_shape):
            self.g = self.add_weight((input_shape[-1],), initializer="ones", name="g")
            self.b = self.add_weight((input_shape[-1],), initializer="zeros", name="b")
            self.calls = 0

        def call(self, x):
            self.calls += 1  # Python side effect: counts traces, not runs, when compiled
            return x * (ops.relu(self.g) + 1.0) + self.b

    layer = Gate()
    x = pr.Tensor(rng_array(4, 3, seed=7))

    def step(x):
        with pr.GradientTape() as tape:
            loss = ops.sum_to_shape(layer(x) * layer(x), ())
        return loss, tape.gradient(loss, layer.trainable_weights)

    want = step(x)
    f = pr.compile(step)
    for _ in range(3):
        got = f(x)
    assert layer.calls == 2 + 2  # two eager calls, one trace of two calls
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)


def _fit_data(n=20, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 12, 12, 3)).astype(np.float32),
            rng.integers(0, 5, n).astype(np.int32))


def test_fit_runs_compiled_without_retracing_the_last_batch():
    model = _small_resnet(2)
    x, y = _fit_data()
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, validation_data=(x[:10], y[:10]))
    assert isinstance(model.train_function, pr.Function)
    assert model.train_function.tracing_count == 1  # batches 8, 8, 4 every epoch: one graph
    assert model.test_function.tracing_count == 1
    assert len(history.history["loss"]) == 3 and np.isfinite(history.history["loss"]).all()
    model.evaluate(x, y, batch_size=8, verbose=0)
    model.predict(x, batch_size=8, verbose=0)
    assert model.test_function.tracing_count == 1
    assert model.predict_function.tracing_count == 1

    eager = _small_resnet(2)
    eager.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], run_eagerly=True)
    eager_history = eager.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=False)
    model2 = _small_resnet(2)
    compiled_history = model2.fit(x, y, batch_size=8, epochs=3, verbose=0, shuffle=False)
    assert not isinstance(eager.train_function, pr.Function)
    np.testing.assert_allclose(compiled_history.history["loss"], eager_history.history["loss"],
                               rtol=1e-4)


def test_keyboard_interrupt_during_compiled_fit_leaves_weights_usable():
    class Interrupt(pr.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 1:
                raise KeyboardInterrupt

    model = _small_resnet(4)
    x, y = _fit_data()
    with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[Interrupt()])
    assert all(np.isfinite(w.numpy()).all() for w in model.weights)
    assert np.isfinite(model.predict(x[:3], verbose=0)).all()
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # and it trains on
    assert np.isfinite(history.history["loss"]).all()


def test_flops_count_multiply_adds_twice():
    x = pr.Tensor(rng_array(2, 9, 9, 3))
    w = pr.Variable(rng_array(3, 3, 3, 4, seed=1))
    d = pr.Variable(rng_array(200, 3, seed=2))

    def f(x):
        with pr.GradientTape() as tape:
            tape.watch(x)
            y = ops.conv2d(x, w, strides=2, padding="same")  # (2, 5, 5, 4)
            z = ops.matmul(ops.reshape(y, (1, 200)), d)  # (1, 3)
            loss = ops.sum(z)
        return z, tape.gradient(loss, [x, w])

    conv_flops = 2 * (2 * 5 * 5 * 4) * (3 * 3 * 3)
    cf = pr.compile(f).get_concrete_function(x)
    by_op = {}
    for n in cf.nodes:
        by_op.setdefault(n["op"], []).append(n["flops"])
    assert by_op["conv2d"] == [conv_flops]
    assert by_op["conv2d_backprop_input"] == [conv_flops]
    assert by_op["conv2d_backprop_filter"] == [conv_flops]
    assert by_op["matmul"][0] == 2 * 200 * 3  # forward; the backward matmuls follow
    assert cf.flops == sum(n["flops"] for n in cf.nodes)


def test_a_layer_object_compiles_and_keeps_its_attributes(rng):
    """`pr.compile(layer)` (as `tf.function(layer)`): named by its class, equal to
    the eager call, and the layer's own attributes are not copied onto the wrapper."""
    layer = pr.layers.Dense(3)
    x = rng.standard_normal((2, 4)).astype("float32")
    eager = layer(x).numpy()
    f = pr.compile(layer)
    assert f.__name__ == "Dense"
    np.testing.assert_array_equal(f(x).numpy(), eager)
    np.testing.assert_allclose(eager, x @ layer.kernel.numpy() + layer.bias.numpy(), rtol=1e-5, atol=1e-6)
    assert not hasattr(f, "kernel") and f.tracing_count == 1


def test_small_plans_run_on_one_thread(rng):
    """A call of fewer than 3e7 floating-point operations runs its kernels on
    one thread (waking the others costs more than they give: an MLP step at
    batch 32); a larger one keeps every thread; the results are the same
    bits as an eager call on as many threads (OpenBLAS's sgemm may round
    differently on 1 and 2 threads: it does on AMD EPYC Zen 3 at 32x784x128)."""
    w = rng.standard_normal((784, 128)).astype(np.float32)

    def f(x):
        return pr.ops.relu(pr.ops.matmul(x, w))

    small = rng.standard_normal((32, 784)).astype(np.float32)  # 6.4e6 multiply-adds x 2
    large = rng.standard_normal((512, 784)).astype(np.float32)  # 1.0e8
    cf = pr.compile(f)
    before = pr.get_num_threads()
    try:
        pr.set_num_threads(2)
        assert cf.get_concrete_function(small).flops < 3e7
        assert cf.get_concrete_function(small).threads == 1
        assert cf.get_concrete_function(large).flops > 3e7
        assert cf.get_concrete_function(large).threads == 2
        for x in (small, large):
            want = np.maximum(x.astype(np.float64) @ w, 0)
            got = cf(x).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            pr.set_num_threads(cf.get_concrete_function(x).threads)
            np.testing.assert_array_equal(got, f(x).numpy())
            pr.set_num_threads(2)
    finally:
        pr.set_num_threads(before)
