"""Render findings: text for people, JSON for tools. Renderers only format; they decide nothing."""

from __future__ import annotations

from collections import Counter
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


@dataclass(frozen=True)
class Skipped:
    """A file a directory or glob held that is not a config, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class Checked:
    """One config's outcome: its report, or why it could not be read (``error``)."""

    path: str
    report: Report | None = None
    error: str = ""

    @property
    def status(self) -> str:
        return "error" if self.report is None else self.report.status


@dataclass(frozen=True)
class Run:
    """Every config of one ``check`` over several paths: one summary, one exit code."""

    checked: tuple[Checked, ...]
    skipped: tuple[Skipped, ...] = ()
    strict: bool = False

    @property
    def findings(self) -> tuple[tuple[str, Finding], ...]:
        return tuple((c.path, f) for c in self.checked if c.report for f in c.report.findings)

    def count(self, severity: str) -> int:
        return sum(c.report.count(severity) for c in self.checked if c.report)

    @property
    def unknown(self) -> int:
        return sum(c.report.unknown for c in self.checked if c.report)

    @property
    def unreadable(self) -> int:
        return sum(1 for c in self.checked if c.report is None)

    @property
    def status(self) -> str:
        if self.unreadable:
            return "error"
        statuses = {c.status for c in self.checked}
        return "fail" if "fail" in statuses else "incomplete" if "incomplete" in statuses else "ok"

    @property
    def exit_code(self) -> int:
        """2 when a file could not be read (the others are still reported), 1 on a failing config, else 0."""
        return 2 if self.unreadable else 1 if self.status == "fail" else 0


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


def _summary(outcome: Report | Run) -> dict[str, int]:
    return {**{s: outcome.count(s) for s in ("error", "warning", "info")}, "unknown": outcome.unknown}


def input_name(report: Report) -> str:
    """The config a report is of: its file, its files as layered (--merge), or the command-line input."""
    return " + ".join(report.inputs) if report.inputs else "<command line>"


def file_json(path: str, report: Report | None, error: str = "") -> dict[str, Any]:
    """One checked config in the JSON output's ``files``: its flavor, status and counts, or why it was not read."""
    if report is None:
        return {"path": path, "flavor": None, "status": "error", "error": error}
    return {"path": path, "flavor": report.flavor, "mcore_version": report.mcore_version, "status": report.status,
            "summary": _summary(report)}


def render_json(report: Report) -> str:
    document = {
        "status": report.status,
        "mcore_version": report.mcore_version,
        "flavor": report.flavor,
        "files": [file_json(input_name(report), report)],
        "findings": [finding_json(f) for f in report.findings],
        "summary": _summary(report),
        "assumptions": assumptions(report),
    }
    return dumps(document)


def render_run_json(result: Run) -> str:
    """Several configs: each in ``files``, every finding with the ``file`` whose check found it."""
    document = {
        "status": result.status,
        "files": [file_json(c.path, c.report, c.error) for c in result.checked],
        "skipped": [{"path": s.path, "reason": s.reason} for s in result.skipped],
        "findings": [{"file": path, **finding_json(f)} for path, f in result.findings],
        "summary": {**_summary(result), "configs": len(result.checked), "unreadable": result.unreadable,
                    "skipped": len(result.skipped)},
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


def _counts(outcome: _Outcome | Run) -> str:
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


def render_run_text(result: Run, verbose: bool = False) -> str:
    """Several configs: every finding as ``check`` prints it, the files that could not be read, one summary."""
    lines = [line for path, f in result.findings for line in finding_lines(f, [path])]
    lines += [f"error: {c.error}" for c in result.checked if c.report is None]
    if verbose:
        lines += [f"checked {c.path}: {c.status}" + (f" ({c.report.flavor}, megatron-core {c.report.mcore_version})"
                                                   if c.report else "") for c in result.checked]
        lines += [f"skipped {s.path}: {s.reason}" for s in result.skipped]
    flavors = ", ".join(f"{name} {count}" for name, count in
                        sorted(Counter(c.report.flavor for c in result.checked if c.report).items()))
    with_findings = len({path for path, _ in result.findings})
    summary = f"{len(result.checked)} config{'s' if len(result.checked) != 1 else ''} checked" + \
        (f" ({flavors})" if flavors else "") + f": {_counts(result)}" + \
        (f" in {with_findings} of them" if with_findings else "")
    if result.unreadable:
        summary += f"; {result.unreadable} could not be read"
    if result.skipped:
        summary += f"; {len(result.skipped)} file{'s' if len(result.skipped) != 1 else ''} skipped as not configs" + \
            ("" if verbose else " (--verbose lists them)")
    lines.append(summary)
    if result.unknown and not result.count("error"):
        lines.append(f"ok with {result.unknown} value{'s' if result.unknown != 1 else ''} unknown: the rules "
                     f"{UNKNOWN_RULE} lists could not decide")
    if result.findings:
        lines.append("For more on each rule: python -m checks explain "
                     + " ".join(dict.fromkeys(f.rule for _, f in result.findings)))
    return "\n".join(lines)


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
