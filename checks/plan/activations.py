"""Bytes a transformer layer saves for backward, tensor by tensor, per implementation.

Each profile lists the *storages* autograd keeps alive for one layer, per token of the micro-batch,
as :class:`Term`\\ s: a tensor saved twice, or several views of one storage, count once, which is
how the memory is really held. Where a term is sequence-sharded or tensor-parallel, the profile
divides it for this GPU. A term's ``module`` is the Megatron-Core fine-grained offload module whose
region saves it ("" for tensors no module name covers).

Profiles:

- ``megatron_te``: Megatron-Core with the Transformer Engine layer spec, the planner's default. Derived
  from the sources cited at each term; Transformer Engine does not run without a GPU, so it is not
  measured here.
- ``hf_llama``, ``hf_qwen3_moe``: Hugging Face ``transformers`` (5.x) Llama and Qwen3-MoE decoder layers
  in fp32 with SDPA attention; ``example_gpt``: ``examples/gpt.py``. These run on CPU, and
  ``tests/test_activations.py`` compares them with the bytes measured by saved-tensor accounting.

Symbols, per layer: ``h`` hidden size, ``q = heads x head_dim``, ``kv = kv_heads x head_dim``, ``f`` the
dense MLP's intermediate size, ``E`` experts, ``k`` experts per token, ``fm`` the expert intermediate
size, ``t`` the tensor-parallel size.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

FP32, BF16, INT64, BYTE = 4, 2, 8, 1


@dataclass(frozen=True)
class Dims:
    """One layer's dimensions."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int  # dense MLP intermediate size (0 in an MoE layer without a dense MLP)
    gated: bool = True  # SwiGLU-style MLP: fc1 produces 2 x ffn
    layernorm: bool = False  # LayerNorm (a mean as well as a scale) rather than RMSNorm
    qk_norm: bool = False
    rope: bool = True
    experts: int = 0  # 0: a dense layer
    top_k: int = 0
    moe_ffn: int = 0
    shared_ffn: int = 0  # shared experts' intermediate size, 0 for none

    @property
    def q(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv(self) -> int:
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Term:
    """One storage saved for backward: elements per token of the micro-batch on this GPU, and their size."""

    module: str  # the fine-grained offload module whose region saves it, or ""
    name: str
    numel: float  # elements per token
    itemsize: int  # bytes per element

    @property
    def bytes_per_token(self) -> float:
        return self.numel * self.itemsize


def bytes_per_token(terms: Iterable[Term]) -> float:
    return sum(t.bytes_per_token for t in terms)


def by_module(terms: Iterable[Term]) -> dict[str, float]:
    """Bytes per token grouped by offload module ("" for the rest)."""
    out: dict[str, float] = {}
    for term in terms:
        out[term.module] = out.get(term.module, 0.0) + term.bytes_per_token
    return out


# --- Megatron-Core + Transformer Engine ------------------------------------------------------------

@dataclass(frozen=True)
class Parallel:
    """What divides a layer's activations on one GPU."""

    tp: int = 1
    sequence_parallel: bool = False
    ep: int = 1
    etp: int = 1

    @property
    def sp(self) -> int:
        """Divisor of the sequence-sharded terms (norm inputs, residuals, dropout masks)."""
        return self.tp if self.sequence_parallel else 1


def megatron_te(d: Dims, par: Parallel = Parallel(), *, seq_len: int = 0, flash: bool = True,
                hidden_dropout: bool = False, attention_dropout: bool = False,
                recompute_core_attn: bool = False, capacity_factor: float = 1.0) -> list[Term]:
    """One Megatron-Core layer with the Transformer Engine spec, bf16 activations.

    Sources, NVIDIA/Megatron-LM@5be96267 (core_v0.19.2) and NVIDIA/TransformerEngine@769ed778 (v2.10):

    - The norms are fused into the next linear (``TELayerNormColumnParallelLinear``), which saves the
      norm's input, its output and the fp32 ``rsigma`` (and ``mu`` for LayerNorm), the first two as the
      local sequence shard under sequence parallelism (TE ``module/layernorm_linear.py:466-476``,
      gathering ``ln_out`` again in backward, :416). So the ``attn_norm``/``mlp_norm`` regions save
      nothing of their own (rule FGA014) and the bytes belong to ``qkv_linear``/the MLP's fc1.
    - q, k and v are views of the fused qkv projection's output (``transformer/attention.py``,
      ``get_query_key_value_tensors``); rotary embedding writes new q and k, and the v view keeps the
      whole qkv output alive. The fused attention saves q, k, v, its output and the fp32 softmax
      statistics (TE ``attention/dot_product_attention/backends.py:1316-1332``); the output is the
      projection's input (``transformer/attention.py``, ``linear_proj``), the same storage.
    - The MLP activation saves its input (fc1's output; ``fusions/fused_bias_swiglu.py``,
      ``fused_bias_gelu.py``), fc2 saves its input (TE ``module/linear.py``).
    - MoE layers (``transformer/moe/``): a separate pre-MLP norm (``TENorm``) saves its input and
      statistics; the router saves its input and fp32 probabilities; after the all-to-all each GPU holds
      about ``tokens x k / t`` routed rows (balanced routing, times the capacity factor when tokens are
      padded), replicated ``etp`` times with ``fm / etp`` columns; ``TEGroupedMLP`` saves fc1's input,
      the activation's input and fc2's input; shared experts are a dense MLP.
    - Unfused attention (``flash=False``) also keeps the softmax output, ``heads x seq_len`` per token,
      with a dropout mask and the dropped probabilities when attention dropout is on (Korthikanti et al.
      2022, Table 2: 5as/h); a bias-dropout-add keeps a 1-byte mask per element when hidden dropout is on.
    - Selective recompute of ``core_attn`` saves only the attention inputs; the statistics (flash) or
      the scores (unfused) are recomputed.
    """
    t, sp = par.tp, par.sp
    norm_stats = FP32 * (2 if d.layernorm else 1)
    terms = [
        Term("qkv_linear", "norm input", d.hidden / sp, BF16),
        Term("qkv_linear", "norm statistics", norm_stats / sp / BF16, BF16),
        Term("qkv_linear", "norm output (qkv input)", d.hidden / sp, BF16),
        Term("core_attn", "qkv projection output (held by the v view)", (d.q + 2 * d.kv) / t, BF16),
    ]
    if d.rope:
        terms.append(Term("core_attn", "rotated q and k", (d.q + d.kv) / t, BF16))
    if not recompute_core_attn:
        if flash:
            terms.append(Term("core_attn", "softmax statistics (fp32)", d.heads / t, FP32))
        else:
            scores = d.heads * seq_len / t
            terms.append(Term("core_attn", "softmax output", scores, BF16))
            if attention_dropout:
                terms += [Term("core_attn", "attention dropout mask", scores, BYTE),
                          Term("core_attn", "dropped probabilities", scores, BF16)]
    terms.append(Term("attn_proj", "attention output (projection input)", d.q / t, BF16))
    if hidden_dropout:
        terms.append(Term("", "dropout mask after attention", d.hidden / sp, BYTE))
    if d.experts:
        terms += _megatron_moe(d, par, capacity_factor)
    else:
        terms += _megatron_mlp(d, d.ffn, t, norm_sp=sp)
    if hidden_dropout:
        terms.append(Term("", "dropout mask after the MLP", d.hidden / sp, BYTE))
    return terms


def _megatron_mlp(d: Dims, ffn: int, t: int, norm_sp: int | None) -> list[Term]:
    """``norm_sp``: the sequence-parallel split of the pre-MLP norm fused into fc1 (TE's LayerNormMLP); None where
    fc1 takes its input without a norm of its own (a shared expert reads the MoE layer's norm output)."""
    fc1 = ffn * (2 if d.gated else 1)
    terms = []
    if norm_sp is not None:
        terms += [Term("", "pre-MLP norm input", d.hidden / norm_sp, BF16),
                  Term("", "pre-MLP norm statistics", FP32 * (2 if d.layernorm else 1) / norm_sp / BF16, BF16),
                  Term("", "norm output (fc1 input)", d.hidden / norm_sp, BF16)]
    return terms + [Term("", "fc1 output (activation input)", fc1 / t, BF16),
                    Term("", "activation output (fc2 input)", ffn / t, BF16)]


def _megatron_moe(d: Dims, par: Parallel, capacity_factor: float) -> list[Term]:
    sp = par.sp
    rows = d.top_k * capacity_factor / par.tp * par.etp  # routed rows per local token, after the all-to-all
    fm = d.moe_ffn / par.etp
    fc1 = fm * (2 if d.gated else 1)
    terms = [
        Term("mlp_norm", "pre-MLP norm input", d.hidden / sp, BF16),
        Term("mlp_norm", "pre-MLP norm statistics", FP32 * (2 if d.layernorm else 1) / sp / BF16, BF16),
        Term("", "router input (norm output)", d.hidden / sp, BF16),
        Term("", "router probabilities (fp32)", d.experts / sp, FP32),
        Term("expert_fc1", "routed tokens (fc1 input)", rows * d.hidden, BF16),
        Term("moe_act", "fc1 output (activation input)", rows * fc1, BF16),
        Term("", "activation output (fc2 input)", rows * fm, BF16),
    ]
    if d.shared_ffn:
        terms += [Term("", f"shared expert {t.name}", t.numel, t.itemsize)
                  for t in _megatron_mlp(d, d.shared_ffn, par.tp, norm_sp=None)]
    return terms


# --- implementations measured on CPU ----------------------------------------------------------------

def hf_llama(d: Dims) -> list[Term]:
    """``transformers`` 5.x ``LlamaDecoderLayer``, fp32, SDPA attention (CPU flash kernel).

    ``LlamaRMSNorm`` saves its input, ``rsqrt`` and the normalised input (the weight multiply); the
    projections save the weighted output (one storage for q, k and v); rotary embedding writes new q and
    k; SDPA saves q, k, v, ``logsumexp`` and an output laid out so that the projection's input is the
    same storage; the gated MLP saves the gate, ``silu(gate)``, the up projection and their product.
    The rotary ``cos``/``sin`` tables are shared by all layers (``per_model_hf_rope``).
    """
    norm = [Term("", "norm input", d.hidden, FP32), Term("", "rsqrt", 1, FP32),
            Term("", "normalised input", d.hidden, FP32), Term("", "weighted output", d.hidden, FP32)]
    return [
        *[Term("attn_norm", t.name, t.numel, t.itemsize) for t in norm],
        Term("core_attn", "rotated q", d.q, FP32),
        Term("core_attn", "rotated k", d.kv, FP32),
        Term("core_attn", "v projection output", d.kv, FP32),
        Term("core_attn", "logsumexp", d.heads, FP32),
        Term("attn_proj", "attention output", d.q, FP32),
        *[Term("mlp_norm", t.name, t.numel, t.itemsize) for t in norm],
        Term("", "gate", d.ffn, FP32), Term("", "silu(gate)", d.ffn, FP32),
        Term("", "up", d.ffn, FP32), Term("", "silu(gate) x up", d.ffn, FP32),
    ]


def per_model_hf_rope(seq_len: int, head_dim: int) -> float:
    """Bytes of the ``cos`` and ``sin`` tables ``transformers`` computes once per forward, shape (1, S, d)."""
    return 2 * seq_len * head_dim * FP32


def hf_qwen3_moe(d: Dims) -> list[Term]:
    """``transformers`` 5.x ``Qwen3MoeDecoderLayer``, fp32, SDPA, every layer sparse.

    As :func:`hf_llama` for attention, plus per-head q/k RMSNorms (input, ``rsqrt``, normalised value);
    the sparse block saves the router softmax, the top-k indices (int64) and renormalised weights, and,
    over the ``k`` rows per token that the grouped GEMMs run on: the gathered input, the fused gate/up
    output, ``silu(gate)``, the product fed to the down projection, the down output and the routing
    weight it is scaled by; the grouped GEMMs' ``offs`` are one int32 per expert per layer
    (``per_layer_qwen3_moe``).
    """
    k = d.top_k
    return [
        *hf_llama(Dims(d.hidden, d.heads, d.kv_heads, d.head_dim, 0))[:5],  # attention norm (4) and rotated q
        Term("core_attn", "q before its norm", d.q, FP32), Term("core_attn", "q rsqrt", d.heads, FP32),
        Term("core_attn", "q normalised", d.q, FP32),
        Term("core_attn", "rotated k", d.kv, FP32),
        Term("core_attn", "k before its norm", d.kv, FP32), Term("core_attn", "k rsqrt", d.kv_heads, FP32),
        Term("core_attn", "k normalised", d.kv, FP32),
        Term("core_attn", "v projection output", d.kv, FP32),
        Term("core_attn", "logsumexp", d.heads, FP32),
        Term("attn_proj", "attention output", d.q, FP32),
        Term("mlp_norm", "norm input", d.hidden, FP32), Term("mlp_norm", "rsqrt", 1, FP32),
        Term("mlp_norm", "normalised input", d.hidden, FP32), Term("mlp_norm", "weighted output", d.hidden, FP32),
        Term("", "router softmax", d.experts, FP32),
        Term("", "top-k indices", k, INT64),
        Term("", "top-k weights and their sum", k + 1, FP32),
        Term("expert_fc1", "gathered rows", k * d.hidden, FP32),
        Term("moe_act", "gate/up output", k * 2 * d.moe_ffn, FP32),
        Term("", "silu(gate)", k * d.moe_ffn, FP32),
        Term("", "down projection input", k * d.moe_ffn, FP32),
        Term("", "down projection output", k * d.hidden, FP32),
        Term("", "routing weights", k, FP32),
    ]


def per_layer_qwen3_moe(experts: int) -> float:
    """Bytes per layer independent of the tokens: the grouped GEMMs' int32 ``offs``."""
    return experts * 4


def example_gpt(d: Dims) -> list[Term]:
    """``examples/gpt.py``'s ``Block``: LayerNorm, one qkv linear, SDPA, and a GELU MLP or top-k MoE.

    ``native_layer_norm`` saves its input, mean and rstd; q, k, v are views of the qkv output; the dense
    MLP saves fc1's input, GELU's input and fc2's input; the MoE saves the router softmax and top-k
    indices, the gathered rows, GELU's input and output, the experts' stacked output, its routing weights
    and the ``index_add`` source and indices.
    """
    norm = [Term("", "input", d.hidden, FP32), Term("", "mean and rstd", 2, FP32)]
    terms = [
        *[Term("attn_norm", t.name, t.numel, t.itemsize) for t in norm],
        Term("qkv_linear", "norm output", d.hidden, FP32),
        Term("core_attn", "qkv output (q, k, v views)", d.q + 2 * d.kv, FP32),
        Term("core_attn", "logsumexp", d.heads, FP32),
        Term("attn_proj", "attention output", d.q, FP32),
        *[Term("mlp_norm", t.name, t.numel, t.itemsize) for t in norm],
        Term("", "norm output", d.hidden, FP32),
    ]
    if not d.experts:
        return terms + [Term("", "GELU input", d.ffn, FP32), Term("", "fc2 input", d.ffn, FP32)]
    k = d.top_k
    return terms + [
        Term("", "router softmax", d.experts, FP32), Term("", "top-k indices", k, INT64),
        Term("expert_fc1", "gathered rows", k * d.hidden, FP32),
        Term("moe_act", "GELU input", k * d.moe_ffn, FP32), Term("", "GELU output", k * d.moe_ffn, FP32),
        Term("", "experts' output", k * d.hidden, FP32), Term("", "routing weights", k, FP32),
        Term("", "index_add source", k * d.hidden, FP32), Term("", "index_add indices", k, INT64),
    ]


# --- Megatron-Core layers the validation models do not have: estimates from source ------------------

def megatron_mla(d: Dims, mla_q_lora: int, kv_lora: int, qk_nope: int, qk_rope: int, v_head: int,
                 par: Parallel = Parallel()) -> list[Term]:
    """The attention half of a multi-latent-attention layer (``transformer/multi_latent_attention.py``).

    An estimate from the module structure, unmeasured: a separate input norm (input, statistics,
    output), the replicated down projections' input, the latent norms fused into the up projections
    (input, output, statistics), the up projections' outputs, rotated q and the concatenated k, the
    fused attention's output and statistics. Selective recompute of ``mla_up_proj`` (DeepSeek recipes)
    is not modelled.
    """
    t, sp, heads = par.tp, par.sp, d.heads
    qk = qk_nope + qk_rope
    stats = FP32 / BF16
    terms = [
        Term("attn_norm", "input norm input", d.hidden / sp, BF16),
        Term("attn_norm", "input norm statistics", stats / sp, BF16),
        Term("qkv_linear", "down projections' input", d.hidden, BF16),
        Term("qkv_linear", "kv down projection output", kv_lora + qk_rope, BF16),
        Term("qkv_linear", "kv latent norm output and statistics", kv_lora + stats, BF16),
    ]
    if mla_q_lora:
        terms += [Term("qkv_linear", "q down projection output", mla_q_lora, BF16),
                  Term("qkv_linear", "q latent norm output and statistics", mla_q_lora + stats, BF16)]
    return terms + [
        Term("core_attn", "q up projection output", heads * qk / t, BF16),
        Term("core_attn", "kv up projection output", heads * (qk_nope + v_head) / t, BF16),
        Term("core_attn", "rotated q and concatenated k", 2 * heads * qk / t, BF16),
        Term("core_attn", "softmax statistics (fp32)", heads / t, FP32),
        Term("attn_proj", "attention output (projection input)", heads * v_head / t, BF16),
    ]


def megatron_mamba(d: Dims, d_inner: int, state_dim: int, num_groups: int, mamba_heads: int,
                   par: Parallel = Parallel(), chunk_size: int = 128) -> list[Term]:
    """One Mamba-2 layer of a hybrid model (``ssm/mamba_mixer.py``, ``mamba_ssm`` chunked scan).

    An estimate from the module structure, unmeasured: the norm fused into ``in_proj`` (input, output,
    statistics), ``in_proj``'s output (z, x, B, C, dt; the views the conv and scan keep), the
    convolution's output, the scan's output and its fp32 chunk states, the gated norm's output
    (``out_proj``'s input).
    """
    t, sp = par.tp, par.sp
    groups_state = 2 * num_groups * state_dim
    return [
        Term("", "norm input", d.hidden / sp, BF16),
        Term("", "norm statistics", FP32 / BF16 / sp, BF16),
        Term("", "norm output (in_proj input)", d.hidden / sp, BF16),
        Term("", "in_proj output (z, x, B, C, dt)", (2 * d_inner + groups_state + mamba_heads) / t, BF16),
        Term("", "convolution output", (d_inner + groups_state) / t, BF16),
        Term("", "scan chunk states (fp32)", d_inner * state_dim / chunk_size / t, FP32),
        Term("", "scan output", d_inner / t, BF16),
        Term("", "gated norm output (out_proj input)", d_inner / t, BF16),
    ]

