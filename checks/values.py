"""Type checks for config values: what megatron-core would accept, and what it would misread.

megatron-core does not check types: ``cpu_offloading: "False"`` is a
non-empty string and therefore *true*, ``offload_modules: core_attn`` is the
set of its letters, and ``optimizer_offload_fraction: "0.5"`` fails deep in
the optimizer. So a value of the wrong type is an error here, with three
lenient exceptions that behave identically upstream: 0/1 or null for a bool,
and an int for a float.
"""

from __future__ import annotations

from typing import Any

from checks.versions import FieldSpec

_DTYPES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "torch.float32": "fp32",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16",
    "fp8": "fp8", "uint8": "fp8", "torch.uint8": "fp8", "fp64": "fp64", "float64": "fp64",
}
_WORDS = {bool: "a bool", int: "an int", float: "a float", str: "a string", list: "a list", dict: "a mapping",
          type(None): "null"}


def describe(value: Any) -> str:
    return f"{_WORDS.get(type(value), type(value).__name__)} ({value!r})"


def coerce(spec: FieldSpec, value: Any) -> tuple[Any, str | None]:
    """Return ``(value as megatron-core will use it, None)`` or ``(value, what is wrong)``."""
    if value is None:
        # megatron-core tests bools for truth, so null reads as false; Bridge passes it through (old providers
        # declared Optional[bool] = None, e.g. use_transformer_engine_op_fuser before Megatron-Bridge@217de1a2).
        if spec.nullable or spec.kind in ("any", "bool"):
            return None, None
        return value, f"cannot be null; expects {_expected(spec)}"
    kind = spec.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value, None
        if isinstance(value, int) and value in (0, 1):
            return bool(value), None
        return value, f"expects true or false, got {describe(value)}"
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value, None
        return value, f"expects an integer, got {describe(value)}"
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value), None
        return value, f"expects a number, got {describe(value)}"
    if kind == "str":
        if isinstance(value, str):
            return value, None
        return value, f"expects a string, got {describe(value)}"
    if kind == "list_str":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value, None
        if isinstance(value, str):
            return value, f"expects a list of names such as [{value}], got {describe(value)}"
        return value, f"expects a list of names, got {describe(value)}"
    if kind == "dtype":
        if isinstance(value, str) and value in _DTYPES:
            return _DTYPES[value], None
        return value, f"expects a dtype (fp32, bf16, fp16), got {describe(value)}"
    return value, None


def _expected(spec: FieldSpec) -> str:
    return {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string",
            "list_str": "a list of names", "dtype": "a dtype"}.get(spec.kind, "a value")


def show(value: Any) -> str:
    """A value as YAML flow text (``true``, ``null``, ``[a, b]``), for messages a config author reads."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if isinstance(value, str):
        return value if value and value.replace("_", "").replace("-", "").replace(".", "").isalnum() else repr(value)
    return repr(value)
