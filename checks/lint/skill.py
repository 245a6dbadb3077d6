"""SKL: ``SKILL.md`` follows the Agent Skills specification and says only what the checker can back.

The frontmatter rules follow the specification at https://agentskills.io/specification (the rules the
``skills-ref`` validator applies), tightened to what strict YAML parsers accept: block style, and no
``: ``, ``<``, ``>`` or ``---`` inside values.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from checks.lint.base import CARD_FILE, SKILL_FILE, LintHit, LintRule, Seed, Skill
from checks.lint.markdown import code_spans, without_code_spans
from checks.lint.registry_text import in_rule_docs, quoted_upstream, rule_ids

SPEC_FIELDS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
MAX_LINES = 500
# H2 sections an agent relies on, by the start of their title (each issue-listed topic has one).
REQUIRED_SECTIONS = ("Quick decision table", "Instructions", "Examples", "Parameter reference", "Troubleshooting",
                     "Verification", "Safety", "Limitations", "Measured", "Maintainers", "Changelog")
# A number with a unit of measurement: what a benchmark or a report produces.
_MEASUREMENT = re.compile(r"(?<![\w.\-])(\d+(?:\.\d+)?)\s?(x|×|%|ms|s|µs|us|GB|GiB|MB|MiB)(?![\w])")
_BARE_NUMBER = re.compile(r"(?<![\w.\-])\d+(?:\.\d+)?(?![\w.])")
_RELEASE = re.compile(r"\b\d+\.\d+\.\d+\b")
# A file or folder of this repository named in prose (a bare file name may be the user's own file).
_REPO_PATH = re.compile(r"^(?:reference|examples|checks|benchmarks|tools|evals|tests)/[\w./-]*$")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def check_frontmatter_present(skill: Skill) -> Iterator[LintHit]:
    """SKILL.md exists and starts with YAML frontmatter between ``---`` lines.

    Agents read only the frontmatter to decide whether to load a skill, so a missing or unparseable
    frontmatter hides the whole skill. Also reports a SKILL.md that cannot be read at all.
    """
    doc, _ = skill.skill, skill.frontmatter  # reading them records why they could not be read
    if SKILL_FILE in skill.errors:
        yield skill.errors[SKILL_FILE]
        return
    if doc is not None and doc.frontmatter is None:
        yield LintHit(SKILL_FILE, 1, "frontmatter", "SKILL.md does not start with YAML frontmatter (--- lines)",
                      "Start the file with ---, name, description, license, metadata, ---")
    elif "frontmatter" in skill.errors:
        yield skill.errors["frontmatter"]


def check_frontmatter_fields(skill: Skill) -> Iterator[LintHit]:
    """The frontmatter has ``name`` and ``description`` and no field the specification does not define.

    Allowed: name, description, license, compatibility, metadata, allowed-tools. Anything else (a
    version, an author) belongs under ``metadata``, whose values must be strings.
    """
    fm = skill.frontmatter
    if fm is None:
        return
    for key in fm.data:
        if key not in SPEC_FIELDS:
            yield LintHit(SKILL_FILE, fm.line((key,)), f"frontmatter.{key}",
                          f"frontmatter field {key!r} is not in the Agent Skills specification "
                          f"(allowed: {', '.join(SPEC_FIELDS)})", f"Move {key} under metadata, or remove it")
    for key in ("name", "description"):
        if key not in fm.data:
            yield LintHit(SKILL_FILE, 2, f"frontmatter.{key}", f"the frontmatter has no {key}",
                          f"Add {key}, as the specification requires")
    metadata = fm.data.get("metadata", {})
    if not isinstance(metadata, dict):
        yield LintHit(SKILL_FILE, fm.line(("metadata",)), "frontmatter.metadata", "metadata is not a mapping",
                      "Write metadata as key: value lines")
        return
    for key, value in metadata.items():
        if not isinstance(value, str):
            yield LintHit(SKILL_FILE, fm.line(("metadata", key)), f"frontmatter.metadata.{key}",
                          f"metadata.{key} is {type(value).__name__} {value!r}, not a string",
                          f'Quote it: {key}: "{value}"')


def check_name(skill: Skill) -> Iterator[LintHit]:
    """``name`` is lowercase kebab-case, at most 64 characters, and the package's name.

    The specification also requires the skill's directory to carry the name; installers (``npx skills
    add``) create that directory, so the linter compares with ``pyproject.toml``'s project name instead
    of the checkout's folder, which a clone may name anything.
    """
    fm = skill.frontmatter
    if fm is None or not isinstance(name := fm.data.get("name"), str):
        return
    line = fm.line(("name",))
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) or len(name) > 64:
        yield LintHit(SKILL_FILE, line, "frontmatter.name", f"name {name!r} is not lowercase kebab-case of at "
                      "most 64 characters", "Use lowercase letters, digits and single hyphens")
    project = _pyproject_name(skill.root)
    if project is not None and project != name:
        yield LintHit(SKILL_FILE, line, "frontmatter.name", f"name {name!r} differs from pyproject.toml's "
                      f"project name {project!r}", "Use one name for the skill and the package")


def check_lengths(skill: Skill) -> Iterator[LintHit]:
    """``description`` is 1 to 1024 characters and ``compatibility`` at most 500, as the specification says."""
    fm = skill.frontmatter
    if fm is None:
        return
    for key, limit in (("description", 1024), ("compatibility", 500)):
        value = fm.data.get(key)
        if isinstance(value, str) and not 0 < len(value) <= limit:
            yield LintHit(SKILL_FILE, fm.line((key,)), f"frontmatter.{key}", f"{key} has {len(value)} characters; "
                          f"the specification allows 1 to {limit}", f"Shorten {key}")
        elif key in fm.data and not isinstance(value, str):
            yield LintHit(SKILL_FILE, fm.line((key,)), f"frontmatter.{key}", f"{key} is not a string",
                          f"Write {key} as text")


def check_strict_yaml(skill: Skill) -> Iterator[LintHit]:
    """Frontmatter values parse the same in every YAML reader: block style, no ``: ``, ``<``, ``>`` or ``---``.

    Some skill loaders use strict YAML subsets that refuse flow style (``{}``, ``[]``) and misread a
    value holding ``: ``; ``<`` and ``>`` are refused by skill registries that render the description.
    """
    doc, fm = skill.skill, skill.frontmatter
    if doc is None or doc.frontmatter is None or fm is None:
        return
    for offset, line in enumerate(doc.frontmatter.splitlines(), start=2):
        if re.search(r"^\s*[\[{]|:\s*[\[{]", line):
            yield LintHit(SKILL_FILE, offset, "frontmatter", f"flow-style YAML at line {offset}: {line.strip()!r}",
                          "Use block style: one key per line, lists as - items")
    for path, value in _strings(fm.data):
        bad = [token for token in (": ", "<", ">", "---") if token in value]
        if bad:
            yield LintHit(SKILL_FILE, fm.line(path), "frontmatter." + ".".join(map(str, path)),
                          f"{'.'.join(map(str, path))} contains {', '.join(repr(b) for b in bad)}",
                          "Rephrase without these characters (use a dash or 'to' instead)")


def check_length(skill: Skill) -> Iterator[LintHit]:
    """SKILL.md stays under 500 lines; longer material goes to ``reference/``, which agents load on demand."""
    doc = skill.skill
    if doc is not None and (count := len(doc.text.splitlines())) >= MAX_LINES:
        yield LintHit(SKILL_FILE, MAX_LINES, "SKILL.md", f"SKILL.md has {count} lines (the limit is under "
                      f"{MAX_LINES})", "Move detail into reference/ and link to it")


def check_sections(skill: Skill) -> Iterator[LintHit]:
    """SKILL.md has a title with an opening paragraph and every required section.

    Required H2 sections (by the start of their title): Quick decision table, Instructions, Examples,
    Parameter reference, Troubleshooting, Verification, Safety, Limitations, Measured, Maintainers,
    Changelog. The Changelog section links ``CHANGELOG.md``.
    """
    doc = skill.skill
    if doc is None:
        return
    sections = doc.sections()
    titles = [s for s in sections if s.level == 1]
    if not titles:
        yield LintHit(SKILL_FILE, doc.body_start, "title", "SKILL.md has no # title", "Add a # title line")
    else:
        first_h2 = next((s.line for s in sections if s.level == 2), len(doc.prose) + 1)
        opening = [line for n, line in doc.lines_of() if titles[0].line < n < first_h2 and line.strip()]
        if not opening:
            yield LintHit(SKILL_FILE, titles[0].line, "title", "no paragraph says what the skill is before the "
                          "first section", "Add an opening paragraph under the title")
    for required in REQUIRED_SECTIONS:
        if not any(s.level == 2 and s.title.lower().startswith(required.lower()) for s in sections):
            yield LintHit(SKILL_FILE, None, f"section {required}", f"SKILL.md has no '## {required}' section",
                          f"Add a '## {required}' section")
    changelog = doc.section("Changelog")
    if changelog is not None and "CHANGELOG.md" not in "\n".join(line for _, line in doc.lines_of(changelog)):
        yield LintHit(SKILL_FILE, changelog.line, "section Changelog", "the Changelog section does not link "
                      "CHANGELOG.md", "Link [CHANGELOG.md](CHANGELOG.md)")


def check_rule_ids(skill: Skill) -> Iterator[LintHit]:
    """Every rule id named in SKILL.md, README.md or ``reference/*.md`` exists (config or lint rule)."""
    known = rule_ids(skill.lint_rule_ids)
    for path in _markdown_files(skill.root):
        rel = path.relative_to(skill.root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            yield LintHit(rel, None, rel, f"{rel} cannot be read: {err}", "Save it as UTF-8 text")
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            for rule_id in re.findall(r"\b[A-Z]{3}\d{3}\b", line):
                if rule_id not in known:
                    yield LintHit(rel, number, rule_id, f"{rel} names rule {rule_id}, which does not exist",
                                  "Use an id from python -m checks rules, or remove it")


def check_quoted_errors(skill: Skill) -> Iterator[LintHit]:
    """Every error text SKILL.md quotes is one the registry carries, so agents can match it exactly.

    Quoted error texts are the code spans in the first column of the Troubleshooting tables and the
    double-quoted strings of the description. Each must be (part of) a message an upstream check prints,
    as recorded with its anchor in the rule registry (placeholders match any value), or, for runtime
    errors no check prints, quoted in the documentation of the rule named in the same table row.
    """
    doc = skill.skill
    if doc is None:
        return
    section = doc.section("Troubleshooting")
    if section is not None:
        for number, cells in doc.table_rows(section):
            named = re.findall(r"\b[A-Z]{3}\d{3}\b", " ".join(cells[1:]))
            for quote in code_spans(cells[0]):
                if quoted_upstream(quote) or any(in_rule_docs(quote, rid) for rid in named):
                    continue
                yield LintHit(SKILL_FILE, number, "Troubleshooting", f"error text {quote!r} is not a message the "
                              "rule registry records" + (f" nor quoted by {', '.join(named)}" if named else ""),
                              "Copy the exact text from python -m checks explain RULE, or name the rule that "
                              "documents it in the same row")
    fm = skill.frontmatter
    if fm is not None and isinstance(description := fm.data.get("description"), str):
        for quote in re.findall(r'"([^"]+)"', description):
            if not quoted_upstream(quote):
                yield LintHit(SKILL_FILE, fm.line(("description",)), "frontmatter.description",
                              f"the description quotes {quote!r}, which is not a message the rule registry "
                              "records", "Quote the exact upstream text")


def check_numbers(skill: Skill) -> Iterator[LintHit]:
    """Every measured number SKILL.md states is in card.yaml.

    Read are the numbers with a unit (x, %, s, ms, GB...) anywhere, and every number in the rows of the
    Measured section's table (byte counts, counts of configs; release numbers such as 0.14.0 are not
    numbers). Each must equal, at the precision written, a value of ``measured_results`` (which CRD004
    ties to its artifact) or of ``reported_by_others``; percentages may also be a fraction there (0.34%
    for 0.003434). Fenced code and code spans are not read: they hold commands and settings, not results.
    """
    doc, card = skill.skill, skill.card
    if doc is None or card is None:
        return
    values = list(_card_numbers(card.data))
    measured = doc.section("Measured")
    table_lines = {n for n, _ in doc.table_rows(measured)} if measured is not None else set()
    for number, line in doc.lines_of():
        prose = without_code_spans(line)
        found = [(m.group(1), m.group(2)) for m in _MEASUREMENT.finditer(prose)]
        if number in table_lines:
            found += [(m.group(0), "") for m in _BARE_NUMBER.finditer(_RELEASE.sub(" ", _MEASUREMENT.sub(" ", prose)))]
        for text, unit in found:
            decimals = len(text.split(".")[1]) if "." in text else 0
            stated = float(text)
            scales = (1.0, 100.0) if unit == "%" else (1.0,)
            if not any(round(v * scale, decimals) == stated for v in values for scale in scales):
                yield LintHit(SKILL_FILE, number, f"{text}{unit}", f"SKILL.md states {text}{unit}, which no value "
                              f"in {CARD_FILE} gives", "Cite the number from card.yaml (measured_results or "
                              "reported_by_others), or add the measurement with its artifact")


def check_paths(skill: Skill) -> Iterator[LintHit]:
    """Every repository path SKILL.md names (a link, or a code span such as ``reference/rules.md``) exists."""
    doc = skill.skill
    if doc is None:
        return
    for number, line in doc.lines_of():
        candidates = [c for c in code_spans(line) if _REPO_PATH.match(c)] + _LINK.findall(line)
        for candidate in candidates:
            if "://" in candidate or "*" in candidate:
                continue
            if not (skill.root / candidate).exists():
                yield LintHit(SKILL_FILE, number, candidate, f"SKILL.md names {candidate}, which does not exist",
                              "Fix the path, or add the file")


def _pyproject_name(root: Path) -> str | None:
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r'^name\s*=\s*"([^"]+)"', text, flags=re.M)
    return m.group(1) if m else None


def _strings(data: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _strings(value, (*path, key))
    elif isinstance(data, str):
        yield path, data


def _card_numbers(data: Any) -> Iterator[float]:
    """Numbers in card.yaml's results sections (measured values and values reported by others)."""
    for section in ("measured_results", "reported_by_others"):
        yield from _numbers(data.get(section) if isinstance(data, dict) else None)


def _numbers(data: Any) -> Iterator[float]:
    if isinstance(data, bool):
        return
    if isinstance(data, (int, float)):
        yield float(data)
    elif isinstance(data, dict):
        for value in data.values():
            yield from _numbers(value)
    elif isinstance(data, list):
        for value in data:
            yield from _numbers(value)


def _markdown_files(root: Path) -> list[Path]:
    return sorted([*root.glob("*.md"), *(root / "reference").glob("*.md")])


RULES: tuple[LintRule, ...] = (
    LintRule("SKL001", "skill-frontmatter-present", "error", check_frontmatter_present,
             Seed(SKILL_FILE, r"\A---\n", "")),
    LintRule("SKL002", "skill-frontmatter-fields", "error", check_frontmatter_fields,
             Seed(SKILL_FILE, r"^license:", "author: someone\nlicense:")),
    LintRule("SKL003", "skill-name", "error", check_name,
             Seed(SKILL_FILE, r"^name: .*$", "name: Megatron_CPU_Offloading")),
    LintRule("SKL004", "skill-field-lengths", "error", check_lengths,
             Seed(SKILL_FILE, r"^description: ", "description: " + "x" * 1100 + " ")),
    LintRule("SKL005", "skill-frontmatter-strict-yaml", "error", check_strict_yaml,
             Seed(SKILL_FILE, r"^license: Apache-2.0$", "license: Apache-2.0 <see LICENSE>")),
    LintRule("SKL006", "skill-length", "error", check_length,
             Seed(SKILL_FILE, r"\Z", "\n" * MAX_LINES)),
    LintRule("SKL007", "skill-required-sections", "error", check_sections,
             Seed(SKILL_FILE, r"^## Safety", "## Caution")),
    LintRule("SKL008", "known-rule-ids", "error", check_rule_ids,
             Seed(SKILL_FILE, r"\bACT002\b", "ACT099")),
    LintRule("SKL009", "quoted-errors-in-registry", "error", check_quoted_errors,
             Seed(SKILL_FILE, r"Currently there is no support for Pipeline parallelism",
                  "Currently there is no support for pipeline parallelism")),
    LintRule("SKL010", "numbers-match-card", "error", check_numbers,
             Seed(SKILL_FILE, r"\b\d+\.\dx(?= faster)", "999.9x")),
    LintRule("SKL011", "named-paths-exist", "error", check_paths,
             Seed(SKILL_FILE, r"reference/rules\.md", "reference/rule-catalogue.md")),
)
