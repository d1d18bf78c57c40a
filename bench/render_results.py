"""Render the tables of docs/results.md from the benchmarks' JSON records.

docs/results.md is prose around tables; each table sits between two marker
comments that name its kind and its record::

    <!-- table peers bench/results/peers_resnet20_b128.json -->
    | ... rendered here ... |
    <!-- end table -->

and this script rewrites what is between them from the JSON file, so every
figure in a table is the one the benchmark wrote (tests/test_docs.py checks
that the committed page equals its rendering).  Kinds:

- ``peers FILE``: bench/peers.py's record: one row per mode, seconds per
  step, images/s, percent of the fp32 FMA peak measured in the same run
  (``(bf16)`` for bfloat16 modes, whose peak differs), and images/s against
  pyresnet's compiled step.
- ``conv_pct FILE IMPL...`` / ``conv_ms FILE IMPL...``: bench/conv.py's
  record: one row per convolution shape, for each named implementation the
  forward / input-gradient / weight-gradient passes as a percentage of the
  FMA peak of that run (the best of its measurements; per ISA where the
  record has several) or in milliseconds; ``-`` where the implementation
  does not run that shape.
- ``airbench_race FILE``: bench/airbench_race.py's record: one row per
  framework, the medians over seeds of the wall seconds from launch to
  exit and of the final test accuracy with and without test-time
  augmentation, then the speed ratio and whether it is at equal accuracy.

Usage: ``python bench/render_results.py [--check] [PAGE]`` (default PAGE
docs/results.md); ``--check`` exits 1 when the page is out of date instead of
writing it.  Writes through a temporary file, fsynced and renamed.
"""
import argparse
import json
import os
import pathlib
import re
import shlex
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- table (.+?) -->\n(.*?)^<!-- end table -->$", re.S | re.M)
PASSES = ("forward", "backprop_input", "backprop_filter")


def _peers(record):
    lines = [f"CPU: {record['cpu']}, {record['threads']} threads, batch {record['batch']}, "
             f"fp32 FMA peak {record['fma_peak_gflops']:.0f} GFLOP/s (best of "
             f"{len(record['fma_peak_points'])} in the same run); "
             f"`python {shlex.join(record['command'])}`", "",
             "| mode | s/step | images/s | % fp32 peak | images/s vs pyresnet compiled |",
             "|---|---|---|---|---|"]
    for m in record["modes"]:
        if m.get("status") != "ok":
            lines.append(f"| {m['description']} | failed | | | |")
            continue
        pct = "(bf16)" if "bf16" in m["mode"] else f"{m['pct_peak']:.0f}%"
        vs = m.get("vs_pyresnet_compiled")
        lines.append(f"| {m['description']} | {m['s_per_step']:.3f} | {m['images_per_s']:.0f} | "
                     f"{pct} | {f'{vs:.2f}x' if vs else '-'} |")
    return lines


def _peak(record, impl):
    """The FMA peak (GFLOP/s) that ``impl`` is measured against."""
    peaks = record["peak_gflops"]
    if isinstance(peaks, dict):
        peaks = peaks[record["peak_isa"][impl]]
    return max(peaks)


def _conv(record, impls, unit):
    rows = {}
    for r in record["rows"]:
        rows.setdefault(r["shape"], {})[r["pass"]] = r
    env = f" ({record['environment']})" if record.get("environment") else ""
    lines = [f"CPU: {record['cpu']}, {record['threads']} threads, batch {record['batch']}, "
             f"{record['dtype']}{env}; "
             + ("percent of the fp32 FMA peak measured in the same run"
                if unit == "pct" else "milliseconds per call"), "",
             "| conv | " + " | ".join(f"{i} fwd / bpi / wgrad" for i in impls) + " |",
             "|---|" + "---|" * len(impls)]
    for shape, by_pass in rows.items():
        cells = []
        for impl in impls:
            values = []
            for p in PASSES:
                ms = by_pass.get(p, {}).get("ms", {}).get(impl)
                if ms is None:
                    values.append("-")
                elif unit == "pct":
                    values.append(f"{100 * by_pass[p]['gflop'] / (ms / 1e3) / _peak(record, impl):.0f}%")
                else:
                    values.append(f"{ms:.2f}")
            cells.append(" / ".join(values))
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return lines


def _airbench_race(record):
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    from airbench_race import verdict  # noqa: PLC0415 - the race's own wording

    s = record["settings"]
    lines = [f"CPU: {record['cpu']}, {s['threads']} threads per framework, "
             f"{'bfloat16' if s['bf16'] else 'float32'}, {s['epochs']:g} epochs, seeds "
             f"{', '.join(map(str, s['seeds']))}; `{shlex.join(record['command'])}`", "",
             "| framework | runs | wall s (median) | TTA accuracy (median) | without TTA |",
             "|---|---|---|---|---|"]
    for fw, e in record["summary"]["frameworks"].items():
        if not e["runs"]:
            lines.append(f"| {fw} | failed | | | |")
            continue
        lines.append(f"| {fw} | {e['runs']} | {e['wall_seconds']:.0f} | "
                     f"{e['test_accuracy_tta']:.4f} | {e['test_accuracy']:.4f} |")
    return lines + ["", verdict(record["summary"], s["accuracy_tolerance"])]


def render_table(spec):
    """The lines of the table a marker's ``spec`` names (see the module doc).

    Raises:
        ValueError: an unknown kind, or a record that does not exist."""
    kind, path, *impls = shlex.split(spec)
    file = ROOT / path
    if not file.is_file():
        raise ValueError(f"render_results: {path} does not exist")
    record = json.loads(file.read_text())
    if kind == "peers":
        return _peers(record)
    if kind in ("conv_pct", "conv_ms"):
        if not impls:
            raise ValueError(f"render_results: {kind} needs the implementations to show")
        return _conv(record, impls, kind[5:])
    if kind == "airbench_race":
        return _airbench_race(record)
    raise ValueError(f"render_results: unknown table kind {kind!r} (peers, conv_pct, conv_ms, "
                     "airbench_race)")


def render(text):
    """``text`` with every marked table rendered anew."""
    return MARKER.sub(lambda m: f"<!-- table {m[1]} -->\n" + "\n".join(render_table(m[1]))
                      + "\n<!-- end table -->", text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", nargs="?", default=str(ROOT / "docs" / "results.md"))
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the page differs from its rendering; write nothing")
    args = parser.parse_args(argv)
    page = pathlib.Path(args.page)
    text = page.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print(f"{page} is out of date: run python bench/render_results.py", file=sys.stderr)
            return 1
        print(f"{page}: its {len(MARKER.findall(text))} tables equal their rendering")
        return 0
    fd, tmp = tempfile.mkstemp(dir=page.parent, prefix=f".{page.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(new)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, page)
    print(f"{page}: {len(MARKER.findall(new))} tables rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main())
