"""CRD: ``card.yaml`` follows its schema, and every claim in it traces to code, an artifact or a public source.

The schema is ``checks/schemas/card.schema.json``. Beyond it, these rules open what the card points at:
measured values must equal their artifacts under ``reference/benchmarks/``, code-verified claims must
cite an anchor the rule registry carries (``tools/verify_anchors.py`` checks those against upstream),
and the skill's version, date and upstream commits must agree across ``SKILL.md``, ``card.yaml``,
``CHANGELOG.md`` and the package.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from checks import __version__
from checks.lint.base import CARD_FILE, CHANGELOG_FILE, SKILL_FILE, LintHit, LintRule, Seed, Skill
from checks.lint.registry_text import (
    commits_in,
    in_rule_docs,
    matches_template,
    pinned_commits,
    rule_ids,
    same_commit,
)
from checks.rules import BY_ID

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "card.schema.json"
_CHANGELOG_HEADING = re.compile(r"^(\d+\.\d+\.\d+)\s+\((\d{4}-\d{2}-\d{2})\)$")


def check_readable(skill: Skill) -> Iterator[LintHit]:
    """card.yaml exists and is valid YAML (duplicate keys are refused, as OmegaConf refuses them)."""
    skill.card  # noqa: B018 (reading it records why it could not be read)
    if CARD_FILE in skill.errors:
        yield skill.errors[CARD_FILE]


def check_schema(skill: Skill) -> Iterator[LintHit]:
    """card.yaml validates against ``checks/schemas/card.schema.json``.

    The schema fixes the sections (revision, validated_on, upstream, claims, measured_results,
    reported_by_others, training_dimensions, interactions, failure_modes, corrections, limitations) and
    what each claim needs for its status: ``code_verified`` a rule and an anchor, ``measured`` a result
    with an artifact, ``reported_by_others`` a public source.
    """
    card = skill.card
    if card is None:
        return
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

    validator = Draft202012Validator(_schema())
    for error in sorted(validator.iter_errors(card.data), key=lambda e: list(map(str, e.absolute_path))):
        keys = tuple(error.absolute_path)
        where = ".".join(str(k) if isinstance(k, str) else f"[{k}]" for k in keys).replace(".[", "[") or "(top)"
        message = error.message if len(error.message) <= 240 else error.message[:237] + "..."
        yield LintHit(CARD_FILE, skill.card_line(*keys), where, f"{where}: {message}",
                      "Make the card match checks/schemas/card.schema.json")


def check_artifacts_exist(skill: Skill) -> Iterator[LintHit]:
    """Every measured result's artifact exists under ``reference/benchmarks/`` and is a JSON object."""
    for index, result in _results(skill):
        artifact = result.get("artifact")
        if not isinstance(artifact, str):
            continue
        data = skill.artifact(artifact)
        if data is None:
            yield LintHit(CARD_FILE, skill.card_line("measured_results", index, "artifact"),
                          f"measured_results[{index}].artifact", f"artifact {artifact} does not exist or is not a "
                          "JSON object", f"Run {result.get('command', 'its command')} and commit the artifact")


def check_artifact_values(skill: Skill) -> Iterator[LintHit]:
    """Every measured value equals the artifact's value at its dotted path, and the command is the artifact's.

    ``values`` maps a path such as ``summary.largest_relative_error`` or ``variants[1].peak_device_bytes``
    to the number the card states. Equality is exact: copy the number, do not round it. When the
    artifact records the command that wrote it (``revision.command``), the card's ``command`` must be it.
    """
    for index, result in _results(skill):
        data = skill.artifact(result.get("artifact"))
        values = result.get("values")
        if data is None or not isinstance(values, dict):
            continue
        for path, stated in values.items():
            found, actual = _lookup(data, path)
            line = skill.card_line("measured_results", index, "values", path)
            if not found:
                yield LintHit(CARD_FILE, line, f"measured_results[{index}].values.{path}",
                              f"{result['artifact']} has no value at {path}", "Use a path that exists in the artifact")
            elif not _equal(stated, actual):
                yield LintHit(CARD_FILE, line, f"measured_results[{index}].values.{path}",
                              f"card states {path} = {stated!r}, the artifact {result['artifact']} has {actual!r}",
                              f"Set it to {actual!r}, or rerun {result.get('command')} and commit the artifact")
        recorded = (data.get("revision") or {}).get("command") if isinstance(data.get("revision"), dict) else None
        if isinstance(recorded, str) and recorded.split() != str(result.get("command", "")).split():
            yield LintHit(CARD_FILE, skill.card_line("measured_results", index, "command"),
                          f"measured_results[{index}].command", f"card says the command is "
                          f"{result.get('command')!r}; {result['artifact']} was written by {recorded!r}",
                          f"Set command: {recorded}")


def check_claim_evidence(skill: Skill) -> Iterator[LintHit]:
    """Every claim's evidence resolves, and every result and correction is tied to a claim.

    ``measured`` claims name a ``measured_results`` id; ``reported_by_others`` claims name a
    ``reported_by_others`` id with the same source; ``code_verified`` claims name an existing rule and
    one of that rule's upstream anchors. Training-dimension evidence and corrections name claim ids.
    """
    card = skill.card
    if card is None or not isinstance(card.data, dict):
        return
    data = card.data
    measured = {r.get("id") for r in _list(data, "measured_results") if isinstance(r, dict)}
    reported = {r.get("id"): r.get("source") for r in _list(data, "reported_by_others") if isinstance(r, dict)}
    claims = [c for c in _list(data, "claims") if isinstance(c, dict)]
    claim_ids = {c.get("id") for c in claims}
    cited: set[Any] = set()
    for index, claim in enumerate(_list(data, "claims")):
        if not isinstance(claim, dict):
            continue
        status, where = claim.get("status"), f"claims[{index}]"
        line = skill.card_line("claims", index, "status")
        if status == "measured" and claim.get("result") not in measured:
            yield LintHit(CARD_FILE, line, where, f"measured claim {claim.get('id')!r} cites result "
                          f"{claim.get('result')!r}, which is not in measured_results (no artifact behind it)",
                          "Add the measurement with its command and artifact, or change the claim's status")
        elif status == "reported_by_others":
            if claim.get("result") not in reported:
                yield LintHit(CARD_FILE, line, where, f"claim {claim.get('id')!r} cites {claim.get('result')!r}, "
                              "which is not in reported_by_others", "Name a reported_by_others id")
            elif reported[claim.get("result")] != claim.get("source"):
                yield LintHit(CARD_FILE, line, where, f"claim {claim.get('id')!r} gives source "
                              f"{claim.get('source')!r}, its result says {reported[claim.get('result')]!r}",
                              "Use one source")
        elif status == "code_verified":
            rule = BY_ID.get(str(claim.get("rule")))
            anchors = {a for check in rule.upstream for a in check.anchors().values()} if rule else set()
            if rule is None:
                yield LintHit(CARD_FILE, line, where, f"claim {claim.get('id')!r} names rule {claim.get('rule')!r}, "
                              "which does not exist", "Name the rule that mirrors the upstream check")
            elif claim.get("anchor") not in anchors:
                yield LintHit(CARD_FILE, skill.card_line("claims", index, "anchor"), where,
                              f"claim {claim.get('id')!r}: {claim.get('anchor')!r} is not an anchor of {rule.id}",
                              f"Use one of python -m checks explain {rule.id}'s anchors")
        cited.add(claim.get("result"))
    for index, result in _results(skill):
        if result.get("id") not in cited:
            yield LintHit(CARD_FILE, skill.card_line("measured_results", index, "id"), f"measured_results[{index}]",
                          f"measured result {result.get('id')!r} backs no claim", "Add the claim it supports")
    dimensions = data.get("training_dimensions")
    for name, dimension in (dimensions.items() if isinstance(dimensions, dict) else ()):
        for evidence in (dimension.get("evidence") or []) if isinstance(dimension, dict) else ():
            if evidence not in claim_ids:
                yield LintHit(CARD_FILE, skill.card_line("training_dimensions", name, "evidence"),
                              f"training_dimensions.{name}", f"evidence {evidence!r} is not a claim id",
                              "Cite a claim id")
    for index, correction in enumerate(_list(data, "corrections")):
        if isinstance(correction, dict) and correction.get("claim") not in claim_ids:
            yield LintHit(CARD_FILE, skill.card_line("corrections", index, "claim"), f"corrections[{index}]",
                          f"correction cites {correction.get('claim')!r}, which is not a claim id", "Cite a claim id")


def check_failure_modes(skill: Skill) -> Iterator[LintHit]:
    """Every failure mode maps to an existing rule, and an error text it quotes is that rule's.

    When the rule mirrors upstream checks, the symptom must be (part of) one of their messages or quoted
    in the rule's documentation; silent failures (rules with no upstream check) describe the symptom.
    """
    card = skill.card
    if card is None or not isinstance(card.data, dict):
        return
    for index, mode in enumerate(_list(card.data, "failure_modes")):
        if not isinstance(mode, dict):
            continue
        rule = BY_ID.get(str(mode.get("rule")))
        line = skill.card_line("failure_modes", index, "rule")
        if rule is None:
            yield LintHit(CARD_FILE, line, f"failure_modes[{index}]", f"failure mode {mode.get('name')!r} maps to "
                          f"rule {mode.get('rule')!r}, which does not exist", "Name the rule that catches it")
            continue
        symptom = str(mode.get("symptom", ""))
        messages = [c.message for c in rule.upstream if c.message]
        if messages and not (any(matches_template(symptom, m) for m in messages) or in_rule_docs(symptom, rule.id)):
            yield LintHit(CARD_FILE, skill.card_line("failure_modes", index, "symptom"), f"failure_modes[{index}]",
                          f"symptom {symptom!r} is not a message of {rule.id}", f"Quote the text {rule.id} "
                          "records (python -m checks explain " + rule.id + ")")


def check_interactions(skill: Skill) -> Iterator[LintHit]:
    """Every interaction names an existing rule (the one that reports a violation of it)."""
    card = skill.card
    interactions = card.data.get("interactions") if card is not None and isinstance(card.data, dict) else None
    if not isinstance(interactions, dict):
        return
    known = rule_ids(skill.lint_rule_ids)
    for kind, items in interactions.items():
        for index, item in enumerate(items if isinstance(items, list) else ()):
            if isinstance(item, dict) and item.get("rule") not in known:
                yield LintHit(CARD_FILE, skill.card_line("interactions", kind, index, "rule"),
                              f"interactions.{kind}[{index}]", f"interaction {item.get('setting')!r} names rule "
                              f"{item.get('rule')!r}, which does not exist", "Name the rule that reports it")


_RATIO_KEY = re.compile(r"(?:^|\.)(?:ratio|speedup|[a-z0-9_]+_over_[a-z0-9_]+)$")


def check_ratio_spread(skill: Skill) -> Iterator[LintHit]:
    """A measured ratio of two timings is stated with its spread, and one inside its noise is not stated as a number.

    A value whose key is ``ratio``, ``speedup`` or ``X_over_Y`` is a ratio of timings, which moves from run to run on
    a shared machine. The card states it only beside its spread: ``<key>_spread.q1`` and ``<key>_spread.q3`` (or
    ``.min`` and ``.max``) of the same result, the quartiles of the run's paired ratios the benchmarks record
    (``benchmarks/common.py``). When the artifact marks the ratio ``within_noise`` (those quartiles enclose 1), the
    ratio's value is left out and the result's ``what`` says "within noise": the run cannot tell it from 1.
    """
    for index, result in _results(skill):
        values = result.get("values")
        if not isinstance(values, dict):
            continue
        data = skill.artifact(result.get("artifact"))
        for path in values:
            if not isinstance(path, str) or not _RATIO_KEY.search(path):
                continue
            line = skill.card_line("measured_results", index, "values", path)
            where = f"measured_results[{index}].values.{path}"
            bounds = [b for b in (("q1", "q3"), ("min", "max"))
                      if all(f"{path}_spread.{end}" in values for end in b)]
            if not bounds:
                yield LintHit(CARD_FILE, line, where, f"{path} = {values[path]!r} is a measured ratio stated without "
                              f"its spread", f"Add {path}_spread.q1 and {path}_spread.q3 from {result.get('artifact')}"
                              " (rerun its benchmark if the artifact has no spread)")
            parent = path.rpartition(".")[0]
            found, within = _lookup(data, f"{parent}.within_noise" if parent else "within_noise") \
                if isinstance(data, dict) else (False, None)
            if found and within is True:
                yield LintHit(CARD_FILE, line, where, f"{result.get('artifact')} marks {path} within noise (its "
                              f"paired ratios' quartiles enclose 1), but the card states it as {values[path]!r}",
                              f"Drop {path} from values, keep its spread, and say 'within noise' in what")
        for path in values:
            if isinstance(path, str) and path.endswith("within_noise") and values[path] is True \
                    and "within noise" not in str(result.get("what", "")):
                yield LintHit(CARD_FILE, skill.card_line("measured_results", index, "what"),
                              f"measured_results[{index}].what", f"{path} is true but what does not say "
                              "'within noise'", "Say in what that the ratio is within noise, with its spread")


def check_provenance(skill: Skill) -> Iterator[LintHit]:
    """Each artifact was written from a committed tree whose commit is in this repository's history.

    An artifact records ``revision.git_commit`` and ``revision.git_dirty``; a dirty tree means the
    numbers came from code nobody can check out. The history check runs only where ``.git`` exists (an
    installed copy has none).
    """
    for index, result in _results(skill):
        data = skill.artifact(result.get("artifact"))
        if data is None:
            continue
        line = skill.card_line("measured_results", index, "artifact")
        revision = data.get("revision")
        if not isinstance(revision, dict) or not isinstance(revision.get("git_commit"), str):
            yield LintHit(CARD_FILE, line, f"measured_results[{index}]", f"{result['artifact']} records no revision "
                          "(git commit, versions, command)", "Write it with benchmarks.common.revision_pins")
            continue
        if revision.get("git_dirty"):
            yield LintHit(CARD_FILE, line, f"measured_results[{index}]", f"{result['artifact']} was written from a "
                          f"tree with uncommitted changes (at {revision['git_commit'][:10]})",
                          f"Commit, then rerun {result.get('command')}")
        elif _git_available(skill.root) and not _is_ancestor(skill.root, revision["git_commit"]):
            yield LintHit(CARD_FILE, line, f"measured_results[{index}]", f"{result['artifact']} was written at "
                          f"{revision['git_commit'][:10]}, which is not in this repository's history",
                          f"Rerun {result.get('command')} and commit the artifact")


def check_revision(skill: Skill) -> Iterator[LintHit]:
    """card.yaml's ``revision.commit`` is a commit in this repository's history (where ``.git`` exists)."""
    card = skill.card
    revision = card.data.get("revision") if card is not None and isinstance(card.data, dict) else None
    commit = revision.get("commit") if isinstance(revision, dict) else None
    if isinstance(commit, str) and _git_available(skill.root) and not _is_ancestor(skill.root, commit):
        yield LintHit(CARD_FILE, skill.card_line("revision", "commit"), "revision.commit", f"revision.commit "
                      f"{commit} is not in this repository's history", "Set it to the commit validated")


def check_agreement(skill: Skill) -> Iterator[LintHit]:
    """Version, date and upstream commits agree across SKILL.md, card.yaml, CHANGELOG.md and the package.

    - version: SKILL.md ``metadata.version``, card ``revision.version``, the newest CHANGELOG heading
      (``## X.Y.Z (YYYY-MM-DD)``), ``pyproject.toml`` and ``checks.__version__``;
    - date: SKILL.md ``metadata.updated``, card ``validated_on`` and the newest CHANGELOG heading;
    - upstream commits: each card ``upstream`` commit is one the rule registry is pinned to, and
      SKILL.md's metadata and the newest CHANGELOG entry name exactly the card's commits.
    """
    card, fm, changelog = skill.card, skill.frontmatter, skill.changelog
    if card is None or fm is None or changelog is None or not isinstance(card.data, dict):
        return
    metadata: dict[str, Any] = _mapping(fm.data.get("metadata"))
    revision: dict[str, Any] = _mapping(card.data.get("revision"))
    heading = next(((s.line, m) for s in changelog.sections() if s.level == 2
                    and (m := _CHANGELOG_HEADING.match(s.title))), None)
    if heading is None:
        yield LintHit(CHANGELOG_FILE, None, "heading", "CHANGELOG.md has no '## X.Y.Z (YYYY-MM-DD)' heading",
                      "Head the newest entry with its version and date")
        return
    line, m = heading
    versions = {
        f"{SKILL_FILE} metadata.version": (metadata.get("version"), SKILL_FILE, fm.line(("metadata", "version"))),
        f"{CARD_FILE} revision.version": (revision.get("version"), CARD_FILE, skill.card_line("revision", "version")),
        f"{CHANGELOG_FILE} newest heading": (m.group(1), CHANGELOG_FILE, line),
        "pyproject.toml version": (skill.pyproject_version[0], "pyproject.toml", skill.pyproject_version[1]),
        "checks.__version__": (__version__, "checks/__init__.py", None),
    }
    dates = {
        f"{SKILL_FILE} metadata.updated": (metadata.get("updated"), SKILL_FILE, fm.line(("metadata", "updated"))),
        f"{CARD_FILE} validated_on": (card.data.get("validated_on"), CARD_FILE, skill.card_line("validated_on")),
        f"{CHANGELOG_FILE} newest heading": (m.group(2), CHANGELOG_FILE, line),
    }
    for label, table in (("version", versions), ("date", dates)):
        reference = next(iter(table.values()))[0]
        for where, (value, file, at) in table.items():
            if value != reference:
                yield LintHit(file, at, where, f"{label} disagrees: {where} is {value!r}, "
                              f"{next(iter(table))} is {reference!r}", f"Use one {label} everywhere")
    yield from _commit_agreement(skill, metadata, changelog, line)


def _commit_agreement(skill: Skill, metadata: dict[str, Any], changelog: Any, heading_line: int) -> Iterator[LintHit]:
    card = skill.card
    assert card is not None
    pins = pinned_commits()
    card_commits: list[tuple[str, str]] = []
    for index, entry in enumerate(_list(card.data, "upstream")):
        if not isinstance(entry, dict) or not isinstance(entry.get("commit"), str):
            continue
        repo, commit = str(entry.get("repository")), entry["commit"]
        card_commits.append((repo, commit))
        if not any(same_commit(commit, pinned) for pinned in pins.get(repo, ())):
            yield LintHit(CARD_FILE, skill.card_line("upstream", index, "commit"), f"upstream[{index}]",
                          f"{repo}@{commit} is not a commit the rule registry is pinned to",
                          "Name the commit the anchors and data tables were checked at")
    entry_lines = [text for n, text in changelog.lines_of() if n > heading_line]
    next_heading = next((i for i, text in enumerate(entry_lines) if text.startswith("## ")), len(entry_lines))
    sources = {
        f"{SKILL_FILE} metadata": (" ".join(v for v in metadata.values() if isinstance(v, str)), SKILL_FILE, None),
        f"{CHANGELOG_FILE} newest entry": (" ".join(entry_lines[:next_heading]), CHANGELOG_FILE, heading_line),
    }
    for where, (text, file, line) in sources.items():
        named = commits_in(text)
        for repo, commit in named:
            if not any(r == repo and same_commit(c, commit) for r, c in card_commits):
                yield LintHit(file, line, where, f"{where} names {repo}@{commit}, which card.yaml's upstream does "
                              "not list", "Name the card's upstream commits")
        for repo, commit in card_commits:
            if not any(r == repo and same_commit(c, commit) for r, c in named):
                yield LintHit(file, line, where, f"{where} does not name {repo}@{commit[:8]} from card.yaml's "
                              "upstream", f"Add {repo}@{commit[:8]}")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(data: Any, key: str) -> list[Any]:
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, list) else []


def _results(skill: Skill) -> Iterator[tuple[int, dict[str, Any]]]:
    card = skill.card
    if card is None:
        return
    for index, result in enumerate(_list(card.data, "measured_results")):
        if isinstance(result, dict):
            yield index, result


def _lookup(data: Any, path: str) -> tuple[bool, Any]:
    """``a.b[2].c`` into nested dicts and lists."""
    for part in path.split("."):
        m = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", part)
        if m is None or not isinstance(data, dict) or m.group(1) not in data:
            return False, None
        data = data[m.group(1)]
        for index in re.findall(r"\[(\d+)\]", m.group(2)):
            if not isinstance(data, list) or int(index) >= len(data):
                return False, None
            data = data[int(index)]
    return True, data


def _equal(stated: Any, actual: Any) -> bool:
    if isinstance(stated, bool) or isinstance(actual, bool):
        return stated is actual
    if isinstance(stated, (int, float)) and isinstance(actual, (int, float)):
        return float(stated) == float(actual)
    return bool(stated == actual)


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


@lru_cache(maxsize=8)
def _git_available(root: Path) -> bool:
    """A full git history to ask (an installed copy has no .git; a shallow clone lacks old commits)."""
    if not (root / ".git").exists():
        return False
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--is-shallow-repository"],
                              capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and done.stdout.strip() == "false"


@lru_cache(maxsize=64)
def _is_ancestor(root: Path, commit: str) -> bool:
    done = subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", commit, "HEAD"],
                          capture_output=True, timeout=20, check=False)
    return done.returncode == 0


RULES: tuple[LintRule, ...] = (
    LintRule("CRD001", "card-readable", "error", check_readable,
             Seed(CARD_FILE, r"^title: .*$", "title: [unclosed")),
    LintRule("CRD002", "card-schema", "error", check_schema,
             Seed(CARD_FILE, r"^validated_on:", "validated: yesterday\nvalidated_on:")),
    LintRule("CRD003", "card-artifacts-exist", "error", check_artifacts_exist,
             Seed(CARD_FILE, r"artifact: reference/benchmarks/hybrid_adam\.json",
                  "artifact: reference/benchmarks/hybrid_adam_gpu.json")),
    LintRule("CRD004", "card-values-match-artifacts", "error", check_artifact_values,
             Seed(CARD_FILE, r"^      runs\[0\]\.plan_median_s: [0-9.]+$", "      runs[0].plan_median_s: 9.99")),
    LintRule("CRD005", "card-claim-evidence", "error", check_claim_evidence,
             Seed(CARD_FILE, r"result: hybrid_adam$", "result: hybrid_adam_on_gpu")),
    LintRule("CRD006", "card-failure-modes", "error", check_failure_modes,
             Seed(CARD_FILE, r"(symptom: \"Currently there is no support.*\n\s+rule: )ACT002$", r"\1ACT003")),
    LintRule("CRD007", "card-interactions", "error", check_interactions,
             Seed(CARD_FILE, r"rule: FGA001\}", "rule: FGA099}")),
    LintRule("CRD008", "card-artifact-provenance", "warning", check_provenance,
             Seed("reference/benchmarks/hybrid_adam.json", r'"git_dirty": false', '"git_dirty": true')),
    LintRule("CRD009", "card-versions-agree", "error", check_agreement,
             Seed(CHANGELOG_FILE, r"^## (\d+\.\d+\.\d+) \(\d{4}-\d{2}-\d{2}\)", r"## \1 (2026-10-01)")),
    LintRule("CRD010", "card-revision-in-history", "error", check_revision,
             Seed(CARD_FILE, r"^  commit: [0-9a-f]+", "  commit: 0123456789abcdef0123456789abcdef01234567")),
    LintRule("CRD011", "card-ratio-spread", "error", check_ratio_spread,
             Seed(CARD_FILE, r"^(      runs\[0\]\.fp32\.within_noise: true\n)",
                  r"\1      runs[0].fp32.ratio: 0.9184\n")),
)
