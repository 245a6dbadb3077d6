"""Resolve ``${...}`` interpolations the way OmegaConf does, only for the values the checker reads.

NeMo-RL and Bridge resolve interpolations with OmegaConf. The checker evaluates a strict subset of its grammar
itself (Note [Native evaluation]: what NeMo-RL's own examples use) and hands everything else, and every error,
to OmegaConf, so the answers stay upstream's. OmegaConf is imported only when that happens, keeping the common
path free of it (``pip install omegaconf`` or the ``nemo-rl`` extra provides it).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from checks.config import Setting
from checks.errors import InputError
from checks.loaders import tree as trees
from checks.yamlio import KeyPath

# The four resolvers NeMo-RL registers (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:196-204), which the
# native evaluation calls as OmegaConf does.
_NEMO_RL_RESOLVERS: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "max": lambda a, b: max(a, b)}


def _register_nemo_rl_resolvers(omegaconf: Any) -> None:
    # OmegaConf 2.4 renamed register_new_resolver to register_resolver, the name 2.0-2.3 used for the old
    # string-argument API; the 2.4 spelling of the old name warns on every use.
    major_minor = tuple(int(p) for p in omegaconf.__version__.split(".")[:2])
    register = omegaconf.OmegaConf.register_resolver if major_minor >= (2, 4) else \
        omegaconf.OmegaConf.register_new_resolver
    for name, fn in _NEMO_RL_RESOLVERS.items():
        if not omegaconf.OmegaConf.has_resolver(name):
            register(name, fn)


def needs_resolution(setting: Setting) -> bool:
    return _has_interpolation(setting.value)


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, list):
        return any(_has_interpolation(v) for v in value)
    return False


@contextlib.contextmanager
def _job_environment(variables: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` as the job will see it while OmegaConf resolves: ``${oc.env:X}`` reads the launch
    environment (the files' exports and ``--env``), not the shell the checker happens to run in."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def resolve(tree: trees.Tree, wanted: Iterable[KeyPath], environment: Mapping[str, str] | None = None) -> trees.Tree:
    """Return ``tree`` with the interpolated leaves among ``wanted`` replaced by their values.

    ``environment``: the job's launch environment, which ``${oc.env:...}`` reads (nothing else is visible).
    """
    return Resolver(tree, environment).resolve(tree, wanted)


class Resolver:
    """Resolves against one config, however many times values are asked of it.

    Building the whole tree into OmegaConf was most of the cost (under cProfile, 35 of the 51 s that checking
    NeMo-RL's examples/configs took: a few hundred nodes a config, to resolve a few dozen values). So the values
    are first evaluated without OmegaConf (Note [Native evaluation]); where that is unsure, OmegaConf gets only
    what the wanted values can reach (Note [Pruned resolution]); the whole tree is built, once, only where neither
    answers. A loader that resolves in two steps (NeMo-RL: the switches, then the sections they select) asks one
    Resolver twice. A leaf already replaced by its value resolves to the same value in the original.
    """

    def __init__(self, tree: trees.Tree, environment: Mapping[str, str] | None = None) -> None:
        self.tree = tree
        self.environment = environment or {}
        self._plain: dict[str, Any] | None = None
        self._full: Any = None  # the whole tree in OmegaConf, once built
        self._in_subset: bool | None = None
        self._parses: bool | None = None

    def resolve(self, tree: trees.Tree, wanted: Iterable[KeyPath]) -> trees.Tree:
        """``tree`` (this config, or it with some leaves resolved) with the interpolated ``wanted`` leaves resolved."""
        todo = [keys for keys in wanted if isinstance(s := trees.get(tree, keys), Setting) and needs_resolution(s)]
        if not todo:
            return tree
        _bounded(tree, todo)
        if self._full is None and self._whole_tree_in_subset():
            values = _Evaluator(self.plain(), self.environment).values(todo)
            if values is not None:
                return _put(tree, todo, values)
        first = trees.get(tree, todo[0])
        omegaconf = _omegaconf(first)
        if self._full is None:
            pruned = _pruned(self.tree, todo)
            if pruned is not None and self._whole_tree_parses(omegaconf):
                try:
                    return _resolved(tree, todo, omegaconf, _create(omegaconf, first, pruned), self.environment)
                except InputError:
                    pass  # a real error, or a reference the pruning missed: the whole tree says which, as upstream
        if self._full is None:
            self._full = _create(omegaconf, first, self.plain())
        return _resolved(tree, todo, omegaconf, self._full, self.environment)

    def plain(self) -> dict[str, Any]:
        if self._plain is None:
            self._plain = trees.plain(self.tree)
        return self._plain

    def _whole_tree_in_subset(self) -> bool:
        if self._in_subset is None:
            self._in_subset = _in_subset(self.plain())
        return self._in_subset

    def _whole_tree_parses(self, omegaconf: Any) -> bool:
        if self._parses is None:
            self._parses = _creatable(omegaconf, self.plain())
        return self._parses


def _omegaconf(first: Setting) -> Any:
    try:
        import omegaconf
    except ImportError:
        raise InputError(first.origin.describe(), f"{first.origin.key} = {first.value!r} needs OmegaConf to "
                         "resolve the interpolation; pip install omegaconf (or the package's [nemo-rl] extra)") \
            from None
    _register_nemo_rl_resolvers(omegaconf)
    return omegaconf


def _create(omegaconf: Any, first: Setting, plain: dict[str, Any]) -> Any:
    try:
        return omegaconf.OmegaConf.create(plain)
    except Exception as err:  # a malformed ${ anywhere in the file makes OmegaConf refuse the whole tree
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(first.origin.describe(), f"OmegaConf cannot read this config to resolve "
                         f"{first.origin.key} = {first.value!r}: {message}") from None


# Note [Pruned resolution]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# OmegaConf gets the wanted leaves and every node their interpolations reference, transitively, each copied whole
# at its own path (so relative references land where they do in the whole tree). What it resolves there is what
# it resolves in the whole tree: a resolution reads only nodes that are present, and a present node is identical.
# That holds only while no resolver can see that a node is absent, so the pruning reads only a strict subset of
# OmegaConf's grammar: references (``${a.b}``, ``${..a}``) and the resolvers NeMo-RL registers plus ``oc.env``,
# whose arguments are plain literals or such interpolations. Anything else (``oc.select``'s default for a missing
# key, quoted or escaped text, ``oc.dict.keys``) makes it build the whole tree. So does anything the whole tree's
# OmegaConf.create would refuse, which is checked first as create checks it: a non-string key, a value that is no
# YAML scalar, list or mapping, a string with ``${`` that OmegaConf's grammar rejects. And when resolving the
# pruned tree fails for any reason, the whole tree is resolved instead, so every error is upstream's own.
# tests/test_interpolation_pruning.py resolves every NeMo-RL example both ways and compares.

_SUBSET_RESOLVERS = frozenset({*_NEMO_RL_RESOLVERS, "oc.env"})
_REFERENCE = re.compile(r"(\.*)([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)}")
_RESOLVER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):")
_LITERAL = re.compile(r" *([A-Za-z0-9_.+-]+) *")


@dataclass(frozen=True)
class _Reference:
    """``${..a.b}``: ``dots`` leading dots (0 for an absolute path), then the keys."""
    dots: int
    keys: tuple[str, ...]

    def target(self, at: KeyPath) -> KeyPath | None:
        """The absolute path it names from the node at ``at``; None above the root."""
        if self.dots > len(at):
            return None
        return (at[:len(at) - self.dots] if self.dots else ()) + self.keys


@dataclass(frozen=True)
class _Call:
    """``${name:arg, ...}``; an argument is an interpolation or a literal's text, surrounding spaces dropped."""
    name: str
    args: tuple[_Reference | _Call | str, ...]


_Part = str | _Reference | _Call  # a str is text between interpolations


@functools.lru_cache(maxsize=65_536)  # NeMo-RL's bases repeat the same few dozen strings in every child
def _parse(text: str) -> tuple[_Part, ...] | None:
    """``text`` as its text and interpolations, or None where it uses more than the subset."""
    if "\\" in text or "'" in text or '"' in text:
        return None
    parts: list[_Part] = []
    done = 0
    i = text.find("${")
    while i >= 0:
        if i > done:
            parts.append(text[done:i])
        read = _interpolation(text, i)
        if read is None:
            return None
        part, done = read
        parts.append(part)
        i = text.find("${", done)
    if done < len(text):
        parts.append(text[done:])
    return tuple(parts)


def _interpolation(text: str, i: int) -> tuple[_Reference | _Call, int] | None:
    """The ``${...}`` at ``text[i]`` and the index after it, or None outside the subset."""
    i += 2
    if reference := _REFERENCE.match(text, i):
        return _Reference(len(reference.group(1)), tuple(reference.group(2).split("."))), reference.end()
    resolver = _RESOLVER.match(text, i)
    if resolver is None or resolver.group(1) not in _SUBSET_RESOLVERS:
        return None
    i = resolver.end()
    args: list[_Reference | _Call | str] = []
    while True:
        while text.startswith(" ", i):
            i += 1
        if text.startswith("${", i):
            read = _interpolation(text, i)
            if read is None:
                return None
            arg, i = read
            args.append(arg)
            while text.startswith(" ", i):
                i += 1
        elif literal := _LITERAL.match(text, i):
            args.append(literal.group(1))
            i = literal.end()
        else:
            return None
        if text.startswith("}", i):
            return _Call(resolver.group(1), tuple(args)), i + 1
        if not text.startswith(",", i):
            return None
        i += 1


def _references(text: str, at: KeyPath) -> list[KeyPath] | None:
    """The absolute key paths ``text`` (the value at ``at``) references, or None where it uses more than the subset."""
    parts = _parse(text)
    if parts is None:
        return None
    found: list[KeyPath] = []
    queue: list[_Part] = list(parts)
    while queue:
        part = queue.pop()
        if isinstance(part, _Call):
            queue += part.args
        elif isinstance(part, _Reference):
            if (target := part.target(at)) is None:
                return None
            found.append(target)
    return found


def _pruned(tree: trees.Tree, todo: list[KeyPath]) -> dict[str, Any] | None:
    """The plain tree OmegaConf needs to resolve ``todo`` (Note [Pruned resolution]), or None for the whole one."""
    out: dict[str, Any] = {}
    seen: set[KeyPath] = set()
    queue = list(todo)
    while queue:
        keys = queue.pop()
        if keys in seen:
            continue
        seen.add(keys)
        node, at = _node(tree, keys)
        if node is None:
            return None  # a missing key: the whole tree gives OmegaConf's own error
        value = trees.plain(node) if isinstance(node, dict) else node.value
        _place(out, at, value)
        for where, text in _strings(value, at):
            references = _references(text, where)
            if references is None:
                return None
            queue += references
    return out


def _node(tree: trees.Tree, keys: KeyPath) -> tuple[Any, KeyPath]:
    """The node at ``keys`` and its path; a leaf met on the way (a list, or an interpolation OmegaConf follows)
    stands for the rest of the path, since everything below it is inside it."""
    node: Any = tree
    for depth, key in enumerate(keys):
        if not isinstance(node, dict):
            return node, keys[:depth]
        if key not in node:
            return None, keys
        node = node[key]
    return node, keys


def _place(out: dict[str, Any], keys: KeyPath, value: Any) -> None:
    for key in keys[:-1]:
        below = out.get(key)
        if not isinstance(below, dict):
            below = out[key] = {}
        out = below
    out[keys[-1]] = value


def _strings(value: Any, at: KeyPath) -> Iterator[tuple[KeyPath, str]]:
    """Every string holding ``${`` inside a plain value, with the path of the node that holds it."""
    if isinstance(value, str):
        if "${" in value:
            yield at, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, at + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, at + (index,))




def _creatable(omegaconf: Any, value: Any) -> bool:
    """Whether OmegaConf.create would take this plain tree: the checks it makes of each key and value
    (omegaconf 2.3 ``_utils.get_value_kind(value, strict_interpolation_validation=True)`` on every string)."""
    return _each_value(value, lambda text: _grammar_accepts(omegaconf, text))


@functools.lru_cache(maxsize=65_536)  # OmegaConf's grammar check of one string, which NeMo-RL's bases repeat
def _grammar_accepts(omegaconf: Any, text: str) -> bool:
    try:
        omegaconf._utils.get_value_kind(text, strict_interpolation_validation=True)
    except Exception:  # the grammar's errors; create raises the same on the whole tree
        return False
    return True


def _each_value(value: Any, accepts: Callable[[str], bool]) -> bool:
    """Whether every key of this plain tree is a string, every value one OmegaConf.create takes, and ``accepts``
    every string holding ``${``."""
    if isinstance(value, dict):
        return all(isinstance(key, str) and _each_value(item, accepts) for key, item in value.items())
    if isinstance(value, list):
        return all(_each_value(item, accepts) for item in value)
    if isinstance(value, str):
        return "${" not in value or accepts(value)
    return value is None or isinstance(value, (bool, int, float))


def _resolved(tree: trees.Tree, todo: list[KeyPath], omegaconf: Any, config: Any,
              environment: Mapping[str, str]) -> trees.Tree:
    values = []
    with _job_environment(environment):  # once: swapping os.environ per value cost half of each
        for keys in todo:
            setting = trees.get(tree, keys)
            try:
                node = omegaconf.OmegaConf.select(config, ".".join(map(str, keys)), throw_on_missing=True)
                value = omegaconf.OmegaConf.to_container(node, resolve=True) \
                    if omegaconf.OmegaConf.is_config(node) else node
            except Exception as err:  # OmegaConf raises many types; all mean "cannot resolve"
                message = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise InputError(setting.origin.describe(), f"cannot resolve {setting.origin.key} = "
                                 f"{setting.value!r}: {message}") from None
            values.append(value)
    return _put(tree, todo, values)


def _put(tree: trees.Tree, todo: list[KeyPath], values: list[Any]) -> trees.Tree:
    for keys, value in zip(todo, values, strict=True):
        setting = trees.get(tree, keys)
        tree = trees.put(tree, keys, Setting(value, replace(setting.origin, note=f"interpolated from {setting.value}")))
    return tree


# Note [Native evaluation]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# Even on a pruned tree, OmegaConf's create, parse and select were most of what checking NeMo-RL's examples cost
# (about 1 of the 2.2 s its loader took over them). Every interpolation those examples interpolate is in the
# subset the pruning reads (references and NeMo-RL's resolvers on int literals), so the checker evaluates that
# subset itself, as omegaconf 2.3 does on a tree of plain nodes:
# - a string that is one interpolation is its value, typed (a mapping or list comes back resolved, like
#   ``to_container(resolve=True)``); text around interpolations joins ``str()`` of each (grammar_visitor.py
#   ``visitText``, ``_unescape``);
# - a literal argument, spaces around it dropped, is an int, a bool, null or a plain name (``_createPrimitive``);
# - ``oc.env`` is the variable, else its default through ``str()`` (None stays None) (resolvers/oc/__init__.py
#   ``env``); add, mul, div and max are NeMo-RL's lambdas above.
# Everything else raises _Unsure and goes to OmegaConf: another literal (a float, a dashed name, an empty
# argument), a missing key or ``???``, a cycle, a path through an interpolated node or a list index not written as
# plain digits, a result that is not a plain value, any exception from a resolver. So every error message is still
# OmegaConf's. It runs only where every ``${`` in the whole tree parses in the subset (which OmegaConf's grammar
# accepts) and every key and value is one OmegaConf.create takes, so the whole tree's create, which upstream runs
# first, could not have failed.
# tests/test_interpolation_pruning.py compares it with OmegaConf on the whole tree: named cases, generated
# configs, generated strings, every NeMo-RL example.


class _Unsure(Exception):
    """Outside what the native evaluation answers for certain: OmegaConf decides."""


_INT = re.compile(r"[+-]?(?:0|[1-9][0-9]*)")
_INDEX = re.compile(r"0|[1-9][0-9]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_NAMES = frozenset({"true", "false", "null", "inf", "nan"})  # OmegaConf reads these as bool, null, float
_PLAIN = (type(None), bool, int, float, str)


def _in_subset(value: Any) -> bool:
    """Whether OmegaConf.create takes this plain tree and every interpolation in it is in the native subset."""
    return _each_value(value, lambda text: _parse(text) is not None)


def _index(key: str | int) -> int | None:
    """A list index: a position on a node's own path, or a reference's key written as digits."""
    if isinstance(key, int):
        return key
    return int(key) if _INDEX.fullmatch(key) else None


class _Evaluator:
    def __init__(self, plain: dict[str, Any], environment: Mapping[str, str]) -> None:
        self.plain = plain
        self.environment = environment

    def values(self, todo: list[KeyPath]) -> list[Any] | None:
        try:
            return [self._value(keys, frozenset()) for keys in todo]
        except _Unsure:
            return None

    def _value(self, keys: KeyPath, resolving: frozenset[KeyPath]) -> Any:
        node: Any = self.plain
        for key in keys:
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and (index := _index(key)) is not None and index < len(node):
                node = node[index]
            else:
                raise _Unsure  # missing, or below an interpolation (OmegaConf would follow it)
        return self._resolved(node, keys, resolving)

    def _resolved(self, node: Any, at: KeyPath, resolving: frozenset[KeyPath]) -> Any:
        if isinstance(node, dict):
            return {key: self._resolved(item, at + (key,), resolving) for key, item in node.items()}
        if isinstance(node, list):
            return [self._resolved(item, at + (index,), resolving) for index, item in enumerate(node)]
        if not isinstance(node, str) or "${" not in node:
            if node == "???":
                raise _Unsure  # OmegaConf's missing value
            return node
        parts = _parse(node)
        if parts is None or at in resolving:
            raise _Unsure  # outside the subset, or a cycle
        resolving |= {at}
        if len(parts) == 1 and not isinstance(parts[0], str):
            return self._interpolated(parts[0], at, resolving)
        texts = []
        for part in parts:
            value = part if isinstance(part, str) else self._interpolated(part, at, resolving)
            if not isinstance(value, _PLAIN):
                raise _Unsure
            texts.append(str(value))
        return "".join(texts)

    def _interpolated(self, part: _Reference | _Call, at: KeyPath, resolving: frozenset[KeyPath]) -> Any:
        if isinstance(part, _Reference):
            if (target := part.target(at)) is None:
                raise _Unsure
            return self._value(target, resolving)
        args = [self._literal(arg) if isinstance(arg, str) else self._interpolated(arg, at, resolving)
                for arg in part.args]
        if not all(isinstance(arg, _PLAIN) for arg in args):
            raise _Unsure
        if part.name == "oc.env":
            if not args or len(args) > 2 or not isinstance(args[0], str):
                raise _Unsure
            if args[0] in self.environment:
                return self.environment[args[0]]
            if len(args) == 1:
                raise _Unsure  # OmegaConf's "Environment variable ... not found"
            return None if args[1] is None else str(args[1])
        if len(args) != 2:
            raise _Unsure
        try:
            value = _NEMO_RL_RESOLVERS[part.name](*args)
        except Exception:  # whatever the lambda raises, OmegaConf reports it its own way
            raise _Unsure from None
        if not isinstance(value, _PLAIN):
            raise _Unsure
        return value

    @staticmethod
    def _literal(text: str) -> Any:
        if _INT.fullmatch(text):
            return int(text)
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered == "null":
            return None
        if _NAME.fullmatch(text) and lowered not in _NOT_NAMES:
            return text
        raise _Unsure


# OmegaConf resolves about one interpolation a millisecond and lexes about 300 KB a second: the values to resolve
# are bounded far above real configs' (a NeMo-RL example has a few dozen, each a few dozen characters).
MAX_INTERPOLATIONS = 500
MAX_INTERPOLATED_CHARS = 100_000


def _bounded(tree: trees.Tree, todo: list[KeyPath]) -> None:
    count = chars = 0
    for keys in todo:
        setting = trees.get(tree, keys)
        texts = [setting.value] if isinstance(setting.value, str) else [v for v in setting.value if isinstance(v, str)]
        count += sum(text.count("${") for text in texts)
        chars += sum(len(text) for text in texts)
        if count > MAX_INTERPOLATIONS or chars > MAX_INTERPOLATED_CHARS:
            raise InputError(setting.origin.describe(), f"{setting.origin.key}: past the {MAX_INTERPOLATIONS} ${{...}} "
                             f"interpolations (and {MAX_INTERPOLATED_CHARS:,} characters of values holding them) the "
                             "checker resolves; no real config comes near it")
