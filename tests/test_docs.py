"""docs/architecture.md stays true to the code: every file it names exists,
every file of csrc/ and every module of pyresnet/ is named in it, every C
function (pr_*) and registry op it names in backticks exists, and the README
links it; every link of the README and the guides leads to a file of the
repository.  (tests/test_readme.py runs their examples and checks their
commands.)"""
import pathlib
import re
import subprocess
import sys

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
        assert re.search(rf"\b{f}\s*(\(|;|=)", C_SOURCES), f"docs/architecture.md names {f}"
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
            assert (ROOT / link.split("#")[0]).exists(), f"README links {link}, which does not exist"


def test_every_source_file_is_named():
    """Each csrc/**/*.c and each module or package of pyresnet/ appears by
    name in docs/architecture.md's layout."""
    missing = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "csrc").rglob("*.c"))
               if not re.search(rf"(?<![\w.]){re.escape(p.name)}\b", DOC)]
    for p in sorted((ROOT / "pyresnet").iterdir()):
        if p.suffix == ".py" or (p / "__init__.py").is_file():
            name = p.name if p.suffix == ".py" else f"{p.name}/"
            if not re.search(rf"(?<![\w.]){re.escape(name)}", DOC):
                missing.append(p.relative_to(ROOT).as_posix())
    assert not missing, f"docs/architecture.md does not name {missing}"


def test_guides_links_stay_in_the_repository():
    for page in sorted((ROOT / "docs").glob("*.md")):
        for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if link.startswith("http"):
                continue
            target = (page.parent / link).resolve()
            assert target.is_relative_to(ROOT) and target.exists(), \
                f"{page.name} links {link}, which is not a file of the repository"


def test_results_tables_are_rendered_from_the_records():
    """Every table of docs/results.md equals its rendering from
    bench/results/*.json (bench/render_results.py)."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "render_results.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (ROOT / "docs" / "results.md").read_text().count("<!-- table ") >= 5
