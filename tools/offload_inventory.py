"""List every offload-related raise, assert and warning in each release, and whether a rule backs it.

Maintainer tool. For each megatron-core version the checker knows, it parses the files where
offloading is configured and implemented (with ``ast``; nothing is imported), finds every ``raise``,
``assert`` and ``warnings.warn``/``log`` call whose text mentions offloading, and reports those that
are neither an anchor of a rule's upstream check nor listed in ``checks/rules/scope.py``.

Usage:

    python tools/offload_inventory.py --git /path/to/Megatron-LM [--all]
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checks.rules import ALL_RULES
from checks.rules.scope import OUT_OF_SCOPE
from checks.versions import VERSIONS, profile

FILES = (
    "megatron/core/transformer/transformer_config.py", "megatron/core/model_parallel_config.py",
    "megatron/core/optimizer/optimizer_config.py", "megatron/core/optimizer/__init__.py",
    "megatron/core/optimizer/distrib_optimizer.py", "megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py",
    "megatron/core/optimizer/fully_sharded_optimizer.py", "megatron/core/transformer/transformer_block.py",
    "megatron/core/transformer/transformer_layer.py", "megatron/core/extensions/transformer_engine.py",
    "megatron/core/pipeline_parallel/fine_grained_activation_offload.py", "megatron/training/arguments.py",
)


def _calls(tree: ast.AST, source: str) -> list[tuple[int, str]]:
    """(line, text) of raise/assert statements and warn/log calls."""
    found = []
    for node in ast.walk(tree):
        warn = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn"
        if isinstance(node, (ast.Raise, ast.Assert)) or warn:
            found.append((node.lineno, ast.get_source_segment(source, node) or ""))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", type=Path, required=True)
    parser.add_argument("--all", action="store_true", help="list covered statements too")
    args = parser.parse_args(argv)
    anchored = {a for rule in ALL_RULES for c in rule.upstream for a in c.anchors().values()}
    messages = [c.message.split("{")[0][:40] for rule in ALL_RULES for c in rule.upstream if c.message]
    scoped = [part[:30] for o in OUT_OF_SCOPE for part in o.message.split(" / ")]
    total = covered = 0
    for version in VERSIONS:
        prof = profile(version)
        for path in FILES:
            run = subprocess.run(["git", "-C", str(args.git), "show", f"{prof.commit}:{path}"], capture_output=True,
                                 text=True)
            if run.returncode:
                continue
            source = run.stdout
            for line, text in _calls(ast.parse(source), source):
                flat = " ".join(text.split())
                if "offload" not in flat.lower():
                    continue
                total += 1
                anchor = prof.anchor(path, line)
                if anchor in anchored:
                    covered += 1
                    status = "rule"
                elif any(m and m in flat for m in messages):
                    covered += 1
                    status = "rule (same message)"
                elif any(s and s in flat for s in scoped):
                    covered += 1
                    status = "out of scope"
                else:
                    status = "UNCOVERED"
                if args.all or status == "UNCOVERED":
                    print(f"{version} {path}:{line} [{status}] {flat[:150]}")
    print(f"{covered} of {total} offload-related statements covered by a rule or listed as out of scope")
    return 0 if covered == total else 1


if __name__ == "__main__":
    raise SystemExit(main())
