"""How long a training step takes, stage by stage, and what offloading adds to it.

One pipeline stage's step on its slowest rank is the sum of its parts (:class:`StageTime`); the pipeline's step
is its slowest stage's, since the stages run in lockstep (the gradient-norm all-reduce and the optimizer step
join them). The parts:

- **compute**: the stage's FLOPs per micro-batch on one GPU, forward + backward (2 x forward) + what recompute
  repeats (full: one more forward of the layers it recomputes; selective: the core attention's forward), at an
  *efficiency*: the share of the GPU's dense bf16 peak the compute achieves. Efficiencies come from Megatron
  Bridge's published performance tables (``checks/data/efficiency.json``, written by ``tools/efficiency.py``),
  per model family, system and precision: each is the value at which *this* model reproduces a published row's
  step time, so the bubbles and communication modelled here are not counted twice (a fit, per row); dense BF16 on
  H100, which Bridge does not publish, is Megatron-LM's published MFU;
- **MoE all-to-all**: each MoE layer dispatches every token's hidden state to its top-k experts and combines
  them back, forward and backward (and again when recomputed), over the expert-parallel group: within the
  NVLink domain at its achievable bus bandwidth, across domains at the NICs'. Not overlapped with compute
  (Megatron overlaps it only with ``overlap_moe_expert_parallel_comm``, which the planner does not read);
- **pipeline bubble**: fill and drain, ``(pp - 1) / vpp`` micro-batch chunk times for equal stages (Narayanan
  et al. 2021, section 2.2); with unequal stages, the other stages' times in place of ``pp - 1`` equal ones;
- **data parallel**: the distributed optimizer's gradient reduce-scatter and parameter all-gather (all-reduce
  without it) over the data-parallel group (and the expert data-parallel group for expert weights). With
  ``overlap_grad_reduce`` (gradient buckets) they overlap the last micro-batch's backward and the first one's
  forward only (megatron/core/distributed: grads are reduced when the last micro-batch's backward produces
  them), so with few micro-batches most of it is exposed; without it, all of it is;
- **optimizer**: the GPU AdamW step streams its shard through HBM;
- **optimizer offload** (``HybridDeviceOptimizer``): fp32 gradients down, the host AdamW, fp32 parameters up, for
  the offloaded elements of the stage's most loaded rank; the GPU step of the rest runs while the host works.
  With ``overlap_cpu_optimizer_d2h_h2d`` the three pipeline tensor by tensor, so the slowest sets the time,
  otherwise they add up (hybrid_optimizer.py:150-179). The node's ranks share the host's memory bandwidth;
- **activation offload**: copies beyond the compute they overlap (a layer's saved tensors go down during the
  next layer's forward and come back during the previous layer's backward).

- **tensor parallel**: each row/column-parallel pair's all-reduce (all-gather and reduce-scatter with sequence
  parallelism) of the hidden states, forward and backward, exposed (the planner does not read ``tp_comm_overlap``);
- **host wait**: an eager MoE layer cannot finish before the host has issued it. Its token dispatcher waits on the
  host for the per-expert token counts (dropless routing), so the host cannot run ahead across MoE layers, and a
  micro-batch's pass over a stage takes at least its MoE layers times the host's time for one
  (``Hardware.moe_layer_host_s``, fitted to one published eager job). What the GPU waits beyond its own work is
  this part. CUDA graphs (``Training.moe_host_sync`` False) are not priced: no figure of what they leave was found.

Not modelled (the efficiency absorbs them): context-parallel communication, pipeline send/receive, the host time of
dense layers and of the step outside the layers (optimizer launch, logging), load imbalance between experts.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from checks.model.parameters import chunk_tensors
from checks.plan.hardware import Hardware, base_name
from checks.plan.memory import Offload, StageMemory, Training, stage_layers, stage_memory

DEFAULT_MFU = 0.4  # the old step_cost's model-FLOPs utilisation (kept until recommend.py moves to step_time)
EFFICIENCY_DATA = Path(__file__).resolve().parent.parent / "data" / "efficiency.json"
# FP8 speeds up Megatron training 1.2-1.5x over BF16 ("typically achieving a speedup of 1.2-1.5X",
# NVIDIA-NeMo/Megatron-Bridge@067f987d:docs/performance-guide.md:17): a BF16 efficiency is taken as an FP8 one over
# the middle of that range where only FP8 rows were published.
FP8_SPEEDUP = 1.35
# bf16 hidden states: what tensor-parallel collectives and the MoE dispatcher move ("Megatron-Bridge is working on
# supporting FP8 A2A dispatch ... but still keeps BF16 A2A combine", Megatron-Bridge@067f987d:docs/
# performance-guide.md:258)
ACTIVATION_BYTES = 2


@dataclass(frozen=True)
class StageTime:
    """One pipeline stage, one step, seconds on its slowest rank."""

    stage: int
    compute_s: float  # forward + backward (+ recompute) of this stage's micro-batches at the efficiency
    bubble_s: float  # pipeline fill and drain
    expert_all_to_all_s: float  # exposed MoE token dispatch/combine
    data_parallel_s: float  # exposed gradient reduce-scatter / all-reduce and parameter all-gather
    optimizer_s: float  # the GPU optimizer step (what stays on the GPU)
    optimizer_offload_s: float  # D2H grads + host step + H2D params, exposed (overlap flag honoured)
    activation_offload_s: float  # exposed activation copies
    tensor_parallel_s: float = 0.0  # tensor-parallel all-reduces (all-gathers and reduce-scatters with SP)
    host_wait_s: float = 0.0  # the GPU waiting for the host to issue eager MoE layers

    @property
    def step_s(self) -> float:
        return sum(self.parts().values())

    def parts(self) -> dict[str, float]:
        return {"compute_s": self.compute_s, "bubble_s": self.bubble_s,
                "expert_all_to_all_s": self.expert_all_to_all_s, "tensor_parallel_s": self.tensor_parallel_s,
                "host_wait_s": self.host_wait_s,
                "data_parallel_s": self.data_parallel_s, "optimizer_s": self.optimizer_s,
                "optimizer_offload_s": self.optimizer_offload_s, "activation_offload_s": self.activation_offload_s}


@dataclass(frozen=True)
class StepTime:
    stages: tuple[StageTime, ...]
    efficiency: float  # the compute efficiency used (share of dense bf16 peak)
    efficiency_source: str  # where it came from (a data row, --mfu, or a probe profile)
    host_note: str = ""  # what the eager-MoE host floor means for this step, when it holds the GPU back

    @property
    def slowest(self) -> StageTime:
        return max(self.stages, key=lambda s: s.step_s)

    @property
    def step_s(self) -> float:
        return self.slowest.step_s


# --- FLOPs ------------------------------------------------------------------------------------------------

def _attention_weights(t: Training) -> float:
    s = t.shape
    h = s.hidden_size
    if s.mla is not None:
        m = s.mla
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        heads = s.num_attention_heads
        q_part = (h * m.q_lora_rank + m.q_lora_rank * heads * qk) if m.q_lora_rank else h * heads * qk
        return q_part + h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) \
            + m.kv_lora_rank * heads * (m.qk_head_dim + m.v_head_dim) + heads * m.v_head_dim * h
    q = s.num_attention_heads * s.kv_channels
    kv = s.num_query_groups * s.kv_channels
    return h * (q + 2 * kv) + q * h


def _layer_weights(t: Training, kind: str) -> float:
    """Matmul weights one token multiplies in a layer of ``kind`` (MoE: its top-k experts, shared experts, router)."""
    s = t.shape
    h = s.hidden_size
    if kind == "M":
        hy = s.hybrid
        assert hy is not None
        return h * (2 * hy.d_inner + 2 * hy.num_groups * hy.state_dim + hy.num_heads) + hy.d_inner * h
    gate = 3 if s.gated_linear_unit else 2
    total = _attention_weights(t) if kind in ("A", "AE", "*") else 0.0
    if kind in ("A", "-"):
        total += gate * h * s.ffn_hidden_size
    elif kind in ("AE", "E") and s.moe is not None:
        total += t.moe_top_k * gate * h * s.moe.ffn_hidden_size + gate * h * s.moe.shared_expert_size \
            + h * s.moe.num_experts
    return total


def active_parameters_per_token(t: Training) -> float:
    """Weights each token multiplies (matmul weights only; MoE layers count top-k experts and shared ones)."""
    return sum(_layer_weights(t, t.shape.layer_kind(layer)) for layer in range(t.shape.num_layers)) \
        + t.shape.hidden_size * t.shape.vocab_size  # the output layer


def _tokens(t: Training) -> int:
    return t.seq_length * t.micro_batch_size * t.num_microbatches * t.data_parallel


def attention_score_flops(t: Training) -> float:
    """FLOPs of the attention scores and their weighted sum over one step (forward and backward):
    6 x seq x q per token per attention layer, causal (Narayanan et al. 2021, section 5.1, halved)."""
    layers = sum(1 for layer in range(t.shape.num_layers) if t.shape.layer_kind(layer) in ("A", "AE", "*"))
    q = t.shape.num_attention_heads * (t.shape.mla.v_head_dim if t.shape.mla else t.shape.kv_channels)
    return _tokens(t) * 6 * layers * t.seq_length * q


def step_flops(t: Training) -> float:
    """Training FLOPs of one step on all GPUs: 6 per weight per token, plus the attention scores."""
    return _tokens(t) * 6 * active_parameters_per_token(t) + attention_score_flops(t)


def _score_flops_per_token(t: Training, kind: str) -> float:
    """Forward FLOPs of one attention layer's scores and weighted sum, per token: causal, so a query meets
    ``seq / 2`` keys on average, at 2 FLOPs per multiply-add for QK^T (``d`` wide) and the weighted sum (``d_v``
    wide): ``heads x seq x (d + d_v)`` (MLA's query-key heads are wider than its value heads)."""
    if kind not in ("A", "AE", "*"):
        return 0.0
    s = t.shape
    qk, v = (s.mla.qk_head_dim + s.mla.qk_pos_emb_head_dim, s.mla.v_head_dim) if s.mla else (s.kv_channels,) * 2
    return s.num_attention_heads * t.seq_length * (qk + v)


@dataclass(frozen=True)
class _Work:
    """One stage's work for one micro-batch on one of its GPUs."""

    forward_flops: float
    recompute_flops: float  # forward work recompute repeats during backward
    layers: int
    moe_layers: int
    moe_recomputed: int  # MoE layers whose forward (and so its all-to-all) full recompute repeats
    tp_collectives: int  # tensor-parallel collectives of one forward + backward (+ recompute) of the stage
    dense_numel: int  # parameters on this GPU the data-parallel group reduces
    expert_numel: int  # those the expert data-parallel group reduces


@functools.lru_cache(maxsize=1024)
def _stage_work(t: Training, stage: int) -> _Work:
    """Per GPU: a stage's ``TP x CP x DP`` GPUs share the micro-batch's tokens (``seq x mbs`` on each
    data-parallel rank) and its layers' weights, experts included (balanced routing), so each does
    ``seq x mbs / (TP x CP)`` tokens' worth of the stage's FLOPs."""
    tokens = t.seq_length * t.micro_batch_size / (t.par.tensor * t.context_parallel)
    forward = recompute = 0.0
    layers = moe_layers = moe_recomputed = collectives = 0
    dense = expert = 0
    for chunk in stage_layers(t)[stage]:
        for index, layer in enumerate(chunk.layers):
            kind = t.shape.layer_kind(layer)
            matmul = 2 * _layer_weights(t, kind) * tokens
            scores = _score_flops_per_token(t, kind) * tokens
            forward += matmul + scores
            moe = kind in ("AE", "E")
            layers += 1
            moe_layers += moe
            full = t.recompute == "full" and (t.recompute_method != "block" or index < t.recompute_num_layers)
            # Megatron's row/column-parallel pairs: one all-reduce (an all-gather and a reduce-scatter with
            # sequence parallelism) forward and one backward per pair; attention (or a Mamba mixer) is one pair,
            # a dense MLP another, an MoE MLP none (its tokens move by the all-to-all; expert TP is not priced)
            pairs = (kind in ("A", "AE", "*", "M")) + (kind in ("A", "-"))
            collectives += pairs * (2 + full)
            if full:
                recompute += matmul + scores
                moe_recomputed += moe
            elif t.recompute == "selective":
                recompute += scores
        if chunk.last:
            forward += 2 * t.shape.hidden_size * t.shape.vocab_size * tokens
        for tensor in chunk_tensors(t.shape, t.par, chunk):
            if tensor.expert:
                expert += tensor.numel
            else:
                dense += tensor.numel
    return _Work(forward, recompute, layers, moe_layers, moe_recomputed, collectives, dense, expert)


# --- communication ----------------------------------------------------------------------------------------

def _group_seconds(bytes_per_gpu: float, group: int, span: int, hw: Hardware) -> float:
    """A ring collective's time: each GPU moves ``bytes x (n - 1) / n`` at the bus bandwidth of the slowest link
    its group crosses (the NVLink domain's, or one NIC per GPU once the group's ``span`` consecutive ranks leave
    the domain; nccl-tests reports reduce-scatter and all-gather bus bandwidth this way)."""
    if group <= 1 or bytes_per_gpu <= 0:
        return 0.0
    bandwidth = hw.nvlink_bytes_per_s if span <= hw.domain else hw.network_bytes_per_s
    return bytes_per_gpu * (group - 1) / group / bandwidth


def _all_to_all_seconds(t: Training, hw: Hardware, work: _Work) -> float:
    """One micro-batch's exposed MoE dispatch and combine on one GPU of the stage.

    Each token's hidden state goes to ``top_k`` experts and comes back: ``tokens x top_k x h`` bf16 values each
    way, of which ``1 / EP`` stay on the GPU. The expert grid is ``etp-ep-edp-pp``, so an expert-parallel group
    is ``EP`` ranks ``ETP`` apart (megatron/core/parallel_state.py:887-896): within the NVLink domain while
    ``ETP x EP`` fits in it; beyond, the share bound for other domains crosses the NICs.
    """
    if not work.moe_layers or t.shape.moe is None or t.par.expert <= 1:
        return 0.0
    ep, etp = t.par.expert, t.par.expert_tensor
    tokens = t.seq_length * t.micro_batch_size / (t.context_parallel * t.par.tensor)
    one_way = tokens * t.moe_top_k * t.shape.hidden_size * ACTIVATION_BYTES
    local_peers = max(1, min(ep, hw.domain // max(etp, 1)))
    within = one_way * (local_peers - 1) / ep / hw.nvlink_bytes_per_s
    across = one_way * (ep - local_peers) / ep / hw.network_bytes_per_s
    passes = 4 * work.moe_layers + 2 * work.moe_recomputed  # dispatch + combine, forward and backward
    return passes * max(within, across)


def _tensor_parallel_seconds(t: Training, hw: Hardware, work: _Work) -> float:
    """One micro-batch's tensor-parallel communication on one GPU of the stage, all of it exposed (the planner does
    not read ``tp_comm_overlap``). An all-reduce of the ``seq x mbs / CP`` hidden states moves twice
    ``(TP - 1) / TP`` of them; with sequence parallelism its all-gather and reduce-scatter move the same."""
    tp = t.par.tensor
    if tp <= 1 or not work.tp_collectives:
        return 0.0
    hidden = t.seq_length * t.micro_batch_size / t.context_parallel * t.shape.hidden_size * ACTIVATION_BYTES
    bandwidth = hw.nvlink_bytes_per_s if tp <= hw.domain else hw.network_bytes_per_s
    return work.tp_collectives * 2 * hidden * (tp - 1) / tp / bandwidth


def _overlap_grad_reduce(t: Training) -> bool:
    # Training.bucket_size is None for one bucket, i.e. without overlap_grad_reduce (memory.py)
    return t.bucket_size is not None


def _data_parallel_seconds(t: Training, hw: Hardware, stage: int, work: _Work, forward_s: float,
                           backward_s: float) -> float:
    """Exposed gradient reduction and parameter gathering of one stage's rank.

    Dense weights reduce over the ``DP x CP`` ranks that share them, ``TP x CP`` apart in the ``tp-cp-ep-dp-pp``
    order; expert weights over the expert data-parallel group, ``ETP x EP`` apart. With ``overlap_grad_reduce``
    the gradient buckets go out during the last micro-batch's backward (and, on later stages, the drain that
    follows it); the parameter all-gather of ``overlap_param_gather`` runs under the next step's first forward;
    the last bucket of each is always exposed.
    """
    dense_group = t.data_parallel * t.context_parallel
    expert_group = t.expert_data_parallel
    dense_span = t.par.tensor * t.context_parallel * t.data_parallel
    expert_span = t.par.expert_tensor * t.par.expert * expert_group
    reduce = _group_seconds(work.dense_numel * t.grad_bytes, dense_group, dense_span, hw) \
        + _group_seconds(work.expert_numel * t.grad_bytes, expert_group, expert_span, hw)
    gather = 0.0
    if t.distributed_optimizer:
        gather = _group_seconds(work.dense_numel * t.param_bytes, dense_group, dense_span, hw) \
            + _group_seconds(work.expert_numel * t.param_bytes, expert_group, expert_span, hw)
    else:
        reduce *= 2  # an all-reduce is a reduce-scatter and an all-gather
    if not _overlap_grad_reduce(t):
        return reduce + gather
    numel = max(work.dense_numel + work.expert_numel, 1)
    last_bucket = min(1.0, (t.bucket_size or numel) / numel)
    drain = stage / t.par.virtual_pipeline  # later stages wait for the earlier ones' last backward
    exposed_reduce = max(reduce * last_bucket, reduce - backward_s * (1 + drain))
    exposed_gather = max(gather * last_bucket, gather - forward_s * (1 + drain))
    return exposed_reduce + exposed_gather


# --- optimizer and offloading -----------------------------------------------------------------------------

def _optimizer_bytes_per_element(t: Training) -> float:
    """HBM traffic of one element of a GPU AdamW step: the main parameter and two moments read and written, the
    main gradient read, the model parameter written."""
    main = 0 if t.param_bytes == 4 else t.main_param_bytes
    return 2 * (main + t.exp_avg_bytes + t.exp_avg_sq_bytes) + 4 + t.param_bytes


def _host_link(hw: Hardware, ranks: int) -> tuple[float, float]:
    """Per-GPU copy bandwidth when all ``ranks`` of a node copy at once: the link's, or its share of host memory."""
    share = hw.host_memory_bytes_per_s / max(ranks, 1)
    return min(hw.d2h_bytes_per_s, share), min(hw.h2d_bytes_per_s, share)


def _optimizer_offload_seconds(t: Training, offload: Offload, hw: Hardware, moved: int,
                               gpu_step_s: float) -> float:
    """What the hybrid optimizer adds for ``moved`` offloaded elements: fp32 gradients down (4 bytes), the host
    AdamW step, fp32 parameters up (4 bytes). The GPU step of the rest runs meanwhile (its kernels follow the
    gradient copy on the stream while the host steps), so only the host step beyond it counts. Overlapped, the
    copies and the host step pipeline tensor by tensor and share the host's memory bandwidth."""
    if not moved:
        return 0.0
    ranks = min(hw.gpus_per_node, t.world_size)
    d2h_bw, h2d_bw = _host_link(hw, ranks)
    down, up = moved * 4 / d2h_bw, moved * 4 / h2d_bw
    host = moved / hw.host_adam_elements_per_s
    if offload.overlap_cpu_optimizer_d2h_h2d:
        memory = moved * (4 + 28 + 4) * ranks / hw.host_memory_bytes_per_s
        return max(down, up, host - gpu_step_s, memory)
    return down + max(0.0, host - gpu_step_s) + up


def _activation_exposure(t: Training, offload: Offload, hw: Hardware, layer_forward_s: float,
                         stage: StageMemory) -> float:
    """Copy time beyond the compute it overlaps, over the step: each offloaded layer's saved tensors go down
    during the next layer's forward and come back during the backward of the layer after it."""
    if not (offload.cpu_offloading_num_layers or offload.offload_modules):
        return 0.0
    per_microbatch = stage.activation_offloaded_bytes_per_microbatch
    if not per_microbatch:
        return 0.0
    layers_per_gpu = t.shape.num_layers / t.par.pipeline
    layers = offload.cpu_offloading_num_layers or max(1, round(layers_per_gpu) - 1)
    per_layer = per_microbatch / layers
    d2h_bw, h2d_bw = _host_link(hw, min(hw.gpus_per_node, t.world_size))
    exposed = max(0.0, per_layer / d2h_bw - layer_forward_s) + max(0.0, per_layer / h2d_bw - 2 * layer_forward_s)
    return exposed * layers * t.num_microbatches


# --- efficiency ---------------------------------------------------------------------------------------------

def family(t: Training) -> str:
    """The model family an efficiency is published for: hybrid (Mamba), mla (multi-latent attention), moe, dense."""
    if t.shape.hybrid is not None:
        return "hybrid"
    if t.shape.mla is not None:
        return "mla"
    return "moe" if t.shape.moe is not None else "dense"


@functools.cache
def efficiency_table() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(EFFICIENCY_DATA.read_text(encoding="utf-8"))
    return loaded


# Where a family has no row of its own, the closest that has: a hybrid's attention/MLP layers and Mamba mixers
# are dense matmuls; MLA models here are MoE models.
_FAMILY_FALLBACK = {"hybrid": ("dense", "moe"), "mla": ("moe", "dense"), "moe": ("mla", "dense"),
                    "dense": ("moe",)}


def efficiency_for(t: Training, hw: Hardware, precision: str = "bf16") -> tuple[float, str]:
    """The compute efficiency for ``t`` on ``hw`` at ``precision``, and where it came from.

    In order: the published rows of the job's family on this system at this precision; at FP8 (a BF16 job
    taken as FP8 / 1.35, the middle of the 1.2-1.5x FP8 speed-up Bridge documents); the same on other systems
    (an efficiency is a share of each system's own peak); then the nearest family's.

    A deterministic job (``Training.deterministic``) takes the deterministic-mode rows of its family, system and
    precision where there are any, and nothing else of theirs: what deterministic kernels cost differs by system
    (Megatron-LM's deterministic CI runs the same 7B job far further below the general efficiency on GB200 than on
    H100; the rows are in checks/data/efficiency.json), so no other system's stands in. Without one it takes the
    general efficiency, and says so.
    """
    entries = efficiency_table()["entries"]
    system = base_name(hw)
    own = family(t)

    def find(fam: str, sys_: str | None, prec: str, mode: str | None = None) -> list[dict[str, Any]]:
        return [e for e in entries if e["family"] == fam and e["precision"] == prec and e.get("mode") == mode
                and (sys_ is None or e["system"] == sys_)]

    def listed(found: list[dict[str, Any]]) -> str:
        return ", ".join(f"{e['family']}/{e['system']}/{e['precision']}{'/' + e['mode'] if e.get('mode') else ''} "
                         f"{e['efficiency']:.3f} (median of {len(e['rows'])} rows)" for e in found)

    deterministic_note = ""
    if t.deterministic:
        found = find(own, system, precision, "deterministic")
        if found:
            value = statistics.median(e["efficiency"] for e in found)
            return value, (f"{value:.3f} of dense bf16 peak from deterministic-mode training throughput "
                           f"(checks/data/efficiency.json: {listed(found)})")
        measured = sorted({e["system"] for e in entries if e.get("mode") == "deterministic"})
        deterministic_note = (f"deterministic mode: no deterministic-mode {own} {precision} row on {system} (measured "
                              f"on {', '.join(measured) or 'no system'}): the general efficiency, which such a job "
                              "may not reach")

    for fam in (own, *_FAMILY_FALLBACK.get(own, ())):
        for sys_ in (system, None):
            fp8 = (("fp8", 1 / FP8_SPEEDUP), ("mxfp8", 1 / FP8_SPEEDUP)) if precision == "bf16" else ()
            for prec, scale in ((precision, 1.0), *fp8):
                found = find(fam, sys_, prec)
                if not found:
                    continue
                value = statistics.median(e["efficiency"] for e in found) * scale
                where = listed(found)
                notes = [deterministic_note] if deterministic_note else []
                if fam != own:
                    notes.append(f"no published {own} row: the {fam} family's")
                if sys_ is None:
                    notes.append(f"no {fam} row on {system}: other systems'")
                if scale != 1.0:
                    notes.append(f"no {precision} row: {prec} / {FP8_SPEEDUP} (Megatron-Bridge@067f987d:"
                                 "docs/performance-guide.md:17, FP8 1.2-1.5x)")
                note = "; ".join(notes)
                return value, (f"{value:.3f} of dense bf16 peak from published training throughput "
                               f"(checks/data/efficiency.json: {where})" + (f"; {note}" if note else ""))
    raise ValueError(f"checks/data/efficiency.json has no row for {own} at {precision}")


# --- the step -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Stage:
    work: _Work
    compute_mb: float  # one micro-batch: forward + backward + recompute at the efficiency
    all_to_all_mb: float
    tensor_parallel_mb: float
    forward_mb: float
    backward_mb: float
    host_mb: float  # what the host needs to issue one micro-batch's eager MoE layers

    @property
    def gpu(self) -> float:
        return self.compute_mb + self.all_to_all_mb + self.tensor_parallel_mb

    @property
    def chunk(self) -> float:
        return max(self.gpu, self.host_mb)


def step_time(t: Training, offload: Offload, hw: Hardware, efficiency: float | None = None, *,
              memory: Sequence[StageMemory] | None = None, precision: str = "bf16") -> StepTime:
    """Each pipeline stage's step time for ``t`` with ``offload`` on ``hw``.

    ``efficiency``: None for the published one (:func:`efficiency_for`), or a share of the dense bf16 peak
    (``--mfu``). ``memory``: the stages' :func:`stage_memory` when the caller has them already.
    """
    if efficiency is None:
        efficiency, source = efficiency_for(t, hw, precision)
    else:
        source = f"{efficiency:.3f} of dense bf16 peak, as given (--mfu)"
    if not efficiency > 0:
        raise ValueError("the compute efficiency must be positive")
    rate = hw.bf16_flops * efficiency
    pp, vpp, m = t.par.pipeline, t.par.virtual_pipeline, t.num_microbatches
    memory = list(memory) if memory is not None else [stage_memory(t, s, offload) for s in range(pp)]
    stages = []
    for s in range(pp):
        work = _stage_work(t, s)
        stages.append(_Stage(work, (3 * work.forward_flops + work.recompute_flops) / rate,
                             _all_to_all_seconds(t, hw, work), _tensor_parallel_seconds(t, hw, work),
                             work.forward_flops / rate,
                             (2 * work.forward_flops + work.recompute_flops) / rate,
                             work.moe_layers * hw.moe_layer_host_s if t.moe_host_sync else 0.0))
    chunks = [st.chunk for st in stages]
    # 1F1B (interleaved or not): the slowest stage's m chunks, plus the others' fill and drain over vpp.
    pipe = m * max(chunks) + (sum(chunks) - max(chunks)) / vpp if pp > 1 else m * chunks[0]
    out = []
    for s, st in enumerate(stages):
        mem = memory[s]
        gpu_elements = max(0, mem.optimizer_elements - mem.optimizer_offloaded_elements)
        gpu_step = (gpu_elements * _optimizer_bytes_per_element(t)
                    + (st.work.dense_numel + st.work.expert_numel) * t.grad_bytes) / hw.hbm_bytes_per_s
        layer_forward = st.forward_mb / max(st.work.layers, 1)
        out.append(StageTime(
            stage=s, compute_s=m * st.compute_mb, bubble_s=max(0.0, pipe - m * st.chunk),
            host_wait_s=m * (st.chunk - st.gpu),
            expert_all_to_all_s=m * st.all_to_all_mb, tensor_parallel_s=m * st.tensor_parallel_mb,
            data_parallel_s=_data_parallel_seconds(t, hw, s, st.work, st.forward_mb, st.backward_mb),
            optimizer_s=gpu_step,
            optimizer_offload_s=_optimizer_offload_seconds(t, offload, hw, mem.optimizer_offloaded_elements,
                                                           gpu_step),
            activation_offload_s=_activation_exposure(t, offload, hw, layer_forward, mem)))
    step = StepTime(tuple(out), efficiency, source)
    return replace(step, host_note=_host_note(step.slowest, hw))


def _host_note(slowest: StageTime, hw: Hardware) -> str:
    """What a user should know when the host floor holds the slowest stage back: how much, from what, what
    shortens it, and what the estimate leaves out: the host time of a recomputed forward, without which the one
    published recompute-heavy eager job, the offload card's, is predicted 18% over
    (reference/benchmarks/planner_validation.json); a share of a layer's host time added per recompute would put it
    further over."""
    if slowest.host_wait_s <= 0:
        return ""
    return (f"eager MoE layers: the GPU waits {slowest.host_wait_s * 1e3:,.0f} ms a step for the host to issue "
            f"them (at least {hw.moe_layer_host_s * 1e3:.1f} ms per MoE layer and micro-batch, the dispatcher "
            "waiting for its token counts on the host); work added under that wait, such as recompute, costs no "
            "time in this estimate, though the recomputed forward's own host time is not priced; CUDA graphs of "
            "the MoE router and preprocessing shorten the wait (megatron/core/transformer/moe/README.md:254-262)")


def invert_efficiency(t: Training, hw: Hardware, step_s: float, offload: Offload | None = None) -> float | None:
    """The efficiency at which :func:`step_time` gives ``step_s`` for ``t`` (None if even an efficiency of 8 is
    slower: what the model prices besides compute already exceeds the measurement). Above 1 for low precisions
    (FP8 and FP4 peaks are 2x and 4x the bf16 peak an efficiency is a share of). Bisection: the step only
    shortens as the efficiency grows."""
    offload = offload or Offload()
    memory = [stage_memory(t, s, offload) for s in range(t.par.pipeline)]

    def step(e: float) -> float:
        return step_time(t, offload, hw, e, memory=memory).step_s

    if step(8.0) > step_s:
        return None
    low, high = 1e-4, 8.0
    for _ in range(60):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if step(middle) > step_s else (low, middle)
    return (low + high) / 2


# --- the old estimate (recommend.py until it moves to step_time) ----------------------------------------------

@dataclass(frozen=True)
class StepCost:
    compute_s: float  # the step without offloading
    optimizer_offload_s: float
    activation_offload_s: float

    @property
    def overhead_s(self) -> float:
        return self.optimizer_offload_s + self.activation_offload_s

    @property
    def slowdown(self) -> float:
        """Extra time as a share of the step: 0.1 is 10% slower."""
        return self.overhead_s / self.compute_s if self.compute_s else 0.0


def step_cost(t: Training, offload: Offload, hw: Hardware, mfu: float = DEFAULT_MFU,
              overlap_optimizer: bool = False, stage: StageMemory | None = None) -> StepCost:
    """The first estimate: compute at one model-FLOPs utilisation, the offload copies and host step on top."""
    compute = step_flops(t) / t.world_size / (hw.bf16_flops * mfu)
    stage = stage or stage_memory(t, 0, offload)
    moved = stage.optimizer_offloaded_elements
    down, up = moved * 4 / hw.d2h_bytes_per_s, moved * 4 / hw.h2d_bytes_per_s
    host = moved / hw.host_adam_elements_per_s
    optimizer = max(down, host, up) if overlap_optimizer else down + host + up
    layers_per_gpu = t.shape.num_layers / t.par.pipeline
    layer_forward = compute / t.num_microbatches / max(layers_per_gpu, 1) / 3
    return StepCost(compute, optimizer if moved else 0.0, _activation_exposure(t, offload, hw, layer_forward, stage))
