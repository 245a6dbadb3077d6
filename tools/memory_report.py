"""Measure the activation model against real layers and write the memory-model report.

Maintainer tool (imports torch and transformers). For Hugging Face Llama and Qwen3-MoE layers and the
example GPT, built from configs with random weights on CPU, it measures the bytes each layer saves for
backward (``benchmarks/saved_tensors.py``) over a grid of sequence lengths and micro-batch sizes and
compares them with the planner's profiles (``checks/plan/activations.py``). It also sets the planner's
Megatron-Core/Transformer Engine estimate beside Megatron-LM's ``theoretical_memory_usage`` formula and
Korthikanti et al. (2022) for the presets. Writes ``reference/benchmarks/activation_validation.json``
and ``reference/memory-model.md`` (generated from that artifact and from the planner's validation against
published jobs, ``reference/benchmarks/planner_validation.json`` by ``tools/planner_validation.py``;
tests/test_docs.py and tools/generate.py keep them in step).

Usage: python tools/memory_report.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ARTIFACT = ROOT / "reference" / "benchmarks" / "activation_validation.json"
PLANNER_ARTIFACT = ROOT / "reference" / "benchmarks" / "planner_validation.json"  # tools/planner_validation.py
AFTER_STEP_ARTIFACT = ROOT / "reference" / "benchmarks" / "after_step_memory.json"  # tools/after_step_memory.py
REPORT = ROOT / "reference" / "memory-model.md"
GRID = [(1, 128), (2, 256), (4, 512), (8, 1024), (1, 2048)]  # (micro-batch size, sequence length)

from checks.plan.activations import Dims  # noqa: E402  (no torch: the planner's own dataclass)

# The layers measured, as the planner's profiles see them (tools/activation_terms.py lists their terms).
HF_LLAMA_DIMS = Dims(256, 8, 2, 32, 688)
HF_QWEN3_MOE_DIMS = Dims(256, 8, 2, 32, 0, experts=16, top_k=4, moe_ffn=128)


def example_gpt_dims(experts: int) -> Dims:
    """The example GPT measured here (hidden 256, 8 heads, LayerNorm, GELU, learned positions), dense or MoE top-2."""
    return Dims(256, 8, 8, 32, 1024, gated=False, layernorm=True, rope=False, experts=experts,
                top_k=2 if experts else 0, moe_ffn=256 if experts else 0)


def measure_all() -> list[dict[str, Any]]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

    from benchmarks.saved_tensors import measure
    from checks.plan.activations import (
        bytes_per_token,
        example_gpt,
        hf_llama,
        hf_qwen3_moe,
        per_layer_qwen3_moe,
    )
    from examples.gpt import GPT, GPTConfig, batches

    rows = []
    llama, qwen = HF_LLAMA_DIMS, HF_QWEN3_MOE_DIMS
    for batch, seq in GRID:
        torch.manual_seed(0)
        ids = torch.randint(0, 512, (batch, seq))
        model: Any = LlamaForCausalLM(LlamaConfig(
            vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=3, num_attention_heads=8,
            num_key_value_heads=2, head_dim=32, max_position_embeddings=4096, attn_implementation="sdpa"))
        got = measure(lambda m=model, i=ids: m(input_ids=i, labels=i).loss, list(model.model.layers))[1]
        rows.append({"model": "hf-llama", "batch": batch, "seq": seq, "measured": got,
                     "predicted": bytes_per_token(hf_llama(llama)) * batch * seq})
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(
            vocab_size=512, hidden_size=256, intermediate_size=1024, moe_intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=2, head_dim=32, num_experts=16, num_experts_per_tok=4,
            max_position_embeddings=4096, attn_implementation="sdpa", norm_topk_prob=True))
        got = measure(lambda m=model, i=ids: m(input_ids=i, labels=i).loss, list(model.model.layers))[1]
        rows.append({"model": "hf-qwen3-moe", "batch": batch, "seq": seq, "measured": got,
                     "predicted": bytes_per_token(hf_qwen3_moe(qwen)) * batch * seq + per_layer_qwen3_moe(16)})
        for experts in (0, 8):
            cfg = GPTConfig(vocab_size=512, seq_len=seq, num_layers=3, hidden_size=256, num_heads=8,
                            ffn_hidden_size=1024, num_experts=experts, moe_top_k=2, moe_ffn_hidden_size=256)
            gpt = GPT(cfg)
            tokens, targets = batches(cfg, batch, 1, seed=0, device=torch.device("cpu"))[0]
            got = measure(lambda g=gpt, x=tokens, y=targets: g(x, y), list(gpt.blocks))[1]
            dims = example_gpt_dims(experts)
            rows.append({"model": "example-gpt" + ("-moe" if experts else ""), "batch": batch, "seq": seq,
                         "measured": got, "predicted": bytes_per_token(example_gpt(dims)) * batch * seq})
    return rows


def formulas() -> list[dict[str, Any]]:
    """Per layer, one micro-batch: the planner's Megatron-Core/TE estimate, Megatron-LM's and Korthikanti's."""
    from checks.model.shape import Parallelism
    from checks.plan.memory import Training, layer_bytes
    from checks.plan.presets import PRESETS

    out = []
    for name in ("llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b"):
        preset = PRESETS[name]
        for tp, seq in ((1, 4096), (8, 8192)):
            par = Parallelism(tensor=tp, expert=preset.parallelism.expert)
            t = Training(preset.shape, par, seq_length=seq, micro_batch_size=1, sequence_parallel=tp > 1)
            layer = preset.shape.num_layers - 1  # an MoE layer where the model has them
            s, b, h, a = seq, 1, preset.shape.hidden_size, preset.shape.num_attention_heads
            f = preset.shape.ffn_hidden_size if preset.shape.moe is None else preset.shape.moe.ffn_hidden_size
            out.append({
                "model": name, "tp": tp, "seq": seq,
                "planner": layer_bytes(t, layer),
                # NVIDIA/Megatron-LM@d98e8a64:megatron/training/theoretical_memory_usage.py:314-316, / t.
                "megatron_lm": s * b * h * (18 + 4 * f / h) / tp,
                # Korthikanti et al. 2022, Table 2, with sequence parallelism: sbh/t (34 + 5as/h).
                "korthikanti": s * b * h / tp * (34 + 5 * a * s / h),
            })
    return out


def _largest_error(rows: list[dict[str, Any]]) -> float:
    return max(abs(r["predicted"] - r["measured"]) / r["measured"] for r in rows)


def markdown(data: dict[str, Any], planner: dict[str, Any] | None = None,
             after_step: dict[str, Any] | None = None) -> str:
    """The report from the activation measurements, the planner's validation against published jobs and its
    memory after a step against Megatron-LM's functional tests (``planner``, ``after_step``: the data of
    ``reference/benchmarks/planner_validation.json`` and ``after_step_memory.json``, read when not given)."""
    import json

    if planner is None:
        planner = json.loads(PLANNER_ARTIFACT.read_text(encoding="utf-8"))
    if after_step is None:
        after_step = json.loads(AFTER_STEP_ARTIFACT.read_text(encoding="utf-8"))
    rows = data["validation"]
    worst = _largest_error(rows)
    dirty = " + local changes" if data["revision"]["git_dirty"] else ""
    lines = [
        "# The memory model and its measurements",
        "",
        "Generated by `tools/memory_report.py` from `reference/benchmarks/activation_validation.json` "
        f"(checker commit {data['revision']['git_commit'][:10]}{dirty}, "
        f"{data['revision']['date']}). Load this to know how far the planner's numbers can be trusted.",
        "",
        "## What the planner adds up, per GPU",
        "",
        "- **Weights and gradients**: the parameters of the GPU's pipeline stage (tensor- and expert-parallel "
        "sizes applied; `checks/model/parameters.py`, checked name by name against megatron-core's own "
        "`GPTModel` by `tests/test_model.py`), times 2 bytes (bf16) and the main-gradient dtype.",
        "- **Optimizer state**: the distributed optimizer's shard on the most loaded data-parallel rank, laid "
        "out as its gradient buffer is (reverse order, 64-element alignment, buckets padded to "
        "`lcm(dp, 128)`), with dense and expert parameters sharded over their own groups; 12 bytes per "
        "element (fp32 main copy and moments) or the precision-aware optimizer's dtypes. With "
        "`optimizer_cpu_offload`, `HybridDeviceOptimizer`'s greedy whole-tensor split of that shard: "
        "16 host bytes per offloaded element, 12 GPU bytes per element left behind. `tests/test_plan.py` "
        "checks these numbers element by element against a brute-force layout.",
        "- **Activations**: per layer, the storages saved for backward (`checks/plan/activations.py`; "
        "`reference/activation-terms.md` lists every one for each preset), times the micro-batches the "
        "pipeline schedule keeps in flight, less what each offload mechanism moves; plus the embedding's and "
        "the loss's.",
        "- **Between steps** (`held_inputs_bytes`, not in the peak): with pipeline parallelism every model "
        "chunk but the model's first keeps its last micro-batch's received input, and the gradient backward "
        "left on it, until its next forward: two tensors of the pipeline's shape per chunk (eight pairs on the "
        "last stage of Megatron-LM's interleaved 7B test). What is allocated after a step is the model states plus "
        "these.",
        "- **Step time** (`checks/plan/throughput.py`): per stage, FLOPs with recompute at a published "
        "efficiency, the pipeline bubble, exposed tensor-, expert- and data-parallel communication, the "
        "optimizer step and what offloading cannot hide. An eager MoE layer takes at least the host's time to "
        "issue it (its dispatcher waits for the token counts on the host): a floor per layer and micro-batch "
        "fitted to one published eager job, which sets the step of small-batch MoE jobs. A deterministic-mode "
        "job takes its efficiency from deterministic runs on its own system where there are any (Megatron-LM's "
        "interleaved 7B functional test on H100 and on GB200, each fitted; `checks/data/efficiency.json`).",
        "",
        "## Activation profiles against measurement",
        "",
        "Real layers on CPU (fp32, random weights, no downloads), measured by saved-tensor accounting "
        "(`benchmarks/saved_tensors.py`): bytes of the second layer, one micro-batch. Hidden 256, 8 heads, "
        "2 KV heads (Llama, Qwen3-MoE: 16 experts, top-4).",
        "",
        "| model | micro-batch | sequence | measured bytes | predicted bytes | error |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        error = (r["predicted"] - r["measured"]) / r["measured"]
        lines.append(f"| {r['model']} | {r['batch']} | {r['seq']} | {r['measured']:,} | {round(r['predicted']):,} | "
                     f"{error:+.2%} |")
    lines += [
        "",
        f"Largest error: {worst:.2%} (the tests allow 3% at every point).",
        "",
        "## Megatron-Core with Transformer Engine, beside the published formulas",
        "",
        "The planner's default profile (`megatron_te`) cannot be measured without a GPU; it is derived from "
        "the sources its docstring cites. Per layer and micro-batch of 1, bf16, flash attention, no dropout, "
        "sequence parallelism with TP > 1; Megatron-LM's `theoretical_memory_usage` "
        "(`s·b·h·(18 + 4f/h)/t`, dense layer formula, `f` the layer's MLP width) and Korthikanti et al. "
        "(2022), Table 2 (`s·b·h/t·(34 + 5as/h)`, which assumes dropout and unfused attention) on the same "
        "inputs:",
        "",
        "| model (layer) | TP | sequence | planner | Megatron-LM formula | Korthikanti et al. |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["formulas"]:
        lines.append(f"| {r['model']} | {r['tp']} | {r['seq']} | {r['planner'] / 2**20:,.0f} MiB | "
                     f"{r['megatron_lm'] / 2**20:,.0f} MiB | {r['korthikanti'] / 2**20:,.0f} MiB |")
    lines += [
        "",
        "The planner counts what the formulas leave out: grouped-query attention's smaller k and v, the "
        "SwiGLU input (twice the MLP width), rotary embedding's new q and k, and, in MoE layers, the routed "
        "rows (top-k copies of each token); it drops what flash attention does not keep (the scores). "
        "Neither formula models offloading.",
        "",
        *planner_section(planner),
        *after_step_section(after_step),
        "## Known limits",
        "",
        "- Multi-latent attention (DeepSeek) and Mamba-2 layers (Nemotron-H) are estimates from the module "
        "structure, not measured; multi-token prediction is not modelled.",
        "- Throughput: the step-time model's errors on measured jobs are in the table above; a job unlike "
        "every case there (another model family, hardware or precision) has no validated error band.",
        "",
    ]
    return "\n".join(lines)


def planner_section(planner: dict[str, Any]) -> list[str]:
    """The planner against published jobs: the table of ``reference/benchmarks/planner_validation.json``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("planner_validation", Path(__file__).with_name(
        "planner_validation.py"))
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = tool  # its dataclasses look their module up while it is defined
    spec.loader.exec_module(tool)
    bounds = ", ".join(f"{kind} ±{bound:g}%" for kind, bound in planner["bounds_pct"].items() if bound is not None)
    worst = "; ".join(f"{kind} {w['error_pct']:+.2f}% (`{w['case']}`" + (f", stage {w['stage']}" if "stage" in w
                                                                            else "") + ")"
                      for kind, w in planner["summary"]["largest_errors"].items())
    outside = planner["summary"]["outside_bounds"]
    lines = [
        "## The planner against published jobs",
        "",
        "Generated from `reference/benchmarks/planner_validation.json` (`python tools/planner_validation.py`; "
        "the cases, each value with its source line, are in `tools/data/published_cases.json`). Each case is "
        "planned as a user would give it (the command is in the artifact) and compared per metric: model states "
        "(memory allocated after a step, against weights + gradients + optimizer state + the pipeline inputs each "
        "model chunk keeps, `held_inputs_bytes`), peak, what optimizer "
        "offload saves, the step time and the time offload adds. Error is prediction / published - 1; GB are "
        "10^9 bytes. Where the source does not say which pipeline stage it measured, every stage is shown "
        f"(s0, s1, ...). (fitted): a planner constant was fitted to that metric of that case, so its error is "
        f"not a prediction. Bounds: {bounds}. Step-time model: {', '.join(planner['step_model']) or 'none'}.",
        "",
        tool.markdown_table(planner),
        "",
        f"Largest errors: {worst}.",
        "",
    ]
    if outside:
        lines += [f"Outside the bounds: {len(outside)} case metrics ("
                  + ", ".join(f"`{o['case']}` {o['metric']} {o['error_pct']:+.1f}%" for o in outside) + ").", ""]
    if planner["unexpressed"]:
        lines += ["Published cases the planner does not express, with its reason:", "",
                  tool.markdown_unexpressed(planner), ""]
    return lines


def after_step_section(artifact: dict[str, Any]) -> list[str]:
    """Memory after a step against Megatron-LM's functional tests: ``reference/benchmarks/after_step_memory.json``."""
    summary = artifact["summary"]
    rows = [f"| {layout.replace('_', ' ')} | {s['tests']} | {s['median_residual_mib']:.2f} | "
            f"{s['median_residual_without_held_inputs_mib']:.2f} |" for layout, s in summary["by_layout"].items()]
    return [
        "## Memory after a step against Megatron-LM's functional tests",
        "",
        "Generated from `reference/benchmarks/after_step_memory.json` (`" + artifact["command"] + "`, "
        f"NVIDIA/Megatron-LM@{artifact['megatron_lm'][:8]}). Each GPT functional test with an H100 golden of "
        "`mem-allocated-bytes` is planned on its recipe's GPUs, and the golden at the first logged step (last "
        "pipeline stage) is compared with the planner's bytes between steps. The models are small (hidden 512 "
        "for most), so what the planner leaves out shows: the median residual, golden less prediction, per "
        f"layout. {summary['planned']} tests planned; {summary['refused']} refused by the planner and "
        f"{summary['skipped']} skipped by the tool, each with its reason in the artifact.",
        "",
        "| layout | tests | median residual, MiB | without the held inputs, MiB |",
        "|---|---|---|---|",
        *rows,
        "",
        "With the held inputs the residual is about the same constant in every layout; without them it grows with "
        "the chunks that receive an input. The constant is not modelled: by its size it is the cuBLAS workspaces "
        "Transformer Engine and PyTorch allocate, unconfirmed.",
        "",
    ]


def main() -> int:
    from benchmarks.common import write_artifact

    validation = measure_all()
    worst = _largest_error(validation)
    data = {"validation": validation, "formulas": formulas(),
            # What card.yaml cites: a dotted path into this file, so the number cannot drift from it.
            "summary": {"points": len(validation), "largest_relative_error": round(worst, 6)}}
    data = write_artifact(ARTIFACT, data)
    REPORT.write_text(markdown(data))
    print(f"wrote {REPORT.relative_to(ROOT)}; largest activation error {worst:.2%}")
    return 0 if worst <= 0.03 else 1


if __name__ == "__main__":
    raise SystemExit(main())
