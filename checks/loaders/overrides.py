"""Parse Hydra command-line overrides (``KEY=VALUE``) without importing Hydra.

Megatron Bridge and NeMo-RL take overrides such as ``model.cpu_offloading=true``,
``++optimizer.optimizer_offload_fraction=0.5`` or
``'model.offload_modules=[core_attn,attn_proj]'`` and hand them to Hydra 1.3,
which types each value from its lexer tokens (``true`` is a bool, ``1_000`` an
int, ``1.5.2`` a string).  The checker must read them exactly as Hydra would,
but may not depend on Hydra or OmegaConf, so this module re-implements the
subset of the override language that sets one value.

(Applying them, with Hydra's struct-mode rules, is :mod:`checks.loaders.apply`.)

The rules come from hydra-core 1.3.8's ANTLR grammar:
``hydra/grammar/OverrideLexer.g4`` (tokens, lexer modes, longest-match with
rule order breaking ties), ``hydra/grammar/OverrideParser.g4`` (structure) and
``HydraOverrideVisitor._createPrimitive`` in
``hydra/core/override_parser/overrides_visitor.py`` (how a primitive's tokens
become a Python value).  The tests compare this module against Hydra itself.

Forms Hydra accepts but which do not describe one value are rejected with
:class:`OverrideSyntaxError`: choice sweeps (``a,b``), function calls
(``int(3)``, ``choice(...)``, ``range(...)``, ``glob(...)``), config-group
and package overrides (``db/mysql=x``, ``key@pkg=x``) and the empty key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple

__all__ = ["Override", "OverrideSyntaxError", "format_value", "parse_override"]

OverrideOp = Literal["set", "add", "force_add", "delete"]


@dataclass(frozen=True)
class Override:
    """One parsed override.

    ``value`` mirrors what Hydra's ``Override.value()`` returns: ``None`` for a
    bare ``~key``, and the empty string for ``key=`` or ``~key=`` (Hydra's
    reading of an empty value).  ``has_value`` is true only when text follows
    the ``=``.
    """

    op: OverrideOp
    key: str
    value: object
    has_value: bool
    text: str


class OverrideSyntaxError(ValueError):
    """Raised for a string Hydra would reject, or a form we do not support.

    ``str(err)`` is one line: what is wrong and, when known, the 1-based
    character column where it is.
    """

    problem: str
    column: int | None

    def __init__(self, problem: str, column: int | None = None) -> None:
        self.problem = problem
        self.column = column
        super().__init__(problem if column is None else f"{problem} at column {column}")


# --------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------

class _Token(NamedTuple):
    kind: str
    text: str
    start: int  # 0-based offset into the override text

    @property
    def column(self) -> int:
        return self.start + 1


_Matcher = Callable[[str, int], int]  # end offset of the token at pos, or -1

# Token kinds (names as in OverrideLexer.g4).
EQUAL, TILDE, PLUS, AT, COLON, SLASH = "EQUAL", "TILDE", "PLUS", "AT", "COLON", "SLASH"
ID, KEY_SPECIAL, DOT_PATH = "ID", "KEY_SPECIAL", "DOT_PATH"
POPEN, COMMA, PCLOSE = "POPEN", "COMMA", "PCLOSE"
BRACKET_OPEN, BRACKET_CLOSE, BRACE_OPEN, BRACE_CLOSE = (
    "BRACKET_OPEN", "BRACKET_CLOSE", "BRACE_OPEN", "BRACE_CLOSE")
FLOAT, INT, BOOL, NULL = "FLOAT", "INT", "BOOL", "NULL"
UNQUOTED_CHAR, ESC, WS = "UNQUOTED_CHAR", "ESC", "WS"
QUOTED_VALUE, INTERPOLATION = "QUOTED_VALUE", "INTERPOLATION"
EOF = "EOF"

# Tokens a primitive (the `(...)+` alternative of the `primitive` rule) and a
# dict key (`dictKey`) may be built from.
_PRIMITIVE_KINDS = frozenset({ID, NULL, INT, FLOAT, BOOL, INTERPOLATION, UNQUOTED_CHAR, COLON, ESC, WS})
_DICT_KEY_KINDS = _PRIMITIVE_KINDS - {INTERPOLATION, COLON}


def _regex(pattern: str) -> _Matcher:
    compiled = re.compile(pattern)

    def match(text: str, pos: int) -> int:
        found = compiled.match(text, pos)
        return found.end() if found else -1

    return match


def _match_quoted(text: str, pos: int) -> int:
    """QUOTED_VALUE: the lexer's non-greedy loop ends the token at the first
    matching quote that is preceded by an even number of backslashes."""
    quote = text[pos]
    if quote not in "'\"":
        return -1
    backslashes = 0
    for index in range(pos + 1, len(text)):
        char = text[index]
        if char == quote and backslashes % 2 == 0:
            return index + 1
        backslashes = backslashes + 1 if char == "\\" else 0
    return -1


# Python's re classes are spelled out ([0-9], [Ii]) rather than \d or (?i):
# those also match non-ASCII digits and letters (e.g. the Kelvin sign for k),
# which the ANTLR lexer rejects.
_WS = r"[ \t]"
_DIGITS = r"[0-9](?:_?[0-9])*"
_INT_UNSIGNED = r"(?:0|[1-9](?:_?[0-9])*)"
# Alternatives are ordered so that Python's first-match regex finds the longest
# match, which is what the ANTLR lexer takes.
_POINT_FLOAT = rf"(?:{_INT_UNSIGNED}\.(?:{_DIGITS})?|\.{_DIGITS})"
_EXPONENT_FLOAT = rf"(?:{_POINT_FLOAT}|{_INT_UNSIGNED})[eE][+-]?{_DIGITS}"
_KEY_SPECIAL = r"[a-zA-Z_$][a-zA-Z0-9_$-]*"
_ID = r"[a-zA-Z_][a-zA-Z0-9_-]*"

# Rule order matters: on equal length the earlier rule wins (so `true` is BOOL
# and `abc` in a key is ID, not KEY_SPECIAL).
_KEY_RULES: tuple[tuple[str, _Matcher], ...] = (
    (EQUAL, _regex(rf"={_WS}*")),
    (TILDE, _regex(r"~")),
    (PLUS, _regex(r"\+")),
    (AT, _regex(r"@")),
    (COLON, _regex(r":")),
    (SLASH, _regex(r"/")),
    (ID, _regex(_ID)),
    (KEY_SPECIAL, _regex(_KEY_SPECIAL)),
    (DOT_PATH, _regex(rf"(?:{_KEY_SPECIAL}|{_INT_UNSIGNED})(?:\.(?:{_KEY_SPECIAL}|{_INT_UNSIGNED}))+")),
)

_VALUE_RULES: tuple[tuple[str, _Matcher], ...] = (
    (POPEN, _regex(rf"{_WS}*\({_WS}*")),
    (COMMA, _regex(rf"{_WS}*,{_WS}*")),
    (PCLOSE, _regex(rf"{_WS}*\)")),
    (BRACKET_OPEN, _regex(rf"\[{_WS}*")),
    (BRACKET_CLOSE, _regex(rf"{_WS}*\]")),
    (BRACE_OPEN, _regex(rf"\{{{_WS}*")),
    (BRACE_CLOSE, _regex(rf"{_WS}*\}}")),
    (COLON, _regex(rf"{_WS}*:{_WS}*")),
    (EQUAL, _regex(rf"{_WS}*={_WS}*")),
    (FLOAT, _regex(rf"[+-]?(?:{_EXPONENT_FLOAT}|{_POINT_FLOAT}|[Ii][Nn][Ff]|[Nn][Aa][Nn])")),
    (INT, _regex(rf"[+-]?{_INT_UNSIGNED}")),
    (BOOL, _regex(r"[Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]")),
    (NULL, _regex(r"[Nn][Uu][Ll][Ll]")),
    (UNQUOTED_CHAR, _regex(r"[/\-\\+.$%*@?|]")),
    (ID, _regex(_ID)),
    (ESC, _regex(r"(?:\\[\\()\[\]{}:=, \t])+")),
    (WS, _regex(rf"{_WS}+")),
    (QUOTED_VALUE, _match_quoted),
    (INTERPOLATION, _regex(r"\$\{[^}]+\}")),
)


def _next_token(text: str, pos: int, rules: tuple[tuple[str, _Matcher], ...]) -> _Token | None:
    best_kind, best_end = "", pos
    for kind, matcher in rules:
        end = matcher(text, pos)
        if end > best_end:  # strictly longer, so earlier rules win ties
            best_kind, best_end = kind, end
    return _Token(best_kind, text[pos:best_end], pos) if best_end > pos else None


def _tokenize(text: str, value_mode: bool = False) -> list[_Token]:
    """Split ``text`` into tokens, ending with an EOF token.

    Lexing starts in the key mode (unless ``value_mode``); the first ``=``
    switches to the value mode for the rest of the string, as in the grammar.
    """
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        token = _next_token(text, pos, _VALUE_RULES if value_mode else _KEY_RULES)
        if token is None:
            raise OverrideSyntaxError(_bad_character(text, pos, value_mode), pos + 1)
        tokens.append(token)
        value_mode = value_mode or token.kind == EQUAL
        pos += len(token.text)
    tokens.append(_Token(EOF, "", len(text)))
    return tokens


def _bad_character(text: str, pos: int, value_mode: bool) -> str:
    char = text[pos]
    if char in "'\"":
        return f"unterminated {char} quote"
    where = "value" if value_mode else "key"
    hint = " (quote the value)" if value_mode else ""
    return f"character {char!r} is not allowed in an override {where}{hint}"


# --------------------------------------------------------------------------
# Values of primitives
# --------------------------------------------------------------------------

def _unescape(token: _Token) -> str:
    # ESC is a run of backslash-char pairs; un-escaping keeps every second char.
    return token.text[1::2] if token.kind == ESC else token.text


def _single_token_value(token: _Token) -> object:
    if token.kind == QUOTED_VALUE:
        return _unquote(token.text)
    if token.kind == INT:
        try:
            return int(token.text)
        except ValueError:  # Python's limit on int digits; Hydra fails here too
            raise OverrideSyntaxError("integer has too many digits", token.column) from None
    if token.kind == FLOAT:
        return float(token.text)
    if token.kind == BOOL:
        return token.text.lower() == "true"
    if token.kind == NULL:
        return None
    return _unescape(token)


def _primitive_value(tokens: list[_Token]) -> object:
    """A primitive's value: typed if it is one token once surrounding
    whitespace is dropped, else the concatenated (un-escaped) text."""
    if tokens and tokens[0].kind == WS:
        tokens = tokens[1:]
    if tokens and tokens[-1].kind == WS:
        tokens = tokens[:-1]
    if not tokens:
        raise OverrideSyntaxError("a value made only of whitespace")
    if len(tokens) == 1:
        return _single_token_value(tokens[0])
    return "".join(_unescape(token) for token in tokens)


def _unquote(quoted: str) -> str:
    """Un-escape a QUOTED_VALUE token (quotes included).

    Only backslashes that precede a quote are escapes: a run before an inner
    quote is odd (its last one escapes the quote), a run before the closing
    quote is even; both are halved.  Other backslashes are literal.
    """
    quote, body = quoted[0], quoted[1:-1]
    return re.sub(
        r"(\\+)(" + re.escape(quote) + r"|\Z)",
        lambda m: "\\" * (len(m.group(1)) // 2) + m.group(2),
        body,
    )


# --------------------------------------------------------------------------
# Parser
# --------------------------------------------------------------------------

_NOT_SUPPORTED = "not supported here (Megatron Bridge and NeMo-RL apply a single value)"


class _Parser:
    """Recursive descent over the token list, following OverrideParser.g4.

    Forms Hydra accepts but we refuse are recorded and raised only once the
    whole string has parsed, so a real syntax error is reported first.
    """

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._pos = 0
        self._refusal: OverrideSyntaxError | None = None

    # -- token helpers -----------------------------------------------------

    def _peek(self, ahead: int = 0) -> _Token:
        return self._tokens[min(self._pos + ahead, len(self._tokens) - 1)]

    def _take(self) -> _Token:
        token = self._peek()
        self._pos += 1
        return token

    def _accept(self, kind: str) -> _Token | None:
        return self._take() if self._peek().kind == kind else None

    def _expect(self, kind: str, what: str) -> _Token:
        if self._peek().kind != kind:
            raise self._unexpected(f"expected {what}")
        return self._take()

    def _unexpected(self, expectation: str) -> OverrideSyntaxError:
        token = self._peek()
        found = "end of override" if token.kind == EOF else repr(token.text)
        return OverrideSyntaxError(f"{expectation}, found {found}", token.column)

    def _refuse(self, problem: str, token: _Token) -> None:
        if self._refusal is None:
            self._refusal = OverrideSyntaxError(problem, token.column)

    # -- override: prefix key (= value?)? EOF -----------------------------

    def parse(self, text: str) -> Override:
        op = self._prefix()
        key = self._key()
        value: object = None
        has_value = False
        if op == "delete" and self._peek().kind == EOF:
            pass  # `~key`: delete whatever value is there
        else:
            self._expect(EQUAL, "'=' after the key")
            value, has_value = "", False  # Hydra reads `key=` as the empty string
            if self._peek().kind != EOF:
                value, has_value = self._value(), True
        self._expect(EOF, "end of override")
        if self._refusal is not None:
            raise self._refusal
        return Override(op=op, key=key, value=value, has_value=has_value, text=text)

    def _prefix(self) -> OverrideOp:
        if self._accept(TILDE):
            return "delete"
        if self._accept(PLUS):
            return "force_add" if self._accept(PLUS) else "add"
        return "set"

    def _key(self) -> str:
        """key: packageOrGroup (AT package)?"""
        start = self._peek()
        name = self._package_or_group()
        at = self._accept(AT)
        if at is not None:
            self._package()
            self._refuse("config group overrides are not supported ('@package' in the key)", at)
        if name == "":
            self._refuse("empty key", start)
        return name

    def _package_or_group(self) -> str:
        if self._peek().kind == ID and self._peek(1).kind == SLASH:
            start = self._peek()
            parts = [self._take().text]
            while self._accept(SLASH):
                parts.append(self._expect(ID, "a config group name after '/'").text)
            self._refuse("config group overrides are not supported ('/' in the key)", start)
            return "/".join(parts)
        return self._package()

    def _package(self) -> str:
        # The grammar allows an empty package here (Hydra's `_global_`).
        if self._peek().kind in (ID, KEY_SPECIAL, DOT_PATH):
            return self._take().text
        return ""

    # -- values ------------------------------------------------------------

    def _value(self) -> object:
        """value: element | element (COMMA element)+ (a choice sweep)."""
        value = self._element()
        if self._peek().kind == COMMA:
            self._refuse(f"a choice sweep ('a,b') is {_NOT_SUPPORTED}; quote the value "
                         "or write a list as [a,b]", self._peek())
            while self._accept(COMMA):
                self._element()
        return value

    def _element(self) -> object:
        token = self._peek()
        if token.kind == ID and self._peek(1).kind == POPEN:
            self._function()  # parses the call for errors, then refuses it
            return None
        if token.kind == BRACKET_OPEN:
            return self._list()
        if token.kind == BRACE_OPEN:
            return self._dict()
        if token.kind == QUOTED_VALUE:
            return _single_token_value(self._take())
        if token.kind in _PRIMITIVE_KINDS:
            return self._run(_PRIMITIVE_KINDS)
        raise self._unexpected("expected a value")

    def _run(self, kinds: frozenset[str]) -> object:
        start = self._peek()
        tokens: list[_Token] = []
        while self._peek().kind in kinds:
            tokens.append(self._take())
        try:
            return _primitive_value(tokens)
        except OverrideSyntaxError as err:
            raise OverrideSyntaxError(err.problem, err.column or start.column) from None

    def _list(self) -> list[object]:
        self._take()
        items: list[object] = []
        if self._accept(BRACKET_CLOSE):
            return items
        items.append(self._element())
        while self._accept(COMMA):
            items.append(self._element())
        self._expect(BRACKET_CLOSE, "',' or ']' in a list")
        return items

    def _dict(self) -> dict[object, object]:
        self._take()
        pairs: list[tuple[object, object]] = []
        if self._accept(BRACE_CLOSE):
            return {}
        pairs.append(self._dict_pair())
        while self._accept(COMMA):
            pairs.append(self._dict_pair())
        self._expect(BRACE_CLOSE, "',' or '}' in a dict")
        return dict(pairs)  # like Hydra: a repeated key keeps its last value

    def _dict_pair(self) -> tuple[object, object]:
        if self._peek().kind not in _DICT_KEY_KINDS:
            raise self._unexpected("expected an unquoted dict key")
        key = self._run(_DICT_KEY_KINDS)
        self._expect(COLON, "':' after the dict key")
        return key, self._element()

    def _function(self) -> None:
        """function: ID POPEN (argName? element (COMMA argName? element)*)? PCLOSE"""
        name = self._take()
        self._take()
        if not self._accept(PCLOSE):
            self._argument()
            while self._accept(COMMA):
                self._argument()
            self._expect(PCLOSE, "',' or ')' in a function call")
        self._refuse(f"a function call ('{name.text}(...)') is {_NOT_SUPPORTED}; "
                     "quote the value if it is a string", name)

    def _argument(self) -> None:
        if self._peek().kind == ID and self._peek(1).kind == EQUAL:
            self._take()
            self._take()
        self._element()


def parse_override(text: str) -> Override:
    """Parse one ``KEY=VALUE`` override the way Hydra 1.3 does.

    Raises OverrideSyntaxError for anything Hydra rejects and for sweeps,
    function calls, config-group/package overrides and empty keys.
    """
    if not isinstance(text, str):
        raise TypeError(f"an override must be a str, not {type(text).__name__}")
    try:
        return _Parser(_tokenize(text)).parse(text)
    except RecursionError:
        raise OverrideSyntaxError("lists or dicts nested too deeply") from None


# --------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------

def format_value(value: object) -> str:
    """Render a value as override text that Hydra reads back to the same value.

    None, bool, int, float, str, list and dict (nested) are supported.  Strings
    stay unquoted when they read back as themselves, else they are
    single-quoted.  Raises TypeError for other types and ValueError for a dict
    key the override syntax cannot spell (dict keys cannot be quoted).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return _format_float(value)
    if isinstance(value, str):
        return value if _reads_back_unquoted(value) else _quote(value)
    if isinstance(value, list):
        return "[" + ",".join(format_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_format_dict_key(k)}:{format_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write a {type(value).__name__} as an override value")


def _format_float(value: float) -> str:
    return repr(float(value))  # 'inf', '-inf', '1e-05', '0.1': all FLOAT tokens


def _reads_back_unquoted(text: str) -> bool:
    # The token before a value ('=', '[', ',', ':') swallows leading blanks,
    # and a trailing backslash would merge with a following ']' or ',' into an
    # escape, so such strings need quotes even where they would read back alone.
    if not text or text[0] in " \t" or text[-1] in " \t\\":
        return False
    try:
        tokens = _tokenize(text, value_mode=True)[:-1]
    except OverrideSyntaxError:
        return False
    if not all(token.kind in _PRIMITIVE_KINDS for token in tokens):
        return False
    try:
        value = _primitive_value(tokens)
    except OverrideSyntaxError:  # only whitespace
        return False
    return isinstance(value, str) and value == text


def _quote(text: str) -> str:
    """Single-quote ``text``: backslashes before a quote (or before the
    closing quote) are doubled and inner quotes escaped; others stay as is."""
    escaped = re.sub(
        r"(\\*)('|\Z)",
        lambda m: "\\" * (2 * len(m.group(1))) + ("\\'" if m.group(2) else ""),
        text,
    )
    return f"'{escaped}'"


_KEY_ESCAPES = re.compile(r"[\\()\[\]{}:=, \t]")


def _format_dict_key(key: object) -> str:
    # Dict keys cannot be quoted, so strings are written with ESC escapes and
    # then checked: a key like "1" or "true" cannot be spelled as a string.
    if isinstance(key, str):
        text = _KEY_ESCAPES.sub(lambda m: "\\" + m.group(0), key)
    elif key is None or isinstance(key, (bool, int, float)):
        text = format_value(key)
    else:
        raise TypeError(f"cannot write a {type(key).__name__} as an override dict key")
    if not _reads_back_as_dict_key(text, key):
        raise ValueError(f"dict key {key!r} cannot be written in Hydra override syntax")
    return text


def _reads_back_as_dict_key(text: str, key: object) -> bool:
    try:
        tokens = _tokenize(text + ":", value_mode=True)[:-1]
    except OverrideSyntaxError:
        return False
    body, colon = tokens[:-1], tokens[-1]
    if colon.kind != COLON or not body or not all(t.kind in _DICT_KEY_KINDS for t in body):
        return False
    try:
        parsed = _primitive_value(body)
    except OverrideSyntaxError:
        return False
    if isinstance(key, float) and math.isnan(key):
        return isinstance(parsed, float) and math.isnan(parsed)
    return type(parsed) is type(key) and parsed == key
