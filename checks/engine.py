"""Run the rules over canonical configs and collect findings.

Rules read a :class:`Context` only. The engine skips a rule when a field it
reads holds a value of the wrong type (the context raises :class:`Unreadable`;
CFG002 reports that value once), stamps
each hit with the rule's id and severity, finds the line to point at,
translates patches into the input's own key spelling, and tries each patch on
the config to mark the ones that do not fix their finding alone (``partial``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from checks.anchors import STAGE_OPTIMIZER, Upstream
from checks.config import CanonicalConfig, Origin, Setting
from checks.context import Context, Unreadable
from checks.fixes import unsafe_paths
from checks.rules import ALL_RULES
from checks.rules.base import Hit, Rule
from checks.suppressions import check_ids


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
    paths: tuple[str, ...] = ()  # every path it is about, when several
    partial: str = ""  # when the patch alone does not fix the finding: what else is needed
    unsafe_paths: tuple[str, ...] = ()  # canonical paths the patch sets beyond offload knobs (checks.fixes)

    @property
    def file(self) -> str | None:
        """The file the finding is located in, when it is located in one."""
        return self.origin.file if self.origin is not None else None

    @property
    def line(self) -> int | None:
        return self.origin.line if self.origin is not None else None

    @property
    def safe(self) -> bool:
        """Whether the patch changes only offload settings (checks/fixes.py), not the job's layout or math."""
        return not self.unsafe_paths


def run(configs: Sequence[CanonicalConfig], rules: Iterable[Rule] = ALL_RULES) -> list[Finding]:
    """Every rule over every config.

    Unknown is not a default. A rule that reads a value no input states gets a stand-in from the context;
    its outcome counts only if it is the same whatever that value is (:func:`_outcome`). Otherwise the rule
    could not decide, and the rule that runs last (CFG010) names the value, the rules and how to supply it.

    A patch is a promise that applying it removes its finding. Each one is tried on the config (:func:`_trial`);
    one after which the finding stays, or an error appears that was not there, is marked partial, with what else
    is needed. The rules that run last see the complete patches in the input's spelling (CFG011: two that
    disagree on a key), and which inline suppressions silenced a finding (CFG012: one that silenced none).
    """
    rules = tuple(rules)
    first = tuple(rule for rule in rules if not rule.last)
    last = tuple(rule for rule in rules if rule.last)
    findings: list[Finding] = []
    contexts: list[Context] = []
    used: set[Any] = set()  # suppressions are in the files, which the models of one config share
    for cfg in configs:
        check_ids(cfg.suppressions, (r.id for r in ALL_RULES), (r.id for r in ALL_RULES if r.last))
        ctx = Context(cfg)
        ctx.used_suppressions = used
        contexts.append(ctx)
        found = _hits(ctx, first)
        errors = {(rule.id, hit.path) for rule, hit in found if (hit.severity or rule.severity) == "error"}
        for rule, hit in found:
            finding = _finding(rule, hit, ctx)
            silencing = next((s for s in cfg.suppressions if s.silences(rule.id, finding.file, finding.line)), None)
            if silencing is not None:  # the user's inline suppression, with its reason
                ctx.used_suppressions.add(silencing)
                continue
            if finding.patch:  # a patch the input can write: does it fix the finding?
                finding = replace(finding, partial=_trial(cfg, first, rule, hit, errors))
                if not finding.partial:
                    ctx.record_patch(rule.id, hit.patch or {}, finding.patch or {})
            findings.append(finding)
    once: set[tuple[Any, ...]] = set()
    for ctx in contexts:  # after every model's rules: a suppression one of them used is used
        for rule, hit in _hits(ctx, last):
            finding = _finding(rule, hit, ctx)
            if rule.per_run:  # about the input files: once, whichever model's config holds them
                if (rule.id, finding.origin, finding.message) in once:
                    continue
                once.add((rule.id, finding.origin, finding.message))
                finding = replace(finding, target=None)
            findings.append(finding)
    return sorted(findings, key=_order)


def reads(rule: Rule, configs: Iterable[CanonicalConfig]) -> set[str]:
    """Every canonical path ``rule`` asks its context about on ``configs`` (those it applies to)."""
    paths: set[str] = set()
    for cfg in configs:
        if rule.applies_to(cfg.version, cfg.flavor):
            ctx = Context(cfg)
            with contextlib.suppress(Unreadable):
                _outcome(rule, ctx)
            paths |= ctx.read
    return paths


def _hits(ctx: Context, rules: Sequence[Rule]) -> list[tuple[Rule, Hit]]:
    found: list[tuple[Rule, Hit]] = []
    for rule in rules:
        if not rule.applies_to(ctx.cfg.version, ctx.cfg.flavor):
            continue
        try:
            hits, undecided = _outcome(rule, ctx)
        except Unreadable:  # whatever the other values are, the rule cannot judge this one
            continue
        found.extend((rule, hit) for hit in hits)
        for path in undecided:
            ctx.undecided.setdefault(path, []).append(rule.id)
    return found


def _trial(cfg: CanonicalConfig, rules: Sequence[Rule], rule: Rule, hit: Hit, errors: set[tuple[str, str]]) -> str:
    """What else a hit's patch needs: "" when the patch, applied alone, fixes it.

    The patch is applied to the canonical config and the rules run again. The patch fixes the hit when the
    hit is gone and no error appears that the config did not already have; otherwise the answer names the
    findings that stay or appear, with their fixes.
    """
    if not hit.patch:
        return ""
    origin = Origin(arg="patch", note=f"the patch of {rule.id}")
    changed = {path: Setting(value, replace(origin, key=path)) for path, value in hit.patch.items()}
    settings = {**cfg.settings, **changed}
    patched = replace(cfg, settings=settings)
    after = _hits(Context(patched), rules)
    stays = [(r, h) for r, h in after if (r.id, h.path) == (rule.id, hit.path)]
    new = [(r, h) for r, h in after if (h.severity or r.severity) == "error" and (r.id, h.path) not in errors
           and (r.id, h.path) != (rule.id, hit.path)]
    if not stays and not new:
        return ""
    parts = [f"this finding stays: {h.message}" for _, h in stays[:1]]
    parts += [f"{r.id} follows: {h.message} (fix: {h.fix})" for r, h in new]
    return "Not enough alone: " + "; ".join(parts)


_MAX_TRIES = 48  # stand-ins tried per rule; beyond, the rule is undecided on what it read


def _outcome(rule: Rule, ctx: Context) -> tuple[list[Hit], set[str]]:
    """The rule's hits that hold whatever the unknown values are, and the values it could not decide without.

    With the stand-ins (the dataclass defaults) the rule gives some hits; each unknown value it read is then
    set, one at a time, to other values of its type (:func:`_candidates`), and the rule run again. A hit
    (its path and severity) that every run gives stands: a fix that names an unknown field, or a message
    that quotes one, decides nothing. A hit some run does not give, or a run that gives one more, means the
    rule could not decide: the values it read are returned for CFG010.
    """
    def attempt(stand_in: dict[str, Any]) -> tuple[list[Hit], set[str]]:
        ctx.unknown_reads.clear()
        ctx.stand_in = stand_in
        try:
            hits = [hit for hit in rule.check(ctx) if _reached(rule, hit, ctx.cfg)]
        finally:
            ctx.stand_in = {}
        return hits, set(ctx.unknown_reads)

    hits, reads = attempt({})
    if not reads:
        return hits, set()
    base = _signature(hits)
    robust = set(base)
    undecided = False
    explored: set[str] = set()
    pending = sorted(reads)
    tries = 0
    while pending and not (undecided and not robust):  # once nothing stands and something is open, stop
        path = pending.pop(0)
        if path in explored:
            continue
        explored.add(path)
        for value in _candidates(ctx, path):
            tries += 1
            if tries > _MAX_TRIES:
                return [], explored | reads
            other, more = attempt({path: value})
            found = _signature(other)
            robust &= found
            undecided |= bool(found - base)
            reads |= more
            pending += sorted(more - explored)
    kept = [hit for hit in hits if (hit.path, hit.severity) in robust]
    return kept, reads if undecided or len(kept) < len(hits) else set()


def _signature(hits: Sequence[Hit]) -> frozenset[tuple[str, str | None]]:
    return frozenset((hit.path, hit.severity) for hit in hits)


def _candidates(ctx: Context, path: str) -> list[Any]:
    """Values an unknown field could hold, besides its default: the edges of its type."""
    from checks.config import split_path
    from checks.versions import NO_DEFAULT

    section, name = split_path(path)
    spec = ctx.profile.field(section, name) if section not in ("env", "run") else None
    if section == "env":
        return [None, "0", "1"]
    if spec is None:
        return [None, True, False, 0, 1, 2, "1"]
    kind = spec.kind
    by_kind: dict[str, list[Any]] = {"bool": [True, False], "int": [0, 1, 2, 4, 8, 64],
                                     "float": [0.0, 0.25, 0.5, 1.0], "dtype": ["fp32", "bf16", "fp16"],
                                     "list_str": [[], ["core_attn"]]}
    found = list(by_kind.get(kind, []))
    if spec.choices:
        found = list(spec.choices)
    elif kind == "str":
        found = ["", "full", "selective", "transformer_engine", "local"]
    if spec.nullable:
        found.append(None)
    default = spec.default if spec.default is not NO_DEFAULT else None
    return [value for value in found if value != default or type(value) is not type(default)]


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
    # a finding about several values is found at the first of them the inputs state
    origin = hit.origin or _locate(ctx, (hit.path, *hit.at, *hit.paths))
    patch = ctx.cfg.spelling.patch(hit.patch) if hit.patch else None
    unsafe = unsafe_paths(hit.patch or {}) if patch else ()
    return Finding(rule.id, hit.severity or rule.severity, ctx.cfg.target, hit.path, origin, hit.message, hit.fix,
                   hit.upstream, patch or None, hit.paths, unsafe_paths=unsafe)


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
