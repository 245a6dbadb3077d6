"""Facts about the input formats that loaders and rules both need (key names, not behaviour)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from checks.versions import FIELD_SECTIONS, all_field_names

# Every top-level section of Megatron Bridge's ConfigContainer
# (NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/config.py:961-1010).
BRIDGE_SECTIONS: frozenset[str] = frozenset({
    "_target_", "env_vars", "rng", "rerun_state_machine", "train", "model", "optimizer",
    "optimizer_config_override_provider", "ddp", "validation", "scheduler", "dataset", "logger",
    "tokenizer", "checkpoint", "dist", "ft", "straggler", "nvrx_straggler", "inprocess_restart",
    "tensor_inspect", "profiling", "peft", "comm_overlap", "mixed_precision",
})


_OFFLOAD_WORDS = ("offload", "cpu_off", "pin_cpu", "d2h", "h2d")


@cache
def offload_field_names() -> frozenset[str]:
    """Every config field, in any known version, that belongs to an offloading mechanism."""
    names: set[str] = set()
    for section in FIELD_SECTIONS:
        names.update(n for n in all_field_names(section) if _has_offload_word(n))
    return frozenset(names - {"_cpu_offloading_context"})


def _has_offload_word(name: str) -> bool:
    return any(word in name for word in _OFFLOAD_WORDS)


def normalise(name: str) -> str:
    """``--cpu-offloading-num-layers`` -> ``cpu_offloading_num_layers``."""
    return name.lstrip("-+~").replace("-", "_").lower()


@cache  # a launch script repeats its flags: difflib per repetition took 2.4 s for 15,000 of them
def is_offload_related(name: str) -> bool:
    """True for a key that is, or looks like a misspelling of, an offloading field."""
    key = normalise(name)
    if key.startswith("no_"):
        key = key[3:]
    if _has_offload_word(key):
        return True
    return bool(close_matches(key, offload_field_names(), n=1, cutoff=0.8))


def close_matches(word: str, candidates: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """difflib.get_close_matches, imported only when a name is unknown (it costs a few ms at start-up)."""
    import difflib

    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=cutoff)


def is_bridge_doc(data: Mapping[str, Any]) -> bool:
    """A Megatron Bridge ConfigContainer dump or partial override file."""
    if str(data.get("_target_", "")).endswith("ConfigContainer"):
        return True
    return any(isinstance(data.get(name), dict) for name in ("model", "optimizer", "ddp", "env_vars"))


def is_nemo_rl_doc(data: Mapping[str, Any]) -> bool:
    """A NeMo-RL config: a Megatron policy, value or teacher model, or a child config with `defaults:`."""
    if "defaults" in data:
        return True
    return any(isinstance(data.get(t), dict) and isinstance(data[t].get("megatron_cfg"), dict)
               for t in ("policy", "value", "teacher"))


def is_megatron_lm_doc(data: Mapping[str, Any]) -> bool:
    """A Megatron-LM functional-test config (ENV_VARS / MODEL_ARGS)."""
    return "MODEL_ARGS" in data or "ENV_VARS" in data


def looks_like_command_line(text: str) -> bool:
    import re

    return bool(re.search(r"(^|\s)--[a-z][a-z0-9-]+", text))
