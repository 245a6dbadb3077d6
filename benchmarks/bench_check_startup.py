"""Cold start of `python -m checks check` against importing megatron-core and building its configs.

Both sides run as fresh processes, interleaved, on the same input (a bundled Bridge dump). The peer is
given the config's keyword arguments ready-made, so it is timed only for importing megatron-core and
constructing `TransformerConfig` and `OptimizerConfig`, which is what validating the config with
megatron-core itself costs. Prints medians and the ratio with its spread (the quartiles of the paired ratios)
from this run, and adds the run to the artifact, which keeps earlier runs of the same setup (``--fresh`` starts
over).

Then, in the same run, a launch command against the plain config: `check` on a Bridge launch script
(`run_recipe.py --recipe NAME KEY=VALUE...`, which reads the recipe and model catalogues) against `check` on the
bundled dump, both cold, interleaved.

Usage: python benchmarks/bench_check_startup.py [--runs N] [--fresh] [--out FILE]
Goals: checker median <= 0.2 s, and >= 25x faster than the peer (issue #2); the launch command within 1.5x of
the plain config (issue #11).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, cold_starts, paired_ratios, run_header, spread, write_runs
from checks.context import Context
from checks.loaders import Request, load

CONFIG = "examples/configs/bridge/run_config_clean.yaml"
CHECKER = [sys.executable, "-m", "checks", "check", CONFIG, "--format", "json", "--mcore-version", "0.16.1"]
LAUNCH_SCRIPT = "examples/configs/launch/bridge_qwen3_moe_fixed.sh"
LAUNCH = [sys.executable, "-m", "checks", "check", LAUNCH_SCRIPT, "--format", "json", "--mcore-version", "0.16.1"]
_DTYPES = {"fp32": "torch.float32", "bf16": "torch.bfloat16", "fp16": "torch.float16"}


def peer_script() -> str:
    """A Python program that builds megatron-core's own configs from the same input."""
    ctx = Context(load(Request((str(ROOT / CONFIG),), version="0.16.1"))[0])
    parts = {}
    for section in ("model", "optimizer"):
        kwargs = []
        for path in ctx.cfg.settings:
            sec, _, name = path.partition(".")
            spec = ctx.profile.field(sec, name) if sec == section else None
            if spec is None or spec.kind == "any" or path in ctx.invalid:
                continue
            value = ctx.get(path)
            kwargs.append(f"{name}={_DTYPES[value] if spec.kind == 'dtype' else repr(value)}")
        parts[section] = ", ".join(kwargs)
    return (
        "import torch\n"
        "from megatron.core.transformer.transformer_config import TransformerConfig\n"
        "from megatron.core.optimizer import OptimizerConfig\n"
        f"TransformerConfig({parts['model']})\n"
        "try:\n"
        f"    OptimizerConfig({parts['optimizer']})\n"
        # Without Transformer Engine (this CPU machine), 0.14-0.16 fail the precision-aware optimizer's TE
        # version check with a TypeError: the config has been validated up to that point.
        "except TypeError as err:\n"
        "    assert \"'NoneType' and 'Version'\" in str(err), err\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "reference" / "benchmarks" / "check_startup.json")
    parser.add_argument("--fresh", action="store_true", help="drop the artifact's earlier runs")
    args = parser.parse_args(argv)
    header = run_header()
    peer = [sys.executable, "-W", "ignore", "-c", peer_script()]
    checker_s, peer_s = cold_starts(CHECKER, peer, args.runs, ("checker", "megatron-core"), check=True)
    checker_median, peer_median = statistics.median(checker_s), statistics.median(peer_s)
    ratio = peer_median / checker_median
    launch_s, plain_s = cold_starts(LAUNCH, CHECKER, args.runs, ("launch", "plain config"), check=True)
    launch_ratio = statistics.median(launch_s) / statistics.median(plain_s)
    speedup_spread = spread(paired_ratios(peer_s, checker_s), 1)
    launch_spread = spread(paired_ratios(launch_s, plain_s), 2)
    run = {
        **header,
        "checker_median_s": round(checker_median, 4),
        "megatron_core_median_s": round(peer_median, 4),
        "speedup": round(ratio, 1),
        "speedup_spread": speedup_spread,
        "goals_met": checker_median <= 0.2 and ratio >= 25 and launch_ratio <= 1.5,
        "launch": {"launch_median_s": round(statistics.median(launch_s), 4),
                   "plain_median_s": round(statistics.median(plain_s), 4),
                   "launch_over_plain": round(launch_ratio, 2), "launch_over_plain_spread": launch_spread,
                   "launch_s": [round(t, 4) for t in launch_s], "plain_s": [round(t, 4) for t in plain_s]},
        "checker_s": [round(t, 4) for t in checker_s],
        "megatron_core_s": [round(t, 4) for t in peer_s],
    }
    setup = {
        "benchmark": "check_startup", "input": CONFIG, "launch_input": LAUNCH_SCRIPT, "runs_per_side": args.runs,
        "goals": {"checker_median_s_max": 0.2, "speedup_min": 25, "launch_over_plain_max": 1.5},
        "peer": "python -c: import megatron-core, build TransformerConfig and OptimizerConfig with the same values",
        "bytecode_caches": "written (PYTHONDONTWRITEBYTECODE unset for both sides)",
    }
    write_runs(args.out, setup, run, ["speedup", "launch.launch_over_plain"], fresh=args.fresh)
    print(f"checker median {checker_median:.3f} s; megatron-core median {peer_median:.3f} s; "
          f"checker is {ratio:.1f}x faster (paired {speedup_spread['q1']}-{speedup_spread['q3']}x); launch command "
          f"{launch_ratio:.2f}x the plain config (paired {launch_spread['q1']}-{launch_spread['q3']}x); "
          f"goals met: {run['goals_met']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
