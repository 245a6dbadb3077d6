"""What a rule reads is observed, not declared: every path a rule asks its context about exists where it asks.

Rules declare no list of what they read (``checks/rules/base.py``): the context records each path asked of it
(``Context.read``), and a value of the wrong type stops the rule (``Unreadable``). These tests run every rule on
its own examples in every megatron-core version it applies to, and on generated Megatron Bridge configs
(``tests/offload_configs.py``), and fail when a rule asks about a path that version's canonical config cannot
hold: a misspelt field, a field the version does not have, a section that does not exist. Such a read always
sees the default (``None``), so the rule would decide on nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from offload_configs import bridge_overrides

from checks.catalogue import example_configs, rule_reads
from checks.config import RUN_KEYS, CanonicalConfig, split_path
from checks.context import Context, Unreadable
from checks.engine import reads
from checks.errors import InputError
from checks.loaders import Request, load
from checks.rules import ALL_RULES
from checks.rules.base import Example, Hit, Rule, declared, rule
from checks.versions import FIELD_SECTIONS, VERSIONS, profile


def unseen(paths: Iterable[str]) -> list[str]:
    """The paths no canonical config, in any version, can hold."""
    out = []
    for path in sorted(set(paths)):
        section, name = split_path(path)
        if section == "env":  # any environment variable
            continue
        if section == "run":  # the front ends' facts beyond megatron-core: declared in checks.config.RUN_KEYS
            if name not in RUN_KEYS:
                out.append(path)
            continue
        if section not in FIELD_SECTIONS or not any(profile(v).field(section, name) for v in VERSIONS):
            out.append(path)
    return out


def _example_configs(example: Example, version: str) -> list[CanonicalConfig]:
    try:
        return example_configs(example, version)
    except InputError:  # an example written for another version's keys
        return []


@pytest.mark.parametrize("checked", ALL_RULES, ids=lambda r: r.id)
def test_a_rule_reads_only_paths_its_versions_have(checked: Rule) -> None:
    problems = []
    for version in checked.versions():
        for example in (checked.bad, checked.good):
            if checked.applies_to(version, example.flavor):
                wrong = unseen(reads(checked, _example_configs(example, version)))
                problems += [f"{version}: {path}" for path in wrong]
    assert not problems, f"{checked.id} reads paths its config cannot hold: {problems}"


@pytest.mark.parametrize("version", VERSIONS)
def test_rules_on_generated_configs_read_only_paths_the_version_has(version: str) -> None:
    read: dict[str, set[str]] = {}

    @settings(max_examples=15, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(sets=bridge_overrides(version))
    def record(sets: list[str]) -> None:
        configs = load(Request(overrides=tuple(sets), flavor="bridge", version=version))
        for checked in ALL_RULES:
            read.setdefault(checked.id, set()).update(reads(checked, configs))

    record()
    problems = {rule_id: wrong for rule_id, paths in read.items() if (wrong := unseen(paths))}
    assert not problems


def test_the_reads_test_catches_a_misspelt_path() -> None:
    def misspelt(ctx: Context) -> Iterable[Hit]:
        """Reads a field no version has."""
        if ctx.get("model.cpu_offload_num_layers"):  # the field is cpu_offloading_num_layers
            yield Hit("model.cpu_offloading", "never", "never")

    example = Example("model:\n  cpu_offloading: true\n")
    rule("XXX900", "misspelt", "error", bad=example, good=example)(misspelt)
    (made,) = declared(__name__)
    found = reads(made, _example_configs(example, "0.19.2"))
    assert unseen(found) == ["model.cpu_offload_num_layers"]


def test_a_value_of_the_wrong_type_stops_the_rule_that_reads_it() -> None:
    (cfg,) = load(Request(overrides=("model.cpu_offloading=true", "model.cpu_offloading_num_layers='two'"),
                          flavor="bridge", version="0.19.2"))
    ctx = Context(cfg)
    assert ctx.get("model.cpu_offloading") is True
    with pytest.raises(Unreadable):
        ctx.get("model.cpu_offloading_num_layers")


def test_documented_reads_come_from_running_the_rule() -> None:
    # ACT001 compares cpu_offloading_num_layers with num_layers (megatron-core's C1 check)
    act001 = next(r for r in ALL_RULES if r.id == "ACT001")
    assert {"model.cpu_offloading", "model.cpu_offloading_num_layers", "model.num_layers"} <= rule_reads(act001)


def test_a_field_the_version_lacks_reads_as_absent_whatever_the_input_says() -> None:
    # moe_paged_stash exists from 0.18 (megatron-core TransformerConfig); in 0.17 a value for it is a CFG003 finding
    sets = ("model.moe_paged_stash=true", "model.num_layers=4")
    (old,) = load(Request(overrides=sets, flavor="bridge", version="0.17.1"))
    (new,) = load(Request(overrides=sets, flavor="bridge", version="0.18.2"))
    assert Context(old).get("model.moe_paged_stash") is None
    assert Context(new).get("model.moe_paged_stash") is True
