"""A plan from what the command line gives: the budget, the models, each job's dimensions, and the verdicts.

``python -m checks plan`` parses its arguments and calls :func:`budget_for`, :func:`presets`, then
:func:`plan_preset` or :func:`plan_configs`; ``checks/plan/render.py`` only formats the :class:`Plan` they
return. A config with several Megatron models (NeMo-RL's policy, value model, teachers) gives one entry per
model: a :class:`Planned` job for a model that trains, an :class:`Unplanned` note for one the planner does not
plan (it runs forward passes only, or NeMo-RL never builds it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from checks.config import CanonicalConfig
from checks.errors import InputError
from checks.plan.confidence import Band, closest
from checks.plan.hardware import HARDWARE, load_profile
from checks.plan.memory import Offload, StageMemory, plan_memory
from checks.plan.presets import PRESETS, Preset, catalogue_preset, preset_for_model_name
from checks.plan.recommend import FRACTIONS, Budget, Recommendation, host_per_node, peak, recommend, timed
from checks.plan.setup import DATA_PARALLEL, Job, check_expert_layout, from_config, from_preset
from checks.plan.throughput import StepTime
from checks.versions import DEFAULT_VERSION

FITS, FITS_WITH_CHANGE, DOES_NOT_FIT = "fits", "fits_with_change", "does_not_fit"


@dataclass(frozen=True)
class Dimensions:
    """Training dimensions the command line gives over the config's or the preset's (None: not given)."""

    gpus: int | None = None
    seq_length: int | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None


@dataclass(frozen=True)
class Planned:
    """A trained model's plan: the job, what it needs as configured, the recommendation, and the verdict."""

    job: Job
    recommendation: Recommendation
    configured: tuple[StageMemory, ...]  # the most loaded GPU of each pipeline stage, with the config's offload
    configured_host_bytes_per_node: int
    status: str  # FITS (as configured), FITS_WITH_CHANGE (an option fits) or DOES_NOT_FIT
    configured_time: StepTime  # the step as configured (with its own offload settings)
    baseline_time: StepTime  # the same step without any offloading, what offload costs against
    band: Band | None = None  # the validated errors of the published case closest to the recommendation

    @property
    def configured_peak_bytes(self) -> int:
        return peak(list(self.configured))


@dataclass(frozen=True)
class Unplanned:
    """A model shown but not planned: ``inference_only`` (no gradients, optimizer state or activations kept
    for backward, which the training-step model would count) or ``not_built`` (NeMo-RL never builds it)."""

    target: str | None
    status: str  # "inference_only" | "not_built"
    reason: str
    job: Job | None = None  # an inference-only model whose size is known: its weights are shown
    unsized: str = ""  # an inference-only model whose size is not: why, and how to give it

    @property
    def weights_bytes_per_gpu(self) -> int | None:
        """The weights on the most loaded GPU, what an inference-only model holds for certain."""
        if self.job is None:
            return None
        return max(s.weights_bytes for s in plan_memory(self.job.training, self.job.offload))


Entry = Planned | Unplanned


@dataclass(frozen=True)
class Plan:
    entries: tuple[Entry, ...]

    @property
    def status(self) -> str:
        """FITS when every planned model fits, DOES_NOT_FIT when one fits in no way, else FITS_WITH_CHANGE."""
        found = [e.status for e in self.entries if isinstance(e, Planned)]
        if all(f == FITS for f in found):
            return FITS
        return DOES_NOT_FIT if DOES_NOT_FIT in found else FITS_WITH_CHANGE

    @property
    def exit_code(self) -> int:
        """0: every planned model fits as configured; 1: one does not (the recommendation says what would)."""
        return 0 if self.status == FITS else 1


def budget_for(hardware: str, profile: str | None, gpu_memory_gib: float | None, headroom: float,
               mfu: float | None = None) -> Budget:
    """The GPU and host memory to plan for: a node type, or a probed profile, optionally with less GPU memory.
    ``mfu``: the compute efficiency to price steps at, or None for the published one."""
    if not 0 <= headroom < 1 or (mfu is not None and not 0 < mfu <= 1):
        raise InputError("plan", "--headroom must be in [0, 1) and --mfu in (0, 1]")
    if profile:
        node = load_profile(profile)
    elif hardware in HARDWARE:
        node = HARDWARE[hardware]
    else:
        raise InputError("--hardware", f"unknown hardware {hardware!r}; known: {', '.join(HARDWARE)}")
    if gpu_memory_gib is not None:
        if not 0 < gpu_memory_gib < 2**20:  # NaN fails both comparisons
            raise InputError("--gpu-memory-gib", f"must be a positive number of GiB below {2**20}, got "
                                                 f"{gpu_memory_gib}")
        node = replace(node, gpu_memory_bytes=int(gpu_memory_gib * 2**30),
                       name=f"{node.name} with {gpu_memory_gib:g} GiB")
    return Budget(node, headroom, efficiency=mfu)


def presets(given: Sequence[str]) -> tuple[Preset | None, dict[str, Preset]]:
    """``--preset NAME`` and ``--preset TARGET=NAME`` (repeatable): the bare one, and one per model."""
    bare: list[Preset] = []
    per_target: dict[str, Preset] = {}
    for text in given:
        target, eq, name = text.rpartition("=") if "=" in text else ("", "", text)
        found = PRESETS.get(name) or (preset_for_model_name(name) if "/" in name else None)
        if found is None and "/" in name:  # a Hugging Face id: the model catalogue's row
            built = catalogue_preset(name)
            if isinstance(built, str):
                raise InputError("--preset", built)
            found = built
        if found is None:
            raise InputError("--preset", f"unknown preset {name!r}; known: {', '.join(PRESETS)}, or a Hugging Face "
                                         "id the model catalogue holds")
        if not eq:
            bare.append(found)
        elif not target or target in per_target:
            raise InputError("--preset", f"{text!r}: give each model once, as TARGET=NAME")
        else:
            per_target[target] = found
    if len(bare) > 1:
        raise InputError("--preset", "give one --preset NAME; name the other models with --preset TARGET=NAME")
    return (bare[0] if bare else None), per_target


def plan_preset(preset: Preset, dims: Dimensions, budget: Budget, version: str = DEFAULT_VERSION) -> Plan:
    """The plan of a preset's job, with the command line's dimensions, in megatron-core ``version``."""
    return Plan((planned(adjust(from_preset(preset, version=version), dims), budget),))


def plan_configs(configs: Sequence[CanonicalConfig], preset: Preset | None, per_target: Mapping[str, Preset],
                 dims: Dimensions, budget: Budget, where: str, *, overrides_only: bool = False) -> Plan:
    """A plan per model: trained ones in full, forward-only and unbuilt ones as a note. A trained model the
    planner cannot size is an input error naming every such model, never a model left out. ``where``: how
    errors name the input (its first file, or the option that gave it). ``overrides_only``: the configs are
    bare ``--set`` overrides, so a model from ``preset`` is that preset's job with them (checks/plan/setup.py)."""
    from checks.context import Context
    from checks.engine import run

    # The planner plans what can run: a config its framework or megatron-core refuses has no memory to plan.
    errors = sorted({f.rule for f in run(configs) if f.severity == "error"})
    if errors:
        raise InputError(where, f"the job would not start: {', '.join(errors)} (python -m checks check shows them "
                                "and their fixes); plan it once they are fixed")
    labels = [cfg.target for cfg in configs if cfg.target]
    if unknown := sorted(set(per_target) - set(labels)):
        raise InputError("--preset", f"no model {unknown[0]!r} in this config; its models: "
                                     f"{', '.join(labels) or 'one, without a target'}")
    contexts = [Context(cfg) for cfg in configs]
    # A bare --preset is the first trained model, and every model with its model_name (PPO's value model usually
    # shares the policy's); another checkpoint is another model, sized only by its own TARGET=NAME.
    trained = [ctx for ctx in contexts if ctx.cfg.role == "train"]
    first_name = trained[0].get("run.model_name") if trained else None
    entries: list[Entry] = []
    unsized: list[str] = []
    for ctx in contexts:
        target, role, name = ctx.cfg.target, ctx.cfg.role, ctx.get("run.model_name")
        if role == "unused":
            entries.append(Unplanned(target, "not_built", ctx.cfg.role_reason))
            continue
        chosen = per_target.get(target or "") or (preset if name is None or name == first_name else None)
        try:
            found = from_config(ctx, preset=chosen, overrides_only=overrides_only)
        except InputError as err:
            if role != "inference":
                raise
            # a model that runs forward only is still shown, with why the planner cannot size it
            entries.append(Unplanned(target, "inference_only", ctx.cfg.role_reason, unsized=err.render()))
            continue
        if role == "inference":
            why = "" if isinstance(found, Job) else found.split("; add --preset")[0] + f"; add --preset {target}=NAME"
            entries.append(Unplanned(target, "inference_only", ctx.cfg.role_reason,
                                     job=found if isinstance(found, Job) else None, unsized=why))
        elif isinstance(found, str):
            unsized.append(found if len(configs) == 1 else f"[{target}] {found.split('; add --preset')[0]}")
        else:
            entries.append(planned(adjust(found, dims), budget))
    if unsized:
        more = "" if len(configs) == 1 else f"; add --preset NAME or TARGET=NAME (known: {', '.join(PRESETS)})"
        raise InputError(where, "; ".join(unsized) + more)
    if all(isinstance(entry, Unplanned) for entry in entries):
        raise InputError(where, "nothing to plan: " + "; ".join(
            f"[{e.target}] {e.reason}" for e in entries if isinstance(e, Unplanned)))
    return Plan(tuple(entries))


def planned(job: Job, budget: Budget) -> Planned:
    """The job's recommendation and verdict."""
    try:
        rec = recommend(job.training, budget, job.environment)
    except ValueError as err:  # a layout the model cannot split (e.g. layers over pipeline stages)
        raise InputError("plan", str(err) if job.target is None else f"[{job.target}] {err}") from None
    stages = plan_memory(job.training, job.offload)
    host = host_per_node(stages, budget.hardware, job.training.world_size)
    if peak(stages) <= budget.device_bytes and host <= budget.host_bytes_per_node:
        status = FITS
    else:
        status = FITS_WITH_CHANGE if rec.choice is not None else DOES_NOT_FIT
    t = job.training
    configured = timed(t, job.offload, budget, stages)
    baseline = rec.baseline_time
    # The band of the job as it will run: the recommended option's offload, or the job's own when it fits as is.
    chosen = rec.choice.settings if rec.choice is not None and status != FITS else {}
    fraction = float(chosen.get("optimizer_offload_fraction", 0.0)) if chosen \
        else job.offload.optimizer_offload_fraction
    band = closest(t, Offload(optimizer_offload_fraction=fraction), budget.hardware)
    return Planned(job, rec, tuple(stages), host, status, configured, baseline, band)


def adjust(job: Job, dims: Dimensions) -> Job:
    """Command-line training dimensions over the config's or the preset's."""
    t = job.training
    notes = list(job.assumptions)
    data_parallel = t.data_parallel
    if dims.gpus:
        per_replica = t.par.tensor * t.par.pipeline * t.context_parallel
        if dims.gpus % per_replica:
            model = "" if job.target is None else f" ([{job.target}])"
            raise InputError("--gpus", f"{dims.gpus} GPUs are not a multiple of TP x PP x CP = {per_replica}{model}")
        data_parallel = dims.gpus // per_replica
        check_expert_layout(replace(t, data_parallel=data_parallel), "--gpus")
        notes = [n for n in notes if n.about != DATA_PARALLEL]  # the GPU count replaces the assumed size
    micro = dims.micro_batch_size or t.micro_batch_size
    global_batch = dims.global_batch_size or t.global_batch_size
    if (dims.gpus or dims.micro_batch_size) and not dims.global_batch_size and job.batch_per_rank:
        # a preset's step is so many micro-batches per data-parallel rank, whatever their size or number of ranks
        global_batch = data_parallel * micro * t.num_microbatches
    training = replace(t, data_parallel=data_parallel, seq_length=dims.seq_length or t.seq_length,
                       micro_batch_size=micro, global_batch_size=global_batch)
    return replace(job, training=training, assumptions=tuple(notes))


def optimizer_offload_curve(job: Job) -> list[tuple[float, int]]:
    """(``optimizer_offload_fraction``, peak device bytes) from no offload to all of it, for the plot."""
    return [(f, peak(plan_memory(job.training, Offload(optimizer_offload_fraction=f)))) for f in (0.0, *FRACTIONS)]
