"""Causal attention for the Llama blocks, in one provider: the kernel each backend runs (`attention`), which
backend a run takes (`choose_attention`, from ATTENTION / --attention and what this machine can run), and
the checks that decide it (`cudnn_window_fault` here, `flash4.flash4_fault` for FlashAttention-4: each runs
the kernel on a small case on the GPU and compares it with a reference before it is picked).

- Backends: FlashAttention-4 (`flash4`, the flash-attn-4 package through `training.llama.flash4`) where it
  runs right on an NVIDIA Hopper or Blackwell GPU, else flash-attn (FlashAttention-2) when importable on a
  GPU, else PyTorch's `scaled_dot_product_attention(is_causal=True)` (flash / memory-efficient / cuDNN
  kernels: the seq x seq score matrix is never materialized). Grouped-query attention uses the kernels'
  native GQA support.
- FP8 attention (`FP8_DPA=1`, backend `cudnn_fp8`): cuDNN's FP8 SDPA through `training.llama.fp8_attention`,
  chosen by the build (`build.build_model`), never by ATTENTION.
- Packed rows (several sequences in one row, attention kept inside each) pass `cu_seqlens`, the cumulative
  sequence boundaries as flash-attn's varlen API takes them.
- Sliding-window attention (Mistral 7B: `LlamaShape.sliding_window`): each token attends to itself and the
  window - 1 tokens before it (Hugging Face's Mistral mask). On GPUs through FlashAttention-4 or flash-attn,
  else cuDNN's SDPA with a diagonal band (backend `cudnn`, chosen by `choose_attention` where the
  `nvidia-cudnn-frontend` package's torch op runs and matches the band mask: SDPA itself takes no window),
  else PyTorch's flash kernel (`torch.nn.attention.varlen.varlen_attn` with a window: FlashAttention-2,
  slower on Hopper); on the CPU (or a torch without it) through SDPA with an explicit band mask. Without a
  window, or one no shorter than the sequence, nothing changes.

The model (`training.llama.model.Attention`) calls `attention` with the backend it was built with.
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F

from training.common.backends import OPTIONAL, importable
from training.llama.flash4 import flash4_attention, flash4_fault, kernel_fault
from training.llama.fp8_attention import fp8_attention


def attention(
    q,
    k,
    v,
    backend: str,
    cu_seqlens: torch.Tensor | None = None,
    max_seqlen: int | None = None,
    window: int | None = None,
    fp8_history: torch.Tensor | None = None,
):
    """Causal attention over (batch, seq, heads, head_dim) tensors; k/v may have fewer heads (GQA).
    With `cu_seqlens` (int32 boundaries of the sequences packed in a batch-1 row), attention stays inside each
    sequence: flash-attn's varlen kernel where it is the backend; on NVIDIA GPUs PyTorch's own varlen
    FlashAttention-2 (the kernel BERT's `torch_flash` runs); elsewhere one causal SDPA call per sequence.
    A row holding one sequence (the MLCommons GovReport rows) takes the plain causal path. With `window`,
    each token sees only the `window` most recent tokens (itself included). `fp8_history`: the layer's amax
    history under FP8 attention (`training.llama.fp8_attention`)."""
    if cu_seqlens is not None and cu_seqlens.numel() == 2:
        cu_seqlens = None  # one sequence: plain causal attention
    if window is not None and cu_seqlens is not None:
        raise NotImplementedError("a sliding window over packed rows")
    if backend == "cudnn_fp8":  # FP8_DPA (`training.llama.fp8_attention`); the build refuses it with a window
        return fp8_attention(q, k, v, cu_seqlens, max_seqlen, fp8_history)
    if window is not None and window < q.shape[1]:
        return windowed_attention(q, k, v, window, backend)
    if backend == "flash4":
        return flash4_attention(q, k, v, cu_seqlens, max_seqlen)
    if backend == "flash_attn":
        from flash_attn import flash_attn_func, flash_attn_varlen_func

        if cu_seqlens is None:
            return flash_attn_func(q, k, v, causal=True)
        max_seqlen = max_seqlen or int(cu_seqlens.diff().max())
        out = flash_attn_varlen_func(
            q[0], k[0], v[0], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True
        )
        return out.unsqueeze(0)
    gqa = k.shape[2] != q.shape[2]
    if cu_seqlens is None:
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=gqa
        )
        return out.transpose(1, 2)
    if q.is_cuda and torch.version.cuda:  # FlashAttention-2's varlen kernel, GQA native
        max_seqlen = max_seqlen or int(cu_seqlens.diff().max())
        cu = cu_seqlens.to(torch.int32)
        out = torch.ops.aten._flash_attention_forward(
            q[0], k[0], v[0], cu, cu, max_seqlen, max_seqlen, 0.0, True, False
        )[0]
        return out.unsqueeze(0)
    # one causal SDPA call per sequence (correct, no cross-sequence mask)
    bounds = cu_seqlens.tolist()
    outs = [attention(q[:, a:b], k[:, a:b], v[:, a:b], backend) for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.cat(outs, dim=1)


def windowed_attention(q, k, v, window: int, backend: str):
    """Causal sliding-window attention over (batch, seq, heads, head_dim): query i sees keys j with
    i - window < j <= i, flash-attn's and PyTorch's window (window - 1, 0)."""
    if backend == "flash4":
        return flash4_attention(q, k, v, window=window)
    if backend == "flash_attn":
        from flash_attn import flash_attn_func

        return flash_attn_func(q, k, v, causal=True, window_size=(window - 1, 0))
    if backend == "cudnn":  # the op `cudnn_window_fault` registered, on (batch, heads, seq, dim) views of the
        # same memory; the band's left bound counts the visible keys, the query's own included
        out, _ = torch.ops.cudnn.sdpa_fwd(
            *(t.transpose(1, 2) for t in (q, k, v)), q.shape[-1] ** -0.5, is_causal=True, window_left=window
        )
        return out.transpose(1, 2)
    b, s, heads, dim = q.shape
    varlen = TORCH_WINDOW_ATTENTION if q.is_cuda and backend != "band_mask" else None
    if varlen is not None:  # the rows as varlen sequences of one (batch x seq, heads, dim) tensor
        bounds = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device=q.device)
        flat = (t.flatten(0, 1) for t in (q, k, v))
        return varlen(*flat, bounds, bounds, s, s, window_size=(window - 1, 0)).view(b, s, heads, dim)
    i = torch.arange(s, device=q.device)
    band = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)  # (query, key)
    out = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)), attn_mask=band, enable_gqa=k.shape[2] != heads
    )
    return out.transpose(1, 2)


def _torch_window_attention():
    """PyTorch's own flash kernel with a window, `torch.nn.attention.varlen.varlen_attn(...,
    window_size=...)` (torch >= 2.11; GQA asked for where its signature has the flag), or None where this
    torch has none (the band mask runs then)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    if "window_size" not in params:
        return None
    return functools.partial(varlen_attn, enable_gqa=True) if "enable_gqa" in params else varlen_attn


TORCH_WINDOW_ATTENTION = _torch_window_attention()  # looked up once, outside any compiled code


# What a user may ask for (ATTENTION, --attention). `cudnn`: cuDNN's banded SDPA for a window; without one,
# SDPA (whose own choice on Hopper is cuDNN's kernel).
ATTENTIONS = ("auto", "sdpa", "cudnn", "flash_attn", "flash4")


def choose_attention(requested: str, device: torch.device, window: int | None = None) -> str:
    """`auto`: FlashAttention-4 where it runs right (`flash4_fault`: NVIDIA Hopper or Blackwell with
    flash-attn-4 installed; 4-9% faster than cuDNN's SDPA per layer on an H200, perf/RESULTS.md); else
    flash-attn (FlashAttention-2) on a GPU that has it; for a sliding `window` on an NVIDIA GPU, cuDNN's
    banded SDPA where it runs right (`cudnn_window_fault`); else SDPA."""
    if requested == "auto":
        if device.type == "cuda" and not flash4_fault(device):
            return "flash4"
        if device.type == "cuda" and importable(OPTIONAL["flash_attn"]):
            return "flash_attn"
        if window is not None and device.type == "cuda" and not cudnn_window_fault(device):
            return "cudnn"
        return "sdpa"
    if requested == "flash_attn" and not (device.type == "cuda" and importable(OPTIONAL["flash_attn"])):
        raise ValueError("ATTENTION=flash_attn but flash-attn is not importable on a GPU here")
    if requested == "cudnn" and window is not None and (fault := cudnn_window_fault(device)):
        raise ValueError(f"ATTENTION=cudnn: cuDNN's banded SDPA cannot run here: {fault}")
    if requested == "flash4" and (fault := flash4_fault(device)):
        raise ValueError(f"ATTENTION=flash4 (FlashAttention-4) cannot run here: {fault}")
    return requested


@functools.cache
def cudnn_window_fault(device: torch.device) -> str:
    """Why cuDNN's banded SDPA (`nvidia-cudnn-frontend`'s torch op) cannot be used on this GPU, or "": it must
    import (NVIDIA GPUs, the package installed) and match the band mask, forward and backward, on a small
    grouped-query case with the window shorter than the sequence."""
    if device.type != "cuda" or not torch.version.cuda:
        return "not an NVIDIA GPU"
    if not importable("cudnn"):
        return "nvidia-cudnn-frontend is not installed"
    try:
        import cudnn.sdpa.fwd.torch_op  # noqa: F401 - registers torch.ops.cudnn.sdpa_fwd and its backward

        generator = torch.Generator(device=device).manual_seed(0)
        shapes = [(1, 300, 4, 64), (1, 300, 2, 64), (1, 300, 2, 64)]
        exact = [torch.randn(s, device=device, generator=generator) for s in shapes]
        return kernel_fault(
            lambda *t: windowed_attention(*t, 100, "cudnn"),
            lambda *t: windowed_attention(*t, 100, "band_mask"),
            exact,
            generator,
            "the band mask's",
        )
    except Exception as err:  # noqa: BLE001 - any failure means: do not use it
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
