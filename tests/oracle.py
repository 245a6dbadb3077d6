"""The megatron-core side of the differential tests: build its real configs from a canonical config.

``compare(cfg)`` turns the canonical config into keyword arguments for the installed megatron-core's
``TransformerConfig`` and ``OptimizerConfig``, runs the optimizer factory up to its offload checks, and
asserts that megatron-core raises for an offload reason at a stage if and only if the checker reports
an upstream-backed error for that stage, quoting megatron-core's message. A config megatron-core
refuses for another reason raises ``UnrelatedRejection``.
"""

from __future__ import annotations

import os
import re
import traceback
import warnings
from dataclasses import dataclass, fields
from typing import Any

import pytest

from checks.config import CanonicalConfig
from checks.context import Context
from checks.engine import Finding, run
from checks.rules import BY_ID
from checks.rules import upstream as up
from checks.versions import resolve_version

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")
from megatron.core.optimizer import OptimizerConfig, _get_megatron_optimizer_based_on_param_groups  # noqa: E402
from megatron.core.package_info import __version__ as MCORE_VERSION  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

# A source checkout of Megatron-LM main reports the next release number; MCORE_PROFILE=main selects its profile.
VERSION = resolve_version(os.environ.get("MCORE_PROFILE") or MCORE_VERSION)
# The static start of every megatron-core message the rules quote for this version.
REGISTERED = tuple({c.message.split("{")[0] for rule in BY_ID.values() for c in rule.upstream
                    if c.project == "megatron-core" and c.message and c.anchor(VERSION)})
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TC_FIELDS = {f.name for f in fields(TransformerConfig)}
OC_FIELDS = {f.name for f in fields(OptimizerConfig)}
# What megatron-core needs besides the offload fields; small, so nothing else fails.
# How torch says there is no GPU: the CPU build, and a CUDA build on a machine without a driver.
_NO_GPU = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver on your system")
MODEL_BASE = {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "add_bias_linear": False,
              "attention_dropout": 0.0, "hidden_dropout": 0.0}
# Kernel fusions a recipe turns on whose checks need Transformer Engine or a GPU kernel at config time, and which
# no offload check reads: off, so that TransformerConfig reaches the offload checks on this CPU-only machine.
FUSIONS_OFF = {"apply_rope_fusion": False, "bias_activation_fusion": False, "moe_permute_fusion": False}


def registered_messages() -> list[str | None]:
    """The megatron-core checks the rules quote for this version that run when configs are built."""
    return sorted({c.message for rule in BY_ID.values() for c in rule.upstream
                   if c.project == "megatron-core" and c.stage in ("config", "optimizer") and c.anchor(VERSION)
                   and c.anchor(VERSION) not in NOT_RUN}, key=lambda m: m or "")


def same_check(template: str | None, raised: str) -> bool:
    """Whether megatron-core's message ``raised`` comes from the check with this message template."""
    if template is None:
        return raised == ""
    return raised.startswith(template.split("{")[0])


class UnrelatedRejection(Exception):
    """megatron-core refused the config for a reason that is not about offloading."""


@dataclass(frozen=True)
class Raised:
    stage: str  # "model" (TransformerConfig) or "optimizer" (OptimizerConfig + optimizer factory)
    message: str  # "" for a bare assert
    kind: str


def _kwargs(ctx: Context, section: str, allowed: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in allowed:
        path = f"{section}.{name}"
        if path in ctx.invalid or not (ctx.is_set(path) or path in ctx.cfg.defaults):
            continue
        spec = ctx.profile.field(section, name)
        if spec is None or (spec.kind == "any" and name not in ("cuda_graph_scope", "cuda_graph_modules")):
            continue
        value = ctx.get(path)
        out[name] = TORCH_DTYPES.get(value, value) if spec.kind == "dtype" else value
    return out


UNKNOWN = Raised("", "", "no verdict")  # megatron-core could not run this stage here (Transformer Engine missing)


def _offload_reason(message: str, kwargs: dict[str, Any]) -> bool:
    """Whether a registered message is about offloading for this config (C6 is, only when offloading is on)."""
    if message.startswith("Invalid cuda graph implementation"):
        return bool(kwargs.get("cpu_offloading") or kwargs.get("fine_grained_activation_offloading"))
    return message.startswith(REGISTERED)


def _megatron_offload_error(stage: str, build: Any, kwargs: dict[str, Any]) -> Raised | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build()
    except IndexError as err:
        if stage == "optimizer":  # main indexes model_chunks (empty here) after its offload checks
            return None
        raise UnrelatedRejection(f"megatron-core failed ({stage}): IndexError: {err}") from err
    except NameError as err:  # 0.15's model_parallel_config.py warns through a module it never imports
        raise UnrelatedRejection(f"megatron-core crashed ({stage}): NameError: {err}") from err
    except (AssertionError, ValueError, NotImplementedError, TypeError, RuntimeError) as err:
        message = str(err)
        frame = traceback.extract_tb(err.__traceback__)[-1]
        # a bare assert or an accidental crash (TypeError) on a line about offloading
        offload_line = "offload" in (frame.line or "") and frame.filename.endswith("transformer_config.py")
        if "offload" in message.lower() or (offload_line and (not message or isinstance(err, TypeError))) \
                or _offload_reason(message, kwargs):
            return Raised(stage, message, type(err).__name__)
        if "'NoneType' and 'Version'" in message or "FusedAdam from TransformerEngine" in message:
            return UNKNOWN  # the precision-aware optimizer's checks need Transformer Engine, absent here
        if stage == "optimizer" and any(m in message for m in _NO_GPU):
            return None  # HybridDeviceOptimizer needs a GPU, which means its offload checks have passed
        raise UnrelatedRejection(f"megatron-core rejected the config for another reason ({stage}): "
                                 f"{type(err).__name__}: {message}") from err
    return None


def megatron_verdict(cfg: CanonicalConfig) -> dict[str, Raised | None]:
    """Per stage ("model", "optimizer"): what megatron-core raised for an offload reason, None, or UNKNOWN."""
    ctx = Context(cfg)
    fusions_off = {k: v for k, v in FUSIONS_OFF.items() if k in TC_FIELDS}
    model = {**MODEL_BASE, **_kwargs(ctx, "model", TC_FIELDS), **fusions_off}
    if model["num_layers"] <= max(2, model.get("cpu_offloading_num_layers", 0)) and not ctx.is_set("model.num_layers"):
        model["num_layers"] = model.get("cpu_offloading_num_layers", 0) + 2  # unknown depth: assume valid
    if model.get("expert_model_parallel_size", 1) > 1 and "num_moe_experts" not in model:
        model["num_moe_experts"] = 2 * model["expert_model_parallel_size"]  # unknown architecture: assume MoE
    if model.get("pipeline_model_parallel_size", 1) > 1:
        model.setdefault("pipeline_dtype", model.get("params_dtype", torch.bfloat16))  # what Bridge/MLM do
    optimizer = {"lr": 1e-4, **_kwargs(ctx, "optimizer", OC_FIELDS)}
    def build_optimizer() -> None:
        config = OptimizerConfig(**optimizer)
        param = torch.nn.Parameter(torch.zeros(4))
        _get_megatron_optimizer_based_on_param_groups(config, [], [{"params": [param]}])

    return {"model": _megatron_offload_error("model", lambda: TransformerConfig(**model), model),
            "optimizer": _megatron_offload_error("optimizer", build_optimizer, optimizer)}


def _normalise(message: str) -> str:
    # F3 prints Python sets, whose order varies between runs.
    return re.sub(r"\{([^{}]*)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", message)


# Checks that live in code the oracle does not run (get_megatron_optimizer on main and the main@ commits needs
# real model chunks; Megatron-FSDP's optimizer needs a distributed model); tools/verify_anchors.py still confirms
# their anchors.
NOT_RUN = {anchor for check in (up.I4_PAO_DISTOPT, up.I6_MFSDP_V2) for anchor in check.anchors().values()}


def _stage(finding: Finding) -> str | None:
    if finding.upstream is None or finding.severity != "error" or finding.upstream.anchor in NOT_RUN:
        return None
    anchor = finding.upstream.anchor
    if finding.upstream.project == "megatron-core":
        return "model" if "transformer_config.py" in anchor else "optimizer" if "optimizer/" in anchor else None
    return "front-end"


def _declared_megatron_messages(finding: Finding) -> list[str]:
    return [c.message or "" for c in BY_ID[finding.rule].upstream if c.project == "megatron-core"]


def _undecided(findings: list[Finding], raised: Raised) -> bool:
    """Whether the checker said it cannot decide (CFG010) a rule that declares the check megatron-core raised:
    the config holds values no input states, which megatron-core reads as their defaults here."""
    rules = {rule for f in findings if f.rule == "CFG010" for rule in re.findall(r"\b[A-Z]{3}\d{3}\b", f.message)}
    return any(same_check(c.message, raised.message) or (c.message or "")[:30] == raised.message[:30]
               for rule in rules & set(BY_ID) for c in BY_ID[rule].upstream if c.project == "megatron-core")


def compare(cfg: CanonicalConfig, undecided: list[str] | None = None) -> dict[str, Raised | None]:
    """Assert that the checker and megatron-core agree on ``cfg``; return megatron-core's verdict.

    Raises UnrelatedRejection when megatron-core refuses the config for a reason that is not about offloading.
    A check megatron-core raises that the checker says it cannot decide (CFG010) is not a disagreement: it is
    appended to ``undecided`` (when given).
    """
    findings = run([cfg])
    verdict = megatron_verdict(cfg)
    for raised in verdict.values():
        if raised is None or raised is UNKNOWN:
            continue
        quoted = [_normalise(f.upstream.message or "") for f in findings if _stage(f) == raised.stage]
        front_end = [f for f in findings if _stage(f) == "front-end" and any(
            m.split("{")[0][:30] == raised.message[:30] for m in _declared_megatron_messages(f))]
        if not (_normalise(raised.message) in quoted or front_end) and _undecided(findings, raised):
            if undecided is not None:
                undecided.append(raised.message)
            continue
        assert _normalise(raised.message) in quoted or front_end, (
            f"megatron-core raised {raised.kind}({raised.message!r}) at the {raised.stage} stage; the checker "
            f"quoted {quoted}; findings: {[(f.rule, f.message) for f in findings]}")
    for f in findings:
        stage = _stage(f)
        if stage in ("model", "optimizer") and verdict[stage] is not UNKNOWN:
            assert verdict[stage] is not None, f"checker reported {f.rule} ({f.upstream.message!r}) but " \
                                               f"megatron-core accepted the {stage} stage"
    return verdict
