"""Activation offloading on a GPU: memory saved against what left the device, and time against save_on_cpu.

For each variant (no offload; layer-level offload of the first half of the layers; fine-grained offload
of every module; and ``torch.autograd.graph.save_on_cpu(pin_memory=True)``, PyTorch's own offload of
every saved tensor) it trains the same model from the same seed and records CUDA's peak allocated memory
and the median step time. For the engine's variants it also records the activation bytes offloaded per
step, and reports the peak reduction as a share of them (1.0: every offloaded byte left the device at
the peak). Prints the table and ratios from this one run and writes an artifact.

Needs a CUDA device; without one it says so and measures nothing.

Usage: python benchmarks/bench_gpu_offload.py [--steps N] [--out reference/benchmarks/gpu_offload.json]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks.common import ROOT, write_artifact
from examples.gpt import GPT, GPTConfig, batches
from examples.offload.engine import OffloadEngine, Policy
from examples.offload.fine_grained import FineGrainedOffloadConfig, FineGrainedPolicy
from examples.offload.layer import LayerOffloadConfig, LayerPolicy

CFG = GPTConfig(vocab_size=8192, seq_len=1024, num_layers=8, hidden_size=1024, num_heads=16, ffn_hidden_size=4096)
BATCH = 8


def _variants() -> dict[str, Callable[[], Policy | str | None]]:
    modules = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm")
    return {
        "baseline": lambda: None,
        "layer": lambda: LayerPolicy(LayerOffloadConfig(True, CFG.num_layers // 2), CFG.num_layers),
        "layer-double-buffered": lambda: LayerPolicy(
            LayerOffloadConfig(True, CFG.num_layers // 2, cpu_offloading_double_buffering=True), CFG.num_layers),
        "fine-grained": lambda: FineGrainedPolicy(FineGrainedOffloadConfig(True, modules)),
        "save_on_cpu": lambda: "save_on_cpu",
    }


def run(name: str, make: Callable[[], Policy | str | None], steps: int, device: torch.device) -> dict[str, Any]:
    torch.manual_seed(0)
    model = GPT(CFG).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    made = make()
    engine = OffloadEngine(made, device) if isinstance(made, Policy) else None
    data = batches(CFG, BATCH, steps + 2, seed=0, device=device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    times = []
    for tokens, targets in data:
        start = time.perf_counter()
        context: AbstractContextManager[Any] = engine.forward() if engine else \
            torch.autograd.graph.save_on_cpu(pin_memory=True) if made == "save_on_cpu" else nullcontext()
        with context:
            loss = model(tokens, targets, engine)
        loss.backward()
        if engine:
            engine.end_step()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    offloaded = engine.transfer.d2h_bytes // len(data) if engine else None
    return {"name": name, "peak_bytes": torch.cuda.max_memory_allocated(device),
            "median_step_s": statistics.median(times[2:]), "offloaded_bytes_per_step": offloaded}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "reference" / "benchmarks" / "gpu_offload.json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs one; nothing measured", file=sys.stderr)
        return 0
    device = torch.device("cuda")
    results = [run(name, make, args.steps, device) for name, make in _variants().items()]
    base = results[0]
    reference = next(r for r in results if r["name"] == "save_on_cpu")
    for r in results:
        if r["offloaded_bytes_per_step"]:
            r["peak_reduction_share"] = (base["peak_bytes"] - r["peak_bytes"]) / r["offloaded_bytes_per_step"]
        r["time_vs_baseline"] = r["median_step_s"] / base["median_step_s"]
        r["time_vs_save_on_cpu"] = r["median_step_s"] / reference["median_step_s"]
        print(f"{r['name']:<22} peak {r['peak_bytes'] / 2**30:7.2f} GiB  step {r['median_step_s'] * 1e3:8.1f} ms  "
              f"x{r['time_vs_baseline']:.2f} of baseline  x{r['time_vs_save_on_cpu']:.2f} of save_on_cpu  "
              f"reduction/offloaded {r.get('peak_reduction_share', float('nan')):.2f}")
    artifact = {"benchmark": "gpu_offload", "device": torch.cuda.get_device_name(device),
                "model": CFG.__dict__, "batch_size": BATCH, "steps": args.steps, "variants": results}
    write_artifact(args.out, artifact)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
