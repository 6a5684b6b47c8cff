"""The code's shape, read from its imports with the standard library's `ast`: no import circle in
`core/` or `playground/` (imports under `if TYPE_CHECKING:` and inside functions count too), the
layers' rules, and every module naming its one idea and saying what it never imports. A module is as
long as its one idea: no line count is a rule (a count made commits move code only to pass it)."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "playground")
IDEA_CHARS = 250  # the first sentence of a module's docstring names its one idea: one sentence, not a list
# Who must never import what (prefixes of module names). A module matches every rule whose prefix it
# starts with; `except_inside` exempts modules under that prefix (the app assembles the tabs).
RULES = (
    dict(who="core", never=("gradio", "plotly", "pandas", "playground"),
         why="core is the UI-free package, usable from a notebook"),
    dict(who="playground.figures", never=("playground.tabs", "playground.sessions", "playground.context", "core.train"),
         why="figures only draw the numbers they are given"),
    dict(who="playground", never=("playground.tabs",), except_inside=("playground.tabs", "playground.app"),
         why="shared modules serve the tabs; only the app assembles them"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}
PACKAGE_INITS = {module_name(path) for path in MODULES.values() if path.name == "__init__.py"}


def imported(path: Path) -> set[str]:
    """The project's modules that `path` imports anywhere in it (top, functions, TYPE_CHECKING blocks)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c` imports the module a.b.c when there is one, else names of a.b
            found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES else node.module
                         for alias in node.names)
    return found


def edges(name: str) -> set[str]:
    """What importing module `name` runs of the project: each module it imports, and the `__init__` of
    every package above one that it is not itself inside (Python runs those first)."""
    targets = set()
    for target in imported(MODULES[name]):
        if target not in MODULES:
            continue
        targets.add(target)
        parts = target.split(".")
        for depth in range(1, len(parts)):
            package = ".".join(parts[:depth])
            if package in PACKAGE_INITS and not (name == package or name.startswith(package + ".")):
                targets.add(package)
    targets.discard(name)
    return targets


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path that ends where it starts, or None."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once all its imports are seen
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name], _ = "open", path.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (circle := visit(target)):
                return circle
        state[name], _ = "done", path.pop()
        return None

    for name in sorted(graph):
        if name not in state and (circle := visit(name)):
            return circle
    return None


def test_the_circle_finder_finds_a_type_only_circle(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from core.model import GPT\n")
    assert "core.model" in imported(module)
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle():
    graph = {name: edges(name) for name in MODULES}
    assert find_circle(graph) is None, " -> ".join(find_circle(graph))


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule["who"])
def test_each_layer_imports_only_what_it_may(rule):
    broken = []
    for name, path in MODULES.items():
        if not (name == rule["who"] or name.startswith(rule["who"] + ".")):
            continue
        if any(name == inside or name.startswith(inside + ".") for inside in rule.get("except_inside", ())):
            continue
        broken += [f"{name} imports {target}" for target in sorted(imported(path))
                   if any(target == never or target.startswith(never + ".") for never in rule["never"])]
    assert not broken, f"{rule['why']}: {broken}"


def test_a_tab_never_imports_another_tab():
    tabs = {name.split(".")[2] for name in MODULES if name.startswith("playground.tabs.") and name.count(".") >= 2}
    broken = [f"{name} imports {target}" for name, path in MODULES.items() if name.startswith("playground.tabs.")
              for target in imported(path)
              if target.startswith("playground.tabs.") and target.split(".")[2] != name.split(".")[2]
              and target.split(".")[2] in tabs]
    assert not broken, broken


def test_every_module_names_its_one_idea_first():
    """The docstring opens with what the module is, in one sentence (up to its first '.' or ':')."""
    vague = {}
    for name, path in MODULES.items():
        doc = (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").strip()
        first = re.split(r"(?<=[.:])\s", doc, maxsplit=1)[0]
        if not first or len(first) > IDEA_CHARS:
            vague[name] = first[:80]
    assert not vague, f"modules whose docstring does not open with one sentence naming their idea: {vague}"


def test_every_module_says_what_it_holds_and_what_it_never_imports():
    missing = [name for name, path in MODULES.items()
               if "Never imports" not in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")]
    assert not missing, f"modules whose docstring lacks a 'Never imports ...' sentence: {missing}"


def test_the_readme_layout_names_every_module():
    """README's Layout is the tree: every module of core/ and playground/ is named in it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):].split("```")[1]
    words = set(re.findall(r"[A-Za-z_]+", layout))
    missing = sorted(name for name, path in MODULES.items() if path.stem != "__init__" and path.stem not in words)
    assert not missing, f"modules README's Layout does not name: {missing}"


# ---------------------------------------------------------------- the tests themselves
TEST_CODE = sorted((ROOT / "tests").glob("*.py")) + sorted((ROOT / "tests" / "support").glob("*.py"))


def imported_tests(path: Path) -> list[str]:
    """What `path` imports that a test must not: a test module (`test_x`), the conftest, or anything as
    `tests.x` (a second name for a module pytest already imported as `x`)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module)
    return [name for name in names if name.split(".")[0] in ("conftest", "tests") or name.startswith("test_")]


def test_the_test_import_finder_finds_each_kind(tmp_path):
    module = tmp_path / "test_m.py"
    module.write_text("import os\nfrom support.app import FORM\nfrom test_hostile import Hostile\n"
                      "def f():\n    import tests.support.app\n    from conftest import serve\n")
    assert imported_tests(module) == ["test_hostile", "tests.support.app", "conftest"]


def test_no_test_imports_another_test_module_or_the_conftest():
    """Fixtures come from conftest.py by name, helpers from tests/support/ as `support.<module>`: a test
    module imported by another runs twice under two names (`test_x` and `tests.test_x`)."""
    broken = {str(path.relative_to(ROOT)): found for path in TEST_CODE if (found := imported_tests(path))}
    assert not broken, broken
