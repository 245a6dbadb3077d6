"""Upstream checks and where they live: what a finding's ``upstream`` field holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checks.versions import NEMO_RL_VERSIONS, VERSIONS, nemo_rl_commit, profile

# Where each project's checks run, for the differential tests and `explain`.
STAGE_CONFIG = "config"  # a config dataclass's __post_init__ (TransformerConfig, OptimizerConfig)
STAGE_OPTIMIZER = "optimizer"  # building the optimizer (get_megatron_optimizer)
STAGE_MODEL = "model"  # building the model (TransformerBlock and its layers)
STAGE_CLI = "cli"  # Megatron-LM validate_args
STAGE_SETUP = "setup"  # a framework's own set-up code (Bridge, NeMo-RL)


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
    """One check an upstream project performs, with its location in each version.

    ``lines`` maps a version label to ``path:line``: a megatron-core version
    (the commit comes from the version profile), or a NeMo-RL release for
    ``project == "nemo-rl"``. ``fixed`` is a complete anchor for a check known
    at one commit only (Megatron Bridge, NeMo-RL main).
    """

    project: str
    exception: str  # "ValueError", "AssertionError", ... or "warning"
    message: str | None  # a str.format template over the check's values; None for a bare assert
    stage: str
    lines: Mapping[str, str] = field(default_factory=dict)
    fixed: str | None = None
    # For a crash with no explicit check (a TypeError deep in __post_init__): the code at the anchor that
    # fails, so tools/verify_anchors.py can confirm the anchor without a raise statement to match.
    evidence: str | None = None

    def versions(self) -> tuple[str, ...]:
        """The labels this check is anchored in (megatron-core versions, or NeMo-RL releases); () when fixed."""
        labels = NEMO_RL_VERSIONS if self.project == "nemo-rl" else VERSIONS
        return tuple(v for v in labels if v in self.lines)

    def anchors(self) -> dict[str, str]:
        """Every anchor, by version label ("at" for a check anchored at one commit only)."""
        if self.fixed is not None:
            return {"at": self.fixed}
        return {v: a for v in self.versions() if (a := self.anchor(v)) is not None}

    def anchor(self, version: str) -> str | None:
        if self.fixed is not None:
            return self.fixed
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
            raise ValueError(f"{self.project} check has no anchor for {version}")
        message = self.message.format(**values) if self.message is not None else None
        return Upstream(self.project, message, anchor, self.stage)
