"""Rules whose behaviour changes between releases, checked in every version they name.

Each row: the release, the input, and the rules expected with their severity and, for upstream-backed
findings, the anchor of the statement that raises in that release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from checks.catalogue import example_environment, run_example
from checks.config import Environment
from checks.engine import run
from checks.loaders import Request, load
from checks.rules import BY_ID
from checks.rules.base import Example
from checks.versions import NEMO_RL_VERSIONS, nemo_rl_commit

LAYER = "model:\n  num_layers: 8\n  cpu_offloading: true\n  cpu_offloading_num_layers: 2\n"
FG = "model:\n  fine_grained_activation_offloading: true\n  offload_modules: {}\n" \
     "env_vars:\n  NVTE_CPU_OFFLOAD_V1: 1\n"
TC = "megatron/core/transformer/transformer_config.py"

# (version, yaml, te, expected: {rule: (severity, anchor suffix or None)})
CASES = [
    # ACT004: 0.14 checks only enable_cuda_graph; 0.15-0.17 refuse every impl (full_iteration: C6 first);
    # 0.18+ exempt full_iteration.
    # (0.14 also defaults cpu_offloading_weights to true, which TE >= 2.3 ignores: TEX002)
    ("0.14.0", LAYER + "  enable_cuda_graph: true\n", None,
     {"ACT004": ("error", f"{TC}:1269"), "TEX002": ("warning", None)}),
    ("0.14.0", LAYER + "  external_cuda_graph: true\n", None,
     {"ACT004": ("error", None), "TEX002": ("warning", None)}),
    ("0.15.3", LAYER + "  cuda_graph_impl: local\n", None, {"ACT004": ("error", f"{TC}:1396")}),
    ("0.16.1", LAYER + "  cuda_graph_impl: full_iteration\n", None, {"ACT004": ("error", f"{TC}:1717")}),
    ("0.17.1", LAYER + "  cuda_graph_impl: transformer_engine\n", None, {"ACT004": ("error", f"{TC}:1965")}),
    ("0.18.2", LAYER + "  cuda_graph_impl: local\n", None, {"ACT004": ("error", f"{TC}:2244")}),
    ("0.18.2", LAYER + "  cuda_graph_impl: full_iteration\n  cpu_offloading_retain_pinned_cpu_buffers: true\n",
     None, {}),
    ("main", LAYER + "  cuda_graph_impl: local\n  cuda_graph_modules: [full_iteration]\n"
     "  cpu_offloading_retain_pinned_cpu_buffers: true\n", None, {}),
    # C1 moves from line to line; the message carries num_layers.
    ("0.14.0", LAYER.replace("layers: 2", "layers: 8") + "  cpu_offloading_weights: false\n", None,
     {"ACT001": ("error", f"{TC}:811")}),
    ("main", LAYER.replace("layers: 2", "layers: 8"), None, {"ACT001": ("error", f"{TC}:1887")}),
    # Fine-grained offloading exists from 0.16; its module names grow in 0.19 and on main.
    ("0.15.3", FG.format("[core_attn]"), None, {"CFG003": ("error", None)}),
    ("0.18.2", FG.format("[fused_group_mlp]"), None, {"FGA003": ("error", f"{TC}:1673")}),
    ("0.19.2", FG.format("[gdp_qkv]"), None, {"FGA003": ("error", f"{TC}:1864")}),
    ("main", FG.format("[gdp_qkv]"), None, {}),
    # A negative size threshold: accepted (warning) before 0.19, refused from 0.19.
    ("0.18.2", FG.format("[core_attn]").replace("env_vars", "  min_offloaded_tensor_size: -1\nenv_vars"), None,
     {"FGA009": ("warning", None)}),
    ("0.19.2", FG.format("[core_attn]").replace("env_vars", "  min_offloaded_tensor_size: -1\nenv_vars"), None,
     {"FGA009": ("error", f"{TC}:1885")}),
    ("0.17.1", FG.format("[core_attn]").replace("env_vars", "  min_offloaded_tensor_size: -1\nenv_vars"), None,
     {"FGA009": ("warning", None)}),
    # MoE offload inside a recomputed MoE layer: refused from 0.19, accepted (and reported) before.
    ("0.18.2", FG.format("[moe_act]").replace("env_vars", "  num_moe_experts: 4\n  recompute_granularity: "
                                               "selective\n  recompute_modules: [moe]\nenv_vars"), None,
     {"FGA008": ("error", None)}),
    ("0.19.2", FG.format("[moe_act]").replace("env_vars", "  num_moe_experts: 4\n  recompute_granularity: "
                                               "selective\n  recompute_modules: [moe]\nenv_vars"), None,
     {"FGA008": ("error", f"{TC}:1878")}),
    # Fine-grained offloading under CUDA graphs: unchecked in 0.16/0.17, checked from 0.18, with 0.18's message.
    ("0.16.1", FG.format("[core_attn]").replace("env_vars", "  cuda_graph_impl: transformer_engine\nenv_vars"),
     None, {"FGA019": ("error", None)}),
    # (Megatron Bridge refuses local per-module graphs itself; the command line shows megatron-core's rule)
    ("0.18.2", FG.format("[core_attn]").replace("env_vars", "  cuda_graph_impl: local\nenv_vars"), None,
     {"FGA018": ("error", "NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/utils/cuda_graph.py:148")}),
    ("0.18.2", "--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn "
               "--cuda-graph-impl local", "2.9", {"FGA019": ("error", f"{TC}:2352")}),
    ("0.19.2", "--num-layers 8 --num-experts 4 --fine-grained-activation-offloading --offload-modules moe_act "
               "--cuda-graph-impl local --cuda-graph-modules attn", "2.9", {}),
    # The precision-aware optimizer's DistOpt check moved from OptimizerConfig to the optimizer factory on main.
    ("0.19.2", "optimizer:\n  use_precision_aware_optimizer: true\n", None,
     {"OPT008": ("error", "megatron/core/optimizer/optimizer_config.py:434")}),
    ("main", "optimizer:\n  use_precision_aware_optimizer: true\n", None,
     {"OPT008": ("error", "megatron/core/optimizer/__init__.py:1058")}),
    # The copy-back race exists in 0.14/0.15 only.
    ("0.15.3", "optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"
               "  overlap_cpu_optimizer_d2h_h2d: true\n", None, {"OPT018": ("error", None)}),
    ("0.16.1", "optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: 1.0\n"
               "  overlap_cpu_optimizer_d2h_h2d: true\n", None, {}),
    # megatron-core 0.17 with TE 2.5-2.9 cannot build any model.
    ("0.17.1", LAYER, "2.8", {"TEX004": ("error", None)}),
    ("0.18.2", LAYER, "2.8", {}),
    # NVTE_CPU_OFFLOAD_V1: required from TE 2.10, a warning when TE is unknown, nothing before 2.10.
    ("0.19.2", FG.format("[core_attn]").replace("  NVTE_CPU_OFFLOAD_V1: 1\n", "  OTHER: 1\n"), "2.10",
     {"TEX005": ("error", "NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/config.py:2212")}),
    ("0.19.2", FG.format("[core_attn]").replace("  NVTE_CPU_OFFLOAD_V1: 1\n", "  OTHER: 1\n"), None,
     {"TEX005": ("warning", None)}),
    ("0.19.2", FG.format("[core_attn]").replace("  NVTE_CPU_OFFLOAD_V1: 1\n", "  OTHER: 1\n"), "2.9", {}),
]


@pytest.mark.parametrize("version,text,te,expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_per_version(version: str, text: str, te: str | None, expected: dict) -> None:
    flavor = "megatron-lm" if text.startswith("--") else "bridge"
    example = Example(text, flavor, version=version, te=te)
    assert example_environment(example).te_version is None or te is not None
    findings = run_example(BY_ID["ACT001"], example)
    got = {f.rule: (f.severity, f.upstream.anchor if f.upstream else None) for f in findings}
    assert set(got) == set(expected), [(f.rule, f.message) for f in findings]
    for rule, (severity, anchor) in expected.items():
        assert got[rule][0] == severity
        if anchor is None:
            assert got[rule][1] is None
        else:
            assert got[rule][1] is not None and got[rule][1].endswith(anchor), got[rule][1]


@pytest.mark.parametrize("flag,versions", [
    ("--cpu-offloading-num-layers", ("0.16.1", "0.17.1", "0.18.2", "0.19.2", "main")),
    ("--activation-offload-fraction", ("0.19.2", "main")),
    ("--fine-grained-offloading-max-inflight-offloads", ("0.18.2", "0.19.2", "main")),
])
def test_megatron_lm_flags_exist_from_their_release(flag: str, versions: tuple[str, ...]) -> None:
    for version in ("0.14.0", "0.15.3", "0.16.1", "0.17.1", "0.18.2", "0.19.2", "main"):
        example = Example(f"--num-layers 8 {flag} 1", "megatron-lm", version=version, te="2.9")
        rules = {f.rule for f in run_example(BY_ID["ACT001"], example)}
        assert ("CFG003" in rules) == (version not in versions), (version, rules)


# --- NeMo-RL releases ---------------------------------------------------------------------------

NRL = "policy:\n  megatron_cfg:\n    enabled: true\n"
NRL_SETUP = "NVIDIA-NeMo/RL@7ea279ab:nemo_rl/models/megatron/setup.py"
NRL_MOE = NRL + ("    fine_grained_activation_offloading: true\n    offload_modules: [moe_act]\n"
                 "    env_vars:\n      NVTE_CPU_OFFLOAD_V1: '1'\n    model_overrides:\n      num_moe_experts: {}\n")

# (NeMo-RL release, yaml, expected: {rule: (severity, anchor suffix or None)})
NRL_CASES = [
    # Keys a release reads outside its MegatronConfig TypedDict are keys of that release
    # (0.4.0 megatron_policy_worker.py:569-612, 0.6.0 setup.py:502, 0.7.0 setup.py:560/:741/:930).
    ("0.4.0", NRL + "    moe_router_dtype: fp32\n    moe_permute_fusion: false\n    apply_rope_fusion: true\n"
                    "    layernorm_epsilon: 1.0e-6\n    train_iters: 10\n", {}),
    ("0.6.0", NRL + "    moe_router_load_balancing_type: none\n    fp8_cfg:\n      enabled: true\n"
                    "      fp8: hybrid\n", {}),
    ("0.7.0", NRL + "    moe_router_dtype: fp32\n    moe_permute_fusion: true\n    train_iters: 10\n", {}),
    # A key of a later release only: that release drops it.
    ("0.7.0", NRL + "    cuda_graph_modules: [attn]\n", {"CFG003": ("error", None)}),
    # Every key present under megatron_cfg counts as first-class (setup.py:760), even one NeMo-RL
    # otherwise ignores there: with the same key in model_overrides it raises instead of dropping it.
    ("main", NRL + "    cpu_offloading: true\n    model_overrides:\n      cpu_offloading: true\n"
                   "      cpu_offloading_num_layers: 1\n      num_layers: 8\n",
     {"CFG006": ("error", f"{NRL_SETUP}:772")}),
    ("main", NRL + "    cpu_offloading: true\n", {"CFG001": ("error", None)}),
    # NeMo-RL refuses MoE-only modules when num_moe_experts is None, and only then (setup.py:1199-1203).
    ("main", NRL_MOE.format("null"), {"FGA013": ("error", f"{NRL_SETUP}:1203")}),
    ("main", NRL_MOE.format("0"), {"FGA013": ("warning", None)}),
]


@pytest.mark.parametrize("release,text,expected", NRL_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(NRL_CASES)])
def test_nemo_rl_rule_per_release(release: str, text: str, expected: dict) -> None:
    findings = run_example(BY_ID["CFG006"], Example(text, "nemo-rl", nemo_rl=release))
    got = {f.rule: (f.severity, f.upstream.anchor if f.upstream else None) for f in findings}
    assert set(got) == set(expected), [(f.rule, f.message) for f in findings]
    for rule, (severity, anchor) in expected.items():
        assert got[rule][0] == severity
        assert (got[rule][1] or "").endswith(anchor or "") and (got[rule][1] is None) == (anchor is None)


def test_nemo_rl_stray_key_in_both_places_is_reported_as_the_conflict() -> None:
    text = NRL_CASES[4][1]
    (finding,) = run_example(BY_ID["CFG006"], Example(text, "nemo-rl", nemo_rl="main"))
    assert "megatron_cfg.cpu_offloading is also set" in finding.message
    assert finding.fix.startswith("Delete megatron_cfg.cpu_offloading")
    assert "drops" not in finding.message


FIXTURES = Path(__file__).parent / "fixtures" / "nemo-rl"
NEMO_RL_GIT = os.environ.get("NEMO_RL_GIT")
NEEDS_GIT = pytest.mark.skipif(not NEMO_RL_GIT, reason="set NEMO_RL_GIT to an NVIDIA-NeMo/RL git directory "
                                                      "(a bare mirror will do) to compare with upstream")


@pytest.mark.parametrize("enabled", [False, True], ids=["as-shipped", "megatron-enabled"])
@pytest.mark.parametrize("release", NEMO_RL_VERSIONS)
def test_nemo_rl_own_example_config_passes_with_its_release(release: str, enabled: bool) -> None:
    """NeMo-RL's examples/configs/grpo_math_1B.yaml of each release, checked with that --nemo-rl-version."""
    sets = ("policy.megatron_cfg.enabled=true",) if enabled else ()
    request = Request((str(FIXTURES / release / "grpo_math_1B.yaml"),), sets, None, "nemo-rl",
                      environment=Environment(nemo_rl_version=release))
    errors = [(f.rule, f.message) for f in run(load(request)) if f.severity == "error"]
    assert errors == []


@NEEDS_GIT
@pytest.mark.parametrize("release", NEMO_RL_VERSIONS)
def test_nemo_rl_example_fixtures_are_upstream_bytes(release: str) -> None:
    upstream = subprocess.run(["git", "-C", str(NEMO_RL_GIT), "show",
                               f"{nemo_rl_commit(release)}:examples/configs/grpo_math_1B.yaml"],
                              check=True, capture_output=True).stdout
    assert (FIXTURES / release / "grpo_math_1B.yaml").read_bytes() == upstream


@NEEDS_GIT
def test_nemo_rl_key_table_is_what_the_tool_derives() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "nemo_rl_keys.py"), "--git", str(NEMO_RL_GIT)],
                          check=True, capture_output=True, text=True)
    on_disk = (ROOT / "checks" / "data" / "nemo_rl_keys.json").read_text(encoding="utf-8")
    assert json.loads(done.stdout) == json.loads(on_disk), \
        "run: python tools/nemo_rl_keys.py --git $NEMO_RL_GIT > checks/data/nemo_rl_keys.json"
