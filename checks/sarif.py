"""SARIF 2.1.0 and GitHub workflow-command output, for code scanning and editors that show findings inline.

SARIF (OASIS, https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html; the schema the tests validate
against is ``tests/data/sarif-schema-2.1.0.json``): one run, the rules that fired with their documentation and
upstream anchors, each finding a result with its file, line and column (the key's column on its line), and a
fix where every change the finding's patch makes can be placed on the line it points at (a YAML value, a
Megatron-LM flag in a shell script). Like the other renderers these
decide nothing; they read a finding's line only to place the region and the replacement on it.
"""

from __future__ import annotations

import itertools
import os
import re
from functools import cache
from typing import Any

from checks import __version__
from checks.engine import Finding
from checks.jsonio import dumps
from checks.loaders.megatron_lm import flag_words
from checks.report import Run

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
TOOL = "megatron-offload-check"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
# A YAML mapping line "  key: value  # comment": the key and where its value starts and ends.
_YAML_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[\w.\-]+)\s*:\s*(?P<value>[^#\s][^#]*?)?\s*(?:#.*)?$")


@cache
def _lines(path: str) -> tuple[str, ...]:
    try:
        with open(path, encoding="utf-8") as handle:
            return tuple(handle.read().splitlines())
    except (OSError, UnicodeDecodeError):
        return ()


def _line(path: str, number: int) -> str:
    lines = _lines(path)
    return lines[number - 1] if 0 < number <= len(lines) else ""


def _uri(path: str) -> str:
    return path.replace(os.sep, "/")


def _region(f: Finding) -> dict[str, Any] | None:
    origin = f.origin
    if origin is None or origin.file is None or origin.line is None:
        return None
    region: dict[str, Any] = {"startLine": origin.line}
    key = (origin.key or "").rsplit(".", 1)[-1].lstrip("-+~")
    column = _line(origin.file, origin.line).find(key) if key else -1
    if column >= 0:
        region["startColumn"] = column + 1
    return region


def _fix(f: Finding) -> dict[str, Any] | None:
    """The patch as replacements on the finding's own line, where every change it makes can be placed there."""
    origin = f.origin
    if not f.patch or origin is None or origin.file is None or origin.line is None:
        return None
    line = _line(origin.file, origin.line)
    if all(key.startswith("-") for key in f.patch):
        edits = _flag_edits(f.patch, line, _token_start(line, _region(f)))
    else:
        edits = _yaml_edits(f.patch, line)
    if not edits:
        return None
    return {"description": {"text": f.fix},
            "artifactChanges": [{"artifactLocation": {"uri": _uri(origin.file)},
                                 "replacements": [{"deletedRegion": {"startLine": origin.line, "startColumn": start + 1,
                                                                     "endColumn": end + 1},
                                                   "insertedContent": {"text": text}}
                                                  for start, end, text in edits]}]}


Edit = tuple[int, int, str]  # replace line[start:end] (0-based columns) with the text


def _scalar(value: Any) -> str:
    return "null" if value is None else ("true" if value else "false") if isinstance(value, bool) else str(value)


def _yaml_edits(patch: dict[str, Any], line: str) -> list[Edit] | None:
    """A YAML ``key: value`` line whose key is the patch's only one: its value replaced."""
    if len(patch) != 1:
        return None
    (key, value), = patch.items()
    match = _YAML_LINE.match(line)
    if match is None or match["value"] is None or match["key"] != key.rsplit(".", 1)[-1]:
        return None
    text = f"[{', '.join(map(str, value))}]" if isinstance(value, list) else _scalar(value)
    return [(match.start("value"), match.end("value"), text)]


# A word of a shell line that is a flag's value as written: no quotes, expansions or operators, which would make
# where it ends a question for the shell, not for this renderer.
_WORD = re.compile(r"\S+")
_ENDS = ("\\", ")")  # a line continuation, the end of a bash array
_VALUE_WORD = re.compile(r"(?:-?[0-9][\w.+-]*|[\w.+/:=@%][\w.+/:=@%-]*)")


def _token_start(line: str, region: dict[str, Any] | None) -> int | None:
    """Where the word holding the finding's key starts on its line (the place to insert a flag before it)."""
    if region is None or "startColumn" not in region:
        return None
    start = region["startColumn"] - 1
    while start > 0 and not line[start - 1].isspace():
        start -= 1
    return start


def _flag_edits(patch: dict[str, Any], line: str, anchor: int | None) -> list[Edit] | None:
    """Megatron-LM flags on a shell line, written as ``--emit-overrides`` writes them (``flag_words``): None or []
    removes the flag with its values, True adds the switch, anything else sets the values. A flag
    the line lacks is added before the finding's own word; a flag written twice, or values the renderer cannot
    delimit, give no fix."""
    words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(line)]
    if (comment := next((i for i, w in enumerate(words) if w[2].startswith("#")), None)) is not None:
        words = words[:comment]
    edits: list[Edit] = []
    added: list[str] = []
    for flag, value in patch.items():
        at = [i for i, w in enumerate(words) if w[2] == flag]
        if len(at) > 1:
            return None
        written = flag_words(flag, value)
        if not at:
            if written is None:
                return None  # nothing here to remove
            added.append(" ".join(written))
            continue
        i = at[0]
        last = i
        while last + 1 < len(words) and not words[last + 1][2].startswith("--") and \
                _VALUE_WORD.fullmatch(words[last + 1][2]):
            last += 1
        if last + 1 < len(words) and not words[last + 1][2].startswith("--") and words[last + 1][2] not in _ENDS:
            return None  # a word that is neither a value as written nor the next flag
        if written is None:
            if last + 1 < len(words):
                edits.append((words[i][0], words[last + 1][0], ""))
            else:
                edits.append((words[i - 1][1] if i else words[i][0], words[last][1], ""))
        elif written == [flag]:
            if last != i:
                return None  # a switch written with values: not what the patch expects
        else:
            edits.append((words[i][1], words[last][1], " " + " ".join(written[1:])))
    if added:
        if anchor is None:
            return None
        edits.append((anchor, anchor, " ".join(added) + " "))
    edits.sort()
    if any(a[1] > b[0] for a, b in itertools.pairwise(edits)):
        return None
    return edits


def _rule(rule_id: str) -> dict[str, Any]:
    from checks.rules import BY_ID

    rule = BY_ID[rule_id]
    return {"id": rule.id, "name": rule.name, "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.doc}, "help": {"text": rule.doc},
            "defaultConfiguration": {"level": _LEVEL[rule.severity]},
            "properties": {"upstream": [{"project": c.project, "message": c.message, "anchors": c.anchors()}
                                        for c in rule.upstream]}}


def render_sarif(result: Run) -> str:
    findings = result.findings
    rule_ids = list(dict.fromkeys(f.rule for _, f in findings))
    results = []
    for path, f in findings:
        location: dict[str, Any] = {"artifactLocation": {"uri": _uri(f.file or path)}}
        if (region := _region(f)) is not None:
            location["region"] = region
        entry: dict[str, Any] = {
            "ruleId": f.rule, "ruleIndex": rule_ids.index(f.rule), "level": _LEVEL[f.severity],
            "message": {"text": (f"[{f.target}] " if f.target else "") + f"{f.message}. Fix: {f.fix}"},
            "locations": [{"physicalLocation": location}],
            "properties": {"path": f.path, "fix": f.fix, "patch": f.patch,
                           "upstream": f.upstream.as_json() if f.upstream else None}}
        if (fix := _fix(f)) is not None:
            entry["fixes"] = [fix]
        results.append(entry)
    notifications = [{"level": "error", "message": {"text": c.error},
                      "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(c.path)}}}]}
                     for c in result.checked if c.report is None]
    document = {
        "$schema": SCHEMA, "version": "2.1.0",
        "runs": [{"tool": {"driver": {"name": TOOL, "version": __version__, "semanticVersion": __version__,
                                      "rules": [_rule(r) for r in rule_ids]}},
                  "invocations": [{"executionSuccessful": not result.unreadable,
                                   "toolExecutionNotifications": notifications}],
                  "results": results}],
    }
    return dumps(document)


def _escape(text: str, property_value: bool = False) -> str:
    """GitHub's workflow-command escaping (actions/toolkit, packages/core/src/command.ts)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if property_value else text


def render_github(result: Run) -> str:
    """One ``::error``/``::warning``/``::notice`` line per finding, as a workflow step prints annotations."""
    command = {"error": "error", "warning": "warning", "info": "notice"}
    lines = []
    for path, f in result.findings:
        where = f"file={_escape(f.file or path, True)}"
        if f.line is not None:
            where += f",line={f.line}"
        title = _escape(f"{f.rule} {f.severity}", True)
        lines.append(f"::{command[f.severity]} {where},title={title}::{_escape(f.message + '. Fix: ' + f.fix)}")
    lines += [f"::error file={_escape(c.path, True)},title=unreadable::{_escape(c.error)}"
              for c in result.checked if c.report is None]
    return "\n".join(lines)


RENDERERS = {"sarif": render_sarif, "github": render_github}
