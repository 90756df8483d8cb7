"""The 4-bit linear layer: a native FP8 linear (`training.fp8.native.Fp8Linear`, same parameters, buffers and
names) whose three GEMMs run in MXFP4 or NVFP4 until the run heals it (`in_fp4 = False`), then in FP8
delayed scaling as any native FP8 linear.

Which GEMM takes which operands, as each vendor's recipe has it:
- forward y = x W^T: x along its features, W along its input features (NVFP4: W in 16 x 16 tiles unless
  NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1);
- input gradient dx = dy W: dy along the output features (NVFP4: stochastic rounding), W along the output
  features (its columnwise copy, quantized from the high-precision weight, not requantized);
- weight gradient dW = dy^T x: both along the tokens (NVFP4: the random Hadamard transform on both, dy with
  stochastic rounding).
All three in 4 bits in both recipes: NVIDIA's `NVFP4BlockScaling` quantizes the forward input and weight and
the backward gradient (`fp4_quant_fwd_inp`, `fp4_quant_fwd_weight`, `fp4_quant_bwd_grad`, Transformer
Engine's recipe/__init__.py), and AMD's `MXFP4BlockScaling` (ROCm Transformer Engine) runs the forward and
backward GEMMs as AITER's A4W4 MXFP4 GEMM, its 16-point Hadamard rotation (NVTE_MXFP4_USE_HADAMARD=1) on
every operand. Each copy is quantized from the high-precision tensor (as both TEs do for a tensor and its
transpose). The output layer and anything outside the transformer blocks stays in bf16 (the FP8 swap's
rule, `training.fp8.apply._fp8_linear`), as NeMo's and Primus' TE layers cover the blocks only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor

from training.fp4.choices import MXFP4
from training.fp8 import native


def _gemm():
    """`training.fp4.gemm`, imported at a 4-bit GEMM's first call (it imports torchao's mx_formats)."""
    from training.fp4 import gemm

    return gemm


@dataclass(frozen=True)
class Fp4Recipe:
    """The 4-bit format and its switches, named by the vendors' variables."""

    format: str = MXFP4  # FP4_RECIPE
    mxfp4_hadamard: bool = False  # NVTE_MXFP4_USE_HADAMARD=1
    nvfp4_rht: bool = True  # not NVTE_NVFP4_DISABLE_RHT
    nvfp4_2d: bool = True  # not NVTE_NVFP4_DISABLE_2D_QUANTIZATION
    nvfp4_stochastic: bool = True  # not NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING

    def describe(self) -> str:
        if self.format == MXFP4:
            rotation = "16-point Hadamard rotation" if self.mxfp4_hadamard else "no Hadamard rotation"
            return f"MXFP4 (E2M1, 32-blocks, E8M0 scales, {rotation})"
        on = {
            "2D 16x16 weight blocks": self.nvfp4_2d,
            "random Hadamard transform": self.nvfp4_rht,
            "stochastic rounding of gradients": self.nvfp4_stochastic,
        }
        switches = ", ".join(f"{name} {'on' if value else 'off'}" for name, value in on.items())
        return f"NVFP4 (E2M1, 16-blocks, E4M3 scales, FP32 tensor scale; {switches})"

    def forward_gemm(self, x, w, kernel, generator=None):
        if self.format == MXFP4:
            return _gemm().mxfp4_gemm(x, w, self.mxfp4_hadamard, kernel)
        return _gemm().nvfp4_gemm(x, w, kernel, {}, {"two_d": self.nvfp4_2d})

    def input_grad_gemm(self, g, w, kernel, generator=None):
        """dy @ W: the reduction along W's output features (W.t() quantized along them)."""
        if self.format == MXFP4:
            return _gemm().mxfp4_gemm(g, w.t(), self.mxfp4_hadamard, kernel)
        grad = {"stochastic": self.nvfp4_stochastic}
        return _gemm().nvfp4_gemm(g, w.t(), kernel, grad, {"two_d": self.nvfp4_2d}, generator)

    def weight_grad_gemm(self, g, x, kernel, generator=None):
        """dy^T @ x: the reduction along the tokens."""
        if self.format == MXFP4:
            return _gemm().mxfp4_gemm(g.t(), x.t(), self.mxfp4_hadamard, kernel)
        grad = {"stochastic": self.nvfp4_stochastic, "rht": self.nvfp4_rht}
        return _gemm().nvfp4_gemm(g.t(), x.t(), kernel, grad, {"rht": self.nvfp4_rht}, generator)


class _Fp4Matmul(torch.autograd.Function):
    """x @ w.T with the recipe's three 4-bit GEMMs; the output in bf16 (as the FP8 and FP4 GEMMs write it),
    the gradients in their inputs' dtypes. Saves x and w in their own precision: each backward GEMM
    quantizes its operands from them, as Transformer Engine quantizes a tensor's columnwise copy from the
    high-precision tensor."""

    @staticmethod
    def forward(ctx, x, w, b, recipe: Fp4Recipe, kernel: str, generator):
        with torch.autocast(x.device.type, enabled=False):
            y = recipe.forward_gemm(x, w, kernel)
            if b is not None:
                y = y + b.float()
        ctx.save_for_backward(x, w)
        ctx.recipe, ctx.kernel, ctx.generator, ctx.has_bias = recipe, kernel, generator, b is not None
        return y.to(torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        recipe, kernel, gen = ctx.recipe, ctx.kernel, ctx.generator
        dx = dw = db = None
        with torch.autocast(g.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                dx = recipe.input_grad_gemm(g, w, kernel, gen).to(x.dtype)
            if ctx.needs_input_grad[1]:
                dw = recipe.weight_grad_gemm(g, x, kernel, gen).to(w.dtype)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                db = g.float().sum(0)
        return dx, dw, db, None, None, None


class Fp4Linear(native.Fp8Linear):
    """A native FP8 linear whose GEMMs run in 4 bits while `in_fp4` (`_Fp4Matmul`), in FP8 delayed scaling
    after (`heal`). Its FP8 scales are measured at the first FP8 step (`training.fp8.calibrate`), so in
    4 bits it counts as calibrated. `generator`: the random numbers of NVFP4's stochastic rounding."""

    in_fp4 = True

    @classmethod
    def from_linear(
        cls, linear, recipe: Fp4Recipe, kernel: str, generator=None, history: int = 0, triton: bool = False
    ):
        new = super().from_linear(linear, triton=triton, history=history)
        new.recipe, new.kernel, new.generator = recipe, kernel, generator
        new.calibrated = True
        return new

    def reset_amax(self) -> None:
        super().reset_amax()
        self.calibrated = self.in_fp4  # (nothing to measure while the GEMMs run in 4 bits)

    def use_fp8(self, fp8: bool) -> None:
        """Run the GEMMs in FP8 delayed scaling (True; scales measured at the next training step) or in 4
        bits (False)."""
        self.in_fp4 = not fp8
        self.reset_amax()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.in_fp4 or native._CALIBRATING:
            return super().forward(x)
        if isinstance(self.weight, DTensor):
            raise NotImplementedError(
                "FP4 linears under tensor parallelism are not implemented: FP4=True needs TP=1"
            )
        return self._fp4_forward(x)

    @torch.compiler.disable
    def _fp4_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The 4-bit GEMMs, left out of a compiled block (COMPILE=1): torchao's casts and the stochastic
        rounding's generator run eagerly, as on the CPU where they are tested."""
        flat = x.reshape(-1, x.shape[-1])
        y = _Fp4Matmul.apply(flat, self.weight, self.bias, self.recipe, self.kernel, self.generator)
        return y.view(*x.shape[:-1], -1)
