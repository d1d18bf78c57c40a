"""airbench94 side by side: pyresnet's recipe against its PyTorch port.

Runs, for every seed, ``python -m pyresnet.train --recipe airbench94`` (with
``--pyresnet-python``, default this interpreter) and bench/airbench_torch.py
(with ``--torch-python``, default /work/venv-peers/bin/python, as
bench/peers.py calls the peers), each in a fresh process, one after the
other (the order alternates with the seed, so that a change in the
machine's load hits both alike), and reports for each framework:

  wall s      the median over seeds of the seconds from launching the
              process to its exit: interpreter start, imports, reading
              CIFAR-10, the whitening eigendecomposition, compiling, the
              training steps, the per-epoch test passes, the final test
              passes with and without test-time augmentation, and for
              pyresnet the run folder's files (backups and checkpoints
              after each epoch, model.keras);
  in-run s    the median of the seconds the run itself reports (pyresnet:
              final.json's ``seconds``, from the start of
              ``pyresnet.train.main``; torch: ``seconds_total``, from before
              ``import torch``);
  accuracy    the median final test accuracy with TTA (and without), of the
              final (Lookahead) weights.

``speed ratio`` = torch's median wall seconds / pyresnet's (above 1:
pyresnet is faster).  The issue's bar asks for it "at the same accuracy":
the report says whether the two medians of the TTA accuracy lie within
``--accuracy-tolerance`` (default 0.002, about airbench's run-to-run
standard deviation of 0.14%), and which framework is the less accurate when
they do not; a ratio whose faster side is also the less accurate one is not
a speed-up at equal accuracy.

    flock /work/notes/bench.lock python bench/airbench_race.py [--seeds 0,1,2]
        [--epochs 9.9] [--subset N] [--test-subset N] [--threads 2] [--bf16]
        [--torch-compile] [--frameworks pyresnet,torch] [--tag TAG]
        [--out bench/results]

writes ``<out>/airbench_race_<tag>.json`` (settings, CPU, versions, load
averages, every run's record and per-epoch rows, the summary) and ``.md``
(the tables), and each run's full output to
``<out>/airbench_race_<tag>_logs/<framework>_seed<seed>.log``.  The tag
defaults to ``<epochs>ep[_sub<N>][_bf16][_compile]``.  ``--bf16`` runs
pyresnet with ``--mixed-precision`` (Keras's mixed_bfloat16 policy) and
torch under ``torch.autocast("cpu", dtype=torch.bfloat16)``.  pyresnet's
run folders go to a temporary folder that is deleted afterwards (their
metrics.csv and final.json are copied into the JSON record).
``--render FILE.json`` rewrites the .md of an existing record.  A full run
(9.9 epochs) takes about 20 minutes per framework and seed on two cores:
run it on an idle machine, under the shared lock.
"""
import argparse
import datetime
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
FRAMEWORKS = ("pyresnet", "torch")
DEFAULT_TORCH_PYTHON = "/work/venv-peers/bin/python"


def _bench_module(name):
    """bench/<name>.py, imported (the helpers of the other scripts: one copy)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return __import__(name)


def _seeds(text):
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct seeds, got {text!r}")
    return seeds


def build_parser():
    """The command line (argparse.ArgumentParser); see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=_seeds, default=[0], help="comma list (default 0)")
    p.add_argument("--epochs", type=float, default=9.9,
                   help="the recipe's 9.9, or fewer for a smoke run (> 0; fractional: the "
                        "runs stop after ceil(batches per epoch * epochs) steps)")
    p.add_argument("--subset", type=int, default=None, metavar="N",
                   help="train on the first N training images (>= 1024)")
    p.add_argument("--test-subset", type=int, default=None, metavar="N",
                   help="test on the first N test images")
    p.add_argument("--threads", type=int, default=2, help="threads per framework (default 2)")
    p.add_argument("--bf16", action="store_true",
                   help="pyresnet --mixed-precision and torch bfloat16 autocast")
    p.add_argument("--torch-compile", action="store_true", help="torch.compile the network")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                   help="comma list of pyresnet, torch (default both)")
    p.add_argument("--accuracy-tolerance", type=float, default=0.002,
                   help="TTA accuracies this close count as equal (default 0.002)")
    p.add_argument("--pyresnet-python", default=sys.executable,
                   help="interpreter with pyresnet (default this one)")
    p.add_argument("--torch-python", default=DEFAULT_TORCH_PYTHON,
                   help="interpreter with torch (default %(default)s)")
    p.add_argument("--data", default=os.environ.get("PYRESNET_DATA"),
                   help="folder with cifar-10-batches-py/ (default $PYRESNET_DATA)")
    p.add_argument("--tag", default=None, help="suffix of the output names")
    p.add_argument("--out", default=str(HERE / "results"), metavar="DIR",
                   help="folder of the JSON, .md and logs (default bench/results)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run (default 3600)")
    p.add_argument("--render", metavar="FILE.json",
                   help="only rewrite the .md of this record (no runs)")
    return p


def parse_args(argv=None):
    """The options, checked (argparse's error, exit status 2, on bad ones)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.render:
        return args
    frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad or not frameworks or len(set(frameworks)) != len(frameworks):
        p.error(f"--frameworks: expected distinct names among {', '.join(FRAMEWORKS)}, "
                f"got {args.frameworks!r}")
    args.frameworks = frameworks
    if not args.epochs > 0:
        p.error(f"--epochs must be > 0, got {args.epochs:g}")
    if args.subset is not None and args.subset < 1024:
        p.error(f"--subset must be >= 1024 (one batch), got {args.subset}")
    if args.test_subset is not None and args.test_subset < 1:
        p.error(f"--test-subset must be >= 1, got {args.test_subset}")
    if args.threads < 1 or not 0 <= args.accuracy_tolerance < 1 or args.timeout <= 0:
        p.error("--threads must be >= 1, --accuracy-tolerance in [0, 1), --timeout > 0")
    if not args.data:
        p.error("no data folder: pass --data or set PYRESNET_DATA")
    if args.tag is None:
        args.tag = (f"{args.epochs:g}ep" + (f"_sub{args.subset}" if args.subset else "")
                    + ("_bf16" if args.bf16 else "") + ("_compile" if args.torch_compile else ""))
    return args


# ---- the runs ----------------------------------------------------------------------

def command(framework, seed, args, workdir):
    """The argv of one run (list of str)."""
    common = ["--epochs", f"{args.epochs:g}", "--seed", str(seed)]
    if args.subset is not None:
        common += ["--subset", str(args.subset)]
    if args.test_subset is not None:
        common += ["--test-subset", str(args.test_subset)]
    if framework == "pyresnet":
        return ([args.pyresnet_python, "-m", "pyresnet.train", "--recipe", "airbench94",
                 "--log-dir", str(workdir / "runs"), "--verbose", "0", "--data", args.data]
                + common + (["--mixed-precision"] if args.bf16 else []))
    return ([args.torch_python, str(HERE / "airbench_torch.py"), "--threads", str(args.threads),
             "--data", args.data, "--out", str(workdir / "torch.json")] + common
            + (["--bf16"] if args.bf16 else []) + (["--compile"] if args.torch_compile else []))


def _pyresnet_result(workdir):
    """final.json and metrics.csv of the single run folder under workdir/runs."""
    from pyresnet.train import read_metrics  # noqa: PLC0415 - the one parser of metrics.csv
    folders = sorted((workdir / "runs").glob("*")) if (workdir / "runs").is_dir() else []
    if len(folders) != 1 or not (folders[0] / "final.json").is_file():
        raise RuntimeError(f"expected one run folder with final.json under {workdir / 'runs'}, "
                           f"found {[f.name for f in folders]}")
    final = json.loads((folders[0] / "final.json").read_text())
    rows = read_metrics(folders[0] / "metrics.csv")
    return {"test_accuracy": final["test_accuracy"],
            "test_accuracy_tta": final["test_accuracy_tta"], "seconds_in_run": final["seconds"],
            "epochs": rows}


def run_one(framework, seed, args, log_path):
    """One run in its own process: its record (dict), ``error`` set on failure."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYRESNET_DATA=args.data,
               TORCHINDUCTOR_COMPILE_THREADS="1")  # as bench/peers.py
    workdir = pathlib.Path(tempfile.mkdtemp(prefix=f"airbench_race_{framework}_"))
    cmd = command(framework, seed, args, workdir)
    record = {"framework": framework, "seed": seed, "command": cmd}
    t0 = time.perf_counter()
    try:
        with open(log_path, "w") as log:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            try:
                proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd="/", timeout=args.timeout)
                record["exit_code"] = proc.returncode
            except subprocess.TimeoutExpired:
                record["error"] = f"timed out after {args.timeout:g} s"
        record["wall_seconds"] = time.perf_counter() - t0
        if "error" not in record and record["exit_code"] != 0:
            tail = log_path.read_text().strip().splitlines()[-1:] or ["(no output)"]
            record["error"] = f"exit code {record['exit_code']}: {tail[0][:300]}"
        if "error" not in record:
            if framework == "pyresnet":
                record.update(_pyresnet_result(workdir))
            else:
                out = json.loads((workdir / "torch.json").read_text())
                record.update({k: out[k] for k in ("test_accuracy", "test_accuracy_tta",
                                                   "seconds_training", "seconds_tta",
                                                   "seconds_before_training", "epochs",
                                                   "torch_version")},
                              seconds_in_run=out["seconds_total"])
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        record["error"] = f"{type(e).__name__}: {e}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return record


# ---- the summary and the report ----------------------------------------------------

def summarize(runs, frameworks, tolerance):
    """Medians per framework and the speed ratio (see the module docstring).

    Args:
        runs: run records (dicts with ``framework``, ``wall_seconds``,
            ``seconds_in_run``, ``test_accuracy``, ``test_accuracy_tta``, and
            ``error`` for a failed run, which is left out).
        frameworks: the names, in the report's order.
        tolerance: the largest TTA-accuracy gap that counts as equal.
    Returns:
        dict: ``frameworks`` {name: {runs, failed, wall_seconds,
        seconds_in_run, test_accuracy, test_accuracy_tta (medians),
        test_accuracy_tta_mean}} and, with both frameworks measured,
        ``speed_ratio`` (torch wall / pyresnet wall), ``accuracy_gap``
        (pyresnet - torch, TTA medians) and ``equal_accuracy`` (bool).
    """
    out = {"frameworks": {}}
    for fw in frameworks:
        ok = [r for r in runs if r["framework"] == fw and "error" not in r]
        entry = {"runs": len(ok), "failed": sum(1 for r in runs
                                                if r["framework"] == fw and "error" in r)}
        if ok:
            for key in ("wall_seconds", "seconds_in_run", "test_accuracy", "test_accuracy_tta"):
                entry[key] = statistics.median(r[key] for r in ok)
            entry["test_accuracy_tta_mean"] = statistics.fmean(r["test_accuracy_tta"] for r in ok)
        out["frameworks"][fw] = entry
    p, t = out["frameworks"].get("pyresnet", {}), out["frameworks"].get("torch", {})
    if p.get("runs") and t.get("runs"):
        out["speed_ratio"] = t["wall_seconds"] / p["wall_seconds"]
        out["accuracy_gap"] = p["test_accuracy_tta"] - t["test_accuracy_tta"]
        out["equal_accuracy"] = abs(out["accuracy_gap"]) <= tolerance
    return out


def verdict(summary, tolerance):
    """One sentence on the speed ratio and whether it is at equal accuracy."""
    if "speed_ratio" not in summary:
        return "No speed ratio: a framework has no successful run."
    ratio, gap = summary["speed_ratio"], summary["accuracy_gap"]
    faster = "pyresnet" if ratio >= 1 else "torch"
    text = (f"Speed ratio (torch wall / pyresnet wall): {ratio:.2f}x, {faster} faster; TTA "
            f"accuracy gap (pyresnet - torch) {100 * gap:+.2f} points")
    if summary["equal_accuracy"]:
        return text + f", within the {100 * tolerance:.2f}-point tolerance: equal accuracy."
    behind = "pyresnet" if gap < 0 else "torch"
    note = (" The faster framework is also the less accurate one, so this is not a speed-up at "
            "equal accuracy." if behind == faster else "")
    return text + f", beyond the {100 * tolerance:.2f}-point tolerance: {behind} is less " \
                  f"accurate.{note}"


def render_markdown(record):
    """The .md report (str) of a race record (the JSON this script writes)."""
    s = record["settings"]
    fws = record["summary"]["frameworks"]
    lines = [f"# airbench94 race: pyresnet against PyTorch ({record['tag']})", "",
             f"CPU: {record['cpu']}, {s['threads']} threads per framework; {s['epochs']:g} "
             f"epochs, train images {s['subset'] or 'all'}, test images "
             f"{s['test_subset'] or 'all'}, {'bfloat16' if s['bf16'] else 'float32'}"
             f"{', torch.compile' if s['torch_compile'] else ''}; seeds "
             f"{', '.join(map(str, s['seeds']))}; {record['date']}", "",
             "| framework | runs | wall s (median) | in-run s | TTA accuracy (median) "
             "| accuracy without TTA | TTA accuracy (mean) |",
             "|---|---|---|---|---|---|---|"]
    for fw, e in fws.items():
        if not e["runs"]:
            lines.append(f"| {fw} | 0 ({e['failed']} failed) | | | | | |")
            continue
        failed = f" ({e['failed']} failed)" if e["failed"] else ""
        lines.append(f"| {fw} | {e['runs']}{failed} | {e['wall_seconds']:.1f} | "
                     f"{e['seconds_in_run']:.1f} | {e['test_accuracy_tta']:.4f} | "
                     f"{e['test_accuracy']:.4f} | {e['test_accuracy_tta_mean']:.4f} |")
    lines += ["", verdict(record["summary"], s["accuracy_tolerance"]), "",
              "| framework | seed | wall s | in-run s | TTA accuracy | without TTA | log |",
              "|---|---|---|---|---|---|---|"]
    for r in record["runs"]:
        if "error" in r:
            lines.append(f"| {r['framework']} | {r['seed']} | failed: {r['error'][:120]} "
                         f"| | | | {r['log']} |")
            continue
        lines.append(f"| {r['framework']} | {r['seed']} | {r['wall_seconds']:.1f} | "
                     f"{r['seconds_in_run']:.1f} | {r['test_accuracy_tta']:.4f} | "
                     f"{r['test_accuracy']:.4f} | {r['log']} |")
    vers = ", ".join(f"{d} {v}" for vv in record["versions"].values() if vv
                     for d, v in vv.items())
    lines += ["", "wall s: launching the process to its exit (loading, compiling, per-epoch "
              "test passes and TTA included); in-run s: what the run itself timed. "
              f"Load average at the start {record['load_average_start']}, at the end "
              f"{record['load_average_end']} ({record['logical_cpus']} logical CPUs: a load "
              "above that means other work competed).",
              f"Versions: {vers}; pyresnet checkout {record['pyresnet_checkout']}.",
              "", f"Command: `{' '.join(record['command'])}`"]
    return "\n".join(lines) + "\n"


def _write(path, text):
    """Write ``text`` to ``path`` atomically (pyresnet.utils.atomic)."""
    from pyresnet.utils.atomic import write_text  # noqa: PLC0415 - the one way to write a file
    write_text(str(path), text)


def output_paths(out, tag):
    """(JSON record, Markdown report, logs folder) of a race tagged ``tag`` in
    folder ``out``: ``airbench_race_<tag>.json`` / ``.md`` / ``_logs``.  The
    names are built by appending, since a tag such as ``9.9ep`` holds a dot
    that ``Path.with_suffix`` would take for a suffix."""
    out = pathlib.Path(out).resolve()
    name = f"airbench_race_{tag}"
    return out / f"{name}.json", out / f"{name}.md", out / f"{name}_logs"


def main(argv=None):
    """Run the race (or ``--render``); returns the exit status: 0, 1 when
    a run failed (it is in the report), 2 when a framework is missing."""
    args = parse_args(argv)
    if args.render:
        record = json.loads(pathlib.Path(args.render).read_text())
        md = pathlib.Path(args.render).with_suffix(".md")
        _write(md, render_markdown(record))
        print(f"wrote {md}")
        return 0
    peers, fma_peak = _bench_module("peers"), _bench_module("fma_peak")
    python = {"pyresnet": args.pyresnet_python, "torch": args.torch_python}
    versions = {}
    for fw in args.frameworks:
        versions[fw], why = peers.probe(python[fw], fw)
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 2
    json_path, md_path, logs = output_paths(args.out, args.tag)
    logs.mkdir(parents=True, exist_ok=True)
    cpu, checkout, load_start = fma_peak.cpu_model(), peers.git_version(), os.getloadavg()
    print(f"CPU: {cpu}; load average {load_start[0]:.2f}; versions "
          + ", ".join(f"{d} {v}" for vv in versions.values() for d, v in vv.items()), flush=True)
    runs = []
    for i, seed in enumerate(args.seeds):
        order = args.frameworks if i % 2 == 0 else args.frameworks[::-1]
        for fw in order:
            log = logs / f"{fw}_seed{seed}.log"
            print(f"seed {seed}: {fw} ...", flush=True)
            r = run_one(fw, seed, args, log)
            r["log"] = str(log.relative_to(ROOT)) if log.is_relative_to(ROOT) else str(log)
            runs.append(r)
            if "error" in r:
                print(f"seed {seed}: {fw} FAILED: {r['error']} (log {log})", flush=True)
            else:
                print(f"seed {seed}: {fw} {r['wall_seconds']:.1f} s wall, TTA accuracy "
                      f"{r['test_accuracy_tta']:.4f} ({r['test_accuracy']:.4f} without)",
                      flush=True)
    settings = {k: getattr(args, k) for k in ("seeds", "epochs", "subset", "test_subset",
                                              "threads", "bf16", "torch_compile", "frameworks",
                                              "accuracy_tolerance")}
    summary = summarize(runs, args.frameworks, args.accuracy_tolerance)
    record = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "tag": args.tag, "command": ["python", "bench/airbench_race.py"] + sys.argv[1:],
              "cpu": cpu, "logical_cpus": os.cpu_count(), "versions": versions,
              "pyresnet_checkout": checkout,
              "load_average_start": [round(x, 2) for x in load_start],
              "load_average_end": [round(x, 2) for x in os.getloadavg()],
              "settings": settings, "summary": summary, "runs": runs}
    _write(json_path, json.dumps(record, indent=1) + "\n")
    md = render_markdown(record)
    _write(md_path, md)
    print("\n" + md + f"\nwrote {json_path}, {md_path} and {logs}/")
    return 0 if all("error" not in r for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
