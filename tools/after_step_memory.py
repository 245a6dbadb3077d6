"""Megatron-LM's functional tests against the planner's memory after a step, with and without the held inputs.

Megatron-LM's GPT functional tests log ``mem-allocated-bytes`` after every step (``torch.cuda.memory_stats``,
NVIDIA/Megatron-LM@d98e8a64:megatron/training/training.py:3436-3446) on the last rank, the one with the
TensorBoard writer (megatron/training/global_vars.py:240-241): the last pipeline stage. Their golden values are
committed beside each test's ``model_config.yaml``. This tool plans every such test on H100, on the GPUs of the
H100 recipe that runs it (``nodes`` x ``gpus`` of its spec, tests/test_utils/recipes/h100/*.yaml), as
``python -m checks plan --argv=...`` would, and records what the golden value leaves over the planner's bytes
between steps (``StageMemory.after_step_bytes``), and over the same without the pipeline inputs each model chunk
keeps (``held_inputs_bytes``). Left out, each with why: tests that are not pretraining runs (``MODE: rl``), that
set their GPU count per variant (``MODEL_ENV_VARS``), or that no H100 recipe runs.

The models are small (hidden 512 for most), so what no model state explains shows: a constant of about 96 MiB
that no term of the planner models (the cuBLAS workspaces Transformer Engine and PyTorch allocate), and, without
the held inputs, two pipeline tensors more per model chunk that receives one. The summary gives, per layout
(no pipeline, pipeline, interleaved pipeline), the median of each residual. A test the planner refuses is listed
with the planner's own message.

Tests that read a tokenizer file (``--vocab-file``) are planned with GPT-2's vocabulary of 50,257 tokens
(Radford et al. 2019, section 2.2, "The vocabulary is expanded to 50,257"): the file is not in the repository,
and the same tests' NullTokenizer variants state ``--vocab-size 50257``.

Usage:
    python tools/after_step_memory.py --megatron-lm-git DIR            # write the artifact
    python tools/after_step_memory.py --megatron-lm-git DIR --check    # exit 1 when it is not current
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tools"):
    if str(path) not in sys.path:  # run as a script: the checker and the validation tool from this checkout
        sys.path.insert(0, str(path))

import planner_validation  # noqa: E402  (tools/planner_validation.py: plans a case as the plan command does)
from mcore_fields import VERSION_REFS, list_git, read_git  # noqa: E402

ARTIFACT = ROOT / "reference" / "benchmarks" / "after_step_memory.json"
COMMAND = "python tools/after_step_memory.py --megatron-lm-git DIR"
COMMIT = VERSION_REFS["main"]
TESTS = "tests/functional_tests/test_cases/gpt"
RECIPES = "tests/test_utils/recipes/h100"
GOLDEN = "golden_values_dev_dgx_h100.json"
PLAN = ["--hardware", "h100-sxm", "--mcore-version", "main", "--flavor", "megatron-lm"]
GPT2_VOCAB = 50257
MIB = 2**20


def argv_for(model_args: Mapping[str, Any]) -> list[str]:
    """The test's MODEL_ARGS as the command line its launcher builds (a flag for ``true``, none for ``false``),
    with GPT-2's vocabulary size for a tokenizer file the repository does not hold."""
    argv: list[str] = []
    for key, value in model_args.items():
        if key in ("--vocab-file", "--merge-file", "--tokenizer-type"):
            continue
        if value is True:
            argv.append(key)
        elif value is not False:
            argv += [key, str(value)]
    if "--vocab-file" in model_args and "--vocab-size" not in model_args:
        argv += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(GPT2_VOCAB)]
    elif "--tokenizer-type" in model_args:
        argv += ["--tokenizer-type", str(model_args["--tokenizer-type"])]
    return argv


def _layout(job: Any) -> str:
    par = job.training.par
    return "interleaved" if par.virtual_pipeline > 1 else "pipeline" if par.pipeline > 1 else "no_pipeline"


def recipe_gpus(git: Path) -> dict[str, tuple[int, str]]:
    """Each test case an H100 recipe runs: its GPUs (``nodes`` x ``gpus`` of the recipe's spec) and the recipe."""
    out: dict[str, tuple[int, str]] = {}
    for name in list_git(git, COMMIT, RECIPES):
        recipe = yaml.safe_load(read_git(git, COMMIT, f"{RECIPES}/{name}")) or {}
        spec = recipe.get("spec", {})
        gpus = int(spec.get("nodes", 1)) * int(spec.get("gpus", 1))
        for product in recipe.get("products", []):
            for case in product.get("test_case", []):
                out.setdefault(case, (gpus, f"{RECIPES}/{name}"))
    return out


def skip_reason(config: Mapping[str, Any], gpus: tuple[int, str] | None) -> str | None:
    if config.get("MODE", "pretraining") != "pretraining":
        return f"MODE {config['MODE']}: not a pretraining run"
    if "MODEL_ENV_VARS" in config:
        return "sets its GPU count per variant (MODEL_ENV_VARS)"
    if gpus is None:
        return "no H100 recipe runs it"
    return None


def row(name: str, config: Mapping[str, Any], golden: Mapping[str, Any],
        gpus: tuple[int, str] | None) -> dict[str, Any]:
    """One test: its golden value at the first logged step beside the planner's last stage."""
    measured = int(planner_validation.reduce_golden(golden["mem-allocated-bytes"], "first"))
    out: dict[str, Any] = {"test": name, "source": f"NVIDIA/Megatron-LM@{COMMIT[:8]}:{TESTS}/{name}/{GOLDEN}",
                           "measured": measured}
    skipped = skip_reason(config, gpus)
    if skipped is not None or gpus is None:
        return {**out, "skipped": skipped}
    words = ["--gpus", str(gpus[0]), *PLAN, "--argv=" + shlex.join(argv_for(config.get("MODEL_ARGS", {})))]
    out |= {"recipe": gpus[1], "command": "python -m checks plan " + shlex.join(words)}
    planned = planner_validation.plan_case(words)
    if isinstance(planned, str):
        return {**out, "refused": planned}
    last = planned.stages[-1]
    after = planner_validation.after_step(last)
    return {**out, "layout": _layout(planned.job), "held_inputs": int(last.held_inputs_bytes),
            "after_step": after, "residual": out["measured"] - after,
            "residual_without_held_inputs": out["measured"] - (after - int(last.held_inputs_bytes))}


def build(git: Path) -> dict[str, Any]:
    gpus = recipe_gpus(git)
    rows = []
    for name in list_git(git, COMMIT, TESTS):
        if GOLDEN not in list_git(git, COMMIT, f"{TESTS}/{name}"):
            continue
        golden = json.loads(read_git(git, COMMIT, f"{TESTS}/{name}/{GOLDEN}"))
        if "mem-allocated-bytes" not in golden:
            continue
        config = yaml.safe_load(read_git(git, COMMIT, f"{TESTS}/{name}/model_config.yaml"))
        rows.append(row(name, config, golden, gpus.get(name)))
    planned = [r for r in rows if "residual" in r]
    summary = {}
    for layout in ("no_pipeline", "pipeline", "interleaved"):
        group = [r for r in planned if r["layout"] == layout]
        summary[layout] = {
            "tests": len(group),
            "median_residual_mib": round(statistics.median(r["residual"] for r in group) / MIB, 2),
            "median_residual_without_held_inputs_mib":
                round(statistics.median(r["residual_without_held_inputs"] for r in group) / MIB, 2),
        }
    return {
        "about": ("Megatron-LM's GPT functional tests on H100: mem-allocated-bytes after the first logged step "
                  "(last pipeline stage) against the planner's bytes between steps, after_step_bytes; residual is "
                  "measured less predicted, bytes, and residual_without_held_inputs the same without the pipeline "
                  "inputs each chunk keeps. The planner leaves out a constant near 96 MiB (cuBLAS workspaces)."),
        "command": COMMAND,
        "megatron_lm": COMMIT,
        "gpt2_vocab_size": GPT2_VOCAB,
        "summary": {"planned": len(planned), "refused": sum("refused" in r for r in rows),
                    "skipped": sum("skipped" in r for r in rows), "by_layout": summary},
        "tests": rows,
    }


def render(artifact: Mapping[str, Any]) -> str:
    return json.dumps(artifact, indent=1) + "\n"


def produce(git: Path) -> str:
    """The artifact's text; its revision is the committed one's while the results are unchanged
    (``benchmarks.common.kept_revision``)."""
    from benchmarks.common import kept_revision

    return render(kept_revision(ARTIFACT, build(git), shlex.split(COMMAND)[1:]))


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(prog="python tools/after_step_memory.py", description=__doc__.splitlines()[0])
    cli.add_argument("--megatron-lm-git", type=Path, required=True,
                     help="a git directory of NVIDIA/Megatron-LM holding commit " + COMMIT[:8])
    cli.add_argument("--check", action="store_true", help="write nothing; exit 1 when the artifact is not current")
    args = cli.parse_args(argv)
    try:
        text = produce(args.megatron_lm_git)
    except subprocess.CalledProcessError as err:
        print(f"{args.megatron_lm_git}: cannot read {COMMIT[:8]} ({err.stderr.strip()})", file=sys.stderr)
        return 2
    if args.check:
        from benchmarks.common import check_artifact

        return check_artifact(ARTIFACT, text, COMMAND)
    ARTIFACT.write_text(text, encoding="utf-8")
    data = json.loads(text)
    medians = ", ".join(f"{layout} {s['median_residual_mib']} / {s['median_residual_without_held_inputs_mib']} "
                        f"({s['tests']})" for layout, s in data["summary"]["by_layout"].items())
    print(f"wrote {ARTIFACT.relative_to(ROOT)}: {data['summary']['planned']} tests planned, "
          f"{data['summary']['refused']} refused, {data['summary']['skipped']} skipped; median residual (MiB) "
          f"with / without held inputs: {medians}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
