"""A device-agnostic PyTorch implementation of Megatron-Core's three offloading mechanisms.

- layer-level activation offloading (``cpu_offloading*``): :mod:`examples.offload.layer`;
- fine-grained, module-level activation offloading (``fine_grained_activation_offloading`` +
  ``offload_modules``): :mod:`examples.offload.fine_grained`;
- a hybrid CPU/GPU AdamW (``optimizer_cpu_offload`` + ``optimizer_offload_fraction``):
  :mod:`examples.offload.hybrid_adam`.

Both activation mechanisms are policies of one saved-tensor engine (:mod:`examples.offload.engine`) over
one copy layer (:mod:`examples.offload.transfer`). Every synchronisation and lifetime hazard is written
once in :mod:`examples.offload.notes`.
"""

from examples.offload.engine import NoOffload, OffloadEngine, Policy
from examples.offload.fine_grained import FineGrainedOffloadConfig, FineGrainedPolicy
from examples.offload.hybrid_adam import HybridAdamW
from examples.offload.layer import LayerOffloadConfig, LayerPolicy

__all__ = ["FineGrainedOffloadConfig", "FineGrainedPolicy", "HybridAdamW", "LayerOffloadConfig", "LayerPolicy",
           "NoOffload", "OffloadEngine", "Policy"]
