"""A model of what megatron-core allocates, from the dimensions a config states.

Pure functions over frozen dataclasses, standard library only. ``shape`` turns a
canonical config into a :class:`~checks.model.shape.ModelShape` (or says what is
missing); ``parameters`` lists the tensors each pipeline stage holds, in
``named_parameters()`` order; ``optimizer_split`` replays how
``HybridDeviceOptimizer`` splits them between GPU and host.
"""
