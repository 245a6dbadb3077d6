"""The rule registry: metadata, documentation sections, and each rule's own bad and good example."""

from __future__ import annotations

import re

import pytest

from checks.catalogue import run_example
from checks.rules import ALL_RULES, BY_ID, get
from checks.rules.base import SEVERITIES
from checks.versions import NEMO_RL_VERSIONS, VERSIONS

SECTIONS = ("What it checks:", "Why it matters:", "Source:")


def test_ids_are_unique_sorted_and_well_formed() -> None:
    ids = [r.id for r in ALL_RULES]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[A-Z]{3}\d{3}", i) for i in ids)
    names = [r.name for r in ALL_RULES]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) for n in names)


def test_get_rejects_unknown_ids() -> None:
    assert get("act001") is BY_ID["ACT001"]
    with pytest.raises(ValueError, match='no such rule: "XYZ999"'):
        get("XYZ999")


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_metadata(rule) -> None:
    assert rule.severity in SEVERITIES
    assert rule.summary and not rule.summary.endswith(":")
    positions = [rule.doc.find(section) for section in SECTIONS]
    assert all(p > 0 for p in positions), f"{rule.id} docstring lacks one of {SECTIONS}"
    assert positions == sorted(positions), f"{rule.id} docstring sections out of order"
    assert rule.versions(), f"{rule.id} applies to no version"
    for check in rule.upstream:
        assert check.fixed or check.lines
        labels = NEMO_RL_VERSIONS if check.project == "nemo-rl" else VERSIONS
        assert all(v in labels for v in check.lines)
        for anchor in check.anchors().values():
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{8}:[\w/.-]+:\d+", anchor), anchor


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_bad_example_triggers_exactly_this_rule(rule) -> None:
    found = run_example(rule, rule.bad)
    # `also`: the other findings a rule about findings (CFG011, conflicting fixes) is about
    assert {f.rule for f in found} == {rule.id, *rule.bad.also}, [(f.rule, f.message) for f in found]


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_good_example_triggers_nothing(rule) -> None:
    found = run_example(rule, rule.good)
    assert found == [], [(f.rule, f.message) for f in found]


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if r.upstream], ids=lambda r: r.id)
def test_upstream_findings_quote_a_registered_check(rule) -> None:
    """A finding's upstream record is one of the rule's declared checks, with its anchor for that version."""
    for f in run_example(rule, rule.bad):
        if f.upstream is None:
            continue
        anchors = {a for c in rule.upstream for a in c.anchors().values()}
        assert f.upstream.anchor in anchors
