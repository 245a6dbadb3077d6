"""The ``type=`` converters of Megatron-LM's flags, re-implemented as small pure functions.

argparse calls an option's converter on each value word; a ``ValueError`` or ``TypeError`` becomes its
"invalid <name> value" error (CPython 3.11 ``argparse._get_value``), any other exception escapes
``parse_args`` and ends the run with a traceback. Each function here raises :class:`Invalid` or
:class:`Uncaught` where the upstream converter raises those, and returns the value it returns (enum members
as :class:`~checks.versions.EnumMember`). Nothing of Megatron-LM is imported: the enum member names come from
the flag table (``tools/mlm_flags.py`` records them per version), and ``tests/test_mlm_flags.py`` and the
tool's real-parser comparison check these functions against upstream behaviour.

Converter ids are the names the flag table records (``FlagSpec.type``); a lambda is ``lambda:<its first
option string>``. ``SOURCE_DIGESTS`` lists the digests of the upstream definitions each function was checked
against; a table that names another digest (upstream changed the converter) fails ``tests/test_mlm_flags.py``.
"""

from __future__ import annotations

import ast
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from checks.versions import EnumMember, EnumSpec

_MAX_ITEMS = 1_000_000  # a pattern that builds a bigger list is refused instead of evaluated
_MAX_INT_BITS = 4096


class Invalid(Exception):
    """The converter raised ValueError or TypeError: argparse reports "invalid <type> value: '<text>'"."""


@dataclass
class Uncaught(Exception):
    """The converter raised an exception argparse does not catch: ``parse_args`` ends with a traceback."""

    kind: str  # the exception class name, e.g. "KeyError"
    detail: str  # str() of the exception, where it is known exactly ("" where it is not)

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


class TooLarge(Exception):
    """The value would build a structure too large to evaluate here (upstream: MemoryError or a long stall)."""


Converter = Callable[[str, "EnumSpec | None"], Any]


def _builtin(kind: Callable[[str], Any]) -> Converter:
    def convert(text: str, enum: EnumSpec | None) -> Any:
        try:
            return kind(text)
        except (ValueError, TypeError):
            raise Invalid() from None

    return convert


def _enum_item(enum: EnumSpec | None, name: str) -> EnumMember:
    """``EnumClass[name]``: Python's ``EnumType.__getitem__`` raises KeyError(name) for a name it lacks."""
    member = enum.lookup(name) if enum is not None else None
    if member is None:
        raise Uncaught("KeyError", repr(name))
    return member


def enum_type_handler(text: str, enum: EnumSpec | None) -> EnumMember:
    """``config_type[cli_arg]`` for a config dataclass field of an Enum type.

    NVIDIA/Megatron-LM@d98e8a64:megatron/training/argument_utils.py:115-116 (ArgumentGroupFactory._get_enum_kwargs;
    the same code from 0.16). An unknown name raises KeyError, which argparse does not catch.
    """
    return _enum_item(enum, text)


def attention_backend_lambda(text: str, enum: EnumSpec | None) -> EnumMember:
    """``lambda attn_backend: AttnBackend[attn_backend]`` (0.14, 0.15).

    NVIDIA/Megatron-LM@23e00ed0:megatron/training/arguments.py:1426.
    """
    return _enum_item(enum, text)


def cuda_graph_scope_lambda(text: str, enum: EnumSpec | None) -> EnumMember | str:
    """``lambda scope: CudaGraphScope[scope] if scope != "full" else scope`` (0.16, 0.17).

    NVIDIA/Megatron-LM@55ac7082:megatron/training/arguments.py:1430.
    """
    return text if text == "full" else _enum_item(enum, text)


def parse_cuda_graph_modules_arg(text: str, enum: EnumSpec | None) -> EnumMember | str:
    """The deprecated whole-layer and full-iteration spellings pass as text, anything else is a member name.

    NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:256-260 (the same from 0.18).
    """
    if text in {"full", "full_iteration", "full_iteration_inference"}:
        return text
    return _enum_item(enum, text)


def int_or_pattern(text: str, enum: EnumSpec | None) -> Any:
    """``moe_freq_type``, ``la_freq_type``, ``no_rope_freq_type``: ``int(x)``, or a list expression when the
    text holds a ``[``.

    NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:304-375 (the three bodies differ only in
    accepting None or an int, which argv never holds); the pattern is ``_eval_pattern``, lines 245-253.
    """
    if "[" in text:
        return eval_pattern(text)
    try:
        return int(text)
    except ValueError:
        raise Invalid() from None


def tuple_type(text: str, enum: EnumSpec | None) -> tuple[int, ...]:
    """``tuple(int(i) for i in x.strip('()').split(','))``.

    NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:377-387.
    """
    try:
        return tuple(int(i) for i in text.strip("()").split(","))
    except ValueError:
        raise Invalid() from None


_PATTERN_ALPHABET = re.compile(r"[^,\d\[\]\(\)\+\*]")


def eval_pattern(text: str) -> Any:
    """Megatron-LM's ``_eval_pattern``: refuse any character outside ``,0-9[]()+*``, then ``eval`` the rest.

    NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:245-253. Here the text is compiled by Python's
    own parser (nothing is executed), so syntax errors are exactly eval's, and the syntax tree is evaluated
    with Python's semantics for the only operations that alphabet can spell: int literals, list and tuple
    displays with ``*`` unpacking, ``+``, ``*``, ``**``, unary ``+``, subscripts and calls (which always fail).
    """
    if _PATTERN_ALPHABET.search(text):
        raise Invalid()  # the ValueError("Invalid pattern: ...") upstream raises itself
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "'list' object is not callable" and the like: eval would only warn
            tree = ast.parse(text, mode="eval")
            compile(tree, "<string>", "eval")
    except SyntaxError as err:
        raise Uncaught("SyntaxError", "") from err
    except (ValueError, MemoryError, RecursionError) as err:  # nesting too deep for the parser
        raise Uncaught(type(err).__name__, "") from err
    try:
        return _Evaluator().value(tree.body)
    except RecursionError:
        raise Uncaught("RecursionError", "") from None


class _Evaluator:
    """Python's evaluation of the expressions ``_eval_pattern`` admits (TypeError -> Invalid, as argparse)."""

    def value(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items: list[Any] = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    items.extend(self._iterate(self.value(element.value)))
                else:
                    items.append(self.value(element))
                self._check_size(len(items))
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            operand = self.value(node.operand)
            if not isinstance(operand, int):
                raise Invalid()  # TypeError: bad operand type for unary +
            return operand
        if isinstance(node, ast.BinOp):
            return self._binary(node.op, self.value(node.left), self.value(node.right))
        if isinstance(node, ast.Subscript):
            return self._subscript(self.value(node.value), self.value(node.slice))
        if isinstance(node, ast.Call):
            self.value(node.func)
            for arg in node.args:
                self._iterate(self.value(arg.value)) if isinstance(arg, ast.Starred) else self.value(arg)
            for keyword in node.keywords:
                self.value(keyword.value)
                raise Invalid()  # ** needs a mapping, and the alphabet cannot spell one: TypeError
            raise Invalid()  # no value the alphabet can spell is callable: TypeError
        raise Uncaught("SyntaxError", "")  # not reachable from the alphabet; refuse rather than guess

    @staticmethod
    def _iterate(value: Any) -> list[Any]:
        if isinstance(value, (list, tuple)):
            return list(value)
        raise Invalid()  # TypeError: 'int' object is not iterable

    @staticmethod
    def _check_size(count: int) -> None:
        if count > _MAX_ITEMS:
            raise TooLarge()

    def _binary(self, op: ast.operator, left: Any, right: Any) -> Any:
        ints = isinstance(left, int) and isinstance(right, int)
        if isinstance(op, ast.Add):
            if ints or (type(left) is type(right) and isinstance(left, (list, tuple))):
                if not ints:
                    self._check_size(len(left) + len(right))
                return left + right
            raise Invalid()
        if isinstance(op, ast.Mult):
            if ints:
                if left.bit_length() + right.bit_length() > _MAX_INT_BITS:
                    raise TooLarge()
                return left * right
            sequence, count = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(sequence, (list, tuple)) and isinstance(count, int):
                if count > 0:
                    if count > sys.maxsize:
                        raise Uncaught("OverflowError", "cannot fit 'int' into an index-sized integer")
                    self._check_size(len(sequence) * count)
                return sequence * count
            raise Invalid()
        if isinstance(op, ast.Pow) and ints:
            if left not in (0, 1) and right * max(left.bit_length(), 1) > _MAX_INT_BITS:
                raise TooLarge()
            return left**right
        raise Invalid()

    @staticmethod
    def _subscript(container: Any, index: Any) -> Any:
        if not isinstance(container, (list, tuple)):
            raise Invalid()  # TypeError: 'int' object is not subscriptable
        if not isinstance(index, int):
            raise Invalid()  # TypeError: indices must be integers or slices
        if index >= len(container):
            raise Uncaught("IndexError", f"{type(container).__name__} index out of range")
        return container[index]


CONVERTERS: dict[str, Converter] = {
    "int": _builtin(int),
    "float": _builtin(float),
    "str": _builtin(str),
    "bool": _builtin(bool),
    "enum_type_handler": enum_type_handler,
    "lambda:--attention-backend": attention_backend_lambda,
    "lambda:--cuda-graph-scope": cuda_graph_scope_lambda,
    "_parse_cuda_graph_modules_arg": parse_cuda_graph_modules_arg,
    "moe_freq_type": int_or_pattern,
    "la_freq_type": int_or_pattern,
    "no_rope_freq_type": int_or_pattern,
    "tuple_type": tuple_type,
}

# Digests (tools/mlm_flags.py source_digest: sha1 of ast.unparse of the definition, docstring dropped) of the
# upstream definitions each converter above was read against, in every version the flag table holds.
SOURCE_DIGESTS: dict[str, frozenset[str]] = {
    "int": frozenset({"builtin"}),
    "float": frozenset({"builtin"}),
    "str": frozenset({"builtin"}),
    "bool": frozenset({"builtin"}),
    "enum_type_handler": frozenset({"33ec8684a80e"}),  # 0.16.1 .. main
    "lambda:--attention-backend": frozenset({"b30cba45786d"}),  # 0.14.0, 0.15.3
    "lambda:--cuda-graph-scope": frozenset({"639681addf2a"}),  # 0.16.1, 0.17.1
    "_parse_cuda_graph_modules_arg": frozenset({"594124c25dff"}),  # 0.18.2 .. main
    "moe_freq_type": frozenset({"0b67b99e1f8c"}),  # with _eval_pattern, 0.14.0 .. main
    "la_freq_type": frozenset({"f4465c29149f"}),
    "no_rope_freq_type": frozenset({"57999b9653c6"}),
    "tuple_type": frozenset({"24eb633f5c9b"}),
}


def type_label(converter_id: str) -> str:
    """The name argparse puts in "invalid <name> value": the callable's ``__name__``."""
    return "<lambda>" if converter_id.startswith("lambda:") else converter_id


def convert(converter_id: str | None, text: str, enum: EnumSpec | None) -> Any:
    """Apply a converter; raise Invalid, Uncaught, TooLarge, or KeyError for a converter the checker lacks."""
    if converter_id is None:
        return text
    return CONVERTERS[converter_id](text, enum)
