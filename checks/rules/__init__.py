"""The rule registry: every rule, sorted by id. Explicit, so ids and order never depend on imports."""

from __future__ import annotations

from checks.rules.base import Rule
from checks.rules.fine_grained import RULES as _FINE_GRAINED
from checks.rules.keys import RULES as _KEYS
from checks.rules.layer_offload import RULES as _LAYER
from checks.rules.optimizer import RULES as _OPTIMIZER
from checks.rules.transformer_engine import RULES as _TRANSFORMER_ENGINE

ALL_RULES: tuple[Rule, ...] = tuple(sorted(_LAYER + _FINE_GRAINED + _OPTIMIZER + _KEYS + _TRANSFORMER_ENGINE, key=lambda r: r.id))
BY_ID: dict[str, Rule] = {rule.id: rule for rule in ALL_RULES}


def get(rule_id: str) -> Rule:
    """The rule with this id; ``ValueError('no such rule: "X"')`` otherwise."""
    try:
        return BY_ID[rule_id.upper()]
    except KeyError:
        raise ValueError(f'no such rule: "{rule_id}"') from None
