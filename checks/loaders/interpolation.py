"""Resolve ``${...}`` interpolations with OmegaConf, only for the values the checker reads.

NeMo-RL and Bridge resolve interpolations with OmegaConf; re-implementing its
grammar would drift, so OmegaConf itself does it here. It is imported only
when a value the checker needs contains ``${``, keeping the common path free
of it (``pip install omegaconf`` or the ``nemo-rl`` extra provides it).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from checks.config import Setting
from checks.errors import InputError
from checks.loaders import tree as trees
from checks.yamlio import KeyPath


def _register_nemo_rl_resolvers(omegaconf: Any) -> None:
    # The four resolvers NeMo-RL registers (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:196-204).
    # OmegaConf 2.4 renamed register_new_resolver to register_resolver, the name 2.0-2.3 used for the old
    # string-argument API; the 2.4 spelling of the old name warns on every use.
    major_minor = tuple(int(p) for p in omegaconf.__version__.split(".")[:2])
    register = omegaconf.OmegaConf.register_resolver if major_minor >= (2, 4) else \
        omegaconf.OmegaConf.register_new_resolver
    for name, fn in (("add", lambda a, b: a + b), ("mul", lambda a, b: a * b),
                     ("div", lambda a, b: a / b), ("max", lambda a, b: max(a, b))):
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
    NeMo-RL's examples/configs took: a few hundred nodes a config, to resolve a few dozen values). So OmegaConf
    first gets only what the wanted values can reach (Note [Pruned resolution]); the whole tree is built, once,
    only where that cannot answer. A loader that resolves in two steps (NeMo-RL: the switches, then the sections
    they select) asks one Resolver twice. A leaf already replaced by its value resolves to the same value in the
    original.
    """

    def __init__(self, tree: trees.Tree, environment: Mapping[str, str] | None = None) -> None:
        self.tree = tree
        self.environment = environment or {}
        self._full: Any = None  # the whole tree in OmegaConf, once built
        self._parses: bool | None = None

    def resolve(self, tree: trees.Tree, wanted: Iterable[KeyPath]) -> trees.Tree:
        """``tree`` (this config, or it with some leaves resolved) with the interpolated ``wanted`` leaves resolved."""
        todo = [keys for keys in wanted if isinstance(s := trees.get(tree, keys), Setting) and needs_resolution(s)]
        if not todo:
            return tree
        _bounded(tree, todo)
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
            self._full = _create(omegaconf, first, trees.plain(self.tree))
        return _resolved(tree, todo, omegaconf, self._full, self.environment)

    def _whole_tree_parses(self, omegaconf: Any) -> bool:
        if self._parses is None:
            self._parses = _creatable(omegaconf, trees.plain(self.tree))
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

_SUBSET_RESOLVERS = frozenset({"add", "mul", "div", "max", "oc.env"})
_REFERENCE = re.compile(r"(\.*)([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)}")
_RESOLVER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):")
_LITERAL = re.compile(r" *[A-Za-z0-9_.+-]+ *")


def _references(text: str, at: KeyPath) -> list[KeyPath] | None:
    """The absolute key paths ``text`` (the value at ``at``) references, or None where it uses more than the subset."""
    if "\\" in text or "'" in text or '"' in text:
        return None
    found: list[KeyPath] = []
    i = text.find("${")
    while i >= 0:
        i = _interpolation(text, i, at, found)
        if i < 0:
            return None
        i = text.find("${", i)
    return found


def _interpolation(text: str, i: int, at: KeyPath, found: list[KeyPath]) -> int:
    """Read the ``${...}`` at ``text[i]``, adding its references to ``found``; the index after it, or -1."""
    i += 2
    if reference := _REFERENCE.match(text, i):
        dots, keys = len(reference.group(1)), tuple(reference.group(2).split("."))
        if dots > len(at):
            return -1
        found.append((at[:len(at) - dots] if dots else ()) + keys)
        return reference.end()
    resolver = _RESOLVER.match(text, i)
    if resolver is None or resolver.group(1) not in _SUBSET_RESOLVERS:
        return -1
    i = resolver.end()
    while True:
        while text.startswith(" ", i):
            i += 1
        if text.startswith("${", i):
            i = _interpolation(text, i, at, found)
            if i < 0:
                return -1
            while text.startswith(" ", i):
                i += 1
        elif literal := _LITERAL.match(text, i):
            i = literal.end()
        else:
            return -1
        if text.startswith("}", i):
            return i + 1
        if not text.startswith(",", i):
            return -1
        i += 1


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


_PARSES: dict[str, bool] = {}  # OmegaConf's grammar check of one string, which NeMo-RL's bases repeat in every child
MAX_PARSES = 65_536


def _creatable(omegaconf: Any, value: Any) -> bool:
    """Whether OmegaConf.create would take this plain tree: the checks it makes of each key and value
    (omegaconf 2.3 ``_utils.get_value_kind(value, strict_interpolation_validation=True)`` on every string)."""
    if isinstance(value, dict):
        return all(isinstance(key, str) and _creatable(omegaconf, item) for key, item in value.items())
    if isinstance(value, list):
        return all(_creatable(omegaconf, item) for item in value)
    if isinstance(value, str):
        if "${" not in value:
            return True
        if value not in _PARSES:
            if len(_PARSES) >= MAX_PARSES:
                _PARSES.clear()
            try:
                omegaconf._utils.get_value_kind(value, strict_interpolation_validation=True)
                _PARSES[value] = True
            except Exception:  # the grammar's errors; create raises the same on the whole tree
                _PARSES[value] = False
        return _PARSES[value]
    return value is None or isinstance(value, (bool, int, float))


def _resolved(tree: trees.Tree, todo: list[KeyPath], omegaconf: Any, config: Any,
              environment: Mapping[str, str]) -> trees.Tree:
    resolved = []
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
            resolved.append((keys, Setting(value, replace(setting.origin, note=f"interpolated from {setting.value}"))))
    for keys, setting in resolved:
        tree = trees.put(tree, keys, setting)
    return tree


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
