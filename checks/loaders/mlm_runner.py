"""A Megatron-LM functional-test YAML, turned into argv the way Megatron-LM's CI runner does it.

``tests/functional_tests/shell_test_utils/_run_training.sh`` (NVIDIA/Megatron-LM@d98e8a64, lines 68-166) runs
``envsubst`` over the file, then for the run's ``KEY`` (``MODEL_ARGS``, or ``MODEL_ARGS_<N>`` for run N of a
checkpoint-resume test when the file has it, line 124) prints one line per entry with mikefarah yq v4.44.1
(docker/Dockerfile.ci.dev:10)::

    explode(.) | ... comments="" | .[env(KEY)] | to_entries | .[]
      | with(select(.value == true); .value = "true") | .key + ": " + (select(.value != "") | .value | tostring)

and builds a string from the lines (lines 134-162): ``true`` -> the bare flag; a value wrapped in ``( )`` or
holding a space, ``|``, ``(`` or ``)`` -> ``key "value"``; a value wrapped in ``[ ]`` -> ``key`` and the value
without its brackets; else ``key value`` (each value first trimmed by ``echo "$value" | xargs``), and ends with
``eval "TRAINING_PARAMS_ARRAY=($TRAINING_PARAMS_FROM_CONFIG)"`` (line 166). This module mirrors each step:

* yq prints a scalar as its text as written (``1e-6``, ``.01``, ``on``, ``True`` stay as they are; no YAML
  1.1 typing); ``true`` is the bare flag, ``false`` and ``null`` are passed as the words ``false`` and
  ``null``, an empty value (``key:``) is the bare flag, an empty string (``''``) drops the entry
  (yq pkg/yqlib/operator_equals.go ``isEquals``: a null is never equal to ``""``, a scalar is compared by its
  text; operator_strings.go ``toStringOperator``: a scalar's text);
* ``explode(.)`` resolves aliases and merge keys as yq does (operator_anchors_aliases.go
  ``reconstructAliasedMap``): merged keys come first, a key given again in the same map replaces the earlier
  value in place; a map *without* a merge key keeps duplicated keys, so the runner passes both;
* ``xargs`` removes quotes and backslashes and squeezes blanks; ``eval`` splits words and removes quotes.
  A ``$`` or backtick expansion, a leading ``~`` (what ``envsubst`` and ``eval`` would substitute from the
  runner's environment) makes the word unresolved; shell syntax (``;``, ``&``, ``<``, ``>``, an unmatched
  quote) is reported as the runner's failure. A glob character (``*``, ``?``, ``[``) is kept as written:
  bash keeps a pattern that matches no file, and a pattern is not expected to match files in the job's
  working directory.

``ENV_VARS`` are exported as ``KEY=<text as yq prints it>`` (lines 76-84). A ``MODEL_ARGS`` whose keys are
not options (``trainer.max_steps``) belongs to a NeMo test, which the runner passes to a NeMo script as
``key=value`` (``IS_NEMO_TEST``, lines 94-118): not Megatron-LM flags, so those are reported as not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import yaml

from checks.config import Duplicate, Origin, Setting
from checks.errors import InputError
from checks.loaders.mlm_argparse import Word
from checks.yamlio import load_yaml

RUNNER = "NVIDIA/Megatron-LM@d98e8a64:tests/functional_tests/shell_test_utils/_run_training.sh"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_RUN_KEY = re.compile(r"^MODEL_ARGS(?:_(\d+))?$")
_ECHO_OPTION = re.compile(r"^-[neE]+$")
_MAX_ENTRIES = 100_000


@dataclass(frozen=True)
class RunnerProblem:
    """A step of the runner that fails or does something the checker cannot follow."""

    message: str
    origin: Origin
    kind: str = "error"  # error: the runner (or the shell it evals) fails; unsupported: the checker cannot tell


@dataclass
class Run:
    """One training run's argv: ``MODEL_ARGS``, or ``MODEL_ARGS_<N>`` for run N."""

    name: str
    words: list[Word] = field(default_factory=list)
    problems: list[RunnerProblem] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    not_read: list[tuple[str, Setting, str]] = field(default_factory=list)  # (key, setting, why)


@dataclass
class FunctionalTest:
    runs: list[Run]
    env: dict[str, Setting]
    env_unresolved: list[tuple[str, Setting]]
    problems: list[RunnerProblem]


@dataclass(frozen=True)
class _Entry:
    key: str
    text: str | None  # as yq prints it; None: dropped by select(.value != "")
    origin: Origin
    node: yaml.Node


def read(path: str, text: str | None = None) -> FunctionalTest:
    """Every run's argv, the exported ENV_VARS, and what the runner would fail on."""
    doc = load_yaml(path, text, duplicates="record")
    root = doc.root
    top = _top_level(root)
    if "MODEL_ARGS" not in top and "ENV_VARS" not in top:  # a Bridge or NeMo-RL YAML read as Megatron-LM's
        raise InputError(path, "not a Megatron-LM functional-test config (no MODEL_ARGS or ENV_VARS); for a "
                               "Bridge or NeMo-RL YAML leave --flavor at auto (or name its flavor)")
    problems: list[RunnerProblem] = []
    names = [name for name in top if _RUN_KEY.match(name)]
    numbered = sorted((n for n in names if n != "MODEL_ARGS"), key=lambda n: int(_RUN_KEY.match(n).group(1)))  # type: ignore[union-attr]
    runs = [_run(path, "MODEL_ARGS", top.get("MODEL_ARGS"))]
    runs += [_run(path, name, top[name]) for name in numbered]
    env, unresolved = _env(path, top.get("ENV_VARS"), problems)
    return FunctionalTest(runs, env, unresolved, problems)


def _top_level(root: yaml.Node) -> dict[str, yaml.Node]:
    """``.[name]`` for each top-level key: a key given twice yields the later value (yq's ordered-map set)."""
    out: dict[str, yaml.Node] = {}
    if isinstance(root, yaml.MappingNode):
        for key, value in root.value:
            if isinstance(key, yaml.ScalarNode):
                out[key.value] = value
    return out


def _origin(path: str, node: yaml.Node, key: str) -> Origin:
    return Origin(path, node.start_mark.line + 1, key=key)


def _run(path: str, name: str, node: yaml.Node | None) -> Run:
    run = Run(name)
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL):
        return run  # to_entries of null yields nothing: no flags
    if not isinstance(node, yaml.MappingNode):
        run.problems.append(RunnerProblem(
            f"{name} is a {_kind(node)}, not a mapping of flags: the runner's yq stops with \"{_kind(node)} has no "
            f"keys\" and the run does not start ({RUNNER}:131)", _origin(path, node, name)))
        return run
    entries = list(_explode(path, node, run))
    keys = [e.key for e in entries]
    if keys and not any(k.startswith("-") for k in keys):
        for entry in entries:
            run.not_read.append((entry.key, Setting(entry.text, entry.origin),
                                 "MODEL_ARGS of a NeMo functional test: the runner passes key=value to a NeMo script "
                                 f"(IS_NEMO_TEST, {RUNNER}:94-118), not Megatron-LM flags; the checker does not "
                                 "read them"))
        return run
    segments: list[tuple[str, Origin]] = []
    for entry in entries:
        if entry.text is None:
            continue
        for line in (entry.key + ": " + entry.text).split("\n"):
            fragment = _line_fragment(line, entry.origin, run)
            if fragment is not None:
                segments.append((fragment, entry.origin))
    run.words = shell_words(segments, run.problems)
    return run


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "!!seq"
    if isinstance(node, yaml.MappingNode):
        return "!!map"
    return "!!" + node.tag.rsplit(":", 1)[-1]


def _explode(path: str, node: yaml.MappingNode, run: Run) -> Iterator[_Entry]:
    """``explode(.) | to_entries | .[]`` with each entry's text as ``select(...) | .value | tostring`` gives it."""
    pairs = _merged_pairs(node) if any(k.tag == _MERGE for k, _ in node.value) else list(node.value)
    if len(pairs) > _MAX_ENTRIES:
        raise InputError(path, f"MODEL_ARGS expands to more than {_MAX_ENTRIES:,} entries; refusing to read it")
    seen: dict[str, _Entry] = {}
    collapsed = _collapsed(node)
    for key_node, value_node in pairs:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _NULL else ""
        origin = _origin(path, key_node, key)
        entry = _Entry(key, _text(value_node, origin, run), origin, value_node)
        if key in seen:
            run.duplicates.append(Duplicate(key, Setting(seen[key].text, seen[key].origin), Setting(entry.text, origin),
                                            f"the runner passes both ({RUNNER}:131, yq keeps duplicated keys)"))
        seen[key] = entry
        yield entry
    for key, first, last in collapsed:
        run.duplicates.append(Duplicate(key, Setting(first[1], _origin(path, first[0], key)),
                                        Setting(last[1], _origin(path, last[0], key)),
                                        "yq's explode(.) keeps only the later one (a map with a merge key)"))


def _collapsed(node: yaml.MappingNode) -> list[tuple[str, tuple[yaml.Node, str], tuple[yaml.Node, str]]]:
    """Keys written twice in a map with a merge key: explode(.) keeps one entry, the later value."""
    if not any(k.tag == _MERGE for k, _ in node.value):
        return []
    out: list[tuple[str, tuple[yaml.Node, str], tuple[yaml.Node, str]]] = []
    first: dict[str, tuple[yaml.Node, str]] = {}
    for key, value in node.value:
        if key.tag == _MERGE or not isinstance(key, yaml.ScalarNode):
            continue
        text = value.value if isinstance(value, yaml.ScalarNode) else "<" + _kind(value) + ">"
        if key.value in first:
            out.append((key.value, first[key.value], (key, text)))
        first.setdefault(key.value, (key, text))
    return out


def _merged_pairs(node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node]]:
    """yq v4.44.1 ``reconstructAliasedMap``: walk the entries in order; a merge key adds the aliased map's
    entries (a list of them, last alias first); an entry whose key is already there replaces that entry's value
    in place; an entry whose key comes again later in this map is left for the later one."""
    content = list(node.value)
    out: list[list[yaml.Node]] = []

    def override(key: yaml.Node, value: yaml.Node, start: int) -> None:
        for pair in out:
            if pair[0].value == key.value:
                pair[1] = value
                return
        for later_key, _ in content[start + 1:]:
            if later_key.tag != _MERGE and later_key.value == key.value:
                return
        out.append([key, value])

    for index, (key, value) in enumerate(content):
        if key.tag != _MERGE:
            override(key, value, index)
            continue
        sources = value.value if isinstance(value, yaml.SequenceNode) else [value]
        for source in reversed(sources):
            if isinstance(source, yaml.MappingNode):
                for merged_key, merged_value in source.value:
                    override(merged_key, merged_value, index)
    return [(k, v) for k, v in out]


def _text(node: yaml.Node, origin: Origin, run: Run) -> str | None:
    """What ``select(.value != "") | .value | tostring`` prints for an entry's value; None when dropped."""
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _NULL:
            return node.value  # "" for `key:`, else "null", "~", ...: a null is never == "", so it is kept
        return node.value if node.value != "" else None
    run.problems.append(RunnerProblem(
        f"{origin.key}: a YAML {'list' if isinstance(node, yaml.SequenceNode) else 'mapping'} as a flag value; the "
        "runner's yq prints it as YAML text, not as separate words. Write it as one string, e.g. "
        f"\"[a b c]\", which the runner splits into words ({RUNNER}:149-152)", origin))
    return None


def _line_fragment(line: str, origin: Origin, run: Run) -> str | None:
    """One printed line as the runner's while-loop appends it to TRAINING_PARAMS_FROM_CONFIG (lines 134-161)."""
    if not line:
        return None  # [[ -n "$line" ]]
    key = line.split(":", 1)[0]  # ${line%%:*}
    value = line.split(": ", 1)[1] if ": " in line else line  # ${line#*: }
    try:
        value = echo_xargs(value)
    except _RunnerFailure as failure:
        run.problems.append(RunnerProblem(f"{origin.key or key}: {failure}", origin, failure.kind))
        return None
    printed = "" if _ECHO_OPTION.match(value) else value  # the `echo "$value" | grep` tests see echo's output
    if value == "true":
        return f"{key} "
    if re.fullmatch(r"\([^)]+\)", printed):
        return f'{key} "{value}" '
    if re.fullmatch(r"\[[^]]+\]", printed):
        return f"{key} {printed[1:-1]} "
    if any(c in value for c in " |()"):
        return f'{key} "{value}" '
    return f"{key} {value} "


class _RunnerFailure(Exception):
    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


def echo_xargs(value: str) -> str:
    """``$(echo "$value" | xargs)``: bash's echo, GNU xargs' quote removal and blank squeezing, /bin/echo."""
    if _ECHO_OPTION.match(value):
        return ""  # bash's echo takes -n/-e/-E as its options and prints no such word
    items: list[str] = []
    item: list[str] = []
    in_item = False
    quote = ""
    i = 0
    while i < len(value):
        ch = value[i]
        if quote:
            if ch == quote:
                quote = ""
            else:
                item.append(ch)
        elif ch in "'\"":
            quote, in_item = ch, True
        elif ch == "\\" and i + 1 < len(value):
            item.append(value[i + 1])
            in_item = True
            i += 1
        elif ch in " \t":
            if in_item:
                items.append("".join(item))
            item, in_item = [], False
        else:
            item.append(ch)
            in_item = True
        i += 1
    if quote:
        which = "single" if quote == "'" else "double"
        raise _RunnerFailure(f"xargs stops with \"unmatched {which} quote\" on the value, and under set -e the "
                             f"runner exits before training ({RUNNER}:139)")
    if in_item:
        items.append("".join(item))
    newline = True
    escapes = False
    while items and _ECHO_OPTION.match(items[0]):
        option = items.pop(0)
        newline = newline and "n" not in option
        escapes = escapes or "e" in option
    if escapes and any("\\" in i for i in items):
        raise _RunnerFailure("xargs runs echo -e on the value, which rewrites its backslashes; the checker does not "
                             "follow that", "unsupported")
    if items in (["--help"], ["--version"]):
        raise _RunnerFailure(f"xargs runs echo {items[0]}, which prints echo's own text instead of the value",
                             "unsupported")
    return " ".join(items)


def shell_words(segments: list[tuple[str, Origin]], problems: list[RunnerProblem]) -> list[Word]:
    """The words of ``eval "ARRAY=( <segments joined> )"``: bash quoting, expansions marked unresolved."""
    text = "".join(s for s, _ in segments)
    owners: list[Origin] = []
    for fragment, origin in segments:
        owners.extend([origin] * len(fragment))
    words: list[Word] = []
    chars: list[str] = []
    started: int | None = None
    unresolved = ""
    quote = ""
    i = 0

    def finish() -> None:
        nonlocal chars, started, unresolved
        if started is not None:
            words.append(Word("".join(chars), owners[started], unresolved))
        chars, started, unresolved = [], None, ""

    while i < len(text):
        ch = text[i]
        if quote == "'":
            if ch == "'":
                quote = ""
            else:
                chars.append(ch)
        elif quote == '"':
            if ch == '"':
                quote = ""
            elif ch == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
                if text[i + 1] != "\n":
                    chars.append(text[i + 1])
                i += 1
            elif ch in "$`":
                unresolved = unresolved or _expansion(text, i)
                chars.append(ch)
            else:
                chars.append(ch)
        elif ch in " \t\n":
            finish()
        else:
            if started is None:
                started = i
                if ch == "#":
                    problems.append(RunnerProblem(
                        f"the word {text[i:].split()[0]!r} starts a shell comment in the runner's eval: it and every "
                        f"flag after it are dropped ({RUNNER}:166)", owners[i], "unsupported"))
                    return words
                if ch == "~" and (i + 1 == len(text) or text[i + 1] in "/ \t\n"):
                    unresolved = "~, the runner's home directory (tilde expansion in its eval)"
            if ch in "'\"":
                quote = ch
            elif ch == "\\" and i + 1 < len(text):
                if text[i + 1] != "\n":
                    chars.append(text[i + 1])
                i += 1
            elif ch in "$`":
                unresolved = unresolved or _expansion(text, i)
                chars.append(ch)
            elif ch in ";&|<>()":
                problems.append(RunnerProblem(
                    f"{ch!r} in {_word_at(text, started)!r} is shell syntax in the runner's eval "
                    f"(eval \"TRAINING_PARAMS_ARRAY=(...)\", {RUNNER}:166): the runner fails or runs something else",
                    owners[i]))
                chars.append(ch)
            elif ch == "{" and re.match(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}", text[i:]):
                problems.append(RunnerProblem(
                    f"{_word_at(text, started)!r}: bash brace-expands this word in the runner's eval; the checker "
                    "does not follow that", owners[i], "unsupported"))
                chars.append(ch)
            else:
                chars.append(ch)
        i += 1
    if quote:
        problems.append(RunnerProblem(
            f"an unmatched {'single' if quote == chr(39) else 'double'} quote: the runner's eval fails with a syntax "
            f"error ({RUNNER}:166)", owners[started if started is not None else 0]))
        return words
    finish()
    return words


def _word_at(text: str, start: int | None) -> str:
    return text[start or 0:].split(" ")[0]


def _expansion(text: str, index: int) -> str:
    if text[index] == "`":
        return "a command substitution in the runner's eval"
    match = re.match(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text[index:])
    if match:
        return f"${{{match.group(1)}}}, which envsubst or the runner's shell substitutes from its environment"
    return "a $ expansion in the runner's eval"


def _env(path: str, node: yaml.Node | None,
         problems: list[RunnerProblem]) -> tuple[dict[str, Setting], list[tuple[str, Setting]]]:
    """ENV_VARS as exported: ``.key + "=" + .value`` (the value's text; a null adds nothing), lines 76-84."""
    env: dict[str, Setting] = {}
    unresolved: list[tuple[str, Setting]] = []
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL):
        return env, unresolved
    if not isinstance(node, yaml.MappingNode):
        problems.append(RunnerProblem(f"ENV_VARS is a {_kind(node)}, not a mapping: the runner's yq stops with "
                                      f"\"{_kind(node)} has no keys\" ({RUNNER}:76)", _origin(path, node, "ENV_VARS")))
        return env, unresolved
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else ""
        origin = _origin(path, key, name)
        if not isinstance(value, yaml.ScalarNode):
            problems.append(RunnerProblem(f"ENV_VARS.{name} is a {_kind(value)}: the runner's yq cannot add it to a "
                                          f"string and stops ({RUNNER}:76)", origin))
            continue
        text = "" if value.tag == _NULL else value.value  # addScalars: a null right-hand side adds nothing
        setting = Setting(text, origin)
        if "$" in text:
            unresolved.append((name, setting))
            env.pop(name, None)
        else:
            env[name] = setting
    return env, unresolved
