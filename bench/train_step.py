"""One ResNet training step, pyresnet against PyTorch CPU eager, side by side.

Same architecture (the CIFAR ResNet of depth 6n+2, He et al. 2015 section
4.2, with the projection shortcuts pyresnet.layers.ResidualBlock uses), same
batch of real CIFAR-10 images, SGD(0.1, momentum=0.9), both on all cores.
Steps alternate between the frameworks in rounds so that machine noise hits
both alike; reports the median seconds per step, images/s and the ratio.

    python bench/train_step.py [--depth 20] [--batch-size 128] [--steps 20]
"""
import argparse
import os
import pathlib
import pickle
import statistics
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent


def load_batch(data_dir, batch_size):
    with open(pathlib.Path(data_dir) / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        d = pickle.load(f, encoding="bytes")
    x = d[b"data"][:batch_size].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    x = ((x.astype(np.float32) / 255.0) - 0.47) / 0.25
    y = np.array(d[b"labels"][:batch_size], np.int32)
    return x, y


def pyresnet_step(depth, x, y, mode):
    import pyresnet as pr

    model = pr.applications.resnet_cifar(depth, num_classes=10, shortcut="projection")
    opt = pr.optimizers.SGD(0.1, momentum=0.9)
    loss_fn = pr.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(xb, yb):
        with pr.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(grads, model.trainable_weights))
        return loss

    if mode != "eager":
        step = pr.compile(step, jit_compile=(mode == "jit"))
    xt, yt = pr.Tensor(x), pr.Tensor(y)
    return lambda: float(step(xt, yt))


def torch_step(depth, x, y):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
            self.proj = None
            if stride != 1 or cin != cout:
                self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))

        def forward(self, h):
            out = F.relu(self.b1(self.c1(h)))
            out = self.b2(self.c2(out))
            return F.relu(out + (self.proj(h) if self.proj is not None else h))

    n = (depth - 2) // 6
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16, eps=1e-3, momentum=0.01),
              nn.ReLU()]
    cin = 16
    for filters, stride in [(16, 1), (32, 2), (64, 2)]:
        for i in range(n):
            layers.append(Block(cin, filters, stride if i == 0 else 1))
            cin = filters
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    model = nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous()
    yt = torch.tensor(y, dtype=torch.long)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xt), yt)
        loss.backward()
        opt.step()
        return loss.item()

    return step


def peak_rss_bytes():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="eager,compiled,jit,torch",
                    help="comma list of eager, compiled, jit (pyresnet) and torch")
    ap.add_argument("--data", default=os.environ.get(
        "PYRESNET_DATA", str(HERE.parents[1] / "shared" / "datasets")))
    args = ap.parse_args()
    x, y = load_batch(args.data, args.batch_size)
    steps = {}
    for mode in args.modes.split(","):
        if mode == "torch":
            try:
                steps[mode] = torch_step(args.depth, x, y)
            except ImportError:
                print("torch not installed: skipped")
        else:
            steps[mode] = pyresnet_step(args.depth, x, y, mode)
    times = {m: [] for m in steps}
    for m, fn in steps.items():  # warm-up (and tracing)
        fn(), fn()
    for _ in range(args.steps):
        for m, fn in steps.items():
            t0 = time.perf_counter()
            fn()
            times[m].append(time.perf_counter() - t0)
    base = statistics.median(times["torch"]) if "torch" in times else None
    print(f"ResNet-{args.depth}, batch {args.batch_size}, {args.steps} steps per mode, "
          f"{os.cpu_count()} cores")
    print("| mode | median s/step | images/s | vs torch eager |")
    print("|---|---|---|---|")
    for m, ts in times.items():
        med = statistics.median(ts)
        ratio = f"{base / med:.2f}x" if base else "-"
        print(f"| {m} | {med:.4f} | {args.batch_size / med:.0f} | {ratio} |")
    print(f"peak RSS {peak_rss_bytes() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
