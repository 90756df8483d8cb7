"""FlashAttention-4 (the `flash-attn-4` package's CuTe-DSL kernels, `flash_attn.cute`) as attention backend
`flash4`: causal, grouped-query, packed rows (`cu_seqlens`) and sliding windows, on Hopper and Blackwell.

Why this module: the package's own entry points are `torch.autograd.Function`s that torch.compile cannot
trace (the kernels are compiled by CuTe DSL at their first call), and our blocks are compiled. So the forward
and backward kernels are wrapped here as two `torch.library` custom ops with fake (shape-only) kernels and
the backward registered as the forward's autograd formula: a compiled block keeps the attention call as one
opaque node, and activation checkpointing saves or recomputes it like any op. The ops import
`flash_attn.cute` only when they run, so registering them costs nothing where the package is absent.

`flash4_fault(device)` says why the backend cannot be used here ("" when it can): the package must import
on an NVIDIA GPU of compute capability 9 or 10 and match SDPA's output and gradients on a small
grouped-query case, plain, packed and windowed.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from training.common.backends import importable


def _kernel_args(cu_seqlens: torch.Tensor | None, max_seqlen: int, window: int) -> dict:
    """The kernels' causal, packed and window arguments; our window is the keys a query sees, itself
    included (0: none), theirs (left, right)."""
    left, right = (window - 1, 0) if window > 0 else (None, None)
    longest = max_seqlen if cu_seqlens is not None else None
    return dict(
        causal=True,
        window_size_left=left,
        window_size_right=right,
        cu_seqlens_q=cu_seqlens,
        cu_seqlens_k=cu_seqlens,
        max_seqlen_q=longest,
        max_seqlen_k=longest,
    )


@torch.library.custom_op("mlperf_llama::flash4_fwd", mutates_args=())
def flash4_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    max_seqlen: int,
    window: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    from flash_attn.cute.interface import _flash_attn_fwd

    out, lse, *_ = _flash_attn_fwd(q, k, v, **_kernel_args(cu_seqlens, max_seqlen, window), return_lse=True)
    return out, lse


@flash4_fwd.register_fake
def _(q, k, v, cu_seqlens, max_seqlen, window):
    heads = q.shape[-2]
    lse = (heads, q.shape[0]) if cu_seqlens is not None else (q.shape[0], heads, q.shape[1])
    return torch.empty_like(q), q.new_empty(lse, dtype=torch.float32)


@torch.library.custom_op("mlperf_llama::flash4_bwd", mutates_args=())
def flash4_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens: torch.Tensor | None,
    max_seqlen: int,
    window: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from flash_attn.cute.interface import _flash_attn_bwd

    args = _kernel_args(cu_seqlens, max_seqlen, window)
    dq, dk, dv = _flash_attn_bwd(q, k, v, out, dout.contiguous(), lse, **args)  # (no sink: three gradients)
    return dq, dk, dv


@flash4_bwd.register_fake
def _(dout, q, k, v, out, lse, cu_seqlens, max_seqlen, window):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    q, k, v, cu_seqlens, max_seqlen, window = inputs
    ctx.save_for_backward(q, k, v, *output, cu_seqlens)
    ctx.max_seqlen, ctx.window = max_seqlen, window


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse, cu_seqlens = ctx.saved_tensors
    dq, dk, dv = flash4_bwd(dout, q, k, v, out, lse, cu_seqlens, ctx.max_seqlen, ctx.window)
    return dq, dk, dv, None, None, None


flash4_fwd.register_autograd(_backward, setup_context=_setup)


def flash4_attention(q, k, v, cu_seqlens=None, max_seqlen=None, window=None):
    """Causal attention over (batch, seq, heads, head_dim); with int32 `cu_seqlens`, over the sequences packed
    in a batch-1 row; with `window`, each query sees the `window` most recent keys (itself included)."""
    if cu_seqlens is None:
        return flash4_fwd(q, k, v, None, 0, window or 0)[0]
    max_seqlen = max_seqlen or int(cu_seqlens.diff().max())
    out = flash4_fwd(q[0], k[0], v[0], cu_seqlens.to(torch.int32), max_seqlen, window or 0)[0]
    return out.unsqueeze(0)


@functools.cache
def flash4_fault(device: torch.device) -> str:
    """Why FlashAttention-4 cannot run here, or "" (see the module's docstring)."""
    if device.type != "cuda" or not torch.version.cuda:
        return "not an NVIDIA GPU"
    if not importable("flash_attn.cute"):
        return "flash-attn-4 is not installed"
    if torch.cuda.get_device_capability(device)[0] not in (9, 10):
        return f"compute capability {torch.cuda.get_device_capability(device)} (FlashAttention-4: 9.x, 10.x)"
    try:
        generator = torch.Generator(device=device).manual_seed(0)
        shapes = [(1, 384, 4, 128), (1, 384, 2, 128), (1, 384, 2, 128)]  # the models' head size
        exact = [torch.randn(s, device=device, generator=generator) for s in shapes]
        cu = torch.tensor([0, 100, 384], dtype=torch.int32, device=device)
        for case, kwargs in (("causal", {}), ("packed", {"cu_seqlens": cu}), ("windowed", {"window": 128})):
            fast = functools.partial(flash4_attention, **kwargs)
            fault = kernel_fault(fast, functools.partial(reference, **kwargs), exact, generator, "SDPA's")
            if fault:
                return f"{case}: {fault}"
    except Exception as err:  # noqa: BLE001 - any failure means: do not use it
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return ""


def kernel_fault(fast, slow, exact: list[torch.Tensor], generator: torch.Generator, reference: str) -> str:
    """ "" where `fast(q, k, v)` on bf16 copies of the float32 `exact` tensors matches `slow` on the tensors
    themselves, forward and the gradients of q, k and v (each within 5% of the reference's largest value);
    else which one is off `reference` (named so in the message) and by how much."""
    fast_in = [t.detach().bfloat16().requires_grad_() for t in exact]
    slow_in = [t.detach().clone().requires_grad_() for t in exact]
    got, want = fast(*fast_in), slow(*slow_in)
    g = torch.randn(want.shape, device=want.device, generator=generator)
    (got.float() * g).sum().backward()
    (want * g).sum().backward()
    pairs = [("output", got, want)] + [(f"d{n}", a.grad, b.grad) for n, a, b in zip("qkv", fast_in, slow_in)]
    for name, a, b in pairs:
        error = (a.float() - b).abs().max().item()
        if not error <= 0.05 * b.abs().max().item():
            return f"its {name} is off {reference} by {error:.3g}"
    return ""


def reference(q, k, v, cu_seqlens=None, max_seqlen=None, window=None):
    """The same attention through SDPA with an explicit mask (float32-exact, slow): the check's reference."""
    s = q.shape[1]
    i = torch.arange(s, device=q.device)
    allowed = i[None, :] <= i[:, None]
    if window:
        allowed &= i[None, :] > i[:, None] - window
    if cu_seqlens is not None:
        seq = torch.bucketize(i, cu_seqlens[1:].to(i.dtype), right=True)
        allowed &= seq[None, :] == seq[:, None]
    out = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)), attn_mask=allowed, enable_gqa=k.shape[2] != q.shape[2]
    )
    return out.transpose(1, 2)
