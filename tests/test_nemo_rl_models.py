"""Every Megatron model a NeMo-RL config builds is checked and planned as its own model, with its label.

Upstream lines are NVIDIA-NeMo/RL@7ea279ab unless a release is named. The fixtures are written here, shaped
like NeMo-RL's own distillation, PPO, MOPD and GRPO configs; the sweep at the end reads NeMo-RL's own
examples from a git mirror (NEMO_RL_GIT) and skips without it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.common import nemo_rl_examples
from checks.cli import main
from checks.config import CanonicalConfig, Environment
from checks.engine import Finding, run
from checks.errors import InputError
from checks.loaders import Request, detect_flavor, load
from checks.report import Report
from checks.yamlio import load_yaml

# A distillation config as distillation_math_megatron.yaml writes one: the teacher copies the policy with YAML
# anchors and changes its model and layout (examples/configs/distillation_math_megatron.yaml:6-39, :188-195).
DISTILLATION = """\
distillation:
  max_num_steps: 10
policy: &POLICY
  model_name: meta-llama/Llama-3.1-8B-Instruct
  precision: bfloat16
  max_total_sequence_length: 4096
  train_micro_batch_size: 1
  train_global_batch_size: 8
  megatron_cfg: &MEGATRON
    enabled: true
    tensor_model_parallel_size: 1
    pipeline_model_parallel_size: 1
    optimizer:
      optimizer: adam
      use_distributed_optimizer: true
      use_precision_aware_optimizer: true
      optimizer_cpu_offload: false
      optimizer_offload_fraction: 0.0
teacher:
  <<: *POLICY
  model_name: meta-llama/Meta-Llama-3-70B
  megatron_cfg:
    <<: *MEGATRON
    tensor_model_parallel_size: 8
cluster:
  gpus_per_node: 8
  num_nodes: 1
"""

# PPO: a value model next to the policy (examples/configs/ppo_math_1B_megatron.yaml has both sections).
PPO = """\
ppo:
  max_num_steps: 10
policy:
  model_name: meta-llama/Llama-3.1-8B-Instruct
  max_total_sequence_length: 4096
  train_micro_batch_size: 1
  train_global_batch_size: 8
  megatron_cfg:
    enabled: true
    tensor_model_parallel_size: 8
    optimizer: {optimizer: adam, use_distributed_optimizer: true}
value:
  model_name: meta-llama/Llama-3.1-8B-Instruct
  max_total_sequence_length: 4096
  train_micro_batch_size: 1
  train_global_batch_size: 8
  megatron_cfg:
    enabled: true
    tensor_model_parallel_size: 8
    optimizer: {optimizer: adam, use_distributed_optimizer: true}
cluster:
  gpus_per_node: 8
  num_nodes: 1
"""

# GRPO with on-policy distillation and non-colocated teachers (as recipes/llm/mopd-qwen3-1.7b-3n8g-megatron-pack.yaml
# writes it): two agents share one teacher checkpoint, a third has its own.
MOPD = """\
grpo:
  max_num_steps: 10
policy:
  model_name: meta-llama/Llama-3.1-8B-Instruct
  megatron_cfg:
    enabled: true
    tensor_model_parallel_size: 4
    optimizer:
      optimizer: adam
      use_distributed_optimizer: true
      optimizer_cpu_offload: true
      optimizer_offload_fraction: 1.0
on_policy_distillation:
  enabled: true
  teacher_model_by_agent_name:
    math: meta-llama/Meta-Llama-3-70B
    code: meta-llama/Meta-Llama-3-70B
    chat: meta-llama/Llama-3.1-8B-Instruct
  non_colocated_teachers:
    enabled: true
    default_teacher_cfg:
      tensor_model_parallel_size: 8
    teacher_overrides:
      chat:
        megatron_cfg_overrides:
          fine_grained_activation_offloading: true
"""

# GRPO with Megatron generation on its own GPUs (recipes/llm/grpo-llama3.2-1b-instruct-2n8g-megatron_generation-
# noncolocated.yaml): mcore_generation_config is laid over the policy's megatron_cfg.
GENERATION = """\
grpo:
  max_num_steps: 10
policy:
  model_name: meta-llama/Llama-3.1-8B-Instruct
  megatron_cfg:
    enabled: true
    activation_checkpointing: true
    tensor_model_parallel_size: 2
    optimizer: {optimizer: adam, use_distributed_optimizer: true}
  generation:
    backend: megatron
    colocated:
      enabled: false
    mcore_generation_config:
      buffer_size_gb: 20
      max_tokens: 16384
      tensor_model_parallel_size: 1
      fine_grained_activation_offloading: true
      offload_modules: [core_attn]
"""


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def models(path: str, *sets: str, nemo_rl: str = "main") -> dict[str, CanonicalConfig]:
    configs = load(Request((path,), sets, None, "auto", "0.16.1", Environment(nemo_rl_version=nemo_rl)))
    return {str(cfg.target): cfg for cfg in configs}


def hits(findings: list[Finding]) -> set[tuple[str | None, str]]:
    return {(f.target, f.rule) for f in findings}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- the distillation teacher -------------------------------------------------------------------------

def test_teacher_optimizer_offload_is_refused_like_the_policys(tmp_path: Path) -> None:
    """distillation.py:487-495 builds the teacher as a Policy; its MegatronPolicyWorker calls
    validate_and_set_config (megatron_policy_worker.py:502), whose _validate_optimizer_config (setup.py:688)
    raises for offload with fraction 0 (setup.py:1219), whatever init_optimizer says."""
    path = write(tmp_path, DISTILLATION)
    assert list(models(path)) == ["policy", "teacher"]
    for target in ("policy", "teacher"):
        found = run(list(models(path, f"{target}.megatron_cfg.optimizer.optimizer_cpu_offload=true").values()))
        assert (target, "OPT001") in hits(found)
        assert {f.target for f in found if f.severity == "error"} == {target}


def test_offload_on_an_inference_only_teacher_is_reported_as_unused(tmp_path: Path) -> None:
    """The teacher is built with init_optimizer=False (distillation.py:494), so setup_model_and_optimizer builds no
    optimizer (setup.py:1878-1886); its get_topk_logits runs under torch.no_grad (megatron_policy_worker.py:2056),
    so fine-grained offloading, which moves tensors saved for backward, has nothing to move."""
    path = write(tmp_path, DISTILLATION)
    teacher = models(path, "teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true",
                     "teacher.megatron_cfg.optimizer.optimizer_offload_fraction=1.0",
                     "++teacher.megatron_cfg.fine_grained_activation_offloading=true",
                     "++teacher.megatron_cfg.offload_modules=[core_attn]")["teacher"]
    assert teacher.role == "inference"
    assert {i.path for i in teacher.ignored} == {"optimizer.optimizer_cpu_offload",
                                                "model.fine_grained_activation_offloading"}
    assert "init_optimizer=False" in next(i.reason for i in teacher.ignored if i.path.startswith("optimizer"))
    # still validated as NeMo-RL validates it: the settings stay, so the offload rules run on them
    assert teacher.settings["optimizer.optimizer_cpu_offload"].value is True
    found = run([teacher])
    assert ("teacher", "CFG005") in hits(found) and not [f for f in found if f.severity == "error"]
    # the policy trains: the same settings there are used, not reported
    policy = models(path, "policy.megatron_cfg.optimizer.optimizer_cpu_offload=true",
                    "policy.megatron_cfg.optimizer.optimizer_offload_fraction=1.0")["policy"]
    assert policy.ignored == () and policy.role == "train"


def test_an_inference_only_teacher_gets_no_optimizer_factory_or_run_time_findings(tmp_path: Path) -> None:
    """With init_optimizer=False no optimizer is built (setup.py:1878-1886), so the optimizer factory's check
    (decoupled weight decay, NVIDIA/Megatron-LM@14346b65:megatron/core/optimizer/__init__.py:510) and what the
    hybrid optimizer would do at run time (OPT014, OPT022) do not concern the teacher; NeMo-RL's own validation
    of the same section (setup.py:1219) still does."""
    path = write(tmp_path, DISTILLATION)
    sets = [f"{target}.megatron_cfg.optimizer.{key}" for target in ("policy", "teacher") for key in (
        "optimizer_cpu_offload=true", "optimizer_offload_fraction=0.5", "use_precision_aware_optimizer=false")]
    found = run(list(models(path, *sets, "++policy.megatron_cfg.optimizer.decoupled_weight_decay=false",
                           "++teacher.megatron_cfg.optimizer.decoupled_weight_decay=false").values()))
    assert {r for t, r in hits(found) if t == "policy"} >= {"OPT004", "OPT014"}
    assert {r for t, r in hits(found) if t == "teacher"} == {"CFG005"}
    found = run(list(models(path, "teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true").values()))
    assert ("teacher", "OPT001") in hits(found)  # fraction 0: refused by NeMo-RL's set-up, optimizer or not


def test_teacher_labels_in_text_json_and_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, DISTILLATION)
    code, out, _ = cli(capsys, "check", path, "--set", "teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true")
    assert code == 1 and " ERROR OPT001 [teacher] " in out and "[policy]" not in out
    _, out, _ = cli(capsys, "check", path, "--format", "json",
                    "--set", "teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true")
    assert {(f["target"], f["rule"]) for f in json.loads(out)["findings"]} >= {("teacher", "OPT001")}
    # --emit-overrides writes the teacher's own prefix (the fix is Hydra's KEY=VALUE for that model)
    _, out, _ = cli(capsys, "check", path, "--emit-overrides",
                    "--set", "teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true")
    assert out.splitlines() == ["teacher.megatron_cfg.optimizer.optimizer_offload_fraction=1.0"]


def test_teacher_sections_are_detected(tmp_path: Path) -> None:
    assert detect_flavor(Request((), ("teacher.megatron_cfg.enabled=true",))) == "nemo-rl"
    assert detect_flavor(Request((), ("on_policy_distillation.enabled=true",))) == "nemo-rl"
    assert detect_flavor(Request((), ("++teachers=[]",))) == "nemo-rl"
    only_teacher = write(tmp_path, "teacher:\n  megatron_cfg:\n    enabled: true\n")
    assert detect_flavor(Request((only_teacher,))) == "nemo-rl"


def test_no_model_section_names_every_model_section(tmp_path: Path) -> None:
    path = write(tmp_path, "grpo:\n  max_num_steps: 1\npolicy:\n  dtensor_cfg:\n    enabled: true\n")
    with pytest.raises(InputError) as err:
        load(Request((path,), flavor="nemo-rl"))
    assert "no policy.megatron_cfg, value.megatron_cfg or teacher.megatron_cfg section" in err.value.render()


def test_disabled_teacher_reports_what_the_user_set_even_with_set(tmp_path: Path) -> None:
    """distillation.py:479 reads the teacher's megatron_cfg only when enabled; a --set value is the user's too."""
    path = write(tmp_path, DISTILLATION.replace("    tensor_model_parallel_size: 8\n",
                                                "    tensor_model_parallel_size: 8\n    enabled: false\n"))
    teacher = models(path, "teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true")["teacher"]
    assert teacher.role == "unused" and teacher.settings == {}
    assert ("optimizer.optimizer_cpu_offload", "--set #1") in [(i.path, i.setting.origin.arg) for i in teacher.ignored]
    assert ("teacher", "CFG005") in hits(run([teacher]))


def test_cross_tokenizer_config_has_no_teacher_model(tmp_path: Path) -> None:
    """xtoken distillation reads `teachers:` (xtoken_off_policy_distillation.py:199-201, :234) and asserts each runs
    on DTensor (:254-258); NeMo-RL refuses Megatron and DTensor together (lm_policy.py:121-125)."""
    path = write(tmp_path, "distillation: {}\npolicy:\n  megatron_cfg:\n    enabled: false\n"
                           "teacher:\n  megatron_cfg:\n    enabled: true\n    optimizer:\n"
                           "      optimizer_cpu_offload: true\nteachers:\n"
                           "  - model_name: Qwen/Qwen3-4B\n    dtensor_cfg: {enabled: true, _v2: true}\n"
                           "    megatron_cfg:\n      enabled: true\n      fine_grained_activation_offloading: true\n")
    found = models(path)
    assert list(found) == ["policy", "teacher", "teachers.0"]
    assert found["teacher"].role == found["teachers.0"].role == "unused"
    assert [i.path for i in found["teacher"].ignored] == ["optimizer.optimizer_cpu_offload"]
    assert [(i.path, i.setting.origin.key) for i in found["teachers.0"].ignored] == [
        ("model.fine_grained_activation_offloading", "teachers.0.megatron_cfg.fine_grained_activation_offloading")]
    assert ("teachers.0", "CFG005") in hits(run(list(found.values())))


def test_reward_model_and_environment_models_are_not_megatron_models(tmp_path: Path) -> None:
    """validate_and_set_config raises NotImplementedError for a reward model (setup.py:378-382); the reward-model
    environment forces DTensor (reward_model_environment.py:139)."""
    path = write(tmp_path, "policy:\n  reward_model_cfg: {enabled: true}\n  megatron_cfg:\n    enabled: true\n"
                           "    optimizer: {optimizer_cpu_offload: true, optimizer_offload_fraction: 1.0}\n"
                           "env:\n  reward_model:\n    megatron_cfg:\n      enabled: true\n"
                           "      fine_grained_activation_offloading: true\n")
    found = models(path)
    assert list(found) == ["policy", "env.reward_model"]
    assert "NotImplementedError" in found["policy"].role_reason
    assert {(t, f.rule) for t in found for f in run([found[t]])} == {("policy", "CFG005"),
                                                                    ("env.reward_model", "CFG005")}


def test_the_teacher_exists_in_every_release(tmp_path: Path) -> None:
    """distillation.py builds a Megatron teacher from master_config["teacher"] in every release the checker knows
    (NVIDIA-NeMo/RL@c751f811:nemo_rl/algorithms/distillation.py:385-393, init_optimizer=False at :392)."""
    path = write(tmp_path, DISTILLATION)
    teacher = models(path, "teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true", nemo_rl="0.4.0")["teacher"]
    assert teacher.role == "inference"
    assert ("teacher", "OPT001") in hits(run([teacher]))  # 0.4.0 asserts fraction == 1.0 (worker :637)


# --- on-policy distillation teachers ------------------------------------------------------------------

def test_opd_teachers_are_built_from_the_policy_with_their_own_layout(tmp_path: Path) -> None:
    """create_teacher_configs_from_opd_config keeps one teacher per checkpoint (teacher_worker_group.py:78-80) and
    TeacherWorkerGroup copies the policy config, sets the resource config's layout and then each
    megatron_cfg_overrides key (:132-151); the layout defaults to 1 (opd.py:46-49)."""
    path = write(tmp_path, MOPD)
    found = models(path)
    assert list(found) == ["policy", "teacher:math", "teacher:chat"]
    math, chat = found["teacher:math"], found["teacher:chat"]
    assert math.settings["model.tensor_model_parallel_size"].value == 8  # default_teacher_cfg, not the policy's 4
    assert math.settings["model.pipeline_model_parallel_size"].value == 1  # TeacherResourceConfig's default
    assert math.settings["run.model_name"].value == "meta-llama/Meta-Llama-3-70B"
    assert math.role == "inference"
    # the policy's valid optimizer offload is the policy's: no "unused" warning on the teachers that inherit it
    assert math.ignored == () and math.settings["optimizer.optimizer_cpu_offload"].value is True
    # chat's own override turns fine-grained offload on without offload_modules: NeMo-RL raises (setup.py:1193)
    found_chat = run([chat])
    assert ("teacher:chat", "FGA002") in hits(found_chat)
    assert [i.path for i in chat.ignored] == ["model.fine_grained_activation_offloading"]  # forward-only: unused
    assert ("policy", "FGA002") not in hits(run([found["policy"]]))


def test_opd_teacher_fixes_go_where_the_teacher_is_configured(tmp_path: Path) -> None:
    """megatron_cfg_overrides and the resource config's extra keys replace whole top-level keys
    (teacher_worker_group.py:87-89, :150-151): a nested key the teacher inherits is written as its whole section."""
    path = write(tmp_path, MOPD)
    chat = models(path)["teacher:chat"]
    alias = "on_policy_distillation.non_colocated_teachers.teacher_overrides.chat"
    patch = chat.spelling.patch({"model.fine_grained_activation_offloading": False,
                                 "model.tensor_model_parallel_size": 2,
                                 "optimizer.optimizer_offload_fraction": 0.5})
    assert patch == {
        f"{alias}.megatron_cfg_overrides.fine_grained_activation_offloading": False,
        "on_policy_distillation.non_colocated_teachers.default_teacher_cfg.tensor_model_parallel_size": 2,
        f"{alias}.optimizer": {"optimizer": "adam", "use_distributed_optimizer": True,
                               "optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5},
    }
    assert chat.spelling.override_lines({f"{alias}.optimizer": {"optimizer": "adam"}}) == [
        f"++{alias}.optimizer={{optimizer:adam}}"]


def test_opd_teachers_need_the_release_and_the_switches(tmp_path: Path) -> None:
    path = write(tmp_path, MOPD)
    assert list(models(path, "on_policy_distillation.non_colocated_teachers.enabled=false")) == ["policy"]
    # 0.6.0 has no MOPD (teacher_worker_group.py first ships in 0.7.0): the teacher's own settings are unused
    old = models(path, nemo_rl="0.6.0")
    assert old["teacher:chat"].role == "unused"
    prefix = "on_policy_distillation.non_colocated_teachers."
    assert sorted(i.setting.origin.key for i in old["teacher:chat"].ignored) == [
        f"{prefix}default_teacher_cfg.tensor_model_parallel_size",
        f"{prefix}teacher_overrides.chat.megatron_cfg_overrides.fine_grained_activation_offloading"]
    assert ("teacher:chat", "CFG005") in hits(run([old["teacher:chat"]]))
    # what a teacher inherits is the policy's, and used there
    assert [i.path for i in old["teacher:math"].ignored] == ["model.tensor_model_parallel_size"]
    # a DTensor policy: TeacherWorkerGroup refuses (teacher_worker_group.py:155-159)
    dtensor = models(path, "++policy.dtensor_cfg.enabled=true")
    assert "only the Megatron backend" in dtensor["teacher:chat"].role_reason


# --- the generation model -----------------------------------------------------------------------------

def test_dedicated_generation_model_is_the_policys_with_mcore_generation_config_over_it(tmp_path: Path) -> None:
    """Non-colocated Megatron generation builds its own Policy (megatron_generation.py:144-162, init_optimizer=False)
    with mcore_generation_config laid over megatron_cfg and activation checkpointing off (config.py:74-97)."""
    path = write(tmp_path, GENERATION)
    found = models(path)
    assert list(found) == ["policy", "generation"]
    generation = found["generation"]
    assert generation.settings["model.tensor_model_parallel_size"].value == 1
    assert "model.recompute_granularity" not in generation.settings  # activation_checkpointing forced off
    assert found["policy"].settings["model.recompute_granularity"].value == "full"
    assert generation.unrecognised == ()  # buffer_size_gb, max_tokens: MCoreGenerationSpecificArgs (config.py:21-66)
    assert generation.spelling.patch({"model.offload_modules": ["core_attn", "attn_proj"]}) == {
        "policy.generation.mcore_generation_config.offload_modules": ["core_attn", "attn_proj"]}
    assert [i.path for i in generation.ignored] == ["model.fine_grained_activation_offloading"]
    assert list(models(path, "policy.generation.colocated.enabled=true")) == ["policy"]  # shares the policy's model


# --- plan ---------------------------------------------------------------------------------------------

def test_ppo_plan_reports_both_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PPO trains the value model too (ppo.py:774-785, init_optimizer=True)."""
    path = write(tmp_path, PPO)
    code, out, err = cli(capsys, "plan", path)
    assert err == "" and code in (0, 1)
    firsts = [line for line in out.splitlines() if line.startswith("plan")]
    assert firsts == ["plan [policy]: config (model from preset llama3-8b) on h100-sxm (published figures)",
                      "plan [value]: config (model from preset llama3-8b) on h100-sxm (published figures)"]
    assert out.splitlines()[-1].startswith("models: policy: ") and "; value: " in out.splitlines()[-1]
    code_json, out, _ = cli(capsys, "plan", path, "--format", "json")
    document = json.loads(out)
    assert set(document) == {"status", "models"} and code_json == code
    assert [m["target"] for m in document["models"]] == ["policy", "value"]
    assert all(set(m) >= {"status", "training", "as_configured", "recommendation"} for m in document["models"])
    assert "value head" in " ".join(document["models"][1]["assumptions"])


def test_single_model_plan_keeps_its_shape_with_a_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, PPO.split("value:")[0])
    _, out, _ = cli(capsys, "plan", path, "--format", "json")
    document = json.loads(out)
    assert document["target"] == "policy" and "models" not in document and "as_configured" in document


def test_plan_names_every_model_it_cannot_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a checkpoint the model catalogue does not hold (checks/data/models.json)
    path = write(tmp_path, PPO.replace("meta-llama/Llama-3.1-8B-Instruct", "example-org/Not-In-The-Catalogue-1B"))
    code, out, err = cli(capsys, "plan", path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "[policy] the planner needs the model's dimensions" in err and "[value] " in err
    assert "policy.model_name = example-org/Not-In-The-Catalogue-1B" in err
    # a bare --preset is the policy and every model with its model_name
    code, out, err = cli(capsys, "plan", path, "--preset", "llama3-8b", "--format", "json")
    assert err == "" and [m["source"] for m in json.loads(out)["models"]] == [
        "config (model from preset llama3-8b)", "config (model from preset llama3-8b)"]
    # a model with another checkpoint is not sized by the bare --preset (here the value model's name is a preset's)
    other = write(tmp_path, PPO.replace("meta-llama/Llama-3.1-8B-Instruct", "example-org/Not-In-The-Catalogue-1B", 1),
                  "other.yaml")
    _, out, err = cli(capsys, "plan", other, "--preset", "llama3-70b", "--format", "json")
    assert err == "" and [m["source"] for m in json.loads(out)["models"]] == [
        "config (model from preset llama3-70b)", "config (model from preset llama3-8b)"]
    _, out, _ = cli(capsys, "plan", other, "--preset", "llama3-70b", "--preset", "value=mixtral-8x7b",
                    "--format", "json")
    assert json.loads(out)["models"][1]["source"] == "config (model from preset mixtral-8x7b)"
    code, _, err = cli(capsys, "plan", other, "--preset", "nope=llama3-8b")
    assert code == 2 and "no model 'nope' in this config; its models: policy, value" in err


def test_plan_shows_an_inference_only_teacher_without_planning_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, DISTILLATION)
    _, out, err = cli(capsys, "plan", path, "--format", "json")
    assert err == ""
    teacher = json.loads(out)["models"][1]
    assert (teacher["target"], teacher["status"]) == ("teacher", "inference_only")
    assert teacher["weights_bytes_per_gpu"] > 0 and teacher["source"] == "config (model from preset llama3-70b)"
    _, out, _ = cli(capsys, "plan", path)
    assert "not planned [teacher]: the teacher only runs forward passes" in out
    assert "models: policy: " in out and "teacher: inference only" in out
    # a teacher whose size is not known says so, and how to give it
    unknown = write(tmp_path, DISTILLATION.replace("meta-llama/Meta-Llama-3-70B", "example-org/Not-In-The-Catalogue"),
                    "u.yaml")
    _, out, _ = cli(capsys, "plan", unknown)
    assert "size unknown: the planner needs the model's dimensions" in out and "--preset teacher=NAME" in out


def test_plot_draws_one_curve_per_planned_model(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    drawn: list[str] = []
    labels: list[str] = []
    titles: list[str] = []

    class Axis:
        def plot(self, *args: object, label: str = "", **kwargs: object) -> None:
            drawn.append(label)

        def set_xlabel(self, text: str) -> None:
            labels.append(text)

        def set_title(self, text: str) -> None:
            titles.append(text)

        def __getattr__(self, name: str) -> object:
            return lambda *args, **kwargs: None

    class Figure:
        def tight_layout(self) -> None: ...

        def savefig(self, path: str) -> None:
            if path.endswith(".xyz"):
                raise ValueError("Format 'xyz' is not supported")
            Path(path).write_text("png")

    pyplot = types.SimpleNamespace(subplots=lambda **kwargs: (Figure(), Axis()), close=lambda figure: None)
    backends: list[str] = []
    fake = types.SimpleNamespace(use=backends.append, pyplot=pyplot)
    monkeypatch.setitem(sys.modules, "matplotlib", fake)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    code, _, err = cli(capsys, "plan", write(tmp_path, PPO), "--plot", str(tmp_path / "p.png"))
    assert err == "" and code in (0, 1) and (tmp_path / "p.png").read_text() == "png"
    assert drawn == ["peak memory per GPU [policy]", "peak memory per GPU [value]"]
    assert labels == ["optimizer_offload_fraction"]
    # several models: each one's source in the title; one model: its source alone
    assert titles == ["policy: config (model from preset llama3-8b); value: config (model from preset llama3-8b)"]
    cli(capsys, "plan", "--preset", "llama3-8b", "--plot", str(tmp_path / "one.png"))
    assert titles[1] == "preset llama3-8b"
    assert backends == ["Agg", "Agg"]  # no display: the file backend
    code, _, err = cli(capsys, "plan", "--preset", "llama3-8b", "--plot", str(tmp_path / "p.xyz"))
    assert code == 2 and err == f"error: {tmp_path / 'p.xyz'}: cannot write the plot: Format 'xyz' is not supported\n"


def test_plan_of_a_config_whose_models_are_not_built_is_an_input_error(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "policy:\n  model_name: meta-llama/Llama-3.1-8B-Instruct\n  megatron_cfg:\n"
                           "    enabled: false\n")
    code, out, err = cli(capsys, "plan", path)
    assert code == 2 and out == "" and "nothing to plan: [policy] policy.megatron_cfg.enabled is false" in err


# --- every example config of NeMo-RL ------------------------------------------------------------------

NEMO_RL_GIT = os.environ.get("NEMO_RL_GIT")
PINNED = "7ea279ab"
# At 7ea279ab: what examples/configs builds, per kind of model (teacher:<alias> counted as "teacher:").
EXPECTED_MODELS = {"policy": 286, "teacher": 13, "teacher:": 3, "value": 10, "generation": 3}


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not NEMO_RL_GIT:
        pytest.skip("set NEMO_RL_GIT to an NVIDIA-NeMo/RL git directory (a bare mirror will do)")
    return nemo_rl_examples(NEMO_RL_GIT, tmp_path_factory.mktemp("nemo-rl"), PINNED)


def _has_megatron_cfg(node: object) -> bool:
    if isinstance(node, dict):
        return "megatron_cfg" in node or any(_has_megatron_cfg(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_megatron_cfg(v) for v in node)
    return False


def _without_megatron(path: Path) -> bool:
    """No megatron_cfg in the file or the parents its `defaults:` name."""
    data = load_yaml(str(path)).data
    parents = data.get("defaults") or []
    return not _has_megatron_cfg(data) and all(_without_megatron(path.parent / p)
                                               for p in ([parents] if isinstance(parents, str) else parents))


def test_every_nemo_rl_example_config_checks_without_a_false_finding(examples: Path) -> None:
    """Every examples/configs/**.yaml at 7ea279ab, with its models. No false finding means: the checker never
    crashes; NeMo-RL's own exemplars draw no CFG001/CFG003 (a key NeMo-RL reads is never called unknown) and,
    as shipped, no finding at all; exit 2 only for a config with no megatron_cfg anywhere, with the
    "no ... section" message."""
    kinds: Counter[str] = Counter()
    findings: Counter[tuple[str, str]] = Counter()
    codes: Counter[int] = Counter()
    for path in sorted(examples.rglob("*.yaml")):
        request = Request((str(path),), (), None, "nemo-rl", "main")
        try:
            configs = load(request)
        except InputError as err:
            assert "no policy.megatron_cfg, value.megatron_cfg or teacher.megatron_cfg section" in err.render()
            assert _without_megatron(path), path
            codes[2] += 1
            continue
        kinds.update(cfg.target if ":" not in str(cfg.target) else "teacher:" for cfg in configs)
        found = run(configs)
        findings.update((f.rule, str(f.target)) for f in found)
        assert not [f for f in found if f.rule in ("CFG001", "CFG003")], path
        codes[Report(tuple(found), "nemo-rl", "main", (str(path),), Environment()).exit_code] += 1
    assert dict(kinds) == EXPECTED_MODELS
    assert codes == Counter({0: 286, 2: 9}) and findings == Counter()


def test_every_megatron_distillation_example_is_checked_with_its_teacher(examples: Path) -> None:
    """The teacher's optimizer offload, switched on, is refused by NeMo-RL where its fraction is 0
    (setup.py:1219) and reported as unused because the teacher builds no optimizer (distillation.py:494)."""
    checked = 0
    for path in sorted(examples.rglob("distillation*.yaml")):
        configs = load(Request((str(path),), ("teacher.megatron_cfg.optimizer.optimizer_cpu_offload=true",),
                               None, "nemo-rl", "main")) if _teacher_on(path) else []
        if not configs:
            continue
        checked += 1
        teacher = next(cfg for cfg in configs if cfg.target == "teacher")
        fraction = teacher.settings["optimizer.optimizer_offload_fraction"].value
        found = hits(run(configs))
        assert ("teacher", "CFG005") in found, path
        assert (("teacher", "OPT001") in found) is (fraction == 0), path
        assert not {f for f in found if f[0] == "policy"}, path
    assert checked == 5


def _teacher_on(path: Path) -> bool:
    try:
        return any(cfg.target == "teacher" and cfg.role == "inference"
                   for cfg in load(Request((str(path),), (), None, "nemo-rl", "main")))
    except InputError:
        return False


def test_a_teacher_whose_layout_cannot_be_planned_is_shown_with_why(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A forward-only teacher the planner refuses (TP 3 does not divide its 64 heads) does not stop the policy's
    plan: it is shown as inference-only, with the planner's reason as its size."""
    path = write(tmp_path, DISTILLATION.replace("tensor_model_parallel_size: 8", "tensor_model_parallel_size: 3"))
    code, out, err = cli(capsys, "plan", path, "--format", "json")
    assert err == "" and code in (0, 1)
    policy, teacher = json.loads(out)["models"]
    assert policy["target"] == "policy" and policy["status"] != "inference_only"
    assert (teacher["target"], teacher["status"]) == ("teacher", "inference_only")
    assert "[teacher] tensor_model_parallel_size=3" in teacher["unsized"]
    assert teacher["unsized"].endswith("use a tensor-parallel size that divides 64 (the model of preset llama3-70b)")


@pytest.mark.parametrize(("gpus_per_node", "num_nodes", "data_parallel"), [(1, 4, 4), (8, 1, 8), (2, 3, 6)])
def test_the_cluster_sets_the_data_parallel_size(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 gpus_per_node: int, num_nodes: int, data_parallel: int) -> None:
    """NeMo-RL's data-parallel size is the cluster's GPUs over TP x PP x CP, one GPU per node included."""
    path = write(tmp_path, DISTILLATION.replace("gpus_per_node: 8", f"gpus_per_node: {gpus_per_node}")
                 .replace("num_nodes: 1", f"num_nodes: {num_nodes}"))
    _, out, _ = cli(capsys, "plan", path, "--format", "json")
    assert json.loads(out)["models"][0]["training"]["data_parallel"] == data_parallel


def test_a_config_without_a_model_name_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "policy:\n  megatron_cfg:\n    enabled: true\n")
    code, _, err = cli(capsys, "plan", path)
    assert code == 2 and err == (
        f"error: {path}: the planner needs the model's dimensions: NeMo-RL takes them from the Hugging Face "
        "checkpoint (no model_name is set), which is not one of the presets; add --preset NAME (known: llama3-8b, "
        "llama3-70b, qwen3-30b-a3b, qwen3-235b-a22b, mixtral-8x7b, deepseek-v3, moonlight-16b-a3b, nemotron-h-8b)\n")
