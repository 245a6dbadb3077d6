"""The evaluation tasks stay true, both ways: what each expected script prints is what its ground truth says,
and what the ground truth says the script finds, the script still finds."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT

TASKS = json.loads((ROOT / "evals" / "evals.json").read_text(encoding="utf-8"))
SCRIPTED = [t for t in TASKS if t["expected_script"]]

# What each `check` script reports, exactly. A ground truth also names rules that do not fire (one that fires
# only after a fix, or one ruled out), so the prose alone cannot say which must fire: this table does, and
# the test below holds the script to it both ways (a rule that stops firing fails, as does a new one).
REPORTED: dict[str, set[str]] = {
    "positive-launch-recipe-cuda-graphs": {"ACT004", "OPT001"},
    "positive-pp-layer-offload-startup-error": {"ACT002", "CFG010"},
    "positive-num-layers-range-megatron-lm-argv": {"ACT001"},
    "positive-megatron-lm-script-precision-aware-optimizer": {"ACT003", "OPT005", "OPT022"},
    "positive-cuda-graphs-layer-offload": {"ACT004"},
    "positive-fine-grained-and-layer-offload-conflict": {"CFG010", "FGA001"},
    "positive-fine-grained-attn-proj-alone": {"CFG010", "FGA004"},
    "positive-fine-grained-nvte-env-var": {"TEX005"},
    "positive-fine-grained-with-pp-clean-dump": {"OPT022"},
    "positive-optimizer-greedy-split-tied-pp": {"OPT022"},
    "positive-nemo-rl-fraction-before-0-7": {"CFG003", "OPT021"},
    "positive-silent-noop-inert-recipe-knobs": {"ACT006", "CFG001", "OPT003"},
    "positive-silent-noop-zero-layers": {"ACT005", "CFG010"},
    "positive-nemo-rl-ported-bridge-settings": {"CFG001", "FGA002", "OPT001", "TEX005"},
    "positive-optimizer-offload-memory-went-up": {"OPT001"},
    "positive-decoupled-weight-decay-assertion": {"CFG010", "OPT004"},
    "positive-runtime-non-leaf-tensor": {"OPT011"},
    "positive-runtime-loss-diverges-0-15-overlap": {"CFG010", "OPT018"},
    "positive-safety-launch-approval": {"OPT022"},
    "positive-silent-noop-ep-overlap": {"ACT009", "CFG010"},
    "positive-te-not-present": {"CFG010", "TEX007"},
}


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"


def test_every_check_task_states_what_it_reports() -> None:
    checks = {t["id"] for t in SCRIPTED if shlex.split(t["expected_script"])[3] == "check"
              and "--emit-overrides" not in t["expected_script"]}
    assert checks == set(REPORTED)


@pytest.mark.parametrize("task", SCRIPTED, ids=[t["id"] for t in SCRIPTED])
def test_ground_truth_matches_what_the_script_prints(task: dict[str, object]) -> None:
    command = shlex.split(str(task["expected_script"]))
    done = _run(command)
    truth = str(task["ground_truth"])
    assert done.returncode in (0, 1), done.stderr
    # the exit code it states (a ground truth may also state the code after the fix, so: one of them)
    stated = {int(code) for code in re.findall(r"\bexit(?:s)?(?: with)?(?: code)? (\d)\b", truth)}
    assert not stated or done.returncode in stated, f"ground truth says exit {stated}, the script exits " \
        f"{done.returncode}"
    if "--emit-overrides" in command:
        # every override it prints, and every rule its comments name, is in the ground truth
        lines = done.stdout.splitlines()
        assert all(line in truth for line in lines if not line.startswith("#")), done.stdout
        assert set(re.findall(r"\b[A-Z]{3}\d{3}\b", done.stdout)) <= set(re.findall(r"\b[A-Z]{3}\d{3}\b", truth))
        return
    if command[3] == "check":
        reported = set(re.findall(r"\b(?:ERROR|WARNING|INFO) ([A-Z]{3}\d{3})\b", done.stdout))
        assert reported == REPORTED[str(task["id"])], done.stdout
        named = set(re.findall(r"\b[A-Z]{3}\d{3}\b", truth))
        assert reported <= named, f"the ground truth does not name {reported - named}"
        assert done.returncode == (1 if "ERROR " in done.stdout else 0)
        return
    # every planner figure the ground truth quotes is one the planner prints
    for figure in re.findall(r"\b\d+\.\d GiB\b", truth):
        assert figure in done.stdout, f"{figure} is not in the output of {task['expected_script']}"
    # and the other way: the ground truth gives the plan's verdict and the figures it rests on
    plan = json.loads(_run([*command, "--format", "json"]).stdout)
    assert _gib(plan["as_configured"]["peak_device_bytes"]) in truth, "the as-configured peak is not stated"
    assert stated, "a plan's ground truth states its exit code (0: fits as configured, 1: does not)"
    assert done.returncode == (0 if plan["status"] == "fits" else 1), plan["status"]
    recommendation = plan["recommendation"]
    if recommendation is not None and recommendation["mechanism"] != "none":
        assert recommendation["mechanism"] in truth, recommendation["mechanism"]
        assert _gib(recommendation["peak_device_bytes"]) in truth or \
            f"{recommendation['slowdown']:+.1%}" in truth, "neither the recommendation's peak nor its cost"
