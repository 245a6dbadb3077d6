"""Model presets: architectures the planner knows by name, each with where its numbers come from.

Shapes follow Megatron-LM's own argument files for these models where it has one
(NVIDIA/Megatron-LM@d98e8a64:examples/post_training/modelopt/conf/<org>/<model>.sh); vocabulary sizes
come from each model's Hugging Face ``config.json`` (the tokenizer decides it, not the argument files).
The default training layout (sequence length, micro-batch size, parallelism) is a starting point for
the planner, not a recipe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from checks.model.shape import HybridShape, MLAShape, ModelShape, MoEShape, Parallelism

_CONF = "NVIDIA/Megatron-LM@d98e8a64:examples/post_training/modelopt/conf/"


@dataclass(frozen=True)
class Preset:
    name: str
    about: str
    shape: ModelShape
    parallelism: Parallelism
    seq_length: int
    micro_batch_size: int
    sources: tuple[str, ...]
    hf_ids: tuple[str, ...] = ()  # Hugging Face ids NeMo-RL configs name in policy.model_name
    moe_top_k: int = 0  # experts each token is routed to (--moe-router-topk in the sources); 0 for a dense model


def _gpt(layers: int, hidden: int, heads: int, groups: int, ffn: int, vocab: int, *, kv: int = 0,
         qk_norm: bool = False, gated: bool = True, moe: MoEShape | None = None, mla: MLAShape | None = None,
         hybrid: HybridShape | None = None) -> ModelShape:
    return ModelShape(num_layers=layers, hidden_size=hidden, num_attention_heads=heads, num_query_groups=groups,
                      kv_channels=kv or hidden // heads, ffn_hidden_size=ffn, vocab_size=vocab,
                      gated_linear_unit=gated, add_bias_linear=False, add_qkv_bias=False, layernorm_bias=False,
                      qk_layernorm=qk_norm, tied_embeddings=False, position_rows=0, transformer_engine=True,
                      moe=moe, mla=mla, hybrid=hybrid)


def _moe(layers: int, experts: int, ffn: int, shared: int = 0, dense_first: int = 0) -> MoEShape:
    return MoEShape(num_experts=experts, ffn_hidden_size=ffn, shared_expert_size=shared, shared_expert_gate=False,
                    layers=tuple(i >= dense_first for i in range(layers)), expert_layout="grouped")


_NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"

PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("llama3-8b", "Llama 3 8B: dense, GQA 32/8, SwiGLU",
           _gpt(32, 4096, 32, 8, 14336, 128256), Parallelism(tensor=1), 8192, 1,
           (_CONF + "meta-llama/Llama-3.1-8B-Instruct.sh (same architecture)",
            "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json (vocab_size 128256)"),
           ("meta-llama/Meta-Llama-3-8B", "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct",
            "meta-llama/Meta-Llama-3-8B-Instruct")),
    Preset("llama3-70b", "Llama 3 70B: dense, GQA 64/8, SwiGLU",
           _gpt(80, 8192, 64, 8, 28672, 128256), Parallelism(tensor=8, pipeline=4), 8192, 1,
           # Megatron-LM has no argument file for a Llama 3 70B at d98e8a64 (its modelopt conf holds 3.1-8B and 3.2-1B)
           ("https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
            "NVIDIA-NeMo/Megatron-Bridge@dc944b9c:src/megatron/bridge/models/llama/llama_provider.py:191-205 "
            "(Llama3ModelProvider70B, the model catalogue's row)"),
           ("meta-llama/Meta-Llama-3-70B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.3-70B-Instruct")),
    Preset("qwen3-30b-a3b", "Qwen3-30B-A3B: 128 experts, top-8, QK norm",
           _gpt(48, 2048, 32, 4, 6144, 151936, kv=128, qk_norm=True, moe=_moe(48, 128, 768)),
           Parallelism(tensor=1, expert=8), 4096, 1,
           (_CONF + "Qwen/Qwen3-30B-A3B.sh",
            "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (vocab_size 151936)"),
           ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base"), moe_top_k=8),  # Qwen3-30B-A3B.sh:31
    Preset("qwen3-235b-a22b", "Qwen3-235B-A22B: 128 experts, top-8, QK norm",
           _gpt(94, 4096, 64, 4, 12288, 151936, kv=128, qk_norm=True, moe=_moe(94, 128, 1536)),
           Parallelism(tensor=4, pipeline=8, expert=8, first_stage_layers=11, last_stage_layers=11), 4096, 1,
           (_CONF + "Qwen/Qwen3-235B-A22B.sh",
            "https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json (vocab_size 151936)"),
           ("Qwen/Qwen3-235B-A22B",), moe_top_k=8),  # Qwen3-235B-A22B.sh:31
    Preset("mixtral-8x7b", "Mixtral 8x7B: 8 experts, top-2, GQA 32/8",
           _gpt(32, 4096, 32, 8, 14336, 32000, moe=_moe(32, 8, 14336)), Parallelism(tensor=2, expert=4), 4096, 1,
           ("https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json",
            "NVIDIA/Megatron-LM@d98e8a64:examples/mixtral/train_mixtral_8x7b_distributed.sh:52 (--moe-router-topk 2)"),
           ("mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x7B-Instruct-v0.1"), moe_top_k=2),
    Preset("deepseek-v3",
           "DeepSeek-V3: MLA, 256 routed experts + 1 shared, top-8, first 3 layers dense (MTP not modelled)",
           # QK norm: DeepSeek-R1.sh:26 (--qk-layernorm, the layer norms of the q and kv latents)
           _gpt(61, 7168, 128, 128, 18432, 129280, kv=128, qk_norm=True,
                moe=_moe(61, 256, 2048, shared=2048, dense_first=3),
                mla=MLAShape(q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
                             v_head_dim=128)),
           Parallelism(tensor=1, pipeline=8, expert=64, first_stage_layers=7, last_stage_layers=6), 4096, 1,
           (_CONF + "deepseek-ai/DeepSeek-R1.sh (DeepSeek-V3 architecture)",
            "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (vocab_size 129280)"),
           ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1"), moe_top_k=8),  # DeepSeek-R1.sh:35
    Preset("moonlight-16b-a3b",
           "Moonlight-16B-A3B: MLA without a q latent, 64 routed experts + 2 shared, top-6, first layer dense",
           # Bridge's MoonlightModelProvider16B over DeepSeekModelProvider (the MLA head sizes and QK norm: :71-86);
           # kv_channels 16 as the provider states it (MLA sizes its heads with qk/v_head_dim instead)
           _gpt(27, 2048, 16, 16, 11264, 163842, kv=16, qk_norm=True,
                moe=_moe(27, 64, 1408, shared=2816, dense_first=1),
                mla=MLAShape(q_lora_rank=0, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
                             v_head_dim=128)),
           Parallelism(tensor=2, expert=8), 4096, 1,
           ("NVIDIA-NeMo/Megatron-Bridge@dc944b9c:src/megatron/bridge/models/deepseek/deepseek_provider.py:195-229 "
            "(MoonlightModelProvider16B; MLA head sizes, QK norm: DeepSeekModelProvider, :43-86); Megatron-LM has "
            "no argument file for it at d98e8a64",
            "NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/recipes/moonlight/h100/moonlight_16b.py:157 "
            "(the 8-GPU H100 recipe's layout: TP2 EP8)"),
           ("moonshotai/Moonlight-16B-A3B",), moe_top_k=6),  # deepseek_provider.py:212
    Preset("nemotron-h-8b", "Nemotron-H 8B: hybrid, 24 Mamba-2 + 4 attention + 24 MLP layers, squared ReLU",
           _gpt(len(_NEMOTRON_H_8B_PATTERN), 4096, 32, 8, 21504, 131072, gated=False,
                hybrid=HybridShape(_NEMOTRON_H_8B_PATTERN, state_dim=128, head_dim=64, num_heads=128, num_groups=8)),
           Parallelism(tensor=1), 8192, 1,
           (_CONF + "nvidia/Nemotron-H-8B-Base-8K.sh",
            "https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K/blob/main/config.json (vocab_size 131072)"),
           ("nvidia/Nemotron-H-8B-Base-8K",)),
)}


def preset_for_model_name(name: str) -> Preset | None:
    """The preset a Hugging Face model id (NeMo-RL's ``policy.model_name``) names, if any."""
    for preset in PRESETS.values():
        if name in preset.hf_ids:
            return preset
    return None


def catalogue_preset(hf_id: str) -> Preset | str:
    """A preset for a Hugging Face id from the model catalogue (``checks/data/models.json``), or why there is none.

    Dense and MoE models with standard attention only: multi-latent attention and hybrid (Mamba) layouts need
    head dimensions and mixer sizes the catalogue does not hold. The parallel layout is the planner's default
    (TP1), for ``--set`` or the config to change.
    """
    from checks.models import closest, lookup

    arch = lookup(hf_id)
    if arch is None:
        near = closest(hf_id)
        return (f"{hf_id!r} is neither a preset ({', '.join(PRESETS)}) nor in the model catalogue"
                + (f"; closest ids: {', '.join(near)}" if near else ""))
    if arch.multi_latent_attention or arch.architecture == "hybrid":
        return f"{hf_id} uses {'multi-latent attention' if arch.multi_latent_attention else 'Mamba layers'}, whose " \
               "dimensions the model catalogue does not hold; use a preset (--preset NAME)"
    needed = {"num_layers": arch.num_layers, "hidden_size": arch.hidden_size, "ffn_hidden_size": arch.ffn_hidden_size,
              "num_attention_heads": arch.num_attention_heads, "vocab_size": arch.vocab_size}
    if missing := [name for name, value in needed.items() if not value]:
        return f"the model catalogue's row for {hf_id} lacks {', '.join(missing)} ({arch.source})"
    layers = int(arch.num_layers or 0)
    moe = None
    if arch.num_moe_experts:
        freq = arch.moe_layer_freq if arch.moe_layer_freq is not None else 1
        pattern = tuple(bool(v) for v in freq) if isinstance(freq, tuple) else \
            tuple(i % int(freq) == 0 for i in range(layers))
        moe = MoEShape(num_experts=arch.num_moe_experts, ffn_hidden_size=int(arch.moe_ffn_hidden_size or 0),
                       shared_expert_size=int(arch.moe_shared_expert_intermediate_size or 0), shared_expert_gate=False,
                       layers=pattern, expert_layout="grouped")
    shape = replace(_gpt(layers, int(arch.hidden_size or 0), int(arch.num_attention_heads or 0),
                         int(arch.num_query_groups or arch.num_attention_heads or 0), int(arch.ffn_hidden_size or 0),
                         int(arch.vocab_size or 0), kv=int(arch.kv_channels or 0),
                         gated=arch.gated_linear_unit is not False, moe=moe),
                    tied_embeddings=bool(arch.share_embeddings_and_output_weights),
                    layernorm_bias=arch.normalization == "LayerNorm")
    # The catalogue's router top-k (num_experts_per_tok); without it an MoE model was planned at top-2.
    return Preset(hf_id, f"{hf_id} from the model catalogue", shape, Parallelism(tensor=1), 4096, 1,
                  (f"model catalogue: {arch.source}",), (hf_id,),
                  moe_top_k=int(arch.moe_router_topk or 0) if moe else 0)
