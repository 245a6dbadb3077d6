"""Saved-tensor offloading in groups: the engine both activation mechanisms share.

The simplest correct shape is ``torch.autograd.graph.save_on_cpu``: a pack hook copies every tensor
autograd saves to the host, and an unpack hook copies it back when backward needs it. This engine keeps
that shape (:meth:`OffloadEngine._pack`, :meth:`OffloadEngine._unpack`) and adds what makes offloading
pay without changing a single bit of the gradients:

- **groups**: the tensors saved inside one region (a layer for layer-level offloading, a named module
  for fine-grained offloading) are offloaded together when the region *commits*, so the copy overlaps
  the next region's compute, and released one commit later;
- **prefetch**: in backward, a region's commit reloads the previous offloaded group, so that reload
  overlaps this region's backward;
- **storage extents**: each storage is copied once per group, whatever views of it were saved;
- **a reused host pool**, side streams and events (``transfer.py``);
- **exact accounting** of the bytes saved for backward that are resident on the device and on the host.

A :class:`Policy` says which regions form groups, which saved tensors are eligible and which groups are
offloaded; ``layer.py`` and ``fine_grained.py`` hold Megatron-Core's two policies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from examples.offload.transfer import Event, HostBuffer, HostPool, Transfer

# Reloaded views keep their address modulo this many bytes, the CPU allocator's alignment (CUDA blocks
# are aligned to more), so vectorised kernels take the same path as on the original.
_ALIGN_BYTES = 64


def is_parameter_like(tensor: torch.Tensor) -> bool:
    """A parameter or a view of one (See Note: [Parameters and views of parameters])."""
    # issubclass on the type: isinstance(x, Parameter) goes through Parameter's metaclass and costs
    # tens of microseconds, on every tensor autograd saves.
    base = tensor._base
    return issubclass(type(tensor), torch.nn.Parameter) or (base is not None and
                                                            issubclass(type(base), torch.nn.Parameter))


@dataclass
class Stats:
    """Bytes saved for backward, by where they are, and what was copied each way."""

    device_bytes: int = 0  # storages saved for backward that are resident on the compute device
    device_peak_bytes: int = 0
    host_bytes: int = 0  # their offloaded copies
    host_peak_bytes: int = 0
    tensors_offloaded: int = 0
    groups_offloaded: int = 0

    def reset_peaks(self) -> None:
        self.device_peak_bytes = self.device_bytes
        self.host_peak_bytes = self.host_bytes


class _Residency:
    """Reference counts per device storage, so that views of one storage count its bytes once."""

    def __init__(self, stats: Stats) -> None:
        self.stats = stats
        self._refs: dict[int, list[int]] = {}  # storage address -> [references, bytes]

    def hold(self, storage: torch.UntypedStorage) -> int:
        key = storage.data_ptr()
        entry = self._refs.get(key)
        if entry is None:
            self._refs[key] = [1, storage.nbytes()]
            self.stats.device_bytes += storage.nbytes()
            self.stats.device_peak_bytes = max(self.stats.device_peak_bytes, self.stats.device_bytes)
        else:
            entry[0] += 1
        return key

    def drop(self, key: int) -> None:
        entry = self._refs[key]
        entry[0] -= 1
        if entry[0] == 0:
            self.stats.device_bytes -= entry[1]
            del self._refs[key]


@dataclass(eq=False)
class _Block:
    """One storage extent of a group: the bytes its saved views cover, copied as a single flat tensor."""

    dtype: torch.dtype
    numel: int
    device: torch.Tensor | None  # the extent on the device: the source until released, then the reload
    host: HostBuffer | None = None
    offloaded: Event | None = None
    reloaded: Event | None = None
    reload_key: int | None = None  # residency key of the reloaded copy
    users: int = 0  # live saved tensors that refer to this block


class _Slot:
    """What the engine knows of one saved tensor; autograd holds a :class:`_Packed` that points here."""

    __slots__ = ("block", "key", "offset", "size", "stride", "tensor")

    def __init__(self, tensor: torch.Tensor, key: int | None) -> None:
        self.tensor: torch.Tensor | None = tensor  # on the device while resident
        self.key = key  # residency key of ``tensor``'s storage; None for a parameter, which is not counted
        self.block: _Block | None = None
        self.offset = 0  # element offset of the view inside its block
        self.size: tuple[int, ...] = ()
        self.stride: tuple[int, ...] = ()


class _Packed:
    """The object autograd keeps for a saved tensor; when autograd drops it, the engine is told."""

    __slots__ = ("engine", "slot")

    def __init__(self, engine: OffloadEngine, slot: _Slot) -> None:
        self.engine, self.slot = engine, slot

    def __del__(self) -> None:
        self.engine._released(self.slot)


@dataclass(eq=False)
class Group:
    """The saved tensors of one region in one step, offloaded and reloaded together."""

    kind: str  # "layer" or "module"
    key: Any  # the layer index, or the module name
    ordinal: int  # position in this step's forward order
    slots: list[_Slot] = field(default_factory=list)
    blocks: list[_Block] = field(default_factory=list)
    offload: bool = False
    offload_index: int = -1  # position among this step's offloaded groups
    saved_bytes: int = 0  # bytes of the storages its eligible tensors live in, at commit
    state: str = "open"  # open -> committed -> (offloading -> offloaded -> reloaded)


class Policy:
    """Which regions form groups, which saved tensors are eligible, and which groups are offloaded."""

    offload_weights = False
    double_buffering = False
    retain_host_buffers = True

    def forms_group(self, kind: str, key: Any) -> bool:
        return False

    def eligible(self, tensor: torch.Tensor) -> bool:
        return not is_parameter_like(tensor)

    def offloads(self, group: Group) -> bool:
        return False

    def after_step(self, groups: Sequence[Group]) -> None:
        """Called once per training step, after backward."""


class OffloadEngine:
    """Offload the tensors autograd saves inside a model's regions, as a :class:`Policy` decides.

    Args:
        policy: which regions, tensors and groups to offload.
        device: the compute device. Default: the current CUDA device if there is one, else the CPU.

    Example:
        >>> engine = OffloadEngine(LayerPolicy(LayerOffloadConfig(True, 3), model_layers=4))
        >>> with engine.forward():
        ...     loss = model(tokens, offload=engine)
        >>> loss.backward(); engine.end_step()
    """

    def __init__(self, policy: Policy, device: torch.device | None = None) -> None:
        self.policy = policy
        self.device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.pool = HostPool(pin=self.device.type == "cuda")
        self.transfer = Transfer(self.device, self.pool)
        self.stats = Stats()
        self._residency = _Residency(self.stats)
        self._groups: list[Group] = []
        self._open: Group | None = None
        self._pending: list[Group] = []  # offloads issued whose device tensors are still held
        self._in_forward = False
        self._double: list[list[tuple[torch.Tensor, _Block]]] = [[], []]  # See Note: [Double-buffered reloads]

    # --- what a model calls -----------------------------------------------------------------------

    @contextmanager
    def forward(self) -> Iterator[None]:
        """Install the saved-tensor hooks for one forward pass."""
        self._in_forward = True
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            self._in_forward = False
            self._release_pending()  # the last group's offload has nothing after it to overlap with

    def run(self, kind: str, key: Any, fn: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
        """Run ``fn(*args)`` as one region; its output commits the region's group."""
        if not (self._in_forward and torch.is_grad_enabled() and self.policy.forms_group(kind, key)):
            return fn(*args)  # See Note: [Plan from the first step]
        group = Group(kind, key, len(self._groups))
        self._groups.append(group)
        outer, self._open = self._open, group
        try:
            out = fn(*args)
        finally:
            self._open = outer
        group.offload = self.policy.offloads(group) and bool(group.slots)
        if not group.offload and not any(g.offload for g in self._groups):
            return out  # nothing to offload here and nothing before it to prefetch: the commit would do nothing
        return _Commit.apply(self, group, out)

    def end_step(self) -> None:
        """After backward: let the policy learn from this step and start the next one."""
        self.policy.after_step(self._groups)
        self._groups = []
        if not self.policy.retain_host_buffers:
            self.pool.clear()

    # --- autograd hooks ---------------------------------------------------------------------------

    def _pack(self, tensor: torch.Tensor) -> Any:
        if is_parameter_like(tensor):
            if not self.policy.offload_weights:
                return tensor  # not an activation: it stays, and is not counted
            # The module keeps the parameter on the device, so moving a copy frees nothing to count.
            slot = _Slot(tensor, None)  # See Note: [Parameters and views of parameters]
        else:
            slot = _Slot(tensor, self._residency.hold(tensor.untyped_storage()))
        packed = _Packed(self, slot)
        group = self._open
        # Only plain strided tensors: subclasses (quantized, fake, functional) keep their own storage rules.
        if group is not None and type(tensor) is torch.Tensor and tensor.layout == torch.strided \
                and self.policy.eligible(tensor):
            group.slots.append(slot)
        return packed

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        slot = packed.slot
        if slot.tensor is not None:
            return slot.tensor
        block = slot.block
        assert block is not None, "an offloaded tensor without its block"
        if block.device is None:  # backward reached it before its prefetch (e.g. an unusual graph order)
            self._reload_block(block, out=None)
        self.transfer.wait(block.reloaded)  # See Note: [Event ordering between streams]
        assert block.device is not None
        return block.device.as_strided(slot.size, slot.stride, slot.offset)

    def _released(self, slot: _Slot) -> None:
        """Autograd dropped a saved tensor (its node ran backward, or the graph was freed)."""
        if slot.tensor is not None:
            slot.tensor = None
            if slot.key is not None:
                self._residency.drop(slot.key)
        block = slot.block
        if block is None:
            return
        block.users -= 1
        if block.users == 0:
            if block.reload_key is not None:
                self._residency.drop(block.reload_key)
            # A prefetched block that backward never read: the compute stream has not waited for its copy,
            # and must before the memory goes back. See Note: [Keep the source alive until its copy finishes]
            if block.device is not None:
                self.transfer.wait(block.reloaded)
            block.device = None
            if block.host is not None:
                self.stats.host_bytes -= block.numel * block.dtype.itemsize
                self.pool.release(block.host)  # See Note: [Pinned pool reuse]
                block.host = None

    # --- commits ----------------------------------------------------------------------------------

    def _commit_forward(self, group: Group) -> None:
        self._release_pending()
        group.state = "committed"
        storages = {s.tensor.untyped_storage().data_ptr(): s.tensor.untyped_storage().nbytes()
                    for s in group.slots if s.tensor is not None}
        group.saved_bytes = sum(storages.values())
        if group.offload:
            group.offload_index = sum(g.offload for g in self._groups[:group.ordinal])
            self._offload(group)
            self._pending.append(group)

    def _commit_backward(self, group: Group) -> None:
        if group.state == "offloaded":
            self._reload(group)
        previous = next((g for g in reversed(self._groups[:group.ordinal]) if g.state == "offloaded"), None)
        if previous is not None:
            self._reload(previous)  # prefetch: overlaps this group's backward

    def _offload(self, group: Group) -> None:
        """Copy each storage extent of the group to the host (See Note: [Views share storage])."""
        by_storage: dict[tuple[int, torch.dtype], list[_Slot]] = {}
        for slot in group.slots:
            assert slot.tensor is not None
            by_storage.setdefault((slot.tensor.untyped_storage().data_ptr(), slot.tensor.dtype), []).append(slot)
        for (_, dtype), slots in by_storage.items():
            tensors = [s.tensor for s in slots if s.tensor is not None]
            start, end = _extent(tensors)
            base = tensors[0]
            flat = base.new_empty(0).set_(base.untyped_storage(), start, (end - start,), (1,))
            host, event = self.transfer.to_host(flat)
            block = _Block(dtype, end - start, flat, host, event, users=len(slots))
            for slot, tensor in zip(slots, tensors, strict=True):
                slot.block, slot.offset = block, int(tensor.storage_offset()) - start
                slot.size, slot.stride = tuple(tensor.shape), tuple(tensor.stride())
            group.blocks.append(block)
            self.stats.host_bytes += block.numel * dtype.itemsize
            self.stats.host_peak_bytes = max(self.stats.host_peak_bytes, self.stats.host_bytes)
        self.stats.tensors_offloaded += len(group.slots)
        self.stats.groups_offloaded += 1
        group.state = "offloading"

    def _release_pending(self) -> None:
        """Free the device copies of groups whose offload was issued earlier.

        See Note: [Keep the source alive until its copy finishes].
        """
        for group in self._pending:
            for block in group.blocks:
                self.transfer.wait(block.offloaded)
                block.device = None
            for slot in group.slots:
                slot.tensor = None
                if slot.key is not None:
                    self._residency.drop(slot.key)
            group.state = "offloaded"
        self._pending = []

    def _reload(self, group: Group) -> None:
        for index, block in enumerate(group.blocks):
            if block.users:
                self._reload_block(block, self._double_buffer(group, index, block))
        group.state = "reloaded"

    def _reload_block(self, block: _Block, out: torch.Tensor | None) -> None:
        assert block.host is not None
        block.device, block.reloaded = self.transfer.to_device(block.host, block.offloaded, out)
        block.reload_key = self._residency.hold(block.device.untyped_storage())

    def _double_buffer(self, group: Group, index: int, block: _Block) -> torch.Tensor | None:
        """A reusable reload destination, or None for a fresh allocation (See Note: [Double-buffered reloads])."""
        if not self.policy.double_buffering:
            return None
        buffers = self._double[group.offload_index % 2]
        if index < len(buffers):
            tensor, owner = buffers[index]
            if owner.users == 0 and tensor.numel() == block.numel and tensor.dtype == block.dtype:
                buffers[index] = (tensor, block)
                return tensor
            if owner.users:
                return None  # still read by a live saved tensor: never overwrite it
        tensor = torch.empty(block.numel, dtype=block.dtype, device=self.device)
        if index < len(buffers):
            buffers[index] = (tensor, block)
        else:
            buffers.append((tensor, block))
        return tensor


def _extent(tensors: Sequence[torch.Tensor]) -> tuple[int, int]:
    """[start, end) in elements of the storage the views cover, start aligned down to ``_ALIGN_BYTES``."""
    start = min(int(t.storage_offset()) for t in tensors)
    end = max(int(t.storage_offset()) + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
              if t.numel() else int(t.storage_offset()) for t in tensors)
    step = max(1, _ALIGN_BYTES // tensors[0].element_size())
    return start - start % step, end


class _Commit(torch.autograd.Function):
    """Identity on a region's output that marks its commit in forward and in backward."""

    @staticmethod
    def forward(ctx: Any, engine: OffloadEngine, group: Group, out: torch.Tensor) -> torch.Tensor:
        ctx.engine, ctx.group = engine, group
        engine._commit_forward(group)
        return out.view_as(out)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, torch.Tensor]:
        ctx.engine._commit_backward(ctx.group)
        return None, None, grad


class NoOffload:
    """The engine's interface for a model run without offloading."""

    def run(self, kind: str, key: Any, fn: Callable[..., torch.Tensor], *args: Any) -> torch.Tensor:
        return fn(*args)
