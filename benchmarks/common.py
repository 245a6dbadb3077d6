"""What every benchmark artifact records, so a number can be traced to the code and machine that made it."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Cold-start benchmarks run both sides as a normal Python install does, with bytecode caches (pip compiles
# megatron-core at install; the checker's caches are written by the warm-up run): a sandbox may set
# PYTHONDONTWRITEBYTECODE, which would make every checker run recompile its sources.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True)
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def revision_pins(argv: list[str]) -> dict[str, Any]:
    """Git commit and dirty flag, interpreter and library versions, machine, command and date."""
    return {
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "megatron_core": _version("megatron-core"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_artifact(path: Path, result: dict[str, Any], argv: list[str] | None = None) -> dict[str, Any]:
    """Write ``result`` as JSON with its revision pins last (results first, provenance after)."""
    artifact = {**result, "revision": revision_pins(sys.argv if argv is None else argv)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(artifact, indent=2) + "\n")
    return artifact


def cold_starts(ours: list[str], peer: list[str], runs: int, labels: tuple[str, str],
                check: bool) -> tuple[list[float], list[float]]:
    """Wall time of fresh processes, ours and the peer's interleaved so drift hits both alike, after one
    warm-up each (page cache, bytecode caches). ``check``: a non-zero exit is an error (``plan`` exits 1
    for a job that does not fit, so it is not)."""
    def timed(argv: list[str]) -> float:
        start = time.perf_counter()
        subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, check=check)
        return time.perf_counter() - start

    for command in (ours, peer):
        subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, check=check)
    ours_s: list[float] = []
    peer_s: list[float] = []
    for i in range(runs):
        ours_s.append(timed(ours))
        peer_s.append(timed(peer))
        print(f"run {i + 1}/{runs}: {labels[0]} {ours_s[-1]:.3f} s, {labels[1]} {peer_s[-1]:.3f} s", file=sys.stderr)
    return ours_s, peer_s
