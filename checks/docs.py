"""The documentation of every rule, config and lint: ``explain`` and the generated ``reference/rules.md``.

The one module that composes the two catalogues, so that neither needs the other: ``checks/catalogue.py``
documents the config rules and never imports the linter; ``checks/lint/docs.py`` documents the lint rules.
"""

from __future__ import annotations

from checks.catalogue import config_rules_markdown, explain_text, index_markdown
from checks.lint import BY_ID as LINT_BY_ID
from checks.lint import LINT_RULES
from checks.lint.docs import explain_lint_text
from checks.rules import get


def explain(rule_id: str) -> str:
    """A rule's explanation, config or lint rule alike.

    Raises:
        ValueError: no rule has this id.
    """
    lint_rule = LINT_BY_ID.get(rule_id.upper())
    return explain_lint_text(lint_rule) if lint_rule is not None else explain_text(get(rule_id))


def rules_markdown() -> str:
    """``reference/rules.md``: the whole catalogue, generated (``python -m checks rules --format markdown``)."""
    out = [*config_rules_markdown(), "", "# Lint rules", "",
           "`python -m checks lint` checks the skill itself (`SKILL.md`, `card.yaml`, `CHANGELOG.md`, "
           "`evals/evals.json`), with the same output formats and exit codes as `check`.", "",
           *index_markdown(LINT_RULES, explain_lint_text)]
    return "\n".join(out) + "\n"
