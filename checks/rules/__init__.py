"""The rule registry: every rule, sorted by id. Explicit, so ids and order never depend on imports."""

from __future__ import annotations

from checks.rules import (
    fine_grained,
    fine_grained_graphs,
    keys,
    layer_offload,
    optimizer,
    optimizer_split,
    precision,
    recompute,
    transformer_engine,
)
from checks.rules.base import Rule

_FAMILIES: tuple[tuple[Rule, ...], ...] = (
    layer_offload.RULES,  # ACT: cpu_offloading*
    recompute.RULES,  # ACT: the recompute settings the offload rules read and their fixes change
    fine_grained.RULES,  # FGA: fine_grained_activation_offloading + offload_modules
    fine_grained_graphs.RULES,  # FGA: the same under CUDA graphs
    optimizer.RULES,  # OPT: optimizer_cpu_offload, HybridDeviceOptimizer
    optimizer_split.RULES,  # OPT: what a fractional offload really moves (uses checks/model)
    precision.RULES,  # OPT: the precision-aware optimizer and parameter dtypes
    transformer_engine.RULES,  # TEX: traps that depend on the Transformer Engine version
    keys.RULES,  # CFG: typos, types, versions, values the front end drops
)
ALL_RULES: tuple[Rule, ...] = tuple(sorted((rule for family in _FAMILIES for rule in family), key=lambda r: r.id))
BY_ID: dict[str, Rule] = {rule.id: rule for rule in ALL_RULES}


def get(rule_id: str) -> Rule:
    """The rule with this id; ``ValueError('no such rule: "X"')`` otherwise."""
    try:
        return BY_ID[rule_id.upper()]
    except KeyError:
        raise ValueError(f'no such rule: "{rule_id}"') from None
