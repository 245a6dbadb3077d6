"""Architectures of Hugging Face model ids, from ``checks/data/models.json`` (built by ``tools/model_catalogue.py``).

A NeMo-RL config names its model (``policy.model_name: Qwen/Qwen3-4B``) and a Megatron Bridge recipe loads one
(``AutoBridge.from_hf_pretrained(...)``); rules that need the architecture (dense or MoE, layer count, every
dimension) look it up here. Each row cites the upstream source of its numbers; ids with no source are not guessed.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

_DATA = Path(__file__).parent / "data" / "models.json"


@dataclass(frozen=True)
class ModelArch:
    hf_id: str
    architecture: str  # "dense" | "moe" | "hybrid" (Mamba layers; may also have experts)
    hf_architecture: str | None
    num_layers: int | None
    hidden_size: int | None
    ffn_hidden_size: int | None
    num_attention_heads: int | None
    num_query_groups: int | None
    kv_channels: int | None
    num_moe_experts: int | None
    moe_ffn_hidden_size: int | None
    moe_router_topk: int | None
    moe_shared_expert_intermediate_size: int | None
    moe_layer_freq: int | tuple[int, ...] | None
    vocab_size: int | None
    share_embeddings_and_output_weights: bool | None
    seq_length: int | None
    multi_latent_attention: bool
    q_lora_rank: int | None
    kv_lora_rank: int | None
    hybrid_override_pattern: str | None
    gated_linear_unit: bool | None
    normalization: str | None
    source: str
    revision: str | None
    notes: str | None
    disagreements: tuple[tuple[str, str], ...]  # (field, what another source says)
    matched_by: str = "id"  # "id", "alias" or "path" (a guess: the last two components of a local path)

    @property
    def is_moe(self) -> bool:
        return bool(self.num_moe_experts)


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_DATA.read_text())
    return data


def _arch(hf_id: str, row: dict[str, Any], matched_by: str) -> ModelArch:
    freq = row["moe_layer_freq"]
    return ModelArch(
        hf_id=hf_id, architecture=row["architecture"], hf_architecture=row["hf_architecture"],
        num_layers=row["num_layers"], hidden_size=row["hidden_size"], ffn_hidden_size=row["ffn_hidden_size"],
        num_attention_heads=row["num_attention_heads"], num_query_groups=row["num_query_groups"],
        kv_channels=row["kv_channels"], num_moe_experts=row["num_moe_experts"],
        moe_ffn_hidden_size=row["moe_ffn_hidden_size"], moe_router_topk=row["moe_router_topk"],
        moe_shared_expert_intermediate_size=row["moe_shared_expert_intermediate_size"],
        moe_layer_freq=tuple(freq) if isinstance(freq, list) else freq, vocab_size=row["vocab_size"],
        share_embeddings_and_output_weights=row["share_embeddings_and_output_weights"],
        seq_length=row["seq_length"], multi_latent_attention=bool(row["multi_latent_attention"]),
        q_lora_rank=row["q_lora_rank"], kv_lora_rank=row["kv_lora_rank"],
        hybrid_override_pattern=row["hybrid_override_pattern"], gated_linear_unit=row["gated_linear_unit"],
        normalization=row["normalization"], source=row["source"], revision=row["revision"], notes=row["notes"],
        disagreements=tuple((name, text) for name, texts in sorted(row["disagreements"].items()) for text in texts),
        matched_by=matched_by)


def lookup(hf_id: str) -> ModelArch | None:
    """The architecture ``hf_id`` names. Case-sensitive, as the Hugging Face hub is. A local path whose last two
    components are a known id (``/models/Qwen/Qwen3-4B``) is returned with ``matched_by="path"``: a guess, since a
    local checkpoint may hold anything."""
    data = _data()
    models, aliases = data["models"], data["aliases"]
    if hf_id in models:
        return _arch(hf_id, models[hf_id], "id")
    if hf_id in aliases and aliases[hf_id] in models:
        return _arch(aliases[hf_id], models[aliases[hf_id]], "alias")
    parts = [p for p in hf_id.replace("\\", "/").split("/") if p]
    if len(parts) > 2 or (len(parts) == 2 and hf_id.startswith(("/", ".", "~"))):
        tail = "/".join(parts[-2:])
        target = tail if tail in models else aliases.get(tail)
        if target in models:
            return _arch(target, models[target], "path")
    return None


def known_ids() -> list[str]:
    """Every id with a row, sorted."""
    return sorted(_data()["models"])


def missing_ids() -> dict[str, str]:
    """Ids upstream names that have no source here, with what was tried."""
    return dict(_data()["missing"])


def closest(hf_id: str, n: int = 3) -> list[str]:
    """Known ids that look like ``hf_id``, for an error message (``difflib`` ratio, case-insensitive)."""
    return list(_closest(hf_id.lower(), n))


@lru_cache(maxsize=1024)  # a tree of configs names the same few checkpoints; each search compares every id
def _closest(lowered: str, n: int) -> tuple[str, ...]:
    ids = known_ids() + sorted(_data()["aliases"])
    by_lower = {i.lower(): i for i in ids}
    return tuple(by_lower[m] for m in difflib.get_close_matches(lowered, list(by_lower), n=n, cutoff=0.6))
