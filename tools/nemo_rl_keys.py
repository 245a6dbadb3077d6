"""Record the keys NeMo-RL reads under ``megatron_cfg``, per release, from its TypedDicts.

Maintainer tool, not part of the checker: parses ``nemo_rl/models/policy/__init__.py`` of each ref
with ``ast`` (nothing is imported) and writes the field names of ``MegatronConfig`` and
``MegatronOptimizerConfig``. NeMo-RL does not enforce its TypedDicts at run time, so a key outside
``MegatronConfig`` is silently unused, which is what the checker needs to know.

Usage:

    python tools/nemo_rl_keys.py --git /path/to/NVIDIA-NeMo/RL > checks/data/nemo_rl_keys.json
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

REFS: dict[str, str] = {
    "0.4.0": "v0.4.0", "0.5.0": "v0.5.0", "0.6.0": "v0.6.0", "0.7.0": "v0.7.0",
    "main": "7ea279abfbeb698b092856d0dab61e7cf39bc909",
}
CLASSES = ("MegatronConfig", "MegatronOptimizerConfig")
# Keys nemo_rl/models/megatron/setup.py reads with .get() beyond the TypedDict (main only, 7ea279ab).
EXTRA_MAIN = ("moe_router_dtype", "moe_router_load_balancing_type", "moe_router_bias_update_rate",
              "moe_permute_fusion", "layernorm_epsilon", "train_iters", "converter_type")


def typed_dict_fields(source: str, name: str) -> list[str]:
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            fields = [s.target for s in node.body if isinstance(s, ast.AnnAssign)]
            return sorted(t.id for t in fields if isinstance(t, ast.Name))
    raise SystemExit(f"{name} not found")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", type=Path, required=True, help="NVIDIA-NeMo/RL git directory")
    args = parser.parse_args(argv)
    out: dict[str, object] = {"source": "NVIDIA-NeMo/RL", "refs": {}, "megatron_cfg": {}, "optimizer": {}}
    for version, ref in REFS.items():
        run = subprocess.run(["git", "-C", str(args.git), "rev-parse", f"{ref}^{{commit}}"], check=True,
                             capture_output=True, text=True)
        out["refs"][version] = run.stdout.strip()  # type: ignore[index]
        source = subprocess.run(["git", "-C", str(args.git), "show", f"{ref}:nemo_rl/models/policy/__init__.py"],
                                check=True, capture_output=True, text=True).stdout
        keys = typed_dict_fields(source, "MegatronConfig")
        if version == "main":
            keys = sorted(set(keys) | set(EXTRA_MAIN))
        out["megatron_cfg"][version] = keys  # type: ignore[index]
        out["optimizer"][version] = typed_dict_fields(source, "MegatronOptimizerConfig")  # type: ignore[index]
    json.dump(out, sys.stdout, sort_keys=True, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
