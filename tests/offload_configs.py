"""Generated offload configs: Megatron Bridge override sets over one megatron-core version's offload fields.

Shared by the differential test (tests/test_differential_properties.py, against the installed megatron-core)
and the fix-convergence test (tests/test_fix_convergence.py, over every version the checker knows). No torch,
no megatron-core: only the checker's field tables.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from checks.versions import profile, version_key


def _list(values: list[str]) -> str:
    return "[" + ",".join(values) + "]"


def offload_modules(version: str) -> list[str]:
    """The fine-grained module names ``version`` accepts (besides the recompute-only ones)."""
    names = ["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"]
    if version_key(version) >= version_key("0.19"):
        names.append("fused_group_mlp")
    if version == "main":
        names.append("gdp_qkv")
    return names


@st.composite
def bridge_overrides(draw: Any, version: str) -> list[str]:
    """Hydra overrides for a Bridge config, over the offload fields megatron-core ``version`` has."""
    prof = profile(version)

    def has(section: str, name: str) -> bool:
        return prof.field(section, name) is not None

    def at_least(release: str) -> bool:
        return version_key(version) >= version_key(release)

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
    stash = has("model", "moe_paged_stash") and moe and draw(st.integers(0, 4)) == 0
    if stash:  # and what paged stashing needs in 0.18 and 0.19
        sets += ["model.moe_paged_stash=true", "model.moe_expert_rank_capacity_factor=1.0",
                 "model.moe_token_dispatcher_type=flex", "model.moe_flex_dispatcher_backend=hybridep",
                 "model.use_transformer_engine_op_fuser=true"]

    # recompute
    # mostly settings megatron-core accepts, so that the offload checks after them are reached (ACT011 has the rest)
    granularity = draw(st.sampled_from(["none", "none", "selective", "full"] * 4 + ["bogus"]))
    if granularity == "selective":
        pool = ["core_attn", "mlp", "layernorm"] + (["moe_act", "moe"] if moe else [])
        sets.append("model.recompute_granularity=selective")
        sets.append(f"model.recompute_modules={_list(draw(st.lists(st.sampled_from(pool), min_size=1, unique=True)))}")
        if draw(st.integers(0, 9)) == 0:
            sets.append("model.recompute_num_layers=1")
    elif granularity in ("full", "bogus"):
        method = draw(st.sampled_from(["uniform", "block"] * 5 + ["null", "bogus"]))
        layers = draw(st.sampled_from(["1"] * 10 + ["null"]))
        sets += [f"model.recompute_granularity={granularity}", f"model.recompute_method={method}",
                 f"model.recompute_num_layers={layers}"]

    # fine-grained activation offloading
    if has("model", "fine_grained_activation_offloading") and draw(st.booleans()):
        sets.append(f"model.fine_grained_activation_offloading={draw(st.booleans())}".lower())
        pool = offload_modules(version) * 3 + ["bogus", "core_atn"]  # mostly valid names, so later checks are reached
        modules = draw(st.one_of(st.none(), st.lists(st.sampled_from(pool), max_size=3, unique=True)))
        sets.append("model.offload_modules=null" if modules is None else f"model.offload_modules={_list(modules)}")
        sets.append(f"model.min_offloaded_tensor_size={draw(st.sampled_from([-1, 0, 2048, 1048576]))}")
        for name, values in (("activation_offload_fraction", [-0.5, 0.5, 1.0, 1.5]),
                             ("delta_offload_bytes_across_pp_ranks", [-1, 0, 1000]),
                             ("fine_grained_offloading_max_inflight_offloads", ["null", -1, 0, 1]),
                             ("use_transformer_engine_op_fuser", ["true", "false"])):
            if has("model", name) and draw(st.booleans()) and not (stash and "op_fuser" in name):
                sets.append(f"model.{name}={draw(st.sampled_from(values))}")

    # CUDA graphs (before 0.16 megatron-core refuses them with any recomputation, not an offload rule)
    graphs_allowed = at_least("0.16") or granularity == "none"
    if has("model", "cuda_graph_impl") and not graphs_allowed:
        pass
    elif has("model", "cuda_graph_impl"):
        # full_iteration exists from 0.18; asking for it earlier with offloading on is an offload rule (C6)
        offloading = any(x in sets for x in ("model.cpu_offloading=true",
                                             "model.fine_grained_activation_offloading=true"))
        impls = ["local", "transformer_engine"] + (["full_iteration"] if at_least("0.18") or offloading else [])
        if granularity == "full":  # full recompute allows only full-iteration graphs (not an offload rule)
            impls = [i for i in impls if i == "full_iteration"]
        impl = draw(st.sampled_from(["none", "none", "none", *impls]))
        sets.append(f"model.cuda_graph_impl={impl}")
        if impl in ("local", "transformer_engine"):
            scopes = ["attn", "mlp"] + (["moe_router", "moe"] if moe else [])
            if not at_least("0.16"):  # a single string scope before 0.16
                sets.append(f"model.cuda_graph_scope={draw(st.sampled_from(['full', 'attn']))}")
            else:
                key = "cuda_graph_modules" if at_least("0.18") else "cuda_graph_scope"
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
    if has("optimizer", "decoupled_weight_decay") and draw(st.integers(0, 3)) == 0:
        sets.append("optimizer.decoupled_weight_decay=false")
    if draw(st.integers(0, 3)) == 0:
        dtype = draw(st.sampled_from(["main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"]))
        sets.append(f"optimizer.{dtype}={'fp16' if dtype == 'main_params_dtype' else 'bf16'}")
    return sets
