"""The upstream checks the rules mirror: what each one is. Where each stands per version is data.

Each check here has its identity (project, exception, message, the file it lives in); the line of the
``raise``/``assert`` in every version that performs it is in ``checks/data/anchors.json``, which
``tools/verify_anchors.py --write`` derives from each version's source (a version whose file has no statement
carrying the message has no anchor: the check does not exist there). Paths are relative to the repository; for
megatron-core the commit comes from the version profile, so ``C1_NUM_LAYERS.anchor("0.16.1")`` is
``NVIDIA/Megatron-LM@55ac7082:megatron/core/transformer/transformer_config.py:1140``. A check's key is its name
here (``tests/test_versions.py`` checks both agree).
"""

from __future__ import annotations

from checks.anchors import STAGE_CLI, STAGE_CONFIG, STAGE_MODEL, STAGE_OPTIMIZER, STAGE_SETUP, UpstreamCheck
from checks.versions import bridge_commit, nemo_rl_commit

TC = "megatron/core/transformer/transformer_config.py"
OI = "megatron/core/optimizer/__init__.py"
OC = "megatron/core/optimizer/optimizer_config.py"
TB = "megatron/core/transformer/transformer_block.py"
FSO = "megatron/core/optimizer/fully_sharded_optimizer.py"
ARGS = "megatron/training/arguments.py"
# The checks known at one commit only: NeMo-RL main and the Megatron Bridge commit the checker models (from
# checks/data/nemo_rl_keys.json and framework_pins.json, so that moving them is a regeneration).
NEMO_RL = f"NVIDIA-NeMo/RL@{nemo_rl_commit('main')[:8]}"
BRIDGE = f"NVIDIA-NeMo/Megatron-Bridge@{bridge_commit()[:8]}"
NEMO_RL_SETUP = "nemo_rl/models/megatron/setup.py"
BRIDGE_CONFIG = "src/megatron/bridge/training/config.py"


# --- layer-level activation offloading (TransformerConfig.__post_init__) ---
C1_NUM_LAYERS = UpstreamCheck(
    "C1_NUM_LAYERS", "megatron-core", "ValueError",
    "CPU offloading can be done only for layers less than {num_layers}", STAGE_CONFIG,
    TC)
C2_PIPELINE = UpstreamCheck(
    "C2_PIPELINE", "megatron-core", "ValueError",
    "Currently there is no support for Pipeline parallelism with CPU offloading",
    STAGE_CONFIG, TC)
C3_RECOMPUTE = UpstreamCheck(
    "C3_RECOMPUTE", "megatron-core", "ValueError",
    "CPU offloading does not work when activation recomputation is enabled",
    STAGE_CONFIG, TC)
C4_CUDA_GRAPHS = UpstreamCheck(
    "C4_CUDA_GRAPHS", "megatron-core", "ValueError", "CUDA graphs not supported with CPU offloading.", STAGE_CONFIG,
    TC)
# Before 0.18 there is no full_iteration implementation: asking for it (to combine CUDA graphs with offloading,
# which 0.18 allows) fails this check first. From 0.18 the check no longer concerns offloading.
C6_GRAPH_IMPL = UpstreamCheck(
    "C6_GRAPH_IMPL", "megatron-core", "AssertionError", "Invalid cuda graph implementation: {impl}", STAGE_CONFIG,
    TC, until="0.17")

C7_PAGED_STASH = UpstreamCheck(
    "C7_PAGED_STASH", "megatron-core", "ValueError",
    "moe_paged_stash cannot be enabled with cpu_offloading.", STAGE_CONFIG,
    TC)
TB_NO_TE = UpstreamCheck(
    "TB_NO_TE", "megatron-core", "AssertionError", "CPU Offloading is enabled when TE is not present", STAGE_MODEL,
    TB)

# --- fine-grained activation offloading (TransformerConfig.__post_init__, >= 0.16) ---
F1_EXCLUSIVE = UpstreamCheck(
    "F1_EXCLUSIVE", "megatron-core", "AssertionError",
    "fine_grained_activation_offloading cannot be enabled with cpu_offloading.",
    STAGE_CONFIG, TC)
F2_MODULES_EMPTY = UpstreamCheck(
    "F2_MODULES_EMPTY", "megatron-core", "AssertionError", None, STAGE_CONFIG, TC,
    evidence="len(self.offload_modules) > 0")
F3_MODULES_INVALID = UpstreamCheck(
    "F3_MODULES_INVALID", "megatron-core", "AssertionError",
    "Invalid choices for offload_modules: {invalid}. Allowed modules are: {allowed}",
    STAGE_CONFIG, TC)
F4_ATTN_PROJ = UpstreamCheck(
    "F4_ATTN_PROJ", "megatron-core", "ValueError",
    "attn_proj cannot be set to offload_modules alone without core_attn because the input of attn_proj is the "
    "output of core_attn, which is needed in core_attn.backward().",
    STAGE_CONFIG, TC)

F5_GDP_QKV = UpstreamCheck(
    "F5_GDP_QKV", "megatron-core", "ValueError",
    "gdp_qkv cannot be set in offload_modules together with gdp_in_proj in recompute_modules, because gdp_in_proj "
    "discards the input of the causal conv and rematerializes it at the start of the mixer backward, leaving "
    "nothing for the gdp_qkv offload group to keep on the host.",
    STAGE_CONFIG, TC)
F6_MOE_RECOMPUTE = UpstreamCheck(
    "F6_MOE_RECOMPUTE", "megatron-core", "AssertionError",
    "Cannot offload {modules} while recomputing the entire MoE layer. 'moe' in recompute_modules wraps the full "
    "MoE forward in a checkpoint, so offloading activations inside it is redundant and will cause errors. Either "
    "remove 'moe' from --recompute-modules or remove {modules} from --offload-modules.",
    STAGE_CONFIG, TC)
F7_MIN_SIZE = UpstreamCheck(
    "F7_MIN_SIZE", "megatron-core", "AssertionError", "min_offloaded_tensor_size must be non-negative.", STAGE_CONFIG,
    TC)
F8_FRACTION = UpstreamCheck(
    "F8_FRACTION", "megatron-core", "AssertionError",
    "activation_offload_fraction must be in range [0, 1].", STAGE_CONFIG,
    TC)
F9_DELTA = UpstreamCheck(
    "F9_DELTA", "megatron-core", "AssertionError",
    "delta_offload_bytes_across_pp_ranks must be non-negative.", STAGE_CONFIG,
    TC)
F10_OP_FUSER = UpstreamCheck(
    "F10_OP_FUSER", "megatron-core", "ValueError",
    "fused_group_mlp requires use_transformer_engine_op_fuser.", STAGE_CONFIG,
    TC)
F11_FUSED_EXCLUSIVE = UpstreamCheck(
    "F11_FUSED_EXCLUSIVE", "megatron-core", "ValueError",
    "fused_group_mlp offloads the whole fused grouped MLP and cannot be combined with expert_fc1 or moe_act. "
    "Remove: {modules}",
    STAGE_CONFIG, TC)
F12_PAGED_STASH_018 = UpstreamCheck(
    "F12_PAGED_STASH_018", "megatron-core", "ValueError",
    "When moe_paged_stash is enabled, offload_modules must not include expert_fc1 or moe_act (paged stash covers "
    "those activations). Remove: {modules}",
    STAGE_CONFIG, TC)
F12_PAGED_STASH = UpstreamCheck(
    "F12_PAGED_STASH", "megatron-core", "ValueError",
    "When moe_paged_stash is enabled, offload_modules must not include expert_fc1, moe_act, or fused_group_mlp "
    "(paged stash covers those activations). Remove: {modules}",
    STAGE_CONFIG, TC)
F12_NULL_MODULES = UpstreamCheck(
    "F12_NULL_MODULES", "megatron-core", "TypeError", "'NoneType' object is not iterable", STAGE_CONFIG,
    TC, evidence="moe_offload_conflict = ... set(self.offload_modules")
F13_MHC = UpstreamCheck(
    "F13_MHC", "megatron-core", "NotImplementedError",
    "'mhc' in recompute_modules + fine_grained_activation_offloading is not yet supported. The mHC recompute hook "
    "currently fires before the offloading backward chunk is initialized, causing tensor_pop on a None chunk. "
    "Disable one of them.",
    STAGE_CONFIG, TC)
G1_LOCAL_MODULES = UpstreamCheck(
    "G1_LOCAL_MODULES", "megatron-core", "AssertionError",
    "fine-grained activation offloading with cuda_graph_impl='local' only supports offload_modules 'expert_fc1', "
    "'moe_act', and 'fused_group_mlp'. Unsupported offload_modules: {modules}.",
    STAGE_CONFIG, TC)
G2_LOCAL_WHOLE_LAYER = UpstreamCheck(
    "G2_LOCAL_WHOLE_LAYER", "megatron-core", "AssertionError",
    "fine-grained activation offloading with cuda_graph_impl='local' is not supported with whole-layer CUDA "
    "graph capture.",
    STAGE_CONFIG, TC)
G3_IMPL_018 = UpstreamCheck(
    "G3_IMPL_018", "megatron-core", "AssertionError",
    "fine-grained activation offloading is only supported with transformer_engine CUDA graph implementation or "
    "local CUDA graph implementation with full_iteration scope.",
    STAGE_CONFIG, TC)
G3_IMPL = UpstreamCheck(
    "G3_IMPL", "megatron-core", "AssertionError",
    "fine-grained activation offloading is only supported with transformer_engine CUDA graph implementation or "
    "local CUDA graph implementation with partial MoE offload. Local partial CUDA graphs are supported only for "
    "expert_fc1, moe_act, or fused_group_mlp offload when the full MoE module is not captured.",
    STAGE_CONFIG, TC)
G4_TOKEN_DROP = UpstreamCheck(
    "G4_TOKEN_DROP", "megatron-core", "AssertionError",
    "Token-drop MoE is temporarily not supported with activation offloading.",
    STAGE_CONFIG, TC)
G5_WARMUP = UpstreamCheck(
    "G5_WARMUP", "megatron-core", "AssertionError",
    "cuda_graph_warmup_steps must be greater than 0 when enabling fine-grained activation offloading.",
    STAGE_CONFIG, TC)
G6_INFLIGHT = UpstreamCheck(
    "G6_INFLIGHT", "megatron-core", "AssertionError",
    "fine_grained_offloading_max_inflight_offloads must be a non-negative integer when using fine-grained "
    "activation offloading with full-iteration CUDA graphs",
    STAGE_CONFIG, TC)
G7_NCCLEP = UpstreamCheck(
    "G7_NCCLEP", "megatron-core", "AssertionError",
    "overlap_moe_expert_parallel_comm with ncclep does not support offloading 'expert_fc1': it forces expert FC1 "
    "to save the raw bf16 input, which the overlap path eagerly frees.",
    STAGE_CONFIG, TC)

# --- precision-aware optimizer (OptimizerConfig.__post_init__; the DistOpt check moved to the factory on main) ---
O1_PAO_ADAM = UpstreamCheck(
    "O1_PAO_ADAM", "megatron-core", "AssertionError",
    "--use-precision-aware-optimizer only supported with adam", STAGE_CONFIG,
    OC)
O2_PAO_DISTOPT = UpstreamCheck(
    "O2_PAO_DISTOPT", "megatron-core", "AssertionError",
    "--use-precision-aware-optimizer only supported with distributed optimizer",
    STAGE_CONFIG, OC)
I4_PAO_DISTOPT = UpstreamCheck(
    "I4_PAO_DISTOPT", "megatron-core", "ValueError",
    "--use-precision-aware-optimizer only supported with distributed optimizer",
    STAGE_OPTIMIZER, OI)
# main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype: four asserts, three lines apart.
O5_O8_DTYPES: dict[str, UpstreamCheck] = {
    name: UpstreamCheck(f"O5_O8_DTYPES.{name}", "megatron-core", "AssertionError",
                        f"{name} can only be fp32 when not using precision-aware optimizer", STAGE_CONFIG, OC)
    for name in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
}
I6_MFSDP_V2 = UpstreamCheck(
    "I6_MFSDP_V2", "megatron-core", "ValueError",
    "MFSDP v2 does not currently support optimizer CPU offload.", STAGE_OPTIMIZER,
    FSO)

# --- optimizer offload ---
I2_DECOUPLED_WD = UpstreamCheck(
    "I2_DECOUPLED_WD", "megatron-core", "AssertionError",
    "CPU offloading only supported with decoupled_weight_decay enabled (AdamW mode).",
    STAGE_OPTIMIZER, OI)
A1_PRECISION_AWARE = UpstreamCheck(
    "A1_PRECISION_AWARE", "megatron-lm", "AssertionError",
    "The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`, as the hybrid "
    "device optimizer reuses the code path of this flag.",
    STAGE_CLI, ARGS)

A2_FP8_DELAYED = UpstreamCheck(
    "A2_FP8_DELAYED", "megatron-lm", "AssertionError",
    "When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in conjunction with "
    "`--fp8-recipe delayed`.",
    STAGE_CLI, ARGS)
A3_TE_IMPL = UpstreamCheck(
    "A3_TE_IMPL", "megatron-lm", "AssertionError",
    "Fine-grained activation offloading is only supported with transformer_engine implementation",
    STAGE_CLI, ARGS)

# --- Megatron Bridge's own checks (ConfigContainer.validate at its pinned commit; NeMo-RL runs it too) ---
BRIDGE_FG_TE_IMPL = UpstreamCheck(
    "BRIDGE_FG_TE_IMPL", "megatron-bridge", "ValueError",
    "Fine-grained activation offloading is only supported with transformer_engine implementation. "
    "Current transformer_impl: {impl}",
    STAGE_SETUP, BRIDGE_CONFIG, fixed=BRIDGE)

A4_NVTE_V1 = UpstreamCheck(
    "A4_NVTE_V1", "megatron-lm", "AssertionError",
    "For fine-grained activation offloading with TE >= 2.10.0, NVTE_CPU_OFFLOAD_V1 should be set to 1 to avoid "
    "offloading weights.",
    STAGE_CLI, ARGS)
BRIDGE_NVTE_V1 = UpstreamCheck(
    "BRIDGE_NVTE_V1", "megatron-bridge", "ValueError",
    "For fine-grained activation offloading with TE >= 2.10.0, NVTE_CPU_OFFLOAD_V1 environment variable should be "
    "set to 1 to avoid offloading weights.",
    STAGE_SETUP, BRIDGE_CONFIG, fixed=BRIDGE)
BRIDGE_MFSDP_V2 = UpstreamCheck(
    "BRIDGE_MFSDP_V2", "megatron-bridge", "ValueError", "MFSDP V2 does not support optimizer CPU offload.", STAGE_SETUP,
    BRIDGE_CONFIG, fixed=BRIDGE)
BRIDGE_LOCAL_GRAPH = UpstreamCheck(
    "BRIDGE_LOCAL_GRAPH", "megatron-bridge", "ValueError",
    'Megatron Bridge supports model.cuda_graph_impl="local" only for full-iteration CUDA graphs{modules}. Use '
    'model.cuda_graph_impl="transformer_engine" for scoped CUDA graph capture such as "attn" or "mlp".',
    STAGE_SETUP, "src/megatron/bridge/utils/cuda_graph.py", fixed=BRIDGE,
    # upstream formats the section name ({config_name}) where the message says "model"
    evidence="Megatron Bridge supports ... only for ... full-iteration CUDA graphs")

# --- Transformer Engine (get_cpu_offload_context), and megatron-core's calls into it ---
_TE = "NVIDIA/TransformerEngine"  # no mirror here: tools/verify_anchors.py --write keeps these lines as they are
_TE_OFFLOAD = "transformer_engine/pytorch/cpu_offload.py"
TE_NOTHING_TO_OFFLOAD = UpstreamCheck(
    "TE_NOTHING_TO_OFFLOAD", "transformer-engine", "ValueError",
    "CPU Offloading is enabled while it is not mentioned what to offload (weights/activations)", STAGE_MODEL,
    _TE_OFFLOAD, fixed=f"{_TE}@70f53666")  # v2.9; before the `enabled` test
TE_NOTHING_TO_OFFLOAD_V2 = UpstreamCheck(
    "TE_NOTHING_TO_OFFLOAD_V2", "transformer-engine", "ValueError",
    "CPU Offloading is enabled while it is not mentioned what to offload (weights/activations)", STAGE_MODEL,
    _TE_OFFLOAD, fixed=f"{_TE}@769ed778")  # v2.10; only when enabled
TEX_SAVE_ORIGINAL_INPUT = UpstreamCheck(
    "TEX_SAVE_ORIGINAL_INPUT", "megatron-core", "ValueError",
    "set_save_original_input is only needed on transformer-engine modules that save quantized tensors by default. "
    "It needs transformer-engine>=2.6.0dev0.",
    # Earlier releases raise it too, from features other than offloading (the rule citing it is about 0.16's
    # fine-grained offloading).
    STAGE_MODEL, "megatron/core/extensions/transformer_engine.py", since="0.16")
TL_GRAPH_TE = UpstreamCheck(
    "TL_GRAPH_TE", "megatron-core", "AssertionError",
    "Offloading modules captured in cuda graph requires TE>=2.14.0.", STAGE_MODEL,
    "megatron/core/transformer/transformer_layer.py")
FGAO_NO_TE = UpstreamCheck(
    "FGAO_NO_TE", "megatron-core", "RuntimeError", "TE CPU offload is not available", STAGE_MODEL,
    "megatron/core/pipeline_parallel/fine_grained_activation_offload.py", within="__enter__")

# --- NeMo-RL's own checks (nemo_rl/models/megatron/setup.py at NeMo-RL main) ---
NRL_FRACTION = UpstreamCheck(
    "NRL_FRACTION", "nemo-rl", "ValueError",
    "optimizer_cpu_offload=True requires 0 < optimizer_offload_fraction <= 1", STAGE_SETUP,
    NEMO_RL_SETUP, fixed=NEMO_RL)
NRL_OVERLAP = UpstreamCheck(
    "NRL_OVERLAP", "nemo-rl", "ValueError",
    "overlap_cpu_optimizer_d2h_h2d=True requires optimizer_cpu_offload=True", STAGE_SETUP,
    NEMO_RL_SETUP, fixed=NEMO_RL)
NRL_MODULES_EMPTY = UpstreamCheck(
    "NRL_MODULES_EMPTY", "nemo-rl", "ValueError",
    "offload_modules must be a non-empty list when fine_grained_activation_offloading is True.",
    STAGE_SETUP, NEMO_RL_SETUP, fixed=NEMO_RL)
NRL_DISTOPT = UpstreamCheck(
    "NRL_DISTOPT", "nemo-rl", "ValueError",
    "optimizer_cpu_offload=True requires use_distributed_optimizer=True", STAGE_SETUP,
    NEMO_RL_SETUP, fixed=NEMO_RL)
NRL_ADAM_SGD = UpstreamCheck(
    "NRL_ADAM_SGD", "nemo-rl", "ValueError",
    "optimizer_cpu_offload=True requires optimizer to be adam or sgd", STAGE_SETUP,
    NEMO_RL_SETUP, fixed=NEMO_RL)
NRL_MOE_ONLY = UpstreamCheck(
    "NRL_MOE_ONLY", "nemo-rl", "ValueError",
    "A MoE-only offload module requires a MoE model (num_moe_experts must not be None): {modules}.",
    STAGE_SETUP, NEMO_RL_SETUP, fixed=NEMO_RL)
NRL_OVERRIDE_CONFLICT = UpstreamCheck(
    "NRL_OVERRIDE_CONFLICT", "nemo-rl", "ValueError",
    "model_overrides is only for Megatron Bridge model fields without a first-class NeMo-RL setting; {conflicts}. "
    "Set the first-class field directly instead.",
    STAGE_SETUP, NEMO_RL_SETUP, fixed=NEMO_RL)
# NeMo-RL 0.4.0-0.7.0 (before NVIDIA-NeMo/RL PR #3628, 2026-08-18): the fraction had to be exactly 1.0.
NRL_LEGACY_FRACTION = UpstreamCheck(
    "NRL_LEGACY_FRACTION", "nemo-rl", "AssertionError",
    "Currently for optimizer offloading, only optimizer_offload_fraction=1.0 is supported",
    STAGE_SETUP, ("nemo_rl/models/policy/megatron_policy_worker.py",  # 0.4.0; it moved twice
                  "nemo_rl/models/policy/workers/megatron_policy_worker.py", NEMO_RL_SETUP))

# --- Hydra command-line overrides (both frameworks: OmegaConf.set_struct(cfg, True), then hydra-core 1.3's
# ConfigLoaderImpl._apply_overrides_to_config; anything it raises is wrapped as OverridesError) ---
_APPLY_OVERRIDES = "ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=cfg)"
BRIDGE_OVERRIDE_REFUSED = UpstreamCheck(
    "BRIDGE_OVERRIDE_REFUSED", "megatron-bridge", "OverridesError",
    "Failed to parse Hydra overrides: {error}", STAGE_SETUP,
    "src/megatron/bridge/training/utils/omegaconf_utils.py", fixed=BRIDGE, evidence=_APPLY_OVERRIDES)
NRL_OVERRIDE_REFUSED = UpstreamCheck(
    "NRL_OVERRIDE_REFUSED", "nemo-rl", "OverridesError", "Failed to parse Hydra overrides: {error}", STAGE_SETUP,
    "nemo_rl/utils/config.py", fixed=NEMO_RL, evidence=_APPLY_OVERRIDES)

# --- the recompute settings (TransformerConfig.__post_init__, every version; checked in this order) ---
R1_GRANULARITY = UpstreamCheck(
    "R1_GRANULARITY", "megatron-core", "ValueError",
    'When using recompute_granuarlity: {granularity} must be "full"or "selective".',
    STAGE_CONFIG, TC)
R2_METHOD = UpstreamCheck(
    "R2_METHOD", "megatron-core", "ValueError",
    'recompute_method: {method} must be "block" or "uniform".', STAGE_CONFIG,
    TC)
R3_NO_METHOD = UpstreamCheck(
    "R3_NO_METHOD", "megatron-core", "ValueError",
    'Using recompute_granularity: {granularity} so recompute_method must be "block" or "uniform"', STAGE_CONFIG,
    TC)
R4_NUM_LAYERS = UpstreamCheck(
    "R4_NUM_LAYERS", "megatron-core", "ValueError",
    "When using recompute_granularity: {granularity} recompute_num_layers must be between 1 and "
    "num_layers_per_pipeline_rank: {per_rank}", STAGE_CONFIG,
    TC)
R5_SELECTIVE_LAYERS = UpstreamCheck(
    "R5_SELECTIVE_LAYERS", "megatron-core", "ValueError",
    "When using recompute_granularity: {granularity} recompute_num_layers must be None.",
    STAGE_CONFIG, TC)
NRL_RECOMPUTE_GRANULARITY = UpstreamCheck(
    "NRL_RECOMPUTE_GRANULARITY", "nemo-rl", "ValueError",
    "Invalid recompute_granularity: {granularity!r}. Valid options are 'full' or 'selective'.",
    STAGE_SETUP, NEMO_RL_SETUP, fixed=NEMO_RL)
