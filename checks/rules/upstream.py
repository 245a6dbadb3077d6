"""The upstream checks the rules mirror, each anchored in every version that performs it.

Line numbers point at the ``raise``/``assert`` statement (``tools/verify_anchors.py``
re-derives them from each release's source). Paths are relative to the
Megatron-LM repository; the commit comes from the version profile, so
``C1.anchor("0.16.1")`` is ``NVIDIA/Megatron-LM@55ac7082:megatron/core/transformer/transformer_config.py:1140``.
"""

from __future__ import annotations

from checks.anchors import STAGE_CLI, STAGE_CONFIG, STAGE_OPTIMIZER, STAGE_SETUP, UpstreamCheck

TC = "megatron/core/transformer/transformer_config.py"
OI = "megatron/core/optimizer/__init__.py"
ARGS = "megatron/training/arguments.py"
NEMO_RL_SETUP = "NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/megatron/setup.py"
BRIDGE_CONFIG = "NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/config.py"


def _lines(path: str, **by_version: int) -> dict[str, str]:
    labels = {"v0140": "0.14.0", "v0153": "0.15.3", "v0161": "0.16.1", "v0171": "0.17.1", "v0182": "0.18.2",
              "v0192": "0.19.2", "main": "main"}
    return {labels[k]: f"{path}:{line}" for k, line in by_version.items()}


# --- layer-level activation offloading (TransformerConfig.__post_init__) ---
C1_NUM_LAYERS = UpstreamCheck(
    "megatron-core", "ValueError", "CPU offloading can be done only for layers less than {num_layers}", STAGE_CONFIG,
    _lines(TC, v0140=811, v0153=890, v0161=1140, v0171=1320, v0182=1530, v0192=1710, main=1887))
C2_PIPELINE = UpstreamCheck(
    "megatron-core", "ValueError", "Currently there is no support for Pipeline parallelism with CPU offloading",
    STAGE_CONFIG, _lines(TC, v0140=816, v0153=895, v0161=1145, v0171=1325, v0182=1535, v0192=1715, main=1892))
C3_RECOMPUTE = UpstreamCheck(
    "megatron-core", "ValueError", "CPU offloading does not work when activation recomputation is enabled",
    STAGE_CONFIG, _lines(TC, v0140=821, v0153=900, v0161=1150, v0171=1330, v0182=1540, v0192=1720, main=1897))
C4_CUDA_GRAPHS = UpstreamCheck(
    "megatron-core", "ValueError", "CUDA graphs not supported with CPU offloading.", STAGE_CONFIG,
    _lines(TC, v0140=1269, v0153=1396, v0161=1723, v0171=1965, v0182=2244, v0192=2468, main=2801))
C6_GRAPH_IMPL = UpstreamCheck(
    "megatron-core", "AssertionError", "Invalid cuda graph implementation: {impl}", STAGE_CONFIG,
    _lines(TC, v0153=1391, v0161=1717, v0171=1959, v0182=2221, v0192=2445, main=2778))

# --- fine-grained activation offloading (TransformerConfig.__post_init__, >= 0.16) ---
F1_EXCLUSIVE = UpstreamCheck(
    "megatron-core", "AssertionError", "fine_grained_activation_offloading cannot be enabled with cpu_offloading.",
    STAGE_CONFIG, _lines(TC, v0161=1269, v0171=1449, v0182=1659, v0192=1849, main=2128))
F2_MODULES_EMPTY = UpstreamCheck(
    "megatron-core", "AssertionError", None, STAGE_CONFIG,
    _lines(TC, v0161=1272, v0171=1452, v0182=1662, v0192=1852, main=2131))
F3_MODULES_INVALID = UpstreamCheck(
    "megatron-core", "AssertionError", "Invalid choices for offload_modules: {invalid}. Allowed modules are: {allowed}",
    STAGE_CONFIG, _lines(TC, v0161=1283, v0171=1463, v0182=1673, v0192=1864, main=2144))
F4_ATTN_PROJ = UpstreamCheck(
    "megatron-core", "ValueError",
    "attn_proj cannot be set to offload_modules alone without core_attn because the input of attn_proj is the "
    "output of core_attn, which is needed in core_attn.backward().",
    STAGE_CONFIG, _lines(TC, v0161=1288, v0171=1468, v0182=1678, v0192=1869, main=2149))

# --- optimizer offload ---
I2_DECOUPLED_WD = UpstreamCheck(
    "megatron-core", "AssertionError",
    "CPU offloading only supported with decoupled_weight_decay enabled (AdamW mode).",
    STAGE_OPTIMIZER, _lines(OI, v0153=316, v0161=312, v0171=495, v0182=508, v0192=508, main=510))
A1_PRECISION_AWARE = UpstreamCheck(
    "megatron-lm", "AssertionError",
    "The optimizer cpu offload must be used in conjunction with `--use-precision-aware-optimizer`, as the hybrid "
    "device optimizer reuses the code path of this flag.",
    STAGE_CLI, _lines(ARGS, v0140=1062, v0153=1155, v0161=1191, v0171=1497, v0182=1672, v0192=1804, main=1885))

A2_FP8_DELAYED = UpstreamCheck(
    "megatron-lm", "AssertionError",
    "When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in conjunction with "
    "`--fp8-recipe delayed`.",
    STAGE_CLI, _lines(ARGS, v0140=1066, v0153=1159, v0161=1195, v0171=1501, v0182=1676, v0192=1808, main=1889))
A3_TE_IMPL = UpstreamCheck(
    "megatron-lm", "AssertionError",
    "Fine-grained activation offloading is only supported with transformer_engine implementation",
    STAGE_CLI, _lines(ARGS, v0161=1223, v0171=1548, v0182=1723, v0192=1855, main=1936))

# --- Megatron Bridge's own checks (ConfigContainer.validate at 067f987d; NeMo-RL runs it too) ---
BRIDGE_FG_TE_IMPL = UpstreamCheck(
    "megatron-bridge", "ValueError",
    "Fine-grained activation offloading is only supported with transformer_engine implementation. "
    "Current transformer_impl: {impl}",
    STAGE_SETUP, fixed=f"{BRIDGE_CONFIG}:2204")

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
