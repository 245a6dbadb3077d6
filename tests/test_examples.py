"""The bundled example configs: each produces the rule ids its manifest entry expects, and the fixes work."""

from __future__ import annotations

from dataclasses import replace

import pytest

from checks.demo import Entry, check_entry, entries
from checks.engine import run
from checks.loaders import load

ENTRIES = entries()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_expected_findings(entry: Entry) -> None:
    _, findings = check_entry(entry)
    assert sorted({f.rule for f in findings}) == sorted(entry.expect), [(f.rule, f.message) for f in findings]


def test_manifest_names_are_unique_and_cover_every_flavor() -> None:
    assert len({e.name for e in ENTRIES}) == len(ENTRIES)
    flavors = {load(e.request())[0].flavor for e in ENTRIES}
    assert flavors == {"bridge", "nemo-rl", "megatron-lm"}


def _patches(entry: Entry) -> tuple[str, set[tuple[str, str, str | None]], list[str]]:
    """The entry's flavor, its findings that carry a patch, and those patches as the overrides (or flags)
    ``--emit-overrides`` prints for them."""
    configs = load(entry.request())
    patched = [f for f in run(configs) if f.patch]
    lines = [line for f in patched for line in configs[0].spelling.override_lines(f.patch)]
    return configs[0].flavor, {(f.rule, f.path, f.target) for f in patched}, lines


def _applicable(entry: Entry) -> bool:
    # A Megatron-LM launch script takes no KEY=VALUE overrides, and a "# remove --flag" line is an edit, not a
    # flag: those entries are left out here (chosen at collection, so that no case always skips).
    flavor, _, lines = _patches(entry)
    if flavor == "megatron-lm":
        return bool(lines) and entry.request().argv is not None and not any(x.startswith("#") for x in lines)
    return bool(lines)


PATCHED = [e for e in ENTRIES if e.expect and _applicable(e)]


def test_most_bundled_examples_with_findings_carry_patches() -> None:
    assert len(PATCHED) >= 9, [e.name for e in PATCHED]


@pytest.mark.parametrize("entry", PATCHED, ids=lambda e: e.name)
def test_patches_as_overrides_fix_what_they_patch(entry: Entry) -> None:
    """Applying a finding's patch (as the override --emit-overrides prints) removes that finding."""
    request = entry.request()
    _, patched, lines = _patches(entry)
    if request.argv is not None:  # flags: the last occurrence wins in Megatron-LM's argparse
        fixed = replace(request, argv=f"{request.argv} {' '.join(lines)}")
    else:
        fixed = replace(request, overrides=request.overrides + tuple(lines))
    remaining = {(f.rule, f.path, f.target) for f in run(load(fixed))}
    assert not remaining & patched, (lines, remaining)


def test_the_summary_names_the_releases_the_example_was_checked_against() -> None:
    from checks.report import render_text

    entry = next(e for e in entries() if e.nemo_rl_version != "main")
    report, _ = check_entry(entry)
    assert f"NeMo-RL {entry.nemo_rl_version}" in render_text(report).splitlines()[-2 if report.findings else -1]
