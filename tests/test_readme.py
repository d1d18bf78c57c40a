"""The README and the guides in docs/, executed: every ```python example in
a fresh namespace, and every shell command (```bash blocks and inline
`python ...` spans) either run, when cheap, or checked to name a script,
module, option and value that exist.  A new kind of command must get a rule
here (``RULES``)."""
import os
import pathlib
import re
import shlex
import subprocess
import tempfile
import sys
import pytest

from pyresnet import train

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: the documents whose examples and commands run: the README, then docs/*.md
PAGES = {path.relative_to(ROOT).as_posix(): path.read_text()
         for path in [README, *sorted((ROOT / "docs").glob("*.md"))]}
TEXT = "\n".join(PAGES.values())
BLOCKS = [(page, block) for page, text in PAGES.items()
          for block in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)]


def test_readme_has_examples():
    assert len(BLOCKS) >= 10
    readme = PAGES["README.md"]
    first = readme.index("```python")
    assert readme[:first].count("\n") < 60, "the README's first example starts after line 60"
    assert readme.count("\n") <= 400, f"README.md has {readme.count(chr(10))} lines (at most 400)"


@pytest.mark.parametrize("index", range(len(BLOCKS)),
                         ids=[f"{page}:{sum(1 for p, _ in BLOCKS[:i] if p == page) + 1}"
                              for i, (page, _) in enumerate(BLOCKS)])
def test_readme_example(index, capsys):
    page, block = BLOCKS[index]
    exec(compile(block, f"{page} example", "exec"), {})


# ---- shell commands -----------------------------------------------------------------

def shell_commands():
    """(where, command) for each command of the ```bash blocks (split at
    ``&&``, comments dropped) and each inline `python ...` span of every page."""
    found = []
    for page, text in PAGES.items():
        for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
            for line in block.splitlines():
                line = line.split("#", 1)[0].strip()
                for part in filter(None, (p.strip() for p in line.split("&&"))):
                    found.append((f"{page} bash block", part))
        for span in re.findall(r"`(python3? [^`]+)`", text):
            found.append((f"{page} inline", span))
    return found


COMMANDS = shell_commands()


def _extras():
    """The extras of pyproject.toml's [project.optional-dependencies]."""
    text = (ROOT / "pyproject.toml").read_text()
    table = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[|\Z)", text,
                      flags=re.S | re.M)
    return set(re.findall(r"^(\w[\w-]*)\s*=", table[1], flags=re.M)) if table else set()


def _env_words(words):
    """Leading VAR=value words -> (env dict, the rest)."""
    env = {}
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env, words


def check_pip(words):
    env, words = _env_words(words)
    assert set(env) <= {"CC"}, env  # CC=clang: the clang build
    assert words[:2] == ["pip", "install"], words
    for target in words[2:]:
        m = re.fullmatch(r"\.(?:\[([\w,]+)\])?", target)
        assert m, f"pip installs {target!r}, not this project"
        for extra in (m[1] or "").split(",") if m[1] else []:
            assert extra in _extras(), f"pip install names the extra {extra!r}; pyproject " \
                                       f"has {sorted(_extras())}"


def check_venv(words):
    assert words[:3] in (["python3", "-m", "venv"], ["python", "-m", "venv"]) and len(words) == 4


def check_source(words):
    assert words[0] in (".", "source") and words[1].endswith("/bin/activate")


def check_cd(words):
    """The README leaves the checkout before running the package (its
    sources would shadow the installed one), and goes nowhere else."""
    assert words == ["cd", ".."], words


def check_export(words):
    (name, value), = [w.split("=", 1) for w in words[1:]]
    assert name in ("PYRESNET_DATA", "PYRESNET_KERNELS", "PYRESNET_CACHE_DIR", "PYRESNET_TORCHVISION_ROOT",
                    "KERAS_HOME")
    if value.startswith("$PWD/"):  # run in the project root
        value = str(ROOT / value[len("$PWD/"):])
    if name == "PYRESNET_DATA":  # the path is relative to the project root
        assert (ROOT / value / "cifar-10-batches-py").is_dir() or os.environ.get("PYRESNET_DATA")


def check_pytest(words):
    """The test command is the one CI runs."""
    env, words = _env_words(words)
    ci = (ROOT / ".ci" / "run").read_text()
    line = " ".join([*(f"{k}={v}" for k, v in env.items()), *words])
    assert re.search(rf"^{re.escape(line)}$", ci, flags=re.M), f"{line!r} is not in .ci/run"
    assert set(env) <= {"PYRESNET_KERNELS"} and env.get("PYRESNET_KERNELS", "reference") == \
        "reference"
    # the words that are neither options nor an option's value (-m MARK, -k EXPR)
    paths = [w for prev, w in zip(words, words[1:])
             if not w.startswith("-") and prev not in ("-m", "-k")]
    for path in paths:
        assert (ROOT / path).exists(), f"the test command collects {path!r}, which does not exist"


def check_train(words):
    """``python -m pyresnet.train ARGS``: the options parse.  ``--help`` is
    cheap: run it, and it must list every option the README names."""
    args = words[3:]
    if ">" in args:  # `... > run.log`: the shell's redirection, not an option
        args = args[:args.index(">")]
    if args == ["--help"]:
        out = subprocess.run([sys.executable, "-m", "pyresnet.train", "--help"],
                             cwd=tempfile.gettempdir(),  # not the checkout's unbuilt sources
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0
        for option in set(re.findall(r"`(--[a-z-]+)", TEXT)) & TRAIN_OPTIONS:
            assert option in out.stdout
        return
    train.parse_args(args)  # SystemExit(2) on an option or value that does not exist


TRAIN_OPTIONS = {o for a in train.build_parser()._actions for o in a.option_strings}


def check_runs(words):
    """``python -m pyresnet.runs [LOG_DIR]``: at most the one argument."""
    from pyresnet import runs  # noqa: PLC0415
    assert len(words) <= 4, words
    with pytest.raises(SystemExit) as info:
        runs.main([*words[3:], "--help"])
    assert info.value.code == 0


def _bench_options(script):
    """The options of a bench script, from its ``--help`` (cheap: run it)."""
    out = subprocess.run([sys.executable, str(ROOT / script), "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{script} --help: {out.stderr}"
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out.stdout))


def check_bench(words):
    script = words[1]
    assert (ROOT / script).is_file(), f"{script} does not exist"
    options = _bench_options(script)
    for w in words[2:]:
        if w.startswith("--"):
            assert w.split("=")[0] in options, f"{script} has no option {w}"


def check_mpirun(words):
    """``mpirun -n N python -m pyresnet.train ARGS``: N ranks of the main job;
    the options parse and include --distributed."""
    assert words[:2] == ["mpirun", "-n"] and int(words[2]) >= 1, words
    assert "--distributed" in words, words
    check_train(words[3:])


def check_setup(words):
    """``python setup.py build_ext --inplace``: the in-place build of the C core."""
    assert (ROOT / "setup.py").is_file() and words[2:] == ["build_ext", "--inplace"], words


RULES = [  # (pattern of the command, check)
    (r"(CC=\w+ )?pip install .*", check_pip),
    (r"python3? -m venv .*", check_venv),
    (r"(\.|source) \S+/bin/activate", check_source),
    (r"export \w+=\S+", check_export),
    (r"cd \.\.", check_cd),
    (r"(\w+=\S+ )*pytest( -q)?( --nbmake)?( -m \w+)?( [\w/]+)*", check_pytest),
    (r"python3? -m pyresnet\.train( .*)?", check_train),
    (r"python3? bench/\w+\.py( .*)?", check_bench),
    (r"python3? -m pyresnet\.runs( \S+)?", check_runs),
    (r"mpirun -n \d+ python3? -m pyresnet\.train( .*)?", check_mpirun),
    (r"python3? setup\.py build_ext --inplace", check_setup),
]


def test_main_job_section_names_only_options_that_exist():
    """The options and --model/--dataset values the training guide (and the
    README's main-job section) list are the command's."""
    section = PAGES["docs/training.md"] + re.search(
        r"^## The main job.*?(?=^## )", PAGES["README.md"], flags=re.S | re.M)[0]
    named = set(re.findall(r"`(--[a-z][a-z0-9-]*)", section))
    assert named and named <= TRAIN_OPTIONS, sorted(named - TRAIN_OPTIONS)
    choices = {a.dest: set(a.choices) for a in train.build_parser()._actions if a.choices}
    for value in re.findall(r"`(resnet\d+|cifar\d+)`", section):
        assert value in choices["model"] | choices["dataset"], value


def test_readme_has_shell_commands():
    kinds = {next((i for i, (p, _) in enumerate(RULES) if re.fullmatch(p, c)), None)
             for _, c in COMMANDS}
    assert None not in kinds, [c for _, c in COMMANDS
                               if not any(re.fullmatch(p, c) for p, _ in RULES)]
    assert {6, 7} <= kinds  # the main job and a benchmark at least


@pytest.mark.parametrize("where,command", COMMANDS, ids=[c for _, c in COMMANDS])
def test_readme_shell_command(where, command):
    """Each command matches a rule and passes its check; a command no rule
    knows fails (add a rule)."""
    for pattern, check in RULES:
        if re.fullmatch(pattern, command):
            check(shlex.split(command))
            return
    pytest.fail(f"{where}: no rule in tests/test_readme.py for {command!r}")
