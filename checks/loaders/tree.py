"""Nested key trees whose leaves remember where they came from.

Loaders read files into a :data:`Tree` in the input's own key spelling, merge
files the way OmegaConf does (mappings merge key by key, anything else is
replaced), apply ``--set`` overrides (:mod:`checks.loaders.apply`), and only
then map keys to canonical megatron-core paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from checks.config import Origin, Setting
from checks.errors import InputError
from checks.yamlio import KeyPath, YamlDoc

Tree = dict[str, Any]  # values: Tree (a mapping) or Setting (a leaf)

# Turns special mappings into leaf values (Bridge's {_target_: torch.bfloat16, _call_: false});
# returns NOT_SPECIAL to keep a mapping as a subtree.
Decoder = Callable[[dict[str, Any]], Any]
NOT_SPECIAL = object()


def from_doc(doc: YamlDoc, decode: Decoder | None = None) -> Tree:
    """Build a tree from a parsed YAML file; every leaf carries file, line and key."""

    def build(data: dict[str, Any], keys: KeyPath) -> Tree:
        out: Tree = {}
        for name, value in data.items():
            path = keys + (name,)
            if isinstance(value, dict):
                special = decode(value) if decode else NOT_SPECIAL
                if special is NOT_SPECIAL:
                    out[name] = build(value, path)
                    continue
                value = special
            elif isinstance(value, list) and decode:
                value = [_decoded(decode, item) for item in value]
            out[name] = Setting(value, Origin(doc.path, doc.line(path), key=".".join(map(str, path))))
        return out

    return build(doc.data, ())


def _decoded(decode: Decoder, item: Any) -> Any:
    if isinstance(item, dict):
        special = decode(item)
        return item if special is NOT_SPECIAL else special
    return item


def merge(base: Tree, top: Tree) -> Tree:
    """OmegaConf.merge semantics: mappings merge recursively, values and lists replace, a ``???`` in ``top``
    keeps what ``base`` has, and a list meeting a mapping is OmegaConf's "Cannot merge DictConfig with
    ListConfig" (omegaconf 2.3 ``BaseContainer._map_merge`` / ``_merge_with``)."""
    out = dict(base)
    for name, value in top.items():
        below = out.get(name)
        if isinstance(value, dict) and isinstance(below, dict):
            out[name] = merge(below, value)
        elif (_is_list(value) and isinstance(below, dict)) or (isinstance(value, dict) and _is_list(below)):
            where = value if isinstance(value, Setting) else next((s for _, s in leaves(value)), None)
            origin = where.origin if where is not None else Origin()
            raise InputError(origin.describe(), f"'{origin.key or name}' is a list in one file and a mapping in "
                             "another; OmegaConf cannot merge them (\"Cannot merge DictConfig with ListConfig\"), "
                             "so the framework fails loading the config")
        elif isinstance(value, Setting) and value.value == "???" and name in out:
            continue
        else:
            out[name] = value
    return out


def _is_list(node: Any) -> bool:
    return isinstance(node, Setting) and isinstance(node.value, list)


def get(tree: Tree, keys: KeyPath) -> Any:
    """The subtree or Setting at ``keys``, or None."""
    node: Any = tree
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def leaves(tree: Tree, keys: KeyPath = ()) -> Iterator[tuple[KeyPath, Setting]]:
    for name, value in tree.items():
        if isinstance(value, dict):
            yield from leaves(value, keys + (name,))
        else:
            yield keys + (name,), value


def plain(tree: Tree) -> dict[str, Any]:
    """The tree as plain values (for OmegaConf interpolation)."""
    return {k: plain(v) if isinstance(v, dict) else v.value for k, v in tree.items()}


def put(tree: Tree, keys: KeyPath, node: Any) -> Tree:
    """Return ``tree`` with ``node`` (a Setting or a subtree) at ``keys``; missing or leaf parents become mappings."""
    out = dict(tree)
    if len(keys) == 1:
        out[keys[0]] = node
    else:
        below = out.get(keys[0])
        out[keys[0]] = put(below if isinstance(below, dict) else {}, keys[1:], node)
    return out


def from_plain(value: Any, origin: Origin, path: KeyPath) -> Any:
    """A plain value as a tree node: mappings become subtrees whose leaves name their own key."""
    if isinstance(value, dict):
        return {str(k): from_plain(v, origin, path + (str(k),)) for k, v in value.items()}
    return Setting(value, replace(origin, key=".".join(map(str, path))) if path and origin.key else origin)
