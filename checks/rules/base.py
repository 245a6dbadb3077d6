"""What a rule is: metadata, its upstream checks, its examples, and what a check yields.

A rule is declared on its check function with :func:`rule`; each family module collects its own with
:func:`declared`, and ``checks/rules/__init__.py`` lists the families. What a rule reads is not declared:
the context refuses a value of the wrong type (:class:`checks.context.Unreadable`) and the engine skips the
rule, and ``tests/test_rule_reads.py`` records what each rule reads to check that every path exists.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checks.anchors import Upstream, UpstreamCheck
from checks.config import Origin
from checks.versions import VERSIONS, version_key

if TYPE_CHECKING:
    from checks.context import Context

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES: tuple[str, ...] = (ERROR, WARNING, INFO)
ALL_FLAVORS: frozenset[str] = frozenset({"bridge", "nemo-rl", "megatron-lm"})


@dataclass(frozen=True)
class Example:
    """A config that shows a rule: in the input's real format, small enough to read.

    ``text`` may be written as an indented block that starts with a newline (a YAML file as it reads);
    the block is dedented.
    """

    text: str  # YAML for bridge / nemo-rl, a command line for megatron-lm
    flavor: str = "bridge"
    version: str | None = None  # None: every version the rule applies to
    te: str | None = None  # --te-version for the example; None: unknown
    nemo_rl: str | None = None  # --nemo-rl-version; None: the default
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, applied to the YAML
    complete: bool = True  # the YAML is the whole config (--assume-defaults): what it leaves out holds its default
    also: tuple[str, ...] = ()  # other rules the example triggers, for a rule about other findings (CFG011)

    def __post_init__(self) -> None:
        if self.text.startswith("\n"):
            object.__setattr__(self, "text", textwrap.dedent(self.text[1:]))


@dataclass(frozen=True)
class Hit:
    """What a check yields; the engine adds the rule's id, severity and the location."""

    path: str  # canonical path the finding is about
    message: str  # states the actual values
    fix: str  # imperative
    patch: Mapping[str, Any] | None = None  # canonical path -> new value, when the fix is a change of values
    upstream: Upstream | None = None  # None where the finding goes beyond upstream
    at: tuple[str, ...] = ()  # other paths to locate the finding by when ``path`` was not set
    origin: Origin | None = None  # an explicit location (keys that have no canonical path)
    severity: str | None = None  # overrides the rule's severity (rarely: when consequences differ by version)
    paths: tuple[str, ...] = ()  # every path the finding is about, when several (CFG010's values); also located by


Check = Callable[["Context"], Iterable[Hit]]


@dataclass(frozen=True)
class Rule:
    """A check with a stable id. The check function's docstring is its documentation."""

    id: str
    name: str  # kebab-case slug
    severity: str
    check: Check
    bad: Example
    good: Example
    since: str | None = None  # first megatron-core version it applies to
    until: str | None = None  # last version it applies to
    feature: str | None = None  # applies only where the version's data has this behaviour (checks.versions)
    flavors: frozenset[str] = ALL_FLAVORS
    upstream: tuple[UpstreamCheck, ...] = ()
    last: bool = False  # runs after every other rule (it reports what the others could not decide)
    per_run: bool = False  # about the run's input files, not one model: reported once, without a model's label

    @property
    def doc(self) -> str:
        return _dedent(self.check.__doc__ or "")

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""

    def applies_to(self, version: str, flavor: str) -> bool:
        return flavor in self.flavors and self.in_version(version)

    def in_version(self, version: str) -> bool:
        key = version_key(version)
        after_start = self.since is None or key >= version_key(self.since)
        before_end = self.until is None or key <= version_key(self.until)
        if not (after_start and before_end):
            return False
        if self.feature is None:
            return True
        from checks.versions import has_feature  # only a rule tied to a behaviour switch asks

        return has_feature(version, self.feature)

    def versions(self) -> tuple[str, ...]:
        return tuple(v for v in VERSIONS if self.in_version(v))


_DECLARED: dict[str, dict[str, Rule]] = {}  # module -> rule id -> rule, in declaration order


def rule(rule_id: str, name: str, severity: str, *, bad: Example, good: Example, since: str | None = None,
         until: str | None = None, feature: str | None = None, flavors: frozenset[str] = ALL_FLAVORS,
         upstream: tuple[UpstreamCheck, ...] = (), last: bool = False,
         per_run: bool = False) -> Callable[[Check], Check]:
    """Declare the decorated check function as rule ``rule_id``; the function itself is unchanged."""
    if severity not in SEVERITIES:
        raise ValueError(f"{rule_id}: severity {severity!r} is not one of {SEVERITIES}")

    def declare(check: Check) -> Check:
        _DECLARED.setdefault(check.__module__, {})[rule_id] = Rule(
            rule_id, name, severity, check, bad, good, since=since, until=until, feature=feature,
            flavors=flavors, upstream=upstream, last=last, per_run=per_run)
        return check
    return declare


def declared(module: str) -> tuple[Rule, ...]:
    """The rules declared in ``module`` (its ``__name__``), in declaration order."""
    return tuple(_DECLARED.get(module, {}).values())


def _dedent(text: str) -> str:
    import inspect  # only `explain` and the docs need it

    return inspect.cleandoc(text)
