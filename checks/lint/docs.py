"""Lint-rule documentation for ``explain`` and the generated ``reference/rules.md`` (composed in ``checks/docs.py``)."""

from __future__ import annotations

from checks.lint.base import LintRule


def explain_lint_text(rule: LintRule) -> str:
    seed = rule.seed
    return "\n".join([
        f"{rule.id} {rule.name} ({rule.severity})", "", rule.doc, "",
        "Applies to: python -m checks lint (the skill's own files)",
        # The replacement is left out: it is a defect (an unknown rule id, a wrong number) by design.
        f"Seeded defect (tests/test_lint.py): {seed.file}, the first match of /{seed.pattern}/",
    ])
