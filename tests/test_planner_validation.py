"""``tools/planner_validation.py``: the planner rerun on published measurements, and its data file.

Always-run tests check that the committed artifact is what the planner gives now, that its summary holds the
largest errors (the ones card.yaml cites), that every published case is either compared or listed with the
planner's reason, and the tool's own arithmetic. With the upstream mirrors (``BRIDGE_GIT``, ``MEGATRON_LM_GIT``)
every published value in ``tools/data/published_cases.json`` is checked against the line it cites, the golden
values are reduced again from Megatron-LM's files, and each functional test's ``model_config.yaml`` is planned
itself and must give the job the data file's command line gives.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import planner_validation as tool  # noqa: E402

BRIDGE_GIT = os.environ.get("BRIDGE_GIT")
MEGATRON_LM_GIT = os.environ.get("MEGATRON_LM_GIT")
NEEDS_BRIDGE = pytest.mark.skipif(not BRIDGE_GIT, reason="set BRIDGE_GIT to an NVIDIA-NeMo/Megatron-Bridge git "
                                                         "directory to check the published values at their lines")
NEEDS_MLM = pytest.mark.skipif(not MEGATRON_LM_GIT, reason="set MEGATRON_LM_GIT to an NVIDIA/Megatron-LM git "
                                                           "directory to check the goldens and model configs")


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return tool.load_data()


@pytest.fixture(scope="module")
def fresh(data: dict[str, Any]) -> str:
    return tool.render(tool.build(data))


@pytest.fixture(scope="module")
def artifact() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(tool.ARTIFACT.read_text(encoding="utf-8"))
    return found


# -- the committed artifact -------------------------------------------------------------------------------------

def test_the_artifact_is_what_the_planner_gives_now(fresh: str) -> None:
    """The results are what the planner gives now; the revision stamp is the tree they were written from
    (tools/planner_validation.py produce() keeps it while the results hold)."""
    committed = json.loads(tool.ARTIFACT.read_text(encoding="utf-8"))
    assert isinstance(committed.pop("revision", None), dict), "the artifact records no revision"
    assert tool.render(committed) == fresh, \
        "run: python tools/planner_validation.py (or python tools/generate.py)"


def test_the_summary_holds_the_largest_error_of_each_kind(artifact: dict[str, Any]) -> None:
    worst = tool.largest_errors(artifact)
    assert artifact["summary"]["largest_errors"] == worst
    for case, metric in tool.metric_rows(artifact):
        assert abs(metric["error_pct"]) <= abs(worst[metric["metric"]]["error_pct"]), (case["id"], metric["metric"])
    assert artifact["summary"]["outside_bounds"] == tool.failures(artifact)


def test_card_yaml_cites_the_largest_errors(artifact: dict[str, Any]) -> None:
    """The card's measured result for this artifact states each kind's largest error and its case
    (checks/lint/card.py CRD004 then holds each value to the artifact)."""
    card = yaml.safe_load((ROOT / "card.yaml").read_text(encoding="utf-8"))
    cited = [r for r in card.get("measured_results", []) if r.get("artifact") == "reference/benchmarks/"
             "planner_validation.json"]
    wanted = tool.card_values(artifact)
    assert cited, "card.yaml has no measured result for reference/benchmarks/planner_validation.json; add one " \
                  f"with command: {tool.COMMAND} and values: {json.dumps(wanted, indent=1)}"
    values = cited[0].get("values", {})
    missing = {path: value for path, value in wanted.items() if values.get(path) != value}
    assert not missing, f"card.yaml should cite: {missing}"
    assert cited[0].get("command") == tool.COMMAND


def test_every_case_is_compared_or_listed_with_a_reason(data: dict[str, Any], artifact: dict[str, Any]) -> None:
    compared = [c["id"] for c in artifact["cases"]]
    listed = [c["id"] for c in artifact["unexpressed"]]
    assert sorted(compared + listed) == sorted(c["id"] for c in data["cases"])
    assert all(c["reason"] for c in artifact["unexpressed"])
    for case in artifact["unexpressed"]:
        assert case["published"], case["id"]  # the numbers are kept, so the case shows what is not validated


def test_a_stage_the_source_does_not_name_is_compared_on_every_stage(artifact: dict[str, Any]) -> None:
    for case, metric in tool.metric_rows(artifact):
        if case["stage_logged"] != "unknown" or metric["metric"] not in ("model_states", "peak", "offload_savings"):
            continue
        stages = metric["stages"]
        assert [s["stage"] for s in stages] == list(range(case["job"]["pipeline"])), case["id"]
        worst = max(stages, key=lambda s: abs(s["error_pct"]))
        assert (metric["stage"], metric["error_pct"]) == (worst["stage"], worst["error_pct"])
        bound = metric["bound_pct"]
        assert metric["within"] is all(abs(s["error_pct"]) <= bound for s in stages)


def test_the_bridge_card_is_planned_with_its_layout(artifact: dict[str, Any]) -> None:
    """TP2 PP2 EP4 on 2 nodes of 8 H100, GBS 8, MBS 1 (Megatron-Bridge@067f987d
    skills/nemo-mbridge-perf-cpu-offloading/card.yaml:9-10, SKILL.md:117-118), each fraction as configured."""
    cases = {c["id"]: c for c in artifact["cases"]}
    fractions = {"baseline": 0.0, "optimizer-0.25": 0.25, "optimizer-0.5": 0.5, "optimizer-0.75": 0.75,
                 "optimizer-1.0": 1.0, "optimizer-1.0-overlap": 1.0}
    for tag, fraction in fractions.items():
        job = cases[f"bridge-offload-card/{tag}"]["job"]
        assert (job["tensor"], job["pipeline"], job["expert"], job["world_size"]) == (2, 2, 4, 16)
        assert (job["global_batch_size"], job["micro_batch_size"]) == (8, 1)
        assert job["optimizer_offload_fraction"] == fraction
        assert job["overlap_cpu_optimizer_d2h_h2d"] is tag.endswith("overlap")


def test_cases_are_planned_with_the_layout_their_source_states(data: dict[str, Any],
                                                               artifact: dict[str, Any]) -> None:
    """A case that states its source's layout (expect_layout) is planned with exactly that layout."""
    expecting = {case["id"] for case in data["cases"] if "expect_layout" in case}
    stated = [c for c in artifact["cases"] if c["id"] in expecting]
    assert len(stated) >= 3
    assert {c["id"]: c["layout_differences"] for c in stated if c["layout_differences"]} == {}


def test_the_host_floor_is_its_fit(data: dict[str, Any]) -> None:
    """checks/plan/hardware.py states the eager-MoE host floor to 0.1 ms; refitting it to its case gives that
    value, and the case is marked fitted (so its error is not quoted as a prediction)."""
    from checks.plan.hardware import MOE_LAYER_HOST_S

    assert round(tool.fit_host_floor(data), 4) == MOE_LAYER_HOST_S
    assert tool.fitted_by(next(c for c in data["cases"] if c["id"] == tool.HOST_FLOOR_CASE),
                          tool.fitting_citations())


def test_the_deterministic_rows_are_fitted_where_they_come_from(artifact: dict[str, Any]) -> None:
    """The deterministic-mode efficiencies (checks/data/efficiency.json) are fitted to the interleaved 7B run of
    each system: those step times are marked fitted, their memory is not (no constant moved it), and the
    tensor-parallel run of the same test on the same system is held out, a prediction within the step-time bound."""
    by_id = {case["id"]: case for case in artifact["cases"]}
    for system in ("h100", "gb200"):
        fitted = {m["metric"]: m for m in by_id[f"megatron-lm/gpt3_7b_tp1_pp4_memory_speed/{system}"]["metrics"]}
        assert fitted["step_time"]["fitted"] and not fitted["model_states"]["fitted"] and not fitted["peak"]["fitted"]
        held_out = {m["metric"]: m for m in by_id[f"megatron-lm/gpt3_7b_tp4_pp1_memory_speed/{system}"]["metrics"]}
        assert not held_out["step_time"]["fitted"] and held_out["step_time"]["within"], held_out["step_time"]
        job = by_id[f"megatron-lm/gpt3_7b_tp4_pp1_memory_speed/{system}"]["step"]
        assert "deterministic-mode" in job["efficiency_source"], job


# -- the tool's arithmetic --------------------------------------------------------------------------------------

def test_formula_evaluates_arithmetic_only() -> None:
    assert tool.formula("s*b*h*(34 + 5*a*s/h)", {"s": 2, "b": 1, "h": 4, "a": 2}) == 2 * 4 * (34 + 5 * 2 * 2 / 4)
    for bad in ("__import__('os')", "s**2", "x + 1"):
        with pytest.raises(ValueError):
            tool.formula(bad, {"s": 2})


def test_published_values_in_bytes_and_seconds() -> None:
    assert tool.published({"value": 47.2, "scale": 1e9}) == 47.2e9
    assert tool.published({"value": 996, "scale": 0.001}) == pytest.approx(0.996)
    # Tokens/sec/GPU: GBS x seq tokens a step over all GPUs
    step = tool.published({"value": 8826, "tokens": {"global_batch_size": 1024, "seq_length": 4096, "gpus": 16}})
    assert step == pytest.approx(1024 * 4096 / (8826 * 16))
    assert tool.published({"range": [467, 520], "scale": 0.001}) == pytest.approx(0.4935)


def test_golden_reductions() -> None:
    series = {"values": {"1": "nan", "2": 7.9, "3": "nan", "4": 1.2, "5": 1.1, "6": 1.0, "7": 1.3}}
    assert tool.reduce_golden(series, "first") == 7.9  # step 1 logged nan
    assert tool.reduce_golden(series, "last") == 1.3
    assert tool.reduce_golden(series, "max") == 7.9
    assert tool.reduce_golden(series, "median_after_step_3") == pytest.approx(1.15)  # step 2's start-up left out


def test_a_case_is_fitted_when_a_fitting_line_cites_its_source() -> None:
    case = {"fitted": [], "values": [{"metric": "step_time", "source": "NVIDIA-NeMo/Megatron-Bridge@067f987d:docs/"
                                                                        "performance-summary-archive.md:132"}]}
    assert tool.fitted_by(case, ["efficiency fitted to docs/performance-summary-archive.md:130-135"])
    assert tool.fitted_by(case, ["fit: docs/performance-summary-archive.md:132"])
    assert not tool.fitted_by(case, ["fitted to docs/performance-summary-archive.md:1320"])
    assert not tool.fitted_by(case, ["fitted to docs/performance-summary-archive.md:200-210"])
    golden = {"fitted": ["host AdamW"], "values": [{"metric": "step_time", "source": "NVIDIA/Megatron-LM@d98e8a64:"
                                                                                    "tests/x/golden.json"}]}
    assert tool.fitted_by(golden, ["fitted on tests/x/golden.json"]) == ["host AdamW", "fitted on tests/x/golden.json"]


def test_plan_case_is_the_plan_command(data: dict[str, Any]) -> None:
    """The tool plans a case as `python -m checks plan` does: the same stages as the command's JSON."""
    case = next(c for c in data["cases"] if c["id"] == "bridge-offload-card/optimizer-0.5")
    words = tool.plan_words(case)
    planned = tool.plan_case(words)
    assert not isinstance(planned, str), planned
    split = words.index("--")
    done = subprocess.run([sys.executable, "-m", "checks", "plan", *words[:split], "--format", "json",
                           *words[split:]], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    printed = json.loads(done.stdout)
    assert [tool.after_step(s) for s in planned.stages] == [
        s["weights_bytes"] + s["grads_bytes"] + s["optimizer_bytes"] + s["held_inputs_bytes"]
        for s in printed["as_configured"]["stages"]]
    assert [tool.after_step(s) for s in planned.stages] == [s["after_step_bytes"] for s in
                                                          printed["as_configured"]["stages"]]
    assert [s.device_bytes for s in planned.stages] == [s["device_bytes"] for s in
                                                          printed["as_configured"]["stages"]]


def test_a_refused_case_carries_the_plan_commands_error(data: dict[str, Any], artifact: dict[str, Any]) -> None:
    """What the artifact lists as not expressed is what `python -m checks plan` says, word for word."""
    listed = {c["id"]: c for c in artifact["unexpressed"]}
    refused = [c for c in data["cases"] if c["id"] in listed and "skip" not in c]
    assert refused
    for case in refused:
        done = subprocess.run([sys.executable, "-m", "checks", "plan", *tool.plan_words(case)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 2, case["id"]
        assert done.stderr.strip() == f"error: {listed[case['id']]['reason']}", case["id"]


def test_the_tool_imports_neither_torch_nor_megatron() -> None:
    code = ("import sys; sys.path.insert(0, 'tools'); import planner_validation as t; t.build(t.load_data()); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'megatron', 'transformer_engine')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_megatron_lm_command_without_group_query_attention_keeps_a_group_per_head() -> None:
    """--num-query-groups (default 1) reaches the config only with --group-query-attention; otherwise megatron-core
    gets None, one group per head (NVIDIA/Megatron-LM@d98e8a64:megatron/training/argument_utils.py:330-333,
    megatron/core/transformer/transformer_config.py:1458-1459)."""
    planned = tool.plan_case(["--gpus", "1", "--mcore-version", "main", "--flavor", "megatron-lm",
                              "--argv=--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
                              "--max-position-embeddings 128 --tokenizer-type NullTokenizer --vocab-size 1000"])
    assert not isinstance(planned, str), planned
    assert planned.job.training.shape.num_query_groups == 8
    grouped = tool.plan_case(["--gpus", "1", "--mcore-version", "main", "--flavor", "megatron-lm",
                              "--argv=--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
                              "--max-position-embeddings 128 --tokenizer-type NullTokenizer --vocab-size 1000 "
                              "--group-query-attention"])
    assert not isinstance(grouped, str), grouped
    assert grouped.job.training.shape.num_query_groups == 1


def test_the_legacy_rotary_flag_means_rope() -> None:
    """--use-rotary-position-embeddings turns position_embedding_type to 'rope' (NVIDIA/Megatron-LM@d98e8a64:
    megatron/training/arguments.py:1626-1627): no learned position table (the planner counted one)."""
    words = ["--gpus", "1", "--mcore-version", "main", "--flavor", "megatron-lm",
             "--argv=--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 128 "
             "--max-position-embeddings 128 --tokenizer-type NullTokenizer --vocab-size 1000"]
    learned = tool.plan_case(words)
    rotary = tool.plan_case([*words[:-1], words[-1] + " --use-rotary-position-embeddings"])
    assert not isinstance(learned, str) and not isinstance(rotary, str), (learned, rotary)
    assert learned.job.training.shape.position_rows == 128
    assert rotary.job.training.shape.position_rows == 0


# -- the data file against upstream -----------------------------------------------------------------------------

def _source(text: str) -> tuple[str, str, str, list[int]]:
    """``owner/repo@commit:path[:lines]`` -> (repo, commit, path, lines): ``9``, ``831-835`` or ``29-32,38``."""
    match = re.fullmatch(r"([\w.-]+/[\w.-]+)@([0-9a-f]+):(.+?)(?::([\d,-]+))?", text)
    assert match, text
    lines: list[int] = []
    for part in (match.group(4) or "").split(","):
        if part:
            first, _, last = part.partition("-")
            lines.extend(range(int(first), int(last or first) + 1))
    return match.group(1), match.group(2), match.group(3), lines


def _show(git: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", git, "show", f"{commit}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def _cited_text(source: str) -> str:
    repo, commit, path, lines = _source(source)
    git = {"NVIDIA-NeMo/Megatron-Bridge": BRIDGE_GIT, "NVIDIA/Megatron-LM": MEGATRON_LM_GIT}[repo]
    assert git, f"{repo} needs its mirror"
    text = _show(git, commit, path).splitlines()
    return "\n".join(text[n - 1] for n in lines) if lines else "\n".join(text)


def _bridge_values(data: dict[str, Any]) -> list[dict[str, Any]]:
    found = list(data["megatron_bridge_card"]["restores"])
    for case in data["cases"]:
        found += [v for v in case["values"] if v["source"].startswith("NVIDIA-NeMo/Megatron-Bridge@")]
        if "release" in case:
            found.append(case["release"])
    return found


@NEEDS_BRIDGE
def test_bridge_values_are_on_the_lines_they_cite(data: dict[str, Any]) -> None:
    for value in _bridge_values(data):
        text = _cited_text(value["source"])
        assert value["quote"] in text, value
        for end in value.get("range", ()):
            assert re.search(rf"(?<![\d.]){end}(?![\d.])", value["quote"]), value
        if "value" in value:
            assert re.search(rf"(?<![\d.]){re.escape(str(value['value']))}(?![\d.])", value["quote"]), value


@NEEDS_BRIDGE
def test_bridge_card_stage_and_units_are_as_cited() -> None:
    """GB are 10^9 bytes, and every data-parallel-rank-0 rank prints its own memory line
    (Megatron-Bridge@b00deab6, the card's commit, src/megatron/bridge/training/utils/train_utils.py)."""
    cited = _cited_text("NVIDIA-NeMo/Megatron-Bridge@b00deab6:src/megatron/bridge/training/utils/train_utils.py:886")
    assert "/ 1.0e9" in cited
    printed = _cited_text("NVIDIA-NeMo/Megatron-Bridge@b00deab6:src/megatron/bridge/training/utils/train_utils.py:"
                          "831-835")
    assert "memory (GB)" in printed and "get_rank(group=pg_collection.dp) == 0" in printed


@NEEDS_BRIDGE
def test_performance_rows_state_the_layout_the_cases_expect(data: dict[str, Any]) -> None:
    for case in data["cases"]:
        if "expect_layout" not in case or "tokens" not in case["values"][0]:
            continue  # a card's job: its layout is quoted from the card (gpus_source), compared in the artifact
        value = case["values"][0]
        _, commit, path, (line,) = _source(value["source"])
        lines = _show(str(BRIDGE_GIT), commit, path).splitlines()
        header = next(lines[n] for n in range(line - 1, -1, -1) if lines[n].startswith("| System"))
        row = dict(zip((c.strip() for c in header.strip("|").split("|")),
                       (c.strip() for c in lines[line - 1].strip("|").split("|")), strict=True))
        number = {k: (1 if v == "n/a" else int(v)) for k, v in row.items() if k not in ("System", "Precision")}
        layout, tokens = case["expect_layout"], value["tokens"]
        assert (number["TP"], number["PP"], number["CP"], number["VP"]) == (
            layout["tensor"], layout["pipeline"], layout["context"], layout["virtual"]), case["id"]
        assert (number["EP"], number["MBS"], number["GBS"], number["Sequence Length"]) == (
            layout["expert"], layout["micro_batch_size"], layout["global_batch_size"], layout["seq_length"])
        assert (number["#-GPUs"], number["GBS"], number["Sequence Length"]) == (
            tokens["gpus"], tokens["global_batch_size"], tokens["seq_length"])
        assert number["Tokens / sec / GPU"] == value["value"]
        assert f"--gpus {tokens['gpus']}" in " ".join(case["plan"])


def _mlm_cases(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in data["cases"] if c["id"].startswith("megatron-lm/")]


@NEEDS_MLM
def test_golden_values_are_reduced_from_megatron_lm(data: dict[str, Any]) -> None:
    for case in _mlm_cases(data):
        for value in case["values"]:
            _, commit, path, _ = _source(value["source"])
            series = json.loads(_show(str(MEGATRON_LM_GIT), commit, path))[value["golden"]["key"]]
            assert tool.reduce_golden(series, value["golden"]["reduce"]) == value["value"], (case["id"], value)


@NEEDS_MLM
def test_gpu_counts_are_the_ci_recipes(data: dict[str, Any]) -> None:
    """The functional tests run with the recipe's nodes x gpus (tests/test_utils/recipes/<platform>/*.yaml)."""
    for case in _mlm_cases(data):
        _, commit, path, _ = _source(case["gpus_source"])
        spec = yaml.safe_load(_show(str(MEGATRON_LM_GIT), commit, path))
        name = case["id"].split("/")[1]
        assert any(name in product["test_case"] for product in spec["products"]), case["id"]
        gpus = spec["spec"]["nodes"] * spec["spec"]["gpus"]
        assert case["plan"][case["plan"].index("--gpus") + 1] == str(gpus), case["id"]


@NEEDS_MLM
def test_stage_and_shape_sources_say_what_the_data_file_says() -> None:
    cited = _cited_text("NVIDIA/Megatron-LM@d98e8a64:megatron/training/global_vars.py:240-241")
    assert "args.rank == (args.world_size - 1)" in cited
    logged = _cited_text("NVIDIA/Megatron-LM@d98e8a64:megatron/training/training.py:3436-3445")
    assert '"mem-allocated-bytes", mem_stats["allocated_bytes.all.current"]' in logged
    assert '"mem-max-allocated-bytes", mem_stats["allocated_bytes.all.peak"]' in logged
    assert "'tp-cp-ep-dp-pp'" in _cited_text("NVIDIA/Megatron-LM@d98e8a64:megatron/training/initialize.py:395")
    shape = _cited_text("NVIDIA/Megatron-LM@d98e8a64:examples/gpt3/train_gpt3_175b_distributed.sh:29-32,38,56-57")
    for flag in ("--num-layers 96", "--hidden-size 12288", "--num-attention-heads 96", "--seq-length 2048",
                 "--micro-batch-size 1", "--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 16"):
        assert flag in shape
    formula = _cited_text("NVIDIA/Megatron-LM@d98e8a64:megatron/training/theoretical_memory_usage.py:309,317-318,323")
    assert "Table 2 of https://arxiv.org/pdf/2205.05198.pdf" in formula and "18 + (4 * (args.ffn_hidden_size" in formula
    assert "/ args.tensor_model_parallel_size" in formula


@NEEDS_MLM
def test_each_model_config_gives_the_job_of_its_command_line(data: dict[str, Any], tmp_path: Path) -> None:
    """The data file's Megatron-LM argv leaves out only what the planner does not read: planning the functional
    test's own model_config.yaml gives the same job (or the same refusal)."""
    for case in _mlm_cases(data):
        if "skip" in case:
            continue
        _, commit, path, _ = _source(case["config"])
        config = tmp_path / case["id"].replace("/", "_") / "model_config.yaml"
        config.parent.mkdir()
        config.write_text(_show(str(MEGATRON_LM_GIT), commit, path), encoding="utf-8")
        from_file = tool.plan_case([*case["plan"], str(config)])
        from_argv = tool.plan_case(tool.plan_words(case))
        if isinstance(from_argv, str) or isinstance(from_file, str):
            assert isinstance(from_argv, str) and isinstance(from_file, str), (case["id"], from_file, from_argv)
            continue
        assert from_file.job.training == from_argv.job.training, case["id"]
        assert from_file.job.offload == from_argv.job.offload, case["id"]
