"""Record which Megatron-LM commit each framework release installs.

Maintainer tool, not part of the checker. NeMo-RL and Megatron Bridge do not install a megatron-core
release: they pin a Megatron-LM commit as a git submodule, and install it editable. This tool reads the
submodule pins (git tree entries of mode 160000; nothing is checked out):

- NeMo-RL 0.4.0-0.6.0: ``3rdparty/Megatron-LM-workspace/Megatron-LM``;
- NeMo-RL 0.7.0 and later: ``3rdparty/Megatron-Bridge-workspace/Megatron-Bridge``, then that Bridge commit's
  ``3rdparty/Megatron-LM`` (NeMo-RL's uv.lock maps megatron-core to that path);
- Megatron Bridge: ``3rdparty/Megatron-LM``.

With ``--megatron-lm`` it also records the megatron-core version each pin reports
(``megatron/core/package_info.py``). A pin whose commit a given repository lacks is written as null with the
reason, so the checker can say it has no profile for it instead of guessing.

Output (``checks/data/framework_pins.json``)::

    {"nemo-rl": {"<release>": {"ref": sha, "megatron_lm": sha | null, "via": "...", "package_version": "0.20.0"}},
     "bridge": {"main": {...}}}

Usage:

    python tools/framework_pins.py --nemo-rl /path/to/RL.git --bridge /path/to/Megatron-Bridge.git \\
        --megatron-lm /path/to/Megatron-LM.git > checks/data/framework_pins.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

# The framework releases the checker knows: NeMo-RL's as in tools/nemo_rl_keys.py, Bridge's pinned main.
NEMO_RL_REFS: dict[str, str] = {
    "0.4.0": "v0.4.0", "0.5.0": "v0.5.0", "0.6.0": "v0.6.0", "0.7.0": "v0.7.0",
    "main": "7ea279abfbeb698b092856d0dab61e7cf39bc909",
}
BRIDGE_REFS: dict[str, str] = {"main": "067f987df03b8355b03192d88d70f1709fedf51a"}

_NEMO_RL_MLM = "3rdparty/Megatron-LM-workspace/Megatron-LM"
_NEMO_RL_BRIDGE = "3rdparty/Megatron-Bridge-workspace/Megatron-Bridge"
_BRIDGE_MLM = "3rdparty/Megatron-LM"


def _git(repo: Path, *args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def gitlink(repo: Path, ref: str, path: str) -> str | None:
    """The commit a submodule at ``path`` is pinned to in ``ref``, or None when there is no such submodule."""
    line = _git(repo, "ls-tree", ref, path)
    if not line:
        return None
    mode, kind, sha = line.split("\t")[0].split()
    return sha if mode == "160000" and kind == "commit" else None


def package_version(megatron_lm: Path | None, sha: str) -> str | None:
    if megatron_lm is None:
        return None
    source = _git(megatron_lm, "show", f"{sha}:megatron/core/package_info.py")
    if source is None:
        return None
    parts = {k: v for k, v in re.findall(r"^(MAJOR|MINOR|PATCH)\s*=\s*(\d+)", source, re.M)}
    return ".".join(parts[k] for k in ("MAJOR", "MINOR", "PATCH")) if len(parts) == 3 else None


def _pin(sha: str | None, via: str, megatron_lm: Path | None) -> dict[str, Any]:
    reported = package_version(megatron_lm, sha) if sha else None
    if sha and megatron_lm is not None and reported is None:
        via += " (commit not in the Megatron-LM git given)"
    return {"megatron_lm": sha, "via": via, "package_version": reported}


def nemo_rl_pin(nemo_rl: Path, ref: str, bridge: Path | None, megatron_lm: Path | None) -> dict[str, Any]:
    direct = gitlink(nemo_rl, ref, _NEMO_RL_MLM)
    if direct is not None:
        return _pin(direct, _NEMO_RL_MLM, megatron_lm)
    bridge_sha = gitlink(nemo_rl, ref, _NEMO_RL_BRIDGE)
    if bridge_sha is None:
        return _pin(None, "no Megatron-LM or Megatron-Bridge submodule", megatron_lm)
    via = f"{_NEMO_RL_BRIDGE}@{bridge_sha[:8]} -> {_BRIDGE_MLM}"
    if bridge is None or _git(bridge, "cat-file", "-t", bridge_sha) != "commit":
        return _pin(None, via + " (Bridge commit not in the Bridge git given)", megatron_lm)
    return _pin(gitlink(bridge, bridge_sha, _BRIDGE_MLM), via, megatron_lm)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nemo-rl", type=Path, required=True, help="NVIDIA-NeMo/RL git directory")
    parser.add_argument("--bridge", type=Path, required=True, help="NVIDIA-NeMo/Megatron-Bridge git directory")
    parser.add_argument("--megatron-lm", type=Path, help="NVIDIA/Megatron-LM git directory (package versions)")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"nemo-rl": {}, "bridge": {}}
    for version, ref in NEMO_RL_REFS.items():
        sha = _git(args.nemo_rl, "rev-parse", f"{ref}^{{commit}}")
        if sha is None:
            raise SystemExit(f"NeMo-RL {ref} not found in {args.nemo_rl}")
        out["nemo-rl"][version] = {"ref": sha, **nemo_rl_pin(args.nemo_rl, sha, args.bridge, args.megatron_lm)}
    for version, ref in BRIDGE_REFS.items():
        sha = _git(args.bridge, "rev-parse", f"{ref}^{{commit}}")
        if sha is None:
            raise SystemExit(f"Megatron Bridge {ref} not found in {args.bridge}")
        out["bridge"][version] = {"ref": sha, **_pin(gitlink(args.bridge, sha, _BRIDGE_MLM), _BRIDGE_MLM,
                                                     args.megatron_lm)}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
