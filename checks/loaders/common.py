"""What every loader shares: the request, override application and value formatting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from checks.config import CanonicalConfig, Environment, Origin, OverrideNote, Setting
from checks.errors import InputError
from checks.loaders import tree as trees
from checks.loaders.apply import EXACT, MAP, UNKNOWN, Base, Config, Hidden
from checks.yamlio import KeyPath

FLAVORS: tuple[str, ...] = ("bridge", "nemo-rl", "megatron-lm")


@dataclass(frozen=True)
class Applied:
    """A tree with the ``--set`` overrides applied, and what applying them found."""

    tree: trees.Tree
    refused: tuple[OverrideNote, ...] = ()  # left out: upstream refuses them at start-up
    unverified: tuple[OverrideNote, ...] = ()  # applied, but their outcome depends on what the checker lacks

    def attach(self, configs: list[CanonicalConfig]) -> list[CanonicalConfig]:
        """The configs with the notes: each goes to the (first) model its key is under (``policy.…``,
        ``value.…``), else the first model, so a NeMo-RL config with several models reports it once."""
        targets = [cfg.target for cfg in configs]

        def owner(note: OverrideNote) -> int:
            root = note.origin.key.split(".", 1)[0]
            return targets.index(root) if root in targets else 0

        return [replace(cfg, refused_overrides=tuple(n for n in self.refused if owner(n) == i),
                        unverified_overrides=tuple(n for n in self.unverified if owner(n) == i))
                for i, cfg in enumerate(configs)]


@dataclass(frozen=True)
class Request:
    """What the user asked the checker to read."""

    files: tuple[str, ...] = ()  # applied in order
    overrides: tuple[str, ...] = ()  # --set KEY=VALUE, applied after the files
    argv: str | None = None  # --argv "...": Megatron-LM flags, appended after any script
    flavor: str = "auto"
    version: str = "0.19.2"
    environment: Environment = field(default_factory=Environment)
    command: str | None = None  # --command "..." (or the words after --): a launch command line
    cwd: str | None = None  # --cwd: where a launch's relative paths are (default: the script's cd, else here)
    recipe: str | None = None  # --recipe, or a launch's run_recipe.py --recipe/--model: the Bridge recipe
    override_at: tuple[Origin, ...] = ()  # where each override was written, when not a --set option
    words: tuple[Any, ...] | None = None  # a launch's Megatron-LM argv words (mlm_argparse.Word), with origins
    launch: str | None = None  # the launch this request reads ("train.sh:12"), when a script has several
    assume_defaults: bool = False  # --assume-defaults: what no input states holds its dataclass default


# Both frameworks wrap whatever applying the overrides raises (NVIDIA-NeMo/Megatron-Bridge@067f987d:
# src/megatron/bridge/training/utils/omegaconf_utils.py:186, NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:192).
REFUSED_PREFIX = "Failed to parse Hydra overrides: "


class _NoConfigFile:
    """Overrides given without the config file they apply to: nothing about the keys is known."""

    def hidden(self, keys: KeyPath) -> Hidden:
        if not keys:
            return Hidden(MAP)
        return Hidden(UNKNOWN, "the overrides apply to a config file the checker was not given")


WITHOUT_FILE: Base = _NoConfigFile()


def with_environment(settings: dict[str, Setting], environment: Environment, *, launch_wins: bool) -> None:
    """Add the launch environment (--env) to ``env.*`` settings.

    ``launch_wins``: Bridge applies its ``env_vars`` with ``os.environ.setdefault``, so a variable already
    set in the launch environment wins there; NeMo-RL hands ``env_vars`` to Ray, which sets them over it.
    """
    for name, setting in environment.variables.items():
        path = f"env.{name}"
        if launch_wins or path not in settings:
            settings[path] = setting


def apply_overrides(tree: trees.Tree, overrides: tuple[str, ...], base: Base | None = None, *,
                    has_file: bool = True, at: tuple[Origin, ...] = ()) -> Applied:
    """The tree with ``--set`` overrides applied, in order, as the frameworks apply them.

    ``base``: what the config holds beyond ``tree``; by default the files are the whole config (or, without
    a file, nothing is known). A refused override is left out and noted with upstream's message; one whose
    outcome depends on what the checker lacks is applied and noted as unverified. ``at``: where the first
    overrides were written (a launch command's words), for their origins.
    """
    if not overrides:
        return Applied(tree)
    if base is None:
        base = EXACT if has_file else WITHOUT_FILE
    from checks.loaders.overrides import OverrideSyntaxError, parse_override  # its grammar tables cost ~10 ms

    parsed = []
    for index, text in enumerate(overrides, start=1):  # Hydra parses them all before applying one
        try:
            parsed.append(parse_override(text))
        except OverrideSyntaxError as err:
            where = at[index - 1].describe() if index <= len(at) else f"--set #{index}"
            raise InputError(where, f"{text!r}: {err}") from None
    config = Config(tree, base)
    refused: list[OverrideNote] = []
    unverified: list[OverrideNote] = []
    for index, override in enumerate(parsed, start=1):
        origin = Origin(arg=f"--set #{index}", key=override.key, note=override.text)
        if index <= len(at):
            origin = replace(at[index - 1], key=override.key, note=override.text)
        outcome = config.apply(override, origin)
        if outcome.refused is not None:
            refused.append(OverrideNote(index, override.text, origin, REFUSED_PREFIX + outcome.refused))
        if outcome.unverified is not None:
            unverified.append(OverrideNote(index, override.text, origin, outcome.unverified))
        config = outcome.config
    return Applied(config.tree, tuple(refused), tuple(unverified))


def hydra_lines(patch: Mapping[str, Any], prefix_for: Mapping[str, str] | None = None) -> list[str]:
    """``KEY=VALUE`` lines for a patch; ``prefix_for`` gives ``+``/``++`` per key where needed."""
    from checks.loaders.overrides import format_value

    prefixes = prefix_for or {}
    return [f"{prefixes.get(key, '')}{key}={format_value(value)}" for key, value in patch.items()]
