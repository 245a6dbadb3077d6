"""Refuse what the checker refuses: the offload configs here are validated by the checker's own rules."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from checks.api import validate

# The checker's rules are written against megatron-core's fields; these examples follow the newest release.
MCORE_VERSION = "0.19.2"


def enforce(values: Mapping[str, Any], rules: Iterable[str], what: str) -> None:
    """Raise ``ValueError`` for the checker's errors on ``values``; turn its warnings into ``UserWarning``.

    Args:
        values: canonical paths and values, e.g. ``{"model.cpu_offloading": True}``.
        rules: the ids of the rules that apply to this implementation.
        what: the config's name, for the messages.
    """
    findings = validate(values, version=MCORE_VERSION, rules=rules, source=what)
    errors = [f for f in findings if f.severity == "error"]
    if errors:
        raise ValueError("; ".join(f"{what}: {f.message} ({f.rule}; fix: {f.fix})" for f in errors))
    for finding in findings:
        if finding.severity == "warning":
            warnings.warn(f"{what}: {finding.message} ({finding.rule})", UserWarning, stacklevel=3)
