"""How sure a plan is: the validated errors of the published case closest to the job.

The cases and their errors are ``checks/data/validation_bands.json``, generated from
``reference/benchmarks/planner_validation.json`` (``tools/planner_validation.py``, which reruns the planner on
published measurements). "Closest" weighs what moves the planner's error most in that artifact: the model
family (the step-time efficiency is per family), the hardware, whether the optimizer is offloaded (the host path
has its own constants) and whether the job is pipelined (the schedule's in-flight counts). A job that matches no
case on family and hardware has no validated band, and the plan says so rather than borrowing one.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from checks.plan.hardware import Hardware, base_name
from checks.plan.memory import Offload, Training
from checks.plan.throughput import family

_DATA = Path(__file__).resolve().parent.parent / "data" / "validation_bands.json"


@dataclass(frozen=True)
class Band:
    case: str  # the published case's id in the validation artifact
    matches: tuple[str, ...]  # what the job shares with it: "family moe", "hardware h100-sxm", "no pipeline", ...
    errors_pct: tuple[tuple[str, float], ...]  # metric, the case's largest absolute error in %
    fitted: tuple[str, ...]  # the metrics a planner constant was fitted to on this case: not predictions

    @property
    def predicted(self) -> tuple[tuple[str, float], ...]:
        """The errors that are predictions: not those of a metric a constant was fitted to."""
        return tuple((metric, error) for metric, error in self.errors_pct if metric not in self.fitted)

    def describe(self) -> str:
        errors = ", ".join(f"{metric.replace('_', ' ')} {error:.1f}%" for metric, error in self.predicted)
        names = " and ".join(metric.replace("_", " ") for metric in self.fitted)
        fitted = f"; a constant was fitted to its {names}, so it gives no band for that" if self.fitted else ""
        return f"closest validated case {self.case} ({', '.join(self.matches)}): off by {errors}{fitted}"


@functools.lru_cache(maxsize=1)
def _cases() -> tuple[dict[str, object], ...]:
    return tuple(json.loads(_DATA.read_text(encoding="utf-8"))["cases"])


_WEIGHTS = {"family": 8, "hardware": 4, "optimizer offload": 2, "pipeline": 1}


def _label(name: str, value: object) -> str:
    """What a match means: "family moe", "hardware h100-sxm", "optimizer offload" or "no optimizer offload"."""
    if isinstance(value, bool):
        return name if value else f"no {name}"
    return f"{name} {value}"


def closest(t: Training, offload: Offload, hw: Hardware) -> Band | None:
    """The published case most like this job, or None when none shares its model family and hardware. Among
    equally close cases the one furthest off on any metric: the band quoted is never the kindest of them."""
    facts = {"family": family(t), "hardware": base_name(hw),
             "optimizer offload": offload.optimizer_offload_fraction > 0, "pipeline": t.par.pipeline > 1}
    best: tuple[int, float, Band] | None = None
    for case in _cases():
        seen = {"family": case["family"], "hardware": case["hardware"], "optimizer offload": case["optimizer_offload"],
                "pipeline": int(str(case["pipeline"])) > 1}
        matches = tuple(name for name in _WEIGHTS if seen[name] == facts[name])
        if "family" not in matches or "hardware" not in matches:
            continue
        score = sum(_WEIGHTS[name] for name in matches)
        matches = tuple(_label(name, facts[name]) for name in matches)
        errors, fitted = case["errors_pct"], case["fitted"]
        assert isinstance(errors, dict) and isinstance(fitted, list)
        band = Band(str(case["case"]), matches, tuple((str(k), float(v)) for k, v in errors.items()),
                    tuple(str(m) for m in fitted))
        worst = max((error for _, error in band.predicted), default=0.0)
        if best is None or (score, worst) > best[:2]:
            best = (score, worst, band)
    return best[2] if best else None
