"""Cold start of `python -m checks plan --preset NAME` against starting a torch-based estimator.

Both sides run as fresh processes, interleaved, with bytecode caches (as a normal install has them). The
peer is `python -c "import torch"`: what any estimator built on torch pays before computing anything.
Prints medians, the ratio and its spread (the quartiles of the paired ratios) from this run, and adds the run to
the artifact, which keeps earlier runs of the same setup (``--fresh`` starts over).

Usage: python benchmarks/bench_plan_startup.py [--runs N] [--preset NAME] [--fresh] [--out FILE]
Goal (issue #5): plan on a preset, median at most 0.3 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, cold_starts, paired_ratios, run_header, spread, write_runs

GOAL_S = 0.3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--preset", default="llama3-70b")
    parser.add_argument("--out", type=Path, default=ROOT / "reference" / "benchmarks" / "plan_startup.json")
    parser.add_argument("--fresh", action="store_true", help="drop the artifact's earlier runs")
    args = parser.parse_args(argv)
    header = run_header()
    plan = [sys.executable, "-m", "checks", "plan", "--preset", args.preset, "--format", "json"]
    peer = [sys.executable, "-c", "import torch"]
    plan_s, peer_s = cold_starts(plan, peer, args.runs, ("plan", "import torch"), check=False)
    plan_median, peer_median = statistics.median(plan_s), statistics.median(peer_s)
    ratio_spread = spread(paired_ratios(peer_s, plan_s), 1)
    run = {
        **header,
        "plan_median_s": round(plan_median, 4), "import_torch_median_s": round(peer_median, 4),
        "ratio": round(peer_median / plan_median, 1), "ratio_spread": ratio_spread,
        "plan_spread_s": spread(plan_s), "goal_met": plan_median <= GOAL_S,
        "plan_s": [round(t, 4) for t in plan_s], "import_torch_s": [round(t, 4) for t in peer_s],
    }
    setup = {"benchmark": "plan_startup", "preset": args.preset, "runs_per_side": args.runs,
             "goal": {"plan_median_s_max": GOAL_S},
             "bytecode_caches": "written (PYTHONDONTWRITEBYTECODE unset for both sides)"}
    write_runs(args.out, setup, run, ["ratio"], fresh=args.fresh)
    print(f"plan --preset {args.preset} median {plan_median:.3f} s; import torch median {peer_median:.3f} s; "
          f"plan is {run['ratio']}x faster (paired ratios {ratio_spread['q1']}-{ratio_spread['q3']}x, quartiles); "
          f"goal met: {run['goal_met']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
