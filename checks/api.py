"""The checker as a library: validate settings given as values rather than read from a file.

Code that builds an offloading configuration itself, such as the runnable implementation in
``examples/offload/``, calls this so that it refuses exactly what the checker refuses: the rules stay
the one source of truth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from checks.config import CanonicalConfig, Environment, Origin, Setting, split_path
from checks.engine import Finding, run
from checks.loaders.bridge import BridgeSpelling
from checks.rules import ALL_RULES, get
from checks.versions import DEFAULT_VERSION, profile


def validate(values: Mapping[str, Any], *, version: str = DEFAULT_VERSION, rules: Iterable[str] | None = None,
             source: str = "settings", environment: Environment | None = None,
             model_class: str | None = None) -> list[Finding]:
    """Run the rules over ``{canonical path: value}``, as if a Megatron Bridge config had set them.

    Args:
        values: settings by canonical path, e.g. ``{"model.cpu_offloading": True}``.
        version: the megatron-core version whose fields and checks apply. Default: the newest release.
        rules: the ids of the rules to run. Default: every rule.
        source: how findings name where the values came from.
        environment: what a config does not say (the Transformer Engine version); default: unknown. The
            launch environment's variables are values too: ``{"env.NVTE_CPU_OFFLOAD_V1": "1"}``.
        model_class: the Bridge model provider the settings are for, e.g. a Mamba provider (hybrid stacks).

    Raises:
        ValueError: a path that is not a field of its section in ``version``.
    """
    prof = profile(version)
    for path in values:
        section, name = split_path(path)
        if section in ("model", "optimizer", "ddp") and prof.field(section, name) is None:
            raise ValueError(f"{path!r} is not a field of megatron-core {version}")
    settings = {path: Setting(value, Origin(arg=source, key=path)) for path, value in values.items()}
    cfg = CanonicalConfig(flavor="bridge", version=version, settings=settings, spelling=BridgeSpelling(nested=False),
                          environment=environment or Environment(), model_class=model_class)
    return run([cfg], ALL_RULES if rules is None else [get(rule_id) for rule_id in rules])
