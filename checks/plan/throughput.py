"""What offloading costs per training step: copies over the host link and the host optimizer step.

A step's compute time is estimated from its FLOPs at an assumed model-FLOPs utilisation; offloading
adds only what it cannot hide:

- optimizer offload runs after backward, on the critical path: fp32 gradients go down, the host AdamW
  runs, fp32 masters come back (``hybrid_optimizer.py``); with ``overlap_cpu_optimizer_d2h_h2d`` the three
  pipeline tensor by tensor, so the slowest of them sets the time, otherwise they add up;
- activation offload copies a layer's (or module's) saved tensors during the next layer's forward and
  reloads them during the following layer's backward; only copy time beyond that compute is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.plan.hardware import Hardware
from checks.plan.memory import Offload, StageMemory, Training, stage_memory

DEFAULT_MFU = 0.4  # model-FLOPs utilisation assumed for the compute estimate (override with --mfu)


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


def active_parameters_per_token(t: Training) -> float:
    """Weights each token multiplies (matmul weights only; MoE layers count top-k experts and shared ones)."""
    s = t.shape
    h = s.hidden_size
    q = s.num_attention_heads * s.kv_channels
    kv = s.num_query_groups * s.kv_channels
    attention = h * (q + 2 * kv) + q * h
    if s.mla is not None:
        m = s.mla
        qk = m.qk_head_dim + m.qk_pos_emb_head_dim
        heads = s.num_attention_heads
        q_part = (h * m.q_lora_rank + m.q_lora_rank * heads * qk) if m.q_lora_rank else h * heads * qk
        attention = q_part + h * (m.kv_lora_rank + m.qk_pos_emb_head_dim) \
            + m.kv_lora_rank * heads * (m.qk_head_dim + m.v_head_dim) + heads * m.v_head_dim * h
    gate = 3 if s.gated_linear_unit else 2
    dense_mlp = gate * h * s.ffn_hidden_size
    total = 0.0
    for layer in range(s.num_layers):
        kind = s.layer_kind(layer)
        if kind == "M":
            hy = s.hybrid
            assert hy is not None
            total += h * (2 * hy.d_inner + 2 * hy.num_groups * hy.state_dim + hy.num_heads) + hy.d_inner * h
            continue
        if kind in ("A", "AE", "*"):
            total += attention
        if kind in ("A", "-"):
            total += dense_mlp
        elif kind in ("AE", "E") and s.moe is not None:
            total += t.moe_top_k * gate * h * s.moe.ffn_hidden_size + gate * h * s.moe.shared_expert_size \
                + h * s.moe.num_experts
    return total + h * s.vocab_size  # the output layer


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


def step_cost(t: Training, offload: Offload, hw: Hardware, mfu: float = DEFAULT_MFU,
              overlap_optimizer: bool = False, stage: StageMemory | None = None) -> StepCost:
    compute = step_flops(t) / t.world_size / (hw.bf16_flops * mfu)
    stage = stage or stage_memory(t, 0, offload)
    moved = stage.optimizer_offloaded_elements
    down, up = moved * 4 / hw.d2h_bytes_per_s, moved * 4 / hw.h2d_bytes_per_s
    host = moved / hw.host_adam_elements_per_s
    optimizer = max(down, host, up) if overlap_optimizer else down + host + up
    return StepCost(compute, optimizer if moved else 0.0, _activation_exposure(t, offload, hw, compute, stage))


def _activation_exposure(t: Training, offload: Offload, hw: Hardware, compute_s: float,
                         stage: StageMemory) -> float:
    """Copy time beyond the compute it overlaps: a layer's forward is a third of its step share."""
    if not (offload.cpu_offloading_num_layers or offload.offload_modules):
        return 0.0
    layers_per_gpu = t.shape.num_layers / t.par.pipeline
    per_layer_s = compute_s / t.num_microbatches / max(layers_per_gpu, 1)
    forward_s, backward_s = per_layer_s / 3, per_layer_s * 2 / 3
    per_microbatch = stage.activation_offloaded_bytes_per_microbatch
    if not per_microbatch:
        return 0.0
    layers = offload.cpu_offloading_num_layers or max(1, round(layers_per_gpu) - 1)
    per_layer = per_microbatch / layers
    exposed = max(0.0, per_layer / hw.d2h_bytes_per_s - forward_s) \
        + max(0.0, per_layer / hw.h2d_bytes_per_s - backward_s)
    return exposed * layers * t.num_microbatches
