"""Data-parallel ResNet-20 on two MPI ranks against one process, and the cost
of the allreduce (pyresnet.distribute, issue 13).

What is measured, all on this machine (one process per core):

  allreduce    ``pyresnet.ops.allreduce(op="mean")`` between 2 ranks
               (``mpiexec -n 2``, MPICH shared memory) on float32 buffers of
               the gradient sizes of ResNet-20 (269,722 weights in 59 tensors,
               1.08 MB) and ResNet-56 (853,018 in 167, 3.41 MB): once as one buffer (what
               a bucketed allreduce sends) and once as the model's gradients
               one tensor at a time (what DataParallel sends); median of
               --reps calls, each rank timing its own calls after a barrier.
  steps        ResNet-20 (pyresnet.applications.resnet_cifar(20)) training
               steps (forward, sparse softmax cross-entropy, backward, SGD
               with momentum 0.9, lr 0.1; the compiled train_step of
               model.fit) at a global batch of --batch CIFAR-10 training
               images (the first --steps batches, fixed order, scaled to
               [0, 1]), each step timed on the wall clock with the loss read
               back:
                 one_process  one process, 2 kernel threads, the whole batch;
                 two_ranks    mpiexec -n 2, 1 thread per rank, half of each
                              batch per rank, gradients averaged
                              (DataParallel), step time of rank 0;
                 two_ranks_no_allreduce
                              the same two processes training a second copy
                              of the model on the same half batches without
                              averaging (steps alternate in blocks of --block
                              with two_ranks, a barrier before each block):
                              the step without communication.
               Rounds interleave the one-process run and the two-rank run
               (round r: one of each, order alternating), so that other
               processes on a shared machine hit both alike; figures are
               medians over all timed steps of all rounds (the first
               --warmup steps of each run are not timed: tracing).
  loss curve   the per-step training loss of one_process and two_ranks over
               the same --steps batches from the same initial weights
               (round 1).  ResNet-20 has batch normalization, computed per
               rank on its half batch, so the curves agree closely, not
               exactly (tests/test_distribute.py checks the exact case
               without batch normalization).

Derived:
  images/s     batch / median step seconds (and / the 10th percentile: the
               steps least disturbed by other processes);
  ratio        two_ranks images/s over one_process images/s;
  allreduce share  (two_ranks - two_ranks_no_allreduce) / two_ranks_no_allreduce;
  images per CPU-second  batch / (CPU seconds of the one process per step), and
               (batch / 2) / (CPU seconds of rank 0 per step): what the
               throughputs would be with every core to ourselves, if threads
               and ranks wasted no CPU time (a rank's busy-polling in MPI and
               idle OpenMP threads count against them).

Command: python bench/distributed.py --out bench/results
(needs the 'distributed' extra: mpi4py and MPICH; CIFAR-10 under
$PYRESNET_DATA).  Writes distributed.json and distributed.md to --out.
"""
import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIZES = {"resnet20": 20, "resnet56": 56}


# ---- workers (run inside the timed processes) -------------------------------------------

def resnet(depth):
    import pyresnet as pr
    pr.utils.set_random_seed(0)
    model = pr.applications.resnet_cifar(depth)
    model.compile(optimizer=pr.optimizers.SGD(0.1, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def worker_allreduce(args):
    import pyresnet as pr
    from mpi4py import MPI
    pr.set_num_threads(1)
    pr.distribute.init()
    comm = MPI.COMM_WORLD
    cases = {}
    for name, depth in SIZES.items():
        shapes = [tuple(w.shape) for w in resnet(depth).trainable_weights]
        n = sum(int(np.prod(s)) for s in shapes)
        cases[f"{name} one buffer"] = [pr.Tensor(np.ones(n, np.float32))]
        cases[f"{name} per tensor"] = [pr.Tensor(np.ones(s, np.float32)) for s in shapes]
    times = {k: [] for k in cases}
    for _ in range(args.reps):  # interleaved: every case once per repetition
        for key, tensors in cases.items():
            comm.Barrier()
            t0 = time.perf_counter()
            for t in tensors:
                pr.ops.allreduce(t, op="mean")
            times[key].append(time.perf_counter() - t0)
    result = {k: {"bytes": 4 * sum(t.size for t in cases[k]), "messages": len(cases[k]),
                  "median_us": 1e6 * statistics.median(v)} for k, v in times.items()}
    if comm.Get_rank() == 0:
        pathlib.Path(args.result).write_text(json.dumps(result))


def cifar_batches(batch, steps):
    import pyresnet as pr
    (x, y), _ = pr.datasets.cifar10.load_data()
    n = batch * steps
    return x[:n].astype(np.float32) / 255.0, y[:n].astype(np.int32)


def worker_steps(args):
    import pyresnet as pr
    x, y = cifar_batches(args.batch, args.steps)
    batches = [(x[i:i + args.batch], y[i:i + args.batch])
               for i in range(0, len(x), args.batch)]
    times = {}
    if args.worker == "one_process":
        pr.set_num_threads(2)
        model = resnet(20)
        step = model.make_train_function()
        runs = [("one_process", model, step, lambda b: b)]
        barrier = lambda: None  # noqa: E731
    else:
        from mpi4py import MPI
        pr.set_num_threads(1)
        strategy = pr.distribute.DataParallel()
        synced, alone = resnet(20), resnet(20)
        with strategy.scope():
            step = synced.make_train_function()
        pr.distribute.broadcast_variables(synced.weights)
        runs = [("two_ranks", synced, step, strategy.shard),
                ("two_ranks_no_allreduce", alone, alone.make_train_function(), strategy.shard)]
        barrier = MPI.COMM_WORLD.Barrier
    losses = {name: [] for name, *_ in runs}
    cpu = {name: [] for name, *_ in runs}  # CPU seconds of this process (all its threads)
    for name, *_ in runs:
        times[name] = []
    for start in range(0, len(batches), args.block):
        for name, model, step, shard in runs:
            barrier()
            for i in range(start, min(start + args.block, len(batches))):
                xb, yb = batches[i]
                for metric in model.metrics:  # the step reports this batch's loss alone
                    metric.reset_state()
                t0, c0 = time.perf_counter(), time.process_time()
                loss = float(step((pr.Tensor(np.ascontiguousarray(shard(xb))),
                                   pr.Tensor(np.ascontiguousarray(shard(yb)))))["loss"])
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                losses[name].append(loss)
                if i >= args.warmup:
                    times[name].append(dt)
                    cpu[name].append(dc)
    if args.worker == "one_process":  # the compute of a ResNet-56 step, for the cost model
        model = resnet(56)
        step = model.make_train_function()
        xb, yb = pr.Tensor(batches[0][0]), pr.Tensor(batches[0][1])
        times["one_process_resnet56"] = []
        for i in range(args.warmup + args.steps56):
            t0 = time.perf_counter()
            float(step((xb, yb))["loss"])
            if i >= args.warmup:
                times["one_process_resnet56"].append(time.perf_counter() - t0)
    if pr.distribute.rank() == 0:
        pathlib.Path(args.result).write_text(json.dumps({"times": times, "losses": losses,
                                                         "cpu": cpu}))


# ---- the driver -------------------------------------------------------------------------------

def mpiexec():
    here = pathlib.Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        sys.exit("mpiexec not found: pip install '.[distributed]'")
    return found


def launch(args, worker, ranks, extra=()):
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", worker, "--result", result,
               "--batch", str(args.batch), "--steps", str(args.steps), "--block", str(args.block),
               "--warmup", str(args.warmup), "--reps", str(args.reps),
               "--steps56", str(args.steps56), *extra]
        if ranks > 1:
            cmd = [mpiexec(), "-n", str(ranks), *cmd]
        env = dict(os.environ, OMP_NUM_THREADS="1" if ranks > 1 else "2")
        subprocess.run(cmd, check=True, env=env, timeout=args.timeout,
                       cwd=tempfile.gettempdir())
        return json.loads(pathlib.Path(result).read_text())


def ring_seconds(nbytes, machines, gbit, latency_s, messages=1):
    """Ring allreduce (Patarasuk & Yuan 2009; Horovod, NCCL): 2(N-1) steps,
    each sending bytes/N; messages: separate allreduces (one per tensor)."""
    if machines == 1:
        return 0.0
    bandwidth = gbit * 1e9 / 8
    return 2 * (machines - 1) / machines * nbytes / bandwidth \
        + messages * 2 * (machines - 1) * latency_s


def cost_model(step_s, nbytes, messages, latency_s):
    rows = []
    for machines in (2, 4, 8, 16, 32, 64):
        row = {"machines": machines}
        for gbit in (10, 25):
            for label, count in (("bucketed", 1), ("per tensor", messages)):
                t = ring_seconds(nbytes, machines, gbit, latency_s, count)
                row[f"{gbit}G {label} ms"] = 1e3 * t
                row[f"{gbit}G {label} efficiency"] = step_s / (step_s + t)
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__)
    ap.add_argument("--batch", type=int, default=128, help="global batch (default 128)")
    ap.add_argument("--steps", type=int, default=50, help="steps per run (default 50)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed first steps (default 3)")
    ap.add_argument("--block", type=int, default=5,
                    help="steps per block when two_ranks alternates (default 5)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--reps", type=int, default=200, help="allreduce calls per case")
    ap.add_argument("--steps56", type=int, default=5,
                    help="timed ResNet-56 steps per one-process run (default 5)")
    ap.add_argument("--latency-us", type=float, default=25.0,
                    help="per-message latency of the cost model (default 25 us: TCP over "
                         "10/25 GbE)")
    ap.add_argument("--quiet-step-s", type=float, default=0.180,
                    help="ResNet-20 step seconds (batch 128, 2 threads) on a quiet machine, for "
                         "a second cost model (default 0.180: bench/results/"
                         "peers_resnet20_b128.md, pyresnet compiled); ResNet-56 = 3x (FLOPs)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    ap.add_argument("--out", metavar="DIR", help="write distributed.json/.md here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker == "allreduce":
        return worker_allreduce(args)
    if args.worker:
        return worker_steps(args)
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")

    allreduce, runs = [], []
    for r in range(args.rounds):
        allreduce.append(launch(args, "allreduce", 2))
        order = [("one_process", 1), ("two_ranks", 2)]
        for worker, ranks in (order if r % 2 == 0 else order[::-1]):
            runs.append((worker, launch(args, worker, ranks)))
        print(f"round {r + 1}/{args.rounds} done", flush=True)

    ar = {k: {"bytes": allreduce[0][k]["bytes"], "messages": allreduce[0][k]["messages"],
              "median_us": statistics.median(a[k]["median_us"] for a in allreduce)}
          for k in allreduce[0]}
    times, cpu = {}, {}
    for _, res in runs:
        for name, ts in res["times"].items():
            times.setdefault(name, []).extend(ts)
        for name, ts in res["cpu"].items():
            cpu.setdefault(name, []).extend(ts)
    # images per CPU-second: the one process's CPU time covers the whole batch,
    # a rank's covers its half
    per_cpu = {"one_process": args.batch / statistics.median(cpu["one_process"])}
    for name in ("two_ranks", "two_ranks_no_allreduce"):
        per_cpu[name] = args.batch / 2 / statistics.median(cpu[name])
    step = {k: statistics.median(v) for k, v in times.items()}
    fast = {k: float(np.percentile(v, 10)) for k, v in times.items()}
    ips = {k: args.batch / v for k, v in step.items()}
    curves = {}
    for _, res in runs:
        for name, ls in res["losses"].items():
            curves.setdefault(name, ls)
    diff = float(np.max(np.abs(np.subtract(curves["two_ranks"], curves["one_process"]))))
    model = cost_model(step["one_process"], ar["resnet20 one buffer"]["bytes"],
                       ar["resnet20 per tensor"]["messages"], args.latency_us * 1e-6)
    result = {
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "shared": "other processes were running (a shared machine)"},
        "args": {k: v for k, v in vars(args).items() if k not in ("worker", "result", "out")},
        "allreduce": ar, "step_s": step, "images_per_s": ips, "step_s_p10": fast,
        "ratio_two_ranks_vs_one_process": ips["two_ranks"] / ips["one_process"],
        "ratio_p10": fast["one_process"] / fast["two_ranks"],
        "images_per_cpu_s": per_cpu,
        "ratio_per_cpu_s": per_cpu["two_ranks"] / per_cpu["one_process"],
        "allreduce_share": step["two_ranks"] / step["two_ranks_no_allreduce"] - 1,
        "loss_curves": curves, "loss_max_abs_diff": diff,
        "cost_model_resnet20": model,
        "cost_model_resnet56": cost_model(step["one_process_resnet56"],
                                          ar["resnet56 one buffer"]["bytes"],
                                          ar["resnet56 per tensor"]["messages"],
                                          args.latency_us * 1e-6),
        # the same against a quiet machine's compute: ResNet-56's convolutions
        # have (56 - 2) / (20 - 2) = 3x ResNet-20's FLOPs
        "cost_model_quiet_resnet20": cost_model(args.quiet_step_s,
                                                ar["resnet20 one buffer"]["bytes"],
                                                ar["resnet20 per tensor"]["messages"],
                                                args.latency_us * 1e-6),
        "cost_model_quiet_resnet56": cost_model(3 * args.quiet_step_s,
                                                ar["resnet56 one buffer"]["bytes"],
                                                ar["resnet56 per tensor"]["messages"],
                                                args.latency_us * 1e-6),
    }
    md = report(result, args)
    print(md)
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "distributed.json").write_text(json.dumps(result, indent=1) + "\n")
        (out / "distributed.md").write_text(md)


def report(res, args):
    lines = [f"# Data-parallel ResNet-20 on 2 MPI ranks vs one process "
             f"(global batch {args.batch}, {args.rounds} rounds x {args.steps} steps)", "",
             f"Machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, shared with "
             "other processes while measuring (medians of interleaved runs).", "",
             "## Allreduce between 2 ranks (MPICH, shared memory)", "",
             "| gradients | bytes | messages | median time |", "|---|---|---|---|"]
    for k, v in res["allreduce"].items():
        lines.append(f"| {k} | {v['bytes'] / 1e6:.2f} MB | {v['messages']} | "
                     f"{v['median_us'] / 1e3:.3f} ms |")
    lines += ["", "## Training steps", "",
              "| run | s/step (median) | images/s | s/step (10th percentile) | images/s |",
              "|---|---|---|---|---|"]
    for k in ("one_process", "two_ranks", "two_ranks_no_allreduce", "one_process_resnet56"):
        lines.append(f"| {k} | {res['step_s'][k]:.4f} | {res['images_per_s'][k]:.0f} | "
                     f"{res['step_s_p10'][k]:.4f} | {args.batch / res['step_s_p10'][k]:.0f} |")
    lines += ["", f"two_ranks / one_process images/s: "
              f"{res['ratio_two_ranks_vs_one_process']:.3f}x (medians), {res['ratio_p10']:.3f}x "
              "(10th percentiles, the steps least disturbed by other processes); the allreduce "
              "adds "
              f"{100 * res['allreduce_share']:.1f}% to a two-rank step.  Images per CPU-second "
              f"(less sensitive to the neighbours' load): one process "
              f"{res['images_per_cpu_s']['one_process']:.0f}, a rank "
              f"{res['images_per_cpu_s']['two_ranks']:.0f} "
              f"({res['ratio_per_cpu_s']:.3f}x).  Loss curves over "
              f"{args.steps} steps differ by at most {res['loss_max_abs_diff']:.2e} "
              "(batch-norm statistics per rank).", "",
              "## Ring-allreduce cost model", "",
              f"T(N) = 2(N-1)/N x bytes / bandwidth + m x 2(N-1) x latency (latency "
              f"{args.latency_us:g} us per message step; m = 1 bucketed, m = tensors per "
              "tensor); efficiency = compute / (compute + T), no overlap.  Compute per step: "
              f"ResNet-20 {res['step_s']['one_process']:.3f} s measured (one process, 2 threads, "
              f"batch {args.batch} per machine); ResNet-56 "
              f"{res['step_s']['one_process_resnet56']:.3f} s measured likewise.", ""]
    tables = [("resnet20", "ResNet-20, compute measured in this run"),
              ("resnet56", "ResNet-56, compute measured in this run"),
              ("quiet_resnet20", f"ResNet-20, quiet-machine compute {args.quiet_step_s:.3f} s"),
              ("quiet_resnet56", f"ResNet-56, quiet-machine compute "
                                 f"{3 * args.quiet_step_s:.3f} s (3x ResNet-20's FLOPs)")]
    for name, title in tables:
        rows = res[f"cost_model_{name}"]
        lines += [f"### {title}", "",
                  "| machines | 10G bucketed | 10G per tensor | 25G bucketed | 25G per tensor |",
                  "|---|---|---|---|---|"]
        for row in rows:
            cells = [f"{row[f'{g} {l} ms']:.2f} ms ({100 * row[f'{g} {l} efficiency']:.0f}%)"
                     for g in ("10G", "25G") for l in ("bucketed", "per tensor")]
            lines.append(f"| {row['machines']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"Command: `python bench/distributed.py --rounds {args.rounds} --steps "
                 f"{args.steps} --out bench/results`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
