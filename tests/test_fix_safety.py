"""Fix safety: a patch that changes the job beyond offloading is marked, and --emit-overrides leaves it out.

Safety is derived in one place (``checks/fixes.py``, from the canonical paths a patch sets), never marked by a
rule; these tests check the derivation, the outputs that show it, and that the list of offload knobs names
real fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from schemas import validate_output

from checks.cli import main
from checks.config import split_path
from checks.engine import run
from checks.fixes import OFFLOAD_KNOBS, describe, kind, unsafe_paths
from checks.loaders import Request, load
from checks.rules.base import ERROR, Example, Hit, Rule
from checks.versions import VERSIONS, profile

EXAMPLES = ROOT / "examples" / "configs"
BROKEN = str(EXAMPLES / "bridge/run_config_broken.yaml")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_unsafe_paths_are_those_beyond_the_offload_knobs() -> None:
    assert unsafe_paths({"model.cpu_offloading": False, "model.offload_modules": ["core_attn"]}) == ()
    assert unsafe_paths({"model.cpu_offloading_num_layers": 3, "model.pipeline_model_parallel_size": 1}) == \
        ("model.pipeline_model_parallel_size",)
    assert unsafe_paths({"model.some_future_field": 1}) == ("model.some_future_field",)  # unlisted: unsafe
    assert kind("model.recompute_granularity") == "recompute"
    assert kind("optimizer.exp_avg_dtype") == "precision"
    assert kind("model.some_future_field") == "settings beyond offloading"
    assert describe(["model.pipeline_model_parallel_size", "model.recompute_num_layers"]) == \
        "changes the job's layout and parallelism: model.pipeline_model_parallel_size; recompute: " \
        "model.recompute_num_layers"


def test_every_offload_knob_is_a_field_of_some_release() -> None:
    """A misspelt knob would never match a patch and would only make a safe fix look unsafe."""
    def fields() -> Iterator[str]:
        for version in VERSIONS:
            for path in OFFLOAD_KNOBS:
                section, name = split_path(path)
                if section == "env" or profile(version).field(section, name) is not None:
                    yield path
    assert set(fields()) == OFFLOAD_KNOBS


def _rule(rule_id: str, patch: dict[str, object]) -> Rule:
    def check(ctx: object) -> Iterator[Hit]:
        yield Hit("model.cpu_offloading", "always", "apply the patch", patch=patch)
    example = Example("model: {}\n")
    return Rule(rule_id, "test-rule", ERROR, check, example, example)


def test_the_engine_derives_safety_from_the_patch_paths(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("model:\n  num_layers: 4\n  cpu_offloading: true\n")
    configs = load(Request((str(path),), version="0.16.1", assume_defaults=True))
    offload, layout = run(configs, [_rule("TST001", {"model.cpu_offloading_num_layers": 2}),
                                    _rule("TST002", {"model.cpu_offloading_num_layers": 2,
                                                     "model.tensor_model_parallel_size": 1})])
    assert (offload.rule, offload.safe, offload.unsafe_paths) == ("TST001", True, ())
    assert (layout.rule, layout.safe, layout.unsafe_paths) == ("TST002", False, ("model.tensor_model_parallel_size",))


def test_pipeline_and_recompute_fixes_are_left_out_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "check", BROKEN, "--mcore-version", "0.16.1", "--emit-overrides")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "model.cpu_offloading_num_layers=30"  # ACT001: an offload knob, printed
    assert lines[1:3] == [
        "# left out (unsafe: changes the job's layout and parallelism: model.pipeline_model_parallel_size) "
        "ACT002: model.pipeline_model_parallel_size=1",
        "# left out (unsafe: changes the job's recompute: model.recompute_granularity) ACT003: "
        "model.recompute_granularity=null"]
    assert lines[3].startswith("# partial fix of CFG002")
    assert lines[-1] == "# --all-fixes prints the fixes left out"
    code, out, _ = cli(capsys, "check", BROKEN, "--mcore-version", "0.16.1", "--emit-overrides", "--all-fixes")
    assert out.splitlines()[:3] == ["model.cpu_offloading_num_layers=30", "model.pipeline_model_parallel_size=1",
                                    "model.recompute_granularity=null"]
    assert "# left out" not in out and "--all-fixes prints" not in out


def test_applying_the_default_output_fixes_only_the_safe_findings(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = cli(capsys, "check", BROKEN, "--mcore-version", "0.16.1", "--emit-overrides")
    sets = [arg for line in out.splitlines() if not line.startswith("#") for arg in ("--set", line)]
    _, out, _ = cli(capsys, "check", BROKEN, "--mcore-version", "0.16.1", "--format", "json", *sets)
    rules = {f["rule"] for f in json.loads(out)["findings"]}
    assert "ACT001" not in rules and {"ACT002", "ACT003"} <= rules  # the job's layout and recompute untouched


def test_offload_only_fixes_print_the_same_with_or_without_all_fixes(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "nemo-rl/grpo_broken.yaml")
    _, plain, _ = cli(capsys, "check", path, "--emit-overrides")
    _, every, _ = cli(capsys, "check", path, "--emit-overrides", "--all-fixes")
    assert plain == every and "policy.megatron_cfg.offload_modules=[core_attn,attn_proj]" in plain
    assert "#" not in plain


def test_megatron_lm_left_out_fixes_name_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "megatron-lm/pretrain_gpt_offload.sh")
    _, out, _ = cli(capsys, "check", path, "--emit-overrides")
    assert out.splitlines() == [
        "# left out (unsafe: changes the job's recompute: model.recompute_granularity) ACT003: remove "
        "--recompute-activations",
        "# left out (unsafe: changes the job's precision: optimizer.use_precision_aware_optimizer) OPT005: "
        "--use-precision-aware-optimizer",
        "# --all-fixes prints the fixes left out"]


def test_json_and_text_mark_each_patch(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = cli(capsys, "check", BROKEN, "--mcore-version", "0.16.1", "--format", "json")
    findings = {f["rule"]: f for f in validate_output("check", out)["findings"]}
    assert (findings["ACT001"]["safe"], "unsafe_paths" in findings["ACT001"]) == (True, False)
    assert findings["ACT002"]["safe"] is False
    assert findings["ACT002"]["unsafe_paths"] == ["model.pipeline_model_parallel_size"]
    assert findings["CFG002"]["safe"] is True and "partial" in findings["CFG002"]  # a knob, not enough alone
    _, text, _ = cli(capsys, "check", BROKEN, "--mcore-version", "0.16.1")
    marks = [line for line in text.splitlines() if line.startswith("    unsafe fix: ")]
    assert marks == [
        "    unsafe fix: changes the job's layout and parallelism: model.pipeline_model_parallel_size "
        "(--emit-overrides leaves it out unless --all-fixes)",
        "    unsafe fix: changes the job's recompute: model.recompute_granularity "
        "(--emit-overrides leaves it out unless --all-fixes)"]


def test_all_fixes_without_emit_overrides_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "check", BROKEN, "--all-fixes")
    assert (code, out) == (2, "")
    assert err.startswith("error: --all-fixes: goes with --emit-overrides") and err.count("\n") == 1
