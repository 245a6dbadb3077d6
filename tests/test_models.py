"""The model architecture catalogue (checks/data/models.json) and its reader (checks/models.py).

The always-run tests check the committed data; the hand-verified rows cite the upstream lines their numbers
come from. The tests at the end read the upstream mirrors (BRIDGE_GIT, NEMO_RL_GIT, MLM_GIT, NEMO_GIT) and skip
without them: every id a Bridge recipe or a NeMo-RL example config names must be in ``models`` or ``missing``,
and the committed file must be what the tool builds.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from checks.models import ModelArch, closest, known_ids, lookup, missing_ids

ROOT = Path(__file__).resolve().parents[1]
DATA = json.loads((ROOT / "checks" / "data" / "models.json").read_text())
MODELS: dict[str, dict[str, Any]] = DATA["models"]
FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
          "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk", "moe_shared_expert_intermediate_size",
          "moe_layer_freq", "vocab_size", "share_embeddings_and_output_weights", "seq_length",
          "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "hybrid_override_pattern", "gated_linear_unit",
          "normalization")
CITE = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{8}:[\w./-]+:\d+")


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("model_catalogue", ROOT / "tools" / "model_catalogue.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["model_catalogue"] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------------ committed data
def test_structure() -> None:
    assert set(DATA) >= {"source", "models", "aliases", "missing", "counts"}
    assert DATA["source"]["tool"] == "tools/model_catalogue.py"
    assert DATA["counts"]["models"] == len(MODELS) and DATA["counts"]["missing"] == len(DATA["missing"])
    assert not set(MODELS) & set(DATA["missing"])
    for hf_id, row in MODELS.items():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", hf_id), hf_id
        assert row["architecture"] in ("dense", "moe", "hybrid"), hf_id
        assert set(FIELDS) <= set(row), hf_id
        assert row["num_layers"] and row["hidden_size"] and row["num_attention_heads"], hf_id


def test_every_row_and_field_cites_its_source() -> None:
    for hf_id, row in MODELS.items():
        assert row["source"] and all(CITE.match(s.strip()) for s in row["source"].split(";")), hf_id
        for name, where in row["field_sources"].items():
            assert name in FIELDS and row[name] is not None, (hf_id, name)
            assert CITE.match(where) and where.endswith(("(explicit)", "(default)", "(derived)")), (hf_id, where)
        # every dimension the row gives has a citation
        for name in FIELDS:
            if row[name] is not None and name not in ("multi_latent_attention",):
                assert name in row["field_sources"], (hf_id, name)


def test_dense_rows_have_no_experts_and_moe_rows_do() -> None:
    for hf_id, row in MODELS.items():
        if row["architecture"] == "dense":
            assert row["num_moe_experts"] is None and row["moe_router_topk"] is None, hf_id
            assert row["moe_ffn_hidden_size"] is None and row["moe_layer_freq"] is None, hf_id
        if row["architecture"] == "moe":
            assert row["num_moe_experts"] and row["moe_router_topk"], hf_id
            assert 0 < row["moe_router_topk"] <= row["num_moe_experts"], hf_id
            assert row["moe_ffn_hidden_size"], hf_id
        if row["architecture"] == "hybrid":
            assert row["hybrid_override_pattern"], hf_id
        if not row["multi_latent_attention"]:
            assert row["q_lora_rank"] is None and row["kv_lora_rank"] is None, hf_id


def test_moe_layer_freq_lists_cover_every_layer() -> None:
    for hf_id, row in MODELS.items():
        if isinstance(row["moe_layer_freq"], list):
            assert len(row["moe_layer_freq"]) == row["num_layers"], hf_id


def test_head_dimensions_are_consistent() -> None:
    # megatron-core derives kv_channels = hidden_size // num_attention_heads only when it is unset
    # (NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/transformer_config.py:1456); where the row's value is
    # that derivation, the product must be the hidden size. Query groups must divide the heads (GQA).
    derived = 0
    for hf_id, row in MODELS.items():
        if row["field_sources"].get("kv_channels", "").endswith("(derived)"):
            derived += 1
            assert row["kv_channels"] * row["num_attention_heads"] == row["hidden_size"], hf_id
        if not row["multi_latent_attention"]:
            assert row["num_attention_heads"] % row["num_query_groups"] == 0, hf_id
    assert derived  # the check above is reached


def test_qwen3_4b_dense() -> None:
    # NVIDIA-NeMo/Megatron-Bridge@dc944b9c:src/megatron/bridge/models/qwen/qwen_provider.py:310-319
    # (Qwen3ModelProvider4B: 36 layers, 2560 hidden, 32 heads, 9728 ffn, tied) and :266-273 (Qwen3ModelProvider:
    # kv_channels 128, 8 query groups, vocab 151936); NVIDIA/NeMo@8cfedd72:nemo/collections/llm/gpt/model/qwen3.py:95
    m = lookup("Qwen/Qwen3-4B")
    assert m is not None and m.architecture == "dense" and not m.is_moe
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.num_query_groups, m.kv_channels,
            m.ffn_hidden_size, m.vocab_size) == (36, 2560, 32, 8, 128, 9728, 151936)
    assert m.share_embeddings_and_output_weights is True and m.num_moe_experts is None
    assert "qwen_provider.py:310" in m.source


def test_qwen3_30b_a3b_moe() -> None:
    # Bridge@dc944b9c qwen_provider.py:390-411 (128 experts, top-8, 768 expert ffn); the unit-test HF dict
    # Bridge@067f987d tests/unit_tests/models/qwen/test_qwen3_moe_bridge.py:34-61 and Megatron-LM@d98e8a64
    # examples/post_training/modelopt/conf/Qwen/Qwen3-30B-A3B.sh (--num-experts 128 --moe-router-topk 8) agree.
    m = lookup("Qwen/Qwen3-30B-A3B")
    assert m is not None and m.architecture == "moe"
    assert (m.num_moe_experts, m.moe_router_topk, m.moe_ffn_hidden_size) == (128, 8, 768)
    assert (m.num_layers, m.hidden_size, m.num_query_groups, m.kv_channels) == (48, 2048, 4, 128)
    assert "test_qwen3_moe_bridge.py" in m.source and "Qwen3-30B-A3B.sh" in m.source
    # the test dict has no head_dim, so the bridge would derive 2048 // 32 = 64: recorded, not chosen
    assert any(name == "kv_channels" and "64 (derived)" in text for name, text in m.disagreements)


def test_llama_3_1_8b() -> None:
    # Bridge@dc944b9c llama_provider.py:210-223 (Llama31ModelProvider8B) and :106-129 (Llama3ModelProvider: 8 query
    # groups, untied, RMSNorm, SwiGLU); NeMo@8cfedd72 nemo/collections/llm/gpt/model/llama.py:233 (Llama31Config8B)
    m = lookup("meta-llama/Llama-3.1-8B")
    assert m is not None and m.architecture == "dense"
    assert (m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups,
            m.kv_channels) == (32, 4096, 14336, 32, 8, 128)
    assert m.gated_linear_unit is True and m.normalization == "RMSNorm"
    assert m.share_embeddings_and_output_weights is False


def test_deepseek_v3_mla() -> None:
    # Bridge@dc944b9c deepseek_provider.py:82-83 (q_lora_rank 1536, kv_lora_rank 512), :171-180 (61 layers,
    # 256 experts, 2048 expert ffn, first three layers dense, top-8), :191 (vocab 129280)
    m = lookup("deepseek-ai/DeepSeek-V3")
    assert m is not None and m.architecture == "moe" and m.multi_latent_attention
    assert (m.q_lora_rank, m.kv_lora_rank) == (1536, 512)
    assert (m.num_layers, m.num_moe_experts, m.moe_router_topk, m.moe_ffn_hidden_size) == (61, 256, 8, 2048)
    assert m.moe_shared_expert_intermediate_size == 2048 and m.vocab_size == 129280
    assert m.moe_layer_freq == (0, 0, 0) + (1,) * 58


def test_upstream_disagreement_is_recorded() -> None:
    # Megatron-LM@d98e8a64 examples/post_training/modelopt/conf/openai/gpt-oss-120b.sh:4 sets
    # HF_MODEL_CKPT=openai/gpt-oss-20b; the row follows the file name and says so
    row = MODELS["openai/gpt-oss-120b"]
    assert row["num_moe_experts"] == 128 and "HF_MODEL_CKPT=openai/gpt-oss-20b" in row["notes"]


# ------------------------------------------------------------------------------------------------- reader
def test_lookup_is_case_sensitive_and_returns_frozen_rows() -> None:
    m = lookup("Qwen/Qwen3-4B")
    assert isinstance(m, ModelArch) and m.matched_by == "id"
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.num_layers = 1  # type: ignore[misc]
    assert lookup("qwen/qwen3-4b") is None
    assert lookup("no-such/model") is None and lookup("") is None


def test_lookup_tolerates_a_local_path_as_a_guess() -> None:
    for path in ("/models/Qwen/Qwen3-4B", "/models/Qwen/Qwen3-4B/", "./ckpt/Qwen/Qwen3-4B"):
        m = lookup(path)
        assert m is not None and m.hf_id == "Qwen/Qwen3-4B" and m.matched_by == "path", path
    assert lookup("/models/unknown/thing") is None


def test_closest_and_known_ids() -> None:
    assert closest("qwen/qwen3-4b")[0] == "Qwen/Qwen3-4B"
    assert closest("zzzz") == []
    ids = known_ids()
    assert ids == sorted(MODELS) and "Qwen/Qwen3-30B-A3B" in ids
    assert set(missing_ids()) == set(DATA["missing"])


# ----------------------------------------------------------------------------------- tool, on small inputs
def test_evaluator_reads_dataclass_defaults_and_hf_config_reads() -> None:
    tool = _tool()
    expr = ast.parse("field(default_factory=lambda: [0] * 3 + [1] * 2)", mode="eval").body
    assert tool.evaluate(expr, {}) == [0, 0, 0, 1, 1]
    expr = ast.parse("[0] * hf_config.k + [1] * (hf_config.n - hf_config.k)", mode="eval").body
    assert tool.evaluate(expr, {"hf_config": {"k": 1, "n": 3}}) == [0, 1, 1]
    expr = ast.parse("getattr(hf_config, 'x', 7)", mode="eval").body
    assert tool.evaluate(expr, {"hf_config": {}}) == 7
    with pytest.raises(tool.Unevaluable):
        tool.evaluate(ast.parse("F.silu", mode="eval").body, {})


def test_interpolation_of_model_names() -> None:
    tool = _tool()
    doc = {"policy": {"model_name": "Qwen/Qwen3-4B"}, "value": {"model_name": "${policy.model_name}"}}
    assert tool._interpolate(doc, "${policy.model_name}") == "Qwen/Qwen3-4B"
    assert tool._interpolate(doc, "${oc.env:X}") == "${oc.env:X}"  # not a key of the file: kept as written
    assert sorted(w for w, _ in tool._model_names(doc, ())) == ["policy.model_name", "value.model_name"]


# ------------------------------------------------------------------------------------------- with mirrors
MIRRORS = {k: os.environ.get(k) for k in ("BRIDGE_GIT", "NEMO_RL_GIT", "MLM_GIT", "NEMO_GIT")}


@pytest.mark.skipif(not MIRRORS["BRIDGE_GIT"], reason="set BRIDGE_GIT to an NVIDIA-NeMo/Megatron-Bridge git directory")
def test_every_bridge_recipe_id_is_catalogued() -> None:
    tool = _tool()
    git = tool.Git("bridge", str(MIRRORS["BRIDGE_GIT"]))
    ids = tool.bridge_recipe_ids(git, git.commit("067f987df"))
    # recipes/qwen/h100/qwen3_moe.py:28 binds the id the recipe loads (_QWEN3_30B_A3B_MODEL_ID)
    assert "Qwen/Qwen3-30B-A3B" in ids
    unknown = sorted(set(ids) - set(MODELS) - set(DATA["missing"]))
    assert not unknown, f"new Bridge recipe ids, rerun tools/model_catalogue.py: {unknown}"


@pytest.mark.skipif(not MIRRORS["NEMO_RL_GIT"], reason="set NEMO_RL_GIT to an NVIDIA-NeMo/RL git directory")
def test_every_nemo_rl_example_model_name_is_catalogued() -> None:
    tool = _tool()
    git = tool.Git("nemo_rl", str(MIRRORS["NEMO_RL_GIT"]))
    ids, _ = tool.nemo_rl_ids(git, git.commit("7ea279abfbeb698b092856d0dab61e7cf39bc909"))
    assert "meta-llama/Llama-3.1-8B-Instruct" in ids  # examples/configs/distillation_math_megatron.yaml
    unknown = sorted(set(ids) - set(MODELS) - set(DATA["missing"]))
    assert not unknown, f"new NeMo-RL model_name ids, rerun tools/model_catalogue.py: {unknown}"


@pytest.mark.skipif(not all(MIRRORS.values()), reason="set BRIDGE_GIT, NEMO_RL_GIT, MLM_GIT and NEMO_GIT")
def test_committed_catalogue_is_what_the_tool_builds() -> None:
    args = [sys.executable, str(ROOT / "tools" / "model_catalogue.py"),
            "--bridge-git", str(MIRRORS["BRIDGE_GIT"]), "--nemo-rl-git", str(MIRRORS["NEMO_RL_GIT"]),
            "--mlm-git", str(MIRRORS["MLM_GIT"]), "--nemo-git", str(MIRRORS["NEMO_GIT"])]
    built = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    assert json.loads(built) == DATA, "run tools/model_catalogue.py ... > checks/data/models.json"
