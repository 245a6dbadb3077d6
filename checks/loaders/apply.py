"""Apply Hydra command-line overrides to a key tree the way Megatron Bridge and NeMo-RL do.

Both frameworks call ``OmegaConf.set_struct(cfg, True)`` and then Hydra 1.3's
``ConfigLoaderImpl._apply_overrides_to_config`` (NVIDIA-NeMo/Megatron-Bridge@067f987d:
src/megatron/bridge/training/utils/omegaconf_utils.py:180-183, NVIDIA-NeMo/RL@7ea279ab:
nemo_rl/utils/config.py:186-189). Per override, that function (hydra-core 1.3.8,
``hydra/_internal/config_loader_impl.py:336-399``) does:

- ``~key`` / ``~key=value``: ``OmegaConf.select``; None (absent, null or ``???``) is refused, and so
  is a value that differs from the one given; otherwise the key is deleted.
- ``+key=value``: refused when ``select`` finds a non-null value, unless the value is a dict or a
  list; otherwise ``OmegaConf.update(merge=True, force_add=True)``.
- ``++key=value``: ``OmegaConf.update(merge=True, force_add=True)``.
- ``key=value``: ``OmegaConf.update(merge=True)`` under struct mode: a key the config lacks, or a
  dict value with a key the mapping it merges into lacks, is refused.

This module replays that over a :data:`checks.loaders.tree.Tree` (leaves keep their origins) without
importing Hydra or OmegaConf (``${...}`` values are resolved through
:mod:`checks.loaders.interpolation`, which imports OmegaConf only when one is met);
``tests/test_override_semantics.py`` compares it with Hydra. Refusal messages are Hydra's, verbatim.

The tree need not be the whole config: a Bridge override file is merged over a recipe the checker
does not have. A :class:`Base` says what such a config holds where the tree is silent (from the
recipe's dataclass fields). Where that decides the outcome and cannot be known, the override is
applied as if the config allowed it, and the outcome says why it could not be verified.
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from checks.config import Origin, Setting
from checks.loaders.tree import Tree, from_plain
from checks.yamlio import KeyPath

if TYPE_CHECKING:
    from checks.loaders.overrides import Override

__all__ = ["ABSENT", "EXACT", "LIST", "MAP", "NULL", "NULLABLE", "UNKNOWN", "VALUE", "Base", "Config", "Hidden",
           "Outcome"]

# What a base config holds at a key the tree does not set.
ABSENT = "absent"  # no such key
MAP = "map"  # a mapping; its keys are asked for one by one
LIST = "list"  # a list whose items are not known
VALUE = "value"  # a non-null value that is not a container
NULLABLE = "nullable"  # the key exists; its value (null, a value, a container) is not known
NULL = "null"  # the key exists and holds null (a recipe's field it leaves at a null default)
UNKNOWN = "unknown"  # whether the key exists is not known

MISSING = "???"  # OmegaConf's mandatory-missing value: select() reads it as None; a merge does not copy it


@dataclass(frozen=True)
class Hidden:
    """What the base config holds at one key path the tree does not set."""

    kind: str
    reason: str = ""  # for NULLABLE / UNKNOWN: what the checker lacks, for the outcome's note


class Base(Protocol):
    """The part of the config the checker does not have (a recipe), as far as its dataclass fields tell."""

    def hidden(self, keys: KeyPath) -> Hidden:
        """What the base holds at ``keys`` (``()`` is the root, a mapping)."""


class _Exact:
    """The tree is the whole config (NeMo-RL after ``defaults:``, a Bridge ``_target_`` dump)."""

    def hidden(self, keys: KeyPath) -> Hidden:
        return Hidden(MAP) if not keys else Hidden(ABSENT)


EXACT: Base = _Exact()


@dataclass(frozen=True)
class Outcome:
    """One override applied: the new state, or upstream's refusal, or why it could not be verified."""

    config: Config
    refused: str | None = None  # Hydra's message, verbatim; the config is then unchanged
    unverified: str | None = None  # why the checker cannot tell what upstream does (applied unless it says not)


@dataclass(frozen=True)
class Config:
    """A config being overridden: the tree, the base under it, and where the base no longer shows.

    ``cut`` holds key paths at which an override replaced or deleted what was there, so nothing the
    base holds at or below them is part of the config any more.
    """

    tree: Tree
    base: Base = EXACT
    cut: frozenset[KeyPath] = field(default_factory=frozenset)

    def apply(self, override: Override, origin: Origin) -> Outcome:
        """Apply one parsed override (the tree is not mutated)."""
        try:
            return Outcome(_Run(self, override, origin, lenient=False).result())
        except _Refusal as refusal:
            return Outcome(self, refused=refusal.message)
        except _Unverifiable as unknown:
            reason = _RISK[override.op].format(key=override.key) + unknown.reason
        try:
            return Outcome(_Run(self, override, origin, lenient=True).result(), unverified=reason)
        except _Unappliable as stop:
            return Outcome(self, unverified=f"{reason}; {stop.reason}, so the checker leaves it out")
        except _Refusal as refusal:
            said = " ".join(refusal.message.split())
            return Outcome(self, unverified=f"{reason}; applied as if the recipe allowed it, it is refused anyway "
                                             f"(\"{said}\"), so the checker leaves it out")
        except _Unverifiable as again:
            return Outcome(self, unverified=f"{reason}; {again.reason}")


# What each kind of override risks, before the reason the checker cannot tell (Hydra's rules).
_RISK = {
    "set": "a plain override is refused when the config lacks '{key}' (struct mode), and ",
    "add": "'+' is refused when '{key}' already has a non-null value, and ",
    "force_add": "",
    "delete": "'~' is refused when '{key}' is absent or null, or holds another value than the one given, and ",
}


class _Refusal(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Struct(Exception):
    """What OmegaConf raises as ConfigAttributeError / ConfigKeyError: a key struct mode does not allow."""


class _Merge(Exception):
    """Any other OmegaConf error, which Hydra reports as "Error merging override ..."."""


class _Unverifiable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Unresolvable(_Unverifiable):
    """An interpolation the checker cannot resolve: unlike a key it cannot see, resolving it may raise."""


class _Unappliable(Exception):
    """Lenient mode cannot apply the override at all (it writes into a list the checker does not have)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Seq:
    """A list being edited: its items as nodes; written back as one Setting."""

    def __init__(self, setting: Setting) -> None:
        self.original = setting
        self.items: list[Any] = [from_plain(item, setting.origin, ()) for item in setting.value]
        self.origin: Origin | None = None  # set when an override changed it


class _Plain:
    """A value reached through an interpolation or inside a list held as one Setting: read-only data."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _unpacked(node: Any) -> Any:
    if isinstance(node, _Seq):
        if node.origin is None:
            return node.original
        return Setting([_plain(item) for item in node.items], node.origin)
    if isinstance(node, dict):
        return {k: _unpacked(v) for k, v in node.items()}
    return node


def _plain(node: Any) -> Any:
    if isinstance(node, _Seq):
        return [_plain(item) for item in node.items]
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    return node.value


def _reference(value: Any) -> KeyPath | None:
    """The key path of an interpolation that is one plain reference, ``${a.b}``."""
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        inner = value[2:-1]
        if inner and all(part.isidentifier() or part.isdigit() for part in inner.split(".")):
            return tuple(inner.split("."))
    return None


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and "${" in value


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_interpolation(v) for v in value)
    return _is_interpolation(value)


def _is_missing(value: Any) -> bool:
    return isinstance(value, str) and value == MISSING


def _is_index(key: str) -> bool:
    try:
        int(key)
    except ValueError:
        return False
    return True


def _value_of(node: Any) -> Any:
    """The plain value of a concrete node."""
    if isinstance(node, (Setting, _Plain)):
        return node.value
    return _plain(node)


def _is_container(node: Any) -> bool:
    """A DictConfig or ListConfig in OmegaConf's terms (a Hidden MAP/LIST counts)."""
    if isinstance(node, (dict, _Seq)):
        return True
    if isinstance(node, (Setting, _Plain)):
        return isinstance(node.value, (dict, list))
    return isinstance(node, Hidden) and node.kind in (MAP, LIST)


def _is_list(node: Any) -> bool:
    if isinstance(node, _Seq):
        return True
    if isinstance(node, (Setting, _Plain)):
        return isinstance(node.value, list)
    return isinstance(node, Hidden) and node.kind == LIST


def _exists(node: Any) -> bool:
    return node is not None and not (isinstance(node, Hidden) and node.kind == ABSENT)


def _dotted(path: KeyPath) -> str:
    return ".".join(map(str, path))


class _Run:
    """One override applied to a copy of the tree, following Hydra's and OmegaConf's code paths.

    ``lenient``: where the outcome depends on what the base holds and the checker cannot know, take
    the branch that applies the override instead of stopping.
    """

    def __init__(self, config: Config, override: Override, origin: Origin, *, lenient: bool) -> None:
        self.root: dict[str, Any] = copy.copy(config.tree)
        self._mine: set[int] = {id(self.root)}  # containers this run created or copied (safe to change)
        self.base = config.base
        self.cut = set(config.cut)
        self.override = override
        self.origin = origin
        self.lenient = lenient
        self.keys: KeyPath = tuple(override.key.split("."))
        self.touched: list[_Seq] = []  # lists on the way to what this run changed

    def result(self) -> Config:
        op, value, text = self.override.op, self.override.value, self.override.text
        try:
            if op == "delete":
                self._delete()
            elif op == "add":
                if isinstance(value, (dict, list)):  # select() still runs, and may fail; its answer does not matter
                    try:
                        self._select(self.keys)
                    except _Unresolvable:
                        raise
                    except _Unverifiable:
                        pass
                elif self._select(self.keys) is not None:
                    key = self.override.key
                    raise _Refusal(f"Could not append to config. An item is already at '{key}'.\n"
                                   f"Either remove + prefix: '{text[1:]}'\n"
                                   f"Or add a second + to add or override '{key}': '+{text}'\n")
                self._update(force_add=True)
            else:
                self._update(force_add=op == "force_add")
        except _Struct:
            raise _Refusal(f"Could not override '{self.override.key}'.\n"
                           f"To append to your config use +{text}") from None
        except _Merge:
            raise _Refusal(f"Error merging override {text}") from None
        for seq in self.touched:
            seq.origin = self.origin
        return Config({k: _unpacked(v) for k, v in self.root.items()}, self.base, frozenset(self.cut))

    def _unknown(self, reason: str, *, resolving: bool = False) -> None:
        if not self.lenient:
            raise _Unresolvable(reason) if resolving else _Unverifiable(reason)

    # -- reading -----------------------------------------------------------

    def _hidden(self, path: KeyPath) -> Hidden:
        """What the base holds at ``path``, whose parent the tree holds as a mapping lacking the key."""
        if any(path[:i] in self.cut for i in range(1, len(path) + 1)):
            return Hidden(ABSENT)
        above = self.base.hidden(path[:-1])
        if above.kind == MAP:
            return self.base.hidden(path)
        if above.kind in (NULLABLE, UNKNOWN):
            return Hidden(UNKNOWN, above.reason)
        return Hidden(ABSENT)  # the tree's mapping replaced whatever the base had there

    def _child(self, node: Any, path: KeyPath, key: str, based: bool) -> Any:
        """What a container holds at ``key``: a node, a Hidden, or None past the end of a list.

        ``based``: the base can hold keys below ``path`` (not inside a list). Raises TypeError, as
        OmegaConf's _select_one does, for a key that is not an index into a list.
        """
        if isinstance(node, Hidden):  # MAP or LIST
            if node.kind == LIST:
                if not _is_index(key):
                    raise TypeError(f"Index '{key}' (str) is not an int")
                return Hidden(UNKNOWN, f"the checker does not have the items of '{_dotted(path)}'")
            return self._hidden(path + (key,))
        items: Any = node.items if isinstance(node, _Seq) else node.value if isinstance(node, (Setting, _Plain)) \
            else node
        if isinstance(items, list):
            if not _is_index(key):
                raise TypeError(f"Index '{key}' (str) is not an int")
            index = int(key)
            if not 0 <= index < len(items):
                return None
            item = items[index]
            return item if isinstance(node, _Seq) else _Plain(item)
        if isinstance(node, (Setting, _Plain)):  # a mapping held as one value
            return _Plain(items[key]) if key in items else None
        if key in items:
            return items[key]
        return self._hidden(path + (key,)) if based else Hidden(ABSENT)

    def _resolve(self, path: KeyPath, leaves: list[KeyPath]) -> tuple[bool, Any]:
        """``(True, value)`` of the node at ``path`` with the interpolations at ``leaves`` resolved as OmegaConf
        resolves them, or ``(False, None)`` when they cannot be (the caller decides what that means)."""
        if importlib.util.find_spec("omegaconf") is None:
            self._unknown(f"'{_dotted(path)}' holds an interpolation, and resolving it needs OmegaConf "
                          "(pip install omegaconf)", resolving=True)
            return False, None
        from checks.errors import InputError
        from checks.loaders import interpolation
        from checks.loaders.tree import get

        snapshot = {k: _unpacked(v) for k, v in self.root.items()}
        try:
            resolved = interpolation.resolve(snapshot, leaves)
        except InputError:
            return False, None
        found = get(resolved, path)
        if found is None:
            return False, None
        return True, _plain(found) if isinstance(found, dict) else found.value

    def _interpolated(self, path: KeyPath, setting: Setting) -> Any:
        """The value of an interpolation as OmegaConf.select returns it (it raises when resolution fails)."""
        ok, value = self._resolve(path, [path])
        if ok:
            return value
        target = _reference(setting.value)
        if target is not None and path[:len(target)] != target:  # a reference to an ancestor is a cycle
            # select() stops at a container it reaches (to_container, which the checker resolves with, goes on)
            from checks.loaders.tree import get

            found = get({k: _unpacked(v) for k, v in self.root.items()}, target)
            if isinstance(found, dict) or (isinstance(found, Setting) and isinstance(found.value, list)):
                return _plain(found) if isinstance(found, dict) else found.value
        if self.base is EXACT:
            raise _Merge()
        self._unknown(f"'{_dotted(path)}' is the interpolation {setting.value!r}, which needs values the checker "
                      "does not have", resolving=True)
        return None

    def _select(self, keys: KeyPath) -> Any:
        """OmegaConf.select(cfg, key, throw_on_missing=False): None for absent, null or ??? (or a value on the
        way); else the node (Setting, subtree, _Plain) or a Hidden of a non-null kind.

        Raises _Merge where OmegaConf raises, _Unverifiable where the answer depends on the base.
        """
        node: Any = self.root
        path: KeyPath = ()
        based = True
        for index, key in enumerate(keys):
            last = index == len(keys) - 1
            try:
                child = self._child(node, path, key, based)
            except TypeError:
                raise _Merge() from None
            based = based and not _is_list(node)
            path += (key,)
            if isinstance(child, Setting) and _is_interpolation(child.value):
                child = _Plain(self._interpolated(path, child))
                based = False
            elif isinstance(child, _Plain) and _is_interpolation(child.value):
                self._unknown(f"'{_dotted(path)}' is an interpolation inside a list", resolving=True)
                return None
            if child is None:
                return None
            if isinstance(child, Hidden):
                if child.kind in (ABSENT, NULL) or (child.kind == VALUE and not last):
                    return None
                if child.kind in (NULLABLE, UNKNOWN) or (child.kind == LIST and not last):
                    self._unknown(child.reason or f"the checker cannot see what '{_dotted(path)}' holds")
                    return None
            else:
                value = _value_of(child)
                if value is None or _is_missing(value):
                    return None
                if not last and not _is_container(child):
                    return None
            node = child
        return node

    # -- deleting ----------------------------------------------------------

    def _delete(self) -> None:
        key, value = self.override.key, self.override.value
        found = self._select(self.keys)
        if found is None:
            if self.lenient:
                self._remove()
                return
            raise _Refusal(f"Could not delete from config. '{key}' does not exist.")
        if value is not None:
            if isinstance(found, Hidden):
                self._unknown(f"the checker cannot see the value of '{key}'")
            else:
                current = _value_of(found)
                same = self._equal(current, value) if isinstance(current, (dict, list)) else value == current
                if not same:
                    raise _Refusal(f"Could not delete from config. The value of '{key}' is {current} and not "
                                   f"{value}.")
        self._remove()

    def _equal(self, current: Any, value: Any) -> bool:
        """``value == DictConfig/ListConfig``: sizes and keys first, then items in order (_dict_conf_eq,
        _list_eq); an item that is an interpolation on either side is compared after resolving it, which
        the checker does not replay."""
        if isinstance(current, dict) != isinstance(value, dict) or isinstance(current, list) != isinstance(
                value, list):
            return False
        if len(current) != len(value):
            return False
        pairs = zip(current, value, strict=True) if isinstance(current, list) else \
            ((current[k], value[k]) if k in value else None for k in current)
        for pair in pairs:
            if pair is None:
                return False
            mine, theirs = pair
            if _is_interpolation(mine) or _is_interpolation(theirs):
                self._unknown(f"the value of '{self.override.key}' is compared item by item after resolving "
                              "interpolations, which the checker does not replay")
                continue
            if isinstance(mine, (dict, list)):
                if not self._equal(mine, theirs):
                    return False
            elif mine != theirs:
                return False
        return True

    def _remove(self) -> None:
        """``del node[last]`` in the mapping OmegaConf.select(parent) returns."""
        node: Any = self.root
        path: KeyPath = ()
        for key in self.keys[:-1]:
            if isinstance(node, _Seq) and _is_index(key) and 0 <= int(key) < len(node.items):
                node = self._writable(node, int(key))
            elif isinstance(node, dict) and key in node:
                node = self._writable(node, key)
            else:
                node = None  # the key is the base's: deleting it hides the base's value
                break
            path += (key,)
            if isinstance(node, Setting):
                if _is_interpolation(node.value):
                    self._unknown(f"'{_dotted(path)}' is an interpolation; the key is deleted from its target")
                    return
                node = None
                break
            if isinstance(node, _Seq):
                self.touched.append(node)
        if isinstance(node, _Seq):
            raise _Refusal("list indices must be integers or slices, not str")
        if isinstance(node, dict):
            node.pop(self.keys[-1], None)
        self.cut.add(self.keys)

    # -- updating ----------------------------------------------------------

    def _writable(self, parent: Any, key: Any) -> Any:
        """The container at ``parent[key]`` as one this run may change (copied, or a list unpacked)."""
        child = parent.items[key] if isinstance(parent, _Seq) else parent[key]
        if isinstance(child, Setting) and isinstance(child.value, list):
            child = _Seq(child)
        elif isinstance(child, Setting) and isinstance(child.value, dict):
            child = from_plain(child.value, child.origin, ())
        elif isinstance(child, dict) and id(child) not in self._mine:
            child = copy.copy(child)
        else:
            return child
        self._put(parent, key, child)
        return child

    def _put(self, parent: Any, key: Any, node: Any, *, cut: KeyPath | None = None) -> None:
        """Set ``parent[key] = node``; ``cut``: the key path, when this replaces what was there."""
        if isinstance(node, (dict, _Seq)):
            self._mine.add(id(node))
        if isinstance(parent, _Seq):
            parent.items[key] = node
        else:
            parent[key] = node
        if cut is not None:
            self.cut.add(cut)

    def _update(self, *, force_add: bool) -> None:
        """OmegaConf.update(cfg, key, value, merge=True, force_add=...) with the config in struct mode."""
        root: Any = self.root
        path: KeyPath = ()
        based = True
        for key in self.keys[:-1]:
            try:
                child = self._child(root, path, key, based)
            except TypeError as err:  # Hydra does not catch it
                raise _Refusal(str(err)) from None
            slot: Any = int(key) if isinstance(root, _Seq) else key
            if isinstance(root, _Seq):
                self.touched.append(root)
            if isinstance(child, Hidden) and child.kind in (NULLABLE, UNKNOWN, LIST):
                if child.kind == LIST:
                    self._unknown(child.reason or f"the checker does not have the items of '{_dotted(path + (key,))}'")
                    raise _Unappliable("it writes into a list the checker does not have")
                self._unknown(child.reason or f"the checker cannot see what '{_dotted(path + (key,))}' holds")
                child = Hidden(MAP)
            if isinstance(child, Hidden) and child.kind == MAP:
                child = {}
                self._put(root, slot, child)
            elif _is_container(child):
                child = self._writable(root, slot)
            elif child is None:  # root[i] = {} past the end of a list
                raise _Merge()
            elif not force_add and isinstance(child, Hidden) and child.kind == ABSENT:
                raise _Struct()
            else:  # a value (or nothing) where a mapping is needed: OmegaConf puts an empty one there
                child = {}
                self._put(root, slot, child, cut=path + (key,))
            based = based and not isinstance(root, _Seq)
            root, path = child, path + (key,)
        self._set_last(root, path, based, force_add)

    def _set_last(self, root: Any, path: KeyPath, based: bool, force_add: bool) -> None:
        last, value = self.keys[-1], self.override.value
        here = path + (last,)
        struct = not force_add
        if isinstance(root, _Seq):
            self.touched.append(root)
            try:
                index = int(last)
            except ValueError as err:  # Hydra does not catch it
                raise _Refusal(str(err)) from None
            if not 0 <= index < len(root.items):
                raise _Merge()
            if isinstance(value, (dict, list)) and _is_container(root.items[index]):
                self._merge(root, index, value, struct=struct, path=here, based=False)
            else:
                self._put(root, index, from_plain(value, self.origin, here))
            return
        child = self._child(root, path, last, based)
        if isinstance(value, (dict, list)):
            if isinstance(child, Hidden) and child.kind in (NULLABLE, UNKNOWN):
                self._unknown(child.reason or f"the checker cannot see what '{_dotted(here)}' holds")
                if isinstance(value, dict):
                    self._put(root, last, {})
                    self._merge(root, last, value, struct=False, path=here, based=based)
                else:
                    self._put(root, last, from_plain(value, self.origin, here))
                return
            if _is_container(child):
                self._merge(root, last, value, struct=struct, path=here, based=based)
                return
        if struct and isinstance(child, Hidden) and child.kind == UNKNOWN:
            self._unknown(child.reason or f"the checker cannot see whether the config has '{_dotted(here)}'")
        elif struct and not _exists(child):
            raise _Struct()
        self._put(root, last, from_plain(value, self.origin, here), cut=here)

    def _merge(self, parent: Any, key: Any, value: dict[Any, Any] | list[Any], *, struct: bool, path: KeyPath,
               based: bool) -> None:
        """``parent[key].merge_with(value)`` (BaseContainer._map_merge / _list_merge) for a container there."""
        existing = parent.items[key] if isinstance(parent, _Seq) else self._child(parent, path[:-1], key, based)
        if _is_list(existing) != isinstance(value, list):
            raise _Merge()  # "Cannot merge DictConfig with ListConfig"
        if isinstance(value, list):  # a list merge replaces the items
            self._put(parent, key, Setting(list(value), replace(self.origin, key=_dotted(path))), cut=path)
            return
        if isinstance(existing, Hidden):
            target: dict[str, Any] = {}
            self._put(parent, key, target)
        else:
            target = self._writable(parent, key)
        for name, item in value.items():
            name = str(name)
            here = path + (name,)
            current = self._child(target, path, name, based)
            if isinstance(current, Setting) and _is_interpolation(current.value):
                ok, resolved = self._resolve(here, [here])
                if (ok and isinstance(resolved, (dict, list))) or (not ok and self.base is not EXACT):
                    # OmegaConf merges into the interpolation's target (a copy of it), when it resolves
                    self._unknown(f"'{_dotted(here)}' is an interpolation, which the merge may follow")
            if isinstance(current, Hidden) and current.kind in (NULLABLE, UNKNOWN):
                self._unknown(current.reason or f"the checker cannot see what '{_dotted(here)}' holds")
                if isinstance(item, dict):
                    self._put(target, name, {})
                    self._merge(target, name, item, struct=False, path=here, based=based)
                else:
                    self._put(target, name, from_plain(item, self.origin, here))
                continue
            if not _exists(current):
                if struct:
                    raise _Struct()
                self._put(target, name, from_plain(item, self.origin, here), cut=here)
            elif _is_container(current) and isinstance(item, (dict, list)):
                self._merge(target, name, item, struct=struct, path=here, based=based)
            elif not _is_missing(item):  # a ??? in the value keeps what is there
                self._put(target, name, from_plain(item, self.origin, here), cut=here)
