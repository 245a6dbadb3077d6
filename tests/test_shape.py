"""Model shapes from each front end, and the greedy-split rule on them (no torch needed)."""

from __future__ import annotations

from pathlib import Path

from checks.context import Context
from checks.loaders import load
from checks.loaders.common import Request
from checks.model.optimizer_split import predict
from checks.model.shape import ModelShape, Parallelism, ShapeUnknown, shape_from

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "configs"

LLAMA_8B_ARGV = ("pretrain_gpt.py --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
                 "--num-query-groups 8 --swiglu --ffn-hidden-size 14336 --vocab-size 128256 --max-position-embeddings "
                 "8192 --untie-embeddings-and-output-weights --position-embedding-type rope --normalization RMSNorm "
                 "--disable-bias-linear --bf16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 "
                 "--use-distributed-optimizer --use-precision-aware-optimizer --optimizer-cpu-offload "
                 "--optimizer-offload-fraction 0.5")


def _shape(request: Request) -> tuple[ModelShape, Parallelism] | ShapeUnknown:
    return shape_from(Context(load(request)[0]))


def test_bridge_dump_and_megatron_lm_command_line_give_the_same_model() -> None:
    """The bundled dump is Llama-3-8B-shaped; the command line above describes the same model."""
    dump = _shape(Request((str(EXAMPLES / "bridge/run_config_clean.yaml"),)))
    argv = _shape(Request(argv=LLAMA_8B_ARGV))
    assert not isinstance(dump, ShapeUnknown) and not isinstance(argv, ShapeUnknown)
    assert dump[1] == argv[1] == Parallelism(tensor=2, pipeline=2, expert_tensor=2)
    assert dump[0] == argv[0]
    assert dump[0].vocab_size == 128256 and dump[0].gated_linear_unit and not dump[0].tied_embeddings


def test_megatron_lm_derives_what_validate_args_derives() -> None:
    argv = "--num-layers 2 --hidden-size 768 --num-attention-heads 12 --num-query-groups 4 --swiglu"
    cfg = load(Request(argv=argv))[0]
    assert cfg.settings["model.gated_linear_unit"].value is True
    assert cfg.settings["model.ffn_hidden_size"].value == 2048  # int(4 * 768 * 2 / 3 / 64) * 64
    assert "model.num_query_groups" not in cfg.settings  # needs --group-query-attention to reach the config
    assert cfg.settings["run.num_query_groups"].value == 4
    assert cfg.defaults["run.make_vocab_size_divisible_by"] == 128


def test_megatron_lm_pads_the_vocabulary() -> None:
    found = _shape(Request(argv=LLAMA_8B_ARGV.replace("--vocab-size 128256", "--vocab-size 50257")))
    assert not isinstance(found, ShapeUnknown)
    assert found[0].vocab_size == 50432  # the next multiple of 128 x TP 2


def test_what_is_missing_is_named(tmp_path: Path) -> None:
    override = tmp_path / "o.yaml"
    override.write_text("model:\n  num_layers: 32\n  hidden_size: 4096\n")
    found = _shape(Request((str(override),)))
    assert isinstance(found, ShapeUnknown)
    assert found.missing[:2] == ("model.num_attention_heads", "model.num_query_groups")
    assert "model.vocab_size" in found.missing
    assert _shape(Request(argv="--num-layers 2 --hidden-size 64 --num-attention-heads 4")) == \
        ShapeUnknown(("--vocab-size",))
    # NeMo-RL's dimensions come from the checkpoint model_name names: from the model catalogue when it holds it
    nemo_rl = _shape(Request((str(EXAMPLES / "nemo-rl/grpo_offload.yaml"),), ("policy.model_name=example-org/Nope",)))
    assert isinstance(nemo_rl, ShapeUnknown) and "Hugging Face" in nemo_rl.describe()
    known = _shape(Request((str(EXAMPLES / "nemo-rl/grpo_offload.yaml"),)))  # Qwen/Qwen2.5-1.5B
    assert not isinstance(known, ShapeUnknown)
    # Megatron-Bridge@dc944b9c:src/megatron/bridge/models/qwen/qwen_provider.py:158-168 (Qwen25ModelProvider1P5B)
    assert (known[0].num_layers, known[0].hidden_size, known[0].num_query_groups) == (28, 1536, 2)


def test_unmodelled_architectures_are_refused(tmp_path: Path) -> None:
    dump = (EXAMPLES / "bridge/run_config_clean.yaml").read_text()
    hybrid = tmp_path / "hybrid.yaml"
    hybrid.write_text(dump.replace("megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B",
                                   "megatron.bridge.models.mamba.mamba_provider.MambaModelProvider"))
    assert _shape(Request((str(hybrid),))) == ShapeUnknown(
        unmodelled="the model provider megatron.bridge.models.mamba.mamba_provider.MambaModelProvider")
    mla = _shape(Request((str(EXAMPLES / "bridge/run_config_clean.yaml"),), ("model.multi_latent_attention=true",)))
    assert mla == ShapeUnknown(unmodelled="multi-latent attention")


def test_tied_embeddings_on_the_last_stage_lead_the_optimizer_order() -> None:
    found = _shape(Request((str(EXAMPLES / "bridge/run_config_tied_pp_fraction.yaml"),)))
    assert not isinstance(found, ShapeUnknown)
    splits = predict(*found, 0.1, "0.19.2")
    assert splits is not None
    last = next(s for s in splits if s.stage == 1)
    assert last.first.name == "output_layer.weight" and last.first.numel == 151936 * 1024
    assert last.tensors_offloaded == 1 and last.lower_fraction == 0.0
    assert round(last.fraction, 3) == 0.414
