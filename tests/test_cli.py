"""The command line through ``main(argv)``: exact output, exit codes, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

from checks.cli import main
from checks.rules import ALL_RULES

EXAMPLES = ROOT / "examples" / "configs"

BROKEN = """model:
  num_layers: 16
  cpu_offloading: true
  cpu_offloading_num_layers: 4
  pipeline_model_parallel_size: 2
optimizer:
  optimizer_cpu_offload: true
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_text_output_is_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(BROKEN)
    code, out, err = run(capsys, "check", str(path), "--mcore-version", "0.16.1", "--assume-defaults")
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        f"{path}:5: ERROR ACT002 cpu_offloading=true with pipeline_model_parallel_size=2: layer-level offloading "
        "needs PP=1",
        "    fix: Set pipeline_model_parallel_size to 1 or keep PP and switch to fine-grained offloading "
        "(cpu_offloading=false, fine_grained_activation_offloading=true, offload_modules=[core_attn, attn_proj])",
        "    unsafe fix: changes the job's layout and parallelism: model.pipeline_model_parallel_size "
        "(--emit-overrides leaves it out unless --all-fixes)",
        '    upstream: megatron-core "Currently there is no support for Pipeline parallelism with CPU offloading" '
        "at NVIDIA/Megatron-LM@55ac7082:megatron/core/transformer/transformer_config.py:1145",
        f"{path}:7: ERROR OPT001 optimizer_cpu_offload=true but optimizer_offload_fraction is left at its default "
        "0.0: nothing is offloaded, and HybridDeviceOptimizer adds fp32 GPU copies of every parameter",
        "    fix: Set optimizer_offload_fraction to the share of optimizer state to offload (0 < f <= 1; 1.0 offloads "
        "all of it)",
        "2 errors, 0 warnings, 0 infos (bridge, megatron-core 0.16.1)",
        "For more on each rule: python -m checks explain ACT002 OPT001",
    ]


def test_json_output_is_the_documented_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(BROKEN)
    code, out, _ = run(capsys, "check", str(path), "--mcore-version", "0.16.1", "--format", "json",
                       "--assume-defaults")
    assert code == 1
    document = json.loads(out)
    assert list(document) == ["status", "mcore_version", "flavor", "files", "findings", "summary", "assumptions"]
    assert document["assumptions"] == {"mcore_version_source": "option", "te_version": None, "nemo_rl_version": None}
    assert document["status"] == "fail" and document["summary"] == {"error": 2, "warning": 0, "info": 0,
                                                                    "unknown": 0}
    assert document["findings"][0] == {
        "rule": "ACT002", "severity": "error", "target": None, "path": "model.pipeline_model_parallel_size",
        "location": {"file": str(path), "line": 5, "arg": None},
        "message": "cpu_offloading=true with pipeline_model_parallel_size=2: layer-level offloading needs PP=1",
        "fix": "Set pipeline_model_parallel_size to 1 or keep PP and switch to fine-grained offloading "
               "(cpu_offloading=false, fine_grained_activation_offloading=true, offload_modules=[core_attn, "
               "attn_proj])",
        "upstream": {"project": "megatron-core",
                     "message": "Currently there is no support for Pipeline parallelism with CPU offloading",
                     "anchor": "NVIDIA/Megatron-LM@55ac7082:megatron/core/transformer/transformer_config.py:1145"},
        "patch": {"model.pipeline_model_parallel_size": 1},
        "safe": False, "unsafe_paths": ["model.pipeline_model_parallel_size"],  # a layout change (checks/fixes.py)
    }
    assert document["findings"][1]["upstream"] is None  # OPT001 goes beyond megatron-core


PREDICTION = ("optimizer_offload_fraction=0.5 asks for 50.0% of the optimizer state, but HybridDeviceOptimizer moves "
              "whole tensors until that much has moved: predicted 50.1% (stage 1) to 50.3% (stage 0) of the dense "
              "state across 2 pipeline stages, on a data-parallel rank that holds whole tensors (with data "
              "parallelism each rank splits its own shards, so ranks differ and can overshoot further)")


def test_clean_config_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    clean = str(EXAMPLES / "bridge/run_config_clean.yaml")
    code, out, err = run(capsys, "check", clean, "--mcore-version", "0.19.2")
    assert (code, err) == (0, "")
    assert out == (f"{clean}:70: INFO OPT022 {PREDICTION}\n"
                   "    fix: Nothing to change; size host memory for the predicted share\n"
                   "0 errors, 0 warnings, 1 info (bridge, megatron-core 0.19.2)\n"
                   "For more on each rule: python -m checks explain OPT022\n")
    code, out, _ = run(capsys, "check", clean, "--format", "json", "--mcore-version", "0.19", "--te-version", "2.12")
    assert json.loads(out) == {
        "status": "ok", "mcore_version": "0.19.2", "flavor": "bridge",
        "files": [{"path": clean, "flavor": "bridge", "mcore_version": "0.19.2", "status": "ok",
                   "summary": {"error": 0, "warning": 0, "info": 1, "unknown": 0}}],
        "findings": [{"rule": "OPT022", "severity": "info", "target": None,
                      "path": "optimizer.optimizer_offload_fraction",
                      "location": {"file": clean, "line": 70, "arg": None}, "message": PREDICTION,
                      "fix": "Nothing to change; size host memory for the predicted share", "upstream": None}],
        "summary": {"error": 0, "warning": 0, "info": 1, "unknown": 0},
        "assumptions": {"mcore_version_source": "option", "te_version": "2.12", "nemo_rl_version": None}}


def test_version_comes_from_installed_megatron_core(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    import checks.versions

    monkeypatch.setattr(checks.versions, "installed_mcore_version", lambda: "0.17.0")
    _, out, _ = run(capsys, "check", str(EXAMPLES / "bridge/run_config_clean.yaml"))
    assert "\n0 errors, 0 warnings, 1 info (bridge, megatron-core 0.17.1 (installed megatron-core 0.17.0))\n" in out
    monkeypatch.setattr(checks.versions, "installed_mcore_version", lambda: None)
    _, out, _ = run(capsys, "check", "--argv=--num-layers 4")
    assert out == "ok: no offloading problems found (megatron-lm, megatron-core 0.19.2 (default))\n"


def test_version_comes_from_the_frameworks_pin(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """Without --mcore-version or an installed megatron-core, a Bridge or NeMo-RL config is checked against the
    Megatron-LM commit the framework pins as a submodule: Bridge@067f987d 3rdparty/Megatron-LM -> 2a75ac12;
    NeMo-RL@7ea279ab 3rdparty/Megatron-Bridge-workspace/Megatron-Bridge -> 8c46dc42, whose 3rdparty/Megatron-LM is
    14346b65 (checks/data/framework_pins.json, tools/framework_pins.py)."""
    import checks.versions

    monkeypatch.setattr(checks.versions, "installed_mcore_version", lambda: None)
    _, out, _ = run(capsys, "check", str(EXAMPLES / "bridge/run_config_clean.yaml"))
    assert "\n0 errors, 0 warnings, 1 info (bridge, megatron-core main@2a75ac12 (pinned by Megatron Bridge main))\n" \
        in out
    nemo_rl = str(EXAMPLES / "nemo-rl/grpo_offload.yaml")
    _, out, _ = run(capsys, "check", nemo_rl, "--format", "json")
    document = json.loads(out)
    assert (document["mcore_version"], document["assumptions"]["mcore_version_source"]) == \
        ("main@14346b65", "pinned by NeMo-RL main")
    # NeMo-RL 0.4.0 and 0.6.0 pin Megatron-LM af73aa2c and d30c3ae5, profiled by regeneration (updating.md)
    for release, pin in (("0.4", "main@af73aa2c"), ("0.6", "main@d30c3ae5")):
        _, out, _ = run(capsys, "check", nemo_rl, "--nemo-rl-version", release, "--format", "json")
        document = json.loads(out)
        assert (document["mcore_version"], document["assumptions"]["mcore_version_source"]) == \
            (pin, f"pinned by NeMo-RL {release}.0")
    # NeMo-RL 0.5.0 pins b73ae5cd, a commit not in the Megatron-LM git: no profile, so the default, and why.
    _, out, _ = run(capsys, "check", nemo_rl, "--nemo-rl-version", "0.5", "--format", "json")
    assert json.loads(out)["assumptions"]["mcore_version_source"] == (
        "default; NeMo-RL 0.5.0 pins Megatron-LM b73ae5cd, which has no profile: pass --mcore-version")
    # The option wins, and a profiled commit can be named by its hash.
    _, out, _ = run(capsys, "check", nemo_rl, "--mcore-version", "2a75ac12", "--format", "json")
    assert json.loads(out)["mcore_version"] == "main@2a75ac12"


def test_the_pinned_commit_refuses_what_main_accepts(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """gdp_qkv joins the allowed offload_modules after the pins: at 14346b65 the allowed set is
    NVIDIA/Megatron-LM@14346b65:megatron/core/transformer/transformer_config.py:1910-1919 (no gdp_qkv), which d98e8a64
    extends (transformer_config.py:2144)."""
    config = tmp_path / "grpo.yaml"
    config.write_text("policy:\n  megatron_cfg:\n    enabled: true\n    fine_grained_activation_offloading: true\n"
                      "    offload_modules: [gdp_qkv]\n    env_vars:\n      NVTE_CPU_OFFLOAD_V1: '1'\n")
    code, out, _ = run(capsys, "check", str(config), "--mcore-version", "main@14346b65")
    assert code == 1 and "FGA003" in out and "NVIDIA/Megatron-LM@14346b65:megatron/core/transformer/" \
        "transformer_config.py:1921" in out
    code, out, _ = run(capsys, "check", str(config), "--mcore-version", "main")
    assert code == 0, out


def test_strict_fails_on_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES / "bridge/override_nested_layout.yaml")
    assert run(capsys, "check", path)[0] == 0
    assert run(capsys, "check", path, "--strict")[0] == 1


def test_emit_overrides_for_each_flavor(capsys: pytest.CaptureFixture[str]) -> None:
    # --all-fixes: the PP and recompute fixes change the job, and are left out without it (tests/test_fix_safety.py)
    code, out, _ = run(capsys, "check", str(EXAMPLES / "bridge/run_config_broken.yaml"), "--emit-overrides",
                       "--all-fixes")
    assert code == 1
    *lines, partial = out.splitlines()
    assert lines == ["model.cpu_offloading_num_layers=30", "model.pipeline_model_parallel_size=1",
                     "model.recompute_granularity=null"]
    # the quoted boolean's fix lets the optimizer rules run, and OPT001 (no fraction) follows: a comment, not applied
    assert partial.startswith("# partial fix of CFG002, not applied: optimizer.optimizer_cpu_offload=true. ")
    assert "OPT001 follows" in partial
    code, out, _ = run(capsys, "check", str(EXAMPLES / "nemo-rl/grpo_broken.yaml"), "--emit-overrides")
    assert out.splitlines() == ["++policy.megatron_cfg.env_vars.NVTE_CPU_OFFLOAD_V1='1'",
                                "policy.megatron_cfg.offload_modules=[core_attn,attn_proj]",
                                "policy.megatron_cfg.optimizer.optimizer_offload_fraction=1.0"]
    code, out, _ = run(capsys, "check", str(EXAMPLES / "megatron-lm/pretrain_gpt_offload.sh"), "--emit-overrides",
                       "--all-fixes")
    assert out.splitlines() == ["# remove --recompute-activations", "--use-precision-aware-optimizer"]


def test_rules_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "rules", "--format", "json")
    assert code == 0 and [r["id"] for r in json.loads(out)] == [r.id for r in ALL_RULES]
    code, out, _ = run(capsys, "rules")
    assert code == 0 and len(out.splitlines()) == len(ALL_RULES)
    code, out, _ = run(capsys, "explain", "act002")
    assert code == 0
    assert out.startswith("ACT002 cpu-offloading-pipeline-parallel (error)\n")
    assert "    0.16.1        NVIDIA/Megatron-LM@55ac7082:megatron/core/transformer/transformer_config.py:1145" in out
    assert "-> example.yaml:5: ERROR ACT002" in out and "Good (bridge, megatron-core 0.19.2):" in out
    code, _, err = run(capsys, "explain", "NOPE01")
    assert code == 2 and err == 'error: no such rule: "NOPE01"; list them with python -m checks rules\n'


BAD_INPUTS = [
    ("malformed.yaml", b"model:\n  cpu_offloading: [true\n", "malformed.yaml:3: invalid YAML"),
    ("latin1.yaml", b"model:\n  name: caf\xe9\n", "latin1.yaml:2: not UTF-8 text (byte 0xe9 at offset 18)"),
    ("empty.yaml", b"", "empty.yaml: empty config (no keys)"),
    ("comments.yaml", b"# nothing\n\n", "comments.yaml: empty config (no keys)"),
    ("list.yaml", b"- model\n", "list.yaml:1: the top level is a list, not a mapping of keys"),
    ("dupe.yaml", b"model:\n  cpu_offloading: true\n  cpu_offloading: false\n",
     "dupe.yaml:3: duplicate key 'cpu_offloading' (first at line 2); OmegaConf refuses duplicate keys"),
    ("bomb.yaml", b"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nmodel: {cpu_offloading: true}\n",
     "YAML aliases expand to more than 100,000 nodes (an alias bomb?); refusing to expand"),
    ("cycle.yaml", b"model: &m\n  self: *m\n", "recursive YAML alias"),
    ("binary.yaml", b"model:\n  x: 1\x00\n", "binary.yaml:2: contains NUL bytes; not a text config"),
    ("unknown.yaml", b"train:\n  train_iters: 3\n", "pass --flavor"),
]


@pytest.mark.parametrize("name,content,expected", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_line_exit_two(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                        content: bytes, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    code, out, err = run(capsys, "check", str(path))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    assert expected in err and str(tmp_path) in err


def test_large_directory_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"model:\n" + b"  # padding\n" * (10 * 1024 * 1024 // 12))
    cases = [(str(big), "big.yaml: file is 10.0 MiB; configs larger than 4 MiB are refused"),
             (str(tmp_path / "nope.yaml"), "nope.yaml: no such file")]
    for path, expected in cases:
        code, out, err = run(capsys, "check", path)
        assert (code, out) == (2, "") and expected in err and err.count("\n") == 1
    # a directory is checked as a tree: the file it cannot read is named, the run goes on and exits 2
    code, out, err = run(capsys, "check", str(tmp_path))
    assert (code, err) == (2, "") and f"error: {big}: file is 10.0 MiB" in out and "1 could not be read" in out


@pytest.mark.parametrize("argv,expected", [
    (["check", "x.yaml", "--flavor", "hydra"], "argument --flavor: invalid choice: 'hydra'"),
    (["check", "--set", "model.cpu_offloading"], "--set #1: 'model.cpu_offloading': "),
    (["check", "--set", "model.offload_modules=[a"], "--set #1: 'model.offload_modules=[a': "),
    (["check", "--set", "model.cpu_offloading=true", "--mcore-version", "0.9"], "unknown megatron-core version '0.9'"),
    (["check"], "nothing to check"),
    (["check", "--argv", "--num-layers 'unterminated"], "--argv: cannot split the command line"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as stop:
        code = main(argv)
        raise SystemExit(code)
    _, err = capsys.readouterr()
    assert stop.value.code == 2 and expected in err and err.count("\n") == 1


def test_examples_command_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "examples")
    assert code == 0
    assert out.rstrip().splitlines()[-1].endswith("examples gave the expected findings")


def test_explain_takes_config_and_lint_rules_together(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "evl006", "ACT008")
    first, second = out.split("\n\nACT008 ", 1)  # in the order given, a blank line apart
    assert code == 0 and first.startswith("EVL006 evals-scripts-run (error)\n")
    assert "Applies to: python -m checks lint" in first and second.startswith("cpu-offloading-last-layer (warning)")


def test_the_parser_is_public_and_runs_nothing() -> None:
    """checks.parser is what the eval linter (EVL006) asks whether a command line is accepted."""
    from checks.parser import build_parser, split_command

    words, command = split_command(["plan", "--gpus", "8", "--", "torchrun", "run.py", "--config", "a b.yaml"])
    assert (words, command) == (["plan", "--gpus", "8"], "torchrun run.py --config 'a b.yaml'")
    args = build_parser().parse_args(words)
    assert (args.command, args.gpus, args.hardware) == ("plan", 8, "h100-sxm")
    assert split_command(["explain", "--", "x"]) == (["explain", "--", "x"], None)  # only check and plan take one
