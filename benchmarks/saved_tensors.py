"""Saved-tensor accounting: the bytes each layer's forward leaves saved for backward, measured.

Shared by tests/test_activations.py and tools/memory_report.py. Each storage counts once, for the layer
whose forward first saves it; parameters are not activations and are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def measure(run: Callable[[], Any], layers: list[torch.nn.Module]) -> list[int]:
    """Bytes of the storages first saved during each layer's forward while ``run()`` executes."""
    current: list[int | None] = [None]
    seen: set[int] = set()
    per_layer = [0] * len(layers)
    handles = []
    for index, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(lambda m, a, i=index: current.__setitem__(0, i)))
        handles.append(layer.register_forward_hook(lambda m, a, o: current.__setitem__(0, None)))

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if isinstance(tensor, torch.nn.Parameter) or isinstance(tensor._base, torch.nn.Parameter):
            return tensor
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            if current[0] is not None:
                per_layer[current[0]] += storage.nbytes()
        return tensor

    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run()
    finally:
        for handle in handles:
            handle.remove()
    return per_layer
