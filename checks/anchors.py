"""Upstream checks and where they live: what a finding's ``upstream`` field holds.

A check's identity (project, exception, message, file) is written in ``checks/rules/upstream.py``; where it
stands in each version is data, ``checks/data/anchors.json``, which ``tools/verify_anchors.py --write`` derives
from each version's source. Nothing here is typed by hand per version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checks.versions import NEMO_RL_VERSIONS, VERSIONS, anchor_table, nemo_rl_commit, profile, version_key

# Where each project's checks run, for the differential tests and `explain`.
STAGE_CONFIG = "config"  # a config dataclass's __post_init__ (TransformerConfig, OptimizerConfig)
STAGE_OPTIMIZER = "optimizer"  # building the optimizer (get_megatron_optimizer)
STAGE_MODEL = "model"  # building the model (TransformerBlock and its layers)
STAGE_CLI = "cli"  # Megatron-LM validate_args
STAGE_SETUP = "setup"  # a framework's own set-up code (Bridge, NeMo-RL)

FIXED = "at"  # the label of a check known at one commit only, in anchors.json and in anchors()


@dataclass(frozen=True)
class Upstream:
    """The upstream check behind a finding, as the JSON output carries it."""

    project: str
    message: str | None  # exact text upstream prints; None for a bare assert
    anchor: str
    stage: str = ""  # where the check runs (STAGE_*); not part of the JSON output

    def as_json(self) -> dict[str, Any]:
        return {"project": self.project, "message": self.message, "anchor": self.anchor}


@dataclass(frozen=True)
class UpstreamCheck:
    """One check an upstream project performs: what it is here, where it stands per version in the data.

    ``key`` names it in ``checks/data/anchors.json`` (its name in ``checks/rules/upstream.py``). ``path`` is the
    file it lives in, relative to its repository; a tuple where it moved between releases (the tool looks in
    each). For a megatron-core or Megatron-LM check the versions are megatron-core labels (the commit comes from
    the version profile); for ``project == "nemo-rl"``, NeMo-RL releases. ``fixed`` (``owner/repo@commit``) marks a
    check known at one commit only (Megatron Bridge, NeMo-RL main, Transformer Engine): its one anchor is shown
    for every version.
    """

    key: str
    project: str
    exception: str  # "ValueError", "AssertionError", ... or "warning"
    message: str | None  # a str.format template over the check's values; None for a bare assert
    stage: str
    path: str | tuple[str, ...]
    fixed: str | None = None
    # The code at the anchor that fails, for a crash with no explicit check (a TypeError deep in __post_init__)
    # or a bare assert: how the tool finds the statement without a message to match ("..." skips any text).
    evidence: str | None = None
    within: str | None = None  # the function it is raised in, where the file raises the same message twice
    # The versions in which the statement concerns offloading, where it exists outside them too (identity, not
    # location: C6 guards every CUDA-graph setting, and only before 0.18 does it stop an offloading config).
    since: str | None = None
    until: str | None = None

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path,) if isinstance(self.path, str) else self.path

    def _data(self) -> Mapping[str, str]:
        found: Mapping[str, str] = anchor_table()["anchors"].get(self.key, {})
        return found

    @property
    def lines(self) -> Mapping[str, str]:
        """``path:line`` by version label, from the data; empty for a check at one commit (see :meth:`anchor`)."""
        return {} if self.fixed is not None else self._data()

    def concerns(self, version: str) -> bool:
        """Whether ``version`` is within the check's ``since``/``until`` (megatron-core labels)."""
        if self.project == "nemo-rl" or (self.since is None and self.until is None):
            return True
        key = version_key(version)
        return (self.since is None or key >= version_key(self.since)) and \
            (self.until is None or key <= version_key(self.until))

    def versions(self) -> tuple[str, ...]:
        """The labels this check is anchored in (megatron-core versions, or NeMo-RL releases); () when fixed."""
        if self.fixed is not None:
            return ()
        labels = NEMO_RL_VERSIONS if self.project == "nemo-rl" else VERSIONS
        lines = self.lines
        return tuple(v for v in labels if v in lines)

    def anchors(self) -> dict[str, str]:
        """Every anchor, by version label ("at" for a check anchored at one commit only)."""
        if self.fixed is not None:
            fixed = self.anchor(FIXED)
            return {FIXED: fixed} if fixed is not None else {}
        return {v: a for v in self.versions() if (a := self.anchor(v)) is not None}

    def anchor(self, version: str) -> str | None:
        if self.fixed is not None:
            where = self._data().get(FIXED)
            return None if where is None else f"{self.fixed}:{where}"
        where = self.lines.get(version)
        if where is None:
            return None
        path, _, line = where.rpartition(":")
        if self.project == "nemo-rl":
            return f"NVIDIA-NeMo/RL@{nemo_rl_commit(version)[:8]}:{path}:{line}"
        return profile(version).anchor(path, int(line))

    def at(self, version: str, **values: Any) -> Upstream:
        """The upstream record for a finding in ``version``, with the message filled in."""
        anchor = self.anchor(version)
        if anchor is None:
            raise ValueError(f"{self.project} check {self.key} has no anchor for {version}")
        message = self.message.format(**values) if self.message is not None else None
        return Upstream(self.project, message, anchor, self.stage)
