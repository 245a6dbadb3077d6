"""Resolving interpolations on a pruned tree answers as OmegaConf on the whole tree does: the same values, the
same errors (checks/loaders/interpolation.py, Note [Pruned resolution]).

Each case resolves twice, once as the checker does and once with the pruning switched off (``_pruned`` made to
return None, so the whole tree goes to OmegaConf as before the pruning existed), and the two outcomes must be equal.
Cases in the subset the pruning reads must also have been answered without building the whole tree, so a
pruning that gave up everywhere would fail here too. The sweep at the end does the same for every NeMo-RL
example config (NEMO_RL_GIT, a git directory of NVIDIA-NeMo/RL; skipped without it).
"""

from __future__ import annotations

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
    return ("resolved", [(keys, s.value, s.origin.note) for keys, s in trees.leaves(out)])


def _record_creates(m: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every plain tree given to OmegaConf.create from now on, in order."""
    built: list[dict[str, Any]] = []
    real_create = interpolation._create

    def recording(omegaconf: Any, first: Setting, given: dict[str, Any]) -> Any:
        built.append(given)
        return real_create(omegaconf, first, given)

    m.setattr(interpolation, "_create", recording)
    return built


def _whole_tree_only(m: pytest.MonkeyPatch) -> None:
    """Resolve as before the pruning existed: the whole tree, always."""
    m.setattr(interpolation, "_pruned", lambda tree, todo: None)


def _both(plain: dict[Any, Any], wanted: list[tuple[Any, ...]],
          env: dict[str, str] | None = None) -> tuple[tuple[Any, ...], tuple[Any, ...], bool]:
    """(pruned outcome, whole-tree outcome, whether the pruned run needed the whole tree)."""
    tree, env = _tree(plain), env or {}
    with pytest.MonkeyPatch.context() as m:
        built = _record_creates(m)
        pruned = _outcome(tree, wanted, env)
    with pytest.MonkeyPatch.context() as m:
        _whole_tree_only(m)
        whole = _outcome(tree, wanted, env)
    return pruned, whole, trees.plain(tree) in built


def _nodes(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(_nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_nodes(v) for v in value)
    return 1


# (config, wanted leaves, environment, whether the pruned tree answers on its own)
CASES: dict[str, tuple[dict[Any, Any], list[tuple[Any, ...]], dict[str, str], bool]] = {
    "chain of absolute references": (
        {"a": "${b}", "b": "${c.d}", "c": {"d": 3, "e": 4}, "f": 5}, [("a",)], {}, True),
    "relative references": (
        {"p": {"x": 1, "y": "${.x}", "z": {"w": "${..x}", "v": "${...top}"}}, "top": 7, "other": 0},
        [("p", "y"), ("p", "z", "w"), ("p", "z", "v")], {}, True),
    "relative reference inside a list item": (
        {"l": [{"q": "${.r}", "r": 5}, "${..n}"], "n": 6, "other": 0}, [("l",)], {}, True),
    "through an interpolated mapping": (
        {"a": {"b": "${x}"}, "x": {"c": 1}, "s": "${a.b.c}", "other": 0}, [("s",)], {}, True),
    "a reference to a mapping holding interpolations": (
        {"s": "${m}", "m": {"k": "${n}", "j": "text ${n}"}, "n": 2, "other": 0}, [("s",)], {}, True),
    "NeMo-RL's resolvers, nested": (
        {"a": "${mul:${b}, ${add:${c}, 2}}", "d": "${div:${b},4}", "e": "${max:${b}, 3}", "b": 8, "c": 1,
         "other": 0}, [("a",), ("d",), ("e",)], {}, True),
    "oc.env, set and defaulted": (
        {"a": "${oc.env:HOME_DIR}/x", "b": "${oc.env:UNSET,fallback}", "other": 0}, [("a",), ("b",)],
        {"HOME_DIR": "/h"}, True),
    "text around an interpolation": (
        {"name": "run-${n}-of-${m.k}", "n": 1, "m": {"k": "z"}, "other": 0}, [("name",)], {}, True),
    "a missing key": (
        {"a": "${nope.x}", "b": 1}, [("a",)], {}, False),
    "a missing value": (
        {"a": "${b}", "b": "???", "c": 1}, [("a",)], {}, False),
    "oc.env unset without a default": (
        {"a": "${oc.env:UNSET}", "b": 1}, [("a",)], {}, False),
    "a cycle": (
        {"a": "${b}", "b": "${a}", "c": 1}, [("a",)], {}, False),
    "oc.select's default for a missing key": (
        {"a": "${oc.select:gone,9}", "b": 1}, [("a",)], {}, False),
    "oc.select of a key that is present": (
        {"a": "${oc.select:b,9}", "b": 1}, [("a",)], {}, False),
    "a quoted argument": (
        {"a": "${oc.env:UNSET,'x,y'}", "b": 1}, [("a",)], {}, False),
    "an escaped interpolation": (
        {"a": "\\${b} and ${b}", "b": 1}, [("a",)], {}, False),
    "a nested key name": (
        {"a": "${m.${k}}", "k": "x", "m": {"x": 4}}, [("a",)], {}, False),
    "a malformed interpolation elsewhere": (
        {"a": "${b}", "b": 1, "c": "${oops"}, [("a",)], {}, False),
    "a key OmegaConf refuses elsewhere": (
        {"a": "${b}", "b": 1, "c": {1.5: "x"}}, [("a",)], {}, False),
    "a value OmegaConf refuses elsewhere": (
        {"a": "${b}", "b": 1, "c": b"bytes"}, [("a",)], {}, False),
    "a relative reference above the root": (
        {"a": "${..b}", "b": 1}, [("a",)], {}, False),
    "an index into a list": (
        {"a": "${l.1}", "l": [1, "${n}"], "n": 2, "other": 0}, [("a",)], {}, True),
}


@pytest.mark.parametrize("name", CASES)
def test_pruned_resolution_answers_as_the_whole_tree(name: str) -> None:
    plain, wanted, env, prunes = CASES[name]
    pruned, whole, whole_built = _both(plain, wanted, env)
    assert pruned == whole
    assert whole_built is not prunes, "the pruned tree should answer alone" if prunes else "expected the whole tree"


def test_a_grammar_error_elsewhere_is_omegaconfs_own() -> None:
    pruned, _, _ = _both({"a": "${b}", "b": 1, "c": "${oops"}, [("a",)])
    assert pruned[0] == "refused" and "OmegaConf cannot read this config" in pruned[1]
    assert "no viable alternative at input '${oops'" in pruned[1]


# --- generated configs: references right and wrong, the subset and beyond it ---------------------------------

KEYS = ["a", "b", "c"]


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
        return "${mul:" + draw(_interpolation(depth + 1)) + ", " + str(draw(st.integers(0, 3))) + "}"
    if kind == "env":
        return "${oc.env:" + draw(st.sampled_from(["SET", "UNSET"])) + "," + str(draw(st.integers(0, 3))) + "}"
    if kind == "select":
        return "${oc.select:" + path + ",7}"
    return "${" + path


_leaf = st.one_of(st.integers(0, 5), st.sampled_from(["x", "???"]), _interpolation(),
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
    pruned, whole, _ = _both(plain, wanted, {"SET": "1"})
    assert pruned == whole


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

    built = _record_creates(monkeypatch)
    pruned = load_all()
    pruned_count = len(built)
    _whole_tree_only(monkeypatch)
    whole = load_all()
    assert pruned == whole
    assert pruned_count >= 250  # one OmegaConf build per config that interpolates what the checker reads
    largest_pruned = max(map(_nodes, built[:pruned_count]))
    assert largest_pruned < max(map(_nodes, built[pruned_count:])) / 4, "the pruned trees are not much smaller"
