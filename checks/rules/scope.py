"""Upstream offload-related checks that have no rule, and why (rendered into reference/rules.md).

Every raise, assert and warning about offloading in the covered releases either backs a rule (its
`upstream` field) or is listed here with the reason a static config check cannot or should not
report it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutOfScope:
    project: str
    where: str  # file (and line at the version given), or function
    message: str
    reason: str


OUT_OF_SCOPE: tuple[OutOfScope, ...] = (
    OutOfScope("megatron-core", "optimizer/__init__.py `_get_megatron_optimizer_based_on_param_groups` (all versions)",
               "CPU offload is recommended for PyTorch >= 2.3.0, untested versions below this may have convergence "
               "issues.", "A warning about the installed torch, which a config does not state."),
    OutOfScope("megatron-core", "optimizer/__init__.py (>= 0.18)",
               "skip_megatron_wrapping=True is incompatible with optimizer_cpu_offload.",
               "An argument of the Python API (the layer-wise optimizer path), not a config field."),
    OutOfScope("megatron-core", "optimizer/__init__.py `check_config_overrides_consistency` (>= 0.16)",
               "Field optimizer_cpu_offload should not be overriden in a config override.",
               "Per-parameter-group overrides are Python objects (Bridge's `optimizer_config_override_provider`), "
               "not config values."),
    OutOfScope("megatron-core", "optimizer/cpu_offloading/hybrid_optimizer.py",
               "param_groups should not be empty",
               "Depends on the model's parameters at run time."),
    OutOfScope("megatron-core", "pipeline_parallel/fine_grained_activation_offload.py",
               "Offload margin is not 0 / No non-empty chunk found / All stages must have same chunk count / "
               "Chunk mismatch / Stray tensor should not be offloaded / No groups to offload / Must be inside "
               "offload context / is not pending offload / not found in",
               "Internal invariants of the offload plan at run time (the configurations that reach them are "
               "covered by FGA017 and the known upstream issues in the troubleshooting guide)."),
    OutOfScope("megatron-core", "optimizer/optimizer_config.py (all versions)",
               "Current FusedAdam of TE doesn't support --use-precision-aware-optimizer, please update TE version. / "
               "--use-precision-aware-optimizer requires FusedAdam from TransformerEngine, but not found.",
               "Depend on the installed Transformer Engine, not on the config; skipped by megatron-core itself when "
               "optimizer_cpu_offload is on."),
    OutOfScope("megatron-core", "optimizer/distrib_optimizer.py `DistributedOptimizer.__init__`",
               "Only Adam and HybridDeviceOptimizer currently supported, due to checkpointing requirements.",
               "Concerns the distributed optimizer without offloading (with offloading the hybrid optimizer passes); "
               "OPT015 covers optimizers the offload path turns into SGD."),
    OutOfScope("megatron-core", "model_parallel_config.py `__post_init__`",
               "When using pipeline parallelism, pipeline_dtype must be specified",
               "Not an offload check; Megatron-LM, Bridge and NeMo-RL all set pipeline_dtype themselves."),
    OutOfScope("megatron-core", "transformer_config.py `__post_init__` (recompute and CUDA-graph checks)",
               "When using recompute_granuarlity ... / recompute_method ... / full recompute is only supported with "
               "full iteration CUDA graph. / CUDA graphs not supported with activation recomputation.",
               "Recompute and CUDA-graph rules that apply with or without offloading; the offload rules stop at "
               "the same combinations where they involve offloading (ACT003, ACT004, FGA015, FGA019)."),
    OutOfScope("megatron-core", "transformer_config.py `__post_init__` (0.18, 0.19)",
               "moe_paged_stash requires moe_expert_rank_capacity_factor to be set; there is no need to use paged "
               "stashing without it.", "A paged-stash prerequisite, not an offload check."),
    OutOfScope("transformer-engine", "pytorch/cpu_offload.py (all versions)",
               "CPU offload is not supported in debug mode.",
               "Depends on Transformer Engine's debug mode, set outside the config."),
    OutOfScope("megatron-core", "transformer_layer.py `_set_offload_modules` (>= 0.19)",
               "attn_norm offloading is not supported with attn cudagraph. Disabling attn_norm offloading. / "
               "mlp_norm offloading is not supported with the current cudagraph scope. Disabling mlp_norm "
               "offloading.", "Warnings at model build that switch the module off; FGA014 reports norm offloads "
               "that do nothing."),
    OutOfScope("megatron-lm", "training/arguments.py `validate_args`",
               "recompute method is not yet supported for selective recomputing granularity",
               "A recompute argument check, not an offload check."),
    OutOfScope("megatron-core", "transformer_layer.py `_set_offload_modules` (>= 0.19)",
               "Offloading modules captured in cuda graph requires torch>=2.9.0. / Fine-grained activation "
               "offloading needs cuda_graph_warmup_steps > 0.",
               "The torch version is not in the config; the warm-up assert repeats the config check behind FGA021."),
    OutOfScope("megatron-core", "transformer_config.py `__post_init__` (>= 0.19)",
               "GTP + local CUDA graphs that capture shared_experts",
               "A CUDA-graph and recompute rule for sharded shared experts; its message only suggests offloading."),
    OutOfScope("megatron-lm", "training/arguments.py `validate_args` (RL)",
               "offload-kv-cache-during-training / remove-kv-cache-during-training / KV cache should not be "
               "instantiated in unified memory / --rl-offload-inference-model-weights-when-idle / "
               "--rl-kv-cache-management-mode=offload / Cannot recapture CUDA graphs while offloading KV / "
               "--rl-offload-optimizer-during-inference is incompatible",
               "Megatron-LM's RL inference offloading (KV cache, inference weights, optimizer during inference) is a "
               "different mechanism from the training offload this skill covers; OPT020 covers its clash with "
               "optimizer offloading."),
    OutOfScope("nemo-rl", "models/value/workers/megatron_value_worker.py",
               "Virtual pipeline parallelism (VPP) is not supported for the Megatron PPO value model.",
               "Not an offload check."),
)
