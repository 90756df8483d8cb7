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
    hook after each optimizer step (torchao's scale precompute for FP8 all-gathers)."""

    backend: str = "off"
    description: str = "off"
    forward_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    after_optimizer_step: Callable[[nn.Module], None] = field(default=lambda model: None)


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
        dummy = amax if amax is not None else torch.empty((), device=t.device)
        return _kernels.cast_transpose(t, scale, dummy, dtype, amax is not None)
    if amax is not None:
        amax.copy_(_amax(t, by_rows))
    t8 = _cast(t, scale, dtype)
    return t8, t8.t().contiguous()


def _cast_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w in e4m3 with the scale of its current amax: (copy, transposed copy, scale)."""
    scale = _scale(_amax(w), E4M3_MAX)
    return (*_cast_transpose(w, scale, torch.float8_e4m3fn), scale)


def _swiglu_cast_transpose(g, u, scale, amax=None):
    """`_cast_transpose` of silu(g) * u to e4m3, which is never written in bf16 on a GPU (one Triton pass,
    `fp8_kernels`); elsewhere PyTorch's eager ops."""
    if _kernels is not None and g.is_cuda:
        dummy = amax if amax is not None else torch.empty((), device=g.device)
        return _kernels.swiglu_cast_transpose(g, u, scale, dummy, amax is not None)
    return _cast_transpose(F.silu(g) * u, scale, torch.float8_e4m3fn, amax, True)


def _swiglu_backward_cast_transpose(dh, g, u, g_scale, u_scale, g_amax, u_amax):
    """The gradients of g and u, for dh the gradient of silu(g) * u, each `_cast_transpose`d to e5m2 with its
    amax updated: (dg, dg transposed, du, du transposed). One Triton pass on a GPU; elsewhere what eager
    autograd computes."""
    if _kernels is not None and g.is_cuda:
        return _kernels.swiglu_backward_cast_transpose(dh, g, u, g_scale, u_scale, g_amax, u_amax)
    dg, du = torch.ops.aten.silu_backward(dh * u, g), dh * F.silu(g)
    e5m2 = torch.float8_e5m2
    return (*_cast_transpose(dg, g_scale, e5m2, g_amax), *_cast_transpose(du, u_scale, e5m2, u_amax))


def _fp8_codes_close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """FP8 tensors equal but for a few values (under 0.1%) one code apart: what Triton's exp, which is not
    CUDA's, may change in the SwiGLU kernels."""
    diff = (got.view(torch.uint8).int() - want.view(torch.uint8).int()).abs()
    return int(diff.max()) <= 1 and float((diff > 0).float().mean()) < 1e-3


def _swiglu_kernels_fault(device: torch.device, shape) -> str:
    """What the SwiGLU kernels get wrong against PyTorch's eager ops ("" if nothing): codes within
    `_fp8_codes_close`, transposed copies exact, amax within bf16's rounding."""
    gen = torch.Generator(device).manual_seed(1)
    dh, g, u = (torch.randn(shape, device=device, generator=gen).mul(3).bfloat16() for _ in range(3))
    scale, amax = torch.tensor(2.0, device=device), [torch.zeros((), device=device) for _ in range(3)]
    h8, h8t = _kernels.swiglu_cast_transpose(g, u, scale, amax[0], True)
    dg8, dg8t, du8, du8t = _kernels.swiglu_backward_cast_transpose(dh, g, u, scale, scale, amax[1], amax[2])
    checks = (
        ("SwiGLU's output", h8, h8t, amax[0], F.silu(g) * u),
        ("SwiGLU's gate gradient", dg8, dg8t, amax[1], torch.ops.aten.silu_backward(dh * u, g)),
        ("SwiGLU's up gradient", du8, du8t, amax[2], dh * F.silu(g)),
    )
    for name, y, yt, got_amax, ref in checks:
        if not _fp8_codes_close(y, _cast(ref, scale, y.dtype)):
            return f"the FP8 copy of {name}"
        if not torch.equal(yt.view(torch.uint8), y.t().contiguous().view(torch.uint8)):
            return f"the transposed copy of {name}"
        if abs(float(got_amax) - float(ref.abs().max())) > 2**-7 * float(ref.abs().max()):
            return f"the amax of {name}"
    return ""


def triton_casts_fault(device: torch.device, shape=(512, 1024)) -> str:
    """What the Triton casts get wrong on `device` against PyTorch's cast ("" if nothing): the FP8 copy, the
    transposed copy and the amax of bf16 and float32 inputs, in both formats, compared byte for byte; then the
    SwiGLU kernels (`_swiglu_kernels_fault`). Triton 3.6 wrote wrong transposed copies of float32 tiles until
    the kernel worked around it (`perf/RESULTS.md`); other Triton versions and GPUs (ROCm) may have faults of
    their own."""
    gen = torch.Generator(device).manual_seed(0)
    t = torch.randn(shape, device=device, generator=gen) * 3
    scale = torch.tensor(40.0, device=device)
    for src, dtype in itertools.product(
        (torch.bfloat16, torch.float32), (torch.float8_e4m3fn, torch.float8_e5m2)
    ):
        x, amax = t.to(src), torch.zeros((), device=device)
        y, yt = _kernels.cast_transpose(x, scale, amax, dtype, True)
        want = _cast(x, scale, dtype)
        for name, got, ref in (("copy", y, want), ("transposed copy", yt, want.t().contiguous())):
            if not torch.equal(got.view(torch.uint8), ref.view(torch.uint8)):
                return f"the {name} of {shape[0]}x{shape[1]} {src} cast to {dtype}"
        if float(amax) != float(x.abs().max()):
            return f"the amax of {shape[0]}x{shape[1]} {src}"
    return _swiglu_kernels_fault(device, shape)


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
    scale of the previous step's amax (delayed scaling: no pass over x before its cast) and its amax updated
    in the same pass (`update_x_amax`, in training), w with its current amax (a small tensor), the incoming
    gradient with the previous backward's amax, which the backward updates likewise. Each cast also writes the
    transposed copy that the backward's GEMMs need (the FP8 GEMM takes row-major x column-major operands):
    x's and the gradient's for the weight gradient, w's for the input gradient."""

    @staticmethod
    def forward(ctx, x, w, b, x_amax, g_amax, update_x_amax):
        x_scale = _scale(x_amax, E4M3_MAX)
        x8, x8t = _cast_transpose(x, x_scale, torch.float8_e4m3fn, x_amax if update_x_amax else None, True)
        w8, w8t, w_scale = _cast_weight(w)
        bias = None if b is None else b.to(torch.bfloat16)  # added in the GEMM's epilogue
        out = torch.bfloat16
        y = torch._scaled_mm(x8, w8.t(), x_scale.reciprocal(), w_scale.reciprocal(), bias, out_dtype=out)
        ctx.save_for_backward(x8t, w8t, x_scale, w_scale)
        # not saved for backward: that would check its version, which another micro-batch's backward may
        # change in between (a pipeline's 1F1B order runs two forwards before their backwards)
        ctx.g_amax = g_amax
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
        return dx, dw, db, None, None, None


class _Fp8SwiGLU(torch.autograd.Function):
    """down(silu(gate(x)) * up(x)), Llama's MLP, its three projections in FP8 as `_Fp8Matmul`'s, with fewer
    passes over memory: x is cast once for gate and up; SwiGLU's output is written only in FP8, for down
    (one kernel, not SwiGLU then the cast); in the backward, SwiGLU's input gradients are likewise written
    only in FP8, for gate's and up's GEMMs. The same numbers as three `Fp8Linear`s (bit for bit in PyTorch;
    on GPUs up to where Triton's exp differs from CUDA's). Amax buffers: x's and h's (the inputs of gate/up
    and of down; updated with `update_amax`), and the gradients' of y, g and u (updated by the backward)."""

    @staticmethod
    def forward(ctx, x, wg, wu, wd, x_amax, h_amax, dy_amax, dg_amax, du_amax, update_amax):
        x_scale, h_scale = _scale(x_amax, E4M3_MAX), _scale(h_amax, E4M3_MAX)
        x8, x8t = _cast_transpose(x, x_scale, torch.float8_e4m3fn, x_amax if update_amax else None, True)
        (wg8, wg8t, g_scale), (wu8, wu8t, u_scale), (wd8, wd8t, d_scale) = map(_cast_weight, (wg, wu, wd))
        x_inv, bf16 = x_scale.reciprocal(), torch.bfloat16
        g = torch._scaled_mm(x8, wg8.t(), x_inv, g_scale.reciprocal(), out_dtype=bf16)
        u = torch._scaled_mm(x8, wu8.t(), x_inv, u_scale.reciprocal(), out_dtype=bf16)
        h8, h8t = _swiglu_cast_transpose(g, u, h_scale, h_amax if update_amax else None)
        y = torch._scaled_mm(h8, wd8.t(), h_scale.reciprocal(), d_scale.reciprocal(), out_dtype=bf16)
        ctx.save_for_backward(x8t, g, u, h8t, wg8t, wu8t, wd8t, x_scale, h_scale, g_scale, u_scale, d_scale)
        ctx.g_amax = dy_amax, dg_amax, du_amax  # not saved: see _Fp8Matmul
        ctx.dtypes = x.dtype, wg.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x8t, g, u, h8t, wg8t, wu8t, wd8t, x_scale, h_scale, g_scale, u_scale, d_scale = ctx.saved_tensors
        (dy_amax, dg_amax, du_amax), (x_dtype, w_dtype) = ctx.g_amax, ctx.dtypes
        dy_scale, dg_scale, du_scale = (_scale(a, E5M2_MAX) for a in (dy_amax, dg_amax, du_amax))
        dy8, dy8t = _cast_transpose(dy, dy_scale, torch.float8_e5m2, dy_amax)
        dy_inv, dg_inv, du_inv = dy_scale.reciprocal(), dg_scale.reciprocal(), du_scale.reciprocal()
        dh = torch._scaled_mm(dy8, wd8t.t(), dy_inv, d_scale.reciprocal(), out_dtype=torch.bfloat16)
        dwd = torch._scaled_mm(dy8t, h8t.t(), dy_inv, h_scale.reciprocal(), out_dtype=w_dtype)
        dg8, dg8t, du8, du8t = _swiglu_backward_cast_transpose(dh, g, u, dg_scale, du_scale, dg_amax, du_amax)
        dx = torch._scaled_mm(dg8, wg8t.t(), dg_inv, g_scale.reciprocal(), out_dtype=x_dtype)
        dx = dx + torch._scaled_mm(du8, wu8t.t(), du_inv, u_scale.reciprocal(), out_dtype=x_dtype)
        x_inv = x_scale.reciprocal()
        dwg = torch._scaled_mm(dg8t, x8t.t(), dg_inv, x_inv, out_dtype=w_dtype)
        dwu = torch._scaled_mm(du8t, x8t.t(), du_inv, x_inv, out_dtype=w_dtype)
        return dx, dwg, dwu, dwd, None, None, None, None, None, None


def fusable_swiglu(gate: nn.Module, up: nn.Module, down: nn.Module) -> bool:
    """Whether `swiglu_mlp` can run this MLP: native FP8 linears without biases, not tensor-parallel."""
    return all(
        isinstance(m, Fp8Linear) and m.bias is None and not isinstance(m.weight, DTensor)
        for m in (gate, up, down)
    )


def swiglu_mlp(x: torch.Tensor, gate: Fp8Linear, up: Fp8Linear, down: Fp8Linear) -> torch.Tensor:
    """down(silu(gate(x)) * up(x)) through `_Fp8SwiGLU`, with the linears' amax buffers (up's x_amax, the
    same as gate's, stays unused)."""
    flat = x.reshape(-1, x.shape[-1])
    training = down.training and torch.is_grad_enabled()
    amax = gate.x_amax, down.x_amax, down.g_amax, gate.g_amax, up.g_amax
    y = _Fp8SwiGLU.apply(flat, gate.weight, up.weight, down.weight, *amax, training)
    return y.view(*x.shape[:-1], -1)


class Fp8Linear(nn.Linear):
    """nn.Linear (same parameters and names) computing in FP8 with delayed scaling (`_Fp8Matmul`); the amax
    buffers start at the formats' maxima, so the first step casts with scale 1, as Transformer Engine. A model
    built on the meta device calls `reset_amax` once materialized (`to_empty` leaves buffers unset)."""

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Fp8Linear:
        new = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        new.weight, new.bias = linear.weight, linear.bias
        device = linear.weight.device
        new.register_buffer("x_amax", torch.tensor(E4M3_MAX, device=device), persistent=False)
        new.register_buffer("g_amax", torch.tensor(E5M2_MAX, device=device), persistent=False)
        return new

    @torch.no_grad()
    def reset_amax(self) -> None:
        self.x_amax.fill_(E4M3_MAX)
        self.g_amax.fill_(E5M2_MAX)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.weight, DTensor):
            return self._forward_tensor_parallel(x)
        return self._matmul(x, self.weight, self.bias, self.x_amax, self.g_amax)

    def _matmul(self, x, w, b, x_amax, g_amax):
        flat = x.reshape(-1, x.shape[-1])
        # the amax follows training forwards only (not evaluation, nor other no-grad forwards)
        training = self.training and torch.is_grad_enabled()
        y = _Fp8Matmul.apply(flat, w, b, x_amax, g_amax, training)
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
        amax = [a.to_local() if isinstance(a, DTensor) else a for a in (self.x_amax, self.g_amax)]
        y = self._matmul(x.to_local(grad_placements=grad), w.to_local(), b, *amax)
        out = [Partial()] if row_parallel else [Shard(y.ndim - 1)]
        return DTensor.from_local(y, w.device_mesh, out, run_check=False)


def reset_fp8_state(model: nn.Module) -> None:
    """After a meta-device model is materialized (`to_empty`): the native FP8 linears' amax buffers."""
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            module.reset_amax()


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
    amax history 4, most recent: AMD's and NVIDIA's recipe) or torchao's float8 training (dynamic
    `recipe` scaling; with FSDP2, weights are all-gathered in FP8)."""
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
        return Fp8(
            "native",
            f"native FP8 (delayed scaling, e4m3 x e4m3, e5m2 gradients, casts in {casts}), "
            f"{swapped} linear layers",
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
        after_optimizer_step=after_step,
    )
