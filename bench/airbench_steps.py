"""Time airbench94's compiled training step and extrapolate the recipe's
training time (Jordan 2024; pyresnet.applications.airbench).

    python bench/airbench_steps.py --steps 20 [--mixed-precision] [--frozen-bias]

Builds the network, compiles it with the recipe's optimizer and loss, runs
2 warm-up steps (tracing, memory plans), then times ``--steps`` steps of
batch 1024 on real CIFAR-10 batches from the recipe's pipeline and prints
the seconds per step and ``steps * 476`` (the recipe's step count: 48 steps
per epoch, 9.9 epochs), plus one timed inference pass of 2,000 test images
with test-time augmentation scaled to 10,000.
"""
import argparse
import math
import time

import numpy as np

import pyresnet as pr
from pyresnet.applications import airbench
from pyresnet.train import airbench_datasets


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--mixed-precision", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="also print the per-op profile of one more step")
    p.add_argument("--no-tta", action="store_true", help="skip the TTA timing")
    p.add_argument("--batch", type=int, default=1024, help="images per step (the recipe's 1024)")
    p.add_argument("--widths", default="64,256,256", help="the groups' widths (smoke runs)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--frozen-bias", action="store_true",
                   help="the step of epochs 4 on, the whitening bias frozen (FreezeAfter)")
    args = p.parse_args()
    (x, y), (xt, yt) = pr.datasets.cifar10.load_data()
    r = pr.data.recipes
    mean, std = (np.asarray(v, np.float32) for v in (r.CIFAR10_MEAN, r.CIFAR10_STD))
    if args.mixed_precision:
        pr.mixed_precision.set_global_policy("mixed_bfloat16")
    t0 = time.perf_counter()
    widths = tuple(int(w) for w in args.widths.split(","))
    model = airbench.airbench94(widths=widths, whitening_images=(
        (x[:5000] / np.float32(255) - mean) / std).astype(np.float32))
    print(f"build + whitening {time.perf_counter() - t0:.1f} s", flush=True)
    train = airbench_datasets(x, y, args.batch, seed=0)
    setup = airbench.training_setup(model, 48)  # (the recipe's schedule and step count)
    model.compile(optimizer=setup["optimizer"], loss=setup["loss"], metrics=["accuracy"])
    if args.frozen_bias:
        model.get_layer("whiten").bias.trainable = False
    step = model.make_train_function()
    it = iter(train)
    for _ in range(args.warmup):
        step(next(it))
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.steps):
        out = step(next(it))
    per_step = (time.perf_counter() - t0) / args.steps
    cpu = (time.process_time() - c0) / args.steps
    print(f"CPU time {cpu:.2f} s/step (all threads; {cpu / per_step:.2f} cores busy on "
          "average)", flush=True)
    total = setup["total_steps"]
    print(f"{per_step:.3f} s/step (batch {args.batch}, {args.steps} steps, loss {float(out['loss']):.3f}); "
          f"{total} steps -> {per_step * total / 60:.1f} min of training", flush=True)
    if args.profile:
        batch = next(it)
        fn = step.get_concrete_function(batch) if hasattr(step, "get_concrete_function") \
            else None
        if fn is not None:
            print(fn.profile(batch).by_op.top(15), flush=True)
    if args.no_tta:
        return
    tta = pr.models.TestTimeAugmentation(model)
    tta.compile(loss=setup["loss"], metrics=["accuracy"])
    test = r.eval_dataset(xt[:2000], yt[:2000], batch_size=1000)
    tta.evaluate(test, verbose=0, steps=1)
    t0 = time.perf_counter()
    tta.evaluate(test, verbose=0)
    ev = (time.perf_counter() - t0) * 5
    print(f"TTA evaluation of 10,000 test images ~{ev:.0f} s; estimated run "
          f"{(per_step * total + ev) / 60:.1f} min + data loading", flush=True)
    print(f"threads {pr.get_num_threads()}; ceil check {math.ceil(48 * 9.9)}")


if __name__ == "__main__":
    main()
