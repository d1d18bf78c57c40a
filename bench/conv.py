"""Time conv2d and its two backprops on ResNet-20's conv shapes (CIFAR, He et
al. 2016, section 4.2) at batch 128, side by side with PyTorch's CPU
convolution when torch is importable.

Prints, per shape and pass, the median time over --reps runs and GFLOP/s
(2 * N * HO * WO * KH * KW * C * O flops per pass).  Machines here are
shared and noisy: compare columns within one run, not across runs.

    python bench/conv.py [--batch 128] [--reps 20] [--threads N] [--cpu-time]

--cpu-time measures the process's CPU time instead of wall time: with
--threads 1 that is the kernel's cost even while other jobs share the
cores (with more threads it would also count time spent waiting).
"""
import argparse
import os
import statistics
import time

import numpy as np

import pyresnet as pr

# name, (H, W, C), (KH, KW, O), stride; all padding="same"
SHAPES = [
    ("stem 3->16 @32", (32, 32, 3), (3, 3, 16), 1),
    ("16->16 @32", (32, 32, 16), (3, 3, 16), 1),
    ("16->32 @32 s2", (32, 32, 16), (3, 3, 32), 2),
    ("32->32 @16", (16, 16, 32), (3, 3, 32), 1),
    ("32->64 @16 s2", (16, 16, 32), (3, 3, 64), 2),
    ("64->64 @8", (8, 8, 64), (3, 3, 64), 1),
    ("1x1 16->32 s2", (32, 32, 16), (1, 1, 32), 2),
]


def median_time(fn, reps, clock=time.perf_counter):
    fn()  # warm up (allocator, threads)
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times)


def ours(x, k, stride):
    y = pr.ops.conv2d(x, k, stride, "same")
    dy = pr.Tensor(np.random.default_rng(1).standard_normal(y.shape).astype(np.float32))
    attrs = dict(strides=stride, same=True)
    return {
        "forward": lambda: pr.ops.conv2d(x, k, stride, "same"),
        "backprop_input": lambda: pr.ops.call("conv2d_backprop_input", dy, k, shape=x.shape,
                                              **attrs),
        "backprop_filter": lambda: pr.ops.call("conv2d_backprop_filter", x, dy, shape=k.shape,
                                               **attrs),
    }


def theirs(torch, x, k, stride):
    """torch in channels_last memory format (NHWC in memory, like ours)."""
    xt = torch.from_numpy(x.numpy().transpose(0, 3, 1, 2).copy()).contiguous(
        memory_format=torch.channels_last)
    kt = torch.from_numpy(k.numpy().transpose(3, 2, 0, 1).copy()).contiguous(
        memory_format=torch.channels_last)
    pad = (k.shape[0] // 2, k.shape[1] // 2)  # same output size as TF "same" here
    conv = torch.nn.functional.conv2d
    y = conv(xt, kt, stride=stride, padding=pad)
    dy = torch.randn_like(y)

    def backward(mask):
        return lambda: torch.ops.aten.convolution_backward(
            dy, xt, kt, None, [stride, stride], list(pad), [1, 1], False, [0, 0], 1, mask)

    return {
        "forward": lambda: conv(xt, kt, stride=stride, padding=pad),
        "backprop_input": backward([True, False, False]),
        "backprop_filter": backward([False, True, False]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-torch", action="store_true", help="skip the torch columns")
    ap.add_argument("--cpu-time", action="store_true", help="time CPU, not wall (with --threads 1)")
    args = ap.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.threads:
        pr.set_num_threads(args.threads)
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.set_num_threads(pr.get_num_threads())
        except ImportError:
            pass
    print(f"batch {args.batch}, {pr.get_num_threads()} threads, median of {args.reps}"
          + (" (CPU time)" if args.cpu_time else "")
          + (f", torch {torch.__version__}" if torch else ", torch not installed")
          + f", load average {os.getloadavg()[0]:.2f}")
    head = f"{'shape':16} {'pass':16} {'ours ms':>9} {'GFLOP/s':>8}"
    print(head + (f" {'torch ms':>9} {'GFLOP/s':>8} {'ours/torch':>10}" if torch else ""))
    rng = np.random.default_rng(0)
    totals = {"ours": 0.0, "torch": 0.0}
    for name, (h, w, c), (kh, kw, o), s in SHAPES:
        x = pr.Tensor(rng.standard_normal((args.batch, h, w, c)).astype(np.float32))
        k = pr.Tensor((rng.standard_normal((kh, kw, c, o)) * 0.1).astype(np.float32))
        ho, wo = -(-h // s), -(-w // s)
        gflop = 2.0 * args.batch * ho * wo * kh * kw * c * o / 1e9
        mine = ours(x, k, s)
        other = theirs(torch, x, k, s) if torch else None
        for pass_name, fn in mine.items():
            t = median_time(fn, args.reps, clock)
            totals["ours"] += t
            line = f"{name:16} {pass_name:16} {t * 1e3:9.2f} {gflop / t:8.1f}"
            if other:
                tt = median_time(other[pass_name], args.reps, clock)
                totals["torch"] += tt
                line += f" {tt * 1e3:9.2f} {gflop / tt:8.1f} {t / tt:10.2f}"
            print(line, flush=True)
    line = f"{'total':33} {totals['ours'] * 1e3:9.2f}"
    if torch:
        line += f" {'':8} {totals['torch'] * 1e3:9.2f} {'':8} {totals['ours'] / totals['torch']:10.2f}"
    print(line)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
