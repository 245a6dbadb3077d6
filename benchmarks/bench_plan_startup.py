"""Cold start of `python -m checks plan --preset NAME` against starting a torch-based estimator.

Both sides run as fresh processes, interleaved, with bytecode caches (as a normal install has them). The
peer is `python -c "import torch"`: what any estimator built on torch pays before computing anything.
Prints medians and the ratio from this one run and writes an artifact.

Usage: python benchmarks/bench_plan_startup.py [--runs N] [--preset NAME] [--out reference/benchmarks/plan_startup.json]
Goal (issue #5): plan on a preset, median at most 0.3 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, cold_starts, write_artifact

GOAL_S = 0.3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--preset", default="llama3-70b")
    parser.add_argument("--out", type=Path, default=ROOT / "reference" / "benchmarks" / "plan_startup.json")
    args = parser.parse_args(argv)
    plan = [sys.executable, "-m", "checks", "plan", "--preset", args.preset, "--format", "json"]
    peer = [sys.executable, "-c", "import torch"]
    plan_s, peer_s = cold_starts(plan, peer, args.runs, ("plan", "import torch"), check=False)
    plan_median, peer_median = statistics.median(plan_s), statistics.median(peer_s)
    result = {
        "benchmark": "plan_startup", "preset": args.preset, "runs": args.runs,
        "plan_median_s": round(plan_median, 4), "import_torch_median_s": round(peer_median, 4),
        "ratio": round(peer_median / plan_median, 1), "goal": {"plan_median_s_max": GOAL_S},
        "goal_met": plan_median <= GOAL_S, "plan_s": [round(t, 4) for t in plan_s],
        "import_torch_s": [round(t, 4) for t in peer_s],
        "bytecode_caches": "written (PYTHONDONTWRITEBYTECODE unset for both sides)",
    }
    write_artifact(args.out, result)
    print(f"plan --preset {args.preset} median {plan_median:.3f} s; import torch median {peer_median:.3f} s; "
          f"plan is {result['ratio']}x faster; goal met: {result['goal_met']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
