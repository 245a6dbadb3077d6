"""``python -m checks lint``: check the skill itself (SKILL.md, card.yaml, CHANGELOG.md, evals/evals.json).

Same output formats and exit codes as ``check``: findings with a rule id, severity, file:line, message
and fix; exit 0 without errors, 1 with errors (or warnings with ``--strict``), 2 when the directory is
not a skill at all.
"""

from __future__ import annotations

from pathlib import Path

from checks.config import Origin
from checks.engine import Finding
from checks.errors import InputError
from checks.lint import card, evals, skill
from checks.lint.base import LintRule, Skill

LINT_RULES: tuple[LintRule, ...] = tuple(sorted((*skill.RULES, *card.RULES, *evals.RULES), key=lambda r: r.id))
BY_ID: dict[str, LintRule] = {rule.id: rule for rule in LINT_RULES}
_ORDER = {"error": 0, "warning": 1, "info": 2}


def lint(root: Path, rules: tuple[LintRule, ...] = LINT_RULES) -> list[Finding]:
    """Run the lint rules over the skill in ``root``; findings sorted by file, line, severity and rule."""
    if not root.is_dir():
        raise InputError(str(root), "is not a directory")
    if not (root / "SKILL.md").is_file():
        raise InputError(str(root), "has no SKILL.md: not a skill directory (give the skill's root)")
    documents = Skill(root, lint_rule_ids=frozenset(BY_ID))
    findings = []
    for rule in rules:
        for hit in rule.check(documents):
            origin = Origin(file=hit.file, line=hit.line)
            findings.append(Finding(rule.id, hit.severity or rule.severity, None, hit.path, origin, hit.message,
                                    hit.fix, None, None))
    return sorted(findings, key=lambda f: (f.origin.file or "" if f.origin else "",
                                           (f.origin.line or 0) if f.origin else 0,
                                           _ORDER.get(f.severity, 3), f.rule, f.path))
