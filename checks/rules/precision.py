"""OPT (precision): the precision-aware optimizer and parameter dtypes, as they meet optimizer offloading."""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.rules import upstream as up
from checks.rules.base import ERROR, WARNING, Example, Hit, Rule, declared, rule
from checks.versions import has_feature

_PAO = "optimizer.use_precision_aware_optimizer"
_OFFLOAD = "optimizer.optimizer_cpu_offload"
_DISTOPT = "optimizer.use_distributed_optimizer"
_DTYPES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


@rule("OPT007", "precision-aware-optimizer-needs-adam", ERROR,
      bad=Example("""
          optimizer:
            optimizer: sgd
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      good=Example("""
          optimizer:
            optimizer: adam
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      upstream=(up.O1_PAO_ADAM,))
def check_pao_adam(ctx: Context) -> Iterator[Hit]:
    """The precision-aware optimizer supports Adam only.

    What it checks:
        `use_precision_aware_optimizer` is true and `optimizer` is not `adam`.

    Why it matters:
        `OptimizerConfig.__post_init__` asserts. It matters for offloading because the
        Megatron-LM command line requires the precision-aware optimizer with
        `--optimizer-cpu-offload`.

    Source:
        megatron-core `OptimizerConfig.__post_init__`, every version.
    """
    name = ctx.get("optimizer.optimizer")
    if ctx.get(_PAO) and name != "adam":
        yield Hit("optimizer.optimizer", f"use_precision_aware_optimizer=true with optimizer={name!r}",
                  "Use optimizer=adam, or turn the precision-aware optimizer off",
                  patch={"optimizer.optimizer": "adam"},
                  upstream=ctx.upstream(up.O1_PAO_ADAM))


@rule("OPT008", "precision-aware-optimizer-needs-distributed-optimizer", ERROR,
      bad=Example("""
          optimizer:
            use_precision_aware_optimizer: true
            use_distributed_optimizer: false
          """),
      good=Example("""
          optimizer:
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      upstream=(up.O2_PAO_DISTOPT, up.I4_PAO_DISTOPT))
def check_pao_distopt(ctx: Context) -> Iterator[Hit]:
    """The precision-aware optimizer needs the distributed optimizer.

    What it checks:
        `use_precision_aware_optimizer` is true and `use_distributed_optimizer` is false
        (Megatron Bridge turns it on when `ddp.use_distributed_optimizer` is set).

    Why it matters:
        Up to 0.19 `OptimizerConfig.__post_init__` asserts; on main the check moved to
        the optimizer factory (`ValueError`), so the failure comes later, after the
        model is built.

    Source:
        megatron-core `OptimizerConfig.__post_init__` (<= 0.19) and
        `get_megatron_optimizer` (main).
    """
    if ctx.get(_PAO) and not ctx.get(_DISTOPT):
        check = up.I4_PAO_DISTOPT if has_feature(ctx.version, "pao_distopt_in_factory") else up.O2_PAO_DISTOPT
        yield Hit(_DISTOPT, "use_precision_aware_optimizer=true without use_distributed_optimizer",
                  "Set use_distributed_optimizer=true", patch={_DISTOPT: True}, upstream=ctx.upstream(check),
                  at=(_PAO,))


@rule("OPT009", "reduced-optimizer-dtypes-need-precision-aware-optimizer", ERROR,
      bad=Example("""
          optimizer:
            exp_avg_dtype: bf16
          """),
      good=Example("""
          optimizer:
            exp_avg_dtype: bf16
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """),
      upstream=tuple(up.O5_O8_DTYPES.values()))
def check_reduced_dtypes(ctx: Context) -> Iterator[Hit]:
    """Reduced-precision optimizer dtypes need the precision-aware optimizer.

    What it checks:
        `main_grads_dtype`, `main_params_dtype`, `exp_avg_dtype` or `exp_avg_sq_dtype`
        is not fp32 while `use_precision_aware_optimizer` is false.

    Why it matters:
        `OptimizerConfig.__post_init__` asserts for each.

    Source:
        megatron-core `OptimizerConfig.__post_init__`, every version.
    """
    if ctx.get(_PAO):
        return
    for name in _DTYPES:
        value = ctx.get(f"optimizer.{name}")
        if value is not None and value != "fp32":
            yield Hit(f"optimizer.{name}", f"{name}={value} without use_precision_aware_optimizer",
                      "Set use_precision_aware_optimizer=true (with the distributed optimizer), or use fp32",
                      patch={f"optimizer.{name}": "fp32"}, upstream=ctx.upstream(up.O5_O8_DTYPES[name]))


@rule("OPT010", "optimizer-offload-ignores-reduced-dtypes", WARNING,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
            exp_avg_dtype: bf16
            exp_avg_sq_dtype: bf16
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          """))
def check_offload_ignores_dtypes(ctx: Context) -> Iterator[Hit]:
    """Optimizer offloading ignores the precision-aware optimizer's reduced dtypes.

    What it checks:
        `optimizer_cpu_offload` and `use_precision_aware_optimizer` with
        `main_params_dtype`, `exp_avg_dtype` or `exp_avg_sq_dtype` below fp32.

    Why it matters:
        `HybridDeviceOptimizer` always keeps fp32 master weights and fp32 moments
        (`param_update_in_fp32=True`), on the host and on the GPU part alike, and
        `OptimizerConfig` returns before checking these dtypes. A memory plan that counts
        2-byte moments is off by 2x for the optimizer state.

    Source:
        Beyond upstream: megatron-core `_get_megatron_optimizer_based_on_param_groups`
        builds `HybridDeviceOptimizer(param_update_in_fp32=True)`; reported in
        radixark/Megatron-LM PR #67.
    """
    if not (ctx.get(_OFFLOAD) and ctx.get(_PAO)):
        return
    reduced = [f"{name}={ctx.get(f'optimizer.{name}')}" for name in _DTYPES[1:]
               if ctx.get(f"optimizer.{name}") not in (None, "fp32")]
    if reduced:
        yield Hit(f"optimizer.{reduced[0].split('=')[0]}", f"{', '.join(reduced)} has no effect with "
                  "optimizer_cpu_offload: HybridDeviceOptimizer keeps fp32 masters and moments",
                  "Plan memory with fp32 optimizer state (or turn offloading off to get the reduced dtypes)",
                  at=(_OFFLOAD,))


def _fp32_params(ctx: Context) -> bool | None:
    """True when the model trains in fp32 (no bf16/fp16 parameters); None when the config does not say."""
    if ctx.stated("model.params_dtype"):
        return ctx.get("model.params_dtype") == "fp32"
    if ctx.flavor == "megatron-lm":  # --bf16/--fp16 absent means fp32 training
        return not (ctx.get("model.bf16") or ctx.get("model.fp16"))
    return None


@rule("OPT011", "optimizer-offload-fp32-params-distributed-optimizer", ERROR,
      bad=Example("--optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer", "megatron-lm"),
      good=Example("--bf16 --optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer",
                   "megatron-lm"))
def check_fp32_params(ctx: Context) -> Iterator[Hit]:
    """fp32 parameters with the distributed optimizer and optimizer offloading fail to build.

    What it checks:
        `optimizer_cpu_offload` with `use_distributed_optimizer` while the model's
        parameters are fp32 (`params_dtype: fp32`, or a Megatron-LM command line without
        `--bf16`/`--fp16`).

    Why it matters:
        The distributed optimizer shards fp32 parameters as views of the model parameters
        (`model_param.view(-1)[...]`, not detached); rebuilding `HybridDeviceOptimizer`
        over them raises `ValueError: can't optimize a non-leaf Tensor`. Releases up to
        0.19.2 also raise `KeyError` when loading optimizer state for fp32 parameters.
        bf16 models with parameters kept in fp32 hit the same path.

    Source:
        Beyond upstream: megatron-core `DistributedOptimizer._build_model_and_main_param_groups`
        (fp32 branch); NVIDIA/Megatron-LM issue #6212 (fix in PR #7013, after d98e8a64)
        and PR #5929.
    """
    if ctx.get(_OFFLOAD) and ctx.get(_DISTOPT) and _fp32_params(ctx):
        yield Hit("model.params_dtype", "optimizer_cpu_offload with the distributed optimizer and fp32 parameters: "
                  "building the optimizer fails with \"ValueError: can't optimize a non-leaf Tensor\"",
                  "Train in bf16 (params_dtype bf16 / --bf16), or offload without the distributed optimizer",
                  at=(_OFFLOAD, _DISTOPT))


@rule("OPT012", "optimizer-offload-low-precision-params", ERROR,
      bad=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          model:
            fp8: hybrid
            fp8_param: true
            fp8_recipe: tensorwise
          """),
      good=Example("""
          optimizer:
            optimizer_cpu_offload: true
            optimizer_offload_fraction: 1.0
            use_precision_aware_optimizer: true
            use_distributed_optimizer: true
          model:
            fp8: hybrid
            fp8_param: true
            fp8_recipe: delayed
          """))
def check_low_precision_params(ctx: Context) -> Iterator[Hit]:
    """fp8 parameters (other than the delayed recipe) and fp4 parameters break optimizer offloading.

    What it checks:
        `optimizer_cpu_offload` with the distributed optimizer and `fp8_param` under an
        fp8 recipe other than `delayed`, or `fp4_param` (>= 0.19). The Megatron-LM
        command line refuses the fp8 case itself (OPT006); this covers Bridge, NeMo-RL
        and fp4 everywhere.

    Why it matters:
        The distributed optimizer keeps no shard for such parameters (`None` in the shard
        list), and rebuilding `HybridDeviceOptimizer` raises
        `TypeError: optimizer can only optimize Tensors, but one of the params is NoneType`.

    Source:
        Beyond upstream: megatron-core `DistributedOptimizer` (`shard_model_param = None`);
        NVIDIA/Megatron-LM issue #5083.
    """
    if not (ctx.get(_OFFLOAD) and ctx.get(_DISTOPT)):
        return
    fp8 = ctx.get("model.fp8_param") and ctx.get("model.fp8_recipe") != "delayed"
    fp4 = ctx.exists("model.fp4_param") and ctx.get("model.fp4_param")
    if fp8 and ctx.flavor != "megatron-lm":
        yield Hit("model.fp8_recipe", f"optimizer_cpu_offload with fp8_param and fp8_recipe="
                  f"{ctx.get('model.fp8_recipe')!r}: building the optimizer fails (TypeError, None shard)",
                  "Use fp8_recipe=delayed, or fp8_param=false", patch={"model.fp8_recipe": "delayed"},
                  at=("model.fp8_param", _OFFLOAD))
    if fp4:
        yield Hit("model.fp4_param", "optimizer_cpu_offload with fp4_param: building the optimizer fails "
                  "(TypeError, None shard)", "Set fp4_param=false, or turn optimizer offloading off",
                  patch={"model.fp4_param": False}, at=(_OFFLOAD,))


RULES: tuple[Rule, ...] = declared(__name__)
