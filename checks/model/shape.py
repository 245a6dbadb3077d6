"""Model dimensions and parallel layout, as far as a config states them.

A prediction is only as good as the dimensions behind it, so :func:`shape_from`
answers :class:`ShapeUnknown` (naming what is missing or not modelled) rather
than guess: a Megatron Bridge override YAML leaves most dimensions to the
recipe's model provider, and NeMo-RL takes them from the Hugging Face
checkpoint. A Bridge ``run_config.yaml`` dump (it names the provider in
``model._target_`` and writes every field) and a complete Megatron-LM command
line state them all; a Bridge config must state each one explicitly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checks.context import Context

# Bridge model providers that build a plain ``GPTModel`` (what the parameter list models); others add vision
# towers, Mamba mixers, extra norms or sinks. AutoBridge dumps name GPTModelProvider for Llama, Qwen2/3 and
# Mixtral checkpoints (Megatron-Bridge@067f987d:src/megatron/bridge/models/gpt_provider.py:129).
_GPT_PROVIDERS = re.compile(r"(GPT|Mistral|Mixtral|OlMoE|Llama\d*|CodeLlama|Qwen(2|25|3)(MoE)?)ModelProvider\w*")
# Fields that change which tensors exist in ways the parameter list does not model.
_UNMODELLED_FIELDS: tuple[tuple[str, str], ...] = (
    ("model.multi_latent_attention", "multi-latent attention"),
    ("model.is_hybrid_model", "a hybrid (Mamba) model"),
    ("model.mtp_num_layers", "multi-token prediction layers"),
    ("model.heterogeneous_block_specs", "heterogeneous layer specs"),
    ("model.pipeline_model_parallel_layout", "an explicit pipeline layout"),
    ("model.account_for_embedding_in_pipeline_split", "accounting for the embedding in the pipeline split"),
    ("model.account_for_loss_in_pipeline_split", "accounting for the loss in the pipeline split"),
    ("model.experimental_attention_variant", "an experimental attention variant"),
    ("model.moe_single_grouped_weight", "single grouped expert weights"),
    ("model.moe_latent_size", "latent MoE projections"),
    ("model.use_transformer_engine_op_fuser", "Transformer Engine fused operations"),
    ("optimizer.decoupled_lr", "a decoupled learning rate (an extra parameter group)"),
)


@dataclass(frozen=True)
class MoEShape:
    """The mixture-of-experts part of a model."""

    num_experts: int
    ffn_hidden_size: int  # per expert
    shared_expert_size: int  # 0: no shared experts
    shared_expert_gate: bool
    layers: tuple[bool, ...]  # per layer: whether its MLP is an MoE layer
    expert_layout: str  # "grouped": a tensor per expert per linear (TE); "sequential": a module per expert;
    # "legacy": one tensor per linear for all local experts (GroupedMLP)


@dataclass(frozen=True)
class MLAShape:
    """Multi-latent attention (``MLATransformerConfig``): low-rank q and kv projections."""

    q_lora_rank: int  # 0: q is projected directly from the hidden state
    kv_lora_rank: int
    qk_head_dim: int  # the part of each head without rotary embedding
    qk_pos_emb_head_dim: int  # the rotary part
    v_head_dim: int


@dataclass(frozen=True)
class HybridShape:
    """A hybrid (Mamba) model's layer pattern and Mamba-2 mixer (``megatron/core/ssm/mamba_mixer.py``)."""

    pattern: str  # one character per layer: "M" Mamba, "*" attention, "-" MLP, "E" MoE
    state_dim: int
    head_dim: int
    num_heads: int
    num_groups: int
    conv_kernel: int = 4

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim


@dataclass(frozen=True)
class ModelShape:
    """A GPT-style model's dimensions, as megatron-core builds it (``GPTModel``, or ``MambaModel``)."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    ffn_hidden_size: int
    vocab_size: int  # rows of the embedding, padded as the front end pads it
    gated_linear_unit: bool
    add_bias_linear: bool
    add_qkv_bias: bool
    layernorm_bias: bool  # LayerNorm has a bias, RMSNorm does not
    qk_layernorm: bool
    tied_embeddings: bool
    position_rows: int  # learned absolute position embeddings: rows; 0 for rotary or none
    transformer_engine: bool  # the Transformer Engine layer spec (fused norms) rather than the local one
    moe: MoEShape | None
    mla: MLAShape | None = None
    hybrid: HybridShape | None = None

    def layer_kind(self, layer: int) -> str:
        """"M" Mamba, "*" attention only, "-" MLP only, "E" MoE only (hybrid); "A" attention + MLP, "AE" + MoE."""
        if self.hybrid is not None:
            return self.hybrid.pattern[layer]
        return "AE" if self.moe is not None and self.moe.layers[layer] else "A"


@dataclass(frozen=True)
class Parallelism:
    """How the model is split across GPUs (the data-parallel size is not part of a config)."""

    tensor: int = 1
    pipeline: int = 1
    virtual_pipeline: int = 1
    expert: int = 1
    expert_tensor: int = 1
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None


@dataclass(frozen=True)
class ShapeUnknown:
    """Why there is no shape: the fields the config leaves to someone else, or a feature not modelled."""

    missing: tuple[str, ...] = ()
    unmodelled: str | None = None
    checkpoint: str | None = None  # the key naming the checkpoint the dimensions come from

    def describe(self) -> str:
        if self.unmodelled is not None:
            return f"the model uses {self.unmodelled}, which the parameter model does not cover"
        if self.checkpoint is not None:
            return f"the model's dimensions come from the Hugging Face checkpoint `{self.checkpoint}` names"
        return "the config does not state " + ", ".join(f"`{m}`" for m in self.missing)


def shape_from(ctx: Context) -> tuple[ModelShape, Parallelism] | ShapeUnknown:
    """The model's shape and layout from a canonical config, or why they cannot be known."""
    if ctx.flavor == "nemo-rl" and not from_catalogue(ctx):
        return ShapeUnknown(checkpoint=f"{ctx.cfg.target or 'policy'}.model_name")
    unmodelled = _unmodelled(ctx)
    if unmodelled is not None:
        return ShapeUnknown(unmodelled=unmodelled)
    missing = _missing(ctx)
    if missing:
        return ShapeUnknown(tuple(missing))
    try:
        return _shape(ctx), _parallelism(ctx)
    except _NotModelled as err:
        return ShapeUnknown(unmodelled=str(err))
    except _Missing as err:
        return ShapeUnknown((str(err),))


class _NotModelled(Exception):
    pass


class _Missing(Exception):
    pass


def _unmodelled(ctx: Context) -> str | None:
    model_class = ctx.cfg.model_class
    if model_class is not None and not _GPT_PROVIDERS.fullmatch(model_class.rsplit(".", 1)[-1]):
        return f"the model provider {model_class}"
    for path, what in _UNMODELLED_FIELDS:
        if ctx.get(path) not in (None, False, 0, ""):
            return what
    if ctx.get("model.transformer_impl") not in ("transformer_engine", "local"):
        return f"transformer_impl {ctx.get('model.transformer_impl')!r}"
    return None


# What a Bridge config must state for a shape: a run_config.yaml dump writes every field, but a trimmed dump
# or an override YAML leaves the rest to the recipe's model provider, whose values the checker cannot see.
_BRIDGE_DENSE = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
                 "ffn_hidden_size", "gated_linear_unit", "add_bias_linear", "add_qkv_bias", "normalization",
                 "qk_layernorm", "transformer_impl")
_BRIDGE_PROVIDER = ("vocab_size", "share_embeddings_and_output_weights", "position_embedding_type")
_BRIDGE_MOE = ("moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_grouped_gemm",
               "moe_use_legacy_grouped_gemm", "moe_shared_expert_gate")


def _required(ctx: Context) -> list[tuple[str, str]]:
    """(name as the input spells it, canonical path) of each value the shape cannot do without."""
    if ctx.flavor == "megatron-lm":  # argparse defaults are the truth for every flag left out
        return [(f"--{n.replace('_', '-')}", f"{'run' if n == 'vocab_size' else 'model'}.{n}")
                for n in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")]
    paths = [f"model.{n}" for n in _BRIDGE_DENSE] + [f"run.{n}" for n in _BRIDGE_PROVIDER]
    if ctx.get("model.num_moe_experts"):
        paths += [f"model.{n}" for n in _BRIDGE_MOE]
    return [("model." + p.split(".", 1)[1], p) for p in paths
            if p.startswith("run.") or ctx.exists(p)]  # fields the selected version does not have are moot




def from_catalogue(ctx: Context) -> bool:
    """The dimensions come from the model catalogue's row for the checkpoint (a NeMo-RL model_name, a recipe's
    Hugging Face id): the provider's other fields are then the model bridge's, read as their defaults."""
    setting = ctx.setting("model.num_layers")
    from checks.loaders.checkpoint import CATALOGUE

    return setting is not None and (setting.origin.file or "").startswith(CATALOGUE)


def _missing(ctx: Context) -> list[str]:
    if ctx.flavor == "megatron-lm":
        return [name for name, path in _required(ctx) if ctx.get(path) is None]
    if from_catalogue(ctx):
        return [name for name, path in _required(ctx) if not ctx.is_set(path) and path in _CATALOGUE_PATHS]
    return [name for name, path in _required(ctx) if not ctx.is_set(path)]


_CATALOGUE_PATHS = frozenset({"model.num_layers", "model.hidden_size", "model.num_attention_heads",
                              "model.ffn_hidden_size", "run.vocab_size"})


def _int(ctx: Context, path: str, default: int) -> int:
    value = ctx.get(path)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _shape(ctx: Context) -> ModelShape:
    hidden = _int(ctx, "model.hidden_size", 0)
    heads = _int(ctx, "model.num_attention_heads", 0)
    layers = _int(ctx, "model.num_layers", 0)
    if not (hidden and heads and layers):
        raise _NotModelled("non-positive model dimensions")
    tp = _int(ctx, "model.tensor_model_parallel_size", 1)
    ffn = _int(ctx, "model.ffn_hidden_size", 4 * hidden)  # TransformerConfig.__post_init__ default
    return ModelShape(
        num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_query_groups=_int(ctx, "model.num_query_groups", heads),
        kv_channels=_int(ctx, "model.kv_channels", hidden // heads),
        ffn_hidden_size=ffn,
        vocab_size=_vocab_rows(ctx, tp),
        gated_linear_unit=bool(ctx.get("model.gated_linear_unit")),
        add_bias_linear=bool(ctx.get("model.add_bias_linear")),
        add_qkv_bias=bool(ctx.get("model.add_qkv_bias")),
        layernorm_bias=ctx.get("model.normalization") != "RMSNorm",
        qk_layernorm=bool(ctx.get("model.qk_layernorm")),
        tied_embeddings=_tied(ctx),
        position_rows=_position_rows(ctx),
        transformer_engine=ctx.get("model.transformer_impl") == "transformer_engine",
        moe=_moe(ctx, layers, ffn),
    )


def _vocab_rows(ctx: Context, tp: int) -> int:
    vocab = _int(ctx, "run.vocab_size", 0)
    multiple = _int(ctx, "run.make_vocab_size_divisible_by", 128)
    # Megatron-LM always pads (NVIDIA/Megatron-LM@d98e8a64:megatron/training/vocab_utils.py:58); Bridge only
    # with should_pad_vocab (Megatron-Bridge@067f987d:src/megatron/bridge/models/gpt_provider.py:266-271).
    if ctx.flavor == "megatron-lm" or ctx.get("run.should_pad_vocab") is True:
        step = multiple * tp
        return -(-vocab // step) * step
    return vocab


def _tied(ctx: Context) -> bool:
    if ctx.flavor == "megatron-lm":
        return ctx.get("run.untie_embeddings_and_output_weights") is not True
    return ctx.get("run.share_embeddings_and_output_weights") is not False


def _position_rows(ctx: Context) -> int:
    if ctx.get("run.position_embedding_type") != "learned_absolute":
        return 0
    name = "max_position_embeddings" if ctx.flavor == "megatron-lm" else "seq_length"
    rows = ctx.get(f"run.{name}")
    if not isinstance(rows, int) or rows <= 0:
        raise _Missing("--max-position-embeddings" if ctx.flavor == "megatron-lm" else "model.seq_length")
    return rows


def _moe(ctx: Context, num_layers: int, ffn: int) -> MoEShape | None:
    experts = ctx.get("model.num_moe_experts")
    if not experts:
        return None
    freq: Any = ctx.get("model.moe_layer_freq")
    if isinstance(freq, int) and not isinstance(freq, bool) and freq > 0:
        layers = tuple(i % freq == 0 for i in range(num_layers))
    elif isinstance(freq, list) and len(freq) == num_layers and all(v in (0, 1) for v in freq):
        layers = tuple(bool(v) for v in freq)
    else:
        raise _NotModelled(f"moe_layer_freq {freq!r}")
    if ctx.get("model.moe_grouped_gemm"):
        legacy = ctx.get("model.moe_use_legacy_grouped_gemm") or ctx.get("model.transformer_impl") == "local"
        layout = "legacy" if legacy else "grouped"
    else:
        layout = "sequential"
    return MoEShape(
        num_experts=int(experts), ffn_hidden_size=_int(ctx, "model.moe_ffn_hidden_size", ffn),
        shared_expert_size=_int(ctx, "model.moe_shared_expert_intermediate_size", 0),
        shared_expert_gate=bool(ctx.get("model.moe_shared_expert_gate")), layers=layers, expert_layout=layout,
    )


def _parallelism(ctx: Context) -> Parallelism:
    tp = _int(ctx, "model.tensor_model_parallel_size", 1)
    first = ctx.get("model.num_layers_in_first_pipeline_stage")
    last = ctx.get("model.num_layers_in_last_pipeline_stage")
    return Parallelism(
        tensor=tp, pipeline=_int(ctx, "model.pipeline_model_parallel_size", 1),
        virtual_pipeline=_int(ctx, "model.virtual_pipeline_model_parallel_size", 1),
        expert=_int(ctx, "model.expert_model_parallel_size", 1),
        expert_tensor=_int(ctx, "model.expert_tensor_parallel_size", tp),
        first_stage_layers=first if isinstance(first, int) else None,
        last_stage_layers=last if isinstance(last, int) else None,
    )
