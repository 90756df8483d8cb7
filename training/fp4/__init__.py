"""4-bit matmuls for the Llama transformer blocks, the MLPerf v6.0 submissions' recipes, applied by one
function beside FP8's:

    fp4 = apply_fp4(model, Fp4Settings(recipe=Fp4Recipe("mxfp4", mxfp4_hadamard=True), healing_iter=340))

It swaps the blocks' linear layers for `Fp4Linear`s (native FP8 linears that compute in MXFP4 or NVFP4 until
healed: `linear`) and returns an `Fp4`, the `training.fp8.Fp8` record the step already takes, with what
the run needs besides: `heal()` (FP4 to FP8 delayed scaling, HEALING_ITER / HEALING_PRECISION=FP8_DS),
`fp8_for_warmup()` (WARMUP_RECIPE=fp8_hybrid) and `linear_precision` (what the log discloses as
`lowest_numerical_precision_in_linear`). The formats are in `formats`, the GEMMs in `gemm` (emulated
everywhere, PyTorch's block-scaled FP4 GEMM on sm100). Models import nothing from here.

The recipes, as published (MLPerf Training v6.0 results, Llama 2 70B LoRA and Llama 3.1 8B):
- AMD (Primus on MI350X / MI355X): FP4=True FP4_RECIPE=mxfp4 with NVTE_MXFP4_USE_HADAMARD=1 (the config
  scripts; Primus passes them to ROCm Transformer Engine's `MXFP4BlockScaling`); LoRA heals at
  HEALING_ITER=340 with HEALING_PRECISION=FP8_DS; the 8B trains MXFP4 throughout after an FP8 synthetic
  warm-up (WARMUP_RECIPE=fp8_hybrid, its `conf/llama3.1_8B-pretrain-fp4.yaml`: fp4 true, fp4_recipe mxfp4).
- NVIDIA (NeMo 26.04 on B200 / B300 / GB300, `config_common_fp4.sh`): FP4=True FP8=False FP4_RECIPE=nvfp4,
  NVTE_NVFP4_DISABLE_RHT=1 and NVTE_NVFP4_DISABLE_2D_QUANTIZATION=1 (stochastic rounding stays on: its
  disabling line is commented out), HEALING_PRECISION=FP8_DS, LoRA HEALING_ITER=350. Its healing callback
  (`callback_nvfp4.py`, `NVFP4Callback.on_train_step_end`) swaps the recipe for Transformer Engine's
  `DelayedScaling` (the FP8 amax settings of the run) once `train_state.step + 1 == healing_iter`; here
  the first HEALING_ITER optimizer steps run in 4 bits, the rest in FP8.
At the switch the FP8 linears' scales are measured on the next step's batch (`training.fp8.calibrate`),
as at the start of any native FP8 run here.
"""

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
from training.fp8 import Fp8, Fp8Settings, _swap_linears, amax_description, casts

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
        heal += f" after {settings.healing_iter} steps"
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
