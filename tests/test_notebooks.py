"""The notebooks as committed: executed top to bottom with their outputs
(plots included) and no error, reading CIFAR-10 from $PYRESNET_DATA, linked
from the README, and executed again by the README's test command.

Executing them is not done here: the first pass of the test command
collects ``notebooks/`` by its explicit path with nbmake (``pytest -q
--nbmake tests notebooks``), so each notebook runs once per CI run and a
notebook that no longer executes fails it.
"""
import json
import pathlib
import re
import shlex

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = ["01_quickstart", "02_eager_vs_compiled", "03_graph_and_profile",
            "04_augmentation", "05_custom_layers"]


def _code_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def test_the_notebooks_are_there():
    assert [p.stem for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_with_outputs_in_order_and_plots(path):
    """Run top to bottom once (execution counts 1, 2, 3...), no error
    output, at least one picture, and small enough to read in a browser."""
    cells = _code_cells(path)
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1)), \
        f"{path.name}: execute it top to bottom in a fresh kernel before committing"
    outputs = [o for c in cells for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"], f"{path.name} has an error"
    pictures = [o for o in outputs
                if {"image/png", "image/svg+xml"} & set(o.get("data", {}))]
    assert pictures, f"{path.name} shows no plot"
    assert path.stat().st_size < 1_000_000, f"{path.name}: keep figures small (dpi 80)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_reads_cifar_from_pyresnet_data(path):
    """The data comes from load_data() without a path, that is from
    $PYRESNET_DATA (then the cache), never from a path of this machine."""
    source = "\n".join("".join(c["source"]) for c in _code_cells(path))
    assert "pr.datasets.cifar10.load_data()" in source
    assert "/work/" not in source and "shared/datasets" not in source


def test_the_readme_links_each_notebook_with_what_it_answers():
    readme = (ROOT / "README.md").read_text()
    for path in NOTEBOOKS:
        line = re.search(rf"^- \[`{path.name}`\]\(notebooks/{path.name}\): (.+)$", readme,
                         flags=re.M)
        assert line and len(line[1].split()) >= 8, f"README: no line on {path.name}"


def test_the_test_command_executes_the_notebooks_once():
    """The first pytest command of .ci/run collects notebooks/ with nbmake;
    the later passes (reference kernels, the build tests, the clang build)
    do not run them again, and the reference pass comes second."""
    commands = [shlex.split(line) for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if re.match(r"(\w+=\S+ )*pytest\b", line)]
    first, *later = commands
    assert first[0] == "pytest" and "--nbmake" in first and {"tests", "notebooks"} <= set(first)
    assert later and later[0][0] == "PYRESNET_KERNELS=reference"
    assert not any("notebooks" in c or "--nbmake" in c for c in later)
