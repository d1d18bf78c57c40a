"""Time to accuracy of a training run: the curve and the time to a target.

Reads a run folder of ``python -m pyresnet.train`` (its ``config.json`` and
``metrics.csv``) and prints, as a markdown table, every epoch's cumulative
wall time (training and the test pass; the seconds before the first epoch,
loading and tracing, are not in metrics.csv and are reported by the run's
final line), learning rate, training loss and test accuracy; then the first
epoch whose test accuracy reaches ``--target`` and its time, and the final
epoch's accuracy (the criterion: the final epoch, not the best one).

Usage: python bench/time_to_accuracy.py RUN_DIR [--target 0.91] [--out bench/results]
writes <out>/<run folder name>_time_to_accuracy.md
"""
import argparse
import json
import os
import sys

from pyresnet.train import read_metrics
from pyresnet.utils.atomic import write_text


def report(run_dir, target):
    """The markdown text for ``run_dir`` (see the module docstring).

    Raises:
        FileNotFoundError: without config.json or metrics rows.
    """
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    rows = read_metrics(os.path.join(run_dir, "metrics.csv"))
    if not rows:
        raise FileNotFoundError(f"{run_dir}: no epochs in metrics.csv")
    lines = [f"# {os.path.basename(os.path.normpath(run_dir))}", "",
             f"`{config.get('command', '?')}`; CPU {config.get('cpu', '?')}, "
             f"{config.get('threads', '?')} threads, started {config.get('started', '?')}", "",
             "| epoch | minutes | learning rate | loss | test accuracy |", "|---|---|---|---|---|"]
    elapsed, reached = 0.0, None
    for r in rows:
        elapsed += r["seconds"]
        lines.append(f"| {r['epoch']} | {elapsed / 60:.1f} | {r['learning_rate']:.4g} | "
                     f"{r['loss']:.4f} | {r['val_accuracy']:.4f} |")
        if reached is None and r["val_accuracy"] >= target:
            reached = (r["epoch"], elapsed)
    lines.append("")
    if reached:
        lines.append(f"Test accuracy {target:.2%} first reached after epoch {reached[0]}, "
                     f"{reached[1] / 60:.1f} minutes of epochs.")
    else:
        lines.append(f"Test accuracy {target:.2%} not reached.")
    final = rows[-1]
    lines.append(f"Final epoch {final['epoch']} of {config['options']['epochs']}: test accuracy "
                 f"{final['val_accuracy']:.4f} after {elapsed / 60:.1f} minutes of epochs.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--target", type=float, default=0.91)
    p.add_argument("--out", default=None,
                   help="folder for the .md, made if missing (default: print only)")
    args = p.parse_args(argv)
    text = report(args.run_dir, args.target)
    print(text, end="")
    if args.out:
        name = os.path.basename(os.path.normpath(args.run_dir)) + "_time_to_accuracy.md"
        os.makedirs(args.out, exist_ok=True)
        write_text(os.path.join(args.out, name), text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
