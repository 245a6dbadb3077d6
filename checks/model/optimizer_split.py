"""How ``HybridDeviceOptimizer`` splits optimizer state between GPU and host.

The split is greedy over whole tensors (``_get_sub_optimizer_param_groups``,
NVIDIA/Megatron-LM@5be96267:megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py:251-302,
the same rule in every release since 0.14): walking the parameters in optimizer
order, a tensor moves to the host while the elements moved so far are *below*
``fraction x total``. The test runs before the tensor is added, so the last
tensor taken can overshoot by its whole size.

Optimizer order with the distributed optimizer (the only way Megatron-LM and
NeMo-RL run optimizer offload), per optimizer instance (dense and
expert-parallel parameters get separate instances, each applying the fraction):

1. parameter groups in ``_get_param_groups`` order: from 0.16 the default
   (weight-decayed) group first, then the no-weight-decay group of 1-D tensors
   and biases (NVIDIA/Megatron-LM@55ac7082:megatron/core/optimizer/__init__.py:189);
   in 0.14 and 0.15 the order in which each group is first seen
   (NVIDIA/Megatron-LM@23e00ed0:megatron/core/optimizer/__init__.py:140-152);
2. inside a group, model chunk by model chunk, each chunk's parameters in
   gradient-buffer order, which is the reverse of ``named_parameters()``
   (NVIDIA/Megatron-LM@5be96267:megatron/core/optimizer/distrib_optimizer.py:552);
   the distributed optimizer hands each group over as fp32 shards, then 16-bit
   shards (same file, :486-494), which is one list when all parameters share a dtype.

What this module does not model: with more than one data-parallel rank, each
rank's "tensors" are its shards of the gradient buffer, so its share is
smaller and its overshoot can be larger; that needs the data-parallel size,
which a config does not state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from checks.model.parameters import Tensor, chunk_tensors, stage_chunks
from checks.model.shape import ModelShape, Parallelism
from checks.versions import version_key


@dataclass(frozen=True)
class Split:
    """The predicted split of one optimizer instance on one pipeline stage (one data-parallel rank)."""

    instance: str  # "dense" or "expert"
    stage: int  # pipeline stage
    requested: float
    offloaded_numel: int
    total_numel: int
    tensors_offloaded: int
    tensors_total: int
    lower_fraction: float  # the largest fraction that moves no more than ``requested`` of this instance
    first: Tensor  # the first tensor in optimizer order: any fraction above 0 moves it

    @property
    def fraction(self) -> float:
        return self.offloaded_numel / self.total_numel if self.total_numel else 0.0


def greedy_selection(numels: Sequence[int], fraction: float) -> list[bool]:
    """Which tensors move to the host, in order, exactly as ``HybridDeviceOptimizer`` chooses them."""
    threshold = sum(numels) * fraction
    moved = 0
    chosen = []
    for numel in numels:
        take = moved < threshold  # tested before adding: the last tensor taken may overshoot
        if take:
            moved += numel
        chosen.append(take)
    return chosen


def greedy_offload(numels: Sequence[int], fraction: float) -> tuple[int, int]:
    """(elements, tensors) moved to the host by :func:`greedy_selection`."""
    chosen = greedy_selection(numels, fraction)
    return sum(n for n, c in zip(numels, chosen, strict=True) if c), sum(chosen)


def largest_fraction_within(numels: Sequence[int], share: float, decimals: int = 4) -> float:
    """The largest fraction, to ``decimals`` places, whose greedy split moves at most ``share`` of the elements.

    The greedy split of ``f`` moves the shortest prefix holding at least ``f x total``
    elements, so it stays within ``share`` exactly when some prefix lies between the two;
    the answer is the largest such prefix's share, rounded down, and then checked against
    the split itself because ``f x total`` is computed in floating point.
    """
    total = sum(numels)
    best = prefix = 0
    for numel in numels:
        prefix += numel
        if prefix <= share * total:
            best = prefix
    step = 10 ** -decimals
    fraction = math.floor(best / total / step) * step if total else 0.0
    while fraction > 0 and greedy_offload(numels, fraction)[0] > share * total:
        fraction = max(0.0, fraction - step)
    return round(fraction, decimals)


def optimizer_order(chunks: Sequence[Sequence[Tensor]], expert: bool, version: str,
                    wd_on_qk_norms: bool = False) -> list[Tensor]:
    """The tensors of one optimizer instance in the order ``HybridDeviceOptimizer`` walks them."""
    def decayed(t: Tensor) -> bool:
        qk_norm = "q_layernorm." in t.name or "k_layernorm." in t.name
        return t.matrix or (wd_on_qk_norms and qk_norm and version_key(version) >= (0, 16))

    mine = [[t for t in chunk if t.expert == expert] for chunk in chunks]
    if version_key(version) >= (0, 16):
        groups = [True, False]
    else:
        groups = list(dict.fromkeys(decayed(t) for chunk in mine for t in chunk))
    return [t for group in groups for chunk in mine for t in reversed(chunk) if decayed(t) == group]


def predict(shape: ModelShape, par: Parallelism, fraction: float, version: str,
            wd_on_qk_norms: bool = False) -> tuple[Split, ...] | None:
    """The split on every pipeline stage, for a rank that holds whole tensors; None for an unmodelled layout."""
    stages = stage_chunks(shape.num_layers, par)
    if stages is None:
        return None
    out: list[Split] = []
    for index, stage in enumerate(stages):
        tensors = [chunk_tensors(shape, par, chunk) for chunk in stage]
        for instance, expert in (("dense", False), ("expert", True)):
            ordered = optimizer_order(tensors, expert, version, wd_on_qk_norms)
            if not ordered:
                continue
            numels = [t.numel for t in ordered]
            moved, taken = greedy_offload(numels, fraction)
            out.append(Split(instance, index, fraction, moved, sum(numels), taken, len(numels),
                             largest_fraction_within(numels, fraction), ordered[0]))
    return tuple(out)
