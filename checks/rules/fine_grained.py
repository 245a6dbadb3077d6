"""FGA: fine-grained (module-level) activation offloading, `fine_grained_activation_offloading` (>= 0.16)."""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.formats import close_matches as _close_matches
from checks.rules import upstream as up
from checks.rules.base import ERROR, WARNING, Example, Hit, Rule
from checks.values import show

_SWITCH = "model.fine_grained_activation_offloading"
_MODULES = "model.offload_modules"

# The names TransformerConfig accepts in offload_modules, per version (F3's allowed set).
_BASE_MODULES: tuple[str, ...] = (
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")


def allowed_modules(ctx: Context) -> tuple[str, ...]:
    """Valid `offload_modules` names in the context's version."""
    names = _BASE_MODULES
    if ctx.at_least("0.19"):
        names += ("fused_group_mlp",)
    if ctx.version == "main":
        names += ("gdp_qkv",)
    return names


def _set_repr(names: list[str] | tuple[str, ...]) -> str:
    # upstream prints Python set reprs; their order varies between runs, so sorted here
    return "{" + ", ".join(repr(n) for n in sorted(names)) + "}"


def check_exclusive(ctx: Context) -> Iterator[Hit]:
    """Fine-grained and layer-level activation offloading are mutually exclusive.

    What it checks:
        `fine_grained_activation_offloading` and `cpu_offloading` are both true.

    Why it matters:
        `TransformerConfig.__post_init__` asserts against it (an `AssertionError`,
        which `python -O` strips, after which the two mechanisms fight over the same
        saved tensors).

    Source:
        megatron-core >= 0.16 `TransformerConfig.__post_init__`.
    """
    if ctx.get(_SWITCH) and ctx.get("model.cpu_offloading"):
        yield Hit("model.cpu_offloading", "fine_grained_activation_offloading=true and cpu_offloading=true: "
                  "only one activation-offloading mechanism may be on",
                  "Keep fine-grained offloading and set cpu_offloading=false (it also supports PP and recompute)",
                  patch={"model.cpu_offloading": False}, upstream=ctx.upstream(up.F1_EXCLUSIVE), at=(_SWITCH,))


def check_modules_present(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading needs a non-empty `offload_modules` list.

    What it checks:
        `fine_grained_activation_offloading` is true and `offload_modules` is
        missing, null or empty.

    Why it matters:
        megatron-core fails with a bare `assert` and **no message** (an empty
        `AssertionError`), which says nothing about the cause; NeMo-RL checks first
        and raises a `ValueError` naming it.

    Source:
        megatron-core >= 0.16 `TransformerConfig.__post_init__`; NeMo-RL
        `_apply_performance_config`.
    """
    if not ctx.get(_SWITCH):
        return
    modules = ctx.get(_MODULES)
    if modules:
        return
    if ctx.flavor == "nemo-rl":
        check, stop = up.NRL_MODULES_EMPTY, "NeMo-RL stops with a ValueError at set-up"
    else:
        check, stop = up.F2_MODULES_EMPTY, "megatron-core stops with an AssertionError that has no message"
    yield Hit(_MODULES, f"fine_grained_activation_offloading=true but offload_modules is {show(modules)}: nothing "
              f"to offload, and {stop}",
              "List the modules whose inputs to offload, e.g. offload_modules=[core_attn, attn_proj] "
              "(dense) or [expert_fc1, moe_act] (MoE)",
              patch={_MODULES: ["core_attn", "attn_proj"]}, upstream=ctx.upstream(check), at=(_SWITCH,))


def check_modules_valid(ctx: Context) -> Iterator[Hit]:
    """Every `offload_modules` entry must be a module name the version knows.

    What it checks:
        `fine_grained_activation_offloading` is true and `offload_modules` holds a
        name outside the version's set: `attn_norm`, `qkv_linear`, `core_attn`,
        `attn_proj`, `mlp_norm`, `expert_fc1`, `moe_act` (>= 0.16),
        `fused_group_mlp` (>= 0.19), `gdp_qkv` (main). Suggests the closest name.

    Why it matters:
        `TransformerConfig.__post_init__` raises `AssertionError` listing the invalid
        and allowed names as Python sets (their order varies from run to run).

    Source:
        megatron-core >= 0.16 `TransformerConfig.__post_init__`.
    """
    modules = ctx.get(_MODULES)
    if not ctx.get(_SWITCH) or not modules:
        return
    allowed = allowed_modules(ctx)
    invalid = sorted(set(modules) - set(allowed))
    if not invalid:
        return
    hints = []
    for name in invalid:
        close = _close_matches(name, allowed + ("fused_group_mlp", "gdp_qkv"), n=1, cutoff=0.6)
        if close and close[0] not in allowed:
            hints.append(f"{name!r}: {close[0]!r} needs a newer megatron-core than {ctx.version}")
        elif close:
            hints.append(f"{name!r}: did you mean {close[0]!r}?")
    repaired = [m if m in allowed else next(iter(_close_matches(m, allowed, n=1, cutoff=0.6)), None)
                for m in modules]
    patch = {_MODULES: list(dict.fromkeys(r for r in repaired if r))} if all(repaired) else None
    yield Hit(_MODULES, f"offload_modules has {', '.join(repr(n) for n in invalid)}, not valid in megatron-core "
              f"{ctx.version}" + (f" ({'; '.join(hints)})" if hints else ""),
              f"Use only {', '.join(allowed)}", patch=patch,
              upstream=ctx.upstream(up.F3_MODULES_INVALID, invalid=_set_repr(invalid), allowed=_set_repr(allowed)))


def check_attn_proj(ctx: Context) -> Iterator[Hit]:
    """`attn_proj` can only be offloaded together with `core_attn`.

    What it checks:
        `fine_grained_activation_offloading` is true and `offload_modules` contains
        `attn_proj` but not `core_attn`.

    Why it matters:
        The input of `attn_proj` is the output of `core_attn`, which
        `core_attn.backward()` needs; `TransformerConfig.__post_init__` raises
        `ValueError`.

    Source:
        megatron-core >= 0.16 `TransformerConfig.__post_init__`.
    """
    modules = ctx.get(_MODULES) or []
    if ctx.get(_SWITCH) and "attn_proj" in modules and "core_attn" not in modules:
        yield Hit(_MODULES, f"offload_modules={modules} has attn_proj without core_attn",
                  "Add core_attn to offload_modules, or drop attn_proj",
                  patch={_MODULES: ["core_attn", *modules]}, upstream=ctx.upstream(up.F4_ATTN_PROJ))


def check_transformer_engine(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading needs the Transformer Engine layer implementation.

    What it checks:
        `fine_grained_activation_offloading` is true and `transformer_impl` is not
        `transformer_engine` (`local` or `inference_optimized`).

    Why it matters:
        The offload hooks live in Transformer Engine's CPU-offload module. Megatron-LM's
        argument checks assert it, and Megatron Bridge (which NeMo-RL runs too) raises
        `ValueError` in `ConfigContainer.validate`; a Python config built straight on
        megatron-core gets no check and fails at the first offloaded group.

    Source:
        Megatron-LM `validate_args` (>= 0.16); Megatron-Bridge@067f987d
        `_validate_fine_grained_activation_offloading`.
    """
    impl = ctx.get("model.transformer_impl")
    if not ctx.get(_SWITCH) or impl == "transformer_engine":
        return
    if ctx.flavor == "megatron-lm":
        upstream = ctx.upstream(up.A3_TE_IMPL)
    else:
        upstream = ctx.upstream(up.BRIDGE_FG_TE_IMPL, impl=impl)
    yield Hit("model.transformer_impl", f"fine_grained_activation_offloading=true with transformer_impl={impl!r}",
              "Set transformer_impl=transformer_engine, or turn fine-grained offloading off",
              patch={"model.transformer_impl": "transformer_engine"}, upstream=upstream, at=(_SWITCH,))


def check_knobs_without_switch(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading knobs do nothing while the switch is off.

    What it checks:
        `fine_grained_activation_offloading` is false and `offload_modules` is
        non-empty, or `min_offloaded_tensor_size`, `activation_offload_fraction`,
        `delta_offload_bytes_across_pp_ranks`,
        `fine_grained_offloading_max_inflight_offloads` or
        `delay_offload_until_cuda_graph` is set to a non-default value.

    Why it matters:
        megatron-core reads none of them without the switch and checks none of their
        ranges, so a config that looks like it offloads does not.

    Source:
        Beyond upstream (the range checks in megatron-core >= 0.19 run only with the
        switch on).
    """
    if ctx.get(_SWITCH):
        return
    modules = ctx.get(_MODULES)
    if ctx.is_set(_MODULES) and modules and not _forced_off(ctx):
        yield Hit(_MODULES, f"offload_modules={modules} has no effect because fine_grained_activation_offloading "
                  "is false", "Set fine_grained_activation_offloading=true, or remove offload_modules",
                  patch={_SWITCH: True} if not ctx.get("model.cpu_offloading") else None)
    for name in ("min_offloaded_tensor_size", "activation_offload_fraction", "delta_offload_bytes_across_pp_ranks",
                 "fine_grained_offloading_max_inflight_offloads", "delay_offload_until_cuda_graph"):
        path = f"model.{name}"
        if not (ctx.exists(path) and ctx.is_set(path)):
            continue
        spec = ctx.profile.field("model", name)
        if spec is not None and ctx.get(path) != spec.default:
            yield Hit(path, f"{name}={ctx.get(path)!r} has no effect because fine_grained_activation_offloading "
                      "is false", f"Remove {name}, or turn fine_grained_activation_offloading on")


def _forced_off(ctx: Context) -> bool:
    # NeMo-RL replaces offload_modules with [] when the switch is false; the loader reports that itself.
    setting = ctx.setting(_MODULES)
    return setting is not None and setting.origin.note.startswith("NeMo-RL clears")


_FGA_SINCE = "0.16"
_ENV = "env_vars:\n  NVTE_CPU_OFFLOAD_V1: 1\n"  # TE >= 2.10 needs it (TEX005)
RULES: tuple[Rule, ...] = (
    Rule("FGA001", "fine-grained-with-cpu-offloading", ERROR, check_exclusive,
         bad=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n"
                     "  num_layers: 24\n  cpu_offloading: true\n  cpu_offloading_num_layers: 2\n" + _ENV),
         good=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n" + _ENV),
         reads=(_SWITCH, "model.cpu_offloading"), since=_FGA_SINCE, upstream=(up.F1_EXCLUSIVE,)),
    Rule("FGA002", "offload-modules-empty", ERROR, check_modules_present,
         bad=Example("model:\n  fine_grained_activation_offloading: true\n" + _ENV),
         good=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n" + _ENV),
         reads=(_SWITCH, _MODULES), since=_FGA_SINCE, upstream=(up.F2_MODULES_EMPTY, up.NRL_MODULES_EMPTY)),
    Rule("FGA003", "offload-modules-invalid", ERROR, check_modules_valid,
         bad=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_atn]\n" + _ENV),
         good=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n" + _ENV),
         reads=(_SWITCH, _MODULES), since=_FGA_SINCE, upstream=(up.F3_MODULES_INVALID,)),
    Rule("FGA004", "attn-proj-without-core-attn", ERROR, check_attn_proj,
         bad=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [attn_proj]\n" + _ENV),
         good=Example("model:\n  fine_grained_activation_offloading: true\n"
                      "  offload_modules: [core_attn, attn_proj]\n" + _ENV),
         reads=(_SWITCH, _MODULES), since=_FGA_SINCE, upstream=(up.F4_ATTN_PROJ,)),
    Rule("FGA006", "fine-grained-needs-transformer-engine", ERROR, check_transformer_engine,
         bad=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n"
                     "  transformer_impl: local\n" + _ENV),
         good=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n"
                      "  transformer_impl: transformer_engine\n" + _ENV),
         reads=(_SWITCH, "model.transformer_impl"), since=_FGA_SINCE,
         upstream=(up.A3_TE_IMPL, up.BRIDGE_FG_TE_IMPL)),
    Rule("FGA005", "fine-grained-knobs-without-switch", WARNING, check_knobs_without_switch,
         bad=Example("model:\n  offload_modules: [core_attn]\n"),
         good=Example("model:\n  fine_grained_activation_offloading: true\n  offload_modules: [core_attn]\n" + _ENV),
         reads=(_SWITCH, _MODULES, "model.cpu_offloading", "model.min_offloaded_tensor_size",
                "model.activation_offload_fraction", "model.delta_offload_bytes_across_pp_ranks",
                "model.fine_grained_offloading_max_inflight_offloads", "model.delay_offload_until_cuda_graph"),
         since=_FGA_SINCE),
)
