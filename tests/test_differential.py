"""Differential test: the checker against megatron-core's own config classes.

For every bundled example (and the ``--set`` variants below) the canonical
config is turned into keyword arguments for the installed megatron-core's
``TransformerConfig`` and ``OptimizerConfig``, and the optimizer factory is run
up to its offload checks. Then: megatron-core raises for an offload reason at a
stage if and only if the checker reports an upstream-backed error for that
stage, and the checker quotes megatron-core's message.

Configs that megatron-core rejects for reasons unrelated to offloading make the
test fail: the examples must be built so that the offload checks are reached.
The megatron-core side lives in ``oracle.py``; ``test_differential_properties.py``
runs the same comparison on generated configs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import tomllib

from checks.config import CanonicalConfig
from checks.demo import Entry, entries
from checks.loaders import Request, load
from checks.versions import version_key

oracle = pytest.importorskip("oracle")  # needs torch and megatron-core
ROOT = Path(__file__).resolve().parent.parent
VERSION = oracle.VERSION
# The release the test setup installs (pyproject.toml, the `test` extra).
CI_VERSION = next(req.split("==")[1] for req in tomllib.loads((ROOT / "pyproject.toml").read_text())
                  ["project"]["optional-dependencies"]["test"] if req.startswith("megatron-core=="))
UNKNOWN = oracle.UNKNOWN
compare = oracle.compare
megatron_verdict = oracle.megatron_verdict

# --set variants run on top of examples, to reach each offload check.
_LAYER_ON = ("model.cpu_offloading=true", "model.cpu_offloading_num_layers=2", "model.pipeline_model_parallel_size=1",
             "model.fine_grained_activation_offloading=false")
# MoE graph capture needs drop-padding MoE (an unrelated megatron-core rule)
_DROP_PADDING = ("model.moe_expert_capacity_factor=1.0", "model.moe_pad_expert_input_to_capacity=true")
VARIANTS: dict[str, list[tuple[str, ...]]] = {
    "bridge-dump-clean": [
        ("model.cpu_offloading=true",),
        _LAYER_ON,
        (*_LAYER_ON, "model.cpu_offloading_num_layers=32"),
        (*_LAYER_ON, "model.cpu_offloading_num_layers=-1"),
        (*_LAYER_ON, "model.recompute_granularity=selective"),
        (*_LAYER_ON, "model.cuda_graph_impl=transformer_engine"),
        (*_LAYER_ON, "model.cuda_graph_impl=local"),
        (*_LAYER_ON, "model.cuda_graph_impl=full_iteration"),
        ("model.offload_modules=[attn_proj]",),
        ("model.offload_modules=[core_atn,attn_proj]",),
        ("model.offload_modules=[]",),
        ("model.offload_modules=null",),
        ("optimizer.decoupled_weight_decay=false",),
        ("optimizer.decoupled_weight_decay=false", "optimizer.use_precision_aware_optimizer=false"),
        ("optimizer.optimizer_cpu_offload=false", "optimizer.decoupled_weight_decay=false"),
        ("optimizer.optimizer=sgd",),
        ("optimizer.use_distributed_optimizer=false", "ddp.use_distributed_optimizer=false"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.main_grads_dtype=bf16"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.main_params_dtype=fp16"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.exp_avg_dtype=bf16"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.exp_avg_sq_dtype=bf16"),
        # fine-grained offloading under CUDA graphs (checked from 0.18; accepted silently before)
        ("model.cuda_graph_impl=local", "model.cuda_graph_modules=[]"),
        ("model.cuda_graph_impl=local", "model.cuda_graph_modules=[attn]"),
        ("model.num_moe_experts=4", "model.moe_grouped_gemm=true", "model.offload_modules=[moe_act]",
         "model.cuda_graph_impl=local", "model.cuda_graph_modules=[]"),
        ("model.num_moe_experts=4", "model.moe_grouped_gemm=true", "model.cuda_graph_impl=transformer_engine",
         "model.cuda_graph_modules=[attn,moe]", *_DROP_PADDING),
        ("model.cuda_graph_impl=transformer_engine", "model.cuda_graph_warmup_steps=0"),
        ("model.cuda_graph_impl=full_iteration",),
        ("model.num_moe_experts=4", "model.moe_grouped_gemm=true", "model.offload_modules=[expert_fc1]",
         "model.expert_model_parallel_size=2", "model.moe_token_dispatcher_type=flex",
         "model.moe_flex_dispatcher_backend=ncclep", "model.overlap_moe_expert_parallel_comm=true",
         "model.bf16=true", "model.pipeline_model_parallel_size=1", "model.tensor_model_parallel_size=1"),
        ("model.num_moe_experts=4", "model.moe_grouped_gemm=true", "model.offload_modules=[moe_act]",
         "model.cuda_graph_impl=local", "model.cuda_graph_modules=[moe]", *_DROP_PADDING),
        ("model.activation_offload_fraction=1.5",),
        ("model.delta_offload_bytes_across_pp_ranks=-1",),
        ("model.min_offloaded_tensor_size=-1",),
        ("model.num_moe_experts=4", "model.offload_modules=[fused_group_mlp]"),
        ("model.num_moe_experts=4", "model.offload_modules=[fused_group_mlp,moe_act]",
         "model.use_transformer_engine_op_fuser=true"),
        ("since:main", "model.recompute_granularity=selective", "model.recompute_modules=[mhc]",
         "model.enable_mhc_connections=true"),
        ("since:main", "model.offload_modules=[gdp_qkv]", "model.recompute_granularity=selective",
         "model.recompute_modules=[gdp_in_proj]"),
    ],
    "megatron-lm-argv": [],
}
ARGV_VARIANTS = [
    "--num-layers 8 --cpu-offloading-num-layers 2 --recompute-granularity full --recompute-method uniform "
    "--recompute-num-layers 1",
    "--num-layers 8 --cpu-offloading-num-layers 2 --pipeline-model-parallel-size 2",
    "--num-layers 8 --fine-grained-activation-offloading --offload-modules attn_proj",
    "--num-layers 8 --fine-grained-activation-offloading",
    "--num-layers 8 --fine-grained-activation-offloading --offload-modules qkv_linear core_attn",
    "--num-layers 8 --cpu-offloading-num-layers 2 --fine-grained-activation-offloading --offload-modules core_attn",
]


def _applicable(overrides: tuple[str, ...]) -> bool:
    """Whether a variant can run on the installed megatron-core ("since:X" marks recompute modules added in X)."""
    if overrides and overrides[0].startswith("since:"):
        return version_key(VERSION) >= version_key(overrides[0].split(":", 1)[1])
    return not ("model.cuda_graph_impl=full_iteration" in overrides and version_key(VERSION) < version_key("0.18")
                and "model.cpu_offloading=true" not in overrides)


def _overrides(overrides: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(o for o in overrides if not o.startswith("since:"))


def _configs(entry: Entry, overrides: tuple[str, ...] = ()) -> list[CanonicalConfig]:
    """The entry's configs with the variant's overrides; what no input states holds its default
    (--assume-defaults), as megatron-core's config classes are built here from the same values."""
    request = entry.request()
    return load(replace(request, overrides=request.overrides + _overrides(overrides), version=VERSION,
                        assume_defaults=True))


CASES = [(e, ()) for e in entries()] + [(e, v) for e in entries() for v in VARIANTS.get(e.name, []) if _applicable(v)]


@pytest.mark.parametrize("entry,overrides", CASES, ids=[f"{e.name}{'+' + '+'.join(v) if v else ''}" for e, v in CASES])
def test_examples_agree_with_megatron_core(entry: Entry, overrides: tuple[str, ...]) -> None:
    from checks.loaders.checkpoint import ARCH_PATHS

    if any(path in cfg.unknown for cfg in load(entry.request()) for path in ARCH_PATHS):
        pytest.skip("the model catalogue does not hold the checkpoint this recipe builds its model from, so "
                    "megatron-core cannot be given its architecture")
    for cfg in _configs(entry, overrides):
        try:
            compare(cfg)
        except oracle.UnrelatedRejection as err:
            if version_key(VERSION) >= version_key(CI_VERSION):
                raise  # the bundled examples must build on the release CI runs and every later one
            # Recipes reconstructed from today's Bridge use features older releases refuse.
            pytest.skip(f"megatron-core {VERSION} cannot build this config: {err}")


@pytest.mark.parametrize("argv", ARGV_VARIANTS)
def test_command_lines_agree_with_megatron_core(argv: str) -> None:
    for cfg in load(Request((), (), argv, "megatron-lm", VERSION)):
        compare(cfg)
