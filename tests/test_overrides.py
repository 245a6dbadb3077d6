"""checks.loaders.overrides against Hydra 1.3's own override parser.

The module re-implements Hydra's override grammar without importing Hydra, so
Hydra (a test-only dependency) is the oracle: explicit cases pin the typing
rules, and hypothesis compares both parsers on generated strings.
"""

from __future__ import annotations

import string
import subprocess
import sys
from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.loaders.overrides import Override, OverrideSyntaxError, format_value, parse_override

pytest.importorskip("hydra")

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType, QuotedString

# --------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------

_HYDRA = OverridesParser.create()
_FUNCTION_CALLS: list[str] = []
_hydra_eval = _HYDRA.functions.eval


def _recording_eval(call: Any) -> Any:
    # A function such as int(3) evaluates to a plain element, so the only way
    # to know Hydra saw a function call is to watch it being evaluated.
    _FUNCTION_CALLS.append(call.name)
    return _hydra_eval(call)


_HYDRA.functions.eval = _recording_eval  # type: ignore[method-assign]

REJECTED = "rejected"          # Hydra raises
NOT_A_VALUE = "not a value"    # Hydra parses it, but not to one plain value
_OPS = {OverrideType.CHANGE: "set", OverrideType.ADD: "add",
        OverrideType.FORCE_ADD: "force_add", OverrideType.DEL: "delete"}


def _plain(value: Any) -> Any:
    if isinstance(value, QuotedString):
        return value.text
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def hydra_reading(text: str) -> Any:
    """(op, key, value) as Hydra reads ``text``, or REJECTED / NOT_A_VALUE."""
    _FUNCTION_CALLS.clear()
    try:
        override = _HYDRA.parse_overrides([text])[0]
    except Exception:
        return REJECTED
    key = override.key_or_group
    if (_FUNCTION_CALLS or override.is_sweep_override() or override.package is not None
            or "/" in key or key == ""):
        return NOT_A_VALUE
    return _OPS[override.type], key, _plain(override._value)


def same(a: Any, b: Any) -> bool:
    """Equal, with identical types all the way down (True is not 1, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            same(ka, kb) and same(va, vb) for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)  # nan equals nan, and -0.0 differs from 0.0
    return bool(a == b)


def check_against_hydra(text: str) -> None:
    expected = hydra_reading(text)
    try:
        got = parse_override(text)
    except OverrideSyntaxError as err:
        assert expected in (REJECTED, NOT_A_VALUE), f"{text!r}: we raise ({err}), Hydra reads {expected!r}"
        assert "\n" not in str(err)
        return
    assert expected not in (REJECTED, NOT_A_VALUE), f"{text!r}: we read {got}, Hydra: {expected}"
    op, key, value = expected
    assert (got.op, got.key) == (op, key), text
    assert same(got.value, value), f"{text!r}: we read {got.value!r}, Hydra {value!r}"
    assert got.text == text


# --------------------------------------------------------------------------
# Explicit cases
# --------------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")

VALUES: list[tuple[str, object]] = [
    # Bridge / NeMo-RL style
    ("true", True), ("False", False), ("TRUE", True), ("null", None), ("NuLl", None),
    ("0", 0), ("-7", -7), ("+7", 7), ("1_000_000", 1000000), ("-0", 0),
    ("0.5", 0.5), (".5", 0.5), ("5.", 5.0), ("1e3", 1000.0), ("1.e-3", 0.001),
    ("-1_0.2_5E+1_0", -10.25e10), ("inf", INF), ("-Inf", -INF), ("nan", NAN), ("+NaN", NAN),
    # several tokens, or not a number after all: strings
    ("1.5.2", "1.5.2"), ("01", "01"), ("-foo", "-foo"), ("1abc", "1abc"), ("foo bar", "foo bar"),
    ("truex", "truex"), ("infinity", "infinity"), ("nullable", "nullable"), ("1e", "1e"),
    ("1_", "1_"), ("a-b_c", "a-b_c"), ("/tmp/x.pt", "/tmp/x.pt"), ("a:b", "a:b"), (":", ":"),
    ("$", "$"), ("\\a", "\\a"), ("a\tb", "a\tb"), ("  spaced  ", "spaced"), ("a  b", "a  b"),
    # escapes and quotes
    ("a\\,b", "a,b"), ("\\ x\\ ", " x "), ("\\\\", "\\"), ("\\[1\\]", "[1]"),
    ("'1'", "1"), ('"true"', "true"), ("'a,b'", "a,b"), ("''", ""), ("'it\\'s'", "it's"),
    ("'a\\b'", "a\\b"), ("'a\\\\'", "a\\"), ("\"a'b\"", "a'b"), ("'#; é'", "#; é"),
    # interpolations stay strings
    ("${model.x}", "${model.x}"), ("${oc.env:USER,me}", "${oc.env:USER,me}"), ("x${a}y", "x${a}y"),
    # containers
    ("[]", []), ("[ ]", []), ("[core_attn,attn_proj]", ["core_attn", "attn_proj"]),
    ("[1, 2.0 ,true,null,'x']", [1, 2.0, True, None, "x"]), ("[a,[1,[]]]", ["a", [1, []]]),
    ("{}", {}), ("{a:1,b:[x]}", {"a": 1, "b": ["x"]}), ("{ a : 1 }", {"a": 1}),
    ("{1:a,true:b,null:c}", {1: "a", True: "b", None: "c"}), ("{a:1,a:2}", {"a": 2}),
    ("{a\\:b:c:d}", {"a:b": "c:d"}), ("[ : ]", [": "]),
    # empty value
    ("", ""), ("   ", ""),
]


@pytest.mark.parametrize(("value_text", "expected"), VALUES)
def test_value_typing(value_text: str, expected: object) -> None:
    text = f"model.x={value_text}"
    got = parse_override(text)
    assert same(got.value, expected), (got.value, expected)
    assert got.has_value == (value_text.strip() != "")
    check_against_hydra(text)


KEYS: list[tuple[str, str, str, object, bool]] = [
    ("model.cpu_offloading=true", "set", "model.cpu_offloading", True, True),
    ("+optimizer.optimizer_offload_fraction=0.5", "add", "optimizer.optimizer_offload_fraction", 0.5, True),
    ("++a.b=1", "force_add", "a.b", 1, True),
    ("~model.x", "delete", "model.x", None, False),
    ("~model.x=", "delete", "model.x", "", False),
    ("~model.x=null", "delete", "model.x", None, True),
    ("key=", "set", "key", "", False),
    ("layers.0.attn=x", "set", "layers.0.attn", "x", True),
    ("0.a=1", "set", "0.a", 1, True),
    ("$a.b$=1", "set", "$a.b$", 1, True),
    ("a-b.c_d=1", "set", "a-b.c_d", 1, True),
    ("k= 1", "set", "k", 1, True),
]


@pytest.mark.parametrize(("text", "op", "key", "value", "has_value"), KEYS)
def test_keys_and_ops(text: str, op: str, key: str, value: object, has_value: bool) -> None:
    assert parse_override(text) == Override(op=op, key=key, value=value,  # type: ignore[arg-type]
                                            has_value=has_value, text=text)
    check_against_hydra(text)


ERRORS: list[tuple[str, str]] = [
    ("model.x", "expected '='"), ("=1", "empty key"), ("+=1", "empty key"), ("~", "empty key"),
    ("db/mysql=x", "config group overrides are not supported"),
    ("db@pkg=x", "config group overrides are not supported"),
    ("k=a,b", "choice sweep"), ("k=[a],[b]", "choice sweep"),
    ("k=int(3)", "function call"), ("k=choice(a,b)", "function call"),
    ("k=range(1,5)", "function call"), ("k=[str(1)]", "function call"), ("k=glob(*)", "function call"),
    ("k=#1", "'#'"), ("k=a;b", "';'"), ("k=!", "'!'"), ("k=<", "'<'"), ("k=é", "'é'"),
    ("k=\u212a", "'\u212a'"), ("k=\u0131nf", "'\u0131'"), ("k=a\nb", "'\\n'"),
    ("a b=1", "not allowed in an override key"), ("k =1", "not allowed"), ("a.01=1", "'1'"),
    ("a.b.=1", "'.'"), ("+++a=1", "column 3"), ("~+a=1", "column 2"),
    ("k='abc", "unterminated"), ("k='a'b'", "unterminated"), ("k='\\'", "unterminated"),
    ("k='a'b", "column 6"), ("k='a' ", "column 6"), ("k=a=b", "'='"), ("k=[1,2", "end of override"),
    ("k=[,]", "expected a value"), ("k=[a,]", "expected a value"), ("k=[a] ", "column 6"),
    ("k={'a':1}", "dict key"), ("k={:1}", "dict key"), ("k={a:}", "expected a value"),
    ("k={a}", "':'"), ("k=${a${b}}", "column 10"), ("k=${}", "'{'"), ("k=a(", "expected"),
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_errors(text: str, message: str) -> None:
    with pytest.raises(OverrideSyntaxError) as caught:
        parse_override(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert caught.value.column is not None and f"column {caught.value.column}" in str(caught.value)
    check_against_hydra(text)


def test_override_is_frozen() -> None:
    with pytest.raises(FrozenInstanceError):
        parse_override("a=1").value = 2  # type: ignore[misc]


def test_non_string_input() -> None:
    with pytest.raises(TypeError):
        parse_override(None)  # type: ignore[arg-type]


def test_deep_nesting_is_a_syntax_error() -> None:
    with pytest.raises(OverrideSyntaxError):
        parse_override("k=" + "[" * 5000 + "]" * 5000)


@pytest.mark.parametrize("text", ["k=" + "1" * 5000, "k={" + "1" * 5000 + ":a}"])
def test_overlong_integer_is_a_syntax_error(text: str) -> None:
    # int() refuses more than 4300 digits; Hydra then fails with ValueError.
    with pytest.raises(OverrideSyntaxError, match="too many digits"):
        parse_override(text)
    check_against_hydra(text)


@pytest.mark.parametrize("module", ["checks.loaders.overrides", "checks.loaders.tree", "checks.loaders.common",
                                    "checks.loaders.apply", "checks.loaders.bridge_recipe"])
def test_module_imports_neither_hydra_nor_omegaconf(module: str) -> None:
    code = (f"import sys, {module}; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('hydra', 'omegaconf', 'antlr4')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


FORMATTED: list[tuple[object, str]] = [
    (None, "null"), (True, "true"), (False, "false"), (-3, "-3"), (0.5, "0.5"), (1e-05, "1e-05"),
    (INF, "inf"), (-INF, "-inf"), (NAN, "nan"), ("core_attn", "core_attn"), ("a b", "a b"),
    ("1.5.2", "1.5.2"), ("${x}", "${x}"), ("", "''"), ("true", "'true'"), ("1", "'1'"),
    ("a,b", "'a,b'"), ("it's", "'it\\'s'"), ("a\\", "'a\\\\'"), (" x", "' x'"), ("é", "'é'"),
    (["core_attn", "attn_proj"], "[core_attn,attn_proj]"), ({"a": 1, "b": [None]}, "{a:1,b:[null]}"),
    ({"a:b": 1, 2: "x"}, "{a\\:b:1,2:x}"),
]


@pytest.mark.parametrize(("value", "text"), FORMATTED)
def test_format_value(value: object, text: str) -> None:
    assert format_value(value) == text
    assert same(parse_override("k=" + text).value, value)


@pytest.mark.parametrize("key", ["1", "true", "", "é", "it's", "a\nb"])
def test_format_value_refuses_unspellable_dict_keys(key: str) -> None:
    with pytest.raises(ValueError):
        format_value({key: 1})


def test_format_value_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        format_value((1, 2))


# --------------------------------------------------------------------------
# Differential tests
# --------------------------------------------------------------------------

_NOISE = "aeEfilnrstuz_AINFTZ0159 -+.$%*@?|/\\:=,()[]{}'\"\t~#;!<é\u212a\u0131\n"
_SETTINGS = settings(max_examples=700, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow])

# Mostly well-formed pieces (so that many strings parse), with a few broken ones.
_name = st.from_regex(r"[a-zA-Z_$][a-zA-Z0-9_$-]{0,4}", fullmatch=True)
_valid_segment = st.one_of(_name, st.sampled_from(["0", "1", "10"]))
_dotted = st.builds(lambda first, rest: ".".join([first, *rest]), _name, st.lists(_valid_segment, max_size=2))
_key = st.one_of(  # what Hydra accepts, though we refuse the group and empty ones
    _dotted, _dotted, _dotted, _dotted,
    st.sampled_from(["", "db/mysql", "a@b", "@b", "a@", "a/b@c.d", "hydra.run.dir"]))
_any_key = st.one_of(
    _key,
    st.lists(st.one_of(_valid_segment, st.sampled_from(["01", "a.", "", "1_0"])), min_size=1, max_size=3)
    .map(".".join),
    st.sampled_from(["a b", "a:b", "a/", "+++a", "~+a", "a=b"]),
)
_prefix = st.sampled_from(["", "", "", "", "+", "++", "~"])

_int = st.from_regex(r"[+-]?(?:0|[1-9](?:_?[0-9]){0,3})", fullmatch=True)
_float = st.one_of(
    st.from_regex(r"[+-]?(?:[0-9_]{0,3}\.[0-9_]{0,3}(?:[eE][+-]?[0-9_]{1,3})?|[0-9]{1,2}[eE][+-]?[0-9_]{1,2})",
                  fullmatch=True),
    st.sampled_from(["inf", "-INF", "NaN", "+nan", "iNf", "infinity", "nan0"]),
    st.floats().map(repr),
)
_word = st.one_of(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_-]{0,5}", fullmatch=True),
                  st.sampled_from(["true", "False", "TRUE", "truex", "null", "NULL", "nullx", "e", "E5"]))
_key_token = st.one_of(
    _int, _float, _word,
    st.sampled_from(list("/-\\+.$%*@?|") + [" ", "\t", "  "]),
    st.sampled_from(["\\\\", "\\(", "\\)", "\\[", "\\]", "\\{", "\\}", "\\:", "\\=", "\\,",
                     "\\ ", "\\\t"]),
)
_token = st.one_of(
    _key_token, _key_token,
    st.sampled_from([":", " : ", ": "]),
    st.from_regex(r"\$\{[a-z.:, ]{1,5}\}", fullmatch=True),
    st.from_regex(r"\$\{[a-z.:, ]{0,5}\}?", fullmatch=True),
)
_primitive = st.lists(_token, min_size=1, max_size=4).map("".join)
_dict_key_text = st.one_of(st.lists(_key_token, min_size=1, max_size=3).map("".join), _primitive)
_quoted = st.one_of(
    st.builds(lambda q, body: q + body + q, st.sampled_from(["'", '"']),
              st.text(alphabet="ab '\"\\,", max_size=6)),
    st.lists(st.sampled_from(["a", " ", ",", '"', "\\'", "\\\\\\'", "\\b", "#"]), max_size=4)
    .map(lambda parts: "'" + "".join(parts) + "'"),
)
_sep = st.sampled_from([",", ", ", " , ", ",\t"])


def _containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    items = st.lists(children, max_size=3)
    pair = st.builds(lambda k, c, v: k + c + v, _dict_key_text, st.sampled_from([":", " : ", ":"]), children)
    return st.one_of(
        st.builds(lambda xs, s, o, c: o + s.join(xs) + c, items, _sep,
                  st.sampled_from(["[", "[ "]), st.sampled_from(["]", " ]"])),
        st.builds(lambda ps, s: "{" + s.join(ps) + "}", st.lists(pair, max_size=3), _sep),
        st.builds(lambda f, xs, s: f + "(" + s.join(xs) + ")",
                  st.sampled_from(["int", "str", "float", "bool", "choice", "range", "glob", "sort", "foo"]),
                  items, _sep),
    )


_element = st.recursive(st.one_of(_primitive, _quoted), _containers, max_leaves=6)
_value = st.one_of(_element, _element, st.lists(_element, min_size=2, max_size=3).map(",".join), st.just(""))
_structured = st.builds(lambda p, k, eq, v: p + k + eq + v, _prefix, _key,
                        st.sampled_from(["=", "=", "=", "= ", ""]), _value)


@st.composite
def _mutated(draw: st.DrawFn) -> str:
    # One random character inserted or replaced, to probe token boundaries.
    text = draw(_structured)
    index = draw(st.integers(0, len(text)))
    char = draw(st.sampled_from(_NOISE))
    drop = draw(st.integers(0, 1))
    return text[:index] + char + text[index + drop:]


@_SETTINGS
@given(_structured)
def test_structured_overrides_match_hydra(text: str) -> None:
    check_against_hydra(text)


@_SETTINGS
@given(st.one_of(_mutated(), st.text(alphabet=_NOISE, max_size=20), st.text(max_size=20),
                 st.builds(lambda k, v: k + "=" + v, _any_key, st.text(alphabet=_NOISE, max_size=16))))
def test_random_text_matches_hydra(text: str) -> None:
    check_against_hydra(text)


def _spellable_key(key: object) -> bool:
    try:
        format_value({key: None})
    except ValueError:
        return False
    return True


_dict_key = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "_-./$%*@?|:=,()[]{} \t\\", min_size=1, max_size=6),
    st.integers(), st.booleans(), st.none(), st.floats(),
).filter(_spellable_key)
_python_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
              st.text(alphabet="abe1._-+ ,:'\"\\$[]{}()\t", max_size=8)),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(_dict_key, children, max_size=3)),
    max_leaves=8,
)


@_SETTINGS
@given(_python_value)
def test_format_value_round_trips(value: object) -> None:
    text = "k=" + format_value(value)
    assert same(parse_override(text).value, value), text
    reading = hydra_reading(text)
    assert reading not in (REJECTED, NOT_A_VALUE), text
    assert same(reading[2], value), (text, reading)
