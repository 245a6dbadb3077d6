"""Resolve ``${...}`` interpolations with OmegaConf, only for the values the checker reads.

NeMo-RL and Bridge resolve interpolations with OmegaConf; re-implementing its
grammar would drift, so OmegaConf itself does it here. It is imported only
when a value the checker needs contains ``${``, keeping the common path free
of it (``pip install omegaconf`` or the ``nemo-rl`` extra provides it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from checks.config import Setting
from checks.errors import InputError
from checks.loaders import tree as trees
from checks.yamlio import KeyPath


def _register_nemo_rl_resolvers(omegaconf: Any) -> None:
    # The four resolvers NeMo-RL registers (NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/config.py:196-204).
    # OmegaConf 2.4 renamed register_new_resolver to register_resolver, the name 2.0-2.3 used for the old
    # string-argument API; the 2.4 spelling of the old name warns on every use.
    major_minor = tuple(int(p) for p in omegaconf.__version__.split(".")[:2])
    register = omegaconf.OmegaConf.register_resolver if major_minor >= (2, 4) else \
        omegaconf.OmegaConf.register_new_resolver
    for name, fn in (("add", lambda a, b: a + b), ("mul", lambda a, b: a * b),
                     ("div", lambda a, b: a / b), ("max", lambda a, b: max(a, b))):
        if not omegaconf.OmegaConf.has_resolver(name):
            register(name, fn)


def needs_resolution(setting: Setting) -> bool:
    return _has_interpolation(setting.value)


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, list):
        return any(_has_interpolation(v) for v in value)
    return False


@contextlib.contextmanager
def _job_environment(variables: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` as the job will see it while OmegaConf resolves: ``${oc.env:X}`` reads the launch
    environment (the files' exports and ``--env``), not the shell the checker happens to run in."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(variables)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def resolve(tree: trees.Tree, wanted: Iterable[KeyPath], environment: Mapping[str, str] | None = None) -> trees.Tree:
    """Return ``tree`` with the interpolated leaves among ``wanted`` replaced by their values.

    ``environment``: the job's launch environment, which ``${oc.env:...}`` reads (nothing else is visible).
    """
    return Resolver(tree, environment).resolve(tree, wanted)


class Resolver:
    """Resolves against one config, built into OmegaConf once however many times values are asked of it.

    Building the OmegaConf tree is most of the cost (under cProfile, 18 of the 28 s that checking NeMo-RL's
    examples/configs took); a loader that resolves in two steps (NeMo-RL: the switches, then the sections they
    select) asks one Resolver twice. A leaf already replaced by its value resolves to the same value in the original.
    """

    def __init__(self, tree: trees.Tree, environment: Mapping[str, str] | None = None) -> None:
        self.tree = tree
        self.environment = environment or {}
        self._config: Any = None

    def _omegaconf(self, first: Setting) -> tuple[Any, Any]:
        try:
            import omegaconf
        except ImportError:
            raise InputError(first.origin.describe(), f"{first.origin.key} = {first.value!r} needs OmegaConf to "
                             "resolve the interpolation; pip install omegaconf (or the package's [nemo-rl] extra)") \
                from None
        _register_nemo_rl_resolvers(omegaconf)
        if self._config is None:
            try:
                self._config = omegaconf.OmegaConf.create(trees.plain(self.tree))
            except Exception as err:  # a malformed ${ anywhere in the file makes OmegaConf refuse the whole tree
                message = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise InputError(first.origin.describe(), f"OmegaConf cannot read this config to resolve "
                                 f"{first.origin.key} = {first.value!r}: {message}") from None
        return omegaconf, self._config

    def resolve(self, tree: trees.Tree, wanted: Iterable[KeyPath]) -> trees.Tree:
        """``tree`` (this config, or it with some leaves resolved) with the interpolated ``wanted`` leaves resolved."""
        todo = [keys for keys in wanted if isinstance(s := trees.get(tree, keys), Setting) and needs_resolution(s)]
        if not todo:
            return tree
        _bounded(tree, todo)
        omegaconf, config = self._omegaconf(trees.get(tree, todo[0]))
        return _resolved(tree, todo, omegaconf, config, self.environment)


def _resolved(tree: trees.Tree, todo: list[KeyPath], omegaconf: Any, config: Any,
              environment: Mapping[str, str]) -> trees.Tree:
    resolved = []
    with _job_environment(environment):  # once: swapping os.environ per value cost half of each
        for keys in todo:
            setting = trees.get(tree, keys)
            try:
                node = omegaconf.OmegaConf.select(config, ".".join(map(str, keys)), throw_on_missing=True)
                value = omegaconf.OmegaConf.to_container(node, resolve=True) \
                    if omegaconf.OmegaConf.is_config(node) else node
            except Exception as err:  # OmegaConf raises many types; all mean "cannot resolve"
                message = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise InputError(setting.origin.describe(), f"cannot resolve {setting.origin.key} = "
                                 f"{setting.value!r}: {message}") from None
            resolved.append((keys, Setting(value, replace(setting.origin, note=f"interpolated from {setting.value}"))))
    for keys, setting in resolved:
        tree = trees.put(tree, keys, setting)
    return tree


# OmegaConf resolves about one interpolation a millisecond and lexes about 300 KB a second: the values to resolve
# are bounded far above real configs' (a NeMo-RL example has a few dozen, each a few dozen characters).
MAX_INTERPOLATIONS = 500
MAX_INTERPOLATED_CHARS = 100_000


def _bounded(tree: trees.Tree, todo: list[KeyPath]) -> None:
    count = chars = 0
    for keys in todo:
        setting = trees.get(tree, keys)
        texts = [setting.value] if isinstance(setting.value, str) else [v for v in setting.value if isinstance(v, str)]
        count += sum(text.count("${") for text in texts)
        chars += sum(len(text) for text in texts)
        if count > MAX_INTERPOLATIONS or chars > MAX_INTERPOLATED_CHARS:
            raise InputError(setting.origin.describe(), f"{setting.origin.key}: past the {MAX_INTERPOLATIONS} ${{...}} "
                             f"interpolations (and {MAX_INTERPOLATED_CHARS:,} characters of values holding them) the "
                             "checker resolves; no real config comes near it")
