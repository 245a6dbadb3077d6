"""Each loader on real-format inputs: values, where they came from, and how patches are spelled."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from checks.config import CanonicalConfig, Environment
from checks.errors import InputError
from checks.loaders import Request, detect_flavor, load

EXAMPLES = ROOT / "examples" / "configs"


def one(request: Request) -> CanonicalConfig:
    configs = load(request)
    assert len(configs) == 1
    return configs[0]


def value_and_line(cfg: CanonicalConfig, path: str) -> tuple[object, int | None]:
    setting = cfg.settings[path]
    return setting.value, setting.origin.line


# --- Megatron Bridge ---------------------------------------------------------------------------

def test_bridge_dump_decodes_targets_and_keeps_lines() -> None:
    cfg = one(Request((str(EXAMPLES / "bridge/run_config_clean.yaml"),)))
    assert cfg.flavor == "bridge"
    assert value_and_line(cfg, "model.offload_modules") == (["core_attn", "attn_proj"], 44)
    assert value_and_line(cfg, "model.params_dtype") == ("bf16", 47)  # {_target_: torch.bfloat16, _call_: false}
    assert value_and_line(cfg, "optimizer.optimizer_offload_fraction") == (0.5, 70)
    assert value_and_line(cfg, "env.NVTE_CPU_OFFLOAD_V1") == (1, 12)
    assert "model._target_" not in cfg.settings
    assert not any(u.name == "activation_func" for u in cfg.unrecognised)  # a real field, decoded to a name
    assert value_and_line(cfg, "run.vocab_size") == (128256, 63)  # a GPTModelProvider field: the model's shape


def test_bridge_syncs_distributed_optimizer_like_bridge(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("ddp:\n  use_distributed_optimizer: false\noptimizer:\n  use_distributed_optimizer: true\n")
    cfg = one(Request((str(path),)))
    setting = cfg.settings["ddp.use_distributed_optimizer"]
    assert setting.value is True and setting.origin.line == 4 and "Bridge enables" in setting.origin.note


def test_bridge_nested_layout_maps_and_spells_back(tmp_path: Path) -> None:
    cfg = one(Request((str(EXAMPLES / "bridge/override_nested_layout.yaml"),)))
    assert value_and_line(cfg, "model.cpu_offloading") == (True, 5)
    assert cfg.spelling.patch({"model.cpu_offloading": False}) == {"model.transformer.cpu_offloading": False}
    assert cfg.spelling.override_lines({"model.transformer.cpu_offloading": False}) == [
        "model.transformer.cpu_offloading=false"]


def test_bridge_overrides_apply_in_order_with_positions(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("model:\n  cpu_offloading: false\n")
    top = tmp_path / "top.yaml"
    top.write_text("model:\n  cpu_offloading_num_layers: 3\n")
    overrides = ("model.cpu_offloading=true", "++optimizer.optimizer_cpu_offload=True",
                 "model.offload_modules=[core_attn,'attn_proj']", "~model.cpu_offloading")
    cfg = one(Request((str(base), str(top)), overrides))
    assert "model.cpu_offloading" not in cfg.settings  # deleted by the last override
    assert value_and_line(cfg, "model.cpu_offloading_num_layers") == (3, 2)
    assert cfg.settings["model.cpu_offloading_num_layers"].origin.file == str(top)
    fraction = cfg.settings["optimizer.optimizer_cpu_offload"]
    assert fraction.value is True and fraction.origin.arg == "--set #2"
    assert cfg.settings["model.offload_modules"].value == ["core_attn", "attn_proj"]


def test_bridge_unknown_keys_are_kept_for_the_rules(tmp_path: Path) -> None:
    path = tmp_path / "o.yaml"
    path.write_text("optimiser:\n  lr: 1\nmodel:\n  max_seq_len: 4096\n  cpu_offload: true\n")
    cfg = one(Request((str(path),)))
    found = {(u.section, u.name, u.consequence) for u in cfg.unrecognised}
    assert found == {("", "optimiser", "ignored"), ("model", "max_seq_len", "ignored"),
                     ("model", "cpu_offload", "ignored")}


# --- NeMo-RL ---------------------------------------------------------------------------------

def test_nemo_rl_inheritance_interpolation_and_lines() -> None:
    cfg = one(Request((str(EXAMPLES / "nemo-rl/grpo_offload.yaml"),)))
    assert cfg.flavor == "nemo-rl" and cfg.target == "policy"
    modules = cfg.settings["model.offload_modules"]
    assert modules.value == ["core_attn", "attn_proj"] and modules.origin.line == 7
    assert modules.origin.file.endswith("grpo_offload.yaml")
    distopt = cfg.settings["optimizer.use_distributed_optimizer"]
    assert distopt.value is True and distopt.origin.file.endswith("grpo_megatron_base.yaml")
    dtype = cfg.settings["model.pipeline_dtype"]
    assert dtype.value == "bf16" and dtype.origin.note == "interpolated from ${policy.precision}"
    assert cfg.settings["env.NVTE_CPU_OFFLOAD_V1"].value == "1"
    # activation_checkpointing is false, so the exemplar's recompute_granularity: full is not applied
    assert "model.recompute_granularity" not in cfg.settings


def test_nemo_rl_spelling_uses_first_class_keys_and_model_overrides() -> None:
    cfg = one(Request((str(EXAMPLES / "nemo-rl/grpo_offload.yaml"),)))
    patch = cfg.spelling.patch({"model.cpu_offloading": False, "model.recompute_granularity": None,
                                "optimizer.optimizer_offload_fraction": 1.0, "model.offload_modules": ["core_attn"]})
    assert patch == {"policy.megatron_cfg.model_overrides.cpu_offloading": False,
                     "policy.megatron_cfg.activation_checkpointing": False,
                     "policy.megatron_cfg.optimizer.optimizer_offload_fraction": 1.0,
                     "policy.megatron_cfg.offload_modules": ["core_attn"]}
    assert cfg.spelling.override_lines(patch) == [
        "++policy.megatron_cfg.model_overrides.cpu_offloading=false",
        "policy.megatron_cfg.activation_checkpointing=false",
        "policy.megatron_cfg.optimizer.optimizer_offload_fraction=1.0",
        "policy.megatron_cfg.offload_modules=[core_attn]",
    ]


def test_nemo_rl_policy_and_value_are_separate_models() -> None:
    policy, value = load(Request((str(EXAMPLES / "nemo-rl/ppo_value_model.yaml"),)))
    assert (policy.target, value.target) == ("policy", "value")
    assert value.settings["model.recompute_granularity"].value == "full"
    assert value.settings["model.recompute_method"].value == "uniform"
    assert value.settings["model.cpu_offloading"].origin.key == "value.megatron_cfg.model_overrides.cpu_offloading"
    assert "model.cpu_offloading" not in policy.settings


def test_nemo_rl_semantics_of_switches(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "policy:\n  megatron_cfg:\n    enabled: true\n    fine_grained_activation_offloading: false\n"
        "    offload_modules: [core_attn]\n    cpu_offloading: true\n    optimizer:\n      optimizer: adam\n"
        "      bogus_field: 1\n    model_overrides:\n      not_a_field: 2\n"
        "    distributed_data_parallel_config:\n      use_custom_fsdp: false\n")
    cfg = one(Request((str(path),)))
    assert cfg.settings["model.offload_modules"].value == []  # NeMo-RL clears it when the switch is false
    assert [i.reason.startswith("NeMo-RL replaces it") for i in cfg.ignored if i.path == "model.offload_modules"]
    found = {(u.section, u.name, u.consequence) for u in cfg.unrecognised}
    assert found == {("megatron_cfg", "cpu_offloading", "ignored"), ("optimizer", "bogus_field", "crash"),
                     ("model", "not_a_field", "crash")}
    assert any(i.path == "distributed_data_parallel_config.use_custom_fsdp" for i in cfg.ignored)


def test_nemo_rl_keys_read_outside_the_typeddict_are_per_release(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  megatron_cfg:\n    enabled: true\n    moe_router_dtype: fp32\n"
                    "    virtual_pipeline_model_parallel_size: 2\n    moe_per_layer_logging: true\n")
    old = one(Request((str(path),), environment=Environment(nemo_rl_version="0.4.0")))
    assert old.settings["model.moe_router_dtype"].value == "fp32"  # 0.4.0 applies it (worker :569)
    assert {u.name for u in old.unrecognised} == {"virtual_pipeline_model_parallel_size", "moe_per_layer_logging"}
    main = one(Request((str(path),)))
    # main reads VPP only to refuse it for Nemotron Omni, and moe_per_layer_logging only for logging:
    # neither reaches the model, and neither is an unknown key.
    assert "model.virtual_pipeline_model_parallel_size" not in main.settings
    assert "model.moe_per_layer_logging" not in main.settings
    assert main.unrecognised == ()
    assert main.spelling.patch({"model.virtual_pipeline_model_parallel_size": 1}) == {
        "policy.megatron_cfg.model_overrides.virtual_pipeline_model_parallel_size": 1}


def test_nemo_rl_model_overrides_conflicts_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  megatron_cfg:\n    enabled: true\n    cpu_offloading: false\n"
                    "    recompute_granularity: full\n    model_overrides:\n      cpu_offloading: true\n"
                    "      recompute_granularity: selective\n      cpu_offloading_num_layers: 1\n")
    cfg = one(Request((str(path),)))
    # setup.py:760: MegatronConfig fields plus every key present, even one NeMo-RL ignores (and even false)
    assert [(r.path, r.setting.origin.line) for r in cfg.rejected] == [
        ("model.cpu_offloading", 7), ("model.recompute_granularity", 8)]
    assert cfg.unrecognised == ()  # the stray megatron_cfg.cpu_offloading is not silently dropped
    path.write_text(path.read_text().replace("enabled: true", "enabled: false"))
    assert one(Request((str(path),))).rejected == ()


def test_nemo_rl_disabled_backend_ignores_everything(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  megatron_cfg:\n    enabled: false\n    optimizer:\n      optimizer_cpu_offload: true\n")
    cfg = one(Request((str(path),)))
    assert cfg.settings == {}
    assert [i.path for i in cfg.ignored] == ["optimizer.optimizer_cpu_offload"]


def test_nemo_rl_disabled_backend_reports_only_what_the_user_wrote_and_would_act(tmp_path: Path) -> None:
    # false changes nothing, and offload_modules=[] is derived from it, not written: neither is reported
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  megatron_cfg:\n    enabled: false\n    fine_grained_activation_offloading: false\n"
                    "    offload_modules: [core_attn]\n")
    cfg = one(Request((str(path),)))
    assert [(i.path, i.setting.value) for i in cfg.ignored] == [("model.offload_modules", ["core_attn"])]


def test_nemo_rl_override_section_replaces_parent(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("policy:\n  megatron_cfg:\n    enabled: true\n    optimizer:\n"
                                        "      optimizer_cpu_offload: true\n")
    (tmp_path / "child.yaml").write_text("defaults: base.yaml\npolicy:\n  _override_: true\n  megatron_cfg:\n"
                                         "    enabled: true\n")
    cfg = one(Request((str(tmp_path / "child.yaml"),)))
    assert "optimizer.optimizer_cpu_offload" not in cfg.settings


def test_nemo_rl_unresolvable_interpolation_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  megatron_cfg:\n    enabled: true\n    pipeline_dtype: ${policy.nope}\n")
    with pytest.raises(InputError) as err:
        load(Request((str(path),)))
    assert err.value.render().startswith(f"{path}:4: cannot resolve policy.megatron_cfg.pipeline_dtype")


def test_nemo_rl_defaults_loop_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\npolicy: {megatron_cfg: {enabled: true}}\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\n")
    with pytest.raises(InputError, match="loops back"):
        load(Request((str(tmp_path / "a.yaml"),)))


# --- Megatron-LM ----------------------------------------------------------------------------

def test_megatron_lm_script_lines_variables_and_implied_switch() -> None:
    cfg = one(Request((str(EXAMPLES / "megatron-lm/pretrain_gpt_offload.sh"),)))
    assert value_and_line(cfg, "model.num_layers") == (24, 6)  # ${NUM_LAYERS} from the assignment
    assert value_and_line(cfg, "model.cpu_offloading_num_layers") == (4, 14)
    implied = cfg.settings["model.cpu_offloading"]
    assert implied.value is True and implied.origin.line == 14 and "implied" in implied.origin.note
    assert value_and_line(cfg, "model.recompute_granularity") == ("selective", 15)
    assert cfg.settings["optimizer.use_distributed_optimizer"].value is True
    assert cfg.settings["ddp.use_distributed_optimizer"].value is True
    assert cfg.defaults["optimizer.optimizer_offload_fraction"] == 1.0  # the command line's default


def test_megatron_lm_argv_positions_and_actions() -> None:
    cfg = one(Request(argv="--optimizer-cpu-offload --no-pin-cpu-grads --offload-modules core_attn attn_proj "
                           "--optimizer-offload-fraction=0.25 --fine-grained-activation-offloading"))
    assert cfg.settings["optimizer.pin_cpu_grads"].value is False
    assert cfg.settings["model.offload_modules"].value == ["core_attn", "attn_proj"]
    assert cfg.settings["model.offload_modules"].origin.arg == "argv[2]"
    assert cfg.settings["optimizer.optimizer_offload_fraction"].value == 0.25
    assert cfg.spelling.patch({"optimizer.pin_cpu_grads": True, "optimizer.use_precision_aware_optimizer": True,
                               "model.cpu_offloading": False}) == {
        "--no-pin-cpu-grads": None, "--use-precision-aware-optimizer": True, "--cpu-offloading-num-layers": 0}


def test_megatron_lm_duplicates_unknown_rejected_and_unresolved(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("python pretrain_gpt.py --optimizer-offload-fraction 0.3 \\\n  --optimizer-offload-fraction 0.5 "
                      "--optimizer-cpu-ofload --recompute-granularity partial --cpu-offloading-num-layers $N\n")
    cfg = one(Request((str(script),), version="0.16.1"))
    assert value_and_line(cfg, "optimizer.optimizer_offload_fraction") == (0.5, 2)
    reasons = {i.path: i.reason for i in cfg.ignored}
    assert "given again at" in reasons["--optimizer-offload-fraction"]
    assert "shell variable" in reasons["--cpu-offloading-num-layers"]
    assert [(u.name, u.consequence) for u in cfg.unrecognised] == [("--optimizer-cpu-ofload", "crash")]
    # argparse's own wording (CPython 3.11 argparse._check_value), the argument named by its option strings
    assert [r.reason for r in cfg.rejected] == [
        "argparse: argument --recompute-granularity: invalid choice: 'partial' (choose from 'full', 'selective')"]


def test_megatron_lm_functional_test_yaml() -> None:
    cfg = one(Request((str(EXAMPLES / "megatron-lm/functional_test_fine_grained.yaml"),), version="0.16.1"))
    assert cfg.settings["model.offload_modules"].value == ["expert_fc1", "moe_act", "core_attn", "attn_proj"]
    assert value_and_line(cfg, "model.num_moe_experts") == (8, 10)
    # exported as the text yq prints (NVIDIA/Megatron-LM@d98e8a64:tests/functional_tests/shell_test_utils/
    # _run_training.sh:76-84: KEY=value strings)
    assert cfg.settings["env.NVTE_CPU_OFFLOAD_V1"].value == "1"


# --- detection ------------------------------------------------------------------------------

@pytest.mark.parametrize("name,flavor", [
    ("bridge/run_config_clean.yaml", "bridge"), ("bridge/override_optimizer_offload.yaml", "bridge"),
    ("nemo-rl/grpo_offload.yaml", "nemo-rl"), ("nemo-rl/grpo_megatron_base.yaml", "nemo-rl"),
    ("megatron-lm/pretrain_gpt_clean.sh", "megatron-lm"),
    ("megatron-lm/functional_test_fine_grained.yaml", "megatron-lm"),
])
def test_detect_flavor(name: str, flavor: str) -> None:
    assert detect_flavor(Request((str(EXAMPLES / name),))) == flavor


def test_detect_flavor_from_overrides_and_argv() -> None:
    assert detect_flavor(Request((), ("policy.megatron_cfg.enabled=true",))) == "nemo-rl"
    assert detect_flavor(Request((), ("++model.cpu_offloading=true",))) == "bridge"
    assert detect_flavor(Request(argv="--num-layers 2")) == "megatron-lm"
    with pytest.raises(InputError, match="pass --flavor"):
        detect_flavor(Request((), ("train.train_iters=3",)))


def test_nemo_rl_before_0_7_has_no_megatron_value_model(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("policy:\n  megatron_cfg:\n    enabled: true\nvalue:\n  megatron_cfg:\n    enabled: true\n"
                    "    not_a_key: 1\n    optimizer:\n      optimizer_cpu_offload: true\n")
    for version, read in (("0.6.0", False), ("0.7.0", True)):
        env = Environment(nemo_rl_version=version)
        value = next(c for c in load(Request((str(path),), version="0.19.2", environment=env)) if c.target == "value")
        assert ("optimizer.optimizer_cpu_offload" in value.settings) is read
        assert bool(value.unrecognised) is read
        # unread in 0.6.0: every key the section gives, known or not (CFG005 reports the offloading ones)
        assert [i.path for i in value.ignored] == ([] if read else ["model.not_a_key",
                                                                    "optimizer.optimizer_cpu_offload"])


def test_bridge_dump_with_a_null_bool_from_an_old_provider_is_not_a_type_error(tmp_path: Path) -> None:
    """Bridge providers before Megatron-Bridge@217de1a2 declared ``use_transformer_engine_op_fuser: Optional[bool] =
    None``, so old dumps carry null; Bridge passes it through and megatron-core tests it for truth
    (NVIDIA/Megatron-LM@d98e8a64:megatron/core/models/gpt/gpt_layer_specs.py:228, 538), so it is false."""
    dump = tmp_path / "run_config.yaml"
    dump.write_text("_target_: megatron.bridge.training.config.ConfigContainer\nmodel:\n"
                    "  _target_: megatron.bridge.models.llama.llama_provider.Llama31ModelProvider\n"
                    "  use_transformer_engine_op_fuser: null\n  cpu_offloading: false\n")
    from checks.engine import run

    assert [f.rule for f in run(load(Request((str(dump),), (), None, "auto", "0.19.2")))] == []


def test_megatron_lm_argv_with_a_launcher_prefix_reads_only_the_script_arguments() -> None:
    """`torchrun ... pretrain_gpt.py --flags`: the training script's parser sees only the words after the script
    (`parser.parse_args()` reads sys.argv[1:]; NVIDIA/Megatron-LM@d98e8a64:megatron/training/arguments.py:132)."""
    [cfg] = load(Request((), (), "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4", "megatron-lm",
                         "main"))
    assert cfg.rejected == () and cfg.settings["model.num_layers"].value == 4
    assert cfg.settings["model.num_layers"].origin.arg == "argv[4]"
