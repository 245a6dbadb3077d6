"""Applying ``--set`` overrides: checks.loaders.apply against Hydra itself, and each framework's behaviour.

Megatron Bridge and NeMo-RL both put the config in struct mode and call hydra-core's
``ConfigLoaderImpl._apply_overrides_to_config`` (NVIDIA-NeMo/Megatron-Bridge@067f987d:
src/megatron/bridge/training/utils/omegaconf_utils.py:180-183, NVIDIA-NeMo/RL@7ea279ab:
nemo_rl/utils/config.py:186-189). The checker replays that without Hydra, so Hydra (a test-only
dependency) is the oracle: generated configs and override lists must give the same tree or the same
refusal, message for message. Line numbers below are hydra-core==1.3.8 and omegaconf==2.3.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.config import Origin, Setting
from checks.engine import Finding, run
from checks.errors import InputError
from checks.loaders import Request, load
from checks.loaders import tree as trees
from checks.loaders.apply import Config
from checks.loaders.overrides import OverrideSyntaxError, format_value, parse_override

pytest.importorskip("hydra")

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

_PARSER = OverridesParser.create()
PREFIX = "Failed to parse Hydra overrides: "


def hydra(base: dict[str, Any], overrides: list[str]) -> tuple[str, Any]:
    """What Bridge's and NeMo-RL's parse_hydra_overrides do, minus the wrapping: the tree, or the error text."""
    cfg = OmegaConf.create(base)
    OmegaConf.set_struct(cfg, True)
    try:
        ConfigLoaderImpl._apply_overrides_to_config(_PARSER.parse_overrides(overrides), cfg)
    except Exception as err:  # Hydra's own exceptions and what it lets through (ValueError, TypeError)
        return "refused", str(err)
    OmegaConf.set_struct(cfg, False)
    return "ok", OmegaConf.to_container(cfg)


def _tree(data: dict[str, Any]) -> trees.Tree:
    return {k: _tree(v) if isinstance(v, dict) else Setting(v, Origin(file="base.yaml")) for k, v in data.items()}


def checker(base: dict[str, Any], overrides: list[str]) -> tuple[str, Any]:
    """The same with checks.loaders.apply over an exact base: stops at the first refusal, as upstream does."""
    config = Config(_tree(base))
    for index, text in enumerate(overrides, start=1):
        outcome = config.apply(parse_override(text), Origin(arg=f"--set #{index}", key="", note=text))
        if outcome.refused is not None:
            return "refused", outcome.refused
        if outcome.unverified is not None:
            return "unverified", outcome.unverified
        config = outcome.config
    return "ok", trees.plain(config.tree)


def same(a: Any, b: Any) -> bool:
    """Equal with identical types all the way down (True is not 1, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# --------------------------------------------------------------------------
# Explicit cases: one per code path of _apply_overrides_to_config / OmegaConf.update / merge_with
# --------------------------------------------------------------------------

CASES: list[tuple[dict[str, Any], list[str], tuple[str, Any]]] = [
    # plain key=value under struct mode (config_loader_impl.py:389-395, OmegaConf.update omegaconf.py:705-746)
    ({"a": {"b": 1}}, ["a.b=2"], ("ok", {"a": {"b": 2}})),
    ({"a": {"b": 1}}, ["a.c=2"], ("refused", "Could not override 'a.c'.\nTo append to your config use +a.c=2")),
    ({"a": 1}, ["a.b=2"], ("refused", "Could not override 'a.b'.\nTo append to your config use +a.b=2")),
    ({"a": None}, ["a.b=2"], ("refused", "Could not override 'a.b'.\nTo append to your config use +a.b=2")),
    ({"a": {"x": 1}}, ["a={y:2}"], ("refused", "Could not override 'a'.\nTo append to your config use +a={y:2}")),
    ({"a": {"x": 1}}, ["a={x:2}"], ("ok", {"a": {"x": 2}})),
    ({"a": {"x": 1}}, ["a={x:???}"], ("ok", {"a": {"x": 1}})),  # a merge does not copy ???
    ({"a": {"x": 1}}, ["a=[1]"], ("refused", "Error merging override a=[1]")),
    ({"a": [1, 2]}, ["a=[3]"], ("ok", {"a": [3]})),
    ({"a": [1, 2]}, ["a.0=5"], ("ok", {"a": [5, 2]})),
    ({"a": [1, 2]}, ["a.5=5"], ("refused", "Error merging override a.5=5")),
    ({"a": [1, 2]}, ["a.x=5"], ("refused", "invalid literal for int() with base 10: 'x'")),
    ({"a": {"x": 1}}, ["a=null"], ("ok", {"a": None})),
    # +key=value (config_loader_impl.py:370-385)
    ({"a": None}, ["+a.b=2"], ("ok", {"a": {"b": 2}})),
    ({"a": 1}, ["+a=2"], ("refused", "Could not append to config. An item is already at 'a'.\n"
                                     "Either remove + prefix: 'a=2'\n"
                                     "Or add a second + to add or override 'a': '++a=2'\n")),
    ({"a": "???"}, ["+a=2"], ("ok", {"a": 2})),
    ({"a": 1}, ["+a=[1]"], ("ok", {"a": [1]})),  # a dict or list value is always let through
    ({"a": {"x": 1}}, ["+a={y:2}"], ("ok", {"a": {"x": 1, "y": 2}})),
    ({"a": [1]}, ["+a.x=1"], ("refused", "Error merging override +a.x=1")),
    # ++key=value (config_loader_impl.py:386-387)
    ({"a": 1}, ["++a=2"], ("ok", {"a": 2})),
    ({}, ["++a.b.c=1"], ("ok", {"a": {"b": {"c": 1}}})),
    ({"a": 1}, ["++a.c=1"], ("ok", {"a": {"c": 1}})),
    # ~key and ~key=value (config_loader_impl.py:348-368)
    ({"a": 1, "b": 2}, ["~a"], ("ok", {"b": 2})),
    ({"a": None}, ["~a"], ("refused", "Could not delete from config. 'a' does not exist.")),
    ({"a": {"b": 1}}, ["~a.c"], ("refused", "Could not delete from config. 'a.c' does not exist.")),
    ({"a": 1}, ["~a=1.0"], ("ok", {})),  # compared with ==
    ({"a": 1}, ["~a=2"], ("refused", "Could not delete from config. The value of 'a' is 1 and not 2.")),
    ({"a": {"x": 1}}, ["~a={x:2}"], ("refused",
                                    "Could not delete from config. The value of 'a' is {'x': 1} and not {'x': 2}.")),
    ({"a": [1, 2]}, ["~a.0"], ("refused", "list indices must be integers or slices, not str")),
    ({"a": [{"b": 1}]}, ["~a.0.b"], ("ok", {"a": [{}]})),
    # interpolations: select() resolves them, update() does not follow them
    ({"a": "${b}", "b": None}, ["+a=1"], ("ok", {"a": 1, "b": None})),
    ({"a": "${b}", "b": 2}, ["+a=1"], ("refused", "Could not append to config. An item is already at 'a'.\n"
                                                  "Either remove + prefix: 'a=1'\n"
                                                  "Or add a second + to add or override 'a': '++a=1'\n")),
    ({"a": "${c}"}, ["+a=1"], ("refused", "Error merging override +a=1")),
    ({"a": "${b}", "b": {"x": 1}}, ["+a.y=3"], ("ok", {"a": {"y": 3}, "b": {"x": 1}})),
    # later overrides see what earlier ones did
    ({"a": None, "c": 1}, ["+a.b=1", "a.b=2", "~c"], ("ok", {"a": {"b": 2}})),
]


@pytest.mark.parametrize(("base", "overrides", "expected"), CASES, ids=[" ".join(c[1]) for c in CASES])
def test_explicit_cases_match_hydra(base: dict[str, Any], overrides: list[str], expected: tuple[str, Any]) -> None:
    assert hydra(base, overrides) == expected  # the case says what Hydra really does
    got = checker(base, overrides)
    assert got[0] == expected[0] and same(got[1], expected[1]), got


# --------------------------------------------------------------------------
# Generated configs and override lists
# --------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "0", "1"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.sampled_from([1.5, 0.0]),
                    st.sampled_from(["s", "???", "", "t"]))
INTERPOLATIONS = st.sampled_from(["${a}", "${b}", "${a.b}", "x${c}"])


def _values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(leaves, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(KEYS, inner, max_size=3)), max_leaves=8)


BASES = st.dictionaries(KEYS, _values(SCALARS), max_size=4)
BASES_WITH_INTERPOLATIONS = st.dictionaries(KEYS, _values(st.one_of(SCALARS, INTERPOLATIONS)), max_size=4)
OVERRIDE_VALUES = _values(st.one_of(st.none(), st.booleans(), st.integers(-1, 2), st.sampled_from(["s", "???", "t"])))


@st.composite
def overrides(draw: st.DrawFn) -> str:
    """All four kinds, on keys that exist, are missing, are null or sit under a value, with dict and list values."""
    op = draw(st.sampled_from(["", "+", "++", "~"]))
    key = ".".join(draw(st.lists(KEYS, min_size=1, max_size=3)))
    if op == "~" and draw(st.booleans()):
        return f"~{key}"
    value = draw(OVERRIDE_VALUES)
    try:
        return f"{op}{key}={format_value(value)}"
    except ValueError:  # a dict key the override syntax cannot spell
        return f"{op}{key}=1"


GENERATED = settings(max_examples=int(os.environ.get("OVERRIDE_EXAMPLES", "700")), deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _compare(base: dict[str, Any], texts: list[str], *, unverified_ok: bool) -> None:
    try:
        for text in texts:
            parse_override(text)
    except OverrideSyntaxError:
        return  # parsing is tests/test_overrides.py's subject
    expected, got = hydra(base, texts), checker(base, texts)
    if got[0] == "unverified" and unverified_ok:
        return
    assert got[0] == expected[0] and same(got[1], expected[1]), (base, texts, expected, got)


@GENERATED
@given(base=BASES, texts=st.lists(overrides(), min_size=1, max_size=3))
def test_generated_overrides_match_hydra(base: dict[str, Any], texts: list[str]) -> None:
    _compare(base, texts, unverified_ok=False)


@GENERATED
@given(base=BASES_WITH_INTERPOLATIONS, texts=st.lists(overrides(), min_size=1, max_size=3))
def test_generated_overrides_with_interpolations_match_hydra_or_say_unverified(base: dict[str, Any],
                                                                               texts: list[str]) -> None:
    """Where an interpolation decides (a merge following one, deleting through one) the checker says so."""
    _compare(base, texts, unverified_ok=True)


_OUTCOMES = ("Could not override", "Could not append", "Could not delete from config. '",
             "Could not delete from config. The value", "Error merging override")


def test_generated_cases_reach_every_outcome() -> None:
    """The generators are not vacuous: every kind of refusal, and success, occurs among the fixed draws."""
    seen: set[str] = set()

    @settings(max_examples=400, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(base=BASES, texts=st.lists(overrides(), min_size=1, max_size=2))
    def collect(base: dict[str, Any], texts: list[str]) -> None:
        kind, what = hydra(base, texts)
        seen.add("ok" if kind == "ok" else next((o for o in _OUTCOMES if what.startswith(o)), "other"))

    collect()
    assert {"ok", *_OUTCOMES} <= seen, seen


# --------------------------------------------------------------------------
# Each framework, through the loaders
# --------------------------------------------------------------------------

def _check(tmp_path: Path, text: str, sets: tuple[str, ...], flavor: str = "auto") -> list[Finding]:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return run(load(Request((str(path),), sets, None, flavor, "0.19.2")))


def _one(findings: list[Finding], rule: str) -> Finding:
    hits = [f for f in findings if f.rule == rule]
    assert len(hits) == 1, [(f.rule, f.message) for f in findings]
    return hits[0]


BRIDGE_FILE = "model:\n  num_layers: 8\n"
NEMO_RL_FILE = ("policy:\n  megatron_cfg:\n    enabled: true\n    fine_grained_activation_offloading: false\n"
                "    optimizer:\n      optimizer: adam\n")


def test_bridge_refuses_a_plain_override_of_a_missing_key(tmp_path: Path) -> None:
    """Bridge: OmegaConf.set_struct, then _apply_overrides_to_config, wrapped as OverridesError
    (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:180-186;
    hydra-core==1.3.8:hydra/_internal/config_loader_impl.py:389-395). No Bridge class declares the key."""
    found = _one(_check(tmp_path, BRIDGE_FILE, ("model.num_layers=8", "model.cpu_ofloading=true")), "CFG007")
    assert found.upstream is not None and found.upstream.message == (
        PREFIX + "Could not override 'model.cpu_ofloading'.\nTo append to your config use +model.cpu_ofloading=true")
    assert found.upstream.anchor == \
        "NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:183"
    assert found.origin is not None and found.origin.arg == "--set #2"
    assert "did you mean 'cpu_offloading'?" in found.fix


def test_nemo_rl_refuses_a_plain_override_of_a_missing_key(tmp_path: Path) -> None:
    """NeMo-RL: the same code on the loaded YAML (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:186-192), which
    is the whole config, so the refusal is exact."""
    found = _one(_check(tmp_path, NEMO_RL_FILE, ("policy.megatron_cfg.optimizer.optimizer_cpu_ofload=true",)),
                 "CFG007")
    assert found.upstream is not None and found.upstream.project == "nemo-rl"
    assert found.upstream.message == PREFIX + (
        "Could not override 'policy.megatron_cfg.optimizer.optimizer_cpu_ofload'.\n"
        "To append to your config use +policy.megatron_cfg.optimizer.optimizer_cpu_ofload=true")
    assert found.upstream.anchor == "NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:189"
    assert found.target == "policy"


def test_bridge_refuses_plus_on_a_field_with_a_default(tmp_path: Path) -> None:
    """`--set +model.cpu_offloading=true` on a Bridge config: the recipe's provider carries cpu_offloading
    (NVIDIA/Megatron-LM@2a75ac12:megatron/core/model_parallel_config.py:458, default False), and `+` refuses a
    non-null value (hydra-core==1.3.8:hydra/_internal/config_loader_impl.py:371-385). The rest is checked
    without it: whether the layer count then has a switch is the recipe's to say, which the checker was not
    given, so ACT006 (a layer count without the switch) cannot decide (CFG010) rather than assume false."""
    findings = _check(tmp_path, BRIDGE_FILE, ("+model.cpu_offloading=true", "model.cpu_offloading_num_layers=2"))
    found = _one(findings, "CFG007")
    assert found.upstream is not None and found.upstream.message == PREFIX + (
        "Could not append to config. An item is already at 'model.cpu_offloading'.\n"
        "Either remove + prefix: 'model.cpu_offloading=true'\n"
        "Or add a second + to add or override 'model.cpu_offloading': '++model.cpu_offloading=true'\n")
    assert "model.cpu_offloading=true" in found.fix
    assert {f.rule for f in findings} == {"CFG007", "CFG010"}
    unknown = _one(findings, "CFG010")
    assert "model.cpu_offloading (ACT006" in unknown.message


def test_plus_is_refused_on_a_value_the_file_sets(tmp_path: Path) -> None:
    findings = _check(tmp_path, NEMO_RL_FILE, ("+policy.megatron_cfg.enabled=true",))
    assert _one(findings, "CFG007").message.startswith("'+policy.megatron_cfg.enabled=true' is refused at start-up")


def test_double_plus_adds_or_overrides(tmp_path: Path) -> None:
    """`++` is OmegaConf.update(force_add=True): never refused for a mapping path
    (hydra-core==1.3.8:hydra/_internal/config_loader_impl.py:386-387)."""
    cfg = load(Request((str(_write(tmp_path, BRIDGE_FILE)),), ("++model.cpu_offloading=true",
                                                               "++env_vars.NVTE_CPU_OFFLOAD_V1=1")))[0]
    assert cfg.settings["model.cpu_offloading"].value is True
    assert cfg.settings["model.cpu_offloading"].origin.arg == "--set #1"
    assert cfg.settings["env.NVTE_CPU_OFFLOAD_V1"].value == 1
    assert cfg.refused_overrides == () and cfg.unverified_overrides == ()


def test_delete_semantics_on_nemo_rl(tmp_path: Path) -> None:
    """`~key` refuses an absent or null key, `~key=value` a different value; else the key is gone
    (hydra-core==1.3.8:hydra/_internal/config_loader_impl.py:348-368)."""
    text = NEMO_RL_FILE + "    offload_modules: [core_attn]\n"
    path = str(_write(tmp_path, text))
    assert load(Request((path,)))[0].settings["optimizer.optimizer"].value == "adam"
    cfg = load(Request((path,), ("~policy.megatron_cfg.optimizer.optimizer=adam",)))[0]
    assert "optimizer.optimizer" not in cfg.settings and cfg.refused_overrides == ()
    cfg = load(Request((str(_write(tmp_path, text)),), ("~policy.megatron_cfg.offload_modules=[attn_proj]",
                                                        "~policy.megatron_cfg.cpu_offloading")))[0]
    assert [n.message for n in cfg.refused_overrides] == [
        PREFIX + "Could not delete from config. The value of 'policy.megatron_cfg.offload_modules' is ['core_attn'] "
                 "and not ['attn_proj'].",
        PREFIX + "Could not delete from config. 'policy.megatron_cfg.cpu_offloading' does not exist."]
    assert [n.index for n in cfg.refused_overrides] == [1, 2]


def test_bridge_deleted_field_keeps_its_value_from_before_the_overrides(tmp_path: Path) -> None:
    """Bridge sets back only the keys the overridden dict holds
    (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:469-474): a deleted
    field of a dump keeps the dump's value; of an override file, the recipe's (unknown, so it is said)."""
    dump = ("_target_: megatron.bridge.training.config.ConfigContainer\n"
            "model:\n  num_layers: 8\n  cpu_offloading: false\n")
    cfg = load(Request((str(_write(tmp_path, dump)),), ("~model.cpu_offloading",)))[0]
    assert cfg.settings["model.cpu_offloading"].value is False
    (note,) = cfg.unverified_overrides
    assert "keeps the dump's value" in note.message
    path = _write(tmp_path, BRIDGE_FILE + "  cpu_offloading: true\n")
    cfg = load(Request((str(path),), ("~model.cpu_offloading",)))[0]
    assert "model.cpu_offloading" not in cfg.settings
    (note,) = cfg.unverified_overrides
    assert "keeps the recipe's value" in note.message
    findings = run([cfg])
    assert _one(findings, "CFG009").origin.arg == "--set #1"


def test_bridge_env_vars_entry_is_really_deleted(tmp_path: Path) -> None:
    """env_vars is a plain dict field: Bridge sets the whole dict back, so the entry is gone."""
    cfg = load(Request((str(_write(tmp_path, "env_vars:\n  NVTE_CPU_OFFLOAD_V1: 1\n")),),
                       ("~env_vars.NVTE_CPU_OFFLOAD_V1",)))[0]
    assert "env.NVTE_CPU_OFFLOAD_V1" not in cfg.settings and cfg.unverified_overrides == ()


def test_bridge_plus_typo_is_added_then_skipped(tmp_path: Path) -> None:
    """A `+` key the dataclass lacks passes Hydra, then Bridge skips it with a log line
    (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:470-474)."""
    found = _one(_check(tmp_path, BRIDGE_FILE, ("+model.cpu_ofloading=true",)), "CFG001")
    assert "Key 'cpu_ofloading' in overrides not found in config object" in found.message
    assert "Skipping." in found.message and "drops it without an error" not in found.message
    dump = ("_target_: megatron.bridge.training.config.ConfigContainer\nmodel:\n"
            "  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  num_layers: 8\n")
    found = _one(_check(tmp_path, dump, ("++model.cpu_ofloading=true",)), "CFG001")
    assert "config object GPTModelProvider. Skipping." in found.message


def test_bridge_file_typo_still_reads_as_dropped(tmp_path: Path) -> None:
    found = _one(_check(tmp_path, "model:\n  cpu_ofloading: true\n", ()), "CFG001")
    assert "drops it without an error" in found.message


def test_bridge_unknown_outcomes_are_applied_and_said(tmp_path: Path) -> None:
    """`+` on a field whose default is null: the recipe may set it, so neither refusal nor success is claimed."""
    cfg = load(Request((str(_write(tmp_path, BRIDGE_FILE)),), ("+model.recompute_granularity=full",
                                                               "comm_overlap.tp_comm_overlap=true")))[0]
    assert cfg.settings["model.recompute_granularity"].value == "full"
    assert [n.index for n in cfg.unverified_overrides] == [1, 2]
    assert "'comm_overlap' (it is null by default)" in cfg.unverified_overrides[1].message
    assert cfg.refused_overrides == ()


def test_overrides_without_a_file_are_never_refused(tmp_path: Path) -> None:
    """NeMo-RL applies overrides to its YAML; without it the checker cannot tell."""
    cfg = load(Request((), ("policy.megatron_cfg.enabled=true", "policy.megatron_cfg.optimizer.optimizer=adam"),
                       flavor="nemo-rl"))[0]
    assert cfg.refused_overrides == () and len(cfg.unverified_overrides) == 2


def test_each_refusal_is_reported_once_for_a_config_with_several_models(tmp_path: Path) -> None:
    text = NEMO_RL_FILE + "value:\n  megatron_cfg:\n    enabled: true\n"
    configs = load(Request((str(_write(tmp_path, text)),), ("value.megatron_cfg.bogus=1", "grpo.x=1")))
    by_target = {c.target: [n.index for n in c.refused_overrides] for c in configs}
    assert by_target == {"policy": [2], "value": [1]}


def test_a_syntax_error_is_still_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--set #2: 'model.x=\[1': "):
        load(Request((str(_write(tmp_path, BRIDGE_FILE)),), ("model.num_layers=8", "model.x=[1")))


def test_files_merge_like_omegaconf(tmp_path: Path) -> None:
    """OmegaConf.merge keeps the base's value under a ??? and refuses a list over a mapping
    (omegaconf==2.3.1:omegaconf/basecontainer.py:396-423, 518)."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("model:\n  num_layers: 8\n", encoding="utf-8")
    second.write_text("model:\n  num_layers: ???\n", encoding="utf-8")
    kept = load(Request((str(first), str(second))))[0].settings["model.num_layers"]
    assert kept.value == 8 and kept.origin.file == str(first)
    assert trees.merge(_tree({"a": {"x": 1}}), _tree({"a": "???"}))["a"] == _tree({"x": 1})
    with pytest.raises(InputError, match="Cannot merge DictConfig with ListConfig"):
        trees.merge(_tree({"a": {"x": 1}}), _tree({"a": [1]}))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# The field table, against upstream (when the mirrors are given)
# --------------------------------------------------------------------------

BRIDGE_GIT, MEGATRON_LM_GIT = os.environ.get("BRIDGE_GIT"), os.environ.get("MEGATRON_LM_GIT")


@pytest.mark.skipif(not (BRIDGE_GIT and MEGATRON_LM_GIT),
                    reason="set BRIDGE_GIT and MEGATRON_LM_GIT to NVIDIA-NeMo/Megatron-Bridge and NVIDIA/Megatron-LM "
                           "git directories (bare mirrors will do)")
def test_bridge_field_table_is_what_the_tool_extracts() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bridge_fields.py"), "--bridge", str(BRIDGE_GIT),
                           "--megatron-lm", str(MEGATRON_LM_GIT)], capture_output=True, text=True, check=True)
    committed = json.loads((ROOT / "checks" / "data" / "bridge_fields.json").read_text(encoding="utf-8"))
    assert json.loads(done.stdout) == committed
    assert committed["source"]["bridge"].startswith("NVIDIA-NeMo/Megatron-Bridge@067f987d")
