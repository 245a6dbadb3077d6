"""EVL: ``evals/evals.json`` is a usable evaluation set in the NVIDIA skills' format.

Each task's id says what it tests: ``positive-`` (the skill fires and offloading is part of the answer),
``negative-`` (the skill must not fire: ``expected_skill`` is null) and ``decoy-`` (the skill fires,
but offloading is the wrong answer). The schema is ``checks/schemas/evals.schema.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shlex
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from checks.lint.base import EVALS_FILE, LintHit, LintRule, Seed, Skill
from checks.lint.registry_text import rule_ids

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "evals.schema.json"
MIN_TASKS, MIN_NEGATIVE, MIN_DECOY = 12, 2, 2


def check_readable(skill: Skill) -> Iterator[LintHit]:
    """evals/evals.json exists and is valid JSON."""
    skill.evals  # noqa: B018 (reading records a parse error, if any)
    if EVALS_FILE in skill.errors:
        yield skill.errors[EVALS_FILE]


def check_schema(skill: Skill) -> Iterator[LintHit]:
    """Every task has exactly id, question, expected_skill, expected_script, ground_truth, expected_behavior."""
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

    for error in Draft202012Validator(_schema()).iter_errors(_data(skill)):
        keys = list(error.absolute_path)
        where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys) or "(top)"
        message = error.message if len(error.message) <= 240 else error.message[:237] + "..."
        yield LintHit(EVALS_FILE, _line(skill, keys[0] if keys else None), where, f"{where}: {message}",
                      "Make the task match checks/schemas/evals.schema.json")


def check_coverage(skill: Skill) -> Iterator[LintHit]:
    """At least 12 tasks, including at least 2 negative and 2 decoy tasks and 1 positive one.

    Negative and decoy tasks catch a skill that fires on everything or answers "offload" to every memory
    question.
    """
    tasks = _tasks(skill)
    if skill.evals is None:
        return
    kinds = [str(t.get("id", "")).split("-", 1)[0] for t in tasks]
    wanted = (("tasks", len(tasks), MIN_TASKS), ("negative tasks", kinds.count("negative"), MIN_NEGATIVE),
              ("decoy tasks", kinds.count("decoy"), MIN_DECOY), ("positive tasks", kinds.count("positive"), 1))
    for label, count, minimum in wanted:
        if count < minimum:
            yield LintHit(EVALS_FILE, None, label, f"evals.json has {count} {label}; at least {minimum} are needed",
                          f"Add {label}")


def check_unique_ids(skill: Skill) -> Iterator[LintHit]:
    """Task ids are unique."""
    seen: dict[str, int] = {}
    for index, task in enumerate(_tasks(skill)):
        task_id = str(task.get("id"))
        if task_id in seen:
            yield LintHit(EVALS_FILE, _line(skill, index), f"[{index}].id", f"id {task_id!r} repeats task "
                          f"[{seen[task_id]}]", "Give each task its own id")
        seen.setdefault(task_id, index)


def check_expected_skill(skill: Skill) -> Iterator[LintHit]:
    """Negative tasks expect no skill and no script; the others expect this skill by its name."""
    fm = skill.frontmatter
    name = fm.data.get("name") if fm is not None else None
    for index, task in enumerate(_tasks(skill)):
        negative = str(task.get("id", "")).startswith("negative-")
        expected = task.get("expected_skill")
        if negative and (expected is not None or task.get("expected_script") is not None):
            yield LintHit(EVALS_FILE, _line(skill, index), f"[{index}].expected_skill", f"negative task "
                          f"{task.get('id')!r} expects skill {expected!r} / script {task.get('expected_script')!r}",
                          "Set expected_skill and expected_script to null")
        elif not negative and name is not None and expected != name:
            yield LintHit(EVALS_FILE, _line(skill, index), f"[{index}].expected_skill", f"task {task.get('id')!r} "
                          f"expects skill {expected!r}; this skill is {name!r}", f"Set expected_skill: {name!r}")


def check_scripts(skill: Skill) -> Iterator[LintHit]:
    """Every ``expected_script`` is a command the CLI accepts, and every file it names exists."""
    from checks.parser import build_parser, split_command

    for index, task in enumerate(_tasks(skill)):
        script = task.get("expected_script")
        if not isinstance(script, str) or not script.startswith("python -m checks "):
            continue
        try:
            words, _ = split_command(shlex.split(script)[3:])  # the words after `--` are a launch command
        except ValueError as err:
            yield LintHit(EVALS_FILE, _line(skill, index), f"[{index}].expected_script", f"{script!r} cannot be "
                          f"split into words: {err}", "Fix the quoting")
            continue
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                args = build_parser().parse_args(words)
        except SystemExit:
            problem = " ".join(stderr.getvalue().split()) or "refused"
            yield LintHit(EVALS_FILE, _line(skill, index), f"[{index}].expected_script", f"{script!r}: the CLI "
                          f"refuses it ({problem})", "Use a command python -m checks accepts")
            continue
        for name in _named_files(args):
            if not (skill.root / name).exists():
                yield LintHit(EVALS_FILE, _line(skill, index), f"[{index}].expected_script", f"{script!r} names "
                              f"{name}, which does not exist", "Name a bundled file")


def check_rule_ids(skill: Skill) -> Iterator[LintHit]:
    """Every rule id a task mentions exists."""
    known = rule_ids(skill.lint_rule_ids)
    for index, task in enumerate(_tasks(skill)):
        for rule_id in sorted(set(re.findall(r"\b[A-Z]{3}\d{3}\b", json.dumps(task)))):
            if rule_id not in known:
                yield LintHit(EVALS_FILE, _line(skill, index), f"[{index}]", f"task {task.get('id')!r} names rule "
                              f"{rule_id}, which does not exist", "Use an id from python -m checks rules")


def _named_files(args: argparse.Namespace) -> list[str]:
    """The config files a command reads, and ``plan --profile``'s node profile."""
    profile = getattr(args, "profile", None)
    return [*(getattr(args, "files", None) or []), *([profile] if isinstance(profile, str) else [])]


def _data(skill: Skill) -> Any:
    return skill.evals[0] if skill.evals is not None else []


def _tasks(skill: Skill) -> list[dict[str, Any]]:
    data = _data(skill)
    return [t for t in data if isinstance(t, dict)] if isinstance(data, list) else []


def _line(skill: Skill, index: Any) -> int | None:
    if skill.evals is None or not isinstance(index, int):
        return None
    starts = skill.evals[1]
    return starts[index] if index < len(starts) else None


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


RULES: tuple[LintRule, ...] = (
    LintRule("EVL001", "evals-readable", "error", check_readable,
             Seed(EVALS_FILE, r"\A\[", "[[")),
    LintRule("EVL002", "evals-schema", "error", check_schema,
             Seed(EVALS_FILE, r'"ground_truth":', '"answer":')),
    LintRule("EVL003", "evals-coverage", "error", check_coverage,
             Seed(EVALS_FILE, r"\A[\s\S]*\Z", "[]\n")),
    LintRule("EVL004", "evals-unique-ids", "error", check_unique_ids,
             Seed(EVALS_FILE, r'"id": "positive-[a-z0-9-]+"', '"id": "negative-deepspeed-zero-offload"')),
    LintRule("EVL005", "evals-expected-skill", "error", check_expected_skill,
             Seed(EVALS_FILE, r'"expected_skill": "megatron-cpu-offloading"', '"expected_skill": "cpu-offloading"')),
    LintRule("EVL006", "evals-scripts-run", "error", check_scripts,
             Seed(EVALS_FILE, r'"python -m checks check examples/', '"python -m checks check examples/missing/')),
    LintRule("EVL007", "evals-rule-ids", "error", check_rule_ids,
             Seed(EVALS_FILE, r"\bOPT022\b", "OPT922")),
)
