"""OPT: what a fractional optimizer offload really moves, predicted from the model's dimensions."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from checks.context import Context
from checks.model.optimizer_split import Split, predict
from checks.model.shape import ShapeUnknown, shape_from
from checks.rules.base import INFO, WARNING, Example, Hit, Rule, declared, rule
from checks.rules.optimizer import legacy_nemo_rl

_SWITCH = "optimizer.optimizer_cpu_offload"
_FRACTION = "optimizer.optimizer_offload_fraction"
# Overshoot, in shares of an optimizer instance's state, from which the difference is worth a warning.
MATERIAL_OVERSHOOT = 0.05
_RANKS = ("on a data-parallel rank that holds whole tensors (with data parallelism each rank splits its own "
          "shards, so ranks differ and can overshoot further)")
_MLM = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --vocab-size 32000 --max-position-embeddings 128 "
        "--untie-embeddings-and-output-weights --bf16 --use-distributed-optimizer --use-precision-aware-optimizer "
        "--optimizer-cpu-offload --optimizer-offload-fraction {}")


@rule("OPT022", "optimizer-offload-greedy-split", WARNING,
      bad=Example(_MLM.format(0.1), "megatron-lm"),
      good=Example(_MLM.format(1.0), "megatron-lm"))
def check_greedy_split(ctx: Context) -> Iterator[Hit]:
    """A fractional optimizer offload moves whole tensors, so it can move far more than the fraction.

    What it checks:
        `optimizer_cpu_offload` with `0 < optimizer_offload_fraction < 1`. When the
        config states the model's dimensions (a Bridge `run_config.yaml` dump, or a
        complete Megatron-LM command line), it replays the split on every pipeline
        stage and reports the share each optimizer instance (dense, expert) will
        really move: a warning when it exceeds the fraction by more than 5 points,
        with the largest fraction that stays within what was asked. Otherwise it says
        why no prediction is possible (info).

    Why it matters:
        `HybridDeviceOptimizer` walks the parameters in optimizer order and moves each
        whole tensor to the host while less than `fraction x total` has moved, so
        the last tensor taken overshoots by its whole size: on a small model 10%
        requested can move 45%. The order puts the output layer, then the last
        layers' weights, first. The host holds 16 bytes per moved element, so a
        node sized for the requested fraction can run out of host memory, and the
        GPU saves more than planned (the throughput cost grows with it).

    Source:
        Beyond upstream. megatron-core `HybridDeviceOptimizer._get_sub_optimizer_param_groups`
        (NVIDIA/Megatron-LM@5be96267:megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py:251-302);
        the order and the model are described in `checks/model/optimizer_split.py`.
    """
    fraction = ctx.get(_FRACTION)
    if not ctx.get(_SWITCH) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
        return
    if legacy_nemo_rl(ctx):
        return  # NeMo-RL up to 0.7.0 refuses any fraction but 1.0 (OPT021)
    found = shape_from(ctx)
    if isinstance(found, ShapeUnknown):
        yield _unknown(fraction, found.describe())
        return
    if not ctx.get("optimizer.use_distributed_optimizer"):
        yield _unknown(fraction, "the split order is modelled only with the distributed optimizer")
        return
    shape, par = found
    splits = predict(shape, par, float(fraction), ctx.version, bool(ctx.get("optimizer.apply_wd_to_qk_layernorm")))
    if not splits:
        yield _unknown(fraction, "the pipeline split of the layers is not one the parameter model covers")
        return
    over = max(s.fraction for s in splits) - fraction
    lower = min(s.lower_fraction for s in splits)
    message = (f"optimizer_offload_fraction={fraction:g} asks for {fraction:.1%} of the optimizer state, but "
               f"HybridDeviceOptimizer moves whole tensors until that much has moved: predicted "
               f"{_describe(splits, par.pipeline)}, {_RANKS}")
    if over <= MATERIAL_OVERSHOOT:
        yield Hit(_FRACTION, message, "Nothing to change; size host memory for the predicted share",
                  severity=INFO, at=(_SWITCH,))
    elif lower > 0:
        yield Hit(_FRACTION, message, f"Size host memory for the predicted share, or set optimizer_offload_fraction "
                  f"to {lower:g} to move at most {fraction:.1%} on every stage", patch={_FRACTION: lower},
                  at=(_SWITCH,))
    else:
        stuck = next(s for s in splits if s.lower_fraction == 0)
        yield Hit(_FRACTION, message, f"Size host memory for the predicted share: no fraction moves less on stage "
                  f"{stuck.stage}, where the first tensor in optimizer order ({stuck.first.name}, "
                  f"{stuck.first.numel:,} elements) is already {stuck.first.numel / stuck.total_numel:.1%} of the "
                  f"{stuck.instance} state; to move less, offload activations instead", at=(_SWITCH,))


def _unknown(fraction: float, why: str) -> Hit:
    return Hit(_FRACTION, f"optimizer_offload_fraction={fraction:g}: HybridDeviceOptimizer moves whole tensors "
               f"until {fraction:.1%} has moved, so the share it really moves can be larger by up to one tensor "
               f"(the output layer's or embedding's are the first and largest); no prediction, because {why}",
               "For a prediction, check the full config (a Bridge run_config.yaml dump, or the complete "
               "Megatron-LM command line); otherwise leave host-memory headroom for one whole tensor beyond the "
               "fraction", severity=INFO, at=(_SWITCH,))


def _describe(splits: Sequence[Split], stages: int) -> str:
    parts = []
    for instance in ("dense", "expert"):
        mine = [s for s in splits if s.instance == instance]
        if not mine:
            continue
        low, high = min(mine, key=lambda s: s.fraction), max(mine, key=lambda s: s.fraction)
        if stages == 1:
            parts.append(f"{high.fraction:.1%} of the {instance} state ({high.tensors_offloaded} of "
                         f"{high.tensors_total} tensors)")
        elif low.fraction == high.fraction:
            parts.append(f"{high.fraction:.1%} of the {instance} state on each of {stages} pipeline stages")
        else:
            parts.append(f"{low.fraction:.1%} (stage {low.stage}) to {high.fraction:.1%} (stage {high.stage}) of "
                         f"the {instance} state across {stages} pipeline stages")
    return " and ".join(parts)


RULES: tuple[Rule, ...] = declared(__name__)
