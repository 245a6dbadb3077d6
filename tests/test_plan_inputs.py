"""What the planner is given: `--set` over a preset plans that preset's job, and bad input or a job the model
cannot express is refused with one line (exit 2), never planned as something else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from checks.cli import main
from checks.plan.presets import PRESETS
from checks.plan.setup import PRESET_MICROBATCHES_PER_STEP, _preset_values, from_preset

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "configs"


def plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["plan", *argv, "--format", "json"])
    out, err = capsys.readouterr()
    assert err == "", err
    return code, json.loads(out)


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of an exit-2 plan (a usage error leaves through argparse's SystemExit)."""
    try:
        code = main(["plan", *argv])
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), (code, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def _numbers(document: dict[str, Any]) -> dict[str, Any]:
    """Everything a plan says except where its inputs came from."""
    return {k: v for k, v in document.items() if k not in ("source", "assumptions")}


# --- --set over a preset ------------------------------------------------------------------------------------

def _noop(name: str) -> str:
    """A --set that restates one of the preset's own sizes."""
    par = PRESETS[name].parallelism
    if par.expert > 1:
        return f"model.expert_model_parallel_size={par.expert}"
    return f"model.tensor_model_parallel_size={par.tensor}"


@pytest.mark.parametrize("more", [False, True], ids=["smallest", "twice-the-gpus"])
@pytest.mark.parametrize("name", list(PRESETS))
def test_a_noop_set_plans_exactly_the_presets_job(capsys: pytest.CaptureFixture[str], name: str,
                                                  more: bool) -> None:
    """`--preset qwen3-30b-a3b --set model.expert_model_parallel_size=8` (the preset's own EP) used to plan fp32
    weights, no distributed or precision-aware optimizer and one micro-batch per step (peak 68.6 -> 98.2 GB in
    the issue); Qwen3-235B and DeepSeek-V3 lost their uneven first and last stages and were refused."""
    gpus = ("--gpus", str(2 * from_preset(PRESETS[name]).training.world_size)) if more else ()
    code, bare = plan(capsys, "--preset", name, *gpus)
    again, with_set = plan(capsys, "--preset", name, "--set", _noop(name), *gpus)
    assert (again, _numbers(with_set)) == (code, _numbers(bare))
    notes = " | ".join(with_set["assumptions"])
    assert f"from preset {name}" in notes and "--set" in notes


def test_a_set_over_a_preset_changes_only_what_it_sets() -> None:
    from checks.cli import request
    from checks.loaders import load
    from checks.parser import build_parser
    from checks.plan.hardware import HARDWARE
    from checks.plan.job import Dimensions, plan_configs
    from checks.plan.recommend import Budget

    preset = PRESETS["llama3-70b"]
    for sets, changed in ((["optimizer.use_distributed_optimizer=false"], {"distributed_optimizer": False}),
                          (["model.hidden_dropout=0.1"], {"hidden_dropout": True}),
                          (["model.bf16=false", "model.params_dtype=fp32"], {"param_bytes": 4}),
                          (["train.global_batch_size=256"], {"global_batch_size": 256}),
                          (["model.sequence_parallel=false"], {"sequence_parallel": False}),
                          (["model.deterministic_mode=true"], {"deterministic": True})):
        args = build_parser().parse_args(["plan", "--preset", preset.name, "--flavor", "bridge",
                                          *[a for s in sets for a in ("--set", s)]])
        result = plan_configs(load(request(args)), preset, {}, Dimensions(), Budget(HARDWARE["h100-sxm"]), "--set",
                              overrides_only=True)
        (entry,) = result.entries
        expected = from_preset(preset, version=entry.job.training.version).training
        assert entry.job.training == type(expected)(**{**expected.__dict__, **changed}), sets
        assert entry.job.batch_per_rank is ("train.global_batch_size=256" not in sets)


def test_a_config_file_over_a_preset_keeps_its_own_settings(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path) -> None:
    """A real config file states its own training; what it leaves out is the framework's default, not the
    preset's: only the synthetic config of bare --set overrides takes the preset's training settings."""
    path = tmp_path / "override.yaml"
    path.write_text("model:\n  expert_model_parallel_size: 8\n", encoding="utf-8")
    _, from_file = plan(capsys, str(path), "--preset", "qwen3-30b-a3b", "--assume-defaults")
    _, bare = plan(capsys, "--preset", "qwen3-30b-a3b")
    assert from_file["training"]["num_microbatches"] == 1 != bare["training"]["num_microbatches"]
    stage, preset_stage = from_file["as_configured"]["stages"][0], bare["as_configured"]["stages"][0]
    assert stage["weights_bytes"] == 2 * preset_stage["weights_bytes"]  # the dataclass default: fp32 weights
    notes = " | ".join(from_file["assumptions"])
    assert "bf16 parameters" not in notes


def test_preset_jobs_keep_a_step_that_fills_the_pipeline() -> None:
    assert all(from_preset(p).training.num_microbatches == PRESET_MICROBATCHES_PER_STEP for p in PRESETS.values())


def test_a_config_file_without_its_recipe_says_which_defaults_it_planned(capsys: pytest.CaptureFixture[str],
                                                                         tmp_path: Path) -> None:
    """Unknown is not a default: an override file merged over a recipe the checker was not given leaves the
    layout and precision unknown; the plan takes megatron-core's defaults and says which, and how to give them."""
    path = tmp_path / "override.yaml"
    path.write_text("model:\n  expert_model_parallel_size: 8\n", encoding="utf-8")
    _, document = plan(capsys, str(path), "--preset", "qwen3-30b-a3b")
    (note,) = [a for a in document["assumptions"] if a.startswith("planned at megatron-core's defaults")]
    assert "tensor_model_parallel_size=1" in note and "bf16=false" in note and "--recipe NAME" in note
    assert "moe_router_topk" not in note  # the preset's model routes to its own top-k, which the plan took
    assert document["training"]["tensor_parallel"] == 1 and document["training"]["expert_parallel"] == 8


def test_the_bare_preset_is_planned_in_the_version_given(capsys: pytest.CaptureFixture[str]) -> None:
    """--mcore-version used to be ignored for a bare preset: its options are checked against that version's fields
    and rules (megatron-core 0.14's cpu_offloading_weights default, rule TEX002, rules the layer-level option out)."""
    _, old = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--mcore-version", "0.14.0")
    _, new = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--mcore-version", "0.19.2")
    mechanisms = [{o["mechanism"] for o in d["options"]} for d in (old, new)]
    assert "layer-level activation offload" in mechanisms[1] - mechanisms[0]
    assert old["as_configured"] == new["as_configured"]


def test_a_preset_given_with_a_sized_config_is_said_to_be_unused(capsys: pytest.CaptureFixture[str]) -> None:
    _, document = plan(capsys, f"--argv={SMALL}", "--preset", "llama3-8b")
    assert document["source"] == "config"
    assert "preset llama3-8b not used: the config states the model's dimensions" in document["assumptions"]


# --- bad input: one line, exit 2, no plan ---------------------------------------------------------------------

# A small model the config states in full (Megatron-LM flags): 24 heads, 6 query groups, 4 layers.
SMALL = "--num-layers 4 --hidden-size 768 --num-attention-heads 24 --group-query-attention --num-query-groups 6 " \
        "--vocab-size 1000 --seq-length 512 --max-position-embeddings 512 --bf16"


@pytest.mark.parametrize("argv,expected", [
    # megatron-core's divisibility (transformer_config.py:1446, 1461-1468; moe_layer.py:186; parallel_state.py:874)
    (("--preset", "llama3-8b", "--set", "model.tensor_model_parallel_size=3"),
     "--set #1: tensor_model_parallel_size=3 does not divide the 32 attention heads"),
    ((f"--argv={SMALL} --tensor-model-parallel-size 4",),
     "tensor_model_parallel_size=4 is neither a multiple nor a divisor of the 6 query groups"),
    (("--preset", "llama3-8b", "--set", "model.tensor_model_parallel_size=16"),
     "is more than the 8 query groups: megatron-core then replicates the key and value heads"),
    (("--preset", "llama3-8b", "--set", "model.pipeline_model_parallel_size=64"),
     "pipeline_model_parallel_size=64 is more pipeline stages than the model's 32 layers"),
    ((f"--argv={SMALL} --pipeline-model-parallel-size 8",),
     "argv[16]: pipeline_model_parallel_size=8 is more pipeline stages than the model's 4 layers"),
    (("--preset", "llama3-8b", "--set", "model.pipeline_model_parallel_size=5"),
     "32 layers do not split evenly over pipeline_model_parallel_size=5"),
    (("--preset", "qwen3-235b-a22b", "--set", "model.pipeline_model_parallel_size=4"),
     "94 layers do not split evenly over pipeline_model_parallel_size=4"),
    (("--preset", "llama3-70b", "--set", "model.num_layers_in_first_pipeline_stage=19"),
     "num_layers_in_first_pipeline_stage=19 and num_layers_in_last_pipeline_stage=None leave layers"),
    (("--preset", "qwen3-235b-a22b", "--set", "model.virtual_pipeline_model_parallel_size=2",
      "--set", "model.num_layers_in_first_pipeline_stage=6", "--set", "model.num_layers_in_last_pipeline_stage=8"),
     "uneven first and last pipeline stages with a virtual pipeline are not modelled"),
    (("--preset", "qwen3-30b-a3b", "--set", "model.expert_model_parallel_size=3"),
     "expert_model_parallel_size=3 does not divide the 128 experts"),
    (("--preset", "qwen3-30b-a3b", "--gpus", "4"), "--gpus: 4 GPUs (TP 1 x PP 1 x CP 1 x DP 4) are not a multiple "
                                                   "of ETP x EP x PP = 8"),
    (("--preset", "llama3-70b", "--gpus", "12"), "not a multiple of TP x PP x CP = 32"),
    # the command line
    (("--preset", "llama3-8b", "--gpus", "0"), "argument --gpus: expected a positive integer"),
    (("--preset", "llama3-8b", "--gpus", "-8"), "argument --gpus: expected a positive integer"),
    (("--preset", "llama3-8b", "--hardware", "h100"), "--hardware: unknown hardware 'h100'; known: h100-sxm"),
    # a dimension the preset's model does not share would be dropped
    (("--preset", "llama3-8b", "--set", "model.num_layers=16"),
     "--set #1: num_layers=16, but the model comes from preset llama3-8b (32) because the config does not give all "
     "its dimensions"),
    (("--preset", "llama3-8b", "--set", "model.num_moe_experts=8"), "num_moe_experts=8, but the model comes from "
                                                                    "preset llama3-8b (None)"),
])
def test_impossible_layouts_are_one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...],
                                         expected: str) -> None:
    assert expected in refused(capsys, *argv)


@pytest.mark.parametrize("sets,expected", [
    (["model.mtp_num_layers=1"], "mtp_num_layers=1: the planner does not model multi-token prediction layers"),
    (["model.pipeline_model_parallel_layout=Et|tL"], "the planner does not model an explicit pipeline layout"),
    (["model.account_for_embedding_in_pipeline_split=true"], "the embedding counted as a layer of the pipeline "
                                                             "split"),
    (["model.account_for_loss_in_pipeline_split=true"], "state the same split with num_layers_in_last_pipeline_stage"),
    (["model.fp8=hybrid"], "fp8=hybrid: the planner does not model FP8 training"),
    (["model.fp4=e2m1"], "fp4=e2m1: the planner does not model FP4 training"),
    (["model.recompute_granularity=selective", "model.recompute_modules=[core_attn,mlp]"],
     "--set #2: recompute_modules=[core_attn, mlp]: the planner models selective recompute of core_attn only"),
    (["ddp.use_megatron_fsdp=true"], "use_megatron_fsdp=true: the planner does not model Megatron-FSDP"),
    (["optimizer.optimizer=sgd"], "optimizer=sgd: the planner does not model an optimizer other than Adam"),
    (["ddp.num_distributed_optimizer_instances=2"], "more than one distributed-optimizer instance"),
])
def test_a_job_the_planner_cannot_express_is_refused(capsys: pytest.CaptureFixture[str], sets: list[str],
                                                      expected: str) -> None:
    """What the planner does not model is said, with the field and what to do, instead of planning another job
    (FP8 used to be planned at bf16 with a note; MTP, explicit layouts and the rest were dropped without one)."""
    err = refused(capsys, "--preset", "llama3-8b", *[a for s in sets for a in ("--set", s)])
    assert expected in err and "; " in err  # and what to do about it


@pytest.mark.parametrize("flags,expected", [
    ("--mtp-num-layers 1", "argv[16]: mtp_num_layers=1"),
    ("--fp8-format hybrid", "argv[16]: fp8=hybrid"),
])
def test_a_sized_config_the_planner_cannot_express_is_refused_without_suggesting_a_preset(
        capsys: pytest.CaptureFixture[str], flags: str, expected: str) -> None:
    """With the model's dimensions stated, MTP used to read as an unsized model: "add --preset NAME", which then
    planned the preset without MTP."""
    err = refused(capsys, f"--argv={SMALL} {flags}")
    assert expected in err and "--preset" not in err


def test_moe_recompute_and_distributed_checkpoints_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # transformer_config.py:2014-2025: --moe-layer-recompute is selective recompute of the MoE layer too
    assert "moe_layer_recompute=true" in refused(capsys, "--preset", "qwen3-30b-a3b", "--set",
                                                 "model.moe_layer_recompute=true")
    full = ["model.recompute_granularity=full", "model.recompute_method=uniform", "model.recompute_num_layers=1",
            "model.sequence_parallel=false"]
    err = refused(capsys, "--preset", "llama3-70b", *[a for s in [*full, "model.distribute_saved_activations=true"]
                                                      for a in ("--set", s)])
    assert "distribute_saved_activations=true" in err
    group = ["model.virtual_pipeline_model_parallel_size=2", "model.microbatch_group_size_per_vp_stage=2"]
    assert "microbatch_group_size_per_vp_stage=2" in refused(capsys, "--preset", "llama3-70b",
                                                             *[a for s in group for a in ("--set", s)])
    code, _ = plan(capsys, "--preset", "llama3-70b", "--set", "model.virtual_pipeline_model_parallel_size=2",
                   "--set", "model.microbatch_group_size_per_vp_stage=4")  # megatron-core's default: the PP size
    assert code in (0, 1)


def test_a_recipes_mixed_precision_setting_is_cited_once(capsys: pytest.CaptureFixture[str]) -> None:
    """The recipe's mixed-precision fields arrive with their upstream citation; it is not prefixed again."""
    err = refused(capsys, "--gpus", "16", "--hardware", "h100-sxm", "--mcore-version", "main@2a75ac12",
                  "--recipe", "qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config")
    assert err.startswith("error: NVIDIA-NeMo/Megatron-Bridge@067f987d:src/megatron/bridge/training/"
                          "mixed_precision.py:") and err.count("Megatron-Bridge@") == 1, err


def test_a_multi_model_config_names_the_model_it_cannot_express(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, str(EXAMPLES / "nemo-rl/grpo_offload.yaml"), "--preset", "llama3-8b", "--set",
                  "++policy.megatron_cfg.fp8_cfg.enabled=true", "--set", "++policy.megatron_cfg.fp8_cfg.fp8=hybrid")
    assert "error: --set #2: [policy] fp8=hybrid: the planner does not model FP8 training" in err


# --- a malformed --profile ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("{bad", "cannot read the probe profile: Expecting property name"),
    ("[1]", "a JSON object is expected, not a list"),
    ('{"gpu_memory_bytes": NaN}', "a measured value is not a finite number"),
    ('{"gpu_memory_bytes": Infinity}', "a measured value is not a finite number"),
    ('{"gpu_memory_bytes": 1e999}', "a measured value is not a finite number"),
    ('{"base": "tpu"}', "unknown base hardware 'tpu'"),
])
def test_a_malformed_profile_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str,
                                         expected: str) -> None:
    path = tmp_path / "profile.json"
    path.write_text(text, encoding="utf-8")
    err = refused(capsys, "--preset", "llama3-8b", "--profile", str(path))
    assert err.startswith(f"error: {path}: ") and expected in err


def test_a_missing_or_directory_profile_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert "no such file" in refused(capsys, "--preset", "llama3-8b", "--profile", str(tmp_path / "none.json"))
    assert "is a directory" in refused(capsys, "--preset", "llama3-8b", "--profile", str(tmp_path))


@pytest.mark.parametrize("text", ['{"gpu_memory_bytes": "80e9"}', '{"gpus_per_node": -8}', '{"gpus_per_node": 2.5}',
                                  '{"host_memory_bytes": 0}', '{"gpu_memory_bytes": 80000000000, "gpu_memory": 1}'])
def test_a_profile_value_of_the_wrong_type_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                      text: str) -> None:
    path = tmp_path / "profile.json"
    path.write_text(text, encoding="utf-8")
    refused(capsys, "--preset", "llama3-8b", "--profile", str(path))


# --- settings the planner used to drop -------------------------------------------------------------------------

def _stages(document: dict[str, Any]) -> list[dict[str, Any]]:
    return list(document["as_configured"]["stages"])


def test_uneven_first_and_last_stages_are_read_from_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    """num_layers_in_first/last_pipeline_stage over a preset: 17 layers on the first of Llama 3 70B's four stages,
    the other 63 split evenly (transformer_block.py:104-145), so the first stage holds less and the others more."""
    _, even = plan(capsys, "--preset", "llama3-70b")
    _, uneven = plan(capsys, "--preset", "llama3-70b", "--set", "model.num_layers_in_first_pipeline_stage=17")
    assert _stages(uneven)[0]["weights_bytes"] < _stages(even)[0]["weights_bytes"]
    assert all(u["weights_bytes"] > e["weights_bytes"] for u, e in zip(_stages(uneven)[1:], _stages(even)[1:],
                                                                        strict=True))
    # a config that states the model: Megatron-LM's --decoder-first-pipeline-num-layers is the same field
    # (argument_utils.py:310-311): first stage 1 layer, then 3
    _, sized = plan(capsys, f"--argv={SMALL} --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1")
    first, second = _stages(sized)
    assert first["weights_bytes"] < second["weights_bytes"]
    # the preset's own uneven split goes with its pipeline; a new pipeline of 2 splits 94 layers 47 / 47
    _, two = plan(capsys, "--preset", "qwen3-235b-a22b", "--set", "model.pipeline_model_parallel_size=2")
    assert len(_stages(two)) == 2 and "uneven" not in " ".join(two["assumptions"])


def test_virtual_pipeline_stages_over_a_preset_are_planned(capsys: pytest.CaptureFixture[str]) -> None:
    """--set model.virtual_pipeline_model_parallel_size over a preset used to be dropped."""
    _, document = plan(capsys, "--preset", "llama3-70b", "--set", "model.virtual_pipeline_model_parallel_size=2")
    assert document["training"]["virtual_pipeline_parallel"] == 2


def test_a_capacity_factor_pads_only_with_padding(capsys: pytest.CaptureFixture[str]) -> None:
    """Without moe_pad_expert_input_to_capacity a capacity factor only drops tokens over capacity; with it every
    expert is padded to capacity (moe_utils.py:1019-1078). The planner used to scale routed activations by the
    factor either way."""
    def routed(*sets: str) -> int:
        _, document = plan(capsys, "--preset", "qwen3-30b-a3b", *[a for s in sets for a in ("--set", s)])
        return int(_stages(document)[0]["activations_bytes"])

    dropless = routed("model.moe_router_topk=8")
    assert routed("model.moe_expert_capacity_factor=1.5") == dropless
    assert routed("model.moe_expert_capacity_factor=1.5", "model.moe_pad_expert_input_to_capacity=true") > dropless
    assert routed("model.moe_expert_capacity_factor=0.5") < dropless


def test_eager_dropless_moe_layers_wait_for_the_host(capsys: pytest.CaptureFixture[str]) -> None:
    """The eager-MoE host floor (throughput.py) is read from the config: CUDA graphs or drop-and-pad routing (the
    dispatcher then needs no token counts on the host, token_dispatcher.py:921-958) lift it; a capacity factor
    that only drops tokens does not."""
    def host_wait(*sets: str) -> float:
        _, document = plan(capsys, "--preset", "qwen3-30b-a3b", *[a for s in sets for a in ("--set", s)])
        return float(document["as_configured"]["parts"]["host_wait_s"])

    assert host_wait() > 0
    assert host_wait("model.moe_expert_capacity_factor=1.0") == host_wait()
    assert host_wait("model.cuda_graph_impl=transformer_engine") == 0
    assert host_wait("model.moe_expert_capacity_factor=1.0", "model.moe_pad_expert_input_to_capacity=true") == 0

def test_layer_offload_counts_activations_only_when_they_are_offloaded() -> None:
    """cpu_offloading_activations=false offloads no activations (model_parallel_config.py:471, TE ignores weights
    from 2.3): the checker refuses such a job (TEX001/TEX002), and the job the planner reads says so too."""
    from checks.context import Context
    from checks.loaders import Request, load
    from checks.plan.setup import from_config

    def layers(*sets: str) -> int:
        (cfg,) = load(Request(overrides=("model.cpu_offloading=true", "model.cpu_offloading_num_layers=4", *sets),
                              flavor="bridge"))
        job = from_config(Context(cfg), preset=PRESETS["llama3-8b"], overrides_only=True)
        assert not isinstance(job, str)
        return job.offload.cpu_offloading_num_layers

    assert layers() == 4
    assert layers("model.cpu_offloading_activations=false", "model.cpu_offloading_weights=true") == 0


def test_what_the_planner_does_not_count_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    for sets, said in ((["model.cuda_graph_impl=transformer_engine"], "CUDA graphs"),
                       (["model.enable_cuda_graph=true"], "CUDA graphs (enable_cuda_graph=true)"),
                       (["model.external_cuda_graph=true"], "CUDA graphs (external_cuda_graph=true)"),
                       (["model.tensor_model_parallel_size=2", "model.tp_comm_overlap=true"], "userbuffers"),
                       (["model.moe_token_dispatcher_type=flex"], "flex token dispatcher")):
        name = "qwen3-30b-a3b" if "flex" in said else "llama3-8b"
        _, document = plan(capsys, "--preset", name, *[a for s in sets for a in ("--set", s)])
        assert any(said in a and "not counted" in a for a in document["assumptions"]), sets


def test_a_micro_batch_size_over_a_preset_keeps_its_step_of_micro_batches(capsys: pytest.CaptureFixture[str]) -> None:
    """As --micro-batch-size does for the bare preset, train.micro_batch_size over it keeps its 8 micro-batches."""
    _, bare = plan(capsys, "--preset", "llama3-8b", "--micro-batch-size", "2")
    _, with_set = plan(capsys, "--preset", "llama3-8b", "--flavor", "bridge", "--set", "train.micro_batch_size=2")
    assert with_set["training"] == bare["training"]
    assert with_set["training"]["num_microbatches"] == PRESET_MICROBATCHES_PER_STEP


@pytest.mark.parametrize(("hf_id", "reason"), [
    ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1 uses multi-latent attention, whose dimensions the model "
                                "catalogue does not hold; use a preset (--preset NAME)"),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 uses Mamba layers, "
                                                   "whose dimensions the model catalogue does not hold; use a preset "
                                                   "(--preset NAME)"),
    ("Qwen/Qwen2.5-1.5X", "'Qwen/Qwen2.5-1.5X' is neither a preset (llama3-8b, llama3-70b, qwen3-30b-a3b, "
                          "qwen3-235b-a22b, mixtral-8x7b, deepseek-v3, moonlight-16b-a3b, nemotron-h-8b) nor in the "
                          "model catalogue; closest ids: Qwen/Qwen2.5-1.5B, Qwen/Qwen2.5-0.5B, Qwen/Qwen2-1.5B"),
])
def test_a_checkpoint_the_catalogue_cannot_size_says_why(hf_id: str, reason: str) -> None:
    """The reason reaches the user as the planner's error line, word for word."""
    from checks.plan.presets import catalogue_preset

    assert catalogue_preset(hf_id) == reason


def test_distributed_checkpoints_under_tensor_parallelism_are_refused_with_why(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", "--preset", "llama3-70b", "--gpus", "64", "--set", "model.recompute_granularity=full",
                 "--set", "model.recompute_method=uniform", "--set", "model.recompute_num_layers=1", "--set",
                 "model.distribute_saved_activations=true"])
    assert code == 2
    assert capsys.readouterr().err == (
        "error: --set #4: distribute_saved_activations=true: the planner keeps each full-recompute checkpoint's "
        "whole input, not a tensor-parallel share of it; plan without it for an upper bound on activations\n")


def test_a_preset_named_by_its_hugging_face_id_is_the_curated_preset() -> None:
    """``--preset deepseek-ai/DeepSeek-R1`` is the deepseek-v3 preset (its layout and MLA dimensions), not a row of
    the model catalogue, which cannot size multi-latent attention."""
    from checks.plan.job import presets

    assert presets(["deepseek-ai/DeepSeek-R1"]) == (PRESETS["deepseek-v3"], {})
    assert presets(["value=meta-llama/Llama-3.1-8B"]) == (None, {"value": PRESETS["llama3-8b"]})


def test_an_unsized_model_says_how_to_name_its_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One model: the reason alone (it already says --preset NAME); several: which model, and TARGET=NAME."""
    one = tmp_path / "one.yaml"
    one.write_text("policy:\n  model_name: example-org/Not-In-The-Catalogue\n  megatron_cfg:\n    enabled: true\n")
    assert main(["plan", str(one)]) == 2
    err_text = capsys.readouterr().err
    assert err_text == (f"error: {one}: the planner needs the model's dimensions: NeMo-RL takes them from the "
                        "Hugging Face checkpoint (policy.model_name = example-org/Not-In-The-Catalogue), which is not "
                        f"one of the presets; add --preset NAME (known: {', '.join(PRESETS)})\n")
    ppo = str(ROOT / "examples" / "configs" / "nemo-rl" / "ppo_value_model.yaml")
    code = main(["plan", ppo, "--set", "value.megatron_cfg.activation_checkpointing=false", "--set",
                 "value.megatron_cfg.optimizer.optimizer_offload_fraction=1.0"])
    err_text = capsys.readouterr().err
    assert code == 2 and "[value] the planner needs the model's dimensions" in err_text
    assert err_text.rstrip().endswith(f"; add --preset NAME or TARGET=NAME (known: {', '.join(PRESETS)})")


def test_fp32_parameters_get_no_optimizer_offload_option(capsys: pytest.CaptureFixture[str]) -> None:
    """The checker judges each option with the job's parameter dtype stated: fp32 parameters with the distributed
    optimizer and optimizer offload fail to build (OPT011), so the plan offers no optimizer offload; bf16 does."""
    def mechanisms(*extra: str) -> list[str]:
        assert main(["plan", "--preset", "llama3-8b", "--gpus", "8", "--format", "json", *extra]) == 1
        return [o["mechanism"] for o in json.loads(capsys.readouterr().out)["options"]]

    assert "optimizer offload" in mechanisms()
    assert not any("optimizer offload" in m for m in mechanisms("--set", "model.bf16=false"))


def test_grad_reduce_in_bf16_keeps_megatron_lm_gradients_in_bf16(capsys: pytest.CaptureFixture[str]) -> None:
    """Megatron-LM with --bf16 reduces gradients in fp32 (4 bytes a parameter) unless --grad-reduce-in-bf16 (2)."""
    argv = ("--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings "
            "2048 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8 --bf16 --use-distributed-optimizer")

    def stage(extra: str) -> dict[str, Any]:
        main(["plan", "--argv", argv + extra, "--gpus", "8", "--format", "json"])
        return json.loads(capsys.readouterr().out)["as_configured"]["stages"][0]

    fp32 = stage("")
    assert fp32["grads_bytes"] == 2 * fp32["weights_bytes"]
    bf16 = stage(" --grad-reduce-in-bf16")
    assert bf16["grads_bytes"] == bf16["weights_bytes"] == fp32["weights_bytes"]


def test_an_option_the_job_environment_already_allows_needs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    """Fine-grained offload needs NVTE_CPU_OFFLOAD_V1=1 (TEX005) unless the job's env_vars already set it."""
    def notes(*extra: str) -> list[str]:
        main(["plan", "--preset", "llama3-8b", "--gpus", "8", "--format", "json", *extra])
        options = json.loads(capsys.readouterr().out)["options"]
        return [o["note"] for o in options if o["mechanism"].startswith("fine-grained")]

    assert all("needs NVTE_CPU_OFFLOAD_V1=1" in note for note in notes())
    assert notes("--set", "env_vars.NVTE_CPU_OFFLOAD_V1=1") == ["", ""]


def test_a_dtype_the_planner_cannot_size_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Not counted as fp32: fp64 moments would be twice what the plan says."""
    assert main(["plan", "--preset", "llama3-8b", "--gpus", "8", "--set", "optimizer.exp_avg_sq_dtype=fp64"]) == 2
    assert capsys.readouterr().err == ("error: --set #1: exp_avg_sq_dtype=fp64: the planner sizes fp32, bf16, fp16, "
                                       "fp8 only; plan with one of them\n")
    assert main(["plan", "--preset", "llama3-8b", "--gpus", "8", "--set", "optimizer.exp_avg_sq_dtype=bf16"]) == 1


def _other(value: Any) -> Any:
    """A value a preset's dimension does not have."""
    return (not value) if isinstance(value, bool) else 8 if value is None else value * 2


@pytest.mark.parametrize("path", [p for p in _preset_values(PRESETS["llama3-8b"].shape) if p.startswith("model.")])
def test_each_dimension_a_preset_gives_is_refused_when_stated_otherwise(capsys: pytest.CaptureFixture[str],
                                                                        path: str) -> None:
    """The preset gives the whole model: a dimension stated otherwise would be planned as the preset's, so it is
    refused, naming the dimension; the same value as the preset's is accepted."""
    name, expected = path.split(".", 1)[1], _preset_values(PRESETS["llama3-8b"].shape)[path]
    err = refused(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", f"{path}={json.dumps(_other(expected))}")
    assert err.startswith(f"error: --set #1: {name}=") and "but the model comes from preset llama3-8b (" in err, err
    if expected is not None:
        code, _ = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", f"{path}={json.dumps(expected)}")
        assert code in (0, 1)


@pytest.mark.parametrize(("field", "dtype"), [("main_params_dtype", "fp16"), ("exp_avg_dtype", "bf16"),
                                              ("exp_avg_sq_dtype", "bf16")])
def test_each_optimizer_dtype_sizes_its_state(capsys: pytest.CaptureFixture[str], field: str, dtype: str) -> None:
    """The precision-aware optimizer keeps the master weights and each moment at its own dtype: one of the three
    at 2 bytes leaves 10 of the 12 bytes per element."""
    _, base = plan(capsys, "--preset", "llama3-8b", "--gpus", "8")
    _, half = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", f"optimizer.{field}={dtype}")
    (before,), (after,) = base["as_configured"]["stages"], half["as_configured"]["stages"]
    assert before["optimizer_bytes"] == 12 * before["optimizer_elements"]
    assert after["optimizer_bytes"] == 10 * after["optimizer_elements"] and after["optimizer_elements"] > 0


def test_distributed_saved_activations_without_tensor_parallelism_are_planned(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At TP 1 there is nothing to distribute: the planner's whole-checkpoint count is exact, so it plans."""
    code, document = plan(capsys, "--preset", "llama3-70b", "--gpus", "64", "--set",
                          "model.tensor_model_parallel_size=1", "--set", "model.recompute_granularity=full", "--set",
                          "model.recompute_method=uniform", "--set", "model.recompute_num_layers=1", "--set",
                          "model.distribute_saved_activations=true")
    assert code in (0, 1) and document["training"]["recompute"] == "full"


@pytest.mark.parametrize(("modules", "recompute"), [("[]", "none"), ("[core_attn]", "selective")])
def test_selective_recompute_of_no_module_recomputes_nothing(capsys: pytest.CaptureFixture[str], modules: str,
                                                             recompute: str) -> None:
    _, document = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", "model.recompute_granularity=selective",
                       "--set", f"model.recompute_modules={modules}")
    assert document["training"]["recompute"] == recompute


def test_moe_layer_recompute_is_refused_where_it_is_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "--preset", "qwen3-30b-a3b", "--gpus", "16", "--set", "model.moe_layer_recompute=true") == (
        "error: --set #1: moe_layer_recompute=true: the planner models selective recompute of core attention only, "
        "not of the MoE layer; plan without it for an upper bound\n")


@pytest.mark.parametrize(("first", "last", "stage", "lines"), [(0, 32, "first", "2303-2304"),
                                                               (16, 0, "last", "2322-2323")])
def test_an_empty_uneven_stage_is_refused_as_megatron_core_refuses_it(
        capsys: pytest.CaptureFixture[str], first: int, last: int, stage: str, lines: str) -> None:
    """megatron-core refuses an uneven first or last stage of no layers; the planner used to plan it."""
    err = refused(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", "model.pipeline_model_parallel_size=2",
                  "--set", f"model.num_layers_in_first_pipeline_stage={first}", "--set",
                  f"model.num_layers_in_last_pipeline_stage={last}")
    value = first if stage == "first" else last
    assert (f'num_layers_in_{stage}_pipeline_stage={value}: megatron-core refuses it ("num_layers_in_{stage}_'
            f'pipeline_stage must be larger than 0", NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/'
            f"transformer_config.py:{lines}); give that stage at least one layer") in err, err
    code, _ = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", "model.pipeline_model_parallel_size=2",
                   "--set", "model.num_layers_in_first_pipeline_stage=1", "--set",
                   "model.num_layers_in_last_pipeline_stage=31")
    assert code in (0, 1)


@pytest.mark.parametrize("hf_id", ["zai-org/GLM-4.5-Air", "zai-org/GLM-4.5"])
def test_a_catalogue_model_has_moe_layers_where_its_layer_pattern_says(hf_id: str) -> None:
    """moe_layer_freq as a list marks each layer dense (0) or MoE (1): GLM-4.5-Air's first layer is dense,
    GLM-4.5's first three."""
    from checks.models import lookup
    from checks.plan.presets import Preset, catalogue_preset

    arch, preset = lookup(hf_id), catalogue_preset(hf_id)
    assert arch is not None and isinstance(preset, Preset) and preset.shape.moe is not None
    pattern = tuple(bool(v) for v in arch.moe_layer_freq)
    assert preset.shape.moe.layers == pattern and not all(pattern)


@pytest.mark.parametrize(("threshold", "moves"), [(None, True), (1, True), (10**12, False)])
def test_the_fine_grained_size_threshold_is_read_from_the_config(capsys: pytest.CaptureFixture[str],
                                                                 threshold: int | None, moves: bool) -> None:
    """min_offloaded_tensor_size as the config states it: a threshold above every tensor offloads nothing."""
    sets = ["model.fine_grained_activation_offloading=true", "model.offload_modules=[core_attn]"]
    sets += [f"model.min_offloaded_tensor_size={threshold}"] if threshold is not None else []
    _, document = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", *[a for s in sets for a in ("--set", s)])
    (stage,) = document["as_configured"]["stages"]
    assert (stage["host_activation_bytes"] > 0) == moves


def test_a_boolean_dimension_stated_as_null_is_false_as_the_preset_has_it(capsys: pytest.CaptureFixture[str]) -> None:
    """qk_layernorm: null is megatron-core's False, the preset's value: not a different model."""
    code, _ = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", "model.qk_layernorm=null")
    assert code in (0, 1)
    err = refused(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", "model.qk_layernorm=true")
    assert "qk_layernorm=" in err


def test_layout_refusals_name_where_they_are_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "--preset", "qwen3-30b-a3b", "--gpus", "16", "--set",
                   "model.expert_model_parallel_size=3").startswith(
        "error: --set #1: expert_model_parallel_size=3 does not divide the 128 experts: megatron-core asserts it")
    assert refused(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", "model.num_layers=32", "--set",
                   "model.is_hybrid_model=true") == (
        "error: --set #1: the model uses a hybrid (Mamba) model, which preset llama3-8b's model does not: the planner "
        "would plan another model\n")


def test_the_layout_a_preset_supplies_is_what_the_overrides_leave_unsaid(capsys: pytest.CaptureFixture[str]) -> None:
    _, document = plan(capsys, "--preset", "llama3-8b", "--gpus", "8", "--set", "model.tensor_model_parallel_size=2")
    (note,) = [a for a in document["assumptions"] if a.endswith("from preset llama3-8b (the config does not set them)")]
    assert note.startswith("pipeline_model_parallel_size, expert_model_parallel_size, expert_tensor_parallel_size ")


# --- from the seed-18 mutation run: each test kills a change no planner test noticed -------------------------

_DENSE = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 8, "num_query_groups": 8, "ffn_hidden_size": 1002,
          "vocab_size": 32000, "kv_channels": 32, "gated_linear_unit": True, "add_bias_linear": False,
          "add_qkv_bias": False, "normalization": "RMSNorm", "qk_layernorm": False,
          "transformer_impl": "transformer_engine", "share_embeddings_and_output_weights": False,
          "position_embedding_type": "rope"}


def _model_yaml(tmp_path: Path, **model: Any) -> str:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump({"model": model}, sort_keys=False), encoding="utf-8")
    return str(path)


def test_a_dense_ffn_that_tp_does_not_divide_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _model_yaml(tmp_path, **_DENSE, tensor_model_parallel_size=4)
    assert refused(capsys, path, "--assume-defaults", "--gpus", "4") == (
        f"error: {path}:17: tensor_model_parallel_size=4 does not divide ffn_hidden_size 1002: the MLP's "
        "column-parallel linear asserts it "
        "(NVIDIA/Megatron-LM@d98e8a64:megatron/core/tensor_parallel/layers.py:1038)\n")


def test_a_config_missing_one_dimension_names_it_alone(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    model = {k: v for k, v in _DENSE.items() if k != "position_embedding_type"}
    path = _model_yaml(tmp_path, **{**model, "ffn_hidden_size": 14336})
    assert refused(capsys, path, "--preset", "llama3-8b", "--assume-defaults") == (
        f"error: {path}:2: num_layers=2, but the model comes from preset llama3-8b (32) because the config does not "
        "give all its dimensions (it lacks position_embedding_type): give them all, or drop num_layers\n")


def test_a_preset_refuses_another_vocabulary(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "--preset", "llama3-8b", "--set", "model.vocab_size=1000").startswith(
        "error: --set #1: vocab_size=1000, but the model comes from preset llama3-8b (128256)")


@pytest.mark.parametrize("hf_id", ["zai-org/GLM-4.5-Air", "Qwen/Qwen2.5-1.5B"])
def test_a_catalogue_preset_is_its_row_at_the_planners_defaults(hf_id: str) -> None:
    """Sequence 4096, micro-batch 1, TP1; the catalogue row as its source; an MoE model routed as its row says
    (before, every catalogue MoE model was planned at top-2)."""
    from checks.models import lookup
    from checks.plan.presets import Preset, catalogue_preset

    arch, preset = lookup(hf_id), catalogue_preset(hf_id)
    assert arch is not None and isinstance(preset, Preset)
    assert (preset.seq_length, preset.micro_batch_size, preset.parallelism.tensor) == (4096, 1, 1)
    assert preset.sources == (f"model catalogue: {arch.source}",) and preset.hf_ids == (hf_id,)
    if arch.num_moe_experts:
        assert preset.shape.moe is not None and preset.shape.moe.expert_layout == "grouped"
        assert preset.moe_top_k == arch.moe_router_topk == 8
    else:
        assert preset.shape.moe is None and preset.moe_top_k == 0


def test_every_preset_hf_id_holds_a_slash() -> None:
    """Why presets() looks names up by Hugging Face id only when they hold a '/': every id does."""
    assert all("/" in hf_id for preset in PRESETS.values() for hf_id in preset.hf_ids)


def test_an_unknown_probe_base_names_the_flag(tmp_path: Path) -> None:
    from checks.errors import InputError
    from checks.plan.probe import probe

    with pytest.raises(InputError) as err:
        probe("no-such-gpu", str(tmp_path / "p.json"), 16)
    assert err.value.where == "--base" and err.value.problem.startswith("unknown hardware 'no-such-gpu'; known: ")


def test_attention_score_flops_are_six_seq_q_per_token_per_layer() -> None:
    from checks.plan.throughput import attention_score_flops

    t = from_preset(PRESETS["llama3-8b"]).training
    tokens = t.seq_length * t.micro_batch_size * t.num_microbatches * t.data_parallel
    q = t.shape.num_attention_heads * t.shape.kv_channels
    assert attention_score_flops(t) == tokens * 6 * t.shape.num_layers * t.seq_length * q


# --- seed 19's mutation survivors: presets, the checker's settings, preset refusals ---------------------------

def test_an_unknown_preset_names_every_known_one(capsys: pytest.CaptureFixture[str]) -> None:
    """The one line lists the presets comma-separated, as --preset takes them, and says a Hugging Face id works."""
    assert refused(capsys, "--preset", "no-such-model") == (
        f"error: --preset: unknown preset 'no-such-model'; known: {', '.join(PRESETS)}, or a Hugging Face id the "
        "model catalogue holds\n")
    assert ", ".join(PRESETS).startswith("llama3-8b, llama3-70b, qwen3-30b-a3b, ")


def test_deepseek_v3s_first_three_layers_are_dense() -> None:
    """DeepSeek-V3's first 3 layers have a dense MLP (first_k_dense_replace 3 in its config.json), the other 58
    256 routed experts and a shared one: 671.0B parameters without the MTP module, as published (671B); with all
    61 layers MoE it would be 703.8B. A preset without dense_first has MoE in every layer."""
    from dataclasses import replace

    from checks.model.parameters import chunk_tensors, stage_chunks
    from checks.model.shape import Parallelism
    from checks.plan.presets import _moe

    moe = _moe(61, 256, 2048, shared=2048, dense_first=3)
    assert moe.layers == (False,) * 3 + (True,) * 58
    assert PRESETS["deepseek-v3"].shape.moe == moe
    shape = replace(PRESETS["deepseek-v3"].shape, moe=moe)
    assert [shape.layer_kind(layer) for layer in range(5)] == ["A", "A", "A", "AE", "AE"]
    whole = Parallelism()
    chunks = stage_chunks(shape.num_layers, whole)
    assert chunks is not None
    assert sum(x.numel for stage in chunks for chunk in stage for x in chunk_tensors(shape, whole, chunk)) \
        == 671_026_404_352
    assert _moe(48, 128, 768).layers == (True,) * 48 == PRESETS["qwen3-30b-a3b"].shape.moe.layers  # type: ignore[union-attr]


def test_the_checker_is_told_the_jobs_expert_parallel_size_and_bf16() -> None:
    """The settings each option is checked with hold the job's layout and precision under their megatron-core
    names (a misspelt path is not a field, so it is dropped and the checker never sees it)."""
    from dataclasses import replace

    from checks.api import validate
    from checks.plan.recommend import job_settings

    t = from_preset(PRESETS["qwen3-30b-a3b"]).training
    settings = job_settings(t)
    assert {path: settings.get(path) for path in (
        "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.context_parallel_size",
        "model.expert_model_parallel_size", "model.expert_tensor_parallel_size", "model.num_moe_experts",
        "model.moe_router_topk", "model.params_dtype", "model.bf16")} == {
        "model.tensor_model_parallel_size": 1, "model.pipeline_model_parallel_size": 1,
        "model.context_parallel_size": 1, "model.expert_model_parallel_size": 8,
        "model.expert_tensor_parallel_size": 1, "model.num_moe_experts": 128, "model.moe_router_topk": 8,
        "model.params_dtype": "bf16", "model.bf16": True}
    validate(settings, version=t.version)  # every path is a field of the job's version (else ValueError)
    fp32 = job_settings(replace(t, param_bytes=4))
    assert fp32["model.params_dtype"] == "fp32" and "model.bf16" not in fp32


def test_an_option_with_a_list_is_checked_under_a_hashable_key() -> None:
    """Verdicts are cached by candidate, so a list (offload_modules) becomes a tuple in the key, and a list again
    for the checker."""
    from checks.plan.recommend import Checker, _frozen

    option = {"model.offload_modules": ["core_attn", "attn_proj"], "model.fine_grained_activation_offloading": True}
    key = _frozen(option)
    assert key == (("model.fine_grained_activation_offloading", True),
                   ("model.offload_modules", ("core_attn", "attn_proj")))
    assert hash(key) == hash(_frozen(dict(reversed(option.items()))))
    checker = Checker(from_preset(PRESETS["llama3-8b"]).training)
    verdict = checker.verdict({"fine_grained_activation_offloading": True, "offload_modules": ["core_attn"]})
    assert verdict.accepted and verdict.needs == ("NVTE_CPU_OFFLOAD_V1=1 in the job's environment (TEX005)",)


@pytest.mark.parametrize(("name", "path"), [("llama3-8b", "model.num_moe_experts"),
                                            ("llama3-8b", "model.moe_ffn_hidden_size"),
                                            ("qwen3-30b-a3b", "model.moe_shared_expert_intermediate_size")])
def test_a_zero_for_a_size_the_preset_lacks_is_the_presets_none(capsys: pytest.CaptureFixture[str], name: str,
                                                                path: str) -> None:
    """0 experts (or expert sizes) on a dense preset, or a 0 shared expert on one without, is megatron-core's
    None: the same model, planned as the bare preset; another number is refused."""
    code, bare = plan(capsys, "--preset", name)
    again, zero = plan(capsys, "--preset", name, "--set", f"{path}=0")
    assert (again, _numbers(zero)) == (code, _numbers(bare))
    assert "but the model comes from preset" in refused(capsys, "--preset", name, "--set", f"{path}=8")
