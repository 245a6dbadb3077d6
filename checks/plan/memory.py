"""Memory per GPU: weights, gradients, optimizer state and activations, with and without offloading.

Pure functions over frozen dataclasses. Model states come from the parameter lists of
``checks/model/parameters.py`` (per pipeline stage, tensor- and expert-parallel sizes applied) and the
distributed optimizer's sharding (``checks/model/optimizer_split.py``); activations from the per-layer
profiles of ``checks/plan/activations.py``. Every formula names its source where it is defined.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from checks.model.optimizer_split import greedy_offload, shard_pieces
from checks.model.parameters import Chunk, Tensor, chunk_tensors, stage_chunks
from checks.model.shape import ModelShape, Parallelism
from checks.plan import activations as act
from checks.versions import DEFAULT_VERSION


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

    @property
    def device_bytes(self) -> int:
        return self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes

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


@functools.lru_cache(maxsize=64)
def _stage_layers(t: Training) -> tuple[tuple[Chunk, ...], ...]:
    stages = stage_chunks(t.shape.num_layers, t.par)
    if stages is None:
        raise ValueError(f"{t.shape.num_layers} layers do not split over pipeline size {t.par.pipeline} "
                         f"x virtual {t.par.virtual_pipeline}")
    return stages


def _extras(t: Training, stage: int, last: bool) -> float:
    """Per micro-batch, outside the layers (Megatron-LM theoretical_memory_usage.py, compute_activation_memory).

    The first stage keeps the token ids (8 bytes per token) and, with dropout, the embedding's dropout
    mask; the last stage keeps the final norm's and output layer's inputs and the fp32 logits of the
    cross-entropy, ``4 x (h + V) / t`` bytes per token.
    """
    tokens = t.tokens_per_microbatch
    out = 0.0
    if stage == 0:
        out += 8 * tokens + (tokens * t.shape.hidden_size / (t.par.tensor if t.sequence_parallel else 1)
                             if t.hidden_dropout else 0)
    if last:
        out += 4 * tokens * (t.shape.hidden_size + t.shape.vocab_size) / t.par.tensor
    return out


def activation_bytes(t: Training, stage: int, offload: Offload = NONE) -> tuple[float, float, dict[str, float]]:
    """(device bytes at the peak, host bytes, device bytes by module) for a stage's activations."""
    stages = _stage_layers(t)
    layers = [layer for chunk in stages[stage] for layer in chunk.layers]
    per_layer = [layer_bytes(t, layer) for layer in layers]
    flight = in_flight(t, stage)
    by_module: dict[str, float] = {}
    for layer in layers:
        for module, value in act.by_module(_kind_terms(t, t.shape.layer_kind(layer))).items():
            by_module[module] = by_module.get(module, 0.0) + value * t.tokens_per_microbatch * flight
    if t.recompute == "full":
        resident = _full_recompute(t, layers, per_layer, flight)
        by_module = {"": resident}
    else:
        resident = sum(per_layer) * flight
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
    extras = _extras(t, stage, stage == len(stages) - 1) * flight
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
    groups = 0
    for index, layer in enumerate(layers):
        if index == len(layers) - 1:
            continue
        for term in _kind_terms(t, t.shape.layer_kind(layer)):
            if term.module in offload.offload_modules and term.numel * tokens >= offload.min_offloaded_tensor_size:
                moved += term.bytes_per_token * tokens
        groups += 1
    return moved * offload.activation_offload_fraction if groups else 0.0


# --- model states -----------------------------------------------------------------------------------

def _shared_embeddings(t: Training, chunk: Chunk) -> frozenset[str]:
    """A tied embedding split over pipeline stages gets a gradient bucket of its own."""
    if not t.shape.tied_embeddings or t.par.pipeline == 1:
        return frozenset()
    return frozenset(n for n, on in (("embedding.word_embeddings.weight", chunk.first),
                                     ("output_layer.weight", chunk.last)) if on)


@functools.lru_cache(maxsize=64)
def _stage_tensors(t: Training, stage: int) -> tuple[tuple[Tensor, ...], ...]:
    return tuple(chunk_tensors(t.shape, t.par, chunk) for chunk in _stage_layers(t)[stage])


@functools.lru_cache(maxsize=128)
def _rank_numels(t: Training, stage: int, expert: bool, group: int) -> tuple[tuple[int, ...], ...]:
    """Each rank's piece sizes in optimizer order (the distributed optimizer's shards, or the whole list)."""
    tensors = [list(chunk) for chunk in _stage_tensors(t, stage)]
    if not t.distributed_optimizer:
        return (tuple(tensor.numel for chunk in tensors for tensor in chunk if tensor.expert == expert),)
    own = frozenset().union(*(_shared_embeddings(t, c) for c in _stage_layers(t)[stage]))
    # one rank of each run whose shards are alike: the others repeat one of these (DP up to 10,000,000)
    return tuple(tuple(n for _, n in pieces)
                 for pieces in shard_pieces(tensors, expert, group, t.version, t.bucket_size, own, distinct=True))


def _optimizer(t: Training, stage: int, expert: bool, group: int, fraction: float) -> tuple[int, int, int, int]:
    """(device bytes, host bytes, elements, offloaded elements) on the most loaded rank of one instance.

    Distributed optimizer without offloading: per element of the rank's shard, the fp32 main copy of a
    16-bit parameter (or the precision-aware optimizer's dtype) and the two moments. Offloaded elements
    (``HybridDeviceOptimizer``) cost the GPU nothing with the precision-aware optimizer and the 4-byte
    main shard without it, and the host 16 bytes (fp32 master, two moments, fp32 gradient staging);
    elements left on the GPU cost 12 bytes whatever the precision-aware dtypes
    (../shared/upstream notes, section 6.2; hybrid_optimizer.py:251-302).
    """
    main = 0 if t.param_bytes == 4 else t.main_param_bytes
    per_element = main + t.exp_avg_bytes + t.exp_avg_sq_bytes
    worst = (0, 0, 0, 0)
    for numels in _rank_numels(t, stage, expert, group):
        total = sum(numels)
        moved = greedy_offload(numels, fraction)[0] if fraction > 0 else 0
        if fraction > 0:
            device = (total - moved) * 12 + moved * (0 if t.precision_aware_optimizer else 4)
        else:
            device = total * per_element
        candidate = (device, moved * 16, total, moved)
        if candidate[0] > worst[0] or (candidate[0] == worst[0] and candidate[1] > worst[1]):
            worst = candidate
    return worst


def stage_memory(t: Training, stage: int, offload: Offload = NONE) -> StageMemory:
    """Bytes of one pipeline stage on its most loaded GPU, and what offloading moves to its host."""
    tensors = _stage_tensors(t, stage)
    numel = sum(tensor.numel for chunk in tensors for tensor in chunk)
    dense = _optimizer(t, stage, False, t.data_parallel * t.context_parallel, offload.optimizer_offload_fraction)
    expert = _optimizer(t, stage, True, t.expert_data_parallel, offload.optimizer_offload_fraction) \
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
    )


def plan_memory(t: Training, offload: Offload = NONE) -> list[StageMemory]:
    """Every pipeline stage."""
    return [stage_memory(t, stage, offload) for stage in range(t.par.pipeline)]
