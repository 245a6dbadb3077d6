"""Megatron-LM's command line, parsed the way its argparse parser parses it.

Megatron-LM builds ``argparse.ArgumentParser(description=..., allow_abbrev=False)``, adds every flag with
``add_megatron_arguments`` and calls ``parser.parse_args()`` (``parse_known_args`` only when a caller passes
``ignore_unknown_args=True``) (NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:117-132). This
module follows CPython 3.11's ``argparse._parse_known_args`` over the flag table of the selected version
(:class:`checks.versions.FlagTable`): words are classified as options or arguments, each option consumes
the words its ``nargs`` matches, values go through the option's converter (:mod:`checks.loaders.mlm_types`)
and its choices, and the action stores, appends, counts or switches. Where argparse stops at its first
error, this parser records it in argparse's own wording and goes on, so one check reports every problem;
the first error recorded is the one argparse prints.

Two modes: ``strict`` reads an argv as the training script receives it (``--argv``, a functional-test
YAML): words no option consumes are argparse's "unrecognized arguments". ``strict=False`` scans a launch
script, whose words belong to other programs too (``torchrun``, ``python``, paths): only ``--`` words are
options, and stray words are skipped.

Flags the entry script adds (``extra_args_provider``) are not in the table: an unknown option is reported as
such (it is argparse's "unrecognized arguments" unless the entry script defines it), and the words after it
are taken as its values, not as stray words.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from checks.config import Origin
from checks.loaders import mlm_types
from checks.versions import EnumMember, FlagSpec, FlagTable

# argparse._ActionsContainer.__init__: what counts as a negative number rather than an option.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class Word:
    """One argv word and where it came from; ``unresolved`` says why its text is not known (a shell variable)."""

    text: str
    origin: Origin
    unresolved: str = ""


@dataclass(frozen=True)
class ParseError:
    """Something argparse refuses, in its own words.

    kind: ``error`` (argparse prints usage and exits with status 2), ``crash`` (a converter raises an exception
    argparse does not catch: a traceback), ``help`` (``-h`` prints the help and exits 0: training does not
    start), ``extra`` (a word no option takes: "unrecognized arguments"), ``unsupported`` (the checker cannot
    model it).
    """

    kind: str
    message: str
    word: Word
    spec: FlagSpec | None = None
    hint: str = ""  # what would be valid, where the checker knows
    exception: str = ""  # kind "crash": the uncaught exception, "KeyError: 'x'"
    switch_value: bool = False  # "ignored explicit argument": a value given to a switch with =


@dataclass(frozen=True)
class Assignment:
    """An option argparse acted on: the dest's value after the action, and the words that set it."""

    spec: FlagSpec
    option: str
    value: Any
    words: tuple[Word, ...]


@dataclass(frozen=True)
class UnknownOption:
    """An option the version's parser lacks (the entry script may add it), with the words after it."""

    word: Word
    name: str  # the option string, without an ``=value``
    values: tuple[Word, ...]


@dataclass(frozen=True)
class Unresolved:
    """An option whose value words the checker cannot read (shell variables): its dest's value is unknown."""

    spec: FlagSpec
    words: tuple[Word, ...]


@dataclass
class Outcome:
    """What parsing an argv produced, in argv order."""

    events: list[Assignment | Unresolved] = field(default_factory=list)  # in the order argparse acts
    errors: list[ParseError] = field(default_factory=list)
    unknown: list[UnknownOption] = field(default_factory=list)
    stray: list[Word] = field(default_factory=list)  # strict mode: every word argparse leaves unrecognized

    @property
    def assignments(self) -> list[Assignment]:
        return [e for e in self.events if isinstance(e, Assignment)]

    @property
    def unresolved(self) -> list[Unresolved]:
        return [e for e in self.events if isinstance(e, Unresolved)]

    def final(self) -> dict[str, Assignment]:
        """The last assignment of each dest (argparse keeps the last), minus dests whose value is unknown."""
        out: dict[str, Assignment] = {}
        for event in self.events:
            if isinstance(event, Assignment):
                out[event.spec.dest] = event
            else:
                out.pop(event.spec.dest, None)
        return out

    def first_error(self) -> ParseError | None:
        """The error argparse itself reports: the first one raised while parsing, else the unrecognized words."""
        raised = [e for e in self.errors if e.kind != "extra"]
        if raised:
            return raised[0]
        if self.stray:
            words = " ".join(w.text for w in self.stray)
            return ParseError("extra", f"unrecognized arguments: {words}", self.stray[0])
        return None


@dataclass
class _State:
    words: Sequence[Word]
    pattern: str
    options: dict[int, tuple[FlagSpec | None, str, str | None]]
    outcome: Outcome
    namespace: dict[str, Any]
    seen_non_default: set[tuple[str, ...]]


def parse(words: Sequence[Word], table: FlagTable, *, strict: bool = True) -> tuple[Outcome, dict[str, Any]]:
    """Parse ``words`` with ``table``'s parser; returns the outcome and the final namespace (every dest)."""
    outcome = Outcome()
    pattern_parts: list[str] = []
    options: dict[int, tuple[FlagSpec | None, str, str | None]] = {}
    after_dashes = False
    for index, word in enumerate(words):
        if after_dashes:
            pattern_parts.append("A")
            continue
        if word.text == "--" and strict:
            pattern_parts.append("-")
            after_dashes = True
            continue
        found = _parse_optional(word, table, strict, outcome)
        if found is None:
            pattern_parts.append("A")
        else:
            options[index] = found
            pattern_parts.append("O")
    namespace = dict(defaults(table))
    state = _State(words, "".join(pattern_parts), options, outcome, namespace, set())
    index = 0
    while index < len(words):
        if index in options:
            index = _consume_optional(state, index, table, strict)
            continue
        if strict:
            outcome.stray.append(words[index])
            outcome.errors.append(ParseError("extra", f"unrecognized arguments: {words[index].text}", words[index]))
        index += 1
    missing = [s for s in _required(table) if not any(a.spec.options == s.options for a in outcome.assignments)]
    if strict and missing:
        names = ", ".join(s.name for s in missing)
        outcome.errors.append(ParseError("error", f"the following arguments are required: {names}",
                                         Word(missing[0].flag, Origin(arg="argv")), missing[0]))
    return outcome, namespace


_CACHE: dict[int, tuple[FlagTable, dict[str, Any], list[FlagSpec]]] = {}


def _cached(table: FlagTable) -> tuple[dict[str, Any], list[FlagSpec]]:
    """Per-table work done once: the default namespace and the required actions."""
    hit = _CACHE.get(id(table))
    if hit is None or hit[0] is not table:
        required, seen = [], set()
        for spec in table.flags.values():
            if spec.required and spec.options not in seen:
                seen.add(spec.options)
                required.append(spec)
        hit = (table, _defaults(table), required)
        if len(_CACHE) > 64:
            _CACHE.clear()
        _CACHE[id(table)] = hit
    return hit[1], hit[2]


def _required(table: FlagTable) -> list[FlagSpec]:
    return _cached(table)[1]


def defaults(table: FlagTable) -> dict[str, Any]:
    """The namespace before any word (see :func:`_defaults`); the same object on every call, do not modify."""
    return _cached(table)[0]


def _defaults(table: FlagTable) -> dict[str, Any]:
    """The namespace before any word: each dest's default; a text default goes through the converter.

    argparse sets every action's default first and converts a ``str`` default of an option that was not given
    at the end of parsing (``_parse_known_args``); a failing conversion is upstream's bug, left as the text.
    """
    out: dict[str, Any] = {}
    for spec in table.flags.values():
        if spec.dest in out or spec.action in ("help", "version"):
            continue
        value = spec.default
        if isinstance(value, str) and spec.type is not None and spec.type in mlm_types.CONVERTERS:
            with contextlib.suppress(mlm_types.Invalid, mlm_types.Uncaught, mlm_types.TooLarge):
                value = mlm_types.convert(spec.type, value, table.enums.get(spec.enum or ""))
        out[spec.dest] = value
    return out


def _parse_optional(word: Word, table: FlagTable, strict: bool,
                    outcome: Outcome) -> tuple[FlagSpec | None, str, str | None] | None:
    """argparse ``_parse_optional``: is this word an option (known or not), and with which explicit value?"""
    text = word.text
    flags = table.flags
    if not text or text[0] != "-":
        return None
    if not strict and (not text.startswith("--") or text == "--"):
        return None  # a launch script's other programs use single-dash options (-n, -h, -x)
    if text in flags:
        return flags[text], text, None
    if len(text) == 1:
        return None
    if "=" in text:
        option, explicit = text.split("=", 1)
        if option in flags:
            return flags[option], option, explicit
    if text[1] != "-":
        # single-dash: "-xVALUE" or a group of single-character switches (allow_abbrev only covers "--")
        tuples: list[tuple[FlagSpec | None, str, str | None]] = [(flags[o], o, text[2:]) for o in flags
                                                                 if o == text[:2]]
        tuples += [(flags[o], o, None) for o in flags if o.startswith(text) and o != text[:2]]
        if len(tuples) > 1:
            names = ", ".join(o for _, o, _ in tuples)
            outcome.errors.append(ParseError("error", f"ambiguous option: {text} could match {names}", word))
            return None
        if tuples:
            return tuples[0]
    if _NEGATIVE_NUMBER.match(text) and not any(_NEGATIVE_NUMBER.match(o) for o in flags):
        return None
    if " " in text:
        return None
    return None, text, None


def _nargs_regex(nargs: Any) -> str:
    """argparse ``_get_nargs_pattern`` for an option (where ``--`` is never a value)."""
    if nargs is None:
        return "(A)"
    if nargs == "?":
        return "(A?)"
    if nargs == "*":
        return "(A*)"
    if nargs == "+":
        return "(A+)"
    if isinstance(nargs, int):
        return "(" + "A" * nargs + ")"
    raise ValueError(nargs)


def _nargs_error(nargs: Any) -> str:
    """argparse ``_match_argument``'s message when the words do not fit ``nargs``."""
    fixed = {None: "expected one argument", "?": "expected at most one argument", "+": "expected at least one argument"}
    if nargs in fixed:
        return fixed[nargs]
    return f"expected {nargs} argument" + ("" if nargs == 1 else "s")


def _match(spec: FlagSpec, pattern: str) -> int | None:
    nargs = 0 if spec.action in ("store_true", "store_false", "store_const", "append_const", "count", "help",
                                  "version", "BooleanOptionalAction") else spec.nargs
    found = re.match(_nargs_regex(nargs), pattern)
    return None if found is None else len(found.group(1))


def _consume_optional(state: _State, index: int, table: FlagTable, strict: bool) -> int:
    """argparse ``consume_optional``: the option at ``index`` and the words it takes; the index after them."""
    spec, option, explicit = state.options[index]
    word = state.words[index]
    if spec is None:
        stop = index + 1
        while stop < len(state.words) and stop not in state.options:
            stop += 1
        name = option.split("=", 1)[0] if option.startswith("--") else option
        state.outcome.unknown.append(UnknownOption(word, name, tuple(state.words[index + 1:stop])))
        if strict:
            state.outcome.stray.extend(state.words[index:stop])
        return stop
    taken: list[tuple[FlagSpec, str, list[Word], bool]] = []  # (action, option string, values, from "=value")
    while True:
        if not _modelled(spec):
            _error(state, f"argument {spec.name}: the checker does not model action {spec.action!r} with nargs "
                          f"{spec.nargs!r}", word, spec, kind="unsupported")
            return index + 1
        if explicit is not None:
            count = _match(spec, "A")
            if count is None:
                _error(state, f"argument {spec.name}: {_nargs_error(spec.nargs)}", word, spec)
                return index + 1
            if count == 0 and option[1] != "-" and explicit != "":
                # "-xyz": -x takes nothing, so the rest are more single-character options
                taken.append((spec, option, [], False))
                option = option[0] + explicit[0]
                if option not in table.flags:
                    _error(state, f"argument {spec.name}: ignored explicit argument {explicit!r}", word, spec,
                           switch_value=True)
                    return index + 1
                spec, explicit = table.flags[option], explicit[1:] or None
                continue
            if count == 1:
                taken.append((spec, option, [Word(explicit, word.origin, word.unresolved)], True))
                stop = index + 1
                break
            _error(state, f"argument {spec.name}: ignored explicit argument {explicit!r}", word, spec,
                           switch_value=True)
            return index + 1
        count = _match(spec, state.pattern[index + 1:])
        if count is None:
            _error(state, f"argument {spec.name}: {_nargs_error(spec.nargs)}", word, spec)
            return index + 1
        stop = index + 1 + count
        taken.append((spec, option, list(state.words[index + 1:stop]), False))
        break
    for action_spec, action_option, args, inline in taken:
        _take_action(state, action_spec, action_option, [word] if inline else [word] + args, args, table)
    return stop


def _modelled(spec: FlagSpec) -> bool:
    return spec.action in _MODELLED_ACTIONS and (spec.nargs is None or isinstance(spec.nargs, int)
                                                 or spec.nargs in ("?", "*", "+"))


def _error(state: _State, message: str, word: Word, spec: FlagSpec | None, kind: str = "error",
           hint: str = "", exception: str = "", switch_value: bool = False) -> None:
    state.outcome.errors.append(ParseError(kind, message, word, spec, hint, exception, switch_value))


_MODELLED_ACTIONS = frozenset({"store", "store_true", "store_false", "store_const", "append", "append_const",
                               "count", "extend", "help", "version", "BooleanOptionalAction"})


class _Rejected(Exception):
    pass


def _take_action(state: _State, spec: FlagSpec, option: str, words: list[Word], args: list[Word],
                 table: FlagTable) -> None:
    """argparse ``take_action``: convert and check the values, refuse a mutually exclusive pair, act."""
    if spec.action == "help":
        _error(state, f"argument {spec.name}: prints the help and exits with status 0; training does not start",
               words[0], spec, kind="help")
        return
    if spec.action == "version":
        _error(state, f"argument {spec.name}: prints the version and exits; training does not start",
               words[0], spec, kind="help")
        return
    args = [a for i, a in enumerate(args) if not (a.text == "--" and all(b.text != "--" for b in args[:i]))]
    if any(a.unresolved for a in args):
        state.outcome.events.append(Unresolved(spec, tuple(words)))
        return
    try:
        values = _values(state, spec, args, table)
    except _Rejected:
        return
    if not _same_object(values, spec.default):
        state.seen_non_default.add(spec.options)
        for other in table.conflicts(spec):
            other_spec = table.flags[other]
            if other_spec.options in state.seen_non_default:
                _error(state, f"argument {spec.name}: not allowed with argument {other_spec.name}", words[0], spec)
                return
    current = state.namespace.get(spec.dest)
    action = spec.action
    if action == "store":
        result = values
    elif action in ("store_const", "store_true", "store_false"):
        result = spec.const if action == "store_const" else action == "store_true"
    elif action == "BooleanOptionalAction":
        result = not option.startswith("--no-")
    elif action == "append":
        result = list(current or []) + [values]
    elif action == "append_const":
        result = list(current or []) + [spec.const]
    elif action == "extend":
        result = list(current or []) + list(values)
    else:  # count
        result = (current or 0) + 1
    state.namespace[spec.dest] = result
    state.outcome.events.append(Assignment(spec, option, result, tuple(words)))


def _values(state: _State, spec: FlagSpec, args: list[Word], table: FlagTable) -> Any:
    """argparse ``_get_values``: convert each word and check it against the choices."""
    if spec.action in ("store_true", "store_false", "store_const", "append_const", "count",
                       "BooleanOptionalAction"):
        return []  # nargs=0: argparse's value is an empty list (only the identity test below reads it)
    if not args and spec.nargs == "?":
        value = spec.const
        if isinstance(value, str):
            value = _convert(state, spec, Word(value, Origin()), table)
            _check(state, spec, value, Word(value, Origin()))
        return value
    if len(args) == 1 and spec.nargs in (None, "?"):
        value = _convert(state, spec, args[0], table)
        _check(state, spec, value, args[0])
        return value
    converted = [_convert(state, spec, a, table) for a in args]
    for value, word in zip(converted, args, strict=True):
        _check(state, spec, value, word)
    return converted


def _convert(state: _State, spec: FlagSpec, word: Word, table: FlagTable) -> Any:
    enum = table.enums.get(spec.enum or "")
    if spec.type is not None and spec.type not in mlm_types.CONVERTERS:
        _error(state, f"argument {spec.name}: the checker has no model of converter {spec.type!r}", word, spec,
               kind="unsupported")
        raise _Rejected()
    try:
        return mlm_types.convert(spec.type, word.text, enum)
    except mlm_types.Invalid:
        _error(state, f"argument {spec.name}: invalid {mlm_types.type_label(spec.type or '')} value: "
                      f"{word.text!r}", word, spec, hint=_valid_values(spec, enum))
    except mlm_types.Uncaught as err:
        _error(state, f"argument {spec.name}: {word.text!r} makes {mlm_types.type_label(spec.type or '')}() raise "
                      f"{err}, which argparse does not catch: the run stops with a traceback",
               word, spec, kind="crash", hint=_valid_values(spec, enum), exception=str(err))
    except mlm_types.TooLarge:
        _error(state, f"argument {spec.name}: {word.text!r} builds a value too large to evaluate (Megatron-LM "
                      "runs out of memory or stalls)", word, spec, kind="unsupported")
    raise _Rejected()


def _valid_values(spec: FlagSpec, enum: Any) -> str:
    if enum is not None:
        names = [m.name for m in enum.members]
        if spec.type in ("_parse_cuda_graph_modules_arg",):
            names += ["full", "full_iteration", "full_iteration_inference"]
        elif spec.type == "lambda:--cuda-graph-scope":
            names.append("full")
        return "valid: " + ", ".join(names)
    return ""


def _check(state: _State, spec: FlagSpec, value: Any, word: Word) -> None:
    """argparse ``_check_value``: the converted value must be one of the choices."""
    if spec.choices is not None and value not in spec.choices:
        choices = ", ".join(repr(c) for c in spec.choices)
        _error(state, f"argument {spec.name}: invalid choice: {value!r} (choose from {choices})", word, spec)
        raise _Rejected()


def _same_object(value: Any, default: Any) -> bool:
    """argparse's ``argument_values is not action.default``, for the values a converter returns.

    CPython shares None, booleans, enum members, ints in [-5, 256] and the empty and one-character strings;
    anything else a converter builds is a new object, never the default.
    """
    if value is None or default is None:
        return value is None and default is None
    if isinstance(value, bool) or isinstance(default, bool):
        return value is default or (type(value) is type(default) and value == default)
    if isinstance(value, EnumMember):
        return value == default
    if type(value) is int and type(default) is int:
        return value == default and -5 <= value <= 256
    if type(value) is str and type(default) is str:
        return value == default and (len(value) == 0 or (len(value) == 1 and ord(value) < 256))
    return False
