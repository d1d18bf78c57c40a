"""Data-parallel training on real MPI ranks (pyresnet.distribute).

``mpiexec -n 2`` starts tests/mpi_worker.py with one kernel thread per rank
(MPICH from the ``mpich`` wheel of the test extra); the same training runs
in this process without distribution as the reference:

* fit() of a model without batch normalization on two ranks with half of
  each global batch ends with the weights (and the loss curve) of one
  process on the whole batches, within float32 rounding; so does a
  compiled custom step with DistributedOptimizer on DataParallel.shard();
* the weights of both ranks are bit-identical, also for a model with batch
  normalization (per-rank batch statistics, moving statistics averaged at
  each epoch's end);
* only rank 0 prints progress;
* a rank that raises ends the job with its traceback shown, well within
  the timeout, instead of leaving the other rank in an allreduce;
* two ranks in separate network namespaces joined by a veth pair (made
  here with ``ip netns``, as root, and removed after) allreduce over TCP
  through the kernel's network stack, the veth's byte counters showing the
  traffic.

In this process MPI is a world of one rank (tests/op_table.py checks the
ops there); the error paths are checked here too.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import pyresnet as pr
import mpi_worker

WORKER = pathlib.Path(__file__).resolve().parent / "mpi_worker.py"
TIMEOUT = 240  # seconds; a hang fails the test instead of the suite


def mpiexec():
    """The mpiexec of the environment running the tests (the mpich wheel
    puts it beside the interpreter)."""
    here = pathlib.Path(sys.executable).parent / "mpiexec"
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpiexec not found: pip install '.[test]' installs mpi4py and MPICH")
    return found


def run_ranks(scenario, out_dir, seed, n=2):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    t0 = time.monotonic()
    proc = subprocess.run([mpiexec(), "-n", str(n), sys.executable, str(WORKER), scenario,
                           str(out_dir), str(seed)], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT, cwd=tempfile.gettempdir())
    return proc, time.monotonic() - t0


def load(out_dir, name, rank):
    with np.load(out_dir / f"{name}_rank{rank}.npz") as f:
        return {k: f[k] for k in f.files}


def test_two_ranks_on_half_batches_equal_one_process_on_whole_batches(tmp_path, rng,
                                                                      cifar10_dir):
    seed = int(rng.integers(2**31))
    proc, _ = run_ranks("fit", tmp_path, seed)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # only rank 0 prints progress (verbose=2: one line per epoch)
    assert proc.stdout.count("Epoch 1/2") == 1, proc.stdout
    assert proc.stdout.count("Epoch 2/2") == 1, proc.stdout

    for name in ("plain", "custom", "bn"):
        r0, r1 = load(tmp_path, name, 0), load(tmp_path, name, 1)
        assert r0.keys() == r1.keys()
        for k in r0:
            np.testing.assert_array_equal(r0[k], r1[k], err_msg=f"{name}: {k} differs by rank")

    threads = pr.get_num_threads()
    pr.set_num_threads(1)
    try:
        x, y = mpi_worker.cifar_subset()
        model, history = mpi_worker.train_fit(seed, x, y, batch_norm=False)
        custom = mpi_worker.train_custom(seed, x, y)
    finally:
        pr.set_num_threads(threads)
    for name, ref in (("plain", mpi_worker.weights_of(model)),
                      ("custom", mpi_worker.weights_of(custom))):
        got = load(tmp_path, name, 0)
        for k, want in ref.items():
            # float32: the mean of two half-batch means vs one whole-batch mean
            np.testing.assert_allclose(got[k], want, rtol=1e-4, atol=2e-6,
                                       err_msg=f"{name}: {k}")
        assert any(not np.array_equal(got[k], mpi_worker.weights_of(
            mpi_worker.make_model(seed, False))[k]) for k in ref), f"{name}: nothing trained"
    np.testing.assert_allclose(load(tmp_path, "plain", 0)["loss"], history.history["loss"],
                               rtol=1e-5)


def test_a_rank_that_raises_ends_the_job_with_its_error(tmp_path, rng):
    proc, seconds = run_ranks("raise", tmp_path, int(rng.integers(2**31)))
    assert proc.returncode != 0
    assert "RuntimeError: rank 1 failed on purpose" in proc.stderr, proc.stderr[-4000:]
    assert "[rank 1 of 2]" in proc.stderr
    assert "rank 0 passed the second allreduce" not in proc.stdout
    assert seconds < 60, f"the job took {seconds:.0f} s to end"


@pytest.mark.parametrize("collective", ["allreduce", "broadcast_variables"])
def test_a_stopped_rank_ends_the_job_after_the_collective_timeout(tmp_path, collective):
    """A rank alive but not answering (SIGSTOP) no longer leaves the others in
    MPI_Allreduce forever: after the 2 s timeout rank 0 names the collective
    and the rank it waited for on stderr, and the job ends non-zero."""
    seed = 1 if collective == "broadcast_variables" else 0
    proc, seconds = run_ranks("stop", tmp_path, seed)
    assert proc.returncode != 0, proc.stdout
    assert "passed the second collective" not in proc.stdout
    what = "broadcast_variables #2" if seed else "allreduce #2 (4 floats)"
    assert f"rank 0 of 2 waited 2.0 s in {what} for rank 1 (stopped, hung or dead?)" \
        in proc.stderr, proc.stderr[-4000:]
    assert seconds < 40, f"the job took {seconds:.0f} s to end"


def test_collective_timeout_argument_checks():
    before = pr.distribute.collective_timeout()
    assert before == pr.distribute.DEFAULT_COLLECTIVE_TIMEOUT == 600.0
    for bad in (-1, float("nan"), "5", True, None):
        with pytest.raises(ValueError, match="collective_timeout must be"):
            pr.distribute.set_collective_timeout(bad)
    assert pr.distribute.collective_timeout() == before
    try:
        pr.distribute.set_collective_timeout(0)
        assert pr.distribute.collective_timeout() == 0.0
    finally:
        pr.distribute.set_collective_timeout(before)


def ip(*args):
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=60)


def rx_bytes(ns, dev):
    out = ip("-n", ns, "-s", "link", "show", dev).stdout.splitlines()
    return int(out[[i for i, line in enumerate(out) if "RX:" in line][0] + 1].split()[0])


def test_ranks_in_separate_network_namespaces_allreduce_over_veth(tmp_path):
    """Rank 0 in namespace A (10.77.0.1), rank 1 in B (10.77.0.2), a veth
    pair between them.  MPIR_CVAR_NOLOCAL=1 makes MPICH treat every rank as
    on another node (no shared memory) and UCX_TLS=tcp with UCX_NET_DEVICES
    the veth makes UCX send over it."""
    tag = f"prt{os.getpid() % 100000}"
    ns, dev = (f"{tag}a", f"{tag}b"), (f"{tag}va", f"{tag}vb")
    made = []
    try:
        for name in ns:
            ip("netns", "add", name)
            made.append(name)
        ip("link", "add", dev[0], "type", "veth", "peer", "name", dev[1])
        for k in (0, 1):
            ip("link", "set", dev[k], "netns", ns[k])
            ip("-n", ns[k], "addr", "add", f"10.77.0.{k + 1}/24", "dev", dev[k])
            ip("-n", ns[k], "link", "set", dev[k], "up")
            ip("-n", ns[k], "link", "set", "lo", "up")
        before = rx_bytes(ns[0], dev[0])
        cmd = [mpiexec(), "-genv", "MPIR_CVAR_NOLOCAL", "1", "-genv", "UCX_TLS", "tcp"]
        for k in (0, 1):
            cmd += [":"] * k + ["-n", "1", "-env", "UCX_NET_DEVICES", dev[k], "ip", "netns",
                                "exec", ns[k], sys.executable, str(WORKER), "sum",
                                str(tmp_path), "0"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                              env=dict(os.environ, OMP_NUM_THREADS="1"),
                              cwd=tempfile.gettempdir())
        assert proc.returncode == 0, proc.stderr[-4000:]
        with np.load(tmp_path / "sum.npz") as f:
            for key in ("first", "last"):
                np.testing.assert_array_equal(f[key], np.full(269722, 3, np.float32))
        # 20 allreduces of 1.08 MB: a ring sends half of it each way per call
        received = rx_bytes(ns[0], dev[0]) - before
        assert received > 20 * 269722 * 4 / 2, f"only {received} bytes crossed the veth"
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=60)


def test_allreduce_errors():
    pr.distribute.init()  # a world of one rank in this process
    with pytest.raises(ValueError, match="op must be 'sum' or 'mean', got 'max'"):
        pr.ops.allreduce(np.ones(3, np.float32), op="max")
    with pytest.raises(TypeError, match="allreduce: input 0 must be float32, got int32"):
        pr.ops.allreduce(np.ones(3, np.int32))
    with pytest.raises(TypeError, match="must be a Variable"):
        pr.ops.allreduce_inplace(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="expected Variables, got ndarray"):
        pr.distribute.broadcast_variables([np.ones(3, np.float32)])
    with pytest.raises(ValueError, match=r"root_rank must be in \[0, 1\), got 1"):
        pr.distribute.broadcast_variables([], root_rank=1)
    with pytest.raises(ValueError, match="bucket_bytes must be an int >= 0, got -1"):
        pr.distribute.DataParallel(bucket_bytes=-1)
    bucket = pr.Variable(np.zeros(6, np.float32))
    with pytest.raises(ValueError, match=r"flat_assign: elements \[4, 4 \+ 4\) do not lie in "
                                         "a buffer of 6 elements"):
        pr.ops.flat_assign(bucket, np.ones((2, 2), np.float32), 4)
    np.testing.assert_array_equal(bucket, np.zeros(6, np.float32))
    assert (pr.distribute.size(), pr.distribute.rank()) == (1, 0)
    v = pr.Variable(np.arange(4, dtype=np.float32))
    pr.distribute.broadcast_variables([v])
    np.testing.assert_array_equal(v, np.arange(4, dtype=np.float32))


def test_without_mpi4py_the_core_imports_and_init_says_what_to_install():
    """A process where mpi4py cannot be imported (as after a plain ``pip
    install .``): pyresnet imports and trains; the collectives refuse with
    the install command."""
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "import numpy as np, pyresnet as pr\n"
        "assert pr.ops.relu(np.float32([-1, 2])).numpy().tolist() == [0, 2]\n"
        "try:\n    pr.ops.allreduce(np.ones(2, np.float32))\n"
        "except RuntimeError as e:\n    print('op:', e)\n"
        "try:\n    pr.distribute.init()\n"
        "except ImportError as e:\n    print('init:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=tempfile.gettempdir())
    assert proc.returncode == 0, proc.stderr
    assert "op: allreduce: MPI is not initialised in this process: call " \
           "pyresnet.distribute.init() first" in proc.stdout
    assert "init: pyresnet.distribute needs mpi4py and an MPI library: pip install " \
           "'pyresnet[distributed]'" in proc.stdout
