"""The example command: train a small GPT with and without each kind of offloading, and compare.

Every variant trains the same model from the same seed on the same batches, so losses can be compared
step by step with the baseline. For each variant it prints peak device memory (CUDA's
``max_memory_allocated``; on CPU, exact accounting of parameters, gradients, device-side optimizer state
and the activations saved for backward), bytes moved each way, tokens/s and the largest loss difference
from the baseline, and writes all of it, with revision pins, to a JSON artifact
(schema: ``checks/schemas/offload_run.schema.json``).

Usage: python examples/run_offload.py [--model dense|moe] [--variants a,b] [--steps N] [--out FILE] [--yes]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

_STARTED = time.perf_counter()  # before torch's import, a good part of a cold start; see Estimate.spent_s
if __name__ == "__main__":  # the command only: importing this module leaves the importer's OpenMP alone
    # Idle OpenMP threads sleep instead of spinning. torch's two threads on a 2-core machine that runs anything else
    # spun against it: a warm step took 0.8-3.3 s with both cores busy, 0.13-0.3 s passive; on an idle machine
    # 0.07-0.10 s spinning, 0.09-0.11 s passive. The thread count, and so every result, is the same (checked bit for
    # bit on both card commands).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.common import write_artifact  # noqa: E402
from examples.gpt import GPT, Block, GPTConfig, batches, train_step  # noqa: E402
from examples.offload.engine import OffloadEngine, Policy  # noqa: E402
from examples.offload.fine_grained import FineGrainedOffloadConfig, FineGrainedPolicy  # noqa: E402
from examples.offload.hybrid_adam import HybridAdamW  # noqa: E402
from examples.offload.layer import LayerOffloadConfig, LayerPolicy  # noqa: E402

# A run estimated to take longer than this, or any larger-than-default run on a GPU, asks for --yes. Five minutes:
# longer than one waits for an example without being told. On the 2-core machine the card's two commands took
# 10-18 s (dense; MoE, every variant) as it was, 40-90 s with both cores kept busy, so they run without asking;
# --steps 1000 (125 times the default dense run, estimated 380-580 s) or a larger model asks even on an idle one.
BUDGET_S = 300.0
# The probe: the baseline on the run's first batch, this many times. Only the steps after the first are timed:
# the first step of a process pays once for what later steps reuse (the allocator's pools, oneDNN's kernel
# choice and JIT, lazy initialisation), 2-25 times a warm step here, and the run proper, started after the probe,
# never pays it again. Three warm steps rather than one, since a step on a loaded machine varies by 2x.
PROBE_STEPS = 4
# A warm step of an offload variant, relative to the baseline's: measured 0.8-1.25 (dense and MoE, idle and with
# both cores busy) on the 2-core CPU machine; on CPU the copies are memcpy and the host optimizer step is the same
# AdamW arithmetic. Not worth a probe per variant, which would cost each of them three steps.
OFFLOAD_STEP_COST = 1.15
MAX_LAYERS, MAX_HIDDEN = 1024, 65536  # far beyond a run this example is for
DENSE_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm")
MOE_MODULES = (*DENSE_MODULES, "expert_fc1", "moe_act")


@dataclass(frozen=True)
class Variant:
    """One way to train: which offloading, with Megatron-Core's knob names."""

    name: str
    about: str
    settings: dict[str, Any] = field(default_factory=dict)

    def policy(self, cfg: GPTConfig) -> Policy:
        knobs = self.settings
        if knobs.get("cpu_offloading"):
            return LayerPolicy(LayerOffloadConfig(**{k: v for k, v in knobs.items() if k.startswith("cpu_")}),
                               cfg.num_layers)
        if knobs.get("fine_grained_activation_offloading"):
            names = ("fine_grained_activation_offloading", "offload_modules", "min_offloaded_tensor_size",
                     "activation_offload_fraction")
            fine = FineGrainedOffloadConfig(**{k: (tuple(v) if k == "offload_modules" else v)  # type: ignore[arg-type]
                                               for k, v in knobs.items() if k in names})
            return FineGrainedPolicy(fine, cfg.num_experts or None)
        return Policy()  # nothing is offloaded; the engine still accounts for the saved activations

    def optimizer(self, model: GPT) -> torch.optim.Optimizer:
        params = list(reversed(list(model.parameters())))  # Megatron-Core's gradient-buffer order
        if self.settings.get("optimizer_cpu_offload"):
            return HybridAdamW(params, lr=1e-3, offload_fraction=self.settings["optimizer_offload_fraction"],
                               split=self.settings.get("split", "greedy"),
                               overlap=self.settings.get("overlap_cpu_optimizer_d2h_h2d", False))
        return torch.optim.AdamW(params, lr=1e-3, fused=True)


def variants(cfg: GPTConfig) -> dict[str, Variant]:
    modules = list(MOE_MODULES if cfg.num_experts else DENSE_MODULES)
    half = max(1, cfg.num_layers // 2)
    fine = {"fine_grained_activation_offloading": True, "offload_modules": modules}
    return {v.name: v for v in (
        Variant("baseline", "no offloading"),
        Variant("layer", f"layer-level: the first {half} of {cfg.num_layers} layers",
                {"cpu_offloading": True, "cpu_offloading_num_layers": half}),
        Variant("layer-double-buffered", "layer-level, reloads into two reused buffer sets",
                {"cpu_offloading": True, "cpu_offloading_num_layers": half,
                 "cpu_offloading_double_buffering": True}),
        Variant("fine-grained", "module-level, every module this model has, tensors of >= 1024 elements",
                {**fine, "min_offloaded_tensor_size": 1024}),
        Variant("fine-grained-default-size", "module-level with the default 1 Mi-element threshold",
                {**fine, "min_offloaded_tensor_size": 1024 * 1024}),
        Variant("optimizer", "optimizer state, half of the elements (greedy, whole tensors)",
                {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5}),
        Variant("optimizer-exact", "optimizer state, exactly half of the elements",
                {"optimizer_cpu_offload": True, "optimizer_offload_fraction": 0.5, "split": "exact"}),
    )}


DEFAULT_VARIANTS = ("baseline", "layer", "fine-grained", "fine-grained-default-size", "optimizer")


def train(variant: Variant, cfg: GPTConfig, data: list[tuple[torch.Tensor, torch.Tensor]], seed: int,
          device: torch.device, progress: bool = True) -> dict[str, Any]:
    """Train one variant from scratch; return its measurements."""
    torch.manual_seed(seed)
    model = GPT(cfg).to(device)
    optimizer = variant.optimizer(model)
    engine = OffloadEngine(variant.policy(cfg), device)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for step, (tokens, targets) in enumerate(data, start=1):
        start = time.perf_counter()
        loss = train_step(model, tokens, targets, engine)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        if progress:
            print(f"[{variant.name}] step {step}/{len(data)} loss {losses[-1]:.4f} ({times[-1]:.2f} s)",
                  file=sys.stderr)
    opt_bytes = optimizer.memory_bytes() if isinstance(optimizer, HybridAdamW) else \
        {"device": sum(p.numel() for p in model.parameters()) * 8, "host": 0}  # fp32 exp_avg + exp_avg_sq
    accounted = 2 * param_bytes + opt_bytes["device"] + engine.stats.device_peak_bytes  # params + grads
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    timed = times[1:] if len(times) > 2 else times  # the first step pays for allocations and the plan
    d2h = engine.transfer.d2h_bytes + getattr(optimizer, "d2h_bytes", 0)
    h2d = engine.transfer.h2d_bytes + getattr(optimizer, "h2d_bytes", 0)
    return {
        "name": variant.name, "about": variant.about, "settings": variant.settings,
        "peak_device_bytes": measured if measured is not None else accounted,
        "peak_device_source": "cuda max_memory_allocated" if measured is not None else "accounting",
        "accounted_peak_device_bytes": accounted,
        "activation_peak_device_bytes": engine.stats.device_peak_bytes,
        "optimizer_device_bytes": opt_bytes["device"],
        "host_peak_bytes": engine.stats.host_peak_bytes + opt_bytes["host"],
        "d2h_bytes_per_step": d2h // len(data), "h2d_bytes_per_step": h2d // len(data),
        "tensors_offloaded_per_step": engine.stats.tensors_offloaded // len(data),
        "tokens_per_s": len(timed) * data[0][0].numel() / sum(timed),
        "losses": losses,
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def table(results: list[dict[str, Any]]) -> str:
    head = ("variant", "peak device", "activations", "optim. dev.", "host peak", "D2H/step", "H2D/step",
            "tokens/s", "max |dloss|")
    rows = [head] + [(r["name"], _mib(r["peak_device_bytes"]), _mib(r["activation_peak_device_bytes"]),
                      _mib(r["optimizer_device_bytes"]), _mib(r["host_peak_bytes"]), _mib(r["d2h_bytes_per_step"]),
                      _mib(r["h2d_bytes_per_step"]), f"{r['tokens_per_s']:.0f}", f"{r['max_abs_loss_delta']:.2e}")
                     for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths, strict=True))) for row in rows)


def loss_table(results: list[dict[str, Any]]) -> str:
    """Loss per step for every variant, under the main table."""
    steps = len(results[0]["losses"])
    width = max(len(r["name"]) for r in results)
    head = "loss by step".ljust(width) + "".join(f"{i:>9}" for i in range(1, steps + 1))
    return "\n".join([head] + [r["name"].ljust(width) + "".join(f"{x:9.4f}" for x in r["losses"]) for r in results])


@dataclass(frozen=True)
class Estimate:
    """How long the command takes, from what it has spent so far and a warm step of the baseline."""

    spent_s: float  # start-up (the imports) and the probe, already paid when the estimate is made
    warm_step_s: float
    steps: int
    variants: int  # the baseline included

    @property
    def training_s(self) -> float:
        return self.steps * self.warm_step_s * (1 + (self.variants - 1) * OFFLOAD_STEP_COST)

    @property
    def total_s(self) -> float:
        return self.spent_s + self.training_s


def needs_yes(estimate: Estimate, device: torch.device, larger: bool) -> str | None:
    """Why this run asks for --yes, or None: it would take longer than BUDGET_S, or it is larger than the
    default and on a GPU (another user's, or a paid one)."""
    if estimate.total_s > BUDGET_S:
        return f"about {estimate.total_s:.0f} s, more than the {BUDGET_S:.0f} s this command runs without asking"
    if device.type == "cuda" and larger:
        return f"about {estimate.total_s:.0f} s, and larger than the default run, on a GPU"
    return None


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), as the checker's own command gives it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def footprint_bytes(cfg: GPTConfig, batch_size: int, steps: int) -> int:
    """A generous estimate of the memory a run needs: fp32 weights, gradients and AdamW state (16 bytes a
    parameter), the activations one step saves, and ``steps`` batches of tokens. Nothing is allocated: the
    parameters of one layer are counted on the meta device."""
    with torch.device("meta"):
        layer = sum(p.numel() for p in Block(cfg).parameters())
    params = cfg.num_layers * layer + (2 * cfg.vocab_size + cfg.seq_len + 2) * cfg.hidden_size
    tokens = batch_size * cfg.seq_len
    # per layer and token ~34 x hidden bytes in 16-bit (Korthikanti et al. 2022), doubled for fp32, plus the
    # attention scores a math kernel may materialise; and the logits with their gradient
    activations = cfg.num_layers * tokens * (68 * cfg.hidden_size + 10 * cfg.num_heads * cfg.seq_len) + \
        3 * 4 * tokens * cfg.vocab_size
    return 16 * params + activations + steps * batch_size * (cfg.seq_len + 1) * 8


def _memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[1])
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _fits(parser: argparse.ArgumentParser, cfg: GPTConfig, batch_size: int, steps: int, device: torch.device) -> None:
    """Refuse a run that cannot fit before anything is allocated: an allocation that fails is a traceback."""
    need, have = footprint_bytes(cfg, batch_size, steps), _memory_bytes(device)
    if need > have:
        parser.error(f"this run needs about {need / 2**30:,.1f} GiB, more than the {have / 2**30:,.1f} GiB of "
                     f"{device.type} memory; make --layers, --hidden, --seq-len, --batch-size or --steps smaller")


def main(argv: list[str] | None = None) -> int:
    began = _STARTED if argv is None else time.perf_counter()  # argv None: the command line, a fresh process
    parser = _Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("dense", "moe"), default="dense")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                        help="comma-separated; 'all' for every one (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--layers", type=int, default=GPTConfig.num_layers)
    parser.add_argument("--hidden", type=int, default=GPTConfig.hidden_size)
    parser.add_argument("--seq-len", type=int, default=GPTConfig.seq_len)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("offload_run.json"))
    parser.add_argument("--yes", action="store_true", help="run even if it is estimated to take longer than "
                        f"{BUDGET_S:.0f} s, or is larger than the default on a GPU")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.layers < 2 or args.hidden < 8 or args.seq_len < 2:
        parser.error("--steps and --batch-size must be >= 1, --layers >= 2, --hidden >= 8, --seq-len >= 2")
    if args.hidden % GPTConfig.num_heads:
        parser.error(f"--hidden must be a multiple of the {GPTConfig.num_heads} attention heads, got {args.hidden}")
    if args.layers > MAX_LAYERS or args.hidden > MAX_HIDDEN:  # a million layers, each a module, never finish building
        parser.error(f"--layers must be at most {MAX_LAYERS} and --hidden at most {MAX_HIDDEN}, got {args.layers} "
                     f"and {args.hidden}")
    if not -2**63 <= args.seed < 2**64:  # what torch.manual_seed takes
        parser.error(f"--seed must be in [-2**63, 2**64), got {args.seed}")
    if args.out.is_dir() or not args.out.parent.is_dir():  # found out before training, not after it
        parser.error(f"--out {args.out}: give a file path in an existing directory")
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          "cpu" if args.device == "auto" else args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    base = GPTConfig(num_experts=4 if args.model == "moe" else 0)
    cfg = replace(base, num_layers=args.layers, hidden_size=args.hidden, seq_len=args.seq_len,
                  ffn_hidden_size=4 * args.hidden, moe_ffn_hidden_size=2 * args.hidden)
    _fits(parser, cfg, args.batch_size, 1, device)
    menu = variants(cfg)
    chosen = list(menu) if args.variants == "all" else [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in menu]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {', '.join(menu)} or 'all'")
    if "baseline" not in chosen:
        chosen.insert(0, "baseline")  # every comparison is against it
    first = batches(cfg, args.batch_size, 1, args.seed, device)  # the run's first batch: the data come after --yes
    # train() reseeds and builds its own model and optimizer, so the probe changes no result of the run
    probe = train(menu["baseline"], cfg, first * PROBE_STEPS, args.seed, device, progress=False)
    estimate = Estimate(spent_s=time.perf_counter() - began, warm_step_s=first[0][0].numel() / probe["tokens_per_s"],
                        steps=args.steps, variants=len(chosen))
    reason = needs_yes(estimate, device, larger=cfg != base or args.batch_size > 8)
    if reason and not args.yes:
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else \
            f"{torch.get_num_threads()} CPU threads"
        print(f"error: this run would train {len(chosen)} variants x {args.steps} steps of a "
              f"{cfg.num_parameters / 1e6:.1f} M-parameter model on {where} (a warm step "
              f"{estimate.warm_step_s:.3f} s), {reason}; pass --yes to run it", file=sys.stderr)
        return 2

    _fits(parser, cfg, args.batch_size, args.steps, device)  # every batch is built before the first step
    data = batches(cfg, args.batch_size, args.steps, args.seed, device)
    started = time.perf_counter()
    results = [train(menu[name], cfg, data, args.seed, device) for name in chosen]
    baseline = results[0]["losses"]
    for r in results:
        r["max_abs_loss_delta"] = max(abs(a - b) for a, b in zip(r["losses"], baseline, strict=True))
    print(table(results))
    print()
    print(loss_table(results))
    artifact = {
        "artifact": "offload_run", "model": {"kind": args.model, **asdict(cfg)},
        "steps": args.steps, "batch_size": args.batch_size, "seed": args.seed,
        "wall_s": round(time.perf_counter() - started, 2),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "variants": results,
    }
    write_artifact(args.out, artifact, None if argv is None else ["examples/run_offload.py", *argv])
    print(f"wrote {args.out}", file=sys.stderr)
    # on stderr, not in the artifact: the estimate says how loaded this machine was, not what the run measured
    # (and the artifact's schema, checks/schemas/offload_run.schema.json, admits no field it does not name)
    took = time.perf_counter() - began
    print(f"time: estimated {estimate.total_s:.1f} s, took {took:.1f} s ({took / estimate.total_s:.2f}x the "
          f"estimate; training estimated {estimate.training_s:.1f} s from a warm step of {estimate.warm_step_s:.3f} s, "
          f"took {artifact['wall_s']:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
