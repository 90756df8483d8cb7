"""FP8 matmuls for the transformer blocks of either benchmark (BERT and Llama), chosen once at start:
Transformer Engine where the image has it, else torchao's float8 training."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

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


E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def _cast(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, fmax: float) -> torch.Tensor:
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype)


def _scale(amax: torch.Tensor, fmax: float) -> torch.Tensor:
    return fmax / amax.float().clamp(min=1e-12)


def _amax(t: torch.Tensor, by_rows: bool = False) -> torch.Tensor:
    """max |t|. `by_rows`: row maxima first, a row reduction the compiler fuses into the kernel producing t
    row by row (LayerNorm, GELU) instead of a separate pass over t. Not for the gradients: fused into their
    kernels, which also write the transposed copies, it cost BERT's step 17% of its samples/s (H100)."""
    t = t.detach().abs()
    return (t.amax(dim=-1) if by_rows else t).amax().float()


class _Fp8Matmul(torch.autograd.Function):
    """x @ w.T with both operands in e4m3 and the gradients in e5m2 (the HYBRID format). x is cast with the
    scale of the previous step's amax (delayed scaling: no pass over x before the cast, so a compiled model
    fuses the cast into the kernel that produces x), w with its current amax (a small tensor), the incoming
    gradient with the previous backward's amax, which the backward then updates in place. The transposed FP8
    copies the weight-gradient GEMM needs (the FP8 GEMM takes row-major x column-major operands) are made
    here; the compiler fuses them with the casts where it can."""

    @staticmethod
    def forward(ctx, x, w, b, x_amax, g_amax):
        x_scale, w_scale = _scale(x_amax, E4M3_MAX), _scale(_amax(w), E4M3_MAX)
        x8 = _cast(x, x_scale, torch.float8_e4m3fn, E4M3_MAX)
        w8 = _cast(w, w_scale, torch.float8_e4m3fn, E4M3_MAX)
        bias = None if b is None else b.to(torch.bfloat16)  # added in the GEMM's epilogue
        out = torch.bfloat16
        y = torch._scaled_mm(x8, w8.t(), x_scale.reciprocal(), w_scale.reciprocal(), bias, out_dtype=out)
        ctx.save_for_backward(x8, w8, x_scale, w_scale, g_amax)
        ctx.dtypes = x.dtype, w.dtype, None if b is None else b.dtype
        return y

    @staticmethod
    def backward(ctx, g):
        x8, w8, x_scale, w_scale, g_amax = ctx.saved_tensors
        g_scale = _scale(g_amax, E5M2_MAX)
        g_amax.copy_(_amax(g))
        g8 = _cast(g, g_scale, torch.float8_e5m2, E5M2_MAX)
        g_inv = g_scale.reciprocal()
        dx = torch._scaled_mm(
            g8, w8.t().contiguous().t(), g_inv, w_scale.reciprocal(), out_dtype=ctx.dtypes[0]
        )
        dw = torch._scaled_mm(
            g8.t().contiguous(), x8.t().contiguous().t(), g_inv, x_scale.reciprocal(), out_dtype=ctx.dtypes[1]
        )
        db = None if ctx.dtypes[2] is None else g.sum(0, dtype=torch.float32).to(ctx.dtypes[2])
        return dx, dw, db, None, None


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
        flat = x.reshape(-1, x.shape[-1])
        y = _Fp8Matmul.apply(flat, self.weight, self.bias, self.x_amax, self.g_amax)
        if self.training:
            self.x_amax.copy_(_amax(flat, by_rows=True))
        return y.view(*x.shape[:-1], -1)


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
        return Fp8(
            "native", f"native FP8 (delayed scaling, e4m3 x e4m3, e5m2 gradients), {swapped} linear layers"
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
