"""GPU nodes the planner knows: memory, compute, links and the host, each figure with its source.

What a figure is matters as much as its value, so each says which kind it is:

- *capacity CUDA reports*: GPU memory as PyTorch's caching allocator sees it (the "total capacity" of its
  out-of-memory message), not the marketing size: an "80 GB" H100 has 79.11 GiB, 6% more than 80e9 bytes.
  Where no public figure was found the entry keeps the nominal size and its source says so;
- *achievable*: a published measurement of the link or collective (nccl-tests bus bandwidth, nvbandwidth
  copies), which the step-time model prices copies and collectives at;
- *peak*: a vendor specification, used only where nothing is measured (the dense bf16 rate every efficiency is
  a share of, the HBM and host memory bandwidth that bound the optimizer steps);
- *fitted*: the host AdamW throughput per thread, fitted to one Megatron Bridge measurement (below).

``python -m checks probe`` measures the local node (host AdamW per thread and per node, pinned copies, GPU
memory) and writes a profile (``--profile``) that replaces the defaults.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from checks.errors import InputError

GB = 10**9
GIB = 2**30

# Host AdamW elements per second on one CPU thread (torch's fused AdamW on fp32, 28 bytes an element). FITTED:
# the value that makes the step-time model reproduce the optimizer-offload cost of Megatron Bridge's
# Qwen3-30B-A3B job 10609512 (TP2 PP2 EP4, 2 x 8 H100, optimizer_offload_fraction 1.0 without
# overlap_cpu_optimizer_d2h_h2d: 4189 ms, NVIDIA-NeMo/Megatron-Bridge@067f987d:
# skills/nemo-mbridge-perf-cpu-offloading/card.yaml:157-158, against its 996 ms baseline), with one thread per rank
# (below). The other fractions and the overlapped run of that sweep are predictions (tools/planner_validation.py).
# Measured for comparison, one fused AdamW thread: 0.76e9 on the Intel Xeon this project benchmarked
# (reference/benchmarks/hybrid_adam.json, 2 threads), 1.09e9 on an AMD EPYC build machine.
HOST_ADAM_PER_THREAD = 0.653e9
_ADAM_FIT = ("host AdamW 0.653e9 elements/s per thread: FITTED to Megatron Bridge job 10609512 (Qwen3-30B-A3B, "
             "optimizer offload 1.0: 4189 ms, NVIDIA-NeMo/Megatron-Bridge@067f987d:skills/"
             "nemo-mbridge-perf-cpu-offloading/card.yaml:157-158, against its 996 ms baseline); one fused-AdamW "
             "thread measured 0.76e9 (reference/benchmarks/hybrid_adam.json)")
# The host's time to issue one MoE layer's forward and backward for one micro-batch when it runs eagerly. The
# token dispatcher copies the per-expert token counts to the host and waits for them in every MoE layer (alltoall:
# NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/moe/token_dispatcher.py:921-958, skipped only with
# drop-and-pad routing, :446; allgather: :320), so the host cannot run ahead of the GPU across MoE layers and such a
# layer takes at least this long, however little work its micro-batch holds (the "CPU Overhead Bottleneck" of
# megatron/core/transformer/moe/README.md:254-262, which CUDA graphs relieve). FITTED: the value at which the
# step-time model reproduces the eager baseline of Megatron Bridge's GPT-OSS-20B job 10111169 (TP2 PP4 EP4, 2 x 8
# H100, global batch 4: 467-520 ms, its midpoint, NVIDIA-NeMo/Megatron-Bridge@067f987d:skills/
# nemo-mbridge-perf-cuda-graphs/card.yaml:195-200, GBS=4 at :87); tools/planner_validation.py --fit-host-floor
# reruns the fit. The Qwen3-30B-A3B offload sweep (a recompute-heavy job on the same nodes) and two Moonlight-16B
# jobs are its predictions. It depends on the dispatcher and software stack: the same card's eager Qwen3-30B-A3B
# TP2 PP2 EP4 step of 623 ms (card.yaml:168-173) is shorter than this floor allows at a batch of 8 or more, and the
# card says neither its batch nor its dispatcher (it names a later run "all-to-all", :11-12), so it is no case.
MOE_LAYER_HOST_S = 0.0160
_HOST_FLOOR_FIT = ("eager MoE layer 16.0 ms of host time per micro-batch (forward and backward): FITTED to Megatron "
                   "Bridge job 10111169 (GPT-OSS-20B TP2 PP4 EP4, 16 x H100, global batch 4, eager: 467-520 ms, "
                   "NVIDIA-NeMo/Megatron-Bridge@067f987d:skills/nemo-mbridge-perf-cuda-graphs/card.yaml:195-200); "
                   "the dispatcher waits for its token counts on the host each layer "
                   "(NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/moe/token_dispatcher.py:921-958)")
# every system but the H100 the floor was fitted on
_HOST_FLOOR_ASSUMED = _HOST_FLOOR_FIT + " (an H100-node fit, assumed here)"
# torchrun gives each worker OMP_NUM_THREADS=1 when the variable is unset and it starts more than one process per
# node (torch 2.13 torch/distributed/run.py:872-884), so each rank's host AdamW runs on one thread.
_THREADS = "one host AdamW thread per rank: torchrun's OMP_NUM_THREADS=1 default (torch/distributed/run.py:872-884)"


@dataclass(frozen=True)
class Hardware:
    name: str
    gpu_memory_bytes: int  # what CUDA reports to PyTorch's allocator (or nominal, where its source says so)
    bf16_flops: float  # dense peak, per GPU
    d2h_bytes_per_s: float  # pinned copies over the host link, achievable, per GPU and direction
    h2d_bytes_per_s: float
    gpus_per_node: int  # GPUs that share one host's memory and CPUs
    host_memory_bytes: int  # per node
    host_memory_bytes_per_s: float  # per node, peak: bounds the copies and host optimizer of all its ranks
    sources: tuple[str, ...]
    measured: bool = False
    hbm_bytes_per_s: float = 3.35e12  # per GPU, peak: the GPU optimizer step streams its shard through it
    nvlink_bytes_per_s: float = 370 * GB  # NCCL bus bandwidth within the NVLink domain, achievable, per GPU
    nvlink_domain: int = 0  # GPUs one NVLink domain joins (0: the node's)
    network_bytes_per_s: float = 48 * GB  # between NVLink domains, achievable, per GPU (its NIC)
    host_adam_per_thread: float = HOST_ADAM_PER_THREAD  # elements/s of fused fp32 AdamW on one host thread
    host_threads_per_rank: int = 1
    host_adam_per_node: float = 0.0  # elements/s of the whole host (probe), 0: its memory bandwidth / 28 B
    moe_layer_host_s: float = MOE_LAYER_HOST_S  # host time to issue one eager MoE layer's micro-batch (floor)

    @property
    def domain(self) -> int:
        return self.nvlink_domain or self.gpus_per_node

    @property
    def host_adam_elements_per_s(self) -> float:
        """Fused AdamW elements per second of one rank's host step, while every rank of the node runs its own.

        A rank gets its threads' rate, and no more than its share of the host: of a measured node rate, or of the
        host memory bandwidth at the 28 bytes a fused fp32 AdamW element reads and writes (parameter, gradient,
        two moments in; parameter and moments out; torch ``_fused_adamw`` on CPU).
        """
        node = self.host_adam_per_node or self.host_memory_bytes_per_s / 28
        return min(self.host_adam_per_thread * self.host_threads_per_rank, node / self.gpus_per_node)


# --- sources ----------------------------------------------------------------------------------------------
_RL_PEAKS = ("NVIDIA-NeMo/RL@7ea279ab:nemo_rl/utils/flops_tracker.py:114-127 (dense bf16 TFLOPS: A100 312, H100 and "
             "H200 989.5, B200 and B300 2250, GB200 and GB300 2450)")
_NVLINK4 = ("NVLink 4 achievable 370 GB/s per GPU: 'NCCL can get an effective NVLink bandwidth of 370GB/s, which you "
            "can observe as BusBw when running non-allreduce operations' (NCCL's maintainer, "
            "https://github.com/NVIDIA/nccl-tests/issues/212)")
_NDR = ("between nodes 48 GB/s per GPU: 'CX-7 NICs at NDR rate (400Gbps) should achieve up to 48-49GB/s per NIC' "
        "(https://github.com/NVIDIA/nccl-tests/issues/267), one NIC per GPU")
_PCIE5 = ("host link 52.8 GB/s per GPU and direction: nvbandwidth device_to_host on an 8 x H100 node, every GPU "
          "52.77 GB/s (https://github.com/NVIDIA/nvbandwidth/issues/24); that report's host_to_device SM copies ran "
          "at 35.2 GB/s, but the optimizer's copies are copy-engine cudaMemcpyAsync, for which it gives no figure, "
          "so the device-to-host figure is used both ways")
_SPR_HOST = "host memory 614 GB/s peak: 2 x Intel Xeon Platinum 8480C, 8 channels of DDR5-4800 each (2 x 307 GB/s)"
_NVLINK5 = ("NVLink 5 740 GB/s per GPU: no published NCCL figure found; derived as NVLink 4's achievable share "
            "(370 of 450 GB/s, nccl-tests#212) of NVLink 5's 900 GB/s per direction")

HARDWARE: dict[str, Hardware] = {h.name: h for h in (
    Hardware("h100-sxm", int(79.11 * GIB), 989e12, 52.77 * GB, 52.77 * GB, 8, 2048 * GB, 614 * GB, sources=(
        "GPU memory 79.11 GiB, the capacity CUDA reports to PyTorch ('GPU 0 has a total capacity of 79.11 GiB', "
        "H100 80GB: https://github.com/vllm-project/vllm/issues/27508)",
        "https://www.nvidia.com/en-us/data-center/h100/ (989 TFLOPS dense BF16, 3.35 TB/s HBM3); " + _RL_PEAKS,
        _PCIE5, _NVLINK4, _NDR,
        "https://www.nvidia.com/en-us/data-center/dgx-h100/ (8 GPUs, 2 TB system memory, 8 x ConnectX-7 400 Gb/s)",
        _SPR_HOST, _ADAM_FIT, _THREADS, _HOST_FLOOR_FIT)),
    Hardware("h200-sxm", int(139.81 * GIB), 989e12, 52.77 * GB, 52.77 * GB, 8, 2048 * GB, 614 * GB,
             hbm_bytes_per_s=4.8e12, sources=(
        "GPU memory 139.81 GiB, the capacity CUDA reports to PyTorch ('GPU 0 has a total capacity of 139.81 GiB' "
        "on 8 x H200: github.com/sungwon-chae/arxiv_confi etu_logging.md)",
        "https://www.nvidia.com/en-us/data-center/h200/ (989 TFLOPS dense BF16, 4.8 TB/s HBM3e); " + _RL_PEAKS,
        _PCIE5 + " (an H100 measurement; the H200 has the same PCIe Gen5 x16 link)", _NVLINK4, _NDR,
        "https://www.nvidia.com/en-us/data-center/dgx-h200/ (8 GPUs, 2 TB system memory)",
        _SPR_HOST, _ADAM_FIT, _THREADS,
        _HOST_FLOOR_ASSUMED)),
    Hardware("a100-sxm-80gb", 80 * GB, 312e12, 25.13 * GB, 25.13 * GB, 8, 2048 * GB, 409.6 * GB,
             hbm_bytes_per_s=2.039e12, nvlink_bytes_per_s=200 * GB, network_bytes_per_s=24 * GB, sources=(
        "GPU memory NOMINAL 80 GB: no public figure of the capacity CUDA reports for the A100 80GB was found to cite",
        "https://www.nvidia.com/en-us/data-center/a100/ (312 TFLOPS dense BF16, 2,039 GB/s HBM2e); " + _RL_PEAKS,
        "host link 25.13 GB/s per GPU: nvbandwidth host_to_device on an A100-SXM4 "
        "(https://github.com/NVIDIA/nvbandwidth/issues/42), used both ways",
        "NVLink 3 200 GB/s per GPU: all_reduce_perf bus bandwidth ~200 GB/s on 8 x A100 80GB "
        "(https://github.com/NVIDIA/nccl-tests/issues/149)",
        "between nodes 24 GB/s per GPU: ConnectX-6 HDR 200 Gb/s per GPU (DGX A100), at the share of line rate NDR "
        "reaches (nccl-tests#267)",
        "https://www.nvidia.com/en-us/data-center/dgx-a100/ (8 GPUs, 2 TB system memory, 2 x AMD EPYC 7742)",
        "host memory 409.6 GB/s peak: 2 x 8 channels of DDR4-3200", _ADAM_FIT + " (an H100-node fit, assumed here)",
        _THREADS,
        _HOST_FLOOR_ASSUMED)),
    Hardware("b200", 180 * GB, 2.25e15, 52.77 * GB, 52.77 * GB, 8, 2048 * GB, 717 * GB, hbm_bytes_per_s=8e12,
             nvlink_bytes_per_s=740 * GB, sources=(
        "GPU memory NOMINAL 180 GB (DGX B200: 1,440 GB over 8 GPUs): no public figure of the capacity CUDA reports "
        "was found to cite",
        "dense BF16 2.25 PFLOPS: " + _RL_PEAKS, "https://www.nvidia.com/en-us/data-center/dgx-b200/ (8 GPUs, "
        "2 TB system memory, 2 x Intel Xeon Platinum 8570, 8 x ConnectX-7 400 Gb/s, HBM3e 8 TB/s per GPU)",
        _PCIE5 + " (an H100 measurement; assumed for the B200's PCIe Gen5 link)", _NVLINK5, _NDR,
        "host memory 717 GB/s peak: 2 x 8 channels of DDR5-5600", _ADAM_FIT + " (assumed here)", _THREADS,
        _HOST_FLOOR_ASSUMED)),
    Hardware("b300", 288 * GB, 2.25e15, 52.77 * GB, 52.77 * GB, 8, 2048 * GB, 717 * GB, hbm_bytes_per_s=8e12,
             nvlink_bytes_per_s=740 * GB, network_bytes_per_s=96 * GB, sources=(
        "GPU memory NOMINAL 288 GB HBM3e: no public figure of the capacity CUDA reports was found to cite",
        "dense BF16 2.25 PFLOPS: " + _RL_PEAKS,
        _PCIE5 + " (an H100 measurement; assumed)", _NVLINK5,
        "between nodes 96 GB/s per GPU: ConnectX-8 800 Gb/s, at NDR's achievable share (nccl-tests#267)",
        "host: not published in a source cited here; taken as DGX B200's (2 TB, 717 GB/s)",
        _ADAM_FIT + " (assumed here)", _THREADS,
        _HOST_FLOOR_ASSUMED)),
    Hardware("gh200", 96 * GB, 989e12, 450 * GB, 450 * GB, 1, 480 * GB, 512 * GB, hbm_bytes_per_s=4e12, sources=(
        "GPU memory NOMINAL 96 GB: no public figure of the capacity CUDA reports was found to cite",
        "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/ (96 GB HBM3 at 4 TB/s, NVLink-C2C "
        "900 GB/s total, up to 480 GB LPDDR5X at up to 512 GB/s); host link: the C2C peak per direction "
        "(no achievable figure cited)", _NDR + " (assumed: one NIC per superchip)", _ADAM_FIT + " (assumed here)",
        _THREADS,
        _HOST_FLOOR_ASSUMED)),
    Hardware("gb200", 186 * GB, 2.5e15, 450 * GB, 450 * GB, 4, 960 * GB, 1024 * GB, hbm_bytes_per_s=8e12,
             nvlink_bytes_per_s=740 * GB, nvlink_domain=72, sources=(
        "GPU memory NOMINAL 186 GB: no public figure of the capacity CUDA reports was found to cite",
        "https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (13.4 TB HBM3e and 180 PFLOPS dense "
        "BF16 over 72 GPUs; NVLink-C2C 900 GB/s per Grace, shared by its 2 GPUs: the host link is that peak, no "
        "achievable figure cited)", "a compute tray: 2 Grace CPUs (480 GB LPDDR5X, 512 GB/s each) and 4 GPUs",
        _NVLINK5 + "; one NVLink domain of 72 GPUs", _NDR, _ADAM_FIT + " (assumed here)", _THREADS,
        _HOST_FLOOR_ASSUMED)),
    Hardware("gb300", 288 * GB, 2.45e15, 450 * GB, 450 * GB, 4, 960 * GB, 1024 * GB, hbm_bytes_per_s=8e12,
             nvlink_bytes_per_s=740 * GB, nvlink_domain=72, network_bytes_per_s=96 * GB, sources=(
        "GPU memory NOMINAL 288 GB HBM3e: no public figure of the capacity CUDA reports was found to cite",
        "dense BF16 2.45 PFLOPS: " + _RL_PEAKS,
        "a compute tray as GB200's: 2 Grace CPUs (480 GB LPDDR5X, 512 GB/s each), 4 GPUs, NVLink-C2C 900 GB/s "
        "per Grace (peak)", _NVLINK5 + "; one NVLink domain of 72 GPUs",
        "between nodes 96 GB/s per GPU: ConnectX-8 800 Gb/s, at NDR's achievable share (nccl-tests#267)",
        _ADAM_FIT + " (assumed here)", _THREADS,
        _HOST_FLOOR_ASSUMED)),
    Hardware("mi300x", 192 * GB, 1307e12, 52.77 * GB, 52.77 * GB, 8, 2048 * GB, 921 * GB, hbm_bytes_per_s=5.3e12,
             nvlink_bytes_per_s=368 * GB, sources=(
        "GPU memory NOMINAL 192 GB: no citable public figure of the capacity HIP reports was found",
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (192 GB HBM3 at 5.3 TB/s, "
        "1307 TFLOPS dense BF16)", _PCIE5 + " (an H100 measurement; assumed for the MI300X's PCIe Gen5 link)",
        "Infinity Fabric 368 GB/s per GPU: no published RCCL figure found; derived as NVLink 4's achievable share "
        "(nccl-tests#212) of 448 GB/s", _NDR + " (assumed: one 400 Gb/s NIC per GPU)",
        "a typical 8-GPU platform: 2 x AMD EPYC 9004, 12 channels DDR5-4800 each, 2 TB",
        _ADAM_FIT + " (assumed here)", _THREADS,
        _HOST_FLOOR_ASSUMED)),
)}


def base_name(hw: Hardware) -> str:
    """The catalogue entry a hardware (or a probe profile over one) stands for."""
    return hw.name.split(" (", 1)[0]


# What a probe profile may hold besides "base" and the "measured" provenance block: counts and sizes (integers),
# and rates (numbers); every one present must be positive, and a key outside these is a typo, not ignored.
_PROFILE_INTS = ("gpu_memory_bytes", "host_memory_bytes", "gpus_per_node")
_PROFILE_FLOATS = ("d2h_bytes_per_s", "h2d_bytes_per_s", "host_memory_bytes_per_s", "host_adam_per_thread",
                   "host_adam_per_node", "host_adam_elements_per_s")


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

    unknown = sorted(set(data) - set(_PROFILE_FLOATS) - set(_PROFILE_INTS) - {"base", "measured"})
    if unknown:
        raise InputError(path, f"unknown key {unknown[0]!r} in the probe profile; it holds base, measured and "
                               f"{', '.join((*_PROFILE_INTS, *_PROFILE_FLOATS))} (python -m checks probe writes them)")
    for key in (*_PROFILE_INTS, *_PROFILE_FLOATS):
        if key not in data:
            continue
        value = data[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not value > 0 or (key in _PROFILE_INTS and value != int(value)):
            kind = "a positive integer" if key in _PROFILE_INTS else "a positive number"
            raise InputError(path, f"{key}={value!r} in the probe profile: expected {kind}, as python -m checks "
                                   "probe writes it; rerun probe or remove the key to keep the base hardware's")

    measured: dict[str, Any] = {k: float(data[k]) for k in (
        "d2h_bytes_per_s", "h2d_bytes_per_s", "host_memory_bytes_per_s", "host_adam_per_thread",
        "host_adam_per_node") if k in data}
    measured.update({k: int(data[k]) for k in _PROFILE_INTS if k in data})
    if "host_adam_elements_per_s" in data and "host_adam_per_node" not in measured:
        # A profile from before the per-thread measurement: its figure is each GPU's share of one all-core process.
        measured["host_adam_per_node"] = float(data["host_adam_elements_per_s"]) * \
            int(measured.get("gpus_per_node", base.gpus_per_node))
    return replace(base, name=f"{base.name} (profile {path})", measured=True,
                   sources=(*base.sources, f"measured by python -m checks probe: {path}"), **measured)


def as_json(hw: Hardware) -> dict[str, object]:
    return asdict(hw)
