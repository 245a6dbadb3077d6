"""A Hugging Face checkpoint's dimensions as config values, from the model catalogue (:mod:`checks.models`).

Megatron Bridge's ``AutoBridge.from_hf_pretrained(...).to_megatron_provider()`` (recipes) and NeMo-RL's model set-up
fill the model provider from the checkpoint's ``config.json``; the catalogue holds those values per id, each row
with its source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checks.versions import Profile

CATALOGUE = "model catalogue: "  # the start of the origin's file of every value this module supplies

if TYPE_CHECKING:
    from checks.models import ModelArch

# Provider fields a checkpoint decides, as TransformerConfig names (model.*). Those that are not
# TransformerConfig fields (vocab size, tied embeddings) are launcher settings, run.*.
MODEL_FIELDS: tuple[str, ...] = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size",
    "moe_layer_freq", "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "gated_linear_unit", "normalization",
)
RUN_FIELDS: tuple[str, ...] = ("vocab_size", "share_embeddings_and_output_weights")
# What is unknown when the catalogue does not hold the checkpoint.
ARCH_PATHS: tuple[str, ...] = (*(f"model.{n}" for n in MODEL_FIELDS), *(f"run.{n}" for n in RUN_FIELDS))


def values(arch: ModelArch, prof: Profile) -> dict[str, Any]:
    """``{"model.num_layers": 48, ..., "run.vocab_size": 151936}``: the fields this megatron-core version has.

    A field the checkpoint does not have is null (a dense model's ``num_moe_experts``), as the provider holds it.
    """
    found: dict[str, Any] = {}
    for name in MODEL_FIELDS:
        spec = prof.field("model", name)
        value = getattr(arch, name)
        if spec is None or (value is None and spec.default is not None):  # not a field here; a default stands
            continue
        found[f"model.{name}"] = list(value) if isinstance(value, tuple) else value
    for name in RUN_FIELDS:
        if getattr(arch, name) is not None:
            found[f"run.{name}"] = getattr(arch, name)
    return found
