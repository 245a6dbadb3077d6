"""The plan as text or JSON; and, with matplotlib installed, peak memory against the offload fraction."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from checks.errors import InputError
from checks.plan.memory import NONE, Offload, StageMemory, plan_memory
from checks.plan.recommend import FRACTIONS, Option, Recommendation, host_per_node, peak
from checks.plan.setup import Job

GIB = 2**30


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _setting(option: Option) -> str:
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in option.settings.items()) \
        or "(nothing to change)"


def as_configured(job: Job) -> list[StageMemory]:
    return plan_memory(job.training, job.offload)


def status(job: Job, rec: Recommendation) -> str:
    stages = as_configured(job)
    host = host_per_node(stages, rec.budget.hardware, job.training.world_size)
    if peak(stages) <= rec.budget.device_bytes and host <= rec.budget.host_bytes_per_node:
        return "fits"
    return "fits_with_change" if rec.choice is not None else "does_not_fit"


def exit_code(job: Job, rec: Recommendation) -> int:
    """0: the job fits as configured; 1: it does not (the recommendation says what would)."""
    return 0 if status(job, rec) == "fits" else 1


def render_text(job: Job, rec: Recommendation) -> str:
    t, hw, budget = job.training, rec.budget.hardware, rec.budget
    p = t.par
    lines = [
        f"plan: {job.source} on {hw.name} ({'measured profile' if hw.measured else 'vendor specification'})",
        f"  TP{p.tensor} PP{p.pipeline}{f' VPP{p.virtual_pipeline}' if p.virtual_pipeline > 1 else ''} "
        f"EP{p.expert} CP{t.context_parallel} DP{t.data_parallel} ({t.world_size} GPUs), sequence "
        f"{t.seq_length} x micro-batch {t.micro_batch_size}, micro-batches per step: {t.num_microbatches}",
        f"  budget per GPU {_gib(budget.device_bytes)} ({_gib(hw.gpu_memory_bytes)} less {budget.headroom:.0%}), "
        f"host per node {_gib(budget.host_bytes_per_node)} ({_gib(hw.host_memory_bytes)} less "
        f"{budget.host_headroom:.0%})",
        "",
    ]
    configured = as_configured(job)
    label = "as configured" + ("" if job.offload == NONE else " (with its offload settings)")
    lines.append(f"{label}, the most loaded GPU of each pipeline stage:")
    for s in configured:
        fits = s.device_bytes <= budget.device_bytes
        lines.append(f"  stage {s.stage}: weights {_gib(s.weights_bytes)}, gradients {_gib(s.grads_bytes)}, "
                     f"optimizer {_gib(s.optimizer_bytes)}, activations {_gib(s.activations_bytes)} = "
                     f"{_gib(s.device_bytes)}{'' if fits else '  DOES NOT FIT'}"
                     + (f"; host {_gib(s.host_bytes)}" if s.host_bytes else ""))
    lines += ["", "options (each at the smallest setting that fits, or at its most):"]
    width = max(len(o.mechanism) for o in rec.options)
    for o in rec.options:
        verdict = "fits" if o.fits else "does not fit"
        lines.append(f"  {o.mechanism.ljust(width)}  peak {_gib(o.peak_device_bytes):>10}  host/node "
                     f"{_gib(o.host_bytes_per_node):>10}  step {o.slowdown:+6.1%}  {verdict}"
                     + (f" ({o.note})" if o.note else ""))
        if o.settings:
            lines.append(f"  {' ' * width}  {_setting(o)}")
    lines += ["", f"recommendation: {rec.verdict}"]
    if rec.choice is not None and rec.choice.settings:
        lines.append(f"  set {_setting(rec.choice)} (estimated {rec.choice.slowdown:+.1%} step time)")
    lines += ["", "assumptions:"] + [f"  - {a}" for a in _assumptions(job, rec)]
    return "\n".join(lines)


def _assumptions(job: Job, rec: Recommendation) -> list[str]:
    hw = rec.budget.hardware
    return [*job.assumptions,
            f"hardware {hw.name}: " + "; ".join(hw.sources),
            f"step time from FLOPs at {rec.budget.mfu:.0%} model-FLOPs utilisation; offload overhead is the "
            "copy and host-optimizer time the step cannot hide",
            "activations: Megatron-Core with the Transformer Engine spec (checks/plan/activations.py); host "
            "memory per node counts every GPU at the most host-hungry stage"]


def _stage_json(s: StageMemory) -> dict[str, Any]:
    return {**asdict(s), "device_bytes": s.device_bytes, "host_bytes": s.host_bytes}


def render_json(job: Job, rec: Recommendation) -> str:
    configured = as_configured(job)
    t = job.training
    document = {
        "status": status(job, rec),
        "source": job.source,
        "hardware": {**asdict(rec.budget.hardware)},
        "training": {"tensor_parallel": t.par.tensor, "pipeline_parallel": t.par.pipeline,
                     "virtual_pipeline_parallel": t.par.virtual_pipeline, "expert_parallel": t.par.expert,
                     "expert_tensor_parallel": t.par.expert_tensor, "context_parallel": t.context_parallel,
                     "data_parallel": t.data_parallel, "world_size": t.world_size, "seq_length": t.seq_length,
                     "micro_batch_size": t.micro_batch_size, "num_microbatches": t.num_microbatches,
                     "sequence_parallel": t.sequence_parallel, "recompute": t.recompute},
        "budget": {"device_bytes": rec.budget.device_bytes, "host_bytes_per_node": rec.budget.host_bytes_per_node,
                   "headroom": rec.budget.headroom, "host_headroom": rec.budget.host_headroom, "mfu": rec.budget.mfu},
        "as_configured": {"offload": asdict(job.offload), "stages": [_stage_json(s) for s in configured],
                          "peak_device_bytes": peak(configured),
                          "host_bytes_per_node": host_per_node(configured, rec.budget.hardware, t.world_size)},
        "options": [asdict(o) for o in rec.options],
        "recommendation": asdict(rec.choice) if rec.choice else None,
        "verdict": rec.verdict,
        "assumptions": _assumptions(job, rec),
    }
    return json.dumps(document, indent=2)


def plot(job: Job, rec: Recommendation, path: str) -> None:
    """Peak device memory against ``optimizer_offload_fraction``, with the budget (needs matplotlib)."""
    try:
        import matplotlib  # type: ignore[import-not-found]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found]
    except ImportError:
        raise InputError("--plot", "needs matplotlib: pip install matplotlib") from None
    fractions = (0.0, *FRACTIONS)
    peaks = [peak(plan_memory(job.training, Offload(optimizer_offload_fraction=f))) / GIB for f in fractions]
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.plot(fractions, peaks, marker="o", label="peak memory per GPU")
    axis.axhline(rec.budget.device_bytes / GIB, color="red", linestyle="--", label="budget")
    axis.set_xlabel("optimizer_offload_fraction")
    axis.set_ylabel("GiB")
    axis.set_title(job.source)
    axis.legend()
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as err:
        raise InputError(path, f"cannot write the plot: {err}") from None
    plt.close(figure)
