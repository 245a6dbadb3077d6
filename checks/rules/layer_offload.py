"""ACT: layer-level activation offloading (`cpu_offloading*`, implemented by Transformer Engine)."""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.rules import upstream as up
from checks.rules.base import ERROR, INFO, WARNING, Example, Hit, Rule, declared, rule
from checks.rules.cuda_graphs import graph_impl, graph_impl_patch, patch_text
from checks.versions import has_feature

_SWITCH = "model.cpu_offloading"
_LAYERS = "model.cpu_offloading_num_layers"
_KNOBS: tuple[tuple[str, object], ...] = (
    # (field, value that means "the user asked for something") for knobs that act only under the switch
    ("model.cpu_offloading_double_buffering", True),
    ("model.cpu_offloading_retain_pinned_cpu_buffers", True),
)


def blockers(ctx: Context, layers: int) -> list[str]:
    """Why turning `cpu_offloading` on with `layers` offloaded layers would fail at start-up."""
    out = []
    if ctx.known("model.num_layers") and not 0 <= layers < ctx.get("model.num_layers"):
        out.append(f"{layers} is not below num_layers={ctx.get('model.num_layers')}")
    if (ctx.get("model.pipeline_model_parallel_size") or 1) > 1:
        out.append(f"pipeline_model_parallel_size={ctx.get('model.pipeline_model_parallel_size')}")
    if ctx.get("model.recompute_granularity") is not None:
        out.append(f"recompute_granularity={ctx.get('model.recompute_granularity')!r}")
    if ctx.get("model.fine_grained_activation_offloading"):
        out.append("fine_grained_activation_offloading=true")
    return out


@rule("ACT001", "cpu-offloading-num-layers-range", ERROR,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 24
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 8
          """),
      upstream=(up.C1_NUM_LAYERS,))
def check_num_layers_range(ctx: Context) -> Iterator[Hit]:
    """`cpu_offloading_num_layers` must lie in [0, num_layers - 1] while `cpu_offloading` is on.

    What it checks:
        With `cpu_offloading` true, `cpu_offloading_num_layers` is negative or not
        below `num_layers`. When the config does not give `num_layers` (a partial
        override), only the lower bound is checked and an info finding says so.

    Why it matters:
        `TransformerConfig.__post_init__` raises `ValueError` at start-up. The last
        layer is never offloaded: Transformer Engine needs it on the device to overlap
        the reloads, and TE >= 2.10 warns that `num_layers - 1` already prevents that
        overlap, so `num_layers - 2` or fewer is the useful maximum.

    Source:
        megatron-core `TransformerConfig.__post_init__` in every version.
    """
    if not ctx.get(_SWITCH):
        return
    layers = ctx.get(_LAYERS)
    total = ctx.get("model.num_layers") if ctx.known("model.num_layers") else None
    if layers >= 0 and total is None:
        if layers > 0:
            yield Hit(_LAYERS, f"cpu_offloading_num_layers={layers} cannot be checked against num_layers: the "
                      "config does not set num_layers (the recipe or checkpoint does)",
                      "Pass the model depth, e.g. --set model.num_layers=32, to check the range",
                      at=(_SWITCH,), severity=INFO)
        return
    if total is not None and 0 <= layers < total:
        return
    suggestion = max(1, total - 2) if total is not None and total > 2 else (1 if total is None else 0)
    valid = f"0 to {total - 1}" if total is not None else "0 or more"
    yield Hit(
        _LAYERS,
        f"cpu_offloading_num_layers={layers} but megatron-core accepts {valid}"
        + (f" (num_layers={total})" if total is not None else ""),
        f"Set cpu_offloading_num_layers to at most {total - 2 if total and total > 2 else valid} "
        "(the last layers must stay on the device for overlap)",
        patch={_LAYERS: suggestion} if suggestion else None,
        upstream=ctx.upstream(up.C1_NUM_LAYERS, num_layers=total if total is not None else "<num_layers>"),
        at=(_SWITCH,),
    )


@rule("ACT002", "cpu-offloading-pipeline-parallel", ERROR,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            pipeline_model_parallel_size: 2
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            pipeline_model_parallel_size: 1
          """),
      upstream=(up.C2_PIPELINE,))
def check_pipeline_parallel(ctx: Context) -> Iterator[Hit]:
    """Layer-level offloading does not support pipeline parallelism.

    What it checks:
        `cpu_offloading` is true and `pipeline_model_parallel_size` is greater than 1
        (with or without virtual pipeline stages).

    Why it matters:
        `TransformerConfig.__post_init__` raises `ValueError`. Transformer Engine's
        offload synchroniser counts layers modulo the whole model's depth, which is only
        right when one rank holds every layer.

    Source:
        megatron-core `TransformerConfig.__post_init__` in every version. Fine-grained
        offloading (`fine_grained_activation_offloading`, >= 0.16) supports PP and VPP.
    """
    pp = ctx.get("model.pipeline_model_parallel_size") or 1
    if not ctx.get(_SWITCH) or pp <= 1:
        return
    patch: dict[str, object] = {"model.pipeline_model_parallel_size": 1}
    if ctx.get("model.virtual_pipeline_model_parallel_size") is not None:
        patch["model.virtual_pipeline_model_parallel_size"] = None
    alternative = (" or keep PP and switch to fine-grained offloading (cpu_offloading=false, "
                   "fine_grained_activation_offloading=true, offload_modules=[core_attn, attn_proj])"
                   if ctx.at_least("0.16") else "")
    yield Hit(
        "model.pipeline_model_parallel_size",
        f"cpu_offloading=true with pipeline_model_parallel_size={pp}: layer-level offloading needs PP=1",
        f"Set pipeline_model_parallel_size to 1{alternative}",
        patch=patch, upstream=ctx.upstream(up.C2_PIPELINE), at=(_SWITCH,),
    )


@rule("ACT003", "cpu-offloading-recompute", ERROR,
      bad=Example("--num-layers 24 --cpu-offloading-num-layers 4 --recompute-activations", "megatron-lm"),
      good=Example("--num-layers 24 --cpu-offloading-num-layers 4", "megatron-lm"),
      upstream=(up.C3_RECOMPUTE,))
def check_recompute(ctx: Context) -> Iterator[Hit]:
    """Layer-level offloading cannot be combined with activation recomputation.

    What it checks:
        `cpu_offloading` is true and `recompute_granularity` is set (`full`,
        `selective`, or any other value: the check only asks whether it is set).

    Why it matters:
        `TransformerConfig.__post_init__` raises `ValueError`. On the Megatron-LM
        command line `--recompute-activations` means `selective`, so it trips this
        too.

    Source:
        megatron-core `TransformerConfig.__post_init__` in every version.
    """
    granularity = ctx.get("model.recompute_granularity")
    if not ctx.get(_SWITCH) or granularity is None:
        return
    alternative = (", or keep recompute and offload with fine_grained_activation_offloading instead"
                   if ctx.at_least("0.16") else "")
    yield Hit(
        "model.recompute_granularity",
        f"cpu_offloading=true with recompute_granularity={granularity!r}: layer-level offloading works only "
        "without activation recomputation",
        f"Turn recomputation off (recompute_granularity=null){alternative}",
        patch={"model.recompute_granularity": None}, upstream=ctx.upstream(up.C3_RECOMPUTE), at=(_SWITCH,),
    )


@rule("ACT004", "cpu-offloading-cuda-graphs", ERROR,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cuda_graph_impl: transformer_engine
          """, version="0.16.1"),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cuda_graph_impl: full_iteration
            cpu_offloading_retain_pinned_cpu_buffers: true
          """, version="0.19.2"),
      upstream=(up.C4_CUDA_GRAPHS, up.C6_GRAPH_IMPL))
def check_cuda_graphs(ctx: Context) -> Iterator[Hit]:
    """Layer-level offloading is refused with CUDA graphs, except `full_iteration` from 0.18.

    What it checks:
        `cpu_offloading` is true and a CUDA-graph implementation is active. Per version:
        0.14 checks only `enable_cuda_graph` (`external_cuda_graph` slips through);
        0.15-0.17 refuse every implementation, and `full_iteration` does not exist yet
        (`Invalid cuda graph implementation`); from 0.18 `full_iteration` is exempt.

    Why it matters:
        `TransformerConfig.__post_init__` raises at start-up. Offload copies are
        host-synchronised and cannot be captured in a per-layer graph.

    Source:
        megatron-core `TransformerConfig.__post_init__`; the exemption arrived with
        NVIDIA/Megatron-LM PR #3969 / #4292 (0.18.0).
    """
    if not ctx.get(_SWITCH):
        return
    if not has_feature(ctx.version, "cuda_graph_impl_offload_check"):
        for path in ("model.enable_cuda_graph", "model.external_cuda_graph"):
            if ctx.get(path):
                # 0.14 checks only enable_cuda_graph; external graphs capture the offload copies just the same.
                upstream = ctx.upstream(up.C4_CUDA_GRAPHS) if path == "model.enable_cuda_graph" else None
                unchecked = f" (megatron-core {'.'.join(ctx.version.split('.')[:2])} does not check this one)"
                yield Hit(path, f"cpu_offloading=true with {path.split('.')[1]}=true: CUDA graphs cannot capture "
                          "the offload copies" + ("" if upstream else unchecked),
                          "Turn CUDA graphs off, or turn cpu_offloading off", patch={path: False},
                          upstream=upstream, at=(_SWITCH,))
        return
    impl = graph_impl(ctx)
    if impl == "none" or (impl == "full_iteration" and ctx.at_least("0.18")):
        return
    path = next((p for p in ("model.enable_cuda_graph", "model.external_cuda_graph") if ctx.get(p)),
                "model.cuda_graph_impl")
    off = graph_impl_patch(ctx, "none")
    if impl == "full_iteration":
        yield Hit(path, f"cuda_graph_impl='full_iteration' does not exist in megatron-core {ctx.version}; it "
                  "arrived in 0.18, which also exempts it from the CPU-offloading check",
                  f"Upgrade megatron-core to 0.18 or later, or set {patch_text(off)}",
                  patch=off, upstream=ctx.upstream(up.C6_GRAPH_IMPL, impl=impl), at=(_SWITCH,))
        return
    hint = " or use cuda_graph_impl=full_iteration, the only graph mode allowed with it" if ctx.at_least("0.18") else ""
    yield Hit(path, f"cpu_offloading=true with CUDA graphs ({impl}): megatron-core refuses the combination",
              f"Turn CUDA graphs off ({patch_text(off)}){hint}, or turn cpu_offloading off",
              patch=off,
              upstream=ctx.upstream(up.C4_CUDA_GRAPHS), at=(_SWITCH,))


@rule("ACT007", "cpu-offloading-with-moe-paged-stash", ERROR,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            moe_paged_stash: true
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            moe_paged_stash: false
          """),
      since="0.18",
      upstream=(up.C7_PAGED_STASH,))
def check_paged_stash(ctx: Context) -> Iterator[Hit]:
    """MoE paged stashing and layer-level offloading exclude each other.

    What it checks:
        `moe_paged_stash` and `cpu_offloading` are both true (megatron-core >= 0.18).

    Why it matters:
        Both move MoE activations off the device by their own bookkeeping;
        `TransformerConfig.__post_init__` raises `ValueError`.

    Source:
        megatron-core >= 0.18 `TransformerConfig.__post_init__`.
    """
    if ctx.get(_SWITCH) and ctx.get("model.moe_paged_stash"):
        yield Hit("model.moe_paged_stash", "moe_paged_stash=true and cpu_offloading=true",
                  "Keep one of them: set cpu_offloading=false, or moe_paged_stash=false",
                  patch={_SWITCH: False}, upstream=ctx.upstream(up.C7_PAGED_STASH), at=(_SWITCH,))


@rule("ACT008", "cpu-offloading-last-layer", WARNING,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 23
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 22
          """))
def check_last_layer(ctx: Context) -> Iterator[Hit]:
    """Offloading every layer but the last leaves nothing to overlap the reloads with.

    What it checks:
        `cpu_offloading_num_layers` equals `num_layers - 1` (the largest value
        megatron-core accepts).

    Why it matters:
        Transformer Engine reloads a layer's activations while the layer after it runs
        backward; with only the last layer kept, the reloads stall the backward pass.
        TE >= 2.10 warns: "Offloading num_layers == model_layers - 1 is not recommended,
        it prevents overlapping of computation and offload/reload."

    Source:
        Beyond megatron-core; NVIDIA/TransformerEngine v2.10 `cpu_offload.py`
        (`get_cpu_offload_context` warning).
    """
    total = ctx.get("model.num_layers") if ctx.known("model.num_layers") else None
    if ctx.get(_SWITCH) and total and total > 2 and ctx.get(_LAYERS) == total - 1:
        yield Hit(_LAYERS, f"cpu_offloading_num_layers={total - 1} offloads every layer but the last "
                  f"(num_layers={total}): the reloads cannot overlap compute", f"Offload at most {total - 2} layers",
                  patch={_LAYERS: total - 2}, at=(_SWITCH,))


@rule("ACT009", "cpu-offloading-not-applied", WARNING,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            overlap_moe_expert_parallel_comm: true
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
          """))
def check_not_applied(ctx: Context) -> Iterator[Hit]:
    """Layer-level offloading is silently unused by hybrid (Mamba) models and the EP-overlap schedule.

    What it checks:
        `cpu_offloading` is true and the model is a hybrid/Mamba stack (a Bridge provider
        named like `Mamba`, `NemotronH` or `Hybrid`), or `overlap_moe_expert_parallel_comm`
        is true.

    Why it matters:
        The offload context wraps `TransformerBlock` layers only; `HybridStack` and the
        EP all-to-all overlap schedule-plan path never enter it, so nothing is offloaded
        and memory stays where it was.

    Source:
        Beyond upstream: megatron-core `TransformerBlock.forward` is the only caller of
        the offload context (no reference in `HybridStack` or the schedule plans).
    """
    if not ctx.get(_SWITCH):
        return
    model = ctx.cfg.model_class or ""
    if any(word in model for word in ("Mamba", "NemotronH", "Hybrid")):
        yield Hit(_SWITCH, f"cpu_offloading=true has no effect on a hybrid model ({model.rsplit('.', 1)[-1]}): "
                  "HybridStack never enters Transformer Engine's offload context",
                  "Use fine-grained activation offloading (megatron-core >= 0.18 arms it for hybrid models), "
                  "or recomputation")
    if ctx.exists("model.overlap_moe_expert_parallel_comm") and ctx.get("model.overlap_moe_expert_parallel_comm"):
        yield Hit("model.overlap_moe_expert_parallel_comm", "cpu_offloading=true has no effect with "
                  "overlap_moe_expert_parallel_comm=true: the overlapped schedule bypasses the offload context",
                  "Turn one of them off", at=(_SWITCH,))


@rule("ACT010", "cpu-offloading-full-iteration-graph-buffers", WARNING,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cuda_graph_impl: full_iteration
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
            cuda_graph_impl: full_iteration
            cpu_offloading_retain_pinned_cpu_buffers: true
          """),
      since="0.18")
def check_full_iteration_buffers(ctx: Context) -> Iterator[Hit]:
    """Layer-level offloading under a full-iteration CUDA graph should retain its pinned buffers.

    What it checks:
        `cpu_offloading` with `cuda_graph_impl` `full_iteration` (allowed from 0.18)
        and `cpu_offloading_retain_pinned_cpu_buffers` false.

    Why it matters:
        A captured graph replays fixed host addresses; Transformer Engine documents
        retained pinned buffers as what makes offloading capturable (TE >= 2.10), and
        megatron-core does not check it.

    Source:
        Beyond upstream: megatron-core's help text for
        `--cpu-offloading-retain-pinned-cpu-buffers` ("useful for cuda graphs capture").
    """
    retain = "model.cpu_offloading_retain_pinned_cpu_buffers"
    if ctx.get(_SWITCH) and graph_impl(ctx) == "full_iteration" and not ctx.get(retain):
        yield Hit(retain, "cpu_offloading under a full_iteration CUDA graph without "
                  "cpu_offloading_retain_pinned_cpu_buffers: the captured copies need stable pinned buffers",
                  "Set cpu_offloading_retain_pinned_cpu_buffers=true (Transformer Engine >= 2.10)",
                  patch={retain: True}, at=(_SWITCH, "model.cuda_graph_impl"))


@rule("ACT005", "cpu-offloading-zero-layers", WARNING,
      bad=Example("""
          model:
            cpu_offloading: true
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 2
          """),
      flavors=frozenset({"bridge", "nemo-rl"}))
def check_zero_layers(ctx: Context) -> Iterator[Hit]:
    """`cpu_offloading` on with `cpu_offloading_num_layers` 0 offloads nothing.

    What it checks:
        `cpu_offloading` is true and `cpu_offloading_num_layers` is 0 (its default).

    Why it matters:
        megatron-core accepts it, Transformer Engine builds its offload context, and no
        layer is offloaded: the memory saving you planned for never happens and the job
        may run out of memory later. (On the Megatron-LM command line
        `--cpu-offloading-num-layers N` is the switch, so this only happens with Bridge,
        NeMo-RL `model_overrides` or Python configs.)

    Source:
        Beyond upstream: TE's offload loop runs `range(num_layers)` (v1) or marks no
        layer (v2, TE >= 2.10).
    """
    if ctx.get(_SWITCH) and ctx.get(_LAYERS) == 0:
        yield Hit(_LAYERS, "cpu_offloading=true but cpu_offloading_num_layers=0: no layer is offloaded",
                  "Set cpu_offloading_num_layers to the number of layers to offload (1 to num_layers - 2), "
                  "or set cpu_offloading=false", at=(_SWITCH,))


@rule("ACT006", "cpu-offloading-knobs-without-switch", WARNING,
      bad=Example("""
          model:
            num_layers: 24
            cpu_offloading_num_layers: 95
          """),
      good=Example("""
          model:
            num_layers: 24
            cpu_offloading: true
            cpu_offloading_num_layers: 4
          """),
      flavors=frozenset({"bridge", "nemo-rl"}))
def check_knobs_without_switch(ctx: Context) -> Iterator[Hit]:
    """`cpu_offloading_*` knobs do nothing while `cpu_offloading` is off.

    What it checks:
        `cpu_offloading` is false and `cpu_offloading_num_layers` is above 0, or
        `cpu_offloading_double_buffering` / `cpu_offloading_retain_pinned_cpu_buffers`
        is true. When enabling it as written would fail, the message says why; the fix turns
        the switch on only when it would not, and not when `offload_modules` asks for
        fine-grained offloading as well (only one of the two may be on, FGA001).

    Why it matters:
        Megatron Bridge never derives the switch from the layer count (the Megatron-LM
        command line does), so a recipe that sets only `cpu_offloading_num_layers`
        offloads nothing, silently.

    Source:
        Beyond upstream. Seen in Megatron-Bridge@067f987d
        `perf_recipes/gpt_oss/common.py:86` (95 layers on a 24-layer model).
    """
    if ctx.get(_SWITCH):
        return
    layers = ctx.get(_LAYERS)
    if ctx.stated(_LAYERS) and layers > 0:
        problems = blockers(ctx, layers)
        tail = f"; enabling it as written would fail: {', '.join(problems)}" if problems else ""
        modules = "model.offload_modules"
        # offload_modules asks for fine-grained offloading (FGA005 offers to turn it on): only one may be on
        other = ctx.exists(modules) and ctx.stated(modules) and bool(ctx.get(modules))
        yield Hit(_LAYERS, f"cpu_offloading_num_layers={layers} has no effect because cpu_offloading is "
                  f"false{tail}",
                  "Set cpu_offloading=true to offload these layers, or remove cpu_offloading_num_layers"
                  + ("; offload_modules asks for fine-grained offloading too, and only one of the two may be on"
                     if other and not problems else ""),
                  patch=None if problems or other else {_SWITCH: True})
    for path, active in _KNOBS:
        if ctx.exists(path) and ctx.stated(path) and ctx.get(path) == active:
            name = path.split(".", 1)[1]
            yield Hit(path, f"{name}={active} has no effect because cpu_offloading is false",
                      f"Remove {name}, or turn cpu_offloading on")


RULES: tuple[Rule, ...] = declared(__name__)
