"""Rules whose behaviour changes between releases, checked in every version they name.

Each row: the release, the input, and the rules expected with their severity and, for upstream-backed
findings, the upstream check whose statement raises in that release (its anchor there comes from
``checks/data/anchors.json``; the tests at the end compare that data with upstream's source).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from checks.anchors import UpstreamCheck
from checks.catalogue import example_environment, run_example
from checks.config import Environment
from checks.engine import run
from checks.loaders import Request, load
from checks.rules import ALL_RULES, BY_ID
from checks.rules import upstream as up
from checks.rules.base import Example
from checks.versions import (
    DEFAULT_VERSION,
    NEMO_RL_VERSIONS,
    VERSIONS,
    anchor_table,
    has_feature,
    nemo_rl_commit,
    nemo_rl_has_feature,
    offload_modules,
)
from checks.versions import profile as mcore_profile

sys.path.insert(0, str(ROOT / "tools"))
import verify_anchors

LAYER = "model:\n  num_layers: 8\n  cpu_offloading: true\n  cpu_offloading_num_layers: 2\n"
FG = "model:\n  fine_grained_activation_offloading: true\n  offload_modules: {}\n" \
     "env_vars:\n  NVTE_CPU_OFFLOAD_V1: 1\n"

# (version, yaml, te, expected: {rule: (severity, the upstream check cited, or None)})
CASES = [
    # ACT004: 0.14 checks only enable_cuda_graph; 0.15-0.17 refuse every impl (full_iteration: C6 first);
    # 0.18+ exempt full_iteration.
    # (0.14 also defaults cpu_offloading_weights to true, which TE >= 2.3 ignores: TEX002)
    ("0.14.0", LAYER + "  enable_cuda_graph: true\n", None,
     {"ACT004": ("error", up.C4_CUDA_GRAPHS), "TEX002": ("warning", None)}),
    ("0.14.0", LAYER + "  external_cuda_graph: true\n", None,
     {"ACT004": ("error", None), "TEX002": ("warning", None)}),
    ("0.15.3", LAYER + "  cuda_graph_impl: local\n", None, {"ACT004": ("error", up.C4_CUDA_GRAPHS)}),
    ("0.16.1", LAYER + "  cuda_graph_impl: full_iteration\n", None, {"ACT004": ("error", up.C6_GRAPH_IMPL)}),
    ("0.17.1", LAYER + "  cuda_graph_impl: transformer_engine\n", None, {"ACT004": ("error", up.C4_CUDA_GRAPHS)}),
    ("0.18.2", LAYER + "  cuda_graph_impl: local\n", None, {"ACT004": ("error", up.C4_CUDA_GRAPHS)}),
    ("0.18.2", LAYER + "  cuda_graph_impl: full_iteration\n  cpu_offloading_retain_pinned_cpu_buffers: true\n",
     None, {}),
    ("main", LAYER + "  cuda_graph_impl: local\n  cuda_graph_modules: [full_iteration]\n"
     "  cpu_offloading_retain_pinned_cpu_buffers: true\n", None, {}),
    # C1 moves from line to line; the message carries num_layers.
    ("0.14.0", LAYER.replace("layers: 2", "layers: 8") + "  cpu_offloading_weights: false\n", None,
     {"ACT001": ("error", up.C1_NUM_LAYERS)}),
    ("main", LAYER.replace("layers: 2", "layers: 8"), None, {"ACT001": ("error", up.C1_NUM_LAYERS)}),
    # Fine-grained offloading exists from 0.16; its module names grow in 0.19 and on main.
    ("0.15.3", FG.format("[core_attn]"), None, {"CFG003": ("error", None)}),
    ("0.18.2", FG.format("[fused_group_mlp]"), None, {"FGA003": ("error", up.F3_MODULES_INVALID)}),
    ("0.19.2", FG.format("[gdp_qkv]"), None, {"FGA003": ("error", up.F3_MODULES_INVALID)}),
    ("main", FG.format("[gdp_qkv]"), None, {}),
    # A negative size threshold: accepted (warning) before 0.19, refused from 0.19.
    ("0.18.2", FG.format("[core_attn]").replace("env_vars", "  min_offloaded_tensor_size: -1\nenv_vars"), None,
     {"FGA009": ("warning", None)}),
    ("0.19.2", FG.format("[core_attn]").replace("env_vars", "  min_offloaded_tensor_size: -1\nenv_vars"), None,
     {"FGA009": ("error", up.F7_MIN_SIZE)}),
    ("0.17.1", FG.format("[core_attn]").replace("env_vars", "  min_offloaded_tensor_size: -1\nenv_vars"), None,
     {"FGA009": ("warning", None)}),
    # MoE offload inside a recomputed MoE layer: refused from 0.19, accepted (and reported) before.
    ("0.18.2", FG.format("[moe_act]").replace("env_vars", "  num_moe_experts: 4\n  recompute_granularity: "
                                               "selective\n  recompute_modules: [moe]\nenv_vars"), None,
     {"FGA008": ("error", None)}),
    ("0.19.2", FG.format("[moe_act]").replace("env_vars", "  num_moe_experts: 4\n  recompute_granularity: "
                                               "selective\n  recompute_modules: [moe]\nenv_vars"), None,
     {"FGA008": ("error", up.F6_MOE_RECOMPUTE)}),
    # Fine-grained offloading under CUDA graphs: unchecked in 0.16/0.17, checked from 0.18, with 0.18's message.
    ("0.16.1", FG.format("[core_attn]").replace("env_vars", "  cuda_graph_impl: transformer_engine\nenv_vars"),
     None, {"FGA019": ("error", None)}),
    # (Megatron Bridge refuses local per-module graphs itself; the command line shows megatron-core's rule)
    ("0.18.2", FG.format("[core_attn]").replace("env_vars", "  cuda_graph_impl: local\nenv_vars"), None,
     {"FGA018": ("error", up.BRIDGE_LOCAL_GRAPH)}),
    ("0.18.2", "--num-layers 8 --fine-grained-activation-offloading --offload-modules core_attn "
               "--cuda-graph-impl local", "2.9", {"FGA019": ("error", up.G3_IMPL_018)}),
    ("0.19.2", "--num-layers 8 --num-experts 4 --fine-grained-activation-offloading --offload-modules moe_act "
               "--cuda-graph-impl local --cuda-graph-modules attn", "2.9", {}),
    # The precision-aware optimizer's DistOpt check moved from OptimizerConfig to the optimizer factory on main.
    ("0.19.2", "optimizer:\n  use_precision_aware_optimizer: true\n", None,
     {"OPT008": ("error", up.O2_PAO_DISTOPT)}),
    ("main", "optimizer:\n  use_precision_aware_optimizer: true\n", None,
     {"OPT008": ("error", up.I4_PAO_DISTOPT)}),
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
     {"TEX005": ("error", up.BRIDGE_NVTE_V1)}),
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
    for rule, (severity, check) in expected.items():
        assert got[rule][0] == severity
        assert got[rule][1] == _anchor_in(check, version, None), (rule, got[rule][1])


def _anchor_in(check: UpstreamCheck | None, version: str, nemo_rl: str | None) -> str | None:
    """The anchor a finding citing ``check`` carries in ``version`` (which must have one)."""
    if check is None:
        return None
    anchor = check.anchor(nemo_rl if check.project == "nemo-rl" and nemo_rl else version)
    assert anchor is not None, f"{check.key} has no anchor in {version}"
    return anchor


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
NRL_MOE = NRL + ("    fine_grained_activation_offloading: true\n    offload_modules: [moe_act]\n"
                 "    env_vars:\n      NVTE_CPU_OFFLOAD_V1: '1'\n    model_overrides:\n      num_moe_experts: {}\n")

# (NeMo-RL release, yaml, expected: {rule: (severity, the upstream check cited, or None)})
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
     {"CFG006": ("error", up.NRL_OVERRIDE_CONFLICT)}),
    ("main", NRL + "    cpu_offloading: true\n", {"CFG001": ("error", None)}),
    # NeMo-RL refuses MoE-only modules when num_moe_experts is None, and only then (setup.py:1199-1203).
    ("main", NRL_MOE.format("null"), {"FGA013": ("error", up.NRL_MOE_ONLY)}),
    ("main", NRL_MOE.format("0"), {"FGA013": ("warning", None)}),
]


@pytest.mark.parametrize("release,text,expected", NRL_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(NRL_CASES)])
def test_nemo_rl_rule_per_release(release: str, text: str, expected: dict) -> None:
    findings = run_example(BY_ID["CFG006"], Example(text, "nemo-rl", nemo_rl=release))
    got = {f.rule: (f.severity, f.upstream.anchor if f.upstream else None) for f in findings}
    assert set(got) == set(expected), [(f.rule, f.message) for f in findings]
    for rule, (severity, check) in expected.items():
        assert got[rule][0] == severity
        assert got[rule][1] == _anchor_in(check, DEFAULT_VERSION, release), (rule, got[rule][1])


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


# --- the version data (checks/data/anchors.json) ---------------------------------------------------

ANCHORS = ROOT / "checks" / "data" / "anchors.json"


def test_anchor_data_is_in_canonical_form() -> None:
    text = ANCHORS.read_text(encoding="utf-8")
    assert verify_anchors.canonical(json.loads(text)) == text, "run tools/verify_anchors.py ... --write"


def test_every_check_is_in_the_data_under_its_name() -> None:
    names = {}
    for name, value in vars(up).items():
        if isinstance(value, UpstreamCheck):
            names[value.key] = name
        elif isinstance(value, dict):
            names.update({c.key: f"{name}.{k}" for k, c in value.items() if isinstance(c, UpstreamCheck)})
    assert all(key == name for key, name in names.items()), [(k, n) for k, n in names.items() if k != n]
    assert set(names) == set(anchor_table()["anchors"]), "checks/data/anchors.json is stale: regenerate it"


def test_every_cited_check_is_anchored_where_its_rule_applies() -> None:
    """A megatron-core check a rule cites exists in at least one version the rule applies to (none is dead);
    a fixed one (one commit) has its anchor."""
    dead = []
    for rule in ALL_RULES:
        for check in rule.upstream:
            if check.fixed is not None or check.project == "nemo-rl":
                if not check.anchors():
                    dead.append((rule.id, check.key))
            elif not set(check.versions()) & set(rule.versions()):
                dead.append((rule.id, check.key))
    assert dead == []


def test_switches_are_recorded_for_every_version() -> None:
    table = anchor_table()
    for feature in table["features"].values():
        assert set(feature["versions"]) == set(VERSIONS)
    for feature in table["nemo_rl_features"].values():
        assert set(feature["versions"]) == set(NEMO_RL_VERSIONS)
    with pytest.raises(KeyError, match="no megatron-core feature"):
        has_feature("0.19.2", "no-such-feature")


def test_offload_module_sets_exist_exactly_where_fine_grained_offloading_does() -> None:
    for version in VERSIONS:
        has_switch = mcore_profile(version).field("model", "fine_grained_activation_offloading") is not None
        assert bool(offload_modules(version)) == has_switch, version


def test_switches_agree_with_the_checks_they_derive_from() -> None:
    # F5 (gdp_qkv with gdp_in_proj recompute) is only checked where gdp_qkv can be offloaded at all.
    for version in VERSIONS:
        assert not has_feature(version, "gdp_qkv_recompute_check") or "gdp_qkv" in offload_modules(version)
        assert has_feature(version, "pao_distopt_in_factory") == (up.O2_PAO_DISTOPT.anchor(version) is None)
    assert [nemo_rl_has_feature(v, "offload_fraction_must_be_one") for v in NEMO_RL_VERSIONS] == \
        [up.NRL_LEGACY_FRACTION.anchor(v) is not None for v in NEMO_RL_VERSIONS]


# The generator on sources written here: what it matches, refuses and reads.
_SOURCE = '''
class TransformerConfig:
    def __post_init__(self):
        allowed_modules = {"recompute_only"}
        if self.cpu_offloading:
            raise ValueError(f"CPU offloading can be done only for layers less than {self.num_layers}")
        if self.graphs:
            raise ValueError("twice")
        allowed_modules = {"core_attn", "attn_proj"}
        invalid_modules = set(self.offload_modules) - allowed_modules
        assert self.offload_modules is not None and len(self.offload_modules) > 0

    def __exit__(self):
        raise ValueError("twice")
'''


def _reader(text: str) -> verify_anchors.Reader:
    source = verify_anchors.Source(text)
    return lambda repo, commit, path: source if path == "f.py" else None


def _check(message: str | None, **kw: object) -> UpstreamCheck:
    return UpstreamCheck("K", "megatron-core", "ValueError", message, "config", "f.py", **kw)  # type: ignore[arg-type]


def _lines(check: UpstreamCheck) -> list[int]:
    return [loc.node.lineno for _, loc in verify_anchors.locate(_reader(_SOURCE), "r", "c", check)]


def test_generator_matches_a_template_with_placeholders_and_nothing_else() -> None:
    assert _lines(_check("CPU offloading can be done only for layers less than {num_layers}")) == [6]
    assert _lines(_check("CPU offloading can be done only for layers more than {num_layers}")) == []
    assert _lines(_check("twice")) == [8, 14]  # the tool refuses this one (below)
    assert _lines(_check("twice", within="__exit__")) == [14]
    assert _lines(_check(None, evidence="is not None and ... len(self.offload_modules) > 0")) == [11]


def test_generator_refuses_a_check_that_matches_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_anchors, "upstream_checks", lambda: {"K": _check("twice")})
    with pytest.raises(verify_anchors.Ambiguous, match="2 statements carry it"):
        verify_anchors.derive_anchors(_reader(_SOURCE), frozenset({"NVIDIA/Megatron-LM"}), {})
    # a repository not given keeps the data it had
    kept = verify_anchors.derive_anchors(_reader(_SOURCE), frozenset(), {"K": {"0.19.2": "f.py:3"}})
    assert kept == {"K": {"0.19.2": "f.py:3"}}


def test_generator_reads_the_set_offload_modules_are_checked_against() -> None:
    assert verify_anchors.allowed_offload_modules(verify_anchors.Source(_SOURCE)) == ["attn_proj", "core_attn"]
    assert verify_anchors.allowed_offload_modules(verify_anchors.Source("class A:\n    pass\n")) is None


MEGATRON_LM_GIT = os.environ.get("MEGATRON_LM_GIT")


@pytest.mark.skipif(not MEGATRON_LM_GIT, reason="set MEGATRON_LM_GIT (and NEMO_RL_GIT, BRIDGE_GIT for their "
                                                "checks) to git directories to compare the data with upstream")
def test_anchor_data_is_what_upstream_source_gives() -> None:
    repos = {"NVIDIA/Megatron-LM": Path(str(MEGATRON_LM_GIT))}
    if NEMO_RL_GIT:
        repos["NVIDIA-NeMo/RL"] = Path(NEMO_RL_GIT)
    if os.environ.get("BRIDGE_GIT"):
        repos["NVIDIA-NeMo/Megatron-Bridge"] = Path(os.environ["BRIDGE_GIT"])
    # repositories not given keep the committed entries, so a partial set still compares what it can
    assert verify_anchors.render_anchors(repos) == ANCHORS.read_text(encoding="utf-8"), \
        "run: python tools/verify_anchors.py --git $MEGATRON_LM_GIT --repo ... --write"
