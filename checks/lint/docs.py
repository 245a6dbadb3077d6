"""Lint-rule documentation for ``explain`` and the generated ``reference/rules.md``."""

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


def lint_rules_markdown() -> list[str]:
    from checks.lint import LINT_RULES

    out = ["", "# Lint rules", "",
           "`python -m checks lint` checks the skill itself (`SKILL.md`, `card.yaml`, `CHANGELOG.md`, "
           "`evals/evals.json`), with the same output formats and exit codes as `check`.", "",
           "| id | severity | name | summary |", "|---|---|---|---|"]
    out += [f"| [{r.id}](#{r.id.lower()}) | {r.severity} | {r.name} | {r.summary.replace('|', '/')} |"
            for r in LINT_RULES]
    for rule in LINT_RULES:
        out += ["", f"## {rule.id}", "", "```text", explain_lint_text(rule), "```"]
    return out
