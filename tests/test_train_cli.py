"""The main job, run as a user runs it: ``python -m pyresnet.train`` in a
subprocess on a tiny subset of the real CIFAR-10 ($PYRESNET_DATA), one epoch,
for each model family and each recipe flag of the command line; its exit
status, its per-epoch lines and its final line are checked, and so are its
failures (bad arguments, missing data: a non-zero status and a message).

No run touches the network: downloads go to a closed local port and the
cache is a private folder.

The README's shell blocks are checked by tests/test_readme.py.
"""
import json
import math
import os
import pickle
import re
import socket
import subprocess
import tempfile
import time
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import pyresnet as pr
from pyresnet import train
from child_process import kill_after
from conftest import data_root
from test_tensorboard import read_scalars

FINAL = re.compile(r"final test accuracy (\d\.\d{4})  wall time (\d+\.\d) s  "
                   r"peak RSS (\d+\.\d\d) GiB")
EPOCH = re.compile(r"epoch (\d+): loss (\S+)  accuracy (\S+)  test loss (\S+)  test accuracy (\S+)  "
                   r"(\d+) images/s  (\d+\.\d) s")
RECIPE_LINE = re.compile(r"recipe (cifar|regnet): (sgd|adam|adamw|rmsprop) lr \S+(, momentum "
                         r"\S+( nesterov)?)?, (no weight decay|weight decay \S+ (coupled|"
                         r"decoupled) \(Keras weight_decay \S+\)), (cosine|step|onecycle) "
                         r"schedule, warmup \S+ epochs, (projection|zero_pad) shortcuts.*")
TINY = ["--subset", "48", "--test-subset", "40", "--batch-size", "16", "--epochs", "1",
        "--verbose", "0"]


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/"


@pytest.fixture
def env(tmp_path):
    """The environment of a user who set $PYRESNET_DATA, with no network;
    commands run in the test's own folder ``work`` (the run folders land in
    its ``runs/``)."""
    e = dict(os.environ)
    e.update(PYRESNET_DATA=str(data_root()), PYRESNET_CACHE_DIR=str(tmp_path / "cache"),
             PYRESNET_DATASETS_URL=closed_port_url(), HOME=str(tmp_path / "home"))
    (tmp_path / "work").mkdir()
    e[CWD] = str(tmp_path / "work")
    return e


CWD = "PYRESNET_TEST_CWD"  # the env entry naming the folder commands run in


def run(args, env, module="pyresnet.train", timeout=300):
    """Run ``python -m module args``; return (status, stdout lines, stderr)."""
    # from outside the checkout: `-m` puts the current folder first on sys.path, and the
    # checkout's unbuilt sources must not shadow the installed package (CI has no build there)
    p = subprocess.run([sys.executable, "-m", module, *args], env=env,
                       cwd=env.get(CWD, tempfile.gettempdir()),
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout.strip().splitlines(), p.stderr


def check_success(status, lines, err, n_train, n_test, epochs=1, dataset="cifar10",
                  test_loss_below=20, notice=None):
    """Exit 0; the kernel notice (``notice``, default this process's), the
    header, the recipe line, one sane line per epoch, and the final line last."""
    assert status == 0, f"exit status {status}\nstdout: {lines}\nstderr: {err}"
    assert lines[0] == (notice or pr.config.kernel_notice()), lines[0]  # no silent slow path
    lines = lines[1:]
    assert lines[0].startswith(f"{dataset}: {n_train} training, {n_test} test images; "), lines[0]
    assert RECIPE_LINE.fullmatch(lines[1]), lines[1]
    epochs_seen = [EPOCH.fullmatch(line) for line in lines[2:-1]]
    assert all(epochs_seen) and [int(m[1]) for m in epochs_seen] == list(range(1, epochs + 1)), \
        lines
    for m in epochs_seen:
        loss, acc, test_loss, test_acc = map(float, m.group(2, 3, 4, 5))
        assert 0 < loss < 20 and 0 < test_loss < test_loss_below  # finite, near log(classes)
        # accuracies are fractions of the images: multiples of 1/n
        assert 0 <= acc <= 1 and abs(acc * n_train - round(acc * n_train)) < 0.01
        assert 0 <= test_acc <= 1 and abs(test_acc * n_test - round(test_acc * n_test)) < 0.01
    final = FINAL.fullmatch(lines[-1])
    assert final, f"last line is not the final line: {lines[-1]!r}"
    assert float(final[1]) == float(epochs_seen[-1][5])  # the last epoch's test accuracy
    assert float(final[2]) > 0 and 0 < float(final[3]) < 16
    return epochs_seen


def _screen(raw):
    """The lines a terminal shows after ``raw`` (carriage returns overwrite
    the line from its start; a progress bar erased with spaces is blank)."""
    lines = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        shown = ""
        for part in line.split("\r"):  # each part overwrites the start of the line
            shown = part + shown[len(part):]
        lines.append(shown.rstrip())
    return [line for line in lines if line]


def _epoch_lines_once(lines, epochs, run_dir):
    """Each epoch shows once: its own line, no second summary (Keras's
    "Epoch k/n" line or a finished bar); metrics.csv has a row per epoch."""
    for k in range(1, epochs + 1):
        assert sum(line.startswith(f"epoch {k}: loss") for line in lines) == 1, lines
        assert not any(f"Epoch {k}/{epochs}" in line for line in lines), lines
    rows = train.read_metrics(run_dir / "metrics.csv")
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1))


@pytest.mark.parametrize("verbose", [None, "1", "2"])
def test_each_epoch_line_is_printed_once_to_a_pipe(env, verbose):
    """stdout a pipe (``... | cat``, a log file, CI): the epoch lines once, at
    every --verbose (the progress bar's own "Epoch k/n - ..." line came
    before each one with auto and 1, and with 2)."""
    args = ["--model", "resnet8", *TINY[:-4], "--epochs", "2"]
    status, lines, err = run(args + ([] if verbose is None else ["--verbose", verbose]), env)
    check_success(status, lines, err, 48, 40, epochs=2)
    run_dir, = (Path(env[CWD]) / "runs").iterdir()
    _epoch_lines_once(lines, 2, run_dir)


def test_each_epoch_line_is_printed_once_on_a_terminal(env):
    """stdout a terminal: the live bar is drawn during each epoch (--verbose
    auto) and erased; the screen then shows each epoch's line once (the
    finished bar stayed above it, a second summary of the epoch)."""
    import fcntl
    import struct
    import termios
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    child = subprocess.Popen([sys.executable, "-m", "pyresnet.train", "--model", "resnet8",
                              *TINY[:-4], "--epochs", "2"], env=env, cwd=env[CWD],
                             stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    err = child.stderr.read().decode()
    assert child.wait(timeout=300) == 0, err
    raw = b"".join(chunks).decode()
    assert "Epoch 1/2:" in raw and "Epoch 2/2:" in raw, raw  # the bar was drawn
    lines = _screen(raw)
    assert lines[-1].startswith("final test accuracy"), lines
    run_dir, = (Path(env[CWD]) / "runs").iterdir()
    _epoch_lines_once(lines, 2, run_dir)


WITHOUT_H5PY = """
import runpy, sys
sys.modules["h5py"] = None  # as after `pip install .` without the keras extra
sys.argv[0] = "pyresnet.train"
runpy.run_module("pyresnet.train", run_name="__main__", alter_sys=True)
"""


def test_without_h5py_a_run_warns_once(env):
    """Without h5py the run saves best.keras (ModelCheckpoint) and model.keras
    (train.main) with pyresnet's npz weights; the warning saying so is shown
    once, not once per line that saves."""
    p = subprocess.run([sys.executable, "-c", WITHOUT_H5PY, "--model", "resnet8", *TINY[:-4],
                        "--epochs", "2"], env=env, cwd=env[CWD], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("UserWarning: save: h5py is not installed") == 1, p.stderr
    run_dir, = (Path(env[CWD]) / "runs").iterdir()
    for name in ("best.keras", "model.keras"):
        with zipfile.ZipFile(run_dir / name) as z:
            assert "model.weights.npz" in z.namelist()


# ---- each model family ---------------------------------------------------------------

def _resnet_params(depth, classes=10):
    """He et al. 2015 section 4.2 CIFAR ResNet, option A shortcuts: 3x3 convs
    without bias, BN with 4 statistics per channel, a dense head."""
    n, total, cin = (depth - 2) // 6, 9 * 3 * 16 + 4 * 16, 16
    for width in (16, 32, 64):
        for _ in range(n):
            total, cin = total + 9 * cin * width + 9 * width * width + 8 * width, width
    return total + 64 * classes + classes


# the command's families: depth 6n + 2 post-activation (He et al. 2015) and pre-activation
# (He et al. 2016) CIFAR ResNets, and RegNets (Radosavovic et al. 2020)
FAMILIES = {"cifar_resnet": "resnet8", "preact_resnet": "preact_resnet20", "regnet": "regnety002"}


def test_every_model_choice_is_a_family_member_of_the_right_size():
    """Each --model choice parses and builds the CIFAR ResNet of its depth
    or a RegNet at CIFAR size; a choice outside the families would fail here."""
    choices = next(a.choices for a in train.build_parser()._actions if a.dest == "model")
    assert set(choices) == set(train.DEPTHS) | set(train.PREACT_DEPTHS) | set(train.REGNETS)
    assert len(train.REGNETS) == 24  # tf.keras 2.x's RegNetX/Y 002 ... 320
    for name in train.REGNETS:
        assert re.fullmatch(r"regnet[xy](002|004|006|008|016|032|040|064|080|120|160|320)", name)
        assert train.parse_args(["--model", name]).model == name
    for name in ("regnetx004", "regnety006"):  # the large ones are too heavy to build here
        model = train.build_model(name, 10)
        assert model.name == name and model.compute_output_shape((None, 32, 32, 3)) == (None, 10)
    for name, depth in {**train.DEPTHS, **train.PREACT_DEPTHS}.items():
        assert re.fullmatch(r"(preact_)?resnet\d+", name) and name.endswith(f"resnet{depth}")
        assert (depth - 2) % 6 == 0, name
        assert train.parse_args(["--model", name]).model == name
        if depth <= 20:  # the deep ones only differ in n
            builder = train.MODELS[name][0]
            assert builder(depth).count_params() == _resnet_params(depth)
    assert set(FAMILIES.values()) <= set(choices)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_train_each_family_one_epoch(family, env):
    # a RegNet trains with its own recipe: --model regnety002 --recipe regnet, here with
    # the stem at stride 1 (CIFAR's 32x32 maps through the stem)
    recipe = ["--recipe", "regnet", "--stem-strides", "1"] if family == "regnet" else []
    status, lines, err = run(["--model", FAMILIES[family], *TINY, *recipe], env)
    # after 3 steps the BN moving statistics are still mostly their initial values: the
    # pre-activation trunk's unnormalised sum then gives large (finite) inference logits, and
    # an untrained RegNet's residual stream larger ones still: its test loss need only be finite
    check_success(status, lines, err, 48, 40,
                  test_loss_below=np.inf if family == "regnet" else 1e4)
    assert f"; {FAMILIES[family]}, batch 16, 1 epoch," in lines[1]
    assert ("stem stride 1" in lines[2]) == (family == "regnet"), lines[2]


# ---- each recipe flag ------------------------------------------------------------------

RECIPE_RUNS = {
    "compiled (defaults)": [],
    "no augmentation, rmsprop, step": ["--no-augment", "--optimizer", "rmsprop", "--schedule",
                                       "step", "--warmup-epochs", "0"],
    "eager, adam, one-cycle": ["--run-eagerly", "--optimizer", "adam", "--schedule", "onecycle",
                               "--warmup-epochs", "0.5", "--weight-decay", "1e-4",
                               "--weight-decay-form", "decoupled"],
    "jit, mixup, label smoothing": ["--jit-compile", "--mixup", "1.0", "--nesterov",
                                    "--label-smoothing", "0.1"],
    "plain SGD": ["--momentum", "0", "--weight-decay", "0", "--lr", "0.05", "--seed", "3",
                  "--no-nesterov", "--shortcut", "zero_pad"],
    "regnet": ["--recipe", "regnet", "--area-factor", "0.3", "--pca", "imagenet", "--optimizer",
               "adamw"],
    "mixed precision": ["--mixed-precision"],
}
# options every run gives, or that have their own test below
COVERED_ELSEWHERE = {"-h", "--help", "--model", "--subset", "--test-subset", "--batch-size",
                     "--epochs", "--verbose", "--dataset", "--data", "--log-dir", "--resume",
                     "--distributed", "--collective-timeout", "--if-no-backup",
                     "--stem-strides",  # (RegNets only: test_train_each_family_one_epoch)
                     "--validation-freq"}


def test_every_option_of_the_command_is_run():
    """A new option of ``python -m pyresnet.train`` must be added to a run here."""
    options = {o for a in train.build_parser()._actions for o in a.option_strings}
    used = {a for args in RECIPE_RUNS.values() for a in args if a.startswith("--")}
    assert options - COVERED_ELSEWHERE == used, \
        f"options not run by tests/test_train_cli.py: {sorted(options - COVERED_ELSEWHERE - used)}"


@pytest.mark.parametrize("recipe", sorted(RECIPE_RUNS))
def test_train_each_recipe_flag(recipe, env):
    status, lines, err = run(["--model", "resnet8", *TINY, *RECIPE_RUNS[recipe]], env)
    check_success(status, lines, err, 48, 40)


def test_validation_freq_skips_test_passes(env, tmp_path):
    """``--validation-freq 2`` over 3 epochs: the test set is evaluated after
    epoch 2 only (the other lines and metrics.csv rows have none, best.keras
    is that epoch's model); the final line gives the trained model's test
    accuracy, measured at the end; a value below 1 is refused."""
    logs = tmp_path / "logs"
    args = ["--model", "resnet8", *TINY[:-4], "--epochs", "3", "--verbose", "0",
            "--validation-freq", "2", "--log-dir", str(logs)]
    status, lines, err = run(args, env)
    assert status == 0, err
    epoch_lines = [line for line in lines if line.startswith("epoch ")]
    assert [("test accuracy" in line) for line in epoch_lines] == [False, True, False], lines
    plain = re.compile(r"epoch (\d+): loss (\S+)  accuracy (\S+)  (\d+) images/s  (\d+\.\d) s")
    assert plain.fullmatch(epoch_lines[0]) and plain.fullmatch(epoch_lines[2]), epoch_lines
    run_dir, = _run_dirs(logs)
    rows = train.read_metrics(run_dir / "metrics.csv")
    assert [math.isnan(r["val_accuracy"]) for r in rows] == [True, False, True]
    model = pr.models.load_model(run_dir / "model.keras")
    _, (x, y) = pr.datasets.cifar10.load_data(path=str(data_root()))
    want = model.evaluate(pr.data.recipes.eval_dataset(x[:40], y[:40]), verbose=0,
                          return_dict=True)["accuracy"]
    assert float(FINAL.fullmatch(lines[-1])[1]) == pytest.approx(want, abs=1e-4)
    status, _, err = run(args[:-4] + ["--validation-freq", "0"], env)
    assert status == 2 and "--validation-freq must be >= 1, got 0" in err


def test_same_seed_same_run_and_python_dash_m_pyresnet(env):
    """``python -m pyresnet`` is the same command; a fixed seed reproduces the
    losses and accuracies exactly (times aside), another seed does not."""
    args = ["--model", "resnet8", *TINY, "--seed", "5"]
    a = check_success(*run(args, env), 48, 40)
    b = check_success(*run(args, env, module="pyresnet"), 48, 40)
    c = check_success(*run(args[:-1] + ["6"], env), 48, 40)
    assert [m.group(2, 3, 4, 5) for m in a] == [m.group(2, 3, 4, 5) for m in b]
    assert [m.group(2, 4) for m in a] != [m.group(2, 4) for m in c]


def test_distributed_on_two_ranks_equals_one_process(env):
    """``mpiexec -n 2 python -m pyresnet.train --distributed``: one run folder,
    rank 0's lines only, and (ResNet-8 has batch normalization, computed per
    rank on half batches) losses near those of one process with the same
    global batch; the same command without mpiexec is a world of one rank
    and gives exactly the plain run's numbers."""
    from test_distribute import mpiexec  # noqa: PLC0415
    args = ["--model", "resnet8", *TINY, "--seed", "4"]
    plain = check_success(*run(args, env), 48, 40)
    one = check_success(*run(args + ["--distributed"], env), 48, 40)
    assert [m.group(2, 3, 4, 5) for m in one] == [m.group(2, 3, 4, 5) for m in plain]
    p = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "pyresnet.train", *args,
                        "--distributed", "--collective-timeout", "120"],
                       env=dict(env, OMP_NUM_THREADS="1"), cwd=env[CWD],
                       capture_output=True, text=True, timeout=300)
    lines = p.stdout.strip().splitlines()
    two = check_success(p.returncode, lines, p.stderr, 48, 40)
    assert "1 thread per rank, 2 ranks" in lines[1]
    assert len(os.listdir(os.path.join(env[CWD], "runs"))) == 3
    # BN statistics of half batches: close to, not equal to, the whole batch's
    assert abs(float(two[0][2]) - float(plain[0][2])) < 0.1


def _write_cifar100(folder, rng):
    """A tiny ``cifar-100-python/`` in the official layout (str keys)."""
    folder.mkdir(parents=True)
    for name, n in (("train", 40), ("test", 20)):
        fine = rng.integers(0, 100, n)
        with open(folder / name, "wb") as f:
            pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                         "fine_labels": fine.tolist(), "coarse_labels": (fine // 5).tolist()},
                        f, protocol=2)
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"f{i}" for i in range(100)],
                     "coarse_label_names": [f"c{i}" for i in range(20)]}, f, protocol=2)


def test_train_cifar100_from_data_option(env, tmp_path):
    _write_cifar100(tmp_path / "data" / "cifar-100-python", np.random.default_rng(100))
    status, lines, err = run(["--dataset", "cifar100", "--data", str(tmp_path / "data"),
                              "--model", "resnet8", "--epochs", "2", "--batch-size", "16",
                              "--verbose", "0"], env)
    check_success(status, lines, err, 40, 20, epochs=2, dataset="cifar100")


# ---- failures --------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--epochs", "0"], "--epochs must be >= 1, got 0"),
    (["--batch-size", "-3"], "--batch-size must be >= 1, got -3"),
    (["--subset", "0"], "--subset must be >= 1, got 0"),
    (["--test-subset", "0"], "--test-subset must be >= 1, got 0"),
    (["--lr", "0"], "--lr must be > 0, got 0.0"),
    (["--model", "resnet9"], "argument --model: invalid choice: 'resnet9'"),
    (["--dataset", "mnist"], "argument --dataset: invalid choice: 'mnist'"),
    (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    (["--data", "/nonexistent/cifar"], "--data /nonexistent/cifar: no such directory"),
    (["--resume", "runs/x", "--epochs", "3", "--lr", "0.2"],
     "--resume takes the run's options from its config.json; drop --epochs, --lr"),
])
def test_bad_arguments_exit_2_naming_the_option(args, message):
    with pytest.raises(SystemExit) as info:
        train.parse_args(args)
    assert info.value.code == 2
    p = subprocess.run([sys.executable, "-m", "pyresnet.train", *args], capture_output=True,
                       text=True, timeout=120, cwd=tempfile.gettempdir())
    assert p.returncode == 2 and message in p.stderr and p.stdout == ""


# ---- run folders, --resume, the runs table -----------------------------------------------

# 24 steps an epoch: 6 (96 images) took under the kill's 0.1 s on an AMD EPYC Zen 5, and the
# "killed during epoch 2" run reached its third epoch
RESUME_RUN = ["--model", "resnet8", "--subset", "384", "--test-subset", "40", "--batch-size", "16",
              "--epochs", "3", "--seed", "2"]


def _run_dirs(log_dir):
    return sorted(p for p in log_dir.iterdir() if p.is_dir())


def test_run_folder_killed_run_resumed_equals_uninterrupted_and_runs_table(env, tmp_path, rng):
    """A run writes its folder (config.json, metrics.csv, backup, best.keras,
    model.keras, TensorBoard events); a run SIGKILLed during its second epoch and continued with
    ``--resume RUN_DIR`` ends with the weights of the uninterrupted run, bit
    for bit; ``python -m pyresnet.runs`` tabulates both.  With the progress
    bar on, each epoch line starts a line of its own."""
    logs = tmp_path / "logs"
    p = subprocess.run([sys.executable, "-m", "pyresnet.train", *RESUME_RUN, "--verbose", "1",
                        "--log-dir", str(logs)], env=env, cwd=env[CWD], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for k in (1, 2, 3):  # not after the bar on the bar's line
        assert re.search(rf"^epoch {k}: loss", p.stdout, flags=re.M), p.stdout
    assert "]epoch" not in p.stdout
    first, = _run_dirs(logs)
    assert re.fullmatch(r"\d{8}-\d{6}_resnet8_cifar10(-\d+)?", first.name)
    assert {q.name for q in first.iterdir()} == {"config.json", "metrics.csv", "backup",
                                                  "best.keras", "model.keras", "tensorboard"}
    config = json.loads((first / "config.json").read_text())
    assert config["options"]["epochs"] == 3 and config["options"]["lr"] == 0.1
    assert config["seed"] == 2 and config["pyresnet_version"] == pr.__version__
    assert config["cpu"] == pr.config.config()["cpu"] and config["threads"] >= 1
    assert set(vars(train.parse_args([]))) - {"resume"} == set(config["options"])

    child = subprocess.Popen([sys.executable, "-m", "pyresnet.train", *RESUME_RUN, "--verbose",
                              "0", "--log-dir", str(logs)], env=env, cwd=env[CWD],
                             stdout=subprocess.PIPE, text=True)
    def epoch_1_backed_up(line):  # the line comes before the epoch's backup: wait for it
        if not line.startswith("epoch 1:"):
            return False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(
                (d / "backup" / "latest.backup").exists() for d in _run_dirs(logs) if d != first):
            time.sleep(0.01)
        return True

    kill_after(child, epoch_1_backed_up, float(rng.uniform(0.0, 0.1)))  # during epoch 2
    killed = _run_dirs(logs)[1]
    assert not (killed / "model.keras").exists(), "the run ended before the kill"
    status, lines, err = run([str(logs)], env, module="pyresnet.runs")
    assert status == 0, err
    # date time model dataset epochs best final images/s run
    table = [line.split() for line in lines[1:]]
    assert lines[0].split()[:3] == ["date", "model", "dataset"] and len(table) == 2
    assert table[0][2:5] == ["resnet8", "cifar10", "3/3"] and table[0][8] == first.name
    assert table[1][6] == "-" and table[1][4] in ("1/3", "2/3")  # killed: no final accuracy

    status, lines, err = run(["--resume", str(killed), "--verbose", "0"], env)
    assert status == 0, err
    assert lines[-1].startswith("final test accuracy")
    a, b = (pr.models.load_model(d / "model.keras") for d in (first, killed))
    for wa, wb in zip(a.weights + a.optimizer.variables, b.weights + b.optimizer.variables):
        assert np.array_equal(np.asarray(wa), np.asarray(wb)), wa.name
    rows = [train.read_metrics(d / "metrics.csv") for d in (first, killed)]
    events = read_scalars(first / "tensorboard" / "validation")
    assert [s for s, _ in events["epoch_accuracy"]] == [0, 1, 2]
    assert np.allclose([v for _, v in events["epoch_accuracy"]],
                       [r["val_accuracy"] for r in rows[0]], rtol=1e-6, atol=0)
    assert {"epoch_loss", "epoch_learning_rate", "epoch_images_per_s"} <= \
        set(read_scalars(first / "tensorboard" / "train"))
    assert [r["epoch"] for r in rows[1]] == [1, 2, 3]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "learning_rate"):
        assert [r[key] for r in rows[0]] == [r[key] for r in rows[1]], key
    status, lines, err = run([str(logs)], env, module="pyresnet.runs")
    table = [line.split() for line in lines[1:]]
    assert status == 0 and len(table) == 2 and table[0][4:7] == table[1][4:7] \
        and table[1][6] == f"{rows[0][-1]['val_accuracy']:.4f}" \
        and table[1][5] == f"{max(r['val_accuracy'] for r in rows[0]):.4f}", lines
    assert run(["--resume", str(tmp_path / "nothing")], env)[2].startswith(
        "error: FileNotFoundError: --resume")
    assert run([str(tmp_path / "nothing")], env, module="pyresnet.runs")[0] == 1


def test_missing_data_exits_1_with_the_reason_and_no_network(env, tmp_path):
    env["PYRESNET_DATA"] = str(tmp_path / "nowhere")
    status, lines, err = run(["--model", "resnet8", *TINY], env)
    assert status == 1 and lines == []
    assert err.startswith("error: FileNotFoundError: CIFAR-10 not found; looked in"), err
    assert env["PYRESNET_DATASETS_URL"] in err and "Connection refused" in err
    assert not (tmp_path / "cache").exists()  # the failed download left nothing behind


# ---- the recipes' options, resolved ---------------------------------------------------------

def test_recipes_fill_the_unset_options_and_check_them():
    """The defaults are the cifar recipe; --recipe regnet gives its own;
    weight decay is converted to Keras's argument in the stated form; the
    schedules start, peak and end where the options say; bad combinations
    exit 2 naming the options."""
    a = train.parse_args([])
    assert (a.recipe, a.optimizer, a.lr, a.momentum, a.nesterov, a.schedule, a.epochs) == \
        ("cifar", "sgd", 0.1, 0.9, True, "cosine", 36)
    assert (a.weight_decay, a.weight_decay_form, a.warmup_epochs, a.mixup, a.shortcut) == \
        (5e-4, "coupled", 1.0, 0.0, "projection")
    assert train.keras_weight_decay(a) == pytest.approx(5e-3)  # 5e-4 / (1 - 0.9)
    opt = train.make_optimizer(a, 100)
    assert isinstance(opt, pr.optimizers.SGD) and opt.nesterov
    lr = opt._learning_rate
    assert [float(lr(s)) for s in (0, 50, 100)] == pytest.approx([0.0, 0.05, 0.1])
    assert float(lr(100 + 3500 // 2)) == pytest.approx(0.05, rel=1e-4)
    assert float(lr(3600)) == 0.0
    assert train.parse_args(["--model", "regnety002", "--stem-strides", "1"]).stem_strides == 1
    r = train.parse_args(["--recipe", "regnet"])
    assert (r.optimizer, r.lr, r.weight_decay, r.weight_decay_form, r.mixup, r.epochs,
            r.area_factor, r.pca) == ("adamw", 2e-3, 5e-5, "decoupled", 0.2, 15, 0.25, "train")
    opt = train.make_optimizer(r, 10)
    assert isinstance(opt, pr.optimizers.AdamW) and opt.weight_decay == pytest.approx(0.025)
    names = {"kernel": 0.025, "gamma": 0.0, "beta": 0.0, "bias": 0.0}
    assert {n: opt._decay_of(pr.Variable(np.ones(2, np.float32), name=n)) for n in names} == \
        pytest.approx(names)
    step = train.make_schedule(train.parse_args(["--schedule", "step", "--epochs", "4"]), 10)
    assert [float(step(s)) for s in (0, 19, 20, 29, 30)] == pytest.approx(
        [0.1, 0.1, 0.01, 0.01, 0.001])
    one = train.make_schedule(train.parse_args(["--schedule", "onecycle", "--epochs", "10"]), 10)
    assert [float(one(s)) for s in (0, 30, 100)] == pytest.approx([0.004, 0.1, 0.0])
    assert train.parse_args(["--optimizer", "adam"]).weight_decay_form == "decoupled"
    for args, message in [
        (["--optimizer", "adam", "--weight-decay-form", "coupled"], "coupled is offered for sgd"),
        (["--schedule", "step", "--warmup-epochs", "2"], "--warmup-epochs applies to"),
        (["--area-factor", "0.5"], "--area-factor and --pca belong to --recipe regnet"),
        (["--label-smoothing", "2"], "--label-smoothing must be in [0, 1], got 2.0"),
        (["--warmup-epochs", "50"], "--warmup-epochs must be in [0, --epochs = 36), got 50.0"),
        (["--recipe", "regnet", "--area-factor", "0"], "--area-factor must be in (0, 1]"),
        (["--stem-strides", "1"], "--stem-strides applies to the RegNets, not --model resnet20"),
        (["--model", "regnetx002", "--stem-strides", "3"], "invalid choice"),
    ]:
        with pytest.raises(SystemExit) as info:
            train.parse_args(args)
        assert info.value.code == 2, args
    p = subprocess.run([sys.executable, "-m", "pyresnet.train", "--optimizer", "adam",
                        "--weight-decay-form", "coupled"], capture_output=True, text=True,
                       timeout=120, cwd=tempfile.gettempdir())
    assert p.returncode == 2 and "coupled is offered for sgd only" in p.stderr


def _run_without_backup(folder):
    """A run folder as a run leaves it after two epochs, its backup lost
    (deleted, moved, a wrong folder copied): config.json, metrics.csv,
    best.keras.  Returns {file name: bytes}."""
    args = train.parse_args(["--model", "resnet8", "--subset", "32", "--test-subset", "16",
                             "--batch-size", "16", "--epochs", "1", "--seed", "2"])
    folder.mkdir(parents=True)
    config = {"options": {k: v for k, v in vars(args).items() if k != "resume"}, "seed": 2}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "metrics.csv").write_text(
        ",".join(train.METRICS_COLUMNS) + "\n1,2.1,0.2,2.0,0.25,0.1,300,4\n"
        "2,1.9,0.3,1.8,0.375,0.1,300,4\n")
    (folder / "best.keras").write_bytes(b"the model of epoch 2")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_resume_without_a_backup_refuses_and_changes_nothing(env, tmp_path):
    """--resume on a run folder without backup/latest.backup started again from
    epoch 0 there, rewriting metrics.csv without the earlier rows and best.keras
    with a worse model; it refuses now, saying why, and changes nothing;
    --if-no-backup new-run trains afresh in a new folder beside it."""
    logs = tmp_path / "logs"
    run_dir = logs / "20260101-000000_resnet8_cifar10"
    files = _run_without_backup(run_dir)
    status, lines, err = run(["--resume", str(run_dir), "--verbose", "0"], env)
    assert status == 1
    assert f"--resume {run_dir}: no backup to resume from" in err and \
        "--if-no-backup new-run" in err, err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == files
    assert os.listdir(logs) == [run_dir.name]

    status, lines, err = run(["--resume", str(run_dir), "--verbose", "0", "--if-no-backup",
                              "new-run"], env)
    assert status == 0, err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == files
    new, = [p for p in logs.iterdir() if p != run_dir]
    assert [r["epoch"] for r in train.read_metrics(new / "metrics.csv")] == [1]
    assert json.loads((new / "config.json").read_text())["options"]["subset"] == 32
    assert run(["--if-no-backup", "new-run"], env)[2].strip().endswith(
        "--if-no-backup goes with --resume RUN_DIR")


def test_resume_of_a_malformed_run_folder_names_the_file(tmp_path):
    """Malformed config.json or metrics.csv ended in a bare KeyError or
    JSONDecodeError."""
    config = tmp_path / "config.json"
    resume = lambda: train._resumed_args(train.parse_args(["--resume", str(tmp_path)]))
    for text, message in (("{broken", "config.json is not valid JSON"),
                          ('{"seed": 1}', 'config.json holds no "options" object'),
                          ('{"options": [1]}', 'config.json holds no "options" object')):
        config.write_text(text)
        with pytest.raises(ValueError, match=re.escape(message)):
            resume()
    metrics = tmp_path / "metrics.csv"
    for text in ("loss,accuracy\n1.0,0.5\n", "epoch,loss\n1\n", "epoch,loss\none,1.0\n"):
        metrics.write_text(text)
        with pytest.raises(ValueError, match=re.escape(f"{metrics} is not a metrics file")):
            train.read_metrics(metrics)


def test_a_run_from_before_the_recipes_resumes_with_its_recipe(tmp_path):
    """config.json of a run made before --recipe: He et al.'s step schedule,
    Keras's decoupled weight_decay 1e-3 at lr 0.05 (now 5e-5 decoupled)."""
    old = {"model": "resnet8", "dataset": "cifar10", "epochs": 3, "batch_size": 16, "lr": 0.05,
           "momentum": 0.9, "weight_decay": 1e-3, "subset": 96, "test_subset": 40, "seed": 2,
           "data": None, "no_augment": False, "run_eagerly": False, "jit_compile": False,
           "verbose": "0", "log_dir": "runs"}
    (tmp_path / "config.json").write_text(json.dumps({"options": old}))
    args = train._resumed_args(train.parse_args(["--resume", str(tmp_path)]))
    assert (args.recipe, args.schedule, args.warmup_epochs, args.nesterov, args.shortcut) == \
        ("cifar", "step", 0.0, False, "zero_pad")
    assert train.keras_weight_decay(args) == pytest.approx(1e-3)
    assert isinstance(train.make_schedule(args, 6), pr.optimizers.schedules.PiecewiseConstantDecay)


def test_resume_takes_the_runs_verbose_data_and_timeout_unless_given_anew(tmp_path,
                                                                          monkeypatch):
    """--resume runs the run's command again: --verbose, --data and
    --collective-timeout come from config.json like every other option, and
    the ones given on the resume command line win (--verbose auto too, the
    value an unset option used to take)."""
    data, other = tmp_path / "data", tmp_path / "other"
    data.mkdir(), other.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    options = vars(train.parse_args(["--model", "resnet8", "--epochs", "2", "--verbose", "0",
                                     "--data", str(data), "--collective-timeout", "30"]))
    del options["resume"]
    (run_dir / "config.json").write_text(json.dumps({"options": options}))

    def resumed(*given):
        return train._resumed_args(train.parse_args(["--resume", str(run_dir), *given]))

    args = resumed()
    assert (args.verbose, args.data, args.collective_timeout) == ("0", str(data), 30.0)
    assert (args.model, args.epochs) == ("resnet8", 2)
    args = resumed("--verbose", "auto", "--data", str(other), "--collective-timeout", "5")
    assert (args.verbose, args.data, args.collective_timeout) == ("auto", str(other), 5.0)
    assert resumed("--verbose", "2").verbose == "2"
    del options["verbose"]  # a config.json without it: the default
    (run_dir / "config.json").write_text(json.dumps({"options": options}))
    assert resumed().verbose == "auto"
    data.rmdir()  # the run's data moved: say so (the loaders would look elsewhere)
    with pytest.raises(FileNotFoundError, match=re.escape(f"the run's --data {data} is no "
                                                          "longer a directory")):
        resumed()
    assert resumed("--data", str(other)).data == str(other)
    with pytest.raises(SystemExit):  # other options stay the run's
        train.parse_args(["--resume", str(run_dir), "--epochs", "3"])
    options.update(distributed=True, data=None)  # a data-parallel run resumes data-parallel
    (run_dir / "config.json").write_text(json.dumps({"options": options}))

    class Started(Exception):
        pass

    def init(collective_timeout=None):
        raise Started(collective_timeout)

    monkeypatch.setattr(pr.distribute, "init", init)
    with pytest.raises(Started, match="30"):  # (was: not distributed, then no backup)
        train.main(["--resume", str(run_dir)])
    with pytest.raises(Started, match="7"):
        train.main(["--resume", str(run_dir), "--collective-timeout", "7"])


def test_a_diverging_run_stops_after_the_nan_batch_and_exits_1(env):
    """A rate of 1e38 overflows the weights in the first step: the second
    batch's loss is NaN, TerminateOnNaN ends the epoch there and the command
    exits 1 naming the loss."""
    status, lines, err = run(["--model", "resnet8", *TINY, "--lr", "1e38", "--epochs", "2",
                              "--warmup-epochs", "0"], env)
    assert status == 1 and "Batch 1: Invalid loss, terminating training" in lines
    assert "error: FloatingPointError: epoch 1: training loss is nan; lower --lr" in err
    assert not any(line.startswith("epoch 2") for line in lines)
