"""Static checks and planning for CPU offloading in Megatron-Core, Megatron Bridge and NeMo-RL.

Importing this package (and running the checker) needs only the standard
library, PyYAML and jsonschema: never torch or megatron, so that it starts fast
on a login node. ``tests/test_imports.py`` keeps it that way.
"""

__version__ = "0.11.0"
