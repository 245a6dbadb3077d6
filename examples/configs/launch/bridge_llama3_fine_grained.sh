#!/bin/bash
# Fine-grained activation offload of attention on the Llama-3 8B recipe with two pipeline stages, launched
# through Bridge's Slurm wrapper (train.sh forwards what it does not own to run_recipe.py). The -pp flag
# becomes model.pipeline_model_parallel_size=2 ahead of the trailing overrides.
export NVTE_CPU_OFFLOAD_V1=1
./scripts/training/train.sh --nodes 1 --gpus-per-node 8 --account acct --partition batch \
    --container-image nvcr.io/nvidia/nemo:dev \
    --model llama3_8b --mode pretrain -pp 2 \
    model.fine_grained_activation_offloading=true \
    'model.offload_modules=[core_attn,attn_proj]'
