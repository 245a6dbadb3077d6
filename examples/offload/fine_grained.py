"""Fine-grained (module-level) activation offloading: ``fine_grained_activation_offloading`` + ``offload_modules``.

Megatron-Core wraps the forward of each named module in an offload region
(``FineGrainedActivationOffloadingInterface``); the tensors autograd saves inside it form a group,
offloaded when the region commits if they hold at least ``min_offloaded_tensor_size`` elements. The
first training step offloads every group; from it, the plan keeps on the device the last group of each
module (its backward comes first, so a reload could only stall) and, with
``activation_offload_fraction``, the last groups beyond that share. See Note: [Plan from the first step]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from examples.offload.engine import Group, Policy, is_parameter_like
from examples.offload.validation import enforce

# Module regions the small GPT in examples/gpt.py implements, with Megatron-Core's names.
MODULES: tuple[str, ...] = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")


@dataclass(frozen=True)
class FineGrainedOffloadConfig:
    """Megatron-Core's fine-grained offload fields (``TransformerConfig``), with their defaults.

    Args:
        fine_grained_activation_offloading: switch. Default: False.
        offload_modules: module names whose saved inputs are offloaded. Default: none.
        min_offloaded_tensor_size: smallest tensor offloaded, in elements. Default: 1048576 (1 Mi).
        activation_offload_fraction: share of the offloadable groups of a pass actually offloaded, counted
            in groups, not bytes (megatron-core >= 0.19). Default: 1.0.
    """

    fine_grained_activation_offloading: bool = False
    offload_modules: tuple[str, ...] = ()
    min_offloaded_tensor_size: int = 1024 * 1024
    activation_offload_fraction: float = 1.0

    def validate(self, num_moe_experts: int | None = None) -> None:
        """The checker's fine-grained rules, for a dense model or one with ``num_moe_experts`` experts.

        Raises:
            ValueError: what megatron-core refuses (FGA002-FGA004, FGA009), or a module name megatron-core
                knows but this example does not implement.
        """
        values = {f"model.{name}": getattr(self, name) for name in self.__dataclass_fields__}
        values["model.offload_modules"] = list(self.offload_modules)
        values["model.num_moe_experts"] = num_moe_experts
        enforce(values, ["FGA002", "FGA003", "FGA004", "FGA005", "FGA009", "FGA013"], "fine-grained offload")
        missing = [m for m in self.offload_modules if m not in MODULES]
        if self.fine_grained_activation_offloading and missing:
            raise ValueError(f"fine-grained offload: offload_modules {missing} are valid in megatron-core but not "
                             f"implemented by this example; it implements {list(MODULES)}")


class FineGrainedPolicy(Policy):
    """Each named module region is a group; which groups are offloaded comes from the first step's plan.

    Args:
        config: the knobs.
        num_moe_experts: the model's expert count (None for a dense model), for validation.

    Raises:
        ValueError: an invalid combination (:meth:`FineGrainedOffloadConfig.validate`).
    """

    def __init__(self, config: FineGrainedOffloadConfig, num_moe_experts: int | None = None) -> None:
        config.validate(num_moe_experts)
        self.config = config
        self.plan: dict[int, bool] | None = None  # group ordinal -> offload, after the first step

    def forms_group(self, kind: str, key: Any) -> bool:
        return self.config.fine_grained_activation_offloading and kind == "module" \
            and key in self.config.offload_modules

    def eligible(self, tensor: torch.Tensor) -> bool:
        # See Note: [Parameters and views of parameters]
        return not is_parameter_like(tensor) and tensor.numel() >= self.config.min_offloaded_tensor_size

    def offloads(self, group: Group) -> bool:
        if self.plan is None:
            return True  # the first step offloads every group, as megatron-core's warm-up does
        return self.plan.get(group.ordinal, False)

    def after_step(self, groups: Sequence[Group]) -> None:
        if self.plan is not None or not groups:
            return
        offload = {g.ordinal: g.offload for g in groups}
        last_of_name = {g.key: g.ordinal for g in groups}  # forward order: the last one wins
        for ordinal in last_of_name.values():
            offload[ordinal] = False
        candidates = [g.ordinal for g in groups if offload[g.ordinal] and g.saved_bytes > 0]
        keep = int(len(candidates) * (1 - self.config.activation_offload_fraction))
        for ordinal in candidates[len(candidates) - keep:] if keep else ():
            offload[ordinal] = False
        self.plan = offload
