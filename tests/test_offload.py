"""The runnable offload implementation: exact gradients, what moves, validation by the checker's rules."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from checks.api import validate  # noqa: E402
from examples.gpt import GPT, GPTConfig, batches, train_step  # noqa: E402
from examples.offload.engine import OffloadEngine, Policy  # noqa: E402
from examples.offload.fine_grained import MODULES, FineGrainedOffloadConfig, FineGrainedPolicy  # noqa: E402
from examples.offload.layer import LayerOffloadConfig, LayerPolicy  # noqa: E402

CPU = torch.device("cpu")
DENSE = GPTConfig(vocab_size=64, seq_len=16, num_layers=3, hidden_size=32, num_heads=2, ffn_hidden_size=64)
MOE = replace(DENSE, num_experts=4, moe_ffn_hidden_size=48)
STEPS = 3  # the fine-grained plan is made after step 1; steps 2 and 3 follow it


def train_grads(cfg: GPTConfig, make_engine: Callable[[], OffloadEngine] | None,
                steps: int = STEPS) -> tuple[list[torch.Tensor], list[list[torch.Tensor]], OffloadEngine | None]:
    """Losses and gradients of ``steps`` forward/backward passes (no optimizer, so every step sees the same model)."""
    torch.manual_seed(0)
    model = GPT(cfg)
    engine = make_engine() if make_engine else None
    losses, grads = [], []
    for tokens, targets in batches(cfg, 2, steps, seed=1, device=CPU):
        model.zero_grad(set_to_none=True)
        loss = train_step(model, tokens, targets, engine)
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    return losses, grads, engine


def _layer(**knobs: Any) -> Callable[[GPTConfig], Policy]:
    return lambda cfg: LayerPolicy(LayerOffloadConfig(cpu_offloading=True, **knobs), cfg.num_layers)


def _fine(modules: tuple[str, ...] | None, min_size: int, fraction: float = 1.0) -> Callable[[GPTConfig], Policy]:
    def make(cfg: GPTConfig) -> Policy:
        names = modules or tuple(m for m in MODULES if cfg.num_experts or m not in ("expert_fc1", "moe_act"))
        return FineGrainedPolicy(FineGrainedOffloadConfig(True, names, min_size, fraction), cfg.num_experts or None)
    return make


MODES: dict[str, Callable[[GPTConfig], Policy]] = {
    "layer-1": _layer(cpu_offloading_num_layers=1),
    "layer-2": _layer(cpu_offloading_num_layers=2),
    "layer-double-buffered": _layer(cpu_offloading_num_layers=2, cpu_offloading_double_buffering=True),
    "layer-weights": _layer(cpu_offloading_num_layers=2, cpu_offloading_weights=True),
    "layer-retain-buffers": _layer(cpu_offloading_num_layers=1, cpu_offloading_retain_pinned_cpu_buffers=True),
    "fine-all-small": _fine(None, 1),
    "fine-all-above-every-tensor": _fine(None, 10**9),
    "fine-all-half-fraction": _fine(None, 1, 0.5),
    **{f"fine-{m}": _fine((m,) if m not in ("attn_proj",) else ("core_attn", m), 1) for m in MODULES},
}


@pytest.mark.parametrize("cfg", [DENSE, MOE], ids=["dense", "moe"])
@pytest.mark.parametrize("mode", MODES)
def test_gradients_are_bitwise_equal_with_offload(cfg: GPTConfig, mode: str) -> None:
    if mode in ("fine-expert_fc1", "fine-moe_act") and not cfg.num_experts:
        pytest.skip("a dense model has no expert modules")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ACT008 and the weights warning are expected here
        base_losses, base_grads, _ = train_grads(cfg, None)
        losses, grads, engine = train_grads(cfg, lambda: OffloadEngine(MODES[mode](cfg), CPU))
    for step in range(STEPS):
        assert torch.equal(losses[step], base_losses[step])
        assert all(torch.equal(a, b) for a, b in zip(grads[step], base_grads[step], strict=True)), (mode, step)
    assert engine is not None
    moved = engine.transfer.d2h_bytes
    assert (moved == 0) == (mode == "fine-all-above-every-tensor")  # the threshold is in elements
    assert engine.transfer.h2d_bytes == moved  # everything offloaded came back
    assert engine.stats.device_bytes == 0 and engine.stats.host_bytes == 0  # nothing outlives the step


def _activation_peak(cfg: GPTConfig, policy: Policy) -> tuple[int, OffloadEngine]:
    _, _, engine = train_grads(cfg, lambda: OffloadEngine(policy, CPU), steps=2)
    assert engine is not None
    return engine.stats.device_peak_bytes, engine


def test_offload_lowers_the_activation_peak_by_what_it_moves() -> None:
    baseline, _ = _activation_peak(DENSE, Policy())
    layer, engine = _activation_peak(DENSE, LayerPolicy(LayerOffloadConfig(True, 1), DENSE.num_layers))
    assert layer < baseline
    # One layer of three offloaded: its host copy is about what left the device.
    assert engine.stats.host_peak_bytes >= baseline - layer
    fine, _ = _activation_peak(DENSE, _fine(None, 10**9)(DENSE))
    assert fine == baseline  # nothing eligible: nothing changes


def test_fine_grained_plan_keeps_the_last_group_of_each_module() -> None:
    policy = FineGrainedPolicy(FineGrainedOffloadConfig(True, ("core_attn", "mlp_norm"), 1))
    _, _, engine = train_grads(DENSE, lambda: OffloadEngine(policy, CPU), steps=1)
    assert engine is not None and engine.stats.groups_offloaded == 2 * DENSE.num_layers  # the first step: all
    assert policy.plan is not None
    kept = sorted(o for o, offload in policy.plan.items() if not offload)
    assert kept == [2 * DENSE.num_layers - 2, 2 * DENSE.num_layers - 1]  # the last layer's two groups
    fraction = FineGrainedPolicy(FineGrainedOffloadConfig(True, ("core_attn", "mlp_norm"), 1, 0.5))
    train_grads(DENSE, lambda: OffloadEngine(fraction, CPU), steps=1)
    assert fraction.plan is not None
    # 4 groups remain offloadable; int(4 * (1 - 0.5)) = 2 more stay, counted from the end of the pass.
    assert sum(fraction.plan.values()) == 2 and fraction.plan[0] and fraction.plan[1]


# --- validation: the checker's rules, called, not copied ------------------------------------------

def _message(values: dict[str, Any], rule: str) -> str:
    return next(f.message for f in validate(values, rules=[rule]))


def test_layer_config_is_refused_with_the_checkers_message() -> None:
    with pytest.raises(ValueError) as err:
        LayerOffloadConfig(True, 3).validate(num_layers=3)
    expected = _message({"model.num_layers": 3, "model.cpu_offloading": True,
                         "model.cpu_offloading_num_layers": 3}, "ACT001")
    assert str(err.value).startswith(f"layer offload: {expected} (ACT001; fix: ")
    with pytest.raises(ValueError, match="TEX001"):
        LayerOffloadConfig(True, 1, cpu_offloading_activations=False).validate(num_layers=3)
    with pytest.warns(UserWarning, match="ACT008"):
        LayerOffloadConfig(True, 2).validate(num_layers=3)
    with pytest.warns(UserWarning, match="ACT006"):
        LayerOffloadConfig(False, 2).validate(num_layers=3)


def test_fine_grained_config_is_refused_with_the_checkers_message() -> None:
    with pytest.raises(ValueError, match=r"^fine-grained offload: .*\(FGA004; fix: "):
        FineGrainedOffloadConfig(True, ("attn_proj",)).validate()
    with pytest.raises(ValueError, match="FGA002"):
        FineGrainedOffloadConfig(True, ()).validate()
    with pytest.raises(ValueError, match="FGA003"):
        FineGrainedOffloadConfig(True, ("attention",)).validate()
    with pytest.raises(ValueError, match="FGA009"):
        FineGrainedOffloadConfig(True, ("core_attn",), min_offloaded_tensor_size=-1).validate()
    with pytest.raises(ValueError, match="not implemented by this example"):
        FineGrainedOffloadConfig(True, ("fused_group_mlp",)).validate(num_moe_experts=4)
    with pytest.warns(UserWarning, match="FGA013"):
        FineGrainedOffloadConfig(True, ("expert_fc1",)).validate(num_moe_experts=None)


def test_a_block_covers_exactly_the_elements_its_views_reach() -> None:
    """A block copies [start, end) of the storage: from the lowest view's offset aligned down to 64 bytes, to one
    past the last element any view reaches. An empty view reaches nothing, whatever its other dimensions."""
    from examples.offload.engine import _extent

    base = torch.arange(64, dtype=torch.float32)
    assert _extent([base[20:25], base[22:30]]) == (16, 30)  # 16 floats = 64 bytes
    assert _extent([base[40:].view(3, 8)[:, :2]]) == (32, 58)  # a strided view: its last element is 40+2*8+1
    empty = base[40:].view(3, 8)[:, :0]  # shape (3, 0), offset 40: no element
    assert _extent([base[36:38], empty]) == (32, 40)
    assert _extent([torch.arange(32, dtype=torch.float64)[10:12]]) == (8, 12)  # 64 bytes = 8 doubles


def test_the_host_pool_pins_only_for_a_cuda_engine() -> None:
    """Pinned buffers exist to overlap copies with CUDA streams; on the CPU there is nothing to pin (the pinned
    path runs in tests/test_offload_cuda.py)."""
    engine = OffloadEngine(LayerPolicy(LayerOffloadConfig(True, 1), DENSE.num_layers), CPU)
    assert engine.pool.pin is False
