"""ConcreteFunction.profile: the per-op and per-node tables (pyresnet/
profiling.py) against the trace they summarise, FLOP counts from the
formulas, the calls really run, the text and dict forms, and bad input."""
import json
import time

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import ops


def _conv_step(rng):
    """A compiled step of one conv, a ReLU, a sum and a variable update."""
    k = pr.Variable(rng.standard_normal((3, 3, 4, 8)).astype(np.float32))
    counter = pr.Variable(np.zeros((), np.float32))

    @pr.compile
    def step(x):
        y = ops.sum(ops.relu(ops.conv2d(x, k, padding="same")))
        counter.assign_add(1.0)
        return y

    return step, counter


def test_tables_sum_the_trace_and_count_flops_from_the_formula(rng):
    step, counter = _conv_step(rng)
    x = rng.standard_normal((2, 9, 9, 4)).astype(np.float32)
    cf = step.get_concrete_function(x)
    nodes = cf.nodes
    start = time.perf_counter()
    p = cf.profile(x, repeats=3)
    wall_ms = (time.perf_counter() - start) * 1e3
    assert float(counter.numpy()) == 3.0            # three real calls (plus none for tracing)
    events = p.trace["traceEvents"]
    assert len(events) == 3 * len(nodes) and p.repeats == 3
    assert [e["args"]["call"] for e in events] == [c for c in range(3) for _ in nodes]
    for c in (1, 2):  # calls run one after the other
        first = [e for e in events if e["args"]["call"] == c][0]
        last = [e for e in events if e["args"]["call"] == c - 1][-1]
        assert first["ts"] >= last["ts"] + last["dur"]

    # per node: the trace's durations, summed over the calls
    assert [(r["node"], r["op"], r["kernel"], r["output_shapes"]) for r in p.by_node] == \
        [(j, n["op"], n["kernel"], n["output_shapes"]) for j, n in enumerate(nodes)]
    all_us = sum(e["dur"] for e in events)
    for j, row in enumerate(p.by_node):
        us = sum(e["dur"] for e in events if e["args"]["node"] == j)
        assert row["calls"] == 3
        assert row["total_ms"] == pytest.approx(us / 1e3)
        assert row["mean_ms"] == pytest.approx(us / 3e3)
        assert row["share"] == pytest.approx(us / all_us)
    assert p.step_ms == pytest.approx(all_us / 3e3)
    assert p.step_ms <= wall_ms

    # per op: the sums of its nodes; the conv's FLOPs from 2 * N*H*W*Cout * 3*3*Cin
    conv_flops = 2 * (2 * 9 * 9 * 8) * (3 * 3 * 4)
    conv_node = next(r for r in p.by_node if r["op"] == "conv2d")
    assert conv_node["gflops"] == pytest.approx(3 * conv_flops / (conv_node["total_ms"] * 1e6))
    assert sorted(r["op"] for r in p.by_op) == sorted({n["op"] for n in nodes})
    for row in p.by_op:
        mine = [r for r in p.by_node if (r["op"], r["kernel"]) == (row["op"], row["kernel"])]
        assert row["calls"] == 3 * len(mine)
        assert row["total_ms"] == pytest.approx(sum(r["total_ms"] for r in mine))
        assert row["mean_ms"] == pytest.approx(row["total_ms"] / row["calls"])
    assert sum(r["share"] for r in p.by_op) == pytest.approx(1.0)
    assert [r["total_ms"] for r in p.by_op] == sorted((r["total_ms"] for r in p.by_op),
                                                      reverse=True)


def test_text_html_and_dicts_show_the_same_values(rng, tmp_path):
    step, _ = _conv_step(rng)
    x = rng.standard_normal((1, 6, 6, 4)).astype(np.float32)
    p = step.get_concrete_function(x).profile(x, repeats=2, path=tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text()) == json.loads(json.dumps(p.trace))

    lines = str(p.by_op).splitlines()
    assert lines[0].split() == ["op", "kernel", "calls", "total", "ms", "mean", "ms", "share",
                                "GFLOP/s"]
    assert len(lines) == 1 + len(p.by_op)
    for line, row in zip(lines[1:], p.by_op):
        op, kernel, calls, total, mean, share, gflops = line.split()
        assert (op, kernel, int(calls)) == (row["op"], row["kernel"] or "-", row["calls"])
        assert float(total) == pytest.approx(row["total_ms"], abs=5e-4)
        assert float(mean) == pytest.approx(row["mean_ms"], abs=5e-4)
        assert float(share.rstrip("%")) == pytest.approx(100 * row["share"], abs=0.05)
        assert float(gflops) == pytest.approx(row["gflops"], abs=5e-3)
    assert p.to_dicts() == p.by_op.to_dicts() == list(p.by_op)
    p.to_dicts()[0]["op"] = "changed"                 # copies: the table stays
    assert p.by_op[0]["op"] != "changed"
    assert p.by_op._repr_html_().count("<tr>") == 1 + len(p.by_op)

    text = str(p)
    assert text.startswith(f"{len(p.by_node)} nodes, {p.step_ms:.3f} ms of node time per call "
                           f"(mean of 2 calls)")
    top = p.by_node.top(2)
    assert [r["node"] for r in top] == [r["node"] for r in sorted(
        p.by_node, key=lambda r: -r["total_ms"])[:2]]
    slowest = text.split("slowest nodes:\n", 1)[1].splitlines()[1:]
    assert [int(line.split()[0]) for line in slowest] == [r["node"] for r in p.by_node.top(10)]


def test_bad_arguments_raise_and_run_nothing(rng):
    step, counter = _conv_step(rng)
    x = rng.standard_normal((1, 5, 5, 4)).astype(np.float32)
    cf = step.get_concrete_function(x)
    with pytest.raises(ValueError, match=r"repeats=\.\.\.\) expects an int >= 1, got 0"):
        cf.profile(x, repeats=0)
    assert float(counter.numpy()) == 0.0
    with pytest.raises(KeyError, match="the columns are"):
        cf.profile(x).by_op.top(3, by="seconds")
    with pytest.raises(ValueError, match="at least one call"):
        pr.profiling.summarize("f", [], {}, [])
