"""Every recipe of the recipe catalogue, with generated offload overrides, checked against megatron-core.

For a stable spread of recipes (chosen by a hash of the name) crossed with the offload overrides users switch
on, the checker reads ``run_recipe.py --recipe NAME OVERRIDES`` as a launch (the recipe's values from
``checks/data/bridge_recipes.json``, its checkpoint's from ``checks/data/models.json``), and megatron-core's
``TransformerConfig`` / ``OptimizerConfig`` of the installed release are built from the same values
(``tests/oracle.py``). A case agrees, is undecided (the checker says it cannot decide, CFG010, what
megatron-core raises on a stand-in value), or cannot be built on this release for another reason.

Usage: python tools/recipe_differential.py [--recipes N] [--out reference/benchmarks/recipe_differential.json]
``tests/test_recipe_differential.py`` runs the same cases and fails on any disagreement.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from checks.loaders import Request, load  # noqa: E402
from checks.loaders.bridge_recipe import catalogue  # noqa: E402

# What users switch on, and the settings it meets in a recipe (PP, CUDA graphs, recompute, the optimizer).
OFFLOAD_VARIANTS: tuple[tuple[str, ...], ...] = (
    ("model.cpu_offloading=true", "model.cpu_offloading_num_layers=2"),
    ("model.cpu_offloading=true", "model.cpu_offloading_num_layers=2", "model.pipeline_model_parallel_size=1",
     "model.virtual_pipeline_model_parallel_size=null", "model.cuda_graph_impl=none"),
    ("model.cpu_offloading=true", "model.cpu_offloading_num_layers=2", "model.pipeline_model_parallel_size=1",
     "model.virtual_pipeline_model_parallel_size=null", "model.recompute_granularity=full",
     "model.recompute_method=uniform", "model.recompute_num_layers=1"),
    ("model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn,attn_proj]"),
    ("model.fine_grained_activation_offloading=true", "model.offload_modules=[attn_proj]"),
    ("model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]",
     "model.cpu_offloading=true", "model.cpu_offloading_num_layers=1"),
    ("optimizer.optimizer_cpu_offload=true",),
    ("optimizer.optimizer_cpu_offload=true", "optimizer.optimizer_offload_fraction=0.5"),
    ("optimizer.optimizer_cpu_offload=true", "optimizer.optimizer_offload_fraction=1.0",
     "optimizer.use_precision_aware_optimizer=true", "optimizer.use_distributed_optimizer=false",
     "ddp.use_distributed_optimizer=false"),
)
AGREE, UNDECIDED = "agree", "undecided"


def recipes(count: int) -> list[str]:
    """``count`` recipes, library and benchmark, in the order of a hash of the name (stable across runs)."""
    names = sorted(k for k in catalogue().names("recipes") if "." not in k)
    return sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())[:count]


def case(recipe: str, overrides: tuple[str, ...]) -> str:
    """One case's outcome; raises AssertionError when the checker and megatron-core disagree."""
    import oracle

    undecided: list[str] = []
    try:
        for cfg in load(Request(recipe=recipe, overrides=overrides, version=oracle.VERSION)):
            oracle.compare(cfg, undecided)
    except oracle.UnrelatedRejection as err:
        return f"not buildable: {str(err).split(': ', 1)[-1][:80]}"
    except AssertionError:
        raise
    except Exception as err:
        return f"not buildable: {type(err).__name__}: {str(err)[:80]}"
    return UNDECIDED if undecided else AGREE


def run(count: int) -> dict[str, Any]:
    import oracle

    outcomes = {recipe: [case(recipe, overrides) for overrides in OFFLOAD_VARIANTS] for recipe in recipes(count)}
    cases = [o for found in outcomes.values() for o in found]
    return {
        "benchmark": "recipe_differential",
        "megatron_core": oracle.VERSION,
        "recipes": len(outcomes),
        "recipes_compared": sum(1 for found in outcomes.values() if AGREE in found),
        "variants": [list(v) for v in OFFLOAD_VARIANTS],
        "cases": len(cases),
        "agree": cases.count(AGREE),
        "undecided": cases.count(UNDECIDED),
        "not_buildable": len(cases) - cases.count(AGREE) - cases.count(UNDECIDED),
        "disagree": 0,  # a disagreement raises
        "outcomes": outcomes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", type=int, default=80)
    parser.add_argument("--out", type=Path, default=ROOT / "reference" / "benchmarks" / "recipe_differential.json")
    args = parser.parse_args(argv)
    from benchmarks.common import write_artifact

    result = write_artifact(args.out, run(args.recipes))
    print(f"{result['recipes_compared']} of {result['recipes']} recipes compared; {result['agree']} of "
          f"{result['cases']} cases agree with megatron-core {result['megatron_core']}, {result['undecided']} "
          f"undecided (CFG010), {result['not_buildable']} not buildable there, 0 disagree")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
