"""What a Megatron Bridge recipe's config holds, as far as its dataclass fields tell.

An override file (no ``_target_``) is merged over a recipe's ``ConfigContainer`` that the checker
does not have, and Bridge applies the command-line overrides to that merge in struct mode
(NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:139-153,
180-183). Whether ``train.x=1`` is refused depends on whether ``x`` is a field of the section's
class; whether ``+train.x=1`` is refused, on whether its value is null. :class:`RecipeBase` answers
from the field tables: megatron-core's classes from the selected version (``mcore_fields.json``),
Bridge's own from ``bridge_fields.json`` (``tools/bridge_fields.py``, Bridge@067f987d and the
Megatron-LM commit it pins). A section can hold several classes (a model provider and its
subclasses, the dataset configs): a key all of them have is present, one only some have is unknown.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from checks.loaders.apply import ABSENT, LIST, MAP, NULLABLE, UNKNOWN, VALUE, Hidden
from checks.versions import NO_DEFAULT, profile
from checks.yamlio import KeyPath

_DATA = Path(__file__).resolve().parent.parent / "data" / "bridge_fields.json"
_MCORE_SECTIONS = frozenset({"model", "optimizer", "ddp"})  # fields from the megatron-core version profile
# Callables Bridge writes into its dict as names (omegaconf_utils.py:43); any other is left out of it.
_SERIALISED_CALLABLES = frozenset({"activation_func"})


@cache
def table() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(_DATA.read_text(encoding="utf-8"))
    return loaded


def _hidden(kinds: set[str], reason: str) -> Hidden:
    """A field's value in a recipe the checker does not have, from the kinds of default it is declared with.

    A non-null default stands for the recipe's value: a recipe may change a field, but does not null it.
    """
    if kinds == {"value"}:
        return Hidden(VALUE)
    if kinds == {"list"}:
        return Hidden(LIST, reason)
    if kinds and kinds <= {"map", "dataclass"}:
        return Hidden(MAP, reason)
    return Hidden(NULLABLE, reason)


def _profile_kind(default: Any) -> str:
    if default is NO_DEFAULT:
        return "unknown"
    if default is None:
        return "null"
    if isinstance(default, list):
        return "list"
    if isinstance(default, dict):
        return "map"
    return "value"


class RecipeBase:
    """The recipe under a Bridge override file: its sections and their fields, without their values."""

    def __init__(self, version: str, *, nested: bool, source: str = "recipe") -> None:
        self.profile = profile(version)
        self.nested = nested  # the GPTModelConfig layout: transformer fields under model.transformer
        self.source = source  # what the values come from: "recipe", or "dump" for an abridged _target_ dump

    def hidden(self, keys: KeyPath) -> Hidden:
        if not keys:
            return Hidden(MAP)
        section = str(keys[0])
        kind = table()["container"].get(section)
        if kind is None:
            return Hidden(ABSENT)
        if len(keys) == 1:
            return _hidden({"dataclass" if kind == "required" else kind},
                           f"the {self.source} may set '{section}' (it is null by default), which the checker "
                           "cannot see")
        if section == "env_vars":
            return Hidden(UNKNOWN, f"the checker does not have the {self.source}'s env_vars")
        if section == "model" and self.nested and keys[1] == "transformer" and len(keys) > 2:
            return self._field("model", str(keys[2]), keys, mcore_only=True) if len(keys) == 3 else \
                Hidden(UNKNOWN, f"the checker does not model what '{'.'.join(map(str, keys[:3]))}' holds")
        if len(keys) > 2:
            return Hidden(UNKNOWN, f"the checker does not model the fields inside '{'.'.join(map(str, keys[:2]))}'")
        return self._field(section, str(keys[1]), keys)

    def _field(self, section: str, name: str, keys: KeyPath, mcore_only: bool = False) -> Hidden:
        label = "model.nested" if section == "model" and self.nested and not mcore_only else section
        fields = {} if mcore_only else table()["sections"].get(label, {}).get("fields", {})
        entry = fields.get(name)
        spec = self.profile.field(section, name) if section in _MCORE_SECTIONS and label != "model.nested" else None
        where = ".".join(map(str, keys))
        if label == "model.nested" and name == "transformer":
            return Hidden(MAP)
        if spec is None:
            if entry is None:
                return Hidden(ABSENT)
            if entry["in"] != "all":
                classes = table()["sections"][label]["classes"]
                return Hidden(UNKNOWN, f"only some of the classes a {section} section can hold declare '{where}' "
                                       f"(not all of {', '.join(classes)}), and the checker does not know which one "
                                       f"the {self.source} uses")
        kinds = set(entry["kinds"]) if entry is not None else set()
        if spec is not None:
            kinds.add("callable" if "Callable" in spec.annotation else _profile_kind(spec.default))
        if "callable" in kinds and name not in _SERIALISED_CALLABLES:
            return Hidden(UNKNOWN, f"Bridge leaves a field holding a function out of the dict it applies overrides "
                                   f"to (omegaconf_utils.py:269-279), so whether the {self.source}'s '{where}' holds "
                                   "one is not known")
        return _hidden(kinds, f"the {self.source} may set '{where}' (its default is null, or not a plain value), "
                              "which the checker cannot see")
