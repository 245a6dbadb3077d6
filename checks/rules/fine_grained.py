"""FGA: fine-grained (module-level) activation offloading, `fine_grained_activation_offloading` (>= 0.16)."""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.formats import close_matches as _close_matches
from checks.rules import upstream as up
from checks.rules.base import ERROR, WARNING, Example, Hit, Rule, declared, rule
from checks.values import show
from checks.versions import VERSIONS, offload_modules, version_key

_SWITCH = "model.fine_grained_activation_offloading"
_MODULES = "model.offload_modules"

# The order names are shown in (which names each version accepts is data: checks.versions.offload_modules,
# TransformerConfig's own set); a name not listed here follows, alphabetically.
_SHOWN_ORDER: tuple[str, ...] = (
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act", "fused_group_mlp",
    "gdp_qkv")


def _in_order(names: frozenset[str] | set[str]) -> tuple[str, ...]:
    return tuple(n for n in _SHOWN_ORDER if n in names) + tuple(sorted(set(names) - set(_SHOWN_ORDER)))


def allowed_modules(ctx: Context) -> tuple[str, ...]:
    """Valid `offload_modules` names in the context's version (TransformerConfig's allowed set)."""
    return _in_order(offload_modules(ctx.version))


def _arrival(name: str) -> str:
    """The first version whose TransformerConfig accepts ``name``: a release as "0.19", else its label."""
    label = next(v for v in VERSIONS if name in offload_modules(v))
    return label if "@" in label or label == "main" else ".".join(label.split(".")[:2])


def repaired_modules(ctx: Context, on: bool | None = None) -> list[str]:
    """`offload_modules` with every fix the module-list rules know applied, in the user's order.

    Every rule that patches `offload_modules` proposes this one list, so that their patches agree (two that did
    not would be a conflict, CFG011) and applying any of them fixes the list for the others too: a typo becomes
    the closest valid name (FGA003; a name without one stays), `core_attn` joins `attn_proj` (FGA004), MoE modules
    leave a recomputed MoE layer (FGA008), `expert_fc1`/`moe_act` leave `fused_group_mlp` (FGA010), the modules
    paged stashing covers leave (FGA011), and norms Transformer Engine fuses away leave (FGA014). ``on``: as if
    fine-grained offloading were on (FGA005's patch turns it on); by default, as it is.
    """
    on = bool(ctx.get(_SWITCH)) if on is None else on
    modules = list(ctx.get(_MODULES) or [])
    if on:
        allowed = allowed_modules(ctx)
        modules = [m if m in allowed else next(iter(_close_matches(m, allowed, n=1, cutoff=0.6)), m) for m in modules]
        if "attn_proj" in modules and "core_attn" not in modules:
            modules.insert(modules.index("attn_proj"), "core_attn")
        if _selective(ctx) and "moe" in _recompute_modules(ctx):
            modules = [m for m in modules if m not in _MOE_MODULES]
        if "fused_group_mlp" in modules and ctx.at_least("0.19"):
            modules = [m for m in modules if m not in ("expert_fc1", "moe_act")]
        if ctx.get("model.transformer_impl") == "transformer_engine":
            idle = _idle_norms(ctx, set(modules))
            modules = [m for m in modules if m not in idle]
    if ctx.get("model.moe_paged_stash"):
        covered = _paged_stash_covers(ctx)
        modules = [m for m in modules if m not in covered]
    return list(dict.fromkeys(modules))


def _set_repr(names: list[str] | tuple[str, ...]) -> str:
    # upstream prints Python set reprs; their order varies between runs, so sorted here
    return "{" + ", ".join(repr(n) for n in sorted(names)) + "}"
_FGA_SINCE = "0.16"


@rule("FGA001", "fine-grained-with-cpu-offloading", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 2
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.F1_EXCLUSIVE,))
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


@rule("FGA002", "offload-modules-empty", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.F2_MODULES_EMPTY, up.NRL_MODULES_EMPTY))
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


@rule("FGA003", "offload-modules-invalid", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_atn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.F3_MODULES_INVALID,))
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
    later = tuple(n for n in _in_order(frozenset().union(*(offload_modules(v) for v in VERSIONS)))
                  if n not in allowed and version_key(_arrival(n)) > version_key(ctx.version))
    for name in invalid:
        close = _close_matches(name, allowed + later, n=1, cutoff=0.6)
        if name in later:
            hints.append(f"{name!r} arrives in megatron-core {_arrival(name)}")
        elif close and close[0] not in allowed:
            hints.append(f"{name!r}: did you mean {close[0]!r} (megatron-core {_arrival(close[0])} or later)?")
        elif close:
            hints.append(f"{name!r}: did you mean {close[0]!r}?")
    repairable = all(_close_matches(m, allowed, n=1, cutoff=0.6) for m in invalid)
    patch = {_MODULES: repaired_modules(ctx)} if repairable else None
    yield Hit(_MODULES, f"offload_modules has {', '.join(repr(n) for n in invalid)}, not valid in megatron-core "
              f"{ctx.version}" + (f" ({'; '.join(hints)})" if hints else ""),
              f"Use only {', '.join(allowed)}", patch=patch,
              upstream=ctx.upstream(up.F3_MODULES_INVALID, invalid=_set_repr(invalid), allowed=_set_repr(allowed)))


@rule("FGA004", "attn-proj-without-core-attn", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [attn_proj]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn, attn_proj]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.F4_ATTN_PROJ,))
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
                  patch={_MODULES: repaired_modules(ctx)}, upstream=ctx.upstream(up.F4_ATTN_PROJ))


@rule("FGA006", "fine-grained-needs-transformer-engine", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            transformer_impl: local
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            transformer_impl: transformer_engine
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.A3_TE_IMPL, up.BRIDGE_FG_TE_IMPL))
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


@rule("FGA005", "fine-grained-knobs-without-switch", WARNING,
      bad=Example("""
          model:
            offload_modules: [core_attn]
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE)
def check_knobs_without_switch(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading knobs do nothing while the switch is off.

    What it checks:
        `fine_grained_activation_offloading` is false and `offload_modules` is
        non-empty, or `min_offloaded_tensor_size`, `activation_offload_fraction`,
        `delta_offload_bytes_across_pp_ranks`,
        `fine_grained_offloading_max_inflight_offloads` or
        `delay_offload_until_cuda_graph` is set to a non-default value. The fix turns the
        switch on (with the module list the checks that then apply accept), unless
        layer-level offloading is on or asked for too (`cpu_offloading_num_layers`): only
        one of the two may be on (FGA001), and which is the user's choice.

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
    if ctx.stated(_MODULES) and modules and not _forced_off(ctx):
        patch: dict[str, object] | None = {_SWITCH: True}
        repaired = repaired_modules(ctx, on=True)
        if repaired != list(modules):  # the list as the checks that now apply want it
            patch = {_SWITCH: True, _MODULES: repaired} if repaired else None
        layers = "model.cpu_offloading_num_layers"
        if ctx.get("model.cpu_offloading") or (ctx.stated(layers) and (ctx.get(layers) or 0) > 0):
            # layer-level offloading is on, or asked for too (ACT006 offers to turn it on): only one may be (FGA001)
            patch = None
        yield Hit(_MODULES, f"offload_modules={modules} has no effect because fine_grained_activation_offloading "
                  "is false", "Set fine_grained_activation_offloading=true, or remove offload_modules", patch=patch)
    for name in ("min_offloaded_tensor_size", "activation_offload_fraction", "delta_offload_bytes_across_pp_ranks",
                 "fine_grained_offloading_max_inflight_offloads", "delay_offload_until_cuda_graph"):
        path = f"model.{name}"
        if not (ctx.exists(path) and ctx.stated(path)):
            continue
        spec = ctx.profile.field("model", name)
        if spec is not None and ctx.get(path) != spec.default:
            yield Hit(path, f"{name}={ctx.get(path)!r} has no effect because fine_grained_activation_offloading "
                      "is false", f"Remove {name}, or turn fine_grained_activation_offloading on")


_MOE_MODULES = frozenset({"expert_fc1", "moe_act", "fused_group_mlp"})


def _modules(ctx: Context) -> set[str]:
    return set(ctx.get(_MODULES) or [])


def _recompute_modules(ctx: Context) -> list[str]:
    """`recompute_modules` as megatron-core sees it (None means ["core_attn"]; `moe_layer_recompute` adds "moe")."""
    modules = list(ctx.get("model.recompute_modules") or ["core_attn"])
    if ctx.exists("model.moe_layer_recompute") and ctx.get("model.moe_layer_recompute") and "moe" not in modules:
        modules.append("moe")
    return modules


def _selective(ctx: Context) -> bool:
    if ctx.exists("model.moe_layer_recompute") and ctx.get("model.moe_layer_recompute"):
        return True  # megatron-core turns moe_layer_recompute into selective recompute of "moe"
    return ctx.get("model.recompute_granularity") == "selective"


@rule("FGA007", "gdp-qkv-with-gdp-in-proj-recompute", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [gdp_qkv]
            recompute_granularity: selective
            recompute_modules: [gdp_in_proj]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="main"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [gdp_qkv]
            recompute_granularity: selective
            recompute_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="main"),
      feature="gdp_qkv_recompute_check",
      upstream=(up.F5_GDP_QKV,))
def check_gdp_qkv(ctx: Context) -> Iterator[Hit]:
    """`gdp_qkv` offload cannot be combined with `gdp_in_proj` recompute.

    What it checks:
        `offload_modules` has `gdp_qkv` while selective recompute lists `gdp_in_proj`
        (megatron-core main).

    Why it matters:
        Recomputing `gdp_in_proj` discards the causal-conv input the `gdp_qkv` group
        would keep on the host; `TransformerConfig.__post_init__` raises `ValueError`.

    Source:
        megatron-core main `TransformerConfig.__post_init__`.
    """
    if ctx.get(_SWITCH) and "gdp_qkv" in _modules(ctx) and _selective(ctx) and "gdp_in_proj" in _recompute_modules(ctx):
        yield Hit(_MODULES, "offload_modules has gdp_qkv while recompute_modules has gdp_in_proj",
                  "Remove gdp_qkv from offload_modules, or gdp_in_proj from recompute_modules",
                  upstream=ctx.upstream(up.F5_GDP_QKV))


@rule("FGA008", "moe-offload-inside-moe-recompute", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [moe_act]
            num_moe_experts: 8
            recompute_granularity: selective
            recompute_modules: [moe]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [moe_act]
            num_moe_experts: 8
            recompute_granularity: selective
            recompute_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.F6_MOE_RECOMPUTE,))
def check_moe_recompute(ctx: Context) -> Iterator[Hit]:
    """MoE-internal offload cannot sit inside a recomputed MoE layer.

    What it checks:
        Selective recompute of `moe` (in `recompute_modules`, or `moe_layer_recompute`)
        with `expert_fc1`, `moe_act` or `fused_group_mlp` in `offload_modules`.

    Why it matters:
        Recomputing the whole MoE layer wraps its forward in a checkpoint, so the offload
        groups inside it run again during backward: redundant, and it breaks the offload
        bookkeeping. megatron-core asserts against it from 0.19; 0.16-0.18 accept it.

    Source:
        megatron-core >= 0.19 `TransformerConfig.__post_init__` (beyond upstream before).
    """
    inside = sorted(_modules(ctx) & _MOE_MODULES)
    if not (ctx.get(_SWITCH) and inside and _selective(ctx) and "moe" in _recompute_modules(ctx)):
        return
    modules = "{" + ", ".join(repr(m) for m in inside) + "}"
    upstream = ctx.upstream(up.F6_MOE_RECOMPUTE, modules=modules)
    yield Hit(_MODULES, f"offloading {inside} inside a recomputed MoE layer ('moe' in recompute_modules)"
              + ("" if upstream else f"; megatron-core {ctx.version} accepts it, 0.19 refuses it"),
              "Remove 'moe' from recompute_modules, or remove the MoE modules from offload_modules",
              patch={_MODULES: repaired_modules(ctx)} if repaired_modules(ctx) else None,
              upstream=upstream)


@rule("FGA009", "fine-grained-knob-range", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            min_offloaded_tensor_size: -1
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            min_offloaded_tensor_size: 0
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.F7_MIN_SIZE, up.F8_FRACTION, up.F9_DELTA))
def check_knob_ranges(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading knobs must be in range: sizes and byte deltas >= 0, the fraction in [0, 1].

    What it checks:
        With fine-grained offloading on: `min_offloaded_tensor_size < 0`,
        `activation_offload_fraction` outside [0, 1], or
        `delta_offload_bytes_across_pp_ranks < 0` (the last two exist from 0.19).

    Why it matters:
        megatron-core >= 0.19 asserts each. In 0.16-0.18 a negative
        `min_offloaded_tensor_size` is accepted and means "offload every tensor",
        including tiny ones whose copies cost more than they save.

    Source:
        megatron-core >= 0.19 `TransformerConfig.__post_init__` (beyond upstream before).
    """
    if not ctx.get(_SWITCH):
        return
    size = ctx.get("model.min_offloaded_tensor_size")
    if size is not None and size < 0:
        upstream = ctx.upstream(up.F7_MIN_SIZE)
        yield Hit("model.min_offloaded_tensor_size", f"min_offloaded_tensor_size={size} is negative"
                  + ("" if upstream else f" (megatron-core {ctx.version} accepts it: every tensor is offloaded)"),
                  "Set min_offloaded_tensor_size to 0 or more (it counts elements, default 1048576)",
                  patch={"model.min_offloaded_tensor_size": 1048576}, upstream=upstream,
                  severity=None if upstream else WARNING)
    fraction = ctx.get("model.activation_offload_fraction")
    if ctx.exists("model.activation_offload_fraction") and fraction is not None and not 0 <= fraction <= 1:
        yield Hit("model.activation_offload_fraction", f"activation_offload_fraction={fraction} is outside [0, 1]",
                  "Set activation_offload_fraction between 0 and 1", patch={"model.activation_offload_fraction": 1.0},
                  upstream=ctx.upstream(up.F8_FRACTION))
    delta = ctx.get("model.delta_offload_bytes_across_pp_ranks")
    if ctx.exists("model.delta_offload_bytes_across_pp_ranks") and delta is not None and delta < 0:
        yield Hit("model.delta_offload_bytes_across_pp_ranks", f"delta_offload_bytes_across_pp_ranks={delta} is "
                  "negative", "Set delta_offload_bytes_across_pp_ranks to 0 or more",
                  patch={"model.delta_offload_bytes_across_pp_ranks": 0}, upstream=ctx.upstream(up.F9_DELTA))


@rule("FGA010", "fused-group-mlp-constraints", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [fused_group_mlp]
            num_moe_experts: 8
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [fused_group_mlp]
            num_moe_experts: 8
            use_transformer_engine_op_fuser: true
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since="0.19",
      upstream=(up.F10_OP_FUSER, up.F11_FUSED_EXCLUSIVE))
def check_fused_group_mlp(ctx: Context) -> Iterator[Hit]:
    """`fused_group_mlp` needs the Transformer Engine op fuser and replaces `expert_fc1`/`moe_act`.

    What it checks:
        `offload_modules` has `fused_group_mlp` (megatron-core >= 0.19) without
        `use_transformer_engine_op_fuser`, or together with `expert_fc1`/`moe_act`.

    Why it matters:
        `TransformerConfig.__post_init__` raises `ValueError` for either: the module is
        the whole fused grouped MLP, which only exists with the op fuser.

    Source:
        megatron-core >= 0.19 `TransformerConfig.__post_init__`.
    """
    modules = _modules(ctx)
    if not (ctx.get(_SWITCH) and "fused_group_mlp" in modules):
        return
    if not ctx.get("model.use_transformer_engine_op_fuser"):
        yield Hit("model.use_transformer_engine_op_fuser", "offload_modules has fused_group_mlp but "
                  "use_transformer_engine_op_fuser is false", "Set use_transformer_engine_op_fuser=true",
                  patch={"model.use_transformer_engine_op_fuser": True}, upstream=ctx.upstream(up.F10_OP_FUSER),
                  at=(_MODULES,))
    partial = sorted(modules & {"expert_fc1", "moe_act"})
    if partial:
        yield Hit(_MODULES, f"offload_modules has fused_group_mlp together with {partial}",
                  "Keep fused_group_mlp alone for the MoE MLP", patch={_MODULES: repaired_modules(ctx)},
                  upstream=ctx.upstream(up.F11_FUSED_EXCLUSIVE,
                                        modules="{" + ", ".join(repr(m) for m in partial) + "}"))


@rule("FGA011", "moe-paged-stash-covers-moe-offload", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [moe_act]
            num_moe_experts: 8
            moe_paged_stash: true
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            num_moe_experts: 8
            moe_paged_stash: true
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since="0.18",
      upstream=(up.F12_PAGED_STASH_018, up.F12_PAGED_STASH, up.F12_NULL_MODULES))
def check_paged_stash_modules(ctx: Context) -> Iterator[Hit]:
    """MoE paged stashing already covers the MoE activations that offloading would move.

    What it checks:
        `moe_paged_stash` is true and `offload_modules` lists `expert_fc1`, `moe_act` or
        `fused_group_mlp`; megatron-core reads `offload_modules` here even when
        fine-grained offloading is off. Also `offload_modules: null` (as the NeMo-RL
        exemplars write it) with paged stashing.

    Why it matters:
        `TransformerConfig.__post_init__` raises `ValueError` (>= 0.18); with `null` it
        fails with `TypeError: 'NoneType' object is not iterable`, because it builds a set
        from `offload_modules` without a check.

    Source:
        megatron-core >= 0.18 `TransformerConfig.__post_init__`.
    """
    if not ctx.get("model.moe_paged_stash"):
        return
    if ctx.stated(_MODULES) and ctx.get(_MODULES) is None:
        # megatron-core computes set(offload_modules) here without a None check
        yield Hit(_MODULES, "moe_paged_stash=true with offload_modules: null: megatron-core fails with "
                  "\"TypeError: 'NoneType' object is not iterable\"", "Write offload_modules: [] instead of null",
                  patch={_MODULES: []}, upstream=ctx.upstream(up.F12_NULL_MODULES))
        return
    conflict = sorted(_modules(ctx) & _paged_stash_covers(ctx))
    if conflict:
        check = up.F12_PAGED_STASH if ctx.at_least("0.19") else up.F12_PAGED_STASH_018
        patch: dict[str, object] = {_MODULES: repaired_modules(ctx)}
        fix = "Remove those modules from offload_modules (paged stash covers them)"
        if ctx.get(_SWITCH) and not patch[_MODULES]:
            # nothing would be left to offload, and an empty list with the switch on is refused (FGA002)
            patch[_SWITCH] = False
            fix += ", and turn fine-grained offloading off: nothing else is left for it"
        yield Hit(_MODULES, f"moe_paged_stash=true and offload_modules has {conflict}", fix, patch=patch,
                  upstream=ctx.upstream(check, modules="{" + ", ".join(repr(m) for m in conflict) + "}"))


def _paged_stash_covers(ctx: Context) -> set[str]:
    """The offload modules whose activations MoE paged stashing already moves."""
    return {"expert_fc1", "moe_act"} | ({"fused_group_mlp"} if ctx.at_least("0.19") else set())


@rule("FGA012", "mhc-recompute-with-fine-grained", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            recompute_granularity: selective
            recompute_modules: [mhc]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="main"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            recompute_granularity: selective
            recompute_modules: [core_attn]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="main"),
      feature="mhc_recompute_check",
      upstream=(up.F13_MHC,))
def check_mhc_recompute(ctx: Context) -> Iterator[Hit]:
    """mHC recompute and fine-grained offloading are not supported together (megatron-core main).

    What it checks:
        Selective recompute with `mhc` in `recompute_modules` and fine-grained
        offloading on.

    Why it matters:
        The mHC recompute hook fires before the offloading backward chunk exists;
        `TransformerConfig.__post_init__` raises `NotImplementedError`.

    Source:
        megatron-core main `TransformerConfig.__post_init__`.
    """
    if ctx.get(_SWITCH) and _selective(ctx) and "mhc" in _recompute_modules(ctx):
        yield Hit("model.recompute_modules", "'mhc' in recompute_modules with fine-grained offloading",
                  "Remove 'mhc' from recompute_modules, or turn fine-grained offloading off",
                  upstream=ctx.upstream(up.F13_MHC), at=(_SWITCH,))


@rule("FGA013", "moe-offload-on-dense-model", WARNING,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [expert_fc1]
            num_moe_experts: null
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [expert_fc1]
            num_moe_experts: 8
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE,
      upstream=(up.NRL_MOE_ONLY,))
def check_moe_modules_on_dense(ctx: Context) -> Iterator[Hit]:
    """MoE modules offload nothing in a dense model (NeMo-RL refuses them when `num_moe_experts` is null).

    What it checks:
        `expert_fc1`, `moe_act` or `fused_group_mlp` in `offload_modules` when the config
        says the model is dense (`num_moe_experts` null or 0), or the experts do not use
        the grouped-GEMM path (`moe_grouped_gemm: false`) where the offload hooks live.

    Why it matters:
        Only Transformer Engine's grouped MLP calls the offload interface; elsewhere the
        modules are silently skipped. NeMo-RL raises `ValueError` when `num_moe_experts`
        is null; it tests `is None`, so 0 passes its check and gets the warning.

    Source:
        NeMo-RL `_apply_performance_config`; megatron-core `TEGroupedMLP` (the only
        caller of `expert_fc1`/`moe_act` offload).
    """
    moe = sorted(_modules(ctx) & _MOE_MODULES)
    if not (ctx.get(_SWITCH) and moe):
        return
    if ctx.stated("model.num_moe_experts") and not ctx.get("model.num_moe_experts"):
        # NeMo-RL tests `num_moe_experts is None`, so 0 passes its check
        # (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/megatron/setup.py:1199-1203).
        refused = ctx.flavor == "nemo-rl" and ctx.get("model.num_moe_experts") is None
        upstream = ctx.upstream(up.NRL_MOE_ONLY, modules=str(moe)) if refused else None
        yield Hit(_MODULES, f"offload_modules has {moe} but the model is dense (num_moe_experts is "
                  f"{ctx.get('model.num_moe_experts')!r}): they offload nothing",
                  "Use dense modules such as core_attn and attn_proj", upstream=upstream,
                  severity=ERROR if upstream else None)
    elif ctx.stated("model.moe_grouped_gemm") and ctx.get("model.moe_grouped_gemm") is False:
        yield Hit(_MODULES, f"offload_modules has {moe} but moe_grouped_gemm=false: only the grouped-GEMM expert "
                  "MLP offloads them", "Set moe_grouped_gemm=true, or offload other modules",
                  patch={"model.moe_grouped_gemm": True})


@rule("FGA014", "norm-offload-fused-away", WARNING,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [attn_norm, core_attn]
            multi_latent_attention: false
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [attn_norm, core_attn]
            multi_latent_attention: true
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE)
def check_fused_norms(ctx: Context) -> Iterator[Hit]:
    """`attn_norm`/`mlp_norm` offload nothing when Transformer Engine fuses the norm into the next linear.

    What it checks:
        `attn_norm` in `offload_modules` with `transformer_impl: transformer_engine` when
        the layer's input norm is fused into the QKV projection: standard attention, or
        multi-latent attention with `mla_down_proj_fusion` (>= 0.17). Also `mlp_norm` there
        in a dense model. Multi-latent attention without the fusion, and DeepSeek sparse
        attention (`experimental_attention_variant: dsa`), keep a real input norm, which is
        offloaded. When the config does not say whether the model uses multi-latent
        attention (a recipe or checkpoint decides), the warning says so instead of assuming.

    Why it matters:
        TE layer specs fold the layer norm into the following linear layer, leaving an
        identity where the norm module was, so there is nothing to offload (MoE layers
        keep a separate pre-MLP norm). The offload plan looks larger than it is.

    Source:
        Beyond upstream: megatron-core `TransformerLayer` offloads a norm only when it is
        not an `IdentityOp` (NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/transformer_layer.py:1547-1555);
        the TE layer spec makes the input norm an `IdentityOp` except for multi-latent
        attention without down-projection fusion (megatron/core/models/gpt/gpt_layer_specs.py:257-259, 296),
        and the experimental-attention spec keeps it for MLA and DSA
        (megatron/core/models/gpt/experimental_attention_variant_module_specs.py:143, 545-548).
    """
    modules = _modules(ctx)
    if not ctx.get(_SWITCH) or ctx.get("model.transformer_impl") != "transformer_engine":
        return
    idle = _idle_norms(ctx, modules)
    if idle:
        yield Hit(_MODULES, f"offload_modules has {idle}, which Transformer Engine fuses into the following linear "
                  "layer: nothing is offloaded for them", "Offload core_attn/attn_proj, or qkv_linear instead",
                  patch={_MODULES: repaired_modules(ctx)} if repaired_modules(ctx) else None)
    if "attn_norm" in modules and _real_input_norm(ctx) is None:
        yield Hit(_MODULES, "offload_modules has 'attn_norm', which offloads nothing unless the model uses "
                  "multi-latent attention without mla_down_proj_fusion (or DeepSeek sparse attention): with "
                  "standard attention Transformer Engine fuses the input norm into the QKV projection, and the "
                  "config does not say which attention the model uses",
                  "Say it: set model.multi_latent_attention (and mla_down_proj_fusion), or drop attn_norm for a "
                  "standard-attention model")


def _idle_norms(ctx: Context, modules: set[str]) -> list[str]:
    """The norms in ``modules`` a Transformer Engine layer spec fuses into the next linear layer."""
    dense = ctx.stated("model.num_moe_experts") and not ctx.get("model.num_moe_experts")
    real_input_norm = _real_input_norm(ctx) if "attn_norm" in modules else True
    return [m for m in ("attn_norm", "mlp_norm") if m in modules and (real_input_norm is False if m == "attn_norm"
                                                                       else dense)]


def _real_input_norm(ctx: Context) -> bool | None:
    """Whether the TE layer spec keeps a real input norm before attention (so attn_norm offloads); None: not said.

    A Megatron-LM command line and a Bridge dump state every field; a partial config leaves the attention type
    to the recipe or checkpoint.
    """
    complete = ctx.flavor == "megatron-lm" or ctx.cfg.model_class is not None
    variant = ctx.get("model.experimental_attention_variant")
    if variant == "dsa":  # DSA's indexer needs the normalised input, so the norm stays a module
        return True
    if not (complete or ctx.stated("model.multi_latent_attention")):
        return None
    if not ctx.get("model.multi_latent_attention"):
        return False
    if variant is not None:  # the experimental-attention spec never fuses MLA's input norm
        return True
    # mla_down_proj_fusion (an MLATransformerConfig field, >= 0.17) defaults to false, and no Bridge recipe or
    # provider sets it at Megatron-Bridge@067f987d: only Megatron-LM's --mla-down-proj-fusion turns it on.
    return not ctx.get("run.mla_down_proj_fusion")


@rule("FGA015", "fine-grained-with-full-recompute", WARNING,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            recompute_granularity: full
            recompute_method: uniform
            recompute_num_layers: 1
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            recompute_granularity: selective
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since=_FGA_SINCE)
def check_full_recompute(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading inside full recompute is an untested combination.

    What it checks:
        Fine-grained offloading with `recompute_granularity: full`.

    Why it matters:
        Full recompute keeps only each layer's input and recomputes the rest during
        backward, so the offload groups run inside the recompute; megatron-core refuses
        the analogous MoE and mHC combinations but does not check this one. The layer
        inputs are tiny, so there is little left to offload anyway.

    Source:
        Beyond upstream.
    """
    if ctx.get(_SWITCH) and ctx.get("model.recompute_granularity") == "full":
        yield Hit("model.recompute_granularity", "fine-grained offloading with full recompute: the offload groups "
                  "run inside the recomputed forward (untested upstream, and little is left to offload)",
                  "Use selective recompute (recompute_granularity=selective) with fine-grained offloading",
                  at=(_SWITCH,))


@rule("FGA016", "fine-grained-knob-inert", WARNING,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            delta_offload_bytes_across_pp_ranks: 1000000
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            delta_offload_bytes_across_pp_ranks: 1000000
            pipeline_model_parallel_size: 2
            pipeline_dtype: bf16
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """),
      since="0.18")
def check_inert_graph_knobs(ctx: Context) -> Iterator[Hit]:
    """Fine-grained knobs that act only in some setups: delayed offload, PP deltas, in-flight caps.

    What it checks:
        `delay_offload_until_cuda_graph` without `cuda_graph_impl: transformer_engine`;
        `delta_offload_bytes_across_pp_ranks` > 0 without pipeline parallelism; a negative
        `fine_grained_offloading_max_inflight_offloads` (outside full-iteration graphs,
        where it is an error).

    Why it matters:
        The delayed offload only acts on TE graph replay of `expert_fc1`/`moe_act`; the
        PP delta keeps `pp_rank * delta` bytes on rank r, which is nothing with one stage;
        a negative cap behaves like 0 (wait after every offload). None is checked.

    Source:
        Beyond upstream: megatron-core `fine_grained_activation_offload.py`.
    """
    if not ctx.get(_SWITCH):
        return
    from checks.rules.cuda_graphs import graph_impl

    if ctx.exists("model.delay_offload_until_cuda_graph") and ctx.get("model.delay_offload_until_cuda_graph") \
            and graph_impl(ctx) != "transformer_engine":
        yield Hit("model.delay_offload_until_cuda_graph", "delay_offload_until_cuda_graph=true has no effect without "
                  f"cuda_graph_impl=transformer_engine (it is {graph_impl(ctx)})", "Remove it, or use TE CUDA graphs")
    delta = ctx.get("model.delta_offload_bytes_across_pp_ranks")
    if ctx.exists("model.delta_offload_bytes_across_pp_ranks") and delta and delta > 0 \
            and (ctx.get("model.pipeline_model_parallel_size") or 1) == 1:
        yield Hit("model.delta_offload_bytes_across_pp_ranks", f"delta_offload_bytes_across_pp_ranks={delta} has no "
                  "effect without pipeline parallelism", "Remove it")
    cap = ctx.get("model.fine_grained_offloading_max_inflight_offloads")
    if ctx.exists("model.fine_grained_offloading_max_inflight_offloads") and cap is not None and cap < 0 \
            and graph_impl(ctx) != "full_iteration":
        yield Hit("model.fine_grained_offloading_max_inflight_offloads", f"fine_grained_offloading_max_inflight_"
                  f"offloads={cap} behaves like 0: the main stream waits after every offload",
                  "Use null (no cap) or a positive number",
                  patch={"model.fine_grained_offloading_max_inflight_offloads": None})


@rule("FGA017", "fine-grained-plan-from-first-call", WARNING,
      bad=Example("--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn --skip-train",
                  "megatron-lm", te="2.9"),
      good=Example("--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn", "megatron-lm",
                   te="2.9"),
      since=_FGA_SINCE)
def check_first_call_plan(ctx: Context) -> Iterator[Hit]:
    """The fine-grained offload plan is fixed by the first forward/backward call; it must be a training step.

    What it checks:
        Fine-grained offloading with a run that evaluates without training first
        (`skip_train`), or whose number of micro-batches changes (`rampup_batch_size`).

    Why it matters:
        megatron-core records the offload groups during the first `forward_backward_func`
        call and reuses that plan by index afterwards. A forward-only pass saves no
        tensors, so a plan made from it offloads little or nothing; a micro-batch count
        that grows leaves the extra micro-batches unplanned. (NeMo-RL suspends offloading
        in its forward-only passes for this reason.)

    Source:
        Beyond upstream: megatron-core `fine_grained_activation_offload.py` (warm-up and
        `post_warmup_callback`).
    """
    if not ctx.get(_SWITCH):
        return
    if ctx.get("run.skip_train"):
        yield Hit("run.skip_train", "skip_train with fine-grained offloading: the offload plan is built from "
                  "forward-only passes, which save no tensors", "Turn fine-grained offloading off for evaluation-only "
                  "runs", at=(_SWITCH,))
    if ctx.get("run.rampup_batch_size"):
        yield Hit("run.rampup_batch_size", "batch-size ramp-up with fine-grained offloading: the plan made in the "
                  "first step does not cover the micro-batches added later", "Disable the ramp-up, or accept that "
                  "later micro-batches are not offloaded", at=(_SWITCH,))


def _forced_off(ctx: Context) -> bool:
    # NeMo-RL replaces offload_modules with [] when the switch is false; the loader reports that itself.
    from checks.config import CLEARED_WITH_SWITCH

    setting = ctx.setting(_MODULES)
    return setting is not None and setting.origin.derived == CLEARED_WITH_SWITCH


RULES: tuple[Rule, ...] = declared(__name__)
