"""ResNet-20 (or RegNet) training step on CPU: pyresnet against PyTorch and TensorFlow.

What is measured: one training step of the CIFAR ResNet-20 (He et al. 2016,
section 4.2: a 3x3 conv(16) + BN + ReLU stem, 3 stages of 3 basic blocks with
16/32/64 channels, stride 2 at the start of stages 2 and 3 with a projection
shortcut (1x1 conv stride 2 + BN) there, BN after every conv, global average
pooling, Dense(10)) on a batch of random 32x32x3 float32 images and integer
labels: forward, sparse softmax cross-entropy from logits, backward, and an
SGD update (learning rate 0.1, momentum 0.9).  Batch 128 unless --batch.

--model regnetx002 / regnety002 times RegNetX-200MF / RegNetY-200MF
(Radosavovic et al. 2020; pyresnet.applications.RegNetX002 / RegNetY002,
10 classes, logits) on 64x64x3 images instead (issue 31's bars: batch 64),
against torchvision's RegNet built from the paper's parameters
(``RegNet(BlockParams.from_init_params(13, 24, 36.44, 2.49, 8[, se_ratio=0.25]))``,
the same widths 24/56/152/368, depths 1/1/4/7, group width 8, stem 32 and
BN epsilon 1e-5 / momentum 0.1, i.e. Keras's 0.9) in the torch modes; the
TF modes build only ResNet-20.  PyPI's torchvision wheels are CUDA builds
whose C extension does not load beside a CPU-only torch; the worker then
skips torchvision's fake-tensor registrations of its detection ops
(torchvision._meta_registrations), which a RegNet never calls.

Modes (each framework with its own interpreter, since they are installed in
separate virtual environments):

  pyresnet_eager, pyresnet_compiled (pr.compile), pyresnet_jit
      (pr.compile(jit_compile=True)): a pr.GradientTape step on
      pyresnet.applications.resnet_cifar(20, shortcut="projection"), NHWC;
      pyresnet_bf16_compiled and pyresnet_bf16_jit: the same under Keras's
      mixed_bfloat16 policy (pyresnet.mixed_precision: float32 weights,
      convolutions and the dense layer in bfloat16 on AMX / AVX512_BF16);
      run with --pyresnet-python (default /work/venv/bin/python).
  torch_eager (NCHW), torch_eager_cl (channels_last), torch_compile_cl
      (torch.compile of forward + loss and of the optimizer step,
      channels_last), torch_bf16_cl and torch_bf16_compile_cl (the same under
      torch.autocast("cpu", bfloat16)); torch.set_num_threads(threads);
      run with --peers-python (default /work/venv-peers/bin/python).
  tf_eager, tf_function (tf.function), tf_xla (tf.function(jit_compile=True)):
      a tf.GradientTape step on the same network built from Keras 3 layers,
      NHWC; intra-op threads = threads, inter-op threads = 1; --peers-python.

How: every (mode, round) is a fresh subprocess that builds the model, runs
--warmup steps (tracing / compiling happen there), then times --steps steps
one by one (wall clock around the whole step, including reading the loss
back as a Python float) and prints the median step time as JSON on its last
stdout line.  The torch.compile modes need two warm-up steps: the first
compiles, the second recompiles the optimizer step once its momentum
buffers exist (Inductor caches its kernels under /tmp, so later processes
compile faster; that is outside the timed steps).  Rounds interleave the
modes (round r runs every mode once, the order rotated by r) so that noise
from other processes on a shared machine hits all modes alike; a mode's
figure is the median over rounds of the per-process medians.  A mode whose
framework is not installed is skipped with a note.  Run it on an otherwise
idle machine: a note flags a run whose FMA-peak measurements (below)
disagree by more than 20%, the sign that other processes took the cores.
The environment is passed on to every process (e.g. OMP_WAIT_POLICY).

Units and derived figures:
  s/step       median wall seconds per training step;
  images/s     batch / (s/step);
  GFLOP/s      training-step FLOPs / (s/step) / 1e9, where the FLOPs count
               only convolutions and the dense layer: forward
               2*N*HO*WO*KH*KW*C*O per conv (2*N*C*O for the dense), backward
               2x forward (input and weight gradients), so 3x forward in all
               (BN, ReLU, adds, pooling and the update are not counted; nor is
               it subtracted that no framework computes the input gradient of
               the first conv);
  % peak       GFLOP/s over this machine's fp32 FMA peak on --threads
               threads, measured by bench/fma_peak.py in the same run (before
               the first round, between rounds and after the last; best of
               all tries).  bf16 modes are also compared to the fp32 peak,
               though bf16 hardware (AVX512-BF16, AMX) can exceed it;
  vs compiled  (images/s of the mode) / (images/s of pyresnet_compiled):
               above 1 is faster than pyresnet compiled;
  vs torch bf16  (images/s of the mode) / (images/s of torch_bf16_cl, torch
               autocast bf16 eager channels_last).

    python bench/peers.py [--batch 128] [--rounds 3] [--steps 5] [--warmup 3]
                          [--threads 2] [--modes a,b,...] [--out bench/results]

With --out DIR it writes DIR/peers_<model>_b<batch>[_<tag>].md (the
table) and .json (the table's numbers plus every step time, versions and
peak tries).  The settings that choose kernels (PYRESNET_KERNELS,
ONEDNN_MAX_CPU_ISA, OMP_WAIT_POLICY) are recorded when set: for example
PYRESNET_KERNELS=no_amx ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 --tag no_amx
runs both frameworks as on a CPU with AVX512_BF16 but no AMX.
"""
import argparse
import datetime
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
DEPTH = 20
CLASSES = 10
IMAGE = (32, 32, 3)
# --model -> its input; the RegNets: (pyresnet builder, torchvision BlockParams arguments)
MODELS = {"resnet20": {"image": (32, 32, 3)},
          "regnetx002": {"image": (64, 64, 3), "builder": "RegNetX002",
                         "params": (13, 24, 36.44, 2.49, 8), "se": None},
          "regnety002": {"image": (64, 64, 3), "builder": "RegNetY002",
                         "params": (13, 24, 36.44, 2.49, 8), "se": 0.25}}
MODEL = ["resnet20"]  # the model of this run (main and the worker set it)
LR, MOMENTUM = 0.1, 0.9

# mode -> (framework, description)
MODES = {
    "pyresnet_eager": ("pyresnet", "pyresnet eager"),
    "pyresnet_compiled": ("pyresnet", "pyresnet pr.compile"),
    "pyresnet_jit": ("pyresnet", "pyresnet pr.compile(jit_compile=True)"),
    "pyresnet_bf16_compiled": ("pyresnet", "pyresnet mixed_bfloat16 pr.compile"),
    "pyresnet_bf16_jit": ("pyresnet", "pyresnet mixed_bfloat16 pr.compile(jit_compile=True)"),
    "torch_eager": ("torch", "torch eager, NCHW"),
    "torch_eager_cl": ("torch", "torch eager, channels_last"),
    "torch_compile_cl": ("torch", "torch.compile, channels_last"),
    "torch_bf16_cl": ("torch", "torch autocast bf16 eager, channels_last"),
    "torch_bf16_compile_cl": ("torch", "torch autocast bf16 torch.compile, channels_last"),
    "tf_eager": ("tensorflow", "TF 2 / Keras 3 eager"),
    "tf_function": ("tensorflow", "TF 2 / Keras 3 tf.function"),
    "tf_xla": ("tensorflow", "TF 2 / Keras 3 tf.function(jit_compile=True)"),
}
BASELINE = "pyresnet_compiled"
# Settings that choose kernels, recorded with the results when set.
KERNEL_ENV = ("PYRESNET_KERNELS", "ONEDNN_MAX_CPU_ISA", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
TORCH_BF16 = "torch_bf16_cl"  # the second bar: mixed_bfloat16 against torch autocast


# ---- FLOPs ------------------------------------------------------------------------

def resnet_convs(depth=DEPTH, image=IMAGE):
    """The convolutions of the CIFAR ResNet with projection shortcuts, as
    (HO, WO, KH, KW, C, O) tuples ('same' padding, so HO = ceil(H / stride))."""
    n = (depth - 2) // 6
    h, w, c = image
    convs = [(h, w, 3, 3, c, 16)]
    c = 16
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(n):
            stride = 2 if stage > 0 and block == 0 else 1
            h, w = -(-h // stride), -(-w // stride)
            convs += [(h, w, 3, 3, c, filters), (h, w, 3, 3, filters, filters)]
            if stride != 1 or c != filters:
                convs.append((h, w, 1, 1, c, filters))  # projection shortcut
            c = filters
    return convs, c


def regnet_convs(name, image):
    """The convolutions of RegNet `name` (MODELS) on `image` as (HO, WO, KH,
    KW, C per group, O), squeeze-and-excitation's 1x1s on 1x1 maps included,
    and the features the dense layer takes (its stages from
    pyresnet.applications.regnet_stages, the layout of regnet.py)."""
    from pyresnet.applications import regnet_stages

    depth, w_0, w_a, w_m, gw = MODELS[name]["params"]
    widths, depths, groups = regnet_stages(depth, w_0, w_a, w_m, gw)
    h, w = -(-image[0] // 2), -(-image[1] // 2)
    convs = [(h, w, 3, 3, image[2], 32)]
    cin = 32
    for width, d, g in zip(widths, depths, groups):
        for i in range(d):
            ho, wo = (-(-h // 2), -(-w // 2)) if i == 0 else (h, w)
            convs.append((h, w, 1, 1, cin, width))
            convs.append((ho, wo, 3, 3, g, width))
            if MODELS[name]["se"]:
                se = int(cin * MODELS[name]["se"])
                convs += [(1, 1, 1, 1, width, se), (1, 1, 1, 1, se, width)]
            convs.append((ho, wo, 1, 1, width, width))
            if i == 0:
                convs.append((ho, wo, 1, 1, cin, width))
            h, w, cin = ho, wo, width
    return convs, cin


def train_step_flops(batch, depth=DEPTH, image=IMAGE, classes=CLASSES):
    """FLOPs of one training step (int): 3x the forward FLOPs of the convs
    (2*N*HO*WO*KH*KW*C*O each, C per group) and of the dense layer
    (2*N*C*classes), of ResNet-`depth` or of MODEL's RegNet."""
    if MODEL[0] != "resnet20":
        image = MODELS[MODEL[0]]["image"]
        convs, features = regnet_convs(MODEL[0], image)
    else:
        convs, features = resnet_convs(depth, image)
    forward = sum(2 * batch * ho * wo * kh * kw * c * o for ho, wo, kh, kw, c, o in convs)
    forward += 2 * batch * features * classes
    return 3 * forward


# ---- workers: one mode in this process --------------------------------------------

def random_batch(batch, seed=0):
    """Random NHWC float32 images and int32 labels (numpy)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch,) + MODELS[MODEL[0]]["image"]).astype(np.float32)
    y = rng.integers(0, CLASSES, batch).astype(np.int32)
    return x, y


def pyresnet_step(mode, batch, threads):
    """A zero-argument callable running one pyresnet training step (-> loss)."""
    import pyresnet as pr

    pr.set_num_threads(threads)
    if "bf16" in mode:  # layers take the global policy when they are made
        pr.mixed_precision.set_global_policy("mixed_bfloat16")
    if MODEL[0] == "resnet20":
        model = pr.applications.resnet_cifar(DEPTH, input_shape=IMAGE, num_classes=CLASSES,
                                             shortcut="projection")
    else:
        spec = MODELS[MODEL[0]]
        model = getattr(pr.applications, spec["builder"])(
            input_shape=spec["image"], classes=CLASSES, classifier_activation=None)
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = pr.optimizers.SGD(LR, momentum=MOMENTUM)

    def train_step(x, y):
        with pr.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        return loss

    if mode in ("pyresnet_compiled", "pyresnet_bf16_compiled"):
        train_step = pr.compile(train_step)
    elif mode in ("pyresnet_jit", "pyresnet_bf16_jit"):
        train_step = pr.compile(train_step, jit_compile=True)
    x, y = random_batch(batch)
    x, y = pr.Tensor(x), pr.Tensor(y)
    return lambda: float(train_step(x, y))


def torch_step(mode, batch, threads):
    """A zero-argument callable running one PyTorch training step (-> loss)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def bn(channels):  # Keras' defaults: epsilon 1e-3, moving average 0.99
        return nn.BatchNorm2d(channels, eps=1e-3, momentum=0.01)

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = bn(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = bn(cout)
            self.shortcut = None
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                              bn(cout))

        def forward(self, h):
            out = F.relu(self.bn1(self.conv1(h)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + (h if self.shortcut is None else self.shortcut(h)))

    n = (DEPTH - 2) // 6
    layers = [nn.Conv2d(IMAGE[2], 16, 3, 1, 1, bias=False), bn(16), nn.ReLU()]
    cin = 16
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(n):
            layers.append(BasicBlock(cin, filters, 2 if stage > 0 and block == 0 else 1))
            cin = filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, CLASSES)]
    model = nn.Sequential(*layers).train()
    if MODEL[0] != "resnet20":
        import types
        # see the module docstring: a CUDA torchvision wheel beside a CPU torch
        sys.modules.setdefault("torchvision._meta_registrations",
                               types.ModuleType("torchvision._meta_registrations"))
        from torchvision.models.regnet import BlockParams, RegNet
        spec = MODELS[MODEL[0]]
        model = RegNet(BlockParams.from_init_params(*spec["params"], se_ratio=spec["se"]),
                       num_classes=CLASSES).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    xn, yn = random_batch(batch)
    x = torch.from_numpy(xn).permute(0, 3, 1, 2).contiguous()  # NCHW
    y = torch.from_numpy(yn).long()
    if mode != "torch_eager":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    bf16 = "bf16" in mode

    def forward_loss(xb, yb):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return F.cross_entropy(model(xb), yb)

    optimizer_step = optimizer.step
    if "compile" in mode:
        forward_loss = torch.compile(forward_loss)
        optimizer_step = torch.compile(optimizer.step)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = forward_loss(x, y)
        loss.backward()
        optimizer_step()
        return loss.item()

    return step


def tf_step(mode, batch, threads):
    """A zero-argument callable running one TF / Keras 3 training step (-> loss)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf
    import keras
    from keras import layers

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(0)

    def conv(filters, kernel, stride=1):
        return layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False,
                             kernel_initializer="he_normal")

    def basic_block(h, filters, stride):
        out = layers.ReLU()(layers.BatchNormalization()(conv(filters, 3, stride)(h)))
        out = layers.BatchNormalization()(conv(filters, 3)(out))
        if stride != 1 or h.shape[-1] != filters:
            h = layers.BatchNormalization()(conv(filters, 1, stride)(h))
        return layers.ReLU()(layers.Add()([out, h]))

    inputs = keras.Input(IMAGE)
    h = layers.ReLU()(layers.BatchNormalization()(conv(16, 3)(inputs)))
    n = (DEPTH - 2) // 6
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(n):
            h = basic_block(h, filters, 2 if stage > 0 and block == 0 else 1)
    outputs = layers.Dense(CLASSES)(layers.GlobalAveragePooling2D()(h))
    model = keras.Model(inputs, outputs)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.SGD(LR, momentum=MOMENTUM)
    optimizer.build(model.trainable_variables)

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    if mode == "tf_function":
        train_step = tf.function(train_step)
    elif mode == "tf_xla":
        train_step = tf.function(train_step, jit_compile=True)
    xn, yn = random_batch(batch)
    x, y = tf.constant(xn), tf.constant(yn)
    return lambda: float(train_step(x, y))


BUILDERS = {"pyresnet": pyresnet_step, "torch": torch_step, "tensorflow": tf_step}


def worker(mode, batch, steps, warmup, threads):
    """Build, warm up and time one mode; print a JSON line (the last on stdout)."""
    # Run from bench/, Python put this folder first on sys.path; its scripts
    # (conv.py, augment.py, ...) must not shadow the frameworks' modules.
    sys.path[:] = [p for p in sys.path if pathlib.Path(p or ".").resolve() != HERE]
    t0 = time.perf_counter()
    step = BUILDERS[MODES[mode][0]](mode, batch, threads)
    t1 = time.perf_counter()
    for _ in range(warmup):
        loss = step()
    t2 = time.perf_counter()
    times = []
    for _ in range(steps):
        s = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - s)
    print(json.dumps({"mode": mode, "median_s": statistics.median(times), "step_s": times,
                      "build_s": t1 - t0, "warmup_s": t2 - t1, "loss": loss}), flush=True)


# ---- the driver -------------------------------------------------------------------

FRAMEWORK_DISTS = {"pyresnet": ["pyresnet"], "torch": ["torch"],
                   "tensorflow": ["tensorflow-cpu", "tensorflow", "keras"]}


def probe(python, framework):
    """Versions of ``framework``'s distributions under interpreter ``python``
    ({dist: version}), or None with a reason (str) when it is not usable."""
    if not pathlib.Path(python).exists():
        return None, f"interpreter {python} not found"
    module = {"pyresnet": "pyresnet", "torch": "torch", "tensorflow": "tensorflow"}[framework]
    code = ("import importlib.util, importlib.metadata as m, json, sys\n"
            f"if importlib.util.find_spec({module!r}) is None: sys.exit(3)\n"
            "v = {}\n"
            f"for d in {FRAMEWORK_DISTS[framework]!r}:\n"
            "    try: v[d] = m.version(d)\n"
            "    except m.PackageNotFoundError: pass\n"
            "print(json.dumps(v))\n")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/")
    if r.returncode == 3:
        return None, f"{module} is not installed for {python}"
    if r.returncode:
        return None, f"probing {module} with {python} failed: {r.stderr.strip()[-300:]}"
    return json.loads(r.stdout.strip().splitlines()[-1]), None


def run_mode(python, mode, args):
    """Run one mode in a subprocess; its parsed JSON (dict) or an 'error' dict."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TF_CPP_MIN_LOG_LEVEL="2",
               TORCHINDUCTOR_COMPILE_THREADS="1")  # no pool of compile workers
    cmd = [python, str(pathlib.Path(__file__).resolve()), "--worker", mode,
           "--model", MODEL[0],
           "--batch", str(args.batch), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--threads", str(args.threads)]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd="/",
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    wall = time.perf_counter() - t0
    lines = r.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
        if r.returncode or out.get("mode") != mode:
            raise ValueError
    except (IndexError, ValueError):
        tail = "\n".join((r.stderr.strip().splitlines() or ["(no stderr)"])[-15:])
        return {"error": f"exit code {r.returncode}; stderr tail:\n{tail}"}
    out["process_s"] = wall
    return out


def git_version():
    """`git describe --always --dirty` of this checkout (str), or "unknown"."""
    try:
        r = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=HERE,
                           capture_output=True, text=True)
        return r.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def model_title():
    """The run's model, as the tables name it."""
    if MODEL[0] == "resnet20":
        return f"ResNet-{DEPTH}"
    h, w, _ = MODELS[MODEL[0]]["image"]
    return f"{MODELS[MODEL[0]]['builder']} ({h}x{w})"


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="modes: " + ", ".join(MODES))
    ap.add_argument("--batch", type=int, default=128, help="images per step (default 128)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per mode (default 3)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per process (default 5)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed steps per process, tracing/compiling included (default 3; "
                         "torch.compile modes need 2)")
    ap.add_argument("--threads", type=int, default=2, help="threads per framework (default 2)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list (default: all)")
    ap.add_argument("--tag", default="",
                    help="suffix of the output files' names (e.g. no_amx)")
    ap.add_argument("--out", metavar="DIR",
                    help="write DIR/peers_resnet20_b<batch>.md and .json (e.g. bench/results)")
    ap.add_argument("--pyresnet-python", default="/work/venv/bin/python",
                    help="interpreter with pyresnet installed (default %(default)s)")
    ap.add_argument("--peers-python", default="/work/venv-peers/bin/python",
                    help="interpreter with torch / tensorflow (default %(default)s)")
    ap.add_argument("--peak-tries", type=int, default=3,
                    help="FMA-peak tries at each measurement point (default 3)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    ap.add_argument("--model", choices=list(MODELS), default="resnet20",
                    help="resnet20 (32x32 inputs) or regnetx002 / regnety002 (64x64 inputs, "
                         "torch modes only among the peers)")
    ap.add_argument("--worker", metavar="MODE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    MODEL[0] = args.model

    if args.worker:
        worker(args.worker, args.batch, args.steps, args.warmup, args.threads)
        return

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    if min(args.batch, args.rounds, args.steps, args.threads) < 1 or args.warmup < 0:
        ap.error("--batch, --rounds, --steps and --threads must be >= 1, --warmup >= 0")

    sys.path.insert(0, str(HERE))
    from fma_peak import cpu_model, fma_peak_gflops, isa
    # the peak of the ISA the kernels may use: AVX2 under PYRESNET_KERNELS=avx2
    peak_isa = "avx2" if os.environ.get("PYRESNET_KERNELS") == "avx2" else isa()

    python = {"pyresnet": args.pyresnet_python, "torch": args.peers_python,
              "tensorflow": args.peers_python}
    versions, notes = {}, []
    for fw in dict.fromkeys(MODES[m][0] for m in modes):
        versions[fw], why = probe(python[fw], fw)
        if why:
            notes.append(f"skipped the {fw} modes: {why}")
            print(f"note: {notes[-1]}")
    runnable = [m for m in modes if versions[MODES[m][0]] is not None]

    flops = train_step_flops(args.batch)
    cpu = cpu_model()
    print(f"CPU: {cpu}, {os.cpu_count()} logical CPUs; {args.threads} threads per framework")
    print(f"{model_title()} training step, batch {args.batch}: {flops / 1e9:.3f} GFLOP "
          f"(conv + dense, backward = 2x forward)")
    checkout = git_version()
    print("versions: " + ", ".join(f"{d} {v}" for vv in versions.values() if vv
                                   for d, v in vv.items()) + f"; pyresnet checkout {checkout}")
    if args.warmup < 2 and any(m.startswith("torch_") and "compile" in m for m in runnable):
        print("note: torch.compile modes need --warmup 2 or more (the compiled optimizer step "
              "recompiles once its momentum buffers exist); their times include compiling")

    peaks = []

    def measure_peak(when):
        g = fma_peak_gflops(args.threads, args.peak_tries, isa_name=peak_isa)
        peaks.append(g)
        print(f"{peak_isa} fp32 FMA peak ({when}): {g:.1f} GFLOP/s, best so far {max(peaks):.1f}",
              flush=True)

    measure_peak("start")
    per_round = {m: [] for m in runnable}
    results = {m: [] for m in runnable}
    errors = {m: [] for m in runnable}
    for r in range(args.rounds):
        order = runnable[r % len(runnable):] + runnable[:r % len(runnable)] if runnable else []
        for m in order:
            out = run_mode(python[MODES[m][0]], m, args)
            if "error" in out:
                errors[m].append(out["error"])
                print(f"round {r + 1}/{args.rounds}  {m:<22} FAILED: {out['error']}", flush=True)
                continue
            per_round[m].append(out["median_s"])
            results[m].append(out)
            print(f"round {r + 1}/{args.rounds}  {m:<22} {out['median_s']:.4f} s/step  "
                  f"(build {out['build_s']:.1f} s, warm-up {out['warmup_s']:.1f} s, "
                  f"loss {out['loss']:.3f})", flush=True)
        measure_peak(f"after round {r + 1}")
    peak = max(peaks)
    if min(peaks) < 0.8 * peak:
        notes.append(f"the FMA peak ranged {min(peaks):.0f}-{peak:.0f} GFLOP/s over the run's "
                     "measurement points: other processes competed for the cores, so the "
                     "step times are unreliable (torch's OpenMP threads in particular slow down "
                     "far more than the share of the cores they lose)")
    checkout_end = git_version()
    if checkout_end != checkout:
        checkout = f"{checkout} at the start, {checkout_end} at the end"
        notes.append(f"the pyresnet checkout changed during the run ({checkout})")

    median = {m: statistics.median(v) for m, v in per_round.items() if v}
    base = median.get(BASELINE)
    torch_bf16 = median.get(TORCH_BF16)
    rows = []
    for m in modes:
        row = {"mode": m, "framework": MODES[m][0], "description": MODES[m][1]}
        if m not in runnable:
            row["status"] = "skipped (not installed)"
        elif m not in median:
            row["status"] = "failed"
            row["error"] = errors[m][0]
        else:
            s = median[m]
            row.update(status="ok", s_per_step=s, rounds_s=per_round[m],
                       images_per_s=args.batch / s, gflops=flops / s / 1e9,
                       pct_peak=100 * flops / s / 1e9 / peak,
                       vs_pyresnet_compiled=(base / s) if base else None,
                       vs_torch_bf16_cl=(torch_bf16 / s) if torch_bf16 else None,
                       failed_rounds=len(errors[m]),
                       step_s=[o["step_s"] for o in results[m]],
                       build_s=[o["build_s"] for o in results[m]],
                       warmup_s=[o["warmup_s"] for o in results[m]])
        rows.append(row)

    title = (f"{model_title()} training step, batch {args.batch}, {args.threads} threads, "
             f"{args.rounds} rounds x {args.steps} timed steps (after {args.warmup} warm-up)")
    lines = [f"# {title}", "",
             f"CPU: {cpu}; measured {peak_isa} fp32 FMA peak on {args.threads} threads: "
             f"{peak:.1f} GFLOP/s "
             f"(best of {len(peaks) * args.peak_tries} tries); "
             f"training step = {flops / 1e9:.3f} GFLOP", "",
             "| mode | s/step | images/s | GFLOP/s | % fp32 peak | vs pyresnet compiled "
             "| vs torch bf16 cl |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["status"] != "ok":
            lines.append(f"| {row['mode']} | {row['status']} | | | | | |")
            continue
        lines.append(f"| {row['mode']} | {row['s_per_step']:.4f} | {row['images_per_s']:.0f} | "
                     f"{row['gflops']:.1f} | {row['pct_peak']:.1f}% | "
                     f"{fmt_ratio(row['vs_pyresnet_compiled'])} | "
                     f"{fmt_ratio(row['vs_torch_bf16_cl'])} |")
    lines += ["", "s/step: median over rounds of each process's median step time; "
              "vs pyresnet compiled: images/s ratio (above 1 = faster). "
              "bf16 modes are compared to the fp32 peak."]
    vers = ", ".join(f"{d} {v}" for vv in versions.values() if vv for d, v in vv.items())
    lines.append(f"Versions: {vers}; pyresnet checkout {checkout}.")
    kernel_env = {k: os.environ[k] for k in KERNEL_ENV if os.environ.get(k)}
    if kernel_env:
        lines.append("Environment: " + " ".join(f"{k}={v}" for k, v in kernel_env.items())
                     + " (passed to every process).")
    lines += [f"Note: {n}." for n in notes]
    for row in rows:
        if row["status"] == "failed":
            lines.append(f"Note: {row['mode']} failed: "
                         + row["error"].strip().splitlines()[-1][:300])
    table = "\n".join(lines)
    print()
    print(table)

    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = out / (f"peers_{args.model}_b{args.batch}" + (f"_{args.tag}" if args.tag else ""))
        stem.with_name(stem.name + ".md").write_text(
            table + "\n\nCommand: `python bench/peers.py " + " ".join(sys.argv[1:]) + "`\n")
        record = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                  "command": sys.argv, "cpu": cpu, "logical_cpus": os.cpu_count(),
                  "model": args.model, "image": MODELS[args.model]["image"],
                  "threads": args.threads, "batch": args.batch, "rounds": args.rounds,
                  "steps": args.steps, "warmup": args.warmup, "flops_per_step": flops,
                  "fma_peak_gflops": peak, "fma_peak_isa": peak_isa, "fma_peak_points": peaks,
                  "load_average_end": os.getloadavg(), "versions": versions,
                  "pyresnet_checkout": checkout, "notes": notes, "modes": rows,
                  "environment": kernel_env}
        stem.with_name(stem.name + ".json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"\nwrote {stem}.md and {stem}.json")
    if any(not math.isfinite(o["loss"]) for v in results.values() for o in v):
        print("warning: some mode produced a non-finite loss", file=sys.stderr)


if __name__ == "__main__":
    main()
