"""Shared test helpers: check a config given as text, the way a user's file would be checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checks.engine import Finding, run
from checks.loaders import Request, load
from checks.versions import DEFAULT_VERSION

ROOT = Path(__file__).resolve().parent.parent


def check_text(tmp_path: Path, text: str, *, flavor: str = "auto", version: str = DEFAULT_VERSION,
               sets: tuple[str, ...] = (), name: str = "config.yaml", complete: bool = True) -> list[Finding]:
    """Findings on a config written to a file; ``complete``: what it leaves out holds its default
    (--assume-defaults), as the rule tests mean their small configs."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return run(load(Request((str(path),), sets, None, flavor, version, assume_defaults=complete)))


def check_argv(argv: str, *, version: str = DEFAULT_VERSION) -> list[Finding]:
    return run(load(Request((), (), argv, "megatron-lm", version)))


def ids(findings: list[Finding]) -> list[str]:
    return sorted({f.rule for f in findings})


@pytest.fixture
def check(tmp_path: Path) -> Any:
    def _check(text: str, **kwargs: Any) -> list[Finding]:
        return check_text(tmp_path, text, **kwargs)

    return _check
