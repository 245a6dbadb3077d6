"""Run the rules over canonical configs and collect findings.

Rules read a :class:`Context` only. The engine skips a rule when a field it
reads holds a value of the wrong type (CFG002 reports that value once), stamps
each hit with the rule's id and severity, finds the line to point at, and
translates patches into the input's own key spelling.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from checks.anchors import STAGE_OPTIMIZER, Upstream
from checks.config import CanonicalConfig, Origin
from checks.context import Context
from checks.rules import ALL_RULES
from checks.rules.base import Hit, Rule


@dataclass(frozen=True)
class Finding:
    """One rendered problem; the JSON output is exactly these fields."""

    rule: str
    severity: str
    target: str | None
    path: str
    origin: Origin | None
    message: str
    fix: str
    upstream: Upstream | None
    patch: dict[str, Any] | None


def run(configs: Sequence[CanonicalConfig], rules: Iterable[Rule] = ALL_RULES) -> list[Finding]:
    rules = tuple(rules)
    findings: list[Finding] = []
    for cfg in configs:
        ctx = Context(cfg)
        for rule in rules:
            if not rule.applies_to(cfg.version, cfg.flavor):
                continue
            if any(path in ctx.invalid for path in rule.reads):
                continue
            findings.extend(_finding(rule, hit, ctx) for hit in rule.check(ctx) if _reached(rule, hit, cfg))
    return sorted(findings, key=_order)


def _reached(rule: Rule, hit: Hit, cfg: CanonicalConfig) -> bool:
    """Whether what the hit is about happens to this model.

    A model the framework builds for forward passes only (NeMo-RL's teachers and generation model) never
    builds its optimizer: checks the optimizer factory performs, and what the optimizer would do at run time,
    do not concern it. Its optimizer settings are still validated (config classes, the framework's set-up),
    so those findings stay, and the loader says the offload itself does nothing (CFG005).
    """
    if cfg.role != "inference" or not rule.id.startswith("OPT"):
        return True
    return hit.upstream is not None and hit.upstream.stage != STAGE_OPTIMIZER


def _finding(rule: Rule, hit: Hit, ctx: Context) -> Finding:
    origin = hit.origin or _locate(ctx, (hit.path, *hit.at))
    patch = ctx.cfg.spelling.patch(hit.patch) if hit.patch else None
    return Finding(rule.id, hit.severity or rule.severity, ctx.cfg.target, hit.path, origin, hit.message, hit.fix,
                   hit.upstream, patch or None)


def _locate(ctx: Context, paths: Sequence[str]) -> Origin | None:
    for path in paths:
        setting = ctx.setting(path)
        if setting is not None:
            return setting.origin
    return None


_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _order(f: Finding) -> tuple[Any, ...]:
    """Target, then file and line (command-line arguments by position), then severity and id."""
    o = f.origin
    arg_position = int("".join(c for c in o.arg if c.isdigit()) or 0) if o and o.arg else 0
    return (f.target or "", o is None, (o.file or "") if o else "", (o.line or 0) if o else 0,
            (o.arg or "").split("#")[0].split("[")[0] if o else "", arg_position,
            _SEVERITY_ORDER.get(f.severity, 3), f.rule, f.path)
