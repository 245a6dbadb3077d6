"""The memory and throughput planner: ``python -m checks plan`` (standard library only).

``activations`` counts the bytes a layer saves for backward, tensor by tensor, per implementation;
``memory`` adds weights, gradients and optimizer state per GPU; ``offload`` applies each offloading
mechanism; ``throughput`` prices the copies; ``recommend`` searches for the smallest setting that fits,
among those the checker accepts (``checks.api.validate``); ``job`` builds the whole plan and its verdicts
from the command line's inputs, and ``render`` only formats it.
"""
