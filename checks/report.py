"""Render findings: text for people, JSON for tools. Renderers only format; they decide nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from checks.config import Environment, Origin
from checks.engine import Finding
from checks.fixes import describe
from checks.jsonio import dumps


@dataclass(frozen=True)
class _Outcome:
    """Findings and the exit code they give; ``check`` and ``lint`` share both."""

    findings: tuple[Finding, ...]
    strict: bool = field(default=False, kw_only=True)  # warnings fail the run too

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def failed(self) -> bool:
        return self.count("error") > 0 or (self.strict and self.count("warning") > 0)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


UNKNOWN_RULE = "CFG010"  # a value some rule needed that no input states


@dataclass(frozen=True)
class Report(_Outcome):
    """The outcome of one ``check`` run."""

    flavor: str
    mcore_version: str
    inputs: tuple[str, ...]
    environment: Environment = field(default_factory=Environment)

    @property
    def unknown(self) -> int:
        """Values the verdict lacks: "ok" is then "ok with N values unknown"."""
        return sum(len(f.paths) or 1 for f in self.findings if f.rule == UNKNOWN_RULE)

    @property
    def failed(self) -> bool:
        return super().failed or (self.strict and self.unknown > 0)

    @property
    def status(self) -> str:
        return "fail" if self.failed else "incomplete" if self.unknown else "ok"


@dataclass(frozen=True)
class LintReport(_Outcome):
    """The outcome of one ``lint`` run over a skill directory."""

    root: str


def location_json(origin: Origin | None) -> dict[str, Any] | None:
    if origin is None or (origin.file is None and origin.arg is None):
        return None
    return {"file": origin.file, "line": origin.line, "arg": origin.arg}


def finding_json(f: Finding) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rule": f.rule, "severity": f.severity, "target": f.target, "path": f.path,
        "location": location_json(f.origin), "message": f.message, "fix": f.fix,
        "upstream": f.upstream.as_json() if f.upstream else None,
    }
    if f.patch:
        out["patch"] = f.patch
        out["safe"] = f.safe
        if not f.safe:
            out["unsafe_paths"] = list(f.unsafe_paths)
    if f.partial:
        out["partial"] = f.partial
    if f.paths:
        out["paths"] = list(f.paths)
    return out


def assumptions(report: Report) -> dict[str, Any]:
    """What the verdict depends on besides the config: versions chosen or left unknown."""
    env = report.environment
    return {
        "mcore_version_source": env.mcore_source,
        "te_version": ("none" if env.te_absent else ".".join(map(str, env.te_version))) if env.te_version else None,
        "nemo_rl_version": env.nemo_rl_version if report.flavor == "nemo-rl" else None,
    }


def render_json(report: Report) -> str:
    document = {
        "status": report.status,
        "mcore_version": report.mcore_version,
        "flavor": report.flavor,
        "findings": [finding_json(f) for f in report.findings],
        "summary": {**{s: report.count(s) for s in ("error", "warning", "info")}, "unknown": report.unknown},
        "assumptions": assumptions(report),
    }
    return dumps(document)


def _where(origin: Origin | None, inputs: Sequence[str]) -> str:
    if origin is not None and (origin.file is not None or origin.arg is not None):
        return origin.describe()
    return inputs[0] if inputs else "<config>"


def finding_lines(f: Finding, inputs: Sequence[str]) -> list[str]:
    """A finding as the text report prints it: the located message, then its fix and upstream check."""
    target = f"[{f.target}] " if f.target else ""
    lines = [f"{_where(f.origin, inputs)}: {f.severity.upper()} {f.rule} {target}{f.message}", f"    fix: {f.fix}"]
    if f.patch and not f.safe:
        lines.append(f"    unsafe fix: {describe(f.unsafe_paths)} (--emit-overrides leaves it out unless "
                     "--all-fixes)")
    if f.upstream is not None:
        # one line per finding part: a multi-line message (Hydra's) shows its line breaks as \n
        quoted = '"{}"'.format(f.upstream.message.replace("\n", "\\n")) if f.upstream.message is not None \
            else "(bare assert, no message)"
        lines.append(f"    upstream: {f.upstream.project} {quoted} at {f.upstream.anchor}")
    return lines


def _counts(outcome: _Outcome) -> str:
    return ", ".join(f"{outcome.count(s)} {s}{'s' if outcome.count(s) != 1 else ''}"
                     for s in ("error", "warning", "info"))


def render_text(report: Report) -> str:
    lines = [line for f in report.findings for line in finding_lines(f, report.inputs)]
    counts = _counts(report)
    context = f"{report.flavor}, megatron-core {report.mcore_version}"
    if report.environment.mcore_source != "option":
        context += f" ({report.environment.mcore_source})"
    if report.environment.te_absent:
        context += ", without Transformer Engine"
    elif report.environment.te_version:
        context += f", Transformer Engine {'.'.join(map(str, report.environment.te_version))}"
    if report.flavor == "nemo-rl":
        context += f", NeMo-RL {report.environment.nemo_rl_version}"
    if report.findings:
        lines.append(f"{counts} ({context})")
        if report.unknown and not report.count("error"):
            lines.append(f"ok with {report.unknown} value{'s' if report.unknown != 1 else ''} unknown: no error in "
                         f"what the inputs state, but the rules {UNKNOWN_RULE} lists could not decide")
        ids = " ".join(dict.fromkeys(f.rule for f in report.findings))
        lines.append(f"For more on each rule: python -m checks explain {ids}")
    else:
        lines.append(f"ok: no offloading problems found ({context})")
    return "\n".join(lines)


RENDERERS: dict[str, Callable[[Report], str]] = {"text": render_text, "json": render_json}


def render_lint_text(report: LintReport) -> str:
    lines = [line for f in report.findings for line in finding_lines(f, ["SKILL.md"])]
    if report.findings:
        lines.append(f"{_counts(report)} (skill at {report.root})")
        lines.append("For more on each rule: python -m checks explain "
                     + " ".join(dict.fromkeys(f.rule for f in report.findings)))
    else:
        lines.append(f"ok: SKILL.md, card.yaml, CHANGELOG.md and evals/evals.json pass every lint rule "
                     f"(skill at {report.root})")
    return "\n".join(lines)


def render_lint_json(report: LintReport) -> str:
    return dumps({
        "status": "fail" if report.failed else "ok",
        "skill": report.root,
        "findings": [finding_json(f) for f in report.findings],
        "summary": {s: report.count(s) for s in ("error", "warning", "info")},
    })


LINT_RENDERERS: dict[str, Callable[[LintReport], str]] = {"text": render_lint_text, "json": render_lint_json}
