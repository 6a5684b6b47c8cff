"""The requirements files: every import declared, the Space's file free of test tools, torch the CPU build."""

import ast
import importlib
import re
import sys
import tomllib
from fnmatch import fnmatch
from importlib.metadata import packages_distributions, version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNTIME, TESTS = REPO / "requirements.txt", REPO / "requirements-test.txt"
PYPROJECT, README, CI = REPO / "pyproject.toml", REPO / "README.md", REPO / ".ci" / "run"
APP_SOURCES = [REPO / "core", REPO / "playground", REPO / "app.py"]
TEST_SOURCES = [REPO / "tests"]
# PyTorch's CPU wheels; an *extra* index, so everything else still comes from PyPI.
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"
# Imported only where the host provides them, never installed by requirements.txt: ZeroGPU Spaces come with
# Hugging Face's `spaces` (pinning a version could fight the one the hardware needs); elsewhere the app goes without.
HOST_PROVIDED = {"spaces"}
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[A-Za-z0-9._,-]+\])?==(\S+)")  # name[extras]==version


def normalize(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): gradio_client == gradio-client."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's lines, comments and blank lines left out (options such as -r kept)."""
    lines = (re.sub(r"(^|\s)#.*", "", raw).strip() for raw in path.read_text().splitlines())
    return [line for line in lines if line]


def read_requirements(path: Path) -> tuple[dict[str, str], list[str]]:
    """A requirements file's pins ({normalized name: version}) and its option lines (-r, --extra-index-url)."""
    pins, options = {}, []
    for line in requirement_lines(path):
        if line.startswith("-"):
            options.append(line)
            continue
        match = PIN.fullmatch(line)
        assert match, f"{path.name}: {line!r} is not pinned exactly (name==version)"
        pins[normalize(match[1])] = match[2]
    return pins, options


def imported_modules(sources: list[Path]) -> dict[str, Path]:
    """Each third-party top-level module imported in sources -> one file that imports it.
    Standard-library modules and the repository's own (a file or folder beside the importer or at
    the root: core, playground, conftest, ...) are left out."""
    files = [f for s in sources for f in ([s] if s.is_file() else sorted(s.rglob("*.py")))]
    found = {}
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in (n.split(".")[0] for n in names):
                # a sibling shadows a package only beside a script: in a package (core/tokenizers.py), the
                # absolute `import tokenizers` is Hugging Face's
                beside = () if (file.parent / "__init__.py").is_file() else (file.parent,)
                local = any((d / name).is_dir() or (d / f"{name}.py").is_file() for d in (*beside, REPO))
                if name not in sys.stdlib_module_names and not local:
                    found.setdefault(name, file)
    return found


def distributions(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module -> the installed distributions that provide it (empty when none does)."""
    provided = packages_distributions()
    return {m: {normalize(d) for d in provided.get(m, [])} for m in modules}


def test_the_app_imports_exactly_the_runtime_requirements():
    runtime, _ = read_requirements(RUNTIME)
    modules = imported_modules(APP_SOURCES)
    undeclared = {f"{m} ({modules[m].relative_to(REPO)}, from {sorted(d) or 'no installed distribution'})"
                  for m, d in distributions(modules).items() if not d & runtime.keys() and m not in HOST_PROVIDED}
    assert not undeclared, f"imported by the app but not in requirements.txt: {sorted(undeclared)}"
    used = set().union(*distributions(modules).values())
    unused = runtime.keys() - used
    # A Space installs requirements.txt: pytest, playwright or a test client there is wasted build time.
    assert not unused, f"in requirements.txt but never imported by core/, playground/ or app.py: {sorted(unused)}"


def test_test_imports_are_declared_and_test_tools_stay_out_of_the_runtime_file():
    runtime, _ = read_requirements(RUNTIME)
    tests, options = read_requirements(TESTS)
    assert "-r requirements.txt" in options, "requirements-test.txt must include the runtime file"
    assert not tests.keys() & runtime.keys(), f"declared twice: {sorted(tests.keys() & runtime.keys())}"
    assert {"pytest", "playwright"} <= tests.keys()
    modules = imported_modules(TEST_SOURCES)
    undeclared = {f"{m} ({modules[m].relative_to(REPO)})"
                  for m, d in distributions(modules).items() if not d & (runtime.keys() | tests.keys())}
    assert not undeclared, f"imported by tests but in neither requirements file: {sorted(undeclared)}"


def test_torch_is_pinned_exactly_and_comes_from_the_cpu_index():
    runtime, runtime_options = read_requirements(RUNTIME)
    _, test_options = read_requirements(TESTS)
    # ==X.Y.Z, no local label: it matches 2.13.0+cpu from the CPU index on Linux and Windows and
    # the plain macOS wheel; an unpinned torch would resolve to PyPI's newest CUDA build.
    assert re.fullmatch(r"\d+\.\d+\.\d+", runtime.get("torch", "")), f"torch pin: {runtime.get('torch')!r}"
    # The CPU index and nothing else: --index-url would hide PyPI, which serves every other package.
    assert runtime_options == [CPU_INDEX], f"requirements.txt options: {runtime_options}"
    assert test_options == ["-r requirements.txt"], "the test file must install torch exactly as the Space does"


def test_the_installed_packages_are_the_pinned_ones():
    pins = read_requirements(RUNTIME)[0] | read_requirements(TESTS)[0]
    # torch reports 2.13.0+cpu: the public part is what the pin names.
    wrong = {name: version(name) for name, pinned in pins.items() if version(name).split("+")[0] != pinned}
    assert not wrong, f"installed versions differ from the pins (reinstall the environment): {wrong}"


def test_the_space_card_asks_for_the_pinned_gradio():
    # A Space installs gradio==sdk_version in the same pip command as requirements.txt; two pins conflict.
    card = REPO.joinpath("README.md").read_text().split("---")[1]
    sdk_version = re.search(r"^sdk_version:\s*(\S+)$", card, re.MULTILINE)[1]
    assert sdk_version == read_requirements(RUNTIME)[0]["gradio"]


def test_pyproject_installs_the_packages_with_requirements_txts_pins_and_the_command():
    pyproject = tomllib.loads(PYPROJECT.read_text())
    project = pyproject["project"]
    # requirements.txt stays the source (a Space installs it, options included); pyproject repeats its pins
    assert project["dependencies"] == [line for line in requirement_lines(RUNTIME) if not line.startswith("-")]
    module, function = project["scripts"]["attention-playground"].split(":")
    assert module == "playground.__main__" and callable(getattr(importlib.import_module(module), function))
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {".".join(init.parent.relative_to(REPO).parts)
                for top in ("core", "playground") for init in (REPO / top).rglob("__init__.py")}
    assert {"core", "playground", "playground.tabs.train"} <= packages
    left_out = {package for package in packages if not any(fnmatch(package, pattern) for pattern in include)}
    assert not left_out, f"packages pip install -e . would not install: {sorted(left_out)}"
    assert not any(fnmatch("tests", pattern) for pattern in include)


def first_command(readme: str, section: str) -> str:
    """The first line of the first code block in the README's `## section`."""
    text = readme.split(f"\n## {section}\n", 1)[1]
    return text.split("```bash\n", 1)[1].splitlines()[0]


def test_the_readme_runs_and_tests_on_a_fresh_machine_in_one_line_and_ci_runs_that_line():
    readme = README.read_text()
    run, test = first_command(readme, "Run it"), first_command(readme, "Test it")
    set_up = "python3 -m venv .venv && .venv/bin/pip install --retries 0 -r "
    assert run == f"{set_up}requirements.txt && .venv/bin/python -m playground", run
    assert test == f"{set_up}requirements-test.txt && .venv/bin/python -m pytest", test
    assert f"{test} || status=$?" in CI.read_text().splitlines()  # exactly that, its exit status kept
