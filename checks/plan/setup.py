"""A training job for the planner, from a config (in any format the checker reads) or a preset.

The model comes from the config's dimensions (``checks/model/shape.py``) or, for NeMo-RL, from the
preset matching the model's ``model_name``; training dimensions and the current offload settings come from
the same canonical config the rules read. What no config states (how many GPUs, hence the
data-parallel size) is an option. A NeMo-RL config gives one canonical config per Megatron model; each is
its own job, labelled with its ``target``.

A config of bare ``--set`` overrides over a preset (``--preset X --set KEY=V``) is the preset's job with those
changes: what the overrides leave unsaid is what the preset's own plan assumes. A config file states its own
training, and what it leaves out is its framework's default, whatever model the preset supplies.

A job the planner cannot express (multi-token prediction, an explicit pipeline layout, FP8 training, FSDP, ...)
is an input error naming the field and what to do, never a plan of some other job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from checks.config import Environment
from checks.context import Context
from checks.errors import InputError
from checks.loaders.checkpoint import CATALOGUE
from checks.model.parameters import stage_chunks
from checks.model.shape import ModelShape, Parallelism, ShapeUnknown, from_catalogue, shape_from
from checks.plan.memory import Offload, Training
from checks.plan.presets import PRESETS, Preset, preset_for_model_name
from checks.versions import DEFAULT_VERSION

_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
_MC = "NVIDIA/Megatron-LM@d98e8a64:megatron/core/"

# A preset states a model and its parallel layout, not a global batch: the planner assumes this many micro-batches
# per data-parallel rank per step (enough to fill the pipeline of every preset, whose largest PP is 8), and says so.
PRESET_MICROBATCHES_PER_STEP = 8


@dataclass(frozen=True)
class Assumption:
    """What the planner assumed, and about which input: ``about`` names the option that replaces it."""

    text: str
    about: str = ""  # "data_parallel": the GPU count (--gpus) replaces it; "": nothing does


DATA_PARALLEL = "data_parallel"


@dataclass(frozen=True)
class Job:
    training: Training
    offload: Offload  # what the config already asks for
    source: str  # "preset llama3-8b", "config", "config (model from preset qwen3-30b-a3b)"
    assumptions: tuple[Assumption, ...] = ()
    target: str | None = None  # the NeMo-RL model it is ("policy", "value", "teacher", ...), else None
    # What the checker is told about the job's environment when the planner asks it about an option: the
    # variables it is launched with (the config's env_vars and --env) and the Transformer Engine version.
    environment: Environment = field(default_factory=Environment)
    # A preset's step is PRESET_MICROBATCHES_PER_STEP micro-batches per data-parallel rank, so its global batch
    # grows with the data-parallel size; a config's is the size it states.
    batch_per_rank: bool = False


def default_data_parallel(par: Parallelism, cp: int = 1) -> int:
    """The smallest data-parallel size the expert layout allows: ``tp x cp x dp`` divisible by ``ep x etp``."""
    need = par.expert * par.expert_tensor
    base = par.tensor * cp
    return need // math.gcd(need, base) if need > 1 else 1


# --- what a preset's own plan assumes ---------------------------------------------------------------------------

# (Training field, what the preset's plan takes for it, the config paths any one of which states it). A config of
# bare --set overrides takes the preset's value for each field none of its paths states; the other Training
# fields the planner reads from a config hold, unstated, the same value in both (no recompute, flash attention,
# fp32 optimizer states, one gradient bucket).
_PRESET_TRAINING: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("param_bytes", "bf16 parameters", ("model.bf16", "model.fp16", "model.params_dtype")),
    ("grad_bytes", "fp32 main gradients", ("ddp.grad_reduce_in_fp32", "run.grad_reduce_in_bf16")),
    ("distributed_optimizer", "distributed optimizer",
     ("optimizer.use_distributed_optimizer", "ddp.use_distributed_optimizer")),
    ("precision_aware_optimizer", "precision-aware optimizer", ("optimizer.use_precision_aware_optimizer",)),
    ("hidden_dropout", "no dropout", ("model.hidden_dropout",)),
    ("attention_dropout", "no dropout", ("model.attention_dropout",)),
    ("sequence_parallel", "sequence parallel when TP > 1", ("model.sequence_parallel",)),
    ("moe_top_k", "top-{} routing", ("model.moe_router_topk",)),
    ("seq_length", "sequence length {}", ("run.seq_length",)),
    ("micro_batch_size", "micro-batch size {}", ("run.micro_batch_size",)),
    ("global_batch_size", f"{PRESET_MICROBATCHES_PER_STEP} micro-batches per step", ("run.global_batch_size",)),
)
_PRESET_NOTE = "bf16 parameters, fp32 main gradients, distributed optimizer, precision-aware optimizer, no dropout, " \
               "sequence parallel when TP > 1"


def _preset_training(preset: Preset, par: Parallelism, dp: int, version: str) -> Training:
    training = Training(preset.shape, par, data_parallel=dp, seq_length=preset.seq_length,
                        micro_batch_size=preset.micro_batch_size, sequence_parallel=par.tensor > 1,
                        precision_aware_optimizer=True,
                        global_batch_size=dp * preset.micro_batch_size * PRESET_MICROBATCHES_PER_STEP,
                        version=version)
    return replace(training, moe_top_k=preset.moe_top_k) if preset.moe_top_k else training


def from_preset(preset: Preset, data_parallel: int | None = None, **overrides: Any) -> Job:
    par = preset.parallelism
    dp = data_parallel or default_data_parallel(par)
    training = _preset_training(preset, par, dp, str(overrides.pop("version", DEFAULT_VERSION)))
    notes = [Assumption(f"model and parallel layout from preset {preset.name}: {'; '.join(preset.sources)}"),
             Assumption(f"{PRESET_MICROBATCHES_PER_STEP} micro-batches per step, data-parallel size {dp}"
                        + ("" if data_parallel else " (the smallest the layout allows; set --gpus)"), DATA_PARALLEL),
             Assumption(_PRESET_NOTE)]
    return Job(replace(training, **overrides), Offload(), f"preset {preset.name}", tuple(notes), batch_per_rank=True)


# --- a config ---------------------------------------------------------------------------------------------------

def from_config(ctx: Context, data_parallel: int | None = None, preset: Preset | None = None, *,
                overrides_only: bool = False) -> Job | str:
    """The job a canonical config describes, or why the planner cannot size it.

    Without the model's dimensions in the config, the model comes from ``preset``, or from the preset
    matching NeMo-RL's ``model_name`` for this model. ``overrides_only``: the config is nothing but ``--set``
    overrides, so what they leave unsaid is the preset's own plan rather than the framework's defaults.
    Raises :class:`InputError` for a layout megatron-core refuses or a job the planner cannot express.
    """
    for path in (*_LAYOUT, _VPP, "model.context_parallel_size"):
        value = ctx.get(path) if ctx.is_set(path) else None
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise _error(ctx, path, f"{_name(path)}={value}: a parallel size is at least 1; megatron-core cannot "
                                    "build this layout, so there is nothing to plan")
    _refuse_unmodelled(ctx)
    found = shape_from(ctx)
    if preset is not None and not isinstance(found, ShapeUnknown) and from_catalogue(ctx):
        found = ShapeUnknown(checkpoint="model_name")  # the preset the user names over the catalogue's row
    if isinstance(found, ShapeUnknown):
        preset = preset or preset_for_model_name(str(ctx.get("run.model_name") or ""))
        if preset is None:
            return f"the planner needs the model's dimensions: {unsized(ctx, found)}; add --preset NAME " \
                   f"(known: {', '.join(PRESETS)})"
        _refuse_mixed_model(ctx, found, preset)
        return _job(ctx, None, data_parallel, preset, overrides_only)
    return _job(ctx, found, data_parallel, preset, False)


def unsized(ctx: Context, found: ShapeUnknown) -> str:
    """Why the config does not say how big the model is."""
    if ctx.flavor != "nemo-rl":
        return found.describe()
    name = ctx.setting("run.model_name")
    said = f"{name.origin.key or 'model_name'} = {name.value}" if name is not None else "no model_name is set"
    return f"NeMo-RL takes them from the Hugging Face checkpoint ({said}), which is not one of the presets"


def _job(ctx: Context, found: tuple[ModelShape, Parallelism] | None, data_parallel: int | None,
         preset: Preset | None, overrides_only: bool) -> Job:
    notes: list[Assumption] = []
    source = "config"
    if found is None:
        assert preset is not None
        shape: ModelShape = preset.shape
        # --set overrides change the preset's layout; a config file states its own, as the framework reads it.
        par, unsaid = _preset_layout(ctx, preset) if overrides_only else (_config_layout(ctx), [])
        default_seq_length = preset.seq_length
        source = f"config (model from preset {preset.name})"
        notes.append(Assumption(f"model dimensions from preset {preset.name}: {'; '.join(preset.sources)}"))
        if unsaid:
            notes.append(Assumption(f"{', '.join(unsaid)} from preset {preset.name} (the config does not set them)"))
    else:
        shape, par = found
        default_seq_length = 4096
        if from_catalogue(ctx):
            layers = ctx.setting("model.num_layers")
            assert layers is not None and layers.origin.file is not None
            source = f"config (model from the model catalogue: {layers.origin.file.removeprefix(CATALOGUE)})"
            notes.append(Assumption(f"model dimensions from the model catalogue ({layers.origin.note}); the "
                                    "provider's other fields (biases, QK norm) at their defaults"))
        elif preset is not None:
            notes.append(Assumption(f"preset {preset.name} not used: the config states the model's dimensions"))
    cp = _int(ctx, "model.context_parallel_size", 1)
    _check_layout(ctx, shape, par, preset.name if found is None and preset is not None else None)
    if _recompute(ctx) == "full" and _value(ctx, "model.distribute_saved_activations") and par.tensor > 1:
        raise _error(ctx, "model.distribute_saved_activations", "distribute_saved_activations=true: the planner "
                     "keeps each full-recompute checkpoint's whole input, not a tensor-parallel share of it; plan "
                     "without it for an upper bound on activations")
    group = _value(ctx, _GROUP)
    if isinstance(group, int) and group != par.pipeline and par.virtual_pipeline > 1:
        # the interleaved schedule's in-flight count (checks/plan/memory.py in_flight) is for groups of PP
        raise _error(ctx, _GROUP, f"{_name(_GROUP)}={group}: the planner models the interleaved schedule with "
                                  f"micro-batch groups of the pipeline size ({par.pipeline}), megatron-core's default "
                                  f"({_MC}model_parallel_config.py:567-568); "
                                  "plan without it")
    dp = data_parallel or _nemo_rl_data_parallel(ctx, par, cp)
    if dp is None:
        dp = default_data_parallel(par, cp)
        notes.append(Assumption(f"data-parallel size {dp}: the config does not say how many GPUs run it (set --gpus)",
                                DATA_PARALLEL))
    training = Training(
        shape=shape, par=par, data_parallel=dp, context_parallel=cp,
        seq_length=_int(ctx, "run.seq_length", default_seq_length),
        micro_batch_size=_int(ctx, "run.micro_batch_size", 1),
        global_batch_size=_int(ctx, "run.global_batch_size", 0),
        sequence_parallel=bool(ctx.get("model.sequence_parallel")),
        recompute=_recompute(ctx), recompute_method=str(ctx.get("model.recompute_method") or "uniform"),
        recompute_num_layers=_int(ctx, "model.recompute_num_layers", 1),
        flash_attention=str(ctx.get("model.attention_backend") or "auto") not in ("unfused", "local"),
        hidden_dropout=_positive(ctx.get("model.hidden_dropout")),
        attention_dropout=_positive(ctx.get("model.attention_dropout")),
        # The preset's model routes to its own top-k; megatron-core's default (2) is not that model's.
        moe_top_k=_stated(ctx, "model.moe_router_topk", preset.moe_top_k or 2) if found is None and preset
        else _int(ctx, "model.moe_router_topk", 2),
        capacity_factor=_capacity_factor(ctx),
        param_bytes=_param_bytes(ctx), grad_bytes=_grad_bytes(ctx),
        distributed_optimizer=bool(ctx.get("optimizer.use_distributed_optimizer")),
        precision_aware_optimizer=bool(ctx.get("optimizer.use_precision_aware_optimizer")),
        main_param_bytes=_dtype_bytes(ctx, "optimizer.main_params_dtype", 4),
        exp_avg_bytes=_dtype_bytes(ctx, "optimizer.exp_avg_dtype", 4),
        exp_avg_sq_bytes=_dtype_bytes(ctx, "optimizer.exp_avg_sq_dtype", 4),
        bucket_size=_bucket_size(ctx, dp), version=ctx.version,
        moe_host_sync=moe_host_sync(lambda path: _value(ctx, path)),
        deterministic=bool(ctx.get("model.deterministic_mode")))
    batch_per_rank = False
    if found is None and overrides_only:
        assert preset is not None
        training, taken = _over_preset(ctx, training, _preset_training(preset, par, dp, ctx.version))
        batch_per_rank = not ctx.is_set("run.global_batch_size")
        if batch_per_rank:  # the preset's step: so many micro-batches, of the size the overrides may state
            training = replace(training, global_batch_size=dp * training.micro_batch_size
                               * PRESET_MICROBATCHES_PER_STEP)
        if taken:
            notes.append(Assumption(f"{', '.join(taken)} from preset {preset.name}, as its own plan assumes (the "
                                    "--set overrides do not set them)"))
    elif not ctx.is_set("run.seq_length"):
        notes.append(Assumption(f"sequence length {default_seq_length}: the config does not state it"))
    check_expert_layout(training, "--gpus" if data_parallel else _where(ctx, "model.expert_model_parallel_size"))
    notes += _unknown_defaults(ctx, overrides_only and found is None,
                               skip=("model.moe_router_topk",) if found is None or shape.moe is None else ())
    notes += _not_counted(ctx, shape, par)
    if ctx.flavor == "nemo-rl" and ctx.cfg.target == "value":
        # megatron_value_worker.py:374-386 replaces the output layer with a hidden -> 1 head before DDP wrapping.
        notes.append(Assumption("the value model is counted with a language-model output layer and logits; NeMo-RL "
                                "gives it a hidden -> 1 value head instead (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/"
                                "value/workers/megatron_value_worker.py:374-386), so its weights and last-stage "
                                "activations come out high"))
    return Job(training, _offload(ctx), source, tuple(notes), ctx.cfg.target, _environment(ctx), batch_per_rank)


# What the planner reads of a config's training, beyond the model: where no input states one of these and the
# loader marks it unknown (a Bridge override file without its recipe), the plan takes megatron-core's default.
_READ = (*(path for _, _, paths in _PRESET_TRAINING for path in paths), "model.tensor_model_parallel_size",
         "model.pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size",
         "model.expert_model_parallel_size", "model.expert_tensor_parallel_size", "model.context_parallel_size",
         "model.recompute_granularity", "optimizer.optimizer_cpu_offload", "model.cpu_offloading",
         "model.fine_grained_activation_offloading")


def _unknown_defaults(ctx: Context, from_preset_plan: bool, skip: tuple[str, ...]) -> list[Assumption]:
    """Unknown is not a default: say which values the plan took at their defaults for want of the input that
    holds them (the preset's plan supplies them instead for bare --set overrides; ``skip``: not read)."""
    if from_preset_plan:
        return []
    unknown = {path: why for path in _READ if path not in skip and not path.startswith("run.") and ctx.exists(path)
               and not ctx.is_set(path) and (why := ctx.cfg.unknown_at(path)) is not None}
    if not unknown:
        return []
    why = next(iter(unknown.values()))
    names = ", ".join(dict.fromkeys(f"{_name(path)}={_shown(ctx.get(path))}" for path in unknown))
    return [Assumption(f"planned at megatron-core's defaults, which no input states ({why.reason}): {names}; give "
                       f"them with {why.supply}")]


def _over_preset(ctx: Context, from_cfg: Training, from_preset_plan: Training) -> tuple[Training, list[str]]:
    """The config's reading where it states a field, the preset's plan where it does not; and what was taken."""
    taken: list[str] = []
    values: dict[str, Any] = {}
    for name, label, paths in _PRESET_TRAINING:
        if not any(ctx.is_set(path) for path in paths):
            values[name] = getattr(from_preset_plan, name)
            said = label.format(values[name])
            if said not in taken and (name != "moe_top_k" or from_cfg.shape.moe is not None):
                taken.append(said)
    return replace(from_cfg, **values), taken


_TP, _PP, _EP, _ETP = ("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
                       "model.expert_model_parallel_size", "model.expert_tensor_parallel_size")
_VPP = "model.virtual_pipeline_model_parallel_size"
_LAYOUT = (_TP, _PP, _EP, _ETP)
_FIRST, _LAST = "model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage"
_GROUP = "model.microbatch_group_size_per_vp_stage"


def _preset_layout(ctx: Context, preset: Preset) -> tuple[Parallelism, list[str]]:
    """The preset's parallel layout under what the config states, and the sizes taken from the preset.

    The preset's uneven first and last stages go with its pipeline: the config's own, or an even split when it
    changes the pipeline without stating them."""
    layout = preset.parallelism
    tp = _stated(ctx, _TP, layout.tensor)
    pp = _stated(ctx, _PP, layout.pipeline)
    vpp = _stated(ctx, _VPP, layout.virtual_pipeline)
    if ctx.is_set(_FIRST) or ctx.is_set(_LAST):
        first, last = _optional(ctx, _FIRST), _optional(ctx, _LAST)
    elif (pp, vpp) == (layout.pipeline, layout.virtual_pipeline):
        first, last = layout.first_stage_layers, layout.last_stage_layers
    else:
        first = last = None
    par = Parallelism(tensor=tp, pipeline=pp, virtual_pipeline=vpp, expert=_stated(ctx, _EP, layout.expert),
                      expert_tensor=_stated(ctx, _ETP, layout.expert_tensor if tp == layout.tensor else tp),
                      first_stage_layers=first, last_stage_layers=last)
    unsaid = [_name(path) for path in _LAYOUT if not ctx.is_set(path)]
    if (first is not None and not ctx.is_set(_FIRST)) or (last is not None and not ctx.is_set(_LAST)):
        unsaid.append(f"uneven first and last stages ({first} and {last} layers)")
    return par, unsaid


def _config_layout(ctx: Context) -> Parallelism:
    """The layout a config states, what it leaves out at the framework's defaults (as checks/model/shape.py
    reads a config that gives the model's dimensions)."""
    tp = _int(ctx, _TP, 1)
    return Parallelism(tensor=tp, pipeline=_int(ctx, _PP, 1), virtual_pipeline=_int(ctx, _VPP, 1),
                       expert=_int(ctx, _EP, 1), expert_tensor=_int(ctx, _ETP, tp),
                       first_stage_layers=_optional(ctx, _FIRST), last_stage_layers=_optional(ctx, _LAST))


def _stated(ctx: Context, path: str, otherwise: int) -> int:
    """The config's value when the input sets it (the front end's defaults do not count), else ``otherwise``."""
    return _int(ctx, path, otherwise) if ctx.is_set(path) else otherwise


def _optional(ctx: Context, path: str) -> int | None:
    value = ctx.get(path)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int(ctx: Context, path: str, default: int) -> int:
    value = ctx.get(path)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _name(path: str) -> str:
    """A canonical path's field name; a missing item named in a front end's spelling (``--vocab-size``) as is."""
    return path.split(".", 1)[1] if "." in path else path


def _where(ctx: Context, path: str) -> str:
    """Where the input states ``path`` (file:line, --set #N, argv[N]), else the key itself."""
    setting = ctx.setting(path)
    return setting.origin.describe() if setting is not None else path


def _error(ctx: Context, path: str, problem: str) -> InputError:
    target = f"[{ctx.cfg.target}] " if ctx.cfg.target else ""
    return InputError(_where(ctx, path), target + problem)


# --- what megatron-core refuses, and what the planner cannot express ------------------------------------------

def _check_layout(ctx: Context, shape: ModelShape, par: Parallelism, preset: str | None) -> None:
    """The divisibility megatron-core asserts when it builds the model, each as one input error naming the size."""
    def fail(path: str, problem: str) -> InputError:
        return _error(ctx, path, problem + (f" (the model of preset {preset})" if preset else ""))

    tp, heads, groups = par.tensor, shape.num_attention_heads, shape.num_query_groups
    tp_at = f"{_name(_TP)}={tp}"
    if heads % tp:
        raise fail(_TP, f"{tp_at} does not divide the {heads} attention heads: megatron-core refuses it "
                        f"({_MC}transformer/transformer_config.py:1446); use a tensor-parallel size that divides "
                        f"{heads}")
    if shape.mla is None and groups % tp:
        if tp % groups:
            raise fail(_TP, f"{tp_at} is neither a multiple nor a divisor of the {groups} query groups: "
                            f"megatron-core refuses it ({_MC}transformer/transformer_config.py:1461-1468); use a "
                            f"tensor-parallel size that divides {groups}")
        raise fail(_TP, f"{tp_at} is more than the {groups} query groups: megatron-core then replicates the key "
                        "and value heads across tensor-parallel ranks, which the planner does not model; plan "
                        f"with a tensor-parallel size that divides {groups}")
    dense_ffn = shape.moe is None or not all(shape.moe.layers)
    if dense_ffn and shape.ffn_hidden_size % tp:
        raise fail(_TP, f"{tp_at} does not divide ffn_hidden_size {shape.ffn_hidden_size}: the MLP's "
                        f"column-parallel linear asserts it ({_MC}tensor_parallel/layers.py:1038)")
    if shape.moe is not None:
        moe, ep, etp = shape.moe, par.expert, par.expert_tensor
        if moe.num_experts % ep:
            raise fail(_EP, f"{_name(_EP)}={ep} does not divide the {moe.num_experts} experts: megatron-core "
                            f"asserts it ({_MC}transformer/moe/moe_layer.py:186); use a size that divides "
                            f"{moe.num_experts}")
        if moe.ffn_hidden_size % etp:
            raise fail(_ETP, f"{_name(_ETP)}={etp} does not divide moe_ffn_hidden_size {moe.ffn_hidden_size}: the "
                             "experts' linear layers split it")
    if shape.hybrid is not None:
        for what, count in (("Mamba heads", shape.hybrid.num_heads), ("Mamba groups", shape.hybrid.num_groups)):
            if count % tp:
                raise fail(_TP, f"{tp_at} does not divide the {count} {what}: the Mamba mixer asserts it "
                                f"({_MC}ssm/mamba_mixer.py:262-270)")
    if stage_chunks(shape.num_layers, par) is None:
        named = [path for path in (_FIRST, _LAST, _VPP, _PP) if ctx.is_set(path)]
        raise fail(named[0] if named else _PP, _split_problem(shape.num_layers, par))


def _split_problem(layers: int, par: Parallelism) -> str:
    pp, vpp, first, last = par.pipeline, par.virtual_pipeline, par.first_stage_layers, par.last_stage_layers
    if first is None and last is None:
        if pp * vpp > layers:
            return f"{_name(_PP)}={pp}" + (f" x virtual {vpp}" if vpp > 1 else "") + \
                f" is more pipeline stages than the model's {layers} layers; use a size that divides {layers}"
        virtual = f" x virtual {vpp}" if vpp > 1 else ""
        return f"{layers} layers do not split evenly over {_name(_PP)}={pp}{virtual} ({_MC}transformer/" \
            f"transformer_block.py:147-158, 175-178); use a size that divides {layers}, or set " \
            "num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage"
    empty = [(name, n) for name, n in (("first", first), ("last", last)) if n is not None and n <= 0]
    if empty:
        name, n = empty[0]
        line = {"first": "2303-2304", "last": "2322-2323"}[name]
        field = f"num_layers_in_{name}_pipeline_stage"
        return f"{field}={n}: megatron-core refuses it (\"{field} must be larger than 0\", {_MC}transformer/" \
            f"transformer_config.py:{line}); give that stage at least one layer"
    if vpp > 1:
        return "uneven first and last pipeline stages with a virtual pipeline are not modelled by the planner; " \
            "plan the even split (without num_layers_in_first/last_pipeline_stage)"
    return f"num_layers_in_first_pipeline_stage={first} and num_layers_in_last_pipeline_stage={last} leave layers " \
        f"that do not split evenly over the other stages of {_name(_PP)}={pp} ({layers} layers; megatron-core " \
        f"asserts it, {_MC}transformer/transformer_block.py:130-134)"


def check_expert_layout(t: Training, where: str) -> None:
    """megatron-core needs the world size divisible by ``etp x ep x pp`` (parallel_state.py:874-884)."""
    par = t.par
    need = par.expert_tensor * par.expert * par.pipeline
    if t.world_size % need:
        raise InputError(where, f"{t.world_size} GPUs (TP {par.tensor} x PP {par.pipeline} x CP {t.context_parallel} x "
                                f"DP {t.data_parallel}) are not a multiple of ETP x EP x PP = {need}: megatron-core "
                                f"refuses the expert layout ({_MC}parallel_state.py:874-884); use a GPU count that "
                                f"is a multiple of {math.lcm(need, par.tensor * par.pipeline * t.context_parallel)}")


def _value(ctx: Context, path: str) -> Any:
    return ctx.get(path) if ctx.exists(path) else None


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


# (path, when it is not modelled given its value, what the planner cannot model, what to do). Checked before the
# model's shape: these change the job whatever model the config or a preset gives.
_Refusal = tuple[str, Callable[[Any], bool], str, str]
_UNMODELLED: tuple[_Refusal, ...] = (
    ("model.mtp_num_layers", _truthy, "multi-token prediction layers (their weights, activations and loss on the "
     "last stage)", "plan without them (mtp_num_layers unset) for a lower bound"),
    ("model.pipeline_model_parallel_layout", _truthy, "an explicit pipeline layout",
     "state the split as pipeline_model_parallel_size with num_layers_in_first/last_pipeline_stage"),
    ("model.account_for_embedding_in_pipeline_split", _truthy, "the embedding counted as a layer of the pipeline "
     "split", "state the same split with num_layers_in_first_pipeline_stage (one layer fewer on the first stage, "
     f"{_MC}transformer/transformer_block.py:147-203)"),
    ("model.account_for_loss_in_pipeline_split", _truthy, "the loss counted as a layer of the pipeline split",
     "state the same split with num_layers_in_last_pipeline_stage (one layer fewer on the last stage, "
     f"{_MC}transformer/transformer_block.py:147-203)"),
    ("model.fp8", _truthy, "FP8 training (Transformer Engine's quantized activation copies and FP8 weight caches)",
     "plan the bf16 job without it (fp8 unset) for an estimate"),
    ("model.fp4", _truthy, "FP4 training (Transformer Engine's quantized activation copies and FP4 weight caches)",
     "plan the bf16 job without it (fp4 unset) for an estimate"),
    ("model.fp8_param", _truthy, "FP8 parameters", "plan the bf16 job without them for an upper bound on weights"),
    ("model.fp4_param", _truthy, "FP4 parameters", "plan the bf16 job without them for an upper bound on weights"),
    ("model.heterogeneous_block_specs", _truthy, "heterogeneous layer specs", "plan a uniform model"),
    ("model.experimental_attention_variant", _truthy, "an experimental attention variant",
     "plan standard attention for an estimate"),
    ("model.moe_latent_size", _truthy, "latent MoE projections", "plan without them"),
    ("model.moe_single_grouped_weight", _truthy, "single grouped expert weights", "plan without them"),
    ("model.use_transformer_engine_op_fuser", _truthy, "Transformer Engine fused operations", "plan without them"),
    ("optimizer.decoupled_lr", lambda v: v is not None, "a decoupled learning rate (an extra parameter group)",
     "plan without it"),
    ("run.use_megatron_fsdp", _truthy, "Megatron-FSDP (parameters and gradients sharded over data-parallel ranks)",
     "plan with the distributed optimizer for an upper bound"),
    ("ddp.use_megatron_fsdp", _truthy, "Megatron-FSDP (parameters and gradients sharded over data-parallel ranks)",
     "plan with the distributed optimizer for an upper bound"),
    ("ddp.use_custom_fsdp", _truthy, "Megatron-FSDP (parameters and gradients sharded over data-parallel ranks)",
     "plan with the distributed optimizer for an upper bound"),
    ("ddp.num_distributed_optimizer_instances", lambda v: isinstance(v, int) and v > 1, "more than one "
     "distributed-optimizer instance (state sharded over part of the data-parallel group)", "plan one instance"),
    ("optimizer.optimizer", lambda v: v is not None and v != "adam", "an optimizer other than Adam (its state is "
     "not two moments per parameter)", "plan Adam for an estimate"),
    ("optimizer.use_layer_wise_distributed_optimizer", _truthy, "the layer-wise distributed optimizer",
     "plan the distributed optimizer"),
)


def _refuse_unmodelled(ctx: Context) -> None:
    for path, refused, what, todo in _UNMODELLED:
        value = _value(ctx, path)
        if refused(value):
            raise _error(ctx, path, f"{_name(path)}={_shown(value)}: the planner does not model {what}, so it would "
                                    f"plan another job; {todo}")
    granularity = _value(ctx, "model.recompute_granularity")
    modules = _value(ctx, "model.recompute_modules")
    modules = ["core_attn"] if modules is None else list(modules) if isinstance(modules, (list, tuple)) else [modules]
    if _value(ctx, "model.moe_layer_recompute") and granularity != "full":
        # transformer_config.py:2014-2025: --moe-layer-recompute is selective recompute with "moe" added
        raise _error(ctx, "model.moe_layer_recompute", "moe_layer_recompute=true: the planner models selective "
                     "recompute of core attention only, not of the MoE layer; plan without it for an upper bound")
    if granularity == "selective" and set(map(str, modules)) - {"core_attn"}:
        others = sorted(set(map(str, modules)) - {"core_attn"})
        raise _error(ctx, "model.recompute_modules", f"recompute_modules={_shown(modules)}: the planner models "
                     f"selective recompute of core_attn only, not of {', '.join(others)}; plan with "
                     "recompute_modules=[core_attn] for an upper bound on activations")
    if _value(ctx, "model.cpu_offloading") and _value(ctx, "model.cpu_offloading_weights") \
            and ctx.te_at_least("2.3") is False:
        raise _error(ctx, "model.cpu_offloading_weights", "cpu_offloading_weights=true with Transformer Engine "
                     "before 2.3: the planner does not model offloaded weights; plan without it")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


# Dimensions a config may state while the model comes from a preset: a stated value the preset does not share
# would be dropped, so it is refused (the config gives the model in full, or not at all).
def _preset_values(shape: ModelShape) -> dict[str, Any]:
    moe, hybrid = shape.moe, shape.hybrid
    values: dict[str, Any] = {
        "model.num_layers": shape.num_layers, "model.hidden_size": shape.hidden_size,
        "model.ffn_hidden_size": shape.ffn_hidden_size, "model.num_attention_heads": shape.num_attention_heads,
        "model.num_query_groups": shape.num_query_groups, "model.kv_channels": shape.kv_channels,
        "model.num_moe_experts": moe.num_experts if moe else None,
        "model.moe_ffn_hidden_size": moe.ffn_hidden_size if moe else None,
        "model.moe_shared_expert_intermediate_size": (moe.shared_expert_size or None) if moe else None,
        "model.gated_linear_unit": shape.gated_linear_unit, "model.qk_layernorm": shape.qk_layernorm,
        "model.add_bias_linear": shape.add_bias_linear, "model.add_qkv_bias": shape.add_qkv_bias,
        "model.multi_latent_attention": shape.mla is not None, "run.vocab_size": shape.vocab_size,
    }
    if hybrid is not None:
        values.update({"model.mamba_state_dim": hybrid.state_dim, "model.mamba_head_dim": hybrid.head_dim,
                       "model.mamba_num_heads": hybrid.num_heads, "model.mamba_num_groups": hybrid.num_groups})
    return values


def _refuse_mixed_model(ctx: Context, found: ShapeUnknown, preset: Preset) -> None:
    """The preset gives the whole model: a dimension the config states otherwise, or a feature the preset's model
    lacks, would be planned as the preset's, so it is an input error."""
    for path, expected in _preset_values(preset.shape).items():
        setting = ctx.setting(path)
        if setting is None or (setting.origin.file or "").startswith(CATALOGUE):
            continue
        value = ctx.get(path)
        stated = None if value in (0, None) and expected is None else value
        if isinstance(expected, bool) and stated is None:
            stated = False
        if stated != expected:
            missing = f" (it lacks {_name(found.missing[0])}" + (f" and {len(found.missing) - 1} more" if
                                                                  len(found.missing) > 1 else "") + ")" \
                if found.missing else ""
            raise _error(ctx, path, f"{_name(path)}={_shown(value)}, but the model comes from preset {preset.name} "
                                    f"({_shown(expected)}) because the config does not give all its dimensions"
                                    f"{missing}: give them all, or drop {_name(path)}")
    if found.unmodelled is not None and not (
            (found.unmodelled == "multi-latent attention" and preset.shape.mla is not None)
            or (found.unmodelled == "a hybrid (Mamba) model" and preset.shape.hybrid is not None)
            or found.unmodelled.startswith("the model provider")):
        raise InputError(_where(ctx, "model.num_layers") if ctx.is_set("model.num_layers") else "plan",
                         f"the model uses {found.unmodelled}, which preset {preset.name}'s model does not: the "
                         "planner would plan another model")


def cuda_graph_settings(get: Callable[[str], Any]) -> list[str]:
    """The settings that make the layers replay CUDA graphs rather than run eagerly, as ``key=value``; ``get``
    reads a config path (a context here, a recipe's values in tools/efficiency.py)."""
    graphs = get("model.cuda_graph_impl")
    on = [f"cuda_graph_impl={graphs}"] if graphs not in (None, "none") else []
    return on + [f"{name}=true" for name in ("enable_cuda_graph", "external_cuda_graph") if get(f"model.{name}")]


def moe_host_sync(get: Callable[[str], Any]) -> bool:
    """Whether each MoE layer's dispatcher waits for its token counts on the host: eager, and not drop-and-pad
    routing (NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/moe/token_dispatcher.py:446, 921-958)."""
    return not cuda_graph_settings(get) and not get("model.moe_pad_expert_input_to_capacity")


def _cuda_graphs(ctx: Context) -> list[str]:
    return cuda_graph_settings(lambda path: _value(ctx, path))


def _not_counted(ctx: Context, shape: ModelShape, par: Parallelism) -> list[Assumption]:
    """What the job holds that the planner leaves out, each said rather than silently dropped."""
    notes: list[Assumption] = []
    if on := _cuda_graphs(ctx):
        notes.append(Assumption(f"CUDA graphs ({', '.join(on)}): their static buffers and private memory pool are "
                                "not counted"))
    if _value(ctx, "model.tp_comm_overlap") and par.tensor > 1:
        notes.append(Assumption("tp_comm_overlap: the userbuffers Transformer Engine allocates for it are not counted"))
    if shape.moe is not None and _value(ctx, "model.moe_token_dispatcher_type") == "flex":
        notes.append(Assumption("the flex token dispatcher's communication buffers (DeepEP or HybridEP) are not "
                                "counted"))
    if _value(ctx, "model.cpu_offloading") and _value(ctx, "model.cpu_offloading_weights") \
            and _value(ctx, "model.cpu_offloading_activations"):
        notes.append(Assumption("cpu_offloading_weights: no weights are counted as offloaded (Transformer Engine "
                                "2.3 and later offloads activations only, rule TEX002)"))
    return notes


def _recompute(ctx: Context) -> str:
    granularity = ctx.get("model.recompute_granularity")
    if granularity == "selective" and ctx.get("model.recompute_modules") == []:
        return "none"  # selective with no module recomputes nothing (transformer_block.py:299-302)
    return granularity if granularity in ("full", "selective") else "none"


def _capacity_factor(ctx: Context) -> float:
    """Routed rows per token relative to ``top_k`` under balanced routing. A capacity factor drops the tokens
    over each expert's capacity and, only with ``moe_pad_expert_input_to_capacity``, pads every expert up to it
    (NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/moe/moe_utils.py:1019-1078, router.py:793-801)."""
    factor = ctx.get("model.moe_expert_capacity_factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 0:
        return 1.0
    return float(factor) if ctx.get("model.moe_pad_expert_input_to_capacity") else min(float(factor), 1.0)


def _param_bytes(ctx: Context) -> int:
    if ctx.get("model.bf16") or ctx.get("model.fp16"):
        return 2
    return _dtype_bytes(ctx, "model.params_dtype", 2)


def _dtype_bytes(ctx: Context, path: str, default: int) -> int:
    """Bytes per element of a dtype field (``default`` where the version has no value for it). A dtype the planner
    has no size for is refused: counting fp64 moments as 4 bytes would halve their memory without a word."""
    value = ctx.get(path)
    if value is None:
        return default
    if str(value) not in _DTYPE_BYTES:
        raise _error(ctx, path, f"{_name(path)}={value}: the planner sizes {', '.join(_DTYPE_BYTES)} only; plan with "
                                "one of them")
    return _DTYPE_BYTES[str(value)]


def _grad_bytes(ctx: Context) -> int:
    """Main gradients: fp32 with ``grad_reduce_in_fp32``; Megatron-LM turns it on for bf16 unless
    ``--grad-reduce-in-bf16`` (NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:1204-1216)."""
    if ctx.flavor == "megatron-lm" and ctx.get("model.bf16"):
        return 2 if ctx.get("run.grad_reduce_in_bf16") else 4
    return 4 if ctx.get("ddp.grad_reduce_in_fp32") else _param_bytes(ctx)


def _bucket_size(ctx: Context, dp: int) -> int | None:
    """DDP's default: ``max(40M, 1M x dp)`` elements with ``overlap_grad_reduce``, else one bucket
    (NVIDIA/Megatron-LM@5be96267:megatron/core/distributed/distributed_data_parallel.py:66-72)."""
    if not ctx.get("ddp.overlap_grad_reduce"):
        return None
    size = ctx.get("ddp.bucket_size")
    return size if isinstance(size, int) and size > 0 else max(40_000_000, 1_000_000 * dp)


def _nemo_rl_data_parallel(ctx: Context, par: Parallelism, cp: int) -> int | None:
    gpus, nodes = ctx.get("run.gpus_per_node"), ctx.get("run.num_nodes")
    if not (isinstance(gpus, int) and isinstance(nodes, int) and gpus > 0 and nodes > 0):
        return None
    return max(1, gpus * nodes // (par.tensor * par.pipeline * cp))


def _offload(ctx: Context) -> Offload:
    modules = ctx.get("model.offload_modules") if ctx.get("model.fine_grained_activation_offloading") else None
    fraction = ctx.get("optimizer.optimizer_offload_fraction")
    # Layer-level offloading moves activations only with cpu_offloading_activations (model_parallel_config.py:471;
    # Transformer Engine >= 2.3 ignores cpu_offloading_weights, rule TEX002).
    layers = ctx.get("model.cpu_offloading") and ctx.get("model.cpu_offloading_activations") is not False
    return Offload(
        cpu_offloading_num_layers=_int(ctx, "model.cpu_offloading_num_layers", 0) if layers else 0,
        offload_modules=tuple(modules) if isinstance(modules, list) else (),
        min_offloaded_tensor_size=_int(ctx, "model.min_offloaded_tensor_size", 1024 * 1024),
        activation_offload_fraction=float(ctx.get("model.activation_offload_fraction") or 1.0),
        optimizer_offload_fraction=float(fraction) if ctx.get("optimizer.optimizer_cpu_offload")
        and isinstance(fraction, (int, float)) else 0.0,
        pin_cpu_grads=ctx.get("optimizer.pin_cpu_grads") is not False,
        pin_cpu_params=ctx.get("optimizer.pin_cpu_params") is not False,
        overlap_cpu_optimizer_d2h_h2d=ctx.get("optimizer.overlap_cpu_optimizer_d2h_h2d") is True,
    )


def _environment(ctx: Context) -> Environment:
    """The job's launch environment as the loaders gave it (``env.*``: the config's env_vars over or under
    --env, as the framework applies them) and what the user said about Transformer Engine."""
    variables = {path.removeprefix("env."): setting for path, setting in ctx.cfg.settings.items()
                 if path.startswith("env.")}
    return replace(ctx.env, variables=variables)
