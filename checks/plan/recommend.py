"""Which mechanism, and how little of it, makes a job fit; or what to do instead.

For each mechanism the search finds the smallest setting whose peak fits the budget (memory never
grows with more offloading, so the first fitting setting in increasing order is the smallest), prices
it with the throughput model, and compares it with the alternatives that need no host memory
(selective and full recompute). The cheapest option that fits, GPU and host, wins.

Which settings are legal is the checker's call, not the planner's: each candidate is the job's own settings
(:func:`job_settings`) plus the option's, checked by :func:`checks.api.validate`. A setting the checker
refuses, or warns about, is not offered; a finding about the job's environment (``env.*``: a variable the
option needs, such as ``NVTE_CPU_OFFLOAD_V1``) is a requirement, named in the option's note.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from checks.config import Environment
from checks.plan.hardware import Hardware
from checks.plan.memory import NONE, Offload, StageMemory, Training, plan_memory
from checks.plan.throughput import StepTime, step_time

if TYPE_CHECKING:
    from checks.engine import Finding

FRACTIONS = tuple(round(0.05 * i, 2) for i in range(1, 21))
DENSE_MODULE_SETS = (("core_attn",), ("core_attn", "attn_proj"), ("qkv_linear", "core_attn", "attn_proj"))
MOE_MODULE_SETS = (("expert_fc1",), ("expert_fc1", "moe_act"), ("qkv_linear", "core_attn", "attn_proj",
                                                                "expert_fc1", "moe_act"))
# How the checker knows a hybrid (Mamba) stack: by its Bridge provider (ACT009 reads the provider class), here
# NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/models/mamba/mamba_provider.py:29.
HYBRID_PROVIDER = "megatron.bridge.models.mamba.mamba_provider.MambaModelProvider"


@dataclass(frozen=True)
class Budget:
    hardware: Hardware
    headroom: float = 0.1  # share of GPU memory kept free (allocator fragmentation, CUDA context, NCCL)
    host_headroom: float = 0.2  # share of host memory kept free (OS, data loaders, page cache)
    # compute efficiency (share of dense bf16 peak): None for the published one (checks/data/efficiency.json),
    # a number when --mfu gives it
    efficiency: float | None = None

    @property
    def device_bytes(self) -> int:
        return int(self.hardware.gpu_memory_bytes * (1 - self.headroom))

    @property
    def host_bytes_per_node(self) -> int:
        return int(self.hardware.host_memory_bytes * (1 - self.host_headroom))


@dataclass(frozen=True)
class Option:
    mechanism: str
    settings: dict[str, Any]  # Megatron-Core names
    peak_device_bytes: int
    host_bytes_per_node: int
    slowdown: float  # step time over the job's without offloading, less 1: 0.1 is 10% slower
    fits: bool
    note: str = ""
    step_s: float = 0.0  # the whole step (its slowest pipeline stage)


@dataclass(frozen=True)
class Recommendation:
    budget: Budget
    baseline: list[StageMemory]
    options: list[Option]
    choice: Option | None
    verdict: str
    baseline_time: StepTime  # the step without offloading, what every option's slowdown is against


def peak(stages: list[StageMemory]) -> int:
    return max(s.device_bytes for s in stages)


def host_per_node(stages: list[StageMemory], hw: Hardware, world_size: int) -> int:
    """Every GPU of a node at the most host-hungry stage's use: conservative, host memory is shared.

    A job smaller than a node puts only its own GPUs there."""
    return max(s.host_bytes for s in stages) * min(hw.gpus_per_node, world_size)


def job_settings(t: Training) -> dict[str, Any]:
    """The job as canonical settings, without offloading: what the checker needs to judge an option (layout,
    depth, experts, recompute, precision), each only where the job's megatron-core version has the field."""
    from checks.config import split_path
    from checks.versions import profile

    values: dict[str, Any] = {
        "model.num_layers": t.shape.num_layers, "model.hidden_size": t.shape.hidden_size,
        "model.num_attention_heads": t.shape.num_attention_heads,
        "model.tensor_model_parallel_size": t.par.tensor, "model.pipeline_model_parallel_size": t.par.pipeline,
        "model.context_parallel_size": t.context_parallel, "model.expert_model_parallel_size": t.par.expert,
        "model.expert_tensor_parallel_size": t.par.expert_tensor, "model.sequence_parallel": t.sequence_parallel,
        "optimizer.use_distributed_optimizer": t.distributed_optimizer,
    }
    if t.par.virtual_pipeline > 1:
        values["model.virtual_pipeline_model_parallel_size"] = t.par.virtual_pipeline
    if t.shape.moe is not None:
        values["model.num_moe_experts"] = t.shape.moe.num_experts
        values["model.moe_router_topk"] = t.moe_top_k
    if t.recompute != "none":
        values["model.recompute_granularity"] = t.recompute
        if t.recompute == "full":
            values["model.recompute_method"] = t.recompute_method
            values["model.recompute_num_layers"] = t.recompute_num_layers
    # Stated, not left to a default: OPT011 refuses optimizer offload with fp32 parameters and the distributed
    # optimizer, and a dtype the settings leave out is unknown to the checker, so the option went unjudged.
    values["model.params_dtype"] = "bf16" if t.param_bytes == 2 else "fp32"
    if t.param_bytes == 2:
        values["model.bf16"] = True
    prof = profile(t.version)
    return {path: value for path, value in values.items() if prof.field(*split_path(path)) is not None}


@dataclass(frozen=True)
class Verdict:
    """What the checker says of one candidate, beyond what it says of the job without it."""

    refused: tuple[str, ...]  # "RULE: message" of each error or warning about the option's own settings
    needs: tuple[str, ...]  # what the job's environment needs (env.* findings): "NAME=VALUE ... (RULE)", or the fix

    @property
    def accepted(self) -> bool:
        return not self.refused


class Checker:
    """Asks :func:`checks.api.validate` about the options of one job; each candidate is checked once."""

    def __init__(self, t: Training, environment: Environment | None = None) -> None:
        env = environment or Environment()
        variables = tuple(sorted((name, str(setting.value)) for name, setting in env.variables.items()))
        base = tuple(sorted(job_settings(t).items()))
        self._key = (t.version, base, variables, env.te_version, HYBRID_PROVIDER if t.shape.hybrid else None)

    def verdict(self, settings: Mapping[str, Any]) -> Verdict:
        return _verdict(self._key, _frozen(canonical(settings, self._key[0])))


def canonical(settings: Mapping[str, Any], version: str) -> dict[str, Any]:
    """An option's Megatron-Core names as canonical paths: ``optimizer.`` for an OptimizerConfig field of
    ``version``, else ``model.`` (TransformerConfig; the checker refuses a name neither has)."""
    from checks.versions import profile

    prof = profile(version)
    return {(f"optimizer.{name}" if prof.field("optimizer", name) is not None else f"model.{name}"): value
            for name, value in settings.items()}


def _frozen(values: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in values.items()))


@functools.lru_cache(maxsize=4096)
def _verdict(key: tuple[Any, ...], candidate: tuple[tuple[str, Any], ...]) -> Verdict:
    values = {**_job_values(key), **{k: list(v) if isinstance(v, tuple) else v for k, v in candidate}}
    found = _run(key, values)
    if found is None:
        return Verdict((f"megatron-core {key[0]} has no field for one of {', '.join(k for k, _ in candidate)}",), ())
    before = {(f.rule, f.path) for f in _base_findings(key) or ()}
    new = [f for f in found if f.severity in ("error", "warning") and (f.rule, f.path) not in before]
    return Verdict(tuple(f"{f.rule}: {f.message}" for f in new if not f.path.startswith("env.")),
                   tuple(_need(f) for f in new if f.path.startswith("env.")))


def _job_values(key: tuple[Any, ...]) -> dict[str, Any]:
    _, base, variables, _, _ = key
    return {**dict(base), **{f"env.{name}": value for name, value in variables}}


@functools.lru_cache(maxsize=1024)
def _base_findings(key: tuple[Any, ...]) -> tuple[Finding, ...] | None:
    """What the checker says of the job without any option (once per job)."""
    return _run(key, _job_values(key))


def _run(key: tuple[Any, ...], values: dict[str, Any]) -> tuple[Finding, ...] | None:
    """The checker's findings on ``values``; None where it refuses a field the version does not have."""
    from checks.api import validate

    version, _, _, te_version, model_class = key
    try:
        return tuple(validate(values, version=version, environment=Environment(te_version=te_version),
                              model_class=model_class))
    except ValueError:  # a field this megatron-core version does not have: the checker refuses it (CFG003)
        return None


def _need(finding: Finding) -> str:
    """An environment requirement in no front end's spelling: the variable the finding is about (its canonical
    path) at the value its patch sets (the patch is in the Bridge spelling ``validate`` reads, env_vars.*)."""
    patch = finding.patch or {}
    if len(patch) == 1:
        return f"{finding.path.removeprefix('env.')}={next(iter(patch.values()))} in the job's environment " \
               f"({finding.rule})"
    return f"{finding.fix} ({finding.rule})"


def timed(t: Training, offload: Offload, budget: Budget, stages: list[StageMemory] | None = None) -> StepTime:
    """The step time of ``t`` with ``offload`` on the budget's hardware, at its efficiency."""
    return step_time(t, offload, budget.hardware, budget.efficiency, memory=stages)


def _option(t: Training, offload: Offload, budget: Budget, mechanism: str, settings: dict[str, Any],
            note: str = "", base_s: float | None = None) -> Option:
    """``base_s``: the step without offloading (computed when not given), the measure of the slowdown."""
    stages = plan_memory(t, offload)
    device, host = peak(stages), host_per_node(stages, budget.hardware, t.world_size)
    step = timed(t, offload, budget, stages).step_s
    base = base_s if base_s is not None else timed(t, NONE, budget).step_s
    return Option(mechanism, settings, device, host, step / base - 1 if base else 0.0,
                  device <= budget.device_bytes and host <= budget.host_bytes_per_node, note, step)


def _first_fitting(options: list[Option]) -> Option:
    return next((o for o in options if o.fits), options[-1])


def _smallest(make: Callable[[int], Option], low: int, high: int) -> Option:
    """The option at the smallest setting in [low, high] that fits, or at ``high``: a binary search, valid
    because memory never grows with the setting (tests/test_plan.py checks that property)."""
    best = make(high)
    if not best.fits:
        return best
    while low < high:
        middle = (low + high) // 2
        option = make(middle)
        if option.fits:
            best, high = option, middle
        else:
            low = middle + 1
    return best  # make(high) fits throughout, and low == high here


def recommend(t: Training, budget: Budget, environment: Environment | None = None) -> Recommendation:
    """The options for ``t`` within ``budget``, and the cheapest that fits. ``environment``: the job's launch
    environment, for the checker (a variable an option needs that the job already sets is not a requirement)."""
    baseline = plan_memory(t, NONE)
    options: list[Option] = []
    base_time = timed(t, NONE, budget, baseline)
    base_s = base_time.step_s
    if peak(baseline) <= budget.device_bytes:
        nothing = Option("none", {}, peak(baseline), 0, 0.0, True, step_s=base_s)
        return Recommendation(budget, baseline, [nothing], nothing, "fits without offloading", base_time)
    checker = Checker(t, environment)
    _option_at = functools.partial(_option, base_s=base_s)

    def optimizer(fraction: float) -> dict[str, Any]:
        return {"optimizer_cpu_offload": True, "optimizer_offload_fraction": fraction,
                "use_precision_aware_optimizer": True, "use_distributed_optimizer": True}

    fractions = [f for f in FRACTIONS if checker.verdict(optimizer(f)).accepted]
    if fractions:
        options.append(_smallest(lambda i: _option_at(
            t, Offload(optimizer_offload_fraction=fractions[i]), budget, "optimizer offload",
            optimizer(fractions[i])), 0, len(fractions) - 1))

    def layers(n: int) -> dict[str, Any]:
        return {"cpu_offloading": True, "cpu_offloading_num_layers": n}

    # The checker's limits on the layer count are upper bounds (ACT001 its range, ACT008 the last layer), and
    # where it refuses one layer (ACT002 PP > 1, ACT003 recompute, ACT009 a hybrid stack) it refuses them all.
    high = t.shape.num_layers - 1
    if high >= 1 and checker.verdict(layers(1)).accepted:
        while not checker.verdict(layers(high)).accepted:
            high -= 1
        options.append(_smallest(lambda n: _option_at(
            t, Offload(cpu_offloading_num_layers=n), budget, "layer-level activation offload", layers(n)), 1, high))

    def fine_grained(modules: tuple[str, ...]) -> dict[str, Any]:
        return {"fine_grained_activation_offloading": True, "offload_modules": list(modules)}

    sets = [m for m in DENSE_MODULE_SETS + (MOE_MODULE_SETS if t.shape.moe is not None else ())
            if checker.verdict(fine_grained(m)).accepted]
    if sets:
        options.append(_first_fitting([_option_at(t, Offload(offload_modules=m), budget,
                                               "fine-grained activation offload", fine_grained(m)) for m in sets]))
        both = {**fine_grained(sets[-1]), **optimizer(1.0)}
        if checker.verdict(both).accepted:
            options.append(_option_at(t, Offload(offload_modules=sets[-1], optimizer_offload_fraction=1.0), budget,
                                   "fine-grained activation offload + optimizer offload", both))
    options += _alternatives(t, budget, base_s)
    # Every option offered is one the checker accepts, whatever the searches assumed above.
    options = [_noted(o, checked) for o in options if (checked := checker.verdict(o.settings)).accepted]
    if not options:  # the checker refuses every mechanism: say so rather than offer nothing
        options.append(Option("none", {}, peak(baseline), 0, 0.0, False, "the checker refuses every option here",
                              base_s))
    fitting = sorted((o for o in options if o.fits), key=lambda o: o.slowdown)
    choice = fitting[0] if fitting else None
    if choice is None:
        verdict = ("nothing here fits: offloading and recompute are not enough; add tensor or pipeline "
                   "parallelism, shard parameters with Megatron-FSDP, or use GPUs with more memory")
    elif "offload" in choice.mechanism:
        verdict = f"use {choice.mechanism}"
    else:
        verdict = f"offloading does not help here (or costs more): use {choice.mechanism}"
    return Recommendation(budget, baseline, options, choice, verdict, base_time)


def _noted(option: Option, verdict: Verdict) -> Option:
    """The option with what it needs of the job's environment (the checker's findings on env.*) in its note."""
    if not verdict.needs:
        return option
    needs = "needs " + "; ".join(verdict.needs)
    return replace(option, note=f"{option.note}; {needs}" if option.note else needs)


def _alternatives(t: Training, budget: Budget, base_s: float) -> list[Option]:
    """Recompute, priced by the step-time model with the forward work it repeats."""
    out = []
    if t.recompute == "none":
        out.append(_recomputed(replace(t, recompute="selective"), budget, base_s, "selective recompute",
                               {"recompute_granularity": "selective", "recompute_modules": ["core_attn"]}))
    if t.recompute != "full":
        out.append(_recomputed(replace(t, recompute="full", recompute_method="uniform", recompute_num_layers=1),
                               budget, base_s, "full recompute",
                               {"recompute_granularity": "full", "recompute_method": "uniform",
                                "recompute_num_layers": 1}))
    return out


def _recomputed(t: Training, budget: Budget, base_s: float, mechanism: str, settings: dict[str, Any]) -> Option:
    stages = plan_memory(t, NONE)
    step = timed(t, NONE, budget, stages).step_s
    return Option(mechanism, settings, peak(stages), 0, step / base_s - 1 if base_s else 0.0,
                  peak(stages) <= budget.device_bytes, step_s=step)
