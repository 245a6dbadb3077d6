"""The checker must start fast on a login node: it never imports torch, megatron, Hydra or (unless needed) OmegaConf."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

PROBE = """
import sys
from checks.cli import main
code = main({argv!r})
heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {{'torch', 'megatron', 'hydra', 'omegaconf', 'antlr4',
                                                            'numpy', 'transformer_engine'}})
print('HEAVY', heavy, 'CODE', code)
"""


def heavy_modules(*argv: str) -> str:
    result = subprocess.run([sys.executable, "-c", PROBE.format(argv=list(argv))], cwd=ROOT, capture_output=True,
                            text=True, check=True)
    return result.stdout.strip().splitlines()[-1]


def test_checking_bridge_and_megatron_lm_loads_nothing_heavy() -> None:
    assert heavy_modules("check", "examples/configs/bridge/run_config_broken.yaml", "--format", "json") == \
        "HEAVY [] CODE 1"
    assert heavy_modules("check", "examples/configs/megatron-lm/pretrain_gpt_offload.sh") == "HEAVY [] CODE 1"
    assert heavy_modules("rules") == "HEAVY [] CODE 0"


def test_nemo_rl_interpolation_loads_omegaconf_only() -> None:
    found = heavy_modules("check", "examples/configs/nemo-rl/grpo_offload.yaml")
    assert found == "HEAVY ['antlr4', 'omegaconf'] CODE 0"


def test_entry_point_runs_as_a_module() -> None:
    result = subprocess.run([sys.executable, "-m", "checks", "check", "examples/configs/bridge/run_config_clean.yaml"],
                            cwd=ROOT, capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (0, "")
    assert "\n0 errors, 0 warnings, 1 info (bridge, megatron-core" in result.stdout
