"""Bounds on the model a config describes, so that no value makes the checker slow or its arithmetic overflow.

The parameter model enumerates every tensor of every layer (and every expert's, in MoE layers) to predict
what optimizer offloading moves, and the planner works in floats. A value far beyond any real model
(``num_layers=1000000``, a hidden size of 400 digits) would take minutes or overflow a float; it is refused
as an input error naming the limit, the key and where it was given. The bounds are several times
the largest models in the model catalogue, so no real job meets them.
"""

from __future__ import annotations

from collections.abc import Iterable

from checks.config import CanonicalConfig, Setting
from checks.errors import InputError

# The largest of the 73 models in checks/data/models.json: 126 layers, hidden 16,384 and FFN 53,248 (Llama 3.1
# 405B), 512 experts (Qwen3-Next, Nemotron 3 Ultra, whose 108 layers x 512 experts is the most expert-layers),
# a vocabulary of 262,208 (Gemma 3).
MAX_LAYERS = 10_000
MAX_EXPERTS = 4_096
MAX_EXPERT_LAYERS = 200_000  # layers x experts: the expert tensors the parameter model enumerates
MAX_DIMENSION = 2**24  # hidden, FFN and head sizes
MAX_SIZE = 2**31  # sequence lengths, vocabularies, batch and parallel sizes; beyond, floats lose integers

_DIMENSIONS = ("hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
               "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_router_topk")
_SIZES = ("model.seq_length", "run.seq_length", "run.max_position_embeddings", "run.vocab_size",
          "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
          "model.virtual_pipeline_model_parallel_size", "model.context_parallel_size",
          "model.expert_model_parallel_size", "model.expert_tensor_parallel_size",
          "model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage",
          "model.cpu_offloading_num_layers", "train.micro_batch_size", "train.global_batch_size")
LIMITS: dict[str, int] = {
    "model.num_layers": MAX_LAYERS, "model.num_moe_experts": MAX_EXPERTS,
    **{f"model.{name}": MAX_DIMENSION for name in _DIMENSIONS}, **dict.fromkeys(_SIZES, MAX_SIZE),
}


def check_limits(configs: Iterable[CanonicalConfig]) -> None:
    """Raise :class:`InputError` for the first value past its bound, naming the key and where it was given."""
    for cfg in configs:
        for path, bound in LIMITS.items():
            setting = cfg.settings.get(path)
            if setting is not None and _count(setting) > bound:
                raise _refused(setting, path, f"{_shown(setting.value)} is past the checker's limit of {bound:,}")
        layers, experts = cfg.settings.get("model.num_layers"), cfg.settings.get("model.num_moe_experts")
        if layers is None or experts is None:
            continue
        product = _count(layers) * _count(experts)
        if product > MAX_EXPERT_LAYERS:
            raise _refused(experts, "model.num_moe_experts", f"{experts.value} with num_layers={layers.value} is "
                           f"{product:,} expert-layers, past the checker's limit of {MAX_EXPERT_LAYERS:,}")


def _count(setting: Setting) -> int:
    value = setting.value
    return value if isinstance(value, int) and not isinstance(value, bool) else 0  # other types: CFG002's


def _shown(value: int) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"a {len(text)}-digit number"


def _refused(setting: Setting, path: str, problem: str) -> InputError:
    origin = setting.origin
    key = origin.key or path
    where = origin.file or origin.arg or "config"
    spelled = f"{key}{' ' if key.startswith('--') else '='}"
    return InputError(where, f"{spelled}{problem}; no real model comes near it, so it is refused rather than "
                             "modelled (see Limits in reference/formats.md)", line=origin.line if origin.file else None)
