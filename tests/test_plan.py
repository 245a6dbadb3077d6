"""The planner: model states exactly as the split rule and sharding give them, monotone offloading, the CLI."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.cli import main
from checks.model.optimizer_split import greedy_selection
from checks.model.parameters import chunk_tensors, stage_chunks
from checks.model.shape import ModelShape, MoEShape, Parallelism
from checks.plan.hardware import HARDWARE
from checks.plan.memory import Offload, Training, host_offload_bytes, layer_bytes, plan_memory, stage_memory
from checks.plan.presets import PRESETS
from checks.plan.recommend import Budget, recommend
from checks.plan.throughput import step_cost

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "configs"
SHAPE = ModelShape(num_layers=4, hidden_size=64, num_attention_heads=4, num_query_groups=2, kv_channels=16,
                   ffn_hidden_size=160, vocab_size=1000, gated_linear_unit=True, add_bias_linear=False,
                   add_qkv_bias=False, layernorm_bias=False, qk_layernorm=True, tied_embeddings=False,
                   position_rows=0, transformer_engine=True, moe=None)
MOE = replace(SHAPE, moe=MoEShape(num_experts=4, ffn_hidden_size=48, shared_expert_size=0, shared_expert_gate=False,
                                  layers=(False, True, True, True), expert_layout="grouped"))


def _brute_force_ranks(tensors: list, dp: int, bucket_size: int | None) -> list[list[tuple[object, int]]]:
    """Element by element: lay the buffer out as the distributed optimizer does, then read each rank's slice."""
    owner: list[object | None] = []
    buckets: list[tuple[int, int]] = []
    first = 0
    divisor = math.lcm(dp, 128)
    items = list(reversed(tensors))
    for index, tensor in enumerate(items):
        owner += [None] * (-len(owner) % 64)
        owner += [tensor] * tensor.numel
        full = bucket_size is not None and len(owner) - first >= bucket_size
        if full or index == len(items) - 1:
            owner += [None] * (-len(owner) % divisor)
            buckets.append((first, len(owner)))
            first = len(owner)
    ranks: list[list[tuple[object, int]]] = [[] for _ in range(dp)]
    for start, end in buckets:
        size = (end - start) // dp
        for rank in range(dp):
            counts: dict[int, list] = {}
            for position in range(start + rank * size, start + (rank + 1) * size):
                if owner[position] is not None:
                    counts.setdefault(id(owner[position]), [owner[position], 0])[1] += 1
            ranks[rank] += [(t, n) for t, n in counts.values()]
    # Parameter groups in order: weight-decayed matrices first, then 1-D tensors (megatron-core >= 0.16).
    return [[p for p in pieces if p[0].matrix] + [p for p in pieces if not p[0].matrix] for pieces in ranks]


@pytest.mark.parametrize("shape", [SHAPE, MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("dp", [1, 2, 3, 8])
@pytest.mark.parametrize("bucket_size", [None, 5000])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 1.0])
def test_model_states_are_exactly_what_sharding_and_the_split_give(shape: ModelShape, dp: int,
                                                                   bucket_size: int | None, fraction: float) -> None:
    t = Training(shape, Parallelism(), data_parallel=dp, bucket_size=bucket_size, precision_aware_optimizer=True)
    memory = stage_memory(t, 0, Offload(optimizer_offload_fraction=fraction))
    chunk = stage_chunks(shape.num_layers, t.par)[0][0]  # type: ignore[index]
    tensors = list(chunk_tensors(shape, t.par, chunk))
    numel = sum(x.numel for x in tensors)
    assert memory.weights_bytes == 2 * numel and memory.grads_bytes == 4 * numel
    device_worst = host_worst = 0
    offload = Offload(optimizer_offload_fraction=fraction)
    for pieces in _brute_force_ranks(tensors, dp, bucket_size):
        sizes = [n for _, n in pieces]
        taken = [n for n, take in zip(sizes, greedy_selection(sizes, fraction), strict=True) if take] \
            if fraction else []
        device = (sum(sizes) - sum(taken)) * 12 if fraction else sum(sizes) * 12
        # the host side of each piece, by the pinned allocator's rule (tests/test_plan_memory_defects.py); the most
        # host-hungry rank need not be the most loaded GPU
        device_worst = max(device_worst, device)
        host_worst = max(host_worst, host_offload_bytes(t, offload, taken))
    assert (memory.optimizer_bytes, memory.host_optimizer_bytes) == (device_worst, host_worst)


FRACTION_PAIRS = st.tuples(st.floats(0, 1), st.floats(0, 1)).map(sorted)


@settings(max_examples=60, deadline=None)
@given(FRACTION_PAIRS, st.sampled_from([1, 2, 4, 8]), st.booleans())
def test_more_optimizer_offload_never_uses_more_gpu_memory(fractions: list[float], dp: int, moe: bool) -> None:
    t = Training(MOE if moe else SHAPE, Parallelism(), data_parallel=dp, precision_aware_optimizer=True)
    low, high = (stage_memory(t, 0, Offload(optimizer_offload_fraction=f)) for f in fractions)
    if fractions[0] > 0:
        assert high.device_bytes <= low.device_bytes and high.host_bytes >= low.host_bytes
    for memory in (low, high):  # the host holds at least 16 bytes per offloaded element (pinned ones round up)
        assert memory.host_optimizer_bytes >= 16 * memory.optimizer_offloaded_elements


@settings(max_examples=40, deadline=None)
@given(FRACTION_PAIRS.filter(lambda pair: pair[0] > 0), st.booleans())
def test_the_host_gains_what_the_gpu_sheds_as_upstream_allocates_it(fractions: list[float], moe: bool) -> None:
    """Per element moved: 12 GPU bytes (precision-aware optimizer) shed; on the host the 12 pageable bytes of the
    fp32 master and moments exactly (pin_cpu_params is not read in the default version), and a pinned gradient
    buffer of 4 rounded up to at most 8, plus at most 4 of cached bf16 copy (notes, 6.2; the allocator's rule in
    tests/test_plan_memory_defects.py)."""
    t = Training(MOE if moe else SHAPE, Parallelism(), data_parallel=1, precision_aware_optimizer=True)
    low, high = (stage_memory(t, 0, Offload(optimizer_offload_fraction=f)) for f in fractions)
    moved = high.optimizer_offloaded_elements - low.optimizer_offloaded_elements
    assert low.optimizer_bytes - high.optimizer_bytes == 12 * moved
    assert 12 * moved <= high.host_optimizer_bytes - low.host_optimizer_bytes <= 24 * moved


@pytest.mark.parametrize("shape", [SHAPE, MOE], ids=["dense", "moe"])
def test_layer_offload_moves_exactly_the_layers_it_names(shape: ModelShape) -> None:
    t = Training(shape, Parallelism(), seq_length=256, micro_batch_size=2)
    base = stage_memory(t, 0)
    previous = base
    for n in range(1, shape.num_layers):
        memory = stage_memory(t, 0, Offload(cpu_offloading_num_layers=n))
        moved = sum(layer_bytes(t, layer) for layer in range(n))
        assert memory.host_activation_bytes == round(moved)
        assert abs(memory.activations_bytes + memory.host_activation_bytes - base.activations_bytes) <= 1
        assert memory.activations_bytes <= previous.activations_bytes
        previous = memory


def test_fine_grained_offload_is_monotone_in_the_module_set_and_the_size_threshold() -> None:
    t = Training(MOE, Parallelism(), seq_length=2048, micro_batch_size=2)
    sets = [("core_attn",), ("core_attn", "attn_proj"), ("qkv_linear", "core_attn", "attn_proj", "expert_fc1")]
    peaks = [stage_memory(t, 0, Offload(offload_modules=m, min_offloaded_tensor_size=1)).activations_bytes
             for m in sets]
    assert peaks == sorted(peaks, reverse=True) and peaks[0] < stage_memory(t, 0).activations_bytes
    huge = stage_memory(t, 0, Offload(offload_modules=sets[-1], min_offloaded_tensor_size=10**12))
    assert huge.host_activation_bytes == 0  # nothing reaches the threshold: the silent no-op


def test_in_flight_micro_batches_follow_the_pipeline_schedule() -> None:
    shape = replace(SHAPE, num_layers=8)
    one = plan_memory(Training(shape, Parallelism(pipeline=4), global_batch_size=16))
    per_stage = [s.activations_bytes for s in one]
    assert per_stage[0] > per_stage[1] > per_stage[2]  # 4, 3, 2 micro-batches in flight
    few = plan_memory(Training(shape, Parallelism(pipeline=4), global_batch_size=2))
    assert few[0].activations_bytes < one[0].activations_bytes  # only 2 micro-batches exist


def test_offload_costs_what_crosses_the_link_and_the_host_step() -> None:
    hw = HARDWARE["h100-sxm"]
    t = Training(SHAPE, Parallelism(), data_parallel=2, global_batch_size=16, precision_aware_optimizer=True)
    assert step_cost(t, Offload(), hw).overhead_s == 0
    memory = stage_memory(t, 0, Offload(optimizer_offload_fraction=1.0))
    cost = step_cost(t, Offload(optimizer_offload_fraction=1.0), hw)
    moved = memory.optimizer_offloaded_elements
    expected = moved * 4 / hw.d2h_bytes_per_s + moved / hw.host_adam_elements_per_s + moved * 4 / hw.h2d_bytes_per_s
    assert cost.optimizer_offload_s == pytest.approx(expected)


def _as_config(t: Training) -> tuple[dict[str, object], str | None]:
    """The job as the checker's canonical settings, written out here rather than taken from the planner."""
    values: dict[str, object] = {"model.num_layers": t.shape.num_layers, "model.bf16": True,
                                 "model.tensor_model_parallel_size": t.par.tensor,
                                 "model.pipeline_model_parallel_size": t.par.pipeline,
                                 "model.sequence_parallel": t.sequence_parallel}
    if t.shape.moe is not None:
        values["model.num_moe_experts"] = t.shape.moe.num_experts
    if t.recompute != "none":
        values["model.recompute_granularity"] = t.recompute
    # ACT009 knows a hybrid stack by its Bridge provider (Megatron-Bridge@067f987d:src/megatron/bridge/models/
    # mamba/mamba_provider.py:29).
    return values, "megatron.bridge.models.mamba.mamba_provider.MambaModelProvider" if t.shape.hybrid else None


_OPTIMIZER = {"optimizer_cpu_offload", "optimizer_offload_fraction", "use_precision_aware_optimizer",
              "use_distributed_optimizer"}


def _jobs() -> list[tuple[str, Training]]:
    jobs = []
    for name, preset in PRESETS.items():
        t = Training(preset.shape, preset.parallelism, data_parallel=8, seq_length=preset.seq_length,
                     global_batch_size=64, sequence_parallel=preset.parallelism.tensor > 1,
                     precision_aware_optimizer=True)
        jobs += [(name, t), (f"{name}-selective", replace(t, recompute="selective")),
                 (f"{name}-long", replace(t, seq_length=4 * preset.seq_length))]
    return jobs


@pytest.mark.parametrize("name,t", _jobs(), ids=[name for name, _ in _jobs()])
def test_every_option_the_planner_offers_passes_the_checker(name: str, t: Training) -> None:
    """Each option, set on the job, draws no error and no warning from the checker that the job alone does not
    draw; a finding about the launch environment (TEX005's NVTE_CPU_OFFLOAD_V1) is named in the option's note."""
    from checks.api import validate

    rec = recommend(t, Budget(HARDWARE["h100-sxm"]))
    assert rec.verdict and rec.options
    job, model_class = _as_config(t)
    before = {(f.rule, f.path) for f in validate(job, version=t.version, model_class=model_class)}
    for option in rec.options:
        values = {**job, **{(f"optimizer.{k}" if k in _OPTIMIZER else f"model.{k}"): v
                            for k, v in option.settings.items()}}
        found = [f for f in validate(values, version=t.version, model_class=model_class)
                 if f.severity in ("error", "warning") and (f.rule, f.path) not in before]
        assert [f"{f.rule}: {f.message}" for f in found if not f.path.startswith("env.")] == [], option.mechanism
        for finding in (f for f in found if f.path.startswith("env.")):
            assert finding.rule in option.note and finding.path.removeprefix("env.") in option.note


def test_the_planner_offers_no_layer_count_the_checker_warns_about() -> None:
    """ACT008 warns at num_layers - 1; where only that count would fit, the layer-level option stops below it."""
    t = Training(PRESETS["llama3-8b"].shape, Parallelism(), data_parallel=8, seq_length=16384, global_batch_size=64,
                 precision_aware_optimizer=True)
    budget = Budget(replace(HARDWARE["h100-sxm"], gpu_memory_bytes=80 * 10**9))  # where only num_layers - 1 fits
    rec = recommend(t, budget)
    layer = next(o for o in rec.options if o.mechanism == "layer-level activation offload")
    assert layer.settings["cpu_offloading_num_layers"] == t.shape.num_layers - 2
    deep = stage_memory(t, 0, Offload(cpu_offloading_num_layers=t.shape.num_layers - 1))
    assert deep.device_bytes <= budget.device_bytes  # the count it left out would fit


def test_a_preset_step_fills_every_presets_pipeline() -> None:
    from checks.plan.setup import PRESET_MICROBATCHES_PER_STEP

    # Fewer micro-batches than stages would leave stages idle (1F1B keeps PP micro-batches in flight).
    assert max(p.parallelism.pipeline for p in PRESETS.values()) <= PRESET_MICROBATCHES_PER_STEP


# --- the command ------------------------------------------------------------------------------------

def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_preset_text_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--preset", "llama3-70b", "--gpus", "64")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "plan: preset llama3-70b on h100-sxm (published figures)"
    assert "recommendation: fits without offloading" in out
    code, out, _ = run(capsys, "--preset", "llama3-8b", "--gpus", "8")
    # full recompute (+31%) is priced below layer offload (+38%) by the step-time model, so "use full recompute"
    assert code == 1 and "DOES NOT FIT" in out and "use full recompute" in out and "\n  set " in out


def test_plan_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--preset", "qwen3-30b-a3b", "--gpus", "16", "--format", "json")
    document = json.loads(out)
    assert set(document) == {"target", "status", "source", "hardware", "training", "budget", "as_configured",
                             "options", "recommendation", "verdict", "assumptions"}
    assert document["target"] is None  # a preset (or a Bridge / Megatron-LM config) is one unlabelled model
    assert document["status"] in ("fits", "fits_with_change", "does_not_fit")
    assert (code == 0) == (document["status"] == "fits")
    stage = document["as_configured"]["stages"][0]
    assert stage["device_bytes"] == stage["weights_bytes"] + stage["grads_bytes"] + stage["optimizer_bytes"] \
        + stage["activations_bytes"]


def test_plan_reads_a_config_and_takes_its_offload_settings(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, str(EXAMPLES / "bridge/run_config_clean.yaml"), "--gpus", "16", "--format", "json")
    document = json.loads(out)
    assert document["as_configured"]["offload"]["optimizer_offload_fraction"] == 0.5
    assert document["as_configured"]["offload"]["offload_modules"] == ["core_attn", "attn_proj"]
    assert document["training"]["tensor_parallel"] == 2 and document["training"]["data_parallel"] == 4


def test_a_preset_with_overrides_keeps_the_presets_layout(capsys: pytest.CaptureFixture[str]) -> None:
    """`--preset X --set KEY=V` plans the preset's job with one change: sizes the overrides leave unsaid come
    from the preset, those they state win."""
    _, out, _ = run(capsys, "--preset", "llama3-70b", "--gpus", "64", "--set", "model.cpu_offloading=false",
                    "--format", "json")
    training = json.loads(out)["training"]
    layout = PRESETS["llama3-70b"].parallelism
    assert (training["tensor_parallel"], training["pipeline_parallel"]) == (layout.tensor, layout.pipeline)
    assert training["seq_length"] == PRESETS["llama3-70b"].seq_length
    _, out, _ = run(capsys, "--preset", "llama3-70b", "--gpus", "64", "--set", "model.pipeline_model_parallel_size=8",
                    "--format", "json")
    training = json.loads(out)["training"]
    assert (training["tensor_parallel"], training["pipeline_parallel"]) == (layout.tensor, 8)


@pytest.mark.parametrize("argv,expected", [
    ((), "give a config"),
    (("--preset", "llama5",), "unknown preset 'llama5'"),
    (("--preset", "llama3-70b", "--gpus", "12"), "not a multiple of TP x PP x CP = 32"),
    (("--preset", "llama3-8b", "--hardware", "tpu"), "unknown hardware 'tpu'"),
    (("--preset", "llama3-8b", "--headroom", "1.5"), "--headroom must be in [0, 1)"),
    ((str(EXAMPLES / "nemo-rl/grpo_offload.yaml"), "--set", "policy.model_name=example-org/Not-In-The-Catalogue"),
     "not one of the presets; add --preset NAME"),
    (("--preset", "llama3-8b", "--profile", "/nonexistent.json"), "cannot read the probe profile"),
])
def test_plan_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], expected: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and expected in err and len(err.strip().splitlines()) == 1


def test_plot_without_matplotlib_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import importlib.util
    if importlib.util.find_spec("matplotlib") is not None:
        code, _, _ = run(capsys, "--preset", "llama3-70b", "--plot", str(tmp_path / "p.png"))
        assert code == 0 and (tmp_path / "p.png").stat().st_size > 0
    else:
        code, _, err = run(capsys, "--preset", "llama3-70b", "--plot", str(tmp_path / "p.png"))
        assert (code, err) == (2, "error: --plot: needs matplotlib: pip install matplotlib\n")


def test_probe_profile_drives_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("torch")
    profile = tmp_path / "node.json"
    assert main(["probe", "--out", str(profile), "--elements", "200000"]) == 0
    data = json.loads(profile.read_text())
    assert data["host_adam_elements_per_s"] > 0 and data["host_memory_bytes"] > 0
    capsys.readouterr()
    _, out, _ = run(capsys, "--preset", "llama3-70b", "--profile", str(profile), "--format", "json")
    assert json.loads(out)["hardware"]["measured"] is True


def test_host_memory_per_node_counts_only_the_jobs_gpus_on_it() -> None:
    from checks.plan.recommend import host_per_node

    preset = PRESETS["llama3-8b"]
    t = Training(preset.shape, preset.parallelism, data_parallel=1, seq_length=preset.seq_length)
    stages = plan_memory(t, Offload(optimizer_offload_fraction=1.0))
    hw = HARDWARE["h100-sxm"]
    one = max(s.host_bytes for s in stages)
    assert one > 0
    assert host_per_node(stages, hw, world_size=1) == one
    assert host_per_node(stages, hw, world_size=64) == one * hw.gpus_per_node


def test_gpus_replace_the_assumed_data_parallel_size_and_keep_a_presets_step(
        capsys: pytest.CaptureFixture[str]) -> None:
    from checks.plan.setup import PRESET_MICROBATCHES_PER_STEP

    _, out, _ = run(capsys, "--preset", "llama3-8b", "--format", "json")
    document = json.loads(out)
    assert any("data-parallel size 1 (the smallest the layout allows; set --gpus)" in a
               for a in document["assumptions"])
    _, out, _ = run(capsys, "--preset", "llama3-8b", "--gpus", "16", "--micro-batch-size", "2", "--format", "json")
    document = json.loads(out)
    assert not any("data-parallel size" in a for a in document["assumptions"])
    assert document["training"]["num_microbatches"] == PRESET_MICROBATCHES_PER_STEP
    # A config states its global batch: more GPUs give fewer micro-batches per step, not a bigger batch.
    config = str(EXAMPLES / "bridge/run_config_clean.yaml")
    steps = [json.loads(run(capsys, config, "--gpus", gpus, "--format", "json")[1])["training"]["num_microbatches"]
             for gpus in ("16", "32")]
    assert steps[0] == 2 * steps[1]


def test_the_verdict_is_the_plans_and_the_renderers_only_print_it() -> None:
    from checks.plan import render
    from checks.plan.job import DOES_NOT_FIT, FITS, FITS_WITH_CHANGE, Dimensions, Plan, plan_preset

    budget = Budget(HARDWARE["h100-sxm"])
    fits = plan_preset(PRESETS["llama3-70b"], Dimensions(gpus=64), budget)
    change = plan_preset(PRESETS["llama3-8b"], Dimensions(gpus=8), budget)
    assert (fits.status, fits.exit_code, change.status, change.exit_code) == (FITS, 0, FITS_WITH_CHANGE, 1)
    assert json.loads(render.render_json_all(change))["status"] == FITS_WITH_CHANGE
    both = Plan((*fits.entries, *change.entries))
    assert both.status == FITS_WITH_CHANGE and both.exit_code == 1
    assert render.render_text_all(both).endswith("(overall: fits with change)")
    tiny = plan_preset(PRESETS["llama3-70b"], Dimensions(gpus=32), replace(budget, hardware=replace(
        HARDWARE["h100-sxm"], gpu_memory_bytes=2**30)))
    assert tiny.status == DOES_NOT_FIT and Plan((*change.entries, *tiny.entries)).status == DOES_NOT_FIT


# Experts per token of each MoE preset, as its Megatron-LM source sets them (--moe-router-topk)
_TOP_K_SOURCES = {
    "qwen3-30b-a3b": ("examples/post_training/modelopt/conf/Qwen/Qwen3-30B-A3B.sh", 8),
    "qwen3-235b-a22b": ("examples/post_training/modelopt/conf/Qwen/Qwen3-235B-A22B.sh", 8),
    "deepseek-v3": ("examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-R1.sh", 8),
    "mixtral-8x7b": ("examples/mixtral/train_mixtral_8x7b_distributed.sh", 2),
}
# presets whose top-k is a Bridge provider's (Megatron-LM has no argument file for them): provider class, top-k
_TOP_K_BRIDGE = {"moonlight-16b-a3b": ("MoonlightModelProvider16B", 6)}
_BRIDGE_PROVIDERS = "dc944b9c:src/megatron/bridge/models/deepseek/deepseek_provider.py"


def test_moe_presets_are_planned_at_their_own_top_k() -> None:
    """from_preset used to leave moe_top_k at Training's default (2), planning the top-8 models at top-2."""
    from checks.plan.setup import from_preset

    moe = {name for name, preset in PRESETS.items() if preset.shape.moe is not None}
    assert moe == set(_TOP_K_SOURCES) | set(_TOP_K_BRIDGE)
    for name, (_, top_k) in (_TOP_K_SOURCES | _TOP_K_BRIDGE).items():
        job = from_preset(PRESETS[name])
        assert job.training.moe_top_k == top_k, name
    # more routed tokens, more activations: the top-8 plan holds more than the same job at top-2
    qwen = from_preset(PRESETS["qwen3-30b-a3b"]).training
    at_top2 = replace(qwen, moe_top_k=2)
    assert plan_memory(qwen)[0].activations_bytes > plan_memory(at_top2)[0].activations_bytes


def test_moe_preset_top_k_matches_the_megatron_lm_argument_files() -> None:
    """With MEGATRON_LM_GIT, each preset's top-k is the --moe-router-topk of its source at d98e8a64."""
    import os
    import re
    import subprocess

    git = os.environ.get("MEGATRON_LM_GIT")
    if not git:
        pytest.skip("set MEGATRON_LM_GIT to a NVIDIA/Megatron-LM git directory")
    for name, (path, _) in _TOP_K_SOURCES.items():
        text = subprocess.run(["git", "-C", git, "show", f"d98e8a64:{path}"], capture_output=True, text=True,
                              check=True).stdout
        (found,) = re.findall(r"--moe-router-topk\s+(\d+)", text)
        assert PRESETS[name].moe_top_k == int(found), name


def test_moe_preset_top_k_matches_the_bridge_providers() -> None:
    """With BRIDGE_GIT, a preset sourced from a Bridge provider routes to that class's moe_router_topk."""
    import os
    import re
    import subprocess

    git = os.environ.get("BRIDGE_GIT")
    if not git:
        pytest.skip("set BRIDGE_GIT to a NVIDIA-NeMo/Megatron-Bridge git directory")
    text = subprocess.run(["git", "-C", git, "show", _BRIDGE_PROVIDERS], capture_output=True, text=True,
                          check=True).stdout
    for name, (provider, _) in _TOP_K_BRIDGE.items():
        body = text.split(f"class {provider}(", 1)[1].split("\nclass ", 1)[0]
        (found,) = re.findall(r"moe_router_topk: int = (\d+)", body)
        assert PRESETS[name].moe_top_k == int(found), name


# -- the whole plan, as printed ----------------------------------------------------------------------------------
# Each command's full output (text and JSON) is held in tests/golden/plan/: the figures, the options, their order,
# the recommendation and the assumptions. After an intended change to the planner, regenerate them with
#     UPDATE_GOLDEN=1 python -m pytest tests/test_plan.py -k golden
# and read the diff: it is the change the user sees.
GOLDEN = ROOT / "tests" / "golden" / "plan"
PPO = str(EXAMPLES / "nemo-rl" / "ppo_value_model.yaml")
PLANS: dict[str, list[str]] = {
    "llama3-8b": ["--preset", "llama3-8b", "--gpus", "8"],
    "llama3-70b-fits": ["--preset", "llama3-70b", "--gpus", "64"],
    "mixtral-nothing-fits": ["--preset", "mixtral-8x7b", "--gpus", "8"],
    "qwen3-235b-stages": ["--preset", "qwen3-235b-a22b", "--gpus", "64"],
    "deepseek-v3": ["--preset", "deepseek-v3", "--gpus", "512"],
    "nemotron-h": ["--preset", "nemotron-h-8b", "--gpus", "8", "--hardware", "h200-sxm"],
    "llama3-8b-configured-offload": ["--preset", "llama3-8b", "--gpus", "8", "--set",
                                     "optimizer.optimizer_cpu_offload=true", "--set",
                                     "optimizer.optimizer_offload_fraction=0.5", "--set", "model.cpu_offloading=true",
                                     "--set", "model.cpu_offloading_num_layers=4"],
    "nemo-rl-two-targets": [PPO, "--preset", "llama3-8b", "--set", "value.megatron_cfg.activation_checkpointing=false",
                            "--set", "value.megatron_cfg.optimizer.optimizer_offload_fraction=1.0"],
}


def _golden_cases() -> list[tuple[str, list[str]]]:
    return [(f"{name}.{ext}", [*argv, "--format", fmt]) for name, argv in PLANS.items()
            for ext, fmt in (("txt", "text"), ("json", "json"))]


@pytest.mark.parametrize(("name", "argv"), _golden_cases(), ids=[n for n, _ in _golden_cases()])
def test_golden_plan_output(name: str, argv: list[str], capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code = main(["plan", *argv])
    out = capsys.readouterr().out.replace(str(ROOT) + "/", "")
    printed = f"exit {code}\n{out}"
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(printed, encoding="utf-8")
    assert printed == path.read_text(encoding="utf-8"), f"the plan changed: see the docstring above to update {path}"


def test_every_golden_file_is_a_case() -> None:
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(n for n, _ in _golden_cases())


def test_the_checker_judges_each_option_with_the_jobs_transformer_engine() -> None:
    """An option the job's Transformer Engine cannot build is refused; the same option with a newer TE, or an
    unknown one, is offered with what it needs of the environment."""
    from checks.config import Environment
    from checks.plan.recommend import Checker

    t = Training(MOE, Parallelism(), data_parallel=1)
    option = {"fine_grained_activation_offloading": True, "offload_modules": ["expert_fc1"]}
    old = Checker(t, Environment(te_version=(2, 5))).verdict(option)
    assert not old.accepted
    assert old.refused[0].startswith("TEX006: offloading expert_fc1 needs Transformer Engine >= 2.6")
    for te in ((2, 14), None):
        verdict = Checker(t, Environment(te_version=te)).verdict(option)
        assert verdict.accepted and verdict.needs == ("NVTE_CPU_OFFLOAD_V1=1 in the job's environment (TEX005)",)


@pytest.mark.parametrize("pipeline", [1, 2])
def test_a_tied_embedding_gets_its_own_bucket_only_across_pipeline_stages(pipeline: int) -> None:
    """With PP > 1 the first stage's word embedding, tied to the last stage's output layer, is all-reduced
    between them, so megatron-core puts it in a gradient bucket of its own; with one stage there is nothing to
    share and it stays in the common bucket."""
    from checks.model.optimizer_split import shard_pieces

    tied = replace(SHAPE, tied_embeddings=True)
    t = Training(tied, Parallelism(pipeline=pipeline), data_parallel=7, precision_aware_optimizer=True,
                 distributed_optimizer=True)
    chunk = stage_chunks(tied.num_layers, t.par)[0][0]  # type: ignore[index]
    tensors = [list(chunk_tensors(tied, t.par, chunk))]

    def most_loaded(own: frozenset[str]) -> int:
        ranks = shard_pieces(tensors, False, t.data_parallel, t.version, own_bucket=own)
        return 12 * max(sum(n for _, n in rank) for rank in ranks)

    apart, together = most_loaded(frozenset({"embedding.word_embeddings.weight"})), most_loaded(frozenset())
    assert apart != together  # at DP 7 the most loaded rank differs between them (at DP 3 or 8 it does not)
    assert stage_memory(t, 0).optimizer_bytes == (apart if pipeline > 1 else together)


@pytest.mark.parametrize("needed", [1, 2, 5, 17])
def test_the_layer_option_is_the_smallest_count_that_fits(needed: int) -> None:
    """With exactly ``needed`` layers' worth of memory to free, the layer-level option offloads that many: the
    binary search neither stops above the smallest fitting count nor starts above one."""
    from checks.plan.recommend import peak

    t = Training(PRESETS["llama3-8b"].shape, Parallelism(), data_parallel=8, seq_length=16384, global_batch_size=64,
                 precision_aware_optimizer=True)
    fits_at = peak(plan_memory(t, Offload(cpu_offloading_num_layers=needed)))
    assert peak(plan_memory(t, Offload(cpu_offloading_num_layers=needed - 1))) > fits_at
    rec = recommend(t, Budget(replace(HARDWARE["h100-sxm"], gpu_memory_bytes=fits_at), headroom=0.0))
    layer = next(o for o in rec.options if o.mechanism == "layer-level activation offload")
    assert layer.fits and layer.settings["cpu_offloading_num_layers"] == needed


def test_a_job_whose_host_memory_is_exactly_the_budget_fits() -> None:
    """Host memory, like GPU memory, fits up to and including the budget."""
    from checks.plan.job import FITS, planned
    from checks.plan.recommend import host_per_node, peak
    from checks.plan.setup import from_preset

    job = from_preset(PRESETS["llama3-8b"])
    stages = plan_memory(job.training, job.offload)
    hardware = replace(HARDWARE["h100-sxm"], gpu_memory_bytes=peak(stages) * 2)
    host = host_per_node(stages, hardware, job.training.world_size)
    exact = Budget(replace(hardware, host_memory_bytes=host), host_headroom=0.0)
    assert exact.host_bytes_per_node == host and planned(job, exact).status == FITS
    short = Budget(replace(hardware, host_memory_bytes=host - 1), host_headroom=0.0)
    assert planned(job, short).status != FITS


def test_a_layout_the_model_cannot_split_is_an_input_error_with_why() -> None:
    from checks.errors import InputError
    from checks.plan.job import planned
    from checks.plan.setup import from_preset

    job = from_preset(PRESETS["llama3-8b"])
    broken = replace(job, training=replace(job.training, par=replace(job.training.par, pipeline=5)))
    with pytest.raises(InputError) as err:
        planned(broken, Budget(HARDWARE["h100-sxm"]))
    assert str(err.value) == "plan: 32 layers do not split over pipeline size 5 x virtual 1"


def test_the_checker_is_told_a_full_recompute_jobs_method_and_layers() -> None:
    from checks.plan.recommend import job_settings

    t = Training(SHAPE, Parallelism(), recompute="full", recompute_method="block", recompute_num_layers=3)
    settings = job_settings(t)
    assert (settings["model.recompute_granularity"], settings["model.recompute_method"],
            settings["model.recompute_num_layers"]) == ("full", "block", 3)
    selective = job_settings(replace(t, recompute="selective"))
    assert selective["model.recompute_granularity"] == "selective" and "model.recompute_method" not in selective


def test_host_memory_is_unknown_where_the_system_does_not_say() -> None:
    import os

    from checks.plan import probe

    assert probe._host_memory_bytes() > 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
        assert probe._host_memory_bytes() == 0  # 0 is "not measured" to the profile, not a tiny host


@pytest.mark.parametrize(("stated", "dp", "size"), [(None, 8, 40_000_000), (None, 64, 64_000_000),
                                                    (12_345_678, 8, 12_345_678)])
def test_the_gradient_bucket_is_ddps_default_unless_stated(stated: int | None, dp: int, size: int) -> None:
    """With overlap_grad_reduce, DDP buckets max(40M, 1M x dp) elements, or the stated bucket_size."""
    from checks.context import Context
    from checks.loaders import Request, load
    from checks.plan.setup import _bucket_size

    sets = ("ddp.overlap_grad_reduce=true",) + ((f"ddp.bucket_size={stated}",) if stated else ())
    (cfg,) = load(Request(overrides=sets, flavor="bridge", version="0.19.2"))
    assert _bucket_size(Context(cfg), dp) == size
    (plain,) = load(Request(overrides=("ddp.overlap_grad_reduce=false",), flavor="bridge", version="0.19.2"))
    assert _bucket_size(Context(plain), dp) is None  # one bucket


def test_a_gpu_adamw_step_moves_these_bytes_per_element() -> None:
    """fp32 parameters are their own main copy (no separate master): 2 x (4 + 4) read and written for the moments,
    the fp32 gradient read, the parameter written; bf16 parameters add the fp32 master, read and written."""
    from checks.plan.throughput import _optimizer_bytes_per_element

    assert _optimizer_bytes_per_element(Training(SHAPE, Parallelism(), param_bytes=4)) == 2 * 8 + 4 + 4
    assert _optimizer_bytes_per_element(Training(SHAPE, Parallelism(), param_bytes=2)) == 2 * 12 + 4 + 2


def test_a_parallel_size_of_zero_is_refused_where_it_is_set(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--preset", "llama3-8b", "--set", "model.tensor_model_parallel_size=0")
    assert (code, out) == (2, "") and err == (
        "error: --set #1: tensor_model_parallel_size=0: a parallel size is at least 1; megatron-core cannot build "
        "this layout, so there is nothing to plan\n")
