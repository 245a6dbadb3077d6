"""The bundled example configs: each produces the rule ids its manifest entry expects, and the fixes work."""

from __future__ import annotations

import pytest

from checks.demo import Entry, check_entry, entries
from checks.engine import run
from checks.loaders import Request, load

ENTRIES = entries()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_expected_findings(entry: Entry) -> None:
    _, findings = check_entry(entry)
    assert sorted({f.rule for f in findings}) == sorted(entry.expect), [(f.rule, f.message) for f in findings]


def test_manifest_names_are_unique_and_cover_every_flavor() -> None:
    assert len({e.name for e in ENTRIES}) == len(ENTRIES)
    flavors = {load(e.request())[0].flavor for e in ENTRIES}
    assert flavors == {"bridge", "nemo-rl", "megatron-lm"}


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.expect and load(e.request())[0].flavor != "megatron-lm"],
                         ids=lambda e: e.name)
def test_patches_as_overrides_fix_what_they_patch(entry: Entry) -> None:
    """Applying a finding's patch (as the override --emit-overrides prints) removes that finding."""
    configs = load(entry.request())
    findings = run(configs)
    patched = [f for f in findings if f.patch]
    if not patched:
        pytest.skip("no finding here carries a patch")
    lines = []
    for f in patched:
        lines += configs[0].spelling.override_lines(f.patch)
    request = entry.request()
    after = run(load(Request(request.files, request.overrides + tuple(lines), request.argv, request.flavor,
                             request.version)))
    remaining = {(f.rule, f.path, f.target) for f in after}
    assert not remaining & {(f.rule, f.path, f.target) for f in patched}, (lines, remaining)


def test_the_summary_names_the_releases_the_example_was_checked_against() -> None:
    from checks.report import render_text

    entry = next(e for e in entries() if e.nemo_rl_version != "main")
    report, _ = check_entry(entry)
    assert f"NeMo-RL {entry.nemo_rl_version}" in render_text(report).splitlines()[-2 if report.findings else -1]
