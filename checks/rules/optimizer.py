"""OPT: optimizer-state offloading (`optimizer_cpu_offload`, megatron-core's `HybridDeviceOptimizer`)."""

from __future__ import annotations

from collections.abc import Iterator

from checks.anchors import Upstream
from checks.context import Context
from checks.rules import upstream as up
from checks.rules.base import ERROR, WARNING, Example, Hit, Rule, declared, rule
from checks.versions import has_feature, nemo_rl_has_feature

_SWITCH = "optimizer.optimizer_cpu_offload"
_FRACTION = "optimizer.optimizer_offload_fraction"
_DISTOPT = "optimizer.use_distributed_optimizer"


def legacy_nemo_rl(ctx: Context) -> bool:
    """NeMo-RL releases up to 0.7.0 (before NVIDIA-NeMo/RL PR #3628) require the fraction to be exactly 1.0."""
    return ctx.flavor == "nemo-rl" and nemo_rl_has_feature(ctx.env.nemo_rl_version, "offload_fraction_must_be_one")


def _nemo_rl_fraction_check(ctx: Context) -> Upstream | None:
    if ctx.flavor != "nemo-rl":
        return None
    return ctx.upstream(up.NRL_LEGACY_FRACTION if legacy_nemo_rl(ctx) else up.NRL_FRACTION)
_MLM = "--bf16 --optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer"


@rule("OPT001", "optimizer-offload-fraction-zero", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      upstream=(up.NRL_FRACTION, up.NRL_LEGACY_FRACTION))
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
        upstream = _nemo_rl_fraction_check(ctx)
        yield Hit(_FRACTION, f"optimizer_cpu_offload=true but optimizer_offload_fraction is {where}: nothing is "
                  "offloaded, and HybridDeviceOptimizer adds fp32 GPU copies of every parameter",
                  "Set optimizer_offload_fraction to the share of optimizer state to offload (0 < f <= 1; "
                  "1.0 offloads all of it)", patch={_FRACTION: 1.0}, upstream=upstream, at=(_SWITCH,))


@rule("OPT002", "optimizer-offload-fraction-range", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.5
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      upstream=(up.NRL_FRACTION, up.NRL_LEGACY_FRACTION))
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
    upstream = _nemo_rl_fraction_check(ctx)
    effect = "behaves like 1.0 (everything offloaded)" if fraction > 1 else "behaves like 0 (nothing offloaded)"
    yield Hit(_FRACTION, f"optimizer_offload_fraction={fraction} is outside [0, 1]; megatron-core accepts it and "
              f"it {effect}", "Set optimizer_offload_fraction between 0 and 1",
              patch={_FRACTION: 1.0} if fraction > 1 else None, upstream=upstream, at=(_SWITCH,))


@rule("OPT003", "optimizer-offload-knobs-without-switch", WARNING,
      bad=Example("""
          optimizer:
            optimizer_offload_fraction: 1.0
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      upstream=(up.NRL_OVERLAP,))
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
        if not (ctx.stated(path) and active(ctx.get(path))):
            continue
        name = path.split(".", 1)[1]
        if ctx.flavor == "nemo-rl" and name == "overlap_cpu_optimizer_d2h_h2d" and not legacy_nemo_rl(ctx):
            yield Hit(path, "overlap_cpu_optimizer_d2h_h2d=true without optimizer_cpu_offload: NeMo-RL refuses it",
                      "Set optimizer_cpu_offload=true, or overlap_cpu_optimizer_d2h_h2d=false",
                      patch={path: False}, upstream=ctx.upstream(up.NRL_OVERLAP), severity=ERROR)
            continue
        yield Hit(path, f"{name}={ctx.get(path)!r} has no effect because optimizer_cpu_offload is false",
                  f"Set optimizer_cpu_offload=true to offload optimizer state, or remove {name}")


@rule("OPT004", "optimizer-offload-decoupled-weight-decay", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            decoupled_weight_decay: false
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      since="0.15",
      upstream=(up.I2_DECOUPLED_WD,))
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


@rule("OPT005", "optimizer-offload-needs-precision-aware-optimizer", ERROR,
      bad=Example("--bf16 --optimizer-cpu-offload --use-distributed-optimizer", "megatron-lm"),
      good=Example("--bf16 --optimizer-cpu-offload --use-distributed-optimizer --use-precision-aware-optimizer",
                   "megatron-lm"),
      flavors=frozenset({"megatron-lm"}),
      upstream=(up.A1_PRECISION_AWARE,))
def check_precision_aware_cli(ctx: Context) -> Iterator[Hit]:
    """On the Megatron-LM command line, `--optimizer-cpu-offload` needs `--use-precision-aware-optimizer`.

    What it checks:
        A Megatron-LM command line has `--optimizer-cpu-offload` without
        `--use-precision-aware-optimizer`. The fix adds `--use-distributed-optimizer` too
        when it is missing; with another optimizer than Adam (OPT007) or fp32 parameters
        (OPT011) it is partial and says so.

    Why it matters:
        `validate_args` asserts at start-up: the hybrid optimizer reuses the
        precision-aware code path. That flag in turn needs `--use-distributed-optimizer`
        and `--optimizer adam`. Bridge and NeMo-RL do not have this check.

    Source:
        Megatron-LM `megatron/training/arguments.py` `validate_args`, every version.
    """
    if ctx.get(_SWITCH) and not ctx.get("optimizer.use_precision_aware_optimizer"):
        # The precision-aware optimizer needs the distributed optimizer (OPT008): the patch adds both.
        patch = {"optimizer.use_precision_aware_optimizer": True}
        if not ctx.get(_DISTOPT):
            patch[_DISTOPT] = True
        yield Hit("optimizer.use_precision_aware_optimizer",
                  "--optimizer-cpu-offload without --use-precision-aware-optimizer",
                  "Add --use-precision-aware-optimizer" + (" and --use-distributed-optimizer" if len(patch) > 1
                                                           else ""),
                  patch=patch, upstream=ctx.upstream(up.A1_PRECISION_AWARE), at=(_SWITCH,))


@rule("OPT006", "optimizer-offload-fp8-param-gather-recipe", ERROR,
      bad=Example(_MLM + " --fp8-format hybrid --fp8-param-gather --fp8-recipe tensorwise", "megatron-lm"),
      good=Example(_MLM + " --fp8-format hybrid --fp8-param-gather --fp8-recipe delayed", "megatron-lm"),
      flavors=frozenset({"megatron-lm"}),
      upstream=(up.A2_FP8_DELAYED,))
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


@rule("OPT013", "optimizer-offload-needs-distributed-optimizer-nemo-rl", ERROR,
      bad=Example("""
          policy:
            megatron_cfg:
              enabled: true
              optimizer:
                optimizer: adam
                optimizer_cpu_offload: true
                optimizer_offload_fraction: 1.0
                use_precision_aware_optimizer: false
                use_distributed_optimizer: false
          """, "nemo-rl"),
      good=Example("""
          policy:
            megatron_cfg:
              enabled: true
              optimizer:
                optimizer: adam
                optimizer_cpu_offload: true
                optimizer_offload_fraction: 1.0
                use_precision_aware_optimizer: true
                use_distributed_optimizer: true
          """, "nemo-rl"),
      flavors=frozenset({"nemo-rl"}),
      upstream=(up.NRL_DISTOPT,))
def check_distributed_optimizer(ctx: Context) -> Iterator[Hit]:
    """NeMo-RL requires the distributed optimizer for optimizer offloading.

    What it checks:
        A NeMo-RL config (main, after PR #3628) with `optimizer_cpu_offload` and
        `use_distributed_optimizer: false`.

    Why it matters:
        NeMo-RL refuses it at set-up. (megatron-core itself does not require the
        distributed optimizer for offloading, despite what some guides say; the
        Megatron-LM command line requires it only through the precision-aware optimizer.)

    Source:
        NeMo-RL `_validate_optimizer_config`.
    """
    if ctx.get(_SWITCH) and not ctx.get(_DISTOPT) and not legacy_nemo_rl(ctx):
        yield Hit(_DISTOPT, "optimizer_cpu_offload=true without use_distributed_optimizer: NeMo-RL refuses it",
                  "Set use_distributed_optimizer=true", patch={_DISTOPT: True}, upstream=ctx.upstream(up.NRL_DISTOPT),
                  at=(_SWITCH,))


@rule("OPT014", "optimizer-offload-without-precision-aware-optimizer", WARNING,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: false
            use_distributed_optimizer: true
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      flavors=frozenset({"bridge", "nemo-rl"}))
def check_without_precision_aware(ctx: Context) -> Iterator[Hit]:
    """Without the precision-aware optimizer, optimizer offloading moves only the Adam moments.

    What it checks:
        A Bridge or NeMo-RL config with `optimizer_cpu_offload` and the distributed
        optimizer but `use_precision_aware_optimizer` false. (The Megatron-LM command line
        refuses this; see OPT005.) With an optimizer other than Adam the precision-aware
        optimizer is not a way out (it supports Adam only, OPT007), so no patch is offered.

    Why it matters:
        Without it, the distributed optimizer keeps its own fp32 main-parameter shard on
        the GPU and hands them to `HybridDeviceOptimizer`, so an
        offloaded element saves 8 bytes (the two moments) instead of 12, and copies fp32
        masters both ways every step.

    Source:
        Beyond upstream: megatron-core `_get_megatron_optimizer_based_on_param_groups`
        and `DistributedOptimizer`; Megatron-LM's `validate_args` requires the flag.
    """
    if not (ctx.get(_SWITCH) and ctx.get(_DISTOPT) and not ctx.get("optimizer.use_precision_aware_optimizer")):
        return
    name = ctx.get("optimizer.optimizer")
    if name != "adam":  # the precision-aware optimizer supports Adam only (OPT007): no switch to offer
        yield Hit("optimizer.use_precision_aware_optimizer", f"optimizer_cpu_offload with optimizer={name!r} "
                  "without use_precision_aware_optimizer: fp32 main parameters stay on the GPU, only the optimizer "
                  "state moves", "Plan for the fp32 main parameters on the GPU, or use optimizer=adam with "
                  "use_precision_aware_optimizer=true (the precision-aware optimizer supports Adam only)",
                  at=(_SWITCH,))
        return
    yield Hit("optimizer.use_precision_aware_optimizer", "optimizer_cpu_offload without "
              "use_precision_aware_optimizer: fp32 main parameters stay on the GPU, only the moments move",
              "Set use_precision_aware_optimizer=true (with the distributed optimizer)",
              patch={"optimizer.use_precision_aware_optimizer": True}, at=(_SWITCH,))


@rule("OPT015", "optimizer-offload-adam-or-sgd", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            optimizer: lion
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            optimizer: adam
          """),
      upstream=(up.NRL_ADAM_SGD,))
def check_adam_or_sgd(ctx: Context) -> Iterator[Hit]:
    """Optimizer offloading supports Adam and SGD only; other optimizers silently become SGD.

    What it checks:
        `optimizer_cpu_offload` with an `optimizer` other than `adam` or `sgd` (`lion`,
        `muon`, `soap`, ...).

    Why it matters:
        megatron-core's offload branch builds Adam for `adam` and SGD for everything
        else, so a Lion run trains with SGD (momentum `sgd_momentum`) without a word;
        from 0.18 emerging optimizers skip offload for their own groups. NeMo-RL refuses
        it at set-up.

    Source:
        Beyond megatron-core (`_get_megatron_optimizer_based_on_param_groups`); NeMo-RL
        `_validate_optimizer_config`.
    """
    name = ctx.get("optimizer.optimizer")
    if ctx.get(_SWITCH) and name not in ("adam", "sgd"):
        upstream = ctx.upstream(up.NRL_ADAM_SGD) if ctx.flavor == "nemo-rl" and not legacy_nemo_rl(ctx) else None
        yield Hit("optimizer.optimizer", f"optimizer_cpu_offload with optimizer={name!r}: the offloaded optimizer "
                  "is SGD for anything but adam", "Use optimizer=adam (or sgd), or turn optimizer offloading off",
                  patch={"optimizer.optimizer": "adam"}, upstream=upstream, at=(_SWITCH,))


@rule("OPT016", "optimizer-offload-dead-knob", WARNING,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
            use_torch_optimizer_for_cpu_offload: true
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """))
def check_dead_knobs(ctx: Context) -> Iterator[Hit]:
    """`use_torch_optimizer_for_cpu_offload` never does anything; `pin_cpu_params` does nothing before main.

    What it checks:
        With optimizer offloading on: `use_torch_optimizer_for_cpu_offload` true (any
        version), or `pin_cpu_params` false in megatron-core <= 0.19.

    Why it matters:
        The optimizer factory assigns the GPU optimizer class from this flag and then
        overwrites it in both following branches. The fp32 host masters of 16-bit
        parameters are never pinned before main (PR #4547), so the H2D copy-back runs from
        pageable memory whatever `pin_cpu_params` says.

    Source:
        Beyond upstream: megatron-core `_get_megatron_optimizer_based_on_param_groups`
        and `HybridDeviceOptimizer._get_sub_optimizer_param_groups`.
    """
    if not ctx.get(_SWITCH):
        return
    if ctx.get("optimizer.use_torch_optimizer_for_cpu_offload"):
        yield Hit("optimizer.use_torch_optimizer_for_cpu_offload", "use_torch_optimizer_for_cpu_offload=true has no "
                  "effect: the optimizer factory overwrites the class it selects", "Remove it")
    if ctx.get("optimizer.pin_cpu_params") is False and not has_feature(ctx.version, "pin_cpu_params_honoured"):
        yield Hit("optimizer.pin_cpu_params", f"pin_cpu_params=false has no effect in megatron-core {ctx.version}: "
                  "fp32 host masters of 16-bit parameters are never pinned before main (and fp32 parameters "
                  "always are)", "Remove it")


@rule("OPT017", "optimizer-offload-with-optimizer-cuda-graph", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
            optimizer_cuda_graph: true
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      since="0.17")
def check_optimizer_cuda_graph(ctx: Context) -> Iterator[Hit]:
    """The optimizer step cannot be captured in a CUDA graph while it runs partly on the host.

    What it checks:
        `optimizer_cuda_graph` and `optimizer_cpu_offload` both true (>= 0.17).

    Why it matters:
        The hybrid optimizer's step waits on host events and runs a CPU optimizer, which
        graph capture cannot record. Nothing upstream checks the combination.

    Source:
        Beyond upstream: megatron-core `HybridDeviceOptimizer.step`.
    """
    if ctx.get(_SWITCH) and ctx.get("optimizer.optimizer_cuda_graph"):
        yield Hit("optimizer.optimizer_cuda_graph", "optimizer_cuda_graph with optimizer_cpu_offload: the host part "
                  "of the step cannot be captured", "Set optimizer_cuda_graph=false",
                  patch={"optimizer.optimizer_cuda_graph": False}, at=(_SWITCH,))


@rule("OPT018", "optimizer-offload-overlap-race", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
            overlap_cpu_optimizer_d2h_h2d: true
          """, version="0.15.3"),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
            overlap_cpu_optimizer_d2h_h2d: false
          """, version="0.15.3"),
      until="0.15")
def check_overlap_race(ctx: Context) -> Iterator[Hit]:
    """megatron-core 0.14 and 0.15 race on the copy-back with `overlap_cpu_optimizer_d2h_h2d`.

    What it checks:
        `overlap_cpu_optimizer_d2h_h2d` with optimizer offloading in megatron-core 0.14.x
        or 0.15.x.

    Why it matters:
        The H2D copy-back waited on the D2H stream's event instead of its own, so
        computation could read parameters before the copy finished: silently wrong
        weights. Fixed by NVIDIA/Megatron-LM PR #3140 (0.16).

    Source:
        Beyond upstream: `HybridDeviceOptimizer` in 0.14/0.15; fix commit ae6707622e.
    """
    if ctx.get(_SWITCH) and ctx.get("optimizer.overlap_cpu_optimizer_d2h_h2d"):
        yield Hit("optimizer.overlap_cpu_optimizer_d2h_h2d", f"overlap_cpu_optimizer_d2h_h2d in megatron-core "
                  f"{ctx.version}: the copy-back can race the next forward (fixed in 0.16)",
                  "Set overlap_cpu_optimizer_d2h_h2d=false, or upgrade megatron-core to 0.16 or later",
                  patch={"optimizer.overlap_cpu_optimizer_d2h_h2d": False}, at=(_SWITCH,))


def _megatron_fsdp(ctx: Context) -> tuple[bool, int]:
    on = bool(ctx.get("run.use_megatron_fsdp") or (ctx.exists("ddp.use_megatron_fsdp")
                                                    and ctx.get("ddp.use_megatron_fsdp")))
    version = ctx.get("run.megatron_fsdp_version")
    return on, int(version) if isinstance(version, int) else 1


@rule("OPT019", "optimizer-offload-with-megatron-fsdp", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          dist:
            use_megatron_fsdp: true
          ddp:
            megatron_fsdp_version: 2
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          dist:
            use_megatron_fsdp: false
          """),
      upstream=(up.I6_MFSDP_V2, up.BRIDGE_MFSDP_V2))
def check_megatron_fsdp(ctx: Context) -> Iterator[Hit]:
    """Optimizer offloading with Megatron-FSDP: refused for v2, untested for v1.

    What it checks:
        `optimizer_cpu_offload` with Megatron-FSDP (`use_megatron_fsdp`), and
        `megatron_fsdp_version` 2 or 1.

    Why it matters:
        Megatron-FSDP v2 refuses optimizer offload (megatron-core main and Megatron
        Bridge raise `ValueError`). With v1 the distributed optimizer returns early and
        the hybrid optimizer runs on FSDP-managed parameters, a path no upstream test
        covers.

    Source:
        megatron-core main `fully_sharded_optimizer.py`; Megatron-Bridge@067f987d
        `_validate_and_apply_megatron_fsdp_v2_configs`.
    """
    on, version = _megatron_fsdp(ctx)
    if not (ctx.get(_SWITCH) and on):
        return
    if version == 2:
        check = up.BRIDGE_MFSDP_V2 if ctx.flavor in ("bridge", "nemo-rl") else up.I6_MFSDP_V2
        yield Hit(_SWITCH, "optimizer_cpu_offload with Megatron-FSDP v2", "Turn optimizer offloading off, or use "
                  "Megatron-FSDP v1", patch={_SWITCH: False}, upstream=ctx.upstream(check))
    else:
        yield Hit(_SWITCH, "optimizer_cpu_offload with Megatron-FSDP v1: the hybrid optimizer runs on FSDP-managed "
                  "parameters, a combination no upstream test covers", "Validate it on a short run first",
                  severity=WARNING)


@rule("OPT020", "optimizer-offload-with-rl-inference-offload", ERROR,
      bad=Example(_MLM + " --rl-offload-optimizer-during-inference", "megatron-lm"),
      good=Example("--bf16 --optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer",
                   "megatron-lm"),
      since="0.15",
      flavors=frozenset({"megatron-lm"}))
def check_rl_offload_during_inference(ctx: Context) -> Iterator[Hit]:
    """Megatron-LM's RL inference offload moves the hybrid optimizer's host state back to the GPU.

    What it checks:
        `--rl-offload-optimizer-during-inference` with `--optimizer-cpu-offload`.

    Why it matters:
        Restoring the optimizer after inference moves every CPU tensor in the optimizer
        state to the GPU, including the hybrid optimizer's host moments: a device
        mismatch, or the offload undone. (NeMo-RL skips its own optimizer moves when
        `optimizer_cpu_offload` is on.)

    Source:
        Beyond upstream: megatron-core `MegatronOptimizer.restore_from_cpu`; NVIDIA-NeMo/RL
        PR #1242.
    """
    if ctx.get(_SWITCH) and ctx.get("run.rl_offload_optimizer_during_inference"):
        yield Hit("run.rl_offload_optimizer_during_inference", "--rl-offload-optimizer-during-inference with "
                  "--optimizer-cpu-offload: the restore moves the offloaded state to the GPU",
                  "Use one of the two")


@rule("OPT021", "nemo-rl-fraction-must-be-one", ERROR,
      bad=Example("""
          policy:
            megatron_cfg:
              enabled: true
              optimizer:
                optimizer: adam
                optimizer_cpu_offload: true
                optimizer_offload_fraction: 0.5
                use_precision_aware_optimizer: true
                use_distributed_optimizer: true
          """, "nemo-rl", nemo_rl="0.7"),
      good=Example("""
          policy:
            megatron_cfg:
              enabled: true
              optimizer:
                optimizer: adam
                optimizer_cpu_offload: true
                optimizer_offload_fraction: 1.0
                use_precision_aware_optimizer: true
                use_distributed_optimizer: true
          """, "nemo-rl", nemo_rl="0.7"),
      flavors=frozenset({"nemo-rl"}),
      upstream=(up.NRL_LEGACY_FRACTION,))
def check_nemo_rl_legacy_fraction(ctx: Context) -> Iterator[Hit]:
    """NeMo-RL up to 0.7.0 accepts optimizer offloading only with `optimizer_offload_fraction: 1.0`.

    What it checks:
        A NeMo-RL config checked with `--nemo-rl-version` 0.4 to 0.7, with
        `optimizer_cpu_offload` and a fraction strictly between 0 and 1.

    Why it matters:
        Those releases assert the fraction is exactly 1.0, because a partly offloaded
        optimizer conflicted with NeMo-RL's own optimizer moves between generation and
        training. Fractional offload arrived with NVIDIA-NeMo/RL PR #3628 (2026-08-18).

    Source:
        NeMo-RL 0.4.0-0.7.0 `_validate_optimizer_config` (and the worker before 0.6).
    """
    fraction = ctx.get(_FRACTION)
    if legacy_nemo_rl(ctx) and ctx.get(_SWITCH) and 0 < fraction < 1:
        yield Hit(_FRACTION, f"optimizer_offload_fraction={fraction}: NeMo-RL {ctx.env.nemo_rl_version} accepts only "
                  "1.0", "Set optimizer_offload_fraction=1.0, or use a NeMo-RL build from after 2026-08-18",
                  patch={_FRACTION: 1.0}, upstream=ctx.upstream(up.NRL_LEGACY_FRACTION), at=(_SWITCH,))


RULES: tuple[Rule, ...] = declared(__name__)
