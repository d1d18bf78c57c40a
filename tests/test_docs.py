"""docs/architecture.md stays true to the code: every file it names exists,
every C function (pr_*) and registry op it names in backticks exists, and
the README links it (the README must stand alone, with no link outside the
repository)."""
import pathlib
import re

from pyresnet._loader import _C

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
C_SOURCES = "\n".join(p.read_text() for p in (ROOT / "csrc").rglob("*.[ch]"))


def test_named_files_exist():
    named = set(re.findall(r"`((?:csrc|pyresnet|tests)/[\w/.{},*-]+)`", DOC))
    assert len(named) > 10
    for name in named:
        if "{" in name:  # tensor.{c,h}
            stem, alternatives = re.fullmatch(r"(.*)\.\{(.*)\}", name).groups()
            paths = [f"{stem}.{ext}" for ext in alternatives.split(",")]
        elif "<" in name or "*" in name:
            continue
        else:
            paths = [name]
        for path in paths:
            assert (ROOT / path).exists(), f"docs/architecture.md names {path}, which is gone"


def test_named_c_functions_and_ops_exist():
    functions = set(re.findall(r"`(pr_\w+)", DOC)) - {"pr_op", "pr_variant", "pr_attr_spec"}
    functions = {f for f in functions if "<" not in f and not f.endswith("_")}
    assert len(functions) >= 5
    for f in functions:
        assert re.search(rf"\b{f}\s*\(", C_SOURCES), f"docs/architecture.md names {f}()"
    ops = set(_C.op_names())
    named_ops = {"relu_backward", "sgd_momentum_update", "fused_elementwise",
                 "batch_norm_relu_train", "conv2d_backprop_input", "conv2d_backprop_filter"}
    assert named_ops <= set(re.findall(r"`(\w+)`", DOC))
    assert named_ops - {"fused_elementwise"} <= ops       # fused_elementwise: graph-only
    assert "fused_elementwise" in C_SOURCES
    for op in ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter", "matmul"):
        variants = [name for name, _ in _C.op_variants(op)]
        assert len(variants) >= 2 and all(f"`{v}`" in DOC for v in variants), (op, variants)


def test_readme_stands_alone():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/architecture.md)" in readme
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links and not [link for link in links if link.startswith("..")], links
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"README links {link}, which does not exist"
