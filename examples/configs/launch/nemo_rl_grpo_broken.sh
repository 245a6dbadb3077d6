#!/bin/bash
# A NeMo-RL GRPO launch that offloads MoE activations of a dense checkpoint (Qwen/Qwen2.5-1.5B, named by the
# config): NeMo-RL refuses it at set-up. The config path is relative to the directory the command runs in
# (here the skill's directory; pass --cwd DIR for a NeMo-RL checkout).
NRL_FORCE_REBUILD_VENVS=true uv run examples/run_grpo.py \
    --config examples/configs/nemo-rl/grpo_megatron_base.yaml \
    policy.megatron_cfg.fine_grained_activation_offloading=true \
    'policy.megatron_cfg.offload_modules=[moe_act]' \
    ++policy.megatron_cfg.env_vars.NVTE_CPU_OFFLOAD_V1=1
