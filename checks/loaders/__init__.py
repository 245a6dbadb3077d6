"""Loaders: every input format into :class:`checks.config.CanonicalConfig`.

``load(request)`` picks the format (``--flavor`` or detection) and returns one
canonical config per model (a NeMo-RL config can build several Megatron
models: policy, value, teachers, a generation model).
"""

from __future__ import annotations

import importlib
from dataclasses import replace

from checks.config import CanonicalConfig
from checks.errors import InputError
from checks.formats import is_bridge_doc, is_megatron_lm_doc, is_nemo_rl_doc, looks_like_command_line
from checks.loaders.common import FLAVORS, Request
from checks.yamlio import load_yaml, read_text

__all__ = ["FLAVORS", "Request", "detect_flavor", "load"]

# Imported on demand: a run reads one format, and start-up time is the point of this package.
_LOADERS = {"bridge": "checks.loaders.bridge", "nemo-rl": "checks.loaders.nemo_rl",
            "megatron-lm": "checks.loaders.megatron_lm"}
# Top-level keys only a NeMo-RL config has: the sections its Megatron models are built from
# (checks/loaders/nemo_rl.py), and cross-tokenizer distillation's teachers list.
_NEMO_RL_ROOTS = frozenset({"policy", "value", "teacher", "teachers", "on_policy_distillation"})


def load(request: Request) -> list[CanonicalConfig]:
    if not request.files and not request.overrides and request.argv is None:
        raise InputError("check", "nothing to check: give a config file, --set KEY=VALUE or --argv")
    flavor = request.flavor if request.flavor != "auto" else detect_flavor(request)
    if flavor not in _LOADERS:
        raise InputError("--flavor", f"unknown flavor {flavor!r}; choose auto, {', '.join(FLAVORS)}")
    module = importlib.import_module(_LOADERS[flavor])
    configs: list[CanonicalConfig] = module.load(replace(request, flavor=flavor))
    return configs


def detect_flavor(request: Request) -> str:
    """Tell the format from the first input; raise InputError when it cannot be told."""
    if request.files:
        path = request.files[0]
        text = read_text(path)
        if path.endswith((".sh", ".bash", ".txt", ".args")):
            return "megatron-lm"
        try:
            data = load_yaml(path, text).data
        except InputError:
            if looks_like_command_line(text):
                return "megatron-lm"
            raise
        if is_megatron_lm_doc(data):
            return "megatron-lm"
        if is_nemo_rl_doc(data):
            return "nemo-rl"
        if is_bridge_doc(data):
            return "bridge"
        raise InputError(path, "cannot tell whether this is a Megatron Bridge, NeMo-RL or Megatron-LM config "
                               "(no model/optimizer section, no policy.megatron_cfg, no MODEL_ARGS); "
                               "pass --flavor")
    if request.argv is not None:
        return "megatron-lm"
    roots = {text.lstrip("+~").split("=", 1)[0].split(".", 1)[0] for text in request.overrides}
    if roots & _NEMO_RL_ROOTS:
        return "nemo-rl"
    if roots & {"model", "optimizer", "ddp", "env_vars"}:
        return "bridge"
    raise InputError("--set", "cannot tell the config format from the overrides alone; pass --flavor")
