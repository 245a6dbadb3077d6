"""Nested key trees whose leaves remember where they came from.

Loaders read files into a :data:`Tree` in the input's own key spelling, merge
files the way OmegaConf does (mappings merge key by key, anything else is
replaced), apply ``--set`` overrides, and only then map keys to canonical
megatron-core paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from checks.config import Origin, Setting
from checks.errors import InputError
from checks.yamlio import KeyPath, YamlDoc

if TYPE_CHECKING:
    from checks.loaders.overrides import Override

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
    """OmegaConf.merge semantics: mappings merge recursively, leaves and lists replace."""
    out = dict(base)
    for name, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(name), dict):
            out[name] = merge(out[name], value)
        else:
            out[name] = value
    return out


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


def apply_override(tree: Tree, override: Override, origin: Origin) -> Tree:
    """Return ``tree`` with one parsed Hydra override applied (the tree is not mutated)."""
    keys = tuple(override.key.split("."))
    if override.op == "delete":
        return _deleted(tree, keys)
    value: Any = override.value
    new: Any = _subtree(value, origin) if isinstance(value, dict) else Setting(value, origin)
    return _set(tree, keys, new, origin)


def _subtree(value: dict[str, Any], origin: Origin) -> Tree:
    return {str(k): _subtree(v, origin) if isinstance(v, dict) else Setting(v, origin) for k, v in value.items()}


def _set(tree: Tree, keys: KeyPath, new: Any, origin: Origin) -> Tree:
    out = dict(tree)
    head, rest = keys[0], keys[1:]
    if not rest:
        if isinstance(new, dict) and isinstance(out.get(head), dict):
            out[head] = merge(out[head], new)  # Hydra merges a dict value into a mapping
        else:
            out[head] = new
        return out
    child = out.get(head)
    if isinstance(child, Setting) and child.value is not None:
        raise InputError(origin.arg or "--set", f"{origin.note}: '{head}' is a value "
                         f"({child.value!r}), not a mapping, so '{'.'.join(map(str, keys))}' cannot be set")
    out[head] = _set(child if isinstance(child, dict) else {}, rest, new, origin)
    return out


def _deleted(tree: Tree, keys: KeyPath) -> Tree:
    if keys[0] not in tree:
        return tree
    out = dict(tree)
    if len(keys) == 1:
        del out[keys[0]]
    elif isinstance(out[keys[0]], dict):
        out[keys[0]] = _deleted(out[keys[0]], keys[1:])
    return out


def apply_setting(tree: Tree, keys: KeyPath, setting: Setting) -> Tree:
    """Return ``tree`` with the leaf at ``keys`` replaced by ``setting``."""
    out = dict(tree)
    if len(keys) == 1:
        out[keys[0]] = setting
    else:
        out[keys[0]] = apply_setting(out[keys[0]], keys[1:], setting)
    return out
