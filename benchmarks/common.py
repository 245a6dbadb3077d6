"""What every benchmark artifact records, so a number can be traced to the code and machine that made it."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
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
        # the artifacts are what a run writes, not what it runs: a run that adds to one leaves it changed
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".",
                               ":(exclude)reference/benchmarks")),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "megatron_core": _version("megatron-core"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *argv]),
        "date": _now(),
    }


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def machine() -> dict[str, Any]:
    """The machine a run measured, read before the run starts: CPU model, cores this process may use, and the
    load average (1, 5, 15 min), since a shared machine's other work widens a timing's spread."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = []
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "usable_cores": usable, "load_average": load}


def spread(values: Sequence[float], digits: int = 4) -> dict[str, float]:
    """Minimum, quartiles and maximum (the exclusive method of :func:`statistics.quantiles`)."""
    if len(values) < 2:
        raise ValueError("a spread needs at least two values")
    q1, median, q3 = statistics.quantiles(values, n=4)
    return {"min": round(min(values), digits), "q1": round(q1, digits), "median": round(median, digits),
            "q3": round(q3, digits), "max": round(max(values), digits)}


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """The ratio of each interleaved pair: the two sides of pair i ran back to back, so drift and other work on
    the machine hit both alike, and the spread of these ratios is the run's own noise."""
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def noise(ratio_spread: Mapping[str, float]) -> dict[str, Any]:
    """Whether a ratio of two timings can be told from 1 in its run: the quartiles of the paired ratios enclose 1
    (``within_noise``), and the noise as half the interquartile range over the median, in %."""
    return {"within_noise": ratio_spread["q1"] <= 1.0 <= ratio_spread["q3"],
            "noise_pct": round((ratio_spread["q3"] - ratio_spread["q1"]) / 2 / ratio_spread["median"] * 100, 1)}


def write_runs(path: Path, setup: Mapping[str, Any], run: Mapping[str, Any], ratios: Sequence[str],
               fresh: bool = False, argv: list[str] | None = None) -> dict[str, Any]:
    """Add one run to a timing artifact and write it: ``setup`` (what was measured) and ``runs`` (each with its
    machine, date and commit), and ``across_runs``, the range of each (dotted) key in ``ratios`` over the runs.

    Timings on a shared machine move from run to run more than within one, so the artifact keeps every run of the
    same setup (``fresh`` starts over); a run of another setup replaces them.
    """
    previous: list[dict[str, Any]] = []
    if path.exists() and not fresh:
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        if isinstance(old, dict) and {k: old.get(k) for k in setup} == dict(setup) \
                and isinstance(old.get("runs"), list):
            previous = old["runs"]
    runs = [*previous, dict(run)]
    across = {}
    for key in ratios:
        seen = [v for v in (_dotted(r, key) for r in runs) if isinstance(v, (int, float))]
        if seen:
            across[key] = {"min": min(seen), "max": max(seen), "runs": len(seen)}
    # --fresh decides what the artifact keeps, not what a run measures: the command recorded is the one that
    # adds a run
    command = [a for a in (sys.argv if argv is None else argv) if a != "--fresh"]
    return write_artifact(path, {**setup, "runs": runs, "across_runs": across}, command)


def _dotted(data: Mapping[str, Any], key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)  # type: ignore[assignment]
    return data


def run_header() -> dict[str, Any]:
    """What a run records before it starts: the machine, the date and the commit."""
    return {"date": _now(), "git_commit": _git("rev-parse", "HEAD"), "machine": machine()}


def kept_revision(path: Path, result: Mapping[str, Any], argv: list[str]) -> dict[str, Any]:
    """``result`` with the ``revision`` of the artifact committed at ``path`` while its results are the same,
    else with this tree's: a check of freshness then does not move with every commit, and results that move are
    stamped with the tree they come from (regenerate from a clean tree). JSON-equal, not byte-equal."""
    try:
        committed = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        committed = {}
    revision = committed.pop("revision", None) if isinstance(committed, dict) else None
    if revision is None or committed != json.loads(json.dumps(result)):
        revision = revision_pins(argv)
    return {**result, "revision": revision}


def check_artifact(path: Path, text: str, command: str) -> int:
    """A tool's ``--check``: 0 when the committed artifact at ``path`` is ``text``, else 1 and what to run."""
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if current != text:
        print(f"{path.relative_to(ROOT)} is stale: run {command}", file=sys.stderr)
        return 1
    print(f"{path.relative_to(ROOT)} is current")
    return 0


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


NEMO_RL_PINNED = "7ea279ab"  # NeMo-RL main as checks/data pins it


def nemo_rl_examples(git_dir: str, into: Path, commit: str = NEMO_RL_PINNED) -> Path:
    """NeMo-RL's ``examples/`` at ``commit``, extracted from a git directory of NVIDIA-NeMo/RL (a bare mirror will
    do) into ``into``; returns its ``examples/configs``. All of ``examples/``: recipes inherit from
    ``examples/nemo_gym`` and ``examples/modelopt`` through ``defaults:``."""
    import tarfile

    archive = into / "examples.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", git_dir, "archive", commit, "examples"], check=True, stdout=out)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "examples" / "configs"
