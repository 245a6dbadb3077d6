"""Resolving interpolations natively or on a pruned tree answers as OmegaConf on the whole tree does: the same
values, the same errors (checks/loaders/interpolation.py, Notes [Native evaluation] and [Pruned resolution]).

Each case resolves three ways: as the checker does (native evaluation first), with the native evaluation
switched off (so OmegaConf gets the pruned tree), and with the pruning switched off too (the whole tree goes to
OmegaConf, as before either existed). The three outcomes must be equal. Each case also says which layer should
answer it, so an evaluation or a pruning that gave up everywhere would fail here too. The sweep at the end does
the same for every NeMo-RL example config (NEMO_RL_GIT, a git directory of NVIDIA-NeMo/RL; skipped without it).
"""

from __future__ import annotations

import math
import os
import string
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.common import nemo_rl_examples
from checks import loaders
from checks.config import Origin, Setting
from checks.errors import InputError
from checks.loaders import interpolation
from checks.loaders import tree as trees
from checks.loaders.common import Request


def _tree(plain: dict[Any, Any], keys: tuple[Any, ...] = ()) -> trees.Tree:
    """Keys kept as they are (an int key stays an int, as the YAML reader leaves it)."""
    return {k: _tree(v, keys + (k,)) if isinstance(v, dict) else
            Setting(v, Origin("cfg.yaml", 1, key=".".join(map(str, keys + (k,))))) for k, v in plain.items()}


def _outcome(tree: trees.Tree, wanted: list[tuple[Any, ...]], env: dict[str, str]) -> tuple[Any, ...]:
    try:
        out = interpolation.Resolver(tree, env).resolve(tree, wanted)
    except InputError as err:
        return ("refused", err.render())
    return ("resolved", [(keys, _comparable(s.value), s.origin.note) for keys, s in trees.leaves(out)])


def _comparable(value: Any) -> Any:
    """The value with NaN (``mul`` by a ``nan`` literal) made equal to itself, so that outcomes compare."""
    if isinstance(value, float) and math.isnan(value):
        return "<nan>"
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


def _record_creates(m: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every plain tree given to OmegaConf.create from now on, in order."""
    built: list[dict[str, Any]] = []
    real_create = interpolation._create

    def recording(omegaconf: Any, first: Setting, given: dict[str, Any]) -> Any:
        built.append(given)
        return real_create(omegaconf, first, given)

    m.setattr(interpolation, "_create", recording)
    return built


def _record_omegaconf(m: pytest.MonkeyPatch) -> list[str]:
    """The key of the first value each time OmegaConf is asked for from now on (none: answered natively)."""
    asked: list[str] = []
    real = interpolation._omegaconf

    def recording(first: Setting) -> Any:
        asked.append(first.origin.key)
        return real(first)

    m.setattr(interpolation, "_omegaconf", recording)
    return asked


def _native_off(m: pytest.MonkeyPatch) -> None:
    """Resolve as before the native evaluation existed: OmegaConf on the pruned tree first."""
    m.setattr(interpolation, "_in_subset", lambda value: False)


def _whole_tree_only(m: pytest.MonkeyPatch) -> None:
    """Resolve as before the pruning existed: OmegaConf on the whole tree, always."""
    _native_off(m)
    m.setattr(interpolation, "_pruned", lambda tree, todo: None)


def _three(plain: dict[Any, Any], wanted: list[tuple[Any, ...]],
           env: dict[str, str] | None = None) -> tuple[list[tuple[Any, ...]], bool, bool]:
    """([native, pruned, whole-tree outcome], whether the native evaluation answered, whether the pruned run
    needed the whole tree)."""
    tree, env = _tree(plain), env or {}
    with pytest.MonkeyPatch.context() as m:
        asked = _record_omegaconf(m)
        native = _outcome(tree, wanted, env)
    with pytest.MonkeyPatch.context() as m:
        _native_off(m)
        built = _record_creates(m)
        pruned = _outcome(tree, wanted, env)
    with pytest.MonkeyPatch.context() as m:
        _whole_tree_only(m)
        whole = _outcome(tree, wanted, env)
    return [native, pruned, whole], not asked, trees.plain(tree) in built


def _nodes(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_nodes(v) for v in value)
    return 1


# (config, wanted leaves, environment, the layer that answers: native, pruned (OmegaConf) or whole (OmegaConf))
CASES: dict[str, tuple[dict[Any, Any], list[tuple[Any, ...]], dict[str, str], str]] = {
    "chain of absolute references": (
        {"a": "${b}", "b": "${c.d}", "c": {"d": 3, "e": 4}, "f": 5}, [("a",)], {}, "native"),
    "relative references": (
        {"p": {"x": 1, "y": "${.x}", "z": {"w": "${..x}", "v": "${...top}"}}, "top": 7, "other": 0},
        [("p", "y"), ("p", "z", "w"), ("p", "z", "v")], {}, "native"),
    "relative reference inside a list item": (
        {"l": [{"q": "${.r}", "r": 5}, "${..n}"], "n": 6, "other": 0}, [("l",)], {}, "native"),
    "through an interpolated mapping": (
        {"a": {"b": "${x}"}, "x": {"c": 1}, "s": "${a.b.c}", "other": 0}, [("s",)], {}, "pruned"),
    "a reference to a mapping holding interpolations": (
        {"s": "${m}", "m": {"k": "${n}", "j": "text ${n}"}, "n": 2, "other": 0}, [("s",)], {}, "native"),
    "NeMo-RL's resolvers, nested": (
        {"a": "${mul:${b}, ${add:${c}, 2}}", "d": "${div:${b},4}", "e": "${max:${b}, 3}", "b": 8, "c": 1,
         "other": 0}, [("a",), ("d",), ("e",)], {}, "native"),
    "oc.env, set and defaulted": (
        {"a": "${oc.env:HOME_DIR}/x", "b": "${oc.env:UNSET,fallback}", "other": 0}, [("a",), ("b",)],
        {"HOME_DIR": "/h"}, "native"),
    "text around an interpolation": (
        {"name": "run-${n}-of-${m.k}", "n": 1, "m": {"k": "z"}, "other": 0}, [("name",)], {}, "native"),
    "a missing key": (
        {"a": "${nope.x}", "b": 1}, [("a",)], {}, "whole"),
    "a missing value": (
        {"a": "${b}", "b": "???", "c": 1}, [("a",)], {}, "whole"),
    "oc.env unset without a default": (
        {"a": "${oc.env:UNSET}", "b": 1}, [("a",)], {}, "whole"),
    "a cycle": (
        {"a": "${b}", "b": "${a}", "c": 1}, [("a",)], {}, "whole"),
    "oc.select's default for a missing key": (
        {"a": "${oc.select:gone,9}", "b": 1}, [("a",)], {}, "whole"),
    "oc.select of a key that is present": (
        {"a": "${oc.select:b,9}", "b": 1}, [("a",)], {}, "whole"),
    "a quoted argument": (
        {"a": "${oc.env:UNSET,'x,y'}", "b": 1}, [("a",)], {}, "whole"),
    "an escaped interpolation": (
        {"a": "\\${b} and ${b}", "b": 1}, [("a",)], {}, "whole"),
    "a nested key name": (
        {"a": "${m.${k}}", "k": "x", "m": {"x": 4}}, [("a",)], {}, "whole"),
    "a malformed interpolation elsewhere": (
        {"a": "${b}", "b": 1, "c": "${oops"}, [("a",)], {}, "whole"),
    "a key OmegaConf refuses elsewhere": (
        {"a": "${b}", "b": 1, "c": {1.5: "x"}}, [("a",)], {}, "whole"),
    "a value OmegaConf refuses elsewhere": (
        {"a": "${b}", "b": 1, "c": b"bytes"}, [("a",)], {}, "whole"),
    "a relative reference above the root": (
        {"a": "${..b}", "b": 1}, [("a",)], {}, "whole"),
    "an index into a list": (
        {"a": "${l.1}", "l": [1, "${n}"], "n": 2, "other": 0}, [("a",)], {}, "native"),
    # at the native evaluation's edges: what it answers, and what it leaves to OmegaConf
    "oc.env as the whole value, null and bool defaults": (
        {"a": "${oc.env:HOME_DIR}", "b": "${oc.env:UNSET, null}", "c": "${oc.env:UNSET,TRUE}", "other": 0},
        [("a",), ("b",), ("c",)], {"HOME_DIR": "/h"}, "native"),
    "text joining a float, a bool and null": (
        {"a": "lr${b}-${c}-${d}", "b": 1.5e-05, "c": True, "d": None, "other": 0}, [("a",)], {}, "native"),
    "a reference to a list": (
        {"a": "${l}", "l": [1, "${n}", {"k": "${n}"}], "n": 3, "other": 0}, [("a",)], {}, "native"),
    "mul of a string": (
        {"a": "${mul:${b}, 2}", "b": "ab", "other": 0}, [("a",)], {}, "native"),
    "signed int literals": (
        {"a": "${add:-3, +2}", "b": "${max:0, ${c}}", "c": -1, "other": 0}, [("a",), ("b",)], {}, "native"),
    "a nan literal (pruned and whole give NaN; the native evaluation leaves it)": (
        {"a": 0, "b": "${mul:${a}, nan}", "other": 0}, [("b",)], {}, "pruned"),
    "a float literal": (
        {"a": "${mul:${b}, 1.5}", "b": 2, "other": 0}, [("a",)], {}, "pruned"),
    "a literal OmegaConf reads as a float": (
        {"a": "${oc.env:UNSET,inf}", "other": 0}, [("a",)], {}, "pruned"),
    "a dashed name literal": (
        {"a": "${oc.env:UNSET, a-b}", "other": 0}, [("a",)], {}, "pruned"),
    "a leading-zero literal": (
        {"a": "${oc.env:UNSET,01}", "other": 0}, [("a",)], {}, "pruned"),
    "a mapping inside text": (
        {"a": "x${m}", "m": {"k": 1}, "other": 0}, [("a",)], {}, "pruned"),
    "a resolver given a mapping": (
        {"a": "${mul:${m}, 2}", "m": {"k": 1}, "other": 0}, [("a",)], {}, "whole"),
    "a resolver that raises": (
        {"a": "${div:${b}, 0}", "b": 1, "other": 0}, [("a",)], {}, "whole"),
    "a resolver given three arguments": (
        {"a": "${add:1, 2, 3}", "other": 0}, [("a",)], {}, "whole"),
    "a missing value inside a referenced mapping": (
        {"a": "${m}", "m": {"k": "???"}, "other": 0}, [("a",)], {}, "pruned"),
}


@pytest.mark.parametrize("name", CASES)
def test_each_layer_answers_as_the_whole_tree(name: str) -> None:
    plain, wanted, env, layer = CASES[name]
    (native, pruned, whole), answered_natively, whole_built = _three(plain, wanted, env)
    assert native == pruned == whole
    answered_by = "native" if answered_natively else "whole" if whole_built else "pruned"
    assert answered_by == layer


def test_a_grammar_error_elsewhere_is_omegaconfs_own() -> None:
    (native, _, _), _, _ = _three({"a": "${b}", "b": 1, "c": "${oops"}, [("a",)])
    assert native[0] == "refused" and "OmegaConf cannot read this config" in native[1]
    assert "no viable alternative at input '${oops'" in native[1]


# --- generated configs: references right and wrong, the subset and beyond it ---------------------------------

KEYS = ["a", "b", "c"]
LITERALS = ["0", "3", "-2", " 1 ", "1.5", "true", "Null", "x", "x-y", "07", "nan"]


@st.composite
def _interpolation(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(st.sampled_from(["abs", "abs", "rel", "mul", "env", "select", "broken"] if depth < 2 else
                                ["abs", "rel"]))
    path = ".".join(draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3)))
    if kind == "abs":
        return "${" + path + "}"
    if kind == "rel":
        return "${" + "." * draw(st.integers(1, 3)) + path + "}"
    if kind == "mul":
        return "${mul:" + draw(_interpolation(depth + 1)) + ", " + draw(st.sampled_from(LITERALS)) + "}"
    if kind == "env":
        return "${oc.env:" + draw(st.sampled_from(["SET", "UNSET"])) + "," + draw(st.sampled_from(LITERALS)) + "}"
    if kind == "select":
        return "${oc.select:" + path + ",7}"
    return "${" + path


_leaf = st.one_of(st.integers(0, 5), st.sampled_from(["x", "???", 2.5, True, None]), _interpolation(),
                  st.builds(lambda a, b: f"{a}-{b}", _interpolation(), st.text(string.ascii_lowercase, max_size=2)),
                  st.lists(st.one_of(st.integers(0, 3), _interpolation()), max_size=2))
_config = st.recursive(_leaf, lambda inner: st.dictionaries(st.sampled_from(KEYS), inner, min_size=1, max_size=3),
                       max_leaves=10)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KEYS), _config, min_size=1, max_size=3), st.data())
def test_generated_configs_resolve_alike(plain: dict[str, Any], data: st.DataObject) -> None:
    leaves = [keys for keys, s in trees.leaves(_tree(plain)) if interpolation.needs_resolution(s)]
    if not leaves:
        return
    wanted = data.draw(st.lists(st.sampled_from(leaves), min_size=1, max_size=3, unique=True))
    (native, pruned, whole), _, _ = _three(plain, wanted, {"SET": "1"})
    assert native == pruned == whole



_FRAGMENTS = ["${", "}", "a", "b.c", "..", ".", ":", ",", " ", "mul:", "add:", "oc.env:", "oc.select:", "1", "-",
              "x_y", "$", "{", "1.5", "'", "\\", "null"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=12).map("".join))
def test_what_the_subset_parses_omegaconf_accepts(text: str) -> None:
    """The native evaluation runs only where every interpolation in the tree parses in the subset; that stands for
    OmegaConf.create not failing only if OmegaConf's grammar accepts every such string."""
    omegaconf = pytest.importorskip("omegaconf")
    if "${" not in text or interpolation._parse(text) is None:
        return
    omegaconf._utils.get_value_kind(text, strict_interpolation_validation=True)  # raises on a grammar error


# --- every NeMo-RL example config ------------------------------------------------------------------------------

NEMO_RL_GIT = os.environ.get("NEMO_RL_GIT")


def test_every_nemo_rl_example_loads_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not NEMO_RL_GIT:
        pytest.skip("set NEMO_RL_GIT to an NVIDIA-NeMo/RL git directory (a bare mirror will do)")
    configs = nemo_rl_examples(NEMO_RL_GIT, tmp_path)

    def load_all() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for path in sorted(configs.rglob("*.yaml")):
            try:
                # A spelling (how to write a key back) compares by identity; it is built from key names alone.
                out[str(path)] = [replace(c, spelling=None) for c in loaders.load(Request(files=(str(path),)))]
            except InputError as err:
                out[str(path)] = err.render()
        return out

    asked = _record_omegaconf(monkeypatch)
    native = load_all()
    asked_natively = list(asked)
    _native_off(monkeypatch)
    built = _record_creates(monkeypatch)
    pruned = load_all()
    pruned_count = len(built)
    _whole_tree_only(monkeypatch)
    whole = load_all()
    assert native == pruned == whole
    # NeMo-RL's examples stay inside the native subset: OmegaConf is needed for none of them
    assert asked_natively == [], f"OmegaConf was needed for {len(asked_natively)}, the first {asked_natively[:3]}"
    assert pruned_count >= 250  # one OmegaConf build per config that interpolates what the checker reads
    largest_pruned = max(map(_nodes, built[:pruned_count]))
    assert largest_pruned < max(map(_nodes, built[pruned_count:])) / 4, "the pruned trees are not much smaller"
