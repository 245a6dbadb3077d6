"""A hybrid CPU/GPU AdamW: Megatron-Core's ``optimizer_cpu_offload`` with ``optimizer_offload_fraction``.

Like Megatron-Core's ``HybridDeviceOptimizer``, it walks the parameters in order and moves whole tensors
to the host while less than ``offload_fraction`` of all elements has moved (the greedy rule, taken from
the checker's ``checks.model.optimizer_split.greedy_selection``, so the two cannot disagree). Offloaded
tensors get an fp32 master copy, fp32 moments and an fp32 gradient buffer on the host, stepped by
torch's fused CPU AdamW; the rest are stepped on the device. ``split="exact"`` instead cuts the boundary
tensor so that exactly that share of the elements moves, for comparison.

Megatron-Core walks parameters in gradient-buffer order (the reverse of the model's), so pass
``reversed(list(model.parameters()))`` to reproduce its split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from checks.model.optimizer_split import greedy_selection

_HYPER = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize")


@dataclass(eq=False)
class _Segment:
    """A contiguous range of one parameter's elements and the master copy that is stepped for it."""

    param: torch.nn.Parameter
    group: int  # index of the parameter group
    start: int  # flat element range [start, end) of ``param``
    end: int
    host: bool
    master: torch.nn.Parameter  # fp32; aliases ``param`` when it can (See Note: [Host-resident parameters])
    aliased: bool
    grad: torch.Tensor | None = None  # host segments: the pinned fp32 gradient buffer
    copied: Any = None  # host segments: the event of the last gradient copy


class HybridAdamW(torch.optim.Optimizer):
    """AdamW with a share of the parameters' optimizer state on the host.

    Args:
        params: parameters or parameter groups, in the order the split walks them.
        lr, betas, eps, weight_decay: as ``torch.optim.AdamW``. Defaults: 1e-3, (0.9, 0.999), 1e-8, 1e-2.
        offload_fraction: share of the elements whose state lives on the host, in [0, 1]. Default: 1.0.
        split: ``"greedy"`` (whole tensors, Megatron-Core's rule) or ``"exact"``. Default: ``"greedy"``.
        overlap: pipeline the gradient copies, the host steps and the parameter copies tensor by tensor
            (``overlap_cpu_optimizer_d2h_h2d``). Default: False.
        pin_memory: pin the host buffers. Default: when the parameters are on CUDA.

    Raises:
        ValueError: ``offload_fraction`` outside [0, 1] (Megatron-Core accepts 1.5 and offloads
            everything, see rule OPT002), or an unknown ``split``.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, *, offload_fraction: float = 1.0,
                 split: str = "greedy", overlap: bool = False, pin_memory: bool | None = None) -> None:
        if not 0.0 <= offload_fraction <= 1.0:
            raise ValueError(f"offload_fraction={offload_fraction} is outside [0, 1] (rule OPT002)")
        if split not in ("greedy", "exact"):
            raise ValueError(f"split={split!r}: expected 'greedy' or 'exact'")
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": False, "maximize": False})
        self.offload_fraction, self.split, self.overlap = offload_fraction, split, overlap
        params_in_order = [(i, p) for i, g in enumerate(self.param_groups) for p in g["params"]]
        self.device = params_in_order[0][1].device if params_in_order else torch.device("cpu")
        self.cuda = self.device.type == "cuda"
        self.pin = self.cuda if pin_memory is None else pin_memory
        self.segments = self._split(params_in_order)
        self._owner = {id(s.master): s.group for s in self.segments}
        self._host_opts = self._optimizers(host=True)
        self._device_opts = self._optimizers(host=False)
        self.d2h = torch.cuda.Stream(self.device) if self.cuda else None
        self.h2d = torch.cuda.Stream(self.device) if self.cuda else None
        self.d2h_bytes = self.h2d_bytes = 0

    # --- construction -----------------------------------------------------------------------------

    def _split(self, params: list[tuple[int, torch.nn.Parameter]]) -> list[_Segment]:
        numels = [p.numel() for _, p in params]
        if self.split == "greedy":
            chosen = greedy_selection(numels, self.offload_fraction)
            return [self._segment(p, g, 0, p.numel(), host) for (g, p), host in zip(params, chosen, strict=True)]
        target = math.floor(self.offload_fraction * sum(numels))  # exactly this many elements move
        segments, moved = [], 0
        for g, p in params:
            cut = min(p.numel(), max(0, target - moved))
            moved += cut
            if cut:
                segments.append(self._segment(p, g, 0, cut, True))
            if cut < p.numel():
                segments.append(self._segment(p, g, cut, p.numel(), False))
        return segments

    def _segment(self, param: torch.nn.Parameter, group: int, start: int, end: int, host: bool) -> _Segment:
        home = torch.device("cpu") if host else self.device
        flat = param.detach().view(-1)[start:end]
        aliased = param.dtype == torch.float32 and param.device == home  # See Note: [Host-resident parameters]
        if aliased:
            master = torch.nn.Parameter(flat)  # shares the parameter's storage: stepping it steps the parameter
        else:
            data = torch.empty(end - start, dtype=torch.float32, device=home, pin_memory=host and self.pin)
            master = torch.nn.Parameter(data.copy_(flat))
        grad = None
        if host and not aliased:
            grad = torch.empty(end - start, dtype=torch.float32, pin_memory=self.pin)
        return _Segment(param, group, start, end, host, master, aliased, grad)

    def _optimizers(self, host: bool) -> list[torch.optim.AdamW]:
        """The sub-optimizers of one side: one per parameter group, or one per tensor with overlap on the host."""
        mine = [s for s in self.segments if s.host == host]
        if host and self.overlap:  # Megatron-Core builds one CPU optimizer per tensor for this
            return [torch.optim.AdamW([{"params": [s.master]}], fused=True) for s in mine]
        groups = [{"params": [s.master for s in mine if s.group == g]} for g in range(len(self.param_groups))]
        groups = [g for g in groups if g["params"]]
        return [torch.optim.AdamW(groups, fused=True)] if groups else []

    # --- step -------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = closure() if closure is not None else None
        self._sync_hyperparameters()
        live = [s for s in self.segments if s.param.grad is not None]
        for segment in live:
            if not segment.host:
                self._bind_device_grad(segment)
        host = [s for s in live if s.host]
        for segment in host:
            self._copy_grad_to_host(segment)  # queued first, so the copies overlap the device step
        for opt in self._device_opts:
            opt.step()
        for segment in [s for s in live if not s.host and not s.aliased]:
            self._copy_back(segment)
        if self.overlap:
            for segment, opt in zip([s for s in self.segments if s.host], self._host_opts, strict=True):
                if segment.param.grad is None:
                    continue
                self._wait_for_grad(segment)
                opt.step()
                self._copy_back(segment)
        else:
            for segment in host:
                self._wait_for_grad(segment)
            for opt in self._host_opts:
                opt.step()
            for segment in host:
                self._copy_back(segment)
        if self.cuda:
            assert self.h2d is not None
            # See Note: [Parameters back before the next forward]
            torch.cuda.current_stream(self.device).wait_stream(self.h2d)
        return loss

    def _sync_hyperparameters(self) -> None:
        """A learning-rate scheduler changes ``self.param_groups``; the sub-optimizers follow."""
        for opt in (*self._host_opts, *self._device_opts):
            for group in opt.param_groups:
                owner = self.param_groups[self._owner[id(group["params"][0])]]
                group.update({k: owner[k] for k in _HYPER})

    @staticmethod
    def _grad(segment: _Segment) -> torch.Tensor:
        assert segment.param.grad is not None
        return segment.param.grad.view(-1)[segment.start:segment.end]

    def _bind_device_grad(self, segment: _Segment) -> None:
        grad = self._grad(segment)
        segment.master.grad = grad if segment.aliased else grad.float()

    def _copy_grad_to_host(self, segment: _Segment) -> None:
        grad = self._grad(segment)
        if segment.aliased:  # the gradient already lives in host memory, in fp32
            segment.master.grad = grad
            return
        assert segment.grad is not None
        self.d2h_bytes += grad.numel() * grad.element_size()
        if not self.cuda:
            segment.grad.copy_(grad)
        else:
            assert self.d2h is not None
            self.d2h.wait_stream(torch.cuda.current_stream(self.device))  # See Note: [Event ordering between streams]
            with torch.cuda.stream(self.d2h):
                segment.grad.copy_(grad, non_blocking=True)
                segment.copied = torch.cuda.Event()
                segment.copied.record(self.d2h)
            grad.record_stream(self.d2h)  # the gradient may be freed (zero_grad) before the copy ends
        segment.master.grad = segment.grad

    def _wait_for_grad(self, segment: _Segment) -> None:
        if segment.copied is not None:
            segment.copied.synchronize()  # See Note: [Host step waits for its gradients]
            segment.copied = None

    def _copy_back(self, segment: _Segment) -> None:
        """Write the updated master into the parameter (nothing to do when it aliases the parameter)."""
        if segment.aliased:
            return
        target = segment.param.detach().view(-1)[segment.start:segment.end]
        if not segment.host or not self.cuda:
            target.copy_(segment.master)
        else:
            assert self.h2d is not None
            self.h2d.wait_stream(torch.cuda.current_stream(self.device))  # the forward may still read it
            with torch.cuda.stream(self.h2d):
                target.copy_(segment.master, non_blocking=True)
        if segment.host:
            self.h2d_bytes += target.numel() * target.element_size()

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for segment in self.segments:
            segment.master.grad = None

    # --- state ------------------------------------------------------------------------------------

    def _sub_state(self, segment: _Segment) -> dict[str, Any]:
        opts = self._host_opts if segment.host else self._device_opts
        for opt in opts:
            if segment.master in opt.state:
                return opt.state[segment.master]
        return {}

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.AdamW``'s format, whatever the split: full-size fp32 moments per parameter index."""
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        state: dict[int, dict[str, Any]] = {}
        for param_id, i in index.items():
            parts = [s for s in self.segments if id(s.param) == param_id]
            subs = [self._sub_state(s) for s in parts]
            if not all(subs):
                continue
            state[i] = {"step": subs[0]["step"].detach().cpu().clone(), **{
                key: torch.cat([sub[key].detach().cpu().view(-1) for sub in subs]).view(parts[0].param.shape)
                for key in ("exp_avg", "exp_avg_sq")}}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a state saved by this class or by ``torch.optim.AdamW``, for any split and fraction."""
        params = [p for g in self.param_groups for p in g["params"]]
        for group, saved in zip(self.param_groups, state_dict["param_groups"], strict=True):
            group.update({k: saved[k] for k in _HYPER if k in saved})
        for i, saved in state_dict["state"].items():
            param = params[int(i)]
            for segment in (s for s in self.segments if s.param is param):
                opts = self._host_opts if segment.host else self._device_opts
                opt = next(o for o in opts if any(segment.master is q for g in o.param_groups for q in g["params"]))
                home = segment.master.device
                opt.state[segment.master] = {
                    "step": torch.tensor(float(saved["step"]), dtype=torch.float32, device=home),
                    **{key: saved[key].detach().reshape(-1)[segment.start:segment.end].to(home, torch.float32).clone()
                       for key in ("exp_avg", "exp_avg_sq")}}

    # --- accounting -------------------------------------------------------------------------------

    def memory_bytes(self) -> dict[str, int]:
        """Optimizer-owned bytes by where they live: masters (when copies), moments and host grad buffers."""
        out = {"device": 0, "host": 0}
        for segment in self.segments:
            side = "host" if segment.host else "device"
            numel = segment.end - segment.start
            owned = (0 if segment.aliased else 4) + 8 + (4 if segment.grad is not None else 0)  # moments: 8
            out[side] += numel * owned
        return out
