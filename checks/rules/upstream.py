"""The upstream checks the rules mirror, each anchored in every version that performs it.

Line numbers point at the ``raise``/``assert`` statement (``tools/verify_anchors.py``
re-derives them from each release's source). Paths are relative to the
Megatron-LM repository; the commit comes from the version profile, so
``C1.anchor("0.16.1")`` is ``NVIDIA/Megatron-LM@55ac7082:megatron/core/transformer/transformer_config.py:1140``.
"""

from __future__ import annotations

from checks.anchors import STAGE_CLI, STAGE_CONFIG, STAGE_MODEL, STAGE_OPTIMIZER, STAGE_SETUP, UpstreamCheck

TC = "megatron/core/transformer/transformer_config.py"
OI = "megatron/core/optimizer/__init__.py"
OC = "megatron/core/optimizer/optimizer_config.py"
TB = "megatron/core/transformer/transformer_block.py"
FSO = "megatron/core/optimizer/fully_sharded_optimizer.py"
ARGS = "megatron/training/arguments.py"
NEMO_RL_SETUP = "NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/megatron/setup.py"
BRIDGE_CONFIG = "NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/config.py"


def _lines(path: str, **by_version: int) -> dict[str, str]:
    labels = {"v0140": "0.14.0", "v0153": "0.15.3", "v0161": "0.16.1", "v0171": "0.17.1", "v0182": "0.18.2",
              "v0192": "0.19.2", "m14346b65": "main@14346b65", "m2a75ac12": "main@2a75ac12", "main": "main"}
    return {labels[k]: f"{path}:{line}" for k, line in by_version.items()}


# --- layer-level activation offloading (TransformerConfig.__post_init__) ---
C1_NUM_LAYERS = UpstreamCheck(
    "megatron-core", "ValueError", "CPU offloading can be done only for layers less than {num_layers}", STAGE_CONFIG,
    _lines(TC, v0140=811, v0153=890, v0161=1140, v0171=1320, v0182=1530, v0192=1710,
           m14346b65=1768, m2a75ac12=1768, main=1887))
C2_PIPELINE = UpstreamCheck(
    "megatron-core", "ValueError", "Currently there is no support for Pipeline parallelism with CPU offloading",
    STAGE_CONFIG, _lines(TC, v0140=816, v0153=895, v0161=1145, v0171=1325, v0182=1535, v0192=1715,
                         m14346b65=1773, m2a75ac12=1773, main=1892))
C3_RECOMPUTE = UpstreamCheck(
    "megatron-core", "ValueError", "CPU offloading does not work when activation recomputation is enabled",
    STAGE_CONFIG, _lines(TC, v0140=821, v0153=900, v0161=1150, v0171=1330, v0182=1540, v0192=1720,
                         m14346b65=1778, m2a75ac12=1778, main=1897))
C4_CUDA_GRAPHS = UpstreamCheck(
    "megatron-core", "ValueError", "CUDA graphs not supported with CPU offloading.", STAGE_CONFIG,
    _lines(TC, v0140=1269, v0153=1396, v0161=1723, v0171=1965, v0182=2244, v0192=2468,
           m14346b65=2533, m2a75ac12=2560, main=2801))
# Before 0.18 there is no full_iteration implementation: asking for it (to combine CUDA graphs with offloading,
# which 0.18 allows) fails this check first. From 0.18 the check no longer concerns offloading.
C6_GRAPH_IMPL = UpstreamCheck(
    "megatron-core", "AssertionError", "Invalid cuda graph implementation: {impl}", STAGE_CONFIG,
    _lines(TC, v0153=1391, v0161=1717, v0171=1959))

C7_PAGED_STASH = UpstreamCheck(
    "megatron-core", "ValueError", "moe_paged_stash cannot be enabled with cpu_offloading.", STAGE_CONFIG,
    _lines(TC, v0182=1685, v0192=1906, m14346b65=1971, m2a75ac12=1971, main=2212))
TB_NO_TE = UpstreamCheck(
    "megatron-core", "AssertionError", "CPU Offloading is enabled when TE is not present", STAGE_MODEL,
    _lines(TB, v0140=302, v0153=317, v0161=318, v0171=315, v0182=313, v0192=314,
           m14346b65=314, m2a75ac12=314, main=320))

# --- fine-grained activation offloading (TransformerConfig.__post_init__, >= 0.16) ---
F1_EXCLUSIVE = UpstreamCheck(
    "megatron-core", "AssertionError", "fine_grained_activation_offloading cannot be enabled with cpu_offloading.",
    STAGE_CONFIG, _lines(TC, v0161=1269, v0171=1449, v0182=1659, v0192=1849, m14346b65=1906, m2a75ac12=1906, main=2128))
F2_MODULES_EMPTY = UpstreamCheck(
    "megatron-core", "AssertionError", None, STAGE_CONFIG,
    _lines(TC, v0161=1272, v0171=1452, v0182=1662, v0192=1852, m14346b65=1909, m2a75ac12=1909, main=2131))
F3_MODULES_INVALID = UpstreamCheck(
    "megatron-core", "AssertionError", "Invalid choices for offload_modules: {invalid}. Allowed modules are: {allowed}",
    STAGE_CONFIG, _lines(TC, v0161=1283, v0171=1463, v0182=1673, v0192=1864, m14346b65=1921, m2a75ac12=1921, main=2144))
F4_ATTN_PROJ = UpstreamCheck(
    "megatron-core", "ValueError",
    "attn_proj cannot be set to offload_modules alone without core_attn because the input of attn_proj is the "
    "output of core_attn, which is needed in core_attn.backward().",
    STAGE_CONFIG, _lines(TC, v0161=1288, v0171=1468, v0182=1678, v0192=1869, m14346b65=1926, m2a75ac12=1926, main=2149))

F5_GDP_QKV = UpstreamCheck(
    "megatron-core", "ValueError",
    "gdp_qkv cannot be set in offload_modules together with gdp_in_proj in recompute_modules, because gdp_in_proj "
    "discards the input of the causal conv and rematerializes it at the start of the mixer backward, leaving "
    "nothing for the gdp_qkv offload group to keep on the host.",
    STAGE_CONFIG, _lines(TC, main=2159))
F6_MOE_RECOMPUTE = UpstreamCheck(
    "megatron-core", "AssertionError",
    "Cannot offload {modules} while recomputing the entire MoE layer. 'moe' in recompute_modules wraps the full "
    "MoE forward in a checkpoint, so offloading activations inside it is redundant and will cause errors. Either "
    "remove 'moe' from --recompute-modules or remove {modules} from --offload-modules.",
    STAGE_CONFIG, _lines(TC, v0192=1878, m14346b65=1935, m2a75ac12=1935, main=2169))
F7_MIN_SIZE = UpstreamCheck(
    "megatron-core", "AssertionError", "min_offloaded_tensor_size must be non-negative.", STAGE_CONFIG,
    _lines(TC, v0192=1885, m14346b65=1942, m2a75ac12=1942, main=2176))
F8_FRACTION = UpstreamCheck(
    "megatron-core", "AssertionError", "activation_offload_fraction must be in range [0, 1].", STAGE_CONFIG,
    _lines(TC, v0192=1888, m14346b65=1945, m2a75ac12=1945, main=2179))
F9_DELTA = UpstreamCheck(
    "megatron-core", "AssertionError", "delta_offload_bytes_across_pp_ranks must be non-negative.", STAGE_CONFIG,
    _lines(TC, v0192=1891, m14346b65=1948, m2a75ac12=1948, main=2182))
F10_OP_FUSER = UpstreamCheck(
    "megatron-core", "ValueError", "fused_group_mlp requires use_transformer_engine_op_fuser.", STAGE_CONFIG,
    _lines(TC, v0192=1897, m14346b65=1954, m2a75ac12=1954, main=2188))
F11_FUSED_EXCLUSIVE = UpstreamCheck(
    "megatron-core", "ValueError",
    "fused_group_mlp offloads the whole fused grouped MLP and cannot be combined with expert_fc1 or moe_act. "
    "Remove: {modules}",
    STAGE_CONFIG, _lines(TC, v0192=1900, m14346b65=1957, m2a75ac12=1957, main=2191))
F12_PAGED_STASH_018 = UpstreamCheck(
    "megatron-core", "ValueError",
    "When moe_paged_stash is enabled, offload_modules must not include expert_fc1 or moe_act (paged stash covers "
    "those activations). Remove: {modules}",
    STAGE_CONFIG, _lines(TC, v0182=1693))
F12_PAGED_STASH = UpstreamCheck(
    "megatron-core", "ValueError",
    "When moe_paged_stash is enabled, offload_modules must not include expert_fc1, moe_act, or fused_group_mlp "
    "(paged stash covers those activations). Remove: {modules}",
    STAGE_CONFIG, _lines(TC, v0192=1916, m14346b65=1981, m2a75ac12=1981, main=2222))
F12_NULL_MODULES = UpstreamCheck(
    "megatron-core", "TypeError", "'NoneType' object is not iterable", STAGE_CONFIG,
    _lines(TC, v0182=1691, v0192=1912, m14346b65=1977, m2a75ac12=1977, main=2218), evidence="set(self.offload_modules)")
F13_MHC = UpstreamCheck(
    "megatron-core", "NotImplementedError",
    "'mhc' in recompute_modules + fine_grained_activation_offloading is not yet supported. The mHC recompute hook "
    "currently fires before the offloading backward chunk is initialized, causing tensor_pop on a None chunk. "
    "Disable one of them.",
    STAGE_CONFIG, _lines(TC, main=2046))
G1_LOCAL_MODULES = UpstreamCheck(
    "megatron-core", "AssertionError",
    "fine-grained activation offloading with cuda_graph_impl='local' only supports offload_modules 'expert_fc1', "
    "'moe_act', and 'fused_group_mlp'. Unsupported offload_modules: {modules}.",
    STAGE_CONFIG, _lines(TC, v0192=2601, m14346b65=2666, m2a75ac12=2693, main=2934))
G2_LOCAL_WHOLE_LAYER = UpstreamCheck(
    "megatron-core", "AssertionError",
    "fine-grained activation offloading with cuda_graph_impl='local' is not supported with whole-layer CUDA "
    "graph capture.",
    STAGE_CONFIG, _lines(TC, v0192=2607, m14346b65=2672, m2a75ac12=2699, main=2940))
G3_IMPL_018 = UpstreamCheck(
    "megatron-core", "AssertionError",
    "fine-grained activation offloading is only supported with transformer_engine CUDA graph implementation or "
    "local CUDA graph implementation with full_iteration scope.",
    STAGE_CONFIG, _lines(TC, v0182=2352))
G3_IMPL = UpstreamCheck(
    "megatron-core", "AssertionError",
    "fine-grained activation offloading is only supported with transformer_engine CUDA graph implementation or "
    "local CUDA graph implementation with partial MoE offload. Local partial CUDA graphs are supported only for "
    "expert_fc1, moe_act, or fused_group_mlp offload when the full MoE module is not captured.",
    STAGE_CONFIG, _lines(TC, v0192=2617, m14346b65=2682, m2a75ac12=2709, main=2950))
G4_TOKEN_DROP = UpstreamCheck(
    "megatron-core", "AssertionError", "Token-drop MoE is temporarily not supported with activation offloading.",
    STAGE_CONFIG, _lines(TC, v0182=2357, v0192=2627, m14346b65=2692, m2a75ac12=2719, main=2960))
G5_WARMUP = UpstreamCheck(
    "megatron-core", "AssertionError",
    "cuda_graph_warmup_steps must be greater than 0 when enabling fine-grained activation offloading.",
    STAGE_CONFIG, _lines(TC, v0182=2360, v0192=2630, m14346b65=2695, m2a75ac12=2722, main=2963))
G6_INFLIGHT = UpstreamCheck(
    "megatron-core", "AssertionError",
    "fine_grained_offloading_max_inflight_offloads must be a non-negative integer when using fine-grained "
    "activation offloading with full-iteration CUDA graphs",
    STAGE_CONFIG, _lines(TC, v0182=2365, v0192=2635, m14346b65=2700, m2a75ac12=2727, main=2968))
G7_NCCLEP = UpstreamCheck(
    "megatron-core", "AssertionError",
    "overlap_moe_expert_parallel_comm with ncclep does not support offloading 'expert_fc1': it forces expert FC1 "
    "to save the raw bf16 input, which the overlap path eagerly frees.",
    STAGE_CONFIG, _lines(TC, v0192=2729, m14346b65=2786, m2a75ac12=2813, main=3054))

# --- precision-aware optimizer (OptimizerConfig.__post_init__; the DistOpt check moved to the factory on main) ---
O1_PAO_ADAM = UpstreamCheck(
    "megatron-core", "AssertionError", "--use-precision-aware-optimizer only supported with adam", STAGE_CONFIG,
    _lines(OC, v0140=220, v0153=219, v0161=376, v0171=395, v0182=425, v0192=431,
           m14346b65=434, m2a75ac12=434, main=434))
O2_PAO_DISTOPT = UpstreamCheck(
    "megatron-core", "AssertionError", "--use-precision-aware-optimizer only supported with distributed optimizer",
    STAGE_CONFIG, _lines(OC, v0140=223, v0153=222, v0161=379, v0171=398, v0182=428, v0192=434,
                         m14346b65=437, m2a75ac12=437))
I4_PAO_DISTOPT = UpstreamCheck(
    "megatron-core", "ValueError", "--use-precision-aware-optimizer only supported with distributed optimizer",
    STAGE_OPTIMIZER, _lines(OI, main=1058))
_O5_LINES = {"v0140": 258, "v0153": 257, "v0161": 415, "v0171": 434, "v0182": 464, "v0192": 470, "m14346b65": 473,
              "m2a75ac12": 473, "main": 469}
# main_grads_dtype, main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype: four asserts, three lines apart.
O5_O8_DTYPES: dict[str, UpstreamCheck] = {
    name: UpstreamCheck("megatron-core", "AssertionError",
                        f"{name} can only be fp32 when not using precision-aware optimizer", STAGE_CONFIG,
                        _lines(OC, **{k: v + 3 * i for k, v in _O5_LINES.items()}))
    for i, name in enumerate(("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"))
}
I6_MFSDP_V2 = UpstreamCheck(
    "megatron-core", "ValueError", "MFSDP v2 does not currently support optimizer CPU offload.", STAGE_OPTIMIZER,
    _lines(FSO, m14346b65=79, m2a75ac12=79, main=80))

# --- optimizer offload ---
I2_DECOUPLED_WD = UpstreamCheck(
    "megatron-core", "AssertionError",
    "CPU offloading only supported with decoupled_weight_decay enabled (AdamW mode).",
    STAGE_OPTIMIZER, _lines(OI, v0153=316, v0161=312, v0171=495, v0182=508, v0192=508,
                            m14346b65=510, m2a75ac12=510, main=510))
A1_PRECISION_AWARE = UpstreamCheck(
    "megatron-lm", "AssertionError",
    "The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`, as the hybrid "
    "device optimizer reuses the code path of this flag.",
    STAGE_CLI, _lines(ARGS, v0140=1062, v0153=1155, v0161=1191, v0171=1497, v0182=1672, v0192=1804,
                      m14346b65=1800, m2a75ac12=1800, main=1885))

A2_FP8_DELAYED = UpstreamCheck(
    "megatron-lm", "AssertionError",
    "When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in conjunction with "
    "`--fp8-recipe delayed`.",
    STAGE_CLI, _lines(ARGS, v0140=1066, v0153=1159, v0161=1195, v0171=1501, v0182=1676, v0192=1808,
                      m14346b65=1804, m2a75ac12=1804, main=1889))
A3_TE_IMPL = UpstreamCheck(
    "megatron-lm", "AssertionError",
    "Fine-grained activation offloading is only supported with transformer_engine implementation",
    STAGE_CLI, _lines(ARGS, v0161=1223, v0171=1548, v0182=1723, v0192=1855, m14346b65=1851, m2a75ac12=1851, main=1936))

# --- Megatron Bridge's own checks (ConfigContainer.validate at 067f987d; NeMo-RL runs it too) ---
BRIDGE_FG_TE_IMPL = UpstreamCheck(
    "megatron-bridge", "ValueError",
    "Fine-grained activation offloading is only supported with transformer_engine implementation. "
    "Current transformer_impl: {impl}",
    STAGE_SETUP, fixed=f"{BRIDGE_CONFIG}:2204")

A4_NVTE_V1 = UpstreamCheck(
    "megatron-lm", "AssertionError",
    "For fine-grained activation offloading with TE >= 2.10.0, NVTE_CPU_OFFLOAD_V1 should be set to 1 to avoid "
    "offloading weights.",
    STAGE_CLI, _lines(ARGS, v0161=1226, v0171=1551, v0182=1726, v0192=1858, m14346b65=1854, m2a75ac12=1854, main=1939))
BRIDGE_NVTE_V1 = UpstreamCheck(
    "megatron-bridge", "ValueError",
    "For fine-grained activation offloading with TE >= 2.10.0, NVTE_CPU_OFFLOAD_V1 environment variable should be "
    "set to 1 to avoid offloading weights.",
    STAGE_SETUP, fixed=f"{BRIDGE_CONFIG}:2212")
BRIDGE_MFSDP_V2 = UpstreamCheck(
    "megatron-bridge", "ValueError", "MFSDP V2 does not support optimizer CPU offload.", STAGE_SETUP,
    fixed=f"{BRIDGE_CONFIG}:1178")
BRIDGE_LOCAL_GRAPH = UpstreamCheck(
    "megatron-bridge", "ValueError",
    'Megatron Bridge supports model.cuda_graph_impl="local" only for full-iteration CUDA graphs{modules}. Use '
    'model.cuda_graph_impl="transformer_engine" for scoped CUDA graph capture such as "attn" or "mlp".',
    STAGE_SETUP, fixed="NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/utils/cuda_graph.py:148")

# --- Transformer Engine (get_cpu_offload_context), and megatron-core's calls into it ---
_TE = "NVIDIA/TransformerEngine"
TE_NOTHING_TO_OFFLOAD = UpstreamCheck(
    "transformer-engine", "ValueError",
    "CPU Offloading is enabled while it is not mentioned what to offload (weights/activations)", STAGE_MODEL,
    fixed=f"{_TE}@70f53666:transformer_engine/pytorch/cpu_offload.py:700")  # v2.9; before the `enabled` test
TE_NOTHING_TO_OFFLOAD_V2 = UpstreamCheck(
    "transformer-engine", "ValueError",
    "CPU Offloading is enabled while it is not mentioned what to offload (weights/activations)", STAGE_MODEL,
    fixed=f"{_TE}@769ed778:transformer_engine/pytorch/cpu_offload.py:761")  # v2.10; only when enabled
TEX_SAVE_ORIGINAL_INPUT = UpstreamCheck(
    "megatron-core", "ValueError",
    "set_save_original_input is only needed on transformer-engine modules that save quantized tensors by default. "
    "It needs transformer-engine>=2.6.0dev0.",
    STAGE_MODEL, _lines("megatron/core/extensions/transformer_engine.py", v0161=2515, v0171=2792, v0182=3367,
                        v0192=3585, m14346b65=3634, m2a75ac12=3645, main=3696))
TL_GRAPH_TE = UpstreamCheck(
    "megatron-core", "AssertionError", "Offloading modules captured in cuda graph requires TE>=2.14.0.", STAGE_MODEL,
    _lines("megatron/core/transformer/transformer_layer.py", v0192=1495, m14346b65=1493, m2a75ac12=1493, main=1612))
FGAO_NO_TE = UpstreamCheck(
    "megatron-core", "RuntimeError", "TE CPU offload is not available", STAGE_MODEL,
    _lines("megatron/core/pipeline_parallel/fine_grained_activation_offload.py", v0161=688, v0171=688, v0182=700,
           v0192=789, m14346b65=789, m2a75ac12=789, main=845))

# --- NeMo-RL's own checks (nemo_rl/models/megatron/setup.py at 7ea279ab) ---
NRL_FRACTION = UpstreamCheck(
    "nemo-rl", "ValueError", "optimizer_cpu_offload=True requires 0 < optimizer_offload_fraction <= 1", STAGE_SETUP,
    fixed=f"{NEMO_RL_SETUP}:1219")
NRL_OVERLAP = UpstreamCheck(
    "nemo-rl", "ValueError", "overlap_cpu_optimizer_d2h_h2d=True requires optimizer_cpu_offload=True", STAGE_SETUP,
    fixed=f"{NEMO_RL_SETUP}:1233")
NRL_MODULES_EMPTY = UpstreamCheck(
    "nemo-rl", "ValueError",
    "offload_modules must be a non-empty list when fine_grained_activation_offloading is True.",
    STAGE_SETUP, fixed=f"{NEMO_RL_SETUP}:1193")
NRL_DISTOPT = UpstreamCheck(
    "nemo-rl", "ValueError", "optimizer_cpu_offload=True requires use_distributed_optimizer=True", STAGE_SETUP,
    fixed=f"{NEMO_RL_SETUP}:1223")
NRL_ADAM_SGD = UpstreamCheck(
    "nemo-rl", "ValueError", "optimizer_cpu_offload=True requires optimizer to be adam or sgd", STAGE_SETUP,
    fixed=f"{NEMO_RL_SETUP}:1227")
NRL_MOE_ONLY = UpstreamCheck(
    "nemo-rl", "ValueError",
    "A MoE-only offload module requires a MoE model (num_moe_experts must not be None): {modules}.",
    STAGE_SETUP, fixed=f"{NEMO_RL_SETUP}:1203")
NRL_OVERRIDE_CONFLICT = UpstreamCheck(
    "nemo-rl", "ValueError",
    "model_overrides is only for Megatron Bridge model fields without a first-class NeMo-RL setting; {conflicts}. "
    "Set the first-class field directly instead.",
    STAGE_SETUP, fixed=f"{NEMO_RL_SETUP}:772")
# NeMo-RL 0.4.0-0.7.0 (before NVIDIA-NeMo/RL PR #3628, 2026-08-18): the fraction had to be exactly 1.0.
NRL_LEGACY_FRACTION = UpstreamCheck(
    "nemo-rl", "AssertionError", "Currently for optimizer offloading, only optimizer_offload_fraction=1.0 is supported",
    STAGE_SETUP, {"0.4.0": "nemo_rl/models/policy/megatron_policy_worker.py:637",
                  "0.5.0": "nemo_rl/models/policy/workers/megatron_policy_worker.py:722",
                  "0.6.0": "nemo_rl/models/megatron/setup.py:528",
                  "0.7.0": "nemo_rl/models/megatron/setup.py:890"})

# --- Hydra command-line overrides (both frameworks: OmegaConf.set_struct(cfg, True), then hydra-core 1.3's
# ConfigLoaderImpl._apply_overrides_to_config; anything it raises is wrapped as OverridesError) ---
_APPLY_OVERRIDES = "ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=cfg)"
BRIDGE_OVERRIDE_REFUSED = UpstreamCheck(
    "megatron-bridge", "OverridesError", "Failed to parse Hydra overrides: {error}", STAGE_SETUP,
    fixed="NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/utils/omegaconf_utils.py:183",
    evidence=_APPLY_OVERRIDES)
NRL_OVERRIDE_REFUSED = UpstreamCheck(
    "nemo-rl", "OverridesError", "Failed to parse Hydra overrides: {error}", STAGE_SETUP,
    fixed="NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:189", evidence=_APPLY_OVERRIDES)

# --- the recompute settings (TransformerConfig.__post_init__, every version; checked in this order) ---
R1_GRANULARITY = UpstreamCheck(
    "megatron-core", "ValueError", 'When using recompute_granuarlity: {granularity} must be "full"or "selective".',
    STAGE_CONFIG, _lines(TC, v0140=827, v0153=906, v0161=1156, v0171=1336, v0182=1546, v0192=1726,
                         m14346b65=1784, m2a75ac12=1784, main=1903))
R2_METHOD = UpstreamCheck(
    "megatron-core", "ValueError", 'recompute_method: {method} must be "block" or "uniform".', STAGE_CONFIG,
    _lines(TC, v0140=834, v0153=913, v0161=1163, v0171=1343, v0182=1553, v0192=1733,
           m14346b65=1791, m2a75ac12=1791, main=1910))
R3_NO_METHOD = UpstreamCheck(
    "megatron-core", "ValueError",
    'Using recompute_granularity: {granularity} so recompute_method must be "block" or "uniform"', STAGE_CONFIG,
    _lines(TC, v0140=838, v0153=917, v0161=1167, v0171=1347, v0182=1557, v0192=1737,
           m14346b65=1795, m2a75ac12=1795, main=1914))
R4_NUM_LAYERS = UpstreamCheck(
    "megatron-core", "ValueError",
    "When using recompute_granularity: {granularity} recompute_num_layers must be between 1 and "
    "num_layers_per_pipeline_rank: {per_rank}", STAGE_CONFIG,
    _lines(TC, v0140=844, v0153=923, v0161=1173, v0171=1353, v0182=1563, v0192=1743,
           m14346b65=1801, m2a75ac12=1801, main=1920))
R5_SELECTIVE_LAYERS = UpstreamCheck(
    "megatron-core", "ValueError", "When using recompute_granularity: {granularity} recompute_num_layers must be None.",
    STAGE_CONFIG, _lines(TC, v0140=853, v0153=932, v0161=1182, v0171=1362, v0182=1572, v0192=1752,
                         m14346b65=1810, m2a75ac12=1810, main=1929))
NRL_RECOMPUTE_GRANULARITY = UpstreamCheck(
    "nemo-rl", "ValueError", "Invalid recompute_granularity: {granularity!r}. Valid options are 'full' or 'selective'.",
    STAGE_SETUP, fixed=f"{NEMO_RL_SETUP}:1088")
