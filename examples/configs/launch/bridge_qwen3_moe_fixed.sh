#!/bin/bash
# The same job as bridge_qwen3_moe_broken.sh, fixed: CUDA graphs off for layer-level offload, and the whole
# optimizer state on the host with the precision-aware optimizer the recipe already turns on.
cd /opt/Megatron-Bridge
torchrun --nproc-per-node=8 scripts/training/run_recipe.py \
    --recipe qwen3_30b_a3b_pretrain_config \
    model.cuda_graph_impl=none \
    model.cpu_offloading=True \
    model.cpu_offloading_num_layers=12 \
    optimizer.optimizer_cpu_offload=True \
    optimizer.optimizer_offload_fraction=1.0
