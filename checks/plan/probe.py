"""``python -m checks probe``: measure this node into a profile ``plan --profile`` reads.

The only part of the checker that imports torch (the planner does not). It measures what the step-time model
depends on and vendor figures only estimate:

- torch's fused CPU AdamW on one thread (a rank's host step under torchrun's default of one OpenMP thread per
  worker) and on all threads (what the whole host can do: the cap the node's ranks share);
- with a CUDA device, the GPU memory CUDA reports (``cudaMemGetInfo``'s total, the "total capacity" PyTorch's
  out-of-memory message prints) and pinned device-to-host and host-to-device copy bandwidth;
- host memory.

Anything it cannot measure is taken from the ``--base`` hardware entry by ``plan``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from checks.errors import InputError
from checks.plan.hardware import HARDWARE


def probe(base: str, out: str, elements: int, repeats: int = 5) -> int:
    if base not in HARDWARE:
        raise InputError("--base", f"unknown hardware {base!r}; known: {', '.join(HARDWARE)}")
    try:
        import torch
    except ImportError:
        raise InputError("probe", "needs torch (pip install torch); plan itself does not") from None
    profile: dict[str, Any] = {"base": base, "host_memory_bytes": _host_memory_bytes()}
    threads = torch.get_num_threads()
    per_thread = elements / _host_adam_seconds(torch, elements, repeats, threads=1)
    node = elements / _host_adam_seconds(torch, elements, repeats, threads=threads)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else HARDWARE[base].gpus_per_node
    profile["host_adam_per_thread"] = per_thread
    profile["host_adam_per_node"] = node
    # Each GPU's share of the all-core rate (what profiles written before the per-thread figure held).
    profile["host_adam_elements_per_s"] = node / gpus
    profile["gpus_per_node"] = gpus
    if torch.cuda.is_available():
        profile["gpu_memory_bytes"] = int(torch.cuda.mem_get_info(0)[1])
        profile["d2h_bytes_per_s"], profile["h2d_bytes_per_s"] = _link(torch, repeats)
    profile["measured"] = {"host_adam_elements": elements, "repeats": repeats, "torch": torch.__version__,
                           "threads": threads, "cuda": torch.cuda.is_available(),
                           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        Path(out).write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
    except OSError as err:
        raise InputError(out, f"cannot write the profile: {err}") from None
    link = "" if not torch.cuda.is_available() else \
        f", D2H {profile['d2h_bytes_per_s'] / 1e9:.1f} GB/s, H2D {profile['h2d_bytes_per_s'] / 1e9:.1f} GB/s"
    print(f"host AdamW {per_thread / 1e9:.2f} G elements/s on one thread, {node / 1e9:.2f} G on {threads} "
          f"({gpus} GPUs per node), host memory {profile['host_memory_bytes'] / 2**30:.0f} GiB{link}; wrote {out}",
          file=sys.stderr)
    return 0


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _host_adam_seconds(torch: Any, elements: int, repeats: int, threads: int) -> float:
    """Median seconds of one fused AdamW step on ``elements`` fp32 parameters in host memory, on ``threads``."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        params = [torch.nn.Parameter(torch.zeros(max(1, elements // 8))) for _ in range(8)]
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer = torch.optim.AdamW(params, lr=1e-4, fused=True)
        optimizer.step()  # creates the state
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            optimizer.step()
            times.append(time.perf_counter() - start)
        return max(statistics.median(times), 1e-9)
    finally:
        torch.set_num_threads(before)


def _link(torch: Any, repeats: int, nbytes: int = 256 * 2**20) -> tuple[float, float]:
    """Pinned device-to-host and host-to-device bandwidth, one direction at a time, timed with events."""
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    rates = []
    for source, target in ((device, host), (host, device)):
        seconds = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            target.copy_(source, non_blocking=True)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        rates.append(nbytes / statistics.median(seconds))
    return rates[0], rates[1]
