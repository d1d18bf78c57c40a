"""csrc/ is built in floors: each file calls only its own floor and the
floors below (docs/architecture.md, "Floors").  Checked on what the compiler
sees, not on text: every csrc/*.c is compiled to an object file and `nm`
lists the symbols it defines and the ones it needs; a file needing a symbol
defined on a higher floor fails the test.  The kernels (csrc/kernels/, plain
C without Python.h) are the floor under all of them.  Also: no `importlib`
trick in the Python package."""
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import numpy
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: lowest first; files on one floor may call each other
FLOORS = [
    ["symdim"],
    ["tensor"],
    ["ops"],
    ["ops_elementwise", "ops_array", "ops_nn", "ops_conv", "ops_state", "ops_augment",
     "ops_random", "ops_distribute", "ops_fused", "tensor_ops"],
    ["autodiff"],
    ["passes"],
    ["graph"],
    ["plan"],
    ["executor"],
    ["pipeline"],
    ["module"],
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


def _symbols(tmp_path):
    """{file stem: (defined symbols, needed symbols)} for csrc/*.c."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if not shutil.which(cc):
        cc = "cc"
    import scipy_openblas32  # noqa: PLC0415 (a build requirement; installed with the package)
    includes = [f"-I{sysconfig.get_paths()['include']}", f"-I{numpy.get_include()}",
                f"-I{scipy_openblas32.get_include_dir()}", f"-I{ROOT / 'csrc'}"]
    table = {}
    for source in sorted((ROOT / "csrc").glob("*.c")):
        obj = tmp_path / f"{source.stem}.o"
        subprocess.run([cc, "-O0", "-w", "-c", *includes, str(source), "-o", str(obj)],
                       check=True, capture_output=True, timeout=120)
        listing = subprocess.run(["nm", str(obj)], check=True, capture_output=True,
                                 text=True).stdout
        defined, needed = set(), set()
        for line in listing.splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == "U":
                needed.add(fields[1])
            elif len(fields) == 3 and fields[1] in "TDRBC":
                defined.add(fields[2])
        table[source.stem] = (defined, needed)
    return table


@pytest.fixture(scope="module")
def symbols(tmp_path_factory):
    if not shutil.which("nm"):
        pytest.fail("nm (binutils) is needed to read the object files")
    return _symbols(tmp_path_factory.mktemp("objects"))


def test_every_file_has_a_floor(symbols):
    assert set(symbols) == set(FLOOR), (sorted(set(symbols) - set(FLOOR)),
                                        sorted(set(FLOOR) - set(symbols)))


def test_no_file_calls_a_floor_above_it(symbols):
    where = {s: stem for stem, (defined, _) in symbols.items() for s in defined}
    upward = []
    for stem, (_, needed) in symbols.items():
        for s in sorted(needed):
            if s in where and FLOOR[where[s]] > FLOOR[stem]:
                upward.append(f"{stem}.c needs {s} of {where[s]}.c")
    assert not upward, "calls up a floor:\n" + "\n".join(upward)


def test_the_floors_are_documented():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = re.search(r"^## Floors\n(.*?)(?=^## )", doc, flags=re.S | re.M)
    assert section, "docs/architecture.md has no '## Floors' section"
    for names in FLOORS:
        for name in names:
            assert f"{name}.c" in section[1], f"the Floors section does not place {name}.c"


def test_no_importlib_tricks_in_the_package():
    used = [p.relative_to(ROOT).as_posix() for p in (ROOT / "pyresnet").rglob("*.py")
            if re.search(r"\bimportlib\b", p.read_text())]
    assert not used, f"importlib in {used}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
