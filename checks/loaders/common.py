"""What every loader shares: the request, override application and value formatting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checks.config import Environment, Origin, Setting
from checks.errors import InputError
from checks.loaders import tree as trees

FLAVORS: tuple[str, ...] = ("bridge", "nemo-rl", "megatron-lm")


@dataclass(frozen=True)
class Request:
    """What the user asked the checker to read."""

    files: tuple[str, ...] = ()  # applied in order
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, applied after the files
    argv: str | None = None  # --argv "...": Megatron-LM flags, appended after any script
    flavor: str = "auto"
    version: str = "0.19.2"
    environment: Environment = field(default_factory=Environment)


def with_environment(settings: dict[str, Setting], environment: Environment, *, launch_wins: bool) -> None:
    """Add the launch environment (--env) to ``env.*`` settings.

    ``launch_wins``: Bridge applies its ``env_vars`` with ``os.environ.setdefault``, so a variable already
    set in the launch environment wins there; NeMo-RL hands ``env_vars`` to Ray, which sets them over it.
    """
    for name, setting in environment.variables.items():
        path = f"env.{name}"
        if launch_wins or path not in settings:
            settings[path] = setting


def apply_overrides(tree: trees.Tree, overrides: tuple[str, ...]) -> trees.Tree:
    """Apply ``--set`` overrides in order; a malformed one is an InputError naming it."""
    if not overrides:
        return tree
    from checks.loaders.overrides import OverrideSyntaxError, parse_override  # its grammar tables cost ~10 ms

    for index, text in enumerate(overrides, start=1):
        where = f"--set #{index}"
        try:
            override = parse_override(text)
        except OverrideSyntaxError as err:
            raise InputError(where, f"{text!r}: {err}") from None
        origin = Origin(arg=where, key=override.key, note=text)
        tree = trees.apply_override(tree, override, origin)
    return tree


def hydra_lines(patch: Mapping[str, Any], prefix_for: Mapping[str, str] | None = None) -> list[str]:
    """``KEY=VALUE`` lines for a patch; ``prefix_for`` gives ``+``/``++`` per key where needed."""
    from checks.loaders.overrides import format_value

    prefixes = prefix_for or {}
    return [f"{prefixes.get(key, '')}{key}={format_value(value)}" for key, value in patch.items()]
