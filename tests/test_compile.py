"""pyresnet.compile: traced graphs against eager execution, the tracing rules
(tf.function semantics), the executor (GIL released, threads, dynamic
shapes, errors) and the inspection/profiling exports.

Tolerances: elementwise graphs run the very kernels eager calls run, so
default-compiled results are bit-identical to eager; jit_compile fuses
elementwise chains (same float32 operations in the same order per element)
and is compared with rtol=1e-6.
"""
import json
import threading
import time
import warnings

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import ops


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

    with pytest.raises(TypeError, match="symbolic tensor.*traced by pyresnet.compile"):
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
    # the batch size enters attributes: a shape (broadcast_to / sum_to_shape)
    # and a float (1 / batch)
    with pr.GradientTape() as tape:
        y = x * w
        m = ops.scale(ops.sum_to_shape(y, (1, x.shape[1])), 1.0 / x.shape[0])
        loss = ops.sum_to_shape(m * m, ())
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
    assert mem["arena_bytes"] <= 2 * tensor_bytes + 64 * 2
    assert cf.peak_memory_bytes == mem["arena_bytes"] + tensor_bytes
    np.testing.assert_allclose(chain(x).numpy(), np.full((64, 64), 2047.0))
    jit = pr.compile(chain.__wrapped__, jit_compile=True).get_concrete_function(x)
    assert jit.memory["arena_bytes"] <= tensor_bytes


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
    trace = cf.profile(x, path=tmp_path / "trace.json")
    loaded = json.loads((tmp_path / "trace.json").read_text())
    assert loaded == json.loads(json.dumps(trace))
    events = loaded["traceEvents"]
    assert [e["name"] for e in events] == ["multiply", "relu", "add"]
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)
