"""TEX: traps that depend on the Transformer Engine version, which a config does not state (`--te-version`).

Layer-level offloading is Transformer Engine's `get_cpu_offload_context`, and fine-grained offloading
drives TE's CPU-offload module, so several outcomes hinge on the installed TE. Where the user did not
give `--te-version`, these rules say what would happen for each TE version instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.rules import upstream as up
from checks.rules.base import ERROR, INFO, WARNING, Example, Hit, Rule, declared, rule

_LAYER = "model.cpu_offloading"
_FINE = "model.fine_grained_activation_offloading"
_UNKNOWN = "pass --te-version to know which"


def _v1_path(ctx: Context) -> bool:
    """TE >= 2.10 keeps its old implementation behind NVTE_CPU_OFFLOAD_V1=1."""
    return ctx.env_var("NVTE_CPU_OFFLOAD_V1") == "1"


@rule("TEX001", "cpu-offloading-nothing-to-offload", ERROR,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_activations: false
            cpu_offloading_weights: false
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_activations: true
          """),
      upstream=(up.TE_NOTHING_TO_OFFLOAD, up.TE_NOTHING_TO_OFFLOAD_V2))
def check_nothing_to_offload(ctx: Context) -> Iterator[Hit]:
    """`cpu_offloading_activations` and `cpu_offloading_weights` both false: nothing to offload, or a crash.

    What it checks:
        Both `cpu_offloading_activations` and `cpu_offloading_weights` are false.

    Why it matters:
        megatron-core calls Transformer Engine's `get_cpu_offload_context` from every
        `TransformerBlock`, even with offloading off. TE <= 2.9 (and the v1 path selected
        by `NVTE_CPU_OFFLOAD_V1=1`) raises `ValueError` for this combination *before*
        looking at whether offloading is enabled, so the model fails to build even when
        `cpu_offloading` is false; TE >= 2.10 raises only when it is enabled.

    Source:
        NVIDIA/TransformerEngine `transformer_engine/pytorch/cpu_offload.py`
        (`get_cpu_offload_context`, v2.9 and v2.10).
    """
    if ctx.get("model.cpu_offloading_activations") or ctx.get("model.cpu_offloading_weights"):
        return
    enabled = bool(ctx.get(_LAYER))
    new_te = ctx.te_at_least("2.10")
    message = "cpu_offloading_activations=false and cpu_offloading_weights=false: there is nothing to offload"
    fix = "Set cpu_offloading_activations=true (weight offloading is deprecated in TE >= 2.3)"
    patch = {"model.cpu_offloading_activations": True}
    if enabled:
        check = up.TE_NOTHING_TO_OFFLOAD_V2 if new_te and not _v1_path(ctx) else up.TE_NOTHING_TO_OFFLOAD
        yield Hit("model.cpu_offloading_activations", f"{message}, and Transformer Engine raises ValueError when "
                  "the model is built", fix, patch=patch, upstream=ctx.upstream(check), at=(_LAYER,))
    elif new_te is None and not ctx.env.te_absent:
        yield Hit("model.cpu_offloading_activations", f"{message}; with Transformer Engine <= 2.9 the model fails "
                  f"to build even though cpu_offloading is false ({_UNKNOWN})", fix, patch=patch, severity=WARNING)
    elif new_te is False or _v1_path(ctx):
        yield Hit("model.cpu_offloading_activations", f"{message}; this Transformer Engine checks it before it "
                  "checks cpu_offloading, so the model fails to build although cpu_offloading is false", fix,
                  patch=patch, upstream=ctx.upstream(up.TE_NOTHING_TO_OFFLOAD))


@rule("TEX002", "cpu-offloading-weights-no-effect", WARNING,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_weights: true
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_weights: false
          """))
def check_weights(ctx: Context) -> Iterator[Hit]:
    """`cpu_offloading_weights` has no effect with Transformer Engine 2.3 and later.

    What it checks:
        Layer-level offloading is on and `cpu_offloading_weights` is true (explicitly, or by
        megatron-core 0.14's default), with TE >= 2.3 or an unknown TE.

    Why it matters:
        TE deprecated weight offloading in 2.3: it warns and offloads no weights, and with
        `cpu_offloading_activations=false` as well it returns a no-op context, so nothing
        is offloaded at all. Memory plans that count offloaded weights are wrong.

    Source:
        NVIDIA/TransformerEngine `get_cpu_offload_context` (v2.3+ `DeprecationWarning`).
    """
    if not (ctx.get(_LAYER) and ctx.get("model.cpu_offloading_weights")):
        return
    if ctx.te_at_least("2.3") is False:
        return
    only = not ctx.get("model.cpu_offloading_activations")
    tail = "; with cpu_offloading_activations=false nothing is offloaded at all" if only else ""
    when = "" if ctx.te_at_least("2.3") else " (Transformer Engine 2.3 and later)"
    default = "" if ctx.is_set("model.cpu_offloading_weights") else " (the default in megatron-core 0.14)"
    yield Hit("model.cpu_offloading_weights", f"cpu_offloading_weights=true{default} has no effect{when}: Transformer "
              f"Engine deprecated weight offloading and offloads activations only{tail}",
              "Set cpu_offloading_weights=false and cpu_offloading_activations=true",
              patch={"model.cpu_offloading_weights": False, "model.cpu_offloading_activations": True},
              at=(_LAYER,), severity=ERROR if only else None)


@rule("TEX003", "cpu-offloading-double-buffering-ignored", WARNING,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_double_buffering: true
          """, te="2.12"),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_double_buffering: false
          """))
def check_double_buffering(ctx: Context) -> Iterator[Hit]:
    """`cpu_offloading_double_buffering` is ignored by most Transformer Engine versions.

    What it checks:
        Layer-level offloading with `cpu_offloading_double_buffering` true, and TE < 2.5
        (megatron-core does not pass it) or TE >= 2.10 without `NVTE_CPU_OFFLOAD_V1=1`
        (the new implementation ignores it).

    Why it matters:
        The setting silently does nothing, so a plan that counts on double-buffered
        reloads overlapping compute will be slower than expected.

    Source:
        megatron-core `get_cpu_offload_context` (argument passing per TE version) and
        TE >= 2.10 `cpu_offload.py` ("double_buffering (unused)").
    """
    if not (ctx.get(_LAYER) and ctx.get("model.cpu_offloading_double_buffering")):
        return
    new, old = ctx.te_at_least("2.10"), ctx.te_at_least("2.5") is False
    if new is None and not old:
        yield Hit("model.cpu_offloading_double_buffering", "cpu_offloading_double_buffering=true is ignored by "
                  "Transformer Engine < 2.5 and by TE >= 2.10 unless NVTE_CPU_OFFLOAD_V1=1 "
                  f"({_UNKNOWN})", "Check the TE version; on TE >= 2.10 set NVTE_CPU_OFFLOAD_V1=1 to keep it",
                  severity=INFO)
    elif old or (new and not _v1_path(ctx)):
        why = "Transformer Engine < 2.5 does not take it" if old else \
            "Transformer Engine >= 2.10 ignores it unless NVTE_CPU_OFFLOAD_V1=1"
        yield Hit("model.cpu_offloading_double_buffering", f"cpu_offloading_double_buffering=true has no effect: {why}",
                  "Remove it" + ("" if old else ", or set NVTE_CPU_OFFLOAD_V1=1 in the job's environment"))


@rule("TEX004", "retain-pinned-buffers-transformer-engine", ERROR,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
          """, version="0.17.1", te="2.8"),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
          """, version="0.17.1", te="2.10"),
      since="0.17", until="0.17")
def check_retain_pinned_buffers(ctx: Context) -> Iterator[Hit]:
    """megatron-core 0.17 with Transformer Engine 2.5-2.9 fails to build any model.

    What it checks:
        megatron-core 0.17.x with TE 2.5-2.9, whatever the config.

    Why it matters:
        megatron-core 0.17 passes `retain_pinned_cpu_buffers=` to TE's
        `get_cpu_offload_context` from every `TransformerBlock`; TE 2.5-2.9 has no such
        parameter, so model construction stops with `TypeError` even without offloading
        (fixed by NVIDIA/Megatron-LM PR #4267 in 0.18). Older and newer TE are fine.

    Source:
        megatron-core 0.17.1 `TransformerBlock.__init__` / `get_cpu_offload_context`;
        TE 2.5-2.9 signature.
    """
    te = ctx.env.te_version
    if te is not None and (2, 5) <= te <= (2, 9):
        yield Hit(_LAYER, f"megatron-core {ctx.version} with Transformer Engine {te[0]}.{te[1]} "
                  "fails to build any model: it passes retain_pinned_cpu_buffers= to TE's get_cpu_offload_context, "
                  "which TE 2.5-2.9 does not accept (TypeError), with or without offloading",
                  "Upgrade megatron-core to 0.18 or later, or Transformer Engine to 2.10 or later")


@rule("TEX008", "retain-pinned-buffers-needs-transformer-engine-2-10", WARNING,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_retain_pinned_cpu_buffers: true
          """, version="0.18.2", te="2.9"),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cpu_offloading_retain_pinned_cpu_buffers: true
          """, version="0.18.2", te="2.10"),
      since="0.17")
def check_retain_pinned_buffers_effect(ctx: Context) -> Iterator[Hit]:
    """`cpu_offloading_retain_pinned_cpu_buffers` does nothing with Transformer Engine before 2.10.

    What it checks:
        `cpu_offloading_retain_pinned_cpu_buffers` true, with layer-level offloading on and
        TE < 2.10 (`--te-version`).

    Why it matters:
        megatron-core passes the flag to TE's `get_cpu_offload_context` (from 0.17), but only
        TE 2.10 and later act on it: before, the flag is silently dropped. (Until 0.5.0 this
        was a second finding of TEX004, which is about a different failure.)

    Source:
        megatron-core `TransformerBlock.__init__` / `get_cpu_offload_context` (>= 0.17);
        TE `get_cpu_offload_context` signature, by TE version.
    """
    path = "model.cpu_offloading_retain_pinned_cpu_buffers"
    if ctx.exists(path) and ctx.get(_LAYER) and ctx.get(path) and ctx.te_at_least("2.10") is False:
        yield Hit(path, "cpu_offloading_retain_pinned_cpu_buffers=true has no effect with Transformer Engine < 2.10",
                  "Upgrade Transformer Engine to 2.10 or later, or remove it")


@rule("TEX005", "fine-grained-needs-nvte-cpu-offload-v1", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
          """, te="2.12"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: "1"
          """, te="2.12"),
      since="0.16",
      upstream=(up.A4_NVTE_V1, up.BRIDGE_NVTE_V1))
def check_nvte_v1(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading on Transformer Engine >= 2.10 needs `NVTE_CPU_OFFLOAD_V1=1`.

    What it checks:
        `fine_grained_activation_offloading` is true and `NVTE_CPU_OFFLOAD_V1` is not `1`
        in the job's environment (the config's `env_vars`, or `--env`), with TE >= 2.10,
        or an unknown TE.

    Why it matters:
        megatron-core drives TE's v1 offload module; without the variable TE >= 2.10 uses
        its new implementation, which offloads weights too. Megatron-LM's argument checks
        and Megatron Bridge (also under NeMo-RL) refuse to start; a Python config built
        directly on megatron-core gets no check at all.

    Source:
        Megatron-LM `validate_args`; Megatron-Bridge@067f987d
        `_validate_fine_grained_activation_offloading`.
    """
    if not ctx.get(_FINE) or ctx.env_var("NVTE_CPU_OFFLOAD_V1") == "1" or ctx.env.te_absent:
        return
    new = ctx.te_at_least("2.10")
    if new is False:
        return
    where = {"bridge": "env_vars", "nemo-rl": "megatron_cfg.env_vars", "megatron-lm": "the launch environment"}
    fix = f"Set NVTE_CPU_OFFLOAD_V1=1 ({where[ctx.flavor]})"
    value = ctx.env_var("NVTE_CPU_OFFLOAD_V1")
    state = "is not set" if value is None else f"is {value!r}"
    patch = {"env.NVTE_CPU_OFFLOAD_V1": "1"} if ctx.flavor != "megatron-lm" else None
    if ctx.flavor == "bridge" and "NVTE_CPU_OFFLOAD_V1" in ctx.env.variables:
        # Bridge applies env_vars with os.environ.setdefault (NVIDIA-NeMo/Megatron-Bridge@067f987d:
        # src/megatron/bridge/training/config.py:1989): the launch environment's value wins, so no
        # config change can fix it (NeMo-RL hands env_vars to Ray, which sets them over the launch's).
        fix, patch = "Set NVTE_CPU_OFFLOAD_V1=1 in the launch environment (it wins over the config's env_vars)", None
    if new is None:
        yield Hit("env.NVTE_CPU_OFFLOAD_V1", f"fine-grained offloading with NVTE_CPU_OFFLOAD_V1 {state}: Transformer "
                  f"Engine >= 2.10 then offloads weights too, and the front end refuses to start ({_UNKNOWN})", fix,
                  patch=patch, at=(_FINE,), severity=WARNING)
        return
    check = up.A4_NVTE_V1 if ctx.flavor == "megatron-lm" else up.BRIDGE_NVTE_V1
    yield Hit("env.NVTE_CPU_OFFLOAD_V1", f"fine-grained offloading on Transformer Engine >= 2.10 with "
              f"NVTE_CPU_OFFLOAD_V1 {state}", fix, patch=patch, upstream=ctx.upstream(check), at=(_FINE,))


@rule("TEX006", "offload-module-needs-newer-transformer-engine", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [expert_fc1]
            num_moe_experts: 8
          """, te="2.5"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [expert_fc1]
            num_moe_experts: 8
          """, te="2.6"),
      since="0.16",
      upstream=(up.TEX_SAVE_ORIGINAL_INPUT, up.TL_GRAPH_TE))
def check_module_support(ctx: Context) -> Iterator[Hit]:
    """Offloaded modules that need a newer Transformer Engine (`expert_fc1` 2.6, `fused_group_mlp` 2.14).

    What it checks:
        With a known TE version: `expert_fc1` in `offload_modules` with TE < 2.6;
        `fused_group_mlp` with TE < 2.14; attention modules offloaded inside a captured
        `attn` CUDA graph (`cuda_graph_modules`, megatron-core >= 0.19) with TE < 2.14.

    Why it matters:
        Each fails when the model is built: `set_save_original_input` raises
        `ValueError`, the fused grouped MLP asserts, and graph-captured offload asserts
        TE >= 2.14.

    Source:
        megatron-core `set_save_original_input`, `TEGroupedMLP`, and
        `TransformerLayer._set_offload_modules` (>= 0.19).
    """
    modules = set(ctx.get("model.offload_modules") or [])
    if not ctx.get(_FINE) or ctx.env.te_version is None or ctx.env.te_absent:
        return
    if "expert_fc1" in modules and ctx.te_at_least("2.6") is False:
        yield Hit("model.offload_modules", "offloading expert_fc1 needs Transformer Engine >= 2.6 "
                  "(set_save_original_input); the model fails to build", "Upgrade TE, or drop expert_fc1",
                  upstream=ctx.upstream(up.TEX_SAVE_ORIGINAL_INPUT))
    if "fused_group_mlp" in modules and ctx.te_at_least("2.14") is False:
        yield Hit("model.offload_modules", "offloading fused_group_mlp needs the fused grouped MLP of Transformer "
                  "Engine >= 2.14; the model fails to build", "Upgrade TE, or offload expert_fc1/moe_act instead")
    graph_modules = ctx.get("model.cuda_graph_modules") or []
    attention = modules & {"core_attn", "attn_proj", "qkv_linear"}
    if ctx.at_least("0.19") and "attn" in graph_modules and attention and ctx.te_at_least("2.14") is False:
        yield Hit("model.cuda_graph_modules", f"offloading {sorted(attention)} inside a captured attn CUDA graph "
                  "needs Transformer Engine >= 2.14", "Upgrade TE, or drop attn from cuda_graph_modules",
                  upstream=ctx.upstream(up.TL_GRAPH_TE))


@rule("TEX007", "offloading-without-transformer-engine", ERROR,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
          """, te="none"),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
          """, te="2.10"),
      upstream=(up.TB_NO_TE, up.FGAO_NO_TE))
def check_transformer_engine_absent(ctx: Context) -> Iterator[Hit]:
    """Both activation-offloading mechanisms need Transformer Engine installed (`--te-version none`).

    What it checks:
        `--te-version none` (no Transformer Engine in the job's environment) with
        `cpu_offloading` or `fine_grained_activation_offloading` on.

    Why it matters:
        Layer-level offloading is TE's: `TransformerBlock` asserts TE is present.
        Fine-grained offloading toggles TE's CPU-offload module and raises `RuntimeError`
        at the first offloaded group.

    Source:
        megatron-core `TransformerBlock.__init__` and
        `pipeline_parallel/fine_grained_activation_offload.py`.
    """
    if not ctx.env.te_absent:
        return
    if ctx.get(_LAYER):
        yield Hit(_LAYER, "cpu_offloading=true without Transformer Engine", "Install Transformer Engine, or turn "
                  "cpu_offloading off", upstream=ctx.upstream(up.TB_NO_TE))
    if ctx.get(_FINE):
        yield Hit(_FINE, "fine_grained_activation_offloading=true without Transformer Engine",
                  "Install Transformer Engine, or turn fine-grained offloading off",
                  upstream=ctx.upstream(up.FGAO_NO_TE))


RULES: tuple[Rule, ...] = declared(__name__)
