"""Inline suppressions: ``# offload-check: ignore[ID] reason`` silences one finding on one line.

Written at the end of the line a finding points at, or alone on the line above it (as ruff's ``noqa`` and
eslint's ``disable-next-line`` are), in a YAML config or a shell script; above a shell command continued with
backslashes, it covers every line of that command. ``ID`` is a rule id or a prefix of ids
(``ACT``, ``OPT01``), several separated by commas; the reason is required, so that whoever reads the config
later knows why. A suppression that silences nothing is itself reported (CFG012), like ruff's unused ``noqa``.
Rules that report on the other rules (those that run last: CFG010, CFG011, CFG012) cannot be silenced on a
line: ``--ignore`` does that.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from checks.errors import InputError

MARKER = "offload-check:"
_COMMENT = re.compile(r"(?:^|\s)#\s*offload-check:(?P<body>.*)$")
_BODY = re.compile(r"\s*ignore\[(?P<ids>[^\]]*)\](?P<reason>.*)$")
FORM = "# offload-check: ignore[ID] reason"


@dataclass(frozen=True)
class Suppression:
    """One suppression comment: where it is, the line it silences, the rules it names and why."""

    file: str
    line: int  # where the comment is (1-based)
    lines: tuple[int, int]  # the first and last line whose findings it silences
    ids: tuple[str, ...]
    reason: str

    def silences(self, rule: str, file: str | None, line: int | None) -> bool:
        return (file is not None and line is not None and self.lines[0] <= line <= self.lines[1]
                and os.path.normpath(file) == os.path.normpath(self.file)
                and any(rule.startswith(prefix) for prefix in self.ids))


def parse(path: str, text: str) -> list[Suppression]:
    """Every suppression in ``text``; a malformed one (no ``ignore[...]``, no id, no reason) is an InputError
    naming the file and line. Which ids exist is the engine's to check (:func:`check_ids`): loaders know no rules."""
    lines = text.splitlines()
    found: list[Suppression] = []
    for number, raw in enumerate(lines, start=1):
        if MARKER not in raw:
            continue
        match = _COMMENT.search(raw)
        if match is None:
            continue
        body = _BODY.match(match["body"])
        written = match.group(0).strip()
        if body is None:
            raise InputError(path, f"malformed suppression {written!r}: write {FORM}", number)
        ids = tuple(part.strip() for part in body["ids"].split(",") if part.strip())
        reason = body["reason"].strip()
        if not ids or not reason:
            raise InputError(path, f"suppression {written!r} needs " + ("a rule id" if not ids else "a reason")
                             + f": write {FORM}", number)
        found.append(Suppression(path, number, _silenced(lines, number, raw[:match.start()].strip() == ""),
                                 ids, reason))
    return found


def check_ids(suppressions: Iterable[Suppression], rule_ids: Iterable[str], unsilenceable: Iterable[str]) -> None:
    """Refuse a suppression naming an id no rule has, or only rules that cannot be silenced on a line."""
    known, last = tuple(rule_ids), frozenset(unsilenceable)
    for mark in suppressions:
        for prefix in mark.ids:
            matched = [rule for rule in known if rule.startswith(prefix)]
            if not matched:
                raise InputError(mark.file, f"suppression names {prefix!r}, which is no rule id or prefix of one "
                                            "(python -m checks rules lists them)", mark.line)
            if set(matched) <= last:
                raise InputError(mark.file, f"{prefix} cannot be silenced on a line: it reports on the other rules' "
                                            f"findings; use --ignore {prefix}", mark.line)


def _silenced(lines: list[str], number: int, alone: bool) -> tuple[int, int]:
    """The lines a suppression on line ``number`` covers: its own; or, alone on its line, the next line that is
    not a comment, with the lines a trailing backslash continues it onto (a shell command cannot carry a comment
    in its middle, so one above it covers all of its flags)."""
    if not alone:
        return number, number
    first = next((n for n in range(number + 1, len(lines) + 1)
                  if lines[n - 1].strip() and not lines[n - 1].lstrip().startswith("#")), number)
    last = first
    while last < len(lines) and lines[last - 1].rstrip().endswith("\\"):
        last += 1
    return first, last
