"""Augmentation throughput on one CIFAR-10 epoch, pyresnet vs NumPy.

Two recipes, each over the 50,000 training images in batches of 128
(gathering the shuffled rows included), with float32 NHWC output:

  cifar   4-pixel zero pad + random 32x32 crop + horizontal flip + per-channel
          normalisation;
  regnet  Inception crop (area 0.08..1, ratio 3/4..4/3) resized to 32x32 +
          horizontal flip + PCA lighting + normalisation + mixup (alpha 0.2,
          soft labels).

Contenders, side by side in one run, each timed ``--repeats`` times (median):

  pyresnet           pyresnet.data recipes, prefetch 0: each batch computed in
                     C (one thread, GIL released) when asked for;
  pyresnet-worker    the same with prefetch 2: the C worker thread computes
                     ahead while the consumer waits -- the rate the
                     background worker sustains;
  numpy              a vectorised NumPy implementation of the same formulas;
  torchvision        transforms.v2 (per-image random transforms stacked into
                     batches, as a DataLoader does), if installed.

With ``--train`` it also measures what augmentation costs a ResNet-20
training epoch (batch 128): the same compiled train step fed by a Dataset
with the cifar recipe and prefetch on, against one fed by a Dataset that
only normalises; ``--train-steps`` limits the steps per epoch.

Usage: python bench/augment.py [--repeats 5] [--train] [--train-steps N] [--images N]
"""
import argparse
import os
import pathlib
import pickle
import statistics
import sys
import time

import numpy as np

import pyresnet as pr
from pyresnet.data import recipes
from pyresnet.ops import augment as A

BATCH = 128
MEAN = np.array(recipes.CIFAR10_MEAN, np.float32) * 255
STD = np.array(recipes.CIFAR10_STD, np.float32) * 255


def load_cifar10():
    """Training images (uint8 NHWC) and labels from the python-pickle release."""
    root = os.environ.get("PYRESNET_DATA") or \
        pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    folder = pathlib.Path(root) / "cifar-10-batches-py"
    xs, ys = [], []
    for i in range(1, 6):
        with open(folder / f"data_batch_{i}", "rb") as f:
            d = pickle.load(f, encoding="bytes")
        xs.append(d[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        ys.append(np.array(d[b"labels"]))
    return np.ascontiguousarray(np.concatenate(xs)), np.concatenate(ys).astype(np.int32)


# ---- NumPy ---------------------------------------------------------------------------

def numpy_cifar(x, y, rng):
    order = rng.permutation(len(x))
    for start in range(0, len(x), BATCH):
        idx = order[start:start + BATCH]
        xb, n = x[idx], len(idx)
        padded = np.pad(xb, ((0, 0), (4, 4), (4, 4), (0, 0)))
        oy, ox = rng.integers(0, 9, n), rng.integers(0, 9, n)
        rows = oy[:, None] + np.arange(32)
        cols = ox[:, None] + np.arange(32)
        cols = np.where(rng.random(n)[:, None] < 0.5, cols[:, ::-1], cols)
        out = padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
        yield (out.astype(np.float32) - MEAN) / STD, y[idx]


def numpy_boxes(n, h, w, rng, area=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's sampling, vectorised over images and the 10 attempts."""
    target = h * w * rng.uniform(*area, (n, 10))
    ar = np.exp(rng.uniform(np.log(ratio[0]), np.log(ratio[1]), (n, 10)))
    cw, ch = np.rint(np.sqrt(target * ar)), np.rint(np.sqrt(target / ar))
    ok = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = ok.argmax(1)
    found = ok[np.arange(n), first]
    ch = np.where(found, ch[np.arange(n), first], h).astype(np.int64)
    cw = np.where(found, cw[np.arange(n), first], w).astype(np.int64)
    top = (rng.random(n) * (h - ch + 1)).astype(np.int64)
    left = (rng.random(n) * (w - cw + 1)).astype(np.int64)
    top = np.where(found, top, (h - ch) // 2)
    left = np.where(found, left, (w - cw) // 2)
    return top, left, ch, cw


def numpy_regnet(x, y, rng, eigval, eigvec, num_classes=10, alpha=0.2, size=32):
    order = rng.permutation(len(x))
    shift_basis = eigvec * eigval * 255  # column j scaled by eigval[j]
    out_idx = np.arange(size) + 0.5
    for start in range(0, len(x), BATCH):
        idx = order[start:start + BATCH]
        xb, n = x[idx], len(idx)
        top, left, bh, bw = numpy_boxes(n, 32, 32, rng)
        sy = np.maximum(out_idx * bh[:, None] / size - 0.5, 0)
        sx = np.maximum(out_idx * bw[:, None] / size - 0.5, 0)
        y0, x0 = sy.astype(np.int64), sx.astype(np.int64)
        y1, x1 = np.minimum(y0 + 1, bh[:, None] - 1), np.minimum(x0 + 1, bw[:, None] - 1)
        wy, wx = (sy - y0).astype(np.float32), (sx - x0).astype(np.float32)
        flip = rng.random(n) < 0.5
        x0, x1, wx = (np.where(flip[:, None], a[:, ::-1], a) for a in (x0, x1, wx))
        y0, y1 = y0 + top[:, None], y1 + top[:, None]
        x0, x1 = x0 + left[:, None], x1 + left[:, None]
        b = np.arange(n)[:, None, None]
        img = xb.astype(np.float32)
        wy, wx = wy[:, :, None, None], wx[:, None, :, None]
        out = ((1 - wy) * ((1 - wx) * img[b, y0[:, :, None], x0[:, None, :]]
                           + wx * img[b, y0[:, :, None], x1[:, None, :]])
               + wy * ((1 - wx) * img[b, y1[:, :, None], x0[:, None, :]]
                       + wx * img[b, y1[:, :, None], x1[:, None, :]]))
        shift = (rng.normal(0, 0.1, (n, 3)) @ shift_basis.T).astype(np.float32)
        out = (out + shift[:, None, None, :] - MEAN) / STD
        lam = np.float32(rng.beta(alpha, alpha))
        perm = rng.permutation(n)
        onehot = np.eye(num_classes, dtype=np.float32)[y[idx]]
        yield lam * out + (1 - lam) * out[perm], lam * onehot + (1 - lam) * onehot[perm]


# ---- torchvision (optional) ------------------------------------------------------------

def torchvision_contenders(x, y, eigval, eigvec):
    """transforms.v2 draws one set of parameters per call, so random
    per-image transforms are called per image (as in a DataLoader), then
    stacked; lighting (no torchvision transform) and mixup run batched."""
    try:
        import torch
        from torchvision.transforms import v2
    except ImportError:
        return {}
    torch.set_num_threads(pr.get_num_threads())
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)  # NCHW uint8 view
    yt = torch.from_numpy(y).long()
    mean, std = (MEAN / 255).tolist(), (STD / 255).tolist()
    basis = torch.from_numpy((eigvec * eigval).astype(np.float32))  # [0, 1] units

    def cifar():
        t = v2.Compose([v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()])
        order = torch.randperm(len(x))
        for start in range(0, len(x), BATCH):
            idx = order[start:start + BATCH]
            xb = torch.stack([t(img) for img in xt[idx]])
            yield v2.functional.normalize(xb.float() / 255, mean, std), yt[idx]

    def regnet():
        t = v2.Compose([v2.RandomResizedCrop(32, antialias=False), v2.RandomHorizontalFlip()])
        mixup = v2.MixUp(alpha=0.2, num_classes=10)
        order = torch.randperm(len(x))
        for start in range(0, len(x), BATCH):
            idx = order[start:start + BATCH]
            xb = torch.stack([t(img) for img in xt[idx]]).float() / 255
            shift = (torch.randn(len(idx), 3) * 0.1) @ basis.T
            xb = v2.functional.normalize(xb + shift[:, :, None, None], mean, std)
            yield mixup(xb, yt[idx])

    return {("cifar", "torchvision"): cifar, ("regnet", "torchvision"): regnet}


# ---- timing --------------------------------------------------------------------------

def epoch_time(make_batches):
    t0 = time.perf_counter()
    n = 0
    for xb, _ in make_batches():
        n += len(xb)
    return time.perf_counter() - t0, n


def bench_throughput(x, y, repeats):
    eigval, eigvec = A.rgb_pca(x)
    rng = np.random.default_rng(0)
    # Datasets are built once (the regnet one computes the RGB PCA of x);
    # each timed epoch is a new pass over them.
    datasets = {(recipe, impl): make(prefetch)
                for impl, prefetch in (("pyresnet", 0), ("pyresnet-worker", 2))
                for recipe, make in (
                    ("cifar", lambda p: recipes.cifar_train_dataset(x, y, BATCH, seed=1,
                                                                    prefetch=p)),
                    ("regnet", lambda p: recipes.regnet_train_dataset(x, y, 10, BATCH, seed=1,
                                                                      prefetch=p)))}
    contenders = {key: (lambda ds=ds: ds) for key, ds in datasets.items()}
    contenders[("cifar", "numpy")] = lambda: numpy_cifar(x, y, rng)
    contenders[("regnet", "numpy")] = lambda: numpy_regnet(x, y, rng, eigval, eigvec)
    contenders = dict(sorted(contenders.items()))
    contenders.update(torchvision_contenders(x, y, eigval, eigvec))
    times = {key: [] for key in contenders}
    for _ in range(repeats):  # interleaved, so drifts in machine load hit every contender
        for key, make in contenders.items():
            times[key].append(epoch_time(make)[0])
    print(f"\n## One CIFAR-10 epoch ({len(x)} images, batch {BATCH}, "
          f"{pr.get_num_threads()} threads, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}, GOMP_SPINCOUNT="
          f"{os.environ.get('GOMP_SPINCOUNT', 'unset')}), median of {repeats}\n")
    print("| recipe | implementation | epoch s | images/s | vs numpy |")
    print("|---|---|---:|---:|---:|")
    for (recipe, impl), ts in times.items():
        med = statistics.median(ts)
        base = statistics.median(times[(recipe, "numpy")])
        print(f"| {recipe} | {impl} | {med:.3f} | {len(x) / med:,.0f} | {base / med:.1f}x |")


def bench_training(x, y, steps, repeats):
    """What augmentation costs a ResNet-20 training epoch with prefetch on:
    the same compiled train step fed by the cifar recipe and by a pipeline
    that only normalises, epochs interleaved; the time the step loop waits
    for its next batch is reported separately from the step time."""
    from pyresnet.data import Dataset

    pr.utils.set_random_seed(0)
    n = min(len(x), steps * BATCH)
    x, y = x[:n], y[:n]
    model = pr.applications.resnet20()
    model.compile(optimizer=pr.optimizers.SGD(0.1, momentum=0.9),
                  loss=pr.losses.SparseCategoricalCrossentropy(from_logits=True))
    pipelines = {
        "normalise only": Dataset.from_tensor_slices((x, y)).shuffle(n, seed=0).batch(BATCH)
        .map(recipes.normalization()).prefetch(2),
        "cifar augmentation": recipes.cifar_train_dataset(x, y, BATCH, seed=0, prefetch=2),
    }
    model.fit(pipelines["normalise only"], epochs=1, verbose=0)  # builds and traces the step
    train = model.make_train_function()
    epoch, wait, cpu = ({k: [] for k in pipelines} for _ in range(3))
    for r in range(repeats):
        for name in list(pipelines)[::1 if r % 2 == 0 else -1]:  # ABBA against load drift
            waited, t_start = 0.0, time.perf_counter()
            batches = iter(pipelines[name])
            while True:
                t0 = time.perf_counter()
                batch = next(batches, None)
                waited += time.perf_counter() - t0
                if batch is None:
                    break
                float(train(batch)["loss"])
            epoch[name].append(time.perf_counter() - t_start)
            wait[name].append(waited)
            cpu[name].append(batches.cpu_seconds)
    base = statistics.median(epoch["normalise only"])
    print(f"\n## ResNet-20 training epoch of {n} images (batch {BATCH}, compiled step), "
          f"prefetch 2, median of {repeats}\n")
    print("| input pipeline | epoch s | pipeline CPU s (worker) | waiting for batches s | "
          "vs normalise only |")
    print("|---|---:|---:|---:|---:|")
    for name in pipelines:
        med = statistics.median(epoch[name])
        print(f"| {name} | {med:.2f} | {statistics.median(cpu[name]):.3f} | "
              f"{statistics.median(wait[name]):.3f} | {100 * (med / base - 1):+.1f}% |")
    extra = statistics.median(cpu["cifar augmentation"]) - statistics.median(cpu["normalise only"])
    print(f"\nCPU the augmentation adds: {extra:.3f} s per epoch = "
          f"{100 * extra / base:.2f}% of the epoch's wall time")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--train", action="store_true")
    p.add_argument("--train-steps", type=int, default=391)
    p.add_argument("--train-repeats", type=int, default=3)
    p.add_argument("--images", type=int, default=None,
                   help="use the first N training images (default: all 50,000)")
    args = p.parse_args(argv)
    x, y = load_cifar10()
    if args.images is not None:
        x, y = x[:args.images], y[:args.images]
    bench_throughput(x, y, args.repeats)
    if args.train:
        bench_training(x, y, args.train_steps, args.train_repeats)


if __name__ == "__main__":
    sys.exit(main())
