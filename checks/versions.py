"""megatron-core versions the checker knows, and each one's config fields and defaults.

The field tables in ``data/mcore_fields.json`` are extracted from the source of
each release by ``tools/mcore_fields.py`` (AST only; nothing upstream is
imported). A version *label* is the release a profile was taken from; any
patch release of the same minor version maps to it (``0.16.0`` -> ``0.16.1``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from checks.errors import InputError

# Oldest first; "main" is NVIDIA/Megatron-LM@d98e8a64 (2026-08-22). "main@<commit>" are the earlier main-branch
# commits the frameworks install (framework_pin), 0.20.0 development like main.
VERSIONS: tuple[str, ...] = ("0.14.0", "main@af73aa2c", "0.15.3", "0.16.1", "0.17.1", "main@d30c3ae5", "0.18.2",
                             "0.19.2", "main@14346b65", "main@2a75ac12", "main")
DEFAULT_VERSION = "0.19.2"  # the newest release the rules know
REPO = "NVIDIA/Megatron-LM"
_DATA = Path(__file__).resolve().parent / "data"

# The canonical sections (checks.config.SECTIONS) that are megatron-core dataclasses, profiled per version
FIELD_SECTIONS: tuple[str, ...] = ("model", "optimizer", "ddp")

# Fields that describe the model's shape. A partial config that leaves one out
# says nothing about it (the recipe or checkpoint supplies it), so rules must
# not fall back to the dataclass default (num_layers defaults to 0).
ARCHITECTURE_FIELDS: frozenset[str] = frozenset({
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
    "num_query_groups", "kv_channels", "num_moe_experts", "moe_ffn_hidden_size",
    "moe_router_topk", "seq_length", "vocab_size", "padded_vocab_size",
})


@cache
def version_key(label: str) -> tuple[int, int, int]:
    """Order labels: by the megatron-core (major, minor) each one's source reports, then by position in VERSIONS.

    A release label (``0.18.2``) is its own number; a main-branch commit's comes from its
    ``megatron/core/package_info.py`` (``data/anchors.json`` ``package_versions``), so a commit a framework pins
    before a release sorts before that release, and ``since="0.18"`` (which means the 0.18 release) excludes it.
    A bare ``X.Y`` (a rule's ``since``/``until``) is the key of the release label with that number.
    """
    if label in VERSIONS:
        major, minor = _package_version(label)
        return (major, minor, VERSIONS.index(label))
    major_text, minor_text = label.split(".")[:2]
    major, minor = int(major_text), int(minor_text)
    release = next((v for v in VERSIONS if "@" not in v and v != "main" and _package_version(v) == (major, minor)),
                   None)
    return (major, minor, VERSIONS.index(release) if release is not None else -1)


def _package_version(label: str) -> tuple[int, int]:
    if "@" in label or label == "main":
        known = anchor_table().get("package_versions", {})
        if label not in known:
            raise KeyError(f"no package version for {label} in checks/data/anchors.json: run "
                           "tools/verify_anchors.py --write")
        major, minor = known[label].split(".")[:2]
    else:
        major, minor = label.split(".")[:2]
    return (int(major), int(minor))


NEMO_RL_VERSIONS: tuple[str, ...] = ("0.4.0", "0.5.0", "0.6.0", "0.7.0", "main")
# main is NVIDIA-NeMo/RL@7ea279ab (2026-08-22); the releases up to 0.7.0 predate its offload changes.
DEFAULT_NEMO_RL_VERSION = "main"


def resolve_nemo_rl_version(text: str) -> str:
    """Map ``0.7``, ``v0.7.0`` or ``main`` to a NeMo-RL label the checker knows."""
    wanted = text.strip().lower().lstrip("v")
    if wanted in ("main", "dev"):
        return "main"
    match = re.fullmatch(r"(\d{1,9})\.(\d{1,9})(?:\.\d+)?", wanted)
    if match:
        for label in NEMO_RL_VERSIONS[:-1]:
            if label.split(".")[:2] == [match.group(1), match.group(2)]:
                return label
    raise InputError("--nemo-rl-version", f"unknown NeMo-RL version {text!r}; known: {', '.join(NEMO_RL_VERSIONS)}")


def nemo_rl_keys(version: str) -> frozenset[str]:
    """The keys NeMo-RL ``version`` reads under ``megatron_cfg``: its ``MegatronConfig`` fields and every key
    its code reads there, TypedDict or not (``data/nemo_rl_keys.json``, from ``tools/nemo_rl_keys.py``)."""
    return frozenset(_load("nemo_rl_keys.json")["megatron_cfg"][version])


def nemo_rl_typed_keys(version: str) -> frozenset[str]:
    """The fields of NeMo-RL ``version``'s ``MegatronConfig`` TypedDict (the keys it reads, less those outside it)."""
    data = _load("nemo_rl_keys.json")
    return frozenset(data["megatron_cfg"][version]) - frozenset(data["outside_typeddict"][version])


def nemo_rl_applied(version: str) -> frozenset[str]:
    """The ``megatron_cfg`` keys NeMo-RL ``version`` copies onto the model config under the same name."""
    return frozenset(_load("nemo_rl_keys.json")["applied"][version])


def nemo_rl_commit(version: str) -> str:
    commit: str = _load("nemo_rl_keys.json")["refs"][version]
    return commit


def bridge_commit() -> str:
    """The Megatron Bridge commit the checker models (``data/framework_pins.json``: the one whose pin it read)."""
    commit: str = _load("framework_pins.json")["bridge"]["main"]["ref"]
    return commit


@dataclass(frozen=True)
class FrameworkPin:
    """The Megatron-LM commit a framework release installs (``data/framework_pins.json``, from
    ``tools/framework_pins.py``): NeMo-RL and Bridge pin a commit as a git submodule, not a release."""

    framework: str  # "NeMo-RL main", "Megatron Bridge main"
    commit: str | None  # the pinned Megatron-LM commit; None where the tool could not read the pin
    via: str  # the submodule path(s) the pin was read from
    package_version: str | None  # what that commit's megatron/core/package_info.py reports

    @property
    def label(self) -> str | None:
        """The profile for the pinned commit, or None when the checker has none."""
        if self.commit is None:
            return None
        return next((v for v in VERSIONS if profile(v).commit == self.commit), None)

    def describe(self) -> str:
        if self.commit is None:
            return f"which Megatron-LM {self.framework} installs is not recorded ({self.via})"
        what = f", megatron-core {self.package_version}" if self.package_version else ""
        return f"{self.framework} pins Megatron-LM {self.commit[:8]}{what}"


def framework_pin(flavor: str, nemo_rl_version: str) -> FrameworkPin | None:
    """What the framework a config is written for installs; None for Megatron-LM, which is run from any checkout."""
    pins = _load("framework_pins.json")
    if flavor == "nemo-rl":
        name, raw = f"NeMo-RL {nemo_rl_version}", pins["nemo-rl"][nemo_rl_version]
    elif flavor == "bridge":
        name, raw = "Megatron Bridge main", pins["bridge"]["main"]
    else:
        return None
    return FrameworkPin(name, raw["megatron_lm"], raw["via"], raw["package_version"])


def parse_te_version(text: str) -> tuple[int, int]:
    """``2.10``, ``2.10.0``, ``2.10.0.dev0+abc`` -> ``(2, 10)``; ``none`` (not installed) -> ``(0, 0)``."""
    if text.strip().lower() in ("none", "absent", "0"):
        return (0, 0)
    match = re.match(r"\s*v?(\d{1,9})\.(\d{1,9})", text)
    if not match:
        raise InputError("--te-version", f"{text!r} is not a Transformer Engine version such as 2.10 (or none)")
    return int(match.group(1)), int(match.group(2))


def installed_mcore_version() -> str | None:
    """The version of an installed megatron-core, read from its dist-info directory name (nothing imported).

    The current directory is not searched: ``python -m`` puts it first on ``sys.path``, so a stray
    ``megatron_core-*.dist-info`` where the checker is run (an unpacked wheel, a test fixture) would change
    the verdict of every check run there.
    """
    import os
    import sys

    here = os.path.realpath(os.getcwd())
    for entry in sys.path:
        if os.path.realpath(entry or ".") == here:
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            if name.startswith(("megatron_core-", "megatron-core-")) and name.endswith(".dist-info"):
                return name[len("megatron_core-"):-len(".dist-info")]
    return None


def resolve_version(text: str) -> str:
    """Map a user-given version (``0.16``, ``0.16.0``, ``0.16.x``, ``main``, a commit such as ``14346b65`` or
    ``main@14346b65``) to a profile label."""
    wanted = text.strip().lower()
    if wanted in ("main", "dev", "latest-main"):
        return "main"
    commit = wanted.removeprefix("main@")
    if re.fullmatch(r"[0-9a-f]{7,40}", commit):
        for label in VERSIONS:
            if profile(label).commit.startswith(commit):
                return label
    match = re.fullmatch(r"v?(\d{1,9})\.(\d{1,9})(?:\.(?:\d+|x)(?:rc\d+)?)?", wanted)
    if match:
        key = (int(match.group(1)), int(match.group(2)))
        for label in VERSIONS:
            if not label.startswith("main") and version_key(label)[:2] == key:
                return label
    known = ", ".join(VERSIONS)
    raise InputError("--mcore-version", f"unknown megatron-core version {text!r}; known: {known}")


@dataclass(frozen=True)
class FieldSpec:
    """One dataclass field of a megatron-core config class in one version."""

    section: str
    name: str
    annotation: str
    default: Any  # the Python default; NO_DEFAULT when there is none or it is not a literal

    @property
    def kind(self) -> str:
        """bool | int | float | str | list_str | dtype | any (no type check)."""
        return _kind(self.annotation)

    @property
    def nullable(self) -> bool:
        return self.annotation.startswith("Optional[") or self.default is None

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(re.findall(r"'([^']*)'", self.annotation)) if "Literal[" in self.annotation else ()


class _NoDefault:
    def __repr__(self) -> str:
        return "<no default>"


NO_DEFAULT = _NoDefault()


def _kind(annotation: str) -> str:
    inner = annotation
    if inner.startswith("Optional[") and inner.endswith("]"):
        inner = inner[len("Optional["):-1]
    if inner in ("bool", "int", "float", "str"):
        return inner
    if inner.startswith("Literal["):
        return "str"
    if inner in ("list[str]", "List[str]"):
        return "list_str"
    if inner == "torch.dtype":
        return "dtype"
    return "any"


def _python_default(raw: Any) -> Any:
    if isinstance(raw, dict):
        if raw.get("factory") == "list":
            return []
        if raw.get("factory") == "dict":
            return {}
        return NO_DEFAULT
    return raw


@dataclass(frozen=True)
class Profile:
    """The config fields of one megatron-core version."""

    version: str
    commit: str

    def field(self, section: str, name: str) -> FieldSpec | None:
        raw = _table()["versions"][self.version].get(section, {}).get(name)
        if raw is None:
            return None
        return FieldSpec(section, name, raw[0], _python_default(raw[1]))

    def names(self, section: str) -> frozenset[str]:
        return frozenset(_table()["versions"][self.version].get(section, {}))

    def anchor(self, path: str, line: int) -> str:
        """``NVIDIA/Megatron-LM@<commit>:path:line`` for this version's source."""
        return f"{REPO}@{self.commit[:8]}:{path}:{line}"


@cache
def _load(name: str) -> dict[str, Any]:
    table: dict[str, Any] = json.loads((_DATA / name).read_text(encoding="utf-8"))
    return table


def _table() -> dict[str, Any]:
    return _load("mcore_fields.json")


def anchor_table() -> dict[str, Any]:
    """``data/anchors.json``: each upstream check's anchors, the behaviour switches and the offload-module sets
    per version, all derived from upstream source by ``tools/verify_anchors.py --write``."""
    return _load("anchors.json")


def has_feature(version: str, feature: str) -> bool:
    """Whether megatron-core ``version`` behaves as ``feature`` says (``data/anchors.json`` ``features``).

    A behaviour switch asks this instead of comparing version names, so that a new release or commit needs only
    its data regenerated. An unknown feature or version is a bug in the caller, not an input error.
    """
    return _switch("megatron-core", version, feature)


def nemo_rl_has_feature(version: str, feature: str) -> bool:
    """:func:`has_feature` for a NeMo-RL release (``data/anchors.json`` ``nemo_rl_features``)."""
    return _switch("nemo-rl", version, feature)


def _switch(project: str, version: str, feature: str) -> bool:
    table = anchor_table()["features" if project == "megatron-core" else "nemo_rl_features"]
    if feature not in table:
        raise KeyError(f"no {project} feature {feature!r} in checks/data/anchors.json; known: {', '.join(table)}")
    by_version: dict[str, bool] = table[feature]["versions"]
    if version not in by_version:
        raise KeyError(f"{project} feature {feature!r} is not recorded for {version!r}: regenerate anchors.json")
    return by_version[version]


def offload_modules(version: str) -> frozenset[str]:
    """The names ``TransformerConfig.__post_init__`` accepts in ``offload_modules`` in ``version`` (its
    ``allowed_modules`` set); empty where the version has no fine-grained offloading."""
    return frozenset(anchor_table()["offload_modules"].get(version, ()))


@cache
def profile(version: str) -> Profile:
    return Profile(version, _table()["refs"][version])


def versions_with_field(section: str, name: str) -> tuple[str, ...]:
    """Labels of the versions in which ``section.name`` exists."""
    return tuple(v for v in VERSIONS if name in _table()["versions"][v].get(section, {}))


def all_field_names(section: str) -> frozenset[str]:
    """Every field name ``section`` has in any known version."""
    names: set[str] = set()
    for v in VERSIONS:
        names.update(_table()["versions"][v].get(section, {}))
    return frozenset(names)


@dataclass(frozen=True)
class EnumMember:
    """A member of a Python ``enum.Enum`` that a Megatron-LM flag takes, default or converts to."""

    cls: str  # the class name, e.g. "AttnBackend"
    name: str  # the canonical member name, e.g. "flash"
    value: Any = None  # the member's value (for argparse's repr of it in "choose from ...")

    def __repr__(self) -> str:
        return f"<{self.cls}.{self.name}: {self.value!r}>"


@dataclass(frozen=True)
class EnumSpec:
    """An Enum class as a converter looks members up by name (``Enum[name]``, aliases included)."""

    cls: str
    members: tuple[EnumMember, ...]  # canonical members, in definition order (``list(Enum)``)
    aliases: Mapping[str, str]  # alias name -> canonical member name

    def lookup(self, name: str) -> EnumMember | None:
        """``Enum[name]`` (``_member_map_``): a canonical or alias name; None where it raises KeyError."""
        name = self.aliases.get(name, name)
        return next((m for m in self.members if m.name == name), None)


@dataclass(frozen=True)
class FlagSpec:
    """One Megatron-LM command-line option string (``data/mlm_flags.json``, dumped from the real parser).

    One argparse action can have several option strings (aliases, ``BooleanOptionalAction``'s ``--no-`` form);
    each gets a FlagSpec with the same action fields and ``options`` listing them all, in registration order.
    """

    flag: str
    dest: str
    action: str  # store | store_true | store_false | store_const | append | append_const | count | extend |
    #              BooleanOptionalAction | help | version; anything else is a custom Action class's name
    default: Any  # JSON data; enum members as EnumMember
    nargs: Any  # None, "+", "*", "?" or an int (0 for the switch actions)
    type: str | None  # converter id: int, float, str, bool, a function's name, "lambda:<first option>"; None: text
    choices: tuple[Any, ...] | None
    const: Any = None
    options: tuple[str, ...] = ()  # every option string of the action; argparse names them all in its errors
    required: bool = False
    help_suppressed: bool = False
    deprecated: bool = False  # upstream's help calls the flag deprecated
    enum: str | None = None  # the Enum class whose member names the converter looks up

    @property
    def takes_value(self) -> bool:
        return self.nargs != 0 and self.action not in _SWITCH_ACTIONS

    @property
    def name(self) -> str:
        """How argparse names the argument in its errors: every option string, joined with '/'."""
        return "/".join(self.options or (self.flag,))


_SWITCH_ACTIONS = frozenset({"store_true", "store_false", "store_const", "append_const", "count", "help", "version",
                             "BooleanOptionalAction"})


@dataclass(frozen=True)
class FlagTable:
    """The parser of one version: its option strings, mutually exclusive groups and the enums converters use."""

    version: str
    flags: Mapping[str, FlagSpec]
    groups: tuple[tuple[str, ...], ...]  # mutually exclusive groups, by each action's first option string
    enums: Mapping[str, EnumSpec]
    converters: Mapping[str, str]  # converter id -> digest of its upstream source (drift check)

    def conflicts(self, spec: FlagSpec) -> tuple[str, ...]:
        """First option strings of the actions argparse refuses together with ``spec``'s."""
        first = spec.options[0] if spec.options else spec.flag
        return tuple(o for g in self.groups if first in g for o in g if o != first)


def _flag_table() -> dict[str, Any]:
    return _load("mlm_flags.json")


def decode_flag_value(raw: Any) -> Any:
    """JSON of the flag table -> Python: ``{"enum": cls, "name": n, "value": v}`` is an EnumMember, lists stay
    lists, ``{"tuple": [...]}`` is a tuple."""
    if isinstance(raw, dict):
        if "enum" in raw:
            return EnumMember(raw["enum"], raw["name"], raw.get("value"))
        if "tuple" in raw:
            return tuple(decode_flag_value(v) for v in raw["tuple"])
        return {k: decode_flag_value(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [decode_flag_value(v) for v in raw]
    return raw


def flag_table_from(data: Mapping[str, Any], version: str) -> FlagTable:
    """Build ``version``'s FlagTable from flag-table JSON (the committed file, or a tool's fresh extraction)."""
    pool = data["actions"]
    flags: dict[str, FlagSpec] = {}
    for index in data["versions"][version]:
        raw = pool[index]
        choices = raw.get("choices")
        options = tuple(raw["options"])
        for option in options:
            flags[option] = FlagSpec(
                option, raw["dest"], raw.get("action", "store"), decode_flag_value(raw.get("default")),
                raw.get("nargs"), raw.get("type"),
                tuple(decode_flag_value(choices)) if choices is not None else None,
                decode_flag_value(raw.get("const")), options, bool(raw.get("required")),
                bool(raw.get("suppressed")), bool(raw.get("deprecated")), raw.get("enum"))
    groups = tuple(tuple(pool[i]["options"][0] for i in group) for group in data.get("groups", {}).get(version, []))
    enums = {cls: EnumSpec(cls, tuple(EnumMember(cls, name, decode_flag_value(value)) for name, value in e["members"]),
                           dict(e.get("aliases", {})))
             for cls, e in data.get("enums", {}).get(version, {}).items()}
    return FlagTable(version, flags, groups, enums, dict(data.get("converters", {}).get(version, {})))


@cache
def mlm_flag_table(version: str) -> FlagTable:
    """The Megatron-LM parser of ``version`` as the checker models it."""
    return flag_table_from(_flag_table(), version)


def mlm_flags(version: str) -> Mapping[str, FlagSpec]:
    """Every Megatron-LM option string of ``version``, e.g. ``"--optimizer-offload-fraction"``."""
    return mlm_flag_table(version).flags


@cache
def _flag_names(version: str) -> frozenset[str]:
    pool = _flag_table()["actions"]
    return frozenset(o for i in _flag_table()["versions"].get(version, []) for o in pool[i]["options"])


def versions_with_flag(flag: str) -> tuple[str, ...]:
    return tuple(v for v in VERSIONS if flag in _flag_names(v))


def all_flags() -> frozenset[str]:
    return frozenset().union(*(_flag_names(v) for v in VERSIONS))
