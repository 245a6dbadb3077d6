"""Property-based differential test: generated offload configs, the checker against megatron-core.

Hypothesis generates Megatron Bridge override sets over the offload field space of the installed
megatron-core (layer-level and fine-grained activation offloading, optimizer offloading, and the
pipeline, recompute and CUDA-graph settings they interact with). For each one, megatron-core
raises for an offload reason if and only if the checker reports an upstream-backed error, with the
same message (``oracle.compare``). Configs megatron-core refuses for unrelated reasons are avoided
by the generator where it can, and counted where it cannot; the summary line reports every count.

Against another megatron-core release (Python 3.12, or 3.11 with the config classes only):

    pip install torch==2.13.0 pyyaml numpy packaging six regex pydantic triton pytest hypothesis jsonschema
    pip install --no-deps --ignore-requires-python --target /tmp/mc/0.19.2 megatron-core==0.19.2
    PYTHONPATH=/tmp/mc/0.19.2:. DIFFERENTIAL_EXAMPLES=2000 python -m pytest tests/test_differential_properties.py -s

(reference/differential.md records the runs against 0.14.0 to 0.19.2.)
"""

from __future__ import annotations

import collections
import contextlib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks.loaders import Request, load
from checks.versions import profile, version_key

oracle = pytest.importorskip("oracle")  # needs torch and megatron-core
VERSION = oracle.VERSION
PROFILE = profile(VERSION)
EXAMPLES = int(os.environ.get("DIFFERENTIAL_EXAMPLES", "2000"))
COUNTS: collections.Counter[str] = collections.Counter()
RAISED: set[str] = set()  # megatron-core's offload messages seen across the generated configs


def _has(section: str, name: str) -> bool:
    return PROFILE.field(section, name) is not None


def _at_least(version: str) -> bool:
    return version_key(VERSION) >= version_key(version)


def _modules() -> list[str]:
    names = ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"]
    if _at_least("0.19"):
        names.append("fused_group_mlp")
    if VERSION == "main":
        names.append("gdp_qkv")
    return names


def _list(values: list[str]) -> str:
    return "[" + ",".join(values) + "]"


@st.composite
def bridge_overrides(draw: Any) -> list[str]:
    """Hydra overrides for a Bridge config, over the offload fields this megatron-core has."""
    # No dropout: megatron-core refuses dropout with graphed recompute, which is not an offload matter.
    sets: list[str] = ["model.attention_dropout=0.0", "model.hidden_dropout=0.0"]
    layers = draw(st.integers(2, 8))
    sets.append(f"model.num_layers={layers}")
    moe = draw(st.booleans())
    if moe:  # moe_act recompute needs grouped GEMM; MoE refuses linear biases
        sets += ["model.num_moe_experts=4", "model.moe_grouped_gemm=true", "model.add_bias_linear=false"]

    # layer-level activation offloading
    if draw(st.booleans()):
        sets.append(f"model.cpu_offloading={draw(st.booleans())}".lower())
        sets.append(f"model.cpu_offloading_num_layers={draw(st.integers(-1, layers + 1))}")
    sets.append(f"model.pipeline_model_parallel_size={draw(st.sampled_from([1, 1, 2]))}")
    stash = _has("model", "moe_paged_stash") and moe and draw(st.integers(0, 4)) == 0
    if stash:  # and what paged stashing needs in 0.18 and 0.19
        sets += ["model.moe_paged_stash=true", "model.moe_expert_rank_capacity_factor=1.0",
                 "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
                 "model.use_transformer_engine_op_fuser=true"]

    # recompute
    granularity = draw(st.sampled_from(["none", "none", "selective", "full"]))
    if granularity == "selective":
        pool = ["core_attn", "mlp", "layernorm"] + (["moe_act", "moe"] if moe else [])
        sets.append("model.recompute_granularity=selective")
        sets.append(f"model.recompute_modules={_list(draw(st.lists(st.sampled_from(pool), min_size=1, unique=True)))}")
    elif granularity == "full":
        method = draw(st.sampled_from(["uniform", "block"]))
        sets += ["model.recompute_granularity=full", f"model.recompute_method={method}",
                 "model.recompute_num_layers=1"]

    # fine-grained activation offloading
    if _has("model", "fine_grained_activation_offloading") and draw(st.booleans()):
        sets.append(f"model.fine_grained_activation_offloading={draw(st.booleans())}".lower())
        pool = _modules() * 3 + ["bogus", "core_atn"]  # mostly valid names, so later checks are reached
        modules = draw(st.one_of(st.none(), st.lists(st.sampled_from(pool), max_size=3, unique=True)))
        sets.append("model.offload_modules=null" if modules is None else f"model.offload_modules={_list(modules)}")
        sets.append(f"model.min_offloaded_tensor_size={draw(st.sampled_from([-1, 0, 2048, 1048576]))}")
        for name, values in (("activation_offload_fraction", [-0.5, 0.5, 1.0, 1.5]),
                             ("delta_offload_bytes_across_pp_ranks", [-1, 0, 1000]),
                             ("fine_grained_offloading_max_inflight_offloads", ["null", -1, 0, 1]),
                             ("use_transformer_engine_op_fuser", ["true", "false"])):
            if _has("model", name) and draw(st.booleans()) and not (stash and "op_fuser" in name):
                sets.append(f"model.{name}={draw(st.sampled_from(values))}")

    # CUDA graphs (before 0.16 megatron-core refuses them with any recomputation, not an offload rule)
    graphs_allowed = _at_least("0.16") or granularity == "none"
    if _has("model", "cuda_graph_impl") and not graphs_allowed:
        pass
    elif _has("model", "cuda_graph_impl"):
        # full_iteration exists from 0.18; asking for it earlier with offloading on is an offload rule (C6)
        offloading = any(x in sets for x in ("model.cpu_offloading=true",
                                             "model.fine_grained_activation_offloading=true"))
        impls = ["local", "transformer_engine"] + (["full_iteration"] if _at_least("0.18") or offloading else [])
        if granularity == "full":  # full recompute allows only full-iteration graphs (not an offload rule)
            impls = [i for i in impls if i == "full_iteration"]
        impl = draw(st.sampled_from(["none", "none", "none", *impls]))
        sets.append(f"model.cuda_graph_impl={impl}")
        if impl in ("local", "transformer_engine"):
            scopes = ["attn", "mlp"] + (["moe_router", "moe"] if moe else [])
            if not _at_least("0.16"):  # a single string scope before 0.16
                sets.append(f"model.cuda_graph_scope={draw(st.sampled_from(['full', 'attn']))}")
            else:
                key = "cuda_graph_modules" if _at_least("0.18") else "cuda_graph_scope"
                chosen = draw(st.lists(st.sampled_from(scopes), max_size=2, unique=True))
                sets.append(f"model.{key}={_list(chosen)}")
            sets.append(f"model.cuda_graph_warmup_steps={draw(st.sampled_from([0, 3]))}")
    elif graphs_allowed and draw(st.integers(0, 5)) == 0:
        sets.append("model.enable_cuda_graph=true")

    # optimizer offloading and the precision-aware optimizer
    if draw(st.booleans()):
        sets.append(f"optimizer.optimizer_cpu_offload={draw(st.booleans())}".lower())
        if draw(st.booleans()):
            sets.append(f"optimizer.optimizer_offload_fraction={draw(st.sampled_from([-0.5, 0.0, 0.3, 1.0, 1.5]))}")
    sets.append(f"optimizer.optimizer={draw(st.sampled_from(['adam', 'adam', 'sgd']))}")
    distopt = draw(st.booleans())
    sets += [f"optimizer.use_distributed_optimizer={str(distopt).lower()}",
             f"ddp.use_distributed_optimizer={str(distopt).lower()}"]
    sets.append(f"optimizer.use_precision_aware_optimizer={draw(st.booleans())}".lower())
    if _has("optimizer", "decoupled_weight_decay") and draw(st.integers(0, 3)) == 0:
        sets.append("optimizer.decoupled_weight_decay=false")
    if draw(st.integers(0, 3)) == 0:
        dtype = draw(st.sampled_from(["main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"]))
        sets.append(f"optimizer.{dtype}={'fp16' if dtype == 'main_params_dtype' else 'bf16'}")
    return sets


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(overrides=bridge_overrides())
def _agree(overrides: list[str]) -> None:
    COUNTS["generated"] += 1
    (cfg,) = load(Request((), tuple(overrides), None, "bridge", VERSION, assume_defaults=True))
    try:
        verdict = oracle.compare(cfg)
    except oracle.UnrelatedRejection:
        COUNTS["rejected for other reasons"] += 1
        return
    for stage, raised in verdict.items():
        state = "no verdict" if raised is oracle.UNKNOWN else "raised" if raised else "accepted"
        COUNTS[f"{stage} {state}"] += 1
        if raised and raised is not oracle.UNKNOWN:
            RAISED.add(raised.message)


def test_generated_configs_agree_with_megatron_core() -> None:
    COUNTS.clear()
    RAISED.clear()
    _agree()
    # the hand-written cases of test_differential.py reach the checks that need many preconditions at once
    from test_differential import ARGV_VARIANTS, CASES, _configs

    cases = [c for e, v in CASES for c in _configs(e, v)] + \
        [c for a in ARGV_VARIANTS for c in load(Request((), (), a, "megatron-lm", VERSION))]
    for cfg in cases:
        with contextlib.suppress(oracle.UnrelatedRejection):
            RAISED.update(r.message for r in oracle.megatron_verdict(cfg).values() if r and r is not oracle.UNKNOWN)
    summary = ", ".join(f"{key}: {value}" for key, value in sorted(COUNTS.items()))
    print(f"\ndifferential against megatron-core {oracle.MCORE_VERSION}: {summary}")
    assert COUNTS["generated"] >= EXAMPLES
    compared = COUNTS["generated"] - COUNTS["rejected for other reasons"]
    assert compared >= 0.75 * COUNTS["generated"], summary  # the generator must mostly reach the offload checks
    assert COUNTS["model raised"] > 0.1 * compared and COUNTS["optimizer raised"] > 0, summary
    never = [m for m in oracle.registered_messages() if not any(oracle.same_check(m, r) for r in RAISED)]
    print(f"megatron-core offload checks raised: {len(oracle.registered_messages()) - len(never)} of "
          f"{len(oracle.registered_messages())}" + (f"; never reached: {never}" if never else ""))
    assert not never
