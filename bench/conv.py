"""Every convolution of ResNet-20 and ResNet-56 (CIFAR, He et al. 2016,
section 4.2: both use the same seven shapes, 3x3 'same' except the 1x1
projection shortcuts) at batch 128, each pass (forward, backprop-input,
weight gradient), for every kernel variant this CPU runs and for PyTorch
channels_last when it is importable: milliseconds, GFLOP/s and percent of
this machine's fp32 FMA peak measured in the same run (bench/fma_peak.py,
best of several tries, taken before, between and after the shapes) for the
variant's ISA: the AVX2 (ymm) peak for avx2_direct, the AVX-512 peak for
the AVX-512 variants, and for the reference (OpenBLAS) and PyTorch the
widest ISA this run allows (AVX2 under PYRESNET_KERNELS=avx2, where
OPENBLAS_CORETYPE=Haswell and ONEDNN_MAX_CPU_ISA=AVX2 hold those two to it
on an AVX-512 machine).

A variant is timed through ``pyresnet._C.run_variant`` (one kernel, no
graph), median of --reps runs after three warm-up runs; the output buffer
is reused by the allocator after the first call, so the time is the
kernel's.  --rounds R repeats the whole sweep R times, the peak measured
between the shapes of every round, and keeps each cell's best round (the
fastest median), as the peak is the best of its tries: on a shared
machine other processes can only slow either down.  --shapes picks a set
(``resnet``, the default; ``airbench``: airbench94's six shapes, Jordan
2024, whose recipe runs them at batch 1024; ``all``) or the shapes whose
names contain one of its comma-separated parts (e.g. ``--shapes s2,stem``;
``regnet``, run with ``--batch 64``: the grouped 3x3 convolutions of
RegNetX002/Y002 on 64x64 inputs, FLOPs counted per group);
--variants keeps only the named kernel variants (e.g. ``avx2_direct``: the
reference im2col + OpenBLAS takes seconds a call on airbench's 256-channel
shapes at batch 1024).  --cpu-time (with --threads 1) times the kernels
and the peak by the thread's CPU time, which a process that takes the
core away does not inflate: the kernels' own efficiency on a busy
machine.
FLOPs of a pass: 2 * N * HO * WO * KH * KW * (C / groups) * O.

--dtype bfloat16 times the passes as a mixed_bfloat16 training step runs
them: x, the kernel and dy in bfloat16, bfloat16 results for the forward
and input-gradient passes, a float32 weight gradient; the variants that take bfloat16 operands
(amx_direct_bf16, amx_bf16, avx512_direct_bf16, avx512_grouped_dp_bf16, avx512_bf16, the
widened _grouped_bf16 ones and the reference im2col_blas on rounded
operands; a variant that refuses a dtype or shape shows '-')
and PyTorch with bfloat16 tensors (what its autocast runs).  Percentages
are of the fp32 FMA peak, except on a CPU with AVX512_BF16, where
avx512_direct_bf16, avx512_grouped_dp_bf16, avx512_bf16 and PyTorch are given as percentages of the
VDPBF16PS peak measured in the same run (bench/fma_peak.py, ``avx512_bf16``:
about twice the fp32 peak).  PyTorch runs in a
separate interpreter (--torch-python, default: this one if it imports
torch, else /work/venv-peers/bin/python) so its threads never share a
process with ours; the two are interleaved shape by shape, ours first.

    python bench/conv.py [--batch 128] [--reps 15] [--rounds 1] [--threads 2] [--cpu-time]
                         [--shapes s2,stem|airbench|all] [--variants avx2_direct]
                         [--dtype bfloat16] [--out bench/results] [--tag avx2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fma_peak import bf16_isas, cpu_model, fma_peak_gflops, isas  # noqa: E402

# name, (H, W, C), (KH, KW, O), stride[, padding[, groups]]; "same" and 1 unless given
RESNET_SHAPES = [
    ("stem 3->16 @32", (32, 32, 3), (3, 3, 16), 1),
    ("16->16 @32", (32, 32, 16), (3, 3, 16), 1),
    ("16->32 @32 s2", (32, 32, 16), (3, 3, 32), 2),
    ("32->32 @16", (16, 16, 32), (3, 3, 32), 1),
    ("32->64 @16 s2", (16, 16, 32), (3, 3, 64), 2),
    ("64->64 @8", (8, 8, 64), (3, 3, 64), 1),
    ("1x1 16->32 s2", (32, 32, 16), (1, 1, 32), 2),
    ("1x1 32->64 s2", (16, 16, 32), (1, 1, 64), 2),
]
# airbench94 (Jordan 2024, arXiv 2404.00498, section 3; pyresnet.applications.airbench94):
# the frozen 2x2 whitening convolution (forward only in training: its kernel is frozen and
# the images take no gradient), then 3x3 "same" convolutions at 31, 15, 7 and 3 pixels
# (each group's second one after a 2x2 max pool), widths 64/256/256, batch 1024.
AIRBENCH_SHAPES = [
    ("ab whiten 3->24 2x2 @32 valid", (32, 32, 3), (2, 2, 24), 1, "valid"),
    ("ab 24->64 @31", (31, 31, 24), (3, 3, 64), 1),
    ("ab 64->64 @15", (15, 15, 64), (3, 3, 64), 1),
    ("ab 64->256 @15", (15, 15, 64), (3, 3, 256), 1),
    ("ab 256->256 @7", (7, 7, 256), (3, 3, 256), 1),
    ("ab 256->256 @3", (3, 3, 256), (3, 3, 256), 1),
]
# the grouped 3x3 convolutions of RegNetX002 / RegNetY002 (group width 8; widths 24, 56,
# 152, 368) on 64x64 inputs (run them with --batch 64 --shapes regnet): name, (H, W, C),
# (KH, KW, O), stride, padding, groups
REGNET_SHAPES = [
    ("regnet 24 g3 @32 s2", (32, 32, 24), (3, 3, 24), 2, "same", 3),
    ("regnet 56 g7 @16 s2", (16, 16, 56), (3, 3, 56), 2, "same", 7),
    ("regnet 152 g19 @8 s2", (8, 8, 152), (3, 3, 152), 2, "same", 19),
    ("regnet 152 g19 @4", (4, 4, 152), (3, 3, 152), 1, "same", 19),
    ("regnet 368 g46 @4 s2", (4, 4, 368), (3, 3, 368), 2, "same", 46),
    ("regnet 368 g46 @2", (2, 2, 368), (3, 3, 368), 1, "same", 46),
    # and their 1x1 convolutions, the larger half of a RegNet step's time: each block's
    # first (width in -> width) and second (width -> width) 1x1
    ("regnet 1x1 32->24 @32", (32, 32, 32), (1, 1, 24), 1),
    ("regnet 1x1 24->24 @16", (16, 16, 24), (1, 1, 24), 1),
    ("regnet 1x1 56->152 @8", (8, 8, 56), (1, 1, 152), 1),
    ("regnet 1x1 152->152 @4", (4, 4, 152), (1, 1, 152), 1),
    ("regnet 1x1 152->368 @4", (4, 4, 152), (1, 1, 368), 1),
    ("regnet 1x1 368->368 @2", (2, 2, 368), (1, 1, 368), 1),
]
SHAPE_SETS = {"resnet": RESNET_SHAPES, "airbench": AIRBENCH_SHAPES, "regnet": REGNET_SHAPES}
SHAPES = RESNET_SHAPES + AIRBENCH_SHAPES + REGNET_SHAPES
PASSES = ("forward", "backprop_input", "backprop_filter")
OPS = {"forward": "conv2d", "backprop_input": "conv2d_backprop_input",
       "backprop_filter": "conv2d_backprop_filter"}

TORCH_WORKER = r"""
import json, statistics, sys, time, torch
batch, h, w, c, kh, kw, o, s, reps, threads, groups = map(int, sys.argv[1:12])
dt = getattr(torch, sys.argv[12])
same = int(sys.argv[13])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
x = torch.randn(batch, c, h, w, generator=g).to(dt).contiguous(memory_format=torch.channels_last)
k = (torch.randn(o, c // groups, kh, kw, generator=g) * 0.1).to(dt).contiguous(
    memory_format=torch.channels_last)
pad = (kh // 2, kw // 2) if same else (0, 0)  # TF "same" for these (odd) windows, or "valid"
y = torch.nn.functional.conv2d(x, k, stride=s, padding=pad, groups=groups)
dy = torch.randn(y.shape, generator=g).to(dt).contiguous(memory_format=torch.channels_last)
def bw(mask):
    return lambda: torch.ops.aten.convolution_backward(dy, x, k, None, [s, s], list(pad), [1, 1],
                                                        False, [0, 0], groups, mask)
fns = {"forward": lambda: torch.nn.functional.conv2d(x, k, stride=s, padding=pad,
                                                     groups=groups),
       "backprop_input": bw([True, False, False]), "backprop_filter": bw([False, True, False])}
out = {}
with torch.no_grad():
    for name, fn in fns.items():
        fn(); fn()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
        out[name] = statistics.median(ts)
print(json.dumps({"torch": torch.__version__, "times": out}))
"""


# the kernel variants' ISAs; any other variant (the reference) and PyTorch: the run's widest
VARIANT_ISA = {"avx2_direct": "avx2", "avx512_direct": "avx512", "amx_direct_bf16": "avx512",
               "amx_bf16": "avx512", "avx512_bf16": "avx512", "avx512_direct_bf16": "avx512",
               "avx512_grouped_dp_bf16": "avx512"}
# with --dtype bfloat16 on an AVX512_BF16 CPU these (and torch's bfloat16 convolutions) are
# measured against the VDPBF16PS peak
BF16_VARIANTS = ("avx512_direct_bf16", "avx512_grouped_dp_bf16", "avx512_bf16",
                 "torch channels_last")


CLOCK = [time.perf_counter]  # --cpu-time: time.process_time


def median_time(fn, reps):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = CLOCK[0]()
        fn()
        times.append(CLOCK[0]() - t0)
    return statistics.median(times)


def cpu_time_peak(threads, tries, isa_name):
    """fma_peak_gflops per second of this process's CPU time rather than of
    wall time (one thread: the time it was not descheduled): each try
    alone, after one untimed call (which compiles the loop), its GFLOP/s
    scaled by wall / CPU seconds; the best try."""
    fma_peak_gflops(threads, tries=1, isa_name=isa_name)
    best = 0.0
    for _ in range(tries):
        w0, c0 = time.perf_counter(), time.process_time()
        g = fma_peak_gflops(threads, tries=1, isa_name=isa_name)
        best = max(best, g * (time.perf_counter() - w0) / (time.process_time() - c0))
    return best


def torch_python(arg):
    if arg:
        return arg
    try:
        import torch  # noqa: F401
        return sys.executable
    except ImportError:
        peers = "/work/venv-peers/bin/python"
        return peers if os.path.exists(peers) else None


def time_torch(python, batch, shape, reps, threads, dtype):
    (h, w, c), (kh, kw, o), s, same, groups = shape
    args = [str(v) for v in (batch, h, w, c, kh, kw, o, s, reps, threads, groups, dtype,
                             int(same))]
    try:
        p = subprocess.run([python, "-c", TORCH_WORKER] + args, capture_output=True, text=True,
                           timeout=600)
        return json.loads(p.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - a peer that fails is reported, not fatal
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=1,
                    help="sweeps over the shapes; each cell keeps its best round")
    ap.add_argument("--shapes", default="resnet",
                    help="'resnet' (ResNet-20/56's, the default), 'regnet' (RegNet-200MF's "
                         "grouped ones; use --batch 64), 'airbench' (airbench94's; "
                         "its recipe's batch is 1024), 'all', or a comma list: the shapes "
                         "whose names contain one of these")
    ap.add_argument("--variants", default="",
                    help="comma list: only these kernel variants (default: all this CPU runs)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread, timed by its CPU time (immune to other processes "
                         "taking the core; torch is not run)")
    ap.add_argument("--torch-python", default=None, help="interpreter with torch ('' to skip)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--out", default=None, help="folder for conv.md and conv.json")
    ap.add_argument("--tag", default="", help="suffix of the output files' names (e.g. avx2)")
    ap.add_argument("--peak-tries", type=int, default=5, help="FMA-peak tries (best of)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="operands of the passes (bfloat16: as a mixed_bfloat16 step)")
    args = ap.parse_args()
    if args.cpu_time:
        if args.threads != 1:
            ap.error("--cpu-time needs --threads 1")
        args.no_torch, CLOCK[0] = True, time.process_time

    import pyresnet as pr
    from pyresnet._loader import _C
    pr.set_num_threads(args.threads)
    tpy = None if args.no_torch else torch_python(args.torch_python)
    all_variants = _C.op_variants("conv2d")
    variants = [v for v, ok in all_variants if ok and (not args.variants or v in
                                                        args.variants.split(","))]
    # (those refusing the dtype drop out below)
    cfg = pr.config.config()
    # the widest ISA this run allows: the variants' features (PYRESNET_KERNELS=avx2 clears AVX-512)
    widest = "avx512" if "avx512f" in cfg["features"] else "avx2"
    # bfloat16 variants against the VDPBF16PS peak where the CPU has it
    bf16_peak = args.dtype == "bfloat16" and bf16_isas() and "avx512_bf16" in cfg["features"]
    isa_of = lambda name: (  # noqa: E731
        "avx512_bf16" if bf16_peak and name in BF16_VARIANTS else VARIANT_ISA.get(name, widest))
    timed = variants + (["torch channels_last"] if tpy else [])  # (torch's peak: see isa_of)
    used = [i for i in isas() + bf16_isas() if i in {isa_of(v) for v in timed} | {widest}]
    peaks = {i: [] for i in used}

    def measure_peaks(tries):
        for i in used:
            peak = cpu_time_peak if args.cpu_time else fma_peak_gflops
            peaks[i].append(peak(args.threads, tries=tries, isa_name=i))

    measure_peaks(args.peak_tries)
    print(f"CPU {cpu_model()}; features {' '.join(cfg['features'])}; {args.threads} threads; "
          f"batch {args.batch}; {args.dtype}; median of {args.reps}; load average "
          f"{os.getloadavg()[0]:.2f}")
    low = (lambda t: pr.ops.cast(t, "bfloat16")) if args.dtype == "bfloat16" else (lambda t: t)
    torch_version = None
    picked = pick_shapes(args.shapes)
    best = {}  # (shape, pass) -> row with each name's best time over the rounds
    for _ in range(args.rounds):
        torch_version = sweep(args, picked, variants, tpy, low, measure_peaks, best) \
            or torch_version
    rows = list(best.values())
    return report(args, rows, variants, torch_version, peaks, isa_of)


def pick_shapes(spec):
    """The shapes of --shapes: a set's name ('resnet', 'airbench', 'regnet', 'all') or
    a comma list of parts of the shapes' names."""
    if spec in SHAPE_SETS:
        return SHAPE_SETS[spec]
    if spec in ("all", ""):
        return SHAPES
    return [sh for sh in SHAPES if any(p and p in sh[0] for p in spec.split(","))]


def sweep(args, shapes, variants, tpy, low, measure_peaks, best):
    """One round over `shapes`: each pass of each variant and torch, the
    peak measured after each shape; keeps each cell's fastest time in
    `best`.  Returns the torch version (None: torch not run)."""
    import pyresnet as pr
    from pyresnet._loader import _C
    torch_version = None
    rng = np.random.default_rng(0)
    for name, (h, w, c), (kh, kw, o), s, *rest in shapes:
        padding, groups = (rest + ["same", 1][len(rest):])[:2]  # defaults: "same", one group
        same = padding == "same"
        attrs = {"groups": groups} if groups > 1 else {}
        x = pr.Tensor(rng.standard_normal((args.batch, h, w, c)).astype(np.float32))
        k = pr.Tensor((rng.standard_normal((kh, kw, c // groups, o)) * 0.1).astype(np.float32))
        ho, wo = (-(-h // s), -(-w // s)) if same else ((h - kh) // s + 1, (w - kw) // s + 1)
        dy = pr.Tensor(rng.standard_normal((args.batch, ho, wo, o)).astype(np.float32))
        gflop = 2.0 * args.batch * ho * wo * kh * kw * (c // groups) * o / 1e9
        x, k, dy = low(x), low(k), low(dy)  # bfloat16 activations, as the step's
        inputs = {"forward": (x, k, {}), "backprop_input": (dy, k, {"shape": x.shape}),
                  "backprop_filter": (x, dy, {"shape": k.shape})}
        shape_rows = []
        for pass_name in PASSES:
            a, b, extra = inputs[pass_name]
            row = {"shape": name, "pass": pass_name, "gflop": gflop, "ms": {}}
            for v in variants:
                def run(v=v):
                    return _C.run_variant(OPS[pass_name], v, a, b, strides=s, same=same,
                                          **extra, **attrs)
                try:
                    row["ms"][v] = median_time(run, args.reps) * 1e3
                except ValueError:  # this variant does not run this shape
                    pass
            shape_rows.append(row)
        # torch after ours: a process that just used both cores slowed the
        # kernel timed right after it
        theirs = time_torch(tpy, args.batch, ((h, w, c), (kh, kw, o), s, same, groups),
                            args.reps, args.threads, args.dtype) if tpy else None
        for row in shape_rows:
            if theirs:
                torch_version = theirs["torch"]
                row["ms"]["torch channels_last"] = theirs["times"][row["pass"]] * 1e3
            kept = best.setdefault((row["shape"], row["pass"]), row)
            for n, t in row["ms"].items():
                kept["ms"][n] = min(t, kept["ms"].get(n, t))
        measure_peaks(min(2, args.peak_tries))
    return torch_version


def report(args, rows, variants, torch_version, peaks, isa_of):
    """Print the table and write --out's files."""
    peak = {i: max(p) for i, p in peaks.items()}
    variants = [v for v in variants if any(v in r["ms"] for r in rows)]
    names = variants + (["torch channels_last"] if torch_version else [])
    kernels_env = " ".join(f"{k}={os.environ[k]}" for k in
                           ("PYRESNET_KERNELS", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE")
                           if os.environ.get(k))
    lines = [f"CPU: {cpu_model()}, {args.threads} threads, batch {args.batch}, {args.dtype}; "
             + "; ".join(f"{i} {'VDPBF16PS' if i == 'avx512_bf16' else 'fp32 FMA'} peak "
                         f"{peak[i]:.0f} GFLOP/s (best of {len(p)} "
                         f"measurements in this run, {min(p):.0f}-{peak[i]:.0f})"
                         for i, p in peaks.items())
             + f"; torch {torch_version or 'not run'}"
             + f"; median of {args.reps} runs, best of {args.rounds} rounds"
             + ("; times and peak in CPU seconds of the one thread" if args.cpu_time else "")
             + (f"; {kernels_env}" if kernels_env else ""),
             "% peak: of the " + ", ".join(f"{isa_of(n)} peak for {n}" for n in names), "",
             "| shape | pass | " + " | ".join(f"{n} ms | GFLOP/s | % peak" for n in names) + " |",
             "|---|---|" + "---|---|---|" * len(names)]
    for r in rows:
        cells = []
        for n in names:
            t = r["ms"].get(n)
            cells += ["-", "-", "-"] if t is None else [
                f"{t:.2f}", f"{r['gflop'] / t * 1e3:.0f}",
                f"{100 * r['gflop'] / t * 1e3 / peak[isa_of(n)]:.0f}%"]
        lines.append(f"| {r['shape']} | {r['pass']} | " + " | ".join(cells) + " |")
    if any(r["shape"].startswith("ab whiten") for r in rows):
        lines += ["", "ab whiten: airbench94's frozen whitening convolution; a training step "
                      "runs its forward pass only (its kernel is frozen and the images take "
                      "no gradient)."]
    if any(r["shape"].startswith("stem") for r in rows):
        lines += ["", "stem backprop_input: no training step runs it (the model's input takes "
                      "no gradient: a compiled ResNet-20 step has 21 conv2d and 21 "
                      "conv2d_backprop_filter but 20 conv2d_backprop_input)."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stem = "conv" if args.dtype == "float32" else f"conv_{args.dtype}"
        stem += f"_{args.tag}" if args.tag else ""
        with open(os.path.join(args.out, stem + ".md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, stem + ".json"), "w") as f:
            json.dump({"cpu": cpu_model(), "peak_gflops": peaks,
                       "peak_isa": {n: isa_of(n) for n in names}, "environment": kernels_env,
                       "threads": args.threads, "dtype": args.dtype, "reps": args.reps,
                       "rounds": args.rounds, "cpu_time": args.cpu_time,
                       "batch": args.batch, "torch": torch_version, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
