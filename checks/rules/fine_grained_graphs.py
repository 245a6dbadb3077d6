"""FGA (CUDA graphs): fine-grained activation offloading under CUDA-graph capture, per megatron-core version."""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.rules import upstream as up
from checks.rules.base import ERROR, Example, Hit, Rule, declared, rule
from checks.rules.cuda_graphs import graph_impl, graph_impl_patch, graph_modules, patch_text

_SWITCH = "model.fine_grained_activation_offloading"
_MODULES = "model.offload_modules"
_MOE_MODULES = frozenset({"expert_fc1", "moe_act", "fused_group_mlp"})


def _graphed(ctx: Context) -> str | None:
    """The CUDA-graph implementation when fine-grained offloading runs under one, else None."""
    impl = graph_impl(ctx)
    return impl if ctx.get(_SWITCH) and impl != "none" else None


def bridge_local_guard(ctx: Context, impl: str) -> Hit | None:
    """Megatron Bridge (and NeMo-RL through it) refuses local CUDA graphs other than full-iteration ones."""
    if ctx.flavor not in ("bridge", "nemo-rl") or impl != "local":
        return None
    scopes = graph_modules(ctx)
    modules = f" with scopes {scopes}" if scopes else ""
    if ctx.at_least("0.18"):
        patch = graph_impl_patch(ctx, "transformer_engine")
        fix = f"Use {patch_text(patch)} for per-module capture"
    else:  # before 0.18 no CUDA-graph implementation works with fine-grained offloading (FGA019)
        patch = graph_impl_patch(ctx, "none")
        fix = f"Turn CUDA graphs off ({patch_text(patch)}): megatron-core {ctx.version} supports none with " \
              "fine-grained offloading (0.18 adds Transformer Engine graphs)"
    return Hit("model.cuda_graph_impl", "Megatron Bridge allows cuda_graph_impl=local only for full-iteration "
               "graphs", fix, patch=patch,
               upstream=ctx.upstream(up.BRIDGE_LOCAL_GRAPH, modules=modules), at=(_SWITCH,))


@rule("FGA018", "fine-grained-local-cuda-graph", ERROR,
      bad=Example("--num-layers 8 --num-experts 8 --fine-grained-activation-offloading --offload-modules "
                  "moe_act --cuda-graph-impl local", "megatron-lm", version="0.19.2", te="2.9"),
      good=Example("--num-layers 8 --num-experts 8 --fine-grained-activation-offloading --offload-modules "
                   "moe_act --cuda-graph-impl local --cuda-graph-modules attn", "megatron-lm", version="0.19.2",
                   te="2.9"),
      since="0.16",
      upstream=(up.G1_LOCAL_MODULES, up.G2_LOCAL_WHOLE_LAYER, up.BRIDGE_LOCAL_GRAPH))
def check_local_graphs(ctx: Context) -> Iterator[Hit]:
    """With `cuda_graph_impl: local`, fine-grained offloading is limited to MoE modules outside a whole-layer capture.

    What it checks:
        Fine-grained offloading with local CUDA graphs (megatron-core >= 0.19) and a
        non-MoE module in `offload_modules`, or whole-layer capture (empty
        `cuda_graph_modules`). Under Megatron Bridge and NeMo-RL, any local graph that is
        not a full-iteration graph.

    Why it matters:
        `TransformerConfig.__post_init__` asserts both; Megatron Bridge's own CUDA-graph
        validation refuses local per-module graphs even earlier.

    Source:
        megatron-core >= 0.19 `TransformerConfig.__post_init__`; Megatron-Bridge@067f987d
        `validate_cuda_graph_configuration`.
    """
    if _graphed(ctx) != "local":
        return
    guard = bridge_local_guard(ctx, "local")
    if guard is not None:
        yield guard
        return
    if not ctx.at_least("0.19"):
        return  # 0.18 refuses local graphs outright (FGA019)
    unsupported = sorted(set(ctx.get(_MODULES) or []) - _MOE_MODULES)
    if unsupported:
        yield Hit(_MODULES, f"local CUDA graphs support offloading only expert_fc1, moe_act and fused_group_mlp; "
                  f"offload_modules also has {unsupported}", "Use cuda_graph_impl=transformer_engine, or offload "
                  "MoE modules only", upstream=ctx.upstream(up.G1_LOCAL_MODULES, modules=str(unsupported)))
    if not graph_modules(ctx):
        yield Hit("model.cuda_graph_modules", "local CUDA graphs capture the whole layer (no cuda_graph_modules), "
                  "which fine-grained offloading does not support", "List the captured modules in "
                  "cuda_graph_modules, e.g. [attn, moe_router]", upstream=ctx.upstream(up.G2_LOCAL_WHOLE_LAYER),
                  at=(_SWITCH,))


@rule("FGA019", "fine-grained-cuda-graph-implementation", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: transformer_engine
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.17.1"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: transformer_engine
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.18.2"),
      since="0.16",
      upstream=(up.C6_GRAPH_IMPL, up.G3_IMPL_018, up.G3_IMPL))
def check_graph_implementation(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading supports Transformer Engine and full-iteration CUDA graphs (and local partial MoE ones).

    What it checks:
        Fine-grained offloading with a CUDA-graph implementation megatron-core does not
        support with it: in 0.18 anything but `transformer_engine` or `full_iteration`;
        from 0.19 also local graphs of MoE modules only. In 0.16/0.17 megatron-core does
        not check the combination at all (and has no `full_iteration` implementation).

    Why it matters:
        `TransformerConfig.__post_init__` asserts from 0.18. In 0.16/0.17 the graph
        captures the offload copies with nothing to order them against the capture, a
        combination upstream only validated and fixed from 0.18.

    Source:
        megatron-core >= 0.18 `TransformerConfig.__post_init__` (beyond upstream before).
    """
    impl = _graphed(ctx)
    if impl is None or bridge_local_guard(ctx, impl) is not None:
        return
    if not ctx.at_least("0.18"):
        off = graph_impl_patch(ctx, "none")
        if impl == "full_iteration":
            yield Hit("model.cuda_graph_impl", f"cuda_graph_impl=full_iteration does not exist in megatron-core "
                      f"{ctx.version} (it arrived in 0.18)",
                      f"Upgrade megatron-core to 0.18 or later, or set {patch_text(off)}", patch=off,
                      upstream=ctx.upstream(up.C6_GRAPH_IMPL, impl=impl), at=(_SWITCH,))
        else:
            yield Hit("model.cuda_graph_impl", f"fine-grained offloading under {impl} CUDA graphs: megatron-core "
                      f"{ctx.version} does not validate or order the offload copies against graph capture",
                      f"Upgrade megatron-core to 0.18 or later, or turn CUDA graphs off ({patch_text(off)})",
                      patch=off, at=(_SWITCH,))
        return
    modules = set(ctx.get(_MODULES) or [])
    local_partial = impl == "local" and bool(modules) and modules <= _MOE_MODULES and "moe" not in graph_modules(ctx)
    if impl in ("transformer_engine", "full_iteration") or (ctx.at_least("0.19") and local_partial):
        return
    check = up.G3_IMPL if ctx.at_least("0.19") else up.G3_IMPL_018
    patch = graph_impl_patch(ctx, "transformer_engine")
    yield Hit("model.cuda_graph_impl", f"fine-grained offloading is not supported with cuda_graph_impl={impl}"
              + (" and these modules" if impl == "local" else ""), f"Use {patch_text(patch)}", patch=patch,
              upstream=ctx.upstream(check), at=(_SWITCH,))


@rule("FGA020", "fine-grained-token-drop-moe-graph", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: transformer_engine
            cuda_graph_modules: [attn, moe]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: transformer_engine
            cuda_graph_modules: [attn, moe_router]
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      since="0.18",
      upstream=(up.G4_TOKEN_DROP,))
def check_token_drop_graph(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading cannot run with the MoE module captured in a CUDA graph.

    What it checks:
        Fine-grained offloading with `moe` in the captured CUDA-graph modules
        (megatron-core >= 0.18).

    Why it matters:
        Capturing the whole MoE module requires token-drop MoE, which the offload path
        does not support yet; `TransformerConfig.__post_init__` asserts.

    Source:
        megatron-core >= 0.18 `TransformerConfig.__post_init__`.
    """
    if _graphed(ctx) and "moe" in graph_modules(ctx):
        yield Hit("model.cuda_graph_modules", "fine-grained offloading with moe in cuda_graph_modules",
                  "Capture moe_router (and attn) instead of moe", upstream=ctx.upstream(up.G4_TOKEN_DROP),
                  at=(_SWITCH,))


@rule("FGA021", "fine-grained-graph-warmup-steps", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: transformer_engine
            cuda_graph_warmup_steps: 0
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: transformer_engine
            cuda_graph_warmup_steps: 3
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      since="0.18",
      upstream=(up.G5_WARMUP,))
def check_graph_warmup(ctx: Context) -> Iterator[Hit]:
    """Fine-grained offloading under CUDA graphs needs at least one graph warm-up step.

    What it checks:
        Fine-grained offloading with CUDA graphs and `cuda_graph_warmup_steps` <= 0
        (megatron-core >= 0.18).

    Why it matters:
        The offload plan is built in a warm-up iteration before capture;
        `TransformerConfig.__post_init__` asserts.

    Source:
        megatron-core >= 0.18 `TransformerConfig.__post_init__`.
    """
    steps = ctx.get("model.cuda_graph_warmup_steps")
    if _graphed(ctx) and steps is not None and steps <= 0:
        yield Hit("model.cuda_graph_warmup_steps", f"cuda_graph_warmup_steps={steps} with fine-grained offloading",
                  "Set cuda_graph_warmup_steps to 1 or more (default 3)",
                  patch={"model.cuda_graph_warmup_steps": 3}, upstream=ctx.upstream(up.G5_WARMUP), at=(_SWITCH,))


@rule("FGA022", "fine-grained-full-iteration-inflight", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: full_iteration
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [core_attn]
            cuda_graph_impl: full_iteration
            fine_grained_offloading_max_inflight_offloads: 1
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      since="0.18",
      upstream=(up.G6_INFLIGHT,))
def check_full_iteration_inflight(ctx: Context) -> Iterator[Hit]:
    """Full-iteration CUDA graphs need a bound on in-flight fine-grained offloads.

    What it checks:
        Fine-grained offloading with `cuda_graph_impl: full_iteration` and
        `fine_grained_offloading_max_inflight_offloads` unset or negative
        (megatron-core >= 0.18).

    Why it matters:
        A captured iteration must join the offload stream at fixed points;
        `TransformerConfig.__post_init__` asserts.

    Source:
        megatron-core >= 0.18 `TransformerConfig.__post_init__`.
    """
    cap = ctx.get("model.fine_grained_offloading_max_inflight_offloads")
    if _graphed(ctx) == "full_iteration" and (cap is None or cap < 0):
        yield Hit("model.fine_grained_offloading_max_inflight_offloads", f"fine_grained_offloading_max_inflight_"
                  f"offloads is {cap!r} under a full_iteration CUDA graph",
                  "Set fine_grained_offloading_max_inflight_offloads to 0 or more (1 is a good start)",
                  patch={"model.fine_grained_offloading_max_inflight_offloads": 1},
                  upstream=ctx.upstream(up.G6_INFLIGHT), at=(_SWITCH,))


@rule("FGA023", "expert-fc1-offload-with-ncclep-overlap", ERROR,
      bad=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [expert_fc1]
            num_moe_experts: 8
            overlap_moe_expert_parallel_comm: true
            moe_token_dispatcher_type: flex
            moe_flex_dispatcher_backend: ncclep
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      good=Example("""
          model:
            fine_grained_activation_offloading: true
            offload_modules: [moe_act]
            num_moe_experts: 8
            overlap_moe_expert_parallel_comm: true
            moe_token_dispatcher_type: flex
            moe_flex_dispatcher_backend: ncclep
          env_vars:
            NVTE_CPU_OFFLOAD_V1: 1
          """, version="0.19.2"),
      since="0.19",
      upstream=(up.G7_NCCLEP,))
def check_ncclep_overlap(ctx: Context) -> Iterator[Hit]:
    """`expert_fc1` offload is not supported with the ncclep EP all-to-all overlap.

    What it checks:
        `overlap_moe_expert_parallel_comm` with the `flex` dispatcher on the `ncclep`
        backend, and `expert_fc1` in `offload_modules` (megatron-core >= 0.19).

    Why it matters:
        The overlap path frees the raw expert FC1 input that offloading must save;
        `TransformerConfig.__post_init__` asserts.

    Source:
        megatron-core >= 0.19 `TransformerConfig.__post_init__`.
    """
    if not (ctx.get(_SWITCH) and "expert_fc1" in (ctx.get(_MODULES) or [])):
        return
    if ctx.get("model.overlap_moe_expert_parallel_comm") and ctx.get("model.moe_token_dispatcher_type") == "flex" \
            and ctx.get("model.moe_flex_dispatcher_backend") == "ncclep":
        yield Hit(_MODULES, "expert_fc1 offload with overlap_moe_expert_parallel_comm on the ncclep dispatcher",
                  "Offload moe_act instead of expert_fc1, or turn the EP overlap off",
                  upstream=ctx.upstream(up.G7_NCCLEP), at=("model.overlap_moe_expert_parallel_comm",))


RULES: tuple[Rule, ...] = declared(__name__)
