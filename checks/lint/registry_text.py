"""What the rule registry knows: rule ids, every upstream message, rule documentation, pinned commits.

The linter checks documents against these so that a quoted error text, a rule id or an upstream commit
can only be written if the checker itself carries it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from checks.rules import ALL_RULES
from checks.rules.scope import OUT_OF_SCOPE
from checks.versions import VERSIONS, nemo_rl_commit, profile

_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_ANCHOR_COMMIT = re.compile(r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)@([0-9a-f]{7,40})")
MEGATRON_LM = "NVIDIA/Megatron-LM"
NEMO_RL = "NVIDIA-NeMo/RL"


def rule_ids(lint_ids: frozenset[str]) -> frozenset[str]:
    """Every rule id: the config rules' and ``lint_ids``, the lint rules' (the linter passes them in, through
    :attr:`Skill.lint_rule_ids`: the modules that define lint rules cannot import the list of them)."""
    return _config_rule_ids() | lint_ids


@lru_cache(maxsize=1)
def _config_rule_ids() -> frozenset[str]:
    return frozenset(r.id for r in ALL_RULES)


@lru_cache(maxsize=1)
def upstream_templates() -> tuple[str, ...]:
    """Every message upstream prints that the registry records: rule anchors and out-of-scope statements."""
    messages = {check.message for rule in ALL_RULES for check in rule.upstream if check.message}
    messages |= {o.message for o in OUT_OF_SCOPE}
    return tuple(sorted(messages))


def quoted_upstream(text: str) -> bool:
    """Whether ``text`` is (part of) a message upstream prints, placeholders standing for any value."""
    return any(matches_template(text, template) for template in upstream_templates())


def in_rule_docs(text: str, rule_id: str | None = None) -> bool:
    """Whether a rule's documentation quotes ``text`` (runtime errors that no upstream check prints)."""
    normalised = " ".join(text.split())
    return any(normalised in " ".join(rule.doc.split()) for rule in ALL_RULES if rule_id in (None, rule.id))


def matches_template(text: str, template: str) -> bool:
    """``text`` lies inside one literal piece, or renders the template's start with any placeholder values.

    A quote may stop inside a placeholder's value ("... less than 32") or at the end of a literal piece.
    """
    pieces = _PLACEHOLDER.split(template)
    if any(text in piece for piece in pieces):
        return True
    for end in range(1, len(pieces) + 1):
        pattern = ".+?".join(re.escape(p) for p in pieces[:end]) + (".*" if end < len(pieces) else "")
        if re.fullmatch(pattern, text, flags=re.S):
            return True
    return False


@lru_cache(maxsize=1)
def pinned_commits() -> dict[str, frozenset[str]]:
    """Full or short commits per repository that the registry's anchors and data tables are pinned to."""
    found: dict[str, set[str]] = {}
    for rule in ALL_RULES:
        for check in rule.upstream:
            for anchor in check.anchors().values():
                if m := _ANCHOR_COMMIT.match(anchor):
                    found.setdefault(m.group(1), set()).add(m.group(2))
    found.setdefault(MEGATRON_LM, set()).update(profile(v).commit for v in VERSIONS)
    from checks.versions import NEMO_RL_VERSIONS

    found.setdefault(NEMO_RL, set()).update(nemo_rl_commit(v) for v in NEMO_RL_VERSIONS)
    return {repo: frozenset(commits) for repo, commits in found.items()}


def same_commit(a: str, b: str) -> bool:
    """Two spellings of one commit: one is a prefix (at least 7 hex digits) of the other."""
    a, b = a.lower(), b.lower()
    return min(len(a), len(b)) >= 7 and (a.startswith(b) or b.startswith(a))


def commits_in(text: str) -> list[tuple[str, str]]:
    """(repository, commit) of every ``owner/name@sha`` in ``text``."""
    return [(m.group(1), m.group(2)) for m in _ANCHOR_COMMIT.finditer(text)]
