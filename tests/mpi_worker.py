"""Training runs that tests/test_distribute.py starts on real MPI ranks
(``mpiexec -n 2 python tests/mpi_worker.py SCENARIO OUT_DIR SEED``) and, for
the reference, calls in one process without any distribution.

Scenarios:
  fit     -- three trainings, each saved per rank as OUT_DIR/<name>_rank<r>.npz:
             ``plain``  fit() of a model without batch normalization (global
                        batch 16, shuffled, 2 epochs, SGD with momentum;
                        all gradients in one bucket),
             ``custom`` a pyresnet.compile'd step with DistributedOptimizer
                        on DataParallel.shard()s of each global batch
                        (1 KiB buckets: some gradients packed, some alone),
             ``bn``     fit() of a model with batch normalization (weights
                        must agree across ranks, moving statistics included;
                        one allreduce per gradient);
             fit prints its progress (verbose=2), rank 0 only.
  raise   -- rank 1 raises after one allreduce while rank 0 waits in the
             next one: the job must end, showing the error.
  stop    -- rank 1 stops (SIGSTOP) after one allreduce; rank 0 must time out
             in the next collective (an allreduce, or with an odd SEED the
             barrier of broadcast_variables) and end the job.
  sum     -- 20 allreduces of ResNet-20's gradient size (269,722 floats of
             rank + 1); rank 0 writes OUT_DIR/sum.npz with the first result.
"""
import pathlib
import sys

import numpy as np

import pyresnet as pr
from pyresnet import layers
from train_steps import train_step_fn

GLOBAL_BATCH = 16


def cifar_subset(n=64):
    """The first n CIFAR-10 training images (float32, scaled to [0, 1])."""
    (x, y), _ = pr.datasets.cifar10.load_data()
    return x[:n].astype(np.float32) / 255.0, y[:n].astype(np.int32)


def make_model(seed, batch_norm):
    pr.utils.set_random_seed(seed)
    inputs = layers.Input((32, 32, 3))
    h = layers.Conv2D(8, 3, strides=2, padding="same", use_bias=not batch_norm)(inputs)
    if batch_norm:
        h = layers.BatchNormalization()(h)
    h = layers.ReLU()(h)
    h = layers.Conv2D(8, 3, strides=2, padding="same")(h)
    h = layers.ReLU()(h)
    h = layers.GlobalAveragePooling2D()(h)
    return pr.Model(inputs, layers.Dense(10)(h))


def loss_fn():
    return pr.losses.SparseCategoricalCrossentropy(from_logits=True)


def train_fit(seed, x, y, batch_norm, verbose=0):
    model = make_model(seed, batch_norm)
    model.compile(optimizer=pr.optimizers.SGD(0.05, momentum=0.9), loss=loss_fn(),
                  metrics=["accuracy"])
    pr.utils.set_random_seed(seed + 1)  # the shuffling seed (rank 0's is broadcast)
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=True, verbose=verbose)
    return model, history


def train_custom(seed, x, y, strategy=None):
    model = make_model(seed, batch_norm=False)
    optimizer = pr.optimizers.SGD(0.05, momentum=0.9)
    if strategy is not None:
        optimizer = pr.distribute.DistributedOptimizer(optimizer, bucket_bytes=1024)
        pr.distribute.broadcast_variables(model.weights)
    lossf = loss_fn()

    step = pr.compile(train_step_fn(model, lossf, optimizer))
    for start in range(0, 3 * GLOBAL_BATCH, GLOBAL_BATCH):
        xb, yb = x[start:start + GLOBAL_BATCH], y[start:start + GLOBAL_BATCH]
        if strategy is not None:
            xb, yb = strategy.shard(xb), strategy.shard(yb)
        step(xb, yb)
    return model


def weights_of(model):
    return {f"{i}_{w.name}": np.array(w) for i, w in enumerate(model.weights)}


def scenario_fit(out, seed):
    x, y = cifar_subset()
    strategy = pr.distribute.DataParallel()
    r = strategy.rank
    with strategy.scope():
        plain, history = train_fit(seed, x, y, batch_norm=False, verbose=2)
        np.savez(out / f"plain_rank{r}.npz", loss=np.array(history.history["loss"]),
                 **weights_of(plain))
    with pr.distribute.DataParallel(bucket_bytes=0).scope():
        bn, _ = train_fit(seed, x, y, batch_norm=True)
        np.savez(out / f"bn_rank{r}.npz", **weights_of(bn))
    np.savez(out / f"custom_rank{r}.npz", **weights_of(train_custom(seed, x, y, strategy)))


def scenario_raise(out, seed):
    size, rank = pr.distribute.init()
    pr.distribute.allreduce(np.ones(4, np.float32))
    if rank == 1:
        raise RuntimeError("rank 1 failed on purpose")
    pr.distribute.allreduce(np.ones(4, np.float32))  # waits for rank 1 forever unless aborted
    print("rank 0 passed the second allreduce", flush=True)


def scenario_stop(out, seed):
    """Rank 1 stops (SIGSTOP: alive, answering nothing) after one allreduce;
    rank 0 must give up on the next one after the 2 s timeout, naming it and
    rank 1.  ``seed`` odd: the stop comes before broadcast_variables instead
    (mpi4py's broadcast, guarded by a timed barrier)."""
    import os
    import signal
    size, rank = pr.distribute.init(collective_timeout=2)
    assert pr.distribute.collective_timeout() == 2.0
    pr.distribute.allreduce(np.ones(4, np.float32))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    if seed % 2:
        pr.distribute.broadcast_variables([pr.Variable(np.ones(3, np.float32))])
    else:
        pr.distribute.allreduce(np.ones(4, np.float32))
    print(f"rank {rank} passed the second collective", flush=True)


def scenario_sum(out, seed):
    size, rank = pr.distribute.init()
    x = np.full(269722, rank + 1, np.float32)
    results = [np.array(pr.ops.allreduce(x)) for _ in range(20)]
    if rank == 0:
        np.savez(out / "sum.npz", first=results[0], last=results[-1])


if __name__ == "__main__":
    pr.set_num_threads(1)
    scenario, out, seed = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
    {"fit": scenario_fit, "raise": scenario_raise, "stop": scenario_stop,
     "sum": scenario_sum}[scenario](out, seed)
