"""One 4-bit GEMM, a @ b.T with both operands quantized along their shared (reduction) axis, two ways:

- `emulated`: quantize, dequantize to the exact values the 4-bit GEMM multiplies (`formats`), one float32
  matmul, then NVFP4's two tensor scales. Every product of two such values is exact in float32; only the
  order of the float32 sums is the tensor cores' own, so the result is the 4-bit GEMM's up to float32
  rounding of the sum. For numerics, not speed: two quantizations and a float32 GEMM of the full size where
  the hardware runs one 4-bit GEMM. Runs anywhere (CPU, Hopper, MI300).
- `scaled_mm`: PyTorch's block-scaled GEMM on float4_e2m1fn_x2 codes (`torch._scaled_mm`, cuBLASLt's
  sm100 kernels; the call torchao's MXTensor and NVFP4Tensor make), with the scales in the swizzled layout
  it reads (`to_blocked`). Chosen only on a GPU of compute capability 10.x or above (B200, B300, GB300)
  with a PyTorch that has the FP4 dtype. Not run on this project's machines (no such GPU); the emulated
  path is its reference (`perf/fp4_gemm_bench.py` compares them where it runs).
"""

from __future__ import annotations

import torch
from torchao.prototype.mx_formats.kernels import f32_to_f4_unpacked, pack_uint4

from training.fp4 import formats
from training.fp4.choices import EMULATED, SCALED_MM, describe_kernel


def choose_kernel(device: torch.device) -> str:
    """`scaled_mm` where the device multiplies FP4 (CUDA compute capability 10.x or above, a PyTorch with
    float4_e2m1fn_x2), else `emulated`."""
    if device.type != "cuda" or torch.version.hip is not None or not hasattr(torch, "float4_e2m1fn_x2"):
        return EMULATED
    return SCALED_MM if torch.cuda.get_device_capability(device)[0] >= 10 else EMULATED


describe = describe_kernel


def mxfp4_gemm(a: torch.Tensor, b: torch.Tensor, hadamard: bool, kernel: str) -> torch.Tensor:
    """a @ b.T (float32) with both in MXFP4 along their last axis (zero-padded to whole blocks)."""
    a, b = formats.pad_to(a, formats.MX_BLOCK), formats.pad_to(b, formats.MX_BLOCK)
    if kernel == SCALED_MM:
        (sa, ca), (sb, cb) = formats.mxfp4_codes(a, hadamard), formats.mxfp4_codes(b, hadamard)
        return _scaled_mm(ca, cb, sa, sb, torch.float8_e8m0fnu, None)
    return formats.mxfp4(a, hadamard) @ formats.mxfp4(b, hadamard).t()


def nvfp4_gemm(
    a: torch.Tensor, b: torch.Tensor, kernel: str, a_opts: dict, b_opts: dict, generator=None
) -> torch.Tensor:
    """a @ b.T (float32) with both in NVFP4 along their last axis; `a_opts` and `b_opts`: each operand's
    switches (`formats.nvfp4`'s two_d, stochastic, rht)."""
    a, b = formats.pad_to(a, formats.NV_BLOCK), formats.pad_to(b, formats.NV_BLOCK)
    if kernel == SCALED_MM:
        ea, da, ga = formats.nvfp4_parts(a, generator=generator, **a_opts)
        eb, db, gb = formats.nvfp4_parts(b, generator=generator, **b_opts)
        ca, cb = (pack_uint4(f32_to_f4_unpacked(e.reshape(t.shape))) for e, t in ((ea, a), (eb, b)))
        sa, sb = (_row_scales(d, t.shape) for d, t in ((da, a), (db, b)))
        return _scaled_mm(ca, cb, sa, sb, torch.float8_e4m3fn, ga * gb)
    va, ga = formats.nvfp4(a, generator=generator, **a_opts)
    vb, gb = formats.nvfp4(b, generator=generator, **b_opts)
    return (va @ vb.t()) * (ga * gb)


def _row_scales(decode: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """NVFP4 block scales (float32 values of E4M3) as E4M3, one per 16 elements of each row ((rows, cols /
    16)); a 16 x 16 tile's scale repeated for its 16 rows."""
    rows, cols = shape
    blocks = cols // formats.NV_BLOCK
    if decode.dim() == 4:  # (rows / 16, 1, cols / 16, 1)
        decode = decode.reshape(rows // formats.NV_BLOCK, 1, blocks).expand(-1, formats.NV_BLOCK, -1)
    return decode.reshape(rows, blocks).to(torch.float8_e4m3fn)


def _scaled_mm(codes_a, codes_b, scales_a, scales_b, scale_dtype, alpha) -> torch.Tensor:
    """codes_a @ codes_b.T in float32 through the sm100 block-scaled GEMM, times `alpha` (NVFP4's tensor
    scales) when given."""
    from torchao.prototype.mx_formats.utils import to_blocked

    fp4 = torch.float4_e2m1fn_x2
    sa = to_blocked(scales_a.view(torch.uint8)).view(scale_dtype)
    sb = to_blocked(scales_b.view(torch.uint8)).view(scale_dtype)
    out = torch._scaled_mm(codes_a.view(fp4), codes_b.view(fp4).t(), sa, sb, out_dtype=torch.float32)
    return out if alpha is None else out * alpha
