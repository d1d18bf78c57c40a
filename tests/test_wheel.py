"""What a user without a C compiler installs: the sdist and wheel that
``python -m build`` makes (the wheel built from the unpacked sdist, so the
sdist is complete), ``auditwheel repair`` into a manylinux wheel that
leaves OpenBLAS to the scipy-openblas32 wheel, installed into a fresh
virtual environment whose PATH has no compiler, and one epoch of ResNet-8 on
a CIFAR-10 subset from ``python -m pyresnet.train``.  Marked ``build``:
``pytest -m build`` runs it, as .ci/run does once; pip fetches the build
requirements and the wheel's dependencies from PyPI (or its cache).
"""
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import ROOT, data_root
from test_train_cli import check_success

pytestmark = pytest.mark.build

COMPILERS = ("cc", "gcc", "clang", "c99", "x86_64-linux-gnu-gcc")


def run(cmd, timeout=1800, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} exited {p.returncode}:\n" \
                              f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def test_sdist_wheel_manylinux_install_without_compiler(tmp_path):
    dist, repaired = tmp_path / "dist", tmp_path / "wheelhouse"
    # a clean copy of the tracked files: the checkout's own build products stay out
    src = tmp_path / "src"
    files = run(["git", "ls-files", "-z"], cwd=ROOT).split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)])
    sdist, = dist.glob("pyresnet-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = t.getnames()
    top = names[0].split("/")[0]
    for need in ("csrc/kernels/kernels.h", "csrc/ops.h", "LICENSE", "setup.py"):
        assert f"{top}/{need}" in names, f"{need} missing from the sdist"
    wheel, = dist.glob("pyresnet-*.whl")

    run([sys.executable, "-m", "auditwheel", "repair", "--exclude", "libscipy_openblas.so",
         "-w", str(repaired), str(wheel)])
    fixed, = repaired.glob("pyresnet-*.whl")
    assert re.search(r"-manylinux_2_\d+_x86_64\.whl$", fixed.name), fixed.name
    with zipfile.ZipFile(fixed) as z:
        listed = z.namelist()
        ext, = [n for n in listed if re.fullmatch(r"pyresnet/_C\..*\.so", n)]
        z.extract(ext, tmp_path / "unpacked")
    assert not [n for n in listed if "openblas" in n.lower()], listed  # stays in its own wheel
    assert "pyresnet-0.1.0.dist-info/licenses/LICENSE" in listed, listed
    # _C still needs the scipy-openblas32 wheel's library: auditwheel drops RPATH entries
    # that leave the wheel, and pyresnet/_loader.py loads it first (as NumPy's wheels do)
    dynamic = run(["readelf", "-d", str(tmp_path / "unpacked" / ext)])
    assert "[libscipy_openblas.so]" in dynamic, dynamic

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    bare = dict(os.environ, PATH=str(venv / "bin"))
    bare.pop("CC", None)
    for cc in COMPILERS:
        assert shutil.which(cc, path=bare["PATH"]) is None, cc
    # binary wheels only, and no compiler to fall back on
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--only-binary=:all:",
         str(fixed)], env=bare)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(bare, PYRESNET_DATA=str(data_root()), HOME=str(tmp_path / "home"))
    out = run([str(venv / "bin" / "python"), "-c",
               "import pyresnet, pyresnet._C; print(pyresnet._C.__file__)"], env=env, cwd=work)
    assert out.startswith(str(venv)), out
    p = subprocess.run([str(venv / "bin" / "python"), "-m", "pyresnet.train", "--model",
                        "resnet8", "--subset", "256", "--test-subset", "128", "--batch-size",
                        "64", "--epochs", "1", "--verbose", "0"],
                       env=env, cwd=work, capture_output=True, text=True, timeout=900)
    check_success(p.returncode, p.stdout.strip().splitlines(), p.stderr, 256, 128)
