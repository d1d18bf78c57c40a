"""Shared test fixtures: the CIFAR-10 location and numeric checkers."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def data_root():
    """Where the shared datasets live: $PYRESNET_DATA or ../shared/datasets."""
    env = os.environ.get("PYRESNET_DATA")
    return pathlib.Path(env) if env else ROOT.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def cifar10_dir():
    path = data_root() / "cifar-10-batches-py"
    if not (path / "data_batch_1").exists():
        pytest.fail(f"CIFAR-10 not found at {path}; set PYRESNET_DATA")
    return path
