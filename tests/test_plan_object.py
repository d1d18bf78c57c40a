"""Plan, tune, run as three calls (issue 32): Graph.plan(inputs) and
ConcreteFunction.plan() return a Plan, a dict (the plan's description, as
before) with run() and tune()."""
import copy
import gc
import pickle
import sys

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import ops

KEYS = {"shapes", "node_flops", "variants", "kernels", "arena_bytes", "naive_bytes",
        "output_bytes", "flops", "binding", "inplace", "threads"}


def _conv_relu(x, k, b):
    y = ops.relu(ops.conv2d(x, k, padding="same"))
    return {"y": y, "s": ops.matmul(ops.reshape(y, (x.shape[0], -1)), b)}


def _data(seed, n=4):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, 8, 8, 3)).astype(np.float32),
            rng.standard_normal((3, 3, 3, 5)).astype(np.float32),
            rng.standard_normal((8 * 8 * 5, 2)).astype(np.float32))


@pytest.mark.parametrize("jit", [False, True])
def test_plan_is_the_description_dict(jit):
    f = pr.compile(_conv_relu, jit_compile=jit)
    x, k, b = _data(0)
    cf = f.get_concrete_function(x, k, b)
    plan = cf.graph.plan([x, k, b])
    assert isinstance(plan, pr.Plan) and isinstance(plan, dict)
    assert set(plan) == KEYS
    assert dict(plan) == cf.graph._describe([x, k, b])
    assert plan["shapes"][cf.graph.outputs[0]] == (4, 8, 8, 5)
    assert plan["flops"] == cf.flops > 0
    assert plan.input_specs == [("float32", (4, 8, 8, 3)), ("float32", (3, 3, 3, 5)),
                                ("float32", (320, 2))]
    assert dict(cf.plan()) == dict(plan)
    # copies and pickles are the plain description (the pin stays with the plan)
    assert type(copy.copy(plan)) is dict and pickle.loads(pickle.dumps(plan)) == dict(plan)
    assert "Plan inputs=[float32 (4, 8, 8, 3)" in repr(plan)


@pytest.mark.parametrize("jit", [False, True])
def test_run_equals_a_call_and_is_reused(jit):
    f = pr.compile(_conv_relu, jit_compile=jit)
    x, k, b = _data(0)
    cf = f.get_concrete_function(x, k, b)
    plan = cf.plan(x, k, b)
    graph_plan = cf.graph.plan([x, k, b])
    for seed in range(12):  # one plan, many runs on new data of the planned sizes
        xs, ks, bs = _data(seed + 1)
        want = f(xs, ks, bs)
        got = plan.run(xs, ks, bs)
        assert set(got) == {"y", "s"}
        np.testing.assert_allclose(got["y"].numpy(), want["y"].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got["s"].numpy(), want["s"].numpy(), rtol=1e-4, atol=1e-4)
        ref = np.maximum(_reference_conv(xs, ks), 0)
        np.testing.assert_allclose(got["y"].numpy(), ref, rtol=1e-4, atol=1e-4)
        outs = graph_plan.run(xs, ks, bs)  # the graph's plan: its outputs, a list
        assert isinstance(outs, list) and len(outs) == 2
        np.testing.assert_allclose(outs[0].numpy(), want["y"].numpy(), rtol=1e-5, atol=1e-5)
    assert f.tracing_count == 1


def _reference_conv(x, k):
    n, h, w, c = x.shape
    kh, kw, _, o = k.shape
    xp = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
    y = np.zeros((n, h, w, o), np.float64)
    for di in range(kh):
        for dj in range(kw):
            y += np.einsum("nijc,co->nijo", xp[:, di:di + h, dj:dj + w], k[di, dj])
    return y


def test_run_refuses_other_shapes_and_dtypes():
    f = pr.compile(_conv_relu)
    x, k, b = _data(0)
    plan = f.get_concrete_function(x, k, b).plan()
    with pytest.raises(ValueError, match=r"input 0 is float32 \(2, 8, 8, 3\), the plan is for "
                                         r"float32 \(4, 8, 8, 3\)") as e:
        plan.run(x[:2], k, b)
    assert "expected [float32 (4, 8, 8, 3), float32 (3, 3, 3, 5), float32 (320, 2)]" in str(e.value)
    with pytest.raises(ValueError, match=r"input 2 is int32 \(320, 2\), the plan is for "
                                         r"float32 \(320, 2\)"):
        plan.run(x, k, b.astype(np.int32))
    with pytest.raises(ValueError, match=r"Plan.tune: input 1 is float32 \(3, 3, 3, 6\)"):
        plan.tune(x, np.zeros((3, 3, 3, 6), np.float32), b)
    with pytest.raises(TypeError, match="3 tensor inputs, got 2"):
        plan.run(x, k)
    graph_plan = f.get_concrete_function(x, k, b).graph.plan([x, k, b])
    with pytest.raises(TypeError, match="by position"):
        graph_plan.run(x, k, b=b)
    with pytest.raises(TypeError):
        f.get_concrete_function(x, k, b).graph.plan([x, k])
    np.testing.assert_allclose(plan.run(x, k, b)["y"].numpy(), f(x, k, b)["y"].numpy())


def test_tune_then_run_equals_run():
    f = pr.compile(_conv_relu, jit_compile=True)
    x, k, b = _data(0, n=3)  # sizes no other test times
    plan = f.get_concrete_function(x, k, b).plan()
    conv = [j for j, n in enumerate(f.get_concrete_function(x, k, b).nodes)
            if n["op"].startswith("conv2d")]
    assert conv and all(plan["variants"][j] == -1 for j in conv)  # not timed yet
    untuned = plan.run(x, k, b)
    kernels = plan.tune(x, k, b)
    assert kernels == plan["kernels"] and all(v >= 0 for v in plan["variants"])
    assert all(isinstance(kernels[j], str) for j in conv)
    assert plan.tune(x, k, b) == kernels  # nothing left to time
    for seed in (0, 1):
        xs, ks, bs = _data(seed, n=3)
        tuned, call = plan.run(xs, ks, bs), f(xs, ks, bs)
        np.testing.assert_allclose(tuned["y"].numpy(), call["y"].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(tuned["s"].numpy(), call["s"].numpy(), rtol=1e-4, atol=1e-4)
        if seed == 0:
            np.testing.assert_allclose(tuned["y"].numpy(), untuned["y"].numpy(),
                                       rtol=1e-5, atol=1e-5)
    # a new plan of the same sizes finds the choices made
    assert f.get_concrete_function(x, k, b).nodes[conv[0]]["kernel"] == kernels[conv[0]]


def test_tune_without_jit_does_not_run():
    v = pr.Variable(np.zeros(2, np.float32))

    @pr.compile
    def step(x):
        v.assign_add(x)
        return v + 0.0

    x = np.ones(2, np.float32)
    plan = step.get_concrete_function(x).plan()
    assert plan.tune(x) == plan["kernels"]
    np.testing.assert_array_equal(v.numpy(), [0, 0])  # no choice to time: not run
    for i in range(3):  # a run has a call's effects
        np.testing.assert_array_equal(plan.run(x).numpy(), [i + 1, i + 1])
    np.testing.assert_array_equal(v.numpy(), [3, 3])


def test_a_plan_outlives_other_sizes_and_its_function():
    f = pr.compile(lambda x: x * 2.0 + 1.0, input_signature=[pr.TensorSpec((None, 3))])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    plan = f.get_concrete_function(x).plan()
    assert plan["binding"] and list(plan["binding"].values()) == [2]
    graph = f.get_concrete_function(x).graph
    for n in range(3, 45):  # more sizes than a graph keeps plans of (32)
        np.testing.assert_allclose(f(np.ones((n, 3), np.float32)).numpy(), 3.0)
    np.testing.assert_allclose(plan.run(x).numpy(), x * 2 + 1)
    refs = sys.getrefcount(graph)
    again = graph.plan([x])  # the plan object and its pin each hold the graph
    assert sys.getrefcount(graph) == refs + 2
    del again
    gc.collect()
    assert sys.getrefcount(graph) == refs
    del f, graph
    gc.collect()
    np.testing.assert_allclose(plan.run(x + 1).numpy(), (x + 1) * 2 + 1)
