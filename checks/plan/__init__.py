"""The memory and throughput planner: ``python -m checks plan`` (standard library only).

``activations`` counts the bytes a layer saves for backward, tensor by tensor, per implementation;
``memory`` adds weights, gradients and optimizer state per GPU; ``offload`` applies each offloading
mechanism; ``throughput`` prices the copies; ``recommend`` searches for the smallest setting that fits.
"""
