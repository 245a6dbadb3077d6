"""Layer-level activation offloading: Megatron-Core's ``cpu_offloading*`` knobs.

Megatron-Core hands these knobs to Transformer Engine's ``get_cpu_offload_context`` and commits each
``TransformerLayer``'s output (``TransformerBlock.forward``); Transformer Engine offloads the activations
saved in layers ``0 .. cpu_offloading_num_layers - 1``, each layer's copy overlapping the next layer's
compute, and in backward reloads each layer while the layer after it runs backward. Here each layer is
one group of :class:`~examples.offload.engine.OffloadEngine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from examples.offload.engine import Group, Policy, is_parameter_like
from examples.offload.validation import enforce


@dataclass(frozen=True)
class LayerOffloadConfig:
    """Megatron-Core's layer-level offload fields (``ModelParallelConfig``), with their defaults.

    Args:
        cpu_offloading: switch. Default: False.
        cpu_offloading_num_layers: offload layers ``0 .. N-1``; at most ``num_layers - 1``, because the
            last layer's backward starts at once and leaves no time to reload it. Default: 0.
        cpu_offloading_activations: offload the activations the layers save. Default: True.
        cpu_offloading_weights: also offload the parameters the layers save; this frees nothing while the
            module holds them (Transformer Engine >= 2.3 ignores it). Default: False.
        cpu_offloading_double_buffering: reload into two reused device buffer sets. Default: False.
        cpu_offloading_retain_pinned_cpu_buffers: keep the host buffers between steps. Default: False.
    """

    cpu_offloading: bool = False
    cpu_offloading_num_layers: int = 0
    cpu_offloading_activations: bool = True
    cpu_offloading_weights: bool = False
    cpu_offloading_double_buffering: bool = False
    cpu_offloading_retain_pinned_cpu_buffers: bool = False

    def validate(self, num_layers: int) -> None:
        """The checker's layer-level rules for a model with ``num_layers`` layers.

        Raises:
            ValueError: what megatron-core or Transformer Engine would refuse (ACT001, TEX001).
        """
        values = {f"model.{name}": getattr(self, name) for name in self.__dataclass_fields__}
        rules = ["ACT001", "ACT005", "ACT006", "ACT008"] + (["TEX001"] if self.cpu_offloading else [])
        enforce({**values, "model.num_layers": num_layers}, rules, "layer offload")


class LayerPolicy(Policy):
    """Every layer is a group; layers below ``cpu_offloading_num_layers`` are offloaded.

    Args:
        config: the knobs.
        num_layers: the model's layer count, for validation.

    Raises:
        ValueError: an invalid combination (:meth:`LayerOffloadConfig.validate`).
    """

    def __init__(self, config: LayerOffloadConfig, num_layers: int) -> None:
        config.validate(num_layers)
        self.config = config
        self.offload_weights = config.cpu_offloading_weights
        self.double_buffering = config.cpu_offloading_double_buffering
        self.retain_host_buffers = config.cpu_offloading_retain_pinned_cpu_buffers

    def forms_group(self, kind: str, key: Any) -> bool:
        # Layers that are not offloaded still commit: their backward prefetches the layer before them.
        return self.config.cpu_offloading and kind == "layer"

    def eligible(self, tensor: torch.Tensor) -> bool:
        if is_parameter_like(tensor):
            return self.config.cpu_offloading_weights  # See Note: [Parameters and views of parameters]
        return self.config.cpu_offloading_activations

    def offloads(self, group: Group) -> bool:
        return int(group.key) < self.config.cpu_offloading_num_layers

    def after_step(self, groups: Sequence[Group]) -> None:
        pass
