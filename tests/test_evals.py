"""The evaluation tasks stay true: each expected script still gives what its ground truth says."""

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


@pytest.mark.parametrize("task", SCRIPTED, ids=[t["id"] for t in SCRIPTED])
def test_ground_truth_matches_what_the_script_prints(task: dict[str, object]) -> None:
    command = shlex.split(str(task["expected_script"]))
    done = subprocess.run([sys.executable, *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    truth = str(task["ground_truth"])
    assert done.returncode in (0, 1), done.stderr
    # the exit code it states (a ground truth may also state the code after the fix, so: one of them)
    stated = {int(code) for code in re.findall(r"\bexit(?:s)?(?: with)?(?: code)? (\d)\b", truth)}
    assert not stated or done.returncode in stated, f"ground truth says exit {stated}, the script exits " \
        f"{done.returncode}"
    # every rule the script reports is named (an answer built on the ground truth misses none)
    if command[3] == "check" and "--emit-overrides" not in command:
        reported = set(re.findall(r"\b(?:ERROR|WARNING|INFO) ([A-Z]{3}\d{3})\b", done.stdout))
        assert reported <= set(re.findall(r"\b[A-Z]{3}\d{3}\b", truth)), f"unnamed: {reported}"
    # every planner figure it quotes is one the planner prints
    for figure in re.findall(r"\b\d+\.\d GiB\b", truth):
        assert figure in done.stdout, f"{figure} is not in the output of {task['expected_script']}"
