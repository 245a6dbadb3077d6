"""GPU nodes the planner knows: memory, compute, the host link and host memory, with sources.

Every figure is a vendor specification (peak or theoretical), labelled by its source; achieved
bandwidth and host-optimizer speed are lower. ``python -m checks probe`` measures the local node and
writes a profile (``--profile``) that replaces them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

from checks.errors import InputError

GB = 10**9


@dataclass(frozen=True)
class Hardware:
    name: str
    gpu_memory_bytes: int
    bf16_flops: float  # dense peak, per GPU
    d2h_bytes_per_s: float  # host link, per GPU and direction
    h2d_bytes_per_s: float
    gpus_per_node: int
    host_memory_bytes: int  # per node
    host_memory_bytes_per_s: float  # per node; the host optimizer step is bound by it
    sources: tuple[str, ...]
    measured: bool = False

    @property
    def host_adam_elements_per_s(self) -> float:
        """Fused AdamW elements per second per GPU on its share of the host memory bandwidth.

        A fused AdamW step reads the fp32 parameter, gradient and two moments and writes the parameter
        and the moments: 28 bytes per element (torch ``_fused_adamw`` on CPU).
        """
        return self.host_memory_bytes_per_s / self.gpus_per_node / 28


_PCIE5 = "PCIe Gen5 x16: 64 GB/s per direction (PCI-SIG specification)"
HARDWARE: dict[str, Hardware] = {h.name: h for h in (
    Hardware("h100-sxm", 80 * GB, 989e12, 64 * GB, 64 * GB, 8, 2048 * GB, 614 * GB,
             ("https://www.nvidia.com/en-us/data-center/h100/ (80 GB, 989 TFLOPS dense BF16)", _PCIE5,
              "https://www.nvidia.com/en-us/data-center/dgx-h100/ (8 GPUs, 2 TB system memory)",
              "2 x Intel Xeon Platinum 8480C, 8 channels DDR5-4800 each: 2 x 307 GB/s")),
    Hardware("h200-sxm", 141 * GB, 989e12, 64 * GB, 64 * GB, 8, 2048 * GB, 614 * GB,
             ("https://www.nvidia.com/en-us/data-center/h200/ (141 GB, 989 TFLOPS dense BF16)", _PCIE5,
              "https://www.nvidia.com/en-us/data-center/dgx-h200/ (8 GPUs, 2 TB system memory)",
              "2 x Intel Xeon Platinum 8480C, 8 channels DDR5-4800 each: 2 x 307 GB/s")),
    Hardware("gh200", 96 * GB, 989e12, 450 * GB, 450 * GB, 1, 480 * GB, 512 * GB,
             ("https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (96 GB HBM3, NVLink-C2C "
              "900 GB/s total, up to 480 GB LPDDR5X at up to 512 GB/s)",)),
    Hardware("gb200", 186 * GB, 2.5e15, 450 * GB, 450 * GB, 4, 960 * GB, 1024 * GB,
             ("https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (13.4 TB HBM3e and 180 PFLOPS dense "
              "BF16 over 72 GPUs; NVLink-C2C 900 GB/s per Grace, shared by its 2 GPUs)",
              "a compute tray: 2 Grace CPUs (480 GB LPDDR5X, 512 GB/s each) and 4 GPUs")),
    Hardware("mi300x", 192 * GB, 1307e12, 64 * GB, 64 * GB, 8, 2048 * GB, 921 * GB,
             ("https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (192 GB HBM3, "
              "1307 TFLOPS dense BF16)", _PCIE5,
              "a typical 8-GPU platform: 2 x AMD EPYC 9004, 12 channels DDR5-4800 each, 2 TB")),
)}


def load_profile(path: str) -> Hardware:
    """A node profile written by ``python -m checks probe``, over the entry it names as its base."""
    from checks.yamlio import read_text  # bounded, and refuses FIFOs and devices

    try:
        data = json.loads(read_text(path))
    except InputError as err:
        raise InputError(path, f"cannot read the probe profile: {err.problem}") from None
    except (json.JSONDecodeError, RecursionError) as err:
        raise InputError(path, f"cannot read the probe profile: {err}") from None
    if not isinstance(data, dict):
        raise InputError(path, f"cannot read the probe profile: a JSON object is expected, not a "
                               f"{type(data).__name__}")
    measured_values = [v for k, v in data.items() if k != "base" and isinstance(v, float)]
    if any(v != v or v in (float("inf"), float("-inf")) for v in measured_values):
        raise InputError(path, "cannot read the probe profile: a measured value is not a finite number")
    base = HARDWARE.get(str(data.get("base", "h100-sxm")))
    if base is None:
        raise InputError(path, f"unknown base hardware {data.get('base')!r}; known: {', '.join(HARDWARE)}")
    measured = {k: data[k] for k in ("gpu_memory_bytes", "d2h_bytes_per_s", "h2d_bytes_per_s",
                                     "host_memory_bytes", "host_memory_bytes_per_s", "gpus_per_node")
                if isinstance(data.get(k), (int, float)) and data[k] > 0}
    if "host_adam_elements_per_s" in data and isinstance(data["host_adam_elements_per_s"], (int, float)):
        # Expressed through the bandwidth it implies, so the one formula above serves both.
        measured["host_memory_bytes_per_s"] = data["host_adam_elements_per_s"] * 28 * \
            int(measured.get("gpus_per_node", base.gpus_per_node))
    return replace(base, name=f"{base.name} (profile {path})", measured=True,
                   sources=(*base.sources, f"measured by python -m checks probe: {path}"), **measured)


def as_json(hw: Hardware) -> dict[str, object]:
    return asdict(hw)
