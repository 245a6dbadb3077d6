"""Every hazard note in examples/offload/notes.py is referred to by the code and exercised by a marked test.

A test names the notes it exercises with ``@pytest.mark.hazard("Title", ...)`` (registered in pyproject.toml).
The markers are read from the source of every test module, so the check sees them all whichever part of the
suite runs, and it needs neither torch nor a GPU (the CUDA tests it counts are in tests/test_offload_cuda.py).
A note's title appearing in a test's text does not count: only a marker does.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_NOTES_FILE = ROOT / "examples" / "offload" / "notes.py"
NOTES = re.findall(r"^Note: \[(.+?)\]$", ast.get_docstring(ast.parse(_NOTES_FILE.read_text(encoding="utf-8"))) or "",
                   flags=re.M)


def _sources() -> dict[Path, str]:
    paths = [p for p in (ROOT / "examples").rglob("*.py") if p.name != "notes.py"]
    return {p: p.read_text(encoding="utf-8") for p in paths}


def _is_hazard_mark(node: ast.AST) -> bool:
    """``pytest.mark.hazard`` (or ``mark.hazard`` after ``from pytest import mark``)."""
    if not (isinstance(node, ast.Attribute) and node.attr == "hazard"):
        return False
    owner = node.value
    return (isinstance(owner, ast.Attribute) and owner.attr == "mark") or (isinstance(owner, ast.Name)
                                                                          and owner.id == "mark")


class _MarkerReader:
    """Reads one test module's hazard markers into ``marked`` and ``problems`` (see :func:`hazard_markers`)."""

    def __init__(self, name: str, marked: dict[str, list[str]], problems: list[str]) -> None:
        self.name, self.marked, self.problems = name, marked, problems
        self.placed: set[int] = set()

    def read(self, tree: ast.Module) -> None:
        self._visit(tree.body)
        for node in ast.walk(tree):
            if _is_hazard_mark(node) and id(node) not in self.placed:
                self.problems.append(f"{self.name}:{node.lineno}: a hazard marker that is not on a test "
                                     "applies to nothing")

    def _visit(self, body: list[ast.stmt], prefix: str = "") -> None:
        for statement in body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name.startswith("test"):
                for decorator in statement.decorator_list:
                    self._claim(decorator, prefix + statement.name)
            elif isinstance(statement, ast.ClassDef) and statement.name.startswith("Test"):
                for decorator in statement.decorator_list:
                    self._claim(decorator, prefix + statement.name)
                self._visit(statement.body, f"{prefix}{statement.name}::")
            elif isinstance(statement, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                           for t in statement.targets):
                self._claim(statement.value, prefix + "pytestmark")

    def _claim(self, expression: ast.AST, test: str) -> None:
        for node in ast.walk(expression):
            if not _is_hazard_mark(node):
                continue
            self.placed.add(id(node))
            call = next((c for c in ast.walk(expression) if isinstance(c, ast.Call) and c.func is node), None)
            args = call.args if call is not None else []
            titles = [a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if call is None or not titles or len(titles) != len(args) or call.keywords:
                self.problems.append(f"{self.name}:{node.lineno}: {test}: write the marker as "
                                     '@pytest.mark.hazard("Note title", ...), with the titles as string literals')
            for title in titles:
                self.marked.setdefault(title, []).append(f"{self.name}::{test}")


def hazard_markers(sources: dict[str, str]) -> tuple[dict[str, list[str]], list[str]]:
    """The tests marked with each hazard note, read from the tests' source, and every misplaced marker.

    A marker counts where pytest applies it: on a ``test_*`` function or a ``Test*`` class (also inside the
    decorator, as ``pytest.param(..., marks=...)``) or in a module's ``pytestmark``. A marker anywhere
    else, or one whose arguments are not note titles written as string literals, is a problem: the check
    could not tell which hazard it claims. Reading the source, not a pytest collection, sees every module
    whatever subset of the suite runs.
    """
    marked: dict[str, list[str]] = {}
    problems: list[str] = []
    for name, text in sources.items():
        _MarkerReader(name, marked, problems).read(ast.parse(text, filename=name))
    return marked, problems


def _test_sources() -> dict[str, str]:
    paths = sorted((ROOT / "tests").glob("*.py"))
    return {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def test_every_note_is_defined_once_and_referred_to() -> None:
    assert NOTES and len(NOTES) == len(set(NOTES))
    referred = {name for text in _sources().values() for name in re.findall(r"See Note: \[(.+?)\]", text)}
    assert referred <= set(NOTES), f"references to notes that do not exist: {referred - set(NOTES)}"
    assert set(NOTES) <= referred, f"notes no code refers to: {set(NOTES) - referred}"


def test_every_note_has_a_test_marked_with_it() -> None:
    marked, problems = hazard_markers(_test_sources())
    assert not problems, "\n".join(problems)
    unknown = {title: tests for title, tests in marked.items() if title not in NOTES}
    assert not unknown, f"markers naming no note in examples/offload/notes.py: {unknown}"
    missing = [title for title in NOTES if title not in marked]
    assert not missing, f"notes without a test marked @pytest.mark.hazard(...): {missing}"


def test_the_hazard_marker_is_registered(pytestconfig: pytest.Config) -> None:
    assert any(line.startswith("hazard(") for line in pytestconfig.getini("markers"))


def test_the_marker_check_sees_misplaced_unknown_and_missing_markers() -> None:
    source = """
import pytest
from pytest import mark

pytestmark = pytest.mark.hazard("Module wide")

@pytest.mark.hazard("On a test", "Second")
def test_a(): ...

@pytest.mark.parametrize("x", [pytest.param(1, marks=mark.hazard("In a param"))])
def test_b(x): ...

class TestGroup:
    @pytest.mark.hazard("On a method")
    def test_c(self): ...

@pytest.mark.hazard("On a helper")
def helper(): ...

@pytest.mark.hazard(TITLE)
def test_d(): ...

@pytest.mark.hazard
def test_e(): ...
"""
    marked, problems = hazard_markers({"t.py": source})
    assert marked == {"Module wide": ["t.py::pytestmark"], "On a test": ["t.py::test_a"],
                      "Second": ["t.py::test_a"], "In a param": ["t.py::test_b"],
                      "On a method": ["t.py::TestGroup::test_c"]}
    assert [p.split(":")[1] for p in problems] == ["20", "23", "17"]  # TITLE, bare marker, then the helper's
    assert "applies to nothing" in problems[-1]
