#!/bin/bash
# The same GRPO job offloading the optimizer state instead: the whole of it, with the precision-aware
# optimizer on the distributed optimizer.
uv run examples/run_grpo.py --config examples/configs/nemo-rl/grpo_megatron_base.yaml \
    policy.megatron_cfg.optimizer.optimizer_cpu_offload=true \
    policy.megatron_cfg.optimizer.optimizer_offload_fraction=1.0 \
    policy.megatron_cfg.optimizer.use_precision_aware_optimizer=true
