"""``python -m checks probe``: measure this node into a profile ``plan --profile`` reads.

The only part of the checker that imports torch (the planner does not). It measures what the planner's
throughput model depends on and vendor figures only estimate: pinned host-to-device and device-to-host
bandwidth when a CUDA device is present, torch's fused CPU AdamW throughput, and host memory. Anything it
cannot measure is taken from the ``--base`` hardware entry by ``plan``.
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
    adam_s = _host_adam_seconds(torch, elements, repeats)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else HARDWARE[base].gpus_per_node
    # The node's GPUs share the host: each gets its part of one process's all-core throughput.
    profile["host_adam_elements_per_s"] = elements / adam_s / gpus
    profile["gpus_per_node"] = gpus
    if torch.cuda.is_available():
        profile["gpu_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
        profile["d2h_bytes_per_s"], profile["h2d_bytes_per_s"] = _link(torch, repeats)
    profile["measured"] = {"host_adam_elements": elements, "repeats": repeats, "torch": torch.__version__,
                           "threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(),
                           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        Path(out).write_text(json.dumps(profile, indent=2) + "\n", encoding="utf-8")
    except OSError as err:
        raise InputError(out, f"cannot write the profile: {err}") from None
    link = "" if not torch.cuda.is_available() else \
        f", D2H {profile['d2h_bytes_per_s'] / 1e9:.1f} GB/s, H2D {profile['h2d_bytes_per_s'] / 1e9:.1f} GB/s"
    print(f"host AdamW {profile['host_adam_elements_per_s'] / 1e9:.2f} G elements/s per GPU ({gpus} per node), "
          f"host memory {profile['host_memory_bytes'] / 2**30:.0f} GiB{link}; wrote {out}", file=sys.stderr)
    return 0


def _host_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _host_adam_seconds(torch: Any, elements: int, repeats: int) -> float:
    """Median seconds of one fused AdamW step on ``elements`` fp32 parameters in host memory."""
    params = [torch.nn.Parameter(torch.zeros(elements // 8)) for _ in range(8)]
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=True)
    optimizer.step()  # creates the state
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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
