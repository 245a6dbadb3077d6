"""The parameter tensors of one pipeline stage, in ``named_parameters()`` order.

Sizes are per GPU: tensor-parallel linears are split along their parallel
dimension, row-parallel biases and norms are replicated, experts are divided
between expert-parallel ranks. Structure and registration order follow
megatron-core's ``GPTModel`` (NVIDIA/Megatron-LM@5be96267, core_v0.19.2):

- ``models/gpt/gpt_model.py``: ``embedding`` (word, then learned positions),
  ``decoder``, ``output_layer`` (no weight on the first stage when tied);
- ``transformer/transformer_layer.py``: ``input_layernorm``,
  ``self_attention``, ``pre_mlp_layernorm``, ``mlp``;
- ``transformer/attention.py``: ``linear_proj`` is registered before
  ``linear_qkv`` and the q/k norms;
- ``transformer/moe/moe_layer.py:259,326,338``: ``router``, ``experts``,
  ``shared_experts``; ``moe/router.py:61-69``: router weight and, with
  ``add_bias_linear``, bias; ``moe/shared_experts.py:134``: the gate weight,
  which ``named_parameters()`` yields before the module's children.

The Transformer Engine spec fuses the pre-attention norm into ``linear_qkv``
and the pre-MLP norm into a dense ``linear_fc1`` (``layer_norm_weight`` and,
for LayerNorm, ``layer_norm_bias``, registered before the linear's weight);
the local spec keeps them as separate modules. Only 1-D tensors move between
the two, and those sit in their own optimizer parameter group.
"""

from __future__ import annotations

from dataclasses import dataclass

from checks.model.shape import ModelShape, Parallelism


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor as this GPU holds it."""

    name: str  # as ``named_parameters()`` of its model chunk spells it
    numel: int
    expert: bool = False  # expert-parallel (an expert with EP > 1): optimised by the expert optimizer instance
    matrix: bool = True  # False for 1-D tensors (norms, biases)


@dataclass(frozen=True)
class Chunk:
    """One model chunk of a pipeline stage (a stage holds one per virtual pipeline stage)."""

    layers: range  # global layer indices
    first: bool  # holds the embedding
    last: bool  # holds the final norm and the output layer


def stage_chunks(num_layers: int, par: Parallelism) -> tuple[tuple[Chunk, ...], ...] | None:
    """The chunks of each pipeline stage, or None for a split megatron-core would refuse or we do not model.

    Interleaved (virtual) stages: chunk ``c`` of stage ``s`` is virtual stage ``c * pp + s``.
    """
    pp, vpp = par.pipeline, par.virtual_pipeline
    first, last = par.first_stage_layers, par.last_stage_layers
    if first is None and last is None:
        if num_layers % (pp * vpp):
            return None
        per_chunk = num_layers // (pp * vpp)
        return tuple(
            tuple(Chunk(range((c * pp + s) * per_chunk, (c * pp + s + 1) * per_chunk), s == 0 and c == 0,
                        s == pp - 1 and c == vpp - 1) for c in range(vpp))
            for s in range(pp))
    if vpp != 1 or pp < 2 or any(n is not None and n <= 0 for n in (first, last)):
        return None  # an uneven stage holds at least one layer (megatron-core refuses 0, transformer_config.py)
    counts: list[int | None] = [None] * pp
    counts[0], counts[-1] = first, last
    open_stages = counts.count(None)
    remaining = num_layers - sum(c for c in counts if c is not None)
    if remaining < 0 or (open_stages == 0 and remaining) or (open_stages and remaining % open_stages):
        return None
    sizes = [c if c is not None else remaining // open_stages for c in counts]
    starts = [sum(sizes[:i]) for i in range(pp)]
    return tuple((Chunk(range(starts[s], starts[s] + sizes[s]), s == 0, s == pp - 1),) for s in range(pp))


def chunk_tensors(shape: ModelShape, par: Parallelism, chunk: Chunk) -> tuple[Tensor, ...]:
    """Every trainable parameter of one model chunk, in registration order."""
    h, tp = shape.hidden_size, par.tensor
    out: list[Tensor] = []
    if chunk.first:
        out.append(Tensor("embedding.word_embeddings.weight", shape.vocab_size // tp * h))
        if shape.position_rows:
            out.append(Tensor("embedding.position_embeddings.weight", shape.position_rows * h))
    for local, layer in enumerate(chunk.layers):
        out += _layer(shape, par, f"decoder.layers.{local}.", layer)
    if chunk.last:
        out += _norm(shape, "decoder.final_layernorm.", h)
        if not (chunk.first and shape.tied_embeddings):
            out.append(Tensor("output_layer.weight", shape.vocab_size // tp * h))
    return tuple(out)


def _norm(shape: ModelShape, prefix: str, size: int, fused: bool = False) -> list[Tensor]:
    names = ("layer_norm_weight", "layer_norm_bias") if fused else ("weight", "bias")
    out = [Tensor(prefix + names[0], size, matrix=False)]
    if shape.layernorm_bias:
        out.append(Tensor(prefix + names[1], size, matrix=False))
    return out


def _linear(prefix: str, rows: int, cols: int, bias: int, expert: bool = False, suffix: str = "") -> list[Tensor]:
    out = [Tensor(f"{prefix}weight{suffix}", rows * cols, expert)]
    if bias:
        out.append(Tensor(f"{prefix}bias{suffix}", bias, expert, matrix=False))
    return out


def _layer(shape: ModelShape, par: Parallelism, prefix: str, layer: int) -> list[Tensor]:
    h, tp, te = shape.hidden_size, par.tensor, shape.transformer_engine
    kind = shape.layer_kind(layer)
    if kind == "M":
        return _mamba(shape, par, prefix + "mixer.")
    out: list[Tensor] = []
    if kind in ("A", "AE", "*"):
        out += _attention(shape, par, prefix)
    if kind in ("-", "A"):
        if not te:
            out += _norm(shape, prefix + "pre_mlp_layernorm.", h)
        out += _mlp(shape, prefix + "mlp.", shape.ffn_hidden_size // tp, fused_norm=te)
    elif kind in ("AE", "E"):
        out += _norm(shape, prefix + "pre_mlp_layernorm.", h)
        out += _moe(shape, par, prefix + "mlp.")
    return out


def _attention(shape: ModelShape, par: Parallelism, prefix: str) -> list[Tensor]:
    h, tp, te = shape.hidden_size, par.tensor, shape.transformer_engine
    attn = prefix + "self_attention."
    if shape.mla is not None:
        return _norm(shape, prefix + "input_layernorm.", h) + _mla(shape, par, attn)
    q = shape.num_attention_heads * shape.kv_channels
    qkv = (q + 2 * shape.num_query_groups * shape.kv_channels) // tp
    out: list[Tensor] = []
    if not te:
        out += _norm(shape, prefix + "input_layernorm.", h)
    out += _linear(attn + "linear_proj.", h, q // tp, h if shape.add_bias_linear else 0)
    if te:
        out += _norm(shape, attn + "linear_qkv.", h, fused=True)
    out += _linear(attn + "linear_qkv.", qkv, h, qkv if shape.add_bias_linear or shape.add_qkv_bias else 0)
    if shape.qk_layernorm:
        out += _norm(shape, attn + "q_layernorm.", shape.kv_channels)
        out += _norm(shape, attn + "k_layernorm.", shape.kv_channels)
    return out


def _mla(shape: ModelShape, par: Parallelism, prefix: str) -> list[Tensor]:
    """``MLASelfAttention`` with the Transformer Engine spec (``transformer/multi_latent_attention.py``).

    The down projections are replicated across tensor-parallel ranks; the up projections (with their
    fused latent norms) and the output projection are split. The order among them is approximate.
    """
    mla = shape.mla
    assert mla is not None
    h, tp, heads = shape.hidden_size, par.tensor, shape.num_attention_heads
    qk = mla.qk_head_dim + mla.qk_pos_emb_head_dim
    out = _linear(prefix + "linear_proj.", h, heads * mla.v_head_dim // tp, 0)
    if mla.q_lora_rank:
        out += _linear(prefix + "linear_q_down_proj.", mla.q_lora_rank, h, 0)
        out += _norm(shape, prefix + "linear_q_up_proj.", mla.q_lora_rank, fused=True)
        out += _linear(prefix + "linear_q_up_proj.", heads * qk // tp, mla.q_lora_rank, 0)
    else:
        out += _linear(prefix + "linear_q_proj.", heads * qk // tp, h, 0)
    out += _linear(prefix + "linear_kv_down_proj.", mla.kv_lora_rank + mla.qk_pos_emb_head_dim, h, 0)
    out += _norm(shape, prefix + "linear_kv_up_proj.", mla.kv_lora_rank, fused=True)
    out += _linear(prefix + "linear_kv_up_proj.", heads * (mla.qk_head_dim + mla.v_head_dim) // tp,
                   mla.kv_lora_rank, 0)
    return out


def _mamba(shape: ModelShape, par: Parallelism, prefix: str) -> list[Tensor]:
    """A Mamba-2 mixer (``ssm/mamba_mixer.py``): in_proj with its fused norm, conv1d, per-head SSM
    parameters, the gated norm and out_proj, tensor-parallel over heads. The order is approximate."""
    hy = shape.hybrid
    assert hy is not None
    h, tp = shape.hidden_size, par.tensor
    d_inner = hy.d_inner // tp
    groups_state = 2 * hy.num_groups * hy.state_dim // tp
    heads = hy.num_heads // tp
    conv = d_inner + groups_state
    return [
        *_norm(shape, prefix + "in_proj.", h, fused=True),
        Tensor(prefix + "in_proj.weight", (2 * d_inner + groups_state + heads) * h),
        Tensor(prefix + "conv1d.weight", conv * hy.conv_kernel),
        Tensor(prefix + "conv1d.bias", conv, matrix=False),
        Tensor(prefix + "dt_bias", heads, matrix=False),
        Tensor(prefix + "A_log", heads, matrix=False),
        Tensor(prefix + "D", heads, matrix=False),
        Tensor(prefix + "norm.weight", d_inner, matrix=False),
        Tensor(prefix + "out_proj.weight", h * d_inner),
    ]


def _mlp(shape: ModelShape, prefix: str, ffn: int, fused_norm: bool = False, expert: bool = False) -> list[Tensor]:
    """``MLP``: fc1 (doubled for gated units) and fc2; ``ffn`` is already divided by the parallel size."""
    h, bias = shape.hidden_size, shape.add_bias_linear
    fc1 = ffn * (2 if shape.gated_linear_unit else 1)
    out = _norm(shape, prefix + "linear_fc1.", h, fused=True) if fused_norm else []
    out += _linear(prefix + "linear_fc1.", fc1, h, fc1 if bias else 0, expert)
    out += _linear(prefix + "linear_fc2.", h, ffn, h if bias else 0, expert)
    return out


def _moe(shape: ModelShape, par: Parallelism, prefix: str) -> list[Tensor]:
    moe = shape.moe
    assert moe is not None
    h, bias = shape.hidden_size, shape.add_bias_linear
    out = _linear(prefix + "router.", moe.num_experts, h, moe.num_experts if bias else 0)
    local = moe.num_experts // par.expert
    ffn = moe.ffn_hidden_size // par.expert_tensor
    fc1 = ffn * (2 if shape.gated_linear_unit else 1)
    experts = prefix + "experts."
    # Expert weights leave the dense all-reduce (and optimizer) only with expert parallelism
    # (NVIDIA/Megatron-LM@55ac7082:megatron/core/extensions/transformer_engine.py:590,644).
    ep = par.expert > 1
    if moe.expert_layout == "grouped":  # TE GroupedLinear: weight{i}, bias{i} per expert (TE v2.10
        # transformer_engine/pytorch/module/grouped_linear.py:637-669)
        for name, rows, cols in (("linear_fc1.", fc1, h), ("linear_fc2.", h, ffn)):
            for e in range(local):
                out += _linear(f"{experts}{name}", rows, cols, rows if bias else 0, expert=ep, suffix=str(e))
    elif moe.expert_layout == "legacy":  # GroupedMLP: one weight per linear for all local experts, no bias
        out += [Tensor(experts + "weight1", h * fc1 * local, expert=ep),
                Tensor(experts + "weight2", ffn * local * h, expert=ep)]
    else:  # SequentialMLP: an MLP module per local expert
        for e in range(local):
            out += _mlp(shape, f"{experts}local_experts.{e}.", ffn, expert=ep)
    if moe.shared_expert_size:
        shared = prefix + "shared_experts."
        if moe.shared_expert_gate:  # a module's own parameters come before its children's
            out.append(Tensor(shared + "gate_weight", h))
        out += _mlp(shape, shared, moe.shared_expert_size // par.tensor)
    return out
