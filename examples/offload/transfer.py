"""Copies between the compute device and host memory: a reused host pool, side streams and events.

On CUDA, offloads run on a ``d2h`` stream and reloads on an ``h2d`` stream, ordered against the
compute stream with events. On any other device the same calls copy synchronously into the same host
pool, so every path but the streams runs in CI.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

Event = torch.cuda.Event


@dataclass(eq=False)
class HostBuffer:
    """One reusable host buffer and the event of the last reload that read it."""

    tensor: torch.Tensor  # 1-D
    last_read: Event | None = None  # See Note: [Pinned pool reuse]


@dataclass
class HostPool:
    """Host buffers keyed by (numel, dtype), reused across tensors and steps.

    Args:
        pin: page-lock the buffers (on CUDA, so that copies are asynchronous).
    """

    pin: bool = False
    _free: dict[tuple[int, torch.dtype], list[HostBuffer]] = field(default_factory=dict)
    allocated_bytes: int = 0  # everything the pool holds, free or in use
    in_use_bytes: int = 0
    peak_in_use_bytes: int = 0

    def acquire(self, numel: int, dtype: torch.dtype) -> HostBuffer:
        """A buffer no live block uses (See Note: [Pinned pool reuse])."""
        free = self._free.get((numel, dtype))
        if free:
            buffer = free.pop()
        else:
            buffer = HostBuffer(torch.empty(numel, dtype=dtype, pin_memory=self.pin))
            self.allocated_bytes += _nbytes(buffer.tensor)
        self.in_use_bytes += _nbytes(buffer.tensor)
        self.peak_in_use_bytes = max(self.peak_in_use_bytes, self.in_use_bytes)
        return buffer

    def release(self, buffer: HostBuffer) -> None:
        self.in_use_bytes -= _nbytes(buffer.tensor)
        self._free.setdefault((buffer.tensor.numel(), buffer.tensor.dtype), []).append(buffer)

    def clear(self) -> None:
        """Drop the free buffers (``retain_pinned_cpu_buffers=False`` does this after every step)."""
        for buffers in self._free.values():
            self.allocated_bytes -= sum(_nbytes(b.tensor) for b in buffers)
        self._free.clear()


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


class Transfer:
    """Device-to-host and host-to-device copies of flat tensors, and the stream waits around them.

    Args:
        device: the compute device.
        pool: where host buffers come from.
    """

    def __init__(self, device: torch.device, pool: HostPool) -> None:
        self.device = device
        self.pool = pool
        self.cuda = device.type == "cuda"
        self.d2h = torch.cuda.Stream(device) if self.cuda else None
        self.h2d = torch.cuda.Stream(device) if self.cuda else None
        self.d2h_bytes = 0
        self.h2d_bytes = 0

    def to_host(self, source: torch.Tensor) -> tuple[HostBuffer, Event | None]:
        """Start copying a flat device tensor into a pooled host buffer.

        The caller must keep ``source`` alive until the compute stream has waited for the returned event
        (See Note: [Keep the source alive until its copy finishes]).
        """
        buffer = self.pool.acquire(source.numel(), source.dtype)
        self.d2h_bytes += _nbytes(source)
        if not self.cuda:
            buffer.tensor.copy_(source)
            return buffer, None
        assert self.d2h is not None
        self.d2h.wait_stream(torch.cuda.current_stream(self.device))  # See Note: [Event ordering between streams]
        if buffer.last_read is not None:
            self.d2h.wait_event(buffer.last_read)  # See Note: [Pinned pool reuse]
        with torch.cuda.stream(self.d2h):
            buffer.tensor.copy_(source, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.d2h)
        return buffer, done

    def to_device(self, buffer: HostBuffer, offloaded: Event | None,
                  out: torch.Tensor | None = None) -> tuple[torch.Tensor, Event | None]:
        """Start copying a host buffer back into ``out`` (or a new device tensor).

        The compute stream must wait for the returned event before reading the result (:meth:`wait`).
        """
        source = buffer.tensor
        if out is None:
            # Allocated on the compute stream, which will read it and eventually free it there.
            out = torch.empty(source.numel(), dtype=source.dtype, device=self.device)
        self.h2d_bytes += _nbytes(source)
        if not self.cuda:
            out.copy_(source)
            return out, None
        assert self.h2d is not None
        # The destination may have been in use on the compute stream (a reused double buffer), and the
        # source may still be being written by its offload. See Note: [Event ordering between streams]
        self.h2d.wait_stream(torch.cuda.current_stream(self.device))
        if offloaded is not None:
            self.h2d.wait_event(offloaded)
        with torch.cuda.stream(self.h2d):
            out.copy_(source, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.h2d)
        buffer.last_read = done  # See Note: [Pinned pool reuse]
        return out, done

    def wait(self, event: Event | None) -> None:
        """Make the compute stream wait for a copy (See Note: [Event ordering between streams])."""
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)
