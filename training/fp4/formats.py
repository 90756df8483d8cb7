"""The two 4-bit formats of the v6.0 Llama submissions, as quantize-dequantize functions on PyTorch tensors.
Each returns the values a 4-bit GEMM multiplies (element times its block scale), exactly: an E2M1 element has
two significant bits, an E8M0 scale none, an E4M3 scale four, so every product is exact in bf16 and fp32.

- MXFP4 (OCP MX v1.0; AMD's `MXFP4BlockScaling` in ROCm Transformer Engine, which Primus runs): E2M1
  elements in blocks of 32 along the reduction axis, one E8M0 (power of two) scale a block chosen by the
  OCP rule, 2^(floor(log2(block amax)) - 2) (2: the exponent of E2M1's largest value, 6), elements rounded
  to nearest even and saturated at +-6. torchao's `to_mx` (ScaleCalculationMode.FLOOR) is that rule, bit
  for bit (`tests/test_fp4.py`), so it quantizes here. `hadamard=True` (NVTE_MXFP4_USE_HADAMARD=1) first
  rotates each 16 consecutive elements along the reduction axis by the normalized 16-point Sylvester
  Hadamard matrix, deterministic: both operands of a GEMM are rotated the same, so (xH)(wH)^T = x w^T.
- NVFP4 (NVIDIA Transformer Engine's `NVFP4BlockScaling`, transformer_engine/common/recipe/__init__.py, and
  its reference quantizer): E2M1 elements in blocks of 16, an E4M3 scale a block and an FP32 scale a tensor,
  S = 448 x 6 / amax(tensor): block scale e4m3(block amax / 6 x S), elements rounded from x / (block scale /
  S). Own code, not torchao's `nvfp4_quantize`: that one clamps each block scale at E4M3's smallest
  normal value (2^-6) where Transformer Engine keeps the subnormal scales below it (and flushes a block
  whose scale rounds to 0), so the two part on small blocks of a tensor with a wide range
  (`tests/test_fp4.py` shows a block; elsewhere they agree bit for bit), and it has none of the recipe's
  switches: 16 x 16 blocks for weights
  (`two_d`, on unless NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1), stochastic rounding for gradients
  (`stochastic`, on unless NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=1; PyTorch's random numbers, not
  cuRAND's: the same distribution, other draws), and the random Hadamard transform (`rht`, the 16-point
  matrix times TE's fixed sign vector, for the weight gradient's operands; on unless
  NVTE_NVFP4_DISABLE_RHT=1).
"""

from __future__ import annotations

import math
from functools import cache

import torch
from torchao.prototype.mx_formats.constants import F4_E2M1_MAX, F8E4M3_MAX
from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, f32_to_f4_unpacked, unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import ScaleCalculationMode, get_fp_scale, to_mx

MX_BLOCK = 32
NV_BLOCK = 16
HADAMARD = 16
FP32_MAX = torch.finfo(torch.float32).max
# Transformer Engine's fixed signs of the NVFP4 random Hadamard transform (`get_wgrad_sign_vector`)
RHT_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """x (float32) on the E2M1 grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} with signs: nearest, ties to even,
    saturating at +-6 (torchao's cast)."""
    return f4_unpacked_to_f32(f32_to_f4_unpacked(x.float()))


def round_e2m1_stochastic(x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """x (float32) on the E2M1 grid, rounded to one of its two neighbours with probability in proportion to
    its nearness (Transformer Engine's stochastic rounding of NVFP4 gradients), saturating at +-6."""
    a = x.float().abs().clamp(max=F4_E2M1_MAX)
    step = torch.where(a < 2, 0.5, torch.where(a < 4, 1.0, 2.0))
    low = torch.floor(a / step) * step
    up = torch.rand(a.shape, generator=generator, device=a.device) < (a - low) / step
    return torch.copysign(torch.where(up, low + step, low), x.float())


@cache
def hadamard(signs: tuple[int, ...] | None = None) -> torch.Tensor:
    """The 16 x 16 Sylvester Hadamard matrix over 4 (orthonormal), its rows times `signs` when given (the
    NVFP4 random Hadamard transform: diag(signs) @ H)."""
    h = torch.ones(1, 1)
    while h.shape[0] < HADAMARD:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
    h = h / math.sqrt(HADAMARD)
    return h if signs is None else torch.tensor(signs, dtype=torch.float32)[:, None] * h


def rotate(x: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """Each 16 consecutive elements of x's last axis times `matrix` (float32)."""
    shape = x.shape
    blocks = x.float().reshape(*shape[:-1], shape[-1] // HADAMARD, HADAMARD)
    return (blocks @ matrix.to(x.device)).reshape(shape)


def pad_to(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """x with its last axis padded with zeros to a multiple of `multiple` (zeros add nothing to a GEMM's
    sums; the 4-bit GEMMs need whole blocks along the reduction axis)."""
    extra = -x.shape[-1] % multiple
    return torch.nn.functional.pad(x, (0, extra)) if extra else x


def mxfp4(x: torch.Tensor, use_hadamard: bool = False) -> torch.Tensor:
    """x (2-D, reduction axis last, a multiple of 32) quantized to MXFP4 and dequantized (float32): the
    values the 4-bit GEMM multiplies, in the rotated space when `use_hadamard`."""
    scale, packed = mxfp4_codes(x, use_hadamard)
    elements = f4_unpacked_to_f32(unpack_uint4(packed)).reshape(*x.shape[:-1], -1, MX_BLOCK)
    return (elements * get_fp_scale(scale).unsqueeze(-1)).reshape(x.shape)


def mxfp4_codes(x: torch.Tensor, use_hadamard: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x's MXFP4 encoding as torchao writes it: (E8M0 scales (rows, cols / 32), packed E2M1 codes (rows,
    cols / 2), two a byte), what a 4-bit GEMM reads."""
    x = rotate(x, hadamard()) if use_hadamard else x.float()
    return to_mx(x.contiguous(), torch.float4_e2m1fn_x2, MX_BLOCK, ScaleCalculationMode.FLOOR)


def mxfp4_scale_exponent(x: torch.Tensor) -> torch.Tensor:
    """The unbiased E8M0 exponent of each 32-block of x (last axis) that `mxfp4` picks (for the tests)."""
    scale, _ = to_mx(x.float().contiguous(), torch.float4_e2m1fn_x2, MX_BLOCK, ScaleCalculationMode.FLOOR)
    return scale.view(torch.uint8).to(torch.int32) - 127


def nvfp4_global_encode(amax: torch.Tensor) -> torch.Tensor:
    """The FP32 tensor scale S = 448 x 6 / amax (1 for an all-zero tensor), as Transformer Engine has it."""
    s = (F8E4M3_MAX * F4_E2M1_MAX / amax.float()).clamp(max=FP32_MAX)
    return torch.where((amax == 0) | (s == 0), torch.ones_like(s), s)


def nvfp4(
    x: torch.Tensor,
    two_d: bool = False,
    stochastic: bool = False,
    rht: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (2-D, reduction axis last, a multiple of 16; with `two_d` both axes) quantized to NVFP4: (the
    elements times their E4M3 block scales, float32 and exact; the tensor's decode scale 1 / S). Their
    product is the dequantized tensor; a GEMM multiplies the first and scales its result by both
    operands' second. `two_d`: one scale per 16 x 16 tile (weights); `stochastic`: stochastic rounding
    (gradients); `rht`: the random Hadamard transform first (the weight gradient's operands)."""
    elements, decode, s_dec = nvfp4_parts(x, two_d, stochastic, rht, generator)
    return (elements * decode).reshape(x.shape), s_dec


def nvfp4_parts(x, two_d=False, stochastic=False, rht=False, generator=None):
    """`nvfp4`'s parts: the E2M1 elements and the E4M3 block scales (float32, shaped to broadcast: (rows,
    cols / 16, 1), or (rows / 16, 1, cols / 16, 1) with `two_d`), and the decode scale 1 / S."""
    x = rotate(x, hadamard(RHT_SIGNS)) if rht else x.float()
    rows, cols = x.shape
    s_enc = nvfp4_global_encode(x.abs().amax())
    s_dec = 1.0 / s_enc
    if two_d:
        tiles = x.reshape(rows // NV_BLOCK, NV_BLOCK, cols // NV_BLOCK, NV_BLOCK)
        block_amax = tiles.abs().amax(dim=(1, 3), keepdim=True)
    else:
        tiles = x.reshape(rows, cols // NV_BLOCK, NV_BLOCK)
        block_amax = tiles.abs().amax(dim=-1, keepdim=True)
    decode = (block_amax / F4_E2M1_MAX * s_enc).clamp(max=F8E4M3_MAX).to(torch.float8_e4m3fn).float()
    encode = (1.0 / (decode * s_dec)).clamp(max=FP32_MAX)
    scaled = (tiles * encode).clamp(-F4_E2M1_MAX, F4_E2M1_MAX)
    elements = round_e2m1_stochastic(scaled, generator) if stochastic else round_e2m1(scaled)
    return elements, decode, s_dec
