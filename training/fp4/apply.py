"""The FP4 package's entry and what it applies (`training.fp4` hands these names on)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from torch import nn

from training.fp4.choices import (
    EMULATED,
    HEALING_PRECISIONS,
    MXFP4,
    NVFP4,
    RECIPES,
    WARMUP_RECIPES,
    describe_kernel,
)
from training.fp4.linear import Fp4Linear, Fp4Recipe
from training.fp8 import Fp8, Fp8Settings, amax_description, casts
from training.fp8.apply import _swap_linears

# the settings' values, kept in `choices` for the config code
__all__ = ["HEALING_PRECISIONS", "MXFP4", "NVFP4", "RECIPES", "WARMUP_RECIPES"]


@dataclass(frozen=True)
class Fp4Settings:
    recipe: Fp4Recipe = Fp4Recipe()
    # the optimizer steps that run in 4 bits, counted from the first; then FP8 delayed scaling (None:
    # 4 bits for the whole run)
    healing_iter: int | None = None
    warmup_in_fp8: bool = False  # WARMUP_RECIPE=fp8_hybrid
    kernel: str = "auto"  # auto (`gemm.choose_kernel`) | emulated | scaled_mm


@dataclass
class Fp4(Fp8):
    """`Fp8`'s record with the 4-bit linears: `heal()` moves them to FP8 for good, `fp8_for_warmup()`
    runs them in FP8 for a while. `linear_precision`: the lowest precision the blocks' GEMMs run in, the
    recipe's name ("mxfp4", "nvfp4") when any 4-bit GEMM runs (emulated ones too: they compute the
    recipe's values), else "fp8"."""

    recipe: Fp4Recipe = field(default_factory=Fp4Recipe)
    kernel: str = EMULATED
    healing_iter: int | None = None
    warmup_in_fp8: bool = False
    linears: list = field(default_factory=list, repr=False)
    healed: bool = False

    @property
    def linear_precision(self) -> str:
        runs_fp4 = bool(self.linears) and self.healing_iter != 0
        return self.recipe.format if runs_fp4 else "fp8"

    def heals_before(self, index: int) -> bool:
        """Whether optimizer step `index` (from 0) is the first to run in FP8."""
        return not self.healed and self.healing_iter is not None and index >= self.healing_iter

    def heal(self) -> None:
        """Every 4-bit linear to FP8 delayed scaling from now on (its scales measured at the next step)."""
        for linear in self.linears:
            linear.use_fp8(True)
        self.healed = True

    @contextlib.contextmanager
    def fp8_for_warmup(self):
        """Inside: the linears compute in FP8 when WARMUP_RECIPE=fp8_hybrid asks (else as they are)."""
        switch = self.warmup_in_fp8 and not self.healed
        for linear in self.linears if switch else ():
            linear.use_fp8(True)
        try:
            yield
        finally:
            for linear in self.linears if switch else ():
                linear.use_fp8(False)


def choose_kernel(requested: str, device: torch.device) -> str:
    from training.fp4 import gemm

    if requested == "auto":
        return gemm.choose_kernel(device)
    if requested == gemm.SCALED_MM and gemm.choose_kernel(device) != gemm.SCALED_MM:
        raise ValueError(f"the FP4 GEMM kernel scaled_mm needs an sm100 GPU (B200, B300); {device} has none")
    return requested


def apply_fp4(model: nn.Module, settings: Fp4Settings, fp8: Fp8Settings, device: torch.device) -> Fp4:
    """Swap the blocks' linear layers (those native FP8 would take) for `Fp4Linear`s computing in
    `settings.recipe` and healing into native FP8 delayed scaling with `fp8`'s amax settings; the MLPs are
    not fused and the weights not all-gathered in FP8 (the 4-bit GEMMs quantize each step's weight)."""
    kernel = choose_kernel(settings.kernel, device)
    triton, _ = casts.choose_casts(fp8.casts)  # the FP8 casts after healing, as native FP8's
    history = fp8.amax_history if fp8.amax_algo == "max" and fp8.amax_history > 1 else 0
    generator = None
    if settings.recipe.format == NVFP4 and settings.recipe.nvfp4_stochastic:
        # its own generator, seeded from the run's seed: dropout's and the data's draws stay as without it
        generator = torch.Generator(device=device).manual_seed(torch.initial_seed())
    swapped = _swap_linears(
        model, lambda child: Fp4Linear.from_linear(child, settings.recipe, kernel, generator, history, triton)
    )
    linears = [m for m in model.modules() if isinstance(m, Fp4Linear)]
    if settings.healing_iter == 0:
        for linear in linears:
            linear.use_fp8(True)
    heal = "no healing (4 bits throughout)"
    if settings.healing_iter is not None:
        heal = f"heals to native FP8 delayed scaling ({amax_description(fp8)})"
        heal += f" after {settings.healing_iter} step{'' if settings.healing_iter == 1 else 's'}"
    gemms = f"{settings.recipe.describe()}, GEMMs {describe_kernel(kernel)}"
    parts = [gemms, f"{swapped} linear layers", heal]
    if settings.warmup_in_fp8:
        parts.append("synthetic warm-up in FP8")
    record = Fp4(
        "native",
        ", ".join(parts),
        recipe=settings.recipe,
        kernel=kernel,
        healing_iter=settings.healing_iter,
        warmup_in_fp8=settings.warmup_in_fp8,
        linears=linears,
    )
    record.healed = settings.healing_iter == 0
    return record
