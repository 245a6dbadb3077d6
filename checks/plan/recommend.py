"""Which mechanism, and how little of it, makes a job fit; or what to do instead.

For each mechanism the search finds the smallest setting whose peak fits the budget (memory never
grows with more offloading, so the first fitting setting in increasing order is the smallest), prices
it with the throughput model, and compares it with the alternatives that need no host memory
(selective and full recompute). The cheapest option that fits, GPU and host, wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from checks.plan.hardware import Hardware
from checks.plan.memory import NONE, Offload, StageMemory, Training, plan_memory
from checks.plan.throughput import attention_score_flops, step_cost, step_flops

FRACTIONS = tuple(round(0.05 * i, 2) for i in range(1, 21))
DENSE_MODULE_SETS = (("core_attn",), ("core_attn", "attn_proj"), ("qkv_linear", "core_attn", "attn_proj"))
MOE_MODULE_SETS = (("expert_fc1",), ("expert_fc1", "moe_act"), ("qkv_linear", "core_attn", "attn_proj",
                                                                "expert_fc1", "moe_act"))


@dataclass(frozen=True)
class Budget:
    hardware: Hardware
    headroom: float = 0.1  # share of GPU memory kept free (allocator fragmentation, CUDA context, NCCL)
    host_headroom: float = 0.2  # share of host memory kept free (OS, data loaders, page cache)
    mfu: float = 0.4

    @property
    def device_bytes(self) -> int:
        return int(self.hardware.gpu_memory_bytes * (1 - self.headroom))

    @property
    def host_bytes_per_node(self) -> int:
        return int(self.hardware.host_memory_bytes * (1 - self.host_headroom))


@dataclass(frozen=True)
class Option:
    mechanism: str
    settings: dict[str, Any]  # Megatron-Core names
    peak_device_bytes: int
    host_bytes_per_node: int
    slowdown: float
    fits: bool
    note: str = ""


@dataclass(frozen=True)
class Recommendation:
    budget: Budget
    baseline: list[StageMemory]
    options: list[Option]
    choice: Option | None
    verdict: str


def peak(stages: list[StageMemory]) -> int:
    return max(s.device_bytes for s in stages)


def host_per_node(stages: list[StageMemory], hw: Hardware, world_size: int) -> int:
    """Every GPU of a node at the most host-hungry stage's use: conservative, host memory is shared.

    A job smaller than a node puts only its own GPUs there."""
    return max(s.host_bytes for s in stages) * min(hw.gpus_per_node, world_size)


def _option(t: Training, offload: Offload, budget: Budget, mechanism: str, settings: dict[str, Any],
            note: str = "") -> Option:
    stages = plan_memory(t, offload)
    device, host = peak(stages), host_per_node(stages, budget.hardware, t.world_size)
    cost = step_cost(t, offload, budget.hardware, budget.mfu, stage=stages[0])
    return Option(mechanism, settings, device, host, cost.slowdown,
                  device <= budget.device_bytes and host <= budget.host_bytes_per_node, note)


def _first_fitting(options: list[Option]) -> Option:
    return next((o for o in options if o.fits), options[-1])


def _smallest(make: Callable[[int], Option], low: int, high: int) -> Option:
    """The option at the smallest setting in [low, high] that fits, or at ``high``: a binary search, valid
    because memory never grows with the setting (tests/test_plan.py checks that property)."""
    best = make(high)
    if not best.fits:
        return best
    while low < high:
        middle = (low + high) // 2
        option = make(middle)
        if option.fits:
            best, high = option, middle
        else:
            low = middle + 1
    return best  # make(high) fits throughout, and low == high here


def recommend(t: Training, budget: Budget) -> Recommendation:
    baseline = plan_memory(t, NONE)
    options: list[Option] = []
    if peak(baseline) <= budget.device_bytes:
        nothing = Option("none", {}, peak(baseline), 0, 0.0, True)
        return Recommendation(budget, baseline, [nothing], nothing, "fits without offloading")

    options.append(_smallest(lambda i: _option(
        t, Offload(optimizer_offload_fraction=FRACTIONS[i]), budget, "optimizer offload",
        {"optimizer_cpu_offload": True, "optimizer_offload_fraction": FRACTIONS[i],
         "use_precision_aware_optimizer": True, "use_distributed_optimizer": True}), 0, len(FRACTIONS) - 1))
    # Refused with PP > 1 (ACT002) or recompute (ACT003); a hybrid (Mamba) stack never enters the offload
    # context, so there it would offload nothing (ACT009).
    if t.par.pipeline == 1 and t.recompute == "none" and t.shape.num_layers > 1 and t.shape.hybrid is None:
        options.append(_smallest(lambda n: _option(
            t, Offload(cpu_offloading_num_layers=n), budget, "layer-level activation offload",
            {"cpu_offloading": True, "cpu_offloading_num_layers": n},
            "no overlap for the reloads (ACT008)" if n == t.shape.num_layers - 1 else ""),
            1, t.shape.num_layers - 1))
    sets = DENSE_MODULE_SETS + (MOE_MODULE_SETS if t.shape.moe is not None else ())
    fine = [_option(t, Offload(offload_modules=modules), budget, "fine-grained activation offload",
                    {"fine_grained_activation_offloading": True, "offload_modules": list(modules)})
            for modules in sets]
    options.append(_first_fitting(fine))
    both = Offload(offload_modules=sets[-1], optimizer_offload_fraction=1.0)
    options.append(_option(t, both, budget, "fine-grained activation offload + optimizer offload",
                           {"fine_grained_activation_offloading": True, "offload_modules": list(sets[-1]),
                            "optimizer_cpu_offload": True, "optimizer_offload_fraction": 1.0}))
    options += _alternatives(t, budget)
    fitting = sorted((o for o in options if o.fits), key=lambda o: o.slowdown)
    choice = fitting[0] if fitting else None
    if choice is None:
        verdict = ("nothing here fits: offloading and recompute are not enough; add tensor or pipeline "
                   "parallelism, shard parameters with Megatron-FSDP, or use GPUs with more memory")
    elif "offload" in choice.mechanism:
        verdict = f"use {choice.mechanism}"
    else:
        verdict = f"offloading does not help here (or costs more): use {choice.mechanism}"
    return Recommendation(budget, baseline, options, choice, verdict)


def _alternatives(t: Training, budget: Budget) -> list[Option]:
    """Recompute, priced as the forward work it repeats (full: one more forward, a third of the step;
    selective: the attention scores, a third of the attention FLOPs)."""
    out = []
    total = step_flops(t)
    if t.recompute == "none":
        attention = attention_score_flops(t)
        selective = replace(t, recompute="selective")
        stages = plan_memory(selective, NONE)
        out.append(Option("selective recompute", {"recompute_granularity": "selective",
                                                   "recompute_modules": ["core_attn"]},
                          peak(stages), 0, attention / 3 / total if total else 0.0,
                          peak(stages) <= budget.device_bytes))
    if t.recompute != "full":
        full = replace(t, recompute="full", recompute_method="uniform", recompute_num_layers=1)
        stages = plan_memory(full, NONE)
        out.append(Option("full recompute", {"recompute_granularity": "full", "recompute_method": "uniform",
                                              "recompute_num_layers": 1},
                          peak(stages), 0, 1 / 3, peak(stages) <= budget.device_bytes))
    return out
