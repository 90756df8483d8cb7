"""The LoRA package's entry and what it applies (`training.lora` hands these names on)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from training.lora import fused


@dataclass(frozen=True)
class LoraSettings:
    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.1  # on the adapter's input, before A
    kernel: str = "pytorch"  # LORA_KERNEL: "auto", dropout and A in one Triton kernel where it checks out
    # on the run's GPU (`fused.choose_kernel`), or "pytorch"


class LoraAdapter(nn.Module):
    """(alpha / rank) * B(A(dropout(x))): `in_features` -> `out_features` through `rank`."""

    def __init__(
        self, in_features: int, out_features: int, settings: LoraSettings, device=None, kernel: bool = False
    ):
        """`kernel`: dropout and A through our Triton kernel where it takes the input (`fused.fits`)."""
        super().__init__()
        self.dropout = nn.Dropout(settings.dropout)
        self.lora_a = nn.Linear(in_features, settings.rank, bias=False, device=device)
        self.lora_b = nn.Linear(settings.rank, out_features, bias=False, device=device)
        self.scale = settings.alpha / settings.rank
        self.kernel = kernel
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """A: Kaiming-uniform (as nn.Linear's, peft's and NeMo's "kaiming"); B: zero."""
        nn.init.kaiming_uniform_(self.lora_a.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_b.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.dropout.p
        if self.kernel and self.training and p > 0 and fused.fits(x, self.lora_a.out_features):
            return self.lora_b(fused.lora_down(x, self.lora_a.weight, p)) * self.scale
        return self.lora_b(self.lora_a(self.dropout(x))) * self.scale

    def delta_weight(self) -> torch.Tensor:
        """The update as a dense (out, in) matrix: what `merge_lora` adds to the base weight."""
        return (self.lora_b.weight.float() @ self.lora_a.weight.float()) * self.scale


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The modules with LoRA slots (`qkv_adapter` and `o_adapter`): the Llama blocks' attention."""
    return [m for m in model.modules() if hasattr(m, "qkv_adapter") and hasattr(m, "o_adapter")]


def apply_lora(model: nn.Module, settings: LoraSettings | None, device: torch.device | None = None) -> str:
    """Freeze every parameter of `model` and give each attention block its two adapters (trainable), their
    dropout and A through the kernel `settings.kernel` picks for `device` (where the model will run; by
    default its parameters' device). Returns what was done ("off" with None: nothing changes)."""
    if settings is None:
        return "off"
    if settings.rank <= 0 or settings.alpha <= 0 or not 0 <= settings.dropout < 1:
        raise ValueError(
            f"LoRA rank {settings.rank}, alpha {settings.alpha}, dropout {settings.dropout}: "
            "rank and alpha must be > 0, dropout in [0, 1)"
        )
    for p in model.parameters():
        p.requires_grad_(False)
    blocks = attention_modules(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__} has no attention module with LoRA slots")
    kernel, chosen = fused.choose_kernel(settings.kernel, device or blocks[0].q_proj.weight.device)
    for attn in blocks:
        at = attn.q_proj.weight.device
        qkv_out = attn.q_proj.out_features + attn.k_proj.out_features + attn.v_proj.out_features
        attn.qkv_adapter = LoraAdapter(attn.q_proj.in_features, qkv_out, settings, at, kernel)
        attn.o_adapter = LoraAdapter(attn.o_proj.in_features, attn.o_proj.out_features, settings, at, kernel)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return (
        f"LoRA rank {settings.rank}, alpha {settings.alpha:g}, dropout {settings.dropout:g} on the fused "
        f"q|k|v and the output projection of {len(blocks)} blocks: {trainable:,} trainable parameters, "
        f"the rest frozen; dropout and A: {chosen}"
    )


def reset_lora(model: nn.Module) -> None:
    """Initialize every adapter (after a meta-device model is materialized: `to_empty` leaves them unset)."""
    for m in model.modules():
        if isinstance(m, LoraAdapter):
            m.reset_parameters()


@torch.no_grad()
def merge_lora(model: nn.Module) -> int:
    """Fold each attention block's adapters into its base weights (q, k, v split by rows) and remove them:
    the merged model computes what the adapted one did (without dropout). Returns how many blocks."""
    blocks = [m for m in attention_modules(model) if m.qkv_adapter is not None]
    for attn in blocks:
        delta = attn.qkv_adapter.delta_weight()
        sizes = [attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features]
        for proj, part in zip((attn.q_proj, attn.k_proj, attn.v_proj), delta.split(sizes)):
            proj.weight += part.to(proj.weight.dtype)
        attn.o_proj.weight += attn.o_adapter.delta_weight().to(attn.o_proj.weight.dtype)
        attn.qkv_adapter = attn.o_adapter = None
    return len(blocks)
