"""Memory per GPU: weights, gradients, optimizer state and activations, with and without offloading.

Pure functions over frozen dataclasses. Model states come from the parameter lists of
``checks/model/parameters.py`` (per pipeline stage, tensor- and expert-parallel sizes applied) and the
distributed optimizer's sharding (``checks/model/optimizer_split.py``); activations from the per-layer
profiles of ``checks/plan/activations.py``. Every formula names its source where it is defined.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from checks.model.optimizer_split import greedy_selection, shard_pieces
from checks.model.parameters import Chunk, Tensor, chunk_tensors, stage_chunks
from checks.model.shape import ModelShape, Parallelism
from checks.plan import activations as act
from checks.versions import DEFAULT_VERSION, has_feature


@dataclass(frozen=True)
class Training:
    """One training job, as far as memory goes."""

    shape: ModelShape
    par: Parallelism
    data_parallel: int = 1
    context_parallel: int = 1
    seq_length: int = 4096
    micro_batch_size: int = 1
    global_batch_size: int = 0  # 0: one micro-batch per data-parallel rank per step
    sequence_parallel: bool = False
    recompute: str = "none"  # "none", "selective" (core attention) or "full"
    recompute_method: str = "uniform"  # with "full": "uniform" or "block"
    recompute_num_layers: int = 1
    flash_attention: bool = True
    hidden_dropout: bool = False
    attention_dropout: bool = False
    moe_top_k: int = 2
    capacity_factor: float = 1.0
    param_bytes: int = 2  # bf16
    grad_bytes: int = 4  # fp32 main gradients (grad_reduce_in_fp32 / --accumulate-allreduce-grads-in-fp32)
    distributed_optimizer: bool = True
    precision_aware_optimizer: bool = False
    main_param_bytes: int = 4  # precision-aware optimizer dtypes; fp32 unless set
    exp_avg_bytes: int = 4
    exp_avg_sq_bytes: int = 4
    bucket_size: int | None = None  # gradient buckets, elements; None: one bucket (no overlap_grad_reduce)
    version: str = DEFAULT_VERSION
    # Each MoE layer's token dispatcher waits for its per-expert counts on the host (dropless routing, run eagerly):
    # False under CUDA graphs or with drop-and-pad routing (checks/plan/throughput.py, the host floor)
    moe_host_sync: bool = True
    # megatron-core's deterministic_mode (Megatron-LM --deterministic-mode): deterministic kernels only, which on some
    # systems run the step far slower; the step-time model takes such a job's efficiency from deterministic runs
    deterministic: bool = False

    @property
    def world_size(self) -> int:
        return self.par.tensor * self.par.pipeline * self.context_parallel * self.data_parallel

    @property
    def expert_data_parallel(self) -> int:
        """Ranks that share an expert's weights: ``world / (pp x ep x etp)`` (megatron-core parallel_state)."""
        return max(1, self.par.tensor * self.context_parallel * self.data_parallel
                   // (self.par.expert * self.par.expert_tensor))

    @property
    def num_microbatches(self) -> int:
        if self.global_batch_size <= 0:
            return 1
        return max(1, self.global_batch_size // (self.micro_batch_size * self.data_parallel))

    @property
    def tokens_per_microbatch(self) -> int:
        """Tokens of one micro-batch on one GPU before tensor parallelism: context parallelism splits them."""
        return self.seq_length * self.micro_batch_size // self.context_parallel


@dataclass(frozen=True)
class Offload:
    """The offloading settings, with Megatron-Core's names."""

    cpu_offloading_num_layers: int = 0  # layer-level offloading of layers 0 .. N-1 (0: off)
    offload_modules: tuple[str, ...] = ()  # fine-grained offloading (empty: off)
    min_offloaded_tensor_size: int = 1024 * 1024
    activation_offload_fraction: float = 1.0
    optimizer_offload_fraction: float = 0.0  # 0: off
    pin_cpu_grads: bool = True
    pin_cpu_params: bool = True
    # HybridDeviceOptimizer pipelines the gradient copy down, the host step and the parameter copy up
    # tensor by tensor on side streams (optimizer_config.py overlap_cpu_optimizer_d2h_h2d)
    overlap_cpu_optimizer_d2h_h2d: bool = False


NONE = Offload()


@dataclass(frozen=True)
class StageMemory:
    """One pipeline stage's bytes on one GPU (the most loaded data-parallel rank), and on the host."""

    stage: int
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    host_optimizer_bytes: int = 0
    host_activation_bytes: int = 0
    optimizer_elements: int = 0  # this rank's shard
    optimizer_offloaded_elements: int = 0
    activation_offloaded_bytes_per_microbatch: int = 0
    activations_by_module: dict[str, int] = field(default_factory=dict)
    held_inputs_bytes: int = 0  # between steps only (:func:`held_inputs_bytes`), so not in the peak

    @property
    def device_bytes(self) -> int:
        """The peak."""
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

    @property
    def after_step_bytes(self) -> int:
        """Allocated between steps (what Megatron-LM logs as ``mem-allocated-bytes``)."""
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.held_inputs_bytes

    @property
    def host_bytes(self) -> int:
        return self.host_optimizer_bytes + self.host_activation_bytes


# --- activations ------------------------------------------------------------------------------------

def layer_terms(t: Training, layer: int) -> list[act.Term]:
    """The Megatron-Core/Transformer Engine profile of one layer of this job."""
    return list(_kind_terms(t, t.shape.layer_kind(layer)))


@functools.lru_cache(maxsize=1024)
def _kind_terms(t: Training, kind: str) -> tuple[act.Term, ...]:
    shape = t.shape
    dims = act.Dims(
        hidden=shape.hidden_size, heads=shape.num_attention_heads, kv_heads=shape.num_query_groups,
        head_dim=shape.kv_channels, ffn=shape.ffn_hidden_size, gated=shape.gated_linear_unit,
        layernorm=shape.layernorm_bias, qk_norm=shape.qk_layernorm, rope=shape.position_rows == 0,
        experts=shape.moe.num_experts if shape.moe else 0, top_k=t.moe_top_k,
        moe_ffn=shape.moe.ffn_hidden_size if shape.moe else 0,
        shared_ffn=shape.moe.shared_expert_size if shape.moe else 0)
    par = act.Parallel(t.par.tensor, t.sequence_parallel, t.par.expert, t.par.expert_tensor)
    if kind == "M":
        hy = shape.hybrid
        assert hy is not None
        return tuple(act.megatron_mamba(dims, hy.d_inner, hy.state_dim, hy.num_groups, hy.num_heads, par))
    dense = act.Dims(**{**dims.__dict__, "experts": 0})
    full = act.megatron_te(dims if kind in ("AE", "E") else dense, par, seq_len=t.seq_length // t.context_parallel,
                           flash=t.flash_attention, hidden_dropout=t.hidden_dropout,
                           attention_dropout=t.attention_dropout, recompute_core_attn=t.recompute == "selective",
                           capacity_factor=t.capacity_factor)
    is_attention = [term.module in ("qkv_linear", "core_attn", "attn_proj") or "attention" in term.name
                    for term in full]
    attention = [term for term, a in zip(full, is_attention, strict=True) if a]
    mlp = [term for term, a in zip(full, is_attention, strict=True) if not a]
    if shape.mla is not None and kind in ("A", "AE", "*"):
        m = shape.mla
        attention = act.megatron_mla(dims, m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim,
                                     m.v_head_dim, par)
    if kind == "*":
        return tuple(attention)
    if kind in ("-", "E"):
        return tuple(mlp)
    return tuple(attention + mlp)


def layer_bytes(t: Training, layer: int) -> float:
    """Bytes one micro-batch's pass through ``layer`` leaves saved for backward on one GPU."""
    return act.bytes_per_token(_kind_terms(t, t.shape.layer_kind(layer))) * t.tokens_per_microbatch


def in_flight(t: Training, stage: int) -> float:
    """Micro-batches whose activations a stage holds at once, counted in whole-stage equivalents.

    1F1B keeps ``min(m, pp - stage)`` micro-batches in flight; the interleaved schedule runs
    ``(pp - stage - 1) x 2 + (vpp - 1) x pp`` warm-up chunk passes plus the current one, each holding one
    of the stage's ``vpp`` chunks (megatron/core/pipeline_parallel/schedules.py, ``get_pp_rank_microbatches``).
    """
    pp, vpp, m = t.par.pipeline, t.par.virtual_pipeline, t.num_microbatches
    if pp == 1:
        return 1.0
    if vpp == 1:
        return float(min(m, pp - stage))
    warmup = (pp - stage - 1) * 2 + (vpp - 1) * pp
    return min(m * vpp, warmup + 1) / vpp


@functools.lru_cache(maxsize=256)
def chunk_in_flight(t: Training, stage: int) -> tuple[int, ...]:
    """Micro-batches each of the stage's model chunks holds at the stage's activation peak.

    Which chunk a pass runs matters as soon as chunks differ: only the last chunk of the last stage holds the
    output layer and loss, only the first chunk of stage 0 the embedding. 1F1B (one chunk): ``min(m, pp - stage)``.
    Interleaved, replayed as megatron-core runs it (NVIDIA/Megatron-LM@d98e8a64:megatron/core/pipeline_parallel/
    schedules.py): ``(pp - stage - 1) x 2 + (vpp - 1) x g`` warm-up forwards (:964-965, at most all
    ``m x vpp`` passes, :976-978), ``g`` the micro-batch group, ``pp`` by default (model_parallel_config.py:567-568);
    forward pass ``k`` runs the chunk of entry ``k`` of the schedule table, ``g`` micro-batches of chunk 0, then of
    chunk 1, ... (:989-1016, :1244-1249); each steady step runs one forward then one backward (:1731-1950,
    forward_backward_helper_wrapper :1473-1530), backward ``k`` on chunk ``vpp - 1 - table[k]`` (:1247-1248), and
    frees its micro-batch. The peak follows a forward; of those, the one holding the most bytes.
    """
    pp, vpp, m = t.par.pipeline, t.par.virtual_pipeline, t.num_microbatches
    if pp == 1:
        return (1,) * vpp  # no pipeline schedule: one micro-batch through every chunk at a time
    if vpp == 1:
        return (min(m, pp - stage),)
    weights = _chunk_weights(t, stage)
    group = pp
    table = [chunk for low in range(0, m, group) for chunk in range(vpp) for _ in range(low, min(low + group, m))]
    total = m * vpp
    warmup = min(total, (pp - stage - 1) * 2 + (vpp - 1) * group)
    held = [0] * vpp
    best: tuple[float, tuple[int, ...]] = (-1.0, tuple(held))
    now = 0.0
    for forward in range(total):
        held[table[forward]] += 1
        now += weights[table[forward]]
        if now > best[0]:
            best = (now, tuple(held))
        if forward >= warmup:  # steady state: the same step runs backward number ``forward - warmup``
            chunk = vpp - 1 - table[forward - warmup]
            held[chunk] -= 1
            now -= weights[chunk]
    return best[1]


def _chunk_weights(t: Training, stage: int) -> tuple[float, ...]:
    """Bytes one micro-batch leaves in each chunk of the stage: its layers' and its extras.

    Only to find the peak's moment: with full recompute the layers keep less than this, but in the same ratio
    between chunks of equal layers, so the same moment wins."""
    return tuple(sum(layer_bytes(t, layer) for layer in chunk.layers) + _extras(t, chunk)
                 for chunk in stage_layers(t)[stage])


@functools.lru_cache(maxsize=64)
def stage_layers(t: Training) -> tuple[tuple[Chunk, ...], ...]:
    """Each pipeline stage's model chunks (the step-time model reads the same split)."""
    stages = stage_chunks(t.shape.num_layers, t.par)
    if stages is None:
        raise ValueError(f"{t.shape.num_layers} layers do not split over pipeline size {t.par.pipeline} "
                         f"x virtual {t.par.virtual_pipeline}")
    return stages


def _extras(t: Training, chunk: Chunk) -> float:
    """Per micro-batch, outside the layers (Megatron-LM theoretical_memory_usage.py, compute_activation_memory).

    The chunk with the embedding (the first of stage 0) keeps the token ids (8 bytes per token) and, with
    dropout, the embedding's dropout mask; the one with the output layer (the last of the last stage) keeps the
    final norm's and output layer's inputs and the fp32 logits of the cross-entropy, ``4 x (h + V) / t`` bytes
    per token.
    """
    tokens = t.tokens_per_microbatch
    out = 0.0
    if chunk.first:
        out += 8 * tokens + (tokens * t.shape.hidden_size / (t.par.tensor if t.sequence_parallel else 1)
                             if t.hidden_dropout else 0)
    if chunk.last:
        out += 4 * tokens * (t.shape.hidden_size + t.shape.vocab_size) / t.par.tensor
    return out


def activation_bytes(t: Training, stage: int, offload: Offload = NONE) -> tuple[float, float, dict[str, float]]:
    """(device bytes at the peak, host bytes, device bytes by module) for a stage's activations.

    Each chunk counts by its own micro-batches in flight at the peak (:func:`chunk_in_flight`); without
    interleaving that is the stage's ``min(m, pp - stage)``.
    """
    chunks = stage_layers(t)[stage]
    held = chunk_in_flight(t, stage)
    layers = [layer for chunk in chunks for layer in chunk.layers]
    per_layer = [layer_bytes(t, layer) for layer in layers]
    flight = in_flight(t, stage)
    by_module: dict[str, float] = {}
    for chunk, count in zip(chunks, held, strict=True):
        for layer in chunk.layers:
            for module, value in act.by_module(_kind_terms(t, t.shape.layer_kind(layer))).items():
                by_module[module] = by_module.get(module, 0.0) + value * t.tokens_per_microbatch * count
    if t.recompute == "full":
        resident = _full_recompute(t, layers, per_layer, flight)
        by_module = {"": resident}
    else:
        resident = sum(sum(layer_bytes(t, layer) for layer in chunk.layers) * count
                       for chunk, count in zip(chunks, held, strict=True))
    host = 0.0
    if offload.cpu_offloading_num_layers:
        # Layers 0 .. N-1 leave the device one commit after their forward (PP must be 1, rule ACT002).
        moved = sum(per_layer[: offload.cpu_offloading_num_layers])
        resident -= moved
        host += moved
    elif offload.offload_modules:
        moved = _fine_grained_moved(t, layers, offload) * flight
        resident -= moved
        host += moved
    extras = sum(_extras(t, chunk) * count for chunk, count in zip(chunks, held, strict=True))
    by_module[""] = by_module.get("", 0.0) + extras
    return resident + extras, host, by_module


def _full_recompute(t: Training, layers: list[int], per_layer: list[float], flight: float) -> float:
    """Full recompute keeps each checkpoint's input (bf16, sequence-sharded) and, during backward, one
    recomputed span: ``recompute_num_layers`` layers for "uniform", one layer for "block"
    (megatron/core/transformer/transformer_block.py, ``_checkpointed_forward``)."""
    n = max(1, t.recompute_num_layers)
    sp = t.par.tensor if t.sequence_parallel else 1
    checkpoint = 2 * t.shape.hidden_size / sp * t.tokens_per_microbatch
    if t.recompute_method == "block":
        kept = sum(per_layer[n:])
        return (min(n, len(layers)) * checkpoint + kept) * flight + max(per_layer[:n], default=0.0)
    return math.ceil(len(layers) / n) * checkpoint * flight + sum(sorted(per_layer)[-n:])


def _fine_grained_moved(t: Training, layers: list[int], offload: Offload) -> float:
    """Bytes one micro-batch moves to the host: each offloaded module's terms whose tensor reaches
    ``min_offloaded_tensor_size`` elements, in every layer but the stage's last (kept on the device,
    its backward comes first), times ``activation_offload_fraction`` of the groups."""
    tokens = t.tokens_per_microbatch
    moved = 0.0
    for layer in layers[:-1]:
        for term in _kind_terms(t, t.shape.layer_kind(layer)):
            if term.module in offload.offload_modules and term.numel * tokens >= offload.min_offloaded_tensor_size:
                moved += term.bytes_per_token * tokens
    return moved * offload.activation_offload_fraction


def held_inputs_bytes(t: Training, stage: int) -> int:
    """Bytes the stage keeps between steps: each chunk's last pipeline input, and that input's gradient.

    Every forward hands its chunk the received input (NVIDIA/Megatron-LM@d98e8a64:megatron/core/pipeline_parallel/
    schedules.py:506-507), and the transformer block keeps it as ``self.input_tensor`` until the next forward
    replaces it (megatron/core/transformer/transformer_block.py:455-463; the hybrid stack alike,
    megatron/core/models/hybrid/hybrid_block.py:251-259). The backward of that micro-batch left the
    input's gradient on it (``retain_grad``, schedules.py:561; read back as ``x.grad``, :591). So after the step
    every chunk that receives an input, all but the model's first, holds two tensors of the pipeline's shape,
    ``(seq / cp, or / (cp x tp) with sequence parallelism; micro-batch; hidden)`` (get_tensor_shapes,
    :2115-2144), in the parameters' dtype (``pipeline_dtype = params_dtype``, megatron/training/
    argument_utils.py:306). The next step frees each pair at its chunk's first forward, and by the stage's peak
    every chunk has run one (the peak follows a forward of the steady state, :func:`chunk_in_flight`), so they are
    not part of the peak: Megatron-LM's interleaved 7B run peaks higher after its first step than in it by the
    Adam moments alone (tests/test_plan_memory_defects.py).
    """
    receiving = sum(1 for chunk in stage_layers(t)[stage] if not chunk.first) if t.par.pipeline > 1 else 0
    split = t.par.tensor if t.sequence_parallel else 1
    return receiving * 2 * (t.tokens_per_microbatch // split) * t.shape.hidden_size * t.param_bytes


# --- model states -----------------------------------------------------------------------------------

def _shared_embeddings(t: Training, chunk: Chunk) -> frozenset[str]:
    """A tied embedding split over pipeline stages gets a gradient bucket of its own."""
    if not t.shape.tied_embeddings or t.par.pipeline == 1:
        return frozenset()
    return frozenset(n for n, on in (("embedding.word_embeddings.weight", chunk.first),
                                     ("output_layer.weight", chunk.last)) if on)


@functools.lru_cache(maxsize=64)
def _stage_tensors(t: Training, stage: int) -> tuple[tuple[Tensor, ...], ...]:
    return tuple(chunk_tensors(t.shape, t.par, chunk) for chunk in stage_layers(t)[stage])


@functools.lru_cache(maxsize=128)
def _rank_numels(t: Training, stage: int, expert: bool, group: int) -> tuple[tuple[int, ...], ...]:
    """Each rank's piece sizes in optimizer order (the distributed optimizer's shards, or the whole list)."""
    tensors = [list(chunk) for chunk in _stage_tensors(t, stage)]
    if not t.distributed_optimizer:
        return (tuple(tensor.numel for chunk in tensors for tensor in chunk if tensor.expert == expert),)
    own = frozenset().union(*(_shared_embeddings(t, c) for c in stage_layers(t)[stage]))
    # one rank of each run whose shards are alike: the others repeat one of these (DP up to 10,000,000)
    return tuple(tuple(n for _, n in pieces)
                 for pieces in shard_pieces(tensors, expert, group, t.version, t.bucket_size, own, distinct=True))


def pinned_bytes(nbytes: int) -> int:
    """Host bytes a pinned request of ``nbytes`` takes: the next power of two.

    PyTorch's CUDA caching host allocator (behind ``pin_memory()`` and ``torch.empty(pin_memory=True)``) rounds
    every request with ``c10::llvm::PowerOf2Ceil`` and never splits a block (torch 2.13.0
    ATen/core/CachingHostAllocator.h:301-308, up to ``pinned_max_round_threshold``, whose default is SIZE_MAX,
    c10/core/AllocatorConfig.h:361; unconditional in pytorch/pytorch@04456333 of the same file).
    """
    return 1 << (nbytes - 1).bit_length() if nbytes > 0 else 0


def host_offload_bytes(t: Training, offload: Offload, pieces: Sequence[int]) -> int:
    """Host bytes ``HybridDeviceOptimizer`` holds for the offloaded pieces (elements, in optimizer order).

    Per piece of ``n`` elements (NVIDIA/Megatron-LM@d98e8a64:megatron/core/optimizer/cpu_offloading/
    hybrid_optimizer.py): a pinned copy of the GPU shard (:274, pinned whatever the config says); when that is
    16-bit (the precision-aware optimizer hands over the bf16 shards, distrib_optimizer.py:491-495; without it
    the fp32 main shards, :486-490) an fp32 master made from it (:277-278), pinned only where ``pin_cpu_params``
    is read (:279-280, feature ``pin_cpu_params_honoured``), and the 16-bit copy dropped; at the first step an
    fp32 gradient buffer, pinned with ``pin_cpu_grads`` (:108-111); torch's AdamW moments, 8 bytes in pageable
    memory (``zeros_like`` does not pin). Pinned requests go through :func:`pinned_bytes`, and a dropped block
    stays cached for the next request of its size (CachingHostAllocator.h, ``free`` puts it on the free list
    of its size): replayed here in upstream's order. Each optimizer instance (dense, expert) is replayed on its
    own: the two share one cache, so this can only overstate by what one could reuse of the other's.
    """
    if not pieces:
        return 0
    staged = t.precision_aware_optimizer and t.param_bytes != 4
    pin_master = not staged or (offload.pin_cpu_params and has_feature(t.version, "pin_cpu_params_honoured"))
    cached: dict[int, int] = {}  # free blocks by size
    reserved = pageable = 0

    def allocate(nbytes: int) -> int:
        nonlocal reserved
        size = pinned_bytes(nbytes)
        if cached.get(size):
            cached[size] -= 1
        else:
            reserved += size
        return size

    for n in pieces:
        if staged:
            copy = allocate(t.param_bytes * n)
            cached[copy] = cached.get(copy, 0) + 1  # dropped once the fp32 master exists
        if pin_master:
            allocate(4 * n)
        else:
            pageable += 4 * n
        pageable += 8 * n
    for n in pieces:
        if offload.pin_cpu_grads:
            allocate(4 * n)
        else:
            pageable += 4 * n
    return reserved + pageable


def _optimizer(t: Training, stage: int, expert: bool, group: int,
               offload: Offload) -> tuple[int, int, int, int]:
    """(device bytes, host bytes, elements, offloaded elements) of one instance: the device bytes and elements of
    its most loaded rank, the host bytes of its most host-hungry one. Ranks differ by their pieces, and the pinned
    rounding makes the one with the most GPU bytes not always the one with the most host bytes; each is the
    maximum so that both only move one way with the fraction.

    Distributed optimizer without offloading: per element of the rank's shard, the fp32 main copy of a
    16-bit parameter (or the precision-aware optimizer's dtype) and the two moments. Offloaded elements
    (``HybridDeviceOptimizer``) cost the GPU nothing with the precision-aware optimizer and the 4-byte
    main shard without it, and the host what :func:`host_offload_bytes` says (16 bytes, pinned ones rounded up);
    elements left on the GPU cost 12 bytes whatever the precision-aware dtypes
    (../shared/upstream notes, section 6.2; hybrid_optimizer.py:251-302).
    """
    fraction = offload.optimizer_offload_fraction
    main = 0 if t.param_bytes == 4 else t.main_param_bytes
    per_element = main + t.exp_avg_bytes + t.exp_avg_sq_bytes
    worst = (0, 0, 0)  # device bytes, elements, offloaded elements
    host = 0
    for numels in _rank_numels(t, stage, expert, group):
        total = sum(numels)
        chosen = greedy_selection(numels, fraction) if fraction > 0 else [False] * len(numels)
        pieces = [n for n, take in zip(numels, chosen, strict=True) if take]
        moved = sum(pieces)
        if fraction > 0:
            device = (total - moved) * 12 + moved * (0 if t.precision_aware_optimizer else 4)
        else:
            device = total * per_element
        worst = max(worst, (device, total, moved))
        host = max(host, host_offload_bytes(t, offload, pieces))
    return worst[0], host, worst[1], worst[2]


def stage_memory(t: Training, stage: int, offload: Offload = NONE) -> StageMemory:
    """Bytes of one pipeline stage on its most loaded GPU, and what offloading moves to its host."""
    tensors = _stage_tensors(t, stage)
    numel = sum(tensor.numel for chunk in tensors for tensor in chunk)
    dense = _optimizer(t, stage, False, t.data_parallel * t.context_parallel, offload)
    expert = _optimizer(t, stage, True, t.expert_data_parallel, offload) \
        if any(tensor.expert for chunk in tensors for tensor in chunk) else (0, 0, 0, 0)
    device, host, by_module = activation_bytes(t, stage, offload)
    return StageMemory(
        stage=stage, weights_bytes=numel * t.param_bytes, grads_bytes=numel * t.grad_bytes,
        optimizer_bytes=dense[0] + expert[0], activations_bytes=round(device),
        host_optimizer_bytes=dense[1] + expert[1],
        host_activation_bytes=round(host),
        optimizer_elements=dense[2] + expert[2], optimizer_offloaded_elements=dense[3] + expert[3],
        activation_offloaded_bytes_per_microbatch=round(host / max(in_flight(t, stage), 1e-9)),
        activations_by_module={k: round(v) for k, v in by_module.items()},
        held_inputs_bytes=held_inputs_bytes(t, stage),
    )


def plan_memory(t: Training, offload: Offload = NONE) -> list[StageMemory]:
    """Every pipeline stage."""
    return [stage_memory(t, stage, offload) for stage in range(t.par.pipeline)]
