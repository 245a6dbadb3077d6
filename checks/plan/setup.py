"""A training job for the planner, from a config (in any format the checker reads) or a preset.

The model comes from the config's dimensions (``checks/model/shape.py``) or, for NeMo-RL, from the
preset matching the model's ``model_name``; training dimensions and the current offload settings come from
the same canonical config the rules read. What no config states (how many GPUs, hence the
data-parallel size) is an option. A NeMo-RL config gives one canonical config per Megatron model; each is
its own job, labelled with its ``target``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from checks.config import Environment
from checks.context import Context
from checks.errors import InputError
from checks.loaders.checkpoint import CATALOGUE
from checks.model.shape import ModelShape, Parallelism, ShapeUnknown, from_catalogue, shape_from
from checks.plan.memory import Offload, Training
from checks.plan.presets import PRESETS, Preset, preset_for_model_name

_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

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


def from_preset(preset: Preset, data_parallel: int | None = None, **overrides: Any) -> Job:
    par = preset.parallelism
    dp = data_parallel or default_data_parallel(par)
    training = Training(preset.shape, par, data_parallel=dp, seq_length=preset.seq_length,
                        micro_batch_size=preset.micro_batch_size, sequence_parallel=par.tensor > 1,
                        precision_aware_optimizer=True,
                        global_batch_size=dp * preset.micro_batch_size * PRESET_MICROBATCHES_PER_STEP,
                        **({"moe_top_k": preset.moe_top_k} if preset.moe_top_k else {}))
    notes = [Assumption(f"model and parallel layout from preset {preset.name}: {'; '.join(preset.sources)}"),
             Assumption(f"{PRESET_MICROBATCHES_PER_STEP} micro-batches per step, data-parallel size {dp}"
                        + ("" if data_parallel else " (the smallest the layout allows; set --gpus)"), DATA_PARALLEL),
             Assumption("bf16 parameters, fp32 main gradients, distributed optimizer, precision-aware optimizer")]
    return Job(replace(training, **overrides), Offload(), f"preset {preset.name}", tuple(notes), batch_per_rank=True)


def from_config(ctx: Context, data_parallel: int | None = None, preset: Preset | None = None) -> Job | str:
    """The job a canonical config describes, or why the planner cannot size it.

    Without the model's dimensions in the config, the model comes from ``preset``, or from the preset
    matching NeMo-RL's ``model_name`` for this model.
    """
    for path in (*_LAYOUT, "model.context_parallel_size", "model.virtual_pipeline_model_parallel_size"):
        value = ctx.get(path) if ctx.is_set(path) else None
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            setting = ctx.setting(path)
            where = setting.origin.describe() if setting is not None else path
            raise InputError(where, f"{path.split('.', 1)[1]}={value}: a parallel size is at least 1; megatron-core "
                                    "cannot build this layout, so there is nothing to plan")
    found = shape_from(ctx)
    if preset is not None and not isinstance(found, ShapeUnknown) and from_catalogue(ctx):
        found = ShapeUnknown(checkpoint="model_name")  # the preset the user names over the catalogue's row
    if isinstance(found, ShapeUnknown):
        preset = preset or preset_for_model_name(str(ctx.get("run.model_name") or ""))
        if preset is None:
            return f"the planner needs the model's dimensions: {unsized(ctx, found)}; add --preset NAME " \
                   f"(known: {', '.join(PRESETS)})"
    return _job(ctx, found, data_parallel, preset)


def unsized(ctx: Context, found: ShapeUnknown) -> str:
    """Why the config does not say how big the model is."""
    if ctx.flavor != "nemo-rl":
        return found.describe()
    name = ctx.setting("run.model_name")
    said = f"{name.origin.key or 'model_name'} = {name.value}" if name is not None else "no model_name is set"
    return f"NeMo-RL takes them from the Hugging Face checkpoint ({said}), which is not one of the presets"


def _job(ctx: Context, found: tuple[ModelShape, Parallelism] | ShapeUnknown, data_parallel: int | None,
         preset: Preset | None) -> Job:
    notes: list[Assumption] = []
    source = "config"
    if isinstance(found, ShapeUnknown):
        assert preset is not None
        shape: ModelShape = preset.shape
        # Sizes the config leaves unsaid come from the preset's layout, not from 1: `--preset X --set KEY=V`
        # should plan the preset's job with one change, not a different job.
        layout = preset.parallelism
        tp = _stated(ctx, "model.tensor_model_parallel_size", layout.tensor)
        par = Parallelism(tensor=tp, pipeline=_stated(ctx, "model.pipeline_model_parallel_size", layout.pipeline),
                          expert=_stated(ctx, "model.expert_model_parallel_size", layout.expert),
                          expert_tensor=_stated(ctx, "model.expert_tensor_parallel_size",
                                                layout.expert_tensor if tp == layout.tensor else tp))
        default_seq_length = preset.seq_length
        source = f"config (model from preset {preset.name})"
        notes.append(Assumption(f"model dimensions from preset {preset.name}: {'; '.join(preset.sources)}"))
        unsaid = [path.split(".")[1] for path in _LAYOUT if not ctx.is_set(path)]
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
    cp = _int(ctx, "model.context_parallel_size", 1)
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
        sequence_parallel=bool(ctx.get("model.sequence_parallel")) if ctx.is_set("model.sequence_parallel")
        else par.tensor > 1 and source != "config",
        recompute=_recompute(ctx), recompute_method=str(ctx.get("model.recompute_method") or "uniform"),
        recompute_num_layers=_int(ctx, "model.recompute_num_layers", 1),
        flash_attention=str(ctx.get("model.attention_backend") or "auto") not in ("unfused", "local"),
        hidden_dropout=_positive(ctx.get("model.hidden_dropout")),
        attention_dropout=_positive(ctx.get("model.attention_dropout")),
        moe_top_k=_int(ctx, "model.moe_router_topk", preset.moe_top_k if preset and preset.moe_top_k else 2),
        capacity_factor=float(ctx.get("model.moe_expert_capacity_factor") or 1.0),
        param_bytes=_param_bytes(ctx), grad_bytes=_grad_bytes(ctx),
        distributed_optimizer=bool(ctx.get("optimizer.use_distributed_optimizer")),
        precision_aware_optimizer=bool(ctx.get("optimizer.use_precision_aware_optimizer")),
        main_param_bytes=_DTYPE_BYTES.get(str(ctx.get("optimizer.main_params_dtype")), 4),
        exp_avg_bytes=_DTYPE_BYTES.get(str(ctx.get("optimizer.exp_avg_dtype")), 4),
        exp_avg_sq_bytes=_DTYPE_BYTES.get(str(ctx.get("optimizer.exp_avg_sq_dtype")), 4),
        bucket_size=_bucket_size(ctx, dp), version=ctx.version)
    if not ctx.is_set("run.seq_length"):
        notes.append(Assumption(f"sequence length {default_seq_length}: the config does not state it"))
    if ctx.get("model.fp8") or ctx.get("model.fp4"):
        notes.append(Assumption("fp8/fp4 activations are counted at bf16 size: the quantized copies Transformer "
                                "Engine saves are not modelled"))
    if ctx.flavor == "nemo-rl" and ctx.cfg.target == "value":
        # megatron_value_worker.py:374-386 replaces the output layer with a hidden -> 1 head before DDP wrapping.
        notes.append(Assumption("the value model is counted with a language-model output layer and logits; NeMo-RL "
                                "gives it a hidden -> 1 value head instead (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/"
                                "value/workers/megatron_value_worker.py:374-386), so its weights and last-stage "
                                "activations come out high"))
    return Job(training, _offload(ctx), source, tuple(notes), ctx.cfg.target, _environment(ctx))


_LAYOUT = ("model.tensor_model_parallel_size", "model.pipeline_model_parallel_size",
           "model.expert_model_parallel_size", "model.expert_tensor_parallel_size")


def _stated(ctx: Context, path: str, otherwise: int) -> int:
    """The config's value when the input sets it (the front end's defaults do not count), else ``otherwise``."""
    return _int(ctx, path, otherwise) if ctx.is_set(path) else otherwise


def _int(ctx: Context, path: str, default: int) -> int:
    value = ctx.get(path)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _recompute(ctx: Context) -> str:
    granularity = ctx.get("model.recompute_granularity")
    return granularity if granularity in ("full", "selective") else "none"


def _param_bytes(ctx: Context) -> int:
    if ctx.get("model.fp8_param") or ctx.get("model.fp4_param"):
        return 1  # fp8 (or packed fp4, rounded up) weights; the distributed optimizer keeps fp32 masters
    if ctx.get("model.bf16") or ctx.get("model.fp16"):
        return 2
    return _DTYPE_BYTES.get(str(ctx.get("model.params_dtype")), 2)


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
    return Offload(
        cpu_offloading_num_layers=_int(ctx, "model.cpu_offloading_num_layers", 0) if ctx.get("model.cpu_offloading")
        else 0,
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
