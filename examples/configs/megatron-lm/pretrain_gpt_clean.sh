#!/bin/bash
# The same job, fixed: layer-level offloading without recompute, and optimizer offload with
# the precision-aware, distributed optimizer that Megatron-LM requires for it.
torchrun --nproc_per_node 8 pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length 4096 --max-position-embeddings 4096 --bf16 \
    --cpu-offloading-num-layers 4 \
    --optimizer-cpu-offload --optimizer-offload-fraction 0.5 \
    --use-distributed-optimizer --use-precision-aware-optimizer \
    --micro-batch-size 1 --global-batch-size 256 --lr 3e-4
