"""What a rule sees: one canonical config's values, typed, in one megatron-core version."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from checks.anchors import Upstream, UpstreamCheck
from checks.config import RUN_KEYS, CanonicalConfig, Environment, Setting, split_path
from checks.values import coerce
from checks.versions import ARCHITECTURE_FIELDS, FIELD_SECTIONS, NO_DEFAULT, Profile, profile, version_key


@dataclass(frozen=True)
class Proposal:
    """One finding's complete patch for one key, in the input's spelling."""

    rule: str
    path: str  # the canonical path the key writes
    value: Any


def disagreements(proposals: Iterable[tuple[str, Proposal]]) -> dict[str, list[Proposal]]:
    """The keys two patches set to different values, with every proposal for each (in order, one per rule)."""
    by_key: dict[str, list[Proposal]] = {}
    for key, proposal in proposals:
        by_key.setdefault(key, []).append(proposal)
    # repr: True and 1 are different values for a config, though Python finds them equal
    return {key: list({p.rule: p for p in found}.values()) for key, found in by_key.items()
            if len({repr(p.value) for p in found}) > 1}


def proposals(rule: str, changes: Mapping[str, Any], spelled: Mapping[str, Any], spelling: Any) -> list[
        tuple[str, Proposal]]:
    """A patch as (key, proposal) pairs: ``changes`` in canonical paths, ``spelled`` as the input writes them."""
    out = []
    for key, value in spelled.items():
        path = next((p for p, v in changes.items() if key in spelling.patch({p: v})), next(iter(changes), key))
        out.append((key, Proposal(rule, path, value)))
    return out




class Unreadable(Exception):
    """A rule asked for a value of the wrong type: the engine skips the rule (CFG002 reports the value once).

    This is how what a rule reads needs no declaring: whatever it asks :meth:`Context.get` for is what it reads.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


class Context:
    """What a rule sees: typed values of one canonical config in one megatron-core version."""

    def __init__(self, cfg: CanonicalConfig) -> None:
        self.cfg = cfg
        self.profile: Profile = profile(cfg.version)
        self.values: dict[str, Any] = {}
        self.invalid: dict[str, str] = {}  # path -> what is wrong with its type
        self.unknown_reads: set[str] = set()  # unknown paths read since the engine last cleared it
        self.undecided: dict[str, list[str]] = {}  # unknown path -> rules that read it and so could not decide
        self.stand_in: dict[str, Any] = {}  # the engine's trial values for unknown paths
        # (input key, proposal) of every complete patch, recorded by the engine for the rules that run last
        self.patches: list[tuple[str, Proposal]] = []
        self.read: set[str] = set()  # every path a rule asked about (tests/test_rule_reads.py checks them)
        self.used_suppressions: set[Any] = set()  # those that silenced a finding, recorded by the engine (CFG012)
        for path, setting in cfg.settings.items():
            section, name = split_path(path)
            spec = self.profile.field(section, name) if section != "env" else None
            if spec is None:
                self.values[path] = setting.value
                continue
            value, problem = coerce(spec, setting.value)
            self.values[path] = value
            if problem is not None:
                self.invalid[path] = problem

    def record_patch(self, rule: str, changes: Mapping[str, Any], spelled: Mapping[str, Any]) -> None:
        """Note a finding's complete patch (canonical ``changes``, written as ``spelled``)."""
        self.patches += proposals(rule, changes, spelled, self.cfg.spelling)

    @property
    def version(self) -> str:
        return self.cfg.version

    @property
    def flavor(self) -> str:
        return self.cfg.flavor

    def at_least(self, version: str) -> bool:
        return version_key(self.version) >= version_key(version)

    def exists(self, path: str) -> bool:
        section, name = split_path(path)
        if section == "env":
            return True
        if section == "run":
            return name in RUN_KEYS
        return self.profile.field(section, name) is not None

    def is_set(self, path: str) -> bool:
        """Whether an input states ``path`` (for messages; a decision on it uses :meth:`stated`)."""
        self.read.add(path)
        return path in self.cfg.settings

    def stated(self, path: str) -> bool:
        """Whether ``path`` holds a value the job was given, for a rule that decides on it.

        For a value no input states, the answer is not known: the read is noted, so that the engine tries the
        value stated (with a stand-in) as well as not stated before it trusts the rule's outcome.
        """
        self.read.add(path)
        if path in self.cfg.settings:
            return True
        if self.cfg.unknown_at(path) is not None:
            self.unknown_reads.add(path)
            return path in self.stand_in
        return False

    def known(self, path: str) -> bool:
        """False for a value no input states: a model-shape field left out (the recipe or checkpoint holds it),
        or one the loader marks unknown. Asking does not count as reading it."""
        self.read.add(path)
        if self.is_set(path):
            return True
        return split_path(path)[1] not in ARCHITECTURE_FIELDS and self.cfg.unknown_at(path) is None

    def setting(self, path: str) -> Setting | None:
        self.read.add(path)
        return self.cfg.settings.get(path)

    def get(self, path: str) -> Any:
        """The value megatron-core will see: the input's, else the front end's default, else the dataclass's.

        A value of the wrong type raises :class:`Unreadable`: the rule cannot judge it, and CFG002 reports it.
        """
        self.read.add(path)
        if path in self.invalid:
            raise Unreadable(path, self.invalid[path])
        section, name = split_path(path)
        if section in FIELD_SECTIONS and self.profile.field(section, name) is None:
            return None  # a field this version does not have: its behaviour is absent (CFG003 reports a value)
        if path in self.values:
            return self.values[path]
        if self.cfg.unknown_at(path) is not None:  # a stand-in: the engine tries others before trusting a hit
            self.unknown_reads.add(path)
            if path in self.stand_in:
                return self.stand_in[path]
        if path in self.cfg.defaults:
            return self.cfg.defaults[path]
        spec = self.profile.field(section, name) if section != "env" else None
        if spec is None or spec.default is NO_DEFAULT:
            return None
        return spec.default

    @property
    def env(self) -> Environment:
        return self.cfg.environment

    def te_at_least(self, version: str) -> bool | None:
        """Transformer Engine at least ``version``; None when the user did not say (--te-version)."""
        return self.cfg.environment.te_at_least(version)

    def env_var(self, name: str) -> str | None:
        """An environment variable as the job will see it (config env_vars or --env), as a string."""
        value = self.get(f"env.{name}")
        if value is None:
            return None
        return ("1" if value else "0") if isinstance(value, bool) else str(value)

    def upstream(self, check: UpstreamCheck, **values: Any) -> Upstream | None:
        """The upstream record of ``check`` in this version, or None where it has no anchor."""
        version = self.cfg.environment.nemo_rl_version if check.project == "nemo-rl" else self.version
        if check.anchor(version) is None:
            return None
        return check.at(version, **values)
