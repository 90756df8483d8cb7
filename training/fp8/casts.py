"""The native FP8 path's casts: scale, cast and transpose, and the MLP's activations fused with their casts.

Each function takes `triton`: True runs the Triton kernels (`kernels`) on GPU tensors, False PyTorch's eager
ops, which round the same way. Which one a module uses is decided once, at `apply_fp8`, by `choose_casts`:
Triton where it is installed and matches PyTorch byte for byte on this GPU (`triton_casts_fault`), else
PyTorch, with the reason in the logged description.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from training.common.backends import importable

E4M3_MAX, E5M2_MAX = torch.finfo(torch.float8_e4m3fn).max, torch.finfo(torch.float8_e5m2).max  # 448, 57344

if importable("triton"):  # GPU builds of PyTorch ship it, for NVIDIA and AMD alike
    from training.fp8 import kernels
else:
    kernels = None


def cast(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    fmax = torch.finfo(dtype).max
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype)


def scale_of(amax: torch.Tensor, fmax: float) -> torch.Tensor:
    return fmax / amax.float().clamp(min=1e-12)


def amax_of(t: torch.Tensor, by_rows: bool = False) -> torch.Tensor:
    """max |t|. `by_rows`: row maxima first, a row reduction the compiler fuses into the kernel producing t
    row by row (LayerNorm, GELU) instead of a separate pass over t."""
    t = t.detach().abs()
    return (t.amax(dim=-1) if by_rows else t).amax().float()


def _on_kernels(triton: bool, t: torch.Tensor) -> bool:
    return triton and t.is_cuda


def _kernel_amax(amax: torch.Tensor | None, device) -> tuple[torch.Tensor, bool]:
    """A kernel's (amax, update_amax) arguments: the buffer to update, or a scratch one left alone."""
    return (amax, True) if amax is not None else (torch.empty((), device=device), False)


def cast_transpose(t, scale, dtype, amax=None, by_rows=False, triton=False, transpose=True):
    """(t scaled and cast to `dtype`, the same transposed and contiguous, or None without `transpose`: the
    copy only a weight gradient reads); with `amax`, its max |t| is written there. One Triton pass on a GPU,
    else PyTorch (`by_rows` as `amax_of`)."""
    if _on_kernels(triton, t):
        buffer, update = _kernel_amax(amax, t.device)
        t8, t8t = kernels.cast_transpose(t, scale, buffer, dtype, update, transpose)
        return t8, t8t if transpose else None
    if amax is not None:
        amax.copy_(amax_of(t, by_rows))
    t8 = cast(t, scale, dtype)
    return t8, t8.t().contiguous() if transpose else None


def pack_e4m3(t: torch.Tensor, triton: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """t as e4m3 codes scaled by its own max |t| (current scaling: no code saturates), and the inverse of
    that scale: a tensor kept for a backward in half of bf16's memory (`unpack_e4m3`). A max pass, then the
    cast (`cast_transpose` without the transposed copy)."""
    scale = scale_of(amax_of(t), E4M3_MAX)
    codes = cast_transpose(t, scale, torch.float8_e4m3fn, triton=triton, transpose=False)[0]
    return codes, scale.reciprocal()


def unpack_e4m3(codes: torch.Tensor, inverse: torch.Tensor, dtype=torch.bfloat16) -> torch.Tensor:
    """The values `pack_e4m3` kept, in `dtype`: the codes times the inverse scale, in float32, rounded once
    (what the SwiGLU backward kernel computes from the codes it reads)."""
    return (codes.float() * inverse).to(dtype)


def act_cast_transpose(up, gate, scale, amax=None, triton=False, transpose=True):
    """`cast_transpose` to e4m3 of the MLP's activation: silu(gate) * up (SwiGLU) or, without gate, gelu(up);
    on a GPU one Triton pass that never writes it in bf16, elsewhere PyTorch's eager ops. Without
    `transpose` (SwiGLU only: a frozen down projection) no transposed copy (None)."""
    if _on_kernels(triton, up):
        if gate is None:
            return kernels.gelu_cast_transpose(up, scale, *_kernel_amax(amax, up.device))
        h8, h8t = kernels.swiglu_cast_transpose(gate, up, scale, *_kernel_amax(amax, up.device), transpose)
        return h8, h8t if transpose else None
    h = F.gelu(up) if gate is None else F.silu(gate) * up
    return cast_transpose(h, scale, torch.float8_e4m3fn, amax, True, transpose=transpose or gate is None)


def act_backward_cast_transpose(
    dh, up, gate, up_scale, gate_scale, up_amax, gate_amax, triton=False, transpose=True, inverses=None
):
    """The gradients of the activation's inputs, for dh the gradient of its output, each `cast_transpose`d to
    e5m2 with its amax updated: SwiGLU (dup, dup transposed, dgate, dgate transposed; without `transpose`,
    frozen up and gate projections, None for the transposed copies); GELU (dup, dup transposed, the column
    sums of dup in float32: the up projection's bias gradient). One Triton pass on a GPU; elsewhere what
    eager autograd computes. `inverses` (SwiGLU): up and gate are e4m3 codes (`pack_e4m3`), these the
    inverses of their scales (up's, gate's); the kernel reads the codes (elsewhere they are unpacked first:
    compiled, the partitioner then keeps the unpacked bf16 values for the backward, not the codes)."""
    e5m2 = torch.float8_e5m2
    if gate is None:
        if _on_kernels(triton, up):
            return kernels.gelu_backward_cast_transpose(dh, up, up_scale, up_amax)
        dup = torch.ops.aten.gelu_backward(dh, up)
        return (*cast_transpose(dup, up_scale, e5m2, up_amax), dup.sum(0, dtype=torch.float32))
    if _on_kernels(triton, up):
        packed = () if inverses is None else inverses[::-1]  # (gate's, up's)
        dg, dgt, du, dut = kernels.swiglu_backward_cast_transpose(
            dh, gate, up, gate_scale, up_scale, gate_amax, up_amax, transpose, *packed
        )
        return (du, dut, dg, dgt) if transpose else (du, None, dg, None)
    if inverses is not None:
        up, gate = unpack_e4m3(up, inverses[0]), unpack_e4m3(gate, inverses[1])
    dgate, dup = torch.ops.aten.silu_backward(dh * up, gate), dh * F.silu(gate)
    return (
        *cast_transpose(dup, up_scale, e5m2, up_amax, transpose=transpose),
        *cast_transpose(dgate, gate_scale, e5m2, gate_amax, transpose=transpose),
    )


def _fp8_codes_close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """FP8 tensors equal but for a few values (under 0.1%) one code apart: what Triton's exp and erf, which
    are not CUDA's, may change in the activation kernels."""
    diff = (got.view(torch.uint8).int() - want.view(torch.uint8).int()).abs()
    return int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 1e-3


def _mlp_kernels_fault(device: torch.device, shape) -> str:
    """What the activation kernels get wrong against PyTorch's eager ops ("" if nothing): FP8 codes within
    `_fp8_codes_close`, transposed copies exact, amax and GELU's column sums within bf16's rounding."""
    gen = torch.Generator(device).manual_seed(1)
    dh, g, u = (torch.randn(shape, device=device, generator=gen).mul(3).bfloat16() for _ in range(3))
    scale, amax = torch.tensor(2.0, device=device), [torch.zeros((), device=device) for _ in range(5)]
    h8, h8t = kernels.swiglu_cast_transpose(g, u, scale, amax[0], True)
    dg8, dg8t, du8, du8t = kernels.swiglu_backward_cast_transpose(dh, g, u, scale, scale, amax[1], amax[2])
    gelu8, gelu8t = kernels.gelu_cast_transpose(u, scale, amax[3], True)
    da8, da8t, colsum = kernels.gelu_backward_cast_transpose(dh, u, scale, amax[4])
    da = torch.ops.aten.gelu_backward(dh, u)
    # without the transposed copies (frozen weights): the same row-major ones
    scratch = [torch.zeros((), device=device) for _ in range(3)]
    h_alone = kernels.swiglu_cast_transpose(g, u, scale, scratch[0], False, False)[0]
    dg_alone, _, du_alone, _ = kernels.swiglu_backward_cast_transpose(
        dh, g, u, scale, scale, *scratch[1:], False
    )
    alone = h_alone, dg_alone, du_alone
    if not all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(alone, (h8, dg8, du8))):
        return "SwiGLU's FP8 copies written without their transposed ones"
    # the backward from e4m3 codes (FP8_MLP_ACTIVATIONS): what it computes from their unpacked values
    (gc, gi), (uc, ui) = pack_e4m3(g, True), pack_e4m3(u, True)
    scratch = [torch.zeros((), device=device) for _ in range(4)]
    packed = kernels.swiglu_backward_cast_transpose(dh, gc, uc, scale, scale, *scratch[:2], True, gi, ui)
    unpacked = kernels.swiglu_backward_cast_transpose(
        dh, unpack_e4m3(gc, gi), unpack_e4m3(uc, ui), scale, scale, *scratch[2:]
    )
    same = all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(packed, unpacked))
    if not same or not torch.equal(torch.stack(scratch[:2]), torch.stack(scratch[2:])):
        return "SwiGLU's backward from e4m3 codes"
    checks = (
        ("SwiGLU's output", h8, h8t, amax[0], F.silu(g) * u),
        ("SwiGLU's gate gradient", dg8, dg8t, amax[1], torch.ops.aten.silu_backward(dh * u, g)),
        ("SwiGLU's up gradient", du8, du8t, amax[2], dh * F.silu(g)),
        ("GELU's output", gelu8, gelu8t, amax[3], F.gelu(u)),
        ("GELU's gradient", da8, da8t, amax[4], da),
    )
    for name, y, yt, got_amax, ref in checks:
        if not _fp8_codes_close(y, cast(ref, scale, y.dtype)):
            return f"the FP8 copy of {name}"
        if not torch.equal(yt.view(torch.uint8), y.t().contiguous().view(torch.uint8)):
            return f"the transposed copy of {name}"
        if abs(float(got_amax) - float(ref.abs().max())) > 2**-7 * float(ref.abs().max()):
            return f"the amax of {name}"
    want = da.sum(0, dtype=torch.float32)
    if float((colsum - want).abs().max()) > 2**-7 * float(da.float().abs().sum(0).max()):
        return "the column sums of GELU's gradient"
    return ""


def triton_casts_fault(device: torch.device, shape=(512, 1024)) -> str:
    """What the Triton casts get wrong on `device` against PyTorch's cast ("" if nothing): the FP8 copy, the
    transposed copy and the amax of bf16, float32 and e4m3 inputs, in both formats, compared byte for byte;
    then the MLP's activation kernels (`_mlp_kernels_fault`). Triton 3.6 wrote wrong transposed copies of
    float32 tiles until the kernel worked around it (`perf/RESULTS.md`); other Triton versions and GPUs
    (ROCm) may have faults of their own."""
    gen = torch.Generator(device).manual_seed(0)
    t = torch.randn(shape, device=device, generator=gen) * 3
    scale = torch.tensor(40.0, device=device)
    # (FP8 inputs: the FP8 all-gather's copy of the gathered codes, `gather._Fp8GatheredWeight`)
    for src, dtype in itertools.product(
        (torch.bfloat16, torch.float32, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2)
    ):
        x, amax = t.to(src), torch.zeros((), device=device)
        y, yt = kernels.cast_transpose(x, scale, amax, dtype, True)
        alone = kernels.cast_transpose(x, scale, torch.zeros((), device=device), dtype, False, False)[0]
        want = cast(x, scale, dtype)
        copies = ("copy", y, want), ("transposed copy", yt, want.t().contiguous()), ("lone copy", alone, want)
        for name, got, ref in copies:
            if not torch.equal(got.view(torch.uint8), ref.view(torch.uint8)):
                return f"the {name} of {shape[0]}x{shape[1]} {src} cast to {dtype}"
        if float(amax) != float(x.float().abs().max()):
            return f"the amax of {shape[0]}x{shape[1]} {src}"
    return _mlp_kernels_fault(device, shape)


def choose_casts(requested: str) -> tuple[bool, str]:
    """(use Triton, what was chosen and why) for FP8_CASTS `requested`: `auto` takes the Triton kernels on a
    GPU where they match PyTorch's casts there; `pytorch` never does (to compare, or to rule them out)."""
    if requested == "pytorch":
        return False, "PyTorch (FP8_CASTS=pytorch)"
    if kernels is None or not torch.cuda.is_available():
        return False, "PyTorch"
    try:
        fault = triton_casts_fault(torch.device("cuda", torch.cuda.current_device()))
    except Exception as err:  # noqa: BLE001 - a kernel that fails to build or run here: PyTorch's casts
        return False, f"PyTorch (the Triton casts failed on this GPU: {type(err).__name__}: {str(err)[:200]})"
    if fault:
        return False, f"PyTorch (the Triton kernel got {fault} wrong on this GPU)"
    return True, "Triton (checked against PyTorch's on this GPU)"
