"""Just enough Markdown for the linter: frontmatter, sections, tables and code spans, with line numbers.

A full CommonMark parser would be a dependency for what these documents use: ATX headings, fenced code
blocks, pipe tables and inline code. Fenced code is blanked (kept as empty lines, so line numbers hold)
before anything else is read, because commands and sample configs are not prose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


@dataclass(frozen=True)
class Section:
    level: int
    title: str
    line: int  # 1-based line of the heading
    end: int  # last line of the section (before the next heading of the same or a higher level)


@dataclass(frozen=True)
class Document:
    """A Markdown file split into its frontmatter and body, with fenced code blanked out of ``prose``."""

    path: str
    text: str
    frontmatter: str | None  # the YAML between the leading ``---`` lines, or None when there is none
    body_start: int  # 1-based line where the body begins
    prose: tuple[str, ...]  # every line of the file; frontmatter and fenced code replaced by ""

    @classmethod
    def parse(cls, path: str, text: str) -> Document:
        lines = text.splitlines()
        frontmatter, body_start = None, 1
        if lines and lines[0].strip() == "---":
            for i, line in enumerate(lines[1:], start=1):
                if line.strip() == "---":
                    frontmatter, body_start = "\n".join(lines[1:i]), i + 2
                    break
        prose, fenced = [], False
        for number, line in enumerate(lines, start=1):
            if number < body_start:
                prose.append("")
            elif _FENCE.match(line):
                fenced = not fenced
                prose.append("")
            else:
                prose.append("" if fenced else line)
        return cls(path, text, frontmatter, body_start, tuple(prose))

    def sections(self) -> list[Section]:
        """Every heading's section, in order; one pass (a CHANGELOG has thousands of headings)."""
        out: list[Section] = []
        unended: list[int] = []  # indices into ``out`` of sections still open, by increasing level
        for n, line in enumerate(self.prose, start=1):
            if m := _HEADING.match(line):
                level = len(m.group(1))
                while unended and out[unended[-1]].level >= level:  # it ends those at its level or below
                    i = unended.pop()
                    out[i] = replace(out[i], end=n - 1)
                out.append(Section(level, m.group(2), n, len(self.prose)))
                unended.append(len(out) - 1)
        return out

    def section(self, title: str) -> Section | None:
        """The first section whose title starts with ``title`` (case-insensitive)."""
        return next((s for s in self.sections() if s.title.lower().startswith(title.lower())), None)

    def lines_of(self, section: Section | None = None) -> list[tuple[int, str]]:
        """(line number, prose line) of the whole body, or of one section."""
        first, last = (section.line, section.end) if section else (self.body_start, len(self.prose))
        return [(n, self.prose[n - 1]) for n in range(first, last + 1)]

    def table_rows(self, section: Section | None = None) -> list[tuple[int, list[str]]]:
        """(line, cells) of every pipe-table body row; a table's first row is its header and is skipped."""
        rows: list[tuple[int, list[str]]] = []
        previous_was_table = False
        for number, line in self.lines_of(section):
            stripped = line.strip()
            if not (stripped.startswith("|") and stripped.endswith("|")):
                previous_was_table = False
                continue
            cells = [c.strip() for c in _split_cells(stripped[1:-1])]
            is_delimiter = all(re.fullmatch(r":?-{3,}:?", c) for c in cells)
            if previous_was_table and not is_delimiter:
                rows.append((number, cells))
            previous_was_table = True
        return rows


def _split_cells(row: str) -> list[str]:
    """Split on ``|`` outside code spans (error texts may contain pipes)."""
    cells: list[str] = []
    current: list[str] = []
    in_code = False
    for char in row:
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append("".join(current))
            current = []
        else:
            current.append(char)
    cells.append("".join(current))
    return cells


def code_spans(text: str) -> list[str]:
    return [m.group(2).strip() for m in _CODE_SPAN.finditer(text)]


def without_code_spans(text: str) -> str:
    return _CODE_SPAN.sub(" ", text)
