#!/bin/bash
# A Megatron Bridge launch in the shape of Bridge's own CPU-offloading skill: layer-level activation offload
# and optimizer offload switched on for the Qwen3-30B-A3B recipe. The recipe turns on Transformer Engine CUDA
# graphs, which megatron-core refuses with CPU offloading, and no fraction is given, so optimizer offload moves
# nothing. Check it from the skill's directory: python -m checks check examples/configs/launch/bridge_qwen3_moe_broken.sh
cd /opt/Megatron-Bridge
torchrun --nproc-per-node=8 scripts/training/run_recipe.py \
    --recipe qwen3_30b_a3b_pretrain_config \
    model.cpu_offloading=True \
    model.cpu_offloading_num_layers=12 \
    optimizer.optimizer_cpu_offload=True
