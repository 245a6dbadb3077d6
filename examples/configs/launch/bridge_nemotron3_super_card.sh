#!/bin/bash
# The GB200 optimizer-offload run of Megatron Bridge's Nemotron-3 Super model verification card, as the card
# writes it (examples/model_verification_cards/nemotron-3-super-120b-a12b/card.yaml:201-222, Megatron-Bridge@067f987d):
# 40% of the optimizer state on the host, full recompute, through the Slurm wrapper.
./scripts/training/train.sh --wait --nodes 8 --gpus-per-node 2 \
    --recipe nemotron_3_super_pretrain_16gpu_h100_bf16_config \
    --mode pretrain --dataset megatron-indexed --max_steps 100 \
    --seq_length 4096 model.cuda_graph_impl=none \
    --lr 4.5e-4 --min_lr 4.5e-6 --warmup_iters 10 \
    'dataset.blend=[["work/data/rp2/head_01_text_document"],null]' \
    dataset.path_to_cache=work/cache/nemotron-3-super-120b-a12b/rp2 \
    tokenizer.tokenizer_type=SentencePieceTokenizer \
    tokenizer.tokenizer_model=work/data/rp2-tokenizer/tokenizer.model \
    rng.seed=1234 dataset.random_seed=1234 scheduler.lr_decay_iters=100 \
    validation.eval_iters=0 validation.eval_interval=0 \
    optimizer.optimizer_cpu_offload=true \
    optimizer.optimizer_offload_fraction=0.4 \
    optimizer.overlap_cpu_optimizer_d2h_h2d=false \
    model.recompute_granularity=full model.recompute_method=uniform \
    model.recompute_num_layers=1 checkpoint.ckpt_format=torch_dist \
    checkpoint.async_save=false checkpoint.load=null \
    --save_dir work/model-verification/nemotron-3-super-120b-a12b/gb200-pretrain-reference \
    --save_interval 50 logger.log_interval=1 logger.log_throughput=true \
    logger.tensorboard_dir=null
