"""Smoke tests of every benchmark script (bench/*.py): each runs to the end
at a tiny size with a few steps, in a subprocess as a user runs it, exits 0
and writes what it says.  Speed is never asserted (DESIGN: measurements
live in bench/, not in unit tests).

bench/eager_vs_compiled.py runs with matplotlib hidden, as without the
``bench`` extra: the plot is skipped with a message, the tables are written.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import ROOT, data_root

BENCH = ROOT / "bench"

# script -> (arguments for a run of a few seconds at most, files it writes into --out)
SMOKE = {
    # the port needs torch, which the package's tests never use: its options and reader are
    # tested in tests/test_airbench_race.py; here it must load and parse without torch
    "airbench_torch.py": (["--help"], []),
    # a race takes minutes per framework: re-render a fake record's report
    "airbench_race.py": (["--render", "{race}"], ["airbench_race_fake.md"]),
    "airbench_steps.py": (["--steps", "1", "--warmup", "1", "--batch", "8", "--widths", "8,8,8",
                           "--profile", "--no-tta"], []),
    "augment.py": (["--images", "256", "--repeats", "1", "--train", "--train-steps", "2",
                    "--train-repeats", "1"], []),
    "bench_norm.py": (["--repeats", "1", "--threads", "1"], []),
    "conv.py": (["--batch", "1", "--reps", "1", "--no-torch", "--peak-tries", "1", "--dtype",
                 "bfloat16", "--out", "{out}"], ["conv_bfloat16.md", "conv_bfloat16.json"]),
    "distributed.py": (["--rounds", "1", "--steps", "2", "--warmup", "1", "--block", "1",
                        "--batch", "8", "--reps", "2", "--steps56", "1", "--out", "{out}"],
                       ["distributed.md", "distributed.json"]),
    "eager_vs_compiled.py": (["--steps", "1", "--batches", "2", "--models", "MLP 784-128-10",
                              "--no-others", "--loop-steps", "2", "--epoch-rounds", "1",
                              "--epoch-images", "96", "--resnet-steps", "1", "--out", "{out}"],
                             ["eager_vs_compiled.md", "eager_vs_compiled.json"]),
    "fma_peak.py": (["--tries", "1"], []),
    "time_to_accuracy.py": (["{run}", "--target", "0.5", "--out", "{out}"],
                            ["run_time_to_accuracy.md"]),
    "render_results.py": (["--check"], []),  # docs/results.md equals its rendering
    "peers.py": (["--batch", "2", "--rounds", "1", "--steps", "1", "--warmup", "1",
                  "--modes", "pyresnet_compiled,pyresnet_bf16_compiled", "--peak-tries", "1",
                  "--pyresnet-python", sys.executable, "--out", "{out}"],
                 ["peers_resnet20_b2.md", "peers_resnet20_b2.json"]),
}


def test_every_bench_script_has_a_smoke_test():
    scripts = sorted(p.name for p in BENCH.glob("*.py"))
    assert scripts and sorted(SMOKE) == scripts, \
        f"bench scripts without a smoke run in tests/test_bench.py: {set(scripts) - set(SMOKE)}"


@pytest.fixture
def no_matplotlib(tmp_path):
    """A PYTHONPATH entry on which ``import matplotlib`` fails, as when the
    ``bench`` extra is not installed."""
    stub = tmp_path / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n")
    return stub.parent


def _fake_run(folder):
    """A run folder as ``python -m pyresnet.train`` writes it (config.json,
    metrics.csv of two epochs), for bench/time_to_accuracy.py."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "options": {"epochs": 2}, "command": "python -m pyresnet.train --epochs 2",
        "cpu": "test", "threads": 2, "started": "2026-12-01T00:00:00"}))
    (folder / "metrics.csv").write_text(
        "epoch,loss,accuracy,val_loss,val_accuracy,learning_rate,images_per_s,seconds\n"
        "1,1.5,0.4,1.4,0.45,0.1,700,60\n2,1.0,0.6,0.9,0.62,0.0,700,90\n")
    return folder


def _fake_race(path):
    """A record as bench/airbench_race.py writes it (one run per framework)."""
    runs = [{"framework": fw, "seed": 0, "log": f"{fw}_seed0.log", "wall_seconds": wall,
             "seconds_in_run": wall - 1, "test_accuracy": 0.93, "test_accuracy_tta": 0.94}
            for fw, wall in (("pyresnet", 100.0), ("torch", 130.0))]
    summary = {"frameworks": {r["framework"]: {
        "runs": 1, "failed": 0, **{k: r[k] for k in ("wall_seconds", "seconds_in_run",
                                                       "test_accuracy", "test_accuracy_tta")},
        "test_accuracy_tta_mean": 0.94} for r in runs},
        "speed_ratio": 1.3, "accuracy_gap": 0.0, "equal_accuracy": True}
    path.write_text(json.dumps({
        "date": "2026-12-03", "tag": "fake", "command": ["python", "bench/airbench_race.py"],
        "cpu": "test", "logical_cpus": 2, "versions": {}, "pyresnet_checkout": "x",
        "load_average_start": [0, 0, 0], "load_average_end": [0, 0, 0], "summary": summary,
        "runs": runs, "settings": {"seeds": [0], "epochs": 9.9, "subset": None,
                                   "test_subset": None, "threads": 2, "bf16": False,
                                   "torch_compile": False, "accuracy_tolerance": 0.002}}))
    return path


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_bench_script_runs_at_a_tiny_size(script, tmp_path, no_matplotlib):
    args, writes = SMOKE[script]
    out = tmp_path / "out"
    out.mkdir()
    run = _fake_run(tmp_path / "run")
    race = _fake_race(out / "airbench_race_fake.json")
    env = dict(os.environ, PYRESNET_DATA=str(data_root()), PYTHONPATH=os.pathsep.join(
        filter(None, [str(no_matplotlib), os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, str(BENCH / script),
                        *[a.format(out=out, run=run, race=race) for a in args]],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{script} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.stdout.strip(), f"{script} printed nothing"
    for name in writes:
        path = out / name
        assert path.is_file() and path.stat().st_size > 0, f"{script} did not write {name}"
        if name.endswith(".json"):
            json.loads(path.read_text())
        else:
            assert "|---" in path.read_text(), f"{name} holds no table"
    if script == "time_to_accuracy.py":
        assert "first reached after epoch 2, 2.5 minutes" in p.stdout
        assert "| 1 | 1.0 | 0.1 | 1.5000 | 0.4500 |" in p.stdout
    if script == "eager_vs_compiled.py":
        assert "plot skipped: matplotlib is not installed" in p.stdout
        assert not (out / "eager_vs_compiled.png").exists()
        result = json.loads((out / "eager_vs_compiled.json").read_text())
        rows = result["ladder"]
        assert [(r["model"], r["batch"]) for r in rows] == [("MLP 784-128-10", 2)]
        assert all(r[m] > 0 for r in rows for m in ("eager", "compiled", "jit", "loop"))
        # the graph of MLP 784-128-10's step: 2 Dense forward + backward, the loss, 4 updates
        assert all(r["ops"] >= r["jit_ops"] > 10 and r["intermediate_bytes"] > 0 for r in rows)
        assert all(len(r["rounds"][m]) == 1 for r in rows for m in ("eager", "loop"))
        assert result["cpu"]["model"] and len(result["load_average_before"]) == 3
        assert result["command"].startswith("python bench/eager_vs_compiled.py --steps 1")
        modes = [(r["case"].split(",")[0], r["mode"]) for r in result["epochs"]]
        assert modes == [("MLP 784-128-10", "eager"), ("MLP 784-128-10", "compiled step from Python"),
                         ("MLP 784-128-10", "compiled loop"), ("ResNet-20", "compiled step from Python"),
                         ("ResNet-20", "compiled loop")]
        assert all(r["seconds"] > 0 for r in result["epochs"])
    if script == "distributed.py":
        res = json.loads((out / "distributed.json").read_text())
        assert res["allreduce"]["resnet20 one buffer"]["bytes"] == 4 * 269722
        assert res["allreduce"]["resnet56 one buffer"]["bytes"] == 4 * 853018
        assert all(v["median_us"] > 0 for v in res["allreduce"].values())
        assert [len(c) for c in res["loss_curves"].values()] == [2, 2, 2]
        assert [r["machines"] for r in res["cost_model_resnet20"]] == [2, 4, 8, 16, 32, 64]


def test_eager_vs_compiled_overhead_fit_recovers_known_costs():
    """bench/eager_vs_compiled.py's overhead model on rows made from known
    costs (eager = compiled + ops * 12 us + bytes * 80 ms/GB): the fit gives
    them back, its trend passes through the speed-ups, and the conclusion
    quotes the rows' figures."""
    import numpy as np
    sys.path.insert(0, str(BENCH))
    try:
        import eager_vs_compiled as study
    finally:
        sys.path.remove(str(BENCH))
    rows = []
    for i, gflop in enumerate([0.013, 0.1, 2.4, 7.8, 195.0]):
        # power laws of the FLOPs, as the trend assumes: then it is exact
        compiled, ops, nbytes = gflop / 100.0, 100.0 * gflop ** 0.3, gflop * 3e7
        rows.append({"model": f"m{i}", "batch": 32, "ops": ops, "flops": gflop * 1e9,
                     "intermediate_bytes": nbytes, "compiled": compiled,
                     "eager": compiled + ops * 12e-6 + nbytes * 80e-12,
                     "jit": compiled, "loop": compiled})
    fit = study.fit_overhead(rows)
    assert abs(fit["per_op_us"] - 12.0) < 1e-6 and abs(fit["per_gb_ms"] - 80.0) < 1e-6
    assert fit["max_abs_error"] < 1e-9
    gflop, speedup = study.trend(rows, "compiled", fit)
    assert np.all(np.diff(gflop) > 0)
    want = [r["eager"] / r["compiled"] for r in rows]
    np.testing.assert_allclose(np.interp([r["flops"] / 1e9 for r in rows], gflop, speedup)[[0, -1]],
                               [want[0], want[-1]], rtol=1e-9)
    text = study.conclusion({"cpu": {"model": "Test CPU", "isas": ["avx2"], "threads": 2},
                             "ladder": rows})
    assert text.count(". ") == 1 and text.startswith("On Test CPU")
    assert "12.0 us" in text and "80 ms per GB" in text
    assert f"m0 at batch 32 ({rows[0]['eager'] / rows[0]['compiled']:.2f}x" in text


def test_peers_counts_regnet_200mf_flops_as_the_paper():
    """bench/peers.py's RegNet FLOPs: the 200MF models at 224x224 have 199.0M
    (X) and 199.5M (Y) multiply-adds with a 1000-class head (Radosavovic et
    al. 2020, appendix: 0.2 GF; pycls's model zoo: 199M and 200M)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "peers", os.path.join(os.path.dirname(__file__), "..", "bench", "peers.py"))
    peers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peers)
    for model, macs in (("regnetx002", 199.04e6), ("regnety002", 199.51e6)):
        convs, features = peers.regnet_convs(model, (224, 224, 3))
        got = sum(h * w * kh * kw * c * o for h, w, kh, kw, c, o in convs) + features * 1000
        assert abs(got - macs) < 0.01e6, (model, got)
        assert features == 368
