"""Each rule's conditions, from both sides of each boundary: the examples a rule's one bad and one good example
cannot show alone (a bound moved by one, a condition dropped, a value taken out of an allowed set).

Each case is a config in the input's real format, checked as a user's file or command line would be, and what
the rule must do on it: fire or not, and where it fires, what its finding says. Cases were added where a
mutation-testing run (mutmut 3.8.1 over checks/rules/, see CONTRIBUTING.md) showed a change to a rule that no
test noticed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from checks.catalogue import run_example
from checks.report import finding_json
from checks.rules import ALL_RULES, BY_ID
from checks.rules.base import Example


def _yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)


def _bridge_optimizer(**values: Any) -> str:
    """A Bridge config's optimizer section: offload on, with the distributed and precision-aware optimizer."""
    base = {"optimizer_cpu_offload": True, "use_precision_aware_optimizer": True, "use_distributed_optimizer": True}
    return _yaml({"optimizer": {**base, **values}})


def _nemo_rl_optimizer(**values: Any) -> str:
    """A NeMo-RL config's Megatron optimizer section, offload on as in _bridge_optimizer, Adam at fraction 1.0."""
    base = {"optimizer": "adam", "optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0,
            "use_precision_aware_optimizer": True, "use_distributed_optimizer": True}
    return _yaml({"policy": {"megatron_cfg": {"enabled": True, "optimizer": {**base, **values}}}})


def _fine_grained(**model: Any) -> str:
    """A Bridge config with fine-grained offloading of core_attn on, as Transformer Engine >= 2.10 needs it."""
    base = {"fine_grained_activation_offloading": True, "offload_modules": ["core_attn"]}
    return _yaml({"model": {**base, **model}, "env_vars": {"NVTE_CPU_OFFLOAD_V1": 1}})


@dataclass(frozen=True)
class Case:
    rule: str
    example: Example
    fires: bool
    why: str
    says: tuple[str, ...] = ()  # substrings of the finding's message (or fix), when it fires
    fix: str | None = None  # the finding's whole fix, where the case is about it
    patch: bool | None = None  # whether the finding carries a patch (None: not asked)
    upstream: bool | None = None  # whether it quotes an upstream check (None: not asked)


CASES: tuple[Case, ...] = (
    # OPT002: [0, 1] is closed at both ends, and a fraction below 0 is out of range too
    Case("OPT002", Example(_bridge_optimizer(optimizer_offload_fraction=-0.5)), True, "below the range",
         says=("-0.5 is outside [0, 1]", "behaves like 0 (nothing offloaded)"), patch=False),
    Case("OPT002", Example(_bridge_optimizer(optimizer_offload_fraction=0.0)), False, "0 is in range (OPT001's case)"),
    Case("OPT002", Example(_bridge_optimizer(optimizer_offload_fraction=1.0001)), True, "just above 1",
         says=("behaves like 1.0",), patch=True),
    Case("OPT002", Example(_bridge_optimizer(optimizer_cpu_offload=False, optimizer_offload_fraction=1.5)), False,
         "the switch is off: not read"),
    Case("OPT002", Example(_nemo_rl_optimizer(optimizer_offload_fraction=-0.5), "nemo-rl"), True,
         "NeMo-RL main refuses it, and the finding quotes its check", upstream=True),
    # OPT013: only NeMo-RL after PR #3628 requires the distributed optimizer
    Case("OPT013", Example(_nemo_rl_optimizer(use_distributed_optimizer=False, use_precision_aware_optimizer=False),
                           "nemo-rl", nemo_rl="0.7.0"), False, "NeMo-RL 0.7.0 does not check it"),
    Case("OPT013", Example(_nemo_rl_optimizer(optimizer_cpu_offload=False, use_distributed_optimizer=False,
                                              use_precision_aware_optimizer=False), "nemo-rl"),
         False, "no optimizer offload"),
    # OPT015: Adam and SGD are both supported
    Case("OPT015", Example(_bridge_optimizer(optimizer_offload_fraction=1.0, optimizer="sgd")), False, "SGD is built"),
    Case("OPT015", Example(_bridge_optimizer(optimizer_cpu_offload=False, optimizer="lion")), False,
         "no optimizer offload"),
    Case("OPT015", Example(_nemo_rl_optimizer(optimizer="lion"), "nemo-rl"), True, "NeMo-RL main refuses it",
         says=("optimizer='lion'",), upstream=True),
    Case("OPT015", Example(_nemo_rl_optimizer(optimizer="lion"), "nemo-rl", nemo_rl="0.7.0"), True,
         "NeMo-RL 0.7.0 does not refuse it: beyond upstream there", upstream=False),
    # OPT005: the fix adds the distributed optimizer only when it is missing
    Case("OPT005", Example("--bf16 --optimizer-cpu-offload", "megatron-lm"), True, "no distributed optimizer either",
         fix="Add --use-precision-aware-optimizer and --use-distributed-optimizer", patch=True),
    Case("OPT005", Example("--bf16 --use-distributed-optimizer", "megatron-lm"), False, "no optimizer offload"),
    # FGA010: fused_group_mlp alone, with the op fuser
    Case("FGA010", Example(_yaml({"model": {"fine_grained_activation_offloading": True,
                                            "offload_modules": ["fused_group_mlp", "expert_fc1", "moe_act"],
                                            "num_moe_experts": 8, "use_transformer_engine_op_fuser": True},
                                  "env_vars": {"NVTE_CPU_OFFLOAD_V1": 1}})), True, "with expert_fc1 and moe_act",
         says=("together with ['expert_fc1', 'moe_act']", "Keep fused_group_mlp alone"), patch=True, upstream=True),
    Case("FGA010", Example(_yaml({"model": {"fine_grained_activation_offloading": False,
                                            "offload_modules": ["fused_group_mlp"], "num_moe_experts": 8}})), False,
         "fine-grained offloading off"),
    # FGA016: a PP delta of one byte still means something with PP, nothing without; a negative one is not > 0
    Case("FGA016", Example(_fine_grained(delta_offload_bytes_across_pp_ranks=1)), True, "a delta of 1 byte without PP",
         says=("delta_offload_bytes_across_pp_ranks=1 has no effect",)),
    Case("FGA016", Example(_fine_grained(delta_offload_bytes_across_pp_ranks=0)), False, "a delta of 0"),
    Case("FGA016", Example(_fine_grained(fine_grained_offloading_max_inflight_offloads=-1)), True,
         "a negative in-flight cap",
         says=("max_inflight_offloads=-1 behaves like 0",), patch=True),
    Case("FGA016", Example(_fine_grained(fine_grained_offloading_max_inflight_offloads=0)), False,
         "an in-flight cap of 0"),
    # FGA008 (MoE offload inside recomputed MoE): moe_layer_recompute is selective recompute of "moe" too
    Case("FGA008", Example(_fine_grained(offload_modules=["moe_act"], num_moe_experts=8, moe_layer_recompute=True)),
         True, "moe_layer_recompute instead of recompute_modules", upstream=True),
    Case("FGA008", Example(_fine_grained(offload_modules=["core_attn"], num_moe_experts=8, moe_layer_recompute=True)),
         False, "no MoE-internal module offloaded"),
    # CFG003: an optimizer field another release has is named with the releases that have it
    Case("CFG003", Example(_bridge_optimizer(decoupled_weight_decay=False), version="0.14.0"), True,
         "an optimizer field from 0.15 on", says=("optimizer.decoupled_weight_decay", "the keys exist in 0.15.3")),
    # ACT009: a Bridge provider named Hybrid (megatron-core's HybridStack) gets no layer-level offload either
    Case("ACT009", Example(_yaml({"model": {"_target_": "megatron.bridge.models.hybrid.hybrid_provider."
                                                        "HybridModelProvider", "num_layers": 24, "cpu_offloading": True,
                                            "cpu_offloading_num_layers": 4}})), True, "a HybridModelProvider",
         says=("no effect on a hybrid model (HybridModelProvider)",)),
    Case("ACT009", Example(_yaml({"model": {"_target_": "megatron.bridge.models.mamba.mamba_provider."
                                                        "MambaModelProvider", "num_layers": 24, "cpu_offloading": True,
                                            "cpu_offloading_num_layers": 4}})), True, "a MambaModelProvider",
         says=("no effect on a hybrid model (MambaModelProvider)",)),
    # CFG001: NeMo-RL's optimizer section refuses any unknown key, offload-related or not; a Megatron-LM flag
    # that is a TransformerConfig field but no flag is not "a model field to move"
    Case("CFG001", Example(_nemo_rl_optimizer(weight_decy=0.1), "nemo-rl"), True,
         "an unknown non-offload key where NeMo-RL crashes",
         says=("weight_decy' is not a field of optimizer", "the run fails at start-up")),
    Case("CFG001", Example("--num-layers 4 --cpu-offloading-activations", "megatron-lm"), True,
         "a config field that is no flag", fix="Remove it"),
    # TEX006: the module list is not read with fine-grained offloading off
    Case("TEX006", Example(_yaml({"model": {"fine_grained_activation_offloading": False,
                                            "offload_modules": ["expert_fc1"], "num_moe_experts": 8}}), te="2.5"),
         False, "fine-grained offloading off"),
    Case("TEX006", Example(_fine_grained(offload_modules=["expert_fc1"], num_moe_experts=8), te="2.5"), True,
         "expert_fc1 with TE 2.5", says=("offloading expert_fc1 needs Transformer Engine >= 2.6",)),
    # seed-17 survivors: branches whose texts no example showed
    Case("ACT001", Example(_yaml({"model": {"num_layers": 3, "cpu_offloading": True, "cpu_offloading_num_layers": 3}})),
         True, "three layers: at most one offloaded",
         fix="Set cpu_offloading_num_layers to at most 1 (the last layers must stay on the device for overlap)"),
    Case("FGA014", Example(_fine_grained(offload_modules=["attn_norm", "core_attn"],
                                         transformer_impl="transformer_engine")), True,
         "attn_norm when the attention is not said",
         fix="Say it: set model.multi_latent_attention (and mla_down_proj_fusion), or drop attn_norm for a "
             "standard-attention model"),
    Case("FGA013", Example(_fine_grained(offload_modules=["expert_fc1"], num_moe_experts=8, moe_grouped_gemm=False)),
         True, "MoE modules without the grouped GEMM", says=("but moe_grouped_gemm=false",)),
    Case("OPT016", Example(_bridge_optimizer(optimizer_offload_fraction=1.0, pin_cpu_params=False), version="0.16.1"),
         True, "pin_cpu_params=false where it is not read",
         says=("fp32 host masters of 16-bit parameters are never pinned",)),
    Case("OPT014", Example(_bridge_optimizer(optimizer_offload_fraction=1.0, optimizer="sgd",
                                             use_precision_aware_optimizer=False)), True,
         "SGD without the precision-aware optimizer", says=("only the optimizer state moves",), patch=False),
    Case("TEX003", Example(_yaml({"model": {"num_layers": 8, "cpu_offloading": True, "cpu_offloading_num_layers": 2,
                                            "cpu_offloading_double_buffering": True}})), True,
         "double buffering with TE unknown", says=("is ignored by Transformer Engine < 2.5",)),
    # OPT003: pin_cpu_grads=false is a knob without the switch as well
    Case("OPT003", Example(_yaml({"optimizer": {"optimizer_cpu_offload": False, "pin_cpu_grads": False}})), True,
         "pin_cpu_grads=false", says=("pin_cpu_grads=False has no effect",)),
    Case("OPT003", Example(_yaml({"optimizer": {"optimizer_cpu_offload": False, "pin_cpu_grads": True}})), False,
         "pin_cpu_grads at its default"),
    # ACT002: a pipeline size of 0 is not pipeline parallelism (megatron-core reads 0 or None as 1 here)
    Case("ACT002", Example(_yaml({"model": {"num_layers": 24, "cpu_offloading": True, "cpu_offloading_num_layers": 4,
                                            "pipeline_model_parallel_size": 0}})), False, "PP 0"),
    # ACT006: each knob that acts only under the switch
    Case("ACT006", Example(_yaml({"model": {"cpu_offloading": False, "cpu_offloading_double_buffering": True}})),
         True, "double buffering without the switch",
         says=("cpu_offloading_double_buffering=True has no effect because cpu_offloading is false",)),
    # FGA002 in NeMo-RL: its own set-up check refuses an empty list first
    Case("FGA002", Example(_yaml({"policy": {"megatron_cfg": {"enabled": True, "fine_grained_activation_offloading":
                                                              True, "offload_modules": []}}}), "nemo-rl"), True,
         "NeMo-RL", says=("NeMo-RL stops with a ValueError at set-up",), upstream=True),
    # OPT012: fp4 parameters have their own fix
    Case("OPT012", Example(_yaml({"model": {"fp4_param": True, "fp4": "e2m1"},
                                  "optimizer": {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0,
                                                "use_precision_aware_optimizer": True,
                                                "use_distributed_optimizer": True}})), True, "fp4 parameters",
         fix="Set fp4_param=false, or turn optimizer offloading off"),
    # ACT011: turning recompute off is spelled per front end
    Case("ACT011", Example(_yaml({"model": {"num_layers": 8, "recompute_granularity": "block"}})), True,
         "an unknown granularity in Bridge", says=("turn recompute off (recompute_granularity=null)",)),
    # TEX006: attention offloaded inside a captured attn graph needs TE 2.14
    Case("TEX006", Example(_fine_grained(cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"]),
                           te="2.13"), True, "TE 2.13", says=("inside a captured attn CUDA graph",), upstream=True),
    Case("TEX006", Example(_fine_grained(cuda_graph_impl="transformer_engine", cuda_graph_modules=["attn"]),
                           te="2.14"), False, "TE 2.14"),
    # CFG007: each kind of refused override gets its own fix
    Case("CFG007", Example(_yaml({"model": {"cpu_offloading": False}}), overrides=("model.cpu_offloadin=true",)),
         True, "a typo in Bridge", fix=("Check the key (did you mean 'cpu_offloading'?): the config has no such key. "
                                         "To add one, write +model.cpu_offloadin=true (Bridge then drops a key its "
                                         "dataclass lacks)")),
    Case("CFG007", Example(_yaml({"policy": {"megatron_cfg": {"enabled": True, "optimizer": {"lr": 1.0}}}}),
                           "nemo-rl", overrides=("policy.megatron_cfg.optimizer.optimizer_cpu_ofload=true",)),
         True, "a typo in NeMo-RL",
         says=("To add one, write +policy.megatron_cfg.optimizer.optimizer_cpu_ofload=true",)),
    Case("CFG007", Example(_yaml({"model": {"cpu_offloading": False}}), overrides=("~model.cpu_offloading_x",)),
         True, "deleting what is not there", fix="Remove the override: there is nothing to delete"),
    Case("CFG007", Example(_yaml({"model": {"cpu_offloading": False}}), overrides=("~model.cpu_offloading=true",)),
         True, "deleting with another value", fix="Write ~model.cpu_offloading without a value, or give the value "
                                                   "the key has"),
    # CFG002: what the repair patch proposes for a quoted number
    Case("CFG002", Example(_yaml({"model": {"num_layers": "24"}})), True, "a quoted int", says=("num_layers",),
         patch=True),
    Case("CFG002", Example(_bridge_optimizer(optimizer_offload_fraction="0.5")), True, "a quoted float",
         fix="Write optimizer_offload_fraction as an unquoted number, e.g. optimizer_offload_fraction: 0.5",
         patch=True),
    Case("CFG002", Example(_fine_grained(offload_modules="core_attn")), True, "a bare module name",
         fix="Write offload_modules as a list of names, [a, b], e.g. offload_modules: [core_attn]", patch=True),
    # CFG001: each kind of unknown key gets the fix its case needs
    Case("CFG001", Example("--num-layers 4 --cpu-offload-num-layers 2", "megatron-lm"), True,
         "a misspelled flag", says=("argparse exits at start-up",)),
    Case("CFG001", Example(_yaml({"optimzer": {"optimizer_cpu_offload": True}})), True, "a misspelled section",
         says=("did you mean 'optimizer'?",)),
    Case("CFG001", Example(_yaml({"optimizer": {"offload_it_all_now": True}})), True, "no close name",
         fix="Remove it"),
    # CFG007: a misspelled optimizer field in an override is named with the field it nearly is
    Case("CFG007", Example(_bridge_optimizer(), overrides=("optimizer.optimizer_cpu_ofload=true",)), True,
         "an optimizer field misspelled", says=("did you mean 'optimizer_cpu_offload'?",)),
    # FGA003: a module of a later release is named with the release it arrives in
    Case("FGA003", Example(_fine_grained(offload_modules=["fused_group_mlp"], num_moe_experts=8), version="0.18.2"),
         True, "a module from 0.19", says=("'fused_group_mlp' arrives in megatron-core 0.19",)),
    Case("FGA003", Example(_fine_grained(offload_modules=["fused_grup_mlp"], num_moe_experts=8), version="0.18.2"),
         True, "a typo of a module from 0.19",
         says=("did you mean 'fused_group_mlp' (megatron-core 0.19 or later)?",)),
    # FGA018: Bridge refuses local graphs other than full-iteration ones; from 0.18 TE graphs are the way
    Case("FGA018", Example(_fine_grained(offload_modules=["moe_act"], num_moe_experts=8, cuda_graph_impl="local"),
                           version="0.19.2", te="2.14"), True, "Bridge with local graphs",
         says=("Megatron Bridge allows cuda_graph_impl=local only for full-iteration graphs",
               "for per-module capture"), patch=True),
    # ACT004: full_iteration graphs arrive in 0.18 (and are exempt there); other graph modes are refused
    Case("ACT004", Example(_yaml({"model": {"num_layers": 8, "cpu_offloading": True, "cpu_offloading_num_layers": 2,
                                            "cuda_graph_impl": "full_iteration"}}), version="0.17.1"), True,
         "full_iteration before 0.18", says=("does not exist in megatron-core 0.17.1",), patch=True),
    Case("ACT004", Example(_yaml({"model": {"num_layers": 8, "cpu_offloading": True, "cpu_offloading_num_layers": 2,
                                            "cuda_graph_impl": "full_iteration"}}), version="0.19.2"), False,
         "full_iteration from 0.18"),
    Case("ACT004", Example(_yaml({"model": {"num_layers": 8, "cpu_offloading": True, "cpu_offloading_num_layers": 2,
                                            "cuda_graph_impl": "transformer_engine"}}), version="0.19.2"), True,
         "TE graphs from 0.18", says=("or use cuda_graph_impl=full_iteration, the only graph mode allowed with it",)),
    # From the seed-18 mutation run (each a survivor there): where a finding falls back to the switch's line, and
    # the messages of branches no example reached
    Case("FGA019", Example("--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn "
                           "--enable-cuda-graph", "megatron-lm", version="0.18.2", te="2.9"), True,
         "local graphs from --enable-cuda-graph: cuda_graph_impl is not written, so the finding is at the switch",
         says=("cuda_graph_impl=local and these modules",)),
    Case("FGA018", Example(_fine_grained(cuda_graph_impl="local", cuda_graph_modules=["attn"]), version="0.17.1"),
         True, "Bridge before 0.18: no graph implementation works with fine-grained offloading",
         says=("megatron-core 0.17.1 supports none with fine-grained offloading (0.18 adds Transformer Engine "
               "graphs)",), patch=True),
    Case("CFG008", Example("MODEL_ARGS:\n  --num-layers: 4\n  --my-own-flag: 1\n  --my-own-flag: 2\n",
                           "megatron-lm"), True, "a flag the parser does not know is the command line's",
         says=("--my-own-flag is given twice (lines 3 and 4)",)),
    Case("CFG004", Example("--bf16 false --num-layers 4", "megatron-lm"), True, "a word after a switch",
         fix="Remove the word: a switch takes no value (write the flag alone for true, leave it out for false); in "
             "a functional-test YAML write `--flag: true`, not false or null"),
    Case("ACT004", Example(_yaml({"model": {"cpu_offloading": True, "cpu_offloading_num_layers": 1, "num_layers": 4,
                                            "enable_cuda_graph": True}}), version="0.14.0"), True,
         "0.14 checks enable_cuda_graph itself: the finding quotes it and does not call it unchecked",
         says=("cannot capture the offload copies",), upstream=True),
    Case("OPT003", Example(_yaml({"policy": {"megatron_cfg": {"enabled": True, "optimizer": {
        "optimizer": "adam", "optimizer_cpu_offload": False, "overlap_cpu_optimizer_d2h_h2d": True}}}}), "nemo-rl"),
         True, "NeMo-RL main refuses the overlap without the switch",
         says=("NeMo-RL refuses it",), upstream=True),
    Case("TEX001", Example(_yaml({"model": {"cpu_offloading": False, "cpu_offloading_activations": False,
                                            "cpu_offloading_weights": False}})), True,
         "TE unknown: the model may fail to build though offloading is off",
         says=("pass --te-version to know which",),
         fix="Set cpu_offloading_activations=true (weight offloading is deprecated in TE >= 2.3)", patch=True),
    # Survivors of a later mutation run: the texts of branches no case reached
    Case("FGA009", Example(_fine_grained(delta_offload_bytes_across_pp_ranks=-1)), True, "a negative PP delta",
         fix="Set delta_offload_bytes_across_pp_ranks to 0 or more", patch=True, upstream=True),
    Case("FGA019", Example("--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn "
                           "--cuda-graph-impl local --cuda-graph-modules attn", "megatron-lm", version="0.19.2",
                           te="2.9"), True,
         "0.19 local graphs with a non-MoE module: not a partial MoE capture",
         says=("cuda_graph_impl=local and these modules",), fix="Use cuda_graph_impl=transformer_engine", patch=True),
    Case("CFG001", Example(_yaml({"policy": {"megatron_cfg": {"enabled": True, "cpu_offloading": True}}}), "nemo-rl"),
         True, "a model field directly under megatron_cfg: it goes under model_overrides",
         says=("NeMo-RL sets this model field only under megatron_cfg.model_overrides)",),
         fix="Move it to megatron_cfg.model_overrides.cpu_offloading"),
    Case("CFG003", Example("--bf16 --rl-offload-kv-cache-during-training", "megatron-lm", version="0.19.2"), True,
         "a flag only older releases have: the newest of them is named",
         says=("it exists in 0.15.3, 0.16.1",),
         fix="Remove it, or use megatron-core 0.16.1 or earlier (and pass --mcore-version)"),
    Case("ACT011", Example(_yaml({"model": {"num_layers": 8, "recompute_granularity": "full"}})), True,
         "full recompute without a method",
         says=("recompute_granularity='full' without a recompute_method",),
         fix="Set recompute_method (uniform: recompute_num_layers layers per chunk; block: the first "
             "recompute_num_layers layers of each pipeline stage) and recompute_num_layers", upstream=True),
    Case("ACT011", Example(_yaml({"model": {"num_layers": 8, "pipeline_model_parallel_size": 2,
                                            "recompute_granularity": "full", "recompute_method": "uniform"}})), True,
         "full recompute without a layer count: the bound is the layers of one pipeline rank",
         says=("recompute_granularity='full' without recompute_num_layers",),
         fix="Set recompute_num_layers between 1 and 4 (the layers of one pipeline rank)", upstream=True),
    Case("TEX005", Example("--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn",
                           "megatron-lm", te="2.12"), True,
         "Megatron-LM: the variable is the launch environment's, which no config patch sets",
         fix="Set NVTE_CPU_OFFLOAD_V1=1 (the launch environment)", patch=False, upstream=True),
)


@pytest.mark.parametrize(("kind", "value", "meant"), [
    ("bool", "yes", True), ("bool", " Off ", False), ("bool", "1", True), ("bool", "0", False), ("bool", "on", True),
    ("bool", "no", False), ("bool", "maybe", None),
    ("int", "4", 4), ("int", " 4.0 ", 4), ("int", "4.5", None), ("int", "four", None), ("int", 3.0, 3),
    ("int", 3.5, None),
    ("float", "0.5", 0.5), ("float", "half", None), ("float", 3, None),
    ("list_str", "[core_attn, attn_proj]", ["core_attn", "attn_proj"]), ("list_str", "core_attn", ["core_attn"]),
    ("list_str", "core_attn attn_proj", ["core_attn", "attn_proj"]), ("list_str", "", None),
    ("str", "x", None),
])
def test_cfg002_repairs_what_the_user_most_likely_meant(kind: str, value: Any, meant: Any) -> None:
    """CFG002's patch: the value a quoted or mistyped one most likely stands for, None when it cannot be told."""
    from checks.rules.keys import _repair

    repaired = _repair(kind, value)
    assert repaired == meant and type(repaired) is type(meant)


def _id(case: Case) -> str:
    return f"{case.rule}-{'fires' if case.fires else 'silent'}-{case.why}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_rule_on_each_side_of_its_boundaries(case: Case) -> None:
    rule = BY_ID[case.rule]
    found = [f for f in run_example(rule, case.example) if f.rule == case.rule]
    assert bool(found) == case.fires, [(f.rule, f.message) for f in run_example(rule, case.example)]
    for f in found:
        assert all(text in f.message or text in f.fix for text in case.says), (f.message, f.fix)
        assert case.fix is None or f.fix == case.fix, f.fix
        assert case.patch is None or bool(f.patch) == case.patch, f.patch
        assert case.upstream is None or (f.upstream is not None) == case.upstream, f.upstream


def test_an_example_written_as_an_indented_block_is_dedented() -> None:
    assert Example("""
        model:
          cpu_offloading: true
        """).text == "model:\n  cpu_offloading: true\n"
    assert Example("  --bf16", "megatron-lm").text == "  --bf16"  # only a block that starts with a newline


def test_case_ids_are_unique() -> None:
    assert len({_id(c) for c in CASES}) == len(CASES)


def test_cfg009_without_a_file_asks_for_the_config_file() -> None:
    """NeMo-RL overrides with no config file: the fix asks for the file (Bridge's asks for the recipe's dump)."""
    from checks.engine import run
    from checks.loaders import Request, load

    found = [f for f in run(load(Request(overrides=("+policy.megatron_cfg.recompute_granularity=selective",),
                                         flavor="nemo-rl"))) if f.rule == "CFG009"]
    assert [f.fix for f in found] == ["To check it exactly, give the config file the run uses"]


# -- every finding, field by field -------------------------------------------------------------------------------
# tests/golden/findings.json holds every finding of each rule's own bad and good examples and of each case above:
# rule, path, location, message, fix, patch, safety, upstream anchor. The cases above ask what a rule must say; the
# snapshot keeps the rest of what it says from changing unnoticed (a message, a patch key or a location that no
# case names). After an intended change, regenerate it with
#     UPDATE_GOLDEN=1 python -m pytest tests/test_rule_boundaries.py -k snapshot
# and read the diff: it is the change the user sees.
SNAPSHOT = Path(__file__).resolve().parent / "golden" / "findings.json"


def _findings() -> dict[str, list[dict[str, Any]]]:
    shown: dict[str, list[dict[str, Any]]] = {}
    for rule in ALL_RULES:
        for kind, example in (("bad", rule.bad), ("good", rule.good)):
            shown[f"{rule.id} {kind} example"] = [finding_json(f) for f in run_example(rule, example)]
    for case in CASES:
        shown[_id(case)] = [finding_json(f) for f in run_example(BY_ID[case.rule], case.example)]
    return shown


def test_findings_match_the_snapshot() -> None:
    shown = json.loads(json.dumps(_findings()))  # as JSON reads it back: tuples become lists
    if os.environ.get("UPDATE_GOLDEN"):
        SNAPSHOT.write_text(json.dumps(shown, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    held = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert sorted(shown) == sorted(held), "cases were added or removed: regenerate the snapshot (see above)"
    changed = [name for name in shown if shown[name] != held[name]]
    assert not changed, f"findings changed for {changed}: see the comment above to update {SNAPSHOT}"


def test_cfg011_about_one_path_names_no_paths() -> None:
    """Two rules proposing different values for one key of one path: the finding is about that path alone, so
    it lists no `paths` (they are for findings about several)."""
    from checks.catalogue import example_configs
    from checks.context import Context
    from checks.rules.keys import check_conflicting_patches

    (cfg,) = example_configs(Example(_yaml({"model": {"num_layers": 8}})), "0.19.2")
    ctx = Context(cfg)
    for rule, value in (("ACT001", 2), ("ACT007", 0)):
        ctx.record_patch(rule, {"model.cpu_offloading_num_layers": value}, {"model.cpu_offloading_num_layers": value})
    (hit,) = check_conflicting_patches(ctx)
    assert hit.path == "model.cpu_offloading_num_layers" and hit.paths == ()
    assert hit.message.startswith("the fixes of ACT001, ACT007 disagree on model.cpu_offloading_num_layers")


# -- helpers and branches no loaded config reaches ---------------------------------------------------------------
# The loaders and the engine cannot show these with the shipped tables (no rule asks 0.14 for Transformer Engine
# graphs; every duplicate the functional-test reader records has line numbers; no Megatron-LM version's parser has
# an append/extend/count flag; a Megatron-LM command line spells no env patch), so each is asked of the rule or
# helper directly.
def _config(example: Example, version: str) -> Any:
    from checks.catalogue import example_configs

    (cfg,) = example_configs(example, version)
    return cfg


def test_graph_impl_patch_names_no_cuda_graph_impl_where_the_version_lacks_it() -> None:
    """0.14 has no cuda_graph_impl: turning enable_cuda_graph off is the whole patch, whatever graphs are asked for."""
    from checks.context import Context
    from checks.rules.cuda_graphs import graph_impl_patch

    ctx = Context(_config(Example(_yaml({"model": {"num_layers": 8, "enable_cuda_graph": True}})), "0.14.0"))
    assert not ctx.exists("model.cuda_graph_impl")
    for impl in ("none", "transformer_engine"):
        assert graph_impl_patch(ctx, impl) == {"model.enable_cuda_graph": False}, impl


def test_cfg008_without_line_numbers_says_twice() -> None:
    """A duplicate whose origins carry no line: the message cannot name the lines."""
    from dataclasses import replace

    from checks.context import Context
    from checks.rules.keys import check_duplicate_key

    cfg = _config(Example("MODEL_ARGS:\n  --num-layers: 4\n  --num-layers: 8\n", "megatron-lm"), "0.19.2")
    (dup,) = cfg.duplicates
    lineless = replace(dup, first=replace(dup.first, origin=replace(dup.first.origin, line=None)),
                       last=replace(dup.last, origin=replace(dup.last.origin, line=None)))
    (hit,) = check_duplicate_key(Context(replace(cfg, duplicates=(lineless,))))
    assert hit.message.startswith("--num-layers is given twice (twice): the runner passes both"), hit.message


@pytest.mark.parametrize("action", ["append", "append_const", "extend", "count"])
def test_cfg008_an_accumulating_flag_given_twice_is_applied_twice(action: str, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """argparse keeps both values of an append/extend/count flag: neither line is without effect."""
    from checks.context import Context
    from checks.rules import keys
    from checks.versions import FlagSpec, mlm_flags

    flag = FlagSpec("--my-tag", "my_tag", action, None, None, "str", None, options=("--my-tag",))
    monkeypatch.setattr(keys, "mlm_flags", lambda version: {**mlm_flags(version), "--my-tag": flag})
    cfg = _config(Example("MODEL_ARGS:\n  --my-tag: a\n  --my-tag: b\n", "megatron-lm"), "0.19.2")
    (hit,) = keys.check_duplicate_key(Context(cfg))
    assert hit.message.endswith(f"; argparse applies both ({action})"), hit.message


def test_tex005_proposes_no_patch_for_megatron_lm() -> None:
    """Megatron-LM reads NVTE_CPU_OFFLOAD_V1 from the launch environment, which no change to its flags sets: the
    rule's own hit carries no patch (the engine would drop an env patch for a command line, so ask the rule)."""
    from checks.context import Context
    from checks.rules.transformer_engine import check_nvte_v1

    cfg = _config(Example("--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn",
                          "megatron-lm", te="2.12"), "0.19.2")
    (hit,) = check_nvte_v1(Context(cfg))
    assert hit.fix == "Set NVTE_CPU_OFFLOAD_V1=1 (the launch environment)" and hit.patch is None, hit.patch
