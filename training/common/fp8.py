"""FP8 matmuls for the transformer blocks of either benchmark (BERT and Llama), chosen once at start:
Transformer Engine where the image has it, else torchao's float8 training (`FP8_BACKEND=auto`), or our own
delayed-scaling linear (`native`: `Fp8Linear`, its casts in Triton on GPUs where they match PyTorch's,
`fp8_kernels`)."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Shard

from training.common.backends import importable


@dataclass
class Fp8:
    """What FP8 needs from the training loop: a context around forward (Transformer Engine's autocast) and a
    hook to call whenever the weights change, once initialized and after each optimizer step (the weights'
    scales for FP8 all-gathers: torchao's precompute, `precompute_weight_scales` for the native linear)."""

    backend: str = "off"
    description: str = "off"
    forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    weights_changed: Callable[[nn.Module], None] = field(default=lambda model: None)


def choose_fp8_backend(requested: str) -> str:
    if requested == "native":
        arch = _rocm_arch()
        if arch.startswith("gfx94"):
            raise ValueError(
                f"FP8_BACKEND=native computes in the OCP FP8 formats (e4m3fn, e5m2), which this GPU ({arch}: "
                "MI300X / MI325X) does not multiply; use FP8_BACKEND=te or torchao"
            )
        return requested
    if requested == "auto":
        if importable("transformer_engine"):
            return "te"
        if importable("torchao"):
            return "torchao"
        raise ValueError("FP8=1 needs Transformer Engine or torchao; neither is importable")
    module = {"te": "transformer_engine", "torchao": "torchao"}[requested]
    if not importable(module):
        raise ValueError(f"FP8_BACKEND={requested} but {module} is not importable")
    return requested


def _rocm_arch() -> str:
    """The AMD GPU's architecture name (gfx942, gfx950, ...), or "" on other devices."""
    if torch.version.hip is None or not torch.cuda.is_available():
        return ""
    return torch.cuda.get_device_properties(0).gcnArchName


def _fp8_linear(module: nn.Module, fqn: str) -> bool:
    """FP8 for the projections inside the transformer blocks (`layers.N...`, also under Hugging Face's
    `model.` prefix) only, not the output layer or heads (as NeMo's and NVIDIA's recipes), and only where
    both dimensions are multiples of 16 (the FP8 GEMM's requirement)."""
    in_block = fqn.startswith("layers.") or ".layers." in fqn
    return (
        isinstance(module, nn.Linear)
        and in_block
        and module.in_features % 16 == 0
        and module.out_features % 16 == 0
    )


E4M3_MAX, E5M2_MAX = torch.finfo(torch.float8_e4m3fn).max, torch.finfo(torch.float8_e5m2).max  # 448, 57344
# The native linear's casts run in Triton wherever it is installed (GPU builds of PyTorch ship it, for NVIDIA
# and AMD alike); FP8_CASTS=pytorch leaves them to PyTorch (to compare, or to rule the kernels out).
if importable("triton") and os.environ.get("FP8_CASTS") != "pytorch":
    from training.common import fp8_kernels as _kernels
else:
    _kernels = None


def _cast(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    fmax = torch.finfo(dtype).max
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype)


def _scale(amax: torch.Tensor, fmax: float) -> torch.Tensor:
    return fmax / amax.float().clamp(min=1e-12)


def _amax(t: torch.Tensor, by_rows: bool = False) -> torch.Tensor:
    """max |t|. `by_rows`: row maxima first, a row reduction the compiler fuses into the kernel producing t
    row by row (LayerNorm, GELU) instead of a separate pass over t."""
    t = t.detach().abs()
    return (t.amax(dim=-1) if by_rows else t).amax().float()


def _cast_transpose(t, scale, dtype, amax=None, by_rows=False):
    """(t scaled and cast to `dtype`, the same transposed and contiguous); with `amax`, its max |t| is
    written there. One Triton pass on a GPU (`fp8_kernels`), else PyTorch (CPU, or no Triton; `by_rows`
    as `_amax`)."""
    if _kernels is not None and t.is_cuda:
        buffer, update = _kernel_amax(amax, t.device)
        return _kernels.cast_transpose(t, scale, buffer, dtype, update)
    if amax is not None:
        amax.copy_(_amax(t, by_rows))
    t8 = _cast(t, scale, dtype)
    return t8, t8.t().contiguous()


def _kernel_amax(amax: torch.Tensor | None, device) -> tuple[torch.Tensor, bool]:
    """A kernel's (amax, update_amax) arguments: the buffer to update, or a scratch one left alone."""
    return (amax, True) if amax is not None else (torch.empty((), device=device), False)


def _cast_weight(w: torch.Tensor, gathered_scale: torch.Tensor | None = None):
    """w in e4m3 with the scale of its current amax: (copy, transposed copy, scale). A weight all-gathered in
    FP8 (`gathered_scale`, its scale) already holds both copies in its bytes (`_unpack`)."""
    if gathered_scale is not None:
        return (*_unpack(w), gathered_scale)
    scale = _scale(_amax(w), E4M3_MAX)
    return (*_cast_transpose(w, scale, torch.float8_e4m3fn), scale)


def _unpack(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the e4m3 weight and of its transposed copy that an FP8 all-gather wrote into the first bytes
    of the (out, in) tensor FSDP2 hands the module as its weight (`_Fp8GatheredWeight`)."""
    n, (rows, cols) = w.numel(), w.shape
    codes = w.view(torch.uint8).view(-1)
    w8, w8t = codes[:n].view(torch.float8_e4m3fn), codes[n : 2 * n].view(torch.float8_e4m3fn)
    return w8.view(rows, cols), w8t.view(cols, rows)


def _act_cast_transpose(up, gate, scale, amax=None):
    """`_cast_transpose` to e4m3 of the MLP's activation: silu(gate) * up (SwiGLU) or, without gate, gelu(up);
    on a GPU one Triton pass that never writes it in bf16 (`fp8_kernels`), elsewhere PyTorch's eager ops."""
    if _kernels is not None and up.is_cuda:
        if gate is None:
            return _kernels.gelu_cast_transpose(up, scale, *_kernel_amax(amax, up.device))
        return _kernels.swiglu_cast_transpose(gate, up, scale, *_kernel_amax(amax, up.device))
    h = F.gelu(up) if gate is None else F.silu(gate) * up
    return _cast_transpose(h, scale, torch.float8_e4m3fn, amax, True)


def _act_backward_cast_transpose(dh, up, gate, up_scale, gate_scale, up_amax, gate_amax):
    """The gradients of the activation's inputs, for dh the gradient of its output, each `_cast_transpose`d to
    e5m2 with its amax updated: SwiGLU (dup, dup transposed, dgate, dgate transposed); GELU (dup, dup
    transposed, the column sums of dup in float32: the up projection's bias gradient). One Triton pass on a
    GPU; elsewhere what eager autograd computes."""
    e5m2 = torch.float8_e5m2
    if gate is None:
        if _kernels is not None and up.is_cuda:
            return _kernels.gelu_backward_cast_transpose(dh, up, up_scale, up_amax)
        dup = torch.ops.aten.gelu_backward(dh, up)
        return (*_cast_transpose(dup, up_scale, e5m2, up_amax), dup.sum(0, dtype=torch.float32))
    if _kernels is not None and up.is_cuda:
        dg, dgt, du, dut = _kernels.swiglu_backward_cast_transpose(
            dh, gate, up, gate_scale, up_scale, gate_amax, up_amax
        )
        return du, dut, dg, dgt
    dgate, dup = torch.ops.aten.silu_backward(dh * up, gate), dh * F.silu(gate)
    return (
        *_cast_transpose(dup, up_scale, e5m2, up_amax),
        *_cast_transpose(dgate, gate_scale, e5m2, gate_amax),
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
    h8, h8t = _kernels.swiglu_cast_transpose(g, u, scale, amax[0], True)
    dg8, dg8t, du8, du8t = _kernels.swiglu_backward_cast_transpose(dh, g, u, scale, scale, amax[1], amax[2])
    gelu8, gelu8t = _kernels.gelu_cast_transpose(u, scale, amax[3], True)
    da8, da8t, colsum = _kernels.gelu_backward_cast_transpose(dh, u, scale, amax[4])
    da = torch.ops.aten.gelu_backward(dh, u)
    checks = (
        ("SwiGLU's output", h8, h8t, amax[0], F.silu(g) * u),
        ("SwiGLU's gate gradient", dg8, dg8t, amax[1], torch.ops.aten.silu_backward(dh * u, g)),
        ("SwiGLU's up gradient", du8, du8t, amax[2], dh * F.silu(g)),
        ("GELU's output", gelu8, gelu8t, amax[3], F.gelu(u)),
        ("GELU's gradient", da8, da8t, amax[4], da),
    )
    for name, y, yt, got_amax, ref in checks:
        if not _fp8_codes_close(y, _cast(ref, scale, y.dtype)):
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
    # (FP8 inputs: the FP8 all-gather's copy of the gathered codes, `_Fp8GatheredWeight`)
    for src, dtype in itertools.product(
        (torch.bfloat16, torch.float32, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2)
    ):
        x, amax = t.to(src), torch.zeros((), device=device)
        y, yt = _kernels.cast_transpose(x, scale, amax, dtype, True)
        want = _cast(x, scale, dtype)
        for name, got, ref in (("copy", y, want), ("transposed copy", yt, want.t().contiguous())):
            if not torch.equal(got.view(torch.uint8), ref.view(torch.uint8)):
                return f"the {name} of {shape[0]}x{shape[1]} {src} cast to {dtype}"
        if float(amax) != float(x.float().abs().max()):
            return f"the amax of {shape[0]}x{shape[1]} {src}"
    return _mlp_kernels_fault(device, shape)


def _choose_casts() -> str:
    """Triton casts on GPUs if they match PyTorch's there (checked by each native `apply_fp8`)."""
    global _kernels
    if _kernels is None or not torch.cuda.is_available():
        return "PyTorch"
    fault = triton_casts_fault(torch.device("cuda", torch.cuda.current_device()))
    if fault:
        _kernels = None
        return f"PyTorch (the Triton kernel got {fault} wrong on this GPU)"
    return "Triton (checked against PyTorch's on this GPU)"


class _Fp8Matmul(torch.autograd.Function):
    """x @ w.T with both operands in e4m3 and the gradients in e5m2 (the HYBRID format). x is cast with the
    scale of the previous step's amax (delayed scaling: no pass over x before its cast), its amax recorded
    in the same pass into `x_amax_next` (`update_x_amax`, in training) and moved to `x_amax` by the backward
    (`_commit`): so a forward recomputed in the backward (activation checkpointing) casts as the first one
    did. w is cast with its current amax (a small tensor), the incoming gradient with the previous backward's
    amax, which the backward updates likewise. Each cast also writes the transposed copy that the backward's
    GEMMs need (the FP8 GEMM takes row-major x column-major operands): x's and the gradient's for the weight
    gradient, w's for the input gradient."""

    @staticmethod
    def forward(ctx, x, w, b, x_amax, x_amax_next, g_amax, update_x_amax, w_gathered_scale):
        x_scale = _scale(x_amax, E4M3_MAX)
        x8, x8t = _cast_transpose(
            x, x_scale, torch.float8_e4m3fn, x_amax_next if update_x_amax else None, True
        )
        w8, w8t, w_scale = _cast_weight(w, w_gathered_scale)
        bias = None if b is None else b.to(torch.bfloat16)  # added in the GEMM's epilogue
        out = torch.bfloat16
        y = torch._scaled_mm(x8, w8.t(), x_scale.reciprocal(), w_scale.reciprocal(), bias, out_dtype=out)
        ctx.save_for_backward(x8t, w8t, x_scale, w_scale)
        # not saved for backward: that would check its version, which another micro-batch's backward may
        # change in between (a pipeline's 1F1B order runs two forwards before their backwards)
        ctx.g_amax, ctx.commit = g_amax, [(x_amax, x_amax_next)] if update_x_amax else []
        ctx.dtypes = x.dtype, w.dtype, None if b is None else b.dtype
        return y

    @staticmethod
    def backward(ctx, g):
        (x8t, w8t, x_scale, w_scale), g_amax = ctx.saved_tensors, ctx.g_amax
        g_scale = _scale(g_amax, E5M2_MAX)
        g8, g8t = _cast_transpose(g, g_scale, torch.float8_e5m2, g_amax)
        g_inv = g_scale.reciprocal()
        dx = torch._scaled_mm(g8, w8t.t(), g_inv, w_scale.reciprocal(), out_dtype=ctx.dtypes[0])
        dw = torch._scaled_mm(g8t, x8t.t(), g_inv, x_scale.reciprocal(), out_dtype=ctx.dtypes[1])
        db = None if ctx.dtypes[2] is None else g.sum(0, dtype=torch.float32).to(ctx.dtypes[2])
        _commit(ctx.commit)
        return dx, dw, db, None, None, None, None, None


def _commit(pairs) -> None:
    """In a backward: each input amax recorded by its forward (`next`) becomes the one the next forward
    casts with."""
    for amax, recorded in pairs:
        amax.copy_(recorded)


class _Fp8MLP(torch.autograd.Function):
    """An MLP with its projections in FP8 as `_Fp8Matmul`'s: down(silu(gate(x)) * up(x)) (Llama's SwiGLU, no
    biases) or, without gate, down(gelu(up(x))) (BERT's FFN, biases in the GEMMs' epilogues), with fewer
    passes over memory than one `Fp8Linear` after another. x is cast once for gate and up. The activation's
    output is written only in FP8, for down (one kernel, not the activation then the cast); in the backward,
    its input gradients likewise, for the up projections' GEMMs (with GELU, the up bias's gradient summed in
    the same pass). The same numbers as the `Fp8Linear`s (bit for bit in PyTorch; on GPUs up to where
    Triton's exp and erf differ from CUDA's). Amax buffers: x's and h's (the inputs of up and of down;
    recorded with `update_amax` into x_amax_next and h_amax_next, moved by the backward as `_Fp8Matmul`'s),
    and the gradients' of y, up and gate (updated by the backward). `w*_gathered`: the scales of weights
    all-gathered in FP8, or None."""

    @staticmethod
    def forward(ctx, x, w_up, b_up, w_gate, w_down, b_down, x_amax, x_amax_next, h_amax, h_amax_next, dy_amax,
                dup_amax, dgate_amax, update_amax, wu_gathered, wg_gathered, wd_gathered):  # fmt: skip
        x_scale, h_scale = _scale(x_amax, E4M3_MAX), _scale(h_amax, E4M3_MAX)
        x8, x8t = _cast_transpose(x, x_scale, torch.float8_e4m3fn, x_amax_next if update_amax else None, True)
        x_inv, bf16 = x_scale.reciprocal(), torch.bfloat16
        wu8, wu8t, u_scale = _cast_weight(w_up, wu_gathered)
        wd8, wd8t, d_scale = _cast_weight(w_down, wd_gathered)
        bias_up, bias_down = (None if b is None else b.to(bf16) for b in (b_up, b_down))
        up = torch._scaled_mm(x8, wu8.t(), x_inv, u_scale.reciprocal(), bias_up, out_dtype=bf16)
        gate = wg8t = g_scale = None
        if w_gate is not None:
            wg8, wg8t, g_scale = _cast_weight(w_gate, wg_gathered)
            gate = torch._scaled_mm(x8, wg8.t(), x_inv, g_scale.reciprocal(), out_dtype=bf16)
        h8, h8t = _act_cast_transpose(up, gate, h_scale, h_amax_next if update_amax else None)
        y = torch._scaled_mm(
            h8, wd8.t(), h_scale.reciprocal(), d_scale.reciprocal(), bias_down, out_dtype=bf16
        )
        ctx.save_for_backward(
            x8t, up, gate, h8t, wu8t, wg8t, wd8t, x_scale, h_scale, u_scale, g_scale, d_scale
        )
        ctx.g_amax = dy_amax, dup_amax, dgate_amax  # not saved: see _Fp8Matmul
        ctx.commit = [(x_amax, x_amax_next), (h_amax, h_amax_next)] if update_amax else []
        ctx.dtypes = (
            x.dtype,
            w_up.dtype,
            None if b_up is None else b_up.dtype,
            None if b_down is None else b_down.dtype,
        )
        return y

    @staticmethod
    def backward(ctx, dy):
        x8t, up, gate, h8t, wu8t, wg8t, wd8t, x_scale, h_scale, u_scale, g_scale, d_scale = ctx.saved_tensors
        (dy_amax, dup_amax, dgate_amax), (x_dtype, w_dtype, bu_dtype, bd_dtype) = ctx.g_amax, ctx.dtypes
        dy_scale, dup_scale = _scale(dy_amax, E5M2_MAX), _scale(dup_amax, E5M2_MAX)
        dgate_scale = None if gate is None else _scale(dgate_amax, E5M2_MAX)
        dy8, dy8t = _cast_transpose(dy, dy_scale, torch.float8_e5m2, dy_amax)
        dy_inv, x_inv = dy_scale.reciprocal(), x_scale.reciprocal()
        dh = torch._scaled_mm(dy8, wd8t.t(), dy_inv, d_scale.reciprocal(), out_dtype=torch.bfloat16)
        dw_down = torch._scaled_mm(dy8t, h8t.t(), dy_inv, h_scale.reciprocal(), out_dtype=w_dtype)
        db_down = None if bd_dtype is None else dy.sum(0, dtype=torch.float32).to(bd_dtype)
        dup8, dup8t, *rest = _act_backward_cast_transpose(
            dh, up, gate, dup_scale, dgate_scale, dup_amax, dgate_amax
        )
        dup_inv = dup_scale.reciprocal()
        dx = torch._scaled_mm(dup8, wu8t.t(), dup_inv, u_scale.reciprocal(), out_dtype=x_dtype)
        dw_up = torch._scaled_mm(dup8t, x8t.t(), dup_inv, x_inv, out_dtype=w_dtype)
        db_up = dw_gate = None
        if gate is None:
            db_up = None if bu_dtype is None else rest[0].to(bu_dtype)
        else:
            (dg8, dg8t), dg_inv = rest, dgate_scale.reciprocal()
            dx = dx + torch._scaled_mm(dg8, wg8t.t(), dg_inv, g_scale.reciprocal(), out_dtype=x_dtype)
            dw_gate = torch._scaled_mm(dg8t, x8t.t(), dg_inv, x_inv, out_dtype=w_dtype)
        _commit(ctx.commit)
        return dx, dw_up, db_up, dw_gate, dw_down, db_down, *[None] * 11


def fusable_mlp(*linears: nn.Module | None) -> bool:
    """Whether `fused_mlp` can run an MLP of these linears: native FP8 ones, not tensor-parallel."""
    return all(
        isinstance(m, Fp8Linear) and not isinstance(m.weight, DTensor) for m in linears if m is not None
    )


def fused_mlp(x: torch.Tensor, up: Fp8Linear, down: Fp8Linear, gate: Fp8Linear | None = None) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)), or without gate down(gelu(up(x))), through `_Fp8MLP` with the linears'
    parameters and amax buffers (gate's x_amax and x_amax_next, the same as up's, stay unused)."""
    flat = x.reshape(-1, x.shape[-1])
    training = down.training and torch.is_grad_enabled()
    w_gate, dgate_amax = (None, None) if gate is None else (gate.weight, gate.g_amax)
    y = _Fp8MLP.apply(flat, up.weight, up.bias, w_gate, down.weight, down.bias, up.x_amax,
                      up.x_amax_next, down.x_amax, down.x_amax_next, down.g_amax, up.g_amax, dgate_amax,
                      training, up.gathered_scale(), None if gate is None else gate.gathered_scale(),
                      down.gathered_scale())  # fmt: skip
    return y.view(*x.shape[:-1], -1)


class Fp8Linear(nn.Linear):
    """nn.Linear (same parameters and names) computing in FP8 with delayed scaling (`_Fp8Matmul`); the amax
    buffers start at the formats' maxima, so the first step casts with scale 1, as Transformer Engine. A model
    built on the meta device calls `reset_amax` once materialized (`to_empty` leaves buffers unset). Under
    FSDP2 its weight may be all-gathered in FP8 (`gather_weights_in_fp8`)."""

    gathers_fp8 = False  # its weight is an `_Fp8GatheredWeight`, scaled by the `w_scale` buffer

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Fp8Linear:
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        new.weight, new.bias = linear.weight, linear.bias
        device = linear.weight.device
        new.register_buffer("x_amax", torch.tensor(E4M3_MAX, device=device), persistent=False)
        new.register_buffer("x_amax_next", torch.tensor(E4M3_MAX, device=device), persistent=False)
        new.register_buffer("g_amax", torch.tensor(E5M2_MAX, device=device), persistent=False)
        return new

    @torch.no_grad()
    def reset_amax(self) -> None:
        self.x_amax.fill_(E4M3_MAX)
        self.x_amax_next.fill_(E4M3_MAX)
        self.g_amax.fill_(E5M2_MAX)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.weight, DTensor):
            return self._forward_tensor_parallel(x)
        return self._matmul(x, self.weight, self.bias, self.x_amax, self.x_amax_next, self.g_amax)

    def gathered_scale(self) -> torch.Tensor | None:
        """The scale its weight was all-gathered in FP8 with, or None (a plain weight, cast here)."""
        return self.w_scale if self.gathers_fp8 else None

    def _matmul(self, x, w, b, x_amax, x_amax_next, g_amax):
        flat = x.reshape(-1, x.shape[-1])
        # the amax follows training forwards only (not evaluation, nor other no-grad forwards)
        training = self.training and torch.is_grad_enabled()
        y = _Fp8Matmul.apply(flat, w, b, x_amax, x_amax_next, g_amax, training, self.gathered_scale())
        return y.view(*x.shape[:-1], -1)

    def _forward_tensor_parallel(self, x):
        """Under DTensor tensor parallelism (the weight sharded by rows: column-parallel, with the input
        replicated; or by columns: row-parallel, with the input sharded the same way): the FP8 GEMM of the
        local shards, with this rank's own scales (each rank dequantizes its product before any sum, so the
        scales need not agree), DTensor only at the edges. The gradient of a replicated input is a partial
        sum per rank; DTensor all-reduces it."""
        w = self.weight
        if w.device_mesh.ndim != 1 or not w.placements[0].is_shard():
            raise NotImplementedError(f"native FP8 linear with a weight placed {w.placements}")
        row_parallel = w.placements[0].dim == 1
        if row_parallel and self.bias is not None:
            raise NotImplementedError(
                "native FP8 row-parallel linear with a bias (it would be added per rank)"
            )
        grad = [Shard(x.ndim - 1)] if row_parallel else [Partial()]
        b = None if self.bias is None else self.bias.to_local()
        # parallelize_module made the amax buffers replicated DTensors: each rank keeps its own values
        buffers = self.x_amax, self.x_amax_next, self.g_amax
        amax = [a.to_local() if isinstance(a, DTensor) else a for a in buffers]
        y = self._matmul(x.to_local(grad_placements=grad), w.to_local(), b, *amax)
        out = [Partial()] if row_parallel else [Shard(y.ndim - 1)]
        return DTensor.from_local(y, w.device_mesh, out, run_check=False)


def reset_fp8_state(model: nn.Module) -> None:
    """After a meta-device model is materialized (`to_empty`): the native FP8 linears' amax buffers."""
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            module.reset_amax()


_ONES: dict[torch.device, torch.Tensor] = {}  # the scale of a plain copy, per device


class _Fp8GatheredWeight(torch.Tensor):
    """A native FP8 linear's weight under FSDP2 that is all-gathered in FP8, as Megatron's `fp8_param_gather`
    and torchao's FP8 all-gather. Its shard is the plain tensor (the float32 master copy) for everything but
    FSDP2's all-gather: initialization, the optimizer and the clip see its data. FSDP2 calls
    `fsdp_pre_all_gather`, which casts the shard to e4m3 with the scale of the whole weight's amax
    (`precompute_weight_scales`, after each optimizer step), so ranks exchange 1 byte per element instead of
    bf16's 2, and no one casts the gathered weight again; then `fsdp_post_all_gather` writes the gathered
    codes, row-major and transposed (what the forward's and the input gradient's GEMMs take), into the bytes
    of the (out, in) bf16 tensor that FSDP2 gives the module as its weight (`_unpack`: the GEMMs read views;
    its gradient is a plain bf16 one, reduce-scattered as any other)."""

    # ops whose results stay this subclass (FSDP2's sharding, padding and `to_empty`; nn.Parameter's detach);
    # any other op computes on the plain data and returns plain tensors
    _KEEP = {
        torch.ops.aten.detach.default, torch.ops.aten.alias.default, torch.ops.aten.empty_like.default,
        torch.ops.aten.new_zeros.default, torch.ops.aten.new_empty.default, torch.ops.aten.slice.Tensor,
        torch.ops.aten.split.Tensor, torch.ops.aten.view.default, torch.ops.aten.as_strided.default,
        torch.ops.aten.copy_.default, torch.ops.aten.clone.default, torch.ops.aten._to_copy.default,
    }  # fmt: skip

    @staticmethod
    def __new__(cls, data: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, strides=data.stride(), storage_offset=data.storage_offset(), dtype=data.dtype,
            device=data.device, requires_grad=data.requires_grad,
        )  # fmt: skip

    def __init__(self, data: torch.Tensor):
        self._data = data

    def __repr__(self) -> str:
        return f"_Fp8GatheredWeight({self._data!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map, tree_map_only

        def plain(t):
            return t._data if isinstance(t, cls) else t

        out = func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))
        return tree_map_only(torch.Tensor, cls, out) if func in cls._KEEP else out

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        if not module.w_scale_ready:
            raise RuntimeError(
                "an FP8 all-gather before the weights' scales were computed: call the Fp8 hook "
                "`weights_changed(model)` once the weights are initialized (and after each optimizer step)"
            )
        rows = -(-outer_size[0] // mesh.size())  # FSDP2 pads the last ranks' shards to this many rows
        shard, n = self._data, self._data.shape[0]
        codes = torch.empty((rows, shard.shape[1]), dtype=torch.float8_e4m3fn, device=shard.device)
        codes[n:].view(torch.uint8).zero_()
        if n and _kernels is not None and shard.is_cuda:  # the cast alone, no transposed copy
            _kernels.launch(shard, module.w_scale, codes[:n], None, module.w_scale, False, eager=True)
        elif n:
            codes[:n] = _cast(shard, module.w_scale, codes.dtype)
        return (codes,), outer_size[0]

    @torch.no_grad()
    def fsdp_post_all_gather(self, outputs, rows, param_dtype, *, out=None):
        (codes,) = outputs
        codes = codes[:rows]
        weight = torch.empty(codes.shape, dtype=param_dtype, device=codes.device) if out is None else out
        if weight.element_size() < 2:
            raise ValueError(f"an FP8 all-gather into {param_dtype} weights (2 bytes or more needed)")
        with torch.autograd._unsafe_preserve_version_counter(weight):  # autograd saved its views
            w8, w8t = _unpack(weight)
            if _kernels is not None and codes.is_cuda:  # a copy and a transposed copy, one pass
                one = _ONES.get(codes.device)
                if one is None:
                    one = _ONES[codes.device] = torch.ones((), device=codes.device)
                _kernels.launch(codes, one, w8, w8t, one, False, eager=True)
            else:
                w8.copy_(codes)
                w8t.copy_(codes.t())
        return None if out is not None else (weight, (weight,))


def local_data(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor under a DTensor (its local shard) and under an `_Fp8GatheredWeight`."""
    if isinstance(t, DTensor):
        t = t._local_tensor
    return t._data if isinstance(t, _Fp8GatheredWeight) else t


def gather_weights_in_fp8(model: nn.Module) -> int:
    """Before FSDP2's `fully_shard` (and without tensor parallelism): make the native FP8 linears' weights
    all-gathered in FP8 (`_Fp8GatheredWeight`, scaled by a new `w_scale` buffer that
    `precompute_weight_scales` sets). Returns how many."""
    count = 0
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            w = module.weight
            module.weight = nn.Parameter(_Fp8GatheredWeight(w.detach()), requires_grad=w.requires_grad)
            module.register_buffer("w_scale", torch.ones((), device=w.device), persistent=False)
            module.gathers_fp8, module.w_scale_ready = True, False
            count += 1
    return count


@torch.no_grad()
def precompute_weight_scales(model: nn.Module) -> None:
    """The scales FP8 all-gathers cast the weights' shards with (`_Fp8GatheredWeight`): each weight's max |w|
    over all its shards, from one fused norm and one all-reduce for the whole model. Run once the weights
    are set (initialized, then after each optimizer step) while they are sharded."""
    modules = [m for m in model.modules() if isinstance(m, Fp8Linear) and m.gathers_fp8]
    if not modules:
        return
    weights = [m.weight for m in modules]
    if not all(isinstance(w, DTensor) for w in weights):
        raise RuntimeError(
            "precompute_weight_scales runs on FSDP2-sharded weights (after fully_shard, resharded)"
        )
    # (a rank's shard may be empty, which has no infinity norm: a 0 stands in)
    shards = [s if s.numel() else s.new_zeros(1) for s in map(local_data, weights)]
    amax = torch.stack(torch._foreach_norm(shards, float("inf"))).float()
    torch.distributed.all_reduce(
        amax, torch.distributed.ReduceOp.MAX, group=weights[0].device_mesh.get_group()
    )
    torch._foreach_copy_([m.w_scale for m in modules], list(_scale(amax, E4M3_MAX).unbind()))
    for m in modules:
        m.w_scale_ready = True


def _swap_linears(model: nn.Module, make: Callable[[nn.Linear], nn.Module]) -> int:
    swapped = 0
    for fqn, module in list(model.named_modules()):
        for name, child in list(module.named_children()):
            if _fp8_linear(child, f"{fqn}.{name}" if fqn else name):
                setattr(module, name, make(child))
                swapped += 1
    return swapped


def apply_fp8(
    model: nn.Module, enabled: bool, backend: str = "auto", recipe: str = "tensorwise", fsdp: bool = False
) -> Fp8:
    """Swap the blocks' linear layers for FP8 ones: Transformer Engine's (delayed scaling, HYBRID format,
    amax history 4, most recent: AMD's and NVIDIA's recipe), torchao's float8 training (dynamic `recipe`
    scaling) or our own (`native`). `fsdp`: FSDP2 will shard the model without tensor parallelism, and
    torchao's (tensorwise) and the native weights are then all-gathered in FP8."""
    if not enabled:
        return Fp8()
    backend = choose_fp8_backend(backend)
    if backend == "te":
        import transformer_engine.pytorch as te
        from transformer_engine.common.recipe import DelayedScaling, Format

        def te_linear(child: nn.Linear) -> nn.Module:
            new = te.Linear(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                params_dtype=child.weight.dtype,
                device=child.weight.device,
            )
            if child.weight.device.type != "meta":
                with torch.no_grad():
                    new.weight.copy_(child.weight)
                    if child.bias is not None:  # BERT's linears have biases (a checkpoint's too)
                        new.bias.copy_(child.bias)
            return new

        swapped = _swap_linears(model, te_linear)
        fp8_recipe = DelayedScaling(
            fp8_format=Format.HYBRID, amax_history_len=4, amax_compute_algo="most_recent"
        )
        return Fp8(
            "te",
            f"transformer_engine delayed scaling HYBRID, {swapped} linear layers",
            lambda: te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe),
        )
    if backend == "native":
        swapped = _swap_linears(model, Fp8Linear.from_linear)
        casts = _choose_casts()
        gather = f", FP8 all-gather of {gather_weights_in_fp8(model)} weights" if fsdp else ""
        return Fp8(
            "native",
            f"native FP8 (delayed scaling, e4m3 x e4m3, e5m2 gradients, casts in {casts}), "
            f"{swapped} linear layers{gather}",
            weights_changed=precompute_weight_scales,
        )
    from torchao.float8 import (
        Float8LinearConfig,
        convert_to_float8_training,
        precompute_float8_dynamic_scale_for_fsdp,
    )

    if recipe == "tensorwise":
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp)
    else:
        config = Float8LinearConfig.from_recipe_name(recipe)
    convert_to_float8_training(model, config=config, module_filter_fn=_fp8_linear)
    swapped = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
    precompute = recipe == "tensorwise" and fsdp

    def after_step(m: nn.Module) -> None:
        if precompute:
            precompute_float8_dynamic_scale_for_fsdp(m)

    gather = ", FP8 all-gather" if precompute else ""
    return Fp8(
        "torchao",
        f"torchao float8 {recipe}{gather}, {swapped} linear layers",
        weights_changed=after_step,
    )
