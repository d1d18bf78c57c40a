"""bench/airbench_race.py and bench/airbench_torch.py without torch: the
options, the commands they launch, the summary and its wording, the report
rendering, and the port's CIFAR-10 reader against pyresnet's.  The races
themselves are benchmarks (bench/results/), not tests; torch is never
imported here."""
import importlib.util
import json
import pickle
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

from pyresnet.datasets import _cache


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


race = _load("airbench_race")
port = _load("airbench_torch")


def test_neither_script_imports_torch_when_loaded():
    assert "torch" not in sys.modules


def _args(*argv):
    return race.parse_args(["--data", "/data", *argv])


def test_race_output_names_keep_the_dotted_tag(tmp_path):
    j, m, logs = race.output_paths(tmp_path, "9.9ep_bf16")
    assert (j.name, m.name, logs.name) == ("airbench_race_9.9ep_bf16.json",
                                           "airbench_race_9.9ep_bf16.md",
                                           "airbench_race_9.9ep_bf16_logs")
    assert j.parent == tmp_path.resolve()


def test_race_options_and_tag():
    a = _args()
    assert (a.seeds, a.epochs, a.frameworks, a.tag) == ([0], 9.9, ["pyresnet", "torch"], "9.9ep")
    a = _args("--seeds", "3,1,2", "--epochs", "0.5", "--subset", "2048", "--bf16",
              "--torch-compile", "--frameworks", "torch")
    assert (a.seeds, a.frameworks, a.tag) == ([3, 1, 2], ["torch"], "0.5ep_sub2048_bf16_compile")


@pytest.mark.parametrize("argv", [["--seeds", "a"], ["--seeds", "1,1"], ["--frameworks", "tf"],
                                  ["--frameworks", "torch,torch"], ["--subset", "100"],
                                  ["--epochs", "0"], ["--threads", "0"],
                                  ["--accuracy-tolerance", "1"]])
def test_race_refuses_bad_options(argv, capsys):
    with pytest.raises(SystemExit) as e:
        _args(*argv)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_race_commands(tmp_path):
    a = _args("--seeds", "4", "--epochs", "2", "--subset", "4096", "--test-subset", "500",
              "--bf16", "--torch-compile", "--threads", "3", "--torch-python", "/t/python")
    p = race.command("pyresnet", 4, a, tmp_path)
    assert p[1:5] == ["-m", "pyresnet.train", "--recipe", "airbench94"]
    assert p[p.index("--log-dir") + 1] == str(tmp_path / "runs")
    for flag, value in (("--epochs", "2"), ("--seed", "4"), ("--subset", "4096"),
                        ("--test-subset", "500"), ("--data", "/data")):
        assert p[p.index(flag) + 1] == value
    assert "--mixed-precision" in p and "--bf16" not in p
    t = race.command("torch", 4, a, tmp_path)
    assert t[:2] == ["/t/python", str(ROOT / "bench" / "airbench_torch.py")]
    assert t[t.index("--threads") + 1] == "3"
    assert t[t.index("--out") + 1] == str(tmp_path / "torch.json")
    assert "--bf16" in t and "--compile" in t and "--mixed-precision" not in t
    # the port accepts every option the race gives it
    port_args = port.parse_args(t[2:])
    assert (port_args.seed, port_args.epochs, port_args.subset, port_args.threads,
            port_args.bf16, port_args.compile) == (4, 2.0, 4096, 3, True, True)


def _run(fw, seed, wall, tta, plain=None, error=None):
    r = {"framework": fw, "seed": seed, "log": f"logs/{fw}_seed{seed}.log"}
    if error:
        return {**r, "error": error}
    return {**r, "wall_seconds": wall, "seconds_in_run": wall - 2, "test_accuracy_tta": tta,
            "test_accuracy": tta - 0.003 if plain is None else plain}


RUNS = [_run("pyresnet", 0, 100.0, 0.940), _run("torch", 0, 150.0, 0.9405),
        _run("torch", 1, 130.0, 0.941), _run("pyresnet", 1, 120.0, 0.939),
        _run("pyresnet", 2, 110.0, 0.942), _run("torch", 2, 170.0, 0.938),
        _run("torch", 3, None, None, error="exit code 1: boom")]


def test_summary_medians_and_ratio():
    s = race.summarize(RUNS, ["pyresnet", "torch"], 0.002)
    p, t = s["frameworks"]["pyresnet"], s["frameworks"]["torch"]
    assert (p["runs"], p["failed"], t["runs"], t["failed"]) == (3, 0, 3, 1)
    assert p["wall_seconds"] == 110.0 and t["wall_seconds"] == 150.0
    assert p["seconds_in_run"] == 108.0
    assert p["test_accuracy_tta"] == 0.940 and t["test_accuracy_tta"] == 0.9405
    assert p["test_accuracy_tta_mean"] == pytest.approx((0.940 + 0.939 + 0.942) / 3)
    assert s["speed_ratio"] == pytest.approx(150 / 110)
    assert s["accuracy_gap"] == pytest.approx(-0.0005)
    assert s["equal_accuracy"] is True
    text = race.verdict(s, 0.002)
    assert "1.36x, pyresnet faster" in text and "-0.05 points" in text and "equal accuracy" in text
    # beyond the tolerance, the faster framework being the less accurate one is said
    s = race.summarize(RUNS, ["pyresnet", "torch"], 0.0001)
    assert s["equal_accuracy"] is False
    assert "pyresnet is less accurate" in race.verdict(s, 0.0001)
    assert "not a speed-up at equal accuracy" in race.verdict(s, 0.0001)
    # one framework only: medians, no ratio
    s = race.summarize(RUNS[:1], ["pyresnet", "torch"], 0.002)
    assert "speed_ratio" not in s and s["frameworks"]["torch"]["runs"] == 0
    assert race.verdict(s, 0.002).startswith("No speed ratio")


def _record():
    settings = {"seeds": [0, 1, 2, 3], "epochs": 9.9, "subset": None, "test_subset": None,
                "threads": 2, "bf16": False, "torch_compile": False,
                "frameworks": ["pyresnet", "torch"], "accuracy_tolerance": 0.002}
    return {"date": "2026-12-03T17:00:00+00:00", "tag": "9.9ep",
            "command": ["python", "bench/airbench_race.py", "--seeds", "0,1,2,3"],
            "cpu": "Test CPU", "logical_cpus": 2,
            "versions": {"pyresnet": {"pyresnet": "0.1.0"}, "torch": {"torch": "2.13.0"}},
            "pyresnet_checkout": "abc1234", "load_average_start": [0.1, 0.1, 0.1],
            "load_average_end": [2.0, 2.0, 1.5], "settings": settings,
            "summary": race.summarize(RUNS, ["pyresnet", "torch"], 0.002), "runs": RUNS}


def test_report_rendering(tmp_path):
    record = _record()
    md = race.render_markdown(record)
    assert "| pyresnet | 3 | 110.0 | 108.0 | 0.9400 | 0.9370 | 0.9403 |" in md
    assert "| torch | 3 (1 failed) | 150.0 | 148.0 | 0.9405 | 0.9375 | 0.9398 |" in md
    assert "| torch | 3 | failed: exit code 1: boom | | | | logs/torch_seed3.log |" in md
    assert "Speed ratio (torch wall / pyresnet wall): 1.36x" in md
    assert "CPU: Test CPU, 2 threads per framework; 9.9 epochs" in md
    # --render rewrites the .md of a record, no runs
    path = tmp_path / "airbench_race_9.9ep.json"
    path.write_text(json.dumps(record))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "airbench_race.py"), "--render",
                          str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "airbench_race_9.9ep.md").read_text() == md


def test_results_page_renders_a_race_record(tmp_path):
    render = _load("render_results")
    path = tmp_path / "race.json"
    path.write_text(json.dumps(_record()))
    lines = render.render_table(f"airbench_race {path}")
    assert "| pyresnet | 3 | 110 | 0.9400 | 0.9370 |" in lines
    assert "| torch | 3 | 150 | 0.9405 | 0.9375 |" in lines
    assert lines[-1].startswith("Speed ratio (torch wall / pyresnet wall): 1.36x")


@pytest.mark.parametrize("argv", [["--epochs", "0"], ["--subset", "100"], ["--threads", "0"],
                                  ["--test-subset", "0"]])
def test_port_refuses_bad_options(argv):
    with pytest.raises(SystemExit) as e:
        port.parse_args(["--data", "/data", *argv])
    assert e.value.code == 2


def test_port_reads_cifar10_as_pyresnet_does(cifar10_dir):
    x, y = port.read_batch(cifar10_dir / "test_batch")
    xr, yr = _cache.read_batch(cifar10_dir / "test_batch", "labels", 10)
    assert x.shape == (10000, 32, 32, 3) and x.dtype == np.uint8 and y.dtype == np.int64
    np.testing.assert_array_equal(x, xr)
    np.testing.assert_array_equal(y, yr)


def test_port_reader_refuses_code_and_wrong_layouts(tmp_path):
    bad = tmp_path / "evil"
    bad.write_bytes(pickle.dumps({"data": print}))  # a pickled global
    with pytest.raises(pickle.UnpicklingError, match="refusing to load builtins.print"):
        port.read_batch(bad)
    wrong = tmp_path / "wrong"
    wrong.write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ValueError, match=r"expected data uint8 \(N, 3072\)"):
        port.read_batch(wrong)
    with pytest.raises(FileNotFoundError, match="missing data_batch_1"):
        port.load_cifar10(tmp_path)
