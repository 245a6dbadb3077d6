"""Loaders: every input format into :class:`checks.config.CanonicalConfig`.

``load(request)`` picks the format (``--flavor`` or detection) and returns one
canonical config per model (a NeMo-RL config can build several Megatron
models: policy, value, teachers, a generation model).
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any

from checks.config import CanonicalConfig
from checks.errors import InputError
from checks.formats import is_bridge_doc, is_megatron_lm_doc, is_nemo_rl_doc, looks_like_command_line
from checks.limits import check_limits
from checks.loaders.common import FLAVORS, Request
from checks.yamlio import load_yaml, read_text

if TYPE_CHECKING:
    from checks.loaders.launch import Launch

__all__ = ["FLAVORS", "Request", "detect_flavor", "load"]

# Imported on demand: a run reads one format, and start-up time is the point of this package.
_LOADERS = {"bridge": "checks.loaders.bridge", "nemo-rl": "checks.loaders.nemo_rl",
            "megatron-lm": "checks.loaders.megatron_lm"}
# Top-level keys only a NeMo-RL config has: the sections its Megatron models are built from
# (checks/loaders/nemo_rl.py), and cross-tokenizer distillation's teachers list.
_NEMO_RL_ROOTS = frozenset({"policy", "value", "teacher", "teachers", "on_policy_distillation"})


def load(request: Request) -> list[CanonicalConfig]:
    if not request.files and not request.overrides and request.argv is None and request.command is None \
            and request.recipe is None:
        raise InputError("check", "nothing to check: give a config file, a launch command (--command or after "
                                  "--), --set KEY=VALUE or --argv")
    launches = launches_of(request)
    if launches is not None:
        configs: list[CanonicalConfig] = []
        for launch in launches:
            found = _load_one(launch_request(request, launch))
            if len(launches) > 1:
                found = [replace(cfg, target=f"{launch.where}" + (f" {cfg.target}" if cfg.target else ""))
                         for cfg in found]
            configs += found
    else:
        configs = _load_one(request)
    check_limits(configs)
    return [replace(cfg, suppressions=_suppressions(cfg)) for cfg in configs]


def _suppressions(cfg: CanonicalConfig) -> tuple[Any, ...]:
    """The inline suppressions of every file a setting of ``cfg`` was read from (its inputs, the ``defaults:``
    bases and launch scripts they bring in)."""
    import os

    from checks.suppressions import MARKER, parse

    files = dict.fromkeys([*cfg.inputs, *(s.origin.file for s in cfg.settings.values() if s.origin.file),
                           *(u.setting.origin.file for u in cfg.unrecognised if u.setting.origin.file)])
    found: list[Any] = []
    for path in files:
        if path is None or not os.path.isfile(path):
            continue  # a recipe's source at its pinned commit, or standard input
        text = read_text(path)
        if MARKER in text:
            found += parse(path, text)
    return tuple(found)


def launches_of(request: Request) -> list[Launch] | None:
    """The launches a request names: ``--command``, or a shell script that starts training; None for a config.

    A script without a Bridge or NeMo-RL launch is left to the Megatron-LM reader, which scans its flags (as
    before launch commands were read) unless it finds a ``pretrain_*.py`` launch.
    """
    if request.command is None and not (request.files and request.files[0].endswith((".sh", ".bash"))):
        return None  # a config file: the launch reader (argparse replicas, the shell) is not imported
    if request.command is not None:
        if request.files or request.argv is not None:
            raise InputError("--command", "a launch command is the whole job: give it alone (add overrides with "
                                          "--set, which go after the command's own)")
        found = _read_launches(request.command, "--command", None)
        if not found:
            raise InputError("--command", "starts no training script the checker knows (Megatron Bridge "
                                          "run_recipe.py, NeMo-RL examples/run_*.py, Megatron-LM pretrain_*.py)")
        return found
    path = request.files[0]
    found = _read_launches(read_text(path), path, path)
    if not found:
        return None
    if len(request.files) > 1 or request.argv is not None:
        raise InputError(request.files[1] if len(request.files) > 1 else "--argv",
                         f"{path} is a launch script, which is the whole job: check it alone (add overrides "
                         "with --set)")
    return found


@cache
def _read_launches(text: str, where: str, file: str | None) -> list[Launch]:
    """The launches in a script or command line, read once: flavor detection and loading both ask."""
    from checks.loaders.launch import read

    return read(text, where, file=file)


def launch_request(request: Request, launch: Launch) -> Request:
    """What one launch asks the loaders to read: its recipe or config, its overrides, then any --set."""
    variables = {**request.environment.variables, **launch.environment}  # the script's exports over --env
    environment = replace(request.environment, variables=variables)
    files = tuple(_located(path, launch, request) for path in launch.files)
    return replace(request, flavor=launch.flavor if request.flavor == "auto" else request.flavor, files=files,
                   overrides=launch.overrides + request.overrides, override_at=launch.override_origins,
                   recipe=launch.recipe or request.recipe, words=launch.words if launch.flavor == "megatron-lm"
                   else None, command=None, environment=environment, launch=launch.where)


def _located(path: str, launch: Launch, request: Request) -> str:
    """A launch's relative config path, found where the command runs (--cwd, else the script's cd), else here."""
    import os

    if os.path.isabs(path):
        if os.path.isfile(path):
            return path
        raise InputError(launch.where, f"the config {path!r} is not found")
    tried = [os.path.join(where, path) for where in (request.cwd, launch.cwd) if where is not None]
    tried.append(path)
    for candidate in tried:
        if os.path.isfile(candidate):
            return candidate
    raise InputError(launch.where, f"the config {path!r} is not found (tried {', '.join(dict.fromkeys(tried))}); "
                                   "pass --cwd DIR, the directory the command runs in (a NeMo-RL checkout)")


def _load_one(request: Request) -> list[CanonicalConfig]:
    flavor = request.flavor if request.flavor != "auto" else detect_flavor(request)
    if request.argv is not None and flavor != "megatron-lm":  # it would be dropped without a word
        raise InputError("--argv", f"Megatron-LM flags go with a Megatron-LM command line; this is a {flavor} "
                                   "config: give its overrides with --set KEY=VALUE")
    if flavor not in _LOADERS:
        raise InputError("--flavor", f"unknown flavor {flavor!r}; choose auto, {', '.join(FLAVORS)}")
    module = importlib.import_module(_LOADERS[flavor])
    configs: list[CanonicalConfig] = module.load(replace(request, flavor=flavor))
    return configs


def _why_undetected(data: dict[str, object]) -> str:
    """What the detection looked for, saying so when a section is there but is not a mapping (``model: 5``)."""
    misshapen = [f"{name} is {data[name]!r}, not a section" for name in ("model", "optimizer", "ddp", "policy")
                 if name in data and not isinstance(data[name], dict)]
    policy = data.get("policy")
    if isinstance(policy, dict) and "megatron_cfg" in policy and not isinstance(policy["megatron_cfg"], dict):
        misshapen.append(f"policy.megatron_cfg is {policy['megatron_cfg']!r}, not a section")
    if misshapen:
        return "; ".join(text if len(text) < 100 else text[:97] + "..." for text in misshapen)
    return "no model/optimizer section, no policy.megatron_cfg, no MODEL_ARGS"


def detect_flavor(request: Request) -> str:
    """Tell the format from the first input; raise InputError when it cannot be told."""
    if request.command is not None or (request.files and request.files[0].endswith((".sh", ".bash"))):
        launches = launches_of(request)
        if launches:
            return launches[0].flavor
    if request.recipe is not None:
        return "bridge"
    if request.files:
        path = request.files[0]
        text = read_text(path)
        if path.endswith((".sh", ".bash", ".txt", ".args")):
            return "megatron-lm"
        try:
            data = load_yaml(path, text).data
        except InputError:
            if looks_like_command_line(text):
                return "megatron-lm"
            raise
        if is_megatron_lm_doc(data):
            return "megatron-lm"
        if is_nemo_rl_doc(data):
            return "nemo-rl"
        if is_bridge_doc(data):
            return "bridge"
        raise InputError(path, "cannot tell whether this is a Megatron Bridge, NeMo-RL or Megatron-LM config "
                               f"({_why_undetected(data)}); pass --flavor")
    if request.argv is not None:
        return "megatron-lm"
    roots = {text.lstrip("+~").split("=", 1)[0].split(".", 1)[0] for text in request.overrides}
    if roots & _NEMO_RL_ROOTS:
        return "nemo-rl"
    if roots & {"model", "optimizer", "ddp", "env_vars"}:
        return "bridge"
    raise InputError("--set", "cannot tell the config format from the overrides alone; pass --flavor")
