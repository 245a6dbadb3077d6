"""The plan as text or JSON; and, with matplotlib installed, peak memory against the offload fraction.

Formatting only: every figure and verdict is computed by the plan (``checks/plan/job.py``), one entry per
model (:class:`Planned` or :class:`Unplanned`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from checks.errors import InputError
from checks.jsonio import dumps
from checks.plan.job import Entry, Plan, Planned, Unplanned, optimizer_offload_curve
from checks.plan.memory import NONE, StageMemory
from checks.plan.recommend import Option

GIB = 2**30
_SHARED_GPUS = ("each model is planned on its own GPUs; in a colocated NeMo-RL run the models take turns, "
                "and NeMo-RL moves the idle ones' weights and optimizer state to host memory, which this plan "
                "does not count")


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _setting(option: Option) -> str:
    """An option's settings as KEY=VALUE words (shown only for an option that has some)."""
    return " ".join(f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in option.settings.items())


def render_text(entry: Planned) -> str:
    job, rec = entry.job, entry.recommendation
    t, hw, budget = job.training, rec.budget.hardware, rec.budget
    p = t.par
    lines = [
        f"plan{_label(job.target)}: {job.source} on {hw.name} "
        f"({'measured profile' if hw.measured else 'published figures'})",
        f"  TP{p.tensor} PP{p.pipeline}{f' VPP{p.virtual_pipeline}' if p.virtual_pipeline > 1 else ''} "
        f"EP{p.expert} CP{t.context_parallel} DP{t.data_parallel} ({t.world_size} GPUs), sequence "
        f"{t.seq_length} x micro-batch {t.micro_batch_size}, micro-batches per step: {t.num_microbatches}",
        f"  budget per GPU {_gib(budget.device_bytes)} ({_gib(hw.gpu_memory_bytes)} less {budget.headroom:.0%}), "
        f"host per node {_gib(budget.host_bytes_per_node)} ({_gib(hw.host_memory_bytes)} less "
        f"{budget.host_headroom:.0%})",
        "",
    ]
    label = "as configured" + ("" if job.offload == NONE else " (with its offload settings)")
    lines.append(f"{label}, the most loaded GPU of each pipeline stage:")
    for s in entry.configured:
        fits = s.device_bytes <= budget.device_bytes
        lines.append(f"  stage {s.stage}: weights {_gib(s.weights_bytes)}, gradients {_gib(s.grads_bytes)}, "
                     f"optimizer {_gib(s.optimizer_bytes)}, activations {_gib(s.activations_bytes)} = "
                     f"{_gib(s.device_bytes)}{'' if fits else '  DOES NOT FIT'}"
                     + (f"; host {_gib(s.host_bytes)}" if s.host_bytes else ""))
    lines += _configured_time(entry)
    lines += ["", "options (each at the smallest setting that fits, or at its most):"]
    width = max(len(o.mechanism) for o in rec.options)
    for o in rec.options:
        verdict = "fits" if o.fits else "does not fit"
        lines.append(f"  {o.mechanism.ljust(width)}  peak {_gib(o.peak_device_bytes):>10}  host/node "
                     f"{_gib(o.host_bytes_per_node):>10}  step {_ms(o.step_s)} ({o.slowdown:+.1%})  {verdict}"
                     + (f" ({o.note})" if o.note else ""))
        if o.settings:
            lines.append(f"  {' ' * width}  {_setting(o)}")
    lines += ["", f"recommendation: {rec.verdict}"]
    if rec.choice is not None and rec.choice.settings:
        lines.append(f"  set {_setting(rec.choice)} (estimated {rec.choice.slowdown:+.1%} step time)")
    if entry.band is not None:
        lines.append(f"  how sure: {entry.band.describe()}")
    else:
        lines.append("  how sure: no published case of this model family on this hardware was validated; the numbers "
                     "are the model's alone (reference/memory-model.md lists the validated cases)")
    lines += ["", "assumptions:"] + [f"  - {a}" for a in _assumptions(entry)]
    return "\n".join(lines)


def _assumptions(entry: Planned) -> list[str]:
    rec = entry.recommendation
    hw = rec.budget.hardware
    return [*(a.text for a in entry.job.assumptions),
            f"hardware {hw.name}: " + "; ".join(hw.sources),
            "step time (checks/plan/throughput.py): FLOPs (recompute included) at "
            + entry.baseline_time.efficiency_source
            + "; plus the pipeline bubble, exposed tensor-, expert- and data-parallel communication, the optimizer "
            "step, and the offload copies and host optimizer step the job cannot hide",
            *([entry.configured_time.host_note] if entry.configured_time.host_note else []),
            "activations: Megatron-Core with the Transformer Engine spec (checks/plan/activations.py); host "
            "memory per node counts every GPU at the most host-hungry stage"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _configured_time(entry: Planned) -> list[str]:
    """The step as configured, its slowest stage's parts, and what its own offload costs."""
    configured, baseline = entry.configured_time, entry.baseline_time
    slowest = configured.slowest
    parts = ", ".join(f"{name.removesuffix('_s').replace('_', ' ')} {_ms(value)}"
                      for name, value in slowest.parts().items() if value > 0)
    lines = [f"  step {_ms(configured.step_s)} (stage {slowest.stage}, the slowest: {parts})"]
    if entry.job.offload != NONE:
        extra = configured.step_s - baseline.step_s
        lines.append(f"  its offload costs {_ms(extra)} per step ({extra / baseline.step_s:+.1%} over "
                     f"{_ms(baseline.step_s)} without it)")
    return lines


def _time_json(entry: Planned) -> dict[str, Any]:
    configured, baseline = entry.configured_time, entry.baseline_time
    slowest = configured.slowest
    return {"step_s": configured.step_s, "slowest_stage": slowest.stage, "parts": slowest.parts(),
            "offload_step_s": configured.step_s - baseline.step_s, "without_offload_step_s": baseline.step_s}


def _band_json(entry: Planned) -> dict[str, Any] | None:
    band = entry.band
    if band is None:
        return None
    return {"case": band.case, "matches": list(band.matches), "errors_pct": dict(band.errors_pct),
            "fitted": band.fitted, "text": band.describe()}


def _stage_json(s: StageMemory) -> dict[str, Any]:
    return {**asdict(s), "device_bytes": s.device_bytes, "after_step_bytes": s.after_step_bytes,
            "host_bytes": s.host_bytes}


def render_json(entry: Planned) -> str:
    return dumps(_document(entry))


def _document(entry: Planned) -> dict[str, Any]:
    job, rec = entry.job, entry.recommendation
    t = job.training
    return {
        "target": job.target,
        "status": entry.status,
        "source": job.source,
        "hardware": {**asdict(rec.budget.hardware)},
        "training": {"tensor_parallel": t.par.tensor, "pipeline_parallel": t.par.pipeline,
                     "virtual_pipeline_parallel": t.par.virtual_pipeline, "expert_parallel": t.par.expert,
                     "expert_tensor_parallel": t.par.expert_tensor, "context_parallel": t.context_parallel,
                     "data_parallel": t.data_parallel, "world_size": t.world_size, "seq_length": t.seq_length,
                     "micro_batch_size": t.micro_batch_size, "num_microbatches": t.num_microbatches,
                     "sequence_parallel": t.sequence_parallel, "recompute": t.recompute},
        "budget": {"device_bytes": rec.budget.device_bytes, "host_bytes_per_node": rec.budget.host_bytes_per_node,
                   "headroom": rec.budget.headroom, "host_headroom": rec.budget.host_headroom,
                   "efficiency": entry.baseline_time.efficiency,
                   "efficiency_source": entry.baseline_time.efficiency_source},
        "as_configured": {"offload": asdict(job.offload), "stages": [_stage_json(s) for s in entry.configured],
                          "peak_device_bytes": entry.configured_peak_bytes,
                          "host_bytes_per_node": entry.configured_host_bytes_per_node,
                          **_time_json(entry)},
        "options": [asdict(o) for o in rec.options],
        "recommendation": {**asdict(rec.choice), "confidence": _band_json(entry)} if rec.choice else None,
        "verdict": rec.verdict,
        "assumptions": _assumptions(entry),
    }


def _label(target: str | None) -> str:
    return f" [{target}]" if target else ""


def _unplanned_text(entry: Unplanned) -> list[str]:
    what = "not planned" if entry.status == "inference_only" else "not built"
    lines = [f"{what}{_label(entry.target)}: {entry.reason}"]
    if entry.job is not None:
        p, t = entry.job.training.par, entry.job.training
        lines.append(f"  weights {_gib(entry.weights_bytes_per_gpu or 0)} per GPU (TP{p.tensor} PP{p.pipeline} "
                     f"EP{p.expert} CP{t.context_parallel}, {entry.job.source}); activations of its forward "
                     "passes are not estimated")
    elif entry.unsized:
        lines.append(f"  size unknown: {entry.unsized}")
    return lines


def _unplanned_json(entry: Unplanned) -> dict[str, Any]:
    job = entry.job
    return {"target": entry.target, "status": entry.status, "reason": entry.reason,
            "source": job.source if job else None,
            "weights_bytes_per_gpu": entry.weights_bytes_per_gpu,
            "unsized": entry.unsized or None}


def _single(plan: Plan) -> Planned | None:
    """The one planned job of a one-model input, rendered in the single-model shape."""
    entries = plan.entries
    if len(entries) == 1 and isinstance(entries[0], Planned):
        return entries[0]
    return None


def render_text_all(plan: Plan) -> str:
    if (one := _single(plan)) is not None:
        return render_text(one)
    blocks = []
    for entry in plan.entries:
        if isinstance(entry, Unplanned):
            blocks.append("\n".join(_unplanned_text(entry)))
        else:
            blocks.append(render_text(entry).replace("\nassumptions:\n", f"\nassumptions:\n  - {_SHARED_GPUS}\n"))
    verdicts = [f"{_target(e)}: {e.status.replace('_', ' ')}" for e in plan.entries]
    blocks.append(f"models: {'; '.join(verdicts)} (overall: {plan.status.replace('_', ' ')})")
    return "\n\n".join(blocks)


def _target(entry: Entry) -> str | None:
    return entry.target if isinstance(entry, Unplanned) else entry.job.target


def render_json_all(plan: Plan) -> str:
    """One model: the single-model document. Several: ``{"status", "models": [...]}``, one document each."""
    if (one := _single(plan)) is not None:
        return render_json(one)
    models = []
    for entry in plan.entries:
        if isinstance(entry, Unplanned):
            models.append(_unplanned_json(entry))
        else:
            document = _document(entry)
            document["assumptions"] = [_SHARED_GPUS, *document["assumptions"]]
            models.append(document)
    return dumps({"status": plan.status, "models": models})


def plot_all(plan: Plan, path: str) -> None:
    """One curve per planned model, on one figure (the budget is the same for all)."""
    _plot([e for e in plan.entries if isinstance(e, Planned)], path)


def _plot(planned: Sequence[Planned], path: str) -> None:
    """Peak device memory against ``optimizer_offload_fraction``, with the budget (needs matplotlib)."""
    try:
        import matplotlib  # type: ignore[import-not-found]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found]
    except ImportError:
        raise InputError("--plot", "needs matplotlib: pip install matplotlib") from None
    figure, axis = plt.subplots(figsize=(6, 4))
    for entry in planned:
        curve = optimizer_offload_curve(entry.job)
        axis.plot([f for f, _ in curve], [b / GIB for _, b in curve], marker="o",
                  label=f"peak memory per GPU{_label(entry.job.target)}")
    axis.axhline(planned[0].recommendation.budget.device_bytes / GIB, color="red", linestyle="--", label="budget")
    axis.set_xlabel("optimizer_offload_fraction")
    axis.set_ylabel("GiB")
    axis.set_title(planned[0].job.source if len(planned) == 1 else "; ".join(
        f"{e.job.target}: {e.job.source}" for e in planned))
    axis.legend()
    figure.tight_layout()
    try:
        figure.savefig(path)
    except (OSError, ValueError) as err:  # ValueError: a file type matplotlib cannot write (plot.xyz)
        raise InputError(path, f"cannot write the plot: {err}") from None
    finally:
        plt.close(figure)
