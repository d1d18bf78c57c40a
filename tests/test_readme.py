"""Run every ```python example of README.md, each in a fresh namespace."""
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)


def test_readme_has_examples():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example(index, capsys):
    exec(compile(BLOCKS[index], f"README.md example {index + 1}", "exec"), {})
