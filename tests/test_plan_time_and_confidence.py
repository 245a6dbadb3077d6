"""The plan's step time as configured (issue 14, deliverable 4) and the confidence it quotes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks.cli import main
from checks.plan.confidence import closest
from checks.plan.hardware import HARDWARE
from checks.plan.memory import NONE, Offload
from checks.plan.presets import PRESETS
from checks.plan.recommend import Budget, timed
from checks.plan.setup import from_preset

ROOT = Path(__file__).resolve().parent.parent


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    main(["plan", *argv, "--format", "json"])
    document: dict[str, object] = json.loads(capsys.readouterr().out)
    return document


def test_the_configured_offload_is_priced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A job already configured with optimizer offload shows what that offload costs per step, and its parts add
    up to the step (before, the plan printed no cost for the offload the job was configured with)."""
    config = tmp_path / "job.yaml"
    config.write_text("model:\n  tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n"
                      "  expert_model_parallel_size: 4\n  bf16: true\n"
                      "optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"
                      "  use_distributed_optimizer: true\n  use_precision_aware_optimizer: true\n"
                      "train:\n  global_batch_size: 8\n  micro_batch_size: 1\n", encoding="utf-8")
    document = _plan(capsys, str(config), "--preset", "qwen3-30b-a3b", "--gpus", "16")
    configured = document["as_configured"]
    assert isinstance(configured, dict)
    parts = configured["parts"]
    assert configured["step_s"] == pytest.approx(sum(parts.values()))
    assert parts["optimizer_offload_s"] > 0
    assert configured["offload_step_s"] == pytest.approx(configured["step_s"] - configured["without_offload_step_s"])
    assert configured["offload_step_s"] > 0


def test_overlap_is_read_from_the_config() -> None:
    """overlap_cpu_optimizer_d2h_h2d, set in the config, shortens the configured step (it was never read)."""
    job = from_preset(PRESETS["qwen3-30b-a3b"])
    budget = Budget(HARDWARE["h100-sxm"])
    plain = timed(job.training, Offload(optimizer_offload_fraction=1.0), budget).step_s
    overlapped = timed(job.training, Offload(optimizer_offload_fraction=1.0, overlap_cpu_optimizer_d2h_h2d=True),
                       budget).step_s
    assert overlapped < plain


def test_the_band_is_the_closest_validated_case() -> None:
    bands = json.loads((ROOT / "checks/data/validation_bands.json").read_text(encoding="utf-8"))["cases"]
    moe = from_preset(PRESETS["qwen3-30b-a3b"]).training
    band = closest(moe, Offload(optimizer_offload_fraction=0.5), HARDWARE["h100-sxm"])
    assert band is not None and band.case.startswith("bridge-offload-card/")
    assert "optimizer offload" in band.matches and "family moe" in band.matches
    # among equally close cases, the one furthest off is quoted
    peers = [b for b in bands if b["family"] == "moe" and b["hardware"] == "h100-sxm" and b["optimizer_offload"]
             and b["pipeline"] > 1]
    assert max(band.predicted, key=lambda e: e[1])[1] == max(
        max(v for k, v in b["errors_pct"].items() if k not in b["fitted"]) for b in peers)


def test_a_fitted_error_is_no_band() -> None:
    """A pipelined dense job on H100 is closest to Megatron-LM's interleaved 7B run, whose step time the
    deterministic-mode efficiency was fitted to: the plan quotes that case's memory errors, not its step time's."""
    dense = from_preset(PRESETS["llama3-70b"]).training
    band = closest(dense, NONE, HARDWARE["h100-sxm"])
    assert band is not None and band.case == "megatron-lm/gpt3_7b_tp1_pp4_memory_speed/h100"
    assert band.fitted == ("step_time",) and "step_time" not in dict(band.predicted)
    assert "step time" not in band.describe().split(";")[0] and "gives no band for that" in band.describe()


def test_no_band_without_a_case_of_the_family_on_the_hardware() -> None:
    """Unknown is not a default: a hybrid model on MI300X borrows no other job's error."""
    hybrid = from_preset(PRESETS["nemotron-h-8b"]).training
    assert closest(hybrid, NONE, HARDWARE["mi300x"]) is None


def test_the_recommendation_says_how_sure_it_is(capsys: pytest.CaptureFixture[str]) -> None:
    document = _plan(capsys, "--preset", "qwen3-30b-a3b", "--gpus", "8")
    recommendation = document["recommendation"]
    assert isinstance(recommendation, dict)
    confidence = recommendation["confidence"]
    assert confidence is not None and confidence["case"].startswith("bridge-offload-card/")
    main(["plan", "--preset", "qwen3-30b-a3b", "--gpus", "8"])
    assert "how sure: closest validated case bridge-offload-card/" in capsys.readouterr().out
