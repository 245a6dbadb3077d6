#!/bin/bash
# Megatron-LM launch script: layer-level activation offloading together with selective
# recompute, and optimizer offload without the precision-aware optimizer.
NUM_LAYERS=24
GPT_ARGS="
    --num-layers ${NUM_LAYERS} \
    --hidden-size 2048 \
    --num-attention-heads 16 \
    --seq-length 4096 \
    --max-position-embeddings 4096 \
    --bf16
"
OFFLOAD_ARGS=(
    --cpu-offloading-num-layers 4
    --recompute-activations
    --optimizer-cpu-offload
    --optimizer-offload-fraction 0.5
    --use-distributed-optimizer
)
torchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS "${OFFLOAD_ARGS[@]}" \
    --micro-batch-size 1 --global-batch-size 256 --lr 3e-4
