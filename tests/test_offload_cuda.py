"""The CUDA halves of the offload tests: streams, events and pinned memory.

Skipped without a CUDA device. They cover what the CPU runs cannot: that copies on the side streams are
ordered against the compute stream (Note: [Event ordering between streams]), that host buffers are
pinned and a reused buffer waits for its last reload (Note: [Pinned pool reuse]), that a source tensor
is kept until its copy is done (Note: [Keep the source alive until its copy finishes]), that the host
optimizer step waits for its gradient copies (Note: [Host step waits for its gradients]) and that the
parameters are back before the next forward (Note: [Parameters back before the next forward]).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: covers the side "
                                "streams, events and pinned host buffers that CPU runs do not exercise")

from examples.gpt import GPT, GPTConfig, batches, train_step  # noqa: E402
from examples.offload.engine import OffloadEngine, Policy  # noqa: E402
from examples.offload.fine_grained import FineGrainedOffloadConfig, FineGrainedPolicy  # noqa: E402
from examples.offload.hybrid_adam import HybridAdamW  # noqa: E402
from examples.offload.layer import LayerOffloadConfig, LayerPolicy  # noqa: E402

CFG = GPTConfig(vocab_size=256, seq_len=64, num_layers=4, hidden_size=128, num_heads=4, ffn_hidden_size=512)


def _grads(policy: Policy | None) -> list[torch.Tensor]:
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = GPT(CFG).to(device)
    tokens, targets = batches(CFG, 4, 1, seed=0, device=device)[0]
    train_step(model, tokens, targets, OffloadEngine(policy, device) if policy else None)
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.hazard("Event ordering between streams")
@pytest.mark.parametrize("policy", ["layer", "layer-double-buffered", "fine-grained"])
def test_cuda_gradients_are_bitwise_equal(policy: str) -> None:
    """Note: [Event ordering between streams]: an unordered copy would corrupt a gradient here."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    make = {
        "layer": lambda: LayerPolicy(LayerOffloadConfig(True, 2), CFG.num_layers),
        "layer-double-buffered": lambda: LayerPolicy(
            LayerOffloadConfig(True, 2, cpu_offloading_double_buffering=True), CFG.num_layers),
        "fine-grained": lambda: FineGrainedPolicy(FineGrainedOffloadConfig(
            True, ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm"), 1)),
    }[policy]
    assert all(torch.equal(a, b) for a, b in zip(_grads(None), _grads(make()), strict=True))


class _Every(Policy):
    def forms_group(self, kind: str, key: Any) -> bool:
        return True

    def offloads(self, group: Any) -> bool:
        return True


@pytest.mark.hazard("Keep the source alive until its copy finishes", "Event ordering between streams",
                    "Pinned pool reuse")
def test_offload_waits_for_a_slow_producer_and_keeps_its_source() -> None:
    """Note: [Keep the source alive until its copy finishes] and Note: [Event ordering between streams].

    The producer kernel is delayed with ``torch.cuda._sleep``; without the d2h stream waiting for the
    compute stream, the copy would read the tensor before it is written.
    """
    device = torch.device("cuda")
    engine = OffloadEngine(_Every(), device)
    x = torch.randn(1 << 20, device=device, requires_grad=True)

    def slow(t: torch.Tensor) -> torch.Tensor:
        torch.cuda._sleep(50_000_000)
        return torch.sigmoid(t)  # saves its output

    with engine.forward():
        y = engine.run("layer", 0, slow, x)
        z = engine.run("layer", 1, torch.tanh, y)
    assert all(b.host.tensor.is_pinned() for g in engine._groups for b in g.blocks)  # Note: [Pinned pool reuse]
    z.sum().backward()
    expected = torch.sigmoid(x.detach())
    reference = (1 - torch.tanh(expected) ** 2) * expected * (1 - expected)
    torch.testing.assert_close(x.grad, reference)


@pytest.mark.hazard("Pinned pool reuse")
def test_reused_host_buffer_waits_for_its_last_reload() -> None:
    """Note: [Pinned pool reuse]: the second step's offload into a buffer is ordered after its reload."""
    device = torch.device("cuda")
    policy = LayerPolicy(LayerOffloadConfig(True, 2, cpu_offloading_retain_pinned_cpu_buffers=True),
                         CFG.num_layers)
    engine = OffloadEngine(policy, device)
    model = GPT(CFG).to(device)
    for tokens, targets in batches(CFG, 4, 2, seed=0, device=device):
        train_step(model, tokens, targets, engine)
    torch.cuda.synchronize()
    buffers = [b for free in engine.pool._free.values() for b in free]
    assert buffers and all(b.last_read is not None and b.last_read.query() for b in buffers)


@pytest.mark.hazard("Host step waits for its gradients", "Parameters back before the next forward")
@pytest.mark.parametrize("overlap", [False, True])
def test_cuda_hybrid_adamw_matches_torch(overlap: bool) -> None:
    """Note: [Host step waits for its gradients] and Note: [Parameters back before the next forward]."""
    device = torch.device("cuda")
    generator = torch.Generator().manual_seed(0)
    shapes = [(256, 128), (128,), (512, 64), (7,)]
    init = [torch.randn(s, generator=generator) for s in shapes]
    grads = [[torch.randn(s, generator=generator) for s in shapes] for _ in range(4)]

    def train(make: Any) -> list[torch.Tensor]:
        params = [torch.nn.Parameter(t.to(device)) for t in init]
        optimizer = make(params)
        for step_grads in grads:
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.to(device)
            optimizer.step()
            optimizer.zero_grad()
            for p in params:  # a "forward" that reads every parameter right after the step
                p.detach().add_(0)
        return [p.detach().cpu() for p in params]

    reference = train(lambda ps: torch.optim.AdamW(ps, lr=1e-2, fused=True))
    got = train(lambda ps: HybridAdamW(ps, lr=1e-2, offload_fraction=0.5, overlap=overlap))
    for a, b in zip(reference, got, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)


def test_hybrid_adam_pins_its_host_copies() -> None:
    """The host master copy and gradient of every offloaded bf16 parameter are pinned, so that their copies can
    run on the side streams without a staging buffer (HybridDeviceOptimizer pins the same pieces)."""
    params = [torch.nn.Parameter(torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    opt = HybridAdamW(params, offload_fraction=1.0)
    host = [s for s in opt.segments if s.host]
    assert host and not any(s.aliased for s in host)
    assert all(s.master.is_pinned() and s.grad is not None and s.grad.is_pinned() for s in host)
    unpinned = HybridAdamW(params, offload_fraction=1.0, pin_memory=False)
    assert not any(s.master.is_pinned() for s in unpinned.segments if s.host)
