"""The parameter model and the greedy split, against the installed megatron-core's own code.

- ``chunk_tensors`` (local layer spec) lists exactly the names and sizes of a real ``GPTModel``'s
  ``named_parameters()``, built on CPU for a grid of architectures;
- ``optimizer_order``'s parameter groups are the groups ``_get_param_groups`` builds for that model;
- ``greedy_offload`` moves exactly what ``HybridDeviceOptimizer._get_sub_optimizer_param_groups`` moves.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterator
from dataclasses import fields, replace
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks.model.optimizer_split import greedy_offload, largest_fraction_within, optimizer_order, predict
from checks.model.parameters import Chunk, Tensor, chunk_tensors, stage_chunks
from checks.model.shape import ModelShape, MoEShape, Parallelism
from checks.versions import resolve_version

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")
from megatron.core.package_info import __version__ as MCORE_VERSION  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

VERSION = resolve_version(os.environ.get("MCORE_PROFILE") or MCORE_VERSION)
# megatron-core 0.14 and 0.15 take the shared-expert gate from the layer spec, not the config.
HAS_GATE_FIELD = "moe_shared_expert_gate" in {f.name for f in fields(TransformerConfig)}

DENSE = ModelShape(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=4, kv_channels=16,
                   ffn_hidden_size=96, vocab_size=1000, gated_linear_unit=False, add_bias_linear=True,
                   add_qkv_bias=False, layernorm_bias=True, qk_layernorm=False, tied_embeddings=True,
                   position_rows=0, transformer_engine=False, moe=None)
MOE = MoEShape(num_experts=4, ffn_hidden_size=32, shared_expert_size=48, shared_expert_gate=HAS_GATE_FIELD,
               layers=(False, True), expert_layout="sequential")
SHAPES = {
    "dense-gpt2-like": replace(DENSE, position_rows=128),
    "dense-llama-like": replace(DENSE, num_query_groups=2, gated_linear_unit=True, add_bias_linear=False,
                                layernorm_bias=False, tied_embeddings=False),
    "dense-qk-norm-qkv-bias": replace(DENSE, add_bias_linear=False, add_qkv_bias=True, qk_layernorm=True),
    "moe-shared-gated": replace(DENSE, add_bias_linear=False, gated_linear_unit=True, layernorm_bias=False, moe=MOE),
    "moe-every-layer-bias": replace(DENSE, moe=replace(MOE, layers=(True, True), shared_expert_size=0,
                                                       shared_expert_gate=False)),
}


@pytest.fixture(scope="module")
def distributed() -> Iterator[None]:
    """A one-process gloo group and megatron-core's model-parallel state, as building a model needs."""
    from megatron.core import parallel_state
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    yield
    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()


def _real_model(shape: ModelShape, pre: bool = True, post: bool = True) -> Any:
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    moe = shape.moe
    if moe is not None and shape.add_bias_linear and VERSION == "0.14.0":
        pytest.skip("megatron-core 0.14 refuses biases in MoE layers")
    config = TransformerConfig(
        num_layers=shape.num_layers, hidden_size=shape.hidden_size, num_attention_heads=shape.num_attention_heads,
        num_query_groups=shape.num_query_groups, kv_channels=shape.kv_channels,
        ffn_hidden_size=shape.ffn_hidden_size, gated_linear_unit=shape.gated_linear_unit,
        add_bias_linear=shape.add_bias_linear, add_qkv_bias=shape.add_qkv_bias,
        normalization="LayerNorm" if shape.layernorm_bias else "RMSNorm", qk_layernorm=shape.qk_layernorm,
        use_cpu_initialization=True, transformer_impl="local",
        **({} if moe is None else {
            "num_moe_experts": moe.num_experts, "moe_ffn_hidden_size": moe.ffn_hidden_size,
            "moe_layer_freq": [int(m) for m in moe.layers], "moe_router_topk": 2,
            "moe_shared_expert_intermediate_size": moe.shared_expert_size or None,
            **({"moe_shared_expert_gate": moe.shared_expert_gate} if HAS_GATE_FIELD else {})}))
    if moe is None:
        spec: Any = get_gpt_layer_local_spec(qk_layernorm=shape.qk_layernorm, normalization=config.normalization)
    else:
        spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization=config.normalization)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GPTModel(config, spec, vocab_size=shape.vocab_size, max_sequence_length=shape.position_rows or 128,
                        pre_process=pre, post_process=post,
                        position_embedding_type="learned_absolute" if shape.position_rows else "rope",
                        share_embeddings_and_output_weights=shape.tied_embeddings)


@pytest.mark.parametrize("name", SHAPES)
@pytest.mark.parametrize("pre,post", [(True, True), (True, False), (False, True), (False, False)])
def test_parameters_match_gpt_model(distributed: None, name: str, pre: bool, post: bool) -> None:
    shape = SHAPES[name]
    real = [(n, p.numel()) for n, p in _real_model(shape, pre, post).named_parameters()]
    ours = [(t.name, t.numel) for t in chunk_tensors(shape, Parallelism(), Chunk(range(2), pre, post))]
    assert ours == real


@pytest.mark.parametrize("name", SHAPES)
def test_parameter_groups_match_megatron(distributed: None, name: str) -> None:
    """The groups and their order, as ``_get_param_groups`` builds them."""
    from megatron.core import optimizer as mcore_optimizer
    from megatron.core.optimizer import OptimizerConfig
    shape = SHAPES[name]
    model = _real_model(shape)
    config = OptimizerConfig(lr=1e-4)
    if hasattr(mcore_optimizer, "get_standard_config_overrides"):  # 0.16 and later
        overrides = mcore_optimizer.get_standard_config_overrides(config)
        groups = mcore_optimizer._get_param_groups([model], config, overrides)
    else:
        groups = mcore_optimizer._get_param_groups([model], None, None, 1.0, 1e-4, 0.0, None, None)
    names = {id(p): n for n, p in model.named_parameters()}
    real = [names[id(p)] for group in groups for p in reversed(group["params"])]  # buffer order within a group
    tensors = chunk_tensors(shape, Parallelism(), Chunk(range(2), True, True))
    assert [t.name for t in optimizer_order([tensors], expert=False, version=VERSION)] == real


def _fake_params(numels: list[int]) -> list[Any]:
    class Fake:
        """What ``_get_sub_optimizer_param_groups`` touches of a CUDA parameter."""

        def __init__(self, n: int, cuda: bool = True, dtype: Any = torch.bfloat16) -> None:
            self.n, self.is_cuda, self.dtype = n, cuda, dtype

        def numel(self) -> int:
            return self.n

        def detach(self) -> Fake:
            return self

        def clone(self) -> Fake:
            return Fake(self.n, self.is_cuda, self.dtype)

        def cpu(self) -> Fake:
            return Fake(self.n, False, self.dtype)

        def pin_memory(self) -> Fake:
            return self

        def float(self) -> Fake:
            return Fake(self.n, self.is_cuda, torch.float32)

    return [Fake(n) for n in numels]


def _real_split(numels: list[int], fraction: float) -> tuple[int, int]:
    from megatron.core.optimizer.cpu_offloading.hybrid_optimizer import HybridDeviceOptimizer
    host = SimpleNamespace(param_groups=[{"params": _fake_params(numels)}], param_update_in_fp32=True,
                           pin_cpu_params=True)  # main pins host copies when asked
    cpu_groups = HybridDeviceOptimizer._get_sub_optimizer_param_groups(host, fraction)[0]
    moved = [p for group in cpu_groups for p in group["params"]]
    return sum(p.numel() for p in moved), len(moved)


def test_greedy_split_documented_example() -> None:
    """../shared/upstream notes, §6.1: bf16 sizes 4000/3000/2000/1000 and an fp32 1000; 10% moves 45%."""
    numels = [1000, 4000, 3000, 2000, 1000]
    assert greedy_offload(numels, 0.1) == _real_split(numels, 0.1) == (5000, 2)
    assert greedy_offload(numels, 0.5)[0] == 8000


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=40), st.floats(-0.5, 1.5))
def test_greedy_split_matches_hybrid_device_optimizer(numels: list[int], fraction: float) -> None:
    assert greedy_offload(numels, fraction) == _real_split(numels, fraction)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=40), st.floats(0.001, 0.999))
def test_largest_fraction_within_is_the_largest(numels: list[int], share: float) -> None:
    total = sum(numels)
    lower = largest_fraction_within(numels, share)
    assert lower == round(lower, 4)
    assert greedy_offload(numels, lower)[0] <= share * total
    # Two steps up (one may be lost to floating point) the split reaches a prefix past the share.
    if lower + 2e-4 < 1 and any(p > share * total for p in itertools.accumulate(numels)):
        assert greedy_offload(numels, lower + 2e-4)[0] > share * total


def test_stage_split() -> None:
    par = Parallelism(pipeline=2, virtual_pipeline=2)
    stages = stage_chunks(8, par)
    assert stages is not None
    assert [[(c.layers, c.first, c.last) for c in s] for s in stages] == [
        [(range(0, 2), True, False), (range(4, 6), False, False)],
        [(range(2, 4), False, False), (range(6, 8), False, True)]]
    uneven = stage_chunks(10, Parallelism(pipeline=3, first_stage_layers=2, last_stage_layers=2))
    assert uneven is not None and [s[0].layers for s in uneven] == [range(0, 2), range(2, 8), range(8, 10)]
    assert stage_chunks(7, Parallelism(pipeline=2)) is None  # megatron-core refuses an uneven split


def test_expert_parallel_experts_get_their_own_instance() -> None:
    shape = replace(SHAPES["moe-every-layer-bias"], tied_embeddings=False)
    splits = predict(shape, Parallelism(expert=2), 0.5, VERSION)
    assert splits is not None and {s.instance for s in splits} == {"dense", "expert"}
    assert {s.instance for s in predict(shape, Parallelism(), 0.5, VERSION) or ()} == {"dense"}


def test_tensor_parallel_divides_the_parallel_dimension() -> None:
    one = {t.name: t.numel for t in chunk_tensors(SHAPES["dense-llama-like"], Parallelism(), Chunk(range(2), 1, 1))}
    two = {t.name: t.numel for t in
           chunk_tensors(SHAPES["dense-llama-like"], Parallelism(tensor=2), Chunk(range(2), True, True))}
    for name, numel in one.items():
        replicated = name.endswith("layernorm.weight") or name.endswith("linear_proj.bias")
        assert two[name] == (numel if replicated else numel // 2), name


def test_tensor_is_a_plain_record() -> None:
    assert Tensor("w", 4) == Tensor("w", 4, expert=False, matrix=True)
