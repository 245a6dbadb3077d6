"""Write checks/data/efficiency.json: compute efficiencies from Megatron Bridge's published performance tables.

Maintainer tool, not part of the checker. Bridge publishes, per container release, model, system and precision,
a training job's layout (#GPUs, GBS, MBS, sequence length, TP, PP, CP, VP, EP) and its throughput
(tokens/s/GPU) in ``docs/performance-summary.md`` and ``docs/performance-summary-archive.md``. For each row the
planner can express, this tool builds the job, takes its measured step time (``GBS x seq / (tokens/s/GPU x
#GPUs)``) and inverts the planner's own step-time model (:func:`checks.plan.throughput.invert_efficiency`): the
efficiency is the share of the system's dense bf16 peak at which the model's compute, plus the bubbles and
communication it models, takes the measured time. It is therefore a fit per row, consistent with the model
(nothing the model prices is counted twice), and must be rewritten when the model changes
(tests/test_step_time.py checks that the committed rows still invert to their efficiencies).

Bridge publishes no deterministic-mode job. Megatron-LM's memory-and-speed functional tests are one: their
interleaved-pipeline run on each system is a row of mode ``deterministic`` (:data:`DETERMINISTIC_CASES`, read from
tools/data/published_cases.json and planned as ``python -m checks plan`` plans them), which only deterministic jobs
use (checks/plan/throughput.py efficiency_for).

Rows the planner cannot express are kept with the reason (a model without a shape here, a precision not stated,
Megatron-FSDP, fine-tuning, a layout that does not split the layers). The perf recipe of the same name at the
pinned commit gives a row's recompute where its layout matches the row's (checks/data/bridge_recipes.json);
module lists other than core attention are not modelled, and the efficiency absorbs them.

Usage::

    python tools/efficiency.py --bridge-git /path/to/Megatron-Bridge [--commit 067f987d] \\
        --out checks/data/efficiency.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checks.model.shape import Parallelism  # noqa: E402
from checks.plan.hardware import HARDWARE  # noqa: E402
from checks.plan.memory import Training  # noqa: E402
from checks.plan.presets import PRESETS, _gpt, catalogue_preset  # noqa: E402
from checks.plan.throughput import family, invert_efficiency  # noqa: E402

DEFAULT_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
FILES = ("docs/performance-summary.md", "docs/performance-summary-archive.md")
REPO = "NVIDIA-NeMo/Megatron-Bridge"

SYSTEMS = {"DGX-H100": "h100-sxm", "DGX-B200": "b200", "DGX-B300": "b300", "DGX-GB200": "gb200",
           "DGX-GB300": "gb300"}
PRECISIONS = {"BF16": "bf16", "FP8": "fp8", "FP8-CS": "fp8", "FP8-SC": "fp8", "MXFP8": "mxfp8", "FP8-MX": "mxfp8",
              "NVFP4": "nvfp4"}
# Bridge's perf-recipe spelling of each precision and system (src/megatron/bridge/perf_recipes/<model>/<system>/)
RECIPE_PRECISION = {"bf16": ("bf16",), "fp8": ("fp8cs", "fp8sc", "fp8ds"), "mxfp8": ("fp8mx",), "nvfp4": ("nvfp4",)}
RECIPE_SYSTEM = {"h100-sxm": "h100", "b200": "b200", "b300": "b300", "gb200": "gb200", "gb300": "gb300"}

_LLAMA31_405B = _gpt(126, 16384, 128, 8, 53248, 128256)

# Bridge publishes no BF16 row of a dense model. Megatron-LM publishes dense GPT training on H100 as model-FLOPs
# utilisation, weak-scaled from 2B to 462B parameters: "MFU increases from 41% for the smallest model considered
# to 47-48% for the largest" (NVIDIA/Megatron-LM@d98e8a64:README.md:116; the README states no precision, and an MFU
# is a share of the dense bf16 peak, so these are taken as BF16). The runs' layouts are published only as an
# image, so these two are used as published, not inverted through the model: their bubbles and (mostly
# overlapped) communication are inside them.
MEGATRON_README = "NVIDIA/Megatron-LM@d98e8a64:README.md"
EXTRA_ROWS: tuple[dict[str, Any], ...] = (
    {"file": MEGATRON_README, "line": 116, "container": "Megatron-LM README", "section": "Weak Scaling Results",
     "model": "GPT 2B (smallest of the weak-scaling runs)", "system": "h100-sxm", "precision": "bf16",
     "family": "dense", "efficiency": 0.41, "inverted": False,
     "notes": "MFU as published (41%); precision not stated in the README"},
    {"file": MEGATRON_README, "line": 116, "container": "Megatron-LM README", "section": "Weak Scaling Results",
     "model": "GPT 462B (largest of the weak-scaling runs)", "system": "h100-sxm", "precision": "bf16",
     "family": "dense", "efficiency": 0.47, "inverted": False,
     "notes": "MFU as published (47-48%); precision not stated in the README"},
)


def _shape(model: str) -> tuple[Any, int, str, str] | str:
    """(shape, top-k, recipe prefix, source) for a table's model name, or why the planner cannot express it."""
    name = re.sub(r"\s*\(.*\)$", "", model).strip()
    if "w/ MTP" in model:
        return "multi-token prediction is not modelled"
    if name == "LLAMA3_8B":
        return PRESETS["llama3-8b"].shape, 0, "llama3_8b", "preset llama3-8b"
    if name == "LLAMA3_70B":
        return PRESETS["llama3-70b"].shape, 0, "llama3_70b", "preset llama3-70b"
    if name == "LLAMA3.1_405B":
        return _LLAMA31_405B, 0, "llama31_405b", \
            "https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json (126 layers, 16384 hidden, " \
            "128 heads, 8 KV heads, 53248 FFN, 128256 vocabulary)"
    if name == "Qwen3_30B_a3B":
        return PRESETS["qwen3-30b-a3b"].shape, PRESETS["qwen3-30b-a3b"].moe_top_k, "qwen3_30b_a3b", \
            "preset qwen3-30b-a3b"
    if name == "Qwen3_235B_a22B":
        return PRESETS["qwen3-235b-a22b"].shape, PRESETS["qwen3-235b-a22b"].moe_top_k, "qwen3_235b_a22b", \
            "preset qwen3-235b-a22b"
    if name == "DeepSeekV3":
        return PRESETS["deepseek-v3"].shape, PRESETS["deepseek-v3"].moe_top_k, "deepseek_v3", \
            "preset deepseek-v3 (multi-token prediction not modelled)"
    if name == "GPT OSS 120B":
        preset = catalogue_preset("openai/gpt-oss-120b")
        if isinstance(preset, str):
            return preset
        # top-4 routing: https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json (num_experts_per_tok 4)
        return preset.shape, 4, "gpt_oss_120b", \
            "model catalogue openai/gpt-oss-120b, top-4 (attention sinks and sliding windows not modelled)"
    return f"no shape the planner expresses for {model}"


def _number(text: str) -> float | None:
    match = re.match(r"\s*([0-9][0-9,.]*)", text)
    return float(match.group(1).replace(",", "")) if match else None


def _int(text: str, default: int = 1) -> int:
    value = _number(text)
    return default if value is None else int(value)


def parse(path: str, text: str) -> list[dict[str, Any]]:
    """Every table row of a performance summary, with where it is."""
    rows: list[dict[str, Any]] = []
    container = section = heading = ""
    header: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            container, header = line[3:].strip(), None
        elif line.startswith("### "):
            section, header = line[4:].strip(), None
        elif line.startswith("#### "):
            heading, header = line[5:].strip(), None
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set("".join(cells)) <= set("-: "):
                rows.append({"file": path, "line": number, "container": container, "section": section,
                             "heading": heading, **dict(zip(header, cells, strict=False))})
        else:
            header = None if not line.strip() else header
    return rows


def _recipe_settings(prefix: str, row: dict[str, Any], system: str, precision: str) -> tuple[dict[str, Any], str]:
    """What the perf recipe that runs this row sets that the step-time model reads (its recompute, and whether its
    MoE layers wait for the host: eager, dropless), where its layout matches the row's."""
    from checks.loaders.bridge_recipe import catalogue, find_recipe
    from checks.plan.setup import moe_host_sync

    names = set(catalogue().names("recipes"))
    for spelling in RECIPE_PRECISION.get(precision, ()):
        name = f"{prefix}_pretrain_{row['gpus']}gpu_{RECIPE_SYSTEM[system]}_{spelling}_config"
        if name not in names:
            continue
        values = {k: v[0] for k, v in find_recipe(name).values.items()}
        layout = {"tp": "model.tensor_model_parallel_size", "pp": "model.pipeline_model_parallel_size",
                  "cp": "model.context_parallel_size", "ep": "model.expert_model_parallel_size",
                  "mbs": "train.micro_batch_size", "gbs": "train.global_batch_size"}
        if any((values.get(key) or 1) != row[field] for field, key in layout.items()):
            return {"moe_host_sync": False}, (f"recipe {name} at the pinned commit has another layout: recompute "
                                              "assumed none, and no eager-MoE host floor")
        sync = {"moe_host_sync": moe_host_sync(values.get)}  # the planner's own reading of a config
        granularity = values.get("model.recompute_granularity")
        modules = values.get("model.recompute_modules")
        if granularity == "full":
            full = {"recompute": "full", "recompute_method": values.get("model.recompute_method") or "uniform",
                    "recompute_num_layers": int(values.get("model.recompute_num_layers") or 1)}
            return full | sync, f"recompute from {name}"
        if granularity == "selective":
            if modules in (None, ["core_attn"]):
                return {"recompute": "selective"} | sync, f"recompute from {name}"
            return sync, f"{name} recomputes {modules}, not modelled: the efficiency absorbs it"
        return sync, f"no recompute ({name})"
    # A tuned throughput row with no recipe to read: its CUDA graphs are not known, so the host floor measured on
    # an eager job is not put under it (the efficiency absorbs what the host costs)
    return {"moe_host_sync": False}, "no perf recipe of this name at the pinned commit: recompute assumed none, " \
        "and no eager-MoE host floor"


def _layout(shape: Any, pp: int, vp: int) -> tuple[Parallelism, str] | str:
    """A pipeline split the planner can express: even, or (VP 1) the remainder on the first and last stages."""
    if shape.num_layers % (pp * vp) == 0:
        return Parallelism(pipeline=pp, virtual_pipeline=vp), ""
    if vp > 1 or pp < 2:
        return f"{shape.num_layers} layers do not split over PP {pp} x VP {vp} (Bridge uses a pipeline layout)"
    middle = pp - 2
    for outer in range(shape.num_layers // pp, 0, -1):
        rest = shape.num_layers - 2 * outer
        if (middle == 0 and rest == 0) or (middle and rest > 0 and rest % middle == 0):
            return Parallelism(pipeline=pp, first_stage_layers=outer, last_stage_layers=outer), \
                f"layers split {outer} / {rest // middle if middle else 0} x {middle} / {outer} (approximating " \
                "Bridge's layout)"
    return f"{shape.num_layers} layers do not split over PP {pp}"


# Bridge publishes no deterministic-mode row. Megatron-LM's memory-and-speed functional test runs a 7B GPT with
# --deterministic-mode (and NVTE_ALLOW_NONDETERMINISTIC_ALGO=0) on H100 and on GB200, at two layouts each, and
# publishes its iteration time as a golden value (tools/data/published_cases.json has the cases, their argv and the
# golden's median). The interleaved-pipeline layout of each system is the row; the tensor-parallel one is held out,
# so tools/planner_validation.py still predicts one deterministic job per system.
DETERMINISTIC_CASES = ("megatron-lm/gpt3_7b_tp1_pp4_memory_speed/h100",
                       "megatron-lm/gpt3_7b_tp1_pp4_memory_speed/gb200")


def _planner_validation() -> Any:
    """tools/planner_validation.py, which plans a published case the way ``python -m checks plan`` does."""
    sys.path.insert(0, str(ROOT / "tools"))
    import planner_validation

    return planner_validation


def _planned_case(case_id: str) -> tuple[dict[str, Any], Any]:
    """A published case (tools/data/published_cases.json) and what the planner makes of it: its ``PlannedCase``,
    or the one-line refusal ``python -m checks plan`` would print."""
    validation = _planner_validation()
    case = next(c for c in validation.load_data()["cases"] if c["id"] == case_id)
    return case, validation.plan_case(validation.plan_words(case))


def deterministic_rows() -> list[dict[str, Any]]:
    """A row per :data:`DETERMINISTIC_CASES` case: the job the planner reads from its argv, and its published step."""
    published = _planner_validation().published
    rows = []
    for case_id in DETERMINISTIC_CASES:
        case, planned = _planned_case(case_id)
        if isinstance(planned, str):
            raise ValueError(f"{case_id}: {planned}")
        t = planned.job.training
        if not t.deterministic:
            raise ValueError(f"{case_id}: the planner does not read the case's job as deterministic")
        step = next(v for v in case["values"] if v["metric"] == "step_time")
        repo, _, path = step["source"].partition(":")
        step_s = published(step)
        efficiency = invert_efficiency(t, planned.hardware, step_s)
        if efficiency is None:
            raise ValueError(f"{case_id}: what the model prices besides compute exceeds the measured step")
        rows.append({"file": path, "line": None, "repo": repo, "container": "Megatron-LM functional test",
                     "section": case["group"], "case": case_id, "model": case["title"], "system": planned.hardware.name,
                     "precision": "bf16", "mode": "deterministic", "family": family(t), "gpus": t.world_size,
                     "gbs": t.global_batch_size, "mbs": t.micro_batch_size, "seq": t.seq_length,
                     "tp": t.par.tensor, "pp": t.par.pipeline, "vp": t.par.virtual_pipeline, "cp": t.context_parallel,
                     "ep": t.par.expert, "step_s": round(step_s, 6), "efficiency": round(efficiency, 4),
                     "inverted": True, "notes": f"{step['golden']['key']} reduced {step['golden']['reduce']}; the "
                                                "job as python -m checks plan reads the case's argv"})
    return rows


def row_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """A table row's fields, named and parsed."""
    model = raw.get("Model") or raw["heading"].removeprefix("Model: ")
    system_name = raw.get("System") or raw["heading"].removeprefix("System: ")
    precision_text = raw.get("Precision", "")
    precision = PRECISIONS.get(precision_text.split(" ")[0]) if precision_text else None
    return {
        "file": raw["file"], "line": raw["line"], "container": raw["container"], "section": raw["section"],
        "model": model, "system": SYSTEMS.get(system_name, system_name), "precision": precision or precision_text,
        "gpus": _int(raw.get("#-GPUs", "0"), 0), "gbs": _int(raw.get("GBS", "0"), 0), "mbs": _int(raw.get("MBS", "1")),
        "seq": _int(raw.get("Sequence Length", "0"), 0), "fsdp": _int(raw.get("FSDP", "0"), 0),
        "tp": _int(raw.get("TP", "1")), "pp": _int(raw.get("PP", "1")), "cp": _int(raw.get("CP", "1")),
        "vp": _int(raw.get("VP", "1")), "ep": _int(raw.get("EP", "1")),
        "tokens_per_s_per_gpu": _number(raw.get("Tokens / sec / GPU", "")),
        "model_tflops_per_gpu": _number(raw.get("Model TFLOP / sec / GPU", "")),
    }


def job_for(row: dict[str, Any]) -> tuple[Training | None, str]:
    """The job a row ran (None if the planner cannot express it), and why not or what was assumed."""
    if "case" in row:  # a published case's job, read from its argv
        _, planned = _planned_case(row["case"])
        if isinstance(planned, str):
            return None, planned
        return planned.job.training, f"{row['case']} (tools/data/published_cases.json)"
    if "Pre-Training" not in row["section"]:
        return None, f"{row['section']}: only pre-training rows are used (fine-tuning packs sequences)"
    if row["precision"] not in RECIPE_PRECISION:
        return None, "the table states no precision"
    if row["system"] not in HARDWARE:
        return None, f"no hardware entry for {row['system']}"
    if row["fsdp"]:
        return None, "Megatron-FSDP is not modelled"
    if not row["tokens_per_s_per_gpu"] or not row["gbs"] or not row["seq"] or not row["gpus"]:
        return None, "a field is missing"
    shape = _shape(row["model"])
    if isinstance(shape, str):
        return None, shape
    model_shape, top_k, prefix, shape_source = shape
    dp, rest = divmod(row["gpus"], row["tp"] * row["pp"] * row["cp"])
    if rest or not dp:
        return None, "the layout does not divide the GPUs"
    layout = _layout(model_shape, row["pp"], row["vp"])
    if isinstance(layout, str):
        return None, layout
    par, layout_note = layout
    experts = model_shape.moe.num_experts if model_shape.moe else 1
    if row["ep"] > 1 and (model_shape.moe is None or experts % row["ep"]):
        return None, f"EP {row['ep']} does not divide the experts"
    settings, recompute_note = _recipe_settings(prefix, row, row["system"], row["precision"])
    # Bridge's perf recipes reduce gradients in buckets (overlap_grad_reduce) of megatron-core's default size,
    # max(40M, 1M x DP) elements
    # (NVIDIA/Megatron-LM@d98e8a64:megatron/core/distributed/distributed_data_parallel.py:134)
    t = Training(model_shape, replace(par, tensor=row["tp"], expert=row["ep"]), data_parallel=dp,
                 context_parallel=row["cp"], seq_length=row["seq"], micro_batch_size=row["mbs"],
                 global_batch_size=row["gbs"], sequence_parallel=row["tp"] > 1, moe_top_k=top_k or 2,
                 bucket_size=max(40_000_000, 1_000_000 * dp), **settings)
    return t, "; ".join(n for n in (shape_source, layout_note, recompute_note) if n)


def measured_step(row: dict[str, Any]) -> float:
    """The row's step time: the tokens of a global batch over the GPUs' throughput."""
    return float(row["gbs"] * row["seq"] / (row["tokens_per_s_per_gpu"] * row["gpus"]))


def build(texts: dict[str, str], commit: str) -> dict[str, Any]:
    rows = []
    for path, text in texts.items():
        for raw in parse(path, text):
            row = row_fields(raw)
            t, note = job_for(row)
            if t is None:
                rows.append({**row, "skipped": note})
                continue
            step_s = measured_step(row)
            efficiency = invert_efficiency(t, HARDWARE[row["system"]], step_s)
            if efficiency is None:
                rows.append({**row, "step_s": round(step_s, 6), "skipped":
                             "what the model prices besides compute exceeds the measured step"})
                continue
            rows.append({**row, "family": family(t), "step_s": round(step_s, 6), "efficiency": round(efficiency, 4),
                         "inverted": True, "notes": note})
    rows += [dict(extra) for extra in EXTRA_ROWS]
    rows += deterministic_rows()
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for index, row in enumerate(rows):
        if "efficiency" in row:
            groups.setdefault((row["family"], row["system"], row["precision"], row.get("mode", "")), []).append(index)
    entries = [{"family": fam, "system": system, "precision": precision, **({"mode": mode} if mode else {}),
                "efficiency": round(statistics.median(rows[i]["efficiency"] for i in members), 4), "rows": members}
               for (fam, system, precision, mode), members in sorted(groups.items())]
    return {"source": {"repo": REPO, "commit": commit, "files": list(FILES), "tool": "tools/efficiency.py",
                       "also": [MEGATRON_README + ":116 (dense BF16 on H100, as published)",
                                "Megatron-LM functional-test goldens (deterministic mode): "
                                "tools/efficiency.py DETERMINISTIC_CASES"]},
            "about": "efficiency: the share of the system's dense bf16 peak (checks/plan/hardware.py) at which "
                     "checks/plan/throughput.py's step-time model reproduces the row's measured step, "
                     "GBS x seq / (tokens/s/GPU x #GPUs) or a golden iteration time; an entry is the median of its "
                     "rows; mode deterministic: rows of deterministic-mode jobs, which only such jobs use",
            "entries": entries, "rows": rows}


def dump(data: dict[str, Any]) -> str:
    """The file's text for ``data`` (what ``--out`` writes)."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def where(row: dict[str, Any]) -> str:
    """A row's source: ``file:line`` in a table, the file for a golden-values file."""
    return f"{row['file']}:{row['line']}" if row.get("line") is not None else row["file"]


def verify(data: dict[str, Any]) -> list[str]:
    """Problems with committed data under the current step-time model: each inverted row must still invert to its
    efficiency (the data is a fit of the model, stale when the model moves)."""
    problems = []
    for index, row in enumerate(data.get("rows", [])):
        if not row.get("inverted"):
            continue
        t, note = job_for(row)
        if t is None:
            problems.append(f"row {index} ({where(row)}) no longer expressible: {note}")
            continue
        found = invert_efficiency(t, HARDWARE[row["system"]], row["step_s"])
        if found is None or abs(found / row["efficiency"] - 1) > 0.005:
            problems.append(f"row {index} ({where(row)}) inverts to {found}, not {row['efficiency']}: "
                            "rerun tools/efficiency.py")
    return problems


def _git_show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", git_dir, "show", f"{commit}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bridge-git", required=True, help="an NVIDIA-NeMo/Megatron-Bridge git directory")
    parser.add_argument("--commit", default=DEFAULT_COMMIT)
    parser.add_argument("--out", help="write here (default: stdout)")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", args.bridge_git, "rev-parse", args.commit], capture_output=True,
                            text=True, check=True).stdout.strip()
    data = build({path: _git_show(args.bridge_git, commit, path) for path in FILES}, commit)
    text = dump(data)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
