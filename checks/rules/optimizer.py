"""OPT: optimizer-state offloading (`optimizer_cpu_offload`, megatron-core's `HybridDeviceOptimizer`)."""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.rules import upstream as up
from checks.rules.base import ERROR, WARNING, Example, Hit, Rule

_SWITCH = "optimizer.optimizer_cpu_offload"
_FRACTION = "optimizer.optimizer_offload_fraction"


def check_fraction_zero(ctx: Context) -> Iterator[Hit]:
    """`optimizer_cpu_offload` with `optimizer_offload_fraction` 0 offloads nothing.

    What it checks:
        `optimizer_cpu_offload` is true and `optimizer_offload_fraction` is 0.0,
        which is the dataclass default: Megatron Bridge and Python configs that set only
        the switch get it. (The Megatron-LM command line defaults the fraction to 1.0.)

    Why it matters:
        `HybridDeviceOptimizer` is still built and keeps every parameter on the GPU,
        with an fp32 copy and fp32 moments for each: nothing moves to the host, the
        precision-aware optimizer's savings are lost, and GPU memory goes *up*.
        NeMo-RL refuses it at set-up.

    Source:
        Beyond megatron-core, which never checks the fraction; NeMo-RL
        `_validate_optimizer_config` (since NVIDIA-NeMo/RL PR #3628, 2026-08-18).
    """
    if ctx.get(_SWITCH) and ctx.get(_FRACTION) == 0:
        where = "left at its default 0.0" if not ctx.is_set(_FRACTION) else "set to 0"
        upstream = ctx.upstream(up.NRL_FRACTION) if ctx.flavor == "nemo-rl" else None
        yield Hit(_FRACTION, f"optimizer_cpu_offload=true but optimizer_offload_fraction is {where}: nothing is "
                  "offloaded, and HybridDeviceOptimizer adds fp32 GPU copies of every parameter",
                  "Set optimizer_offload_fraction to the share of optimizer state to offload (0 < f <= 1; "
                  "1.0 offloads all of it)", patch={_FRACTION: 1.0}, upstream=upstream, at=(_SWITCH,))


def check_fraction_range(ctx: Context) -> Iterator[Hit]:
    """`optimizer_offload_fraction` must lie in [0, 1].

    What it checks:
        `optimizer_offload_fraction` is below 0 or above 1 while
        `optimizer_cpu_offload` is on.

    Why it matters:
        megatron-core never range-checks it (not in `OptimizerConfig`, the optimizer
        factory or Megatron-LM's argument checks): 1.5 silently behaves like 1.0 and
        -0.5 like 0 (nothing offloaded). NeMo-RL refuses both.

    Source:
        Beyond megatron-core; NeMo-RL `_validate_optimizer_config`.
    """
    fraction = ctx.get(_FRACTION)
    if not ctx.get(_SWITCH) or 0 <= fraction <= 1:
        return
    upstream = ctx.upstream(up.NRL_FRACTION) if ctx.flavor == "nemo-rl" else None
    effect = "behaves like 1.0 (everything offloaded)" if fraction > 1 else "behaves like 0 (nothing offloaded)"
    yield Hit(_FRACTION, f"optimizer_offload_fraction={fraction} is outside [0, 1]; megatron-core accepts it and "
              f"it {effect}", "Set optimizer_offload_fraction between 0 and 1",
              patch={_FRACTION: 1.0} if fraction > 1 else None, upstream=upstream, at=(_SWITCH,))


def check_knobs_without_switch(ctx: Context) -> Iterator[Hit]:
    """Optimizer-offload knobs do nothing while `optimizer_cpu_offload` is off.

    What it checks:
        `optimizer_cpu_offload` is false and `optimizer_offload_fraction` is set above
        0, or `overlap_cpu_optimizer_d2h_h2d` / `use_torch_optimizer_for_cpu_offload`
        is true, or `pin_cpu_grads` / `pin_cpu_params` is set to false.

    Why it matters:
        None of them is read without the switch, so a config that looks like it offloads
        optimizer state does not. NeMo-RL refuses the overlap knob without the switch
        (an error there); elsewhere it is silent.

    Source:
        Beyond megatron-core; NeMo-RL `_validate_optimizer_config`. Seen in
        Megatron-Bridge@067f987d `perf_recipes/deepseek/gb200/deepseek_v4.py:97`.
    """
    if ctx.get(_SWITCH):
        return
    knobs = (
        (_FRACTION, lambda v: v > 0),
        ("optimizer.overlap_cpu_optimizer_d2h_h2d", lambda v: v is True),
        ("optimizer.use_torch_optimizer_for_cpu_offload", lambda v: v is True),
        ("optimizer.pin_cpu_grads", lambda v: v is False),
        ("optimizer.pin_cpu_params", lambda v: v is False),
    )
    for path, active in knobs:
        if not (ctx.is_set(path) and active(ctx.get(path))):
            continue
        name = path.split(".", 1)[1]
        if ctx.flavor == "nemo-rl" and name == "overlap_cpu_optimizer_d2h_h2d":
            yield Hit(path, "overlap_cpu_optimizer_d2h_h2d=true without optimizer_cpu_offload: NeMo-RL refuses it",
                      "Set optimizer_cpu_offload=true, or overlap_cpu_optimizer_d2h_h2d=false",
                      patch={path: False}, upstream=ctx.upstream(up.NRL_OVERLAP), severity=ERROR)
            continue
        yield Hit(path, f"{name}={ctx.get(path)!r} has no effect because optimizer_cpu_offload is false",
                  f"Set optimizer_cpu_offload=true to offload optimizer state, or remove {name}")


def check_decoupled_weight_decay(ctx: Context) -> Iterator[Hit]:
    """Optimizer offloading needs AdamW-style decoupled weight decay.

    What it checks:
        `optimizer_cpu_offload` is true and `decoupled_weight_decay` is false.

    Why it matters:
        `OptimizerConfig` accepts it, then building the optimizer fails with an
        `AssertionError`: the host optimizer is `torch.optim.AdamW`. There is no
        Megatron-LM flag for this field, so only Python, Bridge and NeMo-RL configs can
        set it.

    Source:
        megatron-core >= 0.15 `_get_megatron_optimizer_based_on_param_groups`.
    """
    if ctx.get(_SWITCH) and ctx.get("optimizer.decoupled_weight_decay") is False:
        yield Hit("optimizer.decoupled_weight_decay", "optimizer_cpu_offload=true with decoupled_weight_decay=false",
                  "Set decoupled_weight_decay=true (AdamW), or turn optimizer_cpu_offload off",
                  patch={"optimizer.decoupled_weight_decay": True}, upstream=ctx.upstream(up.I2_DECOUPLED_WD),
                  at=(_SWITCH,))


def check_precision_aware_cli(ctx: Context) -> Iterator[Hit]:
    """On the Megatron-LM command line, `--optimizer-cpu-offload` needs `--use-precision-aware-optimizer`.

    What it checks:
        A Megatron-LM command line has `--optimizer-cpu-offload` without
        `--use-precision-aware-optimizer`.

    Why it matters:
        `validate_args` asserts at start-up: the hybrid optimizer reuses the
        precision-aware code path. That flag in turn needs `--use-distributed-optimizer`
        and `--optimizer adam`. Bridge and NeMo-RL do not have this check.

    Source:
        Megatron-LM `megatron/training/arguments.py` `validate_args`, every version.
    """
    if ctx.get(_SWITCH) and not ctx.get("optimizer.use_precision_aware_optimizer"):
        yield Hit("optimizer.use_precision_aware_optimizer",
                  "--optimizer-cpu-offload without --use-precision-aware-optimizer",
                  "Add --use-precision-aware-optimizer (with --use-distributed-optimizer)",
                  patch={"optimizer.use_precision_aware_optimizer": True},
                  upstream=ctx.upstream(up.A1_PRECISION_AWARE), at=(_SWITCH,))


def check_fp8_param_gather_cli(ctx: Context) -> Iterator[Hit]:
    """On the Megatron-LM command line, optimizer offload with `--fp8-param-gather` needs the delayed fp8 recipe.

    What it checks:
        A Megatron-LM command line has `--optimizer-cpu-offload` and `--fp8-param-gather`
        with an `--fp8-recipe` other than `delayed`.

    Why it matters:
        `validate_args` asserts at start-up. Under the hood the distributed optimizer
        keeps no shard for fp8 parameters of the other recipes, and the hybrid optimizer
        cannot be built over them.

    Source:
        Megatron-LM `megatron/training/arguments.py` `validate_args`, every version.
    """
    recipe = ctx.get("model.fp8_recipe")
    if ctx.get(_SWITCH) and ctx.get("model.fp8_param") and recipe != "delayed":
        yield Hit("model.fp8_recipe", f"--optimizer-cpu-offload with --fp8-param-gather and --fp8-recipe {recipe}",
                  "Use --fp8-recipe delayed, or drop --fp8-param-gather", patch={"model.fp8_recipe": "delayed"},
                  upstream=ctx.upstream(up.A2_FP8_DELAYED), at=("model.fp8_param", _SWITCH))


RULES: tuple[Rule, ...] = (
    Rule("OPT001", "optimizer-offload-fraction-zero", ERROR, check_fraction_zero,
         bad=Example("optimizer:\n  optimizer_cpu_offload: true\n"),
         good=Example("optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 0.5\n"),
         reads=(_SWITCH, _FRACTION), upstream=(up.NRL_FRACTION,)),
    Rule("OPT002", "optimizer-offload-fraction-range", ERROR, check_fraction_range,
         bad=Example("optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.5\n"),
         good=Example("optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"),
         reads=(_SWITCH, _FRACTION), upstream=(up.NRL_FRACTION,)),
    Rule("OPT003", "optimizer-offload-knobs-without-switch", WARNING, check_knobs_without_switch,
         bad=Example("optimizer:\n  optimizer_offload_fraction: 1.0\n"),
         good=Example("optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"),
         reads=(_SWITCH, _FRACTION, "optimizer.overlap_cpu_optimizer_d2h_h2d",
                "optimizer.use_torch_optimizer_for_cpu_offload", "optimizer.pin_cpu_grads",
                "optimizer.pin_cpu_params"),
         upstream=(up.NRL_OVERLAP,)),
    Rule("OPT004", "optimizer-offload-decoupled-weight-decay", ERROR, check_decoupled_weight_decay,
         bad=Example("optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"
                     "  decoupled_weight_decay: false\n"),
         good=Example("optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"),
         reads=(_SWITCH, "optimizer.decoupled_weight_decay"), since="0.15", upstream=(up.I2_DECOUPLED_WD,)),
    Rule("OPT005", "optimizer-offload-needs-precision-aware-optimizer", ERROR, check_precision_aware_cli,
         bad=Example("--optimizer-cpu-offload --use-distributed-optimizer", "megatron-lm"),
         good=Example("--optimizer-cpu-offload --use-distributed-optimizer --use-precision-aware-optimizer",
                      "megatron-lm"),
         reads=(_SWITCH, "optimizer.use_precision_aware_optimizer"), flavors=frozenset({"megatron-lm"}),
         upstream=(up.A1_PRECISION_AWARE,)),
    Rule("OPT006", "optimizer-offload-fp8-param-gather-recipe", ERROR, check_fp8_param_gather_cli,
         bad=Example("--optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer "
                     "--fp8-format hybrid --fp8-param-gather --fp8-recipe tensorwise", "megatron-lm"),
         good=Example("--optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer "
                      "--fp8-format hybrid --fp8-param-gather --fp8-recipe delayed", "megatron-lm"),
         reads=(_SWITCH, "model.fp8_param", "model.fp8_recipe"), flavors=frozenset({"megatron-lm"}),
         upstream=(up.A2_FP8_DELAYED,)),
)
