"""LoRA's first half, dropout(x) @ A^T, as Triton kernels (imported by `training.lora.fused` where Triton is
installed; run on GPUs once checked there).

The dropout mask is a function of a seed tensor and the element's place, never stored: element i of the
flattened (M, K) input takes lane i % 4 of Philox4x32-10 at counter i // 4 with the call's seed (one Philox
call for four neighbours), and is kept where the lane's high 31 bits are at least p * 2^31. The forward
kernel reads x once and writes only the (M, rank) product; the backward kernel draws the same mask again and
writes x's gradient and row-range partial sums of A's gradient.

(Four strips of a tile, each masked by its own Philox lane, crashed Triton 3.6's NVIDIA backend when K is
a multiple of 16 (an assertion in `applyLinearLayout`); the lanes joined into one tile compile.)
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

COLS = 128  # columns per tile: K must be a multiple


@dataclass(frozen=True)
class Launch:
    """How the kernels are launched; the defaults are the fastest of `python -m perf.lora_adapter --sweep` on
    an H100, which times others through `launched_with`."""

    rows: int = 32  # rows per tile
    warps: int = 4  # per program
    forward_split: int = 4  # column ranges the forward splits the product over (partial sums, added after)
    split: int = 16  # row ranges the backward splits A's gradient over (partial sums, added after)


_launch = Launch()


@contextlib.contextmanager
def launched_with(launch: Launch):
    """The kernels launched with `launch` within the context."""
    global _launch
    before, _launch = _launch, launch
    try:
        yield
    finally:
        _launch = before


@triton.jit
def _keep(seed, rows, j, K, threshold, COLS: tl.constexpr):
    """The keep mask of column tile j (columns j * COLS + [0, COLS)) for `rows` (BM, 1): element i of the
    flattened input takes lane i % 4 of Philox at counter i // 4."""
    counter = rows.to(tl.int64) * (K // 4) + j * (COLS // 4) + tl.arange(0, COLS // 4)[None, :]
    r0, r1, r2, r3 = tl.randint4x(seed, counter)
    lanes = tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (rows.shape[0], COLS))
    return (lanes >> 1).to(tl.int32) >= threshold


@triton.jit
def _dropped(x_ptr, rows, in_rows, cols, K, keep):
    x = tl.load(x_ptr + rows * K + cols[None, :], mask=in_rows, other=0.0)
    return tl.where(keep, x, tl.zeros_like(x))


@triton.jit
def _down_kernel(
    x_ptr,
    a_ptr,
    seed_ptr,
    out_ptr,
    M,
    K,
    threshold,
    scale,
    tiles_per_split,
    R: tl.constexpr,
    BM: tl.constexpr,
    COLS: tl.constexpr,
):
    """Row tile, column range `split`: the range's float32 partial of the product."""
    rows = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    split = tl.program_id(1)
    in_rows = rows < M
    seed = tl.load(seed_ptr)
    acc = tl.zeros((BM, R), dtype=tl.float32)
    for jj in range(0, tiles_per_split):
        j = split * tiles_per_split + jj
        cols = j * COLS + tl.arange(0, COLS)
        x = _dropped(x_ptr, rows, in_rows, cols, K, _keep(seed, rows, j, K, threshold, COLS))
        a_t = tl.load(a_ptr + tl.arange(0, R)[None, :] * K + cols[:, None])  # (COLS, R): A^T's rows `cols`
        acc = tl.dot(x, a_t, acc)
    tl.store(out_ptr + split * M * R + rows * R + tl.arange(0, R)[None, :], acc * scale, mask=in_rows)


@triton.jit
def _backward_kernel(
    g_ptr,
    x_ptr,
    a_ptr,
    seed_ptr,
    dx_ptr,
    da_ptr,
    M,
    K,
    threshold,
    scale,
    tiles_per_split,
    R: tl.constexpr,
    BM: tl.constexpr,
    COLS: tl.constexpr,
):
    """Column tile j, row tiles of one split: x's gradient ((g @ A) * keep * scale, stored) and the split's
    partial of A's gradient (g^T @ the dropped x, times scale)."""
    j, split = tl.program_id(0), tl.program_id(1)
    seed = tl.load(seed_ptr)
    cols = j * COLS + tl.arange(0, COLS)
    a = tl.load(a_ptr + tl.arange(0, R)[:, None] * K + cols[None, :])  # (R, COLS)
    da = tl.zeros((R, COLS), dtype=tl.float32)
    for i in range(0, tiles_per_split):  # (rows past M, in the last split, are masked)
        rows = (split * tiles_per_split + i) * BM + tl.arange(0, BM)[:, None]
        in_rows = rows < M
        g = tl.load(g_ptr + rows * R + tl.arange(0, R)[None, :], mask=in_rows, other=0.0)
        keep = _keep(seed, rows, j, K, threshold, COLS)
        dx = tl.dot(g, a) * scale
        dx = tl.where(keep, dx, tl.zeros_like(dx)).to(dx_ptr.dtype.element_ty)
        tl.store(dx_ptr + rows * K + cols[None, :], dx, mask=in_rows)
        da = tl.dot(tl.trans(g), _dropped(x_ptr, rows, in_rows, cols, K, keep), da)
    tl.store(da_ptr + split * R * K + tl.arange(0, R)[:, None] * K + cols[None, :], da * scale)


def _threshold(p: float) -> int:
    return min(round(p * 2**31), 2**31 - 1)


@triton_op("mlperf_lora::dropout_down", mutates_args=())
def dropout_down(x: torch.Tensor, a: torch.Tensor, seed: torch.Tensor, p: float) -> torch.Tensor:
    """dropout(x, p) @ a^T for x (M, K) and a (R, K) of x's dtype, the mask drawn from `seed` (int64, one
    element on x's device): (M, R) in x's dtype, accumulated in float32."""
    m, k = x.shape
    launch = _launch
    splits = math.gcd(launch.forward_split, k // COLS)
    partial = torch.empty((splits, m, a.shape[0]), dtype=torch.float32, device=x.device)
    wrap_triton(_down_kernel)[(triton.cdiv(m, launch.rows), splits)](
        x,
        a,
        seed,
        partial,
        m,
        k,
        _threshold(p),
        1.0 / (1.0 - p),
        k // COLS // splits,
        R=a.shape[0],
        BM=launch.rows,
        COLS=COLS,
        num_warps=launch.warps,
    )
    return partial.sum(0).to(x.dtype)


@triton_op("mlperf_lora::dropout_down_backward", mutates_args=())
def dropout_down_backward(
    g: torch.Tensor, x: torch.Tensor, a: torch.Tensor, seed: torch.Tensor, p: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x's gradient, a's gradient in float32) of `dropout_down` for the output gradient g (M, R)."""
    m, k = x.shape
    r = a.shape[0]
    launch = _launch
    dx = torch.empty_like(x)
    partial = torch.empty((launch.split, r, k), dtype=torch.float32, device=x.device)
    tiles = triton.cdiv(triton.cdiv(m, launch.rows), launch.split)
    wrap_triton(_backward_kernel)[(k // COLS, launch.split)](
        g,
        x,
        a,
        seed,
        dx,
        partial,
        m,
        k,
        _threshold(p),
        1.0 / (1.0 - p),
        tiles,
        R=r,
        BM=launch.rows,
        COLS=COLS,
        num_warps=launch.warps,
    )
    return dx, partial.sum(0)


def _setup(ctx, inputs, output):
    x, a, seed, p = inputs
    ctx.save_for_backward(x, a, seed)
    ctx.p = p


def _backward(ctx, g):
    x, a, seed = ctx.saved_tensors
    dx, da = dropout_down_backward(g.to(x.dtype).contiguous(), x, a, seed, ctx.p)
    return dx, da.to(a.dtype), None, None


dropout_down.register_autograd(_backward, setup_context=_setup)
