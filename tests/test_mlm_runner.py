"""Megatron-LM functional-test YAMLs, read the way the CI runner builds the command line.

Each test cites the step of NVIDIA/Megatron-LM@d98e8a64:tests/functional_tests/shell_test_utils/_run_training.sh
(RUNNER below) or of yq v4.44.1 it relies on. Fixtures are written here, shaped like upstream's model_config.yaml.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.engine import run
from checks.errors import InputError
from checks.loaders import Request, load
from checks.loaders.mlm_runner import echo_xargs, read
from checks.yamlio import load_yaml

RUNNER = "_run_training.sh"


def write(tmp_path: Path, body: str, name: str = "model_config.yaml") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def argv(tmp_path: Path, model_args: str, run_name: str = "MODEL_ARGS") -> list[str]:
    test = read(write(tmp_path, "ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\nMODEL_ARGS:\n" + model_args))
    return [w.text for w in next(r for r in test.runs if r.name == run_name).words]


def check(tmp_path: Path, body: str, version: str = "main") -> list[tuple[str, str, int | None]]:
    configs = load(Request((write(tmp_path, body),), version=version))
    return [(f.rule, f.message, f.origin.line if f.origin else None) for f in run(configs)]


# --- the cases of the while-loop (RUNNER:134-161) --------------------------------------------------


def test_true_is_the_bare_flag(tmp_path: Path) -> None:
    # yq: with(select(.value == true); .value = "true"), RUNNER:141 `if [[ "$value" == "true" ]]`
    assert argv(tmp_path, "  --bf16: true\n  --use-distributed-optimizer: 'true'\n") == \
        ["--bf16", "--use-distributed-optimizer"]


def test_false_and_null_are_passed_as_words(tmp_path: Path) -> None:
    # yq tostring prints false / null as text (operator_strings.go); the default case appends `key value`
    assert argv(tmp_path, "  --bf16: false\n  --fp16: null\n  --seq-length: ~\n") == \
        ["--bf16", "false", "--fp16", "null", "--seq-length", "~"]
    found = check(tmp_path, "MODEL_ARGS:\n  --num-layers: 2\n  --bf16: false\n")
    assert found == [("CFG004", "argparse: unrecognized arguments: false", 3)]


def test_empty_value_is_the_bare_flag_and_empty_string_drops_the_flag(tmp_path: Path) -> None:
    # `key:` is a null whose text is "" (kept: a null is never == ""), `key: ''` is dropped by
    # select(.value != "") (operator_equals.go isEquals), RUNNER:131
    assert argv(tmp_path, "  --bf16:\n  --fp16: ''\n  --num-layers: 2\n") == ["--bf16", "--num-layers", "2"]


def test_scalars_keep_the_text_yq_prints(tmp_path: Path) -> None:
    # yq prints a scalar's text as written: no YAML 1.1 typing (on, 1e-6, .01 stay as they are)
    assert argv(tmp_path, "  --lr: 1e-6\n  --lr-warmup-fraction: .01\n  --tokenizer-type: on\n") == \
        ["--lr", "1e-6", "--lr-warmup-fraction", ".01", "--tokenizer-type", "on"]
    cfg = load(Request((write(tmp_path, "MODEL_ARGS:\n  --lr: 1e-6\n  --norm-epsilon: 1.0e-5\n"),), version="main"))[0]
    assert cfg.settings["optimizer.lr"].value == 1e-6 and cfg.settings["model.layernorm_epsilon"].value == 1e-5


def test_parenthesised_value_is_one_word(tmp_path: Path) -> None:
    # RUNNER:145-146: ^\([^)]+\)$ -> key "value"
    assert argv(tmp_path, "  --moe-layer-freq: ([0]*1+[1]*3)*2\n") == ["--moe-layer-freq", "([0]*1+[1]*3)*2"]
    cfg = load(Request((write(tmp_path, "MODEL_ARGS:\n  --moe-layer-freq: ([0]*1+[1]*3)\n"),), version="main"))[0]
    assert cfg.settings["model.moe_layer_freq"].value == [0, 1, 1, 1]


def test_bracketed_value_is_split_into_words(tmp_path: Path) -> None:
    # RUNNER:149-152: ^\[[^]]+\]$ -> brackets stripped, words split by eval
    assert argv(tmp_path, '  --offload-modules: "[core_attn attn_proj]"\n') == \
        ["--offload-modules", "core_attn", "attn_proj"]


def test_value_with_spaces_or_pipes_is_one_quoted_word(tmp_path: Path) -> None:
    # RUNNER:155-156: a space, |, ( or ) -> key "value"
    assert argv(tmp_path, "  --pipeline-model-parallel-layout: Et|(tt|)*2L\n  --hierarchical-context-parallel-sizes:"
                          " 2 2\n") == ["--pipeline-model-parallel-layout", "Et|(tt|)*2L",
                                        "--hierarchical-context-parallel-sizes", "2 2"]
    found = check(tmp_path, "MODEL_ARGS:\n  --hierarchical-context-parallel-sizes: 2 2\n")
    assert found == [("CFG004", "argparse: argument --hierarchical-context-parallel-sizes: invalid int value: "
                                "'2 2'", 2)]


def test_xargs_removes_quotes_and_squeezes_blanks(tmp_path: Path) -> None:
    # RUNNER:139 value="$(echo "$value" | xargs)"
    assert echo_xargs('"the"') == "the" and echo_xargs("a   b") == "a b" and echo_xargs(r"a\ b") == "a b"
    assert echo_xargs("-n") == ""  # bash's echo takes it as its option
    assert argv(tmp_path, "  --stop-words: '\"the\"'\n") == ["--stop-words", "the"]
    found = check(tmp_path, "MODEL_ARGS:\n  --data-path: \"it's\"\n")
    assert [(r, "unmatched single quote" in m) for r, m, _ in found] == [("CFG004", True)]


def test_shell_syntax_and_variables_in_the_eval(tmp_path: Path) -> None:
    # RUNNER:166 eval "TRAINING_PARAMS_ARRAY=($TRAINING_PARAMS_FROM_CONFIG)"; RUNNER:70 envsubst
    found = check(tmp_path, "MODEL_ARGS:\n  --data-path: a;b\n")
    assert [r for r, _, _ in found] == ["CFG004"] and "shell syntax" in found[0][1]
    cfg = load(Request((write(tmp_path, "MODEL_ARGS:\n  --cpu-offloading-num-layers: ${LAYERS}\n"),),
                       version="main"))[0]
    assert "model.cpu_offloading_num_layers" not in cfg.settings
    assert "${LAYERS}" in cfg.ignored[0].reason


# --- runs, merge keys and duplicates (RUNNER:121-131, yq explode) -----------------------------------


def test_each_model_args_n_is_a_run_of_its_own(tmp_path: Path) -> None:
    # RUNNER:124-128: MODEL_ARGS_<N> replaces MODEL_ARGS for run N
    configs = load(Request((write(tmp_path, "BASE: &base\n  --num-layers: 4\n  --bf16: true\nMODEL_ARGS:\n"
                                            "  <<: *base\n  --hidden-size: 64\nMODEL_ARGS_2:\n  <<: *base\n"
                                            "  --hidden-size: 128\n"),), version="main"))
    assert [(c.target, c.settings["model.hidden_size"].value, c.settings["model.num_layers"].value)
            for c in configs] == [("MODEL_ARGS", 64, 4), ("MODEL_ARGS_2", 128, 4)]


def test_duplicate_keys_both_reach_argparse_and_the_last_wins(tmp_path: Path) -> None:
    # yq keeps both entries of a duplicated key (to_entries over the node), argparse's store keeps the last
    body = "MODEL_ARGS:\n  --num-layers: 4\n  --hidden-size: 64\n  --num-layers: 8\n"
    assert argv(tmp_path, "  --num-layers: 4\n  --num-layers: 8\n") == ["--num-layers", "4", "--num-layers", "8"]
    cfg = load(Request((write(tmp_path, body),), version="main"))[0]
    assert cfg.settings["model.num_layers"].value == 8 and cfg.settings["model.num_layers"].origin.line == 4
    [(rule, message, line)] = check(tmp_path, body)
    assert rule == "CFG008" and line == 4 and "lines 2 and 4" in message and "passes both" in message


def test_duplicate_keys_in_a_merged_map_collapse_to_the_last(tmp_path: Path) -> None:
    # yq operator_anchors_aliases.go reconstructAliasedMap: a key given again later is left for the later one
    body = "BASE: &b\n  --num-layers: 2\nMODEL_ARGS:\n  <<: *b\n  --hidden-size: 64\n  --hidden-size: 96\n"
    assert [w.text for w in read(write(tmp_path, body)).runs[0].words] == \
        ["--num-layers", "2", "--hidden-size", "96"]
    [(rule, message, _)] = check(tmp_path, body)
    assert rule == "CFG008" and "keeps only the later one" in message


def test_yamlio_refuses_duplicates_unless_asked_to_record_them(tmp_path: Path) -> None:
    path = write(tmp_path, "a: 1\nb: 2\na: 3\n")
    with pytest.raises(InputError, match="duplicate key 'a'"):
        load_yaml(path)
    doc = load_yaml(path, duplicates="record")
    assert doc.data == {"a": 3, "b": 2} and [(d.keys, d.first_line, d.line) for d in doc.duplicates] == [(("a",), 1, 3)]


# --- what is not Megatron-LM argv -----------------------------------------------------------------


def test_env_vars_are_exported_as_text(tmp_path: Path) -> None:
    # RUNNER:76: .key + "=" + .value (the value's text; a null adds nothing)
    cfg = load(Request((write(tmp_path, "ENV_VARS:\n  NVTE_CPU_OFFLOAD_V1: 1\n  FLAG: true\n  EMPTY:\n"
                                        "MODEL_ARGS:\n  --num-layers: 2\n"),), version="main"))[0]
    assert [cfg.settings[f"env.{n}"].value for n in ("NVTE_CPU_OFFLOAD_V1", "FLAG", "EMPTY")] == ["1", "true", ""]


def test_nemo_test_model_args_are_reported_as_not_read(tmp_path: Path) -> None:
    # RUNNER:94-118: IS_NEMO_TEST passes key=value to a NeMo script
    cfg = load(Request((write(tmp_path, "MODEL_ARGS:\n  trainer.max_steps: 50\n  model.cpu_offloading: true\n"),),
                       version="main"))[0]
    assert [i.path for i in cfg.ignored] == ["trainer.max_steps", "model.cpu_offloading"]
    assert cfg.rejected == () and cfg.unrecognised == ()


def test_null_model_args_is_an_empty_command_line_and_a_scalar_one_fails(tmp_path: Path) -> None:
    # yq operator_entries.go toEntriesOperator: null yields nothing, another scalar is "has no keys"
    assert check(tmp_path, "ENV_VARS:\n  A: 1\nMODEL_ARGS:\n") == []
    [(rule, message, _)] = check(tmp_path, "MODEL_ARGS: --num-layers 2\n")
    assert rule == "CFG004" and "has no keys" in message
