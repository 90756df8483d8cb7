"""The native FP8 linear's casts on NVIDIA and AMD GPUs, in Triton (imported by `fp8` where Triton is
installed, used for tensors on a GPU; elsewhere `fp8` casts in PyTorch, with the same rounding).

`cast_transpose(t, scale, amax, dtype, update_amax)` reads a bf16 matrix once and writes it scaled and cast to
`dtype`, row-major and transposed, and with `update_amax` its max |t| into `amax` (zeroed first): what
Transformer Engine's cast-transpose does. The FP8 GEMM takes a row-major first and a column-major second
operand, so each weight-gradient GEMM needs transposed copies of the gradient and of the input; the compiler's
own fusion of a cast with a transposed write ran at about half of the memory bandwidth on BERT's shapes, and
its amax was a second pass that recomputed the producer (`perf/RESULTS.md`). Registered as a `triton_op`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def _cast_transpose_kernel(
    x_ptr, scale_ptr, y_ptr, yt_ptr, amax_ptr, M, N, FMAX: tl.constexpr, AMAX: tl.constexpr, BM: tl.constexpr,
    BN: tl.constexpr
):  # fmt: skip
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    scale = tl.load(scale_ptr)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    y = tl.clamp(x * scale, -FMAX, FMAX).to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)
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


BLOCK = (64, 64, 4)  # rows, columns, warps per program: `perf/parts.py fp8-cast` times the alternatives


def launch(t, scale, y, yt, amax, update_amax: bool, block=BLOCK) -> None:
    (m, n), (bm, bn, warps) = t.shape, block
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    fmax = torch.finfo(y.dtype).max
    wrap_triton(_cast_transpose_kernel)[grid](
        t, scale, y, yt, amax, m, n, FMAX=fmax, AMAX=update_amax, BM=bm, BN=bn, num_warps=warps
    )


# a triton_op, not an opaque custom op: a compiled model launches the kernel from its own generated code,
# without a Python dispatch per call (which made BERT's compiled FP8 step wait on the CPU)
@triton_op("mlperf_fp8::cast_transpose", mutates_args={"amax"})
def cast_transpose(
    t: torch.Tensor, scale: torch.Tensor, amax: torch.Tensor, dtype: torch.dtype, update_amax: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    t = t.contiguous()
    m, n = t.shape
    y = torch.empty((m, n), dtype=dtype, device=t.device)
    yt = torch.empty((n, m), dtype=dtype, device=t.device)
    if update_amax:
        amax.zero_()
    launch(t, scale, y, yt, amax, update_amax)
    return y, yt
