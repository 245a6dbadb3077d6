"""The Megatron-LM flag table and the checker's argparse model of it.

Always run (no Megatron-LM source needed): the checker's parser against Python's own argparse configured from
the table with the checker's converters, for every action of every version; the converters against the
upstream behaviour they re-implement; one test per defect the old reader had. The comparison with the real
Megatron-LM parser is in tests/test_mlm_sweep.py (needs MEGATRON_LM_GIT).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import warnings

import pytest
from conftest import ROOT

from checks.cli import main
from checks.config import Origin
from checks.engine import run
from checks.loaders import Request, load, mlm_argparse, mlm_types
from checks.versions import VERSIONS, EnumMember, mlm_flag_table, mlm_flags

_spec = importlib.util.spec_from_file_location("mlm_parity", ROOT / "tools" / "mlm_parity.py")
assert _spec is not None and _spec.loader is not None
parity = importlib.util.module_from_spec(_spec)
sys.modules["mlm_parity"] = parity
_spec.loader.exec_module(parity)

TABLE = json.loads((ROOT / "checks" / "data" / "mlm_flags.json").read_text())
MLM = "NVIDIA/Megatron-LM@d98e8a64:megatron/training"


def parse(argv: list[str], version: str = "main") -> tuple[mlm_argparse.Outcome, dict]:
    words = [mlm_argparse.Word(w, Origin(arg=f"argv[{i}]")) for i, w in enumerate(argv)]
    return mlm_argparse.parse(words, mlm_flag_table(version), strict=True)


def first_error(argv: list[str], version: str = "main") -> str | None:
    error = parse(argv, version)[0].first_error()
    return None if error is None else error.message


def findings(argv: str, version: str = "main") -> list[tuple[str, str]]:
    return [(f.rule, f.message) for f in run(load(Request(argv=argv, flavor="megatron-lm", version=version)))]


# --- the table ------------------------------------------------------------------------------------


def test_table_holds_every_version_verified_against_the_real_parser() -> None:
    assert TABLE["schema"] == 2 and set(TABLE["versions"]) == set(VERSIONS)
    for label in VERSIONS:
        assert TABLE["method"][label] == "parser"
        assert TABLE["verified"][label]["mismatches"] == [], label
        assert TABLE["verified"][label]["cases"] > 5000, label
    # compact: one entry per distinct action, shared between versions
    assert len(TABLE["actions"]) < 1.5 * max(len(v) for v in TABLE["versions"].values())
    assert (ROOT / "checks" / "data" / "mlm_flags.json").stat().st_size < 400_000


def test_every_converter_the_table_names_is_implemented_for_its_upstream_source() -> None:
    for label in VERSIONS:
        for converter, digest in TABLE["converters"][label].items():
            assert converter in mlm_types.CONVERTERS, (label, converter)
            assert digest in mlm_types.SOURCE_DIGESTS[converter], (label, converter, digest)


# --- the parsing algorithm against Python's argparse ----------------------------------------------


def test_checker_parser_matches_argparse_built_from_the_table_for_every_action_of_every_version() -> None:
    covered: set[str] = set()
    total = 0
    for label in VERSIONS:
        table = mlm_flag_table(label)
        count, mismatches = parity.compare(table, parity.reference_parser(table), covered=covered)
        assert mismatches == [], (label, mismatches[:3])
        total += count
    assert total > 10_000
    assert len(covered) == len({parity.signature(s, mlm_flag_table(v)) for v in VERSIONS
                                for s in mlm_flag_table(v).flags.values()})


def test_the_comparison_can_fail() -> None:
    """A checker table that disagrees with the parser (int read as float) shows up as mismatches."""
    from dataclasses import replace

    table = mlm_flag_table("main")
    spec = table.flags["--tensor-model-parallel-size"]
    wrong = replace(table, flags={**table.flags, spec.flag: replace(spec, type="float")})
    count, mismatches = parity.compare(wrong, parity.reference_parser(table), limit=5)
    assert count > 1000 and mismatches


# --- enum-typed flags ---------------------------------------------------------------------------------


def test_enum_flags_take_member_names_and_store_the_member() -> None:
    # argument_utils.py:115-116: type=enum_type_handler (config_type[cli_arg]), choices=list(config_type)
    outcome, namespace = parse(["--attention-backend", "flash"])
    assert outcome.errors == [] and namespace["attention_backend"] == EnumMember("AttnBackend", "flash", 1)
    assert mlm_flags("main")["--attention-backend"].default.name == "auto"
    assert main(["check", "--argv=--attention-backend auto", "--mcore-version", "main"]) == 0


def test_an_unknown_enum_name_is_an_uncaught_key_error_not_an_invalid_choice() -> None:
    # enum_type_handler raises KeyError, which argparse._get_value does not catch (only TypeError/ValueError)
    error = parse(["--attention-backend", "fast"])[0].first_error()
    assert error is not None and error.kind == "crash" and error.exception == "KeyError: 'fast'"
    [(rule, message)] = findings("--attention-backend fast")
    assert rule == "CFG004" and "KeyError: 'fast'" in message and "valid: flash, fused, unfused, local, auto" in message


def test_enum_aliases_resolve_like_python_enum_lookup() -> None:
    # --exit-signal: enum_type_handler over signal.Signals; Signals['SIGIOT'] is the alias of SIGABRT
    assert parse(["--exit-signal", "SIGIOT"])[1]["exit_signal"].name == "SIGABRT"


def test_cuda_graph_modules_converter_keeps_the_deprecated_spellings() -> None:
    # arguments.py:256-260: "full", "full_iteration", "full_iteration_inference" pass as text, others are members
    cfg = load(Request(argv="--cuda-graph-modules attn full_iteration", flavor="megatron-lm", version="main"))[0]
    assert cfg.settings["model.cuda_graph_modules"].value == ["attn", "full_iteration"]
    assert parse(["--cuda-graph-modules", "atn"])[0].first_error().exception == "KeyError: 'atn'"


def test_old_lambda_converters() -> None:
    # 0.14: type=lambda attn_backend: AttnBackend[attn_backend] (NVIDIA/Megatron-LM@23e00ed0 arguments.py:1426)
    assert parse(["--attention-backend", "local"], "0.14.0")[1]["attention_backend"].name == "local"
    # 0.16: lambda scope: CudaGraphScope[scope] if scope != "full" else scope (@55ac7082 arguments.py:1430)
    assert [v if isinstance(v, str) else v.name for v in
            parse(["--cuda-graph-scope", "full", "attn"], "0.16.1")[1]["cuda_graph_scope"]] == ["full", "attn"]
    assert parse(["--cuda-graph-scope", "x"], "0.16.1")[0].first_error().exception == "KeyError: 'x'"


# --- BooleanOptionalAction ------------------------------------------------------------------------


def test_boolean_optional_action_and_its_no_form() -> None:
    # arguments.py:2778: --rl-use-sequence-packing, action=argparse.BooleanOptionalAction (adds --no-...)
    assert parse(["--rl-use-sequence-packing"])[1]["rl_use_sequence_packing"] is True
    assert parse(["--rl-use-sequence-packing", "--no-rl-use-sequence-packing"])[1]["rl_use_sequence_packing"] is False
    assert first_error(["--rl-use-sequence-packing=1"]) == \
        "argument --rl-use-sequence-packing/--no-rl-use-sequence-packing: ignored explicit argument '1'"
    assert first_error(["--no-rl-use-sequence-packing", "true"]) == "unrecognized arguments: true"
    assert findings("--rl-use-sequence-packing") == []


# --- converters -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--moe-layer-freq", "--linear-attention-freq", "--no-rope-freq"])
def test_int_or_pattern_converters(flag: str) -> None:
    # moe_freq_type / la_freq_type / no_rope_freq_type, arguments.py:304-375, _eval_pattern :245-253
    dest = mlm_flags("main")[flag].dest
    assert parse([flag, "2"])[1][dest] == 2
    assert parse([flag, "([0]*1+[1]*2)*2"])[1][dest] == [0, 1, 1, 0, 1, 1]
    name = mlm_flags("main")[flag].type
    assert first_error([flag, "[0]*x"]) == f"argument {flag}: invalid {name} value: '[0]*x'"
    assert first_error([flag, "two"]) == f"argument {flag}: invalid {name} value: 'two'"
    assert parse([flag, "[1"])[0].first_error().exception == "SyntaxError"


def test_tuple_type_and_type_bool() -> None:
    # tuple_type, arguments.py:377-387; --onnx-safe type=bool, arguments.py:2454: bool("False") is True
    assert parse(["--window-size", "(3,4)"])[1]["window_size"] == (3, 4)
    assert first_error(["--window-size", "3,x"]) == "argument --window-size: invalid tuple_type value: '3,x'"
    assert parse(["--onnx-safe", "False"])[1]["onnx_safe"] is True
    assert parse(["--onnx-safe", ""])[1]["onnx_safe"] is False


def _alphabet_strings() -> list[str]:
    return ["".join(p) for n in range(1, 5) for p in itertools.product("[]()+*,1", repeat=n) if "[" in p]


def test_eval_pattern_agrees_with_python_eval() -> None:
    """_eval_pattern evaluates with eval (arguments.py:253); the checker parses and evaluates the same text."""
    for text in _alphabet_strings() + ["[1]*2**3", "[*[1],0]", "(*[1])", "[1][0]", "()[0]", "[01]", "[0]*00"]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected: object = ("value", eval(text))  # the alphabet cannot name anything
        except (TypeError, ValueError):
            expected = ("invalid",)
        except Exception as err:  # what eval raises is the expected result
            expected = ("uncaught", type(err).__name__)
        try:
            got: object = ("value", mlm_types.eval_pattern(text))
        except mlm_types.Invalid:
            got = ("invalid",)
        except mlm_types.Uncaught as err:
            got = ("uncaught", err.kind)
        assert got == expected, text


# --- argparse behaviour the old reader missed ------------------------------------------------------


def test_equals_form_negative_numbers_double_dash_and_repeats() -> None:
    assert parse(["--lr=0.5"])[1]["lr"] == 0.5
    assert parse(["--rotary-base", "-1"])[1]["rotary_base"] == -1  # "-1" looks like a negative number
    assert first_error(["--lr", "-1e-5"]) == "argument --lr: expected one argument"  # not to 3.11's matcher
    assert first_error(["--lr", "--", "0.5"]) == "argument --lr: expected one argument"
    outcome, namespace = parse(["--lr", "0.1", "--lr", "0.2"])
    assert namespace["lr"] == 0.2 and len(outcome.assignments) == 2
    assert first_error(["--bf16=yes"]) == "argument --bf16: ignored explicit argument 'yes'"
    assert first_error(["--num-layers"]) == "argument --num-layers: expected one argument"
