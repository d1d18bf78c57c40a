"""Batch normalization against a memory-bound reference, side by side.

Times (median of repeated eager calls) batch_norm_train, its backward,
batch_norm_infer and its backward on ResNet-20's activation shapes at batch
128, next to ``relu`` (one read and one write of the activation: the floor for
an elementwise pass) and reports each as a multiple of it.  Ideal multiples
from memory traffic: train forward ~2 (x read twice, y written), train
backward ~3.5 (dy and x read twice, dx written), inference ~1.

    python bench/bench_norm.py [--threads N] [--repeats R]
"""
import argparse
import time

import numpy as np

import pyresnet as pr


def median_ms(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=pr.get_num_threads())
    ap.add_argument("--repeats", type=int, default=31)
    args = ap.parse_args()
    pr.set_num_threads(args.threads)
    ops, call = pr.ops, pr.ops.call
    rng = np.random.default_rng(0)
    print(f"threads={args.threads}  (ms, median of {args.repeats}; ratio to relu)")
    for shape in [(128, 32, 32, 16), (128, 16, 16, 32), (128, 8, 8, 64)]:
        c = shape[-1]
        x = pr.Tensor(rng.standard_normal(shape, np.float32))
        dy = pr.Tensor(rng.standard_normal(shape, np.float32))
        gamma, beta = pr.Tensor(np.ones(c, np.float32)), pr.Tensor(np.zeros(c, np.float32))
        _, mean, var = ops.batch_norm_train(x, gamma, beta)
        cases = {
            "relu": lambda: ops.relu(x),
            "train": lambda: ops.batch_norm_train(x, gamma, beta),
            "train_bw": lambda: call("batch_norm_train_backward", dy, x, gamma, mean, var),
            "infer": lambda: ops.batch_norm_infer(x, gamma, beta, mean, var),
            "infer_bw": lambda: call("batch_norm_infer_backward", dy, x, gamma, mean, var),
        }
        t = {k: median_ms(f, args.repeats) for k, f in cases.items()}
        print(str(shape).ljust(18) + "  ".join(
            f"{k} {v:.3f} ({v / t['relu']:.1f}x)" for k, v in t.items()))


if __name__ == "__main__":
    main()
