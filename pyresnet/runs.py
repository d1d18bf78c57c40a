"""List the runs of the training command: ``python -m pyresnet.runs [LOG_DIR]``.

Prints a table with one row per run folder of ``LOG_DIR`` (default
``runs``, the training command's default ``--log-dir``), oldest first:
the start date, the model, the dataset, the epochs done out of those asked
for, the best and the final test accuracy (the final one once the run has
written ``model.keras``, else ``-``: a run under way or killed, which
``python -m pyresnet.train --resume RUN_DIR`` continues), the mean training
images/s over the epochs, and the folder's name.  Folders without a
``config.json`` are not runs and are skipped.
"""
import argparse
import json
import math
import os
import sys

from .train import read_metrics

COLUMNS = ["date", "model", "dataset", "epochs", "best acc", "final acc", "images/s", "run"]


def run_rows(log_dir):
    """One dict per run folder of ``log_dir`` (keys ``COLUMNS``), oldest first.

    Raises:
        FileNotFoundError: when ``log_dir`` is not a folder.
    """
    if not os.path.isdir(log_dir):
        raise FileNotFoundError(f"no folder {log_dir!r}")
    rows = []
    for name in sorted(os.listdir(log_dir)):
        folder = os.path.join(log_dir, name)
        config_path = os.path.join(folder, "config.json")
        if not os.path.isfile(config_path):
            continue
        try:
            with open(config_path) as f:
                config = json.load(f)
            options = config["options"]
            metrics = read_metrics(os.path.join(folder, "metrics.csv"))
        except (ValueError, KeyError, OSError) as e:
            print(f"{name}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
            continue
        accs = [r["val_accuracy"] for r in metrics if not math.isnan(r["val_accuracy"])]
        speeds = [r["images_per_s"] for r in metrics]
        finished = os.path.isfile(os.path.join(folder, "model.keras")) and metrics
        rows.append({"date": config.get("started", "?").replace("T", " "),
                     "model": options["model"], "dataset": options["dataset"],
                     "epochs": f"{len(metrics)}/{options['epochs']}",
                     "best acc": f"{max(accs):.4f}" if accs else "-",
                     "final acc": f"{metrics[-1]['val_accuracy']:.4f}" if finished else "-",
                     "images/s": f"{sum(speeds) / len(speeds):.0f}" if speeds else "-",
                     "run": name})
    return rows


def format_table(rows):
    """``rows`` as aligned text lines, a header first."""
    widths = [max([len(c)] + [len(r[c]) for r in rows]) for c in COLUMNS]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip()]
    lines += ["  ".join(r[c].ljust(w) for c, w in zip(COLUMNS, widths)).rstrip() for r in rows]
    return lines


def main(argv=None):
    """Print the table; return 0 (1 with a message when LOG_DIR is missing)."""
    p = argparse.ArgumentParser(prog="python -m pyresnet.runs",
                                description="List the runs of python -m pyresnet.train.")
    p.add_argument("log_dir", nargs="?", default="runs", metavar="LOG_DIR",
                   help="the training command's --log-dir (default: runs)")
    args = p.parse_args(argv)
    try:
        rows = run_rows(args.log_dir)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"no runs in {args.log_dir}")
        return 0
    print("\n".join(format_table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
