"""Compare the checker's Megatron-LM parser with an argparse parser on generated argv.

Used twice:
    * tools/mlm_flags.py, right after extracting a version, against the *real* Megatron-LM parser
      (``add_megatron_arguments`` of that version);
    * tests/test_mlm_flags.py, always, against Python's own argparse built from the flag table with the
      checker's converters (:func:`reference_parser`), for every version.

The argv cases (:func:`cases`) are generated from the table, deterministically: for every action its
valid values, values of the wrong type, invalid choices, a missing value (at the end, before an option),
``--flag=value`` and ``--flag=``, repeats, the ``--no-`` forms, stray words, ``--`` and unknown options.
Each side's result is ``("ok", namespace)``, ``("error", argparse's message)``, ``("crash", exception class,
detail)`` or ``("help",)``; a KeyError's detail (the name) must match too, other exceptions by class.
Pure Python: imports the checker, never megatron.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import enum
import re
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

from checks.config import Origin
from checks.loaders import mlm_argparse, mlm_types
from checks.versions import EnumMember, EnumSpec, FlagSpec, FlagTable

Result = tuple[Any, ...]
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class ParityExit(Exception):
    """What a quiet parser raises instead of printing and exiting."""

    def __init__(self, kind: str, detail: Any) -> None:
        super().__init__(kind, detail)
        self.kind = kind
        self.detail = detail


def quiet_parser_class(base: type[argparse.ArgumentParser]) -> type[argparse.ArgumentParser]:
    """``base`` with ``error``/``exit`` raising :class:`ParityExit` and no usage or help printed.

    Only the reporting changes (argparse's documented ``error`` hook); parsing is the base class's own.
    """

    class Quiet(base):  # type: ignore[misc, valid-type]
        def error(self, message: str) -> NoReturn:
            raise ParityExit("error", message)

        def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
            raise ParityExit("exit", status)

        def print_help(self, file: Any = None) -> None:
            pass

        def print_usage(self, file: Any = None) -> None:
            pass

    return Quiet


def norm(value: Any) -> Any:
    """A comparable form of a namespace value, the same for the real parser's and the checker's."""
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__name__, value.name)
    if isinstance(value, EnumMember):
        return ("enum", value.cls, value.name)
    if isinstance(value, tuple):
        return ("tuple", [norm(v) for v in value])
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, dict):
        if set(value) == {"repr"}:
            return ("repr", value["repr"])
        return {k: norm(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if callable(value):
        name = f"{getattr(value, '__module__', None) or ''}.{getattr(value, '__qualname__', '')}".lstrip(".")
        return ("repr", name)
    return ("repr", _ADDRESS.sub("", repr(value)))


class _Normaliser:
    """``norm`` of a namespace, reusing the normalised default for values that are the default object."""

    def __init__(self, base: dict[str, Any]) -> None:
        self.raw = base
        self.normal = {k: norm(v) for k, v in base.items()}

    def __call__(self, values: dict[str, Any]) -> dict[str, Any]:
        raw, normal = self.raw, self.normal
        return {k: normal[k] if k in raw and raw[k] is v else norm(v) for k, v in values.items()}


def run_real(parser: argparse.ArgumentParser, argv: list[str], normalise: Any = None) -> Result:
    """Parse with an argparse parser made quiet by :func:`quiet_parser_class`."""
    try:
        namespace = parser.parse_args(list(argv))
    except ParityExit as done:
        if done.kind == "exit":
            return ("help",)
        return ("error", done.detail)
    except Exception as err:  # a converter's uncaught exception is the result being compared
        return ("crash", type(err).__name__, str(err))
    values = vars(namespace)
    return ("ok", normalise(values) if normalise else {k: norm(v) for k, v in values.items()})


def run_checker(table: FlagTable, argv: list[str], normalise: Any = None) -> Result:
    words = [mlm_argparse.Word(text, Origin(arg=f"argv[{i}]")) for i, text in enumerate(argv)]
    outcome, namespace = mlm_argparse.parse(words, table, strict=True)
    error = outcome.first_error()
    if error is None:
        return ("ok", normalise(namespace) if normalise else {k: norm(v) for k, v in namespace.items()})
    if error.kind == "help":
        return ("help",)
    if error.kind == "crash":
        kind, _, detail = error.exception.partition(": ")
        return ("crash", kind, detail)
    if error.kind == "unsupported":
        return ("unsupported", error.message)
    return ("error", error.message)


def same(expected: Result, got: Result) -> bool:
    if expected[0] == "crash" and got[0] == "crash":
        return expected[1] == got[1] and (expected[1] != "KeyError" or expected[2] == got[2])
    return expected == got


def describe(expected: Result, got: Result) -> str:
    if expected[0] == "ok" and got[0] == "ok":
        keys = sorted(k for k in set(expected[1]) | set(got[1]) if expected[1].get(k, "<absent>") !=
                      got[1].get(k, "<absent>"))
        return "namespace differs: " + "; ".join(
            f"{k}: parser {expected[1].get(k, '<absent>')!r}, checker {got[1].get(k, '<absent>')!r}" for k in keys[:4])
    return f"parser {expected!r}, checker {got!r}"


def compare(table: FlagTable, parser: argparse.ArgumentParser, limit: int = 50,
            covered: set[str] | None = None) -> tuple[int, list[str]]:
    """Run every case on both sides: the number of cases and the first ``limit`` mismatches.

    ``covered``: signatures of actions compared already (with another version's parser); their cases are
    skipped and this version's are added, so a sweep over versions compares each distinct action once.
    """
    real_base = _Normaliser(vars(parser.parse_args([])))
    checker_base = _Normaliser(mlm_argparse.defaults(table))
    count = 0
    mismatches: list[str] = []
    for argv in cases(table, covered):
        count += 1
        expected = run_real(parser, argv, real_base)
        got = run_checker(table, argv, checker_base)
        if not same(expected, got) and len(mismatches) < limit:
            mismatches.append(f"{argv!r}: {describe(expected, got)}"[:600])
    return count, mismatches


# --------------------------------------------------------------------------- cases


_FREQ = ("moe_freq_type", "la_freq_type", "no_rope_freq_type")


def samples(spec: FlagSpec, table: FlagTable) -> list[str]:
    """Value words for one option: valid ones first, then ones argparse or the converter refuses."""
    kind = spec.type
    enum_spec = table.enums.get(spec.enum or "")
    if enum_spec is not None:
        names = [m.name for m in enum_spec.members][:4] + sorted(enum_spec.aliases)[:2]
        if kind == "_parse_cuda_graph_modules_arg":
            names += ["full", "full_iteration", "full_iteration_inference"]
        if kind == "lambda:--cuda-graph-scope":
            names += ["full"]
        return names + ["not_a_member", "1"]
    if spec.choices is not None:
        return [str(c) for c in spec.choices][:6] + ["not-a-choice", ""]
    if kind == "int":
        return ["3", "-1", "0", "1_000", " 7", "0x1f", "1.5", "abc", ""]
    if kind == "float":
        return ["0.25", "-0.5", ".5", "1e3", "-1e-5", "nan", "abc", ""]
    if kind == "bool":
        return ["False", "0", "", "yes"]
    if kind in _FREQ:
        return ["4", "[1,0]", "([1]*2+[0])*2", "[0]*2**3", "[*[1],0]", "[1", "x", "[1]*a", "[1][2]", "[1](2)",
                "[*1]", "[1]*99999999999999999999", "[0]+(1,)", "[+1][0]", "01", "[01]", "[1]*[2]", "(*[1])"]
    if kind == "tuple_type":
        return ["1,2", "(3,4)", "5", "1,x", ""]
    return ["text", "-dash", "", "a b", "--", "=", "-1"]


def _switch(table: FlagTable) -> str | None:
    """Some option that takes no value, to put after a value-taking option."""
    for flag, spec in table.flags.items():
        if spec.action == "store_true":
            return flag
    return None


def _actions(table: FlagTable) -> list[FlagSpec]:
    seen: set[tuple[str, ...]] = set()
    out: list[FlagSpec] = []
    for spec in table.flags.values():
        key = spec.options or (spec.flag,)
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out


def signature(spec: FlagSpec, table: FlagTable) -> str:
    """What decides an action's cases and outcomes: its fields and, for an enum, the members."""
    return repr((spec.options, spec.dest, spec.action, spec.nargs, spec.type, spec.choices, spec.const,
                 spec.default, spec.required, table.enums.get(spec.enum or "")))


def cases(table: FlagTable, covered: set[str] | None = None) -> Iterator[list[str]]:
    switch = _switch(table)
    yield from ([], ["--"], ["--", "x"], ["stray"], ["--no-such-flag"], ["--no-such-flag", "5"],
                ["--no-such-flag=5"], ["-x"], ["-1"], ["-hx"], ["-"], ["", "x"])
    if switch:
        yield from ([switch, "--", switch], [switch, "stray"], ["stray", switch])
    for spec in _actions(table):
        if covered is not None:
            key = signature(spec, table)
            if key in covered:
                continue
            covered.add(key)
        first = spec.options[0] if spec.options else spec.flag
        if spec.action in ("help", "version"):
            yield from ([o] for o in spec.options)
            yield [first + "=x"]
            continue
        if not spec.takes_value:
            for option in spec.options or (spec.flag,):
                yield from ([option], [option + "=1"], [option + "="], [option, "false"], [option, option])
            if spec.action == "BooleanOptionalAction" and len(spec.options) >= 2:
                yield from ([spec.options[0], spec.options[1]], [spec.options[1], spec.options[0]])
            continue
        values = samples(spec, table)
        v0, v1 = values[0], values[1 % len(values)]
        for option in spec.options[1:]:
            yield [option, v0]
        if spec.nargs in (None, "?"):
            yield from ([first, v] for v in values)
        else:
            yield from ([first, v] for v in values[:3])
            yield from ([first, v0, v1], [first, v0, v1, v0], [first, v0, "--", v1])
        yield from ([first + "=" + v0], [first + "=" + v1], [first + "="], [first],
                    [first, v0, first, v1], [first, v0, "stray"])
        if switch and switch != first:
            yield from ([first, switch], [first, v0, switch])
    for group in table.groups:
        for a in group:
            for b in group:
                if a != b:
                    yield _with_value(table.flags[a], table) + _with_value(table.flags[b], table)


def _with_value(spec: FlagSpec, table: FlagTable) -> list[str]:
    return [spec.flag, samples(spec, table)[0]] if spec.takes_value else [spec.flag]


# --------------------------------------------------------------------------- argparse from the table


def _exception(err: mlm_types.Uncaught) -> BaseException:
    cls = getattr(builtins, err.kind, RuntimeError)
    if err.kind == "KeyError":
        return KeyError(ast.literal_eval(err.detail))
    return cls(err.detail) if isinstance(cls, type) else RuntimeError(err.kind)


def _type(converter: str, enum_spec: EnumSpec | None) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return mlm_types.convert(converter, text, enum_spec)
        except mlm_types.Invalid:
            raise ValueError(text) from None
        except mlm_types.Uncaught as err:
            raise _exception(err) from None
        except mlm_types.TooLarge:
            raise MemoryError() from None

    convert.__name__ = mlm_types.type_label(converter)
    return convert


_ARGPARSE_ACTIONS = {"BooleanOptionalAction": argparse.BooleanOptionalAction}


def reference_parser(table: FlagTable) -> argparse.ArgumentParser:
    """Python's argparse, configured from the table as Megatron-LM configures it, with the checker's
    converters: the oracle for the checker's own parsing algorithm."""
    parser = quiet_parser_class(argparse.ArgumentParser)(description="Megatron-LM Arguments", allow_abbrev=False,
                                                         add_help=False)
    group_of: dict[str, Any] = {}
    for group in table.groups:
        container = parser.add_mutually_exclusive_group()
        for first in group:
            group_of[first] = container
    for spec in _actions(table):
        options = list(spec.options or (spec.flag,))
        target = group_of.get(options[0], parser)
        kwargs: dict[str, Any] = {"dest": spec.dest}
        if spec.help_suppressed:
            kwargs["help"] = argparse.SUPPRESS
        action = spec.action
        if action == "help":
            target.add_argument(*options, action="help")
            continue
        if action == "BooleanOptionalAction":
            options = [o for o in options if not (o.startswith("--no-") and "--" + o[5:] in options)]
        kwargs["action"] = _ARGPARSE_ACTIONS.get(action, action)
        kwargs["default"] = spec.default
        if action in ("store", "append", "extend"):
            kwargs["nargs"] = spec.nargs
            if spec.choices is not None:
                kwargs["choices"] = spec.choices
        if action in ("store", "append", "extend", "BooleanOptionalAction") and spec.type is not None:
            kwargs["type"] = _type(spec.type, table.enums.get(spec.enum or ""))
        if action in ("store_const", "append_const") or (action == "store" and spec.nargs == "?"):
            kwargs["const"] = spec.const
        if spec.required:
            kwargs["required"] = True
        target.add_argument(*options, **kwargs)
    return parser
