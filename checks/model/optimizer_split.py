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

import bisect
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


def _pad(value: int, divisor: int) -> int:
    return -(-value // divisor) * divisor


_Layout = list[tuple[Tensor, int, int]]  # (tensor, start, end) in one chunk's gradient buffer


def _buffers(chunks: Sequence[Sequence[Tensor]], expert: bool, dp: int, bucket_size: int | None,
             own_bucket: frozenset[str]) -> list[tuple[_Layout, list[tuple[int, int]]]]:
    """Each chunk's gradient-buffer layout and its buckets (first, end), as :func:`shard_pieces` describes."""
    out = []
    for chunk in chunks:
        layout: _Layout = []
        buckets: list[tuple[int, int]] = []
        start = bucket_start = 0
        mine = [t for t in reversed(chunk) if t.expert == expert]
        for index, tensor in enumerate(mine):
            start = _pad(start, 64)
            if tensor.name in own_bucket and start > bucket_start:
                bucket_start = start = _close(buckets, start, bucket_start, dp)
            end = start + tensor.numel
            layout.append((tensor, start, end))
            last = index == len(mine) - 1
            if (bucket_size is not None and end - bucket_start >= bucket_size) or tensor.name in own_bucket:
                bucket_start = start = _close(buckets, end, bucket_start, dp)
            else:
                start = end
            if last and (not buckets or buckets[-1][1] < end):
                _close(buckets, end, bucket_start, dp)
        out.append((layout, buckets))
    return out


def shard_pieces(chunks: Sequence[Sequence[Tensor]], expert: bool, dp: int, version: str,
                 bucket_size: int | None = None, own_bucket: frozenset[str] = frozenset(),
                 wd_on_qk_norms: bool = False, ranks: Sequence[int] | None = None,
                 distinct: bool = False) -> list[list[tuple[Tensor, int]]]:
    """Each data-parallel rank's pieces of the parameters, in ``HybridDeviceOptimizer``'s order.

    The distributed optimizer lays each model chunk's parameters out in a gradient buffer in reverse
    order, each start padded to 64 elements, cut into buckets of about ``bucket_size`` elements (one
    bucket when it is None, i.e. without ``overlap_grad_reduce``), a shared embedding in a bucket of its
    own, each bucket padded to a multiple of ``lcm(dp, 128)``, and gives rank ``r`` the ``r``-th of ``dp``
    equal slices of every bucket (NVIDIA/Megatron-LM@5be96267:megatron/core/optimizer/param_layout.py:24-43,
    megatron/core/optimizer/distrib_optimizer.py:552-590). A rank's "tensors" are its slices of the
    parameters, walked group by group (:func:`optimizer_order`). ``ranks``: only these ranks' (default: all);
    ``distinct``: only those of :func:`distinct_ranks`, one of each run of ranks whose shards are alike.
    """
    ordered_groups = optimizer_order(chunks, expert, version, wd_on_qk_norms)
    group_of = {id(t): i for i, t in enumerate(ordered_groups)}
    buffers = _buffers(chunks, expert, dp, bucket_size, own_bucket)
    wanted = _distinct(buffers, dp) if distinct else range(dp) if ranks is None else ranks
    pieces: list[list[tuple[int, Tensor, int]]] = [[] for _ in wanted]  # (order key, tensor, piece)
    for layout, buckets in buffers:
        ends = [end for _, _, end in layout]  # ascending: the layout is in buffer order
        for first, last_end in buckets:
            size = (last_end - first) // dp
            for slot, rank in enumerate(wanted):
                low, high = first + rank * size, first + (rank + 1) * size
                # only the tensors that overlap the slice: walking all of them for every rank was
                # O(ranks x buckets x tensors), two minutes at DP 1024
                at = bisect.bisect_right(ends, low)
                while at < len(layout) and layout[at][1] < high:
                    tensor, begin, end = layout[at]
                    piece = min(end, high) - max(begin, low)
                    if piece > 0:
                        pieces[slot].append((group_of[id(tensor)], tensor, piece))
                    at += 1
    # Group by group (a stable sort keeps the buffer order inside each group), as optimizer_order does.
    groups = _group_sequence(ordered_groups, version, wd_on_qk_norms)
    return [[(t, n) for _, t, n in sorted(rank, key=lambda p: groups[p[0]])] for rank in pieces]


def distinct_ranks(chunks: Sequence[Sequence[Tensor]], expert: bool, dp: int, bucket_size: int | None = None,
                   own_bucket: frozenset[str] = frozenset()) -> list[int]:
    """One rank of each run of ranks whose shards are alike (the same tensors, the same piece sizes).

    In every bucket the ranks between two tensor boundaries each hold one equal slice of the same tensor,
    so only the ranks at a boundary, and the one after it, start a new run: at most a few per tensor, whatever
    ``dp`` is (the planner takes counts up to 10,000,000; building every rank's shard took minutes).
    """
    return _distinct(_buffers(chunks, expert, dp, bucket_size, own_bucket), dp)


def _distinct(buffers: list[tuple[_Layout, list[tuple[int, int]]]], dp: int) -> list[int]:
    starts = {0}
    for layout, buckets in buffers:
        ends = [end for _, _, end in layout]
        for first, last_end in buckets:
            size = (last_end - first) // dp
            if size <= 0:
                continue
            at = bisect.bisect_right(ends, first)  # the tensors in this bucket only
            while at < len(layout) and layout[at][1] < last_end:
                _, begin, end = layout[at]
                at += 1
                for offset in (begin, end):
                    rank = (offset - first) // size
                    starts.update(r for r in (rank, rank + 1) if 0 <= r < dp)
    return sorted(starts)


def _close(buckets: list[tuple[int, int]], end: int, first: int, dp: int) -> int:
    """End a bucket at ``end``, padded to a multiple of ``lcm(dp, 128)``; return where the next starts."""
    padded = _pad(end, math.lcm(dp, 128))
    buckets.append((first, padded))
    return padded


def _group_sequence(ordered: Sequence[Tensor], version: str, wd_on_qk_norms: bool) -> list[int]:
    """For each tensor in optimizer order, the rank of its parameter group."""
    out, group, previous = [], 0, None
    for tensor in ordered:
        qk_norm = "q_layernorm." in tensor.name or "k_layernorm." in tensor.name
        decayed = tensor.matrix or (wd_on_qk_norms and qk_norm and version_key(version) >= (0, 16))
        if previous is not None and decayed != previous:
            group += 1
        previous = decayed
        out.append(group)
    return out


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
