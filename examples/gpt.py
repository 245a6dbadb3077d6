"""A small GPT, dense or mixture-of-experts, with Megatron-Core's offload regions.

Each block runs its pieces through ``offload.run(kind, key, fn, *args)``: the whole block as layer
``i`` (layer-level offloading) and, inside it, the modules Megatron-Core can offload one by one
(``attn_norm``, ``qkv_linear``, ``core_attn``, ``attn_proj``, ``mlp_norm``, and in MoE layers
``expert_fc1`` and ``moe_act``). With ``offload=NoOffload()`` it is a plain model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from examples.offload.engine import NoOffload, OffloadEngine


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 512
    seq_len: int = 128
    num_layers: int = 4
    hidden_size: int = 128
    num_heads: int = 4
    ffn_hidden_size: int = 512
    num_experts: int = 0  # 0: dense MLPs
    moe_top_k: int = 2
    moe_ffn_hidden_size: int = 256

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in GPT(self).parameters())


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv_linear = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.attn_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def core_attn(self, qkv: torch.Tensor) -> torch.Tensor:
        B, T, C3 = qkv.shape  # batch, sequence, 3 x hidden
        q, k, v = (t.view(B, T, self.num_heads, C3 // 3 // self.num_heads).transpose(1, 2)
                   for t in qkv.split(C3 // 3, dim=2))  # (B, nh, T, hs), views of qkv
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
        return out.transpose(1, 2).reshape(B, T, C3 // 3)

    def forward(self, x: torch.Tensor, offload: Any) -> torch.Tensor:
        qkv = offload.run("module", "qkv_linear", self.qkv_linear, x)
        out = offload.run("module", "core_attn", self.core_attn, qkv)
        return offload.run("module", "attn_proj", self.attn_proj, out)


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, ffn, bias=False)
        self.fc2 = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor, offload: Any) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MoE(nn.Module):
    """Top-k routing over ``num_experts`` MLPs, the experts' fc1 and activation as offload regions."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.top_k = cfg.moe_top_k
        self.router = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList(MLP(cfg.hidden_size, cfg.moe_ffn_hidden_size) for _ in range(cfg.num_experts))

    def forward(self, x: torch.Tensor, offload: Any) -> torch.Tensor:
        B, T, C = x.shape
        tokens = x.reshape(B * T, C)
        probs = F.softmax(self.router(tokens), dim=-1)  # (BT, E)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (BT, k)
        # Permute: the tokens routed to each expert, one after another, as a dispatcher hands them over.
        order = chosen.reshape(-1).argsort(stable=True)  # (BT*k,)
        counts = torch.bincount(chosen.reshape(-1), minlength=len(self.experts)).tolist()
        routed = tokens[order // self.top_k]  # (BT*k, C)
        hidden = offload.run("module", "expert_fc1", self._fc1, routed, counts)  # (BT*k, F)
        hidden = offload.run("module", "moe_act", F.gelu, hidden)
        out = torch.cat([e.fc2(h) for e, h in zip(self._experts(), hidden.split(counts), strict=True)])
        combined = torch.zeros_like(tokens).index_add_(0, order // self.top_k,
                                                       out * weights.reshape(-1)[order].unsqueeze(1))
        return combined.view(B, T, C)

    def _fc1(self, routed: torch.Tensor, counts: list[int]) -> torch.Tensor:
        return torch.cat([e.fc1(t) for e, t in zip(self._experts(), routed.split(counts), strict=True)])

    def _experts(self) -> list[MLP]:
        return [cast(MLP, e) for e in self.experts]


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(cfg.hidden_size)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.LayerNorm(cfg.hidden_size)
        self.mlp: MLP | MoE = MoE(cfg) if cfg.num_experts else MLP(cfg.hidden_size, cfg.ffn_hidden_size)

    def forward(self, x: torch.Tensor, offload: Any) -> torch.Tensor:
        x = x + self.attn(offload.run("module", "attn_norm", self.attn_norm, x), offload)
        return x + self.mlp(offload.run("module", "mlp_norm", self.mlp_norm, x), offload)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.position = nn.Embedding(cfg.seq_len, cfg.hidden_size)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.hidden_size)
        self.output = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor, offload: Any = None) -> torch.Tensor:
        """Mean cross-entropy of predicting ``targets`` (B, T) from ``tokens`` (B, T)."""
        offload = offload or NoOffload()
        T = tokens.shape[1]
        x = self.embedding(tokens) + self.position(torch.arange(T, device=tokens.device))  # (B, T, C)
        for index, block in enumerate(self.blocks):
            x = offload.run("layer", index, block, x, offload)
        logits = self.output(self.final_norm(x))  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def train_step(model: GPT, tokens: torch.Tensor, targets: torch.Tensor,
               engine: OffloadEngine | None) -> torch.Tensor:
    """Forward and backward of one step, under the engine's saved-tensor hooks when there is one; the loss.

    Without an engine the model runs with no hooks at all: the reference that offloading must match.
    """
    if engine is None:
        loss = model(tokens, targets)
        loss.backward()
        return loss
    with engine.forward():
        loss = model(tokens, targets, engine)
    loss.backward()
    engine.end_step()
    return loss


def batches(cfg: GPTConfig, batch_size: int, steps: int, seed: int,
            device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Deterministic token batches: each sequence counts up from a random start, so the model can learn."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        start = torch.randint(0, cfg.vocab_size, (batch_size, 1), generator=generator)
        seq = (start + torch.arange(cfg.seq_len + 1)) % cfg.vocab_size  # (B, T+1)
        out.append((seq[:, :-1].to(device), seq[:, 1:].to(device)))
    return out
