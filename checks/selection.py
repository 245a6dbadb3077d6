"""Which rules a run reports: ``--select`` / ``--ignore`` and the ``[tool.megatron-offload-check]`` table.

As in ruff, an entry is a rule id or a prefix of ids (``OPT``, ``ACT00``). The table lives in a
``pyproject.toml``: the nearest one above a checked file that has it is that file's. Its keys:

    [tool.megatron-offload-check]
    select = ["ACT", "OPT"]            # report only these (default: every rule)
    ignore = ["CFG010"]                # never these
    per-file-ignores = {"tests/*.yaml" = ["CFG001"]}   # globs relative to the pyproject.toml's directory

On the command line ``--select`` replaces the table's ``select`` and ``--ignore`` adds to its ``ignore``.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from checks.errors import InputError

TABLE = "megatron-offload-check"
_KEYS = ("select", "ignore", "per-file-ignores")


@dataclass(frozen=True)
class Selection:
    select: tuple[str, ...] = ()  # empty: every rule
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (glob, ids), globs relative to ``root``
    root: str = "."

    def allows(self, rule: str, file: str | None) -> bool:
        if self.select and not _matches(rule, self.select):
            return False
        if _matches(rule, self.ignore):
            return False
        if file is None or not self.per_file_ignores:
            return True
        relative = os.path.relpath(os.path.abspath(file), os.path.abspath(self.root))
        return not any(fnmatch.fnmatch(relative, pattern) and _matches(rule, ids)
                       for pattern, ids in self.per_file_ignores)


def _matches(rule: str, prefixes: Iterable[str]) -> bool:
    return any(rule.startswith(prefix) for prefix in prefixes)


def codes(values: Iterable[Any], where: str) -> tuple[str, ...]:
    """Rule ids or prefixes, each checked against the rules (``--select OPT,ACT001``: commas split too)."""
    from checks.rules import ALL_RULES

    ids = [rule.id for rule in ALL_RULES]
    out: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise InputError(where, f"{value!r} is not a rule id; give ids or prefixes as strings, e.g. \"OPT001\"")
        for part in (p.strip() for p in value.split(",")):
            if not part:
                continue
            if not any(rule.startswith(part) for rule in ids):
                raise InputError(where, f"{part!r} is no rule id or prefix of one (python -m checks rules lists them)")
            out.append(part)
    return tuple(out)


def for_path(path: str | None, select: Sequence[str] = (), ignore: Sequence[str] = ()) -> Selection:
    """The selection for a checked file: its ``pyproject.toml`` table, with the command line's over it."""
    table = _table_above(os.path.dirname(os.path.abspath(path)) if path else os.getcwd())
    base = table or Selection()
    return Selection(tuple(select) or base.select, base.ignore + tuple(ignore), base.per_file_ignores, base.root)


@cache
def _table_above(directory: str) -> Selection | None:
    """The nearest ``pyproject.toml`` at or above ``directory`` that has the table, read once per directory."""
    candidate = os.path.join(directory, "pyproject.toml")
    if os.path.isfile(candidate):
        found = read_table(candidate)
        if found is not None:
            return found
    parent = os.path.dirname(directory)
    return None if parent == directory else _table_above(parent)


def read_table(path: str) -> Selection | None:
    """The ``[tool.megatron-offload-check]`` table of one ``pyproject.toml``; None when it has none."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        raise InputError(path, "reading its [tool.megatron-offload-check] table needs Python 3.11 or later "
                               "(tomllib); give --select/--ignore instead") from None
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as err:
        raise InputError(path, f"cannot read it: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise InputError(path, f"invalid TOML: {err}") from None
    table = document.get("tool", {}).get(TABLE) if isinstance(document.get("tool"), dict) else None
    if table is None:
        return None
    where = f"{path} [tool.{TABLE}]"
    if not isinstance(table, dict):
        raise InputError(where, "is not a table")
    if unknown := sorted(set(table) - set(_KEYS)):
        raise InputError(where, f"unknown key {unknown[0]!r}; the keys are {', '.join(_KEYS)}")
    lists = {}
    for key in ("select", "ignore"):
        value = table.get(key, [])
        if not isinstance(value, list):
            raise InputError(where, f"{key} must be a list of rule ids or prefixes, e.g. {key} = [\"OPT\"]")
        lists[key] = codes(value, f"{where} {key}")
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict) or not all(isinstance(v, list) for v in per_file.values()):
        raise InputError(where, "per-file-ignores must map globs to lists of rule ids, e.g. "
                                "per-file-ignores = {\"tests/*.yaml\" = [\"CFG001\"]}")
    return Selection(lists["select"], lists["ignore"],
                     tuple((glob, codes(ids, f"{where} per-file-ignores {glob!r}")) for glob, ids in per_file.items()),
                     os.path.dirname(os.path.abspath(path)))
