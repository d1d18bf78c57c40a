"""Eager vs compiled vs jit_compile training steps, and whole compiled training
loops, over a ladder of model sizes.

Models (all on random data of CIFAR's shape unless noted):
  * MLP 784-128-10 (input 784 floats),
  * a small CNN (conv16-pool-conv32-pool-dense10),
  * ResNet-8, ResNet-20, ResNet-56 for 32x32x3 (He et al. 2016, section 4.2:
    6n+2 layers, stages of 16/32/64 filters),
at batch sizes 32 and 128.  One training step = forward, loss
(SparseCategoricalCrossentropy from logits), backward and an SGD-momentum
update.  For each model/batch the modes run side by side in this one
process, round-robin; each reports the median of ``--steps`` timed rounds
after warm-up:

  * eager: ``model.train_step`` called from Python,
  * compiled / jit: the step compiled (``pyresnet.compile``, without and with
    ``jit_compile``), called from Python on one batch,
  * loop: a compiled function whose ``for x, y in dataset:`` runs
    ``--loop-steps`` training steps in one call (one loop node: the batches
    come from the C input pipeline, no return to Python between steps);
    its time is per step.

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
jit_compile=True).

Output: a Markdown table (stdout and ``--out``/eager_vs_compiled.md) and a
PNG plot of speedup against parameter count and FLOPs per step
(``--out``/eager_vs_compiled.png).  Machines here are shared and noisy:
compare ratios from one run, not absolute times across runs.

Usage:  python bench/eager_vs_compiled.py [--steps 10] [--quick] [--out bench/results]
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


def mlp():
    inputs = layers.Input((784,))
    x = layers.Dense(128, activation="relu")(inputs)
    return pr.Model(inputs, layers.Dense(10)(x), name="mlp")


def small_cnn():
    inputs = layers.Input((32, 32, 3))
    x = layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    return pr.Model(inputs, layers.Dense(10)(x), name="small_cnn")


LADDER = [("MLP 784-128-10", mlp, (784,)), ("small CNN", small_cnn, (32, 32, 3)),
          ("ResNet-8", lambda: resnet(8), (32, 32, 3)),
          ("ResNet-20", lambda: resnet(20), (32, 32, 3)),
          ("ResNet-56", lambda: resnet(56), (32, 32, 3))]


def batch(shape, n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n,) + shape).astype(np.float32),
            rng.integers(0, 10, n).astype(np.int32))


def median_times(fns, steps, warmup=2):
    """Median seconds per call of each function in ``fns`` (dict), timed
    round-robin (one call of each per round) so that load changes on a shared
    machine hit every mode alike."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {m: [] for m in fns}
    for _ in range(steps):
        for m, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[m].append(time.perf_counter() - t0)
    return {m: statistics.median(t) for m, t in times.items()}


def compiled_loop(step, data):
    """One call runs ``step`` on every batch of ``data`` (a loop node)."""
    @pr.compile
    def loop(data):
        for xb, yb in data:
            step(xb, yb)
    return lambda: loop(data)


def bench_pyresnet(build, shape, n, steps, loop_steps):
    """Median step seconds per mode, parameter count and FLOPs per step."""
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
    result = median_times(fns, steps)
    result["loop"] /= loop_steps
    result["params"] = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    result["flops"] = compiled.get_concrete_function((x, y)).flops
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
        if name.startswith("MLP"):
            return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
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
        if name.startswith("MLP"):
            return keras.Sequential([keras.Input((784,)), keras.layers.Dense(128, "relu"),
                                     keras.layers.Dense(10)])
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
    head = ("| model | batch | params | GFLOP/step | eager ms | compiled ms | jit ms | "
            "loop ms | compiled speedup | jit speedup | loop speedup | loop / compiled |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r['model']} | {r['batch']} | {r['params']:,} | {r['flops'] / 1e9:.3f} | "
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


def plot(rows, path):
    """Speedup over eager against parameters and FLOPs: one marker per model,
    mode and batch size (models of one family are not a curve).  Without
    matplotlib (the ``bench`` extra) the plot is skipped with a message;
    returns whether it was written."""
    try:
        import matplotlib
    except ImportError:
        print(f"plot skipped: matplotlib is not installed (pip install \".[bench]\"); "
              f"{path} not written", flush=True)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {("compiled", 32): ("o", "tab:blue"), ("compiled", 128): ("o", "tab:cyan"),
              ("jit", 32): ("s", "tab:red"), ("jit", 128): ("s", "tab:orange"),
              ("loop", 32): ("^", "tab:green"), ("loop", 128): ("^", "tab:olive")}
    for ax, key, label in ((axes[0], "params", "trainable parameters"),
                           (axes[1], "flops", "FLOPs per training step")):
        for (mode, b), (marker, color) in styles.items():
            pts = [(r[key], r["eager"] / r[mode]) for r in rows if r["batch"] == b]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color,
                       label=f"{'jit_compile' if mode == 'jit' else 'compiled loop' if mode == 'loop' else mode}, batch {b}")
        for r in rows:
            if r["batch"] == 128:
                ax.annotate(r["model"], (r[key], r["eager"] / r["jit"]), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("speedup over eager (x)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("pyresnet: compiled step and compiled loop vs eager (median step time ratio)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed steps per mode (median)")
    parser.add_argument("--quick", action="store_true", help="skip ResNet-56")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--models", nargs="+", help="subset of model names (e.g. ResNet-20)")
    parser.add_argument("--no-others", action="store_true", help="skip PyTorch/TensorFlow")
    parser.add_argument("--threads", type=int, help="kernel threads (default: all cores)")
    parser.add_argument("--loop-steps", type=int, default=4,
                        help="training steps per call of the compiled loop (ladder)")
    parser.add_argument("--epoch-rounds", type=int, default=3,
                        help="interleaved rounds of the epoch comparison (0: skip it)")
    parser.add_argument("--epoch-images", type=int, default=60000,
                        help="images in the MLP epoch")
    parser.add_argument("--resnet-steps", type=int, default=4,
                        help="ResNet-20 steps per round in the epoch comparison")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.threads:
        pr.set_num_threads(args.threads)
    ladder = [m for m in LADDER if not (args.quick and m[0] == "ResNet-56")
              and (not args.models or m[0] in args.models)]
    rows = []
    print(f"pyresnet {pr.__version__}, {pr.get_num_threads()} threads, median of {args.steps} "
          f"steps, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, GOMP_SPINCOUNT="
          f"{os.environ.get('GOMP_SPINCOUNT', 'unset')}, load average "
          f"{os.getloadavg()[0]:.1f}")
    for name, build, shape in ladder:
        for n in args.batches:
            r = bench_pyresnet(build, shape, n, args.steps, args.loop_steps)
            r.update(model=name, batch=n)
            rows.append(r)
            print(f"  {name:15s} batch {n:4d}: eager {fmt_ms(r['eager'])} ms, compiled "
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
    print()
    print(report)
    with open(os.path.join(args.out, "eager_vs_compiled.md"), "w") as f:
        f.write(report + "\n")
    with open(os.path.join(args.out, "eager_vs_compiled.json"), "w") as f:
        json.dump({"ladder": rows, "epochs": epochs,
                   "load_average": os.getloadavg()[0]}, f, indent=1)
    plot(rows, os.path.join(args.out, "eager_vs_compiled.png"))
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
