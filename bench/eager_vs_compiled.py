"""Eager vs compiled vs jit_compile training steps, and whole compiled training
loops, over a ladder of model sizes: where does compiling pay, and why?

The ladder (all on random data of MNIST's or CIFAR's shape), smallest first:
  * MLP 784-128-10 and MLP 784-512-512-10 (input 784 floats),
  * a small CNN (conv16-pool-conv32-pool-dense10),
  * ResNet-8, -20, -32, -56 and -110 for 32x32x3 (He et al. 2016, section
    4.2: 6n+2 layers, stages of 16/32/64 filters),
at batch sizes 32 and 128 (``--models``/``--batches`` pick a subset).  One
training step = forward, loss (SparseCategoricalCrossentropy from logits),
backward and an SGD-momentum update.  For each model/batch the modes run
side by side in this one process, interleaved (one call of each per round,
so a change of load hits every mode alike); each reports the median of
``--steps`` timed rounds after ``--warmup`` untimed ones (``--big-steps``
for ResNet-56/110):

  * eager: ``model.train_step`` called from Python,
  * compiled / jit: the step compiled (``pyresnet.compile``, without and with
    ``jit_compile``), called from Python on one batch,
  * loop: a compiled function whose ``for x, y in dataset:`` runs
    ``--loop-steps`` training steps in one call (one loop node: the batches
    come from the C input pipeline, no return to Python between steps);
    its time is per step.

Per point it also records the compiled graph's node count (``ops``,
``ConcreteFunction.nodes``) and the bytes of its intermediates, and fits
the overhead model of eager execution (:func:`fit_overhead`: eager time =
kernel time + ops x per-op overhead + bytes x per-byte cost, the kernel
time being the compiled step's), whose fitted microseconds per op explain
the speed-ups; :func:`conclusion` states the answer in two sentences with
the numbers of the run, and :func:`plot` draws speed-up against FLOPs per
step with a trend per mode (notebooks/02_eager_vs_compiled.ipynb imports
both and reads the JSON).

Then the epoch comparison (``--epoch-rounds``, 0 skips it), the
contenders interleaved round by round:

  * MLP 784-128-10, batch 32, one epoch of ``--epoch-images`` (60,000)
    random images in MNIST's shape from a shuffled Dataset: eager steps,
    the compiled step called from Python for each batch, and the compiled
    loop running the whole epoch in one call;
  * ResNet-20, batch 128, ``--resnet-steps`` steps per round from a
    shuffled Dataset with the CIFAR augmentation (pad 4 + random crop +
    flip, made by the C pipeline): the compiled step called from Python
    against the compiled loop (the augmentation inside the loop).

When PyTorch is installed the same ladder runs in PyTorch (eager vs
torch.compile), and when TensorFlow is, in TF (eager vs tf.function vs
jit_compile=True); ``--no-others`` skips them.

Output in ``--out`` (default bench/results): eager_vs_compiled[_TAG].md
(the tables and the conclusion), .json (every round's times, the CPU
model, the load average before and after, the command) and .png (the
plot; needs matplotlib, the ``bench`` extra).  Machines here are shared
and noisy: compare ratios from one run, not absolute times across runs.

Usage:
  python bench/eager_vs_compiled.py --quick --out /tmp/q      # a check, < 1 min
  python bench/eager_vs_compiled.py --no-others --tag idle    # the study (docs/compile.md)
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

import pyresnet as pr
from pyresnet import layers

MODES = ("eager", "compiled", "jit", "loop")


# ---- pyresnet models ---------------------------------------------------------------

def resnet(depth, classes=10):
    """CIFAR ResNet-depth (depth = 6n + 2), He et al. 2016 section 4.2."""
    n = (depth - 2) // 6
    inputs = layers.Input((32, 32, 3))
    x = layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU()(x)
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(n):
            strides = 2 if stage > 0 and block == 0 else 1
            x = layers.ResidualBlock(filters, strides=strides)(x)
    x = layers.GlobalAveragePooling2D()(x)
    return pr.Model(inputs, layers.Dense(classes)(x), name=f"resnet{depth}")


def mlp(hidden=(128,)):
    """MLP 784-<hidden...>-10 (ReLU hidden layers, logits out)."""
    inputs = layers.Input((784,))
    x = inputs
    for width in hidden:
        x = layers.Dense(width, activation="relu")(x)
    return pr.Model(inputs, layers.Dense(10)(x), name="mlp")


def small_cnn():
    inputs = layers.Input((32, 32, 3))
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    return pr.Model(inputs, layers.Dense(10)(x), name="small_cnn")


# The ladder, smallest first: (name, builder, input shape).
LADDER = [("MLP 784-128-10", mlp, (784,)),
          ("MLP 784-512-512-10", lambda: mlp((512, 512)), (784,)),
          ("small CNN", small_cnn, (32, 32, 3))] + [
    (f"ResNet-{d}", lambda d=d: resnet(d), (32, 32, 3)) for d in (8, 20, 32, 56, 110)]
# --quick: the four smallest models (0.01-10 GFLOP per step), few rounds.
QUICK_MODELS = [m[0] for m in LADDER[:4]]


def batch(shape, n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n,) + shape).astype(np.float32),
            rng.integers(0, 10, n).astype(np.int32))


def median_times(fns, steps, warmup=2, rounds=None):
    """Median seconds per call of each function in ``fns`` (dict), timed
    round-robin (one call of each per round) so that load changes on a shared
    machine hit every mode alike.  When ``rounds`` is a dict, every round's
    seconds are appended to ``rounds[mode]``."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {m: [] for m in fns}
    for _ in range(steps):
        for m, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[m].append(time.perf_counter() - t0)
    if rounds is not None:
        for m, t in times.items():
            rounds.setdefault(m, []).extend(t)
    return {m: statistics.median(t) for m, t in times.items()}


def compiled_loop(step, data):
    """One call runs ``step`` on every batch of ``data`` (a loop node)."""
    @pr.compile
    def loop(data):
        for xb, yb in data:
            step(xb, yb)
    return lambda: loop(data)


def bench_pyresnet(build, shape, n, steps, loop_steps, warmup=2):
    """One model at batch ``n``: dict of the median step seconds per mode
    (``eager``, ``compiled``, ``jit``, ``loop``; the loop's per step),
    ``rounds`` (every round's seconds per mode, the loop's per step),
    ``params``, ``flops`` (of one step), ``ops`` (nodes of the compiled
    step's graph, ``ConcreteFunction.nodes``: the op calls eager execution
    makes one by one), ``jit_ops`` (nodes left after jit_compile's fusion)
    and ``intermediate_bytes`` (the compiled step's ``naive_bytes``: every
    intermediate value in its own buffer, as eager execution allocates
    them)."""
    model = build()
    model.compile(optimizer=pr.optimizers.SGD(0.01, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = batch(shape, n)
    x, y = pr.Tensor(x), pr.Tensor(y)
    compiled = pr.compile(model.train_step)
    jit = pr.compile(model.train_step, jit_compile=True)
    fns = {m: (lambda f=f: f((x, y))) for m, f in (("eager", model.train_step),
                                                   ("compiled", compiled), ("jit", jit))}
    xs, ys = batch(shape, n * loop_steps, seed=1)
    fns["loop"] = compiled_loop(lambda xb, yb: model.train_step((xb, yb)),
                                pr.data.Dataset.from_tensor_slices((xs, ys)).batch(n))
    rounds = {}
    result = median_times(fns, steps, warmup, rounds)
    result["loop"] /= loop_steps
    rounds["loop"] = [t / loop_steps for t in rounds["loop"]]
    result["rounds"] = rounds
    result["params"] = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    concrete = compiled.get_concrete_function((x, y))
    result["flops"] = concrete.flops
    result["ops"] = len(concrete.nodes)
    result["jit_ops"] = len(jit.get_concrete_function((x, y)).nodes)
    result["intermediate_bytes"] = concrete.memory["naive_bytes"]
    return result


# ---- other frameworks (when installed) ---------------------------------------------

def bench_torch(name, shape, n, steps):
    import torch
    import torch.nn as nn

    torch.set_num_threads(pr.get_num_threads())

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.short = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                        nn.BatchNorm2d(cout))
                          if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.short(x))

    def make():
        if name.startswith("MLP"):  # "MLP 784-512-512-10"
            widths = [int(w) for w in name.split()[1].split("-")]
            mods = [nn.Flatten()]
            for a, b in zip(widths[:-1], widths[1:]):
                mods += [nn.Linear(a, b), nn.ReLU()]
            return nn.Sequential(*mods[:-1])
        if name == "small CNN":
            return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Flatten(), nn.Linear(32 * 8 * 8, 10))
        depth = int(name.split("-")[1])
        k = (depth - 2) // 6
        mods, cin = [nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
        for stage, cout in enumerate((16, 32, 64)):
            for b in range(k):
                mods.append(Block(cin, cout, 2 if stage and not b else 1))
                cin = cout
        mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
        return nn.Sequential(*mods)

    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x, y = batch(shape, n)
    x = torch.from_numpy(x if len(shape) == 1 else x.transpose(0, 3, 1, 2).copy())
    y = torch.from_numpy(y.astype(np.int64))

    def step(fwd):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()

    fns = {"eager": lambda: step(model)}
    try:
        compiled = torch.compile(model)
        step(compiled)  # compile now, so that a failure falls back to eager only
        fns["compiled"] = lambda: step(compiled)
    except Exception as e:  # noqa: BLE001  (no C++ toolchain for inductor, ...)
        print(f"  torch.compile failed for {name}: {type(e).__name__}: {e}"[:200], file=sys.stderr)
    return median_times(fns, steps)


def bench_tf(name, shape, n, steps):
    import tensorflow as tf
    from tensorflow import keras

    def make():
        if name.startswith("MLP"):  # "MLP 784-512-512-10"
            widths = [int(w) for w in name.split()[1].split("-")]
            return keras.Sequential([keras.Input((784,))]
                                    + [keras.layers.Dense(w, "relu") for w in widths[1:-1]]
                                    + [keras.layers.Dense(widths[-1])])
        if name == "small CNN":
            return keras.Sequential([keras.Input(shape), keras.layers.Conv2D(16, 3, padding="same",
                                                                            activation="relu"),
                                     keras.layers.MaxPooling2D(),
                                     keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
                                     keras.layers.MaxPooling2D(), keras.layers.Flatten(),
                                     keras.layers.Dense(10)])
        depth = int(name.split("-")[1])
        k = (depth - 2) // 6
        inp = keras.Input(shape)
        x = keras.layers.ReLU()(keras.layers.BatchNormalization()(
            keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inp)))
        for stage, cout in enumerate((16, 32, 64)):
            for b in range(k):
                s = 2 if stage and not b else 1
                y = keras.layers.Conv2D(cout, 3, s, padding="same", use_bias=False)(x)
                y = keras.layers.ReLU()(keras.layers.BatchNormalization()(y))
                y = keras.layers.BatchNormalization()(
                    keras.layers.Conv2D(cout, 3, padding="same", use_bias=False)(y))
                if s != 1 or x.shape[-1] != cout:
                    x = keras.layers.BatchNormalization()(
                        keras.layers.Conv2D(cout, 1, s, use_bias=False)(x))
                x = keras.layers.ReLU()(keras.layers.Add()([x, y]))
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(inp, keras.layers.Dense(10)(x))

    model = make()
    opt = keras.optimizers.SGD(0.01, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = batch(shape, n)
    x, y = tf.constant(x), tf.constant(y)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    fns = {"eager": step, "compiled": tf.function(step),
           "jit": tf.function(step, jit_compile=True)}
    return median_times({m: (lambda f=f: f(x, y)) for m, f in fns.items()}, steps)


# ---- report -------------------------------------------------------------------------

def fmt_ms(s):
    return "-" if s is None else f"{s * 1e3:.2f}"


def table(rows):
    head = ("| model | batch | params | ops | GFLOP/step | eager ms | compiled ms | jit ms | "
            "loop ms | compiled speedup | jit speedup | loop speedup | loop / compiled |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['params']:,} | {r['ops']} | "
                     f"{r['flops'] / 1e9:.3f} | "
                     f"{fmt_ms(r['eager'])} | {fmt_ms(r['compiled'])} | {fmt_ms(r['jit'])} | "
                     f"{fmt_ms(r['loop'])} | {r['eager'] / r['compiled']:.2f}x | "
                     f"{r['eager'] / r['jit']:.2f}x | {r['eager'] / r['loop']:.2f}x | "
                     f"{r['compiled'] / r['loop']:.2f}x |")
    return "\n".join(lines)


# ---- whole epochs: the compiled loop against steps called from Python ----------------

def interleaved(fns, rounds):
    """Median seconds per call of each function, one call of each per round
    (after one warm-up call each), and every round's times."""
    for f in fns.values():
        f()
    times = {m: [] for m in fns}
    for _ in range(rounds):
        for m, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[m].append(time.perf_counter() - t0)
    return {m: statistics.median(t) for m, t in times.items()}, times


def bench_epochs(images, rounds, resnet_steps):
    """The issue-11 comparisons (see the module docstring).  Returns rows
    ``{"case", "steps", "mode", "seconds", "ms_per_step"}``."""
    rows = []
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)

    def trainer(model):
        optimizer = pr.optimizers.SGD(0.01, momentum=0.9)

        def step(xb, yb):
            with pr.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_weights)
            optimizer.apply_gradients(zip(grads, model.trainable_weights))
            return loss
        return step

    # MLP 784-128-10, batch 32, one epoch.
    x, y = batch((784,), images, seed=2)
    data = pr.data.Dataset.from_tensor_slices((x, y)).shuffle(images, seed=3).batch(32)
    step = trainer(mlp())
    compiled = pr.compile(step, reduce_retracing=True)

    def eager_epoch():
        for xb, yb in data:
            step(xb, yb)

    def stepwise_epoch():
        for xb, yb in data:
            compiled(xb, yb)

    fns = {"eager": eager_epoch, "compiled step from Python": stepwise_epoch,
           "compiled loop": compiled_loop(step, data)}
    medians, _ = interleaved(fns, rounds)
    for mode, sec in medians.items():
        rows.append({"case": f"MLP 784-128-10, batch 32, one epoch of {images:,} images",
                     "steps": len(data), "mode": mode, "seconds": sec,
                     "ms_per_step": sec / len(data) * 1e3})
    # ResNet-20, batch 128, CIFAR augmentation in the pipeline.
    n = 128 * resnet_steps
    x, y = batch((32, 32, 3), n, seed=4)
    data = (pr.data.Dataset.from_tensor_slices((x, y)).shuffle(n, seed=5).batch(128)
            .map(layers.RandomCrop(32, 32, padding=4, seed=6)).map(layers.RandomFlip(seed=7)))
    step = trainer(resnet(20))
    compiled = pr.compile(step, reduce_retracing=True)

    def stepwise():
        for xb, yb in data:
            compiled(xb, yb)

    medians, _ = interleaved({"compiled step from Python": stepwise,
                              "compiled loop": compiled_loop(step, data)}, rounds)
    for mode, sec in medians.items():
        rows.append({"case": f"ResNet-20, batch 128, {resnet_steps} steps with augmentation",
                     "steps": len(data), "mode": mode, "seconds": sec,
                     "ms_per_step": sec / len(data) * 1e3})
    return rows


def epoch_table(rows, rounds):
    lines = [f"\n\nWhole epochs (median of {rounds} interleaved rounds):\n",
             "| case | mode | seconds | ms/step | speedup over the first mode |",
             "|---|---|---|---|---|"]
    first = {}
    for r in rows:
        base = first.setdefault(r["case"], r["seconds"])
        lines.append(f"| {r['case']} | {r['mode']} | {r['seconds']:.3f} | "
                     f"{r['ms_per_step']:.3f} | {base / r['seconds']:.2f}x |")
    return "\n".join(lines)


def other_table(rows, framework, modes):
    lines = [f"| model | batch | " + " | ".join(f"{m} ms" for m in modes) + " | "
             + " | ".join(f"{m} speedup" for m in modes[1:]) + " |",
             "|" + "---|" * (2 + 2 * len(modes) - 1)]
    for r in rows:
        cells = [fmt_ms(r.get(m)) for m in modes]
        ratios = [f"{r['eager'] / r[m]:.2f}x" if r.get(m) else "-" for m in modes[1:]]
        lines.append(f"| {r['model']} | {r['batch']} | " + " | ".join(cells + ratios) + " |")
    return f"\n\n{framework}:\n\n" + "\n".join(lines)


# ---- analysis: the per-op overhead model, the trend, the plot, the conclusion --------

MODE_LABELS = {"compiled": "compiled", "jit": "jit_compile", "loop": "compiled loop"}


def cpu_info():
    """dict: ``model`` (the CPU's model name, /proc/cpuinfo), ``lscpu``
    (lscpu's "Model name", "CPU family" and "Model" lines joined, "" without
    lscpu), ``isas`` (FMA ISAs, widest first), ``threads`` (pyresnet's)."""
    import subprocess
    from fma_peak import cpu_model, isas
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    keep = [" ".join(line.split()) for line in out.splitlines()
            if line.split(":")[0].strip() in ("Model name", "CPU family", "Model")]
    return {"model": cpu_model(), "lscpu": "; ".join(keep), "isas": isas(),
            "threads": pr.get_num_threads()}


def cpu_name(cpu):
    """One line naming the CPU of a result's ``cpu`` dict, e.g. "AMD EPYC
    (CPU family: 25; Model: 1), AVX2, 2 threads"."""
    fam = "; ".join(p for p in cpu.get("lscpu", "").split("; ") if not p.startswith("Model name"))
    isa = "/".join(i.upper() for i in cpu.get("isas", [])[:1]) or "no AVX2"
    return (f"{cpu.get('model', 'unknown CPU')}" + (f" ({fam})" if fam else "")
            + f", {isa}, {cpu.get('threads', '?')} threads")


def fit_overhead(rows, terms=("ops", "intermediate_bytes")):
    """Fit the overhead model of eager execution to the ladder's rows:

        eager time = kernel time + ops * per_op [+ intermediate_bytes * per_byte]

    with the kernel time taken as the compiled step's time (the same kernels
    without the per-op work: the Python call, argument checks, the tape
    record, a fresh output buffer), ``ops`` the compiled graph's node count
    and ``intermediate_bytes`` what eager execution allocates fresh each
    step.  Least squares on the relative error (each row's equation divided
    by its eager time, so an MLP step of 0.5 ms counts as much as a ResNet
    step of a second); coefficients are not constrained.

    Returns a dict: ``terms``, ``coef`` (seconds per unit of each term),
    ``per_op_us`` (the per-op coefficient in microseconds),
    ``per_gb_ms`` (the per-byte one in milliseconds per GB, or None),
    ``predicted`` (eager seconds per row), ``median_abs_error`` and
    ``max_abs_error`` (of the predicted eager time, fractions), ``share``
    (per row, the fraction of the eager time the fitted overhead accounts
    for, and ``op_share`` the per-op term's)."""
    eager = np.array([r["eager"] for r in rows], dtype=np.float64)
    kernel = np.array([r["compiled"] for r in rows], dtype=np.float64)
    a = np.array([[float(r[t]) for t in terms] for r in rows], dtype=np.float64)
    coef, *_ = np.linalg.lstsq(a / eager[:, None], (eager - kernel) / eager, rcond=None)
    overhead = a @ coef
    predicted = kernel + overhead
    err = np.abs(predicted - eager) / eager
    return {"terms": list(terms), "coef": coef.tolist(), "per_op_us": coef[0] * 1e6,
            "per_gb_ms": coef[1] * 1e12 if len(terms) > 1 else None,
            "predicted": predicted.tolist(), "median_abs_error": float(np.median(err)),
            "max_abs_error": float(err.max()), "share": (overhead / eager).tolist(),
            "op_share": (a[:, 0] * coef[0] / eager).tolist()}


def trend(rows, mode, fit=None):
    """The trend of one mode's speed-up against FLOPs: the overhead model
    (:func:`fit_overhead`, or ``fit``) evaluated along the ladder,

        speed-up(F) = (t_compiled(F) + ops(F) * per_op + bytes(F) * per_byte) / t_mode(F),

    where the compiled step's time, the op count, the intermediate bytes and
    the mode's time are each a least-squares power law of the FLOPs per step
    F over every row (a straight line in log-log, where all four lie close
    to one).  So the line is the explanation's prediction, not a curve
    chosen to pass through the points: where the points leave it, the model
    misses.  Returns ``(gflop, speedup)`` arrays of 100 points over the
    rows' range of FLOPs."""
    fit = fit or fit_overhead(rows)
    logf = np.log([r["flops"] for r in rows])
    xs = np.linspace(logf.min(), logf.max(), 100)

    def power_law(key):
        return np.exp(np.polyval(np.polyfit(logf, np.log([float(r[key]) for r in rows]), 1), xs))

    extra = sum(c * power_law(t) for c, t in zip(fit["coef"], fit["terms"]))
    return np.exp(xs) / 1e9, (power_law("compiled") + extra) / power_law(mode)


def plot(result, path=None):
    """Two panels from a result (the JSON this script writes).  Left: the
    speed-up over eager (compiled, jit_compile, compiled loop) against GFLOP
    per step, log x; the points of one mode and batch joined in order of
    FLOPs, one marker per batch size, and each mode's trend (:func:`trend`).
    Right: the overhead model (:func:`fit_overhead`), eager minus compiled
    time as measured against as fitted.  Returns the figure, also written to
    ``path`` when given; None without matplotlib (the ``bench`` extra), with
    a message."""
    try:
        import matplotlib
    except ImportError:
        print(f"plot skipped: matplotlib is not installed (pip install \".[bench]\"); "
              f"{path} not written", flush=True)
        return None
    rows = sorted(result["ladder"], key=lambda r: r["flops"])
    if len(rows) < 3:
        print(f"plot skipped: {len(rows)} point(s), a trend needs 3; {path} not written")
        return None
    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({r["batch"] for r in rows})
    markers = dict(zip(batches, "os^Dv"))
    colors = {"compiled": "tab:blue", "jit": "tab:red", "loop": "tab:green"}
    fits = {"per op": fit_overhead(rows, ("ops",)),
            "per op + per byte": fit_overhead(rows)}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    for mode, color in colors.items():
        for b in batches:
            sel = [r for r in rows if r["batch"] == b]
            ax.plot([r["flops"] / 1e9 for r in sel], [r["eager"] / r[mode] for r in sel],
                    marker=markers[b], color=color, lw=0.6, alpha=0.8, ls=":",
                    label=f"{MODE_LABELS[mode]}, batch {b}")
        xs, ys = trend(rows, mode, fits["per op + per byte"])
        ax.plot(xs, ys, color=color, lw=2.2, alpha=0.55,
                label=f"{MODE_LABELS[mode]}: overhead model")
    for r in rows:
        if r["batch"] == batches[0]:
            ax.annotate(r["model"].replace("MLP ", "MLP\n"), (r["flops"] / 1e9, r["eager"] / r["compiled"]),
                        fontsize=6.5, xytext=(0, -16), textcoords="offset points", ha="center")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(xscale="log", xlabel="GFLOP per training step (log)", ylabel="speed-up over eager (x)",
           title="speed-up against model size")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, ncol=3, loc="upper right")
    measured = [(r["eager"] - r["compiled"]) * 1e3 for r in rows]
    shown = []  # log axes: a point whose eager step was not slower cannot be drawn
    for (label, fit), fill in zip(fits.items(), ("none", None)):
        pred = [(p - r["compiled"]) * 1e3 for p, r in zip(fit["predicted"], rows)]
        for b in batches:
            idx = [i for i, r in enumerate(rows) if r["batch"] == b
                   and measured[i] > 0 and pred[i] > 0]
            shown += [measured[i] for i in idx] + [pred[i] for i in idx]
            kw = {"facecolors": "none", "edgecolors": "k"} if fill == "none" else {"color": "k"}
            bx.scatter([measured[i] for i in idx], [pred[i] for i in idx], marker=markers[b],
                       s=22, label=f"{label} (batch {b})", **kw)
    lo, hi = min(shown or [1e-3]) / 1.5, max(shown or [1.0]) * 1.5
    bx.plot([lo, hi], [lo, hi], color="gray", lw=0.8)
    bx.set(xscale="log", yscale="log", xlabel="eager - compiled, measured (ms)",
           ylabel="fitted overhead (ms)", xlim=(lo, hi), ylim=(lo, hi),
           title=f"overhead model: {fits['per op + per byte']['per_op_us']:.1f} us/op"
                 f" + {fits['per op + per byte']['per_gb_ms']:.0f} ms/GB")
    bx.grid(alpha=0.3)
    bx.legend(fontsize=6.5)
    cpu = result.get("cpu")
    fig.suptitle("pyresnet: compiled training step vs eager" + (f", {cpu_name(cpu)}" if cpu else ""),
                 fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def conclusion(result):
    """The answer in two sentences (str), every figure computed from
    ``result`` (the JSON this script writes): where compiling pays (the
    compiled step's speed-up at the ends of the ladder and its extremes,
    the compiled loop's best) and why (the fitted overhead model, and the
    share of the eager step it accounts for at the small and the large
    end), naming the CPU."""
    rows = sorted(result["ladder"], key=lambda r: (r["flops"], r["batch"]))
    sp = {id(r): r["eager"] / r["compiled"] for r in rows}
    best = max(rows, key=lambda r: sp[id(r)])
    worst = min(rows, key=lambda r: sp[id(r)])
    loop_best = max(rows, key=lambda r: r["eager"] / r["loop"])
    small, large = rows[0], rows[-1]
    fit = fit_overhead(rows)
    ops_only = fit_overhead(rows, ("ops",))
    share = dict(zip(map(id, rows), fit["share"]))
    op_share = dict(zip(map(id, rows), fit["op_share"]))
    xs, ys = trend(rows, "compiled")
    low = int(np.argmin(ys))

    def name(r):
        return f"{r['model']} at batch {r['batch']}"

    def ms(t):
        return f"{t * 1e3:.3g} ms"

    # Claim a rise at the large end only where the trend climbs more than 5% from its minimum.
    if 0 < low and ys[-1] > 1.05 * ys[low]:
        where = (f"falls to {ys[low]:.2f}x near {xs[low]:.2g} GFLOP per step and rises again "
                 f"to {ys[-1]:.2f}x")
    elif ys[0] > ys[-1]:
        where = f"falls with size from {ys[0]:.2f}x to {ys[-1]:.2f}x"
    else:
        where = f"rises with size from {ys[0]:.2f}x to {ys[-1]:.2f}x"
    first = (f"On {cpu_name(result['cpu'])}, compiling the training step paid at every one of "
             if worst["eager"] / worst["compiled"] > 1 else
             f"On {cpu_name(result['cpu'])}, compiling the training step paid at most of ")
    first += (f"the {len(rows)} points from {small['flops'] / 1e9:.3g} to "
              f"{large['flops'] / 1e9:.3g} GFLOP per step, most for {name(best)} "
              f"({sp[id(best)]:.2f}x, {ms(best['eager'])} eager against "
              f"{ms(best['compiled'])} compiled; the whole loop compiled "
              f"{loop_best['eager'] / loop_best['loop']:.2f}x for {name(loop_best)}) and least "
              f"for {name(worst)} ({sp[id(worst)]:.2f}x), and its trend {where} "
              f"({name(small)} {sp[id(small)]:.2f}x, {name(large)} {sp[id(large)]:.2f}x).")
    second = (f"Why: eager time = kernel time (the compiled step) + ops x "
              f"{fit['per_op_us']:.1f} us + {fit['per_gb_ms']:.0f} ms per GB of intermediates "
              f"fits every point to a median {fit['median_abs_error'] * 100:.0f}% "
              f"(worst {fit['max_abs_error'] * 100:.0f}%; the per-op term alone, "
              f"{ops_only['per_op_us']:.1f} us per op, to {ops_only['median_abs_error'] * 100:.0f}%"
              f", worst {ops_only['max_abs_error'] * 100:.0f}%), so the per-op overhead is "
              f"{op_share[id(small)] * 100:.0f}% of the eager step of {name(small)} "
              f"({small['ops']} ops in {ms(small['eager'])}) but "
              f"{op_share[id(large)] * 100:.0f}% of {name(large)}'s ({large['ops']} ops in "
              f"{ms(large['eager'])}, whose kernels dominate), where allocating "
              f"{large['intermediate_bytes'] / 1e9:.2g} GB of fresh intermediates brings "
              f"the fitted overhead to {share[id(large)] * 100:.0f}%.")
    return first + " " + second


def write_atomic(path, text):
    """Write ``text`` to ``path`` by a temporary file, fsynced and renamed, so
    a reader (notebook 02) never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--steps", type=int, help="timed rounds per mode (median; default 10, "
                        "--quick 3)")
    parser.add_argument("--big-steps", type=int,
                        help="timed rounds for ResNet-56 and ResNet-110 (default: --steps)")
    parser.add_argument("--warmup", type=int, help="untimed rounds first (default 2, --quick 1)")
    parser.add_argument("--quick", action="store_true",
                        help="a check in well under a minute: the four smallest models, 3 "
                             "rounds, 2 loop steps, no epochs, no PyTorch/TensorFlow")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--models", nargs="+", metavar="NAME",
                        help="subset of the ladder: " + ", ".join(m[0] for m in LADDER))
    parser.add_argument("--no-others", action="store_true", help="skip PyTorch/TensorFlow")
    parser.add_argument("--threads", type=int, help="kernel threads (default: all cores)")
    parser.add_argument("--loop-steps", type=int,
                        help="training steps per call of the compiled loop (default 4, --quick 2)")
    parser.add_argument("--epoch-rounds", type=int,
                        help="interleaved rounds of the epoch comparison (0: skip it; "
                             "default 3, --quick 0)")
    parser.add_argument("--epoch-images", type=int, default=60000,
                        help="images in the MLP epoch")
    parser.add_argument("--resnet-steps", type=int, default=4,
                        help="ResNet-20 steps per round in the epoch comparison")
    parser.add_argument("--tag", default="",
                        help="suffix of the output files: eager_vs_compiled_TAG.md/.json/.png")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    quick = args.quick
    for key, full, short in (("steps", 10, 3), ("warmup", 2, 1), ("loop_steps", 4, 2),
                             ("epoch_rounds", 3, 0)):
        if getattr(args, key) is None:
            setattr(args, key, short if quick else full)
    if args.big_steps is None:
        args.big_steps = args.steps
    if quick:
        args.no_others = True
    names = [m[0] for m in LADDER]
    unknown = [m for m in args.models or () if m not in names]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; the ladder is {names}")
    os.makedirs(args.out, exist_ok=True)
    if args.threads:
        pr.set_num_threads(args.threads)
    chosen = args.models or (QUICK_MODELS if quick else names)
    ladder = [m for m in LADDER if m[0] in chosen]
    stem = os.path.join(args.out, "eager_vs_compiled" + (f"_{args.tag}" if args.tag else ""))
    load_before = os.getloadavg()
    started = time.time()
    cpu = cpu_info()
    print(f"CPU: {cpu_name(cpu)}; lscpu: {cpu['lscpu']}")
    rows = []
    print(f"pyresnet {pr.__version__}, {pr.get_num_threads()} threads, median of {args.steps} "
          f"steps, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, GOMP_SPINCOUNT="
          f"{os.environ.get('GOMP_SPINCOUNT', 'unset')}, load average "
          f"{os.getloadavg()[0]:.1f}")
    for name, build, shape in ladder:
        for n in args.batches:
            steps = args.big_steps if name in ("ResNet-56", "ResNet-110") else args.steps
            r = bench_pyresnet(build, shape, n, steps, args.loop_steps, args.warmup)
            r.update(model=name, batch=n, steps=steps)
            rows.append(r)
            print(f"  {name:19s} batch {n:4d}: eager {fmt_ms(r['eager'])} ms, compiled "
                  f"{fmt_ms(r['compiled'])} ms ({r['eager'] / r['compiled']:.2f}x), jit "
                  f"{fmt_ms(r['jit'])} ms ({r['eager'] / r['jit']:.2f}x), loop "
                  f"{fmt_ms(r['loop'])} ms ({r['eager'] / r['loop']:.2f}x)", flush=True)
    report = table(rows)
    epochs = []
    if args.epoch_rounds > 0:
        epochs = bench_epochs(args.epoch_images, args.epoch_rounds, args.resnet_steps)
        report += epoch_table(epochs, args.epoch_rounds)
        print(epoch_table(epochs, args.epoch_rounds), flush=True)
    for framework, fn, modes in (("PyTorch (eager vs torch.compile)", bench_torch,
                                  ("eager", "compiled")),
                                 ("TensorFlow (eager vs tf.function vs jit_compile)", bench_tf,
                                  ("eager", "compiled", "jit"))):
        if args.no_others:
            break
        try:
            __import__("torch" if fn is bench_torch else "tensorflow")
        except ImportError:
            report += f"\n\n{framework}: not installed."
            continue
        others = []
        for name, _, shape in ladder:
            for n in args.batches:
                r = fn(name, shape, n, args.steps)
                r.update(model=name, batch=n)
                others.append(r)
                print(f"  {framework.split()[0]} {name} batch {n}: " +
                      ", ".join(f"{m} {fmt_ms(r.get(m))} ms" for m in modes), flush=True)
        report += other_table(others, framework, modes)
    result = {"cpu": cpu, "command": " ".join(["python bench/eager_vs_compiled.py", *sys.argv[1:]]),
              "pyresnet": pr.__version__, "threads": pr.get_num_threads(),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
              "seconds": round(time.time() - started, 1),
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "warmup": args.warmup, "loop_steps": args.loop_steps,
              "ladder": rows, "epochs": epochs}
    text = conclusion(result) if len(rows) > 2 else "(too few points for a conclusion)"
    report = (f"CPU: {cpu_name(cpu)}; `{result['command']}`; {result['date']}, "
              f"{result['seconds']:.0f} s; load average (1/5/15 min) before "
              + "/".join(f"{x:.1f}" for x in load_before) + ", after "
              + "/".join(f"{x:.1f}" for x in result["load_average_after"]) + "\n\n"
              + report + "\n\n" + text)
    print()
    print(report)
    write_atomic(stem + ".md", report + "\n")
    write_atomic(stem + ".json", json.dumps(result, indent=1))
    plot(result, stem + ".png")
    bars = {(r["model"], r["batch"]): r for r in rows}
    if ("MLP 784-128-10", 32) in bars:
        r = bars["MLP 784-128-10", 32]
        print(f"\nbar: MLP batch 32 compiled/eager speedup {r['eager'] / r['compiled']:.2f}x "
              f"(want >= 2)")
    if ("ResNet-20", 128) in bars:
        r = bars["ResNet-20", 128]
        print(f"bar: ResNet-20 batch 128 compiled {r['eager'] / r['compiled']:.2f}x (want >= 1), "
              f"jit {r['eager'] / r['jit']:.2f}x (want >= 1.15)")
    cases = {}
    for r in epochs:
        cases.setdefault(r["case"], {})[r["mode"]] = r["seconds"]
    for case, t in cases.items():
        if "eager" in t:
            print(f"bar: {case}: compiled loop {t['eager'] / t['compiled loop']:.2f}x eager "
                  f"(want >= 5), {t['compiled step from Python'] / t['compiled loop']:.2f}x the "
                  f"compiled step from Python (want >= 2)")
        else:
            print(f"bar: {case}: compiled loop {t['compiled step from Python'] / t['compiled loop']:.2f}x "
                  f"the compiled step from Python (want >= 1, within noise)")


if __name__ == "__main__":
    main()
