"""Attention over packed rows: each token attends only to tokens of its own sequence.

Implementations (chosen once at start by `choose_attention`):
- `sdpa`: PyTorch scaled_dot_product_attention with a block-diagonal boolean mask per row. Runs
  everywhere (CPU included) and supports attention dropout; it computes the masked-out blocks too.
- `sdpa_cudnn`: the same call with cuDNN's kernel first in SDPA's priority list (NVIDIA GPUs). For a
  mask with dropout SDPA otherwise picks the memory-efficient kernel, 2.3x slower on an H100
  (`python -m perf.attention bert`: 1.51 vs 3.44 ms per layer, fwd+bwd).
- `flash_attn`: flash-attn's varlen kernel over the flattened rows (`cu_seqlens`), no padding work.
- `torch_flash`: the FlashAttention-2 varlen kernel PyTorch itself ships (ATen's
  `_flash_attention_forward` with `cu_seqlens`, CUDA), the same work as flash-attn's: attention within each
  sequence only, with dropout. 1.32 vs 1.56 ms per layer for cuDNN's masked kernel on an H100
  (`python -m perf.attention bert`). PyTorch's public `varlen_attn` wraps it without dropout.
- `cudnn_ragged`: cuDNN's flash attention over the same flattened rows (its ragged layout), with dropout,
  through nvidia-cudnn-frontend (`training.bert.cudnn_attention`), reading q, k, v in place from the fused
  projection's output.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from training.bert.cudnn_attention import cudnn_ragged_fault, ragged_attention
from training.common.backends import OPTIONAL, importable

IMPLS = ("sdpa", "sdpa_cudnn", "flash_attn", "torch_flash", "cudnn_ragged")
_CUDNN_FIRST = [SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def block_diagonal_mask(seq_ids: torch.Tensor) -> torch.Tensor:
    """[B, L] sequence ids -> [B, 1, L, L] bool mask (True = may attend). Padding attends to padding so
    that no row of the softmax is empty; its outputs are never read."""
    return seq_ids[:, None, :, None] == seq_ids[:, None, None, :]


def packed_attention(impl: str, qkv: torch.Tensor, b, dropout_p: float = 0.0) -> torch.Tensor:
    """qkv: [B, L, 3, heads, head_dim] (the fused projection's output) -> context [B, L, heads, head_dim]."""
    B, L, _, heads, dim = qkv.shape
    if impl == "cudnn_ragged":
        out = ragged_attention(qkv.reshape(B * L, 3, heads, dim), b.cu_seqlens, L, dropout_p)
        return out.view(B, L, heads, dim)
    q, k, v = qkv.unbind(2)
    if impl in ("sdpa", "sdpa_cudnn"):
        with sdpa_kernel(_CUDNN_FIRST, set_priority=True) if impl == "sdpa_cudnn" else nullcontext():
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                attn_mask=block_diagonal_mask(b.seq_ids),
                dropout_p=dropout_p,
            )
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


def torch_flash_fault() -> str | None:
    """Why PyTorch's own varlen FlashAttention-2 kernel (BERT's `torch_flash`) cannot run here, or None:
    it needs a CUDA build and a GPU the kernel was built for; a tiny call with dropout tells."""
    if not (torch.cuda.is_available() and torch.version.cuda):
        return "it needs an NVIDIA GPU and a CUDA build of PyTorch"
    try:
        x = torch.randn(8, 2, 64, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, 3, 8], device="cuda", dtype=torch.int32)
        torch.ops.aten._flash_attention_forward(x, x, x, cu, cu, 8, 8, 0.1, False, False)
    except (RuntimeError, AttributeError) as err:
        return f"PyTorch's varlen flash kernel failed on {torch.cuda.get_device_name()}: {err}"[:300]
    return None


def choose_attention(requested: str) -> str:
    """`auto`: flash-attn's varlen kernel on a GPU that has it, else PyTorch's own (`torch_flash`) on
    NVIDIA GPUs where it runs, else PyTorch SDPA with a block mask, preferring cuDNN's kernel on NVIDIA.
    `cudnn_ragged` only when asked for, where its check passes (not `auto`'s: its dropout under CUDA graphs
    is not yet shown right, `BertConfig` refuses it there)."""
    gpu = torch.cuda.is_available()
    device = torch.cuda.current_device() if gpu else 0
    if requested == "auto":
        if gpu and importable(OPTIONAL["flash_attn"]):
            return "flash_attn"
        if gpu and torch.version.cuda:
            return "torch_flash" if torch_flash_fault() is None else "sdpa_cudnn"
        return "sdpa"
    if requested == "flash_attn" and not (gpu and importable(OPTIONAL["flash_attn"])):
        raise ValueError("ATTENTION=flash_attn but flash-attn is not importable on a GPU here")
    if requested == "torch_flash" and (fault := torch_flash_fault()):
        raise ValueError(f"ATTENTION=torch_flash: {fault}")
    if requested == "cudnn_ragged" and (fault := cudnn_ragged_fault(device)):
        raise ValueError(f"ATTENTION=cudnn_ragged: {fault}")
    return requested
