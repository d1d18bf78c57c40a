"""airbench94 in PyTorch on the CPU: the peer of ``--recipe airbench94``.

A port of Keller Jordan's airbench94 (Jordan 2024, "94% on CIFAR-10 in 3.29
seconds on a single GPU", arXiv 2404.00498, section 3; reference code
KellerJordan/cifar10-airbench, ``legacy/airbench94.py``), written anew for
the CPU, to race pyresnet's own recipe (``python -m pyresnet.train --recipe
airbench94``, pyresnet/applications/airbench.py) in bench/airbench_race.py.
It follows the reference in every training detail:

- the network: a 2x2 convolution (3 -> 24 filters, bias) whose frozen kernel
  whitens 2x2 patches (the eigenvectors of the second-moment matrix of the
  first 5,000 normalised training images' patches, each scaled by
  ``1 / sqrt(eigenvalue + 5e-4)``, then the same negated), GELU; three groups
  (widths 64, 256, 256) of conv3x3 - maxpool 2 - BN - GELU - conv3x3 - BN -
  GELU with dirac-initialised bias-free convolutions and batch norm without a
  learned scale (PyTorch momentum 0.4, eps 1e-12); maxpool 3, a bias-free
  linear layer to 10 logits, times 1/9;
- SGD with Nesterov momentum 0.85 in airbench's decoupled units: learning
  rate 11.5 and weight decay 0.0153 "per 1024 examples", i.e. PyTorch's
  ``lr = 11.5 / (1024 * (1 + 1 / 0.15))`` on the summed loss and
  ``weight_decay = 0.0153 * 1024 / (1024 * (1 + 1 / 0.15)) / lr``; the BN
  biases get 64x the rate (not the decay: their ``weight_decay`` is divided
  by 64);
- the triangular schedule (0.2x at step 0, 1x at step ``int(0.23 T)``,
  0.07x at T), label smoothing 0.2, the whitening bias trained for the first
  3 epochs only;
- Lookahead: every 5 steps the slow copy of the whole ``state_dict`` (BN
  running statistics included) moves toward the weights by
  ``1 - 0.95**5 * (t / T)**3`` and the weights are set to it; at the end the
  weights become the slow copy;
- data: normalised images, each mirrored once at random before the first
  epoch and all of them mirrored on every odd epoch ("alternating flip"),
  reflect-padded by 2 pixels and randomly translated by up to 2 pixels each
  epoch; shuffled batches of 1024, the last partial batch dropped;
  ``ceil(9.9 * batches_per_epoch)`` steps (476 on the full set);
- test-time augmentation at the end: the weighted mean of the logits of the
  image, its mirror, and both translated by one pixel up-left and
  down-right with reflect padding (weights 1/4, 1/4, 1/8 x 4).

CPU specifics: NCHW tensors in channels_last memory (the NHWC layout
oneDNN's CPU kernels prefer), float32 or ``--bf16``
(``torch.autocast("cpu", dtype=torch.bfloat16)`` around the forward pass and
the loss), ``--compile`` (``torch.compile`` of the network: forward and,
through AOTAutograd, backward; the optimizer stays eager), ``--threads``.
Like ``pyresnet.train``, the test set is evaluated (without TTA) after every
epoch, and the timing counts everything: the seconds from the start of the
process (before ``import torch``) to the final TTA accuracy, data loading,
whitening, compiling and the per-epoch evaluations included.

Data: CIFAR-10's official python-pickle batches in ``<data>/cifar-10-batches-py/``
(``--data``, default ``$PYRESNET_DATA``), the files pyresnet reads; read with
a restricted unpickler that only admits NumPy arrays (as
``pyresnet.datasets._cache.read_batch`` does; that module cannot be imported
here without pyresnet's C core, so this script has its own copy of the
reader).  No network, no torchvision.

    python bench/airbench_torch.py [--epochs 9.9] [--seed 0] [--threads 2]
        [--bf16] [--compile] [--subset N] [--test-subset N] [--out FILE.json]

prints one line per epoch and the final one, and with ``--out`` writes a
JSON record: ``seconds_total``, ``seconds_training`` (the training steps
only), ``seconds_before_training`` (imports, loading, whitening),
``seconds_eval`` (the per-epoch test passes), ``seconds_tta``,
``test_accuracy`` / ``test_accuracy_tta`` (final weights, without / with
TTA), ``epochs`` (per-epoch rows), ``seed``, ``torch_version``, ``cpu``.
Run it with an interpreter that has torch (bench/airbench_race.py passes
``/work/venv-peers/bin/python``).
"""
import time

T_START = time.perf_counter()  # the start of the clock: before importing torch

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import pickle  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent

# airbench94's hyper-parameters (legacy/airbench94.py's ``hyp``), in its own
# decoupled units; pyresnet.applications.airbench.HYPERPARAMETERS holds the same.
HYP = {"train_epochs": 9.9, "batch_size": 1024, "lr": 11.5, "momentum": 0.85,
       "weight_decay": 0.0153, "bias_scaler": 64.0, "label_smoothing": 0.2,
       "whiten_bias_epochs": 3, "widths": (64, 256, 256), "batchnorm_momentum": 0.6,
       "scaling_factor": 1 / 9, "translate": 2, "lookahead_every": 5,
       "lookahead_base": 0.95 ** 5, "warmup_fraction": 0.23, "lr_start": 0.2,
       "lr_end": 0.07, "whiten_images": 5000, "whiten_epsilon": 5e-4}
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)  # pyresnet.data.recipes.CIFAR10_MEAN / _STD
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def _load_by_path(name, path):
    """A stdlib-only module of this checkout, imported from its file (so that
    this process needs neither pyresnet's C core nor its package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- data ------------------------------------------------------------------------

class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts of lists, bytes and NumPy arrays only: a tampered
    dataset file cannot run code (the classes pyresnet's reader admits)."""
    ALLOWED = frozenset({("numpy", "ndarray"), ("numpy", "dtype"),
                         ("numpy.core.multiarray", "_reconstruct"),
                         ("numpy._core.multiarray", "_reconstruct"),
                         ("numpy._core.numeric", "_frombuffer"), ("_codecs", "encode")})

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset "
                                         "file (not a CIFAR batch)")
        return super().find_class(module, name)


def read_batch(file):
    """One CIFAR-10 python batch: uint8 (N, 32, 32, 3) NHWC images and int64
    (N,) labels.  Raises ValueError naming the file when it is not one."""
    with open(file, "rb") as f:
        batch = _ArraysOnly(f, encoding="bytes").load()
    if not isinstance(batch, dict):
        raise ValueError(f"{file}: expected a pickled dict, got {type(batch).__name__}")
    batch = {k.decode("latin-1") if isinstance(k, bytes) else k: v for k, v in batch.items()}
    data, labels = batch.get("data"), np.asarray(batch.get("labels", []))
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
            and data.shape[1] == 3072 and labels.shape == (len(data),)):
        raise ValueError(f"{file}: expected data uint8 (N, 3072) and N labels, got "
                         f"{getattr(data, 'dtype', type(data).__name__)} {np.shape(data)} "
                         f"and {labels.shape} labels")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{file}: labels must lie in [0, 10)")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels.astype(np.int64)


def load_cifar10(data):
    """``(x_train, y_train), (x_test, y_test)`` from ``data`` (a folder that
    holds ``cifar-10-batches-py/``, or that folder): uint8 NHWC, int64.
    Raises FileNotFoundError naming the folder when a batch is missing."""
    folder = pathlib.Path(data)
    if (folder / "cifar-10-batches-py").is_dir():
        folder = folder / "cifar-10-batches-py"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"CIFAR-10 python batches not found in {folder} (missing "
                                f"{', '.join(missing)}); pass --data or set PYRESNET_DATA")
    parts = [read_batch(folder / n) for n in names]
    x_train = np.concatenate([x for x, _ in parts[:5]])
    y_train = np.concatenate([y for _, y in parts[:5]])
    return (x_train, y_train), parts[5]


class TrainBatches:
    """airbench's training pipeline (section 3, data augmentation) on
    normalised float32 images, kept NHWC-contiguous (the memory of NCHW
    channels_last tensors); batches come out as NCHW channels_last.

    Before the first epoch each image is mirrored with probability 1/2 and
    the set is reflect-padded by ``translate`` pixels.  Each epoch draws a
    fresh random translation in [-translate, translate]^2 per image, mirrors
    the whole set on odd epochs (alternating flip: every image is seen both
    ways in two consecutive epochs), shuffles, and yields full batches."""

    def __init__(self, images_nhwc, labels, batch_size, translate):
        import torch
        self.torch = torch
        self.labels, self.batch_size, self.pad = labels, batch_size, translate
        self.size = images_nhwc.shape[1]
        mirror = (torch.rand(len(images_nhwc)) < 0.5).view(-1, 1, 1, 1)
        images = torch.where(mirror, images_nhwc.flip(2), images_nhwc)
        if translate:  # reflect padding works on NCHW; channels_last keeps the memory NHWC
            images = torch.nn.functional.pad(images.permute(0, 3, 1, 2), (translate,) * 4,
                                             mode="reflect").permute(0, 2, 3, 1).contiguous()
        self.padded = images
        self.epoch = 0

    def __len__(self):
        return len(self.labels) // self.batch_size

    def _translate(self):
        """Every image cropped to ``size`` at its own random offset, in one
        gather: a strided view holds every (dy, dx) window of every image,
        and advanced indexing picks one window per image."""
        torch, p, s = self.torch, self.pad, self.size
        if p == 0:
            return self.padded
        n, c = len(self.padded), self.padded.shape[-1]
        sn, sh, sw, sc = self.padded.stride()
        windows = self.padded.as_strided((n, 2 * p + 1, 2 * p + 1, s, s, c),
                                         (sn, sh, sw, sh, sw, sc))
        dy, dx = torch.randint(0, 2 * p + 1, (n,)), torch.randint(0, 2 * p + 1, (n,))
        return windows[torch.arange(n), dy, dx]

    def __iter__(self):
        torch = self.torch
        images = self._translate()
        if self.epoch % 2 == 1:
            images = images.flip(2)
        self.epoch += 1
        order = torch.randperm(len(images))
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield images[idx].permute(0, 3, 1, 2), self.labels[idx]


# ---- the network -------------------------------------------------------------------

def make_net(widths, batchnorm_momentum, scaling_factor):
    """airbench94's network (module docstring), in float32, channels_last."""
    import torch
    from torch import nn

    def conv(cin, cout):
        c = nn.Conv2d(cin, cout, 3, padding="same", bias=False)
        with torch.no_grad():  # identity on the first `cin` filters, PyTorch's default on the rest
            nn.init.dirac_(c.weight[:cin])
        return c

    def norm(channels):
        bn = nn.BatchNorm2d(channels, eps=1e-12, momentum=1 - batchnorm_momentum)
        bn.weight.requires_grad_(False)  # no learned scale: the weight stays 1
        return bn

    layers = [nn.Conv2d(3, 24, 2, padding=0, bias=True), nn.GELU()]
    with torch.no_grad():
        layers[0].bias.zero_()
    cin = 24
    for width in widths:
        layers += [conv(cin, width), nn.MaxPool2d(2), norm(width), nn.GELU(),
                   conv(width, width), norm(width), nn.GELU()]
        cin = width

    class Scale(nn.Module):
        def forward(self, x):
            return x * scaling_factor

    layers += [nn.MaxPool2d(3), nn.Flatten(), nn.Linear(cin, 10, bias=False), Scale()]
    net = nn.Sequential(*layers)
    net[0].weight.requires_grad_(False)  # the whitening kernel is frozen
    return net.to(memory_format=torch.channels_last)


def whiten_(conv, images, eps):
    """Set the 2x2 ``conv``'s kernel to patch whitening of ``images`` (N, C,
    H, W): the eigenvectors of the patches' second-moment matrix (largest
    eigenvalue first) over ``sqrt(eigenvalue + eps)``, then their negatives
    (Jordan 2024, section 3)."""
    import torch
    c, kh, kw = conv.weight.shape[1:]
    patches = torch.nn.functional.unfold(images.float(), (kh, kw))  # (N, C*kh*kw, L), c-major
    patches = patches.transpose(1, 2).reshape(-1, c * kh * kw).double()
    moment = patches.T @ patches / len(patches)
    values, vectors = torch.linalg.eigh(moment)  # ascending
    values, vectors = values.flip(0), vectors.flip(1)
    filters = (vectors / torch.sqrt(values + eps)).T.reshape(-1, c, kh, kw)
    with torch.no_grad():
        conv.weight.copy_(torch.cat([filters, -filters]).float())


class Lookahead:
    """Lookahead (Zhang et al. 2019) as airbench applies it: a slow copy of
    every floating-point entry of ``net.state_dict()``; ``update(decay)``
    moves it to ``decay * slow + (1 - decay) * fast`` and copies it back."""

    def __init__(self, net):
        self.pairs = [(v, v.detach().clone()) for v in net.state_dict().values()
                      if v.is_floating_point()]

    def update(self, decay):
        import torch
        with torch.no_grad():
            for fast, slow in self.pairs:
                slow.lerp_(fast, 1 - decay)
                fast.copy_(slow)


# ---- evaluation --------------------------------------------------------------------

def predict(net, images, batch, tta, bf16):
    """Logits (float32, N x 10) of ``net`` in inference mode; with ``tta``
    airbench's 6-view weighted mean (module docstring)."""
    import torch
    import torch.nn.functional as F

    def both_ways(x):
        return 0.5 * net(x).float() + 0.5 * net(x.flip(-1)).float()

    net.eval()
    out = []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for x in images.split(batch):
            if not tta:
                out.append(net(x).float())
                continue
            padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
            s = x.shape[-1]
            shifted = [padded[:, :, :s, :s], padded[:, :, 2:, 2:]]
            shifted = [v.contiguous(memory_format=torch.channels_last) for v in shifted]
            out.append(0.5 * both_ways(x) + 0.25 * (both_ways(shifted[0])
                                                     + both_ways(shifted[1])))
    net.train()
    return torch.cat(out)


def accuracy(logits, labels):
    """The fraction (float) of rows of ``logits`` (N, 10) whose argmax is ``labels`` (N,)."""
    return float((logits.argmax(1) == labels).float().mean())


# ---- the run -----------------------------------------------------------------------

def build_parser():
    """The command line (argparse.ArgumentParser); see the module docstring."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=float, default=HYP["train_epochs"],
                   help="training epochs, fractional allowed (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--bf16", action="store_true",
                   help='torch.autocast("cpu", dtype=torch.bfloat16) for forward and loss')
    p.add_argument("--compile", action="store_true", help="torch.compile the network")
    p.add_argument("--subset", type=int, default=None, metavar="N",
                   help="train on the first N training images")
    p.add_argument("--test-subset", type=int, default=None, metavar="N",
                   help="test on the first N test images")
    p.add_argument("--batch-size", type=int, default=HYP["batch_size"])
    p.add_argument("--eval-batch", type=int, default=500, help="test images per forward pass")
    p.add_argument("--no-epoch-eval", action="store_true",
                   help="skip the per-epoch test passes (airbench's own timing excludes "
                        "them; pyresnet.train makes them)")
    p.add_argument("--data", default=os.environ.get("PYRESNET_DATA"),
                   help="folder with cifar-10-batches-py/ (default $PYRESNET_DATA)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the JSON record there")
    return p


def parse_args(argv=None):
    """The options, checked without importing torch (argparse's error, exit
    status 2, on bad ones: --epochs <= 0, --subset under one batch, ...)."""
    p = build_parser()
    args = p.parse_args(argv)
    if not args.epochs > 0:
        p.error(f"--epochs must be > 0, got {args.epochs}")
    for name in ("subset", "test_subset"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if min(args.threads, args.batch_size, args.eval_batch) < 1:
        p.error("--threads, --batch-size and --eval-batch must be >= 1")
    if args.subset is not None and args.subset < args.batch_size:
        p.error(f"--subset {args.subset} is smaller than one batch ({args.batch_size}): "
                "no full batch to train on")
    if not args.data:
        p.error("no data folder: pass --data or set PYRESNET_DATA")
    return args


def main(argv=None):
    """Train and evaluate as ``argv`` says; print the epochs and the final
    line, write ``--out``; returns the record (dict).  Raises
    FloatingPointError on a non-finite training loss, FileNotFoundError /
    ValueError for missing or malformed CIFAR-10 files."""
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    fma_peak = _load_by_path("fma_peak", HERE / "fma_peak.py")
    cpu = fma_peak.cpu_model()

    (x_train, y_train), (x_test, y_test) = load_cifar10(args.data)
    if args.subset is not None:
        x_train, y_train = x_train[:args.subset], y_train[:args.subset]
    if args.test_subset is not None:
        x_test, y_test = x_test[:args.test_subset], y_test[:args.test_subset]
    mean, std = torch.tensor(CIFAR_MEAN), torch.tensor(CIFAR_STD)

    def prepare(x):  # uint8 NHWC -> normalised float32 NHWC (contiguous)
        t = torch.from_numpy(np.ascontiguousarray(x)).float()
        return t.mul_(1 / (255 * std)).sub_(mean / std)

    train_nhwc = prepare(x_train)
    train_x = train_nhwc.permute(0, 3, 1, 2)  # NCHW views, channels_last in memory
    test_x = prepare(x_test).permute(0, 3, 1, 2)
    train_y, test_y = torch.from_numpy(y_train), torch.from_numpy(y_test)
    batches = TrainBatches(train_nhwc, train_y, args.batch_size, HYP["translate"])
    total_steps = math.ceil(len(batches) * args.epochs)

    net = make_net(HYP["widths"], HYP["batchnorm_momentum"], HYP["scaling_factor"])
    whiten_(net[0], train_x[:HYP["whiten_images"]], HYP["whiten_epsilon"])
    whiten_bias = net[0].bias

    # decoupled hyper-parameters -> PyTorch's SGD on the summed loss
    kilostep = 1024 * (1 + 1 / (1 - HYP["momentum"]))
    lr = HYP["lr"] / kilostep
    wd = HYP["weight_decay"] * args.batch_size / kilostep
    lr_bias = lr * HYP["bias_scaler"]
    named = [(n, p) for n, p in net.named_parameters() if p.requires_grad]
    bn_biases = [p for n, p in named if isinstance(net.get_submodule(n.rsplit(".", 1)[0]),
                                                   torch.nn.BatchNorm2d)]
    others = [p for n, p in named if not any(p is q for q in bn_biases)]
    optimizer = torch.optim.SGD([{"params": bn_biases, "lr": lr_bias, "weight_decay": wd / lr_bias},
                                 {"params": others, "lr": lr, "weight_decay": wd / lr}],
                                momentum=HYP["momentum"], nesterov=True)
    warmup = int(total_steps * HYP["warmup_fraction"])

    def lr_factor(step):  # the triangle: lr_start -> 1 at `warmup` -> lr_end at the last step
        if step < warmup:
            return HYP["lr_start"] + (1 - HYP["lr_start"]) * step / warmup
        return 1 + (HYP["lr_end"] - 1) * (step - warmup) / max(1, total_steps - warmup)

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    lookahead = Lookahead(net)
    model = torch.compile(net) if args.compile else net

    def train_loss(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(x)
            return F.cross_entropy(logits, y, label_smoothing=HYP["label_smoothing"],
                                   reduction="sum"), logits

    t_ready = time.perf_counter()
    print(f"airbench94 (PyTorch {torch.__version__}): {len(train_x)} training, {len(test_x)} "
          f"test images, {total_steps} steps of {args.batch_size}, {args.threads} threads, "
          f"{'bfloat16 autocast' if args.bf16 else 'float32'}"
          f"{', torch.compile' if args.compile else ''}; CPU {cpu}; "
          f"{t_ready - T_START:.1f} s to here", flush=True)
    step, train_s, eval_s, rows = 0, 0.0, 0.0, []
    for epoch in range(math.ceil(args.epochs)):
        whiten_bias.requires_grad_(epoch < HYP["whiten_bias_epochs"])
        t0 = time.perf_counter()
        seen, loss_sum, correct = 0, 0.0, 0
        for x, y in batches:
            loss, logits = train_loss(x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            loss_sum += float(loss.detach())
            correct += int((logits.detach().argmax(1) == y).sum())
            seen += len(y)
            if step % HYP["lookahead_every"] == 0:
                lookahead.update(HYP["lookahead_base"] * (step / total_steps) ** 3)
            if step >= total_steps:
                lookahead.update(1.0)  # end on the slow weights
                break
        seconds = time.perf_counter() - t0
        train_s += seconds
        row = {"epoch": epoch + 1, "steps": step, "loss": loss_sum / seen,
               "accuracy": correct / seen, "train_seconds": seconds}
        if not args.no_epoch_eval:
            t1 = time.perf_counter()
            row["test_accuracy"] = accuracy(predict(model, test_x, args.eval_batch, False,
                                                    args.bf16), test_y)
            row["eval_seconds"] = time.perf_counter() - t1
            eval_s += row["eval_seconds"]
        row["elapsed_seconds"] = time.perf_counter() - T_START
        rows.append(row)
        if not math.isfinite(row["loss"]):
            raise FloatingPointError(f"epoch {epoch + 1}: training loss is {row['loss']}")
        print(f"epoch {epoch + 1}: loss {row['loss']:.4f}  accuracy {row['accuracy']:.4f}  "
              f"test accuracy {row.get('test_accuracy', float('nan')):.4f}  "
              f"{seen / seconds:.0f} images/s  {seconds:.1f} s", flush=True)

    t2 = time.perf_counter()
    final = accuracy(predict(model, test_x, args.eval_batch, False, args.bf16), test_y)
    t3 = time.perf_counter()
    tta = accuracy(predict(model, test_x, args.eval_batch, True, args.bf16), test_y)
    t_end = time.perf_counter()
    record = {"framework": "torch", "recipe": "airbench94", "seconds_total": t_end - T_START,
              "seconds_training": train_s, "seconds_before_training": t_ready - T_START,
              "seconds_eval": eval_s + (t3 - t2), "seconds_tta": t_end - t3,
              "test_accuracy": final, "test_accuracy_tta": tta, "steps": step,
              "total_steps": total_steps, "epochs_requested": args.epochs, "seed": args.seed,
              "threads": args.threads, "bf16": args.bf16, "compile": args.compile,
              "train_images": len(train_x), "test_images": len(test_x),
              "batch_size": args.batch_size, "torch_version": torch.__version__,
              "python": platform.python_version(), "cpu": cpu, "epochs": rows,
              "command": [sys.executable] + sys.argv}
    print(f"final test accuracy {tta:.4f}  (with TTA; {final:.4f} without)  wall time "
          f"{record['seconds_total']:.1f} s  (training {train_s:.1f} s)", flush=True)
    if args.out:
        atomic = _load_by_path("pyresnet_atomic", ROOT / "pyresnet" / "utils" / "atomic.py")
        atomic.write_text(args.out, json.dumps(record, indent=1) + "\n")
    return record


if __name__ == "__main__":
    main()
