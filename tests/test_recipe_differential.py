"""Differential test over Megatron Bridge recipes: the checker against megatron-core on the job a launch runs.

Each case is ``run_recipe.py --recipe NAME`` with generated offload overrides, read by the checker as a launch
(the recipe's values from the recipe catalogue, its model's from the model catalogue). megatron-core's
``TransformerConfig`` / ``OptimizerConfig`` (the installed release, 0.16.1 in CI) are built from the same values
(``oracle.py``); megatron-core raises for an offload reason if and only if the checker reports that error.
A case megatron-core refuses for another reason (an optimizer or kernel this release lacks) is counted, not
compared; the test fails unless at least 30 recipes are compared.
"""

from __future__ import annotations

import hashlib
import itertools

import pytest

from checks.loaders import Request, load
from checks.loaders.bridge_recipe import catalogue

oracle = pytest.importorskip("oracle")  # needs torch and megatron-core

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
WANTED_RECIPES = 40


def _recipes() -> list[str]:
    """A spread of recipes, library and benchmark, chosen by a hash of the name (stable across runs)."""
    names = sorted(k for k in catalogue()["recipes"] if "." not in k)
    return sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())[:WANTED_RECIPES * 2]


def _case(recipe: str, overrides: tuple[str, ...]) -> str:
    configs = load(Request(recipe=recipe, overrides=overrides, version=oracle.VERSION))
    undecided: list[str] = []
    for cfg in configs:
        try:
            oracle.compare(cfg, undecided)  # asserts the verdicts agree
        except oracle.UnrelatedRejection:
            return "refused for another reason"
    return "undecided" if undecided else "compared"


def test_recipes_with_offload_overrides_agree_with_megatron_core() -> None:
    outcomes: dict[str, list[str]] = {}
    for recipe, overrides in itertools.product(_recipes(), OFFLOAD_VARIANTS):
        try:
            outcome = _case(recipe, overrides)
        except Exception as err:
            if isinstance(err, AssertionError):
                raise AssertionError(f"{recipe} + {' '.join(overrides)}: {err}") from err
            outcome = f"megatron-core cannot build it: {type(err).__name__}"
        outcomes.setdefault(recipe, []).append(outcome)
    compared = [r for r, o in outcomes.items() if "compared" in o]
    assert len(compared) >= 30, (len(compared), {r: o for r, o in outcomes.items() if "compared" not in o})
    cases = [o for found in outcomes.values() for o in found]
    agreed, undecided = cases.count("compared"), cases.count("undecided")
    print(f"{len(compared)} recipes compared; {agreed} of {len(cases)} cases agree, {undecided} undecided (CFG010), "
          f"{len(cases) - agreed - undecided} not buildable on this megatron-core")
