"""Three planner memory defects (issue 14), each reproduced against the published figure or the upstream rule.

1. Interleaved pipelines: only the last virtual chunk of the last stage holds the output layer, logits and loss,
   and only the first chunk of stage 0 the token ids and the embedding's dropout mask; each is counted by the
   micro-batches of its own chunk in flight at the peak, not by the whole stage's. And between steps every chunk
   that receives a pipeline input keeps the last one and its gradient (allocated after the step, not at the peak).
2. Pinned host memory: PyTorch's caching host allocator rounds every pinned allocation up to a power of two, and
   ``HybridDeviceOptimizer`` pins its host parameter copies and gradient buffers.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from checks.model.optimizer_split import greedy_selection
from checks.model.parameters import chunk_tensors, stage_chunks
from checks.model.shape import ModelShape, Parallelism
from checks.plan.memory import (
    Offload,
    Training,
    chunk_in_flight,
    host_offload_bytes,
    in_flight,
    layer_bytes,
    pinned_bytes,
    plan_memory,
    stage_memory,
)
from checks.plan.presets import PRESETS
from checks.plan.setup import from_preset

# --- 1. interleaved pipelines -------------------------------------------------------------------------

# Megatron-LM's functional test gpt3_7b_tp1_pp4_memory_speed
# (NVIDIA/Megatron-LM@d98e8a64:tests/functional_tests/test_cases/gpt/gpt3_7b_tp1_pp4_memory_speed/model_config.yaml):
# 32 layers, hidden 4096, 32 heads, 8 query groups, untied embeddings, seq 8192, MBS 1, GBS 8, TP1 PP4,
# --num-layers-per-virtual-pipeline-stage 1 (VPP 8), bf16, distributed optimizer, overlap grad reduce.
# Left at Megatron-LM's defaults: ffn 4h (megatron/training/arguments.py:1329, no --swiglu), learned absolute
# positions over --max-position-embeddings 8192 (arguments.py:2397), LayerNorm with biases, dropout 0.1 on hidden
# states and attention (megatron/core/transformer/transformer_config.py:188,191), fp32 main gradients
# (arguments.py:1215-1216); vocab 131073 padded to a multiple of 128 x TP = 131200 (vocab_utils.py:58;
# --make-vocab-size-divisible-by 128, arguments.py:2441). It runs on one node of 8 GPUs
# (tests/test_utils/recipes/h100/gpt.yaml:9-10, the spec every test case there inherits), so DP 2 and
# GBS 8 / (MBS 1 x DP 2) = 4 micro-batches per step. DDP buckets: max(40M, 1M x DP) elements with
# overlap_grad_reduce (megatron/core/distributed/distributed_data_parallel.py:134).
GPT3_7B = ModelShape(num_layers=32, hidden_size=4096, num_attention_heads=32, num_query_groups=8, kv_channels=128,
                     ffn_hidden_size=4 * 4096, vocab_size=131200, gated_linear_unit=False, add_bias_linear=True,
                     add_qkv_bias=False, layernorm_bias=True, qk_layernorm=False, tied_embeddings=False,
                     position_rows=8192, transformer_engine=True, moe=None)
GPT3_7B_JOB = Training(GPT3_7B, Parallelism(pipeline=4, virtual_pipeline=8), data_parallel=2, seq_length=8192,
                       micro_batch_size=1, global_batch_size=8, hidden_dropout=True, attention_dropout=True,
                       bucket_size=40_000_000)
# golden_values_dev_dgx_h100.json in the same directory: mem-allocated-bytes (line 71-72) and
# mem-max-allocated-bytes (lines 103-104). Megatron-LM writes them to TensorBoard
# (megatron/training/training.py:3436-3446, torch.cuda.memory_stats after the step), and only the last rank has a
# TensorBoard writer (megatron/training/global_vars.py:241, rank == world_size - 1): pipeline stage 3.
ALLOCATED_AFTER_STEP = 24_808_996_864
PEAK = 60_720_852_992
PEAK_FIRST_ITERATION = 52_931_256_320


def test_the_last_stage_holds_the_output_layers_buffers_of_one_micro_batch() -> None:
    """With VPP 8, stage 3 runs 28 warm-up chunk passes, chunks 0-6 four micro-batches each
    (schedules.py:964-965, get_schedule_table :989-1016), then forward of chunk 7 and at once its backward
    (:1733-1901): the output layer's inputs and the fp32 logits are held for one micro-batch, not 3.625."""
    last = stage_memory(GPT3_7B_JOB, 3)
    # The logits are 4 bytes per token per vocabulary row (Megatron-LM theoretical_memory_usage.py); the layers do
    # not depend on the vocabulary, so 128 more rows add the logits of the micro-batches the last chunk holds.
    wider = replace(GPT3_7B_JOB, shape=replace(GPT3_7B, vocab_size=GPT3_7B.vocab_size + 128))
    added = stage_memory(wider, 3).activations_bytes - last.activations_bytes
    assert added == 4 * GPT3_7B_JOB.tokens_per_microbatch * 128  # once, not 3.625 times
    assert chunk_in_flight(GPT3_7B_JOB, 3) == (4, 4, 4, 4, 4, 4, 4, 1)


def test_the_published_interleaved_job_is_within_the_acceptance_bands() -> None:
    last = stage_memory(GPT3_7B_JOB, 3)
    assert abs(last.device_bytes / PEAK - 1) < 0.10
    # Allocated after the step: the model states and the pipeline inputs its eight chunks keep (below).
    assert abs(last.after_step_bytes / ALLOCATED_AFTER_STEP - 1) < 0.05
    # The Adam moments appear at the first optimizer step: iteration 1's peak (before it) is lower by exactly them.
    # So the held inputs, which exist from the first step on, are not in the peak: the next step frees each chunk's
    # pair at that chunk's first forward, before the peak.
    moments = last.optimizer_bytes * (GPT3_7B_JOB.exp_avg_bytes + GPT3_7B_JOB.exp_avg_sq_bytes) // 12
    assert abs(moments / (PEAK - PEAK_FIRST_ITERATION) - 1) < 0.001
    assert last.device_bytes == last.weights_bytes + last.grads_bytes + last.optimizer_bytes + last.activations_bytes
    # Activations at the peak, measured as the peak less what is allocated after the step, the held inputs excepted.
    assert abs(last.activations_bytes / (PEAK - (ALLOCATED_AFTER_STEP - last.held_inputs_bytes)) - 1) < 0.07


def test_every_chunk_that_receives_an_input_keeps_it_and_its_gradient_after_the_step() -> None:
    """TransformerBlock.set_input_tensor keeps the last micro-batch's received input, and backward left its
    gradient on it (schedules.py:506-507, :561, :591; transformer_block.py:455-463): two tensors of the
    pipeline's shape per chunk, all but the model's first chunk."""
    pipeline_tensor = 8192 * 1 * 4096 * 2  # (seq, micro-batch, hidden) in bf16, 64 MiB
    stages = plan_memory(GPT3_7B_JOB)
    assert [s.held_inputs_bytes for s in stages] == [7 * 2 * pipeline_tensor] + [8 * 2 * pipeline_tensor] * 3
    for s in stages:
        assert s.after_step_bytes == s.weights_bytes + s.grads_bytes + s.optimizer_bytes + s.held_inputs_bytes
    # Without a pipeline nothing is received; 1F1B holds one chunk's pair.
    assert stage_memory(replace(GPT3_7B_JOB, par=Parallelism(tensor=4), micro_batch_size=2), 0).held_inputs_bytes == 0
    one_f_one_b = replace(GPT3_7B_JOB, par=Parallelism(pipeline=4))
    assert [s.held_inputs_bytes for s in plan_memory(one_f_one_b)] == [0] + [2 * pipeline_tensor] * 3
    # The shape is get_tensor_shapes' (schedules.py:2115-2144): context parallelism and sequence parallelism split
    # the sequence; the dtype is the parameters' (pipeline_dtype = params_dtype, argument_utils.py:306).
    split = replace(one_f_one_b, par=Parallelism(tensor=2, pipeline=4), context_parallel=2, sequence_parallel=True)
    assert stage_memory(split, 3).held_inputs_bytes == 2 * pipeline_tensor // 4
    fp32 = replace(one_f_one_b, param_bytes=4)
    assert stage_memory(fp32, 3).held_inputs_bytes == 2 * 2 * pipeline_tensor


def test_interleaved_stages_hold_whole_chunks_as_the_schedule_runs_them() -> None:
    # Stage 0 and 1: warm-up (6 or 4 + 28 passes) covers all 32 chunk passes; stage 2: 30 + the first steady
    # forward, chunk 7's third micro-batch.
    assert [chunk_in_flight(GPT3_7B_JOB, s) for s in range(3)] == [(4,) * 8, (4,) * 8, (4,) * 7 + (3,)]
    # The whole-stage count is unchanged: the warm-up passes plus one, in stage equivalents.
    assert [sum(chunk_in_flight(GPT3_7B_JOB, s)) / 8 for s in range(4)] == \
        [in_flight(GPT3_7B_JOB, s) for s in range(4)]
    # Four micro-batch groups (M 8, PP 2, VP 2), forward chunks 0 0 1 1 0 0 1 1 ...: stage 1 (no warm-up beyond
    # the group) frees each chunk 1 pass at once, its peak with the output layer is two of chunk 0 and one of
    # chunk 1. Stage 0 (4 warm-up passes, then backward on chunk 1 - table[k]) holds (3, 2) after forward 4 and
    # (4, 1) after forward 5: the second, where chunk 0 carries the token ids and embedding dropout mask.
    shape = replace(GPT3_7B, num_layers=4)
    t = replace(GPT3_7B_JOB, shape=shape, par=Parallelism(pipeline=2, virtual_pipeline=2), data_parallel=1)
    assert t.num_microbatches == 8
    assert chunk_in_flight(t, 1) == (2, 1) and chunk_in_flight(t, 0) == (4, 1)


@pytest.mark.parametrize("pp, gbs, recompute", [(4, 16, "none"), (4, 2, "none"), (2, 8, "selective"),
                                                 (4, 16, "full")])
def test_non_interleaved_pipelines_are_unchanged(pp: int, gbs: int, recompute: str) -> None:
    """1F1B: every stage holds ``min(m, pp - stage)`` whole-stage micro-batches, extras included."""
    shape = replace(GPT3_7B, num_layers=8, hidden_size=256, num_attention_heads=4, num_query_groups=4,
                    kv_channels=64, ffn_hidden_size=1024, vocab_size=1024, position_rows=0)
    t = Training(shape, Parallelism(pipeline=pp), seq_length=512, global_batch_size=gbs, recompute=recompute)
    stages = stage_chunks(shape.num_layers, t.par)
    assert stages is not None
    for stage, memory in enumerate(plan_memory(t)):
        flight = min(gbs, pp - stage)
        assert chunk_in_flight(t, stage) == (flight,)
        if recompute != "full":
            layers = sum(layer_bytes(t, layer) for layer in stages[stage][0].layers)
            extras = 8 * 512 if stage == 0 else 0
            extras += 4 * 512 * (256 + 1024) if stage == pp - 1 else 0
            assert memory.activations_bytes == round((layers + extras) * flight)


# --- 2. pinned host memory ----------------------------------------------------------------------------

def test_a_pinned_tensor_costs_the_next_power_of_two() -> None:
    """PyTorch's caching host allocator rounds each request up with ``c10::llvm::PowerOf2Ceil``
    (torch 2.13.0 ATen/core/CachingHostAllocator.h:301-308, below pinned_max_round_threshold whose default is
    SIZE_MAX, c10/core/AllocatorConfig.h:361)."""
    for k in range(0, 40, 3):
        assert pinned_bytes(4 * (2 ** k + 1)) == 4 * 2 ** (k + 1)  # an fp32 tensor of 2^k + 1 elements
        assert pinned_bytes(4 * 2 ** k) == 4 * 2 ** k
    assert pinned_bytes(0) == 0


def _pieces(t: Training, fraction: float) -> list[int]:
    """DP 1: a rank's pieces are the whole tensors, in optimizer order (default group, then 1-D tensors)."""
    chunk = stage_chunks(t.shape.num_layers, t.par)[0][0]  # type: ignore[index]
    tensors = list(reversed(chunk_tensors(t.shape, t.par, chunk)))
    ordered = [x.numel for x in tensors if x.matrix] + [x.numel for x in tensors if not x.matrix]
    return [n for n, take in zip(ordered, greedy_selection(ordered, fraction), strict=True) if take]


def _ceil2(nbytes: int) -> int:
    return 2 ** math.ceil(math.log2(nbytes))


# Hidden 65: its norms are 2^6 + 1 elements, so every norm's pinned copy costs 2^7 elements' bytes.
ODD = ModelShape(num_layers=2, hidden_size=65, num_attention_heads=5, num_query_groups=5, kv_channels=13,
                 ffn_hidden_size=130, vocab_size=128, gated_linear_unit=False, add_bias_linear=False,
                 add_qkv_bias=False, layernorm_bias=True, qk_layernorm=False, tied_embeddings=False,
                 position_rows=0, transformer_engine=True, moe=None)


def test_the_hybrid_optimizers_pinned_copies_are_rounded_on_the_host() -> None:
    """Without the precision-aware optimizer the hybrid optimizer gets the fp32 main shards and copies each to
    pinned host memory (NVIDIA/Megatron-LM@d98e8a64:megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py:274,
    whatever pin_cpu_params says), a pinned fp32 gradient buffer when pin_cpu_grads (:109-111), and torch's
    AdamW keeps both moments in pageable memory (zeros_like does not pin): 4 + 4 pinned, 8 exact per element."""
    t = Training(ODD, Parallelism(), data_parallel=1)
    pieces = _pieces(t, 1.0)
    assert 65 in pieces
    memory = stage_memory(t, 0, Offload(optimizer_offload_fraction=1.0))
    expected = sum(2 * _ceil2(4 * n) + 8 * n for n in pieces)
    assert memory.host_optimizer_bytes == expected > 16 * sum(pieces)
    unpinned = stage_memory(t, 0, Offload(optimizer_offload_fraction=1.0, pin_cpu_grads=False, pin_cpu_params=False))
    assert unpinned.host_optimizer_bytes == sum(_ceil2(4 * n) + 12 * n for n in pieces)  # the master stays pinned
    assert memory.optimizer_bytes == unpinned.optimizer_bytes  # the device side does not change


def test_precision_aware_masters_are_pinned_only_where_pin_cpu_params_is_read() -> None:
    """Precision-aware (what Megatron-LM requires for offload, arguments.py:1884-1888): the hybrid optimizer gets
    the bf16 shards (distrib_optimizer.py:492-495), pins a bf16 copy (:274), makes the fp32 master from it and
    pins that only when pin_cpu_params, from main on (:277-281; 0.19 has no such test,
    core_v0.19.0:hybrid_optimizer.py:277-279). The bf16 copy is dropped there and its block stays cached by the
    allocator, reused by a later request of the same rounded size."""
    offload = Offload(optimizer_offload_fraction=1.0)
    release = Training(ODD, Parallelism(), data_parallel=1, precision_aware_optimizer=True, version="0.19.2")
    main = replace(release, version="main")
    pieces = _pieces(release, 1.0)

    def simulate(pin_master: bool) -> int:
        free: dict[int, int] = {}
        reserved = 0

        def alloc(nbytes: int) -> None:
            nonlocal reserved
            size = _ceil2(nbytes)
            if free.get(size):
                free[size] -= 1
            else:
                reserved += size

        for n in pieces:  # construction, piece by piece
            alloc(2 * n)
            free[_ceil2(2 * n)] = free.get(_ceil2(2 * n), 0) + 1
            if pin_master:
                alloc(4 * n)
        for n in pieces:  # the first step's gradient buffers
            alloc(4 * n)
        return reserved + sum((8 if pin_master else 12) * n for n in pieces)

    assert stage_memory(release, 0, offload).host_optimizer_bytes == simulate(pin_master=False)
    assert stage_memory(main, 0, offload).host_optimizer_bytes == simulate(pin_master=True)
    assert stage_memory(main, 0, replace(offload, pin_cpu_params=False)).host_optimizer_bytes == \
        simulate(pin_master=False)
    assert host_offload_bytes(release, offload, []) == 0


def test_qwen3_30b_host_memory_per_node_grows_by_the_rounding() -> None:
    """The issue's estimate for the Qwen3-30B-A3B preset at fraction 1.0 (about +17% per node)."""
    job = from_preset(PRESETS["qwen3-30b-a3b"])
    offload = Offload(optimizer_offload_fraction=1.0)
    stages = plan_memory(job.training, offload)
    exact = max(16 * s.optimizer_offloaded_elements + s.host_activation_bytes for s in stages)
    rounded = max(s.host_bytes for s in stages)
    assert 1.0 < rounded / exact < 1.5
