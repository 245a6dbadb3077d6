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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from checks.errors import InputError
from checks.loaders.apply import ABSENT, LIST, MAP, NULL, NULLABLE, UNKNOWN, VALUE, Hidden
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


# --- the recipe catalogue (tools/bridge_recipes.py) -------------------------------------------------------------

_RECIPES = Path(__file__).resolve().parent.parent / "data" / "bridge_recipes.json"


class _Table:
    """The recipe catalogue, read lazily: its small tables at once, a recipe or template entry when asked for.

    ``tools/bridge_recipes.py`` writes every top-level key, and every entry of ``recipes`` and ``templates``, on a
    line of its own (the file stays one JSON document), so a launch parses the one recipe it runs and its bases
    rather than all 738 (about 30 ms of start-up).
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.small: dict[str, Any] = {}
        self.lines: dict[str, dict[str, tuple[int, int]]] = {}  # table -> entry -> (start, end) of its JSON value
        table: str | None = None
        start = text.index("\n") + 1  # after "{"
        while start < len(text):
            end = text.find("\n", start)
            end = len(text) if end < 0 else end
            line = text[start:end]
            if table is not None:
                if line.startswith("}"):
                    table = None
                else:
                    name_end = line.index('":')
                    value_end = end - 1 if line.endswith(",") else end
                    self.lines[table][json.loads(line[:name_end + 1])] = (start + name_end + 2, value_end)
            elif line.endswith(":{"):
                table = json.loads(line[:-2])
                self.lines[table] = {}
            elif line.startswith('"'):
                self.small.update(json.loads("{" + line.rstrip(",") + "}"))
            start = end + 1

    def __getitem__(self, key: str) -> Any:
        return self.small[key]

    def names(self, table: str) -> list[str]:
        return list(self.lines[table])

    def entry(self, table: str, name: str) -> dict[str, Any] | None:
        span = self.lines[table].get(name)
        if span is None:
            return None
        found: dict[str, Any] = json.loads(self.text[span[0]:span[1]])
        return found


@cache
def catalogue() -> _Table:
    return _Table(_RECIPES.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Recipe:
    """One Bridge recipe function, as the catalogue read it from Bridge's source."""

    name: str  # as the user named it (an alias, or the function)
    function: str  # the function run_recipe.py loads
    defined: str  # its file:line in Bridge's source
    values: Mapping[str, tuple[Any, str]]  # override-key path -> (value, file:line that sets it)
    unresolved: Mapping[str, str]  # override-key path -> why the catalogue could not evaluate it
    hf_model: str | None  # the Hugging Face id its model is built from
    mode: str | None
    commit: str

    def where(self, at: str) -> str:
        """An upstream citation for a value's line (``at`` may be one already: a recipe's mixed-precision fields
        arrive with their origins)."""
        repo = "NVIDIA-NeMo/Megatron-Bridge@"
        return at if at.startswith(repo) else f"{repo}{self.commit[:8]}:{at}"


def find_recipe(name: str) -> Recipe:
    """The recipe ``run_recipe.py --recipe name`` runs (a function or an alias), or an input error with the
    closest names."""
    data = catalogue()
    key = data["aliases"].get(name, name)
    entry = data.entry("recipes", key)
    if entry is None:
        import difflib

        recipes = data.names("recipes")
        names = sorted({*recipes, *data["aliases"]} - {k for k in recipes if "." in k})
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise InputError("--recipe", f"{name!r} is not a recipe of Megatron Bridge@{data['source']['commit'][:8]} "
                                     f"({len(recipes)} recipes, {len(data['aliases'])} aliases){hint}")
    hf = entry.get("hf_model") or {}
    return Recipe(name, entry["function"], entry["defined"], _expand(data, key), dict(entry.get("unresolved", {})),
                  hf.get("id") if isinstance(hf.get("id"), str) else None, entry.get("mode"),
                  data["source"]["commit"])


def _expand(data: _Table, key: str) -> dict[str, tuple[Any, str]]:
    """A recipe's values from the compact table: its base's, less what it drops or leaves unresolved, plus its
    own (the table's "format" note; tools/bridge_recipes.py writes it)."""
    entry = data.entry("recipes", key) or data.entry("templates", key)
    if entry is None:
        raise InputError("--recipe", f"the recipe catalogue names {key!r} as a base but does not hold it; "
                                     "regenerate it with tools/bridge_recipes.py")
    values = {} if entry.get("base") is None else _expand(data, entry["base"])
    for path in (*entry.get("drop", ()), *entry.get("unresolved", {})):
        values.pop(path, None)
    for path, (value, at) in entry["values"].items():
        index, _, line = at.partition(":")
        values[path] = (value, f"{data['files'][int(index)]}:{line}")
    return values


def mixed_precision(recipe_value: Any) -> tuple[dict[str, tuple[Any, str]], str]:
    """What Bridge's mixed-precision set-up copies onto model, optimizer and ddp, with the line of each value.

    At training start ``runtime_config_update`` resolves ``cfg.mixed_precision`` (a preset name or a config) and
    copies every ``MixedPrecisionConfig`` field, preset values and class defaults alike, over the fields of that
    name, after the command-line overrides (the table's "applies" note). ``recipe_value``: the preset name, or
    the ``mixed_precision.*`` fields as ``{field: (value, where)}`` (the recipe's and the overrides'). The second
    item names what was applied, for origins.
    """
    data = catalogue()
    defaults = data["mixed_precision_defaults"]
    found = {name: (value, defaults["at"]) for name, value in defaults["values"].items()}
    label = "MixedPrecisionConfig"
    if isinstance(recipe_value, str):
        name = recipe_value.replace("-", "_")
        preset = data["mixed_precision_presets"].get(name)
        if preset is None:
            raise InputError("mixed_precision", f"{recipe_value!r} is not a mixed-precision preset of Megatron "
                                                f"Bridge@{data['source']['commit'][:8]}")
        found.update({field: (value, preset["at"].get(field, preset["defined"]))
                      for field, value in preset["values"].items()})
        label = f"the {name} preset"
    elif isinstance(recipe_value, Mapping):
        found.update(recipe_value)
    for gathered in ("fp8", "fp4"):  # finalize(): a null *_param follows *_param_gather (mixed_precision.py:97)
        if found.get(f"{gathered}_param", (None,))[0] is None and f"{gathered}_param_gather" in found:
            found[f"{gathered}_param"] = found[f"{gathered}_param_gather"]
    return found, label


class ResolvedRecipe(RecipeBase):
    """The recipe's own config under the files and overrides: what its fields hold, not only which exist.

    The tree holds every value the recipe sets; a field it leaves alone holds its dataclass default, so a
    null default is null (``+key=value`` is allowed there). What the catalogue could not evaluate stays unknown.
    """

    def __init__(self, version: str, recipe: Recipe) -> None:
        super().__init__(version, nested=False, source=f"recipe {recipe.name}")
        self.recipe = recipe

    def hidden(self, keys: KeyPath) -> Hidden:
        where = ".".join(map(str, keys))
        for path, why in self.recipe.unresolved.items():
            stem = path.removesuffix(".*")  # "model.*": every field the values do not list
            if where == stem or where.startswith(stem + "."):
                return Hidden(UNKNOWN, f"the recipe {self.recipe.name} sets '{path}' in a way the recipe catalogue "
                                       f"could not evaluate ({why})")
        found = super().hidden(keys)
        if found.kind == NULLABLE and len(keys) == 2 and str(keys[0]) in _MCORE_SECTIONS:
            spec = self.profile.field(str(keys[0]), str(keys[1]))
            if spec is not None and spec.default is None:
                return Hidden(NULL)
        return found
