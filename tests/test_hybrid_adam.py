"""The hybrid CPU/GPU AdamW against torch.optim.AdamW, Megatron-Core's split rule, and its saved state."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from checks.model.optimizer_split import greedy_selection  # noqa: E402
from examples.offload.hybrid_adam import HybridAdamW  # noqa: E402

SHAPES = [(40, 30), (30,), (50, 20), (7,), (16, 16)]
# torch.optim.AdamW defaults to its foreach kernel, the hybrid optimizer runs the fused one on each side;
# they round differently in float32. Over 5 steps of lr 1e-2 the parameters stay within this of each other.
ATOL = 1e-6


def _params(dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(1)
    return [torch.nn.Parameter(torch.randn(s, generator=generator).to(dtype)) for s in SHAPES]


def _train(make: Callable[[list[torch.nn.Parameter]], Any], steps: int = 5, dtype: torch.dtype = torch.float32,
           params: list[torch.nn.Parameter] | None = None, seed: int = 2) -> tuple[list[torch.nn.Parameter], Any]:
    params = params if params is not None else _params(dtype)
    optimizer = make(params)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator).to(dtype)
        optimizer.step()
        optimizer.zero_grad()
    return params, optimizer


@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("split", ["greedy", "exact"])
@pytest.mark.parametrize("overlap", [False, True])
def test_matches_torch_adamw(fraction: float, split: str, overlap: bool) -> None:
    reference, _ = _train(lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1))
    got, _ = _train(lambda ps: HybridAdamW(ps, lr=1e-2, weight_decay=0.1, offload_fraction=fraction, split=split,
                                           overlap=overlap))
    for a, b in zip(reference, got, strict=True):
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0)


def test_16_bit_parameters_step_fp32_masters_exactly_like_fused_adamw() -> None:
    """bf16 parameters: fp32 master copies on both sides (the copy path runs on CPU too)."""
    masters = [torch.nn.Parameter(p.detach().float()) for p in _params(torch.bfloat16)]
    reference = torch.optim.AdamW(masters, lr=1e-2, fused=True)
    params, optimizer = _train(lambda ps: HybridAdamW(ps, lr=1e-2, offload_fraction=0.5), steps=1,
                               dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(2)
    for m in masters:
        m.grad = torch.randn(m.shape, generator=generator).to(torch.bfloat16).float()
    reference.step()
    for p, m in zip(params, masters, strict=True):
        assert torch.equal(p, m.to(torch.bfloat16))
    assert optimizer.d2h_bytes > 0 and optimizer.h2d_bytes > 0  # gradients in, parameters out


class _CudaParam:
    """The part of a CUDA parameter that megatron-core's split reads: its size, ``is_cuda``, and a host copy.

    Lets the real ``HybridDeviceOptimizer._get_sub_optimizer_param_groups`` run on a machine without a GPU.
    """

    is_cuda = True
    dtype = torch.float32

    def __init__(self, numel: int) -> None:
        self._numel = numel

    def numel(self) -> int:
        return self._numel

    def detach(self) -> _HostCopy:  # the offload path: param.detach().clone().cpu().pin_memory()
        return _HostCopy(self._numel)


class _HostCopy(_CudaParam):
    is_cuda = False

    def clone(self) -> _HostCopy:
        return self

    def cpu(self) -> _HostCopy:
        return self

    def pin_memory(self) -> _HostCopy:
        return self


def _megatron_core_split(numels: list[int], fraction: float) -> list[bool]:
    """Which tensors the installed megatron-core's ``HybridDeviceOptimizer`` moves to the host, in order.

    Runs upstream's own selection, NVIDIA/Megatron-LM@55ac7082 (core_v0.16.1, the test extra's pin):
    megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py:251-299, which offloads a CUDA tensor while
    the elements moved so far are below ``offload_fraction`` of all CUDA elements (:258, :273).
    """
    module = pytest.importorskip("megatron.core.optimizer.cpu_offloading.hybrid_optimizer",
                                 reason="needs megatron-core (the test extra)")
    params = [_CudaParam(n) for n in numels]
    optimizer = SimpleNamespace(param_groups=[{"params": params}], param_update_in_fp32=False)
    _, _, moved, _, _ = module.HybridDeviceOptimizer._get_sub_optimizer_param_groups(optimizer, fraction)
    return [p in moved for p in params]


SPLIT_SIZES = [[p.numel() for p in _params()], [1000, 4000, 3000, 2000, 1000], [1], [5, 5], [3, 1, 4, 1, 5, 9, 2, 6],
               [10**6, 1, 1, 1], [1, 1, 1, 10**6]]


@pytest.mark.parametrize("numels", SPLIT_SIZES, ids=lambda sizes: "-".join(map(str, sizes[:4])))
def test_greedy_split_is_megatron_cores_rule(numels: list[int]) -> None:
    params = [torch.nn.Parameter(torch.zeros(n)) for n in numels]
    # fractions that land on and between prefix boundaries: 0.5 of [5, 5] is exactly the first tensor
    for fraction in (0.0, 0.1, 0.25, 0.3, 0.5, 0.75, 0.9, 0.999, 1.0):
        expected = _megatron_core_split(numels, fraction)
        assert [s.host for s in HybridAdamW(params, offload_fraction=fraction).segments] == expected, fraction
        assert greedy_selection(numels, fraction) == expected, fraction  # the checker's model of the same rule


def test_greedy_split_moves_what_the_documented_example_says() -> None:
    # The documented example (../shared/upstream notes, section 6.1): 10% requested moves 45%.
    sized = [torch.nn.Parameter(torch.zeros(n)) for n in (1000, 4000, 3000, 2000, 1000)]
    moved = sum(s.end - s.start for s in HybridAdamW(sized, offload_fraction=0.1).segments if s.host)
    assert moved == 5000


def test_exact_split_moves_exactly_the_fraction() -> None:
    params = _params()
    total = sum(p.numel() for p in params)
    for fraction in (0.1, 0.3, 0.77):
        segments = HybridAdamW(params, offload_fraction=fraction, split="exact").segments
        assert sum(s.end - s.start for s in segments if s.host) == int(fraction * total)
        assert sum(s.end - s.start for s in segments) == total


def _steps(optimizer: Any, params: list[torch.nn.Parameter], steps: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator)
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.parametrize("target", ["hybrid", "torch"])
def test_state_survives_save_and_load_into_a_fresh_optimizer(target: str) -> None:
    """Train 3 steps, save, load into a fresh optimizer with another split, train 2 more: as if uninterrupted."""
    uninterrupted = _params()
    reference = torch.optim.AdamW(uninterrupted, lr=1e-2)
    _steps(reference, uninterrupted, 3, seed=2)
    _steps(reference, uninterrupted, 2, seed=99)

    params = _params()
    first = HybridAdamW(params, lr=1e-2, offload_fraction=0.3, split="exact")
    _steps(first, params, 3, seed=2)
    saved = first.state_dict()
    fresh = [torch.nn.Parameter(p.detach().clone()) for p in params]
    if target == "hybrid":
        resumed: Any = HybridAdamW(fresh, lr=5.0, offload_fraction=0.8, overlap=True)
    else:
        resumed = torch.optim.AdamW(fresh, lr=5.0)
    resumed.load_state_dict(saved)  # also restores lr=1e-2
    _steps(resumed, fresh, 2, seed=99)
    for a, b in zip(uninterrupted, fresh, strict=True):
        torch.testing.assert_close(b, a, atol=ATOL, rtol=0)
    assert set(saved["state"][0]) == {"step", "exp_avg", "exp_avg_sq"}
    assert saved["state"][0]["exp_avg"].shape == SHAPES[0]


def test_learning_rate_changes_reach_both_sides() -> None:
    params = _params()
    optimizer = HybridAdamW(params, lr=1.0, offload_fraction=0.5)
    optimizer.param_groups[0]["lr"] = 0.0  # what a scheduler does
    before = [p.detach().clone() for p in params]
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    for p, b in zip(params, before, strict=True):  # only weight decay x lr = 0 could move them
        assert torch.equal(p, b)


def test_fraction_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match="OPT002"):
        HybridAdamW(_params(), offload_fraction=1.5)
    with pytest.raises(ValueError, match="split"):
        HybridAdamW(_params(), split="balanced")


def test_memory_accounting_splits_the_bytes_by_side() -> None:
    params = _params()
    total = sum(p.numel() for p in params)
    # fp32 parameters on CPU are their own masters: 8 bytes of moments per element wherever it is.
    assert HybridAdamW(params, offload_fraction=1.0).memory_bytes() == {"device": 0, "host": 8 * total}
    assert HybridAdamW(params, offload_fraction=0.0).memory_bytes() == {"device": 8 * total, "host": 0}
    # bf16 parameters: an fp32 master (4), moments (8), and on the host an fp32 gradient buffer (4).
    half = HybridAdamW(_params(torch.bfloat16), offload_fraction=1.0).memory_bytes()
    assert half == {"device": 0, "host": 16 * total}


def test_pinning_defaults_to_the_device_and_follows_an_explicit_choice() -> None:
    """Host copies are pinned exactly when the optimizer runs on CUDA, unless told otherwise (pinning itself is
    asserted on a GPU: tests/test_offload_cuda.py::test_hybrid_adam_pins_its_host_copies)."""
    assert HybridAdamW(_params(), offload_fraction=0.5).pin is False
    assert HybridAdamW(_params(), offload_fraction=0.5, pin_memory=False).pin is False


def test_host_gradients_are_fp32_whatever_the_default_dtype() -> None:
    """A script that sets torch's default dtype before building the optimizer must not change its host gradient
    buffers: they hold fp32 gradients for fp32 master copies, and the steps equal those under the usual default."""
    expected, _ = _train(lambda ps: HybridAdamW(ps, lr=1e-2, offload_fraction=0.5), steps=2, dtype=torch.bfloat16)

    def built_under_float64(ps: list[torch.nn.Parameter]) -> HybridAdamW:
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return HybridAdamW(ps, lr=1e-2, offload_fraction=0.5)
        finally:
            torch.set_default_dtype(default)

    got, optimizer = _train(built_under_float64, steps=2, dtype=torch.bfloat16)
    assert {s.grad.dtype for s in optimizer.segments if s.grad is not None} == {torch.float32}
    for a, b in zip(expected, got, strict=True):
        assert torch.equal(a, b)
