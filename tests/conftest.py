"""Shared test fixtures: the CIFAR-10 location, and every test's own seed.

Isolation: before each test, every host-side random source (Python's
``random``, NumPy's global state, pyresnet's generator for initialisers and
shuffling) is seeded from the test's own id, and :func:`test_rng` gives a
NumPy Generator seeded the same way.  A test's inputs and weights therefore
do not depend on which tests ran before it or in what order (tests/
test_isolation.py checks this and that no test module keeps a shared
generator or skips on a missing import).
"""
import os
import pathlib

import numpy as np
import pytest

import pyresnet as pr
import seeding
from seeding import test_rng, test_seed

ROOT = pathlib.Path(__file__).resolve().parents[1]


def data_root():
    """Where the shared datasets live: $PYRESNET_DATA or ../shared/datasets, as an
    absolute path (subprocesses of the tests run from other folders)."""
    env = os.environ.get("PYRESNET_DATA")
    return (pathlib.Path(env) if env else ROOT.parent / "shared" / "datasets").resolve()


@pytest.fixture(scope="session")
def cifar10_dir():
    path = data_root() / "cifar-10-batches-py"
    if not (path / "data_batch_1").exists():
        pytest.fail(f"CIFAR-10 not found at {path}; set PYRESNET_DATA")
    return path


@pytest.fixture(autouse=True)
def _own_seed(request):
    """Seed every host-side random source from this test's id."""
    seed = test_seed(request.node.nodeid)
    pr.utils.set_random_seed(seed)
    seeding.current["rng"] = np.random.default_rng(seed)
    yield
    seeding.current["rng"] = None


@pytest.fixture
def rng():
    """This test's own NumPy Generator (the one :func:`test_rng` returns)."""
    return test_rng()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A skipped test fails: CI installs everything the tests need, so a
    skip (``pytest.importorskip``, ``pytest.skip``, a ``skipif``) can only
    hide a test that did not run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} was skipped ({reason}); tests may not skip: "
                           f"install what they need (pip install \".[test]\") or fix the test")
