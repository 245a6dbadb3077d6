"""How megatron-core reads the CUDA-graph settings, per version (shared by the offload rules; no rules here)."""

from __future__ import annotations

from typing import Any

from checks.context import Context
from checks.values import show

_MIGRATED = ("full_iteration", "full_iteration_inference")


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def _raw_modules(ctx: Context) -> list[str]:
    """The capture scopes as given: `cuda_graph_scope` (deprecated from 0.18) wins over `cuda_graph_modules`."""
    scope = ctx.get("model.cuda_graph_scope")
    if not ctx.at_least("0.18") or scope is not None:
        return _names(scope)
    return _names(ctx.get("model.cuda_graph_modules"))


def graph_modules(ctx: Context) -> list[str]:
    """Modules captured per layer; [] means the whole layer ("full" is the deprecated spelling of [])."""
    return [m for m in _raw_modules(ctx) if m != "full" and m not in _MIGRATED]


def graph_impl(ctx: Context) -> str:
    """The CUDA-graph implementation megatron-core ends up with, after its deprecation rewrites."""
    if ctx.get("model.enable_cuda_graph"):
        return "local"
    if ctx.get("model.external_cuda_graph"):
        return "transformer_engine"
    impl = str(ctx.get("model.cuda_graph_impl") or "none")
    if ctx.at_least("0.18") and impl == "local" and "full_iteration" in _raw_modules(ctx):
        return "full_iteration"  # 0.18 migrated the full_iteration scope to an implementation
    return impl


GRAPH_READS: tuple[str, ...] = ("model.cuda_graph_impl", "model.enable_cuda_graph", "model.external_cuda_graph",
                                "model.cuda_graph_scope", "model.cuda_graph_modules")


def graph_impl_patch(ctx: Context, impl: str) -> dict[str, Any]:
    """A patch after which megatron-core ends up with CUDA-graph implementation ``impl``.

    The deprecated switches win over ``cuda_graph_impl`` (:func:`graph_impl`), so setting ``cuda_graph_impl`` alone
    leaves ``enable_cuda_graph``'s local graphs in place, and megatron-core refuses either switch with an
    implementation set (NVIDIA/Megatron-LM@d98e8a64 ``TransformerConfig.__post_init__``, "Do not use
    enable_cuda_graph or external_cuda_graph with cuda_graph_impl."): they go off.
    """
    patch: dict[str, Any] = {p: False for p in ("model.enable_cuda_graph", "model.external_cuda_graph")
                             if ctx.exists(p) and ctx.get(p)}
    if ctx.exists("model.cuda_graph_impl") and (str(ctx.get("model.cuda_graph_impl") or "none") != impl or not patch):
        patch["model.cuda_graph_impl"] = impl
    return patch or {"model.cuda_graph_impl": impl}


def patch_text(patch: dict[str, Any]) -> str:
    """``cuda_graph_impl=none, enable_cuda_graph=false``: a patch as a fix names it."""
    return ", ".join(f"{path.split('.', 1)[1]}={show(value)}" for path, value in sorted(patch.items()))
