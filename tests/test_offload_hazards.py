"""One regression test per hazard note in examples/offload/notes.py that the CPU can express.

The CUDA-only halves are in tests/test_offload_cuda.py, skipped without a GPU. Each test names the notes it
exercises with ``@pytest.mark.hazard("Title")``; tests/test_hazard_notes.py checks that every note has one.
"""

from __future__ import annotations

import weakref
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from examples.gpt import GPT, GPTConfig, batches, train_step  # noqa: E402
from examples.offload.engine import OffloadEngine, Policy  # noqa: E402
from examples.offload.fine_grained import FineGrainedOffloadConfig, FineGrainedPolicy  # noqa: E402
from examples.offload.hybrid_adam import HybridAdamW  # noqa: E402
from examples.offload.layer import LayerOffloadConfig, LayerPolicy  # noqa: E402

CPU = torch.device("cpu")
CFG = GPTConfig(vocab_size=64, seq_len=16, num_layers=3, hidden_size=32, num_heads=2, ffn_hidden_size=64)


class EveryRegion(Policy):
    """Offload every eligible tensor of every region of one kind."""

    def __init__(self, kind: str = "layer") -> None:
        self.kind = kind

    def forms_group(self, kind: str, key: Any) -> bool:
        return kind == self.kind

    def offloads(self, group: Any) -> bool:
        return True


@pytest.mark.hazard("Keep the source alive until its copy finishes")
def test_source_is_released_only_after_the_next_commit() -> None:
    """Note: [Keep the source alive until its copy finishes]: held until the next commit, then freed."""
    engine = OffloadEngine(EveryRegion(), CPU)
    weight = torch.nn.Parameter(torch.randn(8, 8))
    seen: list[bool] = []
    saved: list[weakref.ref[torch.Tensor]] = []

    def layer(x: torch.Tensor) -> torch.Tensor:
        if engine._groups[:-1]:  # the previous layer has committed: its copy is issued, its source still held
            seen.append(all(slot.tensor is not None for slot in engine._groups[-2].slots))
        hidden = torch.tanh(x @ weight)
        saved.append(weakref.ref(hidden))  # tanh saves its output
        return hidden * 2

    x = torch.randn(4, 8, requires_grad=True)
    with engine.forward():
        for i in range(3):
            x = engine.run("layer", i, layer, x)
    assert seen == [True, True]
    assert engine.stats.device_bytes == 0  # every layer offloaded, every source released at the end
    assert all(ref() is None for ref in saved), "an offloaded activation is still alive on the device"
    x.sum().backward()
    assert weight.grad is not None


@pytest.mark.hazard("Pinned pool reuse")
def test_live_blocks_never_share_a_host_buffer_and_buffers_are_reused() -> None:
    """Note: [Pinned pool reuse]: distinct buffers within a step, the same ones again in the next step."""
    engine = OffloadEngine(LayerPolicy(LayerOffloadConfig(True, 2, cpu_offloading_retain_pinned_cpu_buffers=True),
                                       CFG.num_layers), CPU)
    model = GPT(CFG)
    data = batches(CFG, 2, 3, seed=0, device=CPU)
    buffers_per_step = []
    for tokens, targets in data:
        with engine.forward():
            loss = model(tokens, targets, engine)
        live = [b.host for g in engine._groups for b in g.blocks]
        assert len({id(b) for b in live}) == len(live)
        buffers_per_step.append({id(b) for b in live})
        loss.backward()
        engine.end_step()
    assert buffers_per_step[0] == buffers_per_step[1] == buffers_per_step[2]
    assert engine.pool.in_use_bytes == 0 and engine.pool.allocated_bytes > 0  # retained for the next step
    dropping = OffloadEngine(LayerPolicy(LayerOffloadConfig(True, 2), CFG.num_layers), CPU)
    train_step(GPT(CFG), *data[0], dropping)
    assert dropping.pool.allocated_bytes == 0  # retain_pinned_cpu_buffers=False: returned after the step


@pytest.mark.hazard("Parameters and views of parameters")
def test_parameters_and_their_views_are_not_offloaded() -> None:
    """Note: [Parameters and views of parameters]: a weight and its transpose stay; the activation moves."""
    engine = OffloadEngine(EveryRegion(), CPU)
    weight = torch.nn.Parameter(torch.randn(8, 8))
    x = torch.randn(4, 8, requires_grad=True)
    with engine.forward():
        out = engine.run("layer", 0, lambda t: t @ weight.t(), x)  # saves x and weight.t(), a view
        out = engine.run("layer", 1, torch.tanh, out)
    offloaded = [s for g in engine._groups for s in g.slots]
    assert len(offloaded) == 2  # x, and tanh's output: no parameter-like tensor
    out.sum().backward()
    assert weight.grad is not None

    def run(weights: bool) -> OffloadEngine:
        policy = LayerPolicy(LayerOffloadConfig(True, 2, cpu_offloading_weights=weights), CFG.num_layers)
        engine = OffloadEngine(policy, CPU)
        train_step(GPT(CFG), *batches(CFG, 2, 1, seed=0, device=CPU)[0], engine)
        return engine

    with pytest.warns(UserWarning):
        with_weights = run(True)
    without = run(False)
    assert with_weights.transfer.d2h_bytes > without.transfer.d2h_bytes  # weights moved ...
    assert with_weights.stats.device_peak_bytes >= without.stats.device_peak_bytes  # ... and nothing was saved


class _SaveViews(torch.autograd.Function):
    """Saves three strided views of one storage and checks, in backward, that they come back the same."""

    @staticmethod
    def forward(ctx: Any, base: torch.Tensor) -> torch.Tensor:
        views = (base[:, 0:8].t(), base[:, 8:16], base[:, 16:24])
        ctx.layout = [(v.shape, v.stride(), v.data_ptr() % 64, v.storage_offset() - views[0].storage_offset())
                      for v in views]
        ctx.save_for_backward(*views)
        return base.sum(dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        views = ctx.saved_tensors
        layout = [(v.shape, v.stride(), v.data_ptr() % 64, v.storage_offset() - views[0].storage_offset())
                  for v in views]
        assert layout == ctx.layout, (layout, ctx.layout)
        assert len({v.untyped_storage().data_ptr() for v in views}) == 1  # rebuilt as views of one reload
        return grad.unsqueeze(1).expand(-1, 24) + 0 * views[1].sum()


@pytest.mark.hazard("Views share storage")
def test_views_of_one_storage_move_once_and_keep_their_layout() -> None:
    """Note: [Views share storage]: one copy of the extent, every view rebuilt with its own strides."""
    engine = OffloadEngine(EveryRegion(), CPU)
    base = torch.randn(16, 24, requires_grad=True)
    with engine.forward():
        hidden = engine.run("layer", 0, lambda t: _SaveViews.apply(t * 1.0), base)  # t * 1.0: a fresh storage
        out = engine.run("layer", 1, torch.tanh, hidden)
    (block,) = engine._groups[0].blocks
    assert block.numel <= 16 * 24  # the covered extent, once; not three copies
    assert engine.transfer.d2h_bytes <= (16 * 24 + 16) * 4
    out.sum().backward()
    assert base.grad is not None


@pytest.mark.hazard("Double-buffered reloads")
def test_double_buffers_are_reused_across_steps_but_never_while_read() -> None:
    """Note: [Double-buffered reloads]: the same two buffer sets every step; a live one is never overwritten."""
    policy = LayerPolicy(LayerOffloadConfig(True, 2, cpu_offloading_double_buffering=True), CFG.num_layers)
    engine = OffloadEngine(policy, CPU)
    model = GPT(CFG)
    seen = []
    for data in batches(CFG, 2, 3, seed=0, device=CPU):
        train_step(model, *data, engine)
        seen.append([id(t) for buffers in engine._double for t, _ in buffers])
    assert seen[0] and seen[0] == seen[1] == seen[2]
    tensor, owner = engine._double[0][0]
    owner.users = 1  # a saved tensor still reads it
    group = type("G", (), {"offload_index": 0})()
    assert engine._double_buffer(group, 0, owner) is None  # a fresh allocation instead
    owner.users = 0
    assert engine._double_buffer(group, 0, owner) is tensor


@pytest.mark.hazard("Host step waits for its gradients")
def test_overlapped_host_steps_give_the_same_parameters() -> None:
    """Note: [Host step waits for its gradients]: tensor-by-tensor stepping changes nothing in the result."""
    def train(overlap: bool) -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(n, generator=generator, dtype=torch.bfloat16)) for n in (300, 40, 7)]
        optimizer = HybridAdamW(params, lr=1e-2, offload_fraction=1.0, overlap=overlap)
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator).to(torch.bfloat16)
            optimizer.step()
            optimizer.zero_grad()
        return [p.detach() for p in params]

    assert all(torch.equal(a, b) for a, b in zip(train(False), train(True), strict=True))


@pytest.mark.hazard("Parameters back before the next forward")
def test_parameters_hold_the_updated_masters_after_a_step() -> None:
    """Note: [Parameters back before the next forward]: every copied master is back in its parameter."""
    params = [torch.nn.Parameter(torch.randn(n, dtype=torch.bfloat16)) for n in (64, 32)]
    optimizer = HybridAdamW(params, lr=0.1, offload_fraction=0.5)
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    for segment in optimizer.segments:
        assert not segment.aliased
        flat = segment.param.detach().view(-1)[segment.start:segment.end]
        assert torch.equal(flat, segment.master.detach().to(torch.bfloat16))


@pytest.mark.hazard("Host-resident parameters")
def test_fp32_cpu_parameters_are_their_own_masters() -> None:
    """Note: [Host-resident parameters]: no copy in, no copy out; other dtypes get fp32 copies."""
    params = [torch.nn.Parameter(torch.randn(n)) for n in (64, 32)]
    optimizer = HybridAdamW(params, offload_fraction=1.0)
    for segment in optimizer.segments:
        assert segment.aliased and segment.master.data_ptr() == segment.param.data_ptr() + 4 * segment.start
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    assert optimizer.d2h_bytes == optimizer.h2d_bytes == 0
    assert not any(s.aliased for s in HybridAdamW([torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))]).segments)


@pytest.mark.hazard("Plan from the first step")
def test_a_pass_without_gradients_does_not_make_the_plan() -> None:
    """Note: [Plan from the first step]: an evaluation pass first leaves the plan to the first training step."""
    policy = FineGrainedPolicy(FineGrainedOffloadConfig(True, ("core_attn",), 1))
    engine = OffloadEngine(policy, CPU)
    model = GPT(CFG)
    tokens, targets = batches(CFG, 2, 1, seed=0, device=CPU)[0]
    with torch.no_grad(), engine.forward():
        model(tokens, targets, engine)
    engine.end_step()
    assert policy.plan is None and engine.stats.groups_offloaded == 0
    train_step(model, tokens, targets, engine)
    assert policy.plan is not None and sum(policy.plan.values()) == CFG.num_layers - 1
