"""ACT: the recompute settings the offload rules read and their fixes change (`recompute_*`)."""

from __future__ import annotations

from collections.abc import Iterator

from checks.context import Context
from checks.rules import upstream as up
from checks.rules.base import ERROR, Example, Hit, Rule, declared, rule

_GRANULARITY = "model.recompute_granularity"
_METHOD = "model.recompute_method"
_NUM_LAYERS = "model.recompute_num_layers"


@rule("ACT011", "recompute-settings-invalid", ERROR,
      bad=Example("""
          model:
            num_layers: 8
            recompute_granularity: selective
            recompute_num_layers: 2
          """),
      good=Example("""
          model:
            num_layers: 8
            recompute_granularity: full
            recompute_method: uniform
            recompute_num_layers: 2
          """),
      flavors=frozenset({"bridge", "nemo-rl"}),
      upstream=(up.R1_GRANULARITY, up.R2_METHOD, up.R3_NO_METHOD, up.R4_NUM_LAYERS, up.R5_SELECTIVE_LAYERS,
                up.NRL_RECOMPUTE_GRANULARITY))
def check_recompute_settings(ctx: Context) -> Iterator[Hit]:
    """The recompute settings megatron-core refuses: a granularity or method it does not know, or a
    granularity without the method and layer count it needs.

    What it checks:
        With `recompute_granularity` set, in megatron-core's order (the first that fails stops
        the job, so only that one is reported): the granularity is `full` or `selective`; a
        `recompute_method` given is `block` or `uniform`; any granularity but `selective` has a
        `recompute_method` and a `recompute_num_layers`; `selective` has no
        `recompute_num_layers`.

    Why it matters:
        `TransformerConfig.__post_init__` raises `ValueError` at start-up. The offload rules
        read these settings (layer-level offloading needs recompute off, fine-grained
        offloading wants `selective`), and switching between them is the usual fix, which
        leaves a `recompute_num_layers` meant for `full` behind. Megatron-LM's argparse
        refuses an unknown granularity or method itself (CFG004); a Bridge or NeMo-RL
        config reaches this check. NeMo-RL refuses an unknown granularity itself, and sets the
        method and layer count for `full` (`uniform`, 1).

    Source:
        megatron-core `TransformerConfig.__post_init__`, the `recompute_granularity` block, in
        every version; NeMo-RL `_apply_performance_config` (its own granularity check).
    """
    granularity = ctx.get(_GRANULARITY)
    if granularity is None:
        return
    method, layers = ctx.get(_METHOD), ctx.get(_NUM_LAYERS)
    if granularity not in ("full", "selective"):
        nemo_rl = ctx.flavor == "nemo-rl"  # NeMo-RL refuses it before megatron-core sees it
        off = "activation_checkpointing=false" if nemo_rl else "recompute_granularity=null"
        yield Hit(_GRANULARITY, f"recompute_granularity={granularity!r} is neither 'full' nor 'selective'",
                  f"Set recompute_granularity to full or selective, or turn recompute off ({off})",
                  upstream=ctx.upstream(up.NRL_RECOMPUTE_GRANULARITY if nemo_rl else up.R1_GRANULARITY,
                                        granularity=granularity))
    elif method is not None and method not in ("block", "uniform"):
        yield Hit(_METHOD, f"recompute_method={method!r} is neither 'block' nor 'uniform'",
                  "Set recompute_method to uniform or block", upstream=ctx.upstream(up.R2_METHOD, method=method))
    elif method is None and granularity != "selective":
        yield Hit(_GRANULARITY, f"recompute_granularity={granularity!r} without a recompute_method",
                  "Set recompute_method (uniform: recompute_num_layers layers per chunk; block: the first "
                  "recompute_num_layers layers of each pipeline stage) and recompute_num_layers",
                  upstream=ctx.upstream(up.R3_NO_METHOD, granularity=granularity), at=(_METHOD,))
    elif granularity != "selective" and layers is None:
        per_rank = _layers_per_rank(ctx)
        yield Hit(_GRANULARITY, f"recompute_granularity={granularity!r} without recompute_num_layers",
                  f"Set recompute_num_layers between 1 and {per_rank} (the layers of one pipeline rank)",
                  upstream=ctx.upstream(up.R4_NUM_LAYERS, granularity=granularity, per_rank=per_rank),
                  at=(_NUM_LAYERS,))
    elif granularity == "selective" and layers is not None:
        yield Hit(_NUM_LAYERS, f"recompute_granularity='selective' with recompute_num_layers={layers!r}: selective "
                  "recompute takes no layer count", "Remove recompute_num_layers (it is for full recompute)",
                  patch={_NUM_LAYERS: None}, upstream=ctx.upstream(up.R5_SELECTIVE_LAYERS, granularity=granularity),
                  at=(_GRANULARITY,))


def _layers_per_rank(ctx: Context) -> str:
    layers, pp = ctx.get("model.num_layers"), ctx.get("model.pipeline_model_parallel_size") or 1
    if isinstance(layers, int) and isinstance(pp, int) and pp > 0:
        return str(layers // pp)
    return "num_layers / pipeline_model_parallel_size"


RULES: tuple[Rule, ...] = declared(__name__)
