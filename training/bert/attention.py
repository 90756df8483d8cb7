"""Attention over packed rows: each token attends only to tokens of its own sequence.

Implementations (chosen once at start by `training.common.backends.choose_attention`):
- `sdpa`: PyTorch scaled_dot_product_attention with a block-diagonal boolean mask per row. Runs
  everywhere (CPU included) and supports attention dropout; it computes the masked-out blocks too.
- `sdpa_cudnn`: the same call with cuDNN's kernel first in SDPA's priority list (NVIDIA GPUs). For a
  mask with dropout SDPA otherwise picks the memory-efficient kernel, 2.3x slower on an H100
  (perf/attention.py bert, 2026-11-22: 1.51 vs 3.44 ms per layer, fwd+bwd).
- `flash_attn`: flash-attn's varlen kernel over the flattened rows (`cu_seqlens`), no padding work.
- `torch_flash`: the FlashAttention-2 varlen kernel PyTorch itself ships (ATen's
  `_flash_attention_forward` with `cu_seqlens`, CUDA), the same work as flash-attn's: attention within each
  sequence only, with dropout. 1.32 vs 1.56 ms per layer for cuDNN's masked kernel on an H100
  (perf/attention.py bert, 2026-11-22). PyTorch's public `varlen_attn` wraps it without dropout.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

IMPLS = ("sdpa", "sdpa_cudnn", "flash_attn", "torch_flash")
_CUDNN_FIRST = [SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def block_diagonal_mask(seq_ids: torch.Tensor) -> torch.Tensor:
    """[B, L] sequence ids -> [B, 1, L, L] bool mask (True = may attend). Padding attends to padding so
    that no row of the softmax is empty; its outputs are never read."""
    return seq_ids[:, None, :, None] == seq_ids[:, None, None, :]


def packed_attention(impl: str, q, k, v, b, dropout_p: float = 0.0) -> torch.Tensor:
    """q, k, v: [B, L, heads, head_dim] -> context [B, L, heads, head_dim]."""
    B, L, heads, dim = q.shape
    if impl in ("sdpa", "sdpa_cudnn"):
        with sdpa_kernel(_CUDNN_FIRST, set_priority=True) if impl == "sdpa_cudnn" else nullcontext():
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                attn_mask=block_diagonal_mask(b.seq_ids), dropout_p=dropout_p,
            )  # fmt: skip
        return out.transpose(1, 2)
    # max_q = max_k = L for the varlen kernels: one value for every batch, so compiled graphs stay few
    flat = [t.reshape(B * L, heads, dim) for t in (q, k, v)]
    if impl == "flash_attn":
        from flash_attn import flash_attn_varlen_func

        out = flash_attn_varlen_func(*flat, b.cu_seqlens, b.cu_seqlens, L, L, dropout_p)
        return out.view(B, L, heads, dim)
    if impl == "torch_flash":
        out = torch.ops.aten._flash_attention_forward(
            *flat, b.cu_seqlens, b.cu_seqlens, L, L, dropout_p, False, False
        )
        return out[0].view(B, L, heads, dim)
    raise ValueError(f"unknown attention implementation {impl!r} (known: {', '.join(IMPLS)})")
