"""LoRA's first half, dropout then A, in one Triton kernel on GPUs (`kernels`), chosen by `choose_kernel`.

Why our own kernel (measured in `perf/RESULTS.md`, Llama 2 70B width, one H200): compiled, `nn.Dropout`
draws one Philox number per element (about 0.28 ms per 8192 x 8192 bf16 activation, several times its
memory time) and writes the dropped copy that cuBLAS's rank-16 GEMM then reads, and the recompute keeps it
with its mask for the backward. The kernel draws four numbers per Philox call, multiplies and reduces in one
pass, and keeps nothing but a seed: the backward draws the same mask again. The mask is not PyTorch's (no
kernel outside PyTorch can draw PyTorch's), so a run on it matches a run on `nn.Dropout` in distribution,
not bit for bit; the dropout probability is exact to 2^-31.

`lora_down(x, weight, p)` is differentiable and traceable by torch.compile (the kernels are `triton_op`s with
their autograd registered); each call draws its seed from PyTorch's generator, so activation checkpointing
that restores the generator (or saves the seed, as a compiled checkpoint does with random ops) recomputes
the same mask.
"""

from __future__ import annotations

import functools

import torch

from training.common.backends import importable

KERNEL_CHOICES = ("auto", "pytorch")

if importable("triton"):  # GPU builds of PyTorch ship it
    from training.lora import kernels
else:
    kernels = None


def fits(x: torch.Tensor, rank: int) -> bool:
    """Whether the kernels take this input and rank: bf16 / fp16 on a GPU, features a multiple of 128 (the
    kernels' column tile), rank 16, 32 or 64 (the tensor cores' tile)."""
    return (
        x.is_cuda
        and x.dtype in (torch.bfloat16, torch.float16)
        and x.shape[-1] % kernels.COLS == 0
        and rank in (16, 32, 64)
    )


def lora_down(x: torch.Tensor, weight: torch.Tensor, p: float) -> torch.Tensor:
    """dropout(x, p) @ weight^T in x's dtype (weight cast to it, as autocast does), through the kernels:
    the caller checked `fits`."""
    seed = torch.randint(2**62, (1,), device=x.device)
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    out = kernels.dropout_down(flat, weight.to(x.dtype).contiguous(), seed, p)
    return out.view(*x.shape[:-1], weight.shape[0])


def _mask_of(x: torch.Tensor, rank: int, seed: torch.Tensor, p: float) -> torch.Tensor:
    """The kernels' keep mask for an input like x and `seed`, read back through the backward kernel: with
    unit gradients and A of ones, x's gradient is rank / (1 - p) where kept and 0 where dropped."""
    ones_a = torch.ones(rank, x.shape[1], dtype=x.dtype, device=x.device)
    ones_g = torch.ones(x.shape[0], rank, dtype=x.dtype, device=x.device)
    return kernels.dropout_down_backward(ones_g, x, ones_a, seed, p)[0] != 0


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return float((got.float() - want).abs().max()) <= 2e-2 * float(want.abs().max()) + 1e-6


@functools.cache
def dropout_down_fault(device: torch.device, p: float = 0.1, shape=(320, 1024), rank: int = 16) -> str:
    """What the kernels get wrong on `device` ("" if nothing): the mask's kept fraction (within 5 sigma of
    1 - p), a new mask for a new seed, and against float32 products on the kernels' own mask: the output,
    x's gradient, A's gradient (bf16 inputs; 320 rows: a partial last tile and an uneven backward split)."""
    gen = torch.Generator(device).manual_seed(0)
    x = torch.randn(shape, device=device, generator=gen).bfloat16()
    a = (torch.randn(rank, shape[1], device=device, generator=gen) / shape[1] ** 0.5).bfloat16()
    g = torch.randn(shape[0], rank, device=device, generator=gen).bfloat16()
    seed = torch.tensor([1234], device=device)
    keep = _mask_of(x, rank, seed, p)
    kept, n = float(keep.float().mean()), keep.numel()
    if abs(kept - (1 - p)) > 5 * (p * (1 - p) / n) ** 0.5:
        return f"the mask (kept {kept:.4f} of the elements, not {1 - p:g})"
    if torch.equal(keep, _mask_of(x, rank, torch.tensor([4321], device=device), p)):
        return "the mask (the same for another seed)"
    dropped = x.float() * keep / (1 - p)
    dx, da = kernels.dropout_down_backward(g, x, a, seed, p)
    for name, got, want in (
        ("the output", kernels.dropout_down(x, a, seed, p), dropped @ a.float().t()),
        ("x's gradient", dx, (g.float() @ a.float()) * keep / (1 - p)),
        ("A's gradient", da, g.float().t() @ dropped),
    ):
        if not _close(got, want):
            return name
    return ""


def choose_kernel(requested: str, device: torch.device) -> tuple[bool, str]:
    """(use the kernels, what was chosen and why) for LORA_KERNEL `requested`: `auto` takes them on a GPU
    where they check out (`dropout_down_fault`); `pytorch` never (nn.Dropout then nn.Linear)."""
    if requested not in KERNEL_CHOICES:
        raise ValueError(f"LoRA kernel {requested!r}: choose one of {', '.join(KERNEL_CHOICES)}")
    plain = "nn.Dropout then A (PyTorch)"
    if requested == "pytorch":
        return False, f"{plain} (LORA_KERNEL=pytorch)"
    if kernels is None or device.type != "cuda":
        return False, plain
    fault = dropout_down_fault(device)
    if fault:
        return False, f"{plain}: the Triton kernel got {fault} wrong on this GPU"
    return True, "dropout and A in one Triton kernel (checked on this GPU)"
