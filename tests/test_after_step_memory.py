"""``tools/after_step_memory.py``: Megatron-LM's functional tests against the planner's memory after a step.

Always run: every planned row of the committed artifact is what the planner gives now for the row's command, and
the held pipeline inputs take the pipeline layouts' residual to the no-pipeline one, which they do not without.
With ``MEGATRON_LM_GIT`` the artifact is regenerated from the goldens and configs at the pinned commit.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import after_step_memory as tool  # noqa: E402
import planner_validation  # noqa: E402

MEGATRON_LM_GIT = os.environ.get("MEGATRON_LM_GIT")
MIB = 2**20


@pytest.fixture(scope="module")
def artifact() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(tool.ARTIFACT.read_text(encoding="utf-8"))
    return found


def _planned(artifact: dict[str, Any]) -> list[dict[str, Any]]:
    return [row for row in artifact["tests"] if "residual" in row]


def test_every_planned_row_is_what_the_planner_gives_now(artifact: dict[str, Any]) -> None:
    rows = _planned(artifact)
    assert len(rows) >= 40
    for row in rows:
        words = shlex.split(row["command"].removeprefix("python -m checks plan "))
        planned = planner_validation.plan_case(words)
        assert not isinstance(planned, str), (row["test"], planned)
        last = planned.stages[-1]
        assert (planner_validation.after_step(last), last.held_inputs_bytes) == \
            (row["after_step"], row["held_inputs"]), row["test"]
        assert row["residual"] == row["measured"] - row["after_step"]
        assert row["residual_without_held_inputs"] == row["residual"] + row["held_inputs"]


def test_nothing_is_dropped(artifact: dict[str, Any]) -> None:
    """A row is planned, refused with the planner's message, or skipped with the tool's reason."""
    for row in artifact["tests"]:
        assert sum(key in row for key in ("residual", "refused", "skipped")) == 1, row["test"]
        assert all(row.get(key) for key in ("refused", "skipped") if key in row), row["test"]
    summary = artifact["summary"]
    assert summary["planned"] + summary["refused"] + summary["skipped"] == len(artifact["tests"])


def test_held_inputs_take_pipelined_tests_to_the_residual_of_unpipelined_ones(artifact: dict[str, Any]) -> None:
    """What the planner leaves out is a constant (cuBLAS workspaces) once each chunk's held input and its
    gradient are counted; without them it grows with the chunks that receive an input."""
    by_layout = artifact["summary"]["by_layout"]
    rows = _planned(artifact)
    for layout, summary in by_layout.items():
        group = [row for row in rows if row["layout"] == layout]
        assert summary["tests"] == len(group) > 0, layout
        assert summary["median_residual_mib"] == round(statistics.median(r["residual"] for r in group) / MIB, 2)
    base = by_layout["no_pipeline"]["median_residual_mib"]
    for layout in ("pipeline", "interleaved"):
        assert abs(by_layout[layout]["median_residual_mib"] - base) < 5, layout
    assert by_layout["pipeline"]["median_residual_without_held_inputs_mib"] - base > 8
    assert by_layout["interleaved"]["median_residual_without_held_inputs_mib"] - base > 20


def test_a_tokenizer_file_becomes_gpt2s_vocabulary() -> None:
    argv = tool.argv_for({"--num-layers": 2, "--bf16": True, "--use-flash-attn": False,
                          "--vocab-file": "${DATA_PATH}/vocab.json", "--merge-file": "${DATA_PATH}/merges.txt",
                          "--tokenizer-type": "GPT2BPETokenizer"})
    assert argv == ["--num-layers", "2", "--bf16", "--tokenizer-type", "NullTokenizer", "--vocab-size", "50257"]
    assert tool.argv_for({"--tokenizer-type": "NullTokenizer", "--vocab-size": 131073}) == \
        ["--vocab-size", "131073", "--tokenizer-type", "NullTokenizer"]


@pytest.mark.skipif(not MEGATRON_LM_GIT, reason="set MEGATRON_LM_GIT to an NVIDIA/Megatron-LM git directory")
def test_the_artifact_is_what_the_goldens_give(artifact: dict[str, Any]) -> None:
    assert MEGATRON_LM_GIT is not None
    fresh = json.loads(tool.render(tool.build(Path(MEGATRON_LM_GIT))))
    committed = dict(artifact)
    committed.pop("revision")
    assert fresh == committed
