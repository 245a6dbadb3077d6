"""Inputs an adversarial user gives: each is read once, refused with one line (exit 2), or reported; never a
traceback, a hang, or an input dropped without a word. Each case reproduces a defect found by trying them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from checks.cli import main

MLM_SCRIPT = ROOT / "examples" / "configs" / "megatron-lm" / "pretrain_gpt_offload.sh"
BRIDGE_DUMP = ROOT / "examples" / "configs" / "bridge" / "run_config_broken.yaml"


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of an exit-2 run (a usage error leaves through argparse's SystemExit)."""
    try:
        code = main(list(argv))
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, out, err)
    assert err.startswith("error: ")
    return err


@pytest.mark.parametrize("name", ["/dev/stdin", "-"])
def test_piped_input_is_read_once(name: str) -> None:
    """Flavor detection used to consume the pipe, leaving the loader nothing: "ok", exit 0."""
    done = subprocess.run([sys.executable, "-m", "checks", "check", name, "--mcore-version", "0.16.1"], cwd=ROOT,
                          input=MLM_SCRIPT.read_bytes(), capture_output=True, timeout=60, check=False)
    from_file = subprocess.run([sys.executable, "-m", "checks", "check", str(MLM_SCRIPT), "--mcore-version",
                                "0.16.1"], cwd=ROOT, capture_output=True, timeout=60, check=False)
    assert done.returncode == from_file.returncode == 1
    assert b"ACT003" in done.stdout and b"OPT005" in done.stdout


def test_fifos_and_devices_are_refused_not_read_forever(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(capsys, "check", str(fifo))
    assert "not a regular file" in refused(capsys, "check", "/dev/zero")
    assert "not a regular file" in refused(capsys, "plan", "--preset", "llama3-8b", "--profile", "/dev/zero")


def test_no_input_is_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    assert "this is a bridge config" in refused(capsys, "check", str(BRIDGE_DUMP), "--argv=--num-layers 2")
    assert "--argv given twice" in refused(capsys, "check", "--argv=--num-layers 2", "--argv=--bf16")
    assert "not a Megatron-LM functional-test config" in refused(capsys, "check", str(BRIDGE_DUMP), "--flavor",
                                                                 "megatron-lm")


def test_oc_env_reads_the_job_environment_not_the_checkers(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  num_layers: 8\n  cpu_offloading: ${oc.env:OFFLOAD}\n  cpu_offloading_num_layers: 2\n")
    monkeypatch.setenv("OFFLOAD", "1")  # the checker's own shell: not the job's
    assert "Environment variable 'OFFLOAD' not found" in refused(capsys, "check", str(path), "--assume-defaults")
    assert main(["check", str(path), "--assume-defaults", "--env", "OFFLOAD=1", "--format", "json"]) == 1
    rules = {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert "CFG002" in rules  # oc.env gives the string '1', which megatron-core does not read as a bool


@pytest.mark.parametrize(("text", "message"), [
    ("a: !!float abc\n", "invalid YAML value 'abc'"),
    ("a: &x\n  <<: *x\n", "merges the mapping into itself"),
    ("a: " + "[" * 600 + "]" * 600 + "\n", "nested deeper than 64 levels"),
    ("model:\n  num_layers: " + "9" * 5000 + "\n", "Exceeds the limit (4300 digits)"),
    ("a0: &a0 {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8}\n" + "".join(
        f"a{i}: &a{i} {{" + ", ".join(f"k{j}: {{<<: *a{i - 1}}}" for j in range(8)) + "}\n" for i in range(1, 9)),
     "merge keys expand to more than 100,000 nodes"),
    ("model:\n  num_layers: ${model.x\n", "OmegaConf cannot read this config"),
])
def test_hostile_yaml_is_one_line(text: str, message: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert message in refused(capsys, "check", str(path))


@pytest.mark.parametrize(("argv", "message"), [
    (("--preset", "llama3-8b", "--gpu-memory-gib", "nan"), "positive number of GiB"),
    (("--preset", "llama3-8b", "--gpus", "1000000000000"), "up to 10,000,000"),
    (("--preset", "llama3-8b", "--set", "model.tensor_model_parallel_size=0"), "a parallel size is at least 1"),
    ((str(BRIDGE_DUMP), "--preset", "llama3-8b"), "the job would not start: ACT001, ACT002, ACT003"),
])
def test_impossible_plans_are_refused(argv: tuple[str, ...], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """run_config_broken.yaml used to plan -17 GiB of activations and exit 0; TP=0 was planned."""
    assert message in refused(capsys, "plan", *argv)


def test_a_profile_that_is_not_an_object_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    path.write_text("[]")
    assert "a JSON object is expected" in refused(capsys, "plan", "--preset", "llama3-8b", "--profile", str(path))


def test_json_output_is_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A quoted "inf" fraction used to reach a patch as Infinity, which is not JSON."""
    path = tmp_path / "c.yaml"
    path.write_text('optimizer:\n  optimizer_cpu_offload: true\n  optimizer_offload_fraction: "inf"\n')
    main(["check", str(path), "--assume-defaults", "--format", "json"])

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    json.loads(capsys.readouterr().out, parse_constant=no_constants)


def test_a_mapping_where_a_value_goes_is_a_type_error_not_dropped(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`cpu_offloading: {enabled: true}` used to be skipped as a nested object: "ok"."""
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  num_layers: 8\n  cpu_offloading: {enabled: true}\n")
    assert main(["check", str(path), "--assume-defaults", "--format", "json"]) == 1
    (finding,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["rule"] == "CFG002"]
    assert finding["path"] == "model.cpu_offloading" and finding["location"]["line"] == 3
    # NeMo-RL tests the switch for truth (nemo_rl/models/megatron/setup.py:1181-1209): a mapping turns it on
    assert main(["check", str(ROOT / "examples/configs/nemo-rl/grpo_megatron_base.yaml"), "--set",
                 "policy.megatron_cfg.fine_grained_activation_offloading={enabled: true}", "--format", "json"]) == 1
    assert "CFG002" in {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}


def test_lint_on_a_skill_md_that_is_not_utf8_is_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "SKILL.md").write_bytes(b"---\nname: x\n---\n\xff\xfe\n")
    assert main(["lint", str(tmp_path)]) == 1
    assert "SKILL.md cannot be read" in capsys.readouterr().out


BRIDGE_CLEAN = ROOT / "examples" / "configs" / "bridge" / "run_config_clean.yaml"


@pytest.mark.parametrize(("argv", "message"), [
    (("check", str(BRIDGE_CLEAN), "--set", "model.num_layers=1000000"),
     "--set #1: model.num_layers=1000000 is past the checker's limit of 10,000"),
    (("check", str(BRIDGE_CLEAN), "--set", f"model.hidden_size={10**400}"), "a 401-digit number is past"),
    (("check", str(BRIDGE_CLEAN), "--set", "model.num_layers=1000", "--set", "model.num_moe_experts=300"),
     "is 300,000 expert-layers, past the checker's limit of 200,000"),
    (("check", "--flavor", "megatron-lm", "--argv", "--num-layers 100000 --hidden-size 64 --num-attention-heads 4"),
     "--num-layers 100000 is past"),
    (("plan", "--preset", "llama3-8b", "--set", "model.num_layers=1000000"), "limit of 10,000"),
])
def test_model_dimensions_past_their_limits_are_refused(argv: tuple[str, ...], message: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """num_layers=1000000 used to take 15 s and 1.5 GB (OPT022 enumerates every tensor); a 401-digit hidden size
    overflowed a float in a traceback."""
    assert message in refused(capsys, *argv)


def test_a_model_at_the_limits_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    """The bounds refuse only what no model comes near: 10,000 layers is still checked."""
    assert main(["check", str(BRIDGE_CLEAN), "--set", "model.num_layers=10000"]) == 0
    assert "OPT022" in capsys.readouterr().out


def test_defaults_fan_out_is_read_once_per_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each of 25 files names the next twice: read again at every level, that was 2^25 loads."""
    for i in range(25):
        (tmp_path / f"f{i}.yaml").write_text(f"defaults: [f{i + 1}.yaml, f{i + 1}.yaml]\npolicy:\n  k{i}: 1\n")
    (tmp_path / "f25.yaml").write_text("policy:\n  megatron_cfg:\n    enabled: true\n"
                                       "    fine_grained_activation_offloading: true\n    offload_modules: []\n")
    assert main(["check", str(tmp_path / "f0.yaml")]) == 1
    assert "FGA002" in capsys.readouterr().out  # the deepest parent still counts


def test_defaults_chains_have_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(40):
        (tmp_path / f"g{i}.yaml").write_text(f"defaults: g{i + 1}.yaml\n")
    (tmp_path / "g40.yaml").write_text("policy:\n  megatron_cfg:\n    enabled: true\n")
    assert "`defaults:` inheritance deeper than 32 files is refused" in refused(capsys, "check",
                                                                                 str(tmp_path / "g0.yaml"))
    names = ", ".join(f"h{i}.yaml" for i in range(300))
    (tmp_path / "wide.yaml").write_text(f"defaults: [{names}]\n")
    for i in range(300):
        (tmp_path / f"h{i}.yaml").write_text(f"policy:\n  h{i}: 1\n")
    assert "more than 256 files is refused" in refused(capsys, "check", str(tmp_path / "wide.yaml"))


@pytest.mark.parametrize(("text", "message"), [
    ("model: 5\n", "(model is 5, not a section)"),
    ("policy:\n  megatron_cfg: [1]\n", "(policy.megatron_cfg is [1], not a section)"),
    ("defaults: /dev/null\npolicy: {}\n", "names '/dev/null', which is not a regular file"),
])
def test_messages_say_what_is_wrong(text: str, message: str, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`model: 5` was "no model/optimizer section"; `defaults: /dev/null` was "does not exist"."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert message in refused(capsys, "check", str(path))


def test_a_dist_info_in_the_current_directory_is_not_an_installation(tmp_path: Path) -> None:
    """`python -m` puts the current directory on sys.path: a stray megatron_core-0.14.0.dist-info there used to
    switch the rules to 0.14.0 (here: OPT018 and CFG003 appear on a clean 0.16 config)."""
    (tmp_path / "megatron_core-0.14.0.dist-info").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "checks", "check", str(BRIDGE_CLEAN), "--format", "json"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    source = json.loads(out.stdout)["assumptions"]["mcore_version_source"]
    assert "0.14.0" not in source, source
