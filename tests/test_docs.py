"""Documents that list rules or commands are generated from, or checked against, the code."""

from __future__ import annotations

import re

import yaml
from conftest import ROOT

from checks.catalogue import parameters_markdown, rules_markdown


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


def test_skill_frontmatter_follows_the_agent_skills_spec() -> None:
    text = (ROOT / "SKILL.md").read_text(encoding="utf-8")
    assert text.startswith("---\n")
    frontmatter, body = text[4:].split("\n---\n", 1)
    data = yaml.safe_load(frontmatter)
    assert set(data) <= {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", data["name"]) and len(data["name"]) <= 64
    assert 0 < len(data["description"]) <= 1024
    assert data["license"] == "Apache-2.0"
    assert all(isinstance(v, str) for v in data["metadata"].values())
    for value in [data["description"], *data["metadata"].values()]:
        assert ": " not in value and "<" not in value and ">" not in value and "---" not in value
    assert "{" not in frontmatter and "[" not in frontmatter  # block style only (strictyaml refuses flow style)
    assert len(text.splitlines()) < 500 and body.strip()


def test_skill_and_readme_name_real_rules() -> None:
    from checks.rules import BY_ID

    for name in ("SKILL.md", "README.md"):
        text = (ROOT / name).read_text(encoding="utf-8")
        for rule_id in re.findall(r"\b[A-Z]{3}\d{3}\b", text):
            assert rule_id in BY_ID, f"{name} names unknown rule {rule_id}"


def test_memory_model_report_is_generated_from_its_artifact() -> None:
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("memory_report", ROOT / "tools" / "memory_report.py")
    assert spec and spec.loader
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    data = json.loads((ROOT / "reference" / "benchmarks" / "activation_validation.json").read_text())
    assert (ROOT / "reference" / "memory-model.md").read_text(encoding="utf-8") == report.markdown(data), \
        "run: python tools/memory_report.py"

