"""The activation profiles against bytes measured by saved-tensor accounting, on CPU.

Real ``transformers`` models (Llama and Qwen3-MoE, built from configs with random weights, no downloads)
and the example GPT run a forward pass under saved-tensor hooks; each storage is attributed to the layer
whose forward first saves it. The profile's prediction must be within 3% of the measurement at every
point of a grid of sequence lengths and micro-batch sizes (it is exact by construction, so 3% is slack
for nothing but a change upstream).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from benchmarks.saved_tensors import measure  # noqa: E402
from checks.plan.activations import (  # noqa: E402
    Dims,
    bytes_per_token,
    example_gpt,
    hf_llama,
    hf_qwen3_moe,
    per_layer_qwen3_moe,
    per_model_hf_rope,
)

TOLERANCE = 0.03
GRID = [(1, 16), (2, 64), (4, 128), (3, 96)]  # (micro-batch size, sequence length)


def _close(measured: float, predicted: float) -> None:
    assert abs(predicted - measured) <= TOLERANCE * measured, (measured, predicted)


LLAMA = [Dims(64, 4, 2, 16, 96), Dims(96, 6, 6, 16, 160), Dims(128, 8, 2, 32, 344)]


@pytest.mark.parametrize("dims", LLAMA, ids=lambda d: f"h{d.hidden}-kv{d.kv_heads}")
@pytest.mark.parametrize("batch,seq", GRID)
def test_hf_llama_layer(dims: Dims, batch: int, seq: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=128, hidden_size=dims.hidden, intermediate_size=dims.ffn, num_hidden_layers=3,
                         num_attention_heads=dims.heads, num_key_value_heads=dims.kv_heads, head_dim=dims.head_dim,
                         max_position_embeddings=256, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 128, (batch, seq))
    measured = measure(lambda: model(input_ids=ids, labels=ids).loss, list(model.model.layers))
    predicted = bytes_per_token(hf_llama(dims)) * batch * seq
    _close(measured[1], predicted)
    _close(measured[0], predicted + per_model_hf_rope(seq, dims.head_dim))  # the first layer saves cos/sin


QWEN = [(Dims(64, 4, 2, 16, 0, experts=8, top_k=2, moe_ffn=48)),
        (Dims(96, 6, 3, 16, 0, experts=16, top_k=4, moe_ffn=32))]


@pytest.mark.parametrize("dims", QWEN, ids=lambda d: f"E{d.experts}-k{d.top_k}")
@pytest.mark.parametrize("batch,seq", GRID)
def test_hf_qwen3_moe_layer(dims: Dims, batch: int, seq: int) -> None:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    config = Qwen3MoeConfig(vocab_size=128, hidden_size=dims.hidden, intermediate_size=4 * dims.hidden,
                            moe_intermediate_size=dims.moe_ffn, num_hidden_layers=3, num_attention_heads=dims.heads,
                            num_key_value_heads=dims.kv_heads, head_dim=dims.head_dim, num_experts=dims.experts,
                            num_experts_per_tok=dims.top_k, max_position_embeddings=256, attn_implementation="sdpa",
                            norm_topk_prob=True)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config)
    ids = torch.randint(0, 128, (batch, seq))
    measured = measure(lambda: model(input_ids=ids, labels=ids).loss, list(model.model.layers))
    predicted = bytes_per_token(hf_qwen3_moe(dims)) * batch * seq + per_layer_qwen3_moe(dims.experts)
    _close(measured[1], predicted)


@pytest.mark.parametrize("experts", [0, 4])
@pytest.mark.parametrize("batch,seq", GRID)
def test_example_gpt_layer(experts: int, batch: int, seq: int) -> None:
    from examples.gpt import GPT, GPTConfig, batches
    cfg = GPTConfig(vocab_size=128, seq_len=seq, num_layers=3, hidden_size=64, num_heads=4, ffn_hidden_size=96,
                    num_experts=experts, moe_top_k=2, moe_ffn_hidden_size=48)
    torch.manual_seed(0)
    model = GPT(cfg)
    tokens, targets = batches(cfg, batch, 1, seed=0, device=torch.device("cpu"))[0]
    measured = measure(lambda: model(tokens, targets), list(model.blocks))
    dims = Dims(64, 4, 4, 16, 96, gated=False, layernorm=True, rope=False, experts=experts,
                top_k=2 if experts else 0, moe_ffn=48 if experts else 0)
    _close(measured[1], bytes_per_token(example_gpt(dims)) * batch * seq)


@pytest.mark.parametrize("experts", [0, 8])
def test_a_gated_mlp_saves_twice_the_fc1_output_of_a_plain_one(experts: int) -> None:
    """SwiGLU's fc1 writes gate and up (2 x ffn per routed row); a plain GELU MLP writes ffn. Dense and MoE."""
    from dataclasses import replace as changed

    from checks.plan.activations import megatron_te

    gated = Dims(64, 4, 2, 16, 0 if experts else 96, experts=experts, top_k=2 if experts else 0,
                 moe_ffn=48 if experts else 0)
    fc1 = {g: next(t.numel for t in megatron_te(changed(gated, gated=g)) if t.name == "fc1 output (activation input)")
           for g in (True, False)}
    assert fc1[True] == 2 * fc1[False] == 2 * (2 * 48 if experts else 96)
