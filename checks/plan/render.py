"""The plan as text or JSON; and, with matplotlib installed, peak memory against the offload fraction.

A config with several Megatron models (NeMo-RL's policy, value model, teachers) gives one entry per model:
a :data:`Planned` job for a model that trains, an :class:`Unplanned` note for one the planner does not
plan (it runs forward passes only, or NeMo-RL never builds it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from checks.errors import InputError
from checks.jsonio import dumps
from checks.plan.memory import NONE, Offload, StageMemory, plan_memory
from checks.plan.recommend import FRACTIONS, Option, Recommendation, host_per_node, peak
from checks.plan.setup import Job

GIB = 2**30
_SHARED_GPUS = ("each model is planned on its own GPUs; in a colocated NeMo-RL run the models take turns, "
                "and NeMo-RL moves the idle ones' weights and optimizer state to host memory, which this plan "
                "does not count")


@dataclass(frozen=True)
class Unplanned:
    """A model shown but not planned: ``inference_only`` (no gradients, optimizer state or activations kept
    for backward, which the training-step model would count) or ``not_built`` (NeMo-RL never builds it)."""

    target: str | None
    status: str  # "inference_only" | "not_built"
    reason: str
    job: Job | None = None  # an inference-only model whose size is known: its weights are shown
    unsized: str = ""  # an inference-only model whose size is not: why, and how to give it


Planned = tuple[Job, Recommendation]
Entry = Planned | Unplanned


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
        f"plan{_label(job.target)}: {job.source} on {hw.name} "
        f"({'measured profile' if hw.measured else 'vendor specification'})",
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
    return dumps(_document(job, rec))


def _document(job: Job, rec: Recommendation) -> dict[str, Any]:
    configured = as_configured(job)
    t = job.training
    return {
        "target": job.target,
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


def _label(target: str | None) -> str:
    return f" [{target}]" if target else ""


def weights_bytes(job: Job) -> int:
    """The weights on the most loaded GPU, what an inference-only model holds for certain."""
    return max(s.weights_bytes for s in plan_memory(job.training, job.offload))


def _unplanned_text(entry: Unplanned) -> list[str]:
    what = "not planned" if entry.status == "inference_only" else "not built"
    lines = [f"{what}{_label(entry.target)}: {entry.reason}"]
    if entry.job is not None:
        p, t = entry.job.training.par, entry.job.training
        lines.append(f"  weights {_gib(weights_bytes(entry.job))} per GPU (TP{p.tensor} PP{p.pipeline} "
                     f"EP{p.expert} CP{t.context_parallel}, {entry.job.source}); activations of its forward "
                     "passes are not estimated")
    elif entry.unsized:
        lines.append(f"  size unknown: {entry.unsized}")
    return lines


def _unplanned_json(entry: Unplanned) -> dict[str, Any]:
    job = entry.job
    return {"target": entry.target, "status": entry.status, "reason": entry.reason,
            "source": job.source if job else None,
            "weights_bytes_per_gpu": weights_bytes(job) if job else None,
            "unsized": entry.unsized or None}


def overall(entries: Sequence[Entry]) -> str:
    """``fits`` when every planned model fits, ``does_not_fit`` when one fits in no way, else ``fits_with_change``."""
    found = [status(*e) for e in entries if not isinstance(e, Unplanned)]
    if all(f == "fits" for f in found):
        return "fits"
    return "does_not_fit" if "does_not_fit" in found else "fits_with_change"


def exit_code_all(entries: Sequence[Entry]) -> int:
    """0: every planned model fits as configured; 1: one does not."""
    return 0 if overall(entries) == "fits" else 1


def _single(entries: Sequence[Entry]) -> Planned | None:
    """The one planned job of a one-model input, rendered in the single-model shape."""
    if len(entries) == 1 and not isinstance(entries[0], Unplanned):
        return entries[0]
    return None


def render_text_all(entries: Sequence[Entry]) -> str:
    if (one := _single(entries)) is not None:
        return render_text(*one)
    blocks = []
    for entry in entries:
        if isinstance(entry, Unplanned):
            blocks.append("\n".join(_unplanned_text(entry)))
        else:
            blocks.append(render_text(*entry).replace("\nassumptions:\n", f"\nassumptions:\n  - {_SHARED_GPUS}\n"))
    verdicts = [f"{e.target}: {e.status.replace('_', ' ')}" if isinstance(e, Unplanned)
                else f"{e[0].target}: {status(*e).replace('_', ' ')}" for e in entries]
    blocks.append(f"models: {'; '.join(verdicts)} (overall: {overall(entries).replace('_', ' ')})")
    return "\n\n".join(blocks)


def render_json_all(entries: Sequence[Entry]) -> str:
    """One model: the single-model document. Several: ``{"status", "models": [...]}``, one document each."""
    if (one := _single(entries)) is not None:
        return render_json(*one)
    models = []
    for entry in entries:
        if isinstance(entry, Unplanned):
            models.append(_unplanned_json(entry))
        else:
            document = _document(*entry)
            document["assumptions"] = [_SHARED_GPUS, *document["assumptions"]]
            models.append(document)
    return dumps({"status": overall(entries), "models": models})


def plot_all(entries: Sequence[Entry], path: str) -> None:
    """One curve per planned model, on one figure (the budget is the same for all)."""
    planned = [e for e in entries if not isinstance(e, Unplanned)]
    _plot(planned, path)


def plot(job: Job, rec: Recommendation, path: str) -> None:
    _plot([(job, rec)], path)


def _plot(planned: Sequence[Planned], path: str) -> None:
    """Peak device memory against ``optimizer_offload_fraction``, with the budget (needs matplotlib)."""
    try:
        import matplotlib  # type: ignore[import-not-found]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found]
    except ImportError:
        raise InputError("--plot", "needs matplotlib: pip install matplotlib") from None
    fractions = (0.0, *FRACTIONS)
    figure, axis = plt.subplots(figsize=(6, 4))
    for job, _ in planned:
        peaks = [peak(plan_memory(job.training, Offload(optimizer_offload_fraction=f))) / GIB for f in fractions]
        axis.plot(fractions, peaks, marker="o", label=f"peak memory per GPU{_label(job.target)}")
    axis.axhline(planned[0][1].budget.device_bytes / GIB, color="red", linestyle="--", label="budget")
    axis.set_xlabel("optimizer_offload_fraction")
    axis.set_ylabel("GiB")
    axis.set_title(planned[0][0].source if len(planned) == 1 else "; ".join(
        f"{job.target}: {job.source}" for job, _ in planned))
    axis.legend()
    figure.tight_layout()
    try:
        figure.savefig(path)
    except (OSError, ValueError) as err:  # ValueError: a file type matplotlib cannot write (plot.xyz)
        raise InputError(path, f"cannot write the plot: {err}") from None
    finally:
        plt.close(figure)
