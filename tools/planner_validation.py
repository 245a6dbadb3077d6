"""Rerun the planner on published measurements and write ``reference/benchmarks/planner_validation.json``.

Every case in ``tools/data/published_cases.json`` is a job someone measured and published, written the way a
user gives it to ``python -m checks plan`` (a Bridge ``run_recipe.py`` command, a recipe name, a Megatron-LM
command line), with the published values and the line each comes from. The tool plans each case through the
same code path as the ``plan`` command (``checks/plan/job.py``) and records, per case and metric, the published
value, the prediction and the error (prediction / published - 1):

- ``model_states``: memory allocated after a step against the planner's bytes between steps: weights,
  gradients, optimizer state, and the pipeline inputs the model chunks keep (``StageMemory.after_step_bytes``);
  ``peak``: the allocator's peak against the planner's device bytes;
- ``offload_savings``: what optimizer offload saves against the baseline case, as the source states it;
- ``step_time`` and ``offload_added_time`` (the offload case's step less its baseline's, both published);
- ``layer_activations``: a published per-layer formula against the planner's bytes for one layer.

A source that does not say which pipeline stage it measured is compared with every stage, and the case's error
is the stage furthest off. A case the planner refuses is listed under ``unexpressed`` with the planner's own
message, never dropped. Nothing here imports torch or megatron; the run takes seconds.

Usage:
    python tools/planner_validation.py            # write the artifact
    python tools/planner_validation.py --check    # exit 1 when the committed artifact is not what the code gives
    python tools/planner_validation.py --table    # print the markdown table
    python tools/planner_validation.py --fit-host-floor   # refit the eager-MoE host floor (checks/plan/hardware.py)
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import operator
import re
import shlex
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the checker is imported from this checkout
    sys.path.insert(0, str(ROOT))

DATA = ROOT / "tools" / "data" / "published_cases.json"
ARTIFACT = ROOT / "reference" / "benchmarks" / "planner_validation.json"
COMMAND = "python tools/planner_validation.py"

# The acceptance bounds of issue 14, as fractions of the published value; None: reported, not bounded.
BOUNDS: dict[str, float | None] = {
    "model_states": 0.05,
    "peak": 0.10,
    "offload_savings": 0.05,
    "step_time": 0.25,
    "offload_added_time": 0.25,
    "layer_activations": None,
}
MEMORY = ("model_states", "peak", "offload_savings", "layer_activations")
TIME = ("step_time", "offload_added_time")


# -- planning a case as `python -m checks plan` does ------------------------------------------------------------

@dataclass(frozen=True)
class PlannedCase:
    """What the planner says about one case's job: per stage memory, the step, and the job itself."""

    job: Any  # checks.plan.setup.Job
    hardware: Any  # checks.plan.hardware.Hardware
    stages: tuple[Any, ...]  # checks.plan.memory.StageMemory of every pipeline stage, as configured
    step: dict[str, Any]  # step_s and how it was obtained


def plan_words(case: Mapping[str, Any]) -> list[str]:
    """The words after ``python -m checks plan`` for a case: its options, and its Megatron-LM argv as --argv."""
    words = list(case["plan"])
    if "argv" in case:
        words.append("--argv=" + shlex.join(case["argv"]))
    return words


def plan_case(words: Sequence[str]) -> PlannedCase | str:
    """The planner's job for ``python -m checks plan WORDS``, or its refusal (the one-line error it prints)."""
    from checks import cli
    from checks.errors import InputError
    from checks.loaders import load
    from checks.parser import build_parser, split_command
    from checks.plan.job import Dimensions, Planned, budget_for, plan_configs, plan_preset, presets

    # checks/cli.py _plan, without the rendering: the same parser, request, budget and planning calls.
    split, command = split_command(["plan", *words])
    args = build_parser().parse_args(split)
    if command is not None:
        args.command_line = command
    try:
        budget = budget_for(args.hardware, args.profile, args.gpu_memory_gib, args.headroom, args.mfu)
        preset, per_target = presets(args.preset)
        dims = Dimensions(args.gpus, args.seq_length, args.micro_batch_size, args.global_batch_size)
        configured = bool(args.files or args.argv or args.overrides or args.command_line or args.recipe)
        if configured:
            where = args.files[0] if args.files else "--command" if args.command_line else \
                f"--recipe {args.recipe}" if args.recipe else "--argv" if args.argv else "--set"
            plan = plan_configs(load(cli.request(args)), preset, per_target, dims, budget, where)
        elif preset is not None:
            plan = plan_preset(preset, dims, budget)
        else:
            raise InputError("plan", "the case gives neither a config nor a preset")
    except InputError as err:
        return err.render()
    entries = [entry for entry in plan.entries if isinstance(entry, Planned)]
    if len(entries) != 1:
        return f"the case plans {len(entries)} trained models; a published case is one"
    planned = entries[0]
    return PlannedCase(planned.job, budget.hardware, planned.configured, step_prediction(planned.job, budget.hardware))


def step_prediction(job: Any, hardware: Any) -> dict[str, Any]:
    """The step time the planner predicts for the job as configured, with the parts of its slowest stage.

    ``checks.plan.throughput.step_time`` is the planner's step-time model; where a checkout predates it, the
    older ``step_cost`` (compute at the default MFU plus the offload cost it cannot hide, on each stage) stands in,
    and the artifact says which one was used.
    """
    from checks.plan import throughput

    t, offload = job.training, job.offload
    model = getattr(throughput, "step_time", None)
    if model is not None:
        found = model(t, offload, hardware)
        return {"model": "checks.plan.throughput.step_time", "step_s": found.step_s,
                "slowest_stage": found.slowest.stage, "parts": dict(found.slowest.parts()),
                "efficiency": found.efficiency, "efficiency_source": found.efficiency_source}
    from checks.plan.memory import plan_memory

    costs = [throughput.step_cost(t, offload, hardware, overlap_optimizer=offload.overlap_cpu_optimizer_d2h_h2d,
                                  stage=stage) for stage in plan_memory(t, offload)]
    worst = max(range(len(costs)), key=lambda i: costs[i].compute_s + costs[i].overhead_s)
    cost = costs[worst]
    return {"model": "checks.plan.throughput.step_cost (compute at DEFAULT_MFU + offload overhead)",
            "step_s": cost.compute_s + cost.overhead_s, "slowest_stage": worst,
            "parts": {"compute_s": cost.compute_s, "optimizer_offload_s": cost.optimizer_offload_s,
                      "activation_offload_s": cost.activation_offload_s},
            "efficiency": throughput.DEFAULT_MFU, "efficiency_source": "DEFAULT_MFU"}


# -- published values -------------------------------------------------------------------------------------------

_OPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def formula(text: str, inputs: Mapping[str, float]) -> float:
    """A published arithmetic formula (``s*b*h*(34 + 5*a*s/h)``) on its inputs; names, numbers, + - * / only."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in inputs:
            return float(inputs[node.id])
        raise ValueError(f"formula {text!r}: {ast.unparse(node)} is not a number, an input or + - * /")

    return value(ast.parse(text, mode="eval"))


def published(value: Mapping[str, Any]) -> float:
    """A published value in bytes or seconds."""
    if "formula" in value:
        return formula(value["formula"], value["inputs"])
    if "range" in value:  # a published low-high range: its midpoint
        low, high = value["range"]
        return (float(low) + float(high)) / 2 * float(value.get("scale", 1))
    if "tokens" in value:  # Tokens/sec/GPU: the step processes global batch x sequence tokens on all GPUs
        tokens = value["tokens"]
        return float(tokens["global_batch_size"] * tokens["seq_length"] / (value["value"] * tokens["gpus"]))
    return float(value["value"]) * float(value.get("scale", 1))


def reduce_golden(series: Mapping[str, Any], reduce: str) -> float:
    """A Megatron-LM golden-values series (``{"values": {"1": x, ...}}``) reduced as the data file says."""
    pairs = sorted((int(step), float(v)) for step, v in series["values"].items() if v != "nan")
    if reduce == "first":
        return pairs[0][1]
    if reduce == "last":
        return pairs[-1][1]
    if reduce == "max":
        return max(v for _, v in pairs)
    if reduce == "median_after_step_3":
        return float(statistics.median(v for step, v in pairs if step > 3))
    raise ValueError(f"unknown golden reduction {reduce!r}")


def fitting_citations() -> list[str]:
    """Lines of the planner's step-time data and code that cite a measurement and say they fit to it.

    A case whose published value's ``path:line`` (or golden file) appears in one of these was used to fit a
    constant, so its error is not a prediction. The planner's data (``checks/data/efficiency.json``), the
    hardware sources and the step-time module are searched.
    """
    from checks.plan import hardware, throughput

    texts: list[str] = []
    efficiency = ROOT / "checks" / "data" / "efficiency.json"
    if efficiency.is_file():
        texts.extend(efficiency_fits(json.loads(efficiency.read_text(encoding="utf-8"))))
    texts.extend(source for hw in hardware.HARDWARE.values() for source in hw.sources)
    for module in (throughput, hardware):
        if module.__file__:
            texts.extend(Path(module.__file__).read_text(encoding="utf-8").splitlines())
    return [text for text in texts if re.search(r"\bfit", text, re.IGNORECASE)]


def efficiency_fits(table: Mapping[str, Any]) -> list[str]:
    """``checks/data/efficiency.json``: each entry's efficiency is fitted to the table rows it lists (indices into
    ``rows``, each a published row's ``file`` and ``line``); one line per row that went into an entry."""
    rows = table.get("rows", [])
    out = []
    for entry in table.get("entries", []):
        for index in entry.get("rows", []):
            row = rows[index]
            source = f"{row['file']}:{row['line']}" if row.get("line") is not None else row["file"]
            mode = f" {entry['mode']}" if entry.get("mode") else ""
            out.append(f"fitted: {source} -> efficiency {entry['efficiency']} of "
                       f"{entry['system']} {entry['family']} {entry['precision']}{mode} (checks/data/efficiency.json)")
    return out


def citation_key(source: str) -> str:
    """``repo@commit:path:line`` -> ``path:line`` (``path`` for a whole file): what a fitted constant cites."""
    return source.split(":", 1)[1] if re.match(r"^[\w.-]+/[\w.-]+@[0-9a-f]+:", source) else source


def fitted_by(case: Mapping[str, Any], citations: Sequence[str]) -> list[str]:
    """The constants a case was used to fit: the data file's list, and every fitting citation of its sources."""
    found = list(case.get("fitted", []))
    keys = {citation_key(v["source"]) for v in case["values"] if v["metric"] in TIME}
    for text in citations:
        if any(_cites(text, key) for key in keys) and text.strip() not in found:
            found.append(text.strip())
    return found


def _cites(text: str, key: str) -> bool:
    """``text`` names ``path:line``, or ``path:a-b`` with the line inside, or the whole file when it has no line."""
    path, _, line = key.rpartition(":") if re.search(r":\d+$", key) else (key, "", "")
    if not line:
        return path in text
    for match in re.finditer(re.escape(path) + r":(\d+)(?:-(\d+))?", text):
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if first <= int(line) <= last:
            return True
    return False


# -- predictions and errors -------------------------------------------------------------------------------------

def after_step(stage: Any) -> int:
    return int(stage.after_step_bytes)


def _error(predicted: float, value: float) -> float:
    return predicted / value - 1 if value else math.inf


def _pct(error: float) -> float:
    return round(100 * error, 3)


def _stage_rows(case: Mapping[str, Any], values: Sequence[float]) -> list[int]:
    """The stages a memory metric is compared on: the last, or all of them when the source does not say."""
    logged = case["stage_logged"]
    if logged == "last":
        return [len(values) - 1]
    if logged == "unknown":
        return list(range(len(values)))
    raise ValueError(f"{case['id']}: stage_logged {logged!r} is not last or unknown for a memory metric")


def _measure(metric: str, value: float, predictions: Sequence[tuple[int | str, float]], bound: float | None,
             unit: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [{"stage": stage, "predicted": _round(p, unit), "error_pct": _pct(_error(p, value))}
                                  for stage, p in predictions]
    worst = max(rows, key=lambda r: abs(r["error_pct"]))
    out: dict[str, Any] = {"metric": metric, "published": _round(value, unit), "unit": unit,
                           "predicted": worst["predicted"], "error_pct": worst["error_pct"],
                           "bound_pct": None if bound is None else _pct(bound)}
    if len(rows) > 1 or rows[0]["stage"] not in ("step", "layer"):
        out["stage"] = worst["stage"]
        out["stages"] = rows
    out["within"] = None if bound is None else all(abs(r["error_pct"]) <= 100 * bound + 1e-9 for r in rows)
    return out


def _round(value: float, unit: str) -> float | int:
    return round(value) if unit == "bytes" else round(value, 6)


def _step(planned: PlannedCase) -> float:
    return float(planned.step["step_s"])


def case_metrics(case: Mapping[str, Any], planned: PlannedCase,
                 baseline: tuple[Mapping[str, Any], PlannedCase] | None) -> list[dict[str, Any]]:
    """Each published value of a case beside the planner's prediction."""
    from checks.plan.memory import layer_bytes

    out = []
    predictions: list[tuple[int | str, float]]
    for value in case["values"]:
        metric, given = value["metric"], published(value)
        unit = "s" if metric in TIME else "bytes"
        if metric == "model_states":
            per_stage = [after_step(s) for s in planned.stages]
            predictions = [(i, float(per_stage[i])) for i in _stage_rows(case, per_stage)]
        elif metric == "peak":
            per_stage = [s.device_bytes for s in planned.stages]
            predictions = [(i, float(per_stage[i])) for i in _stage_rows(case, per_stage)]
        elif metric == "offload_savings":
            if baseline is None:
                raise ValueError(f"{case['id']}: offload_savings needs a baseline case")
            before = [after_step(s) for s in baseline[1].stages]
            per_stage = [b - after_step(s) for b, s in zip(before, planned.stages, strict=True)]
            predictions = [(i, float(per_stage[i])) for i in _stage_rows(case, per_stage)]
        elif metric == "step_time":
            predictions = [("step", _step(planned))]
        elif metric == "layer_activations":
            predictions = [("layer", float(layer_bytes(planned.job.training, int(case["layer"]))))]
        else:
            raise ValueError(f"{case['id']}: unknown metric {metric!r}")
        entry = _measure(metric, given, predictions, BOUNDS[metric], unit)
        entry["source"] = value["source"]
        entry["published_as"] = _published_as(value)
        out.append(entry)
    # The added time of offload: both step times are published, so their difference is too.
    mine = next((v for v in case["values"] if v["metric"] == "step_time"), None)
    theirs = None if baseline is None else next((v for v in baseline[0]["values"] if v["metric"] == "step_time"),
                                                None)
    if baseline is not None and mine is not None and theirs is not None:
        added = published(mine) - published(theirs)
        entry = _measure("offload_added_time", added, [("step", _step(planned) - _step(baseline[1]))],
                         BOUNDS["offload_added_time"], "s")
        entry["source"] = f"{mine['source']} less {theirs['source']}"
        entry["published_as"] = f"{_published_as(mine)} less {_published_as(theirs)}"
        out.append(entry)
    return out


def _published_as(value: Mapping[str, Any]) -> str:
    if "quote" in value and "tokens" not in value:
        return str(value["quote"])
    if "golden" in value:
        return f"{value['golden']['key']} ({value['golden']['reduce']})"
    if "tokens" in value:
        t = value["tokens"]
        return (f"{value['value']} tokens/s/GPU: GBS {t['global_batch_size']} x seq {t['seq_length']} / "
                f"({value['value']} x {t['gpus']} GPUs)")
    return f"{value['value']} {value.get('unit', '')}".strip()


def layout_differences(case: Mapping[str, Any], planned: PlannedCase) -> list[str]:
    """Where the planned job's layout differs from the one the source publishes beside its number."""
    expected = case.get("expect_layout")
    if not expected:
        return []
    t = planned.job.training
    got = {"tensor": t.par.tensor, "pipeline": t.par.pipeline, "context": t.context_parallel,
           "virtual": t.par.virtual_pipeline, "expert": t.par.expert, "micro_batch_size": t.micro_batch_size,
           "global_batch_size": t.global_batch_size, "seq_length": t.seq_length}
    return [f"{key}: published {value}, planned {got[key]}" for key, value in expected.items() if got[key] != value]


def _job_summary(planned: PlannedCase) -> dict[str, Any]:
    from checks.plan.throughput import family

    t = planned.job.training
    return {"source": planned.job.source, "hardware": planned.hardware.name, "family": family(t),
            "world_size": t.world_size,
            "tensor": t.par.tensor, "pipeline": t.par.pipeline, "virtual": t.par.virtual_pipeline,
            "expert": t.par.expert, "context": t.context_parallel, "data": t.data_parallel,
            "micro_batch_size": t.micro_batch_size, "global_batch_size": t.global_batch_size,
            "seq_length": t.seq_length, "recompute": t.recompute, "sequence_parallel": t.sequence_parallel,
            "optimizer_offload_fraction": planned.job.offload.optimizer_offload_fraction,
            "overlap_cpu_optimizer_d2h_h2d": planned.job.offload.overlap_cpu_optimizer_d2h_h2d}


# -- the artifact -----------------------------------------------------------------------------------------------

def load_data(path: Path = DATA) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def build(data: Mapping[str, Any]) -> dict[str, Any]:
    """The validation artifact: every case planned and compared, or listed with why it was not."""
    by_id = {case["id"]: case for case in data["cases"]}
    citations = fitting_citations()
    planned: dict[str, PlannedCase] = {}
    unexpressed = []
    for case in data["cases"]:
        if "skip" in case:
            unexpressed.append(_unexpressed(case, case["skip"], citations))
            continue
        found = plan_case(plan_words(case))
        if isinstance(found, str):
            unexpressed.append(_unexpressed(case, found, citations))
        else:
            planned[case["id"]] = found
    cases = []
    for case_id, result in planned.items():
        case = by_id[case_id]
        base_id = case.get("baseline")
        baseline = None
        if base_id is not None:
            if base_id not in planned:
                unexpressed.append(_unexpressed(case, f"its baseline {base_id} is not expressed", citations))
                continue
            baseline = (by_id[base_id], planned[base_id])
        fits = fitted_by(case, citations)
        metrics = case_metrics(case, result, baseline)
        for metric in metrics:  # every constant fitted is a step-time one: a case's memory stays a prediction
            metric["fitted"] = bool(fits) and metric["metric"] in TIME
        cases.append({
            "id": case_id, "group": case["group"], "title": case["title"],
            "command": "python -m checks plan " + shlex.join(plan_words(case)),
            "stage_logged": case["stage_logged"], "stage_source": case["stage_source"],
            "baseline": base_id, "fitted": bool(fits), "fitted_by": fits,
            "job": _job_summary(result), "layout_differences": layout_differences(case, result),
            "step": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in result.step.items() if k != "parts"}
            | {"parts": {k: round(v, 6) for k, v in result.step["parts"].items()}},
            "metrics": metrics,
            "notes": list(case.get("notes", [])),
        })
    artifact: dict[str, Any] = {
        "about": ("The planner rerun on published measurements (tools/data/published_cases.json): per case and "
                  "metric the published value, the prediction and the error, prediction / published - 1, in %. "
                  "Bytes and seconds. A source that does not say which pipeline stage it measured is compared with "
                  "every stage; the case's error is the stage furthest off. fitted: the case was used to fit a "
                  "planner constant (fitted_by says which); a metric that constant moves (its step times) is "
                  "marked fitted too, and its error is not a prediction."),
        "command": COMMAND,
        "bounds_pct": {metric: None if bound is None else _pct(bound) for metric, bound in BOUNDS.items()},
        "step_model": sorted({c["step"]["model"] for c in cases}),
        "cases": cases,
        "unexpressed": unexpressed,
    }
    artifact["summary"] = summary(artifact)
    return artifact


def _unexpressed(case: Mapping[str, Any], reason: str, citations: Sequence[str]) -> dict[str, Any]:
    return {"id": case["id"], "group": case["group"], "title": case["title"],
            "command": "python -m checks plan " + shlex.join(plan_words(case)), "reason": reason,
            "fitted_by": fitted_by(case, citations),
            "published": [{"metric": v["metric"], "published": _round(published(v), "s" if v["metric"] in TIME
                                                                        else "bytes"),
                           "source": v["source"]} for v in case["values"]]}


def metric_rows(artifact: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    for case in artifact["cases"]:
        for metric in case["metrics"]:
            yield case, metric


def largest_errors(artifact: Mapping[str, Any], include_fitted: bool = True) -> dict[str, dict[str, Any]]:
    """Per metric kind, the case and stage furthest from its published value (what card.yaml cites).

    ``include_fitted=False`` leaves out the metrics a constant was fitted to (their error is not a prediction).
    """
    out: dict[str, dict[str, Any]] = {}
    for case, metric in metric_rows(artifact):
        if metric["fitted"] and not include_fitted:
            continue
        kind = metric["metric"]
        if kind not in out or abs(metric["error_pct"]) > abs(out[kind]["error_pct"]):
            out[kind] = {"case": case["id"], "error_pct": metric["error_pct"],
                         **({"stage": metric["stage"]} if "stage" in metric else {}), "fitted": metric["fitted"]}
    return {kind: out[kind] for kind in BOUNDS if kind in out}


def failures(artifact: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every case and metric outside its bound (on any stage compared)."""
    return [{"case": case["id"], "metric": metric["metric"], "error_pct": metric["error_pct"],
             **({"stage": metric["stage"]} if "stage" in metric else {}), "bound_pct": metric["bound_pct"],
             "fitted": metric["fitted"]}
            for case, metric in metric_rows(artifact) if metric["within"] is False]


def summary(artifact: Mapping[str, Any]) -> dict[str, Any]:
    return {"expressed": len(artifact["cases"]), "unexpressed": len(artifact["unexpressed"]),
            "largest_errors": largest_errors(artifact),
            "largest_held_out_errors": largest_errors(artifact, include_fitted=False),
            "outside_bounds": failures(artifact)}


def card_values(artifact: Mapping[str, Any]) -> dict[str, Any]:
    """The ``values`` a card.yaml measured result cites for this artifact: each kind's largest error and case."""
    out: dict[str, Any] = {}
    for kind, worst in artifact["summary"]["largest_errors"].items():
        out[f"summary.largest_errors.{kind}.error_pct"] = worst["error_pct"]
        out[f"summary.largest_errors.{kind}.case"] = worst["case"]
    return out


def render(artifact: Mapping[str, Any]) -> str:
    return json.dumps(artifact, indent=1) + "\n"


def bands(artifact: Mapping[str, Any]) -> dict[str, Any]:
    """What the planner quotes as its confidence (checks/data/validation_bands.json): per expressed case, what
    job it is (family, hardware, pipeline size, whether it offloads the optimizer) and, per metric, the error of
    its stage furthest off, and the metrics a constant was fitted to."""
    out = []
    for case in artifact["cases"]:
        job = case["job"]
        errors: dict[str, float] = {}
        for metric in case["metrics"]:
            found = [abs(metric["error_pct"])] if "error_pct" in metric else \
                [abs(s["error_pct"]) for s in metric.get("stages", ()) if "error_pct" in s]
            if found:
                errors[metric["metric"]] = max(errors.get(metric["metric"], 0.0), max(found))
        out.append({"case": case["id"], "family": job.get("family"), "hardware": job["hardware"],
                    "pipeline": job["pipeline"], "optimizer_offload": job["optimizer_offload_fraction"] > 0,
                    "fitted": sorted({m["metric"] for m in case["metrics"] if m["fitted"]}), "errors_pct": errors})
    return {"about": "Generated by tools/generate.py from reference/benchmarks/planner_validation.json "
                     "(tools/planner_validation.py bands()): the published cases the planner was validated on, for "
                     "the confidence it quotes (checks/plan/confidence.py).",
            "cases": out}


def produce_bands() -> str:
    """checks/data/validation_bands.json from the committed artifact."""
    return json.dumps(bands(json.loads(ARTIFACT.read_text(encoding="utf-8"))), indent=1) + "\n"


def produce() -> str:
    """The artifact's whole text, from the data file and the planner as it is now.

    Its ``revision`` (commit, dirty flag, versions: what card.yaml's CRD008/CRD010 ask of an artifact) is the
    committed artifact's while the results are unchanged (``benchmarks.common.kept_revision``).
    """
    from benchmarks.common import kept_revision

    return render(kept_revision(ARTIFACT, build(load_data()), [COMMAND.removeprefix("python ")]))


# -- the table for reference/memory-model.md --------------------------------------------------------------------

def _show(value: float, unit: str, metric: str) -> str:
    if unit == "s":
        return f"{value * 1000:,.1f} ms"
    if metric == "layer_activations":
        return f"{value / 2**20:,.1f} MiB"
    return f"{value / 1e9:,.2f} GB"


def markdown_table(artifact: Mapping[str, Any]) -> str:
    """The cases as a markdown table: one row per case and metric, every stage compared shown."""
    lines = ["| case | metric | published | predicted | error | bound |", "|---|---|---|---|---|---|"]
    for case, metric in metric_rows(artifact):
        unit, kind = metric["unit"], metric["metric"]
        rows = metric.get("stages") or [{"stage": None, "predicted": metric["predicted"],
                                         "error_pct": metric["error_pct"]}]
        label = (lambda r: f"s{r['stage']} ") if len(rows) > 1 else (lambda r: "")
        predicted = " / ".join(f"{label(r)}{_show(r['predicted'], unit, kind)}" for r in rows)
        errors = " / ".join(f"{r['error_pct']:+.1f}%" for r in rows)
        bound = "—" if metric["bound_pct"] is None else f"±{metric['bound_pct']:g}%"
        flag = "" if metric["within"] is not False else " **out**"
        fitted = " (fitted)" if metric["fitted"] else ""
        stage = f" (stage {metric['stage']})" if len(rows) == 1 and "stage" in metric else ""
        lines.append(f"| {case['id']} | {kind}{stage}{fitted} | {_show(metric['published'], unit, kind)} | "
                     f"{predicted} | {errors}{flag} | {bound} |")
    return "\n".join(lines)


def markdown_unexpressed(artifact: Mapping[str, Any]) -> str:
    return "\n".join(f"- `{case['id']}`: {case['reason']}" for case in artifact["unexpressed"])


# -- the host floor's fit ---------------------------------------------------------------------------------------

HOST_FLOOR_CASE = "bridge-cuda-graphs-card/gpt-oss-20b-eager"


def fit_host_floor(data: Mapping[str, Any]) -> float:
    """The eager-MoE host time per layer and micro-batch (``Hardware.moe_layer_host_s``) at which the step-time
    model gives :data:`HOST_FLOOR_CASE`'s published step: the fit ``checks/plan/hardware.py`` cites. Bisection:
    the step only lengthens as the floor grows."""
    from dataclasses import replace

    from checks.plan.throughput import step_time

    case = next(c for c in data["cases"] if c["id"] == HOST_FLOOR_CASE)
    target = published(next(v for v in case["values"] if v["metric"] == "step_time"))
    planned = plan_case(plan_words(case))
    if isinstance(planned, str):
        raise ValueError(f"{HOST_FLOOR_CASE}: {planned}")

    def step(host_s: float) -> float:
        hardware = replace(planned.hardware, moe_layer_host_s=host_s)
        return step_time(planned.job.training, planned.job.offload, hardware, memory=planned.stages).step_s

    low, high = 0.0, 1.0
    if step(low) > target:
        raise ValueError(f"{HOST_FLOOR_CASE}: the step without a host floor already exceeds the published one")
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if step(middle) < target else (low, middle)
    return (low + high) / 2


# -- command line -----------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    cli.add_argument("--check", action="store_true", help="write nothing; exit 1 when the artifact is not current")
    cli.add_argument("--table", action="store_true", help="print the markdown table instead of writing")
    cli.add_argument("--fit-host-floor", action="store_true",
                     help="print the eager-MoE host floor fitted to its published case (checks/plan/hardware.py)")
    args = cli.parse_args(argv)
    if args.fit_host_floor:
        print(f"moe_layer_host_s = {fit_host_floor(load_data()):.5f} s, fitted to {HOST_FLOOR_CASE}")
        return 0
    text = produce()
    if args.table:
        print(markdown_table(json.loads(text)))
        return 0
    if args.check:
        from benchmarks.common import check_artifact

        return check_artifact(ARTIFACT, text, COMMAND)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(text, encoding="utf-8")
    data = json.loads(text)
    worst = ", ".join(f"{kind} {w['error_pct']:+.1f}% ({w['case']})" for kind, w in
                      data["summary"]["largest_errors"].items())
    print(f"wrote {ARTIFACT.relative_to(ROOT)}: {data['summary']['expressed']} cases, "
          f"{data['summary']['unexpressed']} not expressed; largest errors: {worst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
