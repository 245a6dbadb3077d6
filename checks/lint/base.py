"""What a lint rule is, and the skill's documents read once for every rule.

Lint rules check the skill itself (``SKILL.md``, ``card.yaml``, ``CHANGELOG.md``, ``evals/evals.json``)
the way config rules check a training config: a stable id, a severity, a message with the actual values,
a fix, and a docstring that is the rule's documentation. Instead of a bad config, each rule carries a
:class:`Seed`: an edit that breaks a copy of this repository so that exactly this rule fires
(``tests/test_lint.py`` applies every seed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from checks.errors import InputError
from checks.lint.markdown import Document
from checks.yamlio import YamlDoc, load_yaml

SKILL_FILE, CARD_FILE, CHANGELOG_FILE, EVALS_FILE = "SKILL.md", "card.yaml", "CHANGELOG.md", "evals/evals.json"


@dataclass(frozen=True)
class LintHit:
    """What a lint check yields; the linter adds the rule's id and severity."""

    file: str  # relative to the skill's root
    line: int | None
    path: str  # the key, section or item the finding is about
    message: str
    fix: str
    severity: str | None = None  # overrides the rule's severity


@dataclass(frozen=True)
class Seed:
    """A defect to plant in a copy of the skill: replace the first match of ``pattern`` in ``file``."""

    file: str
    pattern: str  # a regular expression (re.M)
    replacement: str

    def apply(self, root: Path) -> None:
        target = root / self.file
        text = target.read_text(encoding="utf-8")
        changed, count = re.subn(self.pattern, self.replacement, text, count=1, flags=re.M)
        if count != 1:
            raise AssertionError(f"seed pattern {self.pattern!r} not found in {self.file}")
        target.write_text(changed, encoding="utf-8")


@dataclass(frozen=True)
class LintRule:
    id: str
    name: str
    severity: str
    check: Callable[[Skill], Iterable[LintHit]]
    seed: Seed

    @property
    def doc(self) -> str:
        import inspect

        return inspect.cleandoc(self.check.__doc__ or "")

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""


@dataclass
class Skill:
    """The skill's documents, each read and parsed at most once; a parse failure is kept, not raised."""

    root: Path
    errors: dict[str, LintHit] = field(default_factory=dict)  # file -> why it could not be read
    lint_rule_ids: frozenset[str] = frozenset()  # every lint rule's id, for the rules that check rule ids
    _artifacts: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def _read(self, name: str) -> str | None:
        path = self.root / name
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self.errors[name] = LintHit(name, None, name, f"{name} does not exist", f"Create {name}")
        except (OSError, UnicodeDecodeError) as err:
            self.errors[name] = LintHit(name, None, name, f"{name} cannot be read: {err}", "Save it as UTF-8 text")
        return None

    @cached_property
    def skill(self) -> Document | None:
        text = self._read(SKILL_FILE)
        return Document.parse(SKILL_FILE, text) if text is not None else None

    @cached_property
    def frontmatter(self) -> YamlDoc | None:
        """SKILL.md's frontmatter as a mapping with key lines (offset to the file's own lines)."""
        doc = self.skill
        if doc is None or doc.frontmatter is None:
            return None
        try:
            parsed = load_yaml(SKILL_FILE, doc.frontmatter)
        except InputError as err:  # load_yaml turns every YAML error, and a non-mapping, into one
            line = err.line + 1 if err.line is not None else 1
            self.errors["frontmatter"] = LintHit(SKILL_FILE, line, "frontmatter", f"frontmatter is not valid YAML: "
                                                 f"{err.problem}", "Fix the YAML between the --- lines")
            return None
        return YamlDoc(parsed.path, parsed.data, {k: v + 1 for k, v in parsed.lines.items()})

    @cached_property
    def card(self) -> YamlDoc | None:
        text = self._read(CARD_FILE)
        if text is None:
            return None
        try:
            return load_yaml(CARD_FILE, text)
        except InputError as err:
            self.errors[CARD_FILE] = LintHit(CARD_FILE, err.line, CARD_FILE, f"card.yaml cannot be read: "
                                             f"{err.problem}", "Fix the YAML at that line")
        return None

    @cached_property
    def changelog(self) -> Document | None:
        text = self._read(CHANGELOG_FILE)
        return Document.parse(CHANGELOG_FILE, text) if text is not None else None

    @cached_property
    def evals(self) -> tuple[Any, list[int]] | None:
        """The parsed evals.json and the line each top-level item starts on."""
        text = self._read(EVALS_FILE)
        if text is None:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            self.errors[EVALS_FILE] = LintHit(EVALS_FILE, err.lineno, EVALS_FILE, f"evals.json is not valid JSON: "
                                              f"{err.msg}", "Fix the JSON at that line")
            return None
        starts = [n for n, line in enumerate(text.splitlines(), start=1) if re.match(r"^\s*\{\s*$", line)]
        return data, starts

    def artifact(self, relative: Any) -> dict[str, Any] | None:
        """A JSON artifact under the skill's root, read once per lint run; None when missing or not an object."""
        if not isinstance(relative, str):
            return None
        if relative not in self._artifacts:
            try:
                data = json.loads((self.root / relative).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = None
            self._artifacts[relative] = data if isinstance(data, dict) else None
        return self._artifacts[relative]

    @cached_property
    def pyproject_version(self) -> tuple[str | None, int | None]:
        text = self._read("pyproject.toml") or ""
        for number, line in enumerate(text.splitlines(), start=1):
            if m := re.match(r'^version\s*=\s*"([^"]+)"', line):
                return m.group(1), number
        return None, None

    def card_line(self, *keys: Any) -> int | None:
        """The line of a key path in card.yaml, or of its nearest parent that has one."""
        card = self.card
        while card is not None and keys:
            line = card.line(keys)
            if line is not None:
                return line
            keys = keys[:-1]
        return None
