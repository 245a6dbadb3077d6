"""FGA014: which norms Transformer Engine fuses away, so that `attn_norm`/`mlp_norm` offload nothing.

megatron-core offloads a norm only when the layer's norm is not an `IdentityOp`
(NVIDIA/Megatron-LM@d98e8a64:megatron/core/transformer/transformer_layer.py:1547-1555). The TE layer spec makes the
input norm an `IdentityOp` for standard attention (the norm lives in `linear_qkv`) and for multi-latent attention
with `mla_down_proj_fusion` (megatron/core/models/gpt/gpt_layer_specs.py:257-259), but keeps a real `TENorm` for
multi-latent attention without it (gpt_layer_specs.py:296); the experimental-attention spec keeps it for MLA and DSA
(megatron/core/models/gpt/experimental_attention_variant_module_specs.py:143, 545-548). The pre-MLP norm is real
only in MoE layers (gpt_layer_specs.py:313, 336).
"""

from __future__ import annotations

from collections.abc import Callable

from checks.engine import Finding
from tests.conftest import check_argv

_MLM = ("--num-layers 4 --hidden-size 256 --num-attention-heads 4 --transformer-impl transformer_engine "
        "--fine-grained-activation-offloading --offload-modules attn_norm mlp_norm core_attn ")
_BRIDGE = ("model:\n  transformer_impl: transformer_engine\n  fine_grained_activation_offloading: true\n"
           "  offload_modules: [attn_norm, core_attn]\n{extra}env_vars:\n  NVTE_CPU_OFFLOAD_V1: 1\n")


def fga014(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.rule == "FGA014"]


def test_mla_keeps_a_real_input_norm() -> None:
    """The shape of Megatron-LM's own fine-grained-offloading CI test (an MLA MoE model offloading attn_norm and
    mlp_norm): both norms are real modules there, so nothing is reported and no fix removes them."""
    found = fga014(check_argv(_MLM + "--multi-latent-attention --num-experts 8", version="main"))
    assert found == []


def test_standard_attention_fuses_the_input_norm_and_a_dense_mlp_the_pre_mlp_norm() -> None:
    [finding] = fga014(check_argv(_MLM + "--num-experts 0", version="main"))
    assert "['attn_norm', 'mlp_norm']" in finding.message
    assert finding.patch == {"--offload-modules": ["core_attn"]}


def test_mla_down_projection_fusion_fuses_the_input_norm() -> None:
    [finding] = fga014(check_argv(_MLM + "--multi-latent-attention --num-experts 8 --mla-down-proj-fusion",
                                  version="main"))
    assert "['attn_norm']" in finding.message


def test_dsa_keeps_a_real_input_norm() -> None:
    found = fga014(check_argv(_MLM + "--num-experts 8 --experimental-attention-variant dsa", version="main"))
    assert found == []


def test_a_partial_config_that_does_not_say_is_told_so(check: Callable[..., list[Finding]]) -> None:
    """A partial Bridge config leaves the attention type to the recipe: the warning states the condition and
    proposes no patch (removing attn_norm would be wrong for an MLA model)."""
    [finding] = fga014(check(_BRIDGE.format(extra="")))
    assert "config does not say which attention" in finding.message and finding.patch is None
    assert fga014(check(_BRIDGE.format(extra="  multi_latent_attention: true\n"))) == []
    [finding] = fga014(check(_BRIDGE.format(extra="  multi_latent_attention: false\n")))
    assert finding.patch == {"model.offload_modules": ["core_attn"]}


def test_a_bridge_mla_provider_with_down_projection_fusion_fuses_the_input_norm(
        check: Callable[..., list[Finding]]) -> None:
    [finding] = fga014(check(_BRIDGE.format(extra="  multi_latent_attention: true\n  mla_down_proj_fusion: true\n")))
    assert "['attn_norm']" in finding.message
