"""Every preset is the published architecture, field by field: against the Megatron-LM argument file it cites
(read from the mirror MEGATRON_LM_GIT names, with the checker's own Megatron-LM flag reading; skipped without it)
and against the model catalogue's rows (checks/data/models.json) for the Hugging Face ids it lists."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from checks.context import Context
from checks.loaders import Request, load
from checks.models import ModelArch, lookup
from checks.plan.presets import PRESETS, Preset

COMMIT = "d98e8a64"
_CITED = re.compile(rf"^NVIDIA/Megatron-LM@{COMMIT}:(?P<path>[^\s:]+\.sh)")


def _cited(preset: Preset) -> list[str]:
    """The Megatron-LM argument files a preset's sources cite."""
    return [m.group("path") for source in preset.sources if (m := _CITED.match(source))]


# --- (a) the Megatron-LM argument files ------------------------------------------------------------------------

# Every key the cited files set is either compared below or listed here as not part of the model's parameters
# and activations the preset fixes (training, parallel layout, numerics, kernels, routing policy, the tokenizer's
# name, logging), so that a file setting a new architectural flag cannot pass unread.
_NOT_ARCHITECTURE = frozenset({
    "run.save_interval", "run.micro_batch_size", "run.global_batch_size", "run.seq_length", "run.train_iters",
    "run.split", "run.tokenizer_type", "run.deprecated_use_mcore_models", "run.trust_remote_code",
    "run.wandb_project", "run.wandb_exp_name", "run.lr_decay_iters", "run.lr_decay_style", "run.lr_warmup_iters",
    # rotary embedding: scaling of the frequencies, no parameters (max_position_embeddings sizes only a learned
    # position table, which rope models do not have: compared through position_rows)
    "run.rotary_base", "run.rotary_percent", "run.rotary_scaling_factor", "run.rotary_seq_len_interpolation_factor",
    "run.use_rope_scaling", "run.mscale", "run.mscale_all_dim", "run.max_position_embeddings",
    # numerics and kernels
    "model.bf16", "optimizer.bf16", "model.masked_softmax_fusion", "model.apply_rope_fusion", "run.bias_swiglu_fusion",
    "model.init_method_std", "model.moe_router_dtype", "model.moe_grouped_gemm",
    # training settings the planner takes from the config or its own defaults, not from the preset's model
    "model.attention_dropout", "model.hidden_dropout", "model.sequence_parallel", "model.recompute_granularity",
    "run.recompute_activations", "model.moe_layer_recompute", "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size", "model.expert_model_parallel_size", "ddp.overlap_grad_reduce",
    "ddp.overlap_param_gather", "optimizer.overlap_param_gather", "ddp.use_distributed_optimizer",
    "optimizer.use_distributed_optimizer", "optimizer.lr", "optimizer.min_lr", "optimizer.weight_decay",
    "optimizer.clip_grad", "env.CUDA_DEVICE_MAX_CONNECTIONS",
    # the router's policy: which experts, not how many or how large
    "model.moe_aux_loss_coeff", "model.moe_router_load_balancing_type", "model.moe_token_dispatcher_type",
    "model.moe_router_score_function", "model.moe_router_bias_update_rate", "model.moe_router_enable_expert_bias",
    "model.moe_router_num_groups", "model.moe_router_group_topk", "model.moe_router_pre_softmax",
    "model.moe_router_topk_scaling_factor", "model.moe_shared_expert_overlap", "model.moe_token_drop_policy",
})


def _published(ctx: Context) -> dict[str, Any]:
    """The architecture a Megatron-LM argument file gives, in the preset's terms, with Megatron-LM's defaults for
    what it leaves out (each default cited where it is applied)."""
    def get(path: str, default: Any = None) -> Any:
        value = ctx.get(path)
        return default if value is None else value

    pattern = get("run.hybrid_layer_pattern")
    hidden, heads = get("model.hidden_size"), get("model.num_attention_heads")
    # a hybrid model's layer count is its pattern's, over any --num-layers (megatron/training/arguments.py:787-790)
    layers = len(pattern) if pattern else get("model.num_layers")
    rope = get("run.position_embedding_type") == "rope" or get("run.use_rotary_position_embeddings", False)
    out: dict[str, Any] = {
        "num_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
        # transformer_config.py:1452-1459: ffn 4h, kv channels h / heads, one query group per head when unset
        "ffn_hidden_size": get("model.ffn_hidden_size", 4 * hidden),
        "kv_channels": get("model.kv_channels", hidden // heads),
        "num_query_groups": get("model.num_query_groups", heads),
        "gated_linear_unit": bool(get("model.gated_linear_unit", False)),  # --swiglu (argument_utils.py:314-325)
        "add_bias_linear": get("model.add_bias_linear", True),
        "layernorm_bias": get("model.normalization", "LayerNorm") != "RMSNorm",
        "qk_layernorm": bool(get("model.qk_layernorm", False)),
        "tied_embeddings": get("run.untie_embeddings_and_output_weights") is not True,
        # --use-rotary-position-embeddings is rope (megatron/training/arguments.py:1626-1627): no position table
        "position_rows": 0 if rope else get("run.max_position_embeddings"),
        "multi_latent_attention": bool(get("model.multi_latent_attention", False)),
    }
    experts = get("model.num_moe_experts")
    if experts:
        freq = get("model.moe_layer_freq", 1)  # every layer an MoE layer by default
        out.update({
            "num_experts": experts,
            "moe_ffn_hidden_size": get("model.moe_ffn_hidden_size", out["ffn_hidden_size"]),
            "shared_expert_size": get("model.moe_shared_expert_intermediate_size", 0),
            "moe_top_k": get("model.moe_router_topk", 2),
            "moe_layers": tuple(bool(v) for v in freq) if isinstance(freq, list) else
            tuple(i % freq == 0 for i in range(layers)),
        })
    if out["multi_latent_attention"]:
        out.update({name: get(f"run.{name}") for name in
                    ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")})
    if pattern:
        out.update({"hybrid_pattern": pattern, **{name: get(f"model.{name}") for name in
                    ("mamba_state_dim", "mamba_head_dim", "mamba_num_heads", "mamba_num_groups")}})
    multiple = get("run.make_vocab_size_divisible_by")
    if multiple:
        out["vocab_multiple"] = multiple
    return out


def _preset_fields(preset: Preset) -> dict[str, Any]:
    s = preset.shape
    out: dict[str, Any] = {
        "num_layers": s.num_layers, "hidden_size": s.hidden_size, "num_attention_heads": s.num_attention_heads,
        "ffn_hidden_size": s.ffn_hidden_size, "kv_channels": s.kv_channels, "num_query_groups": s.num_query_groups,
        "gated_linear_unit": s.gated_linear_unit, "add_bias_linear": s.add_bias_linear,
        "layernorm_bias": s.layernorm_bias, "qk_layernorm": s.qk_layernorm, "tied_embeddings": s.tied_embeddings,
        "position_rows": s.position_rows, "multi_latent_attention": s.mla is not None,
    }
    if s.moe is not None:
        out.update({"num_experts": s.moe.num_experts, "moe_ffn_hidden_size": s.moe.ffn_hidden_size,
                    "shared_expert_size": s.moe.shared_expert_size, "moe_top_k": preset.moe_top_k,
                    "moe_layers": s.moe.layers})
    if s.mla is not None:
        out.update({"q_lora_rank": s.mla.q_lora_rank, "kv_lora_rank": s.mla.kv_lora_rank,
                    "qk_head_dim": s.mla.qk_head_dim, "qk_pos_emb_head_dim": s.mla.qk_pos_emb_head_dim,
                    "v_head_dim": s.mla.v_head_dim})
    if s.hybrid is not None:
        out.update({"hybrid_pattern": s.hybrid.pattern, "mamba_state_dim": s.hybrid.state_dim,
                    "mamba_head_dim": s.hybrid.head_dim, "mamba_num_heads": s.hybrid.num_heads,
                    "mamba_num_groups": s.hybrid.num_groups})
    return out


_ARGUMENT_FILES = [(name, path) for name, preset in PRESETS.items() for path in _cited(preset)]


def test_every_preset_but_llama3_70b_and_moonlight_cites_a_megatron_lm_argument_file() -> None:
    """Llama 3 70B has none at d98e8a64: examples/post_training/modelopt/conf/meta-llama holds 3.1-8B, 3.2-1B and
    the Llama 4 models only; docs/user-guide/parallelism-guide.md:182-197 shows a partial 70B command line (no
    query groups, no FFN size) and examples/multimodal/config.py:36-45 sets only its FFN size. Its preset cites the
    Hugging Face config. Moonlight has none either (conf/moonshotai holds the Kimi K2 files only); its preset cites
    Bridge's provider. Both are checked against the model catalogue's rows below."""
    assert {name for name, _ in _ARGUMENT_FILES} == set(PRESETS) - {"llama3-70b", "moonlight-16b-a3b"}


@pytest.mark.parametrize("name,path", _ARGUMENT_FILES, ids=[f"{n}:{Path(p).name}" for n, p in _ARGUMENT_FILES])
def test_presets_match_their_megatron_lm_argument_files(name: str, path: str, tmp_path: Path) -> None:
    git = os.environ.get("MEGATRON_LM_GIT")
    if not git:
        pytest.skip("set MEGATRON_LM_GIT to a NVIDIA/Megatron-LM git directory")
    text = subprocess.run(["git", "-C", git, "show", f"{COMMIT}:{path}"], capture_output=True, text=True,
                          check=True).stdout
    script = tmp_path / Path(path).name
    script.write_text(text, encoding="utf-8")
    (cfg,) = load(Request((str(script),), flavor="megatron-lm", version="main"))  # the flags of d98e8a64
    unread = sorted(set(cfg.settings) - _NOT_ARCHITECTURE - _COMPARED)
    assert unread == [], f"{path} sets flags this test neither compares nor classifies"
    published, preset = _published(Context(cfg)), _preset_fields(PRESETS[name])
    vocab_multiple = published.pop("vocab_multiple", None)
    differs = {k: (preset.get(k), v) for k, v in published.items() if preset.get(k) != v}
    lines = {k: cfg.settings[p].origin.line for k in differs for p in _paths(k) if p in cfg.settings}
    assert differs == {}, f"preset {name} vs {path} (preset, file), file lines {lines}"
    if vocab_multiple:  # Megatron-LM pads the vocabulary to this multiple (vocab_utils.py:58): the HF size stays
        assert PRESETS[name].shape.vocab_size % vocab_multiple == 0, name


_COMPARED = frozenset({
    "model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.ffn_hidden_size", "model.kv_channels",
    "model.num_query_groups", "run.group_query_attention", "model.gated_linear_unit", "run.swiglu", "run.squared_relu",
    "model.add_bias_linear", "model.normalization", "model.qk_layernorm", "run.untie_embeddings_and_output_weights",
    "run.position_embedding_type", "run.use_rotary_position_embeddings", "run.add_position_embedding",
    "model.multi_latent_attention", "model.num_moe_experts", "model.moe_ffn_hidden_size",
    "model.moe_shared_expert_intermediate_size", "model.moe_router_topk", "model.moe_layer_freq", "run.q_lora_rank",
    "run.kv_lora_rank", "run.qk_head_dim", "run.qk_pos_emb_head_dim", "run.v_head_dim", "run.hybrid_layer_pattern",
    "model.mamba_state_dim", "model.mamba_head_dim", "model.mamba_num_heads", "model.mamba_num_groups",
    "run.make_vocab_size_divisible_by",
})


def _paths(field: str) -> list[str]:
    """The settings a compared field is read from, to name the file's line in a failure."""
    return [p for p in _COMPARED if p.split(".", 1)[1] == field or field in p]


# --- (b) the model catalogue ------------------------------------------------------------------------------------

# Hugging Face ids presets list that the catalogue has no row for (tools/model_catalogue.py found no source):
# the other ids of the same preset are compared.
_NO_ROW = {"meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", "Qwen/Qwen3-30B-A3B-Base",
           "mistralai/Mixtral-8x7B-Instruct-v0.1"}


def _catalogued(arch: ModelArch) -> dict[str, Any]:
    """The catalogue row's fields in the preset's terms; None where the row does not hold the field."""
    freq = arch.moe_layer_freq
    layers = arch.num_layers
    moe_layers = None
    if arch.num_moe_experts and layers:
        moe_layers = tuple(bool(v) for v in freq) if isinstance(freq, tuple) else \
            tuple(i % freq == 0 for i in range(layers)) if isinstance(freq, int) else None
    return {
        "num_layers": layers, "hidden_size": arch.hidden_size, "ffn_hidden_size": arch.ffn_hidden_size,
        "num_attention_heads": arch.num_attention_heads, "num_query_groups": arch.num_query_groups,
        "kv_channels": arch.kv_channels, "num_experts": arch.num_moe_experts,
        "moe_ffn_hidden_size": arch.moe_ffn_hidden_size, "moe_top_k": arch.moe_router_topk,
        "shared_expert_size": arch.moe_shared_expert_intermediate_size, "moe_layers": moe_layers,
        "vocab_size": arch.vocab_size,
        "tied_embeddings": arch.share_embeddings_and_output_weights,
        "multi_latent_attention": arch.multi_latent_attention,
        "q_lora_rank": arch.q_lora_rank, "kv_lora_rank": arch.kv_lora_rank,
        "hybrid_pattern": arch.hybrid_override_pattern, "gated_linear_unit": arch.gated_linear_unit,
        "layernorm_bias": None if arch.normalization is None else arch.normalization != "RMSNorm",
        "architecture": arch.architecture,
    }


def _preset_catalogue_fields(preset: Preset) -> dict[str, Any]:
    fields = _preset_fields(preset)
    s = preset.shape
    fields["vocab_size"] = s.vocab_size
    fields["architecture"] = "hybrid" if s.hybrid else "moe" if s.moe else "dense"
    for name in ("num_experts", "moe_ffn_hidden_size", "moe_top_k", "moe_layers"):
        fields.setdefault(name, None)
    fields["shared_expert_size"] = (s.moe.shared_expert_size or None) if s.moe else None
    for name in ("q_lora_rank", "kv_lora_rank", "hybrid_pattern"):
        fields.setdefault(name, None)
    return fields


_IDS = [(name, hf_id) for name, preset in PRESETS.items() for hf_id in preset.hf_ids]


@pytest.mark.parametrize("name,hf_id", _IDS, ids=[f"{n}:{i}" for n, i in _IDS])
def test_presets_match_the_model_catalogue(name: str, hf_id: str) -> None:
    arch = lookup(hf_id)
    if hf_id in _NO_ROW:
        assert arch is None, f"the catalogue now has {hf_id}: compare it (drop it from _NO_ROW)"
        return
    assert arch is not None and arch.matched_by in ("id", "alias"), hf_id
    preset = _preset_catalogue_fields(PRESETS[name])
    held = {k: v for k, v in _catalogued(arch).items() if v is not None}
    differs = {k: (preset[k], v) for k, v in held.items() if preset[k] != v}
    assert differs == {}, f"preset {name} vs catalogue row {hf_id} ({arch.source}): (preset, catalogue)"


def test_every_preset_has_a_catalogue_row() -> None:
    assert all(any(lookup(i) is not None for i in p.hf_ids) for p in PRESETS.values())
