"""The example command's time estimate and its --yes guard: the card's commands run as written, without --yes, and
take between half and twice the time they estimate (issue 15); a long run asks for --yes before it trains."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("torch")

import torch

from examples import run_offload

ROOT = Path(__file__).resolve().parent.parent
TIME_LINE = re.compile(r"^time: estimated ([\d.]+) s, took ([\d.]+) s .* from a warm step of ([\d.]+) s", re.M)


def card_commands() -> list[list[str]]:
    """The card's example commands (measured_results), as argv after the script."""
    card = yaml.safe_load((ROOT / "card.yaml").read_text(encoding="utf-8"))
    prefix = ["python", "examples/run_offload.py"]
    argvs = [shlex.split(r["command"]) for r in card["measured_results"]]
    return [argv[2:] for argv in argvs if argv[:2] == prefix]


def test_the_card_has_both_example_commands() -> None:
    """Else the test below would pass on fewer commands than the card states."""
    assert [argv[argv.index("--out") + 1] for argv in card_commands()] == [
        "reference/benchmarks/example_offload_run_dense.json", "reference/benchmarks/example_offload_run_moe.json"]


@pytest.mark.parametrize("argv", card_commands(), ids=lambda argv: " ".join(argv[:argv.index("--out")]) or "dense")
def test_a_card_command_runs_without_yes_within_twice_its_estimate(argv: list[str], tmp_path: Path) -> None:
    """The command as the card writes it (only --out moved, so the committed artifact stays), in a fresh process as a
    user runs it: it does not ask for --yes, and its wall time, start-up and exit included, is within 2x of the
    estimate it printed. A ratio of one run, so a loaded machine slows both sides alike. And it writes the bytes the
    committed artifact records."""
    out = tmp_path / "run.json"
    argv_out = argv[argv.index("--out") + 1]
    argv = [*argv[:argv.index("--out")], "--out", str(out), *argv[argv.index("--out") + 2:]]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "examples/run_offload.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          env=os.environ.copy(), timeout=run_offload.BUDGET_S * 2)
    real_s = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    match = TIME_LINE.search(done.stderr)
    assert match, done.stderr[-2000:]
    estimate_s, took_s, warm_step_s = (float(g) for g in match.groups())
    assert 0.5 <= real_s / estimate_s <= 2, (real_s, estimate_s, warm_step_s)
    assert 0.5 <= took_s / estimate_s <= 2, (took_s, estimate_s)
    assert estimate_s < run_offload.BUDGET_S / 2, estimate_s  # it would run without asking at twice the time
    _assert_same_bytes(json.loads(out.read_text()), json.loads((ROOT / argv_out).read_text()))


# What the committed artifact records exactly on any machine: the run's byte and tensor counts (its losses agree to
# about 1 ulp across CPU models, its times not at all).
EXACT = ("peak_device_bytes", "accounted_peak_device_bytes", "activation_peak_device_bytes", "optimizer_device_bytes",
         "host_peak_bytes", "d2h_bytes_per_step", "h2d_bytes_per_step", "tensors_offloaded_per_step",
         "max_abs_loss_delta")


def _assert_same_bytes(run: dict[str, Any], committed: dict[str, Any]) -> None:
    """The run reproduces the committed artifact the card cites: every variant, every byte."""
    assert [v["name"] for v in run["variants"]] == [v["name"] for v in committed["variants"]]
    for ours, theirs in zip(run["variants"], committed["variants"], strict=True):
        assert {k: ours[k] for k in EXACT} == {k: theirs[k] for k in EXACT}, ours["name"]
        assert ours["losses"] == pytest.approx(theirs["losses"], rel=1e-5), ours["name"]


def test_a_long_run_asks_for_yes_in_one_line_without_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    trained: list[int] = []
    built: list[int] = []
    train, batches = run_offload.train, run_offload.batches

    def counting_train(variant: Any, cfg: Any, data: list[Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        trained.append(len(data))
        return train(variant, cfg, data, *args, **kwargs)

    def counting_batches(cfg: Any, batch_size: int, steps: int, *args: Any) -> Any:
        built.append(steps)
        return batches(cfg, batch_size, steps, *args)

    monkeypatch.setattr(run_offload, "train", counting_train)
    monkeypatch.setattr(run_offload, "batches", counting_batches)
    out = tmp_path / "run.json"
    assert run_offload.main(["--steps", "100000", "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: this run would train 5 variants x 100000 steps"), err
    assert f"more than the {run_offload.BUDGET_S:.0f} s this command runs without asking; pass --yes to run it" in err
    assert trained == [run_offload.PROBE_STEPS] and built == [1] and not out.exists()  # only the probe ran


# A warm step of the default dense model on the idle 2-core machine the card's numbers come from: 0.068-0.10 s
IDLE_WARM_STEP_S = 0.068


@pytest.mark.parametrize(("steps", "asks"), [(8, False), (100, False), (1000, True)])
def test_only_a_long_run_asks_on_cpu(steps: int, asks: bool) -> None:
    """--steps 1000 (125 times the default dense run) asks even on an idle machine; the default does not, even at
    20 times the idle step time (a busy machine)."""
    estimate = run_offload.Estimate(spent_s=5.0, warm_step_s=IDLE_WARM_STEP_S, steps=steps, variants=5)
    assert (run_offload.needs_yes(estimate, torch.device("cpu"), larger=False) is not None) == asks
    busy = run_offload.Estimate(spent_s=20.0, warm_step_s=20 * IDLE_WARM_STEP_S, steps=8, variants=7)
    assert run_offload.needs_yes(busy, torch.device("cpu"), larger=False) is None


def test_a_larger_run_on_a_gpu_asks_however_quick() -> None:
    quick = run_offload.Estimate(spent_s=1.0, warm_step_s=0.001, steps=8, variants=5)
    assert run_offload.needs_yes(quick, torch.device("cuda"), larger=False) is None
    assert "larger than the default run, on a GPU" in str(run_offload.needs_yes(quick, torch.device("cuda"),
                                                                                  larger=True))
    assert run_offload.needs_yes(quick, torch.device("cpu"), larger=True) is None


def test_the_estimate_counts_the_offload_variants_dearer_than_the_baseline() -> None:
    estimate = run_offload.Estimate(spent_s=2.0, warm_step_s=0.1, steps=8, variants=5)
    assert estimate.training_s == pytest.approx(8 * 0.1 * (1 + 4 * run_offload.OFFLOAD_STEP_COST))
    assert estimate.total_s == pytest.approx(2.0 + estimate.training_s)
