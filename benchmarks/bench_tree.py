"""Every NeMo-RL example config in one `check` process, against one process per config, in the same run.

The configs are NeMo-RL's own ``examples/`` at the commit the rules pin (NVIDIA-NeMo/RL@7ea279ab), taken from a
git directory of NVIDIA-NeMo/RL (``--nemo-rl-git``, or ``$NEMO_RL_GIT``; a bare mirror will do) with ``git
archive``, so the run needs no network. The tree run is ``python -m checks check examples/configs --format json``,
cold, timed whole (start-up included), ``--runs`` times; the peer runs ``python -m checks check FILE --format
json`` for each config the tree run checked, one cold process each, and is timed once over the whole list (it is
the slow side: a few minutes). Each tree run is paired with the peer's total for the ratio.

Usage: python benchmarks/bench_tree.py --nemo-rl-git DIR [--runs N] [--fresh] [--out FILE]
Goals (issue #16): the whole tree in under 3 s here, and at least 10x faster than one process per file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ENV, NEMO_RL_PINNED, ROOT, nemo_rl_examples, run_header, spread, write_runs


def _own(findings: list[dict], path: str) -> list[tuple[str, str]]:
    return sorted((f["rule"], f["message"]) for f in findings
                  if f["location"] is None or f["location"]["file"] in (None, path))


def _timed(argv: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True)
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nemo-rl-git", default=os.environ.get("NEMO_RL_GIT"),
                        help="a git directory of NVIDIA-NeMo/RL (default: $NEMO_RL_GIT)")
    parser.add_argument("--runs", type=int, default=5, help="tree runs (default: %(default)s)")
    parser.add_argument("--fresh", action="store_true", help="start the artifact over")
    parser.add_argument("--out", default=str(ROOT / "reference" / "benchmarks" / "tree_check.json"))
    args = parser.parse_args()
    if not args.nemo_rl_git:
        parser.error("give --nemo-rl-git DIR (or set NEMO_RL_GIT): a git directory of NVIDIA-NeMo/RL")
    header = run_header()
    with tempfile.TemporaryDirectory() as tmp:
        configs = nemo_rl_examples(args.nemo_rl_git, Path(tmp))
        tree = [sys.executable, "-m", "checks", "check", str(configs), "--format", "json"]
        _timed(tree, ROOT)  # warm-up: page cache, bytecode caches
        tree_s: list[float] = []
        document: dict = {}
        for i in range(args.runs):
            seconds, done = _timed(tree, ROOT)
            if done.returncode not in (0, 1, 2) or not done.stdout:
                raise SystemExit(f"the tree run failed ({done.returncode}): {done.stderr.strip()}")
            document = json.loads(done.stdout)
            tree_s.append(seconds)
            print(f"tree run {i + 1}/{args.runs}: {seconds:.3f} s", file=sys.stderr)
        files = [f["path"] for f in document["files"]]
        per_file_s: list[float] = []
        mismatched = 0
        for path in files:
            seconds, done = _timed([sys.executable, "-m", "checks", "check", path, "--format", "json"], ROOT)
            per_file_s.append(seconds)
            if done.returncode in (0, 1):  # the same findings in the config itself (a base's may be the tree's once)
                together = [f for f in document["findings"] if f["file"] == path]
                mismatched += _own(json.loads(done.stdout)["findings"], path) != _own(together, path)
        print(f"one process per config: {len(files)} configs, {sum(per_file_s):.1f} s", file=sys.stderr)
    peer_total = sum(per_file_s)
    ratios = [peer_total / t for t in tree_s]
    run = {**header, "configs": len(files), "skipped": len(document["skipped"]),
           "unreadable": document["summary"]["unreadable"], "status": document["status"],
           "tree_s": spread(tree_s), "tree_per_config_ms": round(statistics.median(tree_s) / len(files) * 1000, 2),
           "per_process_total_s": round(peer_total, 3), "per_process_s": spread(per_file_s),
           "speedup": round(statistics.median(ratios), 2), "speedup_spread": spread(ratios, 2),
           "findings_differ_from_one_process": mismatched,
           "goals": {"tree_under_3_s": statistics.median(tree_s) < 3.0, "speedup_at_least_10x": min(ratios) >= 10}}
    setup = {"benchmark": "bench_tree", "nemo_rl": NEMO_RL_PINNED, "tree": "examples/configs"}
    write_runs(Path(args.out), setup, run, ["speedup", "tree_s.median"], fresh=args.fresh)
    median = statistics.median(tree_s)
    print(f"{len(files)} configs ({len(document['skipped'])} files skipped): one process {median:.2f} s "
          f"({median / len(files) * 1000:.1f} ms per config) against {peer_total:.1f} s for one process per config: "
          f"{statistics.median(ratios):.1f}x (range {min(ratios):.1f}-{max(ratios):.1f}x over {len(tree_s)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
