"""Test isolation (tests/conftest.py): each test has its own seed, no test
module keeps a generator shared between its tests, and no test skips.

The two ``test_order_*`` tests run in this order: the first drains every
host-side random source, the second sees exactly the draws of its own seed.
"""
import ast
import pathlib
import random
import subprocess
import sys

import numpy as np
import pytest

import pyresnet as pr
from seeding import test_rng, test_seed

TESTS = pathlib.Path(__file__).resolve().parent
RANDOM_FACTORIES = {"default_rng", "RandomState", "Random", "Generator", "seed",
                    "set_random_seed", "rng_state", "SeedSequence", "PCG64", "Philox"}


def _called_name(node):
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)


def _module_level_calls(tree):
    """Calls executed when the module is imported (not inside a def or lambda)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Call):
            yield node
        todo.extend(ast.iter_child_nodes(node))


@pytest.mark.parametrize("path", sorted(TESTS.glob("*.py")), ids=lambda p: p.name)
def test_no_shared_generator_and_no_importorskip(path):
    """A generator made at import is shared by the module's tests (a test's
    inputs then depend on which tests ran first); ``importorskip`` hides a
    required test.  Both are refused here."""
    tree = ast.parse(path.read_text(), str(path))
    shared = [f"line {c.lineno}: {_called_name(c)}()" for c in _module_level_calls(tree)
              if _called_name(c) in RANDOM_FACTORIES]
    assert not shared, f"{path.name} seeds or makes a generator at import: {shared}; use " \
                       f"seeding.test_rng() or the rng fixture"
    skips = [f"line {n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Call)
             and _called_name(n) == "importorskip"]
    assert not skips, f"{path.name} uses pytest.importorskip at {skips}: import the module " \
                      f"(CI installs everything the tests need)"


def _draws():
    return (pr.utils.get_rng().integers(2**62), np.random.randint(2**31), random.getrandbits(62),
            test_rng().integers(2**62))


def _expected(nodeid):
    seed = test_seed(nodeid)
    return (np.random.default_rng(seed).integers(2**62),
            np.random.RandomState(seed % 2**32).randint(2**31),
            random.Random(seed).getrandbits(62), np.random.default_rng(seed).integers(2**62))


def test_order_1_drains_every_source(request):
    assert _draws() == _expected(request.node.nodeid)
    for _ in range(100):
        _draws()
    pr.utils.set_random_seed(12345)


def test_order_2_sees_its_own_seed(request, rng):
    assert _draws() == _expected(request.node.nodeid)
    assert rng is test_rng()
    assert test_seed("a::b") != test_seed("a::c")


def test_weights_do_not_depend_on_earlier_tests(request):
    """An unseeded layer's initial weights are the same whatever ran before."""
    first = pr.layers.Dense(4)
    first.build((None, 3))
    pr.utils.set_random_seed(test_seed(request.node.nodeid))
    again = pr.layers.Dense(4)
    again.build((None, 3))
    np.testing.assert_array_equal(first.kernel.numpy(), again.kernel.numpy())


def test_a_skip_fails(tmp_path):
    """importorskip of a missing module, pytest.skip and skipif all fail."""
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\n"
        "def test_missing():\n    pytest.importorskip('no_such_module_xyz')\n\n"
        "def test_skip():\n    pytest.skip('why')\n\n"
        "@pytest.mark.skipif(True, reason='never')\ndef test_skipif():\n    pass\n\n"
        "def test_ok():\n    pass\n\n"
        "@pytest.mark.xfail(strict=True)\ndef test_xfail():\n    assert False\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), "-o", f"pythonpath={TESTS}", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 1, p.stdout
    assert "2 failed, 1 passed, 1 xfailed, 1 error" in p.stdout, p.stdout  # skipif: at setup
    assert "tests may not skip" in p.stdout
