"""The Megatron Bridge recipe catalogue (checks/data/bridge_recipes.json) and the interpreter that writes it.

Always-run tests read the committed JSON and tiny synthetic sources; the tests that regenerate the table or read
the recipes' own lines need a Bridge git directory in BRIDGE_GIT (a bare mirror will do) and skip without it.
Upstream lines cited below are NVIDIA-NeMo/Megatron-Bridge@067f987d.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "checks" / "data" / "bridge_recipes.json"
sys.path.insert(0, str(ROOT / "tools"))

import bridge_recipes as tool  # noqa: E402

BRIDGE_GIT = os.environ.get("BRIDGE_GIT")
NEEDS_GIT = pytest.mark.skipif(not BRIDGE_GIT, reason="set BRIDGE_GIT to an NVIDIA-NeMo/Megatron-Bridge git "
                                                      "directory (a bare mirror will do) to compare with upstream")


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def entry(data: dict[str, Any], key: str) -> dict[str, Any]:
    return data["recipes"].get(key) or data["templates"][key]


def expand(data: dict[str, Any], key: str) -> dict[str, tuple[Any, str]]:
    """The reference reading of either form (the table's "format" note): {path: (value, "file:line")}."""
    if "files" not in data:  # --format full
        return {path: (item["value"], item["at"]) for path, item in data["recipes"][key]["values"].items()}
    item = entry(data, key)
    values = {} if item["base"] is None else expand(data, item["base"])
    for path in item["drop"]:
        values.pop(path, None)
    for path in item["unresolved"]:
        values.pop(path, None)
    for path, (value, at) in item["values"].items():
        index, _, line = at.partition(":")
        values[path] = (value, f"{data['files'][int(index)]}:{line}")
    return values


def launched(data: dict[str, Any], name: str) -> str:
    """The entry `run_recipe.py --recipe name` runs."""
    return data["aliases"].get(name, name)


# -- structure ---------------------------------------------------------------------------------------------------


def test_table_structure_and_counts(data: dict[str, Any]) -> None:
    assert data["source"]["repo"] == "NVIDIA-NeMo/Megatron-Bridge"
    assert len(data["source"]["commit"]) == 40
    assert data["counts"]["recipes"] == len(data["recipes"])
    assert data["counts"]["aliases"] == len(data["aliases"])
    assert data["counts"]["values"] == sum(len(expand(data, k)) for k in data["recipes"])
    assert data["counts"]["unresolved"] == sum(len(e["unresolved"]) for e in data["recipes"].values())
    for key, item in {**data["recipes"], **data.get("templates", {})}.items():
        assert item["kind"] in ("library", "benchmark", "template"), key
        assert item["mode"] in ("pretrain", "sft", "lora", "dora", None), key
        assert item["defined"].startswith("src/megatron/bridge/") and ".py:" in item["defined"], key
        assert item.get("base") is None or item["base"] in data["recipes"] or item["base"] in data["templates"], key
        assert item["hf_model"] is None or isinstance(item["hf_model"]["id"], str) or \
            "hf_model.id" in item["unresolved"], key
    for name, target in data["aliases"].items():
        assert target in data["recipes"] and target != name


def test_every_at_points_into_a_python_file(data: dict[str, Any]) -> None:
    assert all(path.endswith(".py") for path in data.get("files", []))
    for key in data["recipes"]:
        for path, (_, at) in expand(data, key).items():
            file, _, line = at.rpartition(":")
            assert file.endswith(".py") and int(line) > 0, (key, path, at)


@pytest.mark.skipif(not BRIDGE_GIT, reason="needs BRIDGE_GIT")
def test_compact_form_expands_to_the_full_form() -> None:
    full = tool.build(tool.Sources(Path(str(BRIDGE_GIT)), tool.DEFAULT_COMMIT), "full")
    small = tool.build(tool.Sources(Path(str(BRIDGE_GIT)), tool.DEFAULT_COMMIT), "compact")
    for key in full["recipes"]:
        assert expand(small, key) == expand(full, key), key


def test_no_path_has_both_a_value_and_an_unresolved_reason(data: dict[str, Any]) -> None:
    for key, item in data["recipes"].items():
        assert not set(item["values"]) & set(item["unresolved"]), key
        assert not set(expand(data, key)) & set(item["unresolved"]), key


def test_mode_is_what_recipe_metadata_infers() -> None:
    # scripts/training/recipe_metadata.py:214-226 infer_recipe_mode
    assert tool.infer_recipe_mode("qwen3_30b_a3b_pretrain_config") == "pretrain"
    assert tool.infer_recipe_mode("llama3_8b_peft_config") == "lora"
    assert tool.infer_recipe_mode("x_finetune_config") == "sft"
    assert tool.infer_recipe_mode("vanilla_thing") is None


# -- hand-verified values ------------------------------------------------------------------------------------------


def test_qwen3_30b_a3b_alias_runs_the_16gpu_h100_library_recipe(data: dict[str, Any]) -> None:
    # recipes/qwen/qwen3_moe.py:20-22 aliases the generic name to the 16-GPU H100 recipe; that function's own name is
    # also a benchmark recipe (scripts/training/recipe_metadata.py:49-61), which wins for the bare name.
    key = launched(data, "qwen3_30b_a3b_pretrain_config")
    item = data["recipes"][key]
    assert item["function"] == "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"
    assert item["module"] == "megatron.bridge.recipes.qwen.h100.qwen3_moe" and item["kind"] == "library"
    assert item["hf_model"]["id"] == "Qwen/Qwen3-30B-A3B"
    assert item["hf_model"]["revision"] == "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"  # qwen3_moe.py:29
    values = expand(data, key)
    # recipes/qwen/h100/qwen3_moe.py:213-214
    assert values["model.cuda_graph_impl"] == ("transformer_engine",
                                               "src/megatron/bridge/recipes/qwen/h100/qwen3_moe.py:213")
    assert values["model.cuda_graph_scope"][0] == ["moe_router", "moe_preprocess"]
    assert values["model.expert_model_parallel_size"][0] == 16  # qwen3_moe.py:173
    assert values["optimizer.main_grads_dtype"][0] == "fp32"  # qwen3_moe.py:190 (torch.float32)
    assert values["comm_overlap.tp_comm_overlap"][0] is True  # qwen3_moe.py:218
    assert values["mixed_precision.grad_reduce_in_fp32"][0] is False  # qwen3_moe.py:155 after bf16_mixed() at :154
    assert values["env_vars.NCCL_GRAPH_REGISTER"][1].endswith("recipes/utils/environment_utils.py:25")
    # apply_flex_dispatcher_backend (training/flex_dispatcher_backend.py:39-84) depends on the GPU and the HF config.
    assert "model.moe_token_dispatcher_type" in item["unresolved"]
    assert data["recipes"]["qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config"]["kind"] == "benchmark"


def test_llama3_70b_pretrain_values(data: dict[str, Any]) -> None:
    values = expand(data, launched(data, "llama3_70b_pretrain_config"))
    # recipes/llama/h100/llama3.py:734-739
    assert values["model.tensor_model_parallel_size"] == (4, "src/megatron/bridge/recipes/llama/h100/llama3.py:734")
    assert values["model.pipeline_model_parallel_size"][0] == 4
    assert values["model.virtual_pipeline_model_parallel_size"][0] == 5
    assert values["model.context_parallel_size"][0] == 2
    # llama3.py:797-802: CommOverlapConfig with a module constant from training/comm_overlap.py, and bf16_mixed()
    assert values["comm_overlap.tp_comm_overlap_cfg"][0] == \
        "megatron.bridge.training.comm_overlap.userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192"
    assert values["mixed_precision.bf16"] == (True, "src/megatron/bridge/training/mixed_precision.py:192")
    assert "mixed_precision" not in values  # the object replaced _pretrain_common's "bf16_mixed" (common.py:130)


def test_deepseek_v3_pretrain_values(data: dict[str, Any]) -> None:
    item = data["recipes"][launched(data, "deepseek_v3_pretrain_config")]
    assert item["kind"] == "library"
    values = expand(data, launched(data, "deepseek_v3_pretrain_config"))
    # recipes/deepseek/h100/deepseek_v3.py:125-131
    assert values["model.tensor_model_parallel_size"] == (
        2, "src/megatron/bridge/recipes/deepseek/h100/deepseek_v3.py:125")
    assert values["model.pipeline_model_parallel_size"][0] == 16
    assert values["model.expert_model_parallel_size"][0] == 64


def test_gpt_oss_benchmark_values(data: dict[str, Any]) -> None:
    item = data["recipes"]["gpt_oss_120b_pretrain_64gpu_h100_bf16_config"]
    assert item["kind"] == "benchmark"
    values = expand(data, "gpt_oss_120b_pretrain_64gpu_h100_bf16_config")
    # perf_recipes/gpt_oss/h100/gpt_oss.py:32-41
    assert values["model.pipeline_model_parallel_size"] == (
        4, "src/megatron/bridge/perf_recipes/gpt_oss/h100/gpt_oss.py:33")
    assert values["model.recompute_granularity"][0] == "selective"
    assert values["model.recompute_modules"][0] == ["layernorm", "moe_act"]
    # perf_recipes/_common.py:44: _benchmark_common shortens the run
    assert values["train.train_iters"] == (50, "src/megatron/bridge/perf_recipes/_common.py:44")


def test_nemotron_3_nano_builds_its_provider(data: dict[str, Any]) -> None:
    item = data["recipes"][launched(data, "nemotron_3_nano_pretrain_config")]
    # recipes/nemotronh/h100/nemotron_3_nano.py: HybridModelProvider(...) with explicit kwargs (lines 117-125)
    assert item["model_provider"]["class"] == "HybridModelProvider" and item["hf_model"] is None
    values = expand(data, launched(data, "nemotron_3_nano_pretrain_config"))
    assert values["model.expert_model_parallel_size"] == (
        8, "src/megatron/bridge/recipes/nemotronh/h100/nemotron_3_nano.py:125")
    assert values["model.cuda_graph_impl"][0] == "transformer_engine"  # nemotron_3_nano.py:155


def test_llama3_8b_peft_applies_its_lora_dims(data: dict[str, Any]) -> None:
    item = data["recipes"][launched(data, "llama3_8b_peft_config")]
    assert item["parameters"] == {"peft_scheme": "lora"}
    values = expand(data, launched(data, "llama3_8b_peft_config"))
    # recipes/llama/h100/llama3.py:2367-2369 (taken because peft_scheme defaults to "lora")
    assert values["peft.dim"] == (8, "src/megatron/bridge/recipes/llama/h100/llama3.py:2368")
    assert values["peft.alpha"][0] == 16


def test_mixed_precision_presets(data: dict[str, Any]) -> None:
    presets = data["mixed_precision_presets"]
    # training/mixed_precision.py:191-197
    assert presets["bf16_mixed"]["values"] == {"bf16": True, "params_dtype": "bf16", "pipeline_dtype": "bf16",
                                               "autocast_enabled": False, "grad_reduce_in_fp32": True,
                                               "fp8_param": False, "fp4_param": False}
    assert presets["bf16_mixed"]["also_registered_as"] == "bf16-mixed"
    # training/mixed_precision.py:296-302: the preset changes the bf16_mixed() result
    fp8cs = presets["bf16_with_fp8_current_scaling_mixed"]
    assert fp8cs["values"]["fp8"] == "hybrid" and fp8cs["values"]["fp8_param"] is True  # __setattr__ twin :84
    assert data["mixed_precision_defaults"]["values"]["grad_reduce_in_fp32"] is True  # mixed_precision.py:47
    assert "update_config_with_precision_overrides" in data["applies"]


# -- the interpreter on synthetic sources ------------------------------------------------------------------------

CONFIG = '''
from dataclasses import dataclass, field
from typing import Optional

@dataclass
class TrainingConfig:
    micro_batch_size: int = 1
    global_batch_size: int = 8

@dataclass
class ModelProvider:
    tensor_model_parallel_size: int = 1
    cuda_graph_impl: str = "none"
    recompute_granularity: Optional[str] = None

@dataclass
class ConfigContainer:
    model: Optional[ModelProvider] = None
    train: TrainingConfig = field(default_factory=TrainingConfig)
    env_vars: dict = field(default_factory=dict)
'''


def interpret(recipe_module: str, function: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    modules = {"megatron.bridge.training.config": CONFIG, "megatron.bridge.recipes.fake": recipe_module}
    modules.update(extra or {})
    interpreter = tool.Interpreter(tool.Modules(tool.MemorySources(modules)))
    func = interpreter.global_value("megatron.bridge.recipes.fake", function)
    return tool.describe(interpreter, func)


def test_if_else_on_a_parameter_takes_its_branch() -> None:
    source = '''
from megatron.bridge.training.config import ConfigContainer, ModelProvider

def recipe(big: bool = True):
    cfg = ConfigContainer(model=ModelProvider(tensor_model_parallel_size=2))
    if big:
        cfg.model.tensor_model_parallel_size = 8
    else:
        cfg.model.tensor_model_parallel_size = 1
    cfg.train.micro_batch_size = 4 if not big else 2
    return cfg
'''
    out = interpret(source, "recipe")
    assert out["parameters"] == {"big": True}
    assert out["values"]["model.tensor_model_parallel_size"] == {
        "value": 8, "at": "src/megatron/bridge/recipes/fake.py:7"}
    assert out["values"]["train.micro_batch_size"]["value"] == 2
    assert out["model_provider"] == {"class": "ModelProvider", "module": "megatron.bridge.training.config"}
    assert out["unresolved"] == {}


def test_helpers_are_inlined_with_their_arguments() -> None:
    helpers = '''
def apply_graphs(model_cfg, impl="transformer_engine"):
    model_cfg.cuda_graph_impl = impl
    return model_cfg.cuda_graph_impl, 3

ENV = {"NCCL_X": "1"}
'''
    source = '''
from megatron.bridge.training.config import ConfigContainer, ModelProvider
from megatron.bridge.recipes.helpers import ENV, apply_graphs

def recipe():
    cfg = ConfigContainer(model=ModelProvider())
    impl, n = apply_graphs(cfg.model)
    cfg.model.tensor_model_parallel_size = n
    cfg.env_vars = {**ENV, "EXTRA": f"{impl}-{n}"}
    return cfg
'''
    out = interpret(source, "recipe", {"megatron.bridge.recipes.helpers": helpers})
    values = out["values"]
    assert values["model.cuda_graph_impl"] == {"value": "transformer_engine",
                                               "at": "src/megatron/bridge/recipes/helpers.py:3"}
    assert values["model.tensor_model_parallel_size"]["value"] == 3
    assert values["env_vars.NCCL_X"] == {"value": "1", "at": "src/megatron/bridge/recipes/helpers.py:6"}
    assert values["env_vars.EXTRA"]["value"] == "transformer_engine-3"


def test_an_unknown_call_and_an_unknown_if_leave_paths_unresolved() -> None:
    source = '''
import os
import torch
from megatron.bridge.training.config import ConfigContainer, ModelProvider

def recipe():
    cfg = ConfigContainer(model=ModelProvider())
    cfg.train.global_batch_size = int(os.environ.get("GBS", "8"))
    cfg.model.cuda_graph_impl = "local"
    if torch.cuda.is_available():
        cfg.model.cuda_graph_impl = "transformer_engine"
        cfg.model.recompute_granularity = "full"
    cfg.model.tensor_model_parallel_size = 2
    return cfg
'''
    out = interpret(source, "recipe")
    assert set(out["unresolved"]) == {"train.global_batch_size", "model.cuda_graph_impl",
                                      "model.recompute_granularity"}
    assert "os.environ.get() depends on the runtime environment" in out["unresolved"]["train.global_batch_size"]
    assert "unknown condition" in out["unresolved"]["model.cuda_graph_impl"]
    assert out["values"]["model.tensor_model_parallel_size"]["value"] == 2  # after the if: definite again


def test_a_return_under_an_unknown_condition_makes_the_rest_conditional() -> None:
    source = '''
import torch
from megatron.bridge.training.config import ConfigContainer, ModelProvider

def maybe(model_cfg):
    if torch.cuda.device_count() == 0:
        return
    model_cfg.cuda_graph_impl = "transformer_engine"
    model_cfg.tensor_model_parallel_size = 1

def recipe():
    cfg = ConfigContainer(model=ModelProvider(tensor_model_parallel_size=1))
    maybe(cfg.model)
    return cfg
'''
    out = interpret(source, "recipe")
    assert "model.cuda_graph_impl" in out["unresolved"]
    # both paths leave tensor_model_parallel_size at 1: the kwarg's line stands
    assert out["values"]["model.tensor_model_parallel_size"] == {"value": 1,
                                                                "at": "src/megatron/bridge/recipes/fake.py:12"}


def test_an_hf_provider_records_its_model_and_only_explicit_fields() -> None:
    source = '''
from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.models.conversion.auto_bridge import AutoBridge

def recipe():
    cfg = ConfigContainer()
    cfg.model = AutoBridge.from_hf_pretrained("org/model", revision="abc").to_megatron_provider(load_weights=False)
    cfg.model.tensor_model_parallel_size = 4
    if cfg.model.num_layers > 10:
        cfg.model.recompute_granularity = "full"
    return cfg
'''
    auto = "class AutoBridge:\n    pass\n"
    out = interpret(source, "recipe", {"megatron.bridge.models.conversion.auto_bridge": auto})
    assert out["hf_model"] == {"id": "org/model", "revision": "abc", "method": "to_megatron_provider"}
    assert out["values"]["model.tensor_model_parallel_size"]["value"] == 4
    assert "HF bridge" in out["unresolved"]["model.recompute_granularity"]
    assert "model.num_layers" not in out["values"]


# -- against the Bridge sources ------------------------------------------------------------------------------------


@NEEDS_GIT
def test_table_is_what_the_tool_derives(tmp_path: Path, data: dict[str, Any]) -> None:
    out = tmp_path / "bridge_recipes.json"
    form = "compact" if "files" in data else "full"
    subprocess.run([sys.executable, str(ROOT / "tools" / "bridge_recipes.py"), "--bridge-git", str(BRIDGE_GIT),
                    "--commit", data["source"]["commit"], "--format", form, "--out", str(out)],
                   check=True, capture_output=True)
    assert out.read_text(encoding="utf-8") == DATA.read_text(encoding="utf-8"), \
        "run: python tools/bridge_recipes.py --bridge-git $BRIDGE_GIT --out checks/data/bridge_recipes.json"


@NEEDS_GIT
def test_every_at_line_names_its_field(data: dict[str, Any]) -> None:
    texts: dict[str, list[str]] = {}

    def line(at: str) -> str:
        path, _, number = at.rpartition(":")
        if path not in texts:
            texts[path] = subprocess.run(["git", "-C", str(BRIDGE_GIT), "show", f"{data['source']['commit']}:{path}"],
                                         check=True, capture_output=True, text=True).stdout.splitlines()
        return texts[path][int(number) - 1]

    wrong = [(key, path, at) for key in data["recipes"] for path, (_, at) in expand(data, key).items()
             if path.rpartition(".")[2] not in line(at)]
    assert not wrong, wrong[:10]
