"""Strict JSON for every document the CLI prints (``check``, ``plan``, ``lint``, ``examples``)."""

from __future__ import annotations

import json
from typing import Any


def dumps(document: Any) -> str:
    """``document`` as strict JSON: a non-finite float (a quoted ``"inf"`` fraction a patch repeats) is written
    as its string, ``"inf"``, since JSON has no NaN or Infinity."""
    return json.dumps(_finite(document), indent=2, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
