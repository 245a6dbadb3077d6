"""Fix safety: whether a finding's patch changes only offload settings, or the job itself.

A patch is *safe* when every canonical path it sets is an offload knob (:data:`OFFLOAD_KNOBS`): it changes
what is moved to the host and how, nothing else. Any other path makes it *unsafe*: a patch that sets
``model.pipeline_model_parallel_size=1`` or ``model.recompute_granularity=null`` fixes its finding by
changing the job's layout, parallelism, recompute, precision or optimizer, which the user has to decide.

This module is the one place that decides it. Rules do not mark their fixes: the engine asks
:func:`unsafe_paths` about each patch as it builds the finding, so a new rule's patch is classified by the
paths it sets, and a path that is not listed here is unsafe until someone adds it (with a reason).
``--emit-overrides`` prints the safe patches and names the unsafe ones it leaves out; ``--all-fixes`` prints
both. ``tests/test_fix_safety.py`` checks every path that any rule's example patches is classified.
"""

from __future__ import annotations

from collections.abc import Iterable

# Canonical paths (checks/config.py sections) whose only effect is where and how state is offloaded to the
# host. Turning offloading off is in here too: it gives up memory, but the job computes the same thing.
OFFLOAD_KNOBS: frozenset[str] = frozenset({
    # layer-level activation / weight offloading (megatron-core TransformerConfig)
    "model.cpu_offloading",
    "model.cpu_offloading_num_layers",
    "model.cpu_offloading_activations",
    "model.cpu_offloading_weights",
    "model.cpu_offloading_double_buffering",
    "model.cpu_offloading_retain_pinned_cpu_buffers",
    # fine-grained activation offloading
    "model.fine_grained_activation_offloading",
    "model.offload_modules",
    "model.min_offloaded_tensor_size",
    "model.fine_grained_offloading_max_inflight_offloads",
    "model.activation_offload_fraction",
    "model.delta_offload_bytes_across_pp_ranks",
    "model.delay_offload_until_cuda_graph",
    # optimizer-state offloading (OptimizerConfig, HybridDeviceOptimizer)
    "optimizer.optimizer_cpu_offload",
    "optimizer.optimizer_offload_fraction",
    "optimizer.overlap_cpu_optimizer_d2h_h2d",
    "optimizer.use_torch_optimizer_for_cpu_offload",
    "optimizer.pin_cpu_grads",
    "optimizer.pin_cpu_params",
    # Transformer Engine's choice of offload implementation (the launch environment)
    "env.NVTE_CPU_OFFLOAD_V1",
})

# What an unsafe path changes, for the message that says why a patch was left out. Only words: safety is
# decided by OFFLOAD_KNOBS alone, and a path missing here is "settings beyond offloading".
_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("layout and parallelism", ("parallel_size", "pipeline_model_parallel", "num_layers_in_",
                                "use_distributed_optimizer", "use_megatron_fsdp")),
    ("recompute", ("recompute",)),
    ("precision", ("fp8", "fp4", "fp16", "bf16", "dtype", "precision_aware")),
    ("optimizer", ("optimizer.optimizer", "weight_decay", "optimizer.lr", "decoupled_lr")),
    ("CUDA graphs", ("cuda_graph",)),
    ("layer implementation", ("transformer_impl", "op_fuser", "grouped_gemm")),
)


def is_offload_knob(path: str) -> bool:
    """Whether setting ``path`` (canonical) changes only offloading."""
    return path in OFFLOAD_KNOBS


def unsafe_paths(patch: Iterable[str]) -> tuple[str, ...]:
    """The canonical paths of ``patch`` that are not offload knobs, in patch order; () when it is safe."""
    return tuple(path for path in patch if not is_offload_knob(path))


def kind(path: str) -> str:
    """What setting ``path`` changes about the job, in words that follow "the job's"."""
    for words, markers in _KINDS:
        if any(marker in path for marker in markers):
            return words
    return "settings beyond offloading"


def describe(paths: Iterable[str]) -> str:
    """What an unsafe patch changes: ``changes the job's recompute: model.recompute_granularity``."""
    by_kind: dict[str, list[str]] = {}
    for path in paths:
        by_kind.setdefault(kind(path), []).append(path)
    return "changes the job's " + "; ".join(f"{words}: {', '.join(found)}" for words, found in by_kind.items())
