"""Documents that list rules or commands are generated from, or checked against, the code."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest
from conftest import ROOT

from checks.catalogue import parameters_markdown
from checks.docs import rules_markdown


def test_rules_reference_is_current() -> None:
    on_disk = (ROOT / "reference" / "rules.md").read_text(encoding="utf-8")
    assert on_disk == rules_markdown(), "run: python -m checks rules --format markdown > reference/rules.md"


def test_parameter_reference_is_current() -> None:
    on_disk = (ROOT / "reference" / "parameters.md").read_text(encoding="utf-8")
    assert on_disk == parameters_markdown(), \
        "run: python -m checks rules --format parameters > reference/parameters.md"


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_readme_has_two_commands_and_ci_runs_the_test_one() -> None:
    commands = _readme_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    main_job, tests = commands
    assert main_job.endswith("python -m checks examples")
    assert tests.endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == tests


# SKILL.md's frontmatter, sections, rule ids and numbers: python -m checks lint (tests/test_lint.py).


def _tool(name: str) -> ModuleType:
    """A module of tools/, loaded in the test process."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_model_report_is_generated_from_its_artifact() -> None:
    import json

    report = _tool("memory_report")
    data = json.loads((ROOT / "reference" / "benchmarks" / "activation_validation.json").read_text())
    assert (ROOT / "reference" / "memory-model.md").read_text(encoding="utf-8") == report.markdown(data), \
        "run: python tools/memory_report.py"



def _console_examples() -> list[tuple[str, int, str, list[str]]]:
    """(file, line, command, expected output lines) of every ``console`` block that runs the checker."""
    found = []
    for path in [ROOT / "SKILL.md", *sorted((ROOT / "reference").glob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        inside, command, start, expected = False, None, 0, []
        for number, line in enumerate(lines, start=1):
            if line.strip() == "```console":
                inside, command, expected = True, None, []
            elif inside and line.strip() == "```":
                if command:
                    found.append((path.name, start, command, expected))
                inside = False
            elif inside and line.startswith("$ python -m checks "):
                if command:
                    found.append((path.name, start, command, expected))
                command, start, expected = line[2:], number, []
            elif inside and command:
                expected.append(line)
    return found


@pytest.mark.parametrize(("name", "line", "command", "expected"), _console_examples(),
                         ids=[f"{n}:{line}" for n, line, _, _ in _console_examples()])
def test_quoted_command_output_is_what_the_command_prints(name: str, line: int, command: str,
                                                          expected: list[str]) -> None:
    """A console block may shorten the output, never change it: each line shown is a line printed."""
    import shlex
    import subprocess
    import sys

    done = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr
    printed = {out.rstrip() for out in done.stdout.splitlines()}
    missing = [e for e in expected if e.rstrip() not in printed]
    assert not missing, f"{name}:{line}: `{command}` no longer prints:\n" + "\n".join(missing)


def test_activation_terms_reference_is_current() -> None:
    """In the test process (tools/generate.py --check runs in a subprocess), so that a mutation tool sees it."""
    assert (ROOT / "reference" / "activation-terms.md").read_text(encoding="utf-8") == \
        _tool("activation_terms").markdown(), \
        "run: python tools/generate.py"
