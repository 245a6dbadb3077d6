"""Differential test: the checker against megatron-core's own config classes.

For every bundled example (and the ``--set`` variants below) the canonical
config is turned into keyword arguments for the installed megatron-core's
``TransformerConfig`` and ``OptimizerConfig``, and the optimizer factory is run
up to its offload checks. Then: megatron-core raises for an offload reason at a
stage if and only if the checker reports an upstream-backed error for that
stage, and the checker quotes megatron-core's message.

Configs that megatron-core rejects for reasons unrelated to offloading make the
test fail: the examples must be built so that the offload checks are reached.
"""

from __future__ import annotations

import re
import traceback
import warnings
from dataclasses import dataclass, fields
from typing import Any

import pytest

from checks.anchors import STAGE_CONFIG, STAGE_OPTIMIZER
from checks.config import CanonicalConfig
from checks.context import Context
from checks.demo import Entry, entries
from checks.engine import Finding, run
from checks.loaders import Request, load
from checks.rules import BY_ID

torch = pytest.importorskip("torch")
megatron = pytest.importorskip("megatron.core")
from megatron.core.optimizer import OptimizerConfig, _get_megatron_optimizer_based_on_param_groups  # noqa: E402
from megatron.core.package_info import __version__ as MCORE_VERSION  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

from checks.versions import resolve_version  # noqa: E402

VERSION = resolve_version(MCORE_VERSION)
# Every megatron-core message the rules quote for this version (with set and value placeholders filled by
# whatever megatron-core printed, they are compared after _normalise).
REGISTERED = tuple({c.message.split("{")[0] for rule in BY_ID.values() for c in rule.upstream
                    if c.project == "megatron-core" and c.message and c.anchor(VERSION)})
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TC_FIELDS = {f.name for f in fields(TransformerConfig)}
OC_FIELDS = {f.name for f in fields(OptimizerConfig)}
# What the checker needs besides the offload fields; small, so nothing else fails.
MODEL_BASE = {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4}

# --set variants run on top of examples, to reach each offload check.
_LAYER_ON = ("model.cpu_offloading=true", "model.cpu_offloading_num_layers=2", "model.pipeline_model_parallel_size=1",
             "model.fine_grained_activation_offloading=false")
VARIANTS: dict[str, list[tuple[str, ...]]] = {
    "bridge-dump-clean": [
        ("model.cpu_offloading=true",),
        _LAYER_ON,
        (*_LAYER_ON, "model.cpu_offloading_num_layers=32"),
        (*_LAYER_ON, "model.cpu_offloading_num_layers=-1"),
        (*_LAYER_ON, "model.recompute_granularity=selective"),
        (*_LAYER_ON, "model.cuda_graph_impl=transformer_engine"),
        (*_LAYER_ON, "model.cuda_graph_impl=local"),
        (*_LAYER_ON, "model.cuda_graph_impl=full_iteration"),
        ("model.offload_modules=[attn_proj]",),
        ("model.offload_modules=[core_atn,attn_proj]",),
        ("model.offload_modules=[]",),
        ("model.offload_modules=null",),
        ("optimizer.decoupled_weight_decay=false",),
        ("optimizer.decoupled_weight_decay=false", "optimizer.use_precision_aware_optimizer=false"),
        ("optimizer.optimizer_cpu_offload=false", "optimizer.decoupled_weight_decay=false"),
        ("optimizer.optimizer=sgd",),
        ("optimizer.use_distributed_optimizer=false", "ddp.use_distributed_optimizer=false"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.main_grads_dtype=bf16"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.main_params_dtype=fp16"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.exp_avg_dtype=bf16"),
        ("optimizer.use_precision_aware_optimizer=false", "optimizer.exp_avg_sq_dtype=bf16"),
    ],
    "megatron-lm-argv": [],
}
ARGV_VARIANTS = [
    "--num-layers 8 --cpu-offloading-num-layers 2 --recompute-granularity full --recompute-method uniform "
    "--recompute-num-layers 1",
    "--num-layers 8 --cpu-offloading-num-layers 2 --pipeline-model-parallel-size 2",
    "--num-layers 8 --fine-grained-activation-offloading --offload-modules attn_proj",
    "--num-layers 8 --fine-grained-activation-offloading",
    "--num-layers 8 --fine-grained-activation-offloading --offload-modules qkv_linear core_attn",
    "--num-layers 8 --cpu-offloading-num-layers 2 --fine-grained-activation-offloading --offload-modules core_attn",
]


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
        if spec is None or (spec.kind == "any" and name != "cuda_graph_scope"):
            continue
        value = ctx.get(path)
        out[name] = TORCH_DTYPES.get(value, value) if spec.kind == "dtype" else value
    return out


UNKNOWN = Raised("", "", "no verdict")  # megatron-core could not run this stage here (Transformer Engine missing)


def _megatron_offload_error(stage: str, build: Any) -> Raised | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build()
    except (AssertionError, ValueError, NotImplementedError, TypeError, RuntimeError) as err:
        message = str(err)
        frame = traceback.extract_tb(err.__traceback__)[-1]
        bare_offload_assert = not message and "offload_modules" in (frame.line or "")
        if "offload" in message.lower() or bare_offload_assert or message.startswith(REGISTERED):
            return Raised(stage, message, type(err).__name__)
        if "'NoneType' and 'Version'" in message:  # is_te_min_version without Transformer Engine: no verdict
            return UNKNOWN
        if "CUDA" in message or "cuda" in message:  # HybridDeviceOptimizer needs a GPU; the checks passed
            return None
        raise AssertionError(f"megatron-core rejected the config for another reason ({stage}): "
                             f"{type(err).__name__}: {message}") from err
    return None


def megatron_verdict(cfg: CanonicalConfig) -> dict[str, Raised | None]:
    """Per stage ("model", "optimizer"): what megatron-core raised for an offload reason, None, or UNKNOWN."""
    ctx = Context(cfg)
    model = {**MODEL_BASE, **_kwargs(ctx, "model", TC_FIELDS)}
    if model["num_layers"] <= max(2, model.get("cpu_offloading_num_layers", 0)) and not ctx.is_set("model.num_layers"):
        model["num_layers"] = model.get("cpu_offloading_num_layers", 0) + 2  # unknown depth: assume valid
    if model.get("pipeline_model_parallel_size", 1) > 1:
        model.setdefault("pipeline_dtype", model.get("params_dtype", torch.bfloat16))  # what Bridge/MLM do
    optimizer = {"lr": 1e-4, **_kwargs(ctx, "optimizer", OC_FIELDS)}
    def build_optimizer() -> None:
        config = OptimizerConfig(**optimizer)
        param = torch.nn.Parameter(torch.zeros(4))
        _get_megatron_optimizer_based_on_param_groups(config, [], [{"params": [param]}])

    return {"model": _megatron_offload_error("model", lambda: TransformerConfig(**model)),
            "optimizer": _megatron_offload_error("optimizer", build_optimizer)}


def _normalise(message: str) -> str:
    # F3 prints Python sets, whose order varies between runs.
    return re.sub(r"\{([^{}]*)\}", lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", message)


def _stage(finding: Finding) -> str | None:
    if finding.upstream is None or finding.severity != "error":
        return None
    anchor = finding.upstream.anchor
    if finding.upstream.project == "megatron-core":
        return "model" if "transformer_config.py" in anchor else "optimizer" if "optimizer/" in anchor else None
    return "front-end"


def _declared_megatron_messages(finding: Finding) -> list[str]:
    return [c.message or "" for c in BY_ID[finding.rule].upstream if c.project == "megatron-core"]


def compare(cfg: CanonicalConfig) -> None:
    findings = run([cfg])
    verdict = megatron_verdict(cfg)
    for raised in verdict.values():
        if raised is None or raised is UNKNOWN:
            continue
        quoted = [_normalise(f.upstream.message or "") for f in findings if _stage(f) == raised.stage]
        front_end = [f for f in findings if _stage(f) == "front-end" and any(
            m.split("{")[0][:30] == raised.message[:30] for m in _declared_megatron_messages(f))]
        assert _normalise(raised.message) in quoted or front_end, (
            f"megatron-core raised {raised.kind}({raised.message!r}) at the {raised.stage} stage; the checker "
            f"quoted {quoted}; findings: {[(f.rule, f.message) for f in findings]}")
    for f in findings:
        stage = _stage(f)
        if stage in ("model", "optimizer") and verdict[stage] is not UNKNOWN:
            assert verdict[stage] is not None, f"checker reported {f.rule} ({f.upstream.message!r}) but " \
                                               f"megatron-core accepted the {stage} stage"


def _configs(entry: Entry, overrides: tuple[str, ...] = ()) -> list[CanonicalConfig]:
    request = entry.request()
    return load(Request(request.files, request.overrides + overrides, request.argv, request.flavor, VERSION))


CASES = [(e, ()) for e in entries()] + [(e, v) for e in entries() for v in VARIANTS.get(e.name, [])]


@pytest.mark.parametrize("entry,overrides", CASES, ids=[f"{e.name}{'+' + '+'.join(v) if v else ''}" for e, v in CASES])
def test_examples_agree_with_megatron_core(entry: Entry, overrides: tuple[str, ...]) -> None:
    for cfg in _configs(entry, overrides):
        compare(cfg)


@pytest.mark.parametrize("argv", ARGV_VARIANTS)
def test_command_lines_agree_with_megatron_core(argv: str) -> None:
    for cfg in load(Request((), (), argv, "megatron-lm", VERSION)):
        compare(cfg)


def test_every_megatron_offload_check_was_reached() -> None:
    """The cases above make megatron-core raise every registered check of the installed version at least once."""
    raised: list[str] = []
    cases = [c for e, v in CASES for c in _configs(e, v)] + \
        [c for a in ARGV_VARIANTS for c in load(Request((), (), a, "megatron-lm", VERSION))]
    for cfg in cases:
        raised += [r.message for r in megatron_verdict(cfg).values() if r is not None and r is not UNKNOWN]
    registered = {c.message for rule in BY_ID.values() for c in rule.upstream
                  if c.project == "megatron-core" and c.stage in (STAGE_CONFIG, STAGE_OPTIMIZER) and c.anchor(VERSION)}
    missing = [m for m in registered if not any(
        (r == "" if m is None else r.startswith(m.split("{")[0])) for r in raised)]
    assert not missing, f"never reached: {missing}"
