"""Config-rule documentation: ``rules``, ``explain`` and the config rules' part of ``reference/rules.md``.

Everything here is derived from the registry and from running each rule's own
bad and good examples through the real loaders, so the documentation cannot
drift from the code.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from checks.config import CanonicalConfig, Environment
from checks.engine import Finding, reads, run
from checks.loaders import Request, load
from checks.report import finding_lines
from checks.rules import ALL_RULES
from checks.rules.base import Example, Rule
from checks.rules.scope import OUT_OF_SCOPE
from checks.versions import (
    DEFAULT_NEMO_RL_VERSION,
    DEFAULT_VERSION,
    NO_DEFAULT,
    VERSIONS,
    mlm_flags,
    parse_te_version,
    profile,
    resolve_nemo_rl_version,
)


def example_version(rule: Rule, example: Example) -> str:
    if example.version is not None:
        return example.version
    if rule.applies_to(DEFAULT_VERSION, example.flavor):
        return DEFAULT_VERSION
    return next(v for v in reversed(VERSIONS) if rule.applies_to(v, example.flavor))


def example_environment(example: Example) -> Environment:
    return Environment(te_version=parse_te_version(example.te) if example.te else None,
                       nemo_rl_version=resolve_nemo_rl_version(example.nemo_rl) if example.nemo_rl
                       else DEFAULT_NEMO_RL_VERSION, mcore_source="option")


def run_example(rule: Rule, example: Example) -> list[Finding]:
    """Check an example exactly as a user's file or command line would be checked."""
    return [_relabel(f) for f in run(example_configs(example, example_version(rule, example)))]


def example_configs(example: Example, version: str) -> list[CanonicalConfig]:
    """An example's canonical configs in ``version``, loaded as a user's file or command line would be."""
    env = example_environment(example)
    if example.flavor == "megatron-lm" and not example.text.startswith(("MODEL_ARGS", "ENV_VARS")):
        return load(Request(argv=example.text, flavor="megatron-lm", version=version, environment=env))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "example.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(example.text)
        return load(Request(files=(path,), overrides=example.overrides, flavor=example.flavor,
                            version=version, environment=env, assume_defaults=example.complete))


def rule_reads(rule: Rule) -> set[str]:
    """The canonical paths ``rule`` asks about on its own examples: what it reads, observed, not declared."""
    return {path for example in (rule.bad, rule.good)
            for path in reads(rule, example_configs(example, example_version(rule, example)))}


def _relabel(finding: Finding) -> Finding:
    # The temporary path means nothing to a reader.
    from dataclasses import replace

    origin = finding.origin
    if origin is not None and origin.file is not None:
        origin = replace(origin, file="example.yaml")
    return replace(finding, origin=origin)


def rule_json(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id, "name": rule.name, "severity": rule.severity, "summary": rule.summary,
        "flavors": sorted(rule.flavors), "versions": list(rule.versions()),
        "upstream": [
            {"project": c.project, "exception": c.exception, "message": c.message, "stage": c.stage,
             "anchors": c.anchors()}
            for c in rule.upstream
        ],
    }


def rules_text() -> str:
    width = max(len(r.name) for r in ALL_RULES)
    return "\n".join(f"{r.id}  {r.severity:<7}  {r.name:<{width}}  {r.summary}" for r in ALL_RULES)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.rstrip("\n").splitlines())


def _finding_block(f: Finding) -> list[str]:
    """A finding as ``check`` prints it, and its patch: the catalogue shows every part a rule produces."""
    first, *rest = finding_lines(f, ["example"])
    lines = ["-> " + first, *("   " + line for line in rest)]
    if f.patch:
        values = ", ".join(f"{key}={json.dumps(value)}" for key, value in f.patch.items())
        lines.append(f"       patch: {values}" + (f" (partial: {f.partial})" if f.partial else ""))
    return lines


def explain_text(rule: Rule) -> str:
    parts = [f"{rule.id} {rule.name} ({rule.severity})", "", rule.doc, ""]
    versions = rule.versions()
    span = f"{versions[0]} to {versions[-1]}" if len(versions) > 1 else versions[0]
    parts.append(f"Applies to: megatron-core {span}; front ends: {', '.join(sorted(rule.flavors))}")
    for check in rule.upstream:
        quoted = f'"{check.message}"' if check.message is not None else "(bare assert, no message)"
        parts.append(f"Upstream: {check.project} {check.exception} {quoted}")
        anchors = check.anchors()
        width = max(map(len, anchors), default=0)
        parts += [f"    {label:<{width}} {anchor}" for label, anchor in anchors.items()]
    if not rule.upstream:
        parts.append("Upstream: none (this rule goes beyond what upstream checks)")
    for label, example in (("Bad", rule.bad), ("Good", rule.good)):
        version = example_version(rule, example)
        extra = (f", Transformer Engine {example.te}" if example.te else "") + \
            (f", NeMo-RL {example.nemo_rl}" if example.nemo_rl else "")
        parts += ["", f"{label} ({example.flavor}, megatron-core {version}{extra}):", _indent(example.text)]
        parts += [_indent(f"--set {text}") for text in example.overrides]
        findings = [f for f in run_example(rule, example) if f.rule == rule.id]
        parts += [_indent(line) for f in findings for line in _finding_block(f)] or [_indent("-> no finding")]
    return "\n".join(parts)


class _Documented(Protocol):
    """What a config rule and a lint rule share for the catalogue (read-only, as their frozen fields are)."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def summary(self) -> str: ...


_R = TypeVar("_R", bound=_Documented)


def index_markdown(rules: Sequence[_R], explain: Callable[[_R], str]) -> list[str]:
    """A table of the rules, then each rule's explanation under its own heading (the table links to them)."""
    out = ["| id | severity | name | summary |", "|---|---|---|---|"]
    out += [f"| [{r.id}](#{r.id.lower()}) | {r.severity} | {r.name} | {r.summary.replace('|', '/')} |"
            for r in rules]
    for rule in rules:
        out += ["", f"## {rule.id}", "", "```text", explain(rule), "```"]
    return out


def config_rules_markdown() -> list[str]:
    """The config rules' part of ``reference/rules.md``: their index and explanations, then the upstream checks
    no rule reports. ``checks/docs.py`` adds the lint rules (this module does not import the linter)."""
    out = ["# Rule catalogue", "",
           "Generated from the rule registry by `python -m checks rules --format markdown`; "
           "`tests/test_docs.py` fails when this file is stale.", "",
           *index_markdown(ALL_RULES, explain_text)]
    out += ["", "## Upstream checks without a rule", "",
            "Every offload-related raise, assert and warning of the covered releases backs a rule above, or is "
            "listed here with the reason a static config check does not report it.", "",
            "| project | where | message | why no rule |", "|---|---|---|---|"]
    out += [f"| {o.project} | {o.where} | {o.message.replace('|', '/')} | {o.reason} |" for o in OUT_OF_SCOPE]
    return out


def offload_fields() -> list[tuple[str, str]]:
    """(section, name) of every field an offload rule reads, in any version, sorted."""
    names = {tuple(path.split(".", 1)) for rule in ALL_RULES for path in rule_reads(rule)
             if path.split(".", 1)[0] in ("model", "optimizer", "ddp")}
    return sorted((section, name) for section, name in names
                  if any(profile(v).field(section, name) for v in VERSIONS))


def _default(version: str, section: str, name: str) -> str:
    spec = profile(version).field(section, name)
    if spec is None:
        return "—"
    if spec.default is NO_DEFAULT:
        return "(computed)"
    return f"`{spec.default!r}`"


def _flag(version: str, name: str) -> str:
    flags = [f for f, spec in mlm_flags(version).items() if spec.dest == name]
    return ", ".join(f"`{f}`" for f in sorted(flags)) or "—"


def parameters_markdown() -> str:
    """``reference/parameters.md``: every field the offload rules read (on their examples), per version."""
    fields = offload_fields()
    head = "| field | " + " | ".join(VERSIONS) + " |"
    out = ["# Offload parameters per megatron-core version", "",
           "Generated from the field and flag tables (`checks/data/`, parsed from each release's source) by "
           "`python -m checks rules --format parameters`; `tests/test_docs.py` fails when this file is stale. "
           "The fields are those the rules read when they run on their own examples. "
           "A cell is the dataclass default in that release; — means the field does not exist there (rule "
           "CFG003). Megatron Bridge and NeMo-RL use these names; the Megatron-LM flag, where there is one, "
           "is in the second table.", "", head, "|" + "---|" * (len(VERSIONS) + 1)]
    for section, name in fields:
        out.append(f"| `{section}.{name}` | " + " | ".join(_default(v, section, name) for v in VERSIONS) + " |")
    out += ["", "## Megatron-LM flags", "", "| field | " + " | ".join(VERSIONS) + " |",
            "|" + "---|" * (len(VERSIONS) + 1)]
    for section, name in fields:
        if section != "ddp":
            out.append(f"| `{section}.{name}` | " + " | ".join(_flag(v, name) for v in VERSIONS) + " |")
    return "\n".join(out) + "\n"
