"""Against Megatron-LM's own source: the real parser, and every functional-test YAML its CI runs.

Needs MEGATRON_LM_GIT, a Megatron-LM git repository (bare is fine), e.g.
``MEGATRON_LM_GIT=/path/to/Megatron-LM.git pytest tests/test_mlm_sweep.py``; skipped without it. The
real-parser test also needs an interpreter with torch (MLM_FLAGS_PYTHON, default: this one).
Nothing from upstream is copied: files are read with ``git show``.
"""

from __future__ import annotations

import collections
import io
import json
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from conftest import ROOT

from checks.cli import main

GIT = os.environ.get("MEGATRON_LM_GIT")
pytestmark = pytest.mark.skipif(not GIT, reason="MEGATRON_LM_GIT (a Megatron-LM git repository) is not set")
PINNED = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"  # the checker's "main"
TESTS = "tests/functional_tests"

# Functional-test configs that really fail: each with the finding and why it is right.
KNOWN_FAILURES = {
    # The runner passes "2 2" as one word (a value with a space is quoted, _run_training.sh:155-156), and
    # int("2 2") fails. The test case left CI in NVIDIA/Megatron-LM@1f49ac70 ("ci: Remove deprecated tests"):
    # no recipe under tests/test_utils/recipes names it at d98e8a64.
    "tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp1_pp2_cp4_a2a_p2p_nondeterministic/model_config.yaml":
        ("CFG004", "argparse: argument --hierarchical-context-parallel-sizes: invalid int value: '2 2'"),
}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(GIT), *args], check=True, capture_output=True, text=True).stdout


def _configs() -> list[str]:
    return [p for p in _git("ls-tree", "-r", "--name-only", PINNED, TESTS).splitlines()
            if p.endswith("/model_config.yaml")]


def _sweep(version: str, tmp: Path) -> tuple[collections.Counter, dict[str, list[dict]]]:
    codes: collections.Counter = collections.Counter()
    found: dict[str, list[dict]] = {}
    for rel in _configs():
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_git("show", f"{PINNED}:{rel}"))
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["check", str(path), "--mcore-version", version, "--format", "json"])
        codes[code] += 1
        assert code != 2, (rel, err.getvalue())
        found[rel] = json.loads(out.getvalue())["findings"]
    return codes, found


def test_every_functional_test_config_reads_as_the_runner_reads_it() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        codes, found = _sweep("main", Path(tmp))
    assert sum(codes.values()) == len(_configs()) > 300
    errors = {rel: [(f["rule"], f["message"]) for f in fs if f["severity"] == "error"] for rel, fs in found.items()}
    unexpected = {rel: e for rel, e in errors.items() if e and rel not in KNOWN_FAILURES}
    assert unexpected == {}
    for rel, expected in KNOWN_FAILURES.items():
        assert errors[rel] == [expected]
    rules = collections.Counter(f["rule"] for fs in found.values() for f in fs)
    assert set(rules) <= {"CFG008", "CFG004"}, rules
    assert rules["CFG008"] > 0  # the duplicated keys upstream's files have (OmegaConf would refuse them)
    fine_grained = "tests/functional_tests/test_cases/moe/gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_fine_grained_offloading/" \
                   "model_config.yaml"
    assert found[fine_grained] == []


@pytest.mark.parametrize("version", ["0.19.2", "main@14346b65", "main@2a75ac12"])
def test_functional_test_configs_do_not_crash_other_versions(version: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        codes, _ = _sweep(version, Path(tmp))
    assert set(codes) <= {0, 1}


def test_the_tool_compares_the_checker_parser_with_the_real_one() -> None:
    """tools/mlm_flags.py builds the real parser of main and compares; the result matches the committed table."""
    python = os.environ.get("MLM_FLAGS_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "flags.json"
        result = subprocess.run([python, str(ROOT / "tools" / "mlm_flags.py"), "--mirror", str(GIT), "--version",
                                 "main", "--python", python, "--no-static", "--output", str(output)],
                                capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr[-3000:]
        fresh = json.loads(output.read_text())
    committed = json.loads((ROOT / "checks" / "data" / "mlm_flags.json").read_text())
    assert fresh["verified"]["main"]["mismatches"] == [] and fresh["verified"]["main"]["cases"] > 5000
    assert [fresh["actions"][i] for i in fresh["versions"]["main"]] == \
        [committed["actions"][i] for i in committed["versions"]["main"]]
    assert fresh["enums"]["main"] == committed["enums"]["main"]
    assert fresh["converters"]["main"] == committed["converters"]["main"]
