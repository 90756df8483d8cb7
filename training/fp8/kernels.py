"""The native FP8 linear's casts on NVIDIA and AMD GPUs, in Triton (imported by `casts` where Triton is
installed, used for tensors on a GPU once checked there; elsewhere `casts` casts in PyTorch, with the same
rounding).

`cast_transpose(t, scale, amax, dtype, update_amax)` reads a bf16 matrix once and writes it scaled and cast to
`dtype`, row-major and transposed, and with `update_amax` its max |t| into `amax` (zeroed first): what
Transformer Engine's cast-transpose does. The FP8 GEMM takes a row-major first and a column-major second
operand, so each weight-gradient GEMM needs transposed copies of the gradient and of the input; the compiler's
own fusion of a cast with a transposed write ran at about half of the memory bandwidth on BERT's shapes, and
its amax was a second pass that recomputed the producer (`perf/RESULTS.md`).

The others fuse the FP8 MLP's activation (`native._Fp8MLP`: Llama's SwiGLU, BERT's GELU) with the casts around
it: forward, the activation's output written only as FP8 (row-major and transposed) for the down projection;
backward, the activation's input gradients written only as FP8 for the up projections' GEMMs (and for GELU,
the up projection's bias gradient summed by column blocks). Intermediate products are rounded to bf16 where
PyTorch's eager ops round them, so they differ from those only where Triton's exp and erf differ from CUDA's.
All are registered as `triton_op`s.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def _cast_transpose_kernel(
    x_ptr,
    scale_ptr,
    y_ptr,
    yt_ptr,
    amax_ptr,
    M,
    N,
    FMAX: tl.constexpr,
    AMAX: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    TRANS: tl.constexpr = True,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    scale = tl.load(scale_ptr)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    y = tl.clamp(x * scale, -FMAX, FMAX).to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)
    if TRANS:
        mask_t = (rn[:, None] < N) & (rm[None, :] < M)
        if x_ptr.dtype.element_ty == tl.float32:
            # Triton 3.6 transposed full tiles loaded from float32 wrongly (on an H200, with tl.trans of the
            # FP8 or of the float32 tile; bf16 right): read the tile again in transposed order (from cache)
            xt = tl.load(x_ptr + rm[None, :] * N + rn[:, None], mask=mask_t, other=0.0)
            yt = tl.clamp(xt * scale, -FMAX, FMAX).to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
        else:
            yt = tl.trans(y)
        tl.store(yt_ptr + rn[:, None] * M + rm[None, :], yt, mask=mask_t)
    if AMAX:
        tl.atomic_max(amax_ptr, tl.max(tl.abs(x)))


@triton.jit
def _store_fp8(
    v,
    scale_ptr,
    y_ptr,
    yt_ptr,
    amax_ptr,
    rm,
    rn,
    M,
    N,
    FMAX: tl.constexpr,
    AMAX: tl.constexpr,
    TRANS: tl.constexpr,
):
    """The float32 tile v (rows rm, columns rn of an M x N matrix) scaled, cast and stored row-major into y
    and, with TRANS, transposed into yt; with AMAX, its max |v| into amax (v is 0 outside the matrix)."""
    y = tl.clamp(v * tl.load(scale_ptr), -FMAX, FMAX).to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))
    if TRANS:
        mask_t = (rn[:, None] < N) & (rm[None, :] < M)
        tl.store(yt_ptr + rn[:, None] * M + rm[None, :], tl.trans(y), mask=mask_t)
    if AMAX:
        tl.atomic_max(amax_ptr, tl.max(tl.abs(v)))


@triton.jit
def _tile(M, N, BM: tl.constexpr, BN: tl.constexpr):
    """This program's BM x BN tile of an M x N row-major matrix: rows, columns, offsets, in-bounds mask."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    return rm, rn, rm[:, None] * N + rn[None, :], (rm[:, None] < M) & (rn[None, :] < N)


@triton.jit
def _bf16(v):
    """v rounded to bf16 and back (where PyTorch's eager bf16 ops round)."""
    return v.to(tl.bfloat16).to(tl.float32)


@triton.jit
def _swiglu_kernel(
    g_ptr,
    u_ptr,
    scale_ptr,
    y_ptr,
    yt_ptr,
    amax_ptr,
    M,
    N,
    FMAX: tl.constexpr,
    AMAX: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    TRANS: tl.constexpr,
):
    rm, rn, offs, mask = _tile(M, N, BM, BN)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = _bf16(_bf16(g / (1.0 + tl.exp(-g))) * u)  # F.silu(g) * u in bf16
    _store_fp8(h, scale_ptr, y_ptr, yt_ptr, amax_ptr, rm, rn, M, N, FMAX, AMAX, TRANS)


@triton.jit
def _swiglu_backward_kernel(
    dh_ptr,
    g_ptr,
    u_ptr,
    g_scale_ptr,
    u_scale_ptr,
    dg_ptr,
    dgt_ptr,
    du_ptr,
    dut_ptr,
    g_amax_ptr,
    u_amax_ptr,
    g_inv_ptr,
    u_inv_ptr,
    M,
    N,
    FMAX: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    TRANS: tl.constexpr,
    PACKED: tl.constexpr = False,
):
    rm, rn, offs, mask = _tile(M, N, BM, BN)
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if PACKED:  # e4m3 codes: their values as `casts.unpack_e4m3` gives them (times the inverse scale, bf16)
        g = _bf16(g * tl.load(g_inv_ptr))
        u = _bf16(u * tl.load(u_inv_ptr))
    # eager autograd of F.silu(g) * u in bf16: du = dh * silu(g), dg = silu_backward(dh * u, g)
    du = _bf16(dh * _bf16(g / (1.0 + tl.exp(-g))))
    sig = 1.0 / (1.0 + tl.exp(-g))
    dg = _bf16(_bf16(dh * u) * sig * (1.0 + g * (1.0 - sig)))
    _store_fp8(dg, g_scale_ptr, dg_ptr, dgt_ptr, g_amax_ptr, rm, rn, M, N, FMAX, True, TRANS)
    _store_fp8(du, u_scale_ptr, du_ptr, dut_ptr, u_amax_ptr, rm, rn, M, N, FMAX, True, TRANS)


@triton.jit
def _gelu_kernel(
    a_ptr,
    scale_ptr,
    y_ptr,
    yt_ptr,
    amax_ptr,
    M,
    N,
    FMAX: tl.constexpr,
    AMAX: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    rm, rn, offs, mask = _tile(M, N, BM, BN)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h = _bf16(a * 0.5 * (1.0 + tl.math.erf(a * 0.7071067811865476)))  # F.gelu(a) in bf16
    _store_fp8(h, scale_ptr, y_ptr, yt_ptr, amax_ptr, rm, rn, M, N, FMAX, AMAX, True)


@triton.jit
def _gelu_backward_kernel(
    dh_ptr,
    a_ptr,
    scale_ptr,
    da_ptr,
    dat_ptr,
    amax_ptr,
    colsum_ptr,
    M,
    N,
    FMAX: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
):
    rm, rn, offs, mask = _tile(M, N, BM, BN)
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    cdf = 0.5 * (1.0 + tl.math.erf(a * 0.7071067811865476))
    pdf = tl.exp(-0.5 * a * a) * 0.3989422804014327  # 1 / sqrt(2 pi)
    da = _bf16(dh * (cdf + a * pdf))  # gelu_backward(dh, a) in bf16
    _store_fp8(da, scale_ptr, da_ptr, dat_ptr, amax_ptr, rm, rn, M, N, FMAX, True, True)
    tl.store(colsum_ptr + tl.program_id(0) * N + rn, tl.sum(da, axis=0), mask=rn < N)


BLOCK = (64, 64, 4)  # rows, columns, warps per program: `perf/parts.py fp8-cast` times the alternatives


def launch(t, scale, y, yt, amax, update_amax: bool, block=BLOCK, eager: bool = False) -> None:
    """The cast of the matrix t into y and, unless yt is None, yt (the kernel of `cast_transpose`). `eager`:
    for callers never traced (FSDP2's all-gather hooks), the kernel itself, without the traceable wrapper's
    dispatch per call."""
    (m, n), (bm, bn, warps) = t.shape, block
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    fmax = torch.finfo(y.dtype).max
    (_cast_transpose_kernel if eager else wrap_triton(_cast_transpose_kernel))[grid](
        t,
        scale,
        y,
        y if yt is None else yt,
        amax,
        m,
        n,
        FMAX=fmax,
        AMAX=update_amax,
        BM=bm,
        BN=bn,
        TRANS=yt is not None,
        num_warps=warps,
    )


def _fp8_pair(m: int, n: int, dtype: torch.dtype, device, transpose: bool = True):
    """The (m, n) output and its (n, m) transposed copy; without `transpose` an empty stand-in for it."""
    t = torch.empty((n, m) if transpose else (0,), dtype=dtype, device=device)
    return torch.empty((m, n), dtype=dtype, device=device), t


# a triton_op, not an opaque custom op: a compiled model launches the kernel from its own generated code,
# without a Python dispatch per call (which made BERT's compiled FP8 step wait on the CPU)
@triton_op("mlperf_fp8::cast_transpose", mutates_args={"amax"})
def cast_transpose(
    t: torch.Tensor,
    scale: torch.Tensor,
    amax: torch.Tensor,
    dtype: torch.dtype,
    update_amax: bool,
    transpose: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(t cast, its transposed copy, or an empty tensor without `transpose`: a frozen weight's GEMMs never
    read it)."""
    t = t.contiguous()
    m, n = t.shape
    y, yt = _fp8_pair(m, n, dtype, t.device, transpose)
    if update_amax:
        amax.zero_()
    launch(t, scale, y, yt if transpose else None, amax, update_amax)
    return y, yt


@triton_op("mlperf_fp8::swiglu_cast_transpose", mutates_args={"amax"})
def swiglu_cast_transpose(
    g: torch.Tensor,
    u: torch.Tensor,
    scale: torch.Tensor,
    amax: torch.Tensor,
    update_amax: bool,
    transpose: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """silu(g) * u (bf16 matrices) cast to e4m3, row-major and (with `transpose`, else an empty tensor)
    transposed; with `update_amax`, its max |.| into `amax`."""
    g, u = g.contiguous(), u.contiguous()
    (m, n), (bm, bn, warps) = g.shape, BLOCK
    y, yt = _fp8_pair(m, n, torch.float8_e4m3fn, g.device, transpose)
    if update_amax:
        amax.zero_()
    wrap_triton(_swiglu_kernel)[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        g,
        u,
        scale,
        y,
        yt if transpose else y,
        amax,
        m,
        n,
        FMAX=torch.finfo(y.dtype).max,
        AMAX=update_amax,
        BM=bm,
        BN=bn,
        TRANS=transpose,
        num_warps=warps,
    )
    return y, yt


@triton_op("mlperf_fp8::swiglu_backward_cast_transpose", mutates_args={"g_amax", "u_amax"})
def swiglu_backward_cast_transpose(
    dh: torch.Tensor,
    g: torch.Tensor,
    u: torch.Tensor,
    g_scale: torch.Tensor,
    u_scale: torch.Tensor,
    g_amax: torch.Tensor,
    u_amax: torch.Tensor,
    transpose: bool = True,
    g_inv: torch.Tensor | None = None,
    u_inv: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of g and u (for dh, the gradient of silu(g) * u) cast to e5m2, each row-major and (with
    `transpose`, else empty tensors) transposed, their max |.| into `g_amax` and `u_amax`. With `g_inv` and
    `u_inv`, g and u are e4m3 codes (`casts.pack_e4m3`) and these the inverses of their scales: the kernel
    reads one byte an element of each instead of two."""
    packed = g_inv is not None and u_inv is not None
    dh, g, u = dh.contiguous(), g.contiguous(), u.contiguous()
    (m, n), (bm, bn, warps) = g.shape, BLOCK
    dg, dgt = _fp8_pair(m, n, torch.float8_e5m2, g.device, transpose)
    du, dut = _fp8_pair(m, n, torch.float8_e5m2, g.device, transpose)
    g_amax.zero_()
    u_amax.zero_()
    wrap_triton(_swiglu_backward_kernel)[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        dh,
        g,
        u,
        g_scale,
        u_scale,
        dg,
        dgt if transpose else dg,
        du,
        dut if transpose else du,
        g_amax,
        u_amax,
        g_inv if packed else g_scale,
        u_inv if packed else u_scale,
        m,
        n,
        FMAX=torch.finfo(dg.dtype).max,
        BM=bm,
        BN=bn,
        TRANS=transpose,
        PACKED=packed,
        num_warps=warps,
    )
    return dg, dgt, du, dut


@triton_op("mlperf_fp8::gelu_cast_transpose", mutates_args={"amax"})
def gelu_cast_transpose(
    a: torch.Tensor, scale: torch.Tensor, amax: torch.Tensor, update_amax: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """gelu(a) (a bf16 matrix; erf form) cast to e4m3, row-major and transposed; with `update_amax`, its
    max |.| into `amax`."""
    a = a.contiguous()
    (m, n), (bm, bn, warps) = a.shape, BLOCK
    y, yt = _fp8_pair(m, n, torch.float8_e4m3fn, a.device)
    if update_amax:
        amax.zero_()
    wrap_triton(_gelu_kernel)[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        a,
        scale,
        y,
        yt,
        amax,
        m,
        n,
        FMAX=torch.finfo(y.dtype).max,
        AMAX=update_amax,
        BM=bm,
        BN=bn,
        num_warps=warps,
    )
    return y, yt


@triton_op("mlperf_fp8::gelu_backward_cast_transpose", mutates_args={"amax"})
def gelu_backward_cast_transpose(
    dh: torch.Tensor, a: torch.Tensor, scale: torch.Tensor, amax: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradient of a (for dh, the gradient of gelu(a)) cast to e5m2, row-major and transposed, its max
    |.| into `amax`, and its column sums (float32; the bias gradient of the projection producing a)."""
    dh, a = dh.contiguous(), a.contiguous()
    (m, n), (bm, bn, warps) = a.shape, BLOCK
    da, dat = _fp8_pair(m, n, torch.float8_e5m2, a.device)
    colsum = torch.empty((triton.cdiv(m, bm), n), dtype=torch.float32, device=a.device)
    amax.zero_()
    wrap_triton(_gelu_backward_kernel)[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        dh,
        a,
        scale,
        da,
        dat,
        amax,
        colsum,
        m,
        n,
        FMAX=torch.finfo(da.dtype).max,
        BM=bm,
        BN=bn,
        num_warps=warps,
    )
    return da, dat, colsum.sum(0)
