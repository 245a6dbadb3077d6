"""Read a YAML config file as OmegaConf does, keeping the line of every key.

Bridge and NeMo-RL load YAML through OmegaConf, whose loader differs from
``yaml.safe_load`` in three ways that change values: floats such as ``1e-5``
are floats (YAML 1.1 reads them as strings), timestamps stay strings, and a
duplicated key is an error (omegaconf 2.4 ``_yaml.py``). This module applies
the same rules with PyYAML alone and refuses hostile input (alias bombs,
recursive aliases, huge or binary files) with an :class:`InputError`.

Megatron-LM's functional-test runner reads its YAML with yq instead, which keeps a duplicated key (both
entries reach ``to_entries``). ``load_yaml(..., duplicates="record")`` serves that reader: the last value
wins in ``data``, every duplicate is listed in ``YamlDoc.duplicates``, and ``YamlDoc.root`` keeps the
composed node graph, whose scalars hold their text as written (what yq prints).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from checks.errors import InputError

MAX_FILE_BYTES = 4 * 1024 * 1024  # a full Bridge run_config.yaml is ~30 KiB
MAX_EXPANDED_NODES = 100_000  # after alias and merge-key expansion; the largest real config has ~3,000
MAX_DEPTH = 64  # nesting of mappings and lists; real configs nest under 10

KeyPath = tuple[Any, ...]

_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """SafeLoader with OmegaConf's implicit float rule and no timestamps."""


_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}


@dataclass(frozen=True)
class DuplicateKey:
    """A key given again in the same mapping: where it was first, and where again (1-based lines)."""

    keys: KeyPath
    first_line: int
    line: int


@dataclass(frozen=True)
class YamlDoc:
    """A parsed YAML mapping and the 1-based line of each key, by key path."""

    path: str
    data: dict[str, Any]
    lines: dict[KeyPath, int]
    duplicates: tuple[DuplicateKey, ...] = ()  # only with duplicates="record"
    root: Any = None  # the composed yaml.Node, only with duplicates="record"

    def line(self, keys: KeyPath) -> int | None:
        return self.lines.get(tuple(keys))


STDIN_NAMES = frozenset({"-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"})
_READ: dict[str, str] = {}  # what standard input held: a pipe can be read once, and every reader needs it


def read_text(path: str) -> str:
    """Read a config file as UTF-8 text, or raise InputError saying why not.

    Standard input (``-``, ``/dev/stdin``) is read once, up to the size limit, and kept: flavor detection and the
    loader both read it. Other files that are not regular files (FIFOs, devices) are refused: reading them may
    never end.
    """
    if path in STDIN_NAMES:
        if path not in _READ:
            import sys

            _READ[path] = _decoded(path, _bounded(path, sys.stdin.buffer.read))
        return _READ[path]
    file = Path(path)
    if not file.exists():
        raise InputError(path, "no such file")
    if file.is_dir():
        raise InputError(path, "is a directory; give a config file")
    try:
        if not file.is_file():
            raise InputError(path, "not a regular file (a FIFO or a device); give a file, or pipe it to - (stdin)")
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(path, f"file is {size / 2**20:.1f} MiB; configs larger than "
                                   f"{MAX_FILE_BYTES // 2**20} MiB are refused")
        raw = file.read_bytes()
    except OSError as err:
        raise InputError(path, f"cannot read: {err.strerror or err}") from None
    return _decoded(path, raw)


def _bounded(path: str, read: Any) -> bytes:
    raw: bytes = read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(path, f"more than {MAX_FILE_BYTES // 2**20} MiB on standard input; configs larger than "
                               "that are refused")
    return raw


def _decoded(path: str, raw: bytes) -> str:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise InputError(path, f"not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})",
                         line) from None
    if "\x00" in text:
        raise InputError(path, "contains NUL bytes; not a text config", text[: text.index("\x00")].count("\n") + 1)
    return text


def load_yaml(path: str, text: str | None = None, *, duplicates: str = "refuse") -> YamlDoc:
    """Parse ``path`` (or ``text``) into a mapping with key lines; raise InputError on bad input.

    ``duplicates``: ``"refuse"`` (OmegaConf's rule: an InputError naming both lines) or ``"record"`` (yq's
    reading: the last value wins, each duplicate is in ``YamlDoc.duplicates``, the node graph in ``root``).
    """
    if duplicates not in ("refuse", "record"):
        raise ValueError(duplicates)
    if text is None:
        text = read_text(path)
    if duplicates == "record":
        return _parsed(path, text, record=True)
    return _PARSED.get(path, text)


class _Parsed:
    """Every file parsed in this process, by path and text: one `check` reads a file several times (to tell what
    it is, to load it, and NeMo-RL's `defaults:` bases once for each config that inherits them: 1,369 parses for
    NeMo-RL's 293 example configs, 330 distinct). Shared safely because its readers never change a YamlDoc
    (trees.from_doc copies the mappings it builds on)."""

    MAX_CHARS = 64 * 1024 * 1024  # held before it starts over: 16 files of the largest size read

    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], YamlDoc] = {}
        self.chars = 0

    def get(self, path: str, text: str) -> YamlDoc:
        if (doc := self.docs.get((path, text))) is None:
            doc = _parsed(path, text, record=False)  # an error is raised again each time: it is not kept
            if self.chars + len(text) > self.MAX_CHARS:
                self.docs.clear()
                self.chars = 0
            self.docs[path, text] = doc
            self.chars += len(text)
        return doc


_PARSED = _Parsed()


def _parsed(path: str, text: str, record: bool) -> YamlDoc:
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise InputError(path, "empty config (no keys)")
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = " ".join(p for p in (err.context, err.problem) if p) or "invalid YAML"
        raise InputError(path, f"invalid YAML: {problem}", mark.line + 1 if mark else None) from None
    except yaml.reader.ReaderError as err:
        line = text[: err.position].count("\n") + 1 if isinstance(err.position, int) else None
        what = f" (character #x{err.character:04x})" if isinstance(err.character, int) else ""
        raise InputError(path, f"invalid YAML: {err.reason}{what}", line) from None
    except yaml.YAMLError as err:
        raise InputError(path, f"invalid YAML: {err}") from None
    except RecursionError:  # PyYAML composes recursively
        raise InputError(path, f"YAML nested deeper than {MAX_DEPTH} levels is refused") from None
    if node is None:
        raise InputError(path, "empty config (no keys)")
    builder = _Builder(path, loader, record=record)
    data = builder.build(node, ())
    if not isinstance(data, dict):
        raise InputError(path, f"the top level is a {type(data).__name__}, not a mapping of keys",
                         node.start_mark.line + 1)
    if record:
        return YamlDoc(path, data, builder.lines, tuple(builder.duplicates), node)
    return YamlDoc(path, data, builder.lines)


class _Builder:
    """Turn a composed node graph into Python values, recording key lines."""

    def __init__(self, path: str, loader: Any, record: bool = False) -> None:
        self.path = path
        self.loader = loader
        self.record = record
        self.duplicates: list[DuplicateKey] = []
        self.lines: dict[KeyPath, int] = {}
        self.expanded = 0
        self.active: set[int] = set()
        self.merging: set[int] = set()  # mappings whose merge keys are being expanded

    def build(self, node: yaml.Node, keys: KeyPath) -> Any:
        if len(keys) > MAX_DEPTH:
            raise InputError(self.path, f"YAML nested deeper than {MAX_DEPTH} levels is refused",
                             node.start_mark.line + 1)
        self.expanded += 1
        if self.expanded > MAX_EXPANDED_NODES:
            raise InputError(self.path, f"YAML aliases expand to more than {MAX_EXPANDED_NODES:,} nodes "
                                        "(an alias bomb?); refusing to expand", node.start_mark.line + 1)
        if id(node) in self.active:
            raise InputError(self.path, "recursive YAML alias", node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                return [self.build(child, keys + (i,)) for i, child in enumerate(node.value)]
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, keys)
        finally:
            self.active.discard(id(node))
        raise InputError(self.path, f"unsupported YAML node {node.tag}", node.start_mark.line + 1)

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as err:
            raise InputError(self.path, f"invalid YAML value: {getattr(err, 'problem', err)}",
                             node.start_mark.line + 1) from None
        except (ValueError, TypeError, OverflowError, KeyError, IndexError, AttributeError) as err:
            # `!!float abc`, an int of over 4,300 digits; PyYAML's constructors raise KeyError for `!!bool 2`,
            # IndexError for `!!int ''` and AttributeError for `!!timestamp x`
            why = str(err).splitlines()[0][:120] if isinstance(err, (ValueError, TypeError, OverflowError)) and \
                str(err) else f"not a valid {node.tag.rsplit(':', 1)[-1]}"
            raise InputError(self.path, f"invalid YAML value {node.value[:40]!r}"
                             f"{f' ({node.tag})' if node.tag.startswith('tag:yaml.org') else ''}: {why}",
                             node.start_mark.line + 1) from None

    def _mapping(self, node: yaml.MappingNode, keys: KeyPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in self._pairs(node):
            if not isinstance(key_node, yaml.ScalarNode):
                raise InputError(self.path, "a mapping key must be a plain scalar", key_node.start_mark.line + 1)
            key = self._scalar(key_node)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise InputError(self.path, f"unsupported mapping key {key!r}", key_node.start_mark.line + 1)
            name = str(key).lower() if isinstance(key, bool) else str(key)
            line = key_node.start_mark.line + 1
            if name in first_line:
                if not self.record:
                    raise InputError(self.path, f"duplicate key {name!r} (first at line {first_line[name]}); "
                                                "OmegaConf refuses duplicate keys", line)
                self.duplicates.append(DuplicateKey(keys + (name,), first_line[name], line))
            else:
                first_line[name] = line
            self.lines[keys + (name,)] = line
            out[name] = self.build(value_node, keys + (name,))
        return out

    def _pairs(self, node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
        """Expand YAML merge keys (``<<: *base``); explicit keys win over merged ones."""
        explicit = [(k, v) for k, v in node.value if k.tag != "tag:yaml.org,2002:merge"]
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        for k, v in node.value:
            if k.tag != "tag:yaml.org,2002:merge":
                continue
            sources = v.value if isinstance(v, yaml.SequenceNode) else [v]
            for source in sources:
                if not isinstance(source, yaml.MappingNode):
                    raise InputError(self.path, "a merge key (<<) must name a mapping", source.start_mark.line + 1)
                if id(source) in self.merging:
                    raise InputError(self.path, "a merge key (<<) that merges the mapping into itself",
                                     k.start_mark.line + 1)
                self.merging.add(id(source))
                try:
                    pairs = self._pairs(source)
                finally:
                    self.merging.discard(id(source))
                self.expanded += len(pairs)  # a merge bomb expands like an alias bomb
                if self.expanded > MAX_EXPANDED_NODES:
                    raise InputError(self.path, f"YAML merge keys expand to more than {MAX_EXPANDED_NODES:,} "
                                                "nodes; refusing to expand", k.start_mark.line + 1)
                merged.extend(pairs)
        names = {k.value for k, _ in explicit if isinstance(k, yaml.ScalarNode)}
        seen: set[str] = set()
        kept: list[tuple[yaml.Node, yaml.Node]] = []
        for k, v in merged:
            if isinstance(k, yaml.ScalarNode) and (k.value in names or k.value in seen):
                continue
            if isinstance(k, yaml.ScalarNode):  # a complex key is refused by _mapping, after the merge
                seen.add(k.value)
            kept.append((k, v))
        return kept + explicit
