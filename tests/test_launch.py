"""Launch commands: the shell reading, the wrappers, and each front end's own argument handling.

The front-end parsers are compared with upstream's own functions, extracted from the source in the git mirrors
(``BRIDGE_GIT``, ``NEMO_RL_GIT``; skipped without them) and run on the same command lines; torchrun's option
table is compared with the parser torch builds.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from checks.cli import main
from checks.errors import InputError
from checks.loaders import launch
from checks.loaders.shell import commands

BRIDGE_COMMIT = "067f987d"
NEMO_RL_COMMIT = "7ea279ab"


def words(text: str) -> list[list[tuple[str, int]]]:
    return [[(w.text, w.line) for w in c.words] for c in commands(text, "t.sh")]


# --- the shell --------------------------------------------------------------------------------------------------


def test_continuations_quotes_comments_and_variables_expand_as_bash_does() -> None:
    script = (
        "#!/bin/bash\n"
        "N=24  # layers\n"
        'ARGS="--num-layers ${N} \\\n'
        '  --hidden-size 2048"\n'
        "EXTRA=(\n  --bf16   # a comment inside an array\n  '--lr' 3e-4\n)\n"
        'python pretrain_gpt.py $ARGS "${EXTRA[@]}" \\\n'
        "    --seq-length ${SEQ:-4096} 'a b' \"\" $(date)\n"
    )
    (cmd,) = commands(script, "t.sh")
    assert [(w.text, w.line) for w in cmd.words] == [
        ("python", 9), ("pretrain_gpt.py", 9), ("--num-layers", 3), ("24", 2), ("--hidden-size", 4), ("2048", 4),
        ("--bf16", 6), ("--lr", 7), ("3e-4", 7), ("--seq-length", 10), ("4096", 10), ("a b", 10), ("", 10),
        ("$(date)", 10)]
    assert cmd.words[-1].unresolved and not cmd.words[-2].unresolved


def test_exports_prefixes_cd_redirections_and_heredocs() -> None:
    script = (
        "set -euo pipefail\nexport A=1\nB=2\ncd /opt/rl && C=3 uv run run_grpo.py x=1 2>&1 | tee log\n"
        "cat <<EOF\npython not_a_launch.py\nEOF\n"
    )
    found = commands(script, "t.sh")
    grpo = next(c for c in found if c.words[0].text == "uv")
    assert [w.text for w in grpo.words] == ["uv", "run", "run_grpo.py", "x=1"]
    assert {k: v.text for k, v in grpo.env.items()} == {"A": "1", "C": "3"}  # B is not exported
    assert grpo.cwd == "/opt/rl"
    assert not any(w.text == "not_a_launch.py" for c in found for w in c.words)


def test_an_unterminated_quote_is_an_input_error_naming_the_line() -> None:
    with pytest.raises(InputError, match=r"t.sh:2: unterminated double quote"):
        commands('echo ok\npython run.py "x=1\n', "t.sh")


# --- wrappers ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "python pretrain_gpt.py --num-layers 2",
    "python3 -u -W ignore pretrain_gpt.py --num-layers 2",
    "python -m torch.distributed.run --nproc_per_node 8 pretrain_gpt.py --num-layers 2",
    "torchrun --nproc-per-node=8 --nnodes 2 --standalone pretrain_gpt.py --num-layers 2",
    "srun -N 2 --ntasks-per-node 8 --container-image=img:1 torchrun --nnodes=2 pretrain_gpt.py --num-layers 2",
    "uv run --with x --extra mcore python pretrain_gpt.py --num-layers 2",
    "env CUDA_DEVICE_MAX_CONNECTIONS=1 exec python pretrain_gpt.py --num-layers 2",
    "bash -c 'torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2'",
    "NVTE_FLASH_ATTN=0 nohup python pretrain_gpt.py --num-layers 2",
])
def test_the_training_script_is_found_behind_each_wrapper(line: str) -> None:
    (found,) = launch.read(line, "--command", file=None)
    assert found.flavor == "megatron-lm"
    assert [t.text for t in found.words] == ["--num-layers", "2"]


def test_a_python_command_the_checker_cannot_place_is_an_input_error() -> None:
    with pytest.raises(InputError, match=r"l.sh:2: .*train_mine.py: not a training script the checker knows"):
        launch.read("echo start\npython train_mine.py --lr 1\n", "l.sh", file="l.sh")
    with pytest.raises(InputError, match=r"python -c runs inline code"):
        launch.read("python -c 'import torch'", "--command", file=None)


def test_commands_that_start_no_python_program_are_skipped() -> None:
    assert launch.read("mkdir -p out\necho hi\nnvidia-smi\n", "l.sh", file="l.sh") == []


def test_torchrun_option_table_is_torchs_own() -> None:
    """Every option torch's launcher defines is in the table exactly when it takes a value
    (torch/distributed/run.py, get_args_parser)."""
    run = pytest.importorskip("torch.distributed.run")
    parser = run.get_args_parser()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        takes_value = action.nargs != 0
        for option in action.option_strings:
            if option in launch._TORCHRUN_MODULE | launch._TORCHRUN_NO_PYTHON:
                continue
            assert (option in launch._TORCHRUN_VALUES) == takes_value, option


# --- Megatron Bridge run_recipe.py ------------------------------------------------------------------------------

RUN_RECIPE_CASES = [
    ["--recipe", "qwen3_30b_a3b_pretrain_config", "model.cpu_offloading=True"],
    ["--model", "llama3_8b", "--mode", "pretrain", "-tp", "2", "-pp", "4", "model.tensor_model_parallel_size=8"],
    ["--model", "gpt_oss_20b", "--mode", "pretrain", "--dataset", "mock", "-sl", "8192", "-mb", "1",
     "model.sequence_parallel=true"],
    ["--recipe", "llama3_8b_sft_config", "--lr", "1e-5", "--save_dir", "/ckpt", "optimizer.optimizer_cpu_offload=true"],
    ["--model", "qwen3_8b", "--mode", "lora"],
    ["--recipe", "llama3_8b_pretrain_config", "--bogus", "1"],
    ["--recipe", "llama3_8b_pretrain_config", "model.cpu_offloading"],
    ["--recipe", "llama3_8b_pretrain_config", "--mode", "sft"],
    ["--recipe", "mystery_config"],
    ["--model", "llama3_8b"],
    ["--recipe", "a_pretrain_config", "--model", "b"],
    ["-tp", "2"],
    ["--recipe", "llama3_8b_pretrain_config", "-tp", "two"],
    ["--recipe", "llama3_8b_pretrain_config", "--dataset", "nope"],
    ["--recipe", "llama3_8b_pretrain_config", "--tensor_model", "2"],  # allow_abbrev=False: not an abbreviation
    ["--recipe=llama3_8b_pretrain_config", "--mode=pretrain", "-tp=2", "+model.x=1", "~model.y"],
    ["--recipe", "llama3_8b_pretrain_config", "-sl", "4096", "dataset.seq_length=2048", "-sl", "1024"],
]


def _git_show(env: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", os.environ[env], "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _functions(source: str, names: set[str]) -> str:
    """The source of the named top-level functions, classes and assignments."""
    tree = ast.parse(source)
    keep = [node for node in tree.body
            if (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names)
            or (isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id in names
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])))]
    return "\n\n".join(ast.get_source_segment(source, node) or "" for node in keep)


def _upstream_run_recipe() -> dict[str, Any]:
    """run_recipe.py's parse_args and the helpers it calls, executed from Bridge's own source."""
    metadata = _git_show("BRIDGE_GIT", BRIDGE_COMMIT, "scripts/training/recipe_metadata.py")
    datasets = _git_show("BRIDGE_GIT", BRIDGE_COMMIT, "src/megatron/bridge/recipes/utils/dataset_utils.py")
    runner = _git_show("BRIDGE_GIT", BRIDGE_COMMIT, "scripts/training/run_recipe.py")
    dataset_tree = ast.parse(datasets)
    presets = next(node for node in dataset_tree.body if isinstance(node, ast.AnnAssign)
                   and isinstance(node.target, ast.Name) and node.target.id == "DATASET_PRESETS")
    assert isinstance(presets.value, ast.Dict)
    names = {ast.literal_eval(key) for key in presets.value.keys if key is not None}
    namespace: dict[str, Any] = {"argparse": argparse, "json": __import__("json"), "os": os, "sys": sys,
                                 "DATASET_PRESETS": dict.fromkeys(names), "Literal": Any, "PublicMode": str,
                                 "TrainMode": str, "__name__": "run_recipe"}
    exec(compile("from __future__ import annotations\n" + _functions(metadata, {"recipe_task", "infer_recipe_mode"}),
                 "recipe_metadata.py", "exec"), namespace)
    exec(compile("from __future__ import annotations\n" + _functions(runner, {
        "COMMON_OVERRIDE_FIELDS", "_HelpFormatter", "_build_parser", "_collect_overrides", "_common_config_overrides",
        "_infer_mode", "parse_args", "_selected_recipe_name", "_validate_recipe_mode", "_train_mode"}),
        "run_recipe.py", "exec"), namespace)
    return namespace


def _upstream_outcome(namespace: dict[str, Any], argv: list[str]) -> tuple[str, ...]:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args, overrides = namespace["parse_args"](argv)
            name = namespace["_selected_recipe_name"](args)
            if args.recipe:
                namespace["_validate_recipe_mode"](name, args.mode)
    except SystemExit:
        return ("error", stderr.getvalue().strip().splitlines()[-1].split("error: ", 1)[1])
    except ValueError as err:
        return ("error", str(err))
    return ("ok", name, args.mode, str(args.dataset), *overrides)


def _our_outcome(argv: list[str]) -> tuple[str, ...]:
    try:
        parsed = launch.parse_run_recipe(argv)
    except ValueError as err:
        return ("error", str(err).removeprefix("run_recipe.py: error: "))
    return ("ok", parsed.recipe, parsed.mode, str(parsed.dataset), *parsed.overrides)


@pytest.mark.skipif("BRIDGE_GIT" not in os.environ, reason="needs BRIDGE_GIT (a Megatron-Bridge git mirror)")
@pytest.mark.parametrize("argv", RUN_RECIPE_CASES, ids=lambda a: " ".join(a)[:60])
def test_run_recipe_arguments_are_read_as_run_recipe_reads_them(argv: list[str]) -> None:
    namespace = _upstream_run_recipe()
    upstream = _upstream_outcome(namespace, argv)
    ours = _our_outcome(argv)
    if upstream[0] == "error":  # argparse words its own usage errors; the message after "error: " is the same
        assert ours[0] == "error" and ours[1] == upstream[1], (ours, upstream)
    else:
        assert ours == upstream


@pytest.mark.skipif("BRIDGE_GIT" not in os.environ, reason="needs BRIDGE_GIT (a Megatron-Bridge git mirror)")
def test_dataset_choices_are_bridges() -> None:
    namespace = _upstream_run_recipe()
    assert sorted(namespace["DATASET_PRESETS"]) == sorted(launch.DATASETS)


def test_convenience_flags_become_overrides_ahead_of_the_trailing_ones() -> None:
    """run_recipe.py:439-446: `[*_common_config_overrides(args), *trailing_overrides]`, so a trailing override
    of the same field wins; -sl goes to dataset.seq_length (run_recipe.py:134-153)."""
    parsed = launch.parse_run_recipe(["--model", "llama3_8b", "--mode", "pretrain", "-tp", "2", "-sl", "8192",
                                      "--save_dir", "/c", "model.tensor_model_parallel_size=4"])
    assert parsed.recipe == "llama3_8b_pretrain_config"
    assert parsed.overrides == ("dataset.seq_length=8192", "model.tensor_model_parallel_size=2",
                                'checkpoint.save="/c"', "model.tensor_model_parallel_size=4")


@pytest.mark.parametrize(("argv", "message"), [
    (["--recipe", "x_pretrain_config", "--bogus"], "Unknown option: --bogus"),
    (["--recipe", "x_pretrain_config", "model.cpu_offloading"],
     "Expected override in KEY=VALUE form, got 'model.cpu_offloading'"),
    (["--recipe", "x_config"], "Unable to infer training mode; pass --mode or use a conventional --recipe name."),
    (["--recipe", "x_pretrain_config", "--mode", "lora"],
     "Mode 'lora' is incompatible with recipe 'x_pretrain_config'."),
])
def test_run_recipe_refusals_are_upstreams_words(argv: list[str], message: str) -> None:
    """run_recipe.py:262-271 (_collect_overrides), 291-303 (_infer_mode, _validate_recipe_mode)."""
    with pytest.raises(ValueError) as err:
        launch.parse_run_recipe(argv)
    assert str(err.value).endswith(message)


def test_setup_experiment_forwards_what_its_parser_does_not_own() -> None:
    """setup_experiment.py:302-333: parse_known_args, the rest goes to run_recipe.py unchanged."""
    (found,) = launch.read("./scripts/training/train.sh --nodes 2 --gpus-per-node 8 --account a --partition p "
                           "--container-image i --env HF_TOKEN --recipe llama3_8b_pretrain_config --mode pretrain "
                           "-tp 2 optimizer.optimizer_cpu_offload=true", "--command", file=None)
    assert (found.flavor, found.recipe, found.mode) == ("bridge", "llama3_8b_pretrain_config", "pretrain")
    assert found.overrides == ("model.tensor_model_parallel_size=2", "optimizer.optimizer_cpu_offload=true")


@pytest.mark.skipif("BRIDGE_GIT" not in os.environ, reason="needs BRIDGE_GIT (a Megatron-Bridge git mirror)")
def test_setup_experiment_options_are_bridges() -> None:
    source = _git_show("BRIDGE_GIT", BRIDGE_COMMIT, "scripts/training/setup_experiment.py")
    namespace: dict[str, Any] = {"argparse": argparse, "os": os, "__name__": "setup_experiment"}
    exec(compile("from __future__ import annotations\n" + _functions(source, {"_build_parser",
                 "_parse_additional_slurm_params"}), "setup_experiment.py", "exec"), namespace)
    upstream = {o: a.nargs for a in namespace["_build_parser"]()._actions for o in a.option_strings}
    ours = {o: a.nargs for a in launch.setup_experiment_parser()._actions for o in a.option_strings}
    assert ours == upstream


# --- NeMo-RL examples/run_*.py -----------------------------------------------------------------------------------

NEMO_RL_CASES = [
    ["--config", "examples/configs/grpo_math_1B_megatron.yaml", "policy.megatron_cfg.enabled=true"],
    ["--config=a.yaml", "++x=1", "~y"],
    ["--conf", "a.yaml", "x=1"],  # argparse's abbreviations: the examples do not turn them off
    ["x=1", "--config", "a.yaml"],
    ["--unknown", "x=1"],
    [],
]


@pytest.mark.skipif("NEMO_RL_GIT" not in os.environ, reason="needs NEMO_RL_GIT (a NeMo-RL git mirror)")
@pytest.mark.parametrize("argv", NEMO_RL_CASES, ids=lambda a: " ".join(a)[:60] or "none")
def test_nemo_rl_arguments_are_read_as_the_examples_read_them(argv: list[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    source = _git_show("NEMO_RL_GIT", NEMO_RL_COMMIT, "examples/run_grpo.py")
    namespace: dict[str, Any] = {"argparse": argparse}
    exec(compile("from __future__ import annotations\n" + _functions(source, {"parse_args"}), "run_grpo.py", "exec"),
         namespace)
    monkeypatch.setattr(sys, "argv", ["run_grpo.py", *argv])
    args, overrides = namespace["parse_args"]()
    assert launch.parse_nemo_rl(argv) == (args.config, overrides)


@pytest.mark.skipif("NEMO_RL_GIT" not in os.environ, reason="needs NEMO_RL_GIT (a NeMo-RL git mirror)")
def test_nemo_rl_default_configs_are_the_scripts_own() -> None:
    listing = subprocess.run(["git", "-C", os.environ["NEMO_RL_GIT"], "ls-tree", "--name-only", NEMO_RL_COMMIT,
                              "examples/"], check=True, capture_output=True, text=True).stdout.split()
    for path in (p for p in listing if p.startswith("examples/run_") and p.endswith(".py")):
        source = _git_show("NEMO_RL_GIT", NEMO_RL_COMMIT, path)
        default = next((node.args[-1].value for node in ast.walk(ast.parse(source))
                        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "join"
                        and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value == "configs" and isinstance(node.args[-1], ast.Constant)), None)
        assert launch._NEMO_RL_DEFAULTS.get(Path(path).name) == default, path


def test_a_nemo_rl_launch_reads_its_config_and_overrides_in_order(tmp_path: Path) -> None:
    config = tmp_path / "examples" / "configs" / "c.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("policy:\n  model_name: Qwen/Qwen3-4B\n  megatron_cfg:\n    enabled: true\n"
                      "    fine_grained_activation_offloading: false\n    offload_modules: []\n")
    script = tmp_path / "launch.sh"
    script.write_text(f"cd {tmp_path}\nuv run examples/run_grpo.py --config examples/configs/c.yaml \\\n"
                      "  policy.megatron_cfg.fine_grained_activation_offloading=true \\\n"
                      "  'policy.megatron_cfg.offload_modules=[moe_act]'\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", str(script), "--format", "json"])
    document = json.loads(out.getvalue())
    assert code == 1, out.getvalue()
    (finding,) = [f for f in document["findings"] if f["rule"] == "FGA013"]
    # NeMo-RL refuses a MoE-only module on a dense checkpoint (NVIDIA-NeMo/RL@7ea279ab:
    # nemo_rl/models/megatron/setup.py:1196-1206); Qwen3-4B is dense per the model catalogue.
    assert finding["severity"] == "error" and finding["location"]["line"] == 4
    assert finding["upstream"]["message"].startswith("A MoE-only offload module requires a MoE model")


# --- recipes and checkpoints ------------------------------------------------------------------------------------


def test_a_recipe_launch_checks_what_the_recipe_sets(capsys: pytest.CaptureFixture[str]) -> None:
    """The shape of the command in Bridge's CPU-offloading skill: the recipe turns on TE CUDA graphs
    (Megatron-Bridge@067f987d:src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py:213), which megatron-core refuses
    with CPU offloading (NVIDIA/Megatron-LM@2a75ac12:megatron/core/transformer/transformer_config.py:2560), and
    leaves optimizer_offload_fraction at its 0.0 default."""
    code = main(["check", "--mcore-version", "main@2a75ac12", "--format", "json", "--", "torchrun",
                 "--nproc-per-node=8", "scripts/training/run_recipe.py", "--recipe", "qwen3_30b_a3b_pretrain_config",
                 "model.cpu_offloading=True", "model.cpu_offloading_num_layers=12",
                 "optimizer.optimizer_cpu_offload=True"])
    document = json.loads(capsys.readouterr().out)
    assert code == 1 and document["status"] == "fail"
    by_rule = {f["rule"]: f for f in document["findings"]}
    assert set(by_rule) == {"ACT004", "OPT001"}
    assert by_rule["ACT004"]["location"] == {
        "file": "NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py",
        "line": 213, "arg": None}
    assert by_rule["OPT001"]["location"]["arg"] == "--command word 8"


def test_an_override_file_without_its_recipe_is_incomplete_not_ok(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "override.yaml"
    path.write_text("optimizer:\n  optimizer_cpu_offload: true\n")
    assert main(["check", str(path), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["status"] == "incomplete" and document["summary"]["unknown"] > 0
    (unknown,) = [f for f in document["findings"] if f["rule"] == "CFG010"]
    assert "optimizer.optimizer_offload_fraction" in unknown["paths"] and "OPT001" in unknown["message"]
    # with the recipe the fraction is known: the Llama-3 8B recipe leaves it at 0.0 (OPT001)
    assert main(["check", str(path), "--recipe", "llama3_8b_pretrain_config", "--format", "json"]) == 1
    assert "OPT001" in {f["rule"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert main(["check", str(path), "--strict"]) == 1  # --strict fails on unknown values too
    capsys.readouterr()


def test_a_nemo_rl_checkpoint_the_catalogue_lacks_is_unknown_with_the_closest_ids(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["check", "examples/configs/nemo-rl/grpo_megatron_base.yaml", "--set",
                 "policy.model_name=Qwen/Qwen3-4B-Bse", "--set",
                 "policy.megatron_cfg.fine_grained_activation_offloading=true",
                 "--set", "policy.megatron_cfg.offload_modules=[moe_act]", "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0 and document["status"] == "incomplete"
    (unknown,) = [f for f in document["findings"] if f["rule"] == "CFG010"]
    assert "closest ids it holds: Qwen/Qwen3-4B" in unknown["message"] and "FGA013" in unknown["message"]


def test_a_script_with_several_launches_checks_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "sweep.sh"
    script.write_text("for pp in 1 2; do :; done\n"
                      "python pretrain_gpt.py --num-layers 8 --cpu-offloading-num-layers 2 "
                      "--pipeline-model-parallel-size 2\n"
                      "python pretrain_gpt.py --num-layers 8 --cpu-offloading-num-layers 2\n")
    assert main(["check", str(script), "--mcore-version", "0.16.1", "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {(f["target"], f["rule"]) for f in findings if f["severity"] == "error"} == {(f"{script}:2", "ACT002")}


def test_cwd_names_where_a_relative_config_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NeMo-RL opens --config relative to the directory the command runs in (examples/run_grpo.py:87)."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "c.yaml").write_text("policy:\n  model_name: Qwen/Qwen3-4B\n  megatron_cfg:\n"
                                                 "    enabled: true\n")
    command = ["check", "--", "uv", "run", "examples/run_grpo.py", "--config", "configs/c.yaml"]
    assert main(command) == 2 and "pass --cwd DIR" in capsys.readouterr().err
    assert main(["check", "--cwd", str(tmp_path), *command[1:]]) == 0
    capsys.readouterr()


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["check", "--command", "python train_mine.py --lr 1"], "not a training script the checker knows"),
    (["check", "--command", "python scripts/training/run_recipe.py --recipe llama3_8b_pretrain_config --bogus"],
     "Unknown option: --bogus"),
    (["check", "--command", "uv run examples/run_grpo.py --config missing.yaml"], "'missing.yaml' is not found"),
    (["check", "--command", "uv run examples/run_grpo.py --config examples/configs/nemo-rl/grpo_offload.yaml "
      "'policy.x=[1'"], "policy.x=[1"),
    (["check", "--", "echo", "hi"], "starts no training script"),
    (["check", "--", "python", "scripts/training/run_recipe.py", "--recipe", "llama3_8b_pretrain_confg"],
     "closest: llama3_8b_pretrain_config"),
    (["check", "--recipe", "qwen3_30b_a3b_pretrain"], "'qwen3_30b_a3b_pretrain' is not a recipe of Megatron Bridge"),
    (["plan", "--preset", "Qwen/Qwen3-9B"], "closest ids: Qwen/Qwen3-8B"),
])
def test_a_launch_the_checker_cannot_read_is_exit_2_with_one_line(argv: list[str], message: str,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err, err
