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


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_bench_script_runs_at_a_tiny_size(script, tmp_path, no_matplotlib):
    args, writes = SMOKE[script]
    out = tmp_path / "out"
    out.mkdir()
    run = _fake_run(tmp_path / "run")
    env = dict(os.environ, PYRESNET_DATA=str(data_root()), PYTHONPATH=os.pathsep.join(
        filter(None, [str(no_matplotlib), os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, str(BENCH / script),
                        *[a.format(out=out, run=run) for a in args]],
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
